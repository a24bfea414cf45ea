"""Tests of the shared-representation building blocks (loop-based references)."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.privacy.mechanisms import unit_rows
from skdpp.linear_model import _representation as rep
from skdpp.linear_model._altmin import _kron_gram
from skdpp.utils import UserIndex
from tests.privacy.harness import assert_sensitivity


def _toy(n_users=7, d=4, seed=0, max_rows=6):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_rows + 1, size=n_users)
    groups = np.repeat(np.arange(n_users), counts)
    rng.shuffle(groups)
    X = rng.standard_normal((groups.size, d))
    y = rng.standard_normal(groups.size)
    return X, y, groups


def _blocks(groups):
    index = UserIndex.from_groups(groups, len(groups))
    return rep._RowBlocks(np.arange(len(groups)), index.codes, index.n_users), index


def test_fit_heads_matches_per_user_least_squares():
    X, y, groups = _toy(max_rows=8)
    blocks, index = _blocks(groups)
    U, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((X.shape[1], 2)))
    V, _ = rep.fit_heads(X, y, U, blocks)
    for u in range(index.n_users):
        rows = index.codes == u
        P = X[rows] @ U
        if rows.sum() >= 2:
            expected = np.linalg.lstsq(P, y[rows], rcond=None)[0]
            assert_allclose(V[u], expected, rtol=1e-7, atol=1e-9)
        else:  # underdetermined: approximately the minimum-norm solution
            expected = np.linalg.pinv(P) @ y[rows]
            assert_allclose(V[u], expected, rtol=1e-4, atol=1e-6)


def test_fit_heads_user_without_rows_gets_zero_head():
    X, y, groups = _toy()
    blocks, index = _blocks(groups)
    sub = blocks.take(blocks.codes != 3)
    V, _ = rep.fit_heads(X, y, np.eye(X.shape[1])[:, :2], sub)
    assert_allclose(V[3], 0.0, atol=0)


def _loop_spectral_statistic(X, y, groups, clip):
    d = X.shape[1]
    total = np.zeros((d, d))
    for u in np.unique(groups):
        Xu, yu = X[groups == u], y[groups == u]
        m = len(yu)
        Z = np.zeros((d, d))
        for j1 in range(m):
            for j2 in range(m):
                if j1 != j2:
                    Z += yu[j1] * yu[j2] * np.outer(Xu[j1], Xu[j2])
        if m >= 2:
            Z /= m * (m - 1)
        norm = np.linalg.norm(Z)
        if clip is not None and norm > clip:
            Z *= clip / norm
        total += Z
    return total


@pytest.mark.parametrize("clip", [None, 0.5, 3.0])
def test_spectral_statistic_matches_loop_reference(clip):
    X, y, groups = _toy(n_users=9, d=3, max_rows=7)  # some users have more rows than d
    blocks, _ = _blocks(groups)
    total, norms = rep.spectral_statistic(X, y, blocks, clip)
    assert_allclose(total, _loop_spectral_statistic(X, y, groups, clip), rtol=1e-10,
                    atol=1e-12)


def _loop_pairwise_statistic(X, y, groups, zeta):
    d = X.shape[1]
    total = np.zeros((d, d))
    yc = np.clip(y, -zeta, zeta)
    for u in np.unique(groups):
        rows = np.flatnonzero(groups == u)
        acc, n_pairs = np.zeros((d, d)), len(rows) // 2
        for p in range(n_pairs):
            a, b = rows[2 * p], rows[2 * p + 1]
            M = np.outer(X[a], X[b]) / (np.linalg.norm(X[a]) * np.linalg.norm(X[b]))
            acc += (M + M.T) / 2 * yc[a] * yc[b]
        if n_pairs:
            total += acc / n_pairs
    return total


def test_pairwise_statistic_matches_loop_reference():
    X, y, groups = _toy(n_users=8, d=4, max_rows=7)
    blocks, _ = _blocks(groups)
    assert_allclose(rep.pairwise_statistic(X, y, blocks, 0.7),
                    _loop_pairwise_statistic(X, y, groups, 0.7), rtol=1e-10, atol=1e-12)


def test_kron_gram_matches_materialised_vec():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 4))
    V = rng.standard_normal((6, 3))
    w = rng.random(6)
    W = np.stack([np.outer(X[r], V[r]).ravel(order="F") for r in range(6)])  # vec(x v^T)
    expected = (W * w[:, None]).T @ W
    assert_allclose(_kron_gram(X, np.arange(6), V, w), expected, rtol=1e-12, atol=1e-12)


def test_clip_scale_is_overflow_safe():
    scale = rep._clip_scale(np.array([0.0, 0.5, 2.0, np.inf]), 1.0)
    assert_allclose(scale, [1.0, 1.0, 0.5, 0.0])
    assert_allclose(rep._row_norms(np.array([[3e200, 4e200], [0.0, 0.0]])), [5e200, 0.0])


def test_subspace_distance_properties():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((6, 2)))
    R = rng.standard_normal((2, 2))
    assert rep.subspace_distance(U, U @ R) < 1e-12  # same column space
    W = np.linalg.qr(np.c_[U, rng.standard_normal((6, 2))])[0][:, 2:]
    assert_allclose(rep.subspace_distance(U, W), 1.0, rtol=1e-12)  # orthogonal spaces
    angle = 0.3
    a = np.array([[1.0], [0.0]])
    b = np.array([[np.cos(angle)], [np.sin(angle)]])
    assert_allclose(rep.subspace_distance(a, b), np.sin(angle), rtol=1e-12)


def test_random_init_is_orthonormal():
    Q = rep.random_init(7, 3, np.random.RandomState(0))
    assert_allclose(Q.T @ Q, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("n_small", [1, 6])  # 2 rows (<= d: QR path) and 7 rows (> d)
@pytest.mark.parametrize("big, small", [(1e6, 1e-4), (1e10, 1e-8), (1e15, 1e-6)])
def test_spectral_statistic_sensitivity_under_cancellation(big, small, n_small):
    """Replacing one user moves sum_i clip(Z_i, psi) by at most 2 psi in floating point.

    The canary's Z_i is a difference of huge terms (one row ``big e_1``, rows
    ``small e_2``): ``||Z_i||`` is large but ``s s^T`` and ``sum a a^T`` nearly
    cancel. A norm from the expanded formula ``||s||^4 - 2 sum (a^T s)^2 + ...``
    came out 0 (no clipping: the release moved by 7 to 1e13 times 2 psi).
    """
    rng = np.random.default_rng(0)
    n_users, m, d, psi = 40, 6, 4, 5.0
    X = rng.standard_normal((n_users * m, d))
    y = rng.standard_normal(n_users * m)
    groups = np.repeat(np.arange(n_users), m)
    keep = groups != n_users - 1
    Xc = np.zeros((1 + n_small, d))
    Xc[0, 0] = big
    Xc[1:, 1] = small
    X2 = np.r_[X[keep], Xc]
    y2 = np.r_[y[keep], np.ones(1 + n_small)]
    g2 = np.r_[groups[keep], np.full(1 + n_small, n_users - 1)]
    t1, _ = rep.spectral_statistic(X, y, _blocks(groups)[0], psi)
    t2, norms = rep.spectral_statistic(X2, y2, _blocks(g2)[0], psi)
    assert norms[-1] > psi  # the canary is clipped
    assert np.linalg.norm(t2 - t1) <= 2 * psi * (1 + 1e-9)


@pytest.mark.parametrize("scale", [1e-150, 1e-155, 1e-158, 1e-160, 10**-161.6, 1e-200, 1e150, 1e300])
def test_pairwise_contribution_bounded_for_any_magnitude(scale):
    """One user's pair matrix has norm <= zeta^2 whatever the magnitude of its rows.

    Dividing by ``||x|| ||x'||`` computed from subnormal squares gave norms up to
    1.13 zeta^2 (or NaN) for rows near 1e-160.
    """
    X = np.array([[scale, 0.0], [0.7 * scale, 0.7 * scale]])
    blocks = rep._RowBlocks(np.arange(2), np.zeros(2, dtype=int), 1)
    total = rep.pairwise_statistic(X, np.array([3.0, -3.0]), blocks, 1.0)
    assert np.all(np.isfinite(total))
    assert np.linalg.norm(total) <= 1.0 * (1 + 1e-12)


def test_unit_rows_and_row_norms_for_any_magnitude():
    M = np.array([[3e-160, 4e-160], [3e-320, 4e-320], [3e200, 4e200], [0.0, 0.0],
                  [np.inf, -np.inf]])
    unit, norms = unit_rows(M)
    assert_allclose(np.linalg.norm(unit, axis=1), [1, 1, 1, 0, 1], rtol=1e-15)
    assert_allclose(norms[[0, 2, 3]], [5e-160, 5e200, 0.0], rtol=1e-15)
    assert norms[4] == np.inf
    assert_allclose(rep._row_norms(M[:4])[[0, 2, 3]], [5e-160, 5e200, 0.0], rtol=1e-15)


def _near_threshold_users(rng, n_users, c, d):
    """Users of c rows whose U-statistic cancels more or less (rows ~ +-base + noise)."""
    out = []
    for i in range(n_users):
        base = rng.standard_normal(d)
        A = rng.standard_normal((c, d)) * 10.0 ** rng.uniform(-8, 0, size=(c, 1))
        if i % 2:
            A = np.sign(rng.standard_normal((c, 1))) * base + A * 10.0 ** rng.uniform(-6, 0)
        out.append(A / np.abs(A).max())
    return np.stack(out)


@pytest.mark.parametrize("c, d", [(2, 3), (4, 4), (5, 9)])
def test_spectral_few_rows_gram_route_matches_qr_route(monkeypatch, c, d):
    """Both routes of _spectral_few_rows add the same clipped term, within the clip bound.

    Users with little cancellation skip the QR; their term (clip factor from the
    Gram formula, product without Q) must equal the QR route's term (clip factor from
    the computed B, added as Q f B Q^T) to rounding, also just above the switch-over
    ratio, and never exceed psi.
    """
    rng = np.random.default_rng(c * d)
    Ap = _near_threshold_users(rng, 400, c, d)
    G = Ap @ Ap.transpose(0, 2, 1)
    g1 = G.sum(axis=2)
    nu = np.sqrt(np.maximum(g1.sum(1) ** 2 - 2 * (g1**2).sum(1) + (G**2).sum((1, 2)), 0))
    rho = nu / np.trace(G, axis1=1, axis2=2)
    fast = np.flatnonzero(rho >= rep._RHO_MIN)
    assert fast.size > 20 and (rho[fast] < 2 * rep._RHO_MIN).any()  # both routes, near edge
    ones = np.ones(1)
    for psi in [1e-3, 1.0]:
        for u in fast:
            t_gram, n_gram = rep._spectral_few_rows(Ap[u:u + 1], ones, ones, psi)
            with monkeypatch.context() as m:
                m.setattr(rep, "_RHO_MIN", np.inf)  # force the QR route
                t_qr, n_qr = rep._spectral_few_rows(Ap[u:u + 1], ones, ones, psi)
            assert_allclose(t_gram, t_qr, rtol=0, atol=1e-11 * np.linalg.norm(t_qr))
            assert_allclose(n_gram, n_qr, rtol=1e-11)
            assert np.linalg.norm(t_gram) <= min(n_gram[0], psi) * (1 + 1e-12)
    # the mixed call is the sum of the one-user calls
    total, _ = rep._spectral_few_rows(Ap, np.ones(len(Ap)), np.ones(len(Ap)), 1.0)
    parts = sum(rep._spectral_few_rows(Ap[u:u + 1], ones, ones, 1.0)[0] for u in range(len(Ap)))
    assert_allclose(total, parts, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("big", [1.0, 1e10, 1e-120])
def test_spectral_statistic_sensitivity_near_route_threshold(big):
    """A canary whose cancellation ratio is just above the Gram route's threshold moves
    the statistic by at most 2 psi (rows of any magnitude)."""
    rng = np.random.default_rng(1)
    n_users, m, d, psi = 30, 3, 5, 0.5
    X = rng.standard_normal((n_users * m, d))
    y = rng.standard_normal(n_users * m)
    groups = np.repeat(np.arange(n_users), m)
    t1, _ = rep.spectral_statistic(X, y, _blocks(groups)[0], psi)
    keep = groups != n_users - 1
    base = rng.standard_normal(d)
    small = rng.standard_normal((m - 1, d))
    routes = set()
    for t in np.geomspace(1e-3, 1.0, 25):  # one big row, m - 1 rows of size t
        Xc = big * np.r_[base[None], t * small]
        X2 = np.r_[X[keep], Xc]
        y2 = np.r_[y[keep], np.ones(m)]
        g2 = np.r_[groups[keep], np.full(m, n_users - 1)]
        A = Xc / np.abs(Xc).max()
        G = A @ A.T
        g1 = G.sum(axis=1)
        ratio = np.sqrt(max(g1.sum() ** 2 - 2 * g1 @ g1 + (G * G).sum(), 0)) / np.trace(G)
        routes.add(bool(ratio >= rep._RHO_MIN))
        t2, norms = rep.spectral_statistic(X2, y2, _blocks(g2)[0], psi)
        assert np.linalg.norm(t2 - t1) <= 2 * psi * (1 + 1e-9)
    assert routes == {True, False}  # the sweep crosses the threshold


def _fro(M):
    """Frobenius norm of a float array to ~1e-16 relative at any magnitude."""
    top = np.max(np.abs(M)) if M.size else 0.0
    if top == 0:
        return 0.0
    e = math.frexp(top)[1]
    return math.ldexp(math.sqrt(math.fsum((np.ldexp(M, -e) ** 2).ravel())), e)


def _one_user(X, y, psi):
    blocks = rep._RowBlocks(np.arange(len(y)), np.zeros(len(y), dtype=int), 1)
    with np.errstate(all="ignore"):
        return rep.spectral_statistic(X, y, blocks, psi)


# (route, X, y, ||Z||): rows whose scaled Gram / U-statistic entries have subnormal
# squares (~1e-320). Norms from plain sums of squares were off by up to ~50%, and
# the clipped term exceeded psi (by 6e-6 .. 6%; up to 27% on a FedRep release).
_SUBNORMAL_SQUARES = [
    *[("gram", [[1e150, 0, 0], [0, 10.0 ** (150 - e), 0]], [10.0 ** -e, 1.0],
       10.0 ** (300 - 2 * e) / math.sqrt(2)) for e in (80, 80.5, 81, 81.3)],
    *[("qr", [[1e100, 0, 0], [0, 10.0 ** (100 - e), 0]], [1.0, 1.0],
       10.0 ** (200 - e) / math.sqrt(2)) for e in (158, 160, 161)],
    *[("explicit", [[1e100, 0], [0, 10.0 ** (100 - e)], [0, 10.0 ** (100 - e)]],
       [1.0, 1.0, 1.0], math.sqrt(2) * 10.0 ** (200 - e) / 3) for e in (158, 160, 161)],
]


@pytest.mark.parametrize("route, X, y, norm", _SUBNORMAL_SQUARES)
def test_spectral_statistic_clip_exact_when_squares_are_subnormal(route, X, y, norm):
    """Each route's clipped term has norm <= psi even when the squares of the scaled
    entries are subnormal (Gram route: _GRAM_MIN; QR and explicit routes: safe norms)."""
    total, norms = _one_user(np.array(X, dtype=float), np.array(y), 1.0)
    assert_allclose(norms, [norm], rtol=1e-12)
    assert _fro(total) <= 1.0 * (1 + 1e-12)
    assert_allclose(_fro(total), 1.0, rtol=1e-12)


def _adversarial_user(rng):
    """One user's (X, y): near-parallel, duplicated, zero, threshold-straddling or
    wildly scaled rows, split into x and y with magnitudes anywhere in 1e-300..1e300."""
    d = int(rng.choice([2, 3, 4, 5, 8, 12]))
    c = int(rng.integers(2, d + 1)) if rng.random() < 0.85 else int(rng.integers(d + 1, d + 4))
    kind = rng.integers(6)
    if kind == 0:
        A = rng.standard_normal((c, d))
    elif kind == 1:  # nearly parallel, random signs
        A = np.sign(rng.standard_normal((c, 1))) * rng.standard_normal(d) \
            + rng.standard_normal((c, d)) * 10.0 ** rng.uniform(-16, 0)
    elif kind == 2:  # duplicated rows, zero columns / rows
        A = rng.standard_normal((c, d))
        A[rng.integers(c)] = A[0]
        A[:, rng.random(d) < 0.3] = 0
        if rng.random() < 0.3:
            A[rng.integers(c)] = 0
    elif kind == 3:  # one big row + small rows: ratio around the Gram route's threshold
        A = np.r_[rng.standard_normal((1, d)),
                  10.0 ** rng.uniform(-2.5, 0) * rng.standard_normal((c - 1, d))]
    elif kind == 4:  # two orthogonal rows and tiny others
        A = np.zeros((c, d))
        A[0, 0], A[1, 1 % d] = 1.0, 10.0 ** rng.uniform(-3, 0)
        A[2:] = rng.standard_normal((c - 2, d)) * 10.0 ** rng.uniform(-200, 0)
    else:  # per-row magnitudes wildly different
        A = rng.standard_normal((c, d)) * 10.0 ** rng.uniform(-170, 0, size=(c, 1))
    ly = rng.uniform(-150, 150, size=c) if rng.random() < 0.7 else np.zeros(c)
    y = np.sign(rng.standard_normal(c)) * 10.0 ** ly
    with np.errstate(all="ignore"):
        X = A * 10.0 ** (rng.uniform(-140, 140) - ly)[:, None]
    X[~np.isfinite(X)] = 0
    return X, y


def test_spectral_statistic_clip_bound_adversarial_search():
    """Seeded adversarial search over single users (all three routes): the added term
    never exceeds psi (1 + 1e-9), with its norm computed to ~1e-16. The version with
    _GRAM_MIN = 1e-200 and plain sums of squares reached 1.0026 psi on these seeds."""
    rng = np.random.default_rng(20261121)
    worst, gram_route = 0.0, 0
    for _ in range(2500):
        X, y = _adversarial_user(rng)
        c, d = X.shape
        _, nz = _one_user(X, y, None)
        if not (np.isfinite(nz[0]) and nz[0] > 1e-280):
            continue
        psi = nz[0] * 10.0 ** rng.uniform(-4, -0.01)  # clipped
        total, _ = _one_user(X, y, psi)
        assert np.all(np.isfinite(total))
        worst = max(worst, _fro(total) / psi)
        if c <= d:  # which route of _spectral_few_rows (same scaling as the code)
            sx, sy = np.abs(X).max(), np.abs(y).max()
            A = (X / sx) * (y / sy)[:, None]
            G = A @ A.T
            g1 = G.sum(axis=1)
            a2 = np.trace(G)
            nu = np.sqrt(max(g1.sum() ** 2 - 2 * g1 @ g1 + (G * G).sum(), 0.0))
            gram_route += bool(a2 >= rep._GRAM_MIN and nu >= rep._RHO_MIN * a2)
    assert worst <= 1 + 1e-9
    assert gram_route > 300


@pytest.mark.parametrize("e", [80.0, 81.0])
def test_fedrep_init_sensitivity_subnormal_gram(e):
    """Harness check on a FedRep fit: the canary's two rows (repeated) have a scaled
    Gram whose squares are subnormal; flipping one target negates its term. The
    spectral-initialisation release moved by 1.27 * 2 psi before _GRAM_MIN = 1e-100."""
    from skdpp.datasets import make_shared_representation_regression
    from skdpp.linear_model._fedrep import PrivateFedRepRegressor

    X, y, groups, _ = make_shared_representation_regression(
        n_users=15, n_features=4, n_components=2, n_samples_per_user=6, noise=0.1,
        n_test_samples_per_user=0, random_state=0)
    user = groups.max()
    keep = groups != user

    def with_canary(sign):
        rows = np.tile([[1e150, 0, 0, 0], [0, 10.0 ** (150 - e), 0, 0]], (3, 1))
        ys = np.tile([sign * 10.0 ** -e, 1.0], 3)
        return (np.r_[X[keep], rows], np.r_[y[keep], ys],
                np.r_[groups[keep], np.full(len(ys), user)])

    def fit_on(Xa, ya, ga):
        return PrivateFedRepRegressor(epsilon=1.0, max_iter=2, random_state=0).fit(
            Xa, ya, groups=ga)

    assert_sensitivity(fit_on, with_canary(1.0), with_canary(-1.0))


@pytest.mark.parametrize("max_rows", [1, 3, 1000])
def test_fit_heads_chunked_matches_fit_heads(max_rows):
    X, y, groups = _toy(n_users=9, max_rows=8)
    blocks, _ = _blocks(groups)
    sub = blocks.take(np.random.default_rng(0).random(len(blocks)) < 0.6)  # not all rows
    U, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((X.shape[1], 2)))
    expected, _ = rep.fit_heads(X, y, U, sub)
    assert_allclose(rep.fit_heads_chunked(X, y, U, sub, max_rows=max_rows), expected,
                    rtol=1e-12, atol=1e-14)
