"""Block functions of PPSGD (Bietti et al. 2022, Alg. 1-3), driven by :mod:`.ppsgd`.

Over blocks of whole users (:class:`~skdpp.utils._grouped.UserBlock`), so the
same functions run in-process and on a cluster. :func:`sgd_round` is the map
of one round: the block's participants (Alg. 2/3, line 4,
:func:`skdpp.privacy.mechanisms.poisson_sample`), their minibatches (line 6,
:class:`MinibatchStream`), gradients at ``(w, theta_i)`` (line 7), local steps
on ``theta_i`` (line 8) and the sum of the gradients clipped to ``C`` (line 9,
one clip per user and round). ``theta_i`` lives in the block state
(:class:`BlockState`). Randomness is keyed by the fit key and the user's own
id (and, for minibatches, the pass and the canonical rank of the row), so a
user's choices depend neither on other users nor on the row order. The
intercept, when fitted, is profiled out (rows centred per user). ``X`` is
never copied whole: each round gathers the minibatch rows into per-thread
scratch buffers (:func:`gather_rows`) and centres them in place.
"""

# Authors: skdpp developers
# License: BSD 3 clause

from dataclasses import dataclass

import numpy as np

from ...privacy._clipping import clip_by_norm, unit_row_norms
from ...privacy import mechanisms
from .._auto import rms_per_user, shrink_levels, shrinkage_penalty, user_means
from .._scratch import scratch
from ...utils._grouped import (DEFAULT_BLOCK_ROWS, UserIndex, canonical_order, make_blocks,
                               segment_outer_sum)
from ...utils._random import keyed_bits


@dataclass(frozen=True)
class SGDConfig:
    """Public configuration of the block functions (and the secret fit key)."""

    key: object               # the fit key (FitRandomness.key), uint64 (2,)
    n_features: int           # d
    batch_size: object        # per-user minibatch cap (None: all of the user's rows)
    sample_rate: float        # Poisson rate q of participation per round
    weighting: str            # "user": minibatch mean (Alg. 3); "sample": sum / batch_size
    lr_local: float           # step size of theta_i (0: the offsets stay 0)
    clip_norm: object         # per-user clip of the released contribution
    release: bool             # return the clipped partial sums (False: global step 0)
    average: bool             # keep the running average of every theta_i
    n_rounds: int             # T (for the average)
    center: bool = False      # rows and targets centred on the user's own means
    local_scale: bool = False  # local step over the user's own mean squared row norm


# --------------------------------------------------------------------------- #
# Per-user minibatches (Alg. 2/3, line 6)
# --------------------------------------------------------------------------- #
def _ranges(starts, lengths):
    """Concatenation of ``arange(s, s + l)`` for each ``(s, l)``, without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


class MinibatchStream:
    """Each user's rows as an endless stream of random permutations (one block).

    User ``u`` reads its rows as a stream: pass ``p`` of the stream is a
    permutation of the user's rows, and each participation takes the next
    ``m_u = min(batch_size, n_u)`` rows. A minibatch that crosses the end of a
    pass takes the last rows of pass ``p`` and the first rows of pass
    ``p + 1`` (within one pass every row is used once; a row appears at most
    twice in one minibatch, only at a pass boundary). A user whose minibatch
    is all of its rows reads them in canonical order and is never reshuffled
    (the order of the rows of a sum does not matter).

    The permutation of pass ``p`` of user ``u`` sorts the user's rows by the
    keyed hash ``(fit key, "batch", hash(u), p, canonical rank of the row)``
    (:func:`skdpp.utils._random.keyed_bits`): a function of the key and of the
    user's own rows only.

    Parameters
    ----------
    block : UserBlock
    batch_size : int or None
    key : ndarray of shape (2,), uint64

    Attributes
    ----------
    batch : ndarray of shape (n_users,)
        Minibatch size ``m_u`` of each user of the block.
    """

    def __init__(self, block, batch_size, key):
        self.key = key
        self.user_hash = block.user_hash
        self.counts = block.counts
        self.starts = block.offsets[:-1]
        self.batch = self.counts.copy() if batch_size is None \
            else np.minimum(self.counts, int(batch_size))
        full = self.batch == self.counts
        self.stream = np.arange(block.n_rows, dtype=np.int64)  # canonical order
        self.cursor = np.zeros(block.n_users, dtype=np.int64)
        self.n_pass = np.zeros(block.n_users, dtype=np.int64)
        self._shuffle(np.flatnonzero(~full))

    def _shuffle(self, users):
        """Write pass ``n_pass[users]`` of ``users`` into their part of the stream."""
        if users.size == 0:
            return
        counts = self.counts[users]
        starts = self.starts[users]
        pos = _ranges(starts, counts)
        rank = pos - np.repeat(starts, counts)
        bits = keyed_bits(self.key, "batch", np.repeat(self.user_hash[users], counts),
                          np.repeat(self.n_pass[users], counts), rank)
        seg = np.repeat(np.arange(users.size, dtype=np.int64), counts)
        self.stream[pos] = pos[canonical_order(seg, users.size, bits)]

    def draw(self, users):
        """Block positions of the next minibatch of each of ``users``.

        Parameters
        ----------
        users : ndarray of int or None
            Local codes of the participants, sorted (``None``: every user).

        Returns
        -------
        positions : ndarray of int
            Rows of the block (canonical positions), grouped by user in the
            order of ``users``.
        m : ndarray of shape (n_participants,)
            Minibatch size of each participant.
        """
        if users is None:
            users = np.arange(self.counts.shape[0], dtype=np.int64)
        n, c, m = self.counts[users], self.cursor[users], self.batch[users]
        ends = c + m >= n
        start = np.repeat(self.starts[users], m)
        n_rep = np.repeat(n, m)
        vpos = np.repeat(c, m) + (np.arange(int(m.sum()), dtype=np.int64)
                                  - np.repeat(np.cumsum(m) - m, m))
        wrapped = vpos >= n_rep
        positions = self.stream[start + np.where(wrapped, 0, vpos)]
        done = users[ends & (m < n)]
        self.n_pass[done] += 1
        self._shuffle(done)
        if wrapped.any():
            positions[wrapped] = self.stream[start[wrapped] + vpos[wrapped] - n_rep[wrapped]]
        self.cursor[users] = np.where(ends, c + m - n, c + m)
        return positions, m


def make_sgd_blocks(X, y, index, *, batch_size, sample_rate, max_rows=DEFAULT_BLOCK_ROWS):
    """Blocks of whole users (canonical order) sized by the rows a round reads.

    A round reads ``m_u = min(batch_size, n_u)`` rows of each participant, so
    blocks hold about ``max_rows`` expected minibatch rows
    (``q * sum_u m_u``), not ``max_rows`` stored rows: fewer blocks, the same
    working set per block and round.

    Returns
    -------
    blocks : list of UserBlock
    """
    (whole,) = make_blocks(X, y, index, max_rows=None)
    m = whole.counts if batch_size is None else np.minimum(whole.counts, int(batch_size))
    expected = np.cumsum(m) * float(sample_rate)
    cid = (expected - float(sample_rate) * m) // max(int(max_rows), 1)
    cuts = np.r_[0, np.flatnonzero(np.diff(cid)) + 1, whole.n_users]
    return [whole.user_range(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


# --------------------------------------------------------------------------- #
# Block state and block functions
# --------------------------------------------------------------------------- #
class BlockState:
    """Per-user state of one block, kept between rounds.

    Attributes
    ----------
    theta : ndarray of shape (n_users, d)
        The users' current offsets ``theta_i`` (Alg. 1, line 2: zeros).
    theta_avg : ndarray of shape (n_users, d) or None
        ``sum_{s <= last} theta_{i,s} / T`` (running average of the iterates).
    last : ndarray of shape (n_users,) or None
        Last round accounted in ``theta_avg``.
    stream : MinibatchStream or None
        The users' minibatch streams (built at the first draw).
    x_means, y_means : ndarray of shape (n_users, d) and (n_users,) or None
        The users' mean rows and targets (``config.center``).
    mean_sq : ndarray of shape (n_users,) or None
        The users' mean squared (centred) row norms (``center`` or
        ``local_scale``; :func:`user_moments`).
    inv_scale : ndarray of shape (n_users,) or None
        ``1 / mean_sq`` (0 where not finite; ``config.local_scale``).
    """

    def __init__(self, block, config):
        shape = (block.n_users, config.n_features)
        self.theta = np.zeros(shape)
        self.theta_avg = np.zeros(shape) if config.average else None
        self.last = np.zeros(block.n_users, dtype=np.int64) if config.average else None
        self.stream = None
        self.x_means = self.y_means = self.inv_scale = self.mean_sq = None
        if config.center or config.local_scale:
            self.x_means, self.y_means, sq = user_moments(block, config.center)
            self.mean_sq = sq
            if config.center:
                self.x_means = np.nan_to_num(self.x_means, nan=0.0)
            else:
                self.x_means = self.y_means = None
            if config.local_scale:
                with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                    inv = 1.0 / sq
                self.inv_scale = np.where(np.isfinite(inv) & (sq > 0), inv, 0.0)


def user_moments(block, center, max_rows=DEFAULT_BLOCK_ROWS):
    """Each user's mean row, mean target and mean squared (centred) row norm.

    Over all of the user's rows, gathered by sub-blocks of about ``max_rows``
    rows. Overflow-free for finite values (``sum_r x_r / m``); a user whose
    centred norms overflow gets ``inf``.

    Returns
    -------
    x_means : ndarray of shape (n_users, d)
    y_means : ndarray of shape (n_users,)
    mean_sq_norms : ndarray of shape (n_users,)
    """
    d = block.X.shape[1]
    x_means = np.zeros((block.n_users, d))
    y_means = np.zeros(block.n_users)
    sq = np.zeros(block.n_users)
    for sub in block.split(max_rows):
        u = slice(sub.first_user - block.first_user,
                  sub.first_user - block.first_user + sub.n_users)
        X, y = gather_rows(sub, None)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            if center:
                x_means[u] = user_means(sub, X)
                y_means[u] = user_means(sub, y)
                center_rows(X, None, x_means[u], sub.counts)
            # the norms of unit_rows (overflow-free), bit for bit
            sq[u] = rms_per_user(sub, unit_row_norms(X)) ** 2
    return x_means, y_means, sq


def draw_minibatches(block, state, round_index, config):
    """The round's participants and their minibatches (Alg. 2/3, lines 4-6).

    Returns
    -------
    users : ndarray of int or None
        Local codes of the participants (``None``: every user of the block).
    positions : ndarray of int or None
        Their minibatch rows (block positions, grouped by user; ``None``: all
        rows of the block in canonical order).
    m : ndarray
        Minibatch size of each participant.
    """
    users = None
    if config.sample_rate < 1.0:
        users = np.flatnonzero(mechanisms.poisson_sample(
            config.key, block.user_hash, round_index, config.sample_rate))
    if state.stream is None:
        state.stream = MinibatchStream(block, config.batch_size, config.key)
    positions, m = state.stream.draw(users)
    return users, positions, m


def gather_rows(block, positions):
    """Rows of ``X`` and ``y`` at block ``positions`` (``None``: all, canonical).

    Float64 copies in this thread's scratch buffers (:mod:`.._scratch`), valid
    until the next call: the caller may modify them in place.
    """
    rows = block.rows
    if positions is not None:
        if rows is None:
            rows = positions
        elif isinstance(rows, slice):
            rows = positions + rows.start
        else:
            rows = rows[positions]
    n = block.n_rows if positions is None else positions.shape[0]
    # This thread's buffers, reused by every block and round: fresh arrays every
    # round made a MovieLens-sized fit 1.2x slower (page faults; issue 21).
    Xb = scratch("ppsgd_X", n, block.X.shape[1], np.float64)
    y_width = int(np.prod(block.y.shape[1:], dtype=np.int64))
    yb = scratch("ppsgd_y", n, y_width, np.float64).reshape((n,) + block.y.shape[1:])
    for source, out in ((block.X, Xb), (block.y, yb)):
        if rows is None or isinstance(rows, slice):
            np.copyto(out, source if rows is None else source[rows], casting="unsafe")
        elif source.dtype == np.float64:
            # mode="clip": the rows are valid by construction (mode="raise"
            # buffers ``out``)
            np.take(source, rows, axis=0, out=out, mode="clip")
        else:
            np.copyto(out, np.take(source, rows, axis=0, mode="clip"), casting="unsafe")
    return Xb, yb


def center_rows(A, users, means, m):
    """``A -= means`` of each row's user, in place (rows grouped by user, ``m`` each).

    ``users``: the local codes of the users of the rows (``None``: all users
    of ``means``). The same values as ``A - means[owner of each row]``.
    """
    means = means if users is None else means[users]
    n = m.shape[0]
    if n and A.shape[0] == n * int(m[0]) and (m == m[0]).all():  # no repeated copy
        A.reshape((n, int(m[0])) + A.shape[1:])[...] -= means[:, None]
    else:
        A -= np.repeat(means, m, axis=0)
    return A


# Below this many features, einsum beats stacked matmul on tiny per-user products.
_EINSUM_MAX_FEATURES = 16


def _user_gradients(Xb, yb, m, coef):
    """Per-user sums ``sum_rows x (<x, c> - y)`` of the squared-loss row gradients.

    ``Xb`` (``sum(m)`` rows grouped by user, ``m[j]`` for the ``j``-th user),
    ``yb``, and ``coef`` of shape (n, d) (each user's ``w + theta_i``) or (d,)
    (the shared ``w``); returns shape (n, d).

    Notes
    -----
    Users are grouped by minibatch size and each group is one batched product
    (:func:`_equal_gradients`), so a user's gradient is computed the same way
    whatever the other users' minibatch sizes: numpy's stacked products treat
    each user's slice alone, so its bits depend on its own rows and
    coefficients only. (A stack-wide switch between a batched and a
    segment-sum path when one user's minibatch size differs would change
    every other user's offsets in the last bits: joint differential privacy.)
    """
    n, d = m.shape[0], Xb.shape[1]
    if n == 0:
        return np.empty((0, d))
    if m.min() == m.max():  # one size (no gathered copy; the same products)
        return _equal_gradients(Xb, yb, n, int(m[0]), coef)
    grad = np.empty((n, d))
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    shared = coef.ndim == 1
    for size in np.unique(m):  # at most batch_size groups
        users = np.flatnonzero(m == size)
        rows = _ranges(starts[users], m[users])
        grad[users] = _equal_gradients(Xb[rows], yb[rows], users.size, int(size),
                                       coef if shared else coef[users])
    return grad


def _equal_gradients(Xb, yb, n, k, coef):
    """:func:`_user_gradients` of ``n`` users with ``k`` minibatch rows each."""
    d = Xb.shape[1]
    X3 = Xb.reshape(n, k, d)
    small = d <= _EINSUM_MAX_FEATURES
    if coef.ndim == 1:
        residual = (Xb @ coef).reshape(n, k)
    elif small:
        residual = np.einsum("ukd,ud->uk", X3, coef)
    else:
        residual = np.matmul(X3, coef[:, :, None])[:, :, 0]
    residual -= yb.reshape(n, k)
    if small:
        return np.einsum("uk,ukd->ud", residual, X3)
    return np.matmul(residual[:, None, :], X3)[:, 0, :]


def _clipped_sum(grad, clip_norm):
    """Sum of the per-user gradients, each clipped to ``clip_norm`` (Alg. 1, line 8)."""
    return clip_by_norm(grad, clip_norm).sum(axis=0)


def local_steps(state, users, Xb, yb, m, w, round_index, config):
    """Gradients at ``(w, theta_i)``, local steps on ``theta_i``, clipped partial sum.

    Alg. 2/3, lines 7-9 for the participants ``users`` (local codes, ``None``:
    every user of the block) whose minibatches are ``Xb``, ``yb`` (grouped by
    user, ``m`` rows each).

    A user whose gradient is not finite (its local model diverged, or its
    values overflow) contributes 0, a point of the clipping ball, and keeps
    its ``theta_i``; so does a user whose step would overflow. The
    sensitivity is unchanged and nothing fails.

    Returns
    -------
    partial : ndarray of shape (d,) or None
        Sum of the participants' gradients clipped to ``clip_norm`` (``None``
        when ``config.release`` is false).
    """
    idx = slice(None) if users is None else users
    personal = config.lr_local > 0
    theta = state.theta[idx] if personal else None
    # Alg. 1, line 6: for the additive model the gradients in w and in theta_i
    # are equal.
    grad = _user_gradients(Xb, yb, m, w if theta is None else theta + w)
    if config.weighting == "user":  # Alg. 3, line 7: minibatch means
        grad /= m[:, None]
    else:  # Alg. 2, line 7: minibatch sums, in units of the public batch_size
        grad /= config.batch_size
    if not np.isfinite(grad).all():
        grad[~np.isfinite(grad).all(axis=1)] = 0.0
    if personal:  # Alg. 2/3, line 8: local step
        if state.inv_scale is not None:  # relative to the user's own row scale
            new = theta - (config.lr_local * state.inv_scale[idx])[:, None] * grad
        else:
            new = theta - config.lr_local * grad
        if not np.isfinite(new).all():
            overflow = ~np.isfinite(new).all(axis=1)
            new[overflow] = theta[overflow]
        if config.average:
            last = state.last[idx]
            state.theta_avg[idx] += (theta * ((round_index - 1 - last) / config.n_rounds)[:, None]
                                     + new * (1.0 / config.n_rounds))
            state.last[idx] = round_index
        state.theta[idx] = new
    if not config.release:
        return None
    return _clipped_sum(grad, config.clip_norm)  # Alg. 2/3, line 9


def sgd_round(block, state, broadcast, *, config):
    """One round on one block: ``fn(block, state, (round, w)) -> (partial, state)``.

    Draws the participants and their minibatches, steps their offsets and
    returns the block's sum of clipped per-user gradients (see
    :func:`local_steps`). Data-dependent floating-point over/underflow is
    silent: whether a warning appears must not depend on one user's data.
    """
    round_index, w = broadcast
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if state is None:
            state = BlockState(block, config)
        users, positions, m = draw_minibatches(block, state, round_index, config)
        Xb, yb = gather_rows(block, positions)
        if state.x_means is not None:  # per-user centring (the profiled intercept)
            center_rows(Xb, users, state.x_means, m)
            center_rows(yb, users, state.y_means, m)
        partial = local_steps(state, users, Xb, yb, m, w, round_index, config)
    return partial, state


def final_offsets(block, state, n_rounds, *, config):
    """The users' last ``theta_i``, or their average over rounds ``1..T``."""
    if state is None:
        return np.zeros((block.n_users, config.n_features))
    if not config.average:
        return state.theta
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return state.theta_avg + state.theta * ((n_rounds - state.last) / n_rounds)[:, None]


# --------------------------------------------------------------------------- #
# Per-user statistics: "auto" bounds, cold-start offsets, personal parts
# --------------------------------------------------------------------------- #
def _with_state(block, state, config):
    return BlockState(block, config) if state is None else state


def _centred_rows(sub, state, offset, config):
    """A sub-block's rows and targets (float64), centred on the users' means when ``center``.

    """
    X, y = gather_rows(sub, None)
    if config.center:
        u = slice(offset, offset + sub.n_users)
        with np.errstate(over="ignore", invalid="ignore"):
            center_rows(X, None, state.x_means[u], sub.counts)
            center_rows(y, None, state.y_means[u], sub.counts)
    return X, y


def _user_grams(sub, X):
    """Per-user ``X_u^T X_u`` of a sub-block's rows (grouped by user)."""
    return segment_outer_sum(X, None, UserIndex(np.arange(sub.n_users), sub.row_user))


def gradient_norm_statistic(block, state, config):
    """Block function: each user's gradient norm at ``w = 0``, ``theta_i = 0`` (all its rows).

    The per-user statistic of an ``"auto"`` ``clip_norm``: the norm of the
    user's contribution of round 1 with its whole data as the minibatch
    (``weighting="sample"``: scaled by ``min(m_i, batch_size) / batch_size``).
    """
    norms = np.zeros(block.n_users)
    coef = np.zeros(config.n_features)

    def statistic(sub, X, y):  # X, y: the sub-block's (centred) rows and targets
        offset = sub.first_user - block.first_user
        m = sub.counts.astype(np.float64)
        grad = _user_gradients(X, y, sub.counts, coef) / m[:, None]
        if config.weighting == "sample":
            grad *= (np.minimum(m, config.batch_size) / config.batch_size)[:, None]
        norms[offset:offset + sub.n_users] = unit_row_norms(grad)  # unit_rows' norms

    state = _with_state(block, state, config)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for sub in block.split():
            statistic(sub, *_centred_rows(sub, state, sub.first_user - block.first_user,
                                          config))
    return norms, state


def feature_scale_statistic(block, state, config):
    """Block function: each user's root mean squared (centred) row norm.

    The per-user statistic of an ``"auto"`` ``feature_scale`` (the scale the
    step sizes are relative to).
    """
    state = _with_state(block, state, config)
    sq = state.mean_sq  # computed with the state (the same user_moments call)
    if sq is None:
        sq = user_moments(block, config.center)[2]
    return np.sqrt(sq), state


def offset_values(block, state, config):
    """Block function: ``fn`` of the users' offsets ``ȳ_i - <x̄_i, w>`` (centring only)."""
    w, fn = config
    with np.errstate(over="ignore", invalid="ignore"):
        values = state.y_means - state.x_means @ w
    return fn(values), state


@dataclass(frozen=True, eq=False)
class PersonalPrior:
    """Public inputs of the personal parts (released values and ``personal_ridge``)."""

    w: np.ndarray             # released global weights (prior mean of every w + theta_i)
    intercept: float          # released cold-start intercept
    intercept_scale: object   # R_b: prior std of a user's level is R_b / sqrt(kappa)
    ridge: float              # kappa (personal_ridge)
    config: SGDConfig
    variance_floor: float = 0.0  # floor of the penalty's feature variances (scaled fits)
    local_only: bool = False  # the released part is noise: shrink towards 0 and own mean


# Bytes of the per-chunk d x d statistics of the personal refit.
_REFIT_BYTES = 64 * 2**20


def personal_refit(block, state, prior):
    """Each user's ``theta_i`` and intercept from all its rows, shrunk towards the prior.

    ``theta_i`` minimises ``sum_r (y_r - <x_r, w + theta>)^2 + λ_i sum_j
    v_ij theta_j^2`` (rows centred on the user's means when ``center``), with
    ``v_ij`` the user's own variance of feature ``j`` (the penalty is in units
    of the prediction variance each offset adds: invariant to rescaling any
    feature) and ``λ_i = κ d min(1, σ_i^2 / s_i^2)`` pseudo-rows
    (:func:`~skdpp.linear_model._auto.shrinkage_penalty`): ``σ_i^2`` is the
    user's residual variance (of its own least-squares fit when it has more
    rows than parameters, else of the global model) and ``s_i^2`` the variance
    of its targets, so a user whose own fit explains its targets is hardly
    shrunk and a user whose data look like noise gets ``κ d`` pseudo-rows of
    the global model. The user's mean level is shrunk towards the cold-start
    prediction as in a normal-normal model with between-user variance
    ``2 R_b^2`` (:func:`~skdpp.linear_model._auto.shrink_levels`; ``R_b`` the
    released radius of the cold-start intercept). A user whose parts are not
    finite gets ``theta_i = 0`` and the cold-start intercept.

    Returns
    -------
    theta : ndarray of shape (n_users, n_features)
    intercepts : ndarray of shape (n_users,)
        The users' personal intercepts ``b_i`` (predictions ``<x, w + theta_i> +
        b_i``; 0 without centring).
    """
    from .._heads import _solve_stack, shrunk_heads

    config = prior.config
    state = _with_state(block, state, config)
    d = config.n_features
    w_released = np.asarray(prior.w, dtype=np.float64)
    # local_only: the released part is noise -- each user's own ridge fit, shrunk
    # towards zero weights and its own mean level (local data only)
    w = np.zeros(d) if prior.local_only else w_released
    intercept_scale = None if prior.local_only else prior.intercept_scale
    kappa = float(prior.ridge)
    theta = np.zeros((block.n_users, d))
    levels = np.zeros(block.n_users)
    sigma2 = np.zeros(block.n_users)
    per_chunk = max(1, _REFIT_BYTES // (8 * max(d * d, 1)))
    for part in block.split():
        for lo in range(0, part.n_users, per_chunk):
            sub = part.user_range(lo, min(part.n_users, lo + per_chunk))
            offset = sub.first_user - block.first_user
            u = slice(offset, offset + sub.n_users)
            X, y = _centred_rows(sub, state, offset, config)
            m = sub.counts.astype(np.float64)
            with np.errstate(all="ignore"):
                A = _user_grams(sub, X)
                r = sub.segment_sum(X * y[:, None])
                yy = sub.segment_sum(y * y)
                Aw = A @ w
                rss_w = np.maximum(yy - 2.0 * r @ w + Aw @ w, 0.0)
                dof = m - d - (1 if config.center else 0)
                tau = 1e-10 * np.trace(A, axis1=1, axis2=2) / max(d, 1)
                rich = dof >= 1
                s2 = rss_w / np.maximum(m - (1 if config.center else 0), 1.0)
                if rich.any():
                    beta = _solve_stack(A[rich] + tau[rich, None, None] * np.eye(d), r[rich])
                    rss = np.maximum(yy[rich] - np.einsum("ij,ij->i", beta, r[rich]), 0.0)
                    s2[rich] = rss / dof[rich]
                var_y = yy / np.maximum(m - (1 if config.center else 0), 1.0)
                D = np.einsum("nii->ni", A) / m[:, None]  # the user's feature variances
                penalty = shrinkage_penalty(kappa, d, s2, var_y, D,
                                            float(prior.variance_floor))
                # theta = argmin ||y - X (w + theta)||^2 + sum_j q_j theta_j^2
                t = shrunk_heads(A, r - Aw, np.zeros(d), penalty, sub.counts)
                t[~np.isfinite(t).all(axis=1)] = 0.0
            theta[u] = t
            sigma2[u] = s2
            levels[u] = state.y_means[u] if config.center else 0.0
    if not config.center:
        return theta, np.zeros(block.n_users)
    with np.errstate(all="ignore"):
        xm = state.x_means
        if kappa > 0 and intercept_scale is not None:
            s2 = np.where(block.counts >= 2, sigma2, np.nan)
            levels = shrink_levels(levels, block.counts, s2, prior.intercept + xm @ w,
                                   intercept_scale)
        intercepts = levels - np.einsum("ij,ij->i", xm, w + theta)
    bad = ~np.isfinite(intercepts) | ~np.isfinite(theta).all(axis=1)
    theta[bad] = 0.0
    intercepts[bad] = prior.intercept
    if prior.local_only:  # offsets relative to the released weights
        theta = theta + (w - w_released)[None, :]
        theta[bad] = 0.0
    return theta, intercepts


def personal_sgd(block, state, config):
    """Block function: the users' SGD offsets and intercepts ``ȳ_i - <x̄_i, w + theta_i>``.

    (Intercepts 0 without centring.)
    """
    w, n_rounds, sgd_config = config
    theta = final_offsets(block, state, n_rounds, config=sgd_config)
    d = sgd_config.n_features
    if state is None or state.x_means is None:
        return theta, np.zeros(block.n_users)
    with np.errstate(all="ignore"):
        b = state.y_means - np.einsum("ij,ij->i", state.x_means, w[None, :] + theta)
    return theta, np.where(np.isfinite(b), b, 0.0)
