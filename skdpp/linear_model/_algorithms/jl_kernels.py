"""Per-user terms of Algorithm 3 (Snedeker, Zhou & Bassily 2025) as block functions.

Array functions act on the rows of one block of whole users (``seg``, canonical
order); block functions (``*_block``) return partials that the driver
:mod:`.jl_margin` sums and releases. Every per-user score term lies in ``[0, 1]``
and depends only on that user's rows (score sensitivity ``1 / n``). Over/underflow
never warns or raises: non-finite intermediates only decide a user's own 0/1
losses (or its cold-start head). Temporaries are chunked to ``_CHUNK_BYTES``.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from ...privacy import clip_by_norm, row_norms, unit_rows
from ...privacy._quantile import cumulative_counts
from ...utils._random import hash_ids, row_hashes
from .._auto import user_means
from .._heads import batched_solve
from .._labels import binary_problems, label_codes

_CHUNK_BYTES = 64 * 2**20  # temporary margin tensors (chunked over candidates or users)
_GRID_STEP_ELEMENTS = 2**17  # (row, candidate, direction) triples per cache-sized step
_GRID_TABLE_BYTES = 2**22  # distinct rows' 0/1 grid losses per candidate chunk
_OWN_STEP_ELEMENTS = 2**17  # (row, candidate, k) projections per own-direction step
# more distinct rows than this fraction: scored row by row (measured)
_DISTINCT_FRACTION = 0.5

# Data-dependent floating-point warnings would leak (DESIGN section 7).
_QUIET = dict(over="ignore", under="ignore", invalid="ignore", divide="ignore")

# Personal heads: Newton steps, trust region (RMS change of a user's decision
# values per step, logits), numerical ridge (standardised units), and the gain
# (nats) an intercept must bring (:func:`intercept_heads`: likelihood ratio, p ~ 0.05).
_NEWTON_STEPS = 15
_MAX_STEP = 4.0
_NUMERICAL_RIDGE = 1e-6
_INTERCEPT_GAIN = 2.0


def circle_grid(n_directions):
    """``n_directions`` equally spaced unit directions of the circle (``k = 2``)."""
    angles = 2.0 * np.pi * np.arange(n_directions) / n_directions
    return np.column_stack([np.cos(angles), np.sin(angles)])


def row_keys(X, y):
    """Keys of the canonical order of a user's rows: a hash of features and label."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        labels, inverse = np.unique(y, return_inverse=True)
        y = hash_ids(labels)[inverse.reshape(-1)]
    return row_hashes(X, y)


def finite_rows(X):
    """A float64 copy of ``X`` whose rows with a non-finite entry are 0 (a loss at
    every direction: a function of its user's rows only)."""
    X = np.array(X, dtype=np.float64)
    X[~np.isfinite(X).all(axis=1)] = 0.0
    return X


def user_rms_norms(seg, V):
    """Each user's RMS row norm (``clip_norm="auto"``'s statistic): overflow-safe (scaled
    by the user's largest norm), NaN if that overflows, 0 without rows."""
    norms = row_norms(V)
    top = seg.segment_max(norms, initial=0.0)
    with np.errstate(**_QUIET):
        scaled = norms / seg.expand(np.where(top > 0, top, 1.0))
        mean_sq = seg.segment_sum(scaled * scaled) / np.maximum(seg.counts, 1)
        return top * np.sqrt(mean_sq)


def _unit(v):
    """Unit vectors along the last axis for any magnitude (0 and NaN give 0); norms
    outside ``[1e-100, 1e100]`` go through :func:`~skdpp.privacy.unit_rows`."""
    flat = v.reshape(-1, v.shape[-1])
    with np.errstate(**_QUIET):
        norms = np.sqrt(np.einsum("ij,ij->i", flat, flat))
    safe = (norms >= 1e-100) & (norms <= 1e100)
    out = flat / np.where(safe, norms, 1.0)[:, None]
    if not safe.all():
        out[~safe] = unit_rows(flat[~safe])[0]
    return out.reshape(v.shape)


def candidate_user_losses(seg, yZ, candidates, directions, threshold):
    """Per-user inner minimum of the margin loss, shape ``(n_candidates, n_users)``::

        t_{c,i} = min_{u in D_i} mean_{(z, y) in (S_i^0)_M} 1[y <U~_c^T z, u> <= rho / Gamma]

    (``yZ = y M x``, ``threshold = rho / Gamma``): an upper bound of ``min_{||v|| <=
    Gamma} L^_rho(U~_c, v; (S_i^0)_M)`` (Alg. 3, score ``f``; attained at ``||v|| =
    Gamma``). ``D_i``: the public ``directions`` and the user's own ``U~_c^T sum_j
    y_j z_j``. Each ``t_{c,i}`` is in ``[0, 1]`` (enforced), user ``i``'s rows only.
    Computed once per distinct row (:class:`_GridCounter`), row by row
    (:class:`_RowGridCounter`) or by arcs (:class:`_CircleCounter`): the same float
    operations, bit-identical results.
    """
    yZ = np.ascontiguousarray(yZ, dtype=np.float64)
    n_rows, jl_dim = yZ.shape
    n_cand, _, k = candidates.shape
    n_dir = directions.shape[0]
    out = np.zeros((n_cand, seg.n_users))
    if n_rows == 0:
        return out
    if k == 2 and np.array_equal(directions, circle_grid(n_dir)):
        grid = _CircleCounter(seg, yZ, n_dir, n_cand, k)
    else:
        first, key = _distinct_rows(yZ)
        if first.shape[0] > _DISTINCT_FRACTION * n_rows:  # few equal rows: row by row
            grid = _RowGridCounter(seg, yZ, n_dir, n_cand, k)
        else:
            grid = _GridCounter(seg, yZ, n_dir, n_cand, k, first, key)
    denom = np.maximum(seg.counts, 1)[:, None]
    dirs_t = np.ascontiguousarray(directions.T)
    # numpy sends a single-row product to another BLAS routine: pad it to two rows
    pad = grid.n_keys == 1 and n_rows > 1
    multi = n_rows * n_cand > 1
    outer, inner = grid.outer, grid.inner
    with np.errstate(**_QUIET):
        sums = seg.segment_sum_wide(yZ)                      # (n_users, k'): sum_j y_j z_j
        for lo in range(0, n_cand, outer):  # candidate chunks (memory), not users
            cand = candidates[lo:lo + outer]
            b = cand.shape[0]
            flat = cand.transpose(1, 0, 2).reshape(jl_dim, b * k)
            left = np.repeat(grid.left, 2, axis=0) if pad else grid.left
            yF = (left @ flat)[:grid.n_keys].reshape(grid.n_keys, b, k)  # y U~_c^T z
            own = _unit((sums @ flat).reshape(seg.n_users, b, k))  # U~_c^T sum y_j z_j
            # 1[y <U~^T z, u> <= rho / Gamma] for the own direction, then the grid's
            best = grid.own_counts(yF, own, threshold)       # (n_users, b), float32
            for j in range(0, b, inner):
                grid.min_loss_counts(yF[:, j:j + inner], dirs_t, threshold,
                                     best[:, j:j + inner], multi)
            out[lo:lo + b] = (best / denom).T
    # guard: every term in [0, 1] whatever the rounding (sensitivity 1/n rests on it)
    return np.clip(out, 0.0, 1.0, out=out)


def _dot_einsum(F, U):
    """``<F, U>`` along the last axis (the reference arithmetic)."""
    return np.einsum("nbk,nbk->nb", F, U)


def _dot3(F, U):
    """``<F, U>`` for ``k = 3`` (in place in ``F``) in einsum's order ``(p0 + p2) + p1``
    (numpy 2.x); einsum costs a MovieLens-sized fit 1.24x CPU (``bench_jl_margin.py``)."""
    F *= U
    s = F[..., 0] + F[..., 2]
    s += F[..., 1]
    return s


def _dot(k):
    return _dot3 if k == 3 else _dot_einsum


_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def _row_hashes(words):
    """A 64-bit multiplicative hash of every row of a 2-D uint64 array."""
    h = np.zeros(words.shape[0], dtype=np.uint64)
    for col in words.T:  # loop over columns (k' of them), not rows
        h ^= col
        h *= _HASH_MULTIPLIER
        h ^= h >> np.uint64(29)
    return h


def _distinct_rows(A):
    """``(first, key)`` of the bitwise-distinct rows: ``A[first][key]`` is ``A`` bit for
    bit (hashed; a collision, checked, falls back on ``np.unique`` of the bytes)."""
    words = np.ascontiguousarray(A).view(np.uint64).reshape(A.shape[0], -1)
    _, first, key = np.unique(_row_hashes(words), return_index=True, return_inverse=True)
    if not np.array_equal(words[first][key], words):
        _, first, key = np.unique(words, axis=0, return_index=True, return_inverse=True)
    return first, key.reshape(-1)


_SIGN_BITS = np.uint64(1 << 63)


def _negation_order(words):
    """``(order, n_pairs)`` of distinct rows (bits ``words``) such that
    ``rows[order][-n_pairs:] == -rows[order][:n_pairs]`` bit for bit (an item
    rated both ways); a hash collision only loses a pair."""
    n = words.shape[0]
    h = _row_hashes(words)
    by_hash = np.argsort(h, kind="stable")
    hn = _row_hashes(words ^ _SIGN_BITS)
    pos = np.minimum(np.searchsorted(h[by_hash], hn), max(n - 1, 0))
    partner = by_hash[pos] if n else pos
    ok = (h[partner] == hn) & (words[partner] == (words ^ _SIGN_BITS)).all(axis=1)
    index = np.arange(n)
    ok &= ok[partner] & (partner[partner] == index)      # mutual pairs only
    first = np.flatnonzero(ok & (index < partner))
    second = partner[first]
    alone = np.flatnonzero(~ok)
    return np.concatenate([first, alone, second]), int(first.shape[0])


class _RowCounter:
    """Row-by-row counts: the rows themselves are projected (``left``, ``n_keys``)."""

    def __init__(self, seg, yZ, n_dir, n_cand, k):
        self.seg, self.n_dir = seg, n_dir
        self.left, self.n_keys = yZ, yZ.shape[0]
        per_cand = yZ.shape[0] * k * 8 * 4 + seg.n_users * k * 8 * 2
        self.outer = self.inner = int(max(1, _CHUNK_BYTES // per_cand))

    def own_counts(self, yF, own, threshold):
        """Per-user counts (float32, exact) of ``1[<yF_j, own_i> <= t]``."""
        loss_own = _dot(yF.shape[-1])(own[self.seg.row_user], yF) <= threshold
        return self.seg.segment_sum_wide(loss_own, dtype=np.float32)


class _CircleCounter(_RowCounter):
    """The :func:`circle_grid` (``k = 2``): grid minima by arcs."""

    def __init__(self, seg, yZ, n_dir, n_cand, k):
        super().__init__(seg, yZ, n_dir, n_cand, k)
        per_cand = yZ.shape[0] * 220 + seg.n_users * (n_dir + 1) * 24
        self.inner = int(max(1, _CHUNK_BYTES // per_cand))

    def min_loss_counts(self, yF, dirs_t, threshold, best, multi):
        """Lower ``best`` to ``min_d sum_{j in S_i} 1[<yF_j, u_d> <= t]`` over the
        :func:`circle_grid` in ``O(rows + users * D)`` per candidate: row ``j`` has zero
        loss exactly on the open arc of half-width ``arccos(t / |yF_j|)`` around its
        angle, accumulated per user in a circular difference array and swept.
        Non-finite rows lose at every direction."""
        seg, n_dir, n_cand = self.seg, self.n_dir, yF.shape[1]
        n_users = seg.n_users
        scale = n_dir / (2.0 * np.pi)  # angles in units of the grid step
        with np.errstate(**_QUIET):
            a, b = yF[..., 0], yF[..., 1]
            r2 = a * a + b * b
            radius = np.sqrt(r2)                                # 7x faster than hypot
            odd = ~((r2 > 1e-300) & (r2 < 1e300))               # squares under/overflow
            if odd.any():
                radius[odd] = np.hypot(a[odd], b[odd])
            won = (radius > threshold) & np.isfinite(radius)
            angle = np.arctan2(yF[..., 1], yF[..., 0]) * scale  # in [-D/2, D/2]
            half = np.arccos(threshold / np.where(won, radius, np.inf)) * scale
            won &= np.isfinite(angle)
            # integer bins strictly inside (angle - half, angle + half)
            lo = np.where(won, np.floor(angle - half), 0.0).astype(np.int64) + 1
            hi = np.where(won, np.ceil(angle + half), 0.0).astype(np.int64)  # exclusive
        length = np.where(won, np.clip(hi - lo, 0, n_dir), 0)
        start = np.mod(lo, n_dir)
        end = start + length                                     # may exceed n_dir
        # difference array laid out direction-major: index d * (users * cands) + (i, c)
        nb = n_users * n_cand
        base = seg.row_user[:, None] * n_cand + np.arange(n_cand)[None, :]
        arc, wrap = length > 0, end > n_dir
        plus = np.concatenate([(start * nb + base)[arc], base[wrap]])
        minus = np.concatenate([(np.minimum(end, n_dir) * nb + base)[arc],
                                ((end - n_dir) * nb + base)[wrap]])
        size = (n_dir + 1) * nb
        diff = (np.bincount(plus, minlength=size) - np.bincount(minus, minlength=size)
                ).reshape(n_dir + 1, nb)
        running = diff[0].copy()
        most = running.copy()
        for d in range(1, n_dir):  # sweep over the grid directions, not users or rows
            running += diff[d]
            np.maximum(most, running, out=most)
        np.minimum(best, seg.counts[:, None] - most.reshape(n_users, n_cand), out=best)


class _GridCounter:
    """Lowers ``best[i, c]`` to ``min_d sum_{j in S_i} 1[<yF_{j,c}, u_d> <= t]``
    (exact), once per distinct row (``first``, ``key``: :func:`_distinct_rows`): 0/1
    losses stored as bytes, counted by one sparse product over *pieces* (at most
    :attr:`CAP` rows of one user) on the bytes viewed as 64-bit words (no carry below
    256); longer users' pieces are added in ``int64``."""

    CAP = 255

    @staticmethod
    def pieces(seg):
        """``(n_pieces, piece_user, piece_start, split_users)``: runs of at most
        :attr:`CAP` rows; users with more (``split_users``) add their pieces in int64."""
        n_pieces = -(-seg.counts // _GridCounter.CAP)
        piece_user = np.repeat(np.arange(seg.n_users), n_pieces)
        first = np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
        piece_start = seg.offsets[:-1][piece_user] \
            + (np.arange(piece_user.shape[0]) - first) * _GridCounter.CAP
        return n_pieces, piece_user, piece_start, np.flatnonzero(n_pieces > 1)

    def __init__(self, seg, yZ, n_dir, n_cand, k, first, key):
        self.seg, self.n_dir, self.n_users = seg, n_dir, seg.n_users
        # distinct rows mirror + i (i < n_pairs) are the negations of rows i
        order, self.n_pairs = _negation_order(
            yZ[first].view(np.uint64).reshape(first.shape[0], -1))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        first, self.key = first[order], rank[key]
        self.left = yZ[first]                                # (n_distinct, k')
        self.n_keys = n_keys = first.shape[0]
        n_rows = yZ.shape[0]
        # candidate chunks: projections in memory (outer), grid losses in cache (inner)
        per_cand = n_keys * k * 8 * 2 + seg.n_users * k * 8 * 3 + n_rows * 6
        self.outer = int(max(1, min(n_cand, _CHUNK_BYTES // per_cand)))
        self.inner = int(max(1, min(self.outer, _GRID_TABLE_BYTES // (n_keys * n_dir))))
        n_pieces, self.piece_user, self.piece_start, self.split_users = self.pieces(seg)
        self.owner = sp.csr_matrix(
            (np.ones(n_rows, dtype=np.uint64), self.key, np.r_[self.piece_start, n_rows]),
            shape=(self.piece_user.shape[0], n_keys))
        self.owner.sum_duplicates()
        self._buffers = {}
        self.whole = n_pieces[self.piece_user] == 1
        split = ~self.whole
        self.split_pieces = np.flatnonzero(split)
        self.split_runs = np.flatnonzero(np.r_[True, np.diff(self.piece_user[split]) != 0])

    def own_counts(self, yF, own, threshold):
        """:meth:`_RowCounter.own_counts` in cache-sized steps, counted by pieces."""
        n_rows, b, k = self.key.shape[0], own.shape[1], own.shape[2]
        lost = np.zeros((n_rows, -(-b // 8) * 8), dtype=bool)  # whole words
        step = max(1, _OWN_STEP_ELEMENTS // (b * k))
        dot, row_user = _dot(k), self.seg.row_user
        for r0 in range(0, n_rows, step):  # cache-sized steps of rows
            r1 = min(n_rows, r0 + step)
            np.less_equal(dot(yF[self.key[r0:r1]], own[row_user[r0:r1]]), threshold,
                          out=lost[r0:r1, :b])
        out = np.zeros((self.n_users, lost.shape[1]), dtype=np.float32)
        if self.piece_start.shape[0]:
            counts = np.add.reduceat(lost.view(np.uint64), self.piece_start, axis=0)
            counts = counts.view(np.uint8)
            out[self.piece_user[self.whole]] = counts[self.whole]
            if self.split_users.shape[0]:
                out[self.split_users] = np.add.reduceat(
                    counts[self.split_pieces].astype(np.int64), self.split_runs, axis=0)
        return out[:, :b]

    def min_loss_counts(self, yF, dirs_t, threshold, best, multi):
        """Lower ``best`` (n_users, b) to the grid minimum of every user's loss counts
        (``yF``: the distinct rows' projections; ``multi``: pad single-row products)."""
        n_keys, b, k = yF.shape
        n_dir = self.n_dir
        n_pieces = self.piece_user.shape[0]
        if n_pieces == 0:
            return
        width = -(-(b * n_dir) // 8) * 8                    # bytes per row, whole words
        step = max(1, _GRID_STEP_ELEMENTS // (b * n_dir))
        if b not in self._buffers:  # allocated once per chunk width (no page faults)
            self._buffers[b] = (np.zeros((n_keys, width), dtype=bool),  # padding stays 0
                                np.empty((max(min(step, n_keys) * b, 2), n_dir)))
        losses, dots = self._buffers[b]
        pairs = self.n_pairs
        mirror = n_keys - pairs     # distinct row mirror + i is the negation of row i
        for r0 in range(0, mirror, step):  # cache-sized steps of distinct rows
            r1 = min(mirror, r0 + step)
            m = r1 - r0
            g = _grid_dots(yF[r0:r1].reshape(m * b, k), dirs_t, dots, multi)
            g = g.reshape(m, b * n_dir)
            np.less_equal(g, threshold, out=losses[r0:r1, :b * n_dir])
            if r0 < pairs:  # the negated rows' products are exactly -g: -g <= t iff g >= -t
                e = min(r1, pairs)
                np.greater_equal(g[:e - r0], -threshold,
                                 out=losses[mirror + r0:mirror + e, :b * n_dir])
        # bytes of 64-bit words as counters: at most CAP rows per piece, no carry
        counts = (self.owner @ losses.view(np.uint64)).view(np.uint8)
        counts = counts[:, :b * n_dir].reshape(n_pieces, b, n_dir)
        users = self.piece_user[self.whole]
        best[users] = np.minimum(best[users], counts.min(axis=-1)[self.whole])
        if self.split_users.shape[0]:
            totals = np.add.reduceat(counts[self.split_pieces].astype(np.int64),
                                     self.split_runs, axis=0)
            best[self.split_users] = np.minimum(best[self.split_users], totals.min(axis=-1))


class _RowGridCounter(_RowCounter):
    """Row-by-row :class:`_GridCounter` (blocks with few equal rows): the same
    counts, in cache-sized steps of whole pieces."""

    def __init__(self, seg, yZ, n_dir, n_cand, k):
        super().__init__(seg, yZ, n_dir, n_cand, k)
        self.n_rows = seg.n_rows
        _, self.piece_user, self.piece_start, self.split_users = _GridCounter.pieces(seg)
        slot = np.full(seg.n_users, -1)
        slot[self.split_users] = np.arange(self.split_users.shape[0])
        self.piece_slot = slot[self.piece_user]
        self._steps = {}

    def steps(self, b):
        """Steps ``(row0, row1, piece0, piece1, offsets, split)`` for chunks of ``b``
        candidates (cached); ``split`` is None or ``(part, runs, slots)`` of the
        step's pieces of users with more than :attr:`CAP` rows."""
        if b not in self._steps:
            rows = max(1, _GRID_STEP_ELEMENTS // (b * self.n_dir))
            step = self.piece_start // rows
            cuts = np.r_[0, np.flatnonzero(np.diff(step)) + 1, self.piece_start.shape[0]]
            bounds = np.r_[self.piece_start, self.n_rows]
            out = []
            for p0, p1 in zip(cuts[:-1], cuts[1:]):
                if p1 <= p0:
                    continue
                r0 = int(bounds[p0])
                slots = self.piece_slot[p0:p1]
                part = slots >= 0
                split = None
                if part.any():
                    sl = slots[part]
                    runs = np.r_[0, np.flatnonzero(sl[1:] != sl[:-1]) + 1]
                    split = (part, runs, sl[runs])
                out.append((r0, int(bounds[p1]), int(p0), int(p1),
                            self.piece_start[p0:p1] - r0, split))
            self._steps[b] = out
        return self._steps[b]

    def min_loss_counts(self, yF, dirs_t, threshold, best, multi):
        """Lower ``best`` (n_users, b) to the grid minimum of every user's loss counts
        (``multi``: the unchunked product has several rows; pad single-row products)."""
        _, b, k = yF.shape
        n_dir = self.n_dir
        steps = self.steps(b)
        if not steps:
            return
        most = max(r1 - r0 for r0, r1, _, _, _, _ in steps)
        width = -(-(b * n_dir) // 8) * 8                    # bytes per row, whole words
        dots = np.empty((max(most * b, 2), n_dir))
        losses = np.zeros((most, width), dtype=bool)        # padding bytes stay 0
        # per piece, the minimum over the directions (longer users: ``totals``)
        piece_min = np.empty((self.piece_user.shape[0], b), dtype=np.uint8)
        split = self.split_users.shape[0] > 0
        if split:
            totals = np.zeros((self.split_users.shape[0], b, n_dir), dtype=np.int64)
        for r0, r1, p0, p1, offsets, parts in steps:  # cache-sized steps of whole pieces
            m = r1 - r0
            g = _grid_dots(yF[r0:r1].reshape(m * b, k), dirs_t, dots, multi)
            lost = losses[:m]
            np.less_equal(g.reshape(m, b * n_dir), threshold, out=lost[:, :b * n_dir])
            # bytes of 64-bit words as counters: at most CAP rows per piece, no carry
            counts = np.add.reduceat(lost.view(np.uint64), offsets, axis=0)
            counts = counts.view(np.uint8)[:, :b * n_dir].reshape(p1 - p0, b, n_dir)
            if parts is not None:       # exact int64 sums of each run of a user's pieces
                part, runs, slots = parts
                totals[slots] += np.add.reduceat(counts[part].astype(np.int64), runs, axis=0)
            np.min(counts, axis=-1, out=piece_min[p0:p1])
        whole = self.piece_slot < 0
        users = self.piece_user[whole]
        best[users] = np.minimum(best[users], piece_min[whole])
        if split:
            best[self.split_users] = np.minimum(best[self.split_users], totals.min(axis=-1))


def direction_user_losses(seg, yF, directions, threshold):
    """The cold-start score's terms ``(1/|S_i|) sum_j 1[y_j <F_j, u> <= t]``, shape
    ``(n_users, n_directions)``: in ``[0, 1]``, user ``i``'s rows only (0 without rows)."""
    out = np.zeros((seg.n_users, directions.shape[0]))
    for u0, rows, sub in _user_chunks(seg, directions.shape[0]):
        with np.errstate(**_QUIET):
            loss = yF[rows] @ directions.T <= threshold
        counts = sub.segment_sum_wide(loss)
        out[u0:u0 + sub.n_users] = counts / np.maximum(sub.counts, 1)[:, None]
    return np.clip(out, 0.0, 1.0, out=out)


def subspace_contributions(seg, yZ):
    """Unit directions ``u_i`` of every user's ``sum_j y_j M x_j``: each ``u_i u_i^T`` has
    Frobenius norm 1 or 0 for any magnitude (zero or non-finite sums give 0)."""
    with np.errstate(**_QUIET):
        return unit_rows(seg.segment_sum_wide(yZ))[0]


def logistic_heads(seg, F, y, *, prior_bias, ridge, fit_intercept, loo=False):
    """Personal heads ``(heads, intercepts, ok)``: logistic loss shrunk toward the cold start.

    Replaces Alg. 3, line 6's 0-1 argmin, which overfits real labels (local only)::

        min_{v, b}  sum_j log(1 + exp(-y_j f_j)) + (lambda / 8) sum_j' (f_j' - b_0)^2 / m_i
                    f_j = <F_j, v> + b     (b = 0 without intercept)

    (``lambda = ridge`` pseudo-rows at the cold-start decision ``b_0 = prior_bias``,
    quadratically approximated), by damped Newton steps in per-user standardised
    coordinates. ``ok``: False without rows or finite values (cold-start head).
    ``loo=True`` also returns each user's approximate leave-one-out log-loss
    (:func:`_loo_log_loss`).
    """
    n_users, k = seg.n_users, F.shape[1]
    m = seg.counts
    inv = 1.0 / np.maximum(m, 1)
    with np.errstate(**_QUIET):
        F = np.asarray(F, dtype=np.float64)
        if fit_intercept:
            mean = user_means(seg, F)
            Ft = F - seg.expand(mean)
        else:
            mean, Ft = np.zeros((n_users, k)), F
        scale = user_rms_norms(seg, Ft)
        ok = (m > 0) & np.isfinite(scale) & np.isfinite(mean).all(axis=1)
        scale = np.where(ok & (scale > 0), scale, 1.0)
        Fh = Ft / seg.expand(scale)[:, None]
    Fh[~(seg.expand(ok) & np.isfinite(Fh).all(axis=1))] = 0.0
    q = k + 1 if fit_intercept else k
    A = np.ones((seg.n_rows, q))
    A[:, :k] = Fh
    outer = (A[:, :, None] * A[:, None, :]).reshape(seg.n_rows, q * q)
    total = seg.segment_sum_wide
    C = (total(outer) * inv[:, None]).reshape(n_users, q, q)
    R = (ridge / 4.0) * C + _NUMERICAL_RIDGE * np.eye(q)
    theta0 = np.zeros(q)
    if fit_intercept:
        theta0[k] = prior_bias
    theta = np.tile(theta0, (n_users, 1))
    y = np.asarray(y, dtype=np.float64)
    for _ in range(_NEWTON_STEPS):  # Newton iterations (vectorised over users)
        p = expit(-y * np.einsum("rq,rq->r", A, seg.expand(theta)))  # sigma(-y f)
        grad = total(A, weights=-y * p) + np.einsum("uij,uj->ui", R, theta - theta0)
        hess = total(outer, weights=p * (1.0 - p)).reshape(n_users, q, q)
        step = batched_solve(hess + R, grad)
        size = np.sqrt(np.maximum(np.einsum("ui,uij,uj->u", step, C, step), 0.0))
        step *= np.minimum(1.0, _MAX_STEP / np.maximum(size, 1e-300))[:, None]
        theta -= step
    with np.errstate(**_QUIET):
        # Back to the user's own coordinates: an overflow is caught by ``ok`` below
        heads = theta[:, :k] / scale[:, None]
        intercepts = theta[:, k] - np.einsum("uk,uk->u", mean, heads) if fit_intercept \
            else np.zeros(n_users)
    ok &= np.isfinite(heads).all(axis=1) & np.isfinite(intercepts)
    if not loo:
        return heads, intercepts, ok
    return heads, intercepts, ok, _loo_log_loss(seg, A, outer, y, theta, R)


def _loo_log_loss(seg, A, outer, y, theta, R):
    """Each user's approximate leave-one-out log-loss of the penalised fit ``theta``.

    One Newton step from the fit without row ``j`` (Sherman-Morrison):
    ``f_-j = f_j + h_j / (1 - w_j h_j) * l'_j`` with ``l'_j = -y_j sigma(-y_j f_j)``,
    ``w_j = sigma(f_j) sigma(-f_j)`` and ``h_j = a_j^T H^-1 a_j``, ``H`` the penalised
    Hessian at ``theta`` (approximate leave-one-out: Rahnama Rad and Maleki, 2020).
    Invariant to the per-user standardisation of the design. Local."""
    total = seg.segment_sum_wide
    q = A.shape[1]
    with np.errstate(**_QUIET):
        f = np.einsum("rq,rq->r", A, seg.expand(theta))
        p = expit(-y * f)
        w = p * (1.0 - p)
        hess = total(outer, weights=w).reshape(-1, q, q) + R
        inv = batched_solve(hess, np.broadcast_to(np.eye(q), hess.shape))
        h = np.einsum("rq,rqs,rs->r", A, seg.expand(inv), A)
        f_out = f + h / np.maximum(1.0 - w * h, 1e-12) * (-y * p)
        return seg.segment_sum(np.logaddexp(0.0, -y * f_out))


def intercept_heads(seg, F, y, *, prior_bias, ridge, loo=False):
    """:func:`logistic_heads` with an intercept only where it lowers the user's loss by
    more than ``_INTERCEPT_GAIN`` nats (else through the origin, as in Alg. 3: a free
    intercept costs the paper's model 0.02 accuracy at 10 rows per user). Local.
    ``loo=True``: also the chosen fit's approximate leave-one-out log-loss."""
    (v1, b1, ok1, *loo1), (v0, b0, ok0, *loo0) = (
        logistic_heads(seg, F, y, prior_bias=prior_bias, ridge=ridge,
                       fit_intercept=True, loo=loo),
        logistic_heads(seg, F, y, prior_bias=0.0, ridge=ridge, fit_intercept=False,
                       loo=loo))
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(**_QUIET):
        F = np.asarray(F, dtype=np.float64)
        f1 = np.einsum("rk,rk->r", F, seg.expand(v1)) + seg.expand(b1)
        f0 = np.einsum("rk,rk->r", F, seg.expand(v0))
        gain = seg.segment_sum(np.logaddexp(0.0, -y * f0)) \
            - seg.segment_sum(np.logaddexp(0.0, -y * f1))
    # NaN gain (non-finite rows) keeps the fit without intercept when it is ok.
    keep = ok1 & (~ok0 | (gain > _INTERCEPT_GAIN))
    return (np.where(keep[:, None], v1, v0), np.where(keep, b1, b0),
            np.where(keep, ok1, ok0)) + tuple(np.where(keep, a, c)
                                               for a, c in zip(loo1, loo0))


def intercept_only_heads(seg, y, *, prior_bias, ridge):
    """``(intercepts, ok, loo)``: :func:`logistic_heads` without features (``loo``),
    from each user's label counts: the same Newton steps, trust region and penalty
    (``ridge / 4`` pseudo-rows at ``prior_bias``) in O(n_users) per step. Local."""
    y = np.asarray(y, dtype=np.float64)
    m = seg.counts.astype(np.float64)
    pos = seg.segment_sum((y > 0).astype(np.float64))
    neg = m - pos
    R = (ridge / 4.0) * (m > 0) + _NUMERICAL_RIDGE
    b = np.full(m.shape, float(prior_bias))
    with np.errstate(**_QUIET):
        for _ in range(_NEWTON_STEPS):
            up, down = expit(-b), expit(b)  # sigma(-f) of a positive, a negative row
            grad = neg * down - pos * up + R * (b - prior_bias)
            step = grad / (m * up * down + R)
            b -= np.clip(step, -_MAX_STEP, _MAX_STEP)
        up, down = expit(-b), expit(b)
        w = up * down
        h = 1.0 / (m * w + R)
        lever = h / np.maximum(1.0 - w * h, 1e-12)
        loo = pos * np.logaddexp(0.0, -(b - lever * up)) \
            + neg * np.logaddexp(0.0, b + lever * down)
    ok = (m > 0) & np.isfinite(b)
    return b, ok, loo


def personal_heads(seg, F, y, *, prior_bias, ridge):
    """:func:`intercept_heads`, keeping a user's slope only where it predicts the user's
    own held-out rows better: its approximate leave-one-out log-loss
    (:func:`_loo_log_loss`) is below that of an intercept-only head shrunk the same
    way; else that head (slope 0). Per user, on its own rows only (local).

    With a mostly-noise released embedding the projections are noise, and ~10 rows
    fit a slope to it: measured 0.03-0.085 more error than each user's majority label
    (``benchmarks/bench_heldout.py``'s data, 150-400 users, epsilon 1-3); the test
    degrades such a user to its own (shrunk) label frequency.
    """
    v, b, ok, loo = intercept_heads(seg, F, y, prior_bias=prior_bias, ridge=ridge,
                                    loo=True)
    b0, ok0, loo0 = intercept_only_heads(seg, y, prior_bias=prior_bias, ridge=ridge)
    drop = ok0 & ~(loo < loo0)  # NaN: the intercept-only head
    return (np.where(drop[:, None], 0.0, v), np.where(drop, b0, b),
            np.where(drop, ok0, ok))


def _grid_dots(left, dirs_t, dots, multi):
    """``left @ dirs_t`` into ``dots``; one row is padded to two when ``multi`` (the
    whole product's BLAS routine and rounding)."""
    if left.shape[0] == 1 and multi:
        return np.matmul(np.repeat(left, 2, axis=0), dirs_t, out=dots[:2])[:1]
    return np.matmul(left, dirs_t, out=dots[:left.shape[0]])


def _user_chunks(seg, n_cols):
    """``(first user, row slice, sub-block)`` of about ``_CHUNK_BYTES / (8 n_cols)`` rows."""
    max_rows = max(1, _CHUNK_BYTES // (8 * max(n_cols, 1)))
    if seg.n_rows <= max_rows:
        yield 0, slice(0, seg.n_rows), seg
        return
    for sub in seg.split(max_rows):
        u0 = sub.first_user - seg.first_user
        yield u0, slice(int(seg.offsets[u0]), int(seg.offsets[u0 + sub.n_users])), sub


@dataclass
class BlockState:
    """Per-block state: ``score`` / ``head`` rows (``S^0`` / ``S^1``, or all rows),
    ``head_codes`` (``-1`` outside the label set), ``Y`` (score labels in ``{-1, +1}``
    per problem), ``project``; ``Xc`` and ``Z`` are recomputed (no copy of ``X``)."""

    score: object
    head: object
    head_codes: np.ndarray
    Y: np.ndarray
    project: object = None

    @property
    def Xc(self):
        """The score rows (:func:`finite_rows`), uncentred (centring ~10 rows per user
        costs 0.01-0.12 accuracy on the paper's setting)."""
        return finite_rows(self.score.take(self.score.X))

    @property
    def Z(self):
        """``M clip(x, r)`` of the score rows (Alg. 3, line 2)."""
        bc = self.project
        Xc = self.Xc if bc.radius is None else clip_by_norm(self.Xc, bc.radius)
        with np.errstate(**_QUIET):
            return Xc @ bc.jl_matrix.T


@dataclass(frozen=True)
class Prepare:
    """Broadcast of :func:`prepare_block` (public)."""

    classes: np.ndarray
    key: np.ndarray
    holdout: bool


def prepare_block(block, state, bc):
    """Label codes and the ``S^0 / S^1`` split (``holdout``, Alg. 3 as written: halves by
    keyed per-row uniforms, a function of the key and the user's rows; a one-row
    user has no ``S^1``); returns ``(None, BlockState)``."""
    codes = label_codes(block.take(block.y), bc.classes)
    if bc.holdout:
        first = block.split_users_rows(0.5, block.row_uniforms(bc.key, "split"))
        score, head = block.select(first), block.select(~first)
        score_codes, head_codes = codes[first], codes[~first]
    else:
        score = head = block
        score_codes = head_codes = codes
    Y = binary_problems(score_codes, bc.classes.shape[0])
    return None, BlockState(score=score, head=head, head_codes=head_codes, Y=Y)


def clip_statistic_block(block, state, grid):
    """Partial cumulative histogram of the users' RMS row norms (``"clip"``)."""
    return cumulative_counts(user_rms_norms(state.score, state.Xc), grid), state


@dataclass(frozen=True)
class Project:
    """Broadcast of :func:`project_block`: the public ``M`` and the clip radius ``r``."""

    jl_matrix: np.ndarray
    radius: object   # float, or None (no clipping: epsilon=inf only)


def project_block(block, state, bc):
    """Sets the projection ``Z = M clip(x, r)`` of the score rows (Alg. 3, line 2)."""
    state.project = bc
    return None, state


def subspace_block(block, state, bc):
    """Partial ``sum_i u_{i,p} u_{i,p}^T`` for every problem ``p``: shape ``(P, k', k')``."""
    n_problems = state.Y.shape[1]
    Z = state.Z
    out = np.empty((n_problems, Z.shape[1], Z.shape[1]))
    for p in range(n_problems):  # loop over binary problems
        u = subspace_contributions(state.score, state.Y[:, p, None] * Z)
        out[p] = u.T @ u
    return out, state


def label_fractions_block(block, state, bc):
    """Partial ``sum_i f_i``, ``f_{i,p}`` the fraction of user ``i``'s rows positive in ``p``
    (the cold-start intercepts' statistic; ``f_i`` in ``[0, 1]^P``, ``sum_p f_{i,p} <= 1``)."""
    seg = state.score
    positive = (state.Y > 0).astype(np.float64)
    return (seg.segment_sum(positive) / np.maximum(seg.counts, 1)[:, None]).sum(axis=0), state


@dataclass(frozen=True)
class Scores:
    """Broadcast of the score block functions (all public)."""

    problem: int
    candidates: np.ndarray   # (n_candidates, k', k); or (k', k) utilde for the cold start
    directions: np.ndarray
    threshold: float


def candidate_scores_block(block, state, bc):
    """Partial ``sum_i t_{c,i}`` over the block's users, for every candidate (Alg. 3, line 4)."""
    yZ = state.Y[:, bc.problem, None] * state.Z
    losses = candidate_user_losses(state.score, yZ, bc.candidates, bc.directions,
                                   bc.threshold)
    return losses.sum(axis=1), state


def population_scores_block(block, state, bc):
    """Partial ``sum_i L^_rho(U~, u; (S_i^0)_M)`` for every public direction (cold start)."""
    with np.errstate(**_QUIET):
        yF = (state.Y[:, bc.problem, None] * state.Z) @ bc.candidates
    return direction_user_losses(state.score, yF, bc.directions, bc.threshold).sum(axis=0), \
        state


@dataclass(frozen=True)
class Heads:
    """Broadcast of :func:`heads_block` (released values and public constants)."""

    embeddings: np.ndarray         # (n_problems, d, k)
    classes: np.ndarray
    cold_start_heads: np.ndarray   # (n_problems, k)
    cold_start_intercepts: np.ndarray  # (n_problems,): also the heads' prior bias
    ridge: float
    fit_intercept: bool


def heads_block(block, state, bc):
    """Every user's heads ``(n_users, P, k)`` and intercepts (Alg. 3, line 6), on ``S^1``
    (all rows in ``personalize``); users without rows get the cold-start head."""
    if state is None:
        seg = block
        codes = label_codes(block.take(block.y), bc.classes)
    else:
        seg, codes = state.head, state.head_codes
    X = seg.take(seg.X)
    Y = binary_problems(codes, bc.classes.shape[0])
    n_problems, _, k = bc.embeddings.shape
    heads = np.empty((seg.n_users, n_problems, k))
    intercepts = np.empty((seg.n_users, n_problems))
    for p in range(n_problems):  # loop over binary problems
        with np.errstate(**_QUIET):
            F = X @ bc.embeddings[p]
        if bc.fit_intercept:
            v, b, ok = personal_heads(seg, F, Y[:, p], ridge=bc.ridge,
                                      prior_bias=float(bc.cold_start_intercepts[p]))
        else:
            v, b, ok = logistic_heads(seg, F, Y[:, p], prior_bias=0.0, ridge=bc.ridge,
                                      fit_intercept=False)
        v[~ok] = bc.cold_start_heads[p]
        b[~ok] = bc.cold_start_intercepts[p]
        heads[:, p], intercepts[:, p] = v, b
    return heads, intercepts
