"""Tests of PrivateFedRepRegressor (Snedeker, Zhou & Bassily 2025, Alg. 1-2)."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.datasets import make_shared_representation_regression
from skdpp.linear_model._algorithms import fedrep as _fedrep
from skdpp.linear_model._algorithms import representation as rep
from skdpp.linear_model._auto import (AUTO_STEPS, COLD_START_CLIP_RELEASES, FEATURE_SCALE_STEPS,
                                     LABEL_RANGE_STEPS)
from skdpp.linear_model._fedrep import PrivateFedRepRegressor
from skdpp.linear_model._representation import subspace_distance
from skdpp.privacy._clipping import row_norms, unit_rows
from skdpp.privacy._quantile import LOCATION_SEARCH_STEPS
from skdpp.utils._grouped import UserBlock, make_blocks
from tests.linear_model._reference import (
    _canary_last,
    _observable_neighbours,
    _ref_head,
    _test_mse,
    clamped,
    scaled_rows,
    _with_canary,
    assert_permutation_invariant,
    fedrep_round_batches,
    fit_executor,
    row_contents,
    s0_mask,
    with_other_users,
)
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_same_observables,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
)

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)


# --------------------------------------------------------------------------- #
# Independent loop-based reference of the non-private algorithm
# --------------------------------------------------------------------------- #
def _ref_fedrep(X, y, groups, U0, *, T, lr, psi, head_clip, s0, batches):
    """Plain-loop Alg. 1 without noise (epsilon=inf) on the fit's split and batches.

    ``s0`` is the fit's S^0 mask; ``batches[t]`` its ``(head_rows, grad_rows)`` of
    round t (sets of row numbers), both read from the fit's block functions.
    """
    users = np.unique(groups)
    n, k = len(users), U0.shape[1]
    U = U0.copy()
    for t in range(T):
        head_rows, grad_rows = batches[t]
        total = np.zeros_like(U)
        for u in users:
            rows = np.flatnonzero(groups == u)
            B = np.array([r for r in rows if r in head_rows], dtype=int)
            Bp = np.array([r for r in rows if r in grad_rows], dtype=int)
            v = _ref_head(X[B] @ U, y[B], k) if B.size else np.zeros(k)
            grad = np.zeros_like(U)
            for r in Bp:  # gradient of the mean squared error on B'
                grad += -2.0 * (y[r] - X[r] @ U @ v) * np.outer(X[r], v) / len(Bp)
            norm = np.linalg.norm(grad)
            if norm > psi:
                grad *= psi / norm
            total += grad
        U, _ = np.linalg.qr(U - lr * total / n)
    heads = np.zeros((n, k))
    for i, u in enumerate(users):
        rows = np.flatnonzero((groups == u) & ~s0)
        if rows.size == 0:
            rows = np.flatnonzero(groups == u)
        heads[i] = _ref_head(X[rows] @ U, y[rows], k)
    clipped = [h * min(1.0, head_clip / np.linalg.norm(h)) if np.linalg.norm(h) > 0 else h
               for h in heads]
    return U, heads, np.sum(clipped, axis=0) / n


def _small_data(n_users=12, d=5, m=8, seed=0):
    X, y, groups, info = make_shared_representation_regression(
        n_users=n_users, n_features=d, n_components=2, n_samples_per_user=m, noise=0.1,
        n_test_samples_per_user=0, random_state=seed)
    return X, y, groups, info


def _reference_for(X, y, groups, U0, batch_mode, batch_size, seed=3, T=4):
    executor, key = fit_executor(X, y, groups, seed)
    batches = [fedrep_round_batches(executor, key, t, batch_mode, batch_size)
               for t in range(T)]
    return _ref_fedrep(X.astype(np.float64), y, groups, U0, T=T, lr=0.7, psi=0.8,
                       head_clip=0.5, s0=s0_mask(executor, len(y)), batches=batches)


#: The papers' model and final heads (no intercept, S^1-only unshrunk heads, the
#: step in the labels' units): what the loop reference implements.
PAPER = dict(fit_intercept=False, personal_rows="holdout", personal_ridge=0.0, label_scale=1.0)

_MODES = [("same", None), ("disjoint", None), ("same", 3), ("disjoint", 2)]


@pytest.mark.parametrize("batch_mode, batch_size", _MODES)
def test_epsilon_inf_matches_loop_reference(batch_mode, batch_size):
    X, y, groups, info = _small_data()
    U0 = np.linalg.qr(np.random.default_rng(5).standard_normal((X.shape[1], 2)))[0]
    est = PrivateFedRepRegressor(
        epsilon=np.inf, init=U0, max_iter=4, learning_rate=0.7, clip_norm=0.8,
        head_clip_norm=0.5, batch_mode=batch_mode, batch_size=batch_size, random_state=3,
        **PAPER).fit(X, y, groups=groups)
    U, heads, cold = _reference_for(X, y, groups, U0, batch_mode, batch_size)
    assert_allclose(est.components_, U, rtol=1e-10, atol=1e-10)
    assert_allclose(est.heads_, heads, rtol=1e-10, atol=1e-10)
    assert_allclose(est.cold_start_head_, cold, rtol=1e-10, atol=1e-10)
    assert est.privacy_report_.epsilon_spent == np.inf


class _SmallBlocks(PrivateFedRepRegressor):
    """Blocks of ``block_rows`` rows (the fit's default is 32768)."""

    block_rows = 7

    def _make_blocks(self, data, randomness):
        return make_blocks(data.X, data.y, data.index, max_rows=self.block_rows)


@pytest.mark.parametrize("block_rows, dtype", [(1, np.float64), (7, np.float64),
                                               (50, np.float64), (7, np.float32)])
@pytest.mark.parametrize("batch_mode, batch_size", _MODES[:3])
def test_blocks_match_loop_reference(monkeypatch, block_rows, dtype, batch_mode, batch_size):
    """Rounds over many blocks give the loop reference's result: the split and batches
    do not depend on the partition into blocks."""
    monkeypatch.setattr(_SmallBlocks, "block_rows", block_rows)
    X, y, groups, info = _small_data()
    X = X.astype(dtype)
    U0 = np.linalg.qr(np.random.default_rng(5).standard_normal((X.shape[1], 2)))[0]
    est = _SmallBlocks(
        epsilon=np.inf, init=U0, max_iter=4, learning_rate=0.7, clip_norm=0.8,
        head_clip_norm=0.5, batch_mode=batch_mode, batch_size=batch_size, random_state=3,
        **PAPER).fit(X, y, groups=groups)
    U, heads, cold = _reference_for(X, y, groups, U0, batch_mode, batch_size)
    assert_allclose(est.components_, U, rtol=1e-10, atol=1e-10)
    assert_allclose(est.heads_, heads, rtol=1e-10, atol=1e-10)
    assert_allclose(est.cold_start_head_, cold, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- #
# Keyed randomness: a function of the set of records
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("init", ["private_spectral", "private_pairwise", "random"])
@pytest.mark.parametrize("batch_mode, batch_size", _MODES)
def test_row_permutation_gives_identical_fit(init, batch_mode, batch_size):
    X, y, groups, _ = _small_data(n_users=20, m=7)
    assert_permutation_invariant(
        PrivateFedRepRegressor, dict(epsilon=1.0, init=init, max_iter=3, batch_mode=batch_mode,
                                     batch_size=batch_size, random_state=11),
        X, y, groups.astype(str))


@pytest.mark.parametrize("batch_mode, batch_size", _MODES[1:])
def test_other_users_do_not_change_a_users_batches(batch_mode, batch_size):
    """Adding a user and relabelling another (user 3) leaves every other user's S^0
    and batches unchanged (keyed by the user's own id and rows)."""
    X, y, groups, _ = _small_data(n_users=10, m=9)

    def per_user(X, y, g):
        executor, key = fit_executor(X, y, g, 4)
        s0 = s0_mask(executor, len(y))
        out = {}
        for t in range(3):
            head, grad = fedrep_round_batches(executor, key, t, batch_mode, batch_size)
            for u in np.unique(g):
                rows = np.flatnonzero(g == u)
                out[u, t] = (row_contents(X, y, rows[s0[rows]]),
                             row_contents(X, y, [r for r in rows if r in head]),
                             row_contents(X, y, [r for r in rows if r in grad]))
        return out

    before, after = per_user(X, y, groups), per_user(*with_other_users(X, y, groups))
    for (u, t), value in before.items():
        if u != 3:
            assert after[u, t] == value, (u, t)


# --------------------------------------------------------------------------- #
# Utility
# --------------------------------------------------------------------------- #
def test_error_falls_as_epsilon_grows(medium):
    X, y, groups, info = medium
    dist, mse = [], []
    for eps in [0.1, 1.0, np.inf]:
        est = PrivateFedRepRegressor(epsilon=eps, random_state=0).fit(X, y, groups=groups)
        dist.append(subspace_distance(est.components_, info.U))
        mse.append(_test_mse(est, info))
    # seeded; measured (0.1, 1, inf): dist (0.28, 0.025, 0.0007), mse (0.14, 1.1e-3, 2.0e-4)
    assert dist[0] > dist[1] > dist[2]
    assert mse[0] > mse[1] > mse[2]
    assert dist[2] < 0.02 and mse[2] < 1e-3  # non-private converges (R^2 = 1e-4)


def test_components_are_orthonormal(medium):
    X, y, groups, _ = medium
    est = PrivateFedRepRegressor(epsilon=0.5, random_state=0).fit(X, y, groups=groups)
    assert_allclose(est.components_.T @ est.components_, np.eye(2), atol=1e-12)


def test_cold_start_and_personalize(medium):
    X, y, groups, info = medium
    est = PrivateFedRepRegressor(epsilon=2.0, random_state=0).fit(X, y, groups=groups)
    new = np.full(20, 10**6)  # an unseen user id (same id type as in fit)
    Xn = info.X_test[:20]
    cold = est.predict(Xn, groups=new)
    # rows in the fitted units (released feature scales), clamped to the label range
    assert_allclose(cold, clamped(est, scaled_rows(est, Xn) @ est.components_
                                  @ est.cold_start_head_ + est.cold_start_intercept_),
                    rtol=1e-12)
    report = str(est.privacy_report_)
    est.personalize(info.X_test[:20], info.y_test[:20], groups=new)
    assert 10**6 in est.user_ids_
    assert str(est.privacy_report_) == report
    own = est.predict(Xn, groups=new)
    assert np.mean((own - info.y_test[:20]) ** 2) < np.mean((cold - info.y_test[:20]) ** 2)
    # without intercept and shrinkage, the personal head is the least-squares head
    est.set_params(fit_intercept=False, personal_ridge=0.0).fit(X, y, groups=groups)
    est.personalize(Xn, info.y_test[:20], groups=new)
    P = scaled_rows(est, Xn) @ est.components_
    expected = _ref_head(P, info.y_test[:20], 2)
    assert_allclose(est.heads_[np.searchsorted(est.user_ids_, 10**6)], expected, rtol=1e-9)


def test_deterministic_under_random_state(medium):
    X, y, groups, _ = medium
    a = PrivateFedRepRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    b = PrivateFedRepRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    c = PrivateFedRepRegressor(epsilon=1.0, random_state=8).fit(X, y, groups=groups)
    assert_array_equal(a.components_, b.components_)
    assert_array_equal(a.heads_, b.heads_)
    assert not np.allclose(a.components_, c.components_)


def test_verbose_prints_one_line_per_iteration(capsys):
    X, y, groups, _ = _small_data()
    PrivateFedRepRegressor(max_iter=3, verbose=1, random_state=0).fit(X, y, groups=groups)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "[PrivateFedRep]" in ln]
    assert len(lines) == 3


def test_inputs_not_modified():
    X, y, groups, _ = _small_data()
    X0, y0, g0 = X.copy(), y.copy(), groups.copy()
    PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=groups)
    assert_array_equal(X, X0)
    assert_array_equal(y, y0)
    assert_array_equal(groups, g0)


def test_budget_plan_in_report():
    X, y, groups, _ = _small_data()
    est = PrivateFedRepRegressor(epsilon=1.0, max_iter=3, random_state=0).fit(X, y, groups=groups)
    phases = {p.name: p for p in est.privacy_report_.phases}
    assert list(phases) == ["clip", "init", "iterations", "cold_start"]
    # four 'auto' bounds (label_scale, clip_norm, init_clip_norm, head_clip_norm) and the
    # searches of the cold start's two locations: noisy binary searches of sensitivity-1
    # counts (and the label range; the per-feature scales only when the public gate opens)
    assert phases["clip"].count == 4 * AUTO_STEPS + COLD_START_CLIP_RELEASES \
        + LABEL_RANGE_STEPS \
        + FEATURE_SCALE_STEPS * X.shape[1] * (est.feature_scales_ is not None)
    assert_allclose(phases["clip"].sensitivity, 1.0)
    assert phases["iterations"].count == 3
    assert_allclose(phases["iterations"].sensitivity, 2 * est.clip_norm_)
    assert_allclose(phases["init"].sensitivity, 2 * est.init_clip_norm_)
    # the cold-start head and the clipped means of the two locations (the mean labels,
    # the offsets); intercept_clip_ is the radius of the one kept
    assert phases["cold_start"].count == 3
    sensitivities = np.atleast_1d(phases["cold_start"].sensitivity)  # distinct values
    assert_allclose(sensitivities[0], 2 * est.head_clip_norm_)
    assert np.isclose(sensitivities, 2 * est.intercept_clip_).any()
    # the calibrated plan spends the whole budget (no loose accounting)
    assert_allclose(est.privacy_report_.epsilon_spent, 1.0, rtol=1e-6)


def test_budget_plan_without_private_init_or_cold_start():
    X, y, groups, _ = _small_data()
    est = PrivateFedRepRegressor(epsilon=1.0, init="random",
                                 budget_shares={"cold_start": 0.0},
                                 random_state=0).fit(X, y, groups=groups)
    assert [p.name for p in est.privacy_report_.phases] == ["clip", "iterations"]
    est = PrivateFedRepRegressor(epsilon=1.0, init="random",
                                 budget_shares={"cold_start": 0.0},
                                 clip_norm=1.0, label_scale=1.0,
                                 random_state=0).fit(X, y, groups=groups)
    assert [p.name for p in est.privacy_report_.phases] == ["iterations"]
    assert_array_equal(est.cold_start_head_, np.zeros(2))


# --------------------------------------------------------------------------- #
# Bad input
# --------------------------------------------------------------------------- #
def test_bad_input():
    X, y, groups, _ = _small_data()
    with pytest.raises(ValueError, match="n_components=6 must be <= n_features=5"):
        PrivateFedRepRegressor(n_components=6).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="n_components"):
        PrivateFedRepRegressor(n_components=0).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="NaN"):
        Xn = X.copy()
        Xn[0, 0] = np.nan
        PrivateFedRepRegressor().fit(Xn, y, groups=groups)
    with pytest.raises(ValueError, match="clip_norm=None"):
        PrivateFedRepRegressor(clip_norm=None, epsilon=1.0).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="head_clip_norm=None"):
        PrivateFedRepRegressor(head_clip_norm=None, epsilon=1.0).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="init as an array"):
        PrivateFedRepRegressor(init=np.ones((3, 2))).fit(X, y, groups=groups)
    with pytest.raises(ValueError,
                       match=r"budget_shares\['init'\].*budget_shares\['cold_start'\]"):
        PrivateFedRepRegressor(budget_shares={"init": 0.6, "cold_start": 0.5}).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match=r"positive budget_shares\['init'\]"):
        PrivateFedRepRegressor(budget_shares={"init": 0.0}).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"budget_shares\['clip'\]=0"):
        PrivateFedRepRegressor(budget_shares={"clip": 0.0}).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="Valid keys"):  # a phase without a share of its own
        PrivateFedRepRegressor(budget_shares={"iterations": 0.5}).fit(X, y, groups=groups)
    est = PrivateFedRepRegressor(budget_shares={"init": 0.0})
    with pytest.raises(ValueError):
        est.fit(X, y, groups=groups)
    assert not hasattr(est, "components_")  # a failed fit leaves no model


def test_one_row_users_and_groups_none():
    X, y, groups, _ = _small_data()
    g = groups.copy()
    g[:5] = np.arange(100, 105)  # five one-row users
    est = PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=g)
    assert np.all(np.isfinite(est.heads_))
    est = PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y)  # every row a user
    assert est.n_users_ == X.shape[0]
    assert np.all(np.isfinite(est.predict(X)))


def test_unseen_users_get_cold_start_and_warn_without_groups():
    X, y, groups, _ = _small_data()
    est = PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=groups)
    expected = clamped(est, scaled_rows(est, X[:3]) @ est.components_ @ est.cold_start_head_
                       + est.cold_start_intercept_)
    assert_allclose(est.predict(X[:3], groups=[-1, -2, -3]), expected, rtol=1e-12)
    with pytest.warns(UserWarning, match="groups=None"):
        assert_allclose(est.predict(X[:3]), expected, rtol=1e-12)


def test_disjoint_mode_with_one_row_users():
    """groups=None and batch_mode="disjoint": every user has one S^0 row, so no user has
    batch rows (empty per-user blocks must not make fit raise)."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 4)), rng.standard_normal(40)
    est = PrivateFedRepRegressor(batch_mode="disjoint", epsilon=1.0, delta=1e-5,
                                 random_state=0).fit(X, y)
    assert np.all(np.isfinite(est.components_))


# --------------------------------------------------------------------------- #
# Privacy: sensitivity, audit, noise level
# --------------------------------------------------------------------------- #
def _n_releases(est):
    """The number of releases the report plans (every one must be checked)."""
    return sum(p.count for p in est.privacy_report_.phases)


def _fit_on(**params):
    def fit_on(X, y, groups):
        return PrivateFedRepRegressor(random_state=0, **params).fit(X, y, groups=groups)
    return fit_on


@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_sensitivity_adversarial_neighbours(batch_mode):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    fit_on = _fit_on(epsilon=1.0, max_iter=3, batch_mode=batch_mode)
    n_releases = _n_releases(fit_on(X, y, groups))
    for name, X2, y2, g2 in adversarial_neighbours(X, y, groups, user):
        ratios = assert_sensitivity(fit_on, (X, y, groups), (X2, y2, g2))
        assert len(ratios) == n_releases, name  # every planned release was checked


def _broken_no_clipping(monkeypatch):
    """The gradients are summed unclipped (the fit's clipping call replaced)."""
    monkeypatch.setattr(_fedrep, "clipped_outer_sum", lambda A, B, clip_norm: A.T @ B)


def _broken_per_row_clipping(monkeypatch):
    """Clip each row's gradient and SUM them: a user with many rows contributes many psi."""

    def per_row(grad, X0, P, y0, V, clip_norm):
        rows = grad.source_rows()
        Vr = grad.expand(V)
        g = -2.0 * (y0[rows] - np.einsum("ij,ij->i", P[rows], Vr))[:, None] * X0[rows]
        c = np.minimum(1.0, clip_norm / np.maximum(row_norms(g) * row_norms(Vr), 1e-300))
        return (g * c[:, None]).T @ Vr

    monkeypatch.setattr(_fedrep, "_clipped_gradient_sum", per_row)


@pytest.mark.parametrize("breaker", [_broken_no_clipping, _broken_per_row_clipping])
def test_sensitivity_test_catches_broken_variants(monkeypatch, breaker):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    fit_on = _fit_on(epsilon=1.0, max_iter=2, init=np.eye(4)[:, :2],
                     budget_shares={"cold_start": 0.0})
    neighbours = {name: (X2, y2, g2) for name, X2, y2, g2 in
                  adversarial_neighbours(X, y, groups, user)}
    assert_sensitivity(fit_on, (X, y, groups), neighbours["many_rows"])  # correct: passes
    breaker(monkeypatch)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(fit_on, (X, y, groups), neighbours["many_rows"])


def _audit_data():
    """20 users whose true subspace is span(e1, e2); the canary pushes U towards e3."""
    rng = np.random.default_rng(1)
    n_users, m = 20, 4
    X = rng.standard_normal((n_users * m, 3))
    heads = rng.standard_normal((n_users, 2))
    heads /= np.linalg.norm(heads, axis=1, keepdims=True)
    groups = np.repeat(np.arange(n_users), m)
    y = np.einsum("ij,ij->i", X[:, :2], heads[groups]) + 0.01 * rng.standard_normal(len(groups))
    user = n_users - 1
    keep = groups != user
    Xc = rng.standard_normal((50, 3))
    Xc[:, 1] = 0.0
    yc = 10.0 * Xc[:, 0] + 10.0 * Xc[:, 2]  # residual after the head fit lies along e3
    X2 = np.r_[X[keep], Xc]
    y2 = np.r_[y[keep], yc]
    g2 = np.r_[groups[keep], np.full(50, user)]
    return (X, y, groups), (X2, y2, g2)


def _audit_run(data, neighbour_data, epsilon):
    U0 = np.linalg.qr(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))[0]

    def run(seed, neighbour):
        X, y, g = neighbour_data if neighbour else data
        est = PrivateFedRepRegressor(
            epsilon=epsilon, init=U0, max_iter=1, budget_shares={"cold_start": 0.0},
            learning_rate=1.0,
            clip_norm=1.0, random_state=seed, **PAPER).fit(X, y, groups=g)  # one release
        return float(np.linalg.norm(est.components_[2]))  # weight on the canary's direction

    return run


@pytest.mark.slow
def test_audit_lower_bound_below_claimed_epsilon():
    data, neighbour = _audit_data()
    eps = 1.0
    lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, eps), 300, delta=1e-6,
                                      alpha=0.01)
    assert lower <= eps  # false alarm rate <= 1% for a correct implementation


@pytest.mark.slow
@pytest.mark.parametrize("breaker", ["noise_off", "no_clipping"])
def test_audit_catches_broken_variants(monkeypatch, breaker):
    data, neighbour = _audit_data()
    eps = 1.0
    if breaker == "no_clipping":
        _broken_no_clipping(monkeypatch)
        lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, eps), 300, delta=1e-6)
    else:
        with noise_off():
            lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, eps), 300,
                                              delta=1e-6)
    assert lower > eps


def test_noise_level_matches_report():
    X, y, groups, _ = _small_data(n_users=40, d=20, m=6)
    est = PrivateFedRepRegressor(epsilon=1.0, max_iter=3, random_state=0)
    draws = record_noise(lambda: est.fit(X, y, groups=groups))
    phases = {p.name: p for p in est.privacy_report_.phases}
    # release order: the init bound's search, init, the step's and the gradients' bound
    # searches, 3 rounds, the head bound's search, the cold-start head, the intercept's
    # two locations' searches and clipped means (the mean labels, the offsets)
    names = (["clip"] * LABEL_RANGE_STEPS  # the label range (no feature scales: gate shut)
             + ["clip"] * FEATURE_SCALE_STEPS * X.shape[1] * (est.feature_scales_ is not None)
             + ["clip"] * AUTO_STEPS + ["init"] + ["clip"] * 2 * AUTO_STEPS
             + ["iterations"] * 3 + ["clip"] * AUTO_STEPS + ["cold_start"]
             + (["clip"] * LOCATION_SEARCH_STEPS + ["cold_start"]) * 2 + ["clip"])  # the vote
    assert len(draws) == len(names) == _n_releases(est)
    sens = {name: list(np.atleast_1d(p.sensitivity)) for name, p in phases.items()}
    pooled = []
    for draw, name in zip(draws, names):
        p = phases[name]
        expected = sens[name][0] if len(sens[name]) == 1 else sens[name].pop(0)
        assert_allclose(draw["sensitivity"], expected, rtol=1e-12)
        assert_allclose(draw["scale"], p.noise_multiplier * expected, rtol=1e-12)
        noise = draw["noise"]
        if draw["symmetric"]:
            assert_allclose(noise, noise.T, rtol=0, atol=1e-9 * draw["scale"])
            noise = noise[np.triu_indices(noise.shape[0])]
        pooled.append(np.ravel(noise) / draw["scale"])
    pooled = np.concatenate(pooled)
    # ~330 standard normals: std within 15% of 1 has false-alarm rate < 1e-4
    assert abs(pooled.std() - 1.0) < 0.15


# --------------------------------------------------------------------------- #
# Hardening: extreme (finite) values of one user
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_gradient_overflow_of_one_user_neither_fails_nor_breaks_the_bound(batch_mode):
    """One user with 2 rows x = 1e160 * 1, y = [1e160, 3e160]: its gradient is +-inf.

    Its clip factor was 0 but ``g.T @ (V * coef)`` computed inf * 0 = NaN and fit
    raised: whether fit succeeds depended on one user's data (an audit bounded
    epsilon >= 3.5 at a claimed epsilon = 1).
    """
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    canary = _with_canary(X, y, groups, user, 1e160 * np.ones((2, 4)),
                          np.array([1e160, 3e160]))
    fit_on = _fit_on(epsilon=1.0, max_iter=2, batch_mode=batch_mode, init="random")
    n_releases = _n_releases(fit_on(X, y, groups))
    assert len(assert_sensitivity(fit_on, (X, y, groups), canary)) == n_releases
    est = fit_on(*canary)
    assert np.all(np.isfinite(est.components_)) and np.all(np.isfinite(est.heads_))


@pytest.mark.parametrize("x_scale, y_scale", [(1e155, 1.0), (1e300, 1e300), (1e-300, 1e300),
                                              (1e160, 1e160), (1.7e308, 1.0)])
@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_sensitivity_extreme_magnitudes(x_scale, y_scale, batch_mode):
    """A canary with extreme (finite) values neither breaks the bounds nor makes fit raise.

    The per-user head Grams overflowed (rows ~1e155) and the batched solve raised
    LinAlgError: one user could make the fit fail.
    """
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):
        Xc = np.clip(rng.standard_normal((7, 4)) * x_scale, -1.7e308, 1.7e308)
    canary = _with_canary(X, y, groups, user, Xc, rng.standard_normal(7) * y_scale)
    fit_on = _fit_on(epsilon=1.0, max_iter=2, batch_mode=batch_mode)
    n_releases = _n_releases(fit_on(X, y, groups))
    assert len(assert_sensitivity(fit_on, (X, y, groups), canary)) == n_releases


@pytest.mark.parametrize("init, batch_mode", [("private_spectral", "same"),
                                              ("private_pairwise", "disjoint")])
def test_neighbours_give_identical_warnings_and_output(init, batch_mode):
    """Warnings (NumPy overflow RuntimeWarnings included), printed lines and errors
    are the same on neighbouring datasets (noise off, verbose on)."""
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])

    def fit_on(X, y, g):
        with noise_off():
            return PrivateFedRepRegressor(max_iter=2, verbose=1, init=init,
                                          batch_mode=batch_mode, random_state=0).fit(
                X, y, groups=g)

    for name, X2, y2, g2 in _observable_neighbours(X, y, groups, user):
        observed = assert_same_observables(fit_on, (X, y, groups), (X2, y2, g2))
        assert observed["stdout"].count("[PrivateFedRep]") == 2, name


def _fuzz_user(rng, d):
    """One user's rows with magnitudes anywhere in 1e-300 .. 1.7e308 (finite)."""
    m = int(rng.integers(1, 7))
    with np.errstate(over="ignore"):
        X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-300, 308.2, size=(m, 1))
        y = rng.standard_normal(m) * 10.0 ** rng.uniform(-300, 308.2, size=m)
    if rng.random() < 0.2:
        X[:, rng.random(d) < 0.5] = 0.0
    return np.clip(X, -1.7e308, 1.7e308), np.clip(y, -1.7e308, 1.7e308)


def test_clipped_gradient_fuzz_bounded_and_finite():
    """Seeded fuzz of one user's clipped gradient with huge, tiny and overflowing values
    (inf and NaN intermediates): each term has norm <= psi, is finite and the call
    emits no warning."""
    rng = np.random.default_rng(2026)
    d, k, psi = 5, 2, 0.7
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    for _ in range(400):
        X, y = _fuzz_user(rng, d)
        m = len(y)
        local = UserBlock(y, y, None, np.array([0]), np.array([1], dtype=np.uint64), [m])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with np.errstate(over="ignore", invalid="ignore"):
                P = X @ U
            V = rep.fit_heads(local, P, y)
            total = _fedrep._clipped_gradient_sum(local, X, P, y, V, psi)
        assert np.all(np.isfinite(total))
        assert np.linalg.norm(total) <= psi * (1 + 1e-12)


@pytest.mark.parametrize("x_scale, v_scale", [(1e-160, 1e160), (1e-155, 1e150), (1e200, 1e100)])
def test_clipped_gradient_bounded_for_any_magnitude(x_scale, v_scale):
    """One user's clipped gradient g v^T has norm <= psi for tiny/huge g and v.

    ``||g||`` from subnormal squares (g ~ 1e-160) came out 0 or too small, so a
    huge head left the gradient unclipped.
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 4)) * x_scale
    y = 1e3 * rng.standard_normal(6)
    local = UserBlock(y, y, None, np.array([0]), np.array([1], dtype=np.uint64), [6])
    V = np.array([[v_scale, -v_scale]])
    total = _fedrep._clipped_gradient_sum(local, X, X @ np.eye(4)[:, :2], y, V, 1.0)
    assert np.all(np.isfinite(total))
    assert np.linalg.norm(total) <= 1.0 * (1 + 1e-12)


def test_clipped_gradient_sum_mixes_magnitudes_consistently():
    """Users of ordinary and extreme magnitudes in one call: each term is clipped on its own.

    Ordinary norms use one scalar factor per user, extreme ones unit vectors; the
    sum must equal the sum of the one-user calls and each term must have norm
    ``min(||g|| ||v||, psi)`` (up to rounding), also near the switch-over norms.
    """
    rng = np.random.default_rng(3)
    scales = [1.0, 1e-120, 1e120, 1e-99, 1e99, 1e-101, 1e101, 1e-160, 1e-3, 1e100]
    m, d, psi = 3, 4, 0.7
    n = len(scales)
    X = np.concatenate([s * rng.standard_normal((m, d)) for s in scales])
    y = rng.standard_normal(len(X))
    # last user: ||g|| ~ 1e260 and ||v|| ~ 1e60, whose product overflows
    V = rng.standard_normal((n, 2)) * np.array([1, 1e50, 1e-50, 1, 1, 1, 1, 1e80,
                                                1, 1e60])[:, None]
    U = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    P = X @ U
    block = UserBlock(y, y, None, np.arange(n), np.arange(n, dtype=np.uint64), [m] * n)
    total = _fedrep._clipped_gradient_sum(block, X, P, y, V, psi)
    parts = []
    for u in range(n):
        rows = slice(u * m, (u + 1) * m)
        one = UserBlock(y[rows], y[rows], None, np.array([0]), np.array([1], np.uint64), [m])
        t = _fedrep._clipped_gradient_sum(one, X[rows], P[rows], y[rows], V[u:u + 1], psi)
        g = (-2.0 / m) * (y[rows] - P[rows] @ V[u]) @ X[rows]
        gu, gn = unit_rows(g[None])
        vu, vn = unit_rows(V[u:u + 1])
        with np.errstate(over="ignore"):
            expected = min(gn[0] * vn[0], psi) * np.outer(gu[0], vu[0])
        assert_allclose(t, expected, rtol=1e-12, atol=0)
        assert np.linalg.norm(t) <= psi * (1 + 1e-12)
        parts.append(t)
    assert_allclose(total, np.sum(parts, axis=0), rtol=1e-12, atol=1e-300)
