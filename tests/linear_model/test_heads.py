"""Tests of the shared small solves (skdpp.linear_model._heads)."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.linear_model import _heads
from skdpp.linear_model._heads import batched_solve



def test_batched_solve_does_not_mutate_inputs():
    M = np.random.default_rng(0).normal(size=(4, 3, 3))
    M0 = M.copy()
    batched_solve(M, np.ones((4, 3)), ridge=1.0)
    np.testing.assert_array_equal(M, M0)

def test_batched_solve_matches_solve():
    rng = np.random.default_rng(3)
    G = rng.normal(size=(50, 4, 4))
    A = G @ np.swapaxes(G, 1, 2) + np.eye(4)
    b = rng.normal(size=(50, 4))
    x = batched_solve(A, b, ridge=0.5)
    expected = np.linalg.solve(A + 0.5 * np.eye(4), b[..., None])[..., 0]
    assert_allclose(x, expected, rtol=1e-10)


def test_batched_solve_singular_items_use_pinv():
    A = np.stack([np.eye(2), np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros((2, 2))])
    b = np.ones((3, 2))
    x = batched_solve(A, b)
    assert_allclose(x, [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], atol=1e-12)


def test_batched_solve_matrix_rhs():
    A = np.stack([2 * np.eye(3)] * 2)
    b = np.ones((2, 3, 4))
    assert_allclose(batched_solve(A, b), 0.5 * b, rtol=1e-12)


def test_batched_solve_numerically_singular_items_use_pinv():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(6, 3))
    A = np.einsum("ni,nj->nij", a, a)  # rank-1 Gram matrices: one row per user, k=3
    A[0] = A[0] + np.eye(3)  # one well-posed item in the stack
    b = rng.normal(size=(6, 3))
    expected = (np.linalg.pinv(A) @ b[..., None])[..., 0]
    assert_allclose(batched_solve(A, b), expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_shrunk_heads_solve_the_penalised_normal_equations(k):
    """``(A + diag(q)) v = r + q * p`` (plus the tiny relative ridge towards ``p``);
    users without rows, or with an infinite penalty, get the prior."""
    from skdpp.linear_model._heads import shrunk_heads

    rng = np.random.default_rng(k)
    n = 6
    P = rng.standard_normal((n, 5, k))
    A = np.einsum("nri,nrj->nij", P, P)
    r = np.einsum("nri,nr->ni", P, rng.standard_normal((n, 5)))
    prior = rng.standard_normal((n, k))
    q = rng.random((n, k)) * 3
    A[0], r[0] = 0.0, 0.0          # a user without rows, no penalty
    q[1] = np.inf                  # an infinite penalty
    V = shrunk_heads(A, r, prior, q, np.full(n, 5))
    assert_allclose(V[0], prior[0])
    assert_allclose(V[1], prior[1])
    for i in range(2, n):
        expected = np.linalg.solve(A[i] + np.diag(q[i]), r[i] + q[i] * prior[i])
        assert_allclose(V[i], expected, rtol=1e-6, atol=1e-9)
    # a scalar penalty per user is the same on every coordinate
    assert_allclose(shrunk_heads(A, r, prior, q[:, 0], np.full(n, 5))[2:],
                    shrunk_heads(A, r, prior, np.repeat(q[:, :1], k, axis=1),
                                 np.full(n, 5))[2:])


@pytest.mark.parametrize("per_column", [True, False])
def test_shrunk_heads_per_column_ridge_follows_each_column_units(per_column):
    """PPSGD's refit solves in raw feature units: with ``per_column`` the relative ridge
    is ``c A_jj``, so a column in 1e9 times larger units (a raw timestamp) gives the
    same fit with that coordinate 1e9 times smaller (up to the ridge's floor ``c eps
    tr(A) / k``: 1e-8 of the other columns' variance here). Broken variant: the
    trace-based ridge (``per_column=False``) lets that column shrink the others."""
    from skdpp.linear_model._heads import shrunk_heads

    rng = np.random.default_rng(0)
    n, m, k = 5, 8, 3
    X = rng.standard_normal((n, m, k))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal((n, m))
    units = np.array([1.0, 1.0, 1e9])
    out = []
    for d in (np.ones(k), units):
        Xd = X * d
        A, r = np.einsum("nri,nrj->nij", Xd, Xd), np.einsum("nri,nr->ni", Xd, y)
        q = 0.3 * np.einsum("nii->ni", A) / m  # a penalty in the column's own units
        out.append(shrunk_heads(A, r, np.zeros(k), q, np.full(n, m),
                                per_column=per_column) * d)
    if per_column:
        assert_allclose(out[1], out[0], rtol=1e-5)
    else:
        assert np.abs(out[1][:, :2]).max() < 0.5 * np.abs(out[0][:, :2]).max()


# --------------------------------------------------------------------------- #
# Per-system decisions (issue 19, joint DP): replacing one system of a stack
# leaves every other system's solution bit-for-bit identical.
# --------------------------------------------------------------------------- #
N_SYSTEMS, VICTIM = 30, 7


def _base_stack(k, seed=0, awkward=True):
    """PSD Gram matrices, right-hand sides, counts: well posed, plus (``awkward``) a
    few awkward users (rank deficient, no rows) so that fallbacks have company."""
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(N_SYSTEMS, k + 3, k))
    if awkward:
        P[3, :, 1:] = 0.0           # rank one
        P[11] = 0.0                 # no rows
        P[19] *= 1e-3               # small
    A = np.einsum("nri,nrj->nij", P, P)
    r = np.einsum("nri,nr->ni", P, rng.normal(size=(N_SYSTEMS, k + 3)))
    return A, r, np.full(N_SYSTEMS, k + 3)


def _degenerate(case, k):
    """One degenerate system ``(A, r)``."""
    v = np.arange(1.0, k + 1.0)
    if case == "zeros":
        return np.zeros((k, k)), np.ones(k)
    if case == "rank_one":  # exactly singular for LU
        return np.outer(v, v), v
    if case == "subnormal":  # finite, LU solution overflows
        return 1e-320 * np.eye(k), np.full(k, 1e10)
    if case == "tiny":  # finite, its solution overflows after any relative ridge
        return 1e-300 * np.eye(k), np.full(k, 1e10)
    if case == "float_max":  # exactly singular once the ridge is absorbed
        return np.full((k, k), np.finfo(np.float64).max), np.ones(k)
    if case == "inf":
        A = np.eye(k)
        A[0, 0] = np.inf
        return A, np.ones(k)
    if case == "nan":
        return np.eye(k), np.full(k, np.nan)
    if case == "near_singular":
        A = np.outer(v, v)
        A[-1, -1] += 1e-12
        return A, v
    raise ValueError(case)


DEGENERATE = ["zeros", "rank_one", "subnormal", "tiny", "float_max", "inf", "nan", "near_singular"]

# Every batched solve of the module, as ``f(A, r, counts) -> solutions``.
SOLVERS = {
    "batched_solve": lambda A, r, c: _heads.batched_solve(A, r),
    "batched_solve_matrix": lambda A, r, c: _heads.batched_solve(A, np.stack([r, -r], -1)),
    "_solve_stack": lambda A, r, c: _heads._solve_stack(A, r),
    "_lu_each": lambda A, r, c: _heads._lu_each(A, r[..., None]),
    "solve_heads": lambda A, r, c: _heads.solve_heads(A, r, c),
    "shrunk_heads": lambda A, r, c: _heads.shrunk_heads(A, r, 0.5, np.zeros(len(c)), c),
    "shrunk_heads_penalised": lambda A, r, c: _heads.shrunk_heads(
        A, r, np.linspace(-1, 1, A.shape[-1]), np.full(len(c), 2.0), c),
    "gram_ridge_solve": lambda A, r, c: _heads.gram_ridge_solve(A, r, 1e-3),
}


def _assert_others_identical(solver, k, case, awkward=True):
    A, r, counts = _base_stack(k, awkward=awkward)
    first = solver(A, r, counts)
    A2, r2 = A.copy(), r.copy()
    A2[VICTIM], r2[VICTIM] = _degenerate(case, k)
    with np.errstate(all="ignore"):
        second = solver(A2, r2, counts)
    others = np.arange(N_SYSTEMS) != VICTIM
    assert np.array_equal(first[others], second[others], equal_nan=True), (
        f"replacing system {VICTIM} by a {case!r} system changed other systems' solutions")


@pytest.mark.parametrize("awkward", [False, True])
@pytest.mark.parametrize("case", DEGENERATE)
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("name", list(SOLVERS))
def test_one_system_never_changes_the_others(name, k, case, awkward):
    _assert_others_identical(SOLVERS[name], k, case, awkward)


def test_lu_each_matches_solving_alone():
    """The batched LU equals each system solved alone, bit for bit (numpy's gufuncs)."""
    A, r, _ = _base_stack(4)
    A[VICTIM] = 0.0  # exactly singular: the screened path
    X = _heads._lu_each(A, r[..., None])
    assert np.isnan(X[VICTIM]).all()
    singular = np.linalg.slogdet(A)[0] == 0
    assert singular.sum() == 3  # the victim, the rank-one user, the user without rows
    assert np.isnan(X[singular]).all()
    for i in np.flatnonzero(~singular):
        assert np.array_equal(X[i], np.linalg.solve(A[i], r[i][:, None]))
    inv = _heads._lu_each(A)
    for i in np.flatnonzero(~singular):
        assert np.array_equal(inv[i], np.linalg.inv(A[i]))


def _old_solve_stack(M, r):
    """The former fallback: one failing system re-solves the whole stack by inverse."""
    finite = np.isfinite(M).all(axis=(1, 2)) & np.isfinite(r).all(axis=1)
    v = np.zeros(r.shape)
    if not finite.all():
        if finite.any():
            v[finite] = _old_solve_stack(M[finite], r[finite])
        return v
    with np.errstate(all="ignore"):
        try:
            v = np.linalg.solve(M, r[..., None])[..., 0]
            if not np.all(np.isfinite(v)):
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:
            v = _heads.batched_solve(M, r)
    return v


def _old_lu_each(M, B=None):
    """The former batched_solve / gram_ridge_solve pattern: one exactly singular
    system switches the whole stack to another method (here the pseudo-inverse)."""
    try:
        return np.linalg.inv(M) if B is None else np.linalg.solve(M, B)
    except np.linalg.LinAlgError:
        pinv = np.linalg.pinv(np.where(np.isfinite(M), M, 0.0))
        return pinv if B is None else pinv @ B


@pytest.mark.parametrize("name, broken, case", [
    ("_solve_stack", {"_solve_stack": _old_solve_stack}, "subnormal"),
    ("shrunk_heads", {"_solve_stack": _old_solve_stack}, "tiny"),
    ("solve_heads", {"_solve_stack": _old_solve_stack}, "subnormal"),
    ("batched_solve", {"_lu_each": _old_lu_each}, "rank_one"),
    ("gram_ridge_solve", {"_lu_each": _old_lu_each}, "float_max"),
    ("_solve_stack", {"_lu_each": _old_lu_each}, "rank_one"),
])
def test_whole_stack_fallback_is_caught(monkeypatch, name, broken, case):
    """Broken variant: the stack-wide fallback of the former code fails the check."""
    for attr, fn in broken.items():
        monkeypatch.setattr(_heads, attr, fn)
    with pytest.raises(AssertionError, match="changed other systems' solutions"):
        _assert_others_identical(SOLVERS[name], 3, case, awkward=False)
