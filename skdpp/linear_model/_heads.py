"""Small batched solves shared by the estimators (one module, DESIGN §4).

* :func:`batched_solve` -- a stack of ``k x k`` systems, pseudo-inverse for the
  singular ones;
* :func:`solve_heads` -- per-user least-squares heads from their ``k x k``
  normal equations (relative ridge, closed form for ``k = 2``);
* :func:`shrunk_heads` -- per-user ridge heads shrunk towards a prior head
  (the personal heads of the shared-representation regressors);
* :func:`psd_floor_solve` -- ``argmin u^T G u - 2 u^T b`` for a noisy symmetric
  ``G`` whose eigenvalues are floored (Priv-AltMin, Alg. 2);
* :func:`psd_ridge_solve` -- a stack of noisy Gram systems projected on the
  PSD cone plus a ridge (DP matrix factorisation, Alg. 1);
* :func:`gram_ridge_solve` -- a stack of exact ridge least-squares systems
  ``(G_i + reg I) x_i = b_i`` with PSD Gram matrices ``G_i`` (the user step of
  DP matrix factorisation, Alg. 3, line 4).

All are vectorised over the stack; many tiny LAPACK calls run with one BLAS
thread (threads only add overhead there).

Per-system decisions (the joint-DP rule, DESIGN §7 "Nothing observable may
depend on one user's data"): a stack batches the systems of many users, and
the solution of one user's system -- the method, any fallback, and therefore
every bit of the result -- depends on that system alone, never on the stack it
is batched with. numpy's linear-algebra gufuncs (``solve``, ``inv``,
``slogdet``, ``svd``) and ``matmul`` treat each matrix of a stack
independently, so a system solved inside any stack gives the same bits as
solved alone; every decision here (exactly singular, numerically singular,
non-finite) is made from the system's own values (:func:`_lu_each`,
:func:`_pinv_each`). A stack-wide ``try``/``except LinAlgError`` that re-solves
the whole stack another way would let one user's degenerate system change
every other user's solution in the last bits.
"""

import numpy as np
from threadpoolctl import threadpool_limits

__all__ = ["batched_solve", "gram_ridge_solve", "psd_floor_solve", "psd_ridge_solve",
           "shrunk_heads", "solve_heads"]

# Relative ridge added to each user's k x k head system: tiny for users with at
# least k rows (numerical safety only: changes heads by ~1e-10 relative), larger for
# users with fewer rows than k (approximately the minimum-norm least-squares head).
_HEAD_RIDGE = 1e-10
_HEAD_RIDGE_DEFICIENT = 1e-6


def _lu_each(M, B=None):
    """Per-system LU: ``solve(M_i, B_i)`` (or ``inv(M_i)`` when ``B`` is None), NaN where singular.

    One batched LAPACK call when no system is exactly singular (the usual
    case). Otherwise (``LinAlgError``: LAPACK met an exact zero pivot in some
    system) each system is screened alone -- non-finite entries, or the sign
    of its own ``slogdet`` (the same LU factorisation) is 0 -- and the other
    systems are solved by the same batched call on the sub-stack, which gives
    them the same bits as in the full stack (numpy's gufuncs factor each
    matrix independently). Screened systems get NaN: the caller's per-system
    fallback decides what they become from their own values. If the screen
    ever disagrees with the solver, the systems are solved one at a time.

    Parameters
    ----------
    M : ndarray of shape (n, k, k)
    B : ndarray of shape (n, k, m), default=None

    Returns
    -------
    X : ndarray of shape (n, k, m), or (n, k, k) for ``B=None``
    """
    def lu(Ms, Bs):
        return np.linalg.inv(Ms) if Bs is None else np.linalg.solve(Ms, Bs)

    try:
        return lu(M, B)
    except np.linalg.LinAlgError:  # some system is exactly singular: screen each
        pass
    shape = M.shape if B is None else B.shape
    X = np.full(shape, np.nan, dtype=np.result_type(M.dtype, np.float64))
    ok = np.isfinite(M).all(axis=(-2, -1))
    if ok.any():
        ok[ok] = np.linalg.slogdet(M[ok])[0] != 0
    if ok.any():
        try:
            X[ok] = lu(M[ok], None if B is None else B[ok])
        except np.linalg.LinAlgError:  # screen and solver disagree: one at a time
            for i in np.flatnonzero(ok):
                try:
                    X[i:i + 1] = lu(M[i:i + 1], None if B is None else B[i:i + 1])
                except np.linalg.LinAlgError:
                    pass
    return X


def _pinv_each(M):
    """Per-system Moore-Penrose pseudo-inverses of a stack ``M`` (n, k, k).

    ``np.linalg.pinv`` works system by system (its cutoff is relative to each
    system's own largest singular value) but raises for the whole stack when
    the SVD of one system does not converge (non-finite entries, overflow):
    such systems get NaN, decided from their own values, and the others the
    same bits as in one batched call.
    """
    X = np.full(M.shape, np.nan, dtype=np.result_type(M.dtype, np.float64))
    ok = np.isfinite(M).all(axis=(-2, -1))
    if not ok.any():
        return X
    try:
        X[ok] = np.linalg.pinv(M[ok])
    except np.linalg.LinAlgError:  # an SVD did not converge: one at a time
        for i in np.flatnonzero(ok):
            try:
                X[i:i + 1] = np.linalg.pinv(M[i:i + 1])
            except np.linalg.LinAlgError:
                pass
    return X


def batched_solve(A, b, *, ridge=0.0):
    """Solve a stack of small linear systems ``(A_i + ridge I) x_i = b_i``.

    Parameters
    ----------
    A : array-like of shape (..., k, k)
        Stack of square matrices.
    b : array-like of shape (..., k) or (..., k, m)
        Right-hand sides: a stack of vectors when ``b.ndim == A.ndim - 1``,
        otherwise a stack of matrices.
    ridge : float, default=0.0
        Non-negative value added to the diagonal of every ``A_i``.

    Returns
    -------
    x : ndarray of the shape of ``b``

    Notes
    -----
    The stack is solved with one batched ``np.linalg.inv`` (its inverse also
    gives each item's condition number).  Systems that are singular or
    numerically singular (exactly singular for LAPACK, Frobenius condition
    number above ``1 / (k * eps)``, or a non-finite result) are solved instead
    by the Moore-Penrose pseudo-inverse, vectorised over the failing items: the
    minimum-norm least-squares solution (e.g. a user with fewer rows than
    ``k`` gets the minimum-norm head); items with non-finite entries give NaN.
    Every decision is made per item from its own values: an item's solution
    does not depend on the other items of the stack, bit for bit.  Inputs are
    not modified.

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
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(
            f"`A` must be a stack of square matrices of shape (..., k, k); got {A.shape}."
        )
    if not (np.isscalar(ridge) and np.isfinite(ridge) and ridge >= 0):
        raise ValueError(f"`ridge` must be a finite number >= 0; got {ridge!r}.")
    k = A.shape[-1]
    vector = b.ndim == A.ndim - 1
    B = b[..., None] if vector else b
    if B.shape[:-1] != A.shape[:-1]:
        raise ValueError(
            f"`b` of shape {b.shape} does not match `A` of shape {A.shape}; expected "
            f"{A.shape[:-1]} (vectors) or {A.shape[:-1]} + (m,) (matrices)."
        )
    dtype = np.result_type(A.dtype, B.dtype, np.float64)
    M = A.astype(dtype, copy=True)
    if ridge:
        M[..., np.arange(k), np.arange(k)] += ridge
    B = B.astype(dtype, copy=False)
    if k == 0 or M.size == 0:
        x = np.zeros(B.shape, dtype=dtype)
        return x[..., 0] if vector else x
    tol = 1.0 / (k * np.finfo(np.float64).eps)
    # one batched LU inverse gives the solution and the Frobenius condition
    # number of every item; an exactly singular item gets a NaN inverse (hence
    # a NaN condition number) without changing any other item (_lu_each)
    inv = _lu_each(M)
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


def solve_heads(A, r, counts):
    """Solve the per-user ``k × k`` normal equations ``A_i v_i = r_i``.

    A relative ridge ``λ_i = c · tr(A_i) / k`` is added, with ``c = 1e-10`` for
    users with at least ``k`` rows (numerical safety) and ``c = 1e-6`` for users
    with fewer rows than ``k`` (whose least-squares head is not unique: this
    gives approximately the minimum-norm head). Users without rows, and systems
    with non-finite entries, get ``0`` (no warning, no exception).
    """
    k = A.shape[-1]
    tr = np.trace(A, axis1=1, axis2=2)
    c = np.where(np.asarray(counts) < k, _HEAD_RIDGE_DEFICIENT, _HEAD_RIDGE)
    with np.errstate(all="ignore"):  # non-finite systems are solved as 0 below
        lam = np.maximum(c * tr / max(k, 1), np.finfo(np.float64).tiny)
        M = A + lam[:, None, None] * np.eye(k)
    if k != 2:
        return _solve_stack(M, r)
    # k = 2: closed form (Cramer's rule is forward stable for 2 x 2 systems), about 6x
    # faster than the batched LU; systems whose determinant is not safely positive
    # (users without rows, pathological magnitudes) go through the general path.
    a, b, c = M[:, 0, 0], 0.5 * (M[:, 0, 1] + M[:, 1, 0]), M[:, 1, 1]
    with np.errstate(all="ignore"):
        det = a * c - b * b
        v = np.empty_like(r)
        v[:, 0] = (c * r[:, 0] - b * r[:, 1]) / det
        v[:, 1] = (a * r[:, 1] - b * r[:, 0]) / det
    bad = ~(det > np.finfo(np.float64).tiny) | ~np.isfinite(v).all(axis=1)
    if bad.any():
        v[bad] = _solve_stack(M[bad], r[bad])
    return v


def shrunk_heads(A, r, prior, penalty, counts):
    """Per-user solutions shrunk towards ``prior``: ``(A_i + diag(q_i)) v_i = r_i + q_i * p_i``.

    The minimiser of ``sum_r (y_r - <p_r, v>)^2 + sum_j q_ij (v_j - p_ij)^2``
    from the normal equations ``A_i = P^T P``, ``r_i = P^T y``. The relative
    ridge of :func:`solve_heads` is added to every ``q_ij`` (towards ``p_i``
    too), so users without rows (``A_i = 0``) get ``v_i = p_i``; so do users
    with an infinite penalty. Other systems with non-finite entries give 0.

    Parameters
    ----------
    A : ndarray of shape (n, k, k)
    r : ndarray of shape (n, k)
    prior : ndarray of shape (n, k) or (k,)
    penalty : ndarray of shape (n, k) or (n,)
        Non-negative diagonal penalties (one per user: the same on every
        coordinate).
    counts : ndarray of shape (n,)
        Rows of each user (the relative ridge is larger below ``k`` rows).

    Returns
    -------
    V : ndarray of shape (n, k)

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
        tr = np.trace(A, axis1=1, axis2=2)
        c = np.where(np.asarray(counts) < k, _HEAD_RIDGE_DEFICIENT, _HEAD_RIDGE)
        total = np.broadcast_to(penalty + (c * tr / max(k, 1))[:, None], (n, k))
        M = A + total[:, :, None] * np.eye(k)
        rhs = r + total * prior
        # no rows and no penalty, or an infinite penalty: the prior
        empty = ~(total > 0).any(axis=1) | ~np.isfinite(total).all(axis=1)
        if k == 2:
            a, b, d = M[:, 0, 0], 0.5 * (M[:, 0, 1] + M[:, 1, 0]), M[:, 1, 1]
            det = a * d - b * b
            v = np.empty_like(rhs)
            v[:, 0] = (d * rhs[:, 0] - b * rhs[:, 1]) / det
            v[:, 1] = (a * rhs[:, 1] - b * rhs[:, 0]) / det
            redo = ~(det > np.finfo(np.float64).tiny) | ~np.isfinite(v).all(axis=1)
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
    """Batched ``M_i v_i = r_i`` by LU, with a per-system pseudo-inverse fallback.

    Systems with a non-finite entry get ``v_i = 0`` and never reach LAPACK
    (whose SVD raises on NaN): whether a fit succeeds must not depend on one
    user's values. The others are solved by one batched LU (:func:`_lu_each`);
    a system that LU finds exactly singular, or whose solution is not finite,
    and only that system, is solved again by :func:`batched_solve`
    (condition-checked inverse, else the pseudo-inverse). Each solution
    depends on its own system only: re-solving the whole stack another way
    when one system fails would let one user change every other user's
    solution (joint differential privacy).
    """
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
    """``argmin_u u^T G u - 2 u^T b`` for the noisy symmetric ``G`` (Alg. 2, line 3).

    Eigenvalues of ``G`` below ``floor`` are raised to ``floor`` (post-processing
    that makes the problem strictly convex): ``u = Q diag(1/max(λ, floor)) Q^T b``.
    """
    w, Q = np.linalg.eigh((G + G.T) / 2.0)
    scale = np.max(np.abs(w)) if w.size else 0.0
    floor = max(floor, 1e-12 * scale, np.finfo(np.float64).tiny)
    return Q @ ((Q.T @ b) / np.maximum(w, floor))


def psd_ridge_solve(A, b, reg):
    """``theta_i = (Pi_PSD(A_i) + reg I)^-1 b_i`` for a stack (Alg. 1, line 7).

    The noisy Gram matrices are projected on the PSD cone (negative eigenvalues
    set to zero, as the paper's ``A^dagger``) before the ridge is added, so the
    solve is always well posed.
    """
    # Many tiny LAPACK calls: multi-threaded BLAS only adds overhead here
    # (measured 25x slower for 10^4 32x32 matrices on 2 busy cores).
    with threadpool_limits(limits=1, user_api="blas"):
        evals, evecs = np.linalg.eigh(A)
    evals = np.maximum(evals, 0.0) + reg
    coef = np.einsum("nkl,nk->nl", evecs, b) / evals
    return np.einsum("nkl,nl->nk", evecs, coef)


def gram_ridge_solve(G, b, reg, *, overwrite_g=False):
    """``x_i = (G_i + diag(reg_i))^-1 b_i`` for a stack of PSD Gram matrices ``G_i``.

    ``G_i + diag(reg)`` with ``reg > 0`` is positive definite, so one batched
    LU solve is exact; systems whose solution is not finite (numerically
    singular for huge entries) are solved by :func:`batched_solve`
    (pseudo-inverse) when their entries are finite, and give NaN otherwise;
    the decision is made for each system from its own values.

    Parameters
    ----------
    G : ndarray of shape (n, k, k)
        Symmetric PSD matrices (not modified).
    b : ndarray of shape (n, k)
    reg : float > 0, or ndarray of shape (k,) or (n, k) of floats > 0
        The ridge: one value for every coordinate, one per coordinate (e.g. a
        different ridge for a bias coordinate), or one per system and
        coordinate.
    overwrite_g : bool, default=False
        Add the ridge to ``G`` in place (a float64 array) instead of a copy:
        saves a copy of the stack; ``G`` then holds ``G + diag(reg)``.

    Returns
    -------
    x : ndarray of shape (n, k)

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
    # Many tiny LAPACK calls: one BLAS thread (see psd_ridge_solve).
    with threadpool_limits(limits=1, user_api="blas"), np.errstate(all="ignore"):
        # per system: LU (NaN where exactly singular), then the robust solve for
        # the systems whose own solution is not finite and whose own entries
        # are (:func:`_lu_each`; no decision depends on the rest of the stack)
        x = _lu_each(M, b[..., None])[..., 0]
        bad = ~np.isfinite(x).all(axis=-1)
        if bad.any():
            x[bad] = np.nan
            bad &= np.isfinite(M).all(axis=(-2, -1)) & np.isfinite(b).all(axis=-1)
            if bad.any():
                x[bad] = batched_solve(M[bad], b[bad])
    return x
