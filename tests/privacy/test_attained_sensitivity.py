"""Neighbours that *attain* the stated sensitivities (issue 19: tests check behaviour).

``assert_sensitivity`` only shows that no neighbour moves a release by more
than its stated sensitivity; a stated sensitivity lowered by a factor (a
mutation, or a wrong derivation) survives unless some neighbour moves the
release by (nearly) the full stated amount. Here, for every release of every
estimator (grouped by phase, mechanism, shape and stated sensitivity), a set
of designed neighbouring pairs ``(D, D')`` -- both with an adversarial user
``3``, e.g. rows along orthogonal directions, targets or labels flipped,
disjoint items / labels beyond the per-user cap, a label swap among three
classes -- is run with noise off and ``D'`` replaying ``D``'s transcript; the
largest ``distance / sensitivity`` over the pairs must be ``>= 0.99`` (so a
sensitivity understated by 1%, let alone by sqrt(2), fails the ``<= 1``
check), except for the groups listed in ``NOT_ATTAINED`` with the fraction
reached and the reason.
"""

import warnings

import numpy as np
import pytest

from skdpp import (
    AdaptiveWeightMF,
    JLMarginClassifier,
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
)
from tests.privacy.harness import (
    assert_releases_within_sensitivity,
    record_releases,
    replacement_catalogue,
)

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

USER = 3
ATTAIN = 0.99


def _swap(data, nX, ny):
    X, y, g = data
    mine = g == USER
    return (np.concatenate([X[~mine], nX]), np.concatenate([y[~mine], ny]),
            np.concatenate([g[~mine], np.full(len(ny), USER)]))


def _regression(n_users=30, rows=8, d=4, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(g.shape[0], d))
    y = X @ rng.normal(size=d) + (g % 3) + 0.1 * rng.normal(size=g.shape[0])
    return X, y, g


def regression_pairs(s=1e3, T=1e3, n=8):
    """Pairs of neighbours whose user 3 saturates every clip, in opposite ways."""
    data = _regression()
    d = data[0].shape[1]
    e = np.eye(d)
    alt = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)  # rows of mean 0 (survive centring)

    def rows(v, sign=1.0):
        return sign * alt[:, None] * v[None, :]

    def const(v):
        return np.tile(v, (n, 1))

    catalogue = {f"original_vs_{name}": (data, (X2, y2, g2)) for name, X2, y2, g2 in
                 replacement_catalogue(*data, USER)
                 if name in ("targets_+1e305", "targets_-1e305", "rows_1e-300", "rows_1e308")}
    extreme = {name: (X2, y2, g2) for name, X2, y2, g2 in replacement_catalogue(*data, USER)}
    catalogue["targets_+1e305_vs_-1e305"] = (extreme["targets_+1e305"], extreme["targets_-1e305"])
    catalogue["rows_1e-300_vs_targets_-1e305"] = (extreme["rows_1e-300"],
                                                  extreme["targets_-1e305"])
    return {
        **catalogue,
        # orthogonal rows: PSD contributions x x^T with <A, A'> = 0 (AltMin's sqrt(2))
        "orthogonal_rows": (_swap(data, rows(s * e[0]), T * alt),
                            _swap(data, rows(s * e[1]), T * alt)),
        "orthogonal_flipped": (_swap(data, rows(s * e[0]), T * alt),
                               _swap(data, rows(s * e[1]), -T * alt)),
        "targets_flipped": (_swap(data, rows(s * e[0]), T * alt),
                            _swap(data, rows(s * e[0]), -T * alt)),
        "offset_flipped": (_swap(data, rows(s * e[0]), T * alt + T),
                           _swap(data, rows(s * e[0]), T * alt - T)),
        "zeros_vs_saturating": (_swap(data, np.zeros((n, d)), np.zeros(n)),
                                _swap(data, rows(s * e[0]), T * alt)),
        "rows_flipped": (_swap(data, const(s * e[0]), np.full(n, T)),
                         _swap(data, const(-s * e[0]), np.full(n, T))),
        "small_vs_huge": (_swap(data, const(1e-3 * e[0]), np.full(n, -T)),
                          _swap(data, const(s * e[1]), np.full(n, T))),
        # zero rows, targets far above / below both cold-start levels: the user
        # prefers the larger level in D and the smaller one in D' (the head vote)
        "levels_vote": (_swap(data, np.zeros((n, d)), np.full(n, 1e6)),
                        _swap(data, np.zeros((n, d)), np.full(n, -1e6))),
    }


def _classification(n_users=400, rows=5, d=4, n_classes=5, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(g.shape[0], d))
    y = np.argmax(X @ rng.normal(size=(d, n_classes)) + rng.normal(size=(g.shape[0],
                                                                          n_classes)), axis=1)
    return X, y, g


def classification_pairs(n=6):
    data = _classification()
    d = data[0].shape[1]
    e = np.eye(d)
    rows = np.tile(3.0 * e[0], (n, 1))
    other = np.tile(3.0 * e[1], (n, 1))
    half = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    return {
        # a label swap among >= 3 classes: the users' positive fractions e_0 vs e_1
        "label_swap": (_swap(data, rows, np.zeros(n, int)), _swap(data, rows, np.ones(n, int))),
        "label_swap_orthogonal": (_swap(data, rows, np.zeros(n, int)),
                                  _swap(data, other, np.ones(n, int))),
        "orthogonal_rows": (_swap(data, rows, np.zeros(n, int)),
                            _swap(data, other, np.zeros(n, int))),
        "rows_flipped": (_swap(data, half * rows, np.resize([0, 1], n)),
                         _swap(data, half * rows, np.resize([1, 0], n))),
        # disjoint labels, the replacing user holding more than the cap (2)
        "disjoint_labels_beyond_cap": (_swap(data, rows, np.resize([0, 1], n)),
                                       _swap(data, rows, np.resize([2, 3, 4], n))),
        "zeros_vs_rows": (_swap(data, np.zeros((n, d)), np.zeros(n, int)),
                          _swap(data, rows, np.ones(n, int))),
    }


def _ratings(n_users=2000, rows=6, n_items=10, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    items = rng.integers(0, n_items, g.shape[0])
    y = np.clip(3 + 0.5 * (items % 3) + rng.normal(size=g.shape[0]), 1, 5)
    return items[:, None], y, g


def mf_pairs():
    data = _ratings()

    def user(items, ratings):
        items = np.asarray(items)
        return items[:, None], np.asarray(ratings, dtype=float)

    lo, hi = -1e6, 1e6
    return {
        # disjoint items, the replacing user rating more than the cap (3)
        "disjoint_items_beyond_cap": (_swap(data, *user([0, 1, 2], [hi] * 3)),
                                      _swap(data, *user([3, 4, 5, 6, 7], [lo] * 5))),
        "disjoint_items": (_swap(data, *user([0, 1, 2], [hi] * 3)),
                           _swap(data, *user([3, 4, 5], [lo] * 3))),
        "ratings_flipped": (_swap(data, *user([0, 1, 2], [hi] * 3)),
                            _swap(data, *user([0, 1, 2], [lo] * 3))),
        "one_item_flipped": (_swap(data, *user([0], [hi])), _swap(data, *user([0], [lo]))),
        "one_vs_many": (_swap(data, *user([0], [hi])),
                        _swap(data, *user(np.arange(10), [lo] * 10))),
    }


CASES = {
    "fedrep-fixed": (PrivateFedRepRegressor, regression_pairs, {
        "clip_norm": 1.0, "head_clip_norm": 1.0, "init_clip_norm": 5.0}),
    "fedrep-default": (PrivateFedRepRegressor, regression_pairs, {}),
    "altmin-fixed": (PrivAltMinRegressor, regression_pairs, {
        "init": "private_pairwise", "fit_intercept": False, "clip_norm": 5.0,
        "label_clip": 1.0, "head_clip_norm": 1.0, "init_clip_norm": 5.0}),
    "altmin-default": (PrivAltMinRegressor, regression_pairs, {}),
    # a head that passes its test: the cold start's vote can flip (see _HEAD_ZERO)
    "fedrep-large-epsilon": (PrivateFedRepRegressor, regression_pairs, {"epsilon": 1e4}),
    "ppsgd-default": (PPSGDRegressor, regression_pairs, {"n_rounds": 10}),
    "ppsgd-fixed": (PPSGDRegressor, regression_pairs, {
        "n_rounds": 10, "fit_intercept": False, "clip_norm": 1.0, "batch_size": None}),
    "mf-capped": (AdaptiveWeightMF, mf_pairs, {
        "n_components": 2, "n_iter": 1, "count_cap": 3, "items": np.arange(10)}),
    "mf-private-catalogue": (AdaptiveWeightMF, mf_pairs, {
        "n_components": 2, "n_iter": 1, "count_cap": 3}),
    "jl-public": (JLMarginClassifier, classification_pairs, {
        "n_candidates": 16, "epsilon": 2.0, "classes": [0, 1, 2, 3, 4]}),
    "jl-private-labels": (JLMarginClassifier, classification_pairs, {
        "n_candidates": 16, "epsilon": 2.0}),
}

# Groups no designed neighbour attains, with the fraction reached (checked as
# a lower bound, so the neighbours keep working) and why. A mutation lowering
# one of these sensitivities by less than 1 / fraction survives this file.
_PSD = ("every user's contribution is PSD (or a product of a user's rows and the head "
        "fitted on them), so ||A - A'|| <= sqrt(2) * bound: the stated 2 * bound looks "
        "conservative by sqrt(2); a mutation lowering it by sqrt(2) survives")
_BEST = ("the best neighbour found (the one-user catalogue against the original data); "
         "no pair built here attains the bound")
_HEAD_ZERO = ("the cold-start vote (one count of the users preferring the head): at "
              "epsilon 1 on 30 users the head fails its chi-square test and is 0, so both "
              "cold-start levels coincide and no user's preference can change; attained "
              "in case fedrep-large-epsilon")
NOT_ATTAINED = {
    # (case, phase, kind, j) -> (fraction the pairs reach, checked as a lower bound; reason)
    ("fedrep-large-epsilon", "init", "gaussian", 0): (0.85, _BEST),
    ("fedrep-large-epsilon", "iterations", "gaussian", 0): (0.95, _BEST),
    ("fedrep-fixed", "init", "gaussian", 0): (0.75, _BEST),
    ("fedrep-default", "init", "gaussian", 0): (0.85, _BEST),
    ("altmin-default", "init", "gaussian", 0): (0.85, _BEST),
    ("altmin-fixed", "init", "gaussian", 0): (0.70, "private_pairwise: " + _PSD),
    ("fedrep-default", "iterations", "gaussian", 0): (0.95, _BEST + " (auto clip bounds are "
                                                     "replayed from D)"),
    ("altmin-default", "cold_start", "gaussian", 0): (0.90, _BEST),
    ("fedrep-default", "cold_start", "gaussian", 0): (0.90, _BEST + " (0.9987 with numpy 2, "
                                                      "0.944 with numpy 1.24: the heads of "
                                                      "the 1e305-target users round "
                                                      "differently)"),
    ("mf-capped", "items", "gaussian", 0): (0.70, _PSD),
    ("mf-private-catalogue", "items", "gaussian", 0): (0.70, _PSD),
    ("jl-public", "subspace", "gaussian", 0): (0.85, "sqrt(2P) needs the user to contribute "
                                               "a unit vector to every one of the P "
                                               "problems in D and an orthogonal one in D'"),
    ("jl-private-labels", "subspace", "gaussian", 0): (0.85, "as jl-public"),
    ("jl-public", None, "exponential", 0): (0.19, "a candidate's score moves by the full "
                                            "1/n only if the user's term goes 0 -> 1"),
    ("jl-private-labels", None, "exponential", 0): (0.30, "as jl-public"),
}
# by shape where a phase holds two releases of which one is attained: AltMin's
# moment vector b (2 zeta eta) next to its Gram (sqrt(2) eta^2, attained)
SHAPED = {("altmin-fixed", "iterations", (8,)): (0.70, _PSD),
          ("altmin-default", "iterations", (8,)): (0.70, _PSD),
          ("fedrep-fixed", "clip", (1,)): (0.0, _HEAD_ZERO),
          ("fedrep-default", "clip", (1,)): (0.0, _HEAD_ZERO),
          ("altmin-default", "clip", (1,)): (0.0, _HEAD_ZERO)}


def _group_keys(releases):
    """(phase, kind, shape, j): j numbers the distinct stated sensitivities of the triple."""
    seen, keys = {}, []
    for r in releases:
        triple = (r.phase, r.kind, np.shape(r.value))
        values = seen.setdefault(triple, [])
        match = [j for j, v in enumerate(values) if np.isclose(v, r.sensitivity, rtol=1e-12)]
        if not match:
            values.append(r.sensitivity)
            match = [len(values) - 1]
        keys.append(triple + (match[0],))
    return keys


def attained(cls, pairs, params):
    """Largest distance / sensitivity of every release group over the pairs."""
    best = {}
    for pname, (D, D2) in pairs.items():
        def fit(data):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cls(random_state=0, **params).fit(data[0], data[1], groups=data[2])

        first = record_releases(lambda: fit(D))
        second = record_releases(lambda: fit(D2), replay=first)
        ratios = assert_releases_within_sensitivity(first, second)
        for key, ratio in zip(_group_keys(first), ratios):
            if ratio > best.get(key, (-1.0, None))[0]:
                best[key] = (ratio, pname)
    return best


_CACHE = {}


def _attained(case):
    if case not in _CACHE:
        cls, pairs, params = CASES[case]
        _CACHE[case] = attained(cls, pairs(), params)
    return _CACHE[case]


@pytest.mark.parametrize("case", list(CASES))
def test_every_release_attains_its_stated_sensitivity(case):
    best = _attained(case)
    short = []
    for key, (ratio, pname) in best.items():
        need = SHAPED.get((case, key[0], key[2]),
                          NOT_ATTAINED.get((case, key[0], key[1], key[3]), (ATTAIN, None)))[0]
        if ratio < need:
            short.append(f"{key}: {ratio:.4f} (best pair {pname}) < {need}")
    assert not short, "releases whose stated sensitivity no neighbour attains:\n" + \
        "\n".join(short)


def test_understated_sensitivity_is_caught(monkeypatch):
    # Broken: every Gaussian release states its sensitivity / sqrt(2).
    from skdpp.privacy import mechanisms

    real = mechanisms.gaussian_mechanism

    def understated(value, *, sensitivity, noise_multiplier, rng, symmetric=False):
        return real(value, sensitivity=sensitivity / np.sqrt(2), rng=rng,
                    noise_multiplier=noise_multiplier, symmetric=symmetric)

    monkeypatch.setattr(mechanisms, "gaussian_mechanism", understated)
    cls, pairs, params = CASES["altmin-fixed"]
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        attained(cls, {"orthogonal_rows": pairs()["orthogonal_rows"]}, params)


def test_multiclass_cold_start_sqrt2_is_attained_and_its_understatement_caught(monkeypatch):
    # The cold-start release of JL with >= 3 classes: sqrt(2), attained by a
    # label swap (positive fractions e_0 -> e_1). Lowered to 1 (the mutation
    # that survived the last review), the swap exceeds it.
    cls, pairs, params = CASES["jl-public"]
    swap = {"label_swap": pairs()["label_swap"]}
    best = attained(cls, swap, params)
    cold = [r for k, (r, _) in best.items() if k[0] == "cold_start"]
    assert cold and max(cold) >= ATTAIN
    from skdpp.linear_model._algorithms import jl_margin as _jl_algorithm

    monkeypatch.setattr(_jl_algorithm, "cold_start_sensitivity", lambda n_problems: 1.0)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        attained(cls, swap, params)


def test_per_user_caps_are_attained_and_a_cap_raised_by_one_is_caught(monkeypatch):
    # Items (count_cap=3) and labels (max_classes_per_user=2): a replacing
    # user holding more than the cap, disjoint from the replaced one's,
    # attains sqrt(2 cap); counting one more per user exceeds it.
    from skdpp.decomposition._algorithms import _als_kernels as _private_als
    from skdpp.linear_model import _labels
    from skdpp.linear_model._algorithms import jl_margin as _jl_algorithm

    cls, pairs, params = CASES["mf-capped"]
    mf_pair = {"beyond": pairs()["disjoint_items_beyond_cap"]}
    counts = [r for k, (r, _) in attained(cls, mf_pair, params).items() if k[0] == "counts"]
    assert counts and max(counts) >= ATTAIN
    jcls, jpairs, jparams = CASES["jl-private-labels"]
    jl_pair = {"beyond": jpairs()["disjoint_labels_beyond_cap"]}
    labels = [r for k, (r, _) in attained(jcls, jl_pair, jparams).items() if k[0] == "labels"]
    assert labels and max(labels) >= ATTAIN

    real_count, real_labels = _private_als.count_partial, _labels.label_counts_block

    def count_one_more(block, state, broadcast):
        key, cap, n_count = broadcast
        return real_count(block, state, (key, cap + 1, n_count))

    monkeypatch.setattr(_private_als, "count_partial", count_one_more)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        attained(cls, mf_pair, params)
    monkeypatch.setattr(_jl_algorithm, "label_counts_block",
                        lambda block, state, cap: real_labels(block, state, cap + 1))
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        attained(jcls, jl_pair, jparams)


def test_releaser_gaussian_sum_attains_2C(monkeypatch):
    # Releaser.gaussian_sum states 2C for a sum of contributions clipped to C:
    # a user whose contribution goes from +C e_0 to -C e_0 attains it.
    from skdpp.privacy import BudgetPlan, Releaser

    def fit(sign):
        def run():
            plan = BudgetPlan(epsilon=1.0, delta=1e-6)
            plan.add_rest("sum")
            contributions = np.vstack([np.ones((5, 2)), [[sign * 1e6, 0.0]]])
            Releaser(plan, np.random.default_rng(0)).gaussian_sum("sum", contributions,
                                                                   clip_norm=1.5)
        return run

    first = record_releases(fit(1.0))
    ratios = assert_releases_within_sensitivity(first, record_releases(fit(-1.0),
                                                                       replay=first))
    assert ratios == [pytest.approx(1.0, rel=1e-12)]
