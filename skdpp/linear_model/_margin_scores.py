"""Per-user margin losses of Algorithm 3 (Snedeker, Zhou & Bassily 2025), as block functions.

Every quantity here is computed from one block of whole users
(:class:`~skdpp.utils._grouped.UserBlock`, rows in canonical order) and
public broadcasts; the driver (:mod:`skdpp.linear_model._jl_algorithm`) sums
the blocks' partials and releases them. Two kinds of functions:

* **array functions** on the rows of a block (``seg``) and row-aligned
  arrays: :func:`candidate_user_losses` (the inner minimum of the score
  ``f``, one term per user and candidate), :func:`circle_grid_min_loss_counts`
  (its fast path for ``k = 2``), :func:`direction_user_losses` (cold start),
  :func:`subspace_contributions` (unit directions) and :func:`head_argmin`
  (local heads, Alg. 3, line 6);
* **block functions** ``fn(block, state, broadcast)`` run by the executor:
  :func:`prepare_block` (the ``S^0 / S^1`` split and the projection ``M x``,
  kept in the block state), :func:`subspace_block`,
  :func:`candidate_scores_block`, :func:`population_scores_block` (partial
  sums) and :func:`heads_block` (per-user heads, collected).

Every per-user term of a score lies in ``[0, 1]`` and depends only on that
user's rows, whatever the (finite) values: this is what bounds the score
sensitivity by ``1 / n``. Data-dependent over/underflow never warns
(``np.errstate``) and never raises: non-finite intermediates only decide
which 0/1 losses a user's own rows get.

The temporary ``(candidates x rows x directions)`` tensors are chunked to
``_CHUNK_BYTES`` (candidates and, for the heads, users), read at call time.
"""

from dataclasses import dataclass

import numpy as np

from ..privacy import unit_rows
from ._jl_candidates import circle_grid

__all__ = [
    "BlockState",
    "candidate_scores_block",
    "candidate_user_losses",
    "circle_grid_min_loss_counts",
    "direction_user_losses",
    "head_argmin",
    "heads_block",
    "population_scores_block",
    "prepare_block",
    "subspace_block",
    "subspace_contributions",
]

# Memory budget (bytes) of the temporary (candidates x rows x directions)
# margin tensors; the candidate axis (and for the heads the users) is chunked.
_CHUNK_BYTES = 64 * 2**20

# Silence data-dependent floating-point warnings (a warning that appears for
# one user's values but not for another's would leak; DESIGN section 7).
_QUIET = dict(over="ignore", under="ignore", invalid="ignore", divide="ignore")


# --------------------------------------------------------------------------- #
# Array functions (rows of one block, sorted by user)
# --------------------------------------------------------------------------- #
def _unit(v):
    """Unit vectors along the last axis, for any magnitude (0 and NaN give 0).

    One pass ``v / ||v||`` where the norm lies in ``[1e-100, 1e100]``;
    the other vectors (tiny, huge, non-finite) go through
    :func:`~skdpp.privacy.unit_rows`.
    """
    flat = v.reshape(-1, v.shape[-1])
    with np.errstate(**_QUIET):
        norms = np.sqrt(np.einsum("ij,ij->i", flat, flat))
    safe = (norms >= 1e-100) & (norms <= 1e100)
    out = flat / np.where(safe, norms, 1.0)[:, None]
    if not safe.all():
        out[~safe] = unit_rows(flat[~safe])[0]
    return out.reshape(v.shape)


def candidate_user_losses(seg, yZ, candidates, directions, threshold):
    """Per-user inner minimum of the margin loss for every candidate (score ``f``).

    For every candidate ``U~_c`` and user ``i`` of ``seg``::

        t_{c,i} = min_{u in D_i} mean_{(z, y) in (S_i^0)_M} 1[y <U~_c^T z, u> <= rho / Gamma]

    an upper bound of ``min_{||v|| <= Gamma} L^_rho(U~_c, v; (S_i^0)_M)``
    (Alg. 3, score ``f``): the minimum over ``v`` is attained at ``||v|| =
    Gamma`` (scaling ``v`` up never increases the margin loss), so only
    directions matter; ``D_i`` is the public grid ``directions`` plus the
    user's own label-weighted mean direction ``U~_c^T sum_j y_j z_j`` (a
    function of user ``i``'s rows only). Every ``t_{c,i}`` lies in ``[0, 1]``
    (enforced) and depends on user ``i``'s rows only. Users without rows get 0.

    Parameters
    ----------
    seg : UserBlock
        The rows (grouped by user) the arrays are aligned with.
    yZ : ndarray of shape (n_rows, k')
        ``y M x`` of the rows (labels in ``{-1, +1}``).
    candidates : ndarray of shape (n_candidates, k', k)
    directions : ndarray of shape (n_directions, k)
        Public unit directions.
    threshold : float
        ``rho / Gamma``.

    Returns
    -------
    losses : ndarray of shape (n_candidates, n_users)
    """
    yZ = np.asarray(yZ, dtype=np.float64)
    n_rows, jl_dim = yZ.shape
    n_cand, _, k = candidates.shape
    n_dir = directions.shape[0]
    n_users = seg.n_users
    out = np.zeros((n_cand, n_users))
    if n_rows == 0:
        return out
    row_user = seg.row_user
    denom = np.maximum(seg.counts, 1)[:, None]
    dirs_t = np.ascontiguousarray(directions.T)
    circle = k == 2 and np.array_equal(directions, circle_grid(n_dir))
    chunk_bytes = _CHUNK_BYTES
    # memory per candidate: the projections (outer chunks) and the loss counts
    # of the grid directions (inner chunks)
    outer = int(max(1, chunk_bytes // (n_rows * k * 8 * 4 + n_users * k * 8 * 2)))
    per_grid = (n_rows * 220 + n_users * (n_dir + 1) * 24 if circle
                else n_rows * (n_dir * 17) + n_users * n_dir * 4)
    inner = int(max(1, chunk_bytes // per_grid))
    with np.errstate(**_QUIET):
        sums = seg.segment_sum_wide(yZ)                      # (n_users, k'): sum_j y_j z_j
        for lo in range(0, n_cand, outer):  # candidate chunks (memory), not users
            cand = candidates[lo:lo + outer]
            b = cand.shape[0]
            flat = cand.transpose(1, 0, 2).reshape(jl_dim, b * k)
            yF = (yZ @ flat).reshape(n_rows, b, k)             # y U~_c^T z, rows x cands
            own = _unit((sums @ flat).reshape(n_users, b, k))  # U~_c^T sum_j y_j z_j, unit
            # 1[y <U~^T z, u> <= rho / Gamma] for the own direction ...
            loss_own = np.einsum("nbk,nbk->nb", yF, own[row_user]) <= threshold
            best = seg.segment_sum_wide(loss_own, dtype=np.float32)  # (n_users, b) counts
            # ... and for the grid directions
            for j in range(0, b, inner):
                sub = yF[:, j:j + inner]
                bs = sub.shape[1]
                if circle:
                    grid_min = circle_grid_min_loss_counts(seg, sub, n_dir, threshold)
                else:
                    loss_grid = sub.reshape(n_rows * bs, k) @ dirs_t <= threshold
                    grid_min = seg.segment_sum_wide(
                        loss_grid.reshape(n_rows, bs * n_dir), dtype=np.float32
                    ).reshape(n_users, bs, n_dir).min(axis=-1)
                np.minimum(best[:, j:j + bs], grid_min, out=best[:, j:j + bs])
            out[lo:lo + b] = (best / denom).T
    # guard: every term in [0, 1] whatever the rounding (sensitivity 1/n rests on it)
    return np.clip(out, 0.0, 1.0, out=out)


def circle_grid_min_loss_counts(seg, yF, n_dir, threshold):
    """Per-user minimum over the circle grid of the margin-loss counts.

    ``min_d sum_{j in S_i} 1[<yF_j, u_d> <= t]`` over the ``n_dir`` equally
    spaced directions ``u_d = (cos 2 pi d / D, sin 2 pi d / D)``, in ``O(rows
    + users * D)`` per candidate instead of ``O(rows * D)``: row ``j`` has
    zero loss exactly at the directions within the open arc of half-width
    ``arccos(t / |yF_j|)`` around its angle (none if ``|yF_j| <= t``); the
    arcs are accumulated per user with a circular difference array, swept
    over the directions keeping the largest number of zero-loss rows. Rows
    with a non-finite value have a loss at every direction.

    Parameters
    ----------
    seg : UserBlock
    yF : ndarray of shape (n_rows, n_cand, 2)
        ``y U~^T z`` of every row and candidate.
    n_dir : int
    threshold : float

    Returns
    -------
    loss_counts : ndarray of shape (n_users, n_cand), int
    """
    n_rows, n_cand, _ = yF.shape
    n_users = seg.n_users
    scale = n_dir / (2.0 * np.pi)  # angles in units of the grid step
    with np.errstate(**_QUIET):
        a, b = yF[..., 0], yF[..., 1]
        r2 = a * a + b * b
        radius = np.sqrt(r2)                                    # 7x faster than hypot
        odd = ~((r2 > 1e-300) & (r2 < 1e300))                   # squares under/overflow
        if odd.any():
            radius[odd] = np.hypot(a[odd], b[odd])
        won = (radius > threshold) & np.isfinite(radius)
        angle = np.arctan2(yF[..., 1], yF[..., 0]) * scale      # in [-D/2, D/2]
        half = np.arccos(threshold / np.where(won, radius, np.inf)) * scale
        won &= np.isfinite(angle)
        # integer bins strictly inside (angle - half, angle + half)
        lo = np.where(won, np.floor(angle - half), 0.0).astype(np.int64) + 1
        hi = np.where(won, np.ceil(angle + half), 0.0).astype(np.int64)  # exclusive
    length = np.where(won, np.clip(hi - lo, 0, n_dir), 0)
    start = np.mod(lo, n_dir)
    end = start + length                                         # may exceed n_dir
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
    return seg.counts[:, None] - most.reshape(n_users, n_cand)


def direction_user_losses(seg, yF, directions, threshold):
    """Per-user margin losses ``(1/|S_i|) sum_j 1[y_j <F_j, u> <= t]`` at every direction.

    The terms of the cold-start score: each lies in ``[0, 1]`` and depends on
    user ``i``'s rows only (0 for a user without rows). Users are chunked to
    ``_CHUNK_BYTES``.

    Returns
    -------
    losses : ndarray of shape (n_users, n_directions)
    """
    out = np.zeros((seg.n_users, directions.shape[0]))
    for u0, rows, sub in _user_chunks(seg, directions.shape[0]):
        with np.errstate(**_QUIET):
            loss = yF[rows] @ directions.T <= threshold
        counts = sub.segment_sum_wide(loss)
        out[u0:u0 + sub.n_users] = counts / np.maximum(sub.counts, 1)[:, None]
    return np.clip(out, 0.0, 1.0, out=out)


def subspace_contributions(seg, yZ):
    """Unit directions ``u_i`` of every user's ``sum_j y_j M x_j`` (0 if it is 0).

    Each user's contribution ``u_i u_i^T`` to the ``subspace`` statistic has
    Frobenius norm 1 or 0, for any magnitude of the rows (normalised by
    :func:`~skdpp.privacy.unit_rows`: no underflow to 0, no overflow; a
    non-finite sum gives 0).

    Returns
    -------
    units : ndarray of shape (n_users, k')
    """
    with np.errstate(**_QUIET):
        return unit_rows(seg.segment_sum_wide(yZ))[0]


def head_argmin(seg, yF, directions, head_bound, margin):
    """Local heads ``v_i = Gamma u_i`` minimising the 0-1 loss on the user's rows (Alg. 3, line 6).

    ``u_i`` ranges over the public grid ``directions`` plus the user's own
    label-weighted mean direction ``sum_j y_j F_j`` (normalised). Ties of the
    0-1 loss are broken by the margin loss at ``rho``, then by the mean
    hinge loss ``max(0, rho - y <F, Gamma u>)``. Users are chunked to
    ``_CHUNK_BYTES``.

    Parameters
    ----------
    seg : UserBlock
    yF : ndarray of shape (n_rows, k)
        ``y U_priv^T x`` of the rows.
    directions : ndarray of shape (n_directions, k)
    head_bound, margin : float

    Returns
    -------
    heads : ndarray of shape (n_users, k)
        Zero rows for users without rows.
    has_rows : ndarray of shape (n_users,), bool
    """
    heads = np.zeros((seg.n_users, directions.shape[1]))
    n_grid = directions.shape[0]
    for u0, rows, sub in _user_chunks(seg, 4 * (n_grid + 1)):
        c = sub.counts
        yFb = yF[rows]
        with np.errstate(**_QUIET):
            own = _unit(sub.segment_sum_wide(yFb))
            margins = np.empty((yFb.shape[0], n_grid + 1))
            margins[:, :-1] = yFb @ directions.T
            margins[:, -1] = np.einsum("nk,nk->n", yFb, sub.expand(own))
            margins *= head_bound
            err0 = sub.segment_sum_wide(margins <= 0.0)
            err_rho = sub.segment_sum_wide(margins <= margin)
            hinge = sub.segment_sum_wide(np.maximum(0.0, margin - margins))
            hinge = hinge / np.maximum(c, 1)[:, None]
            # lexicographic (0-1 count, margin count, hinge) as one float key
            key = (2.0 * (c[:, None] + 1.0)) * err0 + 2.0 * err_rho + hinge / (1.0 + hinge)
        key[np.isnan(key)] = np.inf
        best = np.argmin(key, axis=1)
        grid = best < n_grid
        chosen = own.copy()
        chosen[grid] = directions[best[grid]]
        heads[u0:u0 + sub.n_users] = head_bound * chosen
    has_rows = seg.counts > 0
    heads[~has_rows] = 0.0
    return heads, has_rows


def _user_chunks(seg, n_cols):
    """``(first user, row slice, sub-block)`` of consecutive users within the memory budget.

    A loop over chunks of users (memory), not over users: a chunk holds
    about ``_CHUNK_BYTES / (8 * n_cols)`` rows (at least one user).
    """
    max_rows = max(1, _CHUNK_BYTES // (8 * max(n_cols, 1)))
    if seg.n_rows <= max_rows:
        yield 0, slice(0, seg.n_rows), seg
        return
    for sub in seg.split(max_rows):
        u0 = sub.first_user - seg.first_user
        yield u0, slice(int(seg.offsets[u0]), int(seg.offsets[u0 + sub.n_users])), sub


# --------------------------------------------------------------------------- #
# Block functions run by the executor
# --------------------------------------------------------------------------- #
@dataclass
class BlockState:
    """Per-block state of a fit, built once by :func:`prepare_block`.

    Attributes
    ----------
    score : UserBlock
        The rows of ``S^0`` (the releases' rows; all rows with ``split="none"``).
    Z : ndarray of shape (score.n_rows, k')
        ``M x`` of the score rows (Alg. 3, line 2).
    Y : ndarray of shape (score.n_rows, n_problems)
        Their labels in ``{-1, +1}`` (one column per binary problem).
    head : UserBlock
        The rows of ``S^1`` (the local heads' rows; all rows with ``split="none"``).
    """

    score: object
    Z: np.ndarray
    Y: np.ndarray
    head: object


@dataclass(frozen=True)
class Prepare:
    """Broadcast of :func:`prepare_block`: the public ``M``, the fit key and the split."""

    jl_matrix: np.ndarray
    key: np.ndarray
    split: str


def prepare_block(block, state, bc):
    """Split each user's rows into ``S^0 / S^1`` and project ``S^0`` (Alg. 3, Require, line 2).

    With ``split="half"`` a user with ``m >= 2`` rows puts ``ceil(m / 2)``
    rows (at most ``m - 1``) in ``S^0``, chosen by keyed per-row uniforms
    (``hash(fit key, "split", user id, position within the user)``): a
    user's split depends only on the key and that user's rows. A one-row
    user puts its row in ``S^0`` (no ``S^1``: it gets the cold-start head).

    Returns ``(None, BlockState)``.
    """
    if bc.split == "half":
        first = block.split_users_rows(0.5, block.row_uniforms(bc.key, "split"))
        score, head = block.select(first), block.select(~first)
    else:
        score = head = block
    with np.errstate(**_QUIET):
        Z = score.take(score.X) @ bc.jl_matrix.T
    return None, BlockState(score=score, Z=Z, Y=np.asarray(score.take(score.y)), head=head)


def subspace_block(block, state, problem):
    """Partial ``sum_i u_i u_i^T`` over the block's users (the ``subspace`` statistic)."""
    u = subspace_contributions(state.score, state.Y[:, problem, None] * state.Z)
    return u.T @ u, state


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
    """Partial ``sum_i L^_rho(U~, Gamma u; (S_i^0)_M)`` for every public direction (cold start)."""
    with np.errstate(**_QUIET):
        yF = (state.Y[:, bc.problem, None] * state.Z) @ bc.candidates
    return direction_user_losses(state.score, yF, bc.directions, bc.threshold).sum(axis=0), \
        state


@dataclass(frozen=True)
class Heads:
    """Broadcast of :func:`heads_block` (released values and public constants)."""

    embeddings: np.ndarray   # (n_problems, d, k)
    cold_start_heads: np.ndarray  # (n_problems, k)
    directions: np.ndarray
    head_bound: float
    margin: float


def heads_block(block, state, bc):
    """Every user's local heads (Alg. 3, line 6), shape ``(n_users, n_problems, k)``.

    Fitted on ``S^1`` (``state.head``) after a fit's :func:`prepare_block`,
    on all of the block's rows otherwise (:meth:`personalize`). A user
    without rows there gets the cold-start head.
    """
    seg = block if state is None else state.head
    X, Y = seg.take(seg.X), np.asarray(seg.take(seg.y))
    n_problems, _, k = bc.embeddings.shape
    heads = np.empty((seg.n_users, n_problems, k))
    for p in range(n_problems):  # loop over binary problems
        with np.errstate(**_QUIET):
            yF = Y[:, p, None] * (X @ bc.embeddings[p])
        h, has_rows = head_argmin(seg, yF, bc.directions, bc.head_bound, bc.margin)
        h[~has_rows] = bc.cold_start_heads[p]
        heads[:, p] = h
    return heads
