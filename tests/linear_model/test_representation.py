"""Tests of the shared-representation building blocks (loop-based references)."""

import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.linear_model._algorithms import representation as rep
from skdpp.linear_model._representation import subspace_distance
from skdpp.linear_model import _scratch
from skdpp.linear_model._algorithms import spectral_init as si
from skdpp.linear_model._algorithms.altmin import _assemble_gram, _kron_blocks
from skdpp.privacy._clipping import (
    clip_by_norm,
    clipped_outer_sum,
    row_norms,
    scaled_clip_factors,
    unit_rows,
)
from skdpp.utils import UserIndex
from skdpp.utils._executor import LocalExecutor
from skdpp.utils._grouped import make_blocks
from skdpp.utils._random import FitRandomness
from tests.privacy.harness import assert_sensitivity

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)


def _toy(n_users=7, d=4, seed=0, max_rows=6):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_rows + 1, size=n_users)
    groups = np.repeat(np.arange(n_users), counts)
    rng.shuffle(groups)
    X = rng.standard_normal((groups.size, d))
    y = rng.standard_normal(groups.size)
    return X, y, groups


def _block(X, y, groups, **kwargs):
    """All rows as one block of whole users (canonical order)."""
    index = UserIndex.from_groups(groups, len(groups))
    return make_blocks(X, np.asarray(y, dtype=float), index, max_rows=None, **kwargs)[0]


def _one_user_block(X, y):
    return _block(X, y, np.zeros(len(y), dtype=int))


def test_fit_heads_matches_per_user_least_squares():
    X, y, groups = _toy(max_rows=8)
    block = _block(X, y, groups)
    U, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((X.shape[1], 2)))
    V = rep.fit_heads(block, block.take(X) @ U, block.take(y))
    for u in range(block.n_users):
        rows = groups == block.users[u]
        P = X[rows] @ U
        if rows.sum() >= 2:
            expected = np.linalg.lstsq(P, y[rows], rcond=None)[0]
            assert_allclose(V[u], expected, rtol=1e-7, atol=1e-9)
        else:  # underdetermined: approximately the minimum-norm solution
            expected = np.linalg.pinv(P) @ y[rows]
            assert_allclose(V[u], expected, rtol=1e-4, atol=1e-6)


def test_fit_heads_user_without_rows_gets_zero_head():
    X, y, groups = _toy()
    block = _block(X, y, groups)
    sub = block.select(block.row_user != 3)
    V = rep.fit_heads(sub, sub.take(X) @ np.eye(X.shape[1])[:, :2], sub.take(y))
    assert V.shape == (block.n_users, 2)
    assert_array_equal(V[3], 0.0)


def test_fit_heads_non_finite_projections_give_zero_heads():
    """``X U`` can overflow to inf (or NaN, inf - inf, in another BLAS's summation
    order) for values near the float maximum: that user's head is 0, the others are
    unaffected, and nothing raises or warns (LAPACK's SVD raised on NaN)."""
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    block = _block(np.zeros((6, 1)), y, np.repeat([0, 1, 2], 2))
    P = np.array([[np.nan, 1.0], [1.0, 2.0], [np.inf, -np.inf], [1.0, 1.0],
                  [1.0, 0.5], [2.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        V = rep.fit_heads(block, P, block.take(y))
    assert_array_equal(V[:2], 0.0)
    expected = rep.fit_heads(block.user_range(2, 3), P[4:], block.take(y)[4:])
    assert_allclose(V[2], expected[0], rtol=1e-12)
    assert np.all(np.isfinite(V))


@pytest.mark.parametrize("max_rows", [1, 3, 1000])
def test_heads_do_not_depend_on_the_blocks(max_rows):
    X, y, groups = _toy(n_users=9, max_rows=8)
    U, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((X.shape[1], 2)))
    index = UserIndex.from_groups(groups, len(y))
    one = LocalExecutor(make_blocks(X, y, index, max_rows=None))
    many = LocalExecutor(make_blocks(X, y, index, max_rows=max_rows))
    prior = rep.PersonalPrior(np.array([0.3, -0.2]), 0.1, 0.5, 10.0, True)
    parts = []
    for executor in (one, many):
        executor.map(rep.final_statistics, (U, "all", True))
        parts.append(executor.collect(rep._personal_block, prior))
    for got, expected in zip(parts[1], parts[0]):
        assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


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
    total, norms = si.spectral_statistic(_block(X, y, groups), clip)
    assert_allclose(total, _loop_spectral_statistic(X, y, groups, clip), rtol=1e-10,
                    atol=1e-12)


def _loop_pairwise_statistic(X, y, groups, zeta, order):
    """Loop reference; each user's rows are paired consecutively in ``order``."""
    d = X.shape[1]
    total = np.zeros((d, d))
    yc = np.clip(y, -zeta, zeta)
    for u in np.unique(groups):
        rows = [r for r in order if groups[r] == u]
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
    block = _block(X, y, groups)
    assert_allclose(si.pairwise_statistic(block, 0.7),
                    _loop_pairwise_statistic(X, y, groups, 0.7, block.source_rows()),
                    rtol=1e-10, atol=1e-12)


def test_kron_gram_matches_materialised_vec():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 4))
    V = rng.standard_normal((6, 3))
    w = rng.random(6)
    W = np.stack([np.outer(X[r], V[r]).ravel(order="F") for r in range(6)])  # vec(x v^T)
    expected = (W * w[:, None]).T @ W
    assert_allclose(_assemble_gram(_kron_blocks(X, V, w), 3), expected, rtol=1e-12,
                    atol=1e-12)


def test_subspace_distance_properties():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((6, 2)))
    R = rng.standard_normal((2, 2))
    assert subspace_distance(U, U @ R) < 1e-12  # same column space
    W = np.linalg.qr(np.c_[U, rng.standard_normal((6, 2))])[0][:, 2:]
    assert_allclose(subspace_distance(U, W), 1.0, rtol=1e-12)  # orthogonal spaces
    angle = 0.3
    a = np.array([[1.0], [0.0]])
    b = np.array([[np.cos(angle)], [np.sin(angle)]])
    assert_allclose(subspace_distance(a, b), np.sin(angle), rtol=1e-12)


def test_random_init_is_orthonormal():
    Q = si.random_init(7, 3, np.random.default_rng(0))
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
    t1, _ = si.spectral_statistic(_block(X, y, groups), psi)
    t2, norms = si.spectral_statistic(_block(X2, y2, g2), psi)
    assert norms[-1] > psi  # the canary is clipped
    assert np.linalg.norm(t2 - t1) <= 2 * psi * (1 + 1e-9)


@pytest.mark.parametrize("scale", [1e-150, 1e-155, 1e-158, 1e-160, 10**-161.6, 1e-200, 1e150, 1e300])
def test_pairwise_contribution_bounded_for_any_magnitude(scale):
    """One user's pair matrix has norm <= zeta^2 whatever the magnitude of its rows.

    Dividing by ``||x|| ||x'||`` computed from subnormal squares gave norms up to
    1.13 zeta^2 (or NaN) for rows near 1e-160.
    """
    X = np.array([[scale, 0.0], [0.7 * scale, 0.7 * scale]])
    total = si.pairwise_statistic(_one_user_block(X, np.array([3.0, -3.0])), 1.0)
    assert np.all(np.isfinite(total))
    assert np.linalg.norm(total) <= 1.0 * (1 + 1e-12)


def test_unit_rows_and_row_norms_for_any_magnitude():
    M = np.array([[3e-160, 4e-160], [3e-320, 4e-320], [3e200, 4e200], [0.0, 0.0],
                  [np.inf, -np.inf]])
    unit, norms = unit_rows(M)
    assert_allclose(np.linalg.norm(unit, axis=1), [1, 1, 1, 0, 1], rtol=1e-15)
    assert_allclose(norms[[0, 2, 3]], [5e-160, 5e200, 0.0], rtol=1e-15)
    assert norms[4] == np.inf


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
    fast = np.flatnonzero(rho >= si._RHO_MIN)
    assert fast.size > 20 and (rho[fast] < 2 * si._RHO_MIN).any()  # both routes, near edge
    ones = np.ones(1)
    for psi in [1e-3, 1.0]:
        for u in fast:
            t_gram, n_gram = si._spectral_few_rows(Ap[u:u + 1], ones, ones, psi)
            with monkeypatch.context() as m:
                m.setattr(si, "_RHO_MIN", np.inf)  # force the QR route
                t_qr, n_qr = si._spectral_few_rows(Ap[u:u + 1], ones, ones, psi)
            assert_allclose(t_gram, t_qr, rtol=0, atol=1e-11 * np.linalg.norm(t_qr))
            assert_allclose(n_gram, n_qr, rtol=1e-11)
            assert np.linalg.norm(t_gram) <= min(n_gram[0], psi) * (1 + 1e-12)
    # the mixed call is the sum of the one-user calls
    total, _ = si._spectral_few_rows(Ap, np.ones(len(Ap)), np.ones(len(Ap)), 1.0)
    parts = sum(si._spectral_few_rows(Ap[u:u + 1], ones, ones, 1.0)[0] for u in range(len(Ap)))
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
    t1, _ = si.spectral_statistic(_block(X, y, groups), psi)
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
        routes.add(bool(ratio >= si._RHO_MIN))
        t2, norms = si.spectral_statistic(_block(X2, y2, g2), psi)
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
    with np.errstate(all="ignore"):
        return si.spectral_statistic(_one_user_block(X, y), psi)


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
            gram_route += bool(a2 >= si._GRAM_MIN and nu >= si._RHO_MIN * a2)
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


# --------------------------------------------------------------------------- #
# The keyed S^0 / S^1 split
# --------------------------------------------------------------------------- #
def _split_by_user(X, y, groups, seed=0, max_rows=None):
    """{user: sorted contents of its S^0 rows} from the fit's block function."""
    index = UserIndex.from_groups(groups, len(y))
    executor = LocalExecutor(make_blocks(X, y, index, max_rows=max_rows))
    executor.map(rep.prepare_split, (FitRandomness(seed).key, False))
    out = {}
    for state in executor.states:
        s0 = state.s0
        rows = s0.source_rows()
        for u in range(s0.n_users):
            r = rows[s0.offsets[u]:s0.offsets[u + 1]]
            out[s0.users[u]] = sorted(map(tuple, np.c_[X[r], y[r]].tolist()))
    return out


def test_split_sizes_and_final_rows():
    X, y, groups = _toy(n_users=30, max_rows=9, seed=4)
    index = UserIndex.from_groups(groups, len(y))
    executor = LocalExecutor(make_blocks(X, y, index, max_rows=16))
    executor.map(rep.prepare_split, (FitRandomness(0).key, False))
    for block, state in zip(executor.blocks, executor.states):
        m = block.counts
        expected = np.where(m >= 2, np.clip(np.ceil(m / 2), 1, m - 1), m)
        assert_array_equal(state.s0.counts, expected)
        # final heads: S^1, or the S^0 row of a one-row user
        assert_array_equal(state.final.counts, np.where(m == 1, 1, m - expected))
        assert_array_equal(state.local.take(state.y0), state.s0.take(y))


def test_split_is_a_function_of_each_users_own_rows():
    """Permuting rows, re-blocking, adding a user and relabelling another leave every
    other user's S^0 unchanged; another key changes it."""
    X, y, groups = _toy(n_users=25, max_rows=9, seed=5)
    base = _split_by_user(X, y, groups)
    p = np.random.default_rng(0).permutation(len(y))
    assert _split_by_user(X[p], y[p], groups[p], max_rows=5) == base
    rng = np.random.default_rng(1)
    X2 = np.r_[X, rng.standard_normal((4, X.shape[1]))]
    y2 = np.r_[y, rng.standard_normal(4)]
    g2 = np.r_[np.where(groups == 2, 77, groups), np.full(4, 40)]
    other = _split_by_user(X2, y2, g2)
    assert all(other[u] == v for u, v in base.items() if u != 2)
    assert _split_by_user(X, y, groups, seed=1) != base


# --------------------------------------------------------------------------- #
# Scratch buffers
# --------------------------------------------------------------------------- #
def test_scratch_buffer_is_reused_and_grows():
    _scratch.release_scratch()
    a = _scratch.scratch("t", 5, 3, np.float64)
    b = _scratch.scratch("t", 4, 3, np.float64)
    assert a.shape == (5, 3) and b.shape == (4, 3)
    assert np.shares_memory(a, b)  # the same memory, no fresh allocation
    c = _scratch.scratch("t", 9, 3, np.float64)  # grows
    assert c.shape == (9, 3) and not np.shares_memory(a, c)
    assert _scratch.scratch("t", 2, 3, np.float32).dtype == np.float32
    assert not np.shares_memory(_scratch.scratch("u", 2, 3, np.float64), c)  # names differ
    _scratch.release_scratch()
    assert not np.shares_memory(_scratch.scratch("t", 2, 3, np.float64), c)
    _scratch.release_scratch()


# --------------------------------------------------------------------------- #
# Clipping primitives used by the two estimators
# --------------------------------------------------------------------------- #
def test_clipped_outer_sum_matches_per_row_reference():
    rng = np.random.default_rng(0)
    scales = 10.0 ** rng.uniform(-200, 200, size=(60, 1))
    A = rng.standard_normal((60, 4)) * scales
    B = rng.standard_normal((60, 3)) * 10.0 ** rng.uniform(-150, 150, size=(60, 1))
    A[3] = 0.0
    B[5] = 0.0
    psi = 0.9
    expected = np.zeros((4, 3))
    for a, b in zip(A, B):
        au, an = unit_rows(a[None])
        bu, bn = unit_rows(b[None])
        with np.errstate(over="ignore"):
            expected += min(an[0] * bn[0], psi) * np.outer(au[0], bu[0])
    assert_allclose(clipped_outer_sum(A, B, psi), expected, rtol=1e-12, atol=1e-300)
    with np.errstate(all="ignore"):
        assert_allclose(clipped_outer_sum(A[:2], B[:2], None), A[:2].T @ B[:2])


def test_clipped_outer_sum_infinite_rows_never_give_nan():
    """A row with infinite entries contributes psi times the sign pattern (never
    inf * 0 = NaN); NaN input raises."""
    A = np.array([[np.inf, -np.inf, 0.0], [1.0, 0.0, 0.0]])
    B = np.array([[2.0], [0.0]])
    total = clipped_outer_sum(A, B, 1.0)
    assert_allclose(total, [[2**-0.5], [-(2**-0.5)], [0.0]], rtol=1e-15)
    with pytest.raises(ValueError, match="NaN"):
        clipped_outer_sum(np.array([[np.nan]]), np.array([[1.0]]), 1.0)


def test_scaled_clip_factors():
    f, full = scaled_clip_factors([2.0, 0.5, 1e-260, 1.0, 3.0], [1.0, 1.0, 1e300, np.inf, 1e-300],
                                  1.0)
    assert_allclose(f, [0.5, 1.0, 0.0, 1.0, 1e-300])
    assert_allclose(full[:2], [2.0, 0.5])
    assert full[3] == np.inf
    f, _ = scaled_clip_factors([2.0, 1e-300], [3.0, 1.0], None)
    assert_allclose(f, [3.0, 0.0])


# --------------------------------------------------------------------------- #
# Fuzz: one user's contribution with extreme values
# --------------------------------------------------------------------------- #
def _extreme_user(rng, d):
    m = int(rng.integers(1, 2 * d + 2))
    with np.errstate(over="ignore"):
        X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-300, 308.2, size=(m, 1))
        y = rng.standard_normal(m) * 10.0 ** rng.uniform(-300, 308.2, size=m)
    if rng.random() < 0.3:
        X[rng.integers(m)] = 0.0
    if rng.random() < 0.3:
        X = np.tile(X[:1], (m, 1))  # duplicated rows
    return np.clip(X, -1.7e308, 1.7e308), np.clip(y, -1.7e308, 1.7e308)


@pytest.mark.parametrize("statistic", ["spectral", "pairwise"])
def test_init_contribution_fuzz_bounded_and_finite(statistic):
    """One user's clipped init contribution with values up to the float maximum (inf
    intermediates) is finite, within its bound (psi or zeta^2) and warning-free."""
    rng = np.random.default_rng(11)
    bound = 0.8
    for _ in range(300):
        X, y = _extreme_user(rng, int(rng.choice([2, 3, 5])))
        block = _one_user_block(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if statistic == "spectral":
                total = si.spectral_statistic(block, bound)[0]
            else:
                total = si.pairwise_statistic(block, bound**0.5)
        assert np.all(np.isfinite(total))
        assert np.linalg.norm(total) <= bound * (1 + 1e-9)


def test_cold_start_contribution_fuzz_bounded_and_finite():
    """The final heads of users with extreme values are finite and each clipped head
    has norm <= C_head; the block function emits no warning."""
    rng = np.random.default_rng(12)
    d, C = 4, 0.6
    U = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    users = [_extreme_user(rng, d) for _ in range(200)]
    X = np.concatenate([u[0] for u in users])
    y = np.concatenate([u[1] for u in users])
    groups = np.repeat(np.arange(len(users)), [len(u[1]) for u in users])
    index = UserIndex.from_groups(groups, len(y))
    executor = LocalExecutor(make_blocks(X, y, index, max_rows=50))
    executor.map(rep.prepare_split, (FitRandomness(0).key, True))
    prior = rep.PersonalPrior(np.array([0.3, -0.2]), 0.1, 0.5, 10.0, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in ("holdout", "all"):
            for block, state in zip(executor.blocks, executor.states):
                _, fin = rep.final_statistics(block, state, (U, rows, True))
                heads = fin.stats.raw_heads
                assert np.all(np.isfinite(heads))
                for floor in (0.0, 0.05):  # least-squares / ridge cold statistic
                    partial, _ = rep._clipped_heads(block, fin, (C, floor))
                    assert np.all(np.isfinite(partial))
                    assert np.linalg.norm(partial) <= C * block.n_users * (1 + 1e-12)
                    cold = rep.cold_statistic_heads(fin.stats, floor)
                    assert np.all(np.isfinite(cold))
                # each user's contribution: its head clipped to C
                assert np.all(row_norms(clip_by_norm(heads, C)) <= C * (1 + 1e-12))
                # the intercept's contribution: each user's offset clipped to the radius
                total, _ = rep._offsets(block, fin, (prior.head, lambda v: np.array(
                    [np.abs(np.clip(np.nan_to_num(v, nan=0.0), -0.5, 0.5)).sum()])))
                assert np.isfinite(total).all() and total[0] <= 0.5 * block.n_users
                personal_heads, intercepts = rep._personal_block(block, fin, prior)
                assert np.isfinite(personal_heads).all() and np.isfinite(intercepts).all()
