"""AdaptiveWeightMF's private catalogue: one user creates at most ``count_cap`` candidates.

Issue 19, defect 1. The private catalogue (``items=None``) is a partition
selection over the noisy ``"counts"``: a candidate is published iff its
noisy count exceeds ``tau = 1 + sigma Phi^-1(1 - delta_t / count_cap)``. The
threshold assumes the replaced user creates at most ``count_cap``
candidates; then its unique items are published, all together, with
probability at most ``delta_t`` (the ``ThresholdEvent`` charged). These tests
read the candidates, their exact pre-noise counts, ``sigma`` and ``tau``
from real fits and compute that probability *exactly* (no sampling), for a
user rating up to 10^6 items nobody else rated; each property is shown to
fail on a broken variant (every rated item a candidate; the per-user cap
raised by one).

How a fit is read (:func:`_catalogue`): every release before the counts is
noise-free; the counts release is recorded (pre-noise value, noise std) and
gets a huge noise ``+SHIFT`` instead of Gaussian noise, so the items then
published are exactly the candidates (anything that *can* be published);
the fit stops right after the catalogue is chosen.
"""

import math
import warnings

import numpy as np
import pytest
from scipy import special

from skdpp.decomposition._algorithms import _als_kernels as _private_als
from skdpp.decomposition._algorithms import adaptive_mf as _algorithm
from skdpp.decomposition._adaptive_mf import AdaptiveWeightMF
from skdpp.exceptions import PrivacyLeakWarning
from skdpp.privacy import Releaser, mechanisms
from tests.privacy.harness import record_releases

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

# Huge noise on the counts: every candidate clears any threshold.
SHIFT = 1e12
# Background: user u rates items (u + j) % N_POOL, j < PER_USER, so every
# background item is rated by N_BACKGROUND * PER_USER / N_POOL >= 2 users and
# each background user rates fewer than count_cap items (counts them all).
N_BACKGROUND, N_POOL, PER_USER = 24, 12, 6
# The adversarial user's unique items: ids above every background item.
UNIQUE0, ADVERSARY = 10**7, 10**6


class _Stop(Exception):
    """Raised by the patched ``select_items``: the catalogue is chosen, stop the fit."""


def _data(n_unique, *, first=UNIQUE0, seed=0):
    """Background ratings plus one user rating ``n_unique`` items nobody else rated."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(N_BACKGROUND), PER_USER)
    items = (users + np.tile(np.arange(PER_USER), N_BACKGROUND)) % N_POOL
    items = np.concatenate([items, first + np.arange(n_unique)])
    groups = np.concatenate([users, np.full(n_unique, ADVERSARY)])
    y = rng.integers(1, 6, size=items.shape[0]).astype(np.float64)
    return items[:, None], y, groups


def _estimator(**params):
    # The defaults of the issue: epsilon = 1, delta = 1e-6, count_cap = 50.
    return AdaptiveWeightMF(**{**dict(epsilon=1.0, delta=1e-6, n_components=2,
                                      random_state=0), **params})


def _catalogue(monkeypatch, X, y, groups, **params):
    """Fit up to the private catalogue; its candidates and exact threshold terms.

    Returns
    -------
    out : dict
        ``ids`` (item ids in internal-code order), ``counts`` (their exact
        pre-noise counts), ``candidate`` (bool per id: published under the
        huge noise ``SHIFT``), ``sigma`` (the noise std the counts release
        uses), ``tau`` (the selection threshold) and ``delta_t`` (the
        threshold delta the release charges).
    """
    seen = {}
    real_select = Releaser.select_partitions

    def select_partitions(self, phase, counts, *, sensitivity, max_contribution,
                          max_partitions, clip_norm=None):
        seen["delta_t"] = next(p.threshold_delta for p in self.plan.phases
                               if p.name == phase)
        seen["max_contribution"] = float(max_contribution)
        seen["max_partitions"] = int(max_partitions)
        seen["selecting"] = True
        try:
            return real_select(self, phase, counts, sensitivity=sensitivity,
                               max_contribution=max_contribution,
                               max_partitions=max_partitions, clip_norm=clip_norm)
        finally:
            seen["selecting"] = False

    def add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
        value = np.array(value, dtype=float, copy=True)
        if not seen.get("selecting"):
            return value  # earlier releases (clip searches, mean): noise off
        seen["counts"], seen["sigma"] = value.copy(), float(scale)
        return value + SHIFT

    def select_items(block, state, broadcast):
        remap, m = broadcast
        raise _Stop(np.asarray(remap) < m)

    with monkeypatch.context() as mp, warnings.catch_warnings():
        mp.setattr(Releaser, "select_partitions", select_partitions)
        mp.setattr(mechanisms, "_add_noise", add_noise)
        mp.setattr(_private_als, "select_items", select_items)
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.raises(_Stop) as stop:
            _estimator(**params).fit(X, y, groups)
    # Internal codes of items=None: the distinct item ids in increasing order.
    ids = np.unique(X[:, 0])
    assert seen["counts"].shape == ids.shape
    tau = seen["max_contribution"] + seen["sigma"] * float(
        special.ndtri(1.0 - seen["delta_t"] / seen["max_partitions"]))
    return dict(ids=ids, counts=seen["counts"], candidate=stop.value.args[0],
                sigma=seen["sigma"], tau=tau, delta_t=seen["delta_t"])


def _publication_probability(counts, sigma, tau):
    """Exact P(at least one of these candidates is published): 1 - prod P(c + N <= tau)."""
    log_stay = special.log_ndtr((tau - np.asarray(counts, dtype=float)) / sigma)
    return -math.expm1(float(np.sum(log_stay)))


def _unique_item_risk(monkeypatch, n_unique, **params):
    """Exact probability that one of the adversary's unique items is published."""
    out = _catalogue(monkeypatch, *_data(n_unique), **params)
    mine = out["ids"] >= UNIQUE0
    assert mine.sum() == n_unique
    cand = out["candidate"] & mine
    prob = _publication_probability(out["counts"][cand], out["sigma"], out["tau"])
    return prob, int(cand.sum()), out


def _old_candidates(counts):
    """Broken variant (the code before issue 19): every item present is a candidate."""
    return np.ones(np.shape(counts), dtype=bool)


# --------------------------------------------------------------------------- #
# 1. Exact publication probability of one user's unique items, R up to 10^6
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("n_unique", [10, 1_000, 100_000, 1_000_000])
def test_unique_items_published_with_probability_at_most_charged_delta(monkeypatch,
                                                                       n_unique):
    prob, n_cand, out = _unique_item_risk(monkeypatch, n_unique)
    assert out["delta_t"] == pytest.approx(1e-6 / 4)
    assert prob <= out["delta_t"] * (1 + 1e-9), (prob, out["delta_t"])
    cap = 50  # count_cap="auto" at epsilon=1
    assert n_cand == min(n_unique, cap)
    # Each of the user's candidates has count exactly 1 (its own rating).
    assert np.all(out["counts"][out["candidate"] & (out["ids"] >= UNIQUE0)] == 1.0)
    # The background items (each rated by >= 2 users) are all candidates.
    assert out["candidate"][out["ids"] < UNIQUE0].all()


def test_unique_item_risk_does_not_grow_with_the_number_of_items(monkeypatch):
    # Same fits at a larger budget (sigma smaller), R from below to far above the cap.
    probs = [_unique_item_risk(monkeypatch, r, epsilon=4.0, count_cap=5)[0]
             for r in (5, 6, 1_000, 30_000)]
    assert probs[1] == probs[2] == probs[3]  # 5 candidates of count 1 each time
    assert probs[0] == probs[1]


@pytest.mark.parametrize("n_unique", [1_000, 100_000])
def test_broken_every_rated_item_a_candidate_is_caught(monkeypatch, n_unique):
    # The old rule: a user's items beyond its cap are candidates of count 0,
    # each published with probability ~ delta_t / cap, so the risk grows
    # with R and the exact check above fails (issue 19: 93x delta_t at R =
    # 5000, 1854x at R = 10^5).
    monkeypatch.setattr(_algorithm, "catalogue_candidates", _old_candidates)
    with pytest.raises(AssertionError):
        test_unique_items_published_with_probability_at_most_charged_delta(monkeypatch,
                                                                           n_unique)
    prob, n_cand, out = _unique_item_risk(monkeypatch, n_unique)
    assert n_cand == n_unique  # every rated item is a candidate
    assert prob > (n_unique / 50 / 2) * out["delta_t"]
    # Below the cap the two rules agree.
    prob10, n10, out = _unique_item_risk(monkeypatch, 10)
    assert n10 == 10 and prob10 <= out["delta_t"]


def test_million_items_on_the_candidate_function():
    # R = 10^6 directly on count_partial + catalogue_candidates (fast): the
    # user's candidates are exactly its count_cap counted items.
    from skdpp.decomposition._algorithms._als_kernels import count_partial, entry_blocks
    from skdpp.decomposition._algorithms.adaptive_mf import catalogue_candidates
    from skdpp.utils._random import FitRandomness

    r, cap = 1_000_000, 50
    items = np.arange(r)
    block = entry_blocks(np.zeros(r, dtype=np.int64), items, np.ones(r),
                         np.array([ADVERSARY]), r)
    assert len(block) == 1
    key = FitRandomness(0).key
    total, _ = count_partial(block[0], None, (key, cap, r))
    cand = catalogue_candidates(total)
    assert cand.sum() == cap and total.sum() == cap
    assert _old_candidates(total).sum() == r  # the broken rule: 10^6 candidates


# --------------------------------------------------------------------------- #
# 2. A neighbour that attains the cap and the counts' stated sensitivity
# --------------------------------------------------------------------------- #
def _counts_by_id(X, release):
    """The counts release as a dict item id -> pre-noise count."""
    return dict(zip(np.unique(X[:, 0]).tolist(), release.value.tolist()))


def _attained(monkeypatch, cap, n_unique):
    """(candidates of the adversary, counts distance / stated sensitivity).

    ``D``: the adversary rates ``n_unique > cap`` items nobody else rated;
    ``D'``: it rates ``n_unique`` other such items instead (replace-one-user).
    The counts release is recorded with noise off and ``D'`` replays ``D``'s
    transcript (:func:`~tests.privacy.harness.record_releases`); the two
    count vectors are compared item by item (the union of both item sets).
    """
    D = _data(n_unique)
    D2 = _data(n_unique, first=UNIQUE0 + 10 * n_unique)
    params = dict(count_cap=cap, rating_clip=2.0, mean_clip=5.0)
    n_cand = int((_catalogue(monkeypatch, *D, **params)["candidate"]
                  & (np.unique(D[0][:, 0]) >= UNIQUE0)).sum())

    def fit(X, y, groups):
        def run():  # up to the catalogue (stopped by select_items)
            with warnings.catch_warnings(), pytest.raises(_Stop):
                warnings.simplefilter("ignore", PrivacyLeakWarning)
                _estimator(**params).fit(X, y, groups)
        return run

    def select_items(block, state, broadcast):
        raise _Stop()

    with monkeypatch.context() as mp:
        mp.setattr(_private_als, "select_items", select_items)
        first = record_releases(fit(*D))
        second = record_releases(fit(*D2), replay=first)
    # mean (mean_clip a number), then the counts: the release over every item code
    (i,) = [j for j, r in enumerate(first) if r.value.shape == (N_POOL + n_unique,)]
    a, b = _counts_by_id(D[0], first[i]), _counts_by_id(D2[0], second[i])
    dist = math.sqrt(sum((a.get(k, 0.0) - b.get(k, 0.0)) ** 2 for k in set(a) | set(b)))
    assert first[i].sensitivity == second[i].sensitivity
    return n_cand, dist / first[i].sensitivity


@pytest.mark.parametrize("cap, n_unique", [(3, 4), (3, 40), (50, 51), (50, 500)])
def test_user_beyond_the_cap_attains_it_and_the_counts_sensitivity(monkeypatch, cap,
                                                                   n_unique):
    # count_cap + 1 (and more) disjoint items nobody else rated: exactly
    # count_cap candidates, and replacing the user by one with as many other
    # such items moves the counts by exactly sqrt(2 count_cap), the stated
    # sensitivity.
    n_cand, ratio = _attained(monkeypatch, cap, n_unique)
    assert n_cand == cap
    assert ratio == pytest.approx(1.0, rel=1e-12)


def test_broken_cap_raised_by_one_is_caught(monkeypatch):
    # Mutation: count_partial counts cap + 1 items per user while the stated
    # sensitivity stays sqrt(2 cap): the user creates cap + 1 candidates and
    # the counts move by sqrt(2 (cap + 1)) > the stated sensitivity.
    real = _private_als.count_partial

    def count_partial(block, state, broadcast):
        key, cap, n_count = broadcast
        return real(block, state, (key, None if cap is None else cap + 1, n_count))

    monkeypatch.setattr(_private_als, "count_partial", count_partial)
    cap = 3
    with pytest.raises(AssertionError):
        test_user_beyond_the_cap_attains_it_and_the_counts_sensitivity(monkeypatch, cap,
                                                                       cap + 2)
    n_cand, ratio = _attained(monkeypatch, cap, cap + 2)
    assert n_cand == cap + 1  # one candidate more than the threshold assumes
    assert ratio == pytest.approx(math.sqrt((cap + 1) / cap), rel=1e-12)  # > 1


# --------------------------------------------------------------------------- #
# Keyed randomness: the candidates are a function of the set of ratings
# --------------------------------------------------------------------------- #
def test_candidates_do_not_depend_on_row_order(monkeypatch):
    X, y, groups = _data(200)
    perm = np.random.default_rng(1).permutation(y.shape[0])
    a = _catalogue(monkeypatch, X, y, groups, count_cap=7)
    b = _catalogue(monkeypatch, X[perm], y[perm], groups[perm], count_cap=7)
    np.testing.assert_array_equal(a["candidate"], b["candidate"])
    np.testing.assert_array_equal(a["counts"], b["counts"])
    assert int((a["candidate"] & (a["ids"] >= UNIQUE0)).sum()) == 7
