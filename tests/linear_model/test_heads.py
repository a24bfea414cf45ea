"""Tests of the shared small solves (skdpp.linear_model._heads)."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

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
