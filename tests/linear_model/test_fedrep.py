"""Tests of PrivateFedRepRegressor (Snedeker, Zhou & Bassily 2025, Alg. 1-2)."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.datasets import make_shared_representation_regression
from skdpp.linear_model import _fedrep, _representation
from skdpp.linear_model._fedrep import PrivateFedRepRegressor
from skdpp.linear_model._representation import subspace_distance
from skdpp.privacy.mechanisms import unit_rows
from tests.linear_model._reference import _canary_last, _ref_head, _ref_split, _test_mse
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
)

# --------------------------------------------------------------------------- #
# Independent loop-based reference of the non-private algorithm
# --------------------------------------------------------------------------- #


def _ref_fedrep(X, y, groups, U0, *, T, lr, psi, batch_mode, seed, head_clip,
                batch_size=None):
    """Plain-loop Alg. 1 without noise (epsilon=inf), same randomness as the estimator."""
    rs = np.random.RandomState(seed)
    seeds = rs.randint(0, np.iinfo(np.int32).max, size=4)  # split, init, batches, noise
    split_rng = np.random.RandomState(seeds[0])
    batch_rng = np.random.RandomState(seeds[2])
    users = np.unique(groups)
    n, k = len(users), U0.shape[1]
    s0 = _ref_split(groups, split_rng)
    # S^0 rows listed user by user (row order within a user): the order of the batch keys
    s0_rows = [np.flatnonzero((groups == u) & s0) for u in users]
    round_seeds = batch_rng.randint(0, np.iinfo(np.int32).max, size=T)
    U = U0.copy()
    for t in range(T):
        if batch_mode == "disjoint" or batch_size is not None:
            keys = np.random.RandomState(round_seeds[t]).random_sample(
                sum(len(r) for r in s0_rows))
        total = np.zeros_like(U)
        pos = 0
        for rows in s0_rows:
            if batch_mode == "same" and batch_size is None:
                B = Bp = rows
            else:
                kk = keys[pos:pos + len(rows)]
                perm = rows[np.lexsort((np.arange(len(rows)), kk))]
                if batch_mode == "same":
                    B = Bp = perm[:batch_size]
                else:
                    b = len(rows) // 2 if batch_size is None else min(batch_size,
                                                                      len(rows) // 2)
                    B, Bp = perm[:b], perm[b:2 * b]
            pos += len(rows)
            v = _ref_head(X[B] @ U, y[B], k)
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


@pytest.mark.parametrize("batch_mode, batch_size", [("same", None), ("disjoint", None),
                                                    ("same", 3), ("disjoint", 2)])
def test_epsilon_inf_matches_loop_reference(batch_mode, batch_size):
    X, y, groups, info = _small_data()
    rng = np.random.default_rng(5)
    U0 = np.linalg.qr(rng.standard_normal((X.shape[1], 2)))[0]
    est = PrivateFedRepRegressor(
        epsilon=np.inf, init=U0, max_iter=4, learning_rate=0.7, clip_norm=0.8,
        head_clip_norm=0.5, batch_mode=batch_mode, batch_size=batch_size, random_state=3,
    ).fit(X, y, groups=groups)
    U, heads, cold = _ref_fedrep(X, y, groups, U0, T=4, lr=0.7, psi=0.8,
                                 batch_mode=batch_mode, seed=3, head_clip=0.5,
                                 batch_size=batch_size)
    assert_allclose(est.components_, U, rtol=1e-10, atol=1e-10)
    assert_allclose(est.heads_, heads, rtol=1e-10, atol=1e-10)
    assert_allclose(est.cold_start_head_, cold, rtol=1e-10, atol=1e-10)
    assert est.privacy_report_.epsilon_spent == np.inf


@pytest.mark.parametrize("chunk_rows, dtype", [(1, np.float64), (7, np.float64),
                                               (50, np.float64), (7, np.float32)])
@pytest.mark.parametrize("batch_mode, batch_size", [("same", None), ("disjoint", None),
                                                    ("same", 3)])
def test_chunked_gathered_iterations_match_loop_reference(monkeypatch, chunk_rows, dtype,
                                                          batch_mode, batch_size):
    """The rounds run by chunks of users, with the S^0 rows gathered per chunk (the path
    taken for large data), give the loop reference's result."""
    monkeypatch.setattr(_fedrep, "_ITER_CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(_fedrep, "_COPY_MAX_BYTES", 0)
    X, y, groups, info = _small_data()
    X = X.astype(dtype)
    rng = np.random.default_rng(5)
    U0 = np.linalg.qr(rng.standard_normal((X.shape[1], 2)))[0]
    est = PrivateFedRepRegressor(
        epsilon=np.inf, init=U0, max_iter=4, learning_rate=0.7, clip_norm=0.8,
        head_clip_norm=0.5, batch_mode=batch_mode, batch_size=batch_size, random_state=3,
    ).fit(X, y, groups=groups)
    U, heads, cold = _ref_fedrep(X.astype(np.float64), y, groups, U0, T=4, lr=0.7, psi=0.8,
                                 batch_mode=batch_mode, seed=3, head_clip=0.5,
                                 batch_size=batch_size)
    assert_allclose(est.components_, U, rtol=1e-10, atol=1e-10)
    assert_allclose(est.heads_, heads, rtol=1e-10, atol=1e-10)
    assert_allclose(est.cold_start_head_, cold, rtol=1e-10, atol=1e-10)


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
    # seeded; measured (0.1, 1, inf): dist (0.86, 0.015, 0.0008), mse (0.90, 5.5e-4, 2.0e-4)
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
    assert_allclose(cold, Xn @ est.components_ @ est.cold_start_head_, rtol=1e-12)
    report = str(est.privacy_report_)
    est.personalize(info.X_test[:20], info.y_test[:20], groups=new)
    assert 10**6 in est.user_ids_
    assert str(est.privacy_report_) == report
    own = est.predict(Xn, groups=new)
    assert np.mean((own - info.y_test[:20]) ** 2) < np.mean((cold - info.y_test[:20]) ** 2)


def test_deterministic_under_random_state(medium):
    X, y, groups, _ = medium
    a = PrivateFedRepRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    b = PrivateFedRepRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    c = PrivateFedRepRegressor(epsilon=1.0, random_state=8).fit(X, y, groups=groups)
    assert_allclose(a.components_, b.components_, rtol=0, atol=0)
    assert_allclose(a.heads_, b.heads_, rtol=0, atol=0)
    assert not np.allclose(a.components_, c.components_)


def test_verbose_prints_one_line_per_iteration(capsys):
    X, y, groups, _ = _small_data()
    PrivateFedRepRegressor(max_iter=3, verbose=1, random_state=0).fit(X, y, groups=groups)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "[PrivateFedRep]" in ln]
    assert len(lines) == 3


def test_verbose_prints_no_private_statistics(capsys):
    """The printed lines are the same for neighbouring datasets (noise off)."""
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    outputs = []
    for name, X2, y2, g2 in [("original", X, y, groups),
                             *adversarial_neighbours(X, y, groups, user)]:
        with noise_off():
            PrivateFedRepRegressor(max_iter=2, verbose=1, random_state=0).fit(X2, y2, groups=g2)
        outputs.append(capsys.readouterr().out)
    assert outputs[0].count("[PrivateFedRep]") == 2
    assert all(out == outputs[0] for out in outputs[1:])


def test_inputs_not_modified():
    X, y, groups, _ = _small_data()
    X0, y0, g0 = X.copy(), y.copy(), groups.copy()
    PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=groups)
    assert_allclose(X, X0, rtol=0, atol=0)
    assert_allclose(y, y0, rtol=0, atol=0)
    assert (groups == g0).all()


def test_budget_plan_in_report():
    X, y, groups, _ = _small_data()
    est = PrivateFedRepRegressor(epsilon=1.0, max_iter=3, random_state=0).fit(X, y, groups=groups)
    phases = {p.name: p for p in est.privacy_report_.phases}
    assert set(phases) == {"init", "iterations", "cold_start"}
    assert phases["iterations"].count == 3
    assert_allclose(phases["iterations"].sensitivity, 2 * est.clip_norm)
    assert_allclose(phases["init"].sensitivity, 2 * est.init_clip_norm)
    assert_allclose(phases["cold_start"].sensitivity, 2 * est.head_clip_norm)
    assert est.privacy_report_.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert_allclose(est.privacy_report_.epsilon_spent, 1.0, rtol=1e-6)


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
    with pytest.raises(ValueError, match="init as an array"):
        PrivateFedRepRegressor(init=np.ones((3, 2))).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="init_share"):
        PrivateFedRepRegressor(init_share=0.6, cold_start_share=0.5).fit(X, y, groups=groups)


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
    expected = X[:3] @ est.components_ @ est.cold_start_head_
    assert_allclose(est.predict(X[:3], groups=[-1, -2, -3]), expected, rtol=1e-12)
    with pytest.warns(UserWarning, match="groups=None"):
        assert_allclose(est.predict(X[:3]), expected, rtol=1e-12)


# --------------------------------------------------------------------------- #
# Privacy: sensitivity, audit, noise level
# --------------------------------------------------------------------------- #
def _fit_on(**params):
    def fit_on(X, y, groups):
        return PrivateFedRepRegressor(random_state=0, **params).fit(X, y, groups=groups)
    return fit_on


@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_sensitivity_adversarial_neighbours(batch_mode):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    fit_on = _fit_on(epsilon=1.0, max_iter=3, batch_mode=batch_mode)
    for name, X2, y2, g2 in adversarial_neighbours(X, y, groups, user):
        ratios = assert_sensitivity(fit_on, (X, y, groups), (X2, y2, g2))
        assert len(ratios) == 5, name  # init + 3 iterations + cold start


def _broken_no_clipping(monkeypatch):
    monkeypatch.setattr(_representation, "_clip_scale",
                        lambda norms, clip_norm: np.ones_like(np.asarray(norms, float)))
    monkeypatch.setattr(_fedrep, "_clip_scale",
                        lambda norms, clip_norm: np.ones_like(np.asarray(norms, float)))


def _broken_per_row_clipping(monkeypatch):
    """Clip each row's gradient and SUM them: a user with many rows contributes many psi."""

    def per_row(X, y, P_all, V, grad_blocks, clip_norm):
        rows, codes = grad_blocks.rows, grad_blocks.codes
        resid = y[rows] - np.einsum("ij,ij->i", P_all[rows], V[codes])
        g = -2.0 * resid[:, None] * X[rows]
        norms = _representation._row_norms(g) * _representation._row_norms(V)[codes]
        c = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-300))
        return (g * c[:, None]).T @ V[codes], c

    monkeypatch.setattr(_fedrep, "_clipped_gradient_sum", per_row)


@pytest.mark.parametrize("breaker", [_broken_no_clipping, _broken_per_row_clipping])
def test_sensitivity_test_catches_broken_variants(monkeypatch, breaker):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    breaker(monkeypatch)
    fit_on = _fit_on(epsilon=1.0, max_iter=2, init=np.eye(4)[:, :2], cold_start_share=0.0)
    neighbours = {name: (X2, y2, g2) for name, X2, y2, g2 in
                  adversarial_neighbours(X, y, groups, user)}
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
            epsilon=epsilon, init=U0, max_iter=1, cold_start_share=0.0, learning_rate=1.0,
            clip_norm=1.0, random_state=seed).fit(X, y, groups=g)
        return float(np.linalg.norm(est.components_[2]))  # weight on the canary's direction

    return run


def test_audit_lower_bound_below_claimed_epsilon():
    data, neighbour = _audit_data()
    eps = 1.0
    lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, eps), 300, delta=1e-6,
                                      alpha=0.01)
    assert lower <= eps  # false alarm rate <= 1% for a correct implementation


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
    names = ["init"] + ["iterations"] * 3 + ["cold_start"]
    assert len(draws) == len(names)
    pooled = []
    for draw, name in zip(draws, names):
        p = phases[name]
        assert_allclose(draw["sensitivity"], p.sensitivity, rtol=1e-12)
        assert_allclose(draw["scale"], p.noise_multiplier * p.sensitivity, rtol=1e-12)
        noise = draw["noise"]
        if draw["symmetric"]:
            assert_allclose(noise, noise.T, rtol=0, atol=1e-9 * draw["scale"])
            noise = noise[np.triu_indices(noise.shape[0])]
        pooled.append(np.ravel(noise) / draw["scale"])
    pooled = np.concatenate(pooled)
    # ~330 standard normals: std within 15% of 1 has false-alarm rate < 1e-4
    assert abs(pooled.std() - 1.0) < 0.15


@pytest.mark.parametrize("x_scale, v_scale", [(1e-160, 1e160), (1e-155, 1e150), (1e200, 1e100)])
def test_clipped_gradient_bounded_for_any_magnitude(x_scale, v_scale):
    """One user's clipped gradient g v^T has norm <= psi for tiny/huge g and v.

    ``||g||`` from subnormal squares (g ~ 1e-160) came out 0 or too small, so a
    huge head left the gradient unclipped.
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 4)) * x_scale
    y = 1e3 * rng.standard_normal(6)
    blocks = _representation._RowBlocks(np.arange(6), np.zeros(6, dtype=int), 1)
    V = np.array([[v_scale, -v_scale]])
    P_all = X @ np.eye(4)[:, :2]
    total, _ = _fedrep._clipped_gradient_sum(X, y, P_all, V, blocks, 1.0)
    assert np.all(np.isfinite(total))
    assert np.linalg.norm(total) <= 1.0 * (1 + 1e-12)


@pytest.mark.parametrize("x_scale, y_scale", [(1e155, 1.0), (1e300, 1e300), (1e-300, 1e300)])
@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_sensitivity_extreme_magnitudes(x_scale, y_scale, batch_mode):
    """A canary with extreme (finite) values neither breaks the bounds nor makes fit raise.

    The per-user head Grams overflowed (rows ~1e155) and the batched solve raised
    LinAlgError: one user could make the fit fail.
    """
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    keep = groups != user
    rng = np.random.default_rng(0)
    Xc, yc = rng.standard_normal((7, 4)) * x_scale, rng.standard_normal(7) * y_scale
    neighbour = (np.r_[X[keep], Xc], np.r_[y[keep], yc], np.r_[groups[keep], np.full(7, user)])
    fit_on = _fit_on(epsilon=1.0, max_iter=2, batch_mode=batch_mode)
    assert len(assert_sensitivity(fit_on, (X, y, groups), neighbour)) == 4


def test_clipped_gradient_sum_mixes_magnitudes_consistently():
    """Users of ordinary and extreme magnitudes in one call: each term is clipped on its own.

    Ordinary norms use one scalar factor per user, extreme ones unit vectors; the
    sum must equal the sum of the one-user calls and each term must have norm
    ``min(||g|| ||v||, psi)`` (up to rounding), also near the switch-over norms.
    """
    rng = np.random.default_rng(3)
    scales = [1.0, 1e-120, 1e120, 1e-99, 1e99, 1e-101, 1e101, 1e-160, 1e-3, 1e100]
    m, d, psi = 3, 4, 0.7
    X = np.concatenate([s * rng.standard_normal((m, d)) for s in scales])
    y = rng.standard_normal(len(X))
    codes = np.repeat(np.arange(len(scales)), m)
    # last user: ||g|| ~ 1e260 and ||v|| ~ 1e60, whose product overflows
    V = rng.standard_normal((len(scales), 2)) * np.array([1, 1e50, 1e-50, 1, 1, 1, 1, 1e80,
                                                          1, 1e60])[:, None]
    U = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    P_all = X @ U
    blocks = _representation._RowBlocks(np.arange(len(X)), codes, len(scales))
    total, _ = _fedrep._clipped_gradient_sum(X, y, P_all, V, blocks, psi)
    parts = []
    for u in range(len(scales)):
        rows = np.flatnonzero(codes == u)
        one = _representation._RowBlocks(np.arange(m), np.zeros(m, dtype=int), 1)
        t, _ = _fedrep._clipped_gradient_sum(X[rows], y[rows], P_all[rows], V[u:u + 1], one,
                                             psi)
        g = (-2.0 / m) * (y[rows] - P_all[rows] @ V[u]) @ X[rows]
        gu, gn = unit_rows(g[None])
        vu, vn = unit_rows(V[u:u + 1])
        with np.errstate(over="ignore"):
            expected = min(gn[0] * vn[0], psi) * np.outer(gu[0], vu[0])
        assert_allclose(t, expected, rtol=1e-12, atol=0)
        assert np.linalg.norm(t) <= psi * (1 + 1e-12)
        parts.append(t)
    assert_allclose(total, np.sum(parts, axis=0), rtol=1e-12, atol=1e-300)


def test_disjoint_mode_with_one_row_users():
    """groups=None and batch_mode="disjoint": every user has one S^0 row, so no user has
    batch rows (empty per-user blocks must not make fit raise)."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 4)), rng.standard_normal(40)
    est = PrivateFedRepRegressor(batch_mode="disjoint", epsilon=1.0, delta=1e-5,
                                 random_state=0).fit(X, y)
    assert np.all(np.isfinite(est.components_))
