"""Tests of JLMarginClassifier (Snedeker, Zhou & Bassily 2025, Alg. 3)."""

import contextlib
import io
import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.utils._param_validation import InvalidParameterError

from skdpp.linear_model import _jl_algorithm as jla
from skdpp.linear_model import _jl_candidates as jlc
from skdpp.linear_model import _margin_scores as ms
from skdpp.linear_model._jl_margin import JLMarginClassifier
from skdpp.privacy import clip_by_norm, mechanisms, unit_rows
from skdpp.utils._executor import LocalExecutor
from skdpp.utils._grouped import UserIndex, make_blocks
from skdpp.utils._random import FitRandomness
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_same_observables,
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


def segments(codes, *arrays, n_users=None):
    """A block of the users of ``codes`` (ints) and the arrays in its row order.

    Users ``0 .. n_users - 1``; users without rows have ``counts == 0``.
    """
    codes = np.asarray(codes)
    n_users = int(codes.max()) + 1 if n_users is None else n_users
    ids = np.concatenate([codes, np.arange(n_users)])            # every user present
    keep = np.arange(ids.size) < codes.size
    fill = [np.concatenate([a, np.zeros((n_users,) + a.shape[1:])]) for a in arrays]
    block = make_blocks(fill[0], fill[0], UserIndex.from_groups(ids), max_rows=None)[0]
    block = block.select(block.take(keep))                      # drop the fillers
    return (block, *(block.take(a) for a in fill))


def small_problem(seed=0, n_users=7, n_rows=4, jl_dim=3, k=2, n_candidates=5):
    rng = np.random.RandomState(seed)
    Z = rng.randn(n_users * n_rows + 3, jl_dim)
    codes = np.concatenate([np.repeat(np.arange(n_users), n_rows), [2, 5, 5]])
    y = np.where(rng.rand(codes.size) < 0.5, -1.0, 1.0)
    cands = jlc.random_candidates(rng.randn(n_candidates, jl_dim, k))
    dirs = jlc.direction_grid(k, 8, np.random.default_rng(seed))
    return Z, y, codes, n_users, cands, dirs


def block_losses(Z, y, codes, n_users, cands, dirs, threshold):
    seg, Zs, ys = segments(codes, Z, y, n_users=n_users)
    return ms.candidate_user_losses(seg, ys[:, None] * Zs, cands, dirs, threshold)


FAST = dict(n_components=1, jl_dim=4, n_candidates=16, n_directions=8)


def public_draws(clf, n_features, n_problems=1):
    """The public randomness a fit with ``clf``'s int random_state drew."""
    return jlc.draw_public(FitRandomness(clf.random_state).public, jl_dim=clf.jl_dim_,
                           n_features=n_features, n_components=clf.n_components,
                           n_directions=clf.n_directions, n_candidates=clf.n_candidates,
                           n_problems=n_problems)


def plan_of(clf, n_problems=1):
    return clf._budget_plan({"n_problems": n_problems}).calibrate()


# --------------------------------------------------------------------------- #
# Score function and exponential mechanism (white-box)
# --------------------------------------------------------------------------- #
def test_user_losses_match_loop_reference():
    Z, y, codes, n, cands, dirs = small_problem()
    got = block_losses(Z, y, codes, n, cands, dirs, 0.1)
    want = reference_user_losses(Z, y, codes, n, cands, dirs, 0.1)
    assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_components,n_dir", [(2, 8), (2, 64), (2, 5), (3, 16), (1, 2)])
def test_user_losses_match_reference_for_every_grid(n_components, n_dir):
    rng = np.random.RandomState(41)
    Z = rng.randn(50, 4) * rng.uniform(0.01, 1.0, size=(50, 1))
    codes = rng.randint(0, 6, size=50)
    y = np.where(rng.rand(50) < 0.5, -1.0, 1.0)
    cands = jlc.random_candidates(rng.randn(7, 4, n_components))
    dirs = jlc.direction_grid(n_components, n_dir, np.random.default_rng(41))
    for threshold in (0.0, 0.05, 0.3):
        got = block_losses(Z, y, codes, 6, cands, dirs, threshold)
        want = reference_user_losses(Z, y, codes, 6, cands, dirs, threshold)
        assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_user_losses_chunking_does_not_change_result(monkeypatch, k):
    Z, y, codes, n, cands, dirs = small_problem(n_candidates=9, k=k)
    full = block_losses(Z, y, codes, n, cands, dirs, 0.05)
    monkeypatch.setattr(ms, "_CHUNK_BYTES", 1)
    chunked = block_losses(Z, y, codes, n, cands, dirs, 0.05)
    assert_array_equal(chunked, full)


def test_user_terms_lie_in_unit_interval_and_empty_users_are_zero():
    Z, y, codes, n, cands, dirs = small_problem()
    codes = codes.copy()
    codes[codes == 3] = 4  # user 3 has no rows
    losses = block_losses(Z * 1e8, y, codes, n, cands, dirs, 0.1)
    assert losses.min() >= 0.0 and losses.max() <= 1.0
    assert_array_equal(losses[:, 3], 0.0)


@pytest.mark.parametrize("k,n_dir", [(1, 2), (2, 16), (3, 8)])
def test_user_terms_in_unit_interval_and_silent_for_any_finite_values(k, n_dir):
    """Fuzz: huge, tiny, subnormal and overflowing rows keep every term in [0, 1],
    with no floating-point warning (a warning would depend on one user's data)."""
    rng = np.random.default_rng(k)
    dirs = jlc.direction_grid(k, n_dir, rng)
    for trial in range(30):
        n_rows = 40
        codes = rng.integers(0, 6, size=n_rows)
        Z = rng.standard_normal((n_rows, 4)) * 10.0 ** rng.uniform(-320, 308, (n_rows, 1))
        Z[rng.random(n_rows) < 0.2] = 1.7e308
        y = np.where(rng.random(n_rows) < 0.5, -1.0, 1.0)
        cands = jlc.random_candidates(rng.standard_normal((5, 4, k))) * 1e4
        seg, Zs, ys = segments(codes, Z, y, n_users=6)
        with np.errstate(all="ignore"):
            yF = ys[:, None] * (Zs @ cands[0])  # may hold inf and nan
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            losses = ms.candidate_user_losses(seg, ys[:, None] * Zs, cands, dirs, 0.1)
            pop = ms.direction_user_losses(seg, yF, dirs, 0.1)
            units = ms.subspace_contributions(seg, ys[:, None] * Zs)
            heads, _ = ms.head_argmin(seg, yF, dirs, 1.0, 0.1)
        for terms in (losses, pop):
            assert np.all((terms >= 0) & (terms <= 1)), trial
        norms = np.linalg.norm(units, axis=1)
        assert np.all((np.abs(norms - 1) < 1e-12) | (norms == 0)), trial
        assert np.all(np.isfinite(heads)), trial


@pytest.mark.parametrize("chunk_bytes", [1, 32 * 2**20])
def test_heads_and_cold_start_scores_match_loop_reference(monkeypatch, chunk_bytes):
    monkeypatch.setattr(ms, "_CHUNK_BYTES", chunk_bytes)
    rng = np.random.RandomState(40)
    n_users = 9
    codes = rng.randint(0, n_users - 1, size=60)          # user 8 has no rows
    F = rng.randn(60, 2)
    y = np.where(rng.rand(60) < 0.5, -1.0, 1.0)
    dirs = jlc.direction_grid(2, 16, None)
    seg, Fs, ys = segments(codes, F, y, n_users=n_users)
    heads, has_rows = ms.head_argmin(seg, ys[:, None] * Fs, dirs, 2.0, 0.3)
    assert_allclose(heads, reference_heads(F, y, codes, n_users, dirs, 2.0, 0.3),
                    rtol=0, atol=1e-12)
    assert_array_equal(has_rows, np.arange(n_users) < 8)
    want = np.array([[np.mean(y[codes == i] * (F[codes == i] @ u) <= 0.15) for u in dirs]
                     for i in range(8)] + [[0.0] * len(dirs)])
    got = ms.direction_user_losses(seg, ys[:, None] * Fs, dirs, 0.15)
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
    assert eps == pytest.approx(plan_of(clf)["selection"], rel=1e-12)
    probs = mechanisms.exponential_mechanism_probabilities(scores, sensitivity=sens,
                                                           epsilon=eps)
    logits = eps * scores * 12 / 2.0
    want = np.exp(logits - logits.max())
    want /= want.sum()
    assert_allclose(probs, want, rtol=1e-12, atol=1e-15)
    assert np.ptp(scores) > 0  # a non-trivial check


def test_scores_passed_to_mechanism_equal_reference(monkeypatch):
    X, y, g = make_margin_data(10, 4, 6, seed=2)
    calls = _capture_selection(monkeypatch)
    clf = JLMarginClassifier(candidates="random", epsilon=1.5, random_state=3,
                             **{**FAST, "n_candidates": 6}).fit(X, y, groups=g)
    public = public_draws(clf, 6)
    cands = jlc.random_candidates(public.perturbations[0])
    Z = clip_by_norm(X, 1.0) @ public.jl_matrix.T
    yy = np.where(y == "pos", 1.0, -1.0)
    ref = -reference_user_losses(Z, yy, g, 10, cands, public.directions, 0.1).sum(axis=1) / 10
    assert_allclose(calls[0][0], ref, rtol=0, atol=1e-12)
    assert calls[0][2] == pytest.approx(plan_of(clf)["selection"], rel=1e-12)


def test_epsilon_inf_selects_best_scoring_candidate():
    X, y, g = make_margin_data(15, 4, 6, seed=4)
    clf = JLMarginClassifier(candidates="random", epsilon=np.inf, random_state=5,
                             **{**FAST, "n_candidates": 20}).fit(X, y, groups=g)
    public = public_draws(clf, 6)
    cands = jlc.random_candidates(public.perturbations[0])
    Z = clip_by_norm(X, 1.0) @ public.jl_matrix.T
    yy = np.where(y == "pos", 1.0, -1.0)
    ref = -reference_user_losses(Z, yy, g, 15, cands, public.directions, 0.1).sum(axis=1)
    embeddings = public.jl_matrix.T @ cands                 # (C, d, k)
    selected = [c for c in range(20) if np.array_equal(embeddings[c], clf.embeddings_[0])]
    assert len(selected) == 1
    assert ref[selected[0]] == ref.max()
    assert np.ptp(ref) > 0


def _block_scores(X, y, g, n_users, M, cands, dirs, threshold):
    """The score vector f of a dataset, through the fit's block functions."""
    index = UserIndex.from_groups(g)
    Y = np.where(y == "pos", 1.0, -1.0)[:, None]
    executor = LocalExecutor(jla.clipped_blocks(X, Y, index, 1.0, max_rows=5))
    executor.map(ms.prepare_block, ms.Prepare(M, FitRandomness(0).key, "none"))
    losses = executor.map(ms.candidate_scores_block, ms.Scores(0, cands, dirs, threshold))
    return -losses / n_users


@pytest.mark.parametrize("replacement", ["huge", "many_rows", "one_row", "zeros"])
def test_log_probabilities_change_by_at_most_epsilon(replacement):
    """Exact check on a small instance: scores on D and D' with the same candidates."""
    X, y, g = make_margin_data(8, 3, 5, seed=6)
    name_data = {name: (X2, y2, g2) for name, X2, y2, g2 in
                 adversarial_neighbours(X, y, g, user=3, n_rows=200)}
    X2, y2, g2 = name_data[replacement]
    public = jlc.draw_public(np.random.default_rng(7), jl_dim=3, n_features=5,
                             n_components=2, n_directions=8, n_candidates=12, n_problems=1)
    cands = jlc.random_candidates(public.perturbations[0])
    eps = 1.3

    def logprobs(X_, y_, g_):
        scores = _block_scores(X_, y_, g_, 8, public.jl_matrix, cands, public.directions, 0.1)
        p = mechanisms.exponential_mechanism_probabilities(
            scores, sensitivity=jla.score_sensitivity(8), epsilon=eps)
        return np.log(p)

    diff = np.abs(logprobs(X, y, g) - logprobs(X2, y2, g2))
    assert diff.max() <= eps * (1 + 1e-9)


# --------------------------------------------------------------------------- #
# Privacy harness: sensitivities, observables, broken variants, audit
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


@pytest.mark.parametrize("params", [
    dict(),
    dict(clip_norm=1e300),
    dict(clip_norm=1e300, split="half", n_components=2, jl_dim=5, n_directions=16),
    dict(clip_norm=1e300, n_components=3, jl_dim=5, candidates="random"),
    dict(epsilon=np.inf, clip_norm=None),
])
def test_same_observables_on_adversarial_neighbours(params):
    """No warning, printed line or exception depends on one user's data (verbose on),
    even for a user whose values are 1e300 or the largest float."""
    X, y, g = make_margin_data(10, 4, 6, seed=15)
    fit = _fit_on(verbose=1, **params)
    for scale in (1e300, 1.7e308, 1e-300):
        for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, scale=scale,
                                                       n_rows=500):
            observed = assert_same_observables(fit, (X, y, g), (X2, y2, g2))
            assert "[JLMarginClassifier]" in observed["stdout"], name


def test_verbose_prints_only_public_values():
    """Two unrelated datasets with the same public shape print the same lines."""
    a = make_margin_data(12, 4, 6, seed=16)
    b = make_margin_data(12, 7, 6, seed=17)
    b = (b[0] * 3.0, b[1], b[2])
    printed = []
    for data in (a, b):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            JLMarginClassifier(random_state=0, verbose=1, **FAST).fit(data[0], data[1],
                                                                       groups=data[2])
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert printed[0].count("\n") == 3


def _underflowing_direction(jl_dim):
    """A vector whose entries' squares underflow: 1.6e-162**2 rounds up to the
    smallest subnormal, 1.5e-162**2 rounds down to 0."""
    z = np.full(jl_dim, 1.5e-162)
    z[0] = 1.6e-162
    return z


def test_subspace_contribution_has_unit_norm_for_tiny_means():
    """Normalising ``a / np.linalg.norm(a)`` underflows for ||a|| ~ 1e-162."""
    z = _underflowing_direction(64)
    seg, zs = segments([0], z[None])
    u = ms.subspace_contributions(seg, zs)
    assert np.linalg.norm(u) == pytest.approx(1.0, rel=1e-12)
    w = z * 1e162 / np.linalg.norm(z * 1e162)
    assert_allclose(u[0], w, rtol=0, atol=1e-12)
    seg, zs = segments([0, 1], np.zeros((2, 3)))
    assert_array_equal(ms.subspace_contributions(seg, zs), 0.0)


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
    assert draw["sensitivity"] == pytest.approx(np.sqrt(2.0), rel=1e-12)
    assert draw["scale"] == pytest.approx(plan_of(clf)["subspace"] * np.sqrt(2.0), rel=1e-12)
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
    monkeypatch.setattr(jla, "score_sensitivity", lambda n: 0.5 / n)
    assert _caught(fit, X, y, g, user=1)


def test_broken_unbounded_user_terms_are_caught(monkeypatch):
    """Per-user loss *counts* instead of means: a user's term is no longer in [0, 1]."""
    X, y, g = make_margin_data(10, 4, 6, seed=11)
    real = ms.candidate_user_losses

    def counts_not_means(seg, *args, **kw):
        return real(seg, *args, **kw) * seg.counts

    fit = _fit_on(candidates="random", split="none")
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(ms, "candidate_user_losses", counts_not_means)
    assert _caught(fit, X, y, g, user=1)


def test_broken_subspace_without_normalisation_is_caught(monkeypatch):
    """Per-user sums not normalised and rows not clipped: unbounded contribution."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(candidates="subspace", split="none")
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(jla, "clip_by_norm",
                        lambda X_, c, out_dtype: np.array(X_, dtype=out_dtype))
    monkeypatch.setattr(ms, "subspace_contributions",
                        lambda seg, yZ: seg.segment_sum_wide(yZ) / seg.counts[:, None])
    assert _caught(fit, X, y, g, user=1)


def test_broken_per_row_subspace_contributions_are_caught(monkeypatch):
    """Per-row unit directions: a user with many rows contributes many times."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(candidates="subspace", split="none")
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(ms, "subspace_contributions", lambda seg, yZ: unit_rows(yZ)[0])
    assert _caught(fit, X, y, g, user=1)


def _audit_setup(monkeypatch):
    """Two candidates e1, e2 (fixed public randomness); the canary user decides.

    Background users' rows are y (0.3, 0.3): every candidate separates them.
    The canary's rows are y (0.5, 0) in D (only e1 separates them) and
    y (0, 0.5) in D' (only e2): the scores move by exactly 1/n in opposite
    directions, so P(e1 | D) / P(e1 | D') = exp(eps_sel / 2).
    """
    monkeypatch.setattr(jlc, "jl_matrix", lambda k, d, rng: np.eye(2))
    frames = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])
    monkeypatch.setattr(jla, "random_candidates", lambda perturbations: frames.copy())
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


def test_audit_setup_selects_between_the_two_frames(monkeypatch):
    run = _audit_setup(monkeypatch)(epsilon=np.inf)
    assert run(0, False) == 1.0 and run(0, True) == 0.0


@pytest.mark.slow
def test_audit_lower_bound_respects_epsilon(monkeypatch):
    # Seeded (seeds 0..599); for a correct 1-DP fit the Clopper-Pearson bound
    # exceeds 1 with probability <= alpha = 0.01 (the false-alarm rate).
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    assert audit_epsilon_lower_bound(run, 300, alpha=0.01) <= 1.0


@pytest.mark.slow
def test_audit_catches_noise_off(monkeypatch):
    # Broken variant: the exponential mechanism becomes the argmax.
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    with noise_off():
        assert audit_epsilon_lower_bound(run, 300, alpha=0.01) > 1.0


@pytest.mark.slow
def test_audit_selection_frequency_matches_exponential_mechanism(monkeypatch):
    """Empirical P(e1 | D) matches 1 / (1 + exp(-eps_sel / 2)) (binomial 5-sigma band)."""
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    eps_sel = plan_of(JLMarginClassifier(candidates="random", epsilon=1.0))["selection"]
    p = 1.0 / (1.0 + np.exp(-eps_sel / 2.0))
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
# Permutation invariance and keyed randomness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("split", ["none", "half"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("block_rows", [32768, 17])
def test_row_permutation_gives_bit_identical_fit(monkeypatch, split, n_classes, block_rows):
    monkeypatch.setattr(jla, "_BLOCK_ROWS", block_rows)  # 17: many blocks
    X, y, g = make_margin_data(40, 5, 6, seed=18)
    if n_classes == 3:
        y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    params = dict(split=split, n_components=2, jl_dim=5, n_candidates=16, n_directions=16,
                  epsilon=1.0, random_state=0)
    a = JLMarginClassifier(**params).fit(X, y, groups=g)
    perm = np.random.default_rng(1).permutation(len(y))
    b = JLMarginClassifier(**params).fit(X[perm], y[perm], groups=g[perm])
    assert_array_equal(a.embeddings_, b.embeddings_)
    assert_array_equal(a.cold_start_heads_, b.cold_start_heads_)
    assert_array_equal(a.heads_, b.heads_)
    assert_array_equal(a.jl_matrix_, b.jl_matrix_)
    assert np.ptp(a.heads_) > 0


def test_block_partition_changes_scores_only_by_rounding(monkeypatch):
    X, y, g = make_margin_data(40, 5, 6, seed=18)
    params = dict(n_components=2, jl_dim=5, n_candidates=16, n_directions=16, epsilon=1.0,
                  random_state=0, split="half")
    fits, scores = [], []
    for block_rows in (32768, 17):
        monkeypatch.setattr(jla, "_BLOCK_ROWS", block_rows)
        calls = _capture_selection(monkeypatch)
        fits.append(JLMarginClassifier(**params).fit(X, y, groups=g))
        scores.append(calls[0][0])
    assert_allclose(scores[0], scores[1], rtol=0, atol=1e-12)
    assert_array_equal(fits[0].heads_, fits[1].heads_)


def _score_rows(X, y, g, key):
    """Each user's S^0 rows (as a set of row contents) under split="half"."""
    index = UserIndex.from_groups(g)
    Y = np.where(y == "pos", 1.0, -1.0)[:, None]
    executor = LocalExecutor(jla.clipped_blocks(X, Y, index, 1.0, max_rows=7))
    executor.map(ms.prepare_block, ms.Prepare(np.eye(X.shape[1]), key, "half"))
    out = {}
    for block, state in zip(executor.blocks, executor.states):
        rows = state.score.take(state.score.X)
        for u, user in enumerate(block.users):
            part = rows[state.score.offsets[u]:state.score.offsets[u + 1]]
            out[user] = {tuple(r) for r in part}
    return out


def test_split_of_a_user_does_not_depend_on_other_users():
    m = [3, 4, 5, 6, 7]
    X, y, g = make_margin_data(5, 7, 4, seed=19)
    keep = np.arange(len(g)) % 7 < np.repeat(m, 7)
    X, y, g = X[keep], y[keep], g[keep]
    key = FitRandomness(3).key
    first = _score_rows(X, y, g, key)
    assert [len(first[u]) for u in range(5)] == [2, 2, 3, 3, 4]  # ceil(m/2), <= m - 1
    # replace user 1 (40 rows), add users 7 and -2, relabel user 4 -> 40
    rng = np.random.default_rng(0)
    X2 = np.concatenate([X[g != 1], rng.standard_normal((60, 4))])
    y2 = np.concatenate([y[g != 1], np.where(rng.random(60) < 0.5, "pos", "neg")])
    g2 = np.concatenate([np.where(g[g != 1] == 4, 40, g[g != 1]),
                         np.repeat([1, 7, -2], [40, 10, 10])])
    second = _score_rows(X2, y2, g2, key)
    for u in (0, 2, 3):
        assert second[u] == first[u]
    assert first[1] != second[1]
    # a relabelled user keeps its rows but its split is a function of its new id
    assert len(second[40]) == len(first[4])


def test_half_split_users_with_one_row_get_the_cold_start_head():
    X, y, g = make_margin_data(12, 4, 6, seed=35)
    keep = (g != 3) | (np.arange(len(g)) % 4 == 0)        # user 3 keeps one row
    clf = JLMarginClassifier(random_state=0, split="half", **FAST)
    clf.fit(X[keep], y[keep], groups=g[keep])
    assert_array_equal(clf.heads_[3], clf.cold_start_heads_)


def test_public_randomness_does_not_depend_on_the_data():
    X, y, g = make_margin_data(20, 4, 6, seed=36)
    params = dict(random_state=4, n_components=3, jl_dim=5, n_directions=8)
    a = JLMarginClassifier(**params).fit(X, y, groups=g)
    b = JLMarginClassifier(**params).fit(X[:30] * 2, y[:30], groups=g[:30])
    assert_array_equal(a.jl_matrix_, b.jl_matrix_)
    assert_array_equal(a._directions, b._directions)


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


def test_decision_function_is_inner_product_with_personal_weights():
    X, y, g = make_margin_data(20, 4, 6, seed=22)
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X, y, groups=g)
    dec = clf.decision_function(X, groups=g)
    codes = np.searchsorted(clf.user_ids_, g)
    want = np.einsum("nd,dk,nk->n", X, clf.embeddings_[0], clf.heads_[codes, 0])
    assert_allclose(dec, want, rtol=1e-12, atol=1e-12)
    assert_array_equal(clf.predict(X, groups=g), clf.classes_[(dec > 0).astype(int)])
    assert np.all(np.linalg.norm(clf.heads_, axis=-1) <= clf.head_bound * (1 + 1e-12))


def test_heads_are_the_local_fit_on_each_users_rows():
    """heads_ from fit equal the local head fit (Alg. 3, line 6) on the user's rows."""
    X, y, g = make_margin_data(20, 5, 6, seed=37)
    clf = JLMarginClassifier(random_state=0, **{**FAST, "n_components": 2, "jl_dim": 5,
                                                "n_directions": 16}).fit(X, y, groups=g)
    yy = np.where(y == "pos", 1.0, -1.0)
    F = clip_by_norm(X, 1.0) @ clf.embeddings_[0]
    want = reference_heads(F, yy, g, 20, clf._directions, 1.0, clf.margin)
    assert_allclose(clf.heads_[:, 0], want, rtol=0, atol=1e-12)


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
    assert_array_equal(clf.heads_[15:], local["heads_"])


def test_personalize_known_users_reproduces_the_fitted_heads():
    """personalize runs the same head block function as fit (split="none")."""
    X, y, g = make_margin_data(25, 5, 6, seed=38)
    y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    clf = JLMarginClassifier(random_state=0, **FAST).fit(X, y, groups=g)
    heads = clf.heads_.copy()
    perm = np.random.default_rng(2).permutation(len(y))
    clf.personalize(X[perm], y[perm], groups=g[perm])
    assert_array_equal(clf.heads_, heads)


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
    for phase, total in (("subspace", 0.7), ("selection", 0.25), ("cold_start", 0.05)):
        vals = [shares[f"{phase}[{p}]"] for p in range(3)]
        assert_allclose(vals, total / 3, rtol=1e-12)
    plan = plan_of(clf, n_problems=3)
    assert_allclose(plan["selection[0]"], plan["selection[2]"], rtol=1e-12)


def test_random_candidates_are_pure_dp():
    X, y, g = make_margin_data(30, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, candidates="random", epsilon=1.0, delta=0.0,
                             **FAST).fit(X, y, groups=g)
    report = clf.privacy_report_
    assert report.delta_spent == 0.0
    assert {p.mechanism for p in report.phases} == {"exponential"}


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
    clf.personalize(X, y, groups=g)
    assert_array_equal(X, X0)
    assert_array_equal(y, y0)
    assert_array_equal(g, g0)


def test_float32_data_stay_float32_in_the_clipped_copy():
    X, y, g = make_margin_data(10, 4, 6, seed=39)
    Y = np.where(y == "pos", 1.0, -1.0)[:, None]
    blocks = jla.clipped_blocks(X.astype(np.float32) * 3, Y, UserIndex.from_groups(g), 1.0)
    assert blocks[0].X.dtype == np.float32
    assert np.linalg.norm(blocks[0].X, axis=1).max() <= 1 + 1e-6


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


def test_subspace_needs_positive_delta():
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    with pytest.raises(ValueError, match="delta > 0"):
        JLMarginClassifier(delta=0.0, **FAST).fit(X, y, groups=g)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_shares_must_leave_a_positive_selection_share(n_classes):
    """0.7 + 0.3 split over 3 problems sums to 0.9999999999999999 in floating point."""
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    if n_classes == 3:
        y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    clf = JLMarginClassifier(subspace_share=0.7, cold_start_share=0.3, **FAST)
    with pytest.raises(ValueError, match="subspace_share \\+ cold_start_share must be < 1"):
        clf.fit(X, y, groups=g)
    assert not hasattr(clf, "embeddings_")


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
    assert jlc.auto_jl_dim(100, 1000, 2, radius=1.0, head_bound=1.0, margin=0.5) == \
        math.ceil(math.log(100 / 0.05) / 0.25)
    assert jlc.auto_jl_dim(100, 20, 2, radius=1.0, head_bound=1.0, margin=0.1) == 20
    assert jlc.auto_jl_dim(100, 5000, 2, radius=1.0, head_bound=1.0, margin=0.01) == 256
    assert jlc.auto_jl_dim(100, 1, 2, radius=1.0, head_bound=1.0, margin=0.1) == 2
    # r^2 overflows: the cap applies (``radius**2`` raised OverflowError)
    assert jlc.auto_jl_dim(100, 5000, 2, radius=1e300, head_bound=1.0, margin=0.1) == 256


def test_huge_clip_norm_fits():
    X, y, g = make_margin_data(10, 3, 6, seed=40)
    clf = JLMarginClassifier(clip_norm=1e300, random_state=0, n_candidates=8)
    assert clf.fit(X * 1e299, y, groups=g).jl_dim_ == 6
