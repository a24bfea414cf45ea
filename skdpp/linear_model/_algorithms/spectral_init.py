"""Private initialisations of the shared embedding ``U`` as block functions.

* ``"private_spectral"`` -- Snedeker, Zhou & Bassily (2025), Alg. 2: each user's
  U-statistic ``Z_i`` of its ``S^0`` rows, clipped to ``ψ_init`` (lines 4-5);
  the sum is released with symmetric Gaussian noise (line 6) and ``U`` is its
  top-``k`` eigenvectors (line 7).
* ``"private_pairwise"`` -- Jain, Rush, Smith, Song & Thakurta (2021), Alg. 3:
  normalised products of pairs of a user's rows with clipped labels (line 1),
  released with symmetric Gaussian noise (line 2), top-``k`` eigenvectors (line 3).
* ``"random"`` -- a random orthonormal matrix (public randomness, free).

:func:`spectral_statistic` and :func:`pairwise_statistic` compute a block's
partial sum of clipped per-user contributions; :func:`initial_components` is
the driver (one release through the fit's :class:`~skdpp.privacy.Releaser`).
"""

import numpy as np

from ...privacy._clipping import clip_values, scaled_clip_factors, stack_norms, unit_rows
from ...utils._grouped import UserIndex, segment_outer_sum

__all__ = ["initial_components", "pairwise_statistic", "random_init", "spectral_statistic"]

# Bytes of the per-chunk temporaries (rows gathered per distinct row count).
_CHUNK_BYTES = 16 * 2**20

# Users with 2 <= m <= d rows whose U-statistic does not cancel, i.e.
# ||Z'|| m (m - 1) >= _RHO_MIN ||A'||_F^2, and with ||A'||_F^2 >= _GRAM_MIN, are added
# without a QR factorisation (see _spectral_few_rows); others use the thin QR.
# _GRAM_MIN keeps every term of the Gram formula (~ ||A'||_F^4 >= 1e-200) far from
# the subnormal range: with 1e-200, users with ||A'||_F^2 ~ 1e-160 had terms near
# 1e-320 (a few significant bits), norms off by tens of percent and terms above psi.
_RHO_MIN = 0.05
_GRAM_MIN = 1e-100


# --------------------------------------------------------------------------- #
# Snedeker et al. (2025), Alg. 2: clipped per-user U-statistics
# --------------------------------------------------------------------------- #
def _spectral_few_rows(Ap, sx, sy, clip_norm, norms_only=False):
    """``sum_u clip(Z_u, ψ)`` for users with the same number ``2 <= c <= d`` of rows.

    ``Ap`` (``n × c × d``) holds each user's scaled rows ``a_j = y_j x_j / (sx sy)``;
    ``Z'_u = (s s^T - sum_j a_j a_j^T) / (c (c - 1))`` with ``s = sum_j a_j``, and
    ``Z_u = (sx sy)^2 Z'_u``.

    Two routes, chosen per user from its ``c × c`` Gram ``G = A' A'^T``:

    * *No cancellation* (``||Z'|| c (c - 1) >= _RHO_MIN ||A'||_F^2`` and
      ``||A'||_F^2 >= _GRAM_MIN``, nearly all users): ``||Z'||_F^2 (c (c - 1))^2 =
      (1^T G 1)^2 - 2 ||G 1||^2 + ||G||_F^2`` has absolute error
      ``O(c^3 eps) ||A'||_F^4``, so relative error ``O(c^3 eps / _RHO_MIN^2)`` here, and
      ``f Z'`` is added as ``sum_j a_j (f (s - a_j) / (c (c - 1)))^T`` (one product
      for all users) with error ``O(c eps / _RHO_MIN) ψ``: the added term has norm
      ``min(||Z||, ψ)`` up to a relative ``~1e-12``. Rounding cannot make a
      cancelling user look non-cancelling: the formula's error bounds the computed
      ratio by ``~c^2 sqrt(c^3 eps) << _RHO_MIN``.
    * *Cancellation* (the rest): thin QR ``A'^T = Q R``, ``Z' = Q B Q^T`` with
      ``B = R (11^T - I) R^T / (c (c - 1))``; the clip factor comes from
      ``||B||_F`` of the computed ``B`` and ``Q (f B) Q^T`` is added, so the term's
      norm is ``min(||Z||, ψ)`` up to rounding whatever cancellation occurred in
      ``B``.

    ``norms_only``: only the norms are needed (the sum is not formed when every
    user takes the Gram route).

    Returns
    -------
    total : ndarray of shape (d, d)
    norms : ndarray of shape (n,)
        ``||Z_u||_F`` before clipping.
    """
    n, c, d = Ap.shape
    cc = c * (c - 1.0)
    with np.errstate(over="ignore", under="ignore"):
        mu2 = (sx * sy) ** 2
    G = Ap @ Ap.transpose(0, 2, 1)  # (n, c, c)
    a2 = np.trace(G, axis1=1, axis2=2)  # ||A'||_F^2
    g1 = G.sum(axis=2)  # G 1
    with np.errstate(under="ignore"):
        nu2 = g1.sum(axis=1) ** 2 - 2.0 * np.einsum("ui,ui->u", g1, g1) \
            + np.einsum("uij,uij->u", G, G)
    nu = np.sqrt(np.maximum(nu2, 0.0))  # ||Z'|| c (c - 1)
    fast = (a2 >= _GRAM_MIN) & (nu >= _RHO_MIN * a2)
    total = np.zeros((d, d))
    norms = np.zeros(n)
    if norms_only and fast.all():
        return total, scaled_clip_factors(nu / cc, mu2, clip_norm)[1]
    if fast.any():
        A = Ap if fast.all() else Ap[fast]
        f, norms[fast] = scaled_clip_factors(nu[fast] / cc, mu2[fast], clip_norm)
        # W = f (s - a_j) / cc
        W = np.empty_like(A)
        np.subtract(A.sum(axis=1)[:, None, :], A, out=W)
        W *= (f / cc)[:, None, None]
        total += A.reshape(-1, d).T @ W.reshape(-1, d)
    if not fast.all():
        slow = ~fast
        A = Ap[slow]
        Q, R = np.linalg.qr(A.transpose(0, 2, 1))  # (n_s, d, c), (n_s, c, c)
        rs = R.sum(axis=2)  # R 1
        B = (rs[:, :, None] * rs[:, None, :] - R @ R.transpose(0, 2, 1)) / cc
        f, norms[slow] = scaled_clip_factors(stack_norms(B), mu2[slow], clip_norm)
        # sum_u Q_u (f_u B_u) Q_u^T as one (d, n_s c) @ (n_s c, d) product of the
        # stacked Q_u^T (one copy) and (f_u B_u) Q_u^T (B_u symmetric).
        Qt = np.ascontiguousarray(Q.transpose(0, 2, 1)).reshape(-1, d)  # (n_s c, d)
        BQt = ((B * f[:, None, None]) @ Qt.reshape(-1, c, d)).reshape(-1, d)
        total += Qt.T @ BQt
    return total, norms


def _user_scales(X_rows, y_rows, starts):
    """Per-user ``max |x|`` and ``max |y|`` over consecutive row segments (1 for zeros)."""
    d = X_rows.shape[1]
    if d:
        # one flat reduction per user segment (rows of a user are consecutive);
        # max |x| = max(max x, -min x) needs no |X| temporary
        flat = np.ascontiguousarray(X_rows).reshape(-1)
        mx = np.maximum(np.maximum.reduceat(flat, starts * d),
                        -np.minimum.reduceat(flat, starts * d))
    else:
        mx = np.zeros(starts.size)
    my = np.maximum.reduceat(np.abs(y_rows), starts)
    return np.where(mx > 0, mx, 1.0), np.where(my > 0, my, 1.0)


def spectral_statistic(block, clip_norm, *, norms_only=False):
    """``sum_i clip(Z_i, ψ)`` over the block's users (Alg. 2, lines 4-6).

    ``Z_i = 1/(m_i (m_i - 1)) sum_{j1 != j2} y_{j1} y_{j2} x_{j1} x_{j2}^T`` over
    the user's ``m_i`` rows in ``block`` (zero when ``m_i < 2``).

    Parameters
    ----------
    block : UserBlock
        The rows to use (in a fit: each user's ``S^0`` rows).
    clip_norm : float or None
        ``ψ_init``.
    norms_only : bool, default=False
        Only the norms are needed (the per-user statistic of an ``"auto"``
        ``ψ_init``): the sum is skipped where it is not needed for them.

    Returns
    -------
    total : ndarray of shape (d, d)
        The block's partial sum (symmetric; unspecified with ``norms_only``).
    norms : ndarray of shape (block.n_users,)
        ``||Z_i||_F`` before clipping.

    Notes
    -----
    Numerics (this is what makes the stated sensitivity hold in floating
    point): each user's rows ``a_j = y_j x_j`` are first scaled by the user's
    ``max |x|`` and ``max |y|`` (no overflow), and the clipping factor is
    computed from the norm of the *same computed matrix* that is added to the
    sum (:func:`~skdpp.privacy._clipping.scaled_clip_factors`). ``Z_i`` is a
    difference ``s s^T - sum_j a_j a_j^T`` that can cancel catastrophically
    (e.g. one row ``1e6 e_1`` and one row ``1e-4 e_2``): a norm obtained from an
    expanded formula can then be 0 while ``||Z_i||`` is large. Users with at
    most ``d`` rows whose ``Z_i`` cancels use a thin QR (exact norm of the
    added term); the other users with at most ``d`` rows skip the QR (their
    ``m_i × m_i`` Gram formula is accurate to ~1e-12 relative, see
    :func:`_spectral_few_rows`); users with more rows form ``Z_i`` (``d × d``)
    explicitly. Either way each added term has norm at most ``ψ`` (up to
    rounding).
    """
    X, y = block.X, block.y
    d = X.shape[1]
    counts = block.counts
    total = np.zeros((d, d))
    norms = np.zeros(block.n_users)
    src = block.source_rows()
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        # Users with 2 <= m <= d rows: by distinct row count (see _spectral_few_rows).
        for c in np.unique(counts[(counts >= 2) & (counts <= d)]):  # distinct counts
            users = np.flatnonzero(counts == c)
            per_chunk = max(1, _CHUNK_BYTES // (8 * c * d))
            for lo in range(0, users.size, per_chunk):  # memory chunks
                u = users[lo:lo + per_chunk]
                r = src[block.offsets[u][:, None] + np.arange(c)].reshape(-1)  # (n_c c,)
                Xu = np.take(X, r, axis=0, mode="clip")  # the users' rows: (n_c c, d)
                Ap = Xu if Xu.dtype == np.float64 else np.empty((r.size, d))
                yu = y[r].reshape(u.size, c)
                sx, sy = _user_scales(Xu, yu.ravel(), np.arange(u.size) * c)
                # a_j = (x_j / sx) (y_j / sy), in place (float64)
                np.divide(Xu.reshape(u.size, c, d), sx[:, None, None],
                          out=Ap.reshape(u.size, c, d))
                Ap = Ap.reshape(u.size, c, d)
                Ap *= (yu / sy[:, None])[..., None]
                part, norms[u] = _spectral_few_rows(Ap, sx, sy, clip_norm, norms_only)
                total += part
        # Users with more than d rows: explicit d x d matrices, chunked over users.
        heavy = np.flatnonzero(counts > max(d, 1))
        per_chunk = max(1, (64 * 2**20) // (8 * d * d))
        for lo in range(0, heavy.size, per_chunk):  # memory chunks of users
            users = heavy[lo:lo + per_chunk]
            cnt = counts[users]
            starts = np.zeros(users.size, dtype=np.int64)
            np.cumsum(cnt[:-1], out=starts[1:])
            pos = np.repeat(block.offsets[users] - starts, cnt) + np.arange(int(cnt.sum()))
            rows = src[pos]
            local = np.repeat(np.arange(users.size), cnt)
            Xr, yr = X[rows], y[rows]
            sx, sy = _user_scales(Xr, yr, starts)
            Ap = (Xr / sx[local][:, None]) * (yr / sy[local])[:, None]
            s = np.add.reduceat(Ap, starts, axis=0)
            m = cnt.astype(np.float64)
            outer = segment_outer_sum(Ap, None, UserIndex(np.arange(users.size), local))
            Zp = (s[:, :, None] * s[:, None, :] - outer) / (m * (m - 1.0))[:, None, None]
            f, norms[users] = scaled_clip_factors(stack_norms(Zp), (sx * sy) ** 2, clip_norm)
            if not norms_only:
                total += np.tensordot(f, Zp, axes=1)
    return (total + total.T) / 2.0, norms


def _spectral_block(block, state, clip_norm):
    return spectral_statistic(state.local, clip_norm)[0], state


# --------------------------------------------------------------------------- #
# Jain et al. (2021), Alg. 3: pairs of rows
# --------------------------------------------------------------------------- #
def pairwise_statistic(block, label_clip):
    """Sum over the block's users of the mean of their pair matrices (Alg. 3, line 1).

    Each user's rows (in the block's canonical order) are paired consecutively,
    ``(0, 1), (2, 3), ...`` (an odd last row is unused); a pair gives
    ``sym(x̂ x̂'^T) clip(y; ζ) clip(y'; ζ)`` with the unit rows ``x̂ = x / ||x||``
    and ``sym(M) = (M + M^T) / 2``; each user contributes the mean over its
    pairs, of Frobenius norm at most ``ζ^2``.

    Returns
    -------
    total : ndarray of shape (d, d)
        The block's partial sum (symmetric).
    """
    X, y = block.X, block.y
    d = X.shape[1]
    rank = block.rank
    first = (rank % 2 == 0) & (rank + 1 < block.expand(block.counts))
    p1 = np.flatnonzero(first)
    src = block.source_rows()
    r1, r2 = src[p1], src[p1 + 1]  # rows of a user are consecutive in the block
    n_pairs = block.counts // 2
    with np.errstate(over="ignore", invalid="ignore"):
        w = clip_values(y[r1], label_clip) * clip_values(y[r2], label_clip) \
            / np.maximum(n_pairs[block.row_user[p1]], 1)
    total = np.zeros((d, d))
    chunk = max(1, _CHUNK_BYTES // (8 * max(1, d)))
    for lo in range(0, p1.size, chunk):  # memory chunks of pairs
        # Unit rows are formed directly (never x * (y y' / (||x|| ||x'||))), so each
        # pair matrix has norm <= |y y'| for any magnitude of x (zero rows give 0).
        A = unit_rows(X[r1[lo:lo + chunk]])[0]
        B = unit_rows(X[r2[lo:lo + chunk]])[0]
        total += (A * w[lo:lo + chunk, None]).T @ B
    return (total + total.T) / 2.0


def _pairwise_block(block, state, label_clip):
    return pairwise_statistic(state.local, label_clip), state


# --------------------------------------------------------------------------- #
# The driver
# --------------------------------------------------------------------------- #
def random_init(n_features, n_components, rng):
    """A uniformly random orthonormal ``d × k`` matrix (QR of a Gaussian matrix).

    ``rng`` is public algorithmic randomness (a data-independent start), not
    privacy noise; the number of draws depends only on the public shape.
    """
    G = rng.standard_normal((n_features, n_components))
    Q, _ = np.linalg.qr(G)
    return Q


def _top_eigenvectors(M, k):
    """Eigenvectors of the ``k`` largest (algebraic) eigenvalues of symmetric ``M``."""
    M = (M + M.T) / 2.0
    w, Q = np.linalg.eigh(M)
    return Q[:, np.argsort(w)[::-1][:k]]


def initial_components(executor, release, *, init, n_components, n_features, clip_norm,
                       label_clip, rng):
    """The initial embedding ``U_0`` (``d × k``, orthonormal columns).

    Parameters
    ----------
    executor : LocalExecutor
        Blocks whose states hold the ``S^0`` split (:func:`prepare_split`).
    release : Releaser
        Releases the private statistic in phase ``"init"``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like
    n_components, n_features : int
    clip_norm : float or None
        ``ψ_init`` of Snedeker et al.'s Alg. 2.
    label_clip : float or None
        ``ζ`` of Jain et al.'s Alg. 3.
    rng : numpy.random.Generator
        Public randomness (``"random"``).

    Returns
    -------
    U0 : ndarray of shape (n_features, n_components)

    Notes
    -----
    Sensitivities (replace one user): ``2 ψ_init`` (each clipped ``Z_i`` has
    norm ``<= ψ_init``) and ``2 ζ^2`` (each mean pair matrix has norm
    ``<= ζ^2``). The released sum is symmetric and gets symmetric noise.
    """
    k = n_components
    if isinstance(init, str) and init == "random":
        return random_init(n_features, k, rng)
    if not isinstance(init, str):  # a public warm start
        Q, _ = np.linalg.qr(np.asarray(init, dtype=np.float64))
        return Q
    if init == "private_spectral":
        total = executor.map(_spectral_block, clip_norm)  # Alg. 2, lines 4-5
        clip, sensitivity = clip_norm, None if clip_norm is None else 2.0 * clip_norm
    else:
        total = executor.map(_pairwise_block, label_clip)  # Jain Alg. 3, line 1
        clip = label_clip
        sensitivity = None if label_clip is None else 2.0 * label_clip**2
    total = (total + total.T) / 2.0
    noisy = release.gaussian("init", total, sensitivity=sensitivity, clip_norm=clip,
                             symmetric=True)  # Alg. 2, line 6 / Alg. 3, line 2
    return _top_eigenvectors(noisy, k)  # Alg. 2, line 7 / Alg. 3, line 3
