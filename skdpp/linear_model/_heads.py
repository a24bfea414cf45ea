"""The small batched solves of every estimator (stacks of ``k x k`` systems).

Joint DP (DESIGN §7): one user's solution -- method, fallback, every bit -- depends
on its own system only: every decision (singular, ill-conditioned, non-finite) is
made per system; a stack-wide ``except LinAlgError`` re-solve would let one user
change every other user's solution in the last bits.
"""

import numpy as np
from threadpoolctl import threadpool_limits

__all__ = ["batched_solve", "gram_ridge_solve", "psd_floor_solve", "psd_ridge_solve",
           "shrunk_heads", "solve_heads"]

# Relative ridge (times tr(A)/k) of a head system: numerical safety from k rows up;
# below k rows, about the minimum-norm least-squares head.
_HEAD_RIDGE = 1e-10
_HEAD_RIDGE_DEFICIENT = 1e-6


def _fill_each(X, ok, fn, *arrays):
    """``X[ok] = fn(*arrays[ok])``; if LAPACK raises, one system at a time (NaN stays
    where it still raises)."""
    try:
        X[ok] = fn(*(a[ok] for a in arrays))
    except np.linalg.LinAlgError:
        for i in np.flatnonzero(ok):
            try:
                X[i:i + 1] = fn(*(a[i:i + 1] for a in arrays))
            except np.linalg.LinAlgError:
                pass
    return X


def _lu_each(M, B=None):
    """Per-system ``solve(M_i, B_i)`` (``inv(M_i)`` if ``B`` is None), NaN where singular
    (screened by ``slogdet``; the rest re-solved as a sub-stack: the same bits)."""
    fn, arrays = (np.linalg.inv, (M,)) if B is None else (np.linalg.solve, (M, B))
    try:
        return fn(*arrays)
    except np.linalg.LinAlgError:  # some system is exactly singular: screen each
        pass
    X = np.full(arrays[-1].shape, np.nan, dtype=np.result_type(M.dtype, np.float64))
    ok = np.isfinite(M).all(axis=(-2, -1))
    if ok.any():
        ok[ok] = np.linalg.slogdet(M[ok])[0] != 0
    return _fill_each(X, ok, fn, *arrays) if ok.any() else X


def _pinv_each(M):
    """Per-system pseudo-inverses; NaN for non-finite systems or an unconverged SVD."""
    X = np.full(M.shape, np.nan, dtype=np.result_type(M.dtype, np.float64))
    ok = np.isfinite(M).all(axis=(-2, -1))
    return _fill_each(X, ok, np.linalg.pinv, M) if ok.any() else X


def batched_solve(A, b, *, ridge=0.0):
    """Solve a stack ``(A_i + ridge I) x_i = b_i``, ``A`` (..., k, k), ``b`` (..., k) or
    (..., k, m): items singular, of Frobenius condition above ``1 / (k eps)`` or with a
    non-finite result get the pseudo-inverse solution (non-finite entries: NaN).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._heads import batched_solve
    >>> A = np.stack([2.0 * np.eye(2), np.zeros((2, 2))])
    >>> batched_solve(A, np.ones((2, 2)))
    array([[0.5, 0.5],
           [0. , 0. ]])
    """
    A = np.asarray(A)
    b = np.asarray(b)
    k = A.shape[-1]
    vector = b.ndim == A.ndim - 1
    B = b[..., None] if vector else b
    dtype = np.result_type(A.dtype, B.dtype, np.float64)
    M = A.astype(dtype, copy=True)
    if ridge:
        M[..., np.arange(k), np.arange(k)] += ridge
    B = B.astype(dtype, copy=False)
    if k == 0 or M.size == 0:
        x = np.zeros(B.shape, dtype=dtype)
        return x[..., 0] if vector else x
    tol = 1.0 / (k * np.finfo(np.float64).eps)
    inv = _lu_each(M)  # NaN for an exactly singular item, hence a NaN condition number
    x = inv @ B
    flat_m = M.reshape(-1, k * k)
    flat_i = inv.reshape(-1, k * k)
    cond = np.sqrt(np.einsum("ij,ij->i", flat_m, flat_m)
                   * np.einsum("ij,ij->i", flat_i, flat_i))
    bad = ~(cond < tol).reshape(M.shape[:-2])
    bad |= ~np.isfinite(x).reshape(x.shape[:-2] + (-1,)).all(axis=-1)
    if bad.any():  # per item: the pseudo-inverse (NaN for non-finite items)
        x[bad] = _pinv_each(M[bad]) @ B[bad]
    return x[..., 0] if vector else x


def _relative_ridge(A, counts, per_column=False):
    """The tiny relative ridge of each system, shape (n, k): ``c tr(A_i) / k`` on every
    coordinate (latent heads: coordinates in one unit, and the minimum-norm limit for
    fewer rows than ``k``), or with ``per_column`` ``c A_i,jj`` (raw features, each in
    its own units: the trace let a raw timestamp column shrink every 0/1 column of a
    user to its prior; at least ``eps tr(A_i) / k``, so a column constant within the
    user keeps the system regular: without it such users took the pseudo-inverse,
    whose results differ between numpy builds); ``c = _HEAD_RIDGE``
    (``_HEAD_RIDGE_DEFICIENT`` below ``k`` rows)."""
    k = A.shape[-1]
    c = np.where(np.asarray(counts) < k, _HEAD_RIDGE_DEFICIENT, _HEAD_RIDGE)[:, None]
    trace = np.trace(A, axis1=1, axis2=2)[:, None]
    if per_column:  # a column constant within the user (A_jj = 0) stays solvable
        floor = np.finfo(np.float64).eps * (trace / max(k, 1))
        return c * np.maximum(np.einsum("nii->ni", A), floor)
    return np.broadcast_to(c * trace / max(k, 1), A.shape[:2])


def _cramer(M, rhs):
    """2 x 2 systems by Cramer's rule (forward stable, ~6x faster than batched LU);
    ``bad`` marks a determinant not safely positive or a non-finite solution."""
    a, b, d = M[:, 0, 0], 0.5 * (M[:, 0, 1] + M[:, 1, 0]), M[:, 1, 1]
    with np.errstate(all="ignore"):
        det = a * d - b * b
        v = np.empty_like(rhs)
        v[:, 0] = (d * rhs[:, 0] - b * rhs[:, 1]) / det
        v[:, 1] = (a * rhs[:, 1] - b * rhs[:, 0]) / det
    return v, ~(det > np.finfo(np.float64).tiny) | ~np.isfinite(v).all(axis=1)


def solve_heads(A, r, counts):
    """Solve the per-user ``k × k`` normal equations ``A_i v_i = r_i`` (plus the relative
    ridge). Users without rows and systems with non-finite entries get ``0``."""
    k = A.shape[-1]
    with np.errstate(all="ignore"):  # non-finite systems are solved as 0 below
        lam = np.maximum(_relative_ridge(A, counts), np.finfo(np.float64).tiny)
        M = A + lam[:, :, None] * np.eye(k)
    if k != 2:
        return _solve_stack(M, r)
    v, bad = _cramer(M, r)
    if bad.any():
        v[bad] = _solve_stack(M[bad], r[bad])
    return v


def shrunk_heads(A, r, prior, penalty, counts, *, per_column=False):
    """``(A_i + diag(q_i)) v_i = r_i + q_i p_i``: the minimiser of ``sum_r (y_r - <p_r,
    v>)^2 + sum_j q_ij (v_j - p_ij)^2`` (``q``: ``penalty`` plus the relative ridge,
    ``per_column`` as in :func:`_relative_ridge`); no rows or an infinite penalty: the
    ``prior``; other non-finite systems: 0.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._heads import shrunk_heads
    >>> A, r = np.array([[[2.0, 0.0], [0.0, 2.0]]]), np.array([[2.0, 0.0]])
    >>> np.round(shrunk_heads(A, r, np.array([0.0, 1.0]), np.array([2.0]), [5]), 6)
    array([[0.5, 0.5]])
    """
    n, k = r.shape
    prior = np.broadcast_to(np.asarray(prior, dtype=np.float64), r.shape)
    penalty = np.asarray(penalty, dtype=np.float64)
    if penalty.ndim == 1:
        penalty = penalty[:, None]
    with np.errstate(all="ignore"):
        ridge = _relative_ridge(A, counts, per_column)
        total = np.broadcast_to(penalty + ridge, (n, k))
        M = A + total[:, :, None] * np.eye(k)
        rhs = r + total * prior
        # no rows and no penalty, or an infinite penalty: the prior
        empty = ~(total > 0).any(axis=1) | ~np.isfinite(total).all(axis=1)
        if k == 2:
            v, redo = _cramer(M, rhs)
            redo &= ~empty
            if redo.any():
                v[redo] = _solve_stack(M[redo], rhs[redo])
        else:
            v = np.array(prior, copy=True)
            if (~empty).any():
                v[~empty] = _solve_stack(M[~empty], rhs[~empty])
    v[empty] = prior[empty]
    return v


def _solve_stack(M, r):
    """Batched ``M_i v_i = r_i`` by LU, a non-finite solution re-solved by
    :func:`batched_solve`; non-finite systems get ``0`` (LAPACK's SVD raises on NaN)."""
    dtype = np.result_type(M.dtype, r.dtype, np.float64)
    finite = np.isfinite(M).all(axis=(1, 2)) & np.isfinite(r).all(axis=1)
    v = np.zeros(r.shape, dtype=dtype)
    if not finite.any():
        return v
    Mf, rf = (M, r) if finite.all() else (M[finite], r[finite])
    with np.errstate(all="ignore"):
        x = _lu_each(Mf, rf[..., None])[..., 0]
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():  # robust (pseudo-inverse) fallback, system by system
            x[bad] = batched_solve(Mf[bad], rf[bad])
    v[finite] = x
    return v


def psd_floor_solve(G, b, floor):
    """``argmin_u u^T G u - 2 u^T b`` for the noisy symmetric ``G`` (Alg. 2, line 3), its
    eigenvalues raised to ``floor``: ``u = Q diag(1/max(λ, floor)) Q^T b``."""
    w, Q = np.linalg.eigh((G + G.T) / 2.0)
    scale = np.max(np.abs(w)) if w.size else 0.0
    floor = max(floor, 1e-12 * scale, np.finfo(np.float64).tiny)
    return Q @ ((Q.T @ b) / np.maximum(w, floor))


def psd_ridge_solve(A, b, reg):
    """``theta_i = (Pi_PSD(A_i) + reg I)^-1 b_i`` for a stack (Alg. 1, line 7): negative
    eigenvalues set to zero (the paper's ``A^dagger``), then the ridge."""
    # one BLAS thread: 25x faster for 10^4 32x32 matrices on 2 busy cores
    with threadpool_limits(limits=1, user_api="blas"):
        evals, evecs = np.linalg.eigh(A)
    evals = np.maximum(evals, 0.0) + reg
    coef = np.einsum("nkl,nk->nl", evecs, b) / evals
    return np.einsum("nkl,nl->nk", evecs, coef)


def gram_ridge_solve(G, b, reg, *, overwrite_g=False):
    """``x_i = (G_i + diag(reg_i))^-1 b_i`` by one batched LU (non-finite: re-solved by
    :func:`batched_solve`, else NaN); ``G`` changed in place only with ``overwrite_g``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._heads import gram_ridge_solve
    >>> gram_ridge_solve(np.array([[[1.0, 0.0], [0.0, 3.0]]]), np.array([[2.0, 4.0]]), 1.0)
    array([[1., 1.]])
    >>> gram_ridge_solve(np.array([[[1.0, 0.0], [0.0, 3.0]]]), np.array([[2.0, 4.0]]),
    ...                  np.array([1.0, 5.0]))
    array([[1. , 0.5]])
    """
    G = np.asarray(G, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    k = G.shape[-1]
    M = G if overwrite_g else G.copy()
    diag = np.arange(k)
    M[..., diag, diag] += np.broadcast_to(np.asarray(reg, dtype=np.float64), G.shape[:-1])
    with threadpool_limits(limits=1, user_api="blas"), np.errstate(all="ignore"):
        x = _lu_each(M, b[..., None])[..., 0]
        bad = ~np.isfinite(x).all(axis=-1)
        if bad.any():
            x[bad] = np.nan
            bad &= np.isfinite(M).all(axis=(-2, -1)) & np.isfinite(b).all(axis=-1)
            if bad.any():
                x[bad] = batched_solve(M[bad], b[bad])
    return x
