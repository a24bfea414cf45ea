"""Tests of JLMarginClassifier (Snedeker, Zhou & Bassily 2025, Alg. 3)."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.utils._param_validation import InvalidParameterError

from skdpp.linear_model import _jl_margin as jlm
from skdpp.linear_model._jl_margin import JLMarginClassifier
from skdpp.privacy import PrivacyAccountant, calibrate, mechanisms
from skdpp.utils._grouped import UserIndex
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
)


# --------------------------------------------------------------------------- #
# Data and loop-based reference implementation (test-only)
# --------------------------------------------------------------------------- #
def make_margin_data(n_users, n_rows, n_features, *, n_components=1, margin=0.1,
                     seed=0, labels=("neg", "pos"), n_test=0):
    """Separable personalized data: ||x|| = 1 and y <x, U* v_i*> >= 1.5 margin.

    With ``n_test > 0`` returns ``(X, y, groups), (X_test, y_test, groups_test)``
    with ``n_test`` held-out rows per user.
    """
    if n_test:
        X, y, g = make_margin_data(n_users, n_rows + n_test, n_features,
                                   n_components=n_components, margin=margin, seed=seed,
                                   labels=labels)
        test = np.tile(np.arange(n_rows + n_test) >= n_rows, n_users)
        return (X[~test], y[~test], g[~test]), (X[test], y[test], g[test])
    rng = np.random.RandomState(seed)
    U = np.linalg.qr(rng.randn(n_features, n_components))[0]
    V = rng.randn(n_users, n_components)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    W = V @ U.T                                              # (n_users, d), unit rows
    groups = np.repeat(np.arange(n_users), n_rows)
    w = W[groups]
    y = np.where(rng.rand(groups.size) < 0.5, -1.0, 1.0)
    s = rng.uniform(1.5 * margin, 0.6, size=groups.size)
    xi = rng.randn(groups.size, n_features)
    xi -= np.sum(xi * w, axis=1, keepdims=True) * w
    xi /= np.linalg.norm(xi, axis=1, keepdims=True)
    X = (y * s)[:, None] * w + np.sqrt(1 - s**2)[:, None] * xi
    yl = np.where(y > 0, labels[1], labels[0])
    return X, yl, groups


def reference_user_losses(Z, y, codes, n_users, candidates, directions, threshold):
    """Loop-based t_{c,i} = min_u mean_j 1[y_j <U~_c^T z_j, u> <= threshold]."""
    out = np.zeros((len(candidates), n_users))
    for c, U in enumerate(candidates):
        for i in range(n_users):
            rows = np.flatnonzero(codes == i)
            if rows.size == 0:
                continue
            F = Z[rows] @ U
            own = (y[rows][:, None] * F).sum(axis=0)
            dirs = list(directions)
            nrm = np.linalg.norm(own)
            dirs.append(own / nrm if nrm > 0 else np.zeros_like(own))
            best = 1.0
            for u in dirs:
                loss = np.mean([float(y[j] * (F[jj] @ u) <= threshold)
                                for jj, j in enumerate(rows)])
                best = min(best, loss)
            out[c, i] = best
    return out


def small_problem(seed=0, n_users=7, n_rows=4, jl_dim=3, k=2, n_candidates=5):
    rng = np.random.RandomState(seed)
    Z = rng.randn(n_users * n_rows + 3, jl_dim)
    codes = np.concatenate([np.repeat(np.arange(n_users), n_rows), [2, 5, 5]])
    y = np.where(rng.rand(codes.size) < 0.5, -1.0, 1.0)
    cands = jlm._random_candidates(jl_dim, k, n_candidates, rng)
    dirs = jlm._direction_grid(k, 8, rng)
    return Z, y, codes, n_users, cands, dirs


FAST = dict(n_components=1, jl_dim=4, n_candidates=16, n_directions=8)


# --------------------------------------------------------------------------- #
# Score function and exponential mechanism (white-box)
# --------------------------------------------------------------------------- #
def test_user_losses_match_loop_reference():
    Z, y, codes, n, cands, dirs = small_problem()
    got = jlm._candidate_user_losses(Z, y, codes, n, cands, dirs, 0.1)
    want = reference_user_losses(Z, y, codes, n, cands, dirs, 0.1)
    assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_user_losses_chunking_does_not_change_result(k):
    Z, y, codes, n, cands, dirs = small_problem(n_candidates=9, k=k)
    full = jlm._candidate_user_losses(Z, y, codes, n, cands, dirs, 0.05)
    chunked = jlm._candidate_user_losses(Z, y, codes, n, cands, dirs, 0.05, chunk_bytes=1)
    assert_allclose(chunked, full, rtol=0, atol=0)


def test_user_terms_lie_in_unit_interval_and_empty_users_are_zero():
    Z, y, codes, n, cands, dirs = small_problem()
    codes = codes.copy()
    codes[codes == 3] = 4  # user 3 has no rows
    Z = Z * 1e8  # huge features cannot push a term outside [0, 1]
    losses = jlm._candidate_user_losses(Z, y, codes, n, cands, dirs, 0.1)
    assert losses.min() >= 0.0 and losses.max() <= 1.0
    assert_array_equal(losses[:, 3], 0.0)


def reference_heads(F, y, codes, n_users, directions, head_bound, margin):
    """Loop-based local heads: lexicographic (0-1, margin, hinge) minimum."""
    heads = np.zeros((n_users, F.shape[1]))
    for i in range(n_users):
        rows = np.flatnonzero(codes == i)
        if rows.size == 0:
            continue
        own = (y[rows][:, None] * F[rows]).sum(axis=0)
        nrm = np.linalg.norm(own)
        dirs = list(directions) + [own / nrm if nrm > 0 else np.zeros_like(own)]
        keys = []
        for u in dirs:
            mg = head_bound * y[rows] * (F[rows] @ u)
            h = np.mean(np.maximum(0.0, margin - mg))
            keys.append((np.sum(mg <= 0), np.sum(mg <= margin), h))
        heads[i] = head_bound * dirs[min(range(len(dirs)), key=lambda j: keys[j])]
    return heads


@pytest.mark.parametrize("chunk_bytes", [1, 32 * 2**20])
def test_heads_and_cold_start_scores_match_loop_reference(monkeypatch, chunk_bytes):
    monkeypatch.setattr(jlm, "_CHUNK_BYTES", chunk_bytes)
    rng = np.random.RandomState(40)
    n_users = 9
    codes = rng.randint(0, n_users - 1, size=60)          # user 8 has no rows
    F = rng.randn(60, 2)
    y = np.where(rng.rand(60) < 0.5, -1.0, 1.0)
    dirs = jlm._direction_grid(2, 16, rng)
    heads, has_rows = jlm._head_objective_argmin(F, y, codes, n_users, dirs, 2.0, 0.3)
    assert_allclose(heads, reference_heads(F, y, codes, n_users, dirs, 2.0, 0.3),
                    rtol=0, atol=1e-12)
    assert_array_equal(has_rows, np.arange(n_users) < 8)
    want = np.array([-np.mean([np.mean(y[codes == i] * (F[codes == i] @ u) <= 0.15)
                               for i in range(8)] + [0.0]) for u in dirs])
    got = jlm._population_direction_scores(F, y, codes, n_users, dirs, 0.15)
    assert_allclose(got, want, rtol=0, atol=1e-12)


def _capture_selection(monkeypatch):
    """Patch the exponential mechanism's sampler to record its inputs."""
    calls = []
    real = mechanisms._sample_index

    def spy(scores, *, sensitivity, epsilon, rng):
        calls.append((np.array(scores, dtype=float), float(sensitivity), float(epsilon)))
        return real(scores, sensitivity=sensitivity, epsilon=epsilon, rng=rng)

    monkeypatch.setattr(mechanisms, "_sample_index", spy)
    return calls


def test_selection_probabilities_are_softmax_of_scores(monkeypatch):
    """P(candidate) = softmax(eps_sel * f / (2 / n)) with eps_sel from the calibrated plan."""
    X, y, g = make_margin_data(12, 4, 6, seed=1)
    calls = _capture_selection(monkeypatch)
    clf = JLMarginClassifier(candidates="random", epsilon=2.0, random_state=0, **FAST)
    clf.fit(X, y, groups=g)
    scores, sens, eps = calls[0]                      # the selection comes first
    assert sens == pytest.approx(1.0 / 12, rel=1e-12)
    plan = calibrate(jlm._budget_phases(1, "random", clf.subspace_share, clf.cold_start_share),
                     epsilon=2.0, delta=1e-6)
    assert eps == pytest.approx(plan["selection"], rel=1e-12)
    probs = mechanisms.exponential_mechanism_probabilities(scores, sensitivity=sens,
                                                           epsilon=eps)
    logits = eps * scores * 12 / 2.0
    want = np.exp(logits - logits.max())
    want /= want.sum()
    assert_allclose(probs, want, rtol=1e-12, atol=1e-15)
    assert np.ptp(scores) > 0  # a non-trivial check


def test_scores_passed_to_mechanism_equal_reference(monkeypatch):
    X, y, g = make_margin_data(10, 4, 6, seed=2)
    Xc = jlm._clip_rows(X, 1.0)
    yy = np.where(y == "pos", 1.0, -1.0)
    codes = g.astype(np.int64)
    rng = np.random.RandomState(3)
    M = jlm._jl_matrix(4, 6, rng)
    dirs = jlm._direction_grid(1, 8, rng)
    mask = np.ones(len(yy), dtype=bool)
    calls = _capture_selection(monkeypatch)
    params = {"selection": 1.5, "cold_start": 0.5}
    res = jlm._jl_margin_binary(
        Xc, yy, codes, 10, mask, mask, M, dirs, n_components=1, margin=0.1,
        head_bound=1.0, clip_norm=1.0, n_candidates=6, candidates="random",
        params=params, problem="", accountant=PrivacyAccountant(), rng=rng)
    ref = -reference_user_losses(Xc @ M.T, yy, codes, 10, res["candidates"], dirs,
                                 0.1).sum(axis=1) / 10
    assert_allclose(calls[0][0], ref, rtol=0, atol=1e-12)
    assert calls[0][2] == pytest.approx(1.5, rel=1e-12)


def test_epsilon_inf_selects_best_scoring_candidate():
    X, y, g = make_margin_data(15, 4, 6, seed=4)
    Xc = jlm._clip_rows(X, 1.0)
    yy = np.where(y == "pos", 1.0, -1.0)
    rng = np.random.RandomState(5)
    M = jlm._jl_matrix(4, 6, rng)
    dirs = jlm._direction_grid(1, 8, rng)
    mask = np.ones(len(yy), dtype=bool)
    res = jlm._jl_margin_binary(
        Xc, yy, g, 15, mask, mask, M, dirs, n_components=1, margin=0.1,
        head_bound=1.0, clip_norm=1.0, n_candidates=20, candidates="random",
        params={"selection": np.inf, "cold_start": np.inf}, problem="",
        accountant=PrivacyAccountant(), rng=rng)
    ref = -reference_user_losses(Xc @ M.T, yy, g, 15, res["candidates"], dirs,
                                 0.1).sum(axis=1) / 15
    assert ref[res["selected"]] == ref.max()
    assert_allclose(res["embedding"], M.T @ res["candidates"][res["selected"]],
                    rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("replacement", ["huge", "many_rows", "one_row", "zeros"])
def test_log_probabilities_change_by_at_most_epsilon(replacement):
    """Exact check on a small instance: scores on D and D' with the same candidates."""
    X, y, g = make_margin_data(8, 3, 5, seed=6)
    name_data = dict((name, (X2, y2, g2)) for name, X2, y2, g2 in
                     adversarial_neighbours(X, y, g, user=3, n_rows=200))
    X2, y2, g2 = name_data[replacement]
    rng = np.random.RandomState(7)
    M = jlm._jl_matrix(3, 5, rng)
    dirs = jlm._direction_grid(2, 8, rng)
    cands = jlm._random_candidates(3, 2, 12, rng)
    eps = 1.3

    def logprobs(X_, y_, g_):
        Z = jlm._clip_rows(X_, 1.0) @ M.T
        yy = np.where(y_ == "pos", 1.0, -1.0)
        scores = jlm._selection_scores(Z, yy, g_, 8, cands, dirs, 0.1)
        p = mechanisms.exponential_mechanism_probabilities(
            scores, sensitivity=jlm._score_sensitivity(8), epsilon=eps)
        return np.log(p)

    diff = np.abs(logprobs(X, y, g) - logprobs(X2, y2, g2))
    assert diff.max() <= eps * (1 + 1e-9)


# --------------------------------------------------------------------------- #
# Privacy harness: sensitivities, broken variants, audit
# --------------------------------------------------------------------------- #
def _fit_on(**params):
    def fit(X, y, g):
        JLMarginClassifier(random_state=0, **{**FAST, **params}).fit(X, y, groups=g)
    return fit


@pytest.mark.parametrize("candidates", ["subspace", "random"])
def test_sensitivity_harness_adversarial_neighbours(candidates):
    X, y, g = make_margin_data(10, 4, 6, seed=8)
    fit = _fit_on(candidates=candidates, epsilon=1.0, split="none")
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, n_rows=500):
        ratios = assert_sensitivity(fit, (X, y, g), (X2, y2, g2))
        assert max(ratios) <= 1 + 1e-9, name


def test_sensitivity_harness_multiclass_and_split():
    X, y, g = make_margin_data(10, 4, 6, seed=9)
    y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    fit = _fit_on(candidates="subspace", epsilon=1.0, split="half")
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=4, n_rows=300):
        assert_sensitivity(fit, (X, y, g), (X2, y2, g2))


def _underflowing_direction(jl_dim):
    """A vector whose entries' squares underflow: 1.6e-162**2 rounds up to the
    smallest subnormal, 1.5e-162**2 rounds down to 0."""
    z = np.full(jl_dim, 1.5e-162)
    z[0] = 1.6e-162
    return z


def test_subspace_contribution_has_unit_norm_for_tiny_means():
    """Normalising ``a / np.linalg.norm(a)`` underflows for ||a|| ~ 1e-162."""
    z = _underflowing_direction(64)
    stat = jlm._subspace_statistic(z[None], np.array([1.0]), np.array([0]), 1)
    assert np.linalg.norm(stat) == pytest.approx(1.0, rel=1e-12)
    u = z * 1e162 / np.linalg.norm(z * 1e162)
    assert_allclose(stat, np.outer(u, u), rtol=0, atol=1e-12)
    assert_array_equal(jlm._subspace_statistic(np.zeros((2, 3)), np.ones(2),
                                               np.array([0, 1]), 2), 0.0)


def test_sensitivity_harness_tiny_row_from_public_jl_matrix():
    """One row x with M x = z (M is public): its contribution stays rank one, norm 1."""
    X, y, g = make_margin_data(10, 4, 10, seed=8)
    params = dict(FAST, jl_dim=8, candidates="subspace", epsilon=1.0, random_state=0)
    M = JLMarginClassifier(**params).fit(X, y, groups=g).jl_matrix_
    x = np.linalg.lstsq(M, _underflowing_direction(8), rcond=None)[0]
    mine = g == 1
    neighbour = (np.concatenate([X[~mine], x[None]]), np.concatenate([y[~mine], ["pos"]]),
                 np.concatenate([g[~mine], [1]]))

    def fit(X_, y_, g_):
        JLMarginClassifier(**params).fit(X_, y_, groups=g_)

    assert max(assert_sensitivity(fit, (X, y, g), neighbour)) <= 1 + 1e-9


def test_subspace_noise_has_the_calibrated_scale():
    X, y, g = make_margin_data(30, 4, 50, seed=14)
    clf = JLMarginClassifier(random_state=0, n_components=1, jl_dim=40, n_candidates=4,
                             epsilon=1.0)
    draws = record_noise(lambda: clf.fit(X, y, groups=g))
    assert len(draws) == 1
    draw = draws[0]
    plan = calibrate(jlm._budget_phases(1, "subspace", clf.subspace_share,
                                        clf.cold_start_share), epsilon=1.0, delta=1e-6)
    assert draw["sensitivity"] == pytest.approx(np.sqrt(2.0), rel=1e-12)
    assert draw["scale"] == pytest.approx(plan["subspace"] * np.sqrt(2.0), rel=1e-12)
    noise = draw["noise"]
    assert_allclose(noise, noise.T, rtol=0, atol=0)
    upper = noise[np.triu_indices(40)]
    # 820 i.i.d. draws: the sample std is within 5 standard errors (~12 %)
    assert abs(upper.std() / draw["scale"] - 1) < 5 / np.sqrt(2 * upper.size)


def _caught(fit, X, y, g, user):
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=user, n_rows=500):
        try:
            assert_sensitivity(fit, (X, y, g), (X2, y2, g2))
        except AssertionError:
            return True
    return False


def test_broken_understated_score_sensitivity_is_caught(monkeypatch):
    X, y, g = make_margin_data(10, 4, 6, seed=10)
    fit = _fit_on(candidates="random", split="none")
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(jlm, "_score_sensitivity", lambda n: 0.5 / n)
    assert _caught(fit, X, y, g, user=1)


def test_broken_unbounded_user_terms_are_caught(monkeypatch):
    """Per-user loss *counts* instead of means: a user's term is no longer in [0, 1]."""
    X, y, g = make_margin_data(10, 4, 6, seed=11)
    real = jlm._candidate_user_losses

    def counts_not_means(Z, y_, codes, n_users, *args, **kw):
        return real(Z, y_, codes, n_users, *args, **kw) * np.bincount(
            codes, minlength=n_users)

    fit = _fit_on(candidates="random", split="none")
    monkeypatch.setattr(jlm, "_candidate_user_losses", counts_not_means)
    assert _caught(fit, X, y, g, user=1)


def test_broken_subspace_without_normalisation_is_caught(monkeypatch):
    """Per-user means not normalised (and rows not clipped): unbounded contribution."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(candidates="subspace", split="none")
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(jlm, "_clip_rows", lambda X_, c: np.array(X_, dtype=float))
    monkeypatch.setattr(
        jlm, "_subspace_statistic",
        lambda Z, y_, codes, n: (lambda a: a.T @ a)(
            jlm._label_weighted_means(Z, y_, codes, n)))
    assert _caught(fit, X, y, g, user=1)


def test_broken_per_row_subspace_contributions_are_caught(monkeypatch):
    """Per-row unit directions: a user with many rows contributes many times."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(candidates="subspace", split="none")

    def per_row(Z, y_, codes, n):
        a = y_[:, None] * Z
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        return a.T @ a

    monkeypatch.setattr(jlm, "_subspace_statistic", per_row)
    assert _caught(fit, X, y, g, user=1)


def _audit_setup(monkeypatch):
    """Two candidates e1, e2 (fixed public randomness); the canary user decides.

    Background users' rows are y (0.3, 0.3): every candidate separates them.
    The canary's rows are y (0.5, 0) in D (only e1 separates them) and
    y (0, 0.5) in D' (only e2): the scores move by exactly 1/n in opposite
    directions, so P(e1 | D) / P(e1 | D') = exp(eps_sel / 2).
    """
    monkeypatch.setattr(jlm, "_jl_matrix", lambda k, d, rng: np.eye(2))
    frames = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])
    monkeypatch.setattr(jlm, "_random_candidates", lambda kp, k, n, rng: frames.copy())
    n_users, n_rows = 6, 4
    g = np.repeat(np.arange(n_users), n_rows)
    sign = np.where(np.arange(g.size) % 2 == 0, 1.0, -1.0)
    X = sign[:, None] * np.array([0.3, 0.3])
    X2 = X.copy()
    X[g == 0] = sign[g == 0, None] * np.array([0.5, 0.0])
    X2[g == 0] = sign[g == 0, None] * np.array([0.0, 0.5])
    y = np.where(sign > 0, "pos", "neg")
    params = dict(candidates="random", n_components=1, jl_dim=2, n_candidates=2,
                  split="none")

    def run_factory(epsilon):
        def run(seed, neighbour):
            clf = JLMarginClassifier(random_state=seed, epsilon=epsilon, **params)
            clf.fit(X2 if neighbour else X, y, groups=g)
            return float(abs(clf.embeddings_[0, 0, 0]))  # 1 if e1 was selected
        return run
    return run_factory


def test_audit_lower_bound_respects_epsilon(monkeypatch):
    # Seeded (seeds 0..599); for a correct 1-DP fit the Clopper-Pearson bound
    # exceeds 1 with probability <= alpha = 0.01 (the false-alarm rate).
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    assert audit_epsilon_lower_bound(run, 300, alpha=0.01) <= 1.0


def test_audit_catches_noise_off(monkeypatch):
    # Broken variant: the exponential mechanism becomes the argmax.
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    with noise_off():
        assert audit_epsilon_lower_bound(run, 300, alpha=0.01) > 1.0


def test_audit_selection_frequency_matches_exponential_mechanism(monkeypatch):
    """Empirical P(e1 | D) matches 1 / (1 + exp(-eps_sel / 2)) (binomial 5-sigma band)."""
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    defaults = JLMarginClassifier()
    plan = calibrate(jlm._budget_phases(1, "random", defaults.subspace_share,
                                        defaults.cold_start_share), epsilon=1.0, delta=1e-6)
    p = 1.0 / (1.0 + np.exp(-plan["selection"] / 2.0))
    n = 400
    hits = sum(run(seed, False) for seed in range(n))
    assert abs(hits / n - p) <= 5 * np.sqrt(p * (1 - p) / n)


# --------------------------------------------------------------------------- #
# Utility
# --------------------------------------------------------------------------- #
def _mean_test_accuracy(seeds=(0, 1, 2), data_seed=20, **params):
    (X, y, g), (Xt, yt, gt) = make_margin_data(300, 10, 20, seed=data_seed, n_test=10)
    accs = [JLMarginClassifier(random_state=s, **{**dict(n_components=1, jl_dim=12,
                                                           n_candidates=64), **params})
            .fit(X, y, groups=g).score(Xt, yt, groups=gt) for s in seeds]
    return float(np.mean(accs))


def test_accuracy_rises_with_epsilon():
    low = _mean_test_accuracy(epsilon=0.02)
    mid = _mean_test_accuracy(epsilon=2.0)
    high = _mean_test_accuracy(epsilon=np.inf)
    assert low + 0.05 < mid <= high + 0.03
    assert high > 0.8


def test_accuracy_rises_with_n_candidates():
    few = _mean_test_accuracy(candidates="random", n_candidates=1, epsilon=np.inf)
    many = _mean_test_accuracy(candidates="random", n_candidates=128, epsilon=np.inf)
    assert few + 0.05 < many


def test_subspace_candidates_beat_random_at_same_budget():
    sub = _mean_test_accuracy(candidates="subspace", epsilon=4.0)
    rnd = _mean_test_accuracy(candidates="random", epsilon=4.0)
    assert sub > rnd


# --------------------------------------------------------------------------- #
# Estimator behaviour
# --------------------------------------------------------------------------- #
def test_deterministic_given_random_state():
    X, y, g = make_margin_data(30, 4, 6, seed=21)
    a = JLMarginClassifier(random_state=3, **FAST).fit(X, y, groups=g)
    b = JLMarginClassifier(random_state=3, **FAST).fit(X, y, groups=g)
    assert_array_equal(a.embeddings_, b.embeddings_)
    assert_array_equal(a.heads_, b.heads_)
    assert_array_equal(a.cold_start_heads_, b.cold_start_heads_)


def test_split_of_a_user_does_not_depend_on_other_users():
    codes = np.repeat(np.arange(5), [3, 4, 5, 6, 7])
    codes2 = np.repeat(np.arange(5), [3, 40, 5, 6, 7])  # user 1 replaced
    m1 = jlm._split_half(codes, 5, np.random.RandomState(1))
    m2 = jlm._split_half(codes2, 5, np.random.RandomState(1))
    for u in (0, 2, 3, 4):
        assert_array_equal(m1[codes == u], m2[codes2 == u])
    counts = np.bincount(codes[m1], minlength=5)
    assert_array_equal(counts, [2, 2, 3, 3, 4])


def test_half_split_users_with_one_row_get_the_cold_start_head():
    X, y, g = make_margin_data(12, 4, 6, seed=35)
    keep = (g != 3) | (np.arange(len(g)) % 4 == 0)        # user 3 keeps one row
    clf = JLMarginClassifier(random_state=0, split="half", **FAST)
    clf.fit(X[keep], y[keep], groups=g[keep])
    assert_array_equal(clf.heads_[3], clf.cold_start_heads_)


def test_decision_function_is_inner_product_with_personal_weights():
    X, y, g = make_margin_data(20, 4, 6, seed=22)
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X, y, groups=g)
    dec = clf.decision_function(X, groups=g)
    codes = np.searchsorted(clf.user_ids_, g)
    want = np.einsum("nd,dk,nk->n", X, clf.embeddings_[0], clf.heads_[codes, 0])
    assert_allclose(dec, want, rtol=1e-12, atol=1e-12)
    assert_array_equal(clf.predict(X, groups=g), clf.classes_[(dec > 0).astype(int)])
    assert np.all(np.linalg.norm(clf.heads_, axis=-1) <= clf.head_bound * (1 + 1e-12))


def test_unseen_users_get_the_cold_start_head():
    X, y, g = make_margin_data(20, 4, 6, seed=23)
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X, y, groups=g)
    dec = clf.decision_function(X, groups=g + 1000)
    want = X @ clf.embeddings_[0] @ clf.cold_start_heads_[0]
    assert_allclose(dec, want, rtol=1e-12, atol=1e-12)


def test_personalize_adds_users_without_touching_the_release():
    X, y, g = make_margin_data(20, 6, 6, seed=24)
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X[g < 15], y[g < 15],
                                                          groups=g[g < 15])
    emb, report = clf.embeddings_.copy(), clf.privacy_report_
    clf.personalize(X[g >= 15], y[g >= 15], groups=g[g >= 15])
    assert_array_equal(clf.embeddings_, emb)
    assert clf.privacy_report_ is report
    assert_array_equal(clf.user_ids_, np.arange(20))
    new = np.isin(g, np.arange(15, 20))
    # a new user's head is the local fit on its rows, not the cold start
    ref = JLMarginClassifier(random_state=0, **FAST).fit(X[g < 15], y[g < 15],
                                                         groups=g[g < 15])
    local = ref._fit_personal(X[new], y[new], UserIndex.from_groups(g[new]))
    assert_allclose(clf.heads_[15:], local["heads_"], rtol=0, atol=0)


@pytest.mark.parametrize("labels", [("a", "b"), (0, 1), (-1, 1), (3, 7)])
def test_string_and_integer_labels(labels):
    X, y, g = make_margin_data(30, 6, 6, seed=25)
    y = np.where(y == "pos", labels[1], labels[0])
    clf = JLMarginClassifier(random_state=0, epsilon=np.inf, **FAST).fit(X, y, groups=g)
    assert_array_equal(clf.classes_, np.sort(np.array(labels)))
    assert set(np.unique(clf.predict(X, groups=g))) <= set(labels)


def test_multiclass_one_vs_rest_splits_the_budget_equally():
    X, y, g = make_margin_data(30, 6, 6, seed=26)
    y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    clf = JLMarginClassifier(random_state=0, epsilon=1.0, **FAST).fit(X, y, groups=g)
    assert clf.embeddings_.shape == (3, 6, 1)
    assert clf.heads_.shape == (30, 3, 1)
    assert clf.decision_function(X, groups=g).shape == (len(y), 3)
    shares = {p.name: p.share for p in clf.privacy_report_.phases}
    for phase in ("subspace", "selection", "cold_start"):
        vals = [shares[f"{phase}[{p}]"] for p in range(3)]
        assert_allclose(vals, vals[0], rtol=1e-12)
    assert clf.privacy_report_.epsilon_spent <= 1.0 * (1 + 1e-9)
    plan = calibrate(jlm._budget_phases(3, "subspace", clf.subspace_share, clf.cold_start_share),
                     epsilon=1.0, delta=1e-6)
    assert_allclose(plan["selection[0]"], plan["selection[2]"], rtol=1e-12)


def test_random_candidates_are_pure_dp():
    X, y, g = make_margin_data(30, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, candidates="random", epsilon=1.0, delta=0.0,
                             **FAST).fit(X, y, groups=g)
    assert clf.privacy_report_.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert {p.mechanism for p in clf.privacy_report_.phases} == {"exponential"}


def test_given_classes_are_used():
    X, y, g = make_margin_data(30, 4, 6, seed=28)
    clf = JLMarginClassifier(random_state=0, classes=["neg", "pos", "zzz"], **FAST)
    clf.fit(X, y, groups=g)
    assert_array_equal(clf.classes_, ["neg", "pos", "zzz"])
    with pytest.raises(ValueError, match="not in `classes`"):
        clf.set_params(classes=["neg", "other"]).fit(X, y, groups=g)


def test_input_not_modified():
    X, y, g = make_margin_data(20, 4, 6, seed=29)
    X0, y0, g0 = X.copy(), y.copy(), g.copy()
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X * 10, y, groups=g)
    clf.fit(X, y, groups=g).predict(X, groups=g)
    assert_array_equal(X, X0)
    assert_array_equal(y, y0)
    assert_array_equal(g, g0)


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #
def test_one_class_raises():
    X, y, g = make_margin_data(10, 4, 6, seed=30)
    with pytest.raises(ValueError, match="2 classes"):
        JLMarginClassifier(**FAST).fit(X, np.full(len(y), "pos"), groups=g)


def test_multiclass_raise_rejects_three_labels():
    X, y, g = make_margin_data(10, 3, 6, seed=31)
    y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    with pytest.raises(ValueError, match="multiclass='raise'"):
        JLMarginClassifier(multiclass="raise", **FAST).fit(X, y, groups=g)


@pytest.mark.parametrize("params", [dict(margin=0.0), dict(margin=-1.0),
                                    dict(head_bound=0.0), dict(head_bound=-2.0),
                                    dict(n_candidates=0), dict(jl_dim=0),
                                    dict(epsilon=0.0), dict(delta=1.0)])
def test_invalid_parameters_raise(params):
    X, y, g = make_margin_data(10, 3, 6, seed=32)
    with pytest.raises(InvalidParameterError):
        JLMarginClassifier(**{**FAST, **params}).fit(X, y, groups=g)


def test_subspace_needs_positive_delta_and_shares_below_one():
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    with pytest.raises(ValueError, match="delta > 0"):
        JLMarginClassifier(delta=0.0, **FAST).fit(X, y, groups=g)
    with pytest.raises(ValueError, match="subspace_share"):
        JLMarginClassifier(subspace_share=0.7, cold_start_share=0.3, **FAST).fit(X, y,
                                                                                 groups=g)


def test_jl_dim_below_n_components_raises():
    X, y, g = make_margin_data(10, 3, 6, seed=36)
    with pytest.raises(ValueError, match="jl_dim=1 is smaller than n_components=2"):
        JLMarginClassifier(n_components=2, jl_dim=1).fit(X, y, groups=g)


def test_no_clipping_only_without_privacy():
    X, y, g = make_margin_data(10, 3, 6, seed=34)
    with pytest.raises(ValueError, match="clip_norm=None"):
        JLMarginClassifier(clip_norm=None, **FAST).fit(X, y, groups=g)
    clf = JLMarginClassifier(clip_norm=None, epsilon=np.inf, **FAST).fit(X * 5, y, groups=g)
    assert clf.score(X, y, groups=g) > 0.5


def test_auto_jl_dim_rule():
    # k' = ceil(r^2 Gamma^2 log(n / 0.05) / rho^2), clipped to [k, min(d, 256)]
    assert jlm._auto_jl_dim(100, 1000, 2, radius=1.0, head_bound=1.0, margin=0.5) == \
        math.ceil(math.log(100 / 0.05) / 0.25)
    assert jlm._auto_jl_dim(100, 20, 2, radius=1.0, head_bound=1.0, margin=0.1) == 20
    assert jlm._auto_jl_dim(100, 5000, 2, radius=1.0, head_bound=1.0, margin=0.01) == 256
    assert jlm._auto_jl_dim(100, 1, 2, radius=1.0, head_bound=1.0, margin=0.1) == 2


@pytest.mark.parametrize("n_components,n_dir", [(2, 8), (2, 64), (2, 5), (3, 16), (1, 2)])
def test_user_losses_match_reference_for_every_grid(n_components, n_dir):
    rng = np.random.RandomState(41)
    Z = rng.randn(50, 4) * rng.uniform(0.01, 1.0, size=(50, 1))
    codes = rng.randint(0, 6, size=50)
    y = np.where(rng.rand(50) < 0.5, -1.0, 1.0)
    cands = jlm._random_candidates(4, n_components, 7, rng)
    dirs = jlm._direction_grid(n_components, n_dir, rng)
    for threshold in (0.0, 0.05, 0.3):
        got = jlm._candidate_user_losses(Z, y, codes, 6, cands, dirs, threshold)
        want = reference_user_losses(Z, y, codes, 6, cands, dirs, threshold)
        assert_allclose(got, want, rtol=0, atol=1e-12)
