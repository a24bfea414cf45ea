"""Initialisations of the shared embedding ``U`` (:func:`initial_components`):
Snedeker, Zhou & Bassily (2025), Alg. 2 (:func:`spectral_statistic`) and Jain, Rush,
Smith, Song & Thakurta (2021), Alg. 3 (:func:`pairwise_statistic`)."""

import numpy as np

from ...privacy._clipping import clip_values, scaled_clip_factors, stack_norms, unit_rows
from ...utils._grouped import UserIndex, segment_outer_sum

__all__ = ["initial_components", "pairwise_statistic", "random_init", "spectral_statistic"]

_CHUNK_BYTES = 16 * 2**20  # per-chunk temporaries (rows gathered per distinct count)

# The Gram route of _spectral_few_rows: ||Z'|| m (m - 1) >= _RHO_MIN ||A'||_F^2 (no
# cancellation) and ||A'||_F^2 >= _GRAM_MIN (terms ~||A'||_F^4 far from subnormals:
# at 1e-200, norms were off by tens of percent).
_RHO_MIN = 0.05
_GRAM_MIN = 1e-100


def _spectral_few_rows(Ap, sx, sy, clip_norm, norms_only=False):
    """``(sum_u clip(Z_u, ψ), ||Z_u||_F)`` for users with ``2 <= c <= d`` rows each.

    ``Ap``: scaled rows ``a_j = y_j x_j / (sx sy)``, ``Z'_u = (s s^T - sum_j a_j
    a_j^T) / (c (c - 1))``, ``Z_u = (sx sy)^2 Z'_u``. Without cancellation
    (``||Z'|| c (c - 1) >= _RHO_MIN ||A'||_F^2``, nearly all users) the norm comes
    from the Gram ``G = A' A'^T`` (``(1^T G 1)^2 - 2 ||G 1||^2 + ||G||_F^2``,
    relative error ``O(c^3 eps / _RHO_MIN^2)``) and ``f Z'`` is added as ``sum_j
    a_j (f (s - a_j) / (c (c - 1)))^T``; with cancellation, by thin QR ``A'^T = Q
    R``, ``Z' = Q B Q^T`` and the factor from the computed ``||B||_F``. Either way
    the added term's norm is ``min(||Z||, ψ)`` up to ~1e-12 relative.
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
        # sum_u Q_u (f_u B_u) Q_u^T as one (d, n_s c) @ (n_s c, d) product
        Qt = np.ascontiguousarray(Q.transpose(0, 2, 1)).reshape(-1, d)  # (n_s c, d)
        BQt = ((B * f[:, None, None]) @ Qt.reshape(-1, c, d)).reshape(-1, d)
        total += Qt.T @ BQt
    return total, norms


def _user_scales(X_rows, y_rows, starts):
    """Per-user ``max |x|`` and ``max |y|`` over consecutive row segments (1 for zeros)."""
    d = X_rows.shape[1]
    if d:
        # max |x| = max(max x, -min x) per consecutive segment, no |X| temporary
        flat = np.ascontiguousarray(X_rows).reshape(-1)
        mx = np.maximum(np.maximum.reduceat(flat, starts * d),
                        -np.minimum.reduceat(flat, starts * d))
    else:
        mx = np.zeros(starts.size)
    my = np.maximum.reduceat(np.abs(y_rows), starts)
    return np.where(mx > 0, mx, 1.0), np.where(my > 0, my, 1.0)


def spectral_statistic(block, clip_norm, *, norms_only=False):
    """``(sum_i clip(Z_i, ψ), ||Z_i||_F)`` over the block's users (Alg. 2, lines 4-6),
    ``Z_i = 1/(m_i (m_i - 1)) sum_{j1 != j2} y_{j1} y_{j2} x_{j1} x_{j2}^T`` (zero when
    ``m_i < 2``); the sum is unspecified with ``norms_only`` (``"auto"`` ``ψ_init``).

    Notes
    -----
    The sensitivity holds in floating point: each user's rows are scaled by its
    ``max |x|`` and ``max |y|`` (no overflow) and the clip factor comes from the
    norm of the *same computed matrix* that is added
    (:func:`~skdpp.privacy._clipping.scaled_clip_factors`); catastrophic
    cancellation (rows ``1e6 e_1``, ``1e-4 e_2``) is handled by :func:`_spectral_few_rows`.
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


def pairwise_statistic(block, label_clip):
    """The block's symmetric sum of each user's mean pair matrix (Alg. 3, line 1): rows
    paired consecutively in canonical order (an odd last row unused), a pair giving
    ``sym(x̂ x̂'^T) clip(y; ζ) clip(y'; ζ)`` with unit ``x̂``: each mean has norm ``<= ζ^2``.
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
        # unit rows formed directly: norm <= |y y'| for any magnitude of x
        A = unit_rows(X[r1[lo:lo + chunk]])[0]
        B = unit_rows(X[r2[lo:lo + chunk]])[0]
        total += (A * w[lo:lo + chunk, None]).T @ B
    return (total + total.T) / 2.0


def _pairwise_block(block, state, label_clip):
    return pairwise_statistic(state.local, label_clip), state


def random_init(n_features, n_components, rng):
    """A random orthonormal ``d × k`` matrix: QR of a Gaussian draw from the public ``rng``."""
    G = rng.standard_normal((n_features, n_components))
    Q, _ = np.linalg.qr(G)
    return Q


def initial_components(executor, release, *, init, clip, n_components, n_features, rng):
    """``U_0`` (``d × k``, orthonormal) from the ``S^0`` split: the statistic is
    released in phase ``"init"`` with symmetric noise, sensitivity (replace one user)
    ``2 ψ_init`` (spectral, ``clip = ψ_init``: each clipped ``Z_i`` has norm ``<=
    ψ_init``) or ``2 ζ^2`` (pairwise, ``clip = ζ``: each mean pair matrix has norm
    ``<= ζ^2``); ``rng`` is public."""
    if not isinstance(init, str):  # a public warm start
        return np.linalg.qr(np.asarray(init, dtype=np.float64))[0]
    if init == "random":
        return random_init(n_features, n_components, rng)
    if init == "private_spectral":
        total = executor.map(_spectral_block, clip)  # Alg. 2, lines 4-5
        sensitivity = None if clip is None else 2.0 * clip
    else:
        total = executor.map(_pairwise_block, clip)  # Jain Alg. 3, line 1
        sensitivity = None if clip is None else 2.0 * clip**2
    total = (total + total.T) / 2.0
    noisy = release.gaussian("init", total, sensitivity=sensitivity, clip_norm=clip,
                             symmetric=True)  # Alg. 2, line 6 / Alg. 3, line 2
    w, Q = np.linalg.eigh((noisy + noisy.T) / 2.0)
    # the top-k eigenvectors: Alg. 2, line 7 / Alg. 3, line 3
    return Q[:, np.argsort(w)[::-1][:n_components]]
