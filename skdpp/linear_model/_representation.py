"""Shared-representation building blocks for :class:`PrivateFedRepRegressor` and
:class:`PrivAltMinRegressor`.

The model is ``y ≈ <x, U v_i>`` with a shared embedding ``U`` (``d × k``,
orthonormal columns, released under user-level DP) and a personal head ``v_i``
(``k``) per user, computed from ``U`` and that user's rows only.

This module holds the pieces both estimators use, all vectorised over users:

* :class:`_RowBlocks` — a subset of rows grouped by user (CSR layout), with
  weighted per-user sums computed as one sparse-times-dense product (no copy of
  ``X``), per-user ``k × k`` Gram matrices and random ranks within users;
* :func:`_solve_heads` / :func:`fit_heads` — batched per-user least squares for
  the heads on a given ``U``;
* :func:`private_spectral_init` (Snedeker et al. 2025, Alg. 2) and
  :func:`private_pairwise_init` (Jain et al. 2021, Alg. 3) — private spectral
  initialisations of ``U``;
* :func:`private_mean_head` — the cold-start head, a DP mean of clipped
  per-user heads;
* :func:`subspace_distance` — the principal-angle distance of Snedeker et al.
  (2025), Definition 2.

Noise is drawn only through :mod:`skdpp.privacy.mechanisms`; every function that
releases something returns the mechanism's event and the stated sensitivity so
the caller composes it into its accountant.
"""

import numpy as np
import scipy.sparse as sp

from ..privacy import mechanisms
from ..privacy.mechanisms import unit_rows as _unit_rows
from ..utils._grouped import (
    UserIndex,
    argsort_within,
    segment_outer_sum,
    segment_sum,
)
from ._heads import solve_heads

__all__ = [
    "fit_heads",
    "private_mean_head",
    "private_pairwise_init",
    "private_spectral_init",
    "random_init",
    "subspace_distance",
]


# Rows per chunk in the row-chunked Gram products (bounds temporary memory).
_CHUNK_BYTES = 16 * 2**20

# Row norms below this are recomputed with scaling (their squares are subnormal).
_SMALL_NORM = 1e-146


# --------------------------------------------------------------------------- #
# Clipping helpers (the only place per-user contributions are scaled)
# --------------------------------------------------------------------------- #
def _row_norms(M):
    """Euclidean norms of the rows of a 2-D array, overflow- and underflow-safe.

    One fast pass ``sqrt(sum m^2)``; rows whose squares overflow (entries beyond
    ~1e154) or underflow (norms below ~1e-146, where the squares lose precision
    and can even round to zero) are recomputed after scaling by their largest
    entry.
    """
    M = np.asarray(M, dtype=np.float64)
    if M.shape[1] == 0 or M.shape[0] == 0:
        return np.zeros(M.shape[0])
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        out = np.sqrt(np.einsum("ij,ij->i", M, M))
    bad = ~np.isfinite(out) | (out < _SMALL_NORM)
    if bad.any():
        out[bad] = _unit_rows(M[bad])[1]
    return out


def _stack_norms(M):
    """Frobenius norms of the matrices ``M[u]`` of a stack, overflow- and underflow-safe.

    A plain ``sqrt(sum m^2)`` loses precision once the squares are subnormal
    (norms below ~1e-146): a clip factor computed from it can leave a term whose
    true norm exceeds the clip bound (by ~6% for entries near 1e-161).
    """
    M = np.asarray(M, dtype=np.float64)
    return _row_norms(M.reshape(M.shape[0], -1))


def _clipped_magnitudes(norms, clip_norm):
    """``min(norm, clip_norm)`` via :func:`_clip_scale` (``norm`` where the factor is 1).

    Returns ``(magnitudes, factors)``; a contribution ``magnitude * unit`` has
    norm at most ``clip_norm`` up to rounding.
    """
    norms = np.asarray(norms, dtype=np.float64)
    c = _clip_scale(norms, clip_norm)
    mag = np.where(c < 1, clip_norm if clip_norm is not None else np.inf, norms)
    return mag, c


def _clip_scale(norms, clip_norm):
    """Per-contribution clipping factor ``min(1, clip_norm / norm)``.

    ``clip(M, C) = M * min(1, C / ||M||)`` (Snedeker et al. 2025, §3.2). Zero
    norms give factor 1; infinite norms give 0; ``clip_norm=None`` gives 1
    (no clipping, allowed only with ``epsilon=np.inf``).
    """
    norms = np.asarray(norms, dtype=np.float64)
    scale = np.ones_like(norms)
    if clip_norm is None:
        return scale
    big = norms > clip_norm
    with np.errstate(divide="ignore", over="ignore"):
        scale[big] = clip_norm / norms[big]
    return scale


def _clip_values(y, clip):
    """``clip(y; ζ) = sign(y) min(|y|, ζ)`` (Jain et al. 2021, Alg. 2-3)."""
    y = np.asarray(y, dtype=np.float64)
    return y if clip is None else np.clip(y, -clip, clip)


# --------------------------------------------------------------------------- #
# Rows grouped by user
# --------------------------------------------------------------------------- #
class _RowBlocks:
    """A subset of the rows of ``X`` grouped by user, for vectorised per-user sums.

    Parameters
    ----------
    rows : ndarray of int
        Row indices (into ``X``) of the subset.
    codes : ndarray of int
        User code (``0..n_users-1``) of each of those rows.
    n_users : int
        Number of users of the fit (users without rows in the subset get zeros).

    Attributes
    ----------
    rows, codes : ndarray
        The subset, sorted by user (stable: original order within a user).
    counts : ndarray of shape (n_users,)
    indptr : ndarray of shape (n_users + 1,)
    """

    def __init__(self, rows, codes, n_users):
        rows = np.asarray(rows, dtype=np.int64)
        codes = np.asarray(codes, dtype=np.int64)
        if codes.size and np.any(codes[1:] < codes[:-1]):
            order = np.argsort(codes, kind="stable")
            rows, codes = rows[order], codes[order]
        self.rows, self.codes = rows, codes
        self.n_users = int(n_users)
        self.counts = np.bincount(self.codes, minlength=self.n_users).astype(np.int64)
        self.indptr = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(self.counts, out=self.indptr[1:])
        n = self.rows.shape[0]
        # rows == arange(n): per-row arrays aligned with X need no gather.
        self.identity = bool(n == 0 or (self.rows[0] == 0 and self.rows[-1] == n - 1
                                        and np.all(np.diff(self.rows) == 1)))

    @classmethod
    def from_mask(cls, mask, all_codes, n_users):
        rows = np.flatnonzero(mask)
        return cls(rows, np.asarray(all_codes)[rows], n_users)

    def __len__(self):
        return self.rows.shape[0]

    def user_chunks(self, max_rows):
        """``[(u0, u1), ...]``: consecutive user ranges of about ``max_rows`` rows each
        (a range ends at the first user starting past a multiple of ``max_rows``)."""
        cid = self.indptr[:-1] // max(int(max_rows), 1)
        cuts = np.r_[0, np.flatnonzero(np.diff(cid)) + 1, self.n_users]
        return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]

    def user_range(self, u0, u1, row_offset=0):
        """Blocks of users ``u0 .. u1 - 1`` (renumbered from 0), rows minus ``row_offset``."""
        a, b = self.indptr[u0], self.indptr[u1]
        out = _RowBlocks.__new__(_RowBlocks)
        out.rows = self.rows[a:b] - row_offset
        out.codes = self.codes[a:b] - u0
        out.n_users = int(u1 - u0)
        out.counts = self.counts[u0:u1]
        out.indptr = self.indptr[u0:u1 + 1] - a
        n = b - a
        out.identity = bool(n == 0 or (out.rows[0] == 0 and out.rows[-1] == n - 1
                                       and (self.identity or np.all(np.diff(out.rows) == 1))))
        return out

    def gather(self, A):
        """``A[self.rows]`` (``A`` itself when the rows are all of ``A``'s, in order)."""
        return A if self.identity and A.shape[0] == len(self) else A[self.rows]

    def expand(self, per_user):
        """``per_user[self.codes]``: one value per user repeated over its rows."""
        return np.repeat(per_user, self.counts, axis=0)

    def segment_max(self, values):
        """Per-user maximum of the (row-aligned, any shape) ``values`` over the users
        with rows (``counts > 0``, in user order)."""
        starts = self.indptr[:-1][self.counts > 0]
        flat = np.ascontiguousarray(values).reshape(-1)
        width = flat.size // max(len(self), 1)
        return np.maximum.reduceat(flat, starts * width)

    def take(self, keep):
        """Sub-blocks keeping the rows where ``keep`` (aligned with ``self.rows``)."""
        return _RowBlocks(self.rows[keep], self.codes[keep], self.n_users)

    def sum(self, values):
        """Per-user sums of ``values`` (aligned with ``self.rows``), shape (n_users, ...)."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim == 1:
            return np.bincount(self.codes, weights=values, minlength=self.n_users)
        flat = values.reshape(values.shape[0], int(np.prod(values.shape[1:])))
        out = np.empty((self.n_users, flat.shape[1]))
        for j in range(flat.shape[1]):  # loop over (few) columns, not users or rows
            out[:, j] = np.bincount(self.codes, weights=flat[:, j], minlength=self.n_users)
        return out.reshape((self.n_users,) + values.shape[1:])

    def weighted_row_sum(self, weights, X):
        """``out[u] = sum_{r in u} weights_r X[row_r]`` as one sparse @ dense product."""
        M = sp.csr_matrix(
            (np.asarray(weights, dtype=np.float64), self.rows, self.indptr),
            shape=(self.n_users, X.shape[0]),
        )
        return np.asarray(M @ X)

    def gram(self, P):
        """Per-user ``sum_r p_r p_r^T`` of ``P`` (aligned rows), shape (n_users, k, k)."""
        k = P.shape[1]
        out = np.empty((self.n_users, k, k))
        for a in range(k):  # loop over the k(k+1)/2 entries, not users or rows
            for b in range(a, k):
                s = np.bincount(self.codes, weights=P[:, a] * P[:, b], minlength=self.n_users)
                out[:, a, b] = s
                out[:, b, a] = s
        return out

    def ranks(self, keys=None):
        """Rank of each row within its user: by ``keys`` (uniform in [0, 1)) if given,
        else row order. Ties are broken by position (stable sort of ``code + key``,
        much faster than ``np.lexsort`` on millions of rows)."""
        n = len(self)
        perm = np.arange(n) if keys is None else argsort_within(self.codes, keys)
        rank = np.empty(n, dtype=np.int64)
        rank[perm] = np.arange(n, dtype=np.int64) - self.indptr[self.codes[perm]]
        return rank


def _weighted_gram(X, rows, weights, rows2=None, unit_rows=False):
    """``sum_r w_r x_{rows[r]} x_{rows2[r]}^T`` (d × d), chunked over rows.

    ``weights`` may be 2-D of shape (n, q): then the result is (d, d, q), one Gram
    per weight column, computed with one matrix product per chunk.
    ``unit_rows=True`` uses ``x / ||x||`` (see :func:`_unit_rows`) instead of ``x``.
    """
    weights = np.asarray(weights, dtype=np.float64)

    def take(r):
        return _unit_rows(X[r])[0] if unit_rows else X[r]

    if rows2 is None and weights.ndim == 1 and np.all(weights >= 0):
        # Non-negative weights: (sqrt(w) X)^T (sqrt(w) X), one symmetric product per chunk.
        d = X.shape[1]
        out = np.zeros((d, d))
        root = np.sqrt(weights)
        chunk = max(1, _CHUNK_BYTES // (8 * max(1, d)))
        for start in range(0, rows.shape[0], chunk):  # memory chunks
            B = take(rows[start:start + chunk]) * root[start:start + chunk, None]
            out += B.T @ B
        return out
    squeeze = weights.ndim == 1
    W = weights[:, None] if squeeze else weights
    d, q = X.shape[1], W.shape[1]
    out = np.zeros((d, d * q))
    n = rows.shape[0]
    chunk = max(1, _CHUNK_BYTES // (8 * max(1, d * q)))
    for start in range(0, n, chunk):  # loop over memory chunks, not users or rows
        r = rows[start:start + chunk]
        Xa = take(r)
        Xb = Xa if rows2 is None else take(rows2[start:start + chunk])
        weighted = (Xb[:, :, None] * W[start:start + chunk, None, :]).reshape(len(r), d * q)
        out += Xa.T @ weighted
    out = out.reshape(d, d, q)
    return out[:, :, 0] if squeeze else out


# --------------------------------------------------------------------------- #
# Heads
# --------------------------------------------------------------------------- #
def fit_heads(X, y, U, blocks, P_all=None):
    """Exact per-user least-squares heads ``argmin_v sum (y - <U^T x, v>)^2``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
    y : ndarray of shape (n_samples,)
    U : ndarray of shape (d, k)
    blocks : _RowBlocks
        The rows to fit on, grouped by user.
    P_all : ndarray of shape (n_samples, k), default=None
        ``X @ U`` if already computed (avoids copying rows of ``X``).

    Returns
    -------
    V : ndarray of shape (n_users, k)
        Zero for users without rows in ``blocks`` (and for users whose head
        overflows: magnitudes near the float maximum).
    P : ndarray of shape (len(blocks), k)
        ``X[blocks.rows] @ U`` (reused by callers).
    """
    if P_all is not None:
        P = blocks.gather(P_all)
    else:
        P = X[blocks.rows] @ U if len(blocks) else np.zeros((0, U.shape[1]))
    yb = blocks.gather(y)
    # Each user's system is solved for P / max|P| and y / max|y| (no overflow in the
    # k x k Grams for any finite values; the relative ridge is scale invariant), then
    # v = v' max|y| / max|P|. Heads that are still not finite (pathological magnitudes,
    # e.g. X @ U overflowing) are set to zero: a function of the user's own rows only.
    n_users = blocks.n_users
    sp_, sy_ = np.ones(n_users), np.ones(n_users)
    nz = blocks.counts > 0
    if len(blocks) and P.shape[1]:
        with np.errstate(invalid="ignore"):
            mp = blocks.segment_max(np.abs(P))
            my = blocks.segment_max(np.abs(yb))
        sp_[nz] = np.where(mp > 0, mp, 1.0)
        sy_[nz] = np.where(my > 0, my, 1.0)
    bad = ~np.isfinite(sp_)
    with np.errstate(invalid="ignore", over="ignore"):
        Ps = P / blocks.expand(sp_)[:, None]
        if bad.any():
            Ps[blocks.expand(bad)] = 0.0
        A = blocks.gram(Ps)
        r = blocks.sum(Ps * (yb / blocks.expand(sy_))[:, None])
        V = solve_heads(A, r, blocks.counts) * (sy_ / sp_)[:, None]
    V[bad | ~np.all(np.isfinite(V), axis=1)] = 0.0
    return V, P


def fit_heads_chunked(X, y, U, blocks, max_rows=32768):
    """:func:`fit_heads` by chunks of consecutive users (``~max_rows`` rows each).

    ``X @ U`` is formed once (``n_samples × k``); each chunk's rows of it are then
    gathered, so the per-row temporaries of the head fits stay small. The heads are
    the same (each depends on its user's rows only).

    Returns
    -------
    V : ndarray of shape (n_users, k)
    """
    P_all = X @ U
    V = np.zeros((blocks.n_users, U.shape[1]))
    for u0, u1 in blocks.user_chunks(max_rows):  # memory chunks of users
        a, b = blocks.indptr[u0], blocks.indptr[u1]
        if b == a:  # users without rows keep the zero head
            continue
        rows = blocks.rows[a:b]
        sub = blocks.user_range(u0, u1)
        sub.rows, sub.identity = np.arange(b - a), True  # rows of the gathered chunk
        V[u0:u1], _ = fit_heads(None, y[rows], U, sub, P_all=P_all[rows])
    return V


def random_init(n_features, n_components, rng):
    """A uniformly random orthonormal ``d × k`` matrix (QR of a Gaussian matrix)."""
    # Algorithmic randomness (a data-independent start), not privacy noise.
    G = rng.standard_normal((n_features, n_components))
    Q, _ = np.linalg.qr(G)
    return Q


def _top_eigenvectors(M, k):
    """Eigenvectors of the ``k`` largest (algebraic) eigenvalues of symmetric ``M``."""
    M = (M + M.T) / 2.0
    w, Q = np.linalg.eigh(M)
    return Q[:, np.argsort(w)[::-1][:k]]


# --------------------------------------------------------------------------- #
# Private initialisations
# --------------------------------------------------------------------------- #
# Users whose scaled U-statistic has Frobenius norm below this are dropped (their
# contribution is set to zero, always within the clip bound): avoids overflow of
# ``clip / norm`` for degenerate users (see :func:`_clip_factors`).
_TINY_NORM = 1e-250

# Users with 2 <= m <= d rows whose U-statistic does not cancel, i.e.
# ||Z'|| m (m - 1) >= _RHO_MIN ||A'||_F^2, and with ||A'||_F^2 >= _GRAM_MIN, are added
# without a QR factorisation (see _spectral_few_rows); others use the thin QR.
# _GRAM_MIN keeps every term of the Gram formula (~ ||A'||_F^4 >= 1e-200) far from
# the subnormal range: with 1e-200, users with ||A'||_F^2 ~ 1e-160 had terms near
# 1e-320 (a few significant bits), norms off by tens of percent and terms above psi.
_RHO_MIN = 0.05
_GRAM_MIN = 1e-100


def _spectral_few_rows(Ap, sx, sy, clip_norm):
    """``sum_u clip(Z_u, ψ)`` for users with the same number ``2 <= c <= d`` of rows.

    ``Ap`` (``n × c × d``) holds each user's scaled rows ``a_j = y_j x_j / (sx sy)``;
    ``Z'_u = (s s^T - sum_j a_j a_j^T) / (c (c - 1))`` with ``s = sum_j a_j``.

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

    Returns
    -------
    total : ndarray of shape (d, d)
    norms : ndarray of shape (n,)
        ``||Z_u||_F`` before clipping.
    """
    n, c, d = Ap.shape
    cc = c * (c - 1.0)
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
    if fast.any():
        A = Ap if fast.all() else Ap[fast]
        f, norms[fast] = _clip_factors(nu[fast] / cc, sx[fast], sy[fast], clip_norm)
        W = (A.sum(axis=1)[:, None, :] - A) * (f / cc)[:, None, None]  # f (s - a_j) / cc
        total += A.reshape(-1, d).T @ W.reshape(-1, d)
    if not fast.all():
        slow = ~fast
        A = Ap[slow]
        Q, R = np.linalg.qr(A.transpose(0, 2, 1))  # (n_s, d, c), (n_s, c, c)
        rs = R.sum(axis=2)  # R 1
        B = (rs[:, :, None] * rs[:, None, :] - R @ R.transpose(0, 2, 1)) / cc
        f, norms[slow] = _clip_factors(_stack_norms(B), sx[slow], sy[slow], clip_norm)
        # sum_u Q_u (f_u B_u) Q_u^T as one (d, n_s c) @ (n_s c, d) product of the
        # stacked Q_u^T (one copy) and (f_u B_u) Q_u^T (B_u symmetric).
        Qt = np.ascontiguousarray(Q.transpose(0, 2, 1)).reshape(-1, d)  # (n_s c, d)
        BQt = ((B * f[:, None, None]) @ Qt.reshape(-1, c, d)).reshape(-1, d)
        total += Qt.T @ BQt
    return total, norms


def _user_scales(X_rows, y_rows, starts):
    """Per-user ``max |x|`` and ``max |y|`` over consecutive row segments (1 for zeros)."""
    d = X_rows.shape[1]
    with np.errstate(invalid="ignore"):
        # one flat reduction per user segment (rows of a user are consecutive)
        mx = np.maximum.reduceat(np.abs(np.ascontiguousarray(X_rows)).reshape(-1),
                                 starts * d) if d else np.zeros(starts.size)
        my = np.maximum.reduceat(np.abs(y_rows), starts)
    return np.where(mx > 0, mx, 1.0), np.where(my > 0, my, 1.0)


def _clip_factors(norms_scaled, sx, sy, clip_norm):
    """Factors ``f`` with ``f Z'_i = clip(Z_i, ψ)`` where ``Z_i = (sx sy)^2 Z'_i``.

    ``norms_scaled`` is ``||Z'_i||_F`` of the *computed* scaled matrix, so the
    contribution actually added, ``f Z'_i``, has norm ``min(||Z_i||, ψ)`` up to
    rounding whatever cancellation occurred while forming ``Z'_i``.

    Returns
    -------
    f : ndarray
    norms : ndarray
        ``||Z_i||_F`` (may be ``inf`` when it overflows).
    """
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        mu2 = (sx * sy) ** 2
        ok = norms_scaled >= _TINY_NORM
        norms = np.where(norms_scaled > 0, mu2 * norms_scaled, 0.0)
        if clip_norm is None:
            f = np.where(ok, mu2, 0.0)
        else:
            f = np.where(ok, np.minimum(mu2, clip_norm / np.where(ok, norms_scaled, 1.0)), 0.0)
            f = np.where(np.isfinite(f), f, 0.0)
    return f, norms


def spectral_statistic(X, y, blocks, clip_norm):
    """Sum over users of the clipped U-statistics ``clip(Z_i, ψ)`` (Alg. 2, lines 4-6).

    ``Z_i = 1/(m_i (m_i - 1)) sum_{j1 != j2} y_{j1} y_{j2} x_{j1} x_{j2}^T`` over
    the user's ``m_i`` rows in ``blocks`` (zero when ``m_i < 2``).

    Numerics (this is what makes the stated sensitivity hold in floating
    point): each user's rows ``a_j = y_j x_j`` are first scaled by the user's
    ``max |x|`` and ``max |y|`` (no overflow), and the clipping factor is
    computed from the norm of the *same computed matrix* that is added to the
    sum. ``Z_i`` is a difference ``s s^T - sum_j a_j a_j^T`` that can cancel
    catastrophically (e.g. one row ``1e6 e_1`` and one row ``1e-4 e_2``): a norm
    obtained from an expanded formula (``||s||^4 - 2 sum (a_j^T s)^2 + ...``)
    can then be 0 while ``||Z_i||`` is large, and large per-user terms summed
    across users absorb other users' contributions. Users with at most ``d``
    rows whose ``Z_i`` cancels (``||Z'_i|| m_i (m_i - 1) < 0.05 ||A'_i||_F^2``) use
    a thin QR ``A_i^T = Q_i R_i``: ``Z_i = Q_i B_i Q_i^T`` with the ``m_i × m_i``
    matrix ``B_i = R_i (11^T - I) R_i^T / (m_i(m_i-1))`` and
    ``||Z_i||_F = ||B_i||_F`` (``Q_i`` orthonormal); the other users with at most
    ``d`` rows (no cancellation, where the ``m_i × m_i`` Gram formula for the norm
    is accurate to ~1e-12 relative) skip the QR (see :func:`_spectral_few_rows`);
    users with more rows form ``Z_i`` (``d × d``) explicitly. Either way each added
    term has norm at most ``ψ`` (up to rounding).

    Returns
    -------
    total : ndarray of shape (d, d)
        ``sum_i clip(Z_i, ψ)`` (symmetric).
    norms : ndarray of shape (n_users,)
        ``||Z_i||_F`` before clipping.
    """
    n_users, d = blocks.n_users, X.shape[1]
    counts = blocks.counts
    total = np.zeros((d, d))
    norms = np.zeros(n_users)
    # Users with 2 <= m <= d rows: by distinct row count (see _spectral_few_rows).
    for c in np.unique(counts[(counts >= 2) & (counts <= d)]):  # distinct counts
        users = np.flatnonzero(counts == c)
        per_chunk = max(1, _CHUNK_BYTES // (8 * c * d))
        for lo in range(0, users.size, per_chunk):  # memory chunks
            u = users[lo:lo + per_chunk]
            r = blocks.rows[blocks.indptr[u][:, None] + np.arange(c)]  # (n_c, c)
            Xu, yu = X[r], y[r]
            sx, sy = _user_scales(Xu.reshape(-1, d), yu.ravel(), np.arange(u.size) * c)
            Ap = (Xu / sx[:, None, None]) * (yu / sy[:, None])[..., None]  # (n_c, c, d)
            part, norms[u] = _spectral_few_rows(Ap, sx, sy, clip_norm)
            total += part
    # Users with more than d rows: explicit d x d matrices, chunked over users.
    heavy = np.flatnonzero(counts > max(d, 1))
    if heavy.size:
        per_chunk = max(1, (64 * 2**20) // (8 * d * d))
        for lo in range(0, heavy.size, per_chunk):  # memory chunks of users
            users = heavy[lo:lo + per_chunk]
            sel = np.isin(blocks.codes, users)  # blocks are sorted by user
            rows = blocks.rows[sel]
            local = np.searchsorted(users, blocks.codes[sel])
            idx = UserIndex(users, local)
            sx, sy = _user_scales(X[rows], y[rows], idx.offsets[:-1])
            Ap = (X[rows] / sx[local][:, None]) * (y[rows] / sy[local])[:, None]
            s = segment_sum(Ap, idx)
            m = counts[users].astype(np.float64)
            Zp = (s[:, :, None] * s[:, None, :] - segment_outer_sum(Ap, None, idx)) \
                / (m * (m - 1.0))[:, None, None]
            f, norms[users] = _clip_factors(_stack_norms(Zp), sx, sy, clip_norm)
            total += np.tensordot(f, Zp, axes=1)
    return (total + total.T) / 2.0, norms


def private_spectral_init(X, y, blocks, n_components, *, clip_norm, noise_multiplier, rng):
    """Private initialisation of Snedeker, Zhou & Bassily (2025), Alg. 2.

    Releases ``sum_i clip(Z_i, ψ_init)`` (Alg. 2, line 6, before the division by
    the public ``n``) with the Gaussian mechanism and symmetric noise, then
    returns the top-``k`` eigenvectors (line 7).

    Sensitivity (replace one user): ``||clip(Z_i) - clip(Z_i')||_F <= 2 ψ_init``.

    Returns
    -------
    U : ndarray of shape (d, k)
    event : DpEvent
    sensitivity : float or None
    """
    total, _ = spectral_statistic(X, y, blocks, clip_norm)
    if clip_norm is None:
        release, event = _nonprivate(total)
        sensitivity = None
    else:
        sensitivity = 2.0 * clip_norm
        release, event = mechanisms.gaussian_mechanism(
            total, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng,
            symmetric=True,
        )
    return _top_eigenvectors(release, n_components), event, sensitivity


def pairwise_statistic(X, y, blocks, label_clip):
    """Sum over users of the per-user mean of Jain et al.'s pair matrices (Alg. 3, line 1).

    Each user's rows (in ``blocks`` order) are paired consecutively,
    ``(0, 1), (2, 3), ...`` (an odd last row is unused); a pair gives
    ``sym(x x'^T / (||x|| ||x'||) clip(y; ζ) clip(y'; ζ))`` with
    ``sym(M) = (M + M^T) / 2``; each user contributes the mean over its pairs.

    Returns
    -------
    total : ndarray of shape (d, d)
    """
    rank = blocks.ranks()
    n_pairs = blocks.counts // 2
    first = (rank % 2 == 0) & (rank + 1 < blocks.counts[blocks.codes])
    p1 = np.flatnonzero(first)
    p2 = p1 + 1  # blocks are sorted by user, rows of a user are contiguous
    r1, r2 = blocks.rows[p1], blocks.rows[p2]
    codes = blocks.codes[p1]
    yc = _clip_values(y, label_clip)
    w = yc[r1] * yc[r2] / np.maximum(n_pairs[codes], 1)
    # Unit rows x / ||x|| are formed directly (never x * (y y' / (||x|| ||x'||))), so
    # each pair matrix has norm <= |y y'| for any magnitude of x (zero rows give 0).
    total = _weighted_gram(X, r1, w, rows2=r2, unit_rows=True)
    return (total + total.T) / 2.0


def private_pairwise_init(X, y, blocks, n_components, *, label_clip, noise_multiplier, rng):
    """Private initialisation of Jain, Rush, Smith, Song & Thakurta (2021), Alg. 3.

    Each user's contribution (mean of its pair matrices) has Frobenius norm at
    most ``ζ^2``, so the sum has sensitivity ``2 ζ^2`` under replace-one-user.

    Returns
    -------
    U : ndarray of shape (d, k)
    event : DpEvent
    sensitivity : float or None
    """
    total = pairwise_statistic(X, y, blocks, label_clip)
    if label_clip is None:
        release, event = _nonprivate(total)
        sensitivity = None
    else:
        sensitivity = 2.0 * label_clip**2
        release, event = mechanisms.gaussian_mechanism(
            total, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng,
            symmetric=True,
        )
    return _top_eigenvectors(release, n_components), event, sensitivity


def _nonprivate(value):
    """Release without noise (only reachable with ``epsilon=np.inf`` and no clipping)."""
    from ..privacy import NonPrivateEvent

    return np.array(value, dtype=np.float64, copy=True), NonPrivateEvent()


# --------------------------------------------------------------------------- #
# Cold start
# --------------------------------------------------------------------------- #
def private_mean_head(V, present, *, clip_norm, noise_multiplier, rng, n_users):
    """DP mean of the users' heads clipped to ``clip_norm`` (the cold-start head).

    ``sum_i clip(v_i, C)`` over users with rows (``present``) is released with the
    Gaussian mechanism (sensitivity ``2 C`` under replace-one-user) and divided
    by the public number of users.

    Returns
    -------
    mean_head : ndarray of shape (k,)
    event : DpEvent
    sensitivity : float or None
    """
    V = np.asarray(V, dtype=np.float64)
    c = _clip_scale(_row_norms(V), clip_norm) * np.asarray(present, dtype=np.float64)
    total = (V * c[:, None]).sum(axis=0)
    if clip_norm is None:
        release, event = _nonprivate(total)
        sensitivity = None
    else:
        sensitivity = 2.0 * clip_norm
        release, event = mechanisms.gaussian_mechanism(
            total, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng
        )
    return release / max(n_users, 1), event, sensitivity


# --------------------------------------------------------------------------- #
# Evaluation
# --------------------------------------------------------------------------- #
def subspace_distance(U1, U2):
    """Principal-angle distance between column spaces (Snedeker et al. 2025, Def. 2).

    ``dist(U1, U2) = ||(I - Q1 Q1^T) Q2||_2`` where ``Q1``, ``Q2`` are orthonormal
    bases of the column spaces: the sine of the largest principal angle, in
    ``[0, 1]``.

    Parameters
    ----------
    U1, U2 : array-like of shape (d, k)

    Returns
    -------
    dist : float

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._representation import subspace_distance
    >>> round(subspace_distance(np.eye(3)[:, :1], np.eye(3)[:, 1:2]), 6)
    1.0
    """
    Q1, _ = np.linalg.qr(np.asarray(U1, dtype=np.float64))
    Q2, _ = np.linalg.qr(np.asarray(U2, dtype=np.float64))
    R = Q2 - Q1 @ (Q1.T @ Q2)
    return float(min(1.0, np.linalg.norm(R, 2)))


# --------------------------------------------------------------------------- #
# Shared estimator plumbing
# --------------------------------------------------------------------------- #
_RNG_STREAMS = ("split", "init", "batches", "noise")


def _child_rngs(random_state):
    """Independent generators for the split, the initialisation, the batches and the noise.

    ``check_random_state(random_state)`` is called once; it draws one seed per
    stream, in the fixed order of ``_RNG_STREAMS``. Separate streams keep the
    draws of one purpose (e.g. per-row keys, whose number depends on the data
    size) from shifting the others.
    """
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    seeds = rng.randint(0, np.iinfo(np.int32).max, size=len(_RNG_STREAMS))
    return {name: np.random.RandomState(int(s)) for name, s in zip(_RNG_STREAMS, seeds)}


def _split_blocks(index, rng):
    """``S^0`` / ``S^1`` split of each user's rows (Snedeker et al. 2025, Alg. 1).

    Returns ``(s0, s1)`` as :class:`_RowBlocks`: half of each user's rows (at
    random, ``ceil(m/2)``; a one-row user keeps its row in ``S^0``).
    """
    # Same rule as skdpp.utils.split_within_users(index, 0.5, rng) (one uniform key per
    # row, ceil(m/2) rows clipped to [1, m-1]), with a faster within-user sort.
    keys = rng.random_sample(index.n_samples)
    perm = argsort_within(index.codes, keys)
    counts = index.counts
    n_first = np.where(counts >= 2, np.clip((counts + 1) // 2, 1, np.maximum(counts - 1, 1)),
                       counts)
    # perm lists the rows user by user, so the rank of perm[j] within its user is
    # j - offset of that user (no gathers through perm).
    rank_sorted = np.arange(index.n_samples) - np.repeat(index.offsets[:-1], counts)
    mask = np.empty(index.n_samples, dtype=bool)
    mask[perm] = rank_sorted < np.repeat(n_first, counts)
    return (_RowBlocks.from_mask(mask, index.codes, index.n_users),
            _RowBlocks.from_mask(~mask, index.codes, index.n_users))


def _final_blocks(s0, s1):
    """Rows for the final heads: ``S^1`` (Alg. 1, line 14); ``S^0`` for users without ``S^1`` rows."""
    no_s1 = s1.counts == 0
    extra = no_s1[s0.codes]
    return _RowBlocks(np.concatenate([s1.rows, s0.rows[extra]]),
                      np.concatenate([s1.codes, s0.codes[extra]]), s0.n_users)


_INIT_OPTIONS = ("private_spectral", "private_pairwise", "random")


def _common_constraints():
    from numbers import Integral, Real

    from sklearn.utils._param_validation import Interval, StrOptions

    from ..base import BasePersonalizedEstimator

    positive_or_none = [Interval(Real, 0, None, closed="neither"), None]
    return {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions(set(_INIT_OPTIONS)), "array-like"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "clip_norm": positive_or_none,
        "init_clip_norm": positive_or_none,
        "head_clip_norm": positive_or_none,
        "init_share": [Interval(Real, 0, 1, closed="left")],
        "cold_start_share": [Interval(Real, 0, 1, closed="left")],
        "batch_mode": [StrOptions({"same", "disjoint"})],
        "verbose": ["verbose"],
    }


class _RepresentationMixin:
    """Plumbing shared by the two shared-representation regressors (not public).

    Subclasses define ``fit``; this mixin provides validation of the
    representation parameters, the initialisation of ``U``, the final heads, the
    cold-start head, ``predict`` and the ``personalize`` hook.
    """

    _personal_attributes = ("heads_",)

    # ----------------------------------------------------------------- checks
    def _check_params_for_data(self, n_features):
        k = self.n_components
        if k > n_features:
            raise ValueError(
                f"n_components={k} must be <= n_features={n_features} (the shared "
                f"embedding U is n_features x n_components with orthonormal columns). "
                f"Pass n_components <= {n_features}."
            )
        if self.init_share + self.cold_start_share >= 1:
            raise ValueError(
                f"init_share + cold_start_share must be < 1 so that the iterations get a "
                f"positive share of the budget; got init_share={self.init_share!r} and "
                f"cold_start_share={self.cold_start_share!r}. Lower one of them."
            )
        if self.epsilon != np.inf:
            for name in self._clip_param_names:
                if getattr(self, name) is None:
                    raise ValueError(
                        f"{name}=None (no clipping) gives unbounded sensitivity and is "
                        f"only allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. "
                        f"Pass a positive {name}."
                    )
        if not isinstance(self.init, str):
            U0 = np.asarray(self.init, dtype=np.float64)
            if U0.shape != (n_features, k) or not np.all(np.isfinite(U0)):
                raise ValueError(
                    f"init as an array must be a finite public warm start of shape "
                    f"(n_features, n_components) = ({n_features}, {k}); got shape "
                    f"{U0.shape}. Pass an array of that shape or one of {_INIT_OPTIONS}."
                )
            if np.linalg.matrix_rank(U0) < k:
                raise ValueError(
                    f"init as an array must have rank n_components={k}; the given "
                    f"matrix is rank deficient. Pass a full-rank warm start."
                )

    def _private_init(self):
        return isinstance(self.init, str) and self.init.startswith("private")

    # --------------------------------------------------------- budget plan
    def _phases(self, n_iteration_releases):
        """Named budget plan: ``init``, ``iterations``, ``cold_start``."""
        from ..privacy import Phase

        phases = []
        iter_share = 1.0 - self.cold_start_share
        if self._private_init():
            if self.init_share > 0:
                phases.append(Phase("init", share=self.init_share, mechanism="gaussian",
                                    count=1))
            iter_share -= self.init_share
        if n_iteration_releases > 0:
            phases.append(Phase("iterations", share=iter_share, mechanism="gaussian",
                                count=int(n_iteration_releases)))
        if self.cold_start_share > 0:
            phases.append(Phase("cold_start", share=self.cold_start_share,
                                mechanism="gaussian", count=1))
        return phases

    # ----------------------------------------------------------------- init
    def _initial_components(self, X, y, s0, rngs, params, accountant, label_clip=None):
        d, k = X.shape[1], self.n_components
        rng = rngs["noise"]
        if isinstance(self.init, str) and self.init == "random":
            return random_init(d, k, rngs["init"])
        if not isinstance(self.init, str):  # public warm start
            Q, _ = np.linalg.qr(np.asarray(self.init, dtype=np.float64))
            return Q
        if self.init_share == 0:
            raise ValueError(
                f"init={self.init!r} releases a private statistic and needs a positive "
                f"init_share; got init_share=0. Pass init_share > 0, or init='random' / "
                f"an array."
            )
        z = params["init"]
        if self.init == "private_spectral":
            U, event, sens = private_spectral_init(
                X, y, s0, k, clip_norm=self.init_clip_norm, noise_multiplier=z, rng=rng)
            clip = self.init_clip_norm
        else:
            U, event, sens = private_pairwise_init(
                X, y, s0, k, label_clip=label_clip, noise_multiplier=z, rng=rng)
            clip = label_clip
        accountant.compose(event, phase="init", mechanism="gaussian", sensitivity=sens,
                           clip_norm=clip)
        return U

    # ---------------------------------------------------------- final part
    def _finish(self, X, y, U, s0, s1, rngs, params, accountant, n_users):
        """Final heads (Alg. 1, line 14) and the DP cold-start head."""
        V = fit_heads_chunked(X, y, U, _final_blocks(s0, s1))
        if self.cold_start_share > 0:
            present = (s0.counts + s1.counts) > 0
            head, event, sens = private_mean_head(
                V, present, clip_norm=self.head_clip_norm,
                noise_multiplier=params["cold_start"], rng=rngs["noise"], n_users=n_users)
            accountant.compose(event, phase="cold_start", mechanism="gaussian",
                               sensitivity=sens, clip_norm=self.head_clip_norm)
        else:
            head = np.zeros(U.shape[1])
        return V, head

    def _fit_personal(self, X, y, index):
        """Heads of the users of ``index`` from their own rows and the released ``U``."""
        blocks = _RowBlocks(np.arange(index.n_samples), index.codes, index.n_users)
        V, _ = fit_heads(X, np.asarray(y, dtype=np.float64), self.components_, blocks,
                         P_all=X @ self.components_)
        return {"heads_": V}

    # -------------------------------------------------------------- predict
    def predict(self, X, groups=None):
        """Predict with each known user's head, the cold-start head for unseen users.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` (or added by
            ``personalize``) use ``x^T U v_i``; other rows (and all rows when
            ``groups=None``) use the cold-start head ``x^T U v_cold``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        H = np.empty((X.shape[0], self.components_.shape[1]))
        H[known] = self.heads_[codes[known]]
        H[~known] = self.cold_start_head_
        return np.einsum("ij,ij->i", X @ self.components_, H)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        return tags
