"""Tests of JLMarginClassifier (Snedeker, Zhou & Bassily 2025, Alg. 3)."""

import contextlib
import io
import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.utils._param_validation import InvalidParameterError

from skdpp.exceptions import PrivacyLeakWarning
from skdpp.linear_model._algorithms import jl_margin as jla
from skdpp.linear_model._algorithms import jl_margin as jlc
from skdpp.linear_model import _labels as labels_mod
from skdpp.linear_model._algorithms import jl_kernels as ms
from skdpp.linear_model._jl_margin import JLMarginClassifier
from skdpp.privacy import _product as product
from skdpp.privacy import clip_by_norm, mechanisms, unit_rows
from skdpp.privacy._quantile import cumulative_counts
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


# White-box settings: a given clip radius and label set, no intercept (the
# releases then see clip(x, 1) exactly as the loop references) and a fixed
# margin (the references' threshold 0.1; the default "auto" is rho -> 0+).
FAST = dict(n_components=1, jl_dim=4, n_candidates=16, n_directions=8, clip_norm=1.0,
            classes=["neg", "pos"], fit_intercept=False, margin=0.1)
# The defaults' releases (private label set, auto clip radius, intercepts), small.
SMALL = dict(n_components=1, jl_dim=4, n_candidates=16, n_directions=8)


def public_draws(clf, n_features, n_problems=1):
    """The public randomness a fit with ``clf``'s int random_state drew (in order)."""
    rng = FitRandomness(clf.random_state).public
    M = jlc.jl_matrix(clf.jl_dim_, n_features, rng)
    dirs = jlc.direction_grid(clf.n_components, clf.n_directions, rng)
    pert = rng.standard_normal((n_problems, clf.n_candidates, clf.jl_dim_, clf.n_components))
    return M, dirs, pert


def plan_of(clf):
    # the fitted plan: clip_share="auto" depends on the (public) number of users
    return clf._budget_plan({"n_users": clf.n_users_}).calibrate()


def labelled_users(n_users=40, n_rows=5, n_features=6, seed=0, n_classes=2):
    X, y, g = make_margin_data(n_users, n_rows, n_features, seed=seed)
    if n_classes == 3:
        y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    return X, y, g


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


@pytest.mark.parametrize("n_cand", [6, 1])
@pytest.mark.parametrize("cap,step", [(255, 2**17), (3, 2**17), (1, 7), (4, 64), (2, 1)])
def test_grid_counts_in_pieces_and_steps_match_reference(monkeypatch, cap, step, n_cand):
    """The direction-grid counts (bytes of 64-bit words per piece of <= CAP rows,
    cache-sized steps, users with more rows than CAP summed per piece) equal the
    loop reference, for users with 0, 1 and many rows and a grid size that is
    not a multiple of 8."""
    rng = np.random.RandomState(43)
    sizes = np.array([0, 1, 2, 9, 1, 30, 0, 5, 17, 1])
    codes = np.repeat(np.arange(sizes.size), sizes)
    Z = rng.randn(codes.size, 4) * rng.uniform(0.01, 1.0, size=(codes.size, 1))
    y = np.where(rng.rand(codes.size) < 0.5, -1.0, 1.0)
    cands = jlc.random_candidates(rng.randn(6, 4, 3))[:n_cand]
    dirs = jlc.direction_grid(3, 13, np.random.default_rng(43))
    want = reference_user_losses(Z, y, codes, sizes.size, cands, dirs, 0.05)
    full = block_losses(Z, y, codes, sizes.size, cands, dirs, 0.05)
    monkeypatch.setattr(ms._GridCounter, "CAP", cap)
    monkeypatch.setattr(ms, "_GRID_STEP_ELEMENTS", step)
    got = block_losses(Z, y, codes, sizes.size, cands, dirs, 0.05)
    assert_allclose(got, want, rtol=0, atol=1e-12)
    assert_array_equal(got, full)


def test_grid_counts_of_a_user_with_more_than_255_rows():
    """Byte counters cannot hold 256: a user with 600 rows is counted in pieces."""
    rng = np.random.RandomState(44)
    codes = np.r_[np.zeros(600, dtype=int), np.ones(3, dtype=int)]
    Z = rng.randn(codes.size, 3)
    y = np.ones(codes.size)
    cands = jlc.random_candidates(rng.randn(2, 3, 3))
    dirs = jlc.direction_grid(3, 8, np.random.default_rng(44))
    for threshold in (-1e9, 0.0, 1e9):  # every row wins / about half / every row loses
        got = block_losses(Z, y, codes, 2, cands, dirs, threshold)
        want = reference_user_losses(Z, y, codes, 2, cands, dirs, threshold)
        assert_allclose(got, want, rtol=0, atol=1e-12)


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
            F = Zs @ cands[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            losses = ms.candidate_user_losses(seg, ys[:, None] * Zs, cands, dirs, 0.1)
            pop = ms.direction_user_losses(seg, yF, dirs, 0.1)
            units = ms.subspace_contributions(seg, ys[:, None] * Zs)
            Xc = ms.finite_rows(Zs)
            rms = ms.user_rms_norms(seg, Xc)
            heads, b, ok = ms.logistic_heads(seg, F, ys, prior_bias=0.3,
                                             ridge=1.0, fit_intercept=True)
            heads2, b2, ok2 = ms.intercept_heads(seg, F, ys, prior_bias=0.3, ridge=1.0)
        assert np.all(np.isfinite(heads2[ok2])) and np.all(np.isfinite(b2[ok2])), trial
        for terms in (losses, pop):
            assert np.all((terms >= 0) & (terms <= 1)), trial
        norms = np.linalg.norm(units, axis=1)
        assert np.all((np.abs(norms - 1) < 1e-12) | (norms == 0)), trial
        assert np.all(np.isfinite(Xc)), trial
        assert np.all((rms >= 0) | np.isnan(rms)), trial
        assert np.all(np.isfinite(heads[ok])) and np.all(np.isfinite(b[ok])), trial


def test_cold_start_scores_match_loop_reference():
    rng = np.random.RandomState(40)
    n_users = 9
    codes = rng.randint(0, n_users - 1, size=60)          # user 8 has no rows
    F = rng.randn(60, 2)
    y = np.where(rng.rand(60) < 0.5, -1.0, 1.0)
    dirs = jlc.direction_grid(2, 16, None)
    seg, Fs, ys = segments(codes, F, y, n_users=n_users)
    want = np.array([[np.mean(y[codes == i] * (F[codes == i] @ u) <= 0.15) for u in dirs]
                     for i in range(8)] + [[0.0] * len(dirs)])
    got = ms.direction_user_losses(seg, ys[:, None] * Fs, dirs, 0.15)
    assert_allclose(got, want, rtol=0, atol=1e-12)


def test_logistic_heads_minimise_the_stated_objective():
    """Each head minimises sum_j log(1 + exp(-y_j f_j)) + (lam/8) mean_j (f_j - b0)^2."""
    from scipy.optimize import minimize

    rng = np.random.RandomState(3)
    n_users, lam, b0 = 5, 2.0, 0.4
    codes = np.repeat(np.arange(n_users), [3, 6, 10, 25, 2])
    F = rng.randn(codes.size, 2) * 3.0 + 5.0
    y = np.where(rng.rand(codes.size) < 0.6, 1.0, -1.0)
    seg, Fs, ys = segments(codes, F, y, n_users=n_users)
    heads, b, ok = ms.logistic_heads(seg, Fs, ys, prior_bias=b0, ridge=lam,
                                     fit_intercept=True)
    assert ok.all()
    for i in range(n_users):
        Fi, yi = F[codes == i], y[codes == i]

        def obj(t):
            f = Fi @ t[:2] + t[2]
            return np.sum(np.logaddexp(0, -yi * f)) + lam / 8 * np.mean((f - b0) ** 2)

        best = minimize(obj, np.array([0.0, 0.0, b0]), method="BFGS", tol=1e-12)
        assert obj(np.r_[heads[i], b[i]]) <= best.fun + 1e-5, i


def test_logistic_heads_are_scale_and_shift_equivariant():
    rng = np.random.RandomState(4)
    codes = np.repeat(np.arange(4), [4, 7, 12, 3])
    F = rng.randn(codes.size, 2)
    y = np.where(rng.rand(codes.size) < 0.5, 1.0, -1.0)
    seg, Fs, ys = segments(codes, F, y, n_users=4)
    h1, b1, _ = ms.logistic_heads(seg, Fs, ys, prior_bias=0.2, ridge=1.0, fit_intercept=True)
    h2, b2, _ = ms.logistic_heads(seg, 1000.0 * Fs + 1e4, ys, prior_bias=0.2, ridge=1.0,
                                  fit_intercept=True)
    f1 = np.einsum("rk,rk->r", Fs, h1[seg.row_user]) + b1[seg.row_user]
    f2 = np.einsum("rk,rk->r", 1000.0 * Fs + 1e4, h2[seg.row_user]) + b2[seg.row_user]
    assert_allclose(f2, f1, rtol=1e-6, atol=1e-6)


def _logistic_users(seed, scale, *, bias=0.0, signal=True, n_users=200, m=10):
    """A block of ``n_users`` users with ``m`` rows each: 2 Gaussian features and labels
    of a logistic model with per-user slopes ``N(0, scale^2)`` (0 where not ``signal``)
    and intercepts ``bias`` (scalars or per user)."""
    rng = np.random.RandomState(seed)
    codes = np.repeat(np.arange(n_users), m)
    F = rng.randn(codes.size, 2)
    w = rng.randn(n_users, 2) * scale
    on = np.broadcast_to(signal, (n_users,))[codes]
    f = np.where(on, np.einsum("rk,rk->r", F, w[codes]), 0.0) \
        + np.broadcast_to(bias, (n_users,))[codes]
    y = np.where(rng.rand(codes.size) < 1 / (1 + np.exp(-f)), 1.0, -1.0)
    return segments(codes, F, y, n_users=n_users)


def test_intercept_heads_keep_a_bias_only_where_the_rows_call_for_one():
    """A user keeps its intercept iff it lowers its log-loss by > _INTERCEPT_GAIN."""
    n_users = 200
    bias = np.where(np.arange(n_users) < n_users // 2, 0.0, 4.0)   # half biased
    seg, Fs, ys = _logistic_users(5, 3.0, bias=bias, n_users=n_users)
    v1, b1, _ = ms.logistic_heads(seg, Fs, ys, prior_bias=0.0, ridge=1.0, fit_intercept=True)
    v0, _, _ = ms.logistic_heads(seg, Fs, ys, prior_bias=0.0, ridge=1.0, fit_intercept=False)
    v, b, ok = ms.intercept_heads(seg, Fs, ys, prior_bias=0.0, ridge=1.0)
    assert ok.all()
    kept = b != 0
    loss = [seg.segment_sum(np.logaddexp(0, -ys * (np.einsum("rk,rk->r", Fs, h[seg.row_user])
                                                     + c[seg.row_user])))
            for h, c in ((v0, np.zeros(n_users)), (v1, b1))]
    assert_array_equal(kept, loss[0] - loss[1] > ms._INTERCEPT_GAIN)
    assert_array_equal(v[kept], v1[kept])
    assert_array_equal(v[~kept], v0[~kept])
    assert_array_equal(b[kept], b1[kept])
    # most bias-free users drop the intercept, most biased users keep it
    assert kept[: n_users // 2].mean() < 0.25 and kept[n_users // 2:].mean() > 0.5


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_loo_log_loss_tracks_refits_without_each_row(fit_intercept):
    """Approximate leave-one-out loss: above the training loss, near exact refits."""
    rng = np.random.RandomState(6)
    n_users, m = 6, 9
    codes = np.repeat(np.arange(n_users), m)
    F = rng.randn(codes.size, 2)
    w = rng.randn(n_users, 2)
    f = np.einsum("rk,rk->r", F, w[codes])
    y = np.where(rng.rand(codes.size) < 1 / (1 + np.exp(-f)), 1.0, -1.0)
    seg, Fs, ys = segments(codes, F, y, n_users=n_users)
    kw = dict(prior_bias=0.3, ridge=1.0, fit_intercept=fit_intercept)
    v, b, ok, loo = ms.logistic_heads(seg, Fs, ys, loo=True, **kw)
    assert ok.all()
    f = np.einsum("rk,rk->r", Fs, v[seg.row_user]) + b[seg.row_user]
    train = seg.segment_sum(np.logaddexp(0, -ys * f))
    exact = np.zeros(n_users)
    for j in range(ys.size):  # refit without row j; score row j
        rest = np.arange(ys.size) != j
        seg2, F2, y2 = segments(seg.row_user[rest], Fs[rest], ys[rest], n_users=n_users)
        v2, b2, _ = ms.logistic_heads(seg2, F2, y2, **kw)
        u = seg.row_user[j]
        exact[u] += np.logaddexp(0, -ys[j] * (Fs[j] @ v2[u] + b2[u]))
    assert np.all(loo > train)
    assert_allclose(loo, exact, rtol=0.3)


def test_intercept_only_heads_match_the_featureless_logistic_fit():
    """The label-count shortcut is logistic_heads with zero features (users without
    rows included)."""
    rng = np.random.RandomState(8)
    codes = np.repeat(np.arange(50), rng.randint(1, 20, 50))
    y = np.where(rng.rand(codes.size) < 0.7, 1.0, -1.0)
    seg, ys = segments(codes, y, n_users=55)
    _, b1, ok1, loo1 = ms.logistic_heads(seg, np.zeros((ys.size, 0)), ys,
                                         prior_bias=0.4, ridge=3.0, fit_intercept=True,
                                         loo=True)
    b2, ok2, loo2 = ms.intercept_only_heads(seg, ys, prior_bias=0.4, ridge=3.0)
    assert_array_equal(ok2, ok1)
    assert not ok2[50:].any()
    assert_allclose(b2, b1, rtol=1e-12, atol=1e-12)
    assert_allclose(loo2[ok2], loo1[ok1], rtol=1e-12)


def test_personal_heads_drop_slopes_fitted_to_noise():
    """A user keeps its slope iff it lowers the approximate leave-one-out loss."""
    n_users = 200
    signal = np.arange(n_users) < n_users // 2        # the other half: labels are noise
    seg, Fs, ys = _logistic_users(7, 4.0, signal=signal, n_users=n_users)
    v, b, ok = ms.personal_heads(seg, Fs, ys, prior_bias=0.0, ridge=1.0)
    assert ok.all()
    dropped = np.all(v == 0, axis=1)
    assert dropped[signal].mean() < 0.2 and dropped[~signal].mean() > 0.5
    kept = ms.intercept_heads(seg, Fs, ys, prior_bias=0.0, ridge=1.0)
    assert_array_equal(v[~dropped], kept[0][~dropped])
    assert_array_equal(b[~dropped], kept[1][~dropped])
    b0, _, _ = ms.intercept_only_heads(seg, ys, prior_bias=0.0, ridge=1.0)
    assert_array_equal(b[dropped], b0[dropped])  # the intercept-only head


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
    M, dirs, pert = public_draws(clf, 6)
    cands = jlc.random_candidates(pert[0])
    Z = clip_by_norm(X, 1.0) @ M.T
    yy = np.where(y == "pos", 1.0, -1.0)
    ref = -reference_user_losses(Z, yy, g, 10, cands, dirs, 0.1).sum(axis=1) / 10
    assert_allclose(calls[0][0], ref, rtol=0, atol=1e-12)
    assert calls[0][2] == pytest.approx(plan_of(clf)["selection"], rel=1e-12)


def test_epsilon_inf_selects_best_scoring_candidate():
    X, y, g = make_margin_data(15, 4, 6, seed=4)
    clf = JLMarginClassifier(candidates="random", epsilon=np.inf, random_state=5,
                             **{**FAST, "n_candidates": 20}).fit(X, y, groups=g)
    M, dirs, pert = public_draws(clf, 6)
    cands = jlc.random_candidates(pert[0])
    Z = clip_by_norm(X, 1.0) @ M.T
    yy = np.where(y == "pos", 1.0, -1.0)
    ref = -reference_user_losses(Z, yy, g, 15, cands, dirs, 0.1).sum(axis=1)
    embeddings = M.T @ cands                 # (C, d, k)
    selected = [c for c in range(20) if np.array_equal(embeddings[c], clf.embeddings_[0])]
    assert len(selected) == 1
    assert ref[selected[0]] == ref.max()
    assert np.ptp(ref) > 0


def _block_scores(X, y, g, n_users, M, cands, dirs, threshold):
    """The score vector f of a dataset, through the fit's block functions."""
    executor = LocalExecutor(make_blocks(X, y, UserIndex.from_groups(g), max_rows=5,
                                         row_keys=ms.row_keys(X, y)))
    executor.map(ms.prepare_block, ms.Prepare(np.array(["neg", "pos"]), FitRandomness(0).key,
                                              False))
    executor.map(ms.project_block, ms.Project(M, 1.0))
    losses = executor.map(ms.candidate_scores_block, ms.Scores(0, cands, dirs, threshold))
    return -losses / n_users


def test_block_state_holds_no_copy_of_the_rows():
    """The state keeps labels and indices; the rows the releases see and ``Z = M clip(x, r)``
    are recomputed from the block's rows (no n_rows x d array kept for the fit)."""
    X, y, g = make_margin_data(30, 6, 40, seed=9)
    X[g == 4] *= 1e3  # rows above the clip radius
    M = jlc.jl_matrix(40, 40, np.random.default_rng(9))
    executor = LocalExecutor(make_blocks(X, y, UserIndex.from_groups(g), max_rows=50,
                                         row_keys=ms.row_keys(X, y)))
    executor.map(ms.prepare_block, ms.Prepare(np.array(["neg", "pos"]), FitRandomness(0).key,
                                              False))
    executor.map(ms.project_block, ms.Project(M, 1.0))
    for block, state in zip(executor.blocks, executor.states):
        arrays = [v for v in vars(state).values() if isinstance(v, np.ndarray)]
        assert all(a.ndim < 2 or a.shape[1] < X.shape[1] for a in arrays)
        Xc = ms.finite_rows(state.score.take(X))
        assert_array_equal(state.Xc, Xc)
        assert_array_equal(state.Z, clip_by_norm(Xc, 1.0) @ M.T)


@pytest.mark.parametrize("replacement", ["huge", "many_rows", "one_row", "zeros"])
def test_log_probabilities_change_by_at_most_epsilon(replacement):
    """Exact check on a small instance: scores on D and D' with the same candidates."""
    X, y, g = make_margin_data(8, 3, 5, seed=6)
    name_data = {name: (X2, y2, g2) for name, X2, y2, g2 in
                 adversarial_neighbours(X, y, g, user=3, n_rows=200)}
    X2, y2, g2 = name_data[replacement]
    rng = np.random.default_rng(7)
    M = jlc.jl_matrix(3, 5, rng)
    dirs = jlc.direction_grid(2, 8, rng)
    cands = jlc.random_candidates(rng.standard_normal((12, 3, 2)))
    eps = 1.3

    def logprobs(X_, y_, g_):
        scores = _block_scores(X_, y_, g_, 8, M, cands, dirs, 0.1)
        p = mechanisms.exponential_mechanism_probabilities(
            scores, sensitivity=jla.score_sensitivity(8), epsilon=eps)
        return np.log(p)

    diff = np.abs(logprobs(X, y, g) - logprobs(X2, y2, g2))
    assert diff.max() <= eps * (1 + 1e-9)


# --------------------------------------------------------------------------- #
# Product exponential mechanism (skdpp.privacy._product)
# --------------------------------------------------------------------------- #
def _product_log_probs(monkeypatch, scores, epsilon):
    """log P(c_1..c_P) of product_exponential, from the parameters it passes."""
    from skdpp.privacy import BudgetPlan, Releaser

    seen = []
    real = mechanisms.exponential_mechanism

    def spy(s, *, sensitivity, epsilon, rng):
        seen.append(mechanisms.exponential_mechanism_probabilities(
            s, sensitivity=sensitivity, epsilon=epsilon))
        return real(s, sensitivity=sensitivity, epsilon=epsilon, rng=rng)

    monkeypatch.setattr(mechanisms, "exponential_mechanism", spy)
    plan = BudgetPlan(epsilon, 0.0)
    plan.add_rest("selection", mechanism="exponential")
    release = Releaser(plan, np.random.default_rng(0))
    product.product_exponential(release, "selection", scores, sensitivity=1.0)
    grids = np.meshgrid(*[np.log(p) for p in seen], indexing="ij")
    return sum(grids), release


def _product_exceeds_epsilon(monkeypatch, epsilon=1.0):
    rng = np.random.default_rng(5)
    scores = rng.uniform(0, 3, size=(3, 4))
    worst = 0.0
    for trial in range(50):  # neighbours: every score moves by at most 1
        shift = rng.choice([-1.0, 1.0], size=scores.shape)
        a, release = _product_log_probs(monkeypatch, scores, epsilon)
        b, _ = _product_log_probs(monkeypatch, scores + shift, epsilon)
        worst = max(worst, float(np.abs(a - b).max()))
    return worst > epsilon * (1 + 1e-9), release


def test_product_exponential_is_epsilon_dp_and_charged_once(monkeypatch):
    exceeds, release = _product_exceeds_epsilon(monkeypatch)
    assert not exceeds
    ledger = release.accountant.ledger
    assert len(ledger) == 1
    assert release.report(n_users=10, released=("x",), local=()).epsilon_spent == \
        pytest.approx(1.0, rel=1e-9)


def test_broken_product_sensitivity_is_caught(monkeypatch):
    """Each factor at the per-problem sensitivity (not P times it) is P-times too loose."""
    monkeypatch.setattr(product, "product_sensitivity", lambda s, p: float(s))
    exceeds, _ = _product_exceeds_epsilon(monkeypatch)
    assert exceeds


# --------------------------------------------------------------------------- #
# Privacy harness: sensitivities, observables, broken variants, audit
# --------------------------------------------------------------------------- #
def _fit_on(**params):
    def fit(X, y, g):
        JLMarginClassifier(random_state=0, **{**SMALL, **params}).fit(X, y, groups=g)
    return fit


# enough users that the label selection publishes both labels at epsilon=1
_LABELS = dict(epsilon=4.0, budget_shares={"labels": 0.3, "subspace": 0.4})


@pytest.mark.parametrize("params", [
    dict(candidates="subspace"),
    dict(candidates="random"),
    dict(candidates="subspace", personal_rows="holdout", fit_intercept=False),
])
def test_sensitivity_harness_adversarial_neighbours_defaults(params):
    """Every release of the default fit (labels, clip, subspace, selection, cold start)."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(**_LABELS, **params)
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, n_rows=500):
        ratios = assert_sensitivity(fit, (X, y, g), (X2, y2, g2))
        assert max(ratios) <= 1 + 1e-9, name
        assert len(ratios) >= 1 + 6 + 1 + 1, name  # labels, clip, selection, cold


def test_sensitivity_harness_multiclass():
    X, y, g = labelled_users(60, 6, 6, seed=9, n_classes=3)
    fit = _fit_on(**_LABELS, max_classes_per_user=3)
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=4, n_rows=300):
        assert_sensitivity(fit, (X, y, g), (X2, y2, g2))


def test_sensitivity_harness_label_swap():
    """The replaced user holds the other label only: sqrt(2) of the label counts."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    mine = g == 3
    y2 = y.copy()
    y2[mine] = "neg"
    y[mine] = "pos"
    ratios = assert_sensitivity(_fit_on(**_LABELS), (X, y, g), (X, y2, g))
    assert max(ratios) <= 1 + 1e-9


@pytest.mark.parametrize("params", [
    dict(),
    dict(clip_norm=1e300),
    dict(personal_rows="holdout", n_components=2, jl_dim=5, n_directions=16),
    dict(n_components=3, jl_dim=5, candidates="random"),
    dict(epsilon=np.inf, clip_norm=None),
])
def test_same_observables_on_adversarial_neighbours(params):
    """No warning, printed line or exception depends on one user's data (verbose on),
    even for a user whose values are 1e300 or the largest float."""
    X, y, g = labelled_users(40, 4, 6, seed=15)
    fit = _fit_on(verbose=1, **{**_LABELS, **params})
    for scale in (1e300, 1.7e308, 1e-300):
        for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=2, scale=scale,
                                                       n_rows=500):
            observed = assert_same_observables(fit, (X, y, g), (X2, y2, g2))
            assert "[JLMarginClassifier]" in observed["stdout"], name


def test_verbose_prints_only_public_values():
    """Two unrelated datasets with the same public shape print the same lines."""
    a = labelled_users(40, 4, 6, seed=16)
    b = labelled_users(40, 7, 6, seed=17)
    b = (b[0] * 3.0, b[1], b[2])
    printed = []
    for data in (a, b):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            JLMarginClassifier(random_state=0, verbose=1, epsilon=np.inf, **SMALL).fit(
                data[0], data[1], groups=data[2])
        printed.append(out.getvalue())
    # the released values (clip radius) are public; everything else is the same
    lines = [[ln for ln in p.splitlines() if "clip radius" not in ln] for p in printed]
    assert lines[0] == lines[1]
    assert len(lines[0]) == 4


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


def test_subspace_noise_has_the_calibrated_scale():
    X, y, g = make_margin_data(30, 4, 50, seed=14)
    clf = JLMarginClassifier(random_state=0, **{**FAST, "jl_dim": 40, "n_candidates": 4},
                             epsilon=1.0)
    draws = record_noise(lambda: clf.fit(X, y, groups=g))
    assert len(draws) == 1
    draw = draws[0]
    assert draw["sensitivity"] == pytest.approx(np.sqrt(2.0), rel=1e-12)
    assert draw["scale"] == pytest.approx(plan_of(clf)["subspace"] * np.sqrt(2.0), rel=1e-12)
    noise = draw["noise"][0]
    assert_allclose(noise, noise.T, rtol=0, atol=0)
    upper = noise[np.triu_indices(40)]
    # 820 i.i.d. draws: the sample std is within 5 standard errors (~12 %)
    assert abs(upper.std() / draw["scale"] - 1) < 5 / np.sqrt(2 * upper.size)


def test_new_releases_have_their_stated_sensitivities():
    """labels sqrt(2 L), clip 1 per search step, cold start 1 (binary)."""
    X, y, g = labelled_users(40, 4, 6, seed=14)
    clf = JLMarginClassifier(random_state=0, candidates="random", **_LABELS,
                             **SMALL)
    draws = record_noise(lambda: clf.fit(X, y, groups=g))
    sens = [d["sensitivity"] for d in draws]
    assert sens == [2.0] + [1.0] * 6 + [1.0]
    plan = plan_of(clf)
    assert draws[0]["scale"] == pytest.approx(plan["labels"] * 2.0, rel=1e-12)
    assert draws[1]["scale"] == pytest.approx(plan["clip"], rel=1e-12)
    assert draws[-1]["scale"] == pytest.approx(plan["cold_start"], rel=1e-12)
    phases = [e.phase for e in clf.privacy_report_.ledger] \
        if hasattr(clf.privacy_report_, "ledger") else None
    names = {p.name for p in clf.privacy_report_.phases}
    assert {"labels", "clip", "selection", "cold_start"} <= names
    del phases


def _caught(fit, X, y, g, user, neighbours=None):
    pairs = neighbours if neighbours is not None else [
        (X2, y2, g2) for _, X2, y2, g2 in adversarial_neighbours(X, y, g, user=user,
                                                                 n_rows=500)]
    for X2, y2, g2 in pairs:
        try:
            assert_sensitivity(fit, (X, y, g), (X2, y2, g2))
        except AssertionError:
            return True
    return False


def test_broken_understated_score_sensitivity_is_caught(monkeypatch):
    X, y, g = make_margin_data(10, 4, 6, seed=10)
    fit = _fit_on(**{**FAST, "candidates": "random"})
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(jla, "score_sensitivity", lambda n: 0.5 / n)
    assert _caught(fit, X, y, g, user=1)


def test_broken_unbounded_user_terms_are_caught(monkeypatch):
    """Per-user loss *counts* instead of means: a user's term is no longer in [0, 1]."""
    X, y, g = make_margin_data(10, 4, 6, seed=11)
    real = ms.candidate_user_losses

    def counts_not_means(seg, *args, **kw):
        return real(seg, *args, **kw) * seg.counts

    fit = _fit_on(**{**FAST, "candidates": "random"})
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(ms, "candidate_user_losses", counts_not_means)
    assert _caught(fit, X, y, g, user=1)


def test_broken_subspace_without_normalisation_is_caught(monkeypatch):
    """Per-user sums not normalised and rows not clipped: unbounded contribution."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(**FAST)
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(ms, "clip_by_norm", lambda X_, c: np.array(X_))
    monkeypatch.setattr(ms, "subspace_contributions",
                        lambda seg, yZ: seg.segment_sum_wide(yZ) / seg.counts[:, None])
    assert _caught(fit, X, y, g, user=1)


def test_broken_per_row_subspace_contributions_are_caught(monkeypatch):
    """Per-row unit directions: a user with many rows contributes many times."""
    X, y, g = make_margin_data(10, 4, 6, seed=12)
    fit = _fit_on(**FAST)
    assert not _caught(fit, X, y, g, user=1)
    monkeypatch.setattr(ms, "subspace_contributions", lambda seg, yZ: unit_rows(yZ)[0])
    assert _caught(fit, X, y, g, user=1)


def test_broken_per_row_label_counts_are_caught(monkeypatch):
    """Counting rows instead of distinct users: many_rows moves a count by ~500."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(candidates="random", **_LABELS)
    assert not _caught(fit, X, y, g, user=2)

    def per_row(block, state, max_per_user):
        labels, codes = np.unique(np.asarray(block.take(block.y)), return_inverse=True)
        return labels_mod.LabelCounts(labels, np.bincount(codes).astype(float)), state

    monkeypatch.setattr(jla, "label_counts_block", per_row)
    assert _caught(fit, X, y, g, user=2)


def test_broken_understated_label_sensitivity_is_caught(monkeypatch):
    """Sensitivity 1 (one label per user): a user swapping its label moves by sqrt(2)."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    mine = g == 3
    y2 = y.copy()
    y[mine], y2[mine] = "pos", "neg"
    fit = _fit_on(candidates="random", **_LABELS)
    assert not _caught(fit, X, y, g, 3, neighbours=[(X, y2, g)])
    monkeypatch.setattr(labels_mod, "labels_sensitivity", lambda L: 1.0)
    assert _caught(fit, X, y, g, 3, neighbours=[(X, y2, g)])


def test_broken_per_row_clip_statistic_is_caught(monkeypatch):
    """The clip quantile over rows instead of users: many_rows moves counts by ~500."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(candidates="random", **_LABELS)
    assert not _caught(fit, X, y, g, user=2)

    def per_row(block, state, grid):
        return cumulative_counts(np.linalg.norm(state.Xc, axis=1), grid), state

    monkeypatch.setattr(jla, "clip_statistic_block", per_row)
    assert _caught(fit, X, y, g, user=2)


def test_broken_cold_start_row_counts_are_caught(monkeypatch):
    """Positive row counts instead of per-user fractions: unbounded contribution."""
    X, y, g = labelled_users(40, 4, 6, seed=8)
    fit = _fit_on(candidates="random", **_LABELS)
    assert not _caught(fit, X, y, g, user=2)

    def counts(block, state, bc):
        return (state.Y > 0).sum(axis=0).astype(float), state

    monkeypatch.setattr(jla, "label_fractions_block", counts)
    assert _caught(fit, X, y, g, user=2)


def test_noise_off_is_caught_by_the_noise_scale_check():
    """With noise off no Gaussian draw has the calibrated scale (broken variant)."""
    X, y, g = labelled_users(40, 4, 6, seed=14)
    clf = JLMarginClassifier(random_state=0, **_LABELS, **SMALL)
    draws = record_noise(lambda: clf.fit(X, y, groups=g))
    assert all(d["scale"] > 0 for d in draws)
    with noise_off():
        a = JLMarginClassifier(random_state=0, **_LABELS, **SMALL).fit(
            X, y, groups=g)
    b = JLMarginClassifier(random_state=0, **{**_LABELS, "epsilon": np.inf}, **SMALL).fit(
        X, y, groups=g)
    assert a.clip_norm_ == b.clip_norm_


def _audit_setup(monkeypatch):
    """Two candidates e1, e2 (fixed public randomness); the canary user decides.

    Background users' rows are y (0.3, 0.3): every candidate separates them.
    The canary's rows are y (0.5, 0) in D (only e1 separates them) and
    y (0, 0.5) in D' (only e2): the scores move by exactly 1/n in opposite
    directions, so P(e1 | D) / P(e1 | D') = exp(eps_sel / 2).
    """
    monkeypatch.setattr(jla, "jl_matrix", lambda k, d, rng: np.eye(2))
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
    params = dict(FAST, candidates="random", n_components=1, jl_dim=2, n_candidates=2)

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
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    assert audit_epsilon_lower_bound(run, 300, alpha=0.01) <= 1.0


@pytest.mark.slow
def test_audit_catches_noise_off(monkeypatch):
    run = _audit_setup(monkeypatch)(epsilon=1.0)
    with noise_off():
        assert audit_epsilon_lower_bound(run, 300, alpha=0.01) > 1.0


# --------------------------------------------------------------------------- #
# Utility and scale-freeness
# --------------------------------------------------------------------------- #
def _mean_test_accuracy(seeds=(0, 1, 2), data_seed=20, **params):
    (X, y, g), (Xt, yt, gt) = make_margin_data(300, 10, 20, seed=data_seed, n_test=10)
    accs = [JLMarginClassifier(random_state=s, **{**dict(n_components=1, jl_dim=12,
                                                           n_candidates=64), **params})
            .fit(X, y, groups=g).score(Xt, yt, groups=gt) for s in seeds]
    return float(np.mean(accs))


def test_accuracy_rises_with_epsilon():
    low = _mean_test_accuracy(epsilon=0.02, classes=["neg", "pos"])
    mid = _mean_test_accuracy(epsilon=2.0)
    high = _mean_test_accuracy(epsilon=np.inf)
    assert low + 0.05 < mid <= high + 0.03
    assert high > 0.8


def test_subspace_candidates_beat_random_at_same_budget():
    sub = _mean_test_accuracy(candidates="subspace", epsilon=4.0, seeds=(0, 1))
    rnd = _mean_test_accuracy(candidates="random", epsilon=4.0, seeds=(0, 1))
    assert sub > rnd


def _biased_data(seed=0, n_users=200, n_rows=12):
    """Raw-looking data: a 0/1 column, a 'year' column, a per-user bias."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), n_rows)
    X = np.column_stack([rng.random((g.size, 3)) < 0.3,
                         rng.normal(1995, 10, g.size)]).astype(float)
    w = rng.standard_normal((n_users, 4)) * np.array([1, 1, 1, 0.1])
    bias = rng.normal(0.5, 1.0, n_users)
    f = np.einsum("nd,nd->n", X - [0.3, 0.3, 0.3, 1995], w[g]) + bias[g]
    y = rng.random(g.size) < 1 / (1 + np.exp(-2 * f))
    test = np.tile(np.arange(n_rows) >= n_rows - 3, n_users)
    return (X[~test], y[~test], g[~test]), (X[test], y[test], g[test])


@pytest.mark.parametrize("epsilon", [4.0, np.inf])
def test_scale_free_features_times_1000_and_shifted_year(epsilon):
    """Features x1000 or the year column + 1e4 barely move the accuracy (defaults)."""
    (X, y, g), (Xt, yt, gt) = _biased_data()
    params = dict(n_components=2, n_candidates=64, epsilon=epsilon, random_state=0)
    base = JLMarginClassifier(**params).fit(X, y, groups=g)
    acc = base.score(Xt, yt, groups=gt)
    shift = np.array([0, 0, 0, 1e4])
    for a, b in ((1000.0, 0.0), (1.0, shift)):
        clf = JLMarginClassifier(**params).fit(a * X + b, y, groups=g)
        assert abs(clf.score(a * Xt + b, yt, groups=gt) - acc) <= 0.03
        if a != 1.0:
            assert 300 < clf.clip_norm_ / base.clip_norm_ < 3000
    assert acc > 0.6


def test_intercepts_fit_per_user_biases():
    """With labels set by a per-user bias only, the personal biases carry them."""
    (X, y, g), (Xt, yt, gt) = _biased_data(seed=1)
    clf = JLMarginClassifier(n_components=1, n_candidates=16, epsilon=np.inf,
                             random_state=0).fit(X, y, groups=g)
    off = JLMarginClassifier(n_components=1, n_candidates=16, epsilon=np.inf,
                             fit_intercept=False, random_state=0).fit(X, y, groups=g)
    assert clf.score(Xt, yt, groups=gt) > off.score(Xt, yt, groups=gt)
    assert np.ptp(clf.intercepts_) > 0
    assert_array_equal(off.intercepts_, 0.0)


# --------------------------------------------------------------------------- #
# Permutation invariance and keyed randomness
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("rows", ["all", "holdout"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("block_rows", [32768, 17])
def test_row_permutation_gives_bit_identical_fit(monkeypatch, rows, n_classes, block_rows):
    monkeypatch.setattr(jla, "BLOCK_ROWS", block_rows)  # 17: many blocks
    X, y, g = labelled_users(60, 6, 6, seed=18, n_classes=n_classes)
    params = dict(personal_rows=rows, n_components=2, jl_dim=5, n_candidates=16,
                  n_directions=16, random_state=0, max_classes_per_user=3, **_LABELS)
    a = JLMarginClassifier(**params).fit(X, y, groups=g)
    perm = np.random.default_rng(1).permutation(len(y))
    b = JLMarginClassifier(**params).fit(X[perm], y[perm], groups=g[perm])
    assert_array_equal(a.classes_, b.classes_)
    assert a.clip_norm_ == b.clip_norm_
    for name in ("embeddings_", "cold_start_heads_", "cold_start_intercepts_", "heads_",
                 "intercepts_", "jl_matrix_"):
        assert_array_equal(getattr(a, name), getattr(b, name))
    assert np.ptp(a.heads_) > 0
    assert a.classes_.shape[0] == n_classes


def test_block_partition_changes_scores_only_by_rounding(monkeypatch):
    X, y, g = make_margin_data(40, 5, 6, seed=18)
    params = dict(FAST, n_components=2, jl_dim=5, n_directions=16, epsilon=1.0,
                  random_state=0, personal_rows="holdout")
    fits, scores = [], []
    for block_rows in (32768, 17):
        monkeypatch.setattr(jla, "BLOCK_ROWS", block_rows)
        calls = _capture_selection(monkeypatch)
        fits.append(JLMarginClassifier(**params).fit(X, y, groups=g))
        scores.append(calls[0][0])
    assert_allclose(scores[0], scores[1], rtol=0, atol=1e-12)
    assert_allclose(fits[0].embeddings_, fits[1].embeddings_, rtol=1e-9, atol=1e-12)
    # the heads' products X @ U are computed per block: BLAS rounding only
    assert_allclose(fits[0].heads_, fits[1].heads_, rtol=1e-9, atol=1e-12)


def _score_rows(X, y, g, key):
    """Each user's S^0 rows (as a set of row contents) under personal_rows="holdout"."""
    executor = LocalExecutor(make_blocks(X, y, UserIndex.from_groups(g), max_rows=7,
                                         row_keys=ms.row_keys(X, y)))
    executor.map(ms.prepare_block, ms.Prepare(np.array(["neg", "pos"]), key, True))
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
    rng = np.random.default_rng(0)
    X2 = np.concatenate([X[g != 1], rng.standard_normal((60, 4))])
    y2 = np.concatenate([y[g != 1], np.where(rng.random(60) < 0.5, "pos", "neg")])
    g2 = np.concatenate([np.where(g[g != 1] == 4, 40, g[g != 1]),
                         np.repeat([1, 7, -2], [40, 10, 10])])
    second = _score_rows(X2, y2, g2, key)
    for u in (0, 2, 3):
        assert second[u] == first[u]
    assert first[1] != second[1]
    assert len(second[40]) == len(first[4])


def test_holdout_users_with_one_row_get_the_cold_start_head():
    X, y, g = make_margin_data(12, 4, 6, seed=35)
    keep = (g != 3) | (np.arange(len(g)) % 4 == 0)        # user 3 keeps one row
    clf = JLMarginClassifier(random_state=0, personal_rows="holdout",
                             **{**FAST, "fit_intercept": True})
    clf.fit(X[keep], y[keep], groups=g[keep])
    assert_array_equal(clf.heads_[3], clf.cold_start_heads_)
    assert_array_equal(clf.intercepts_[3], clf.cold_start_intercepts_)


def test_public_randomness_does_not_depend_on_the_data():
    X, y, g = make_margin_data(20, 4, 6, seed=36)
    params = dict(random_state=4, n_components=3, jl_dim=5, n_directions=8,
                  classes=["neg", "pos"])
    a = JLMarginClassifier(**params).fit(X, y, groups=g)
    b = JLMarginClassifier(**params).fit(X[:30] * 2, y[:30], groups=g[:30])
    assert_array_equal(a.jl_matrix_, b.jl_matrix_)


# --------------------------------------------------------------------------- #
# Estimator behaviour
# --------------------------------------------------------------------------- #
def test_deterministic_given_random_state():
    X, y, g = labelled_users(40, 4, 6, seed=21)
    a = JLMarginClassifier(random_state=3, **_LABELS, **SMALL).fit(X, y, groups=g)
    b = JLMarginClassifier(random_state=3, **_LABELS, **SMALL).fit(X, y, groups=g)
    assert_array_equal(a.embeddings_, b.embeddings_)
    assert_array_equal(a.heads_, b.heads_)
    assert_array_equal(a.intercepts_, b.intercepts_)


def test_decision_function_is_inner_product_plus_bias():
    X, y, g = make_margin_data(20, 4, 6, seed=22)
    clf = JLMarginClassifier(random_state=0, **{**FAST, "fit_intercept": True}).fit(
        X, y, groups=g)
    dec = clf.decision_function(X, groups=g)
    codes = np.searchsorted(clf.user_ids_, g)
    want = np.einsum("nd,dk,nk->n", X, clf.embeddings_[0], clf.heads_[codes, 0]) \
        + clf.intercepts_[codes, 0]
    assert_allclose(dec, want, rtol=1e-12, atol=1e-12)
    assert_array_equal(clf.predict(X, groups=g), clf.classes_[(dec > 0).astype(int)])


def test_unseen_users_get_the_cold_start():
    X, y, g = make_margin_data(20, 4, 6, seed=23)
    for intercept in (False, True):
        clf = JLMarginClassifier(random_state=0, **{**FAST, "fit_intercept": intercept})
        clf.fit(X, y, groups=g)
        dec = clf.decision_function(X, groups=g + 1000)
        want = X @ clf.embeddings_[0] @ clf.cold_start_heads_[0] \
            + clf.cold_start_intercepts_[0]
        assert_allclose(dec, want, rtol=1e-12, atol=1e-12)


def test_personalize_adds_users_without_touching_the_release():
    X, y, g = labelled_users(40, 6, 6, seed=24)
    old = g < 30
    clf = JLMarginClassifier(random_state=0, **_LABELS, **SMALL).fit(X[old], y[old],
                                                                    groups=g[old])
    emb, report = clf.embeddings_.copy(), clf.privacy_report_
    clf.personalize(X[~old], y[~old], groups=g[~old])
    assert_array_equal(clf.embeddings_, emb)
    assert clf.privacy_report_ is report
    assert_array_equal(clf.user_ids_, np.arange(40))
    ref = JLMarginClassifier(random_state=0, **_LABELS, **SMALL).fit(X[old], y[old],
                                                                    groups=g[old])
    local = ref._fit_personal(X[~old], y[~old], UserIndex.from_groups(g[~old]))
    assert_array_equal(clf.heads_[30:], local["heads_"])
    assert_array_equal(clf.intercepts_[30:], local["intercepts_"])


def test_personalize_known_users_reproduces_the_fitted_heads():
    """personalize runs the same head block function as fit (personal_rows="all")."""
    X, y, g = labelled_users(60, 6, 6, seed=38, n_classes=3)
    clf = JLMarginClassifier(random_state=0, max_classes_per_user=3, **_LABELS,
                             **SMALL).fit(X, y, groups=g)
    heads, intercepts = clf.heads_.copy(), clf.intercepts_.copy()
    perm = np.random.default_rng(2).permutation(len(y))
    clf.personalize(X[perm], y[perm], groups=g[perm])
    assert_array_equal(clf.heads_, heads)
    assert_array_equal(clf.intercepts_, intercepts)


@pytest.mark.parametrize("labels", [("a", "b"), (0, 1), (-1, 1), (3, 7)])
def test_string_and_integer_labels(labels):
    X, y, g = make_margin_data(30, 6, 6, seed=25)
    y = np.where(y == "pos", labels[1], labels[0])
    clf = JLMarginClassifier(random_state=0, epsilon=np.inf, **SMALL).fit(X, y, groups=g)
    assert_array_equal(clf.classes_, np.sort(np.array(labels)))
    assert set(np.unique(clf.predict(X, groups=g))) <= set(labels)


def test_multiclass_one_vs_rest_releases_every_problem_in_one_phase():
    X, y, g = labelled_users(60, 6, 6, seed=26, n_classes=3)
    clf = JLMarginClassifier(random_state=0, max_classes_per_user=3, **_LABELS,
                             **SMALL).fit(X, y, groups=g)
    assert clf.embeddings_.shape == (3, 6, 1)
    assert clf.heads_.shape == (60, 3, 1)
    assert clf.intercepts_.shape == (60, 3)
    assert clf.decision_function(X, groups=g).shape == (len(y), 3)
    names = [p.name for p in clf.privacy_report_.phases]
    assert sorted(set(names)) == ["clip", "cold_start", "labels", "selection", "subspace"]


def test_label_selection_drops_rare_labels_and_is_charged():
    X, y, g = labelled_users(60, 5, 6, seed=27)
    y = y.astype(object)
    y[g == 5] = "rare"                      # one user holds "rare"
    clf = JLMarginClassifier(random_state=0, **_LABELS, **SMALL)
    clf.fit(X, y, groups=g)
    assert_array_equal(clf.classes_, ["neg", "pos"])
    report = clf.privacy_report_
    assert report.is_private
    assert "labels" in {p.name for p in report.phases}
    assert report.delta_spent <= 1e-6


def test_observed_classes_are_reported_not_covered():
    X, y, g = make_margin_data(30, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, classes="observed", **SMALL).fit(X, y, groups=g)
    assert not clf.privacy_report_.is_private
    assert "NOT FULLY PRIVATE" in str(clf.privacy_report_)
    given = JLMarginClassifier(random_state=0, classes=["neg", "pos"], **SMALL)
    given.fit(X, y, groups=g)
    assert given.privacy_report_.is_private
    assert "labels" not in {p.name for p in given.privacy_report_.phases}


def test_too_few_published_labels_fall_back_on_observed_labels_not_covered():
    """Few users at epsilon=1: the selection publishes < 2 labels (a DP outcome)."""
    X, y, g = make_margin_data(20, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, **SMALL)
    with pytest.warns(PrivacyLeakWarning, match="does NOT cover"):
        clf.fit(X, y, groups=g)
    assert_array_equal(clf.classes_, ["neg", "pos"])
    assert not clf.privacy_report_.is_private
    assert "NOT FULLY PRIVATE" in str(clf.privacy_report_)
    assert "labels" in {p.name for p in clf.privacy_report_.phases}


def test_privacy_leak_warnings_as_errors_make_the_fallback_fail():
    """The documented strict mode: no model that leaves its guarantee is returned."""
    X, y, g = make_margin_data(20, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        with pytest.raises(PrivacyLeakWarning, match="published [01] label"):
            clf.fit(X, y, groups=g)
    assert not hasattr(clf, "classes_") and not hasattr(clf, "privacy_report_")
    # a public label set is private, so strict mode lets it through
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        given = JLMarginClassifier(random_state=0, classes=["neg", "pos"], **SMALL)
        assert given.fit(X, y, groups=g).privacy_report_.is_private


def test_random_candidates_are_pure_dp():
    X, y, g = make_margin_data(30, 4, 6, seed=27)
    clf = JLMarginClassifier(random_state=0, candidates="random", epsilon=1.0, delta=0.0,
                             **FAST).fit(X, y, groups=g)
    report = clf.privacy_report_
    assert report.delta_spent == 0.0
    assert {p.mechanism for p in report.phases} == {"exponential"}


def test_given_classes_are_used_and_other_labels_are_negatives():
    X, y, g = make_margin_data(30, 4, 6, seed=28)
    clf = JLMarginClassifier(random_state=0, **{**FAST, "classes": ["neg", "pos", "zzz"]})
    clf.fit(X, y, groups=g)
    assert_array_equal(clf.classes_, ["neg", "pos", "zzz"])
    codes = labels_mod.label_codes(np.array(["pos", "other"]), np.array(["neg", "pos"]))
    assert_array_equal(labels_mod.binary_problems(codes, 2)[:, 0], [1.0, -1.0])
    clf.set_params(classes=["neg", "other"]).fit(X, y, groups=g)  # "pos" is a negative


def test_input_not_modified():
    X, y, g = labelled_users(40, 4, 6, seed=29)
    X0, y0, g0 = X.copy(), y.copy(), g.copy()
    clf = JLMarginClassifier(random_state=0, **_LABELS, **SMALL).fit(X * 10, y, groups=g)
    clf.fit(X, y, groups=g).predict(X, groups=g)
    clf.personalize(X, y, groups=g)
    assert_array_equal(X, X0)
    assert_array_equal(y, y0)
    assert_array_equal(g, g0)


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #
def test_one_class_raises():
    X, y, g = make_margin_data(10, 4, 6, seed=30)
    with pytest.raises(ValueError, match="2 classes"):
        JLMarginClassifier(**SMALL).fit(X, np.full(len(y), "pos"), groups=g)


def test_multiclass_raise_rejects_three_labels():
    X, y, g = make_margin_data(10, 3, 6, seed=31)
    y = np.where(np.arange(len(y)) % 3 == 0, "mid", y)
    with pytest.raises(ValueError, match="multiclass='raise'"):
        JLMarginClassifier(multiclass="raise", epsilon=np.inf, max_classes_per_user=3,
                           **SMALL).fit(X, y, groups=g)
    with pytest.raises(ValueError, match="multiclass='raise'"):
        JLMarginClassifier(multiclass="raise", classes=["mid", "neg", "pos"],
                           **SMALL).fit(X, y, groups=g)


@pytest.mark.parametrize("params", [dict(margin=0.0), dict(margin=-1.0),
                                    dict(n_candidates=0), dict(jl_dim=0),
                                    dict(clip_quantile=0.0), dict(budget_shares=0.5),
                                    dict(personal_ridge=-1.0), dict(personal_rows="half"),
                                    dict(epsilon=0.0), dict(delta=1.0)])
def test_invalid_parameters_raise(params):
    X, y, g = make_margin_data(10, 3, 6, seed=32)
    with pytest.raises(InvalidParameterError):
        JLMarginClassifier(**{**SMALL, **params}).fit(X, y, groups=g)


@pytest.mark.parametrize("params", [dict(), dict(candidates="random"),
                                    dict(candidates="random", fit_intercept=False),
                                    dict(candidates="random", fit_intercept=False,
                                         classes=["neg", "pos"])])
def test_gaussian_releases_need_positive_delta(params):
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    with pytest.raises(ValueError, match="delta > 0"):
        JLMarginClassifier(delta=0.0, **{**SMALL, **params}).fit(X, y, groups=g)


def test_shares_must_leave_a_positive_selection_share():
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    clf = JLMarginClassifier(budget_shares={"subspace": 0.7, "cold_start": 0.3}, **FAST)
    with pytest.raises(ValueError, match="subspace"):
        clf.fit(X, y, groups=g)
    assert not hasattr(clf, "embeddings_")


@pytest.mark.parametrize("shares, match", [({"clip": 1.0}, r"budget_shares\['clip'\]"),
                                           ({"selection": 0.5}, "not a phase"),
                                           ({"subspace": 0}, "must be in \\(0, 1\\)")])
def test_budget_shares_are_checked_by_phase_name(shares, match):
    X, y, g = make_margin_data(10, 3, 6, seed=33)
    clf = JLMarginClassifier(budget_shares=shares, **FAST)
    with pytest.raises(ValueError, match=match):
        clf.fit(X, y, groups=g)
    assert not hasattr(clf, "embeddings_")


def test_jl_dim_below_n_components_raises():
    X, y, g = make_margin_data(10, 3, 6, seed=36)
    with pytest.raises(ValueError, match="jl_dim=1 is smaller than n_components=2"):
        JLMarginClassifier(n_components=2, jl_dim=1).fit(X, y, groups=g)


def test_no_clipping_only_without_privacy():
    X, y, g = make_margin_data(10, 3, 6, seed=34)
    with pytest.raises(ValueError, match="clip_norm=None"):
        JLMarginClassifier(**{**FAST, "clip_norm": None}).fit(X, y, groups=g)
    clf = JLMarginClassifier(epsilon=np.inf, **{**FAST, "clip_norm": None}).fit(
        X * 5, y, groups=g)
    assert clf.score(X, y, groups=g) > 0.5


def test_auto_jl_dim_rule():
    # k' = ceil(log(n / 0.05) / margin^2), clipped to [k, min(d, 256)]
    assert jlc.auto_jl_dim(100, 1000, 2, margin=0.5) == math.ceil(math.log(100 / 0.05) / 0.25)
    assert jlc.auto_jl_dim(100, 20, 2, margin=0.1) == 20
    assert jlc.auto_jl_dim(100, 5000, 2, margin=0.01) == 256
    assert jlc.auto_jl_dim(100, 1, 2, margin=0.1) == 2
    assert jlc.auto_jl_dim(100, 5000, 2, margin=1e-300) == 256


def test_huge_clip_norm_fits():
    X, y, g = make_margin_data(10, 3, 6, seed=40)
    clf = JLMarginClassifier(clip_norm=1e300, random_state=0, n_candidates=8,
                             classes=["neg", "pos"])
    assert clf.fit(X * 1e299, y, groups=g).jl_dim_ == 6
