"""Block functions of PPSGD (Bietti et al. 2022, Alg. 1-3), driven by :mod:`.ppsgd`.

:func:`sgd_round` is one round on a block of whole users: participants (Alg.
2/3, line 4), minibatches (line 6, :class:`MinibatchStream`), gradients at
``(w, theta_i)`` (line 7), local steps (line 8), the sum of gradients clipped to
``C`` (line 9, one clip per user and round). Randomness is keyed by the fit key
and the user's own id (independent of other users and of row order). The
intercept is profiled out (rows centred per user).
"""

from dataclasses import dataclass

import numpy as np

from ...privacy._clipping import clip_by_norm, unit_row_norms
from ...privacy import mechanisms
from .._auto import rms_per_user, shrink_levels, shrinkage_penalty, user_means
from .._scratch import scratch
from ...utils._grouped import DEFAULT_BLOCK_ROWS, canonical_order, make_blocks
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


def _ranges(starts, lengths):
    """Concatenation of ``arange(s, s + l)`` for each ``(s, l)``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


class MinibatchStream:
    """Each user's rows as an endless stream of keyed permutations (pass ``p``: sorted by
    ``hash(fit key, "batch", hash(u), p, rank)``); a participation takes the next
    ``batch[u] = min(batch_size, n_u)`` rows (full batches keep canonical order)."""

    def __init__(self, block, batch_size, key):
        self.key = key
        self.user_hash = block.user_hash
        self.counts = block.counts
        self.starts = block.offsets[:-1]
        self.batch = self.counts.copy() if batch_size is None \
            else np.minimum(self.counts, int(batch_size))
        self.stream = np.arange(block.n_rows, dtype=np.int64)  # canonical order
        self.cursor = np.zeros(block.n_users, dtype=np.int64)
        self.n_pass = np.zeros(block.n_users, dtype=np.int64)
        self._shuffle(np.flatnonzero(self.batch != self.counts))  # full: canonical

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
        """``(positions, m)``: the next minibatch's block positions of the sorted local
        codes ``users`` (``None``: all), grouped by user, and their sizes."""
        if users is None:
            users = np.arange(self.counts.shape[0], dtype=np.int64)
        n, c, m = self.counts[users], self.cursor[users], self.batch[users]
        ends = c + m >= n
        start = np.repeat(self.starts[users], m)
        n_rep = np.repeat(n, m)
        vpos = _ranges(c, m)  # virtual positions c_u .. c_u + m_u - 1 (may wrap)
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
    """Blocks of whole users of about ``max_rows`` expected minibatch rows
    (``q * sum_u min(batch_size, n_u)``)."""
    (whole,) = make_blocks(X, y, index, max_rows=None)
    m = whole.counts if batch_size is None else np.minimum(whole.counts, int(batch_size))
    expected = np.cumsum(m) * float(sample_rate)
    cid = (expected - float(sample_rate) * m) // max(int(max_rows), 1)
    cuts = np.r_[0, np.flatnonzero(np.diff(cid)) + 1, whole.n_users]
    return [whole.user_range(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


class BlockState:
    """Per-user state of a block between rounds: ``theta`` (offsets), ``theta_avg`` /
    ``last`` (running average up to round ``last``), the minibatch ``stream``, and
    from :func:`user_moments` ``x_means``, ``y_means`` (``center``), ``mean_sq`` and
    ``inv_scale = 1 / mean_sq`` (0 where not finite; ``local_scale``)."""

    def __init__(self, block, config):
        shape = (block.n_users, config.n_features)
        self.theta = np.zeros(shape)
        self.theta_avg = np.zeros(shape) if config.average else None
        self.last = np.zeros(block.n_users, dtype=np.int64) if config.average else None
        self.stream = None
        self.x_means = self.y_means = self.inv_scale = self.mean_sq = None
        if config.center or config.local_scale:
            x_means, y_means, sq = user_moments(block, config.center)
            self.mean_sq = sq
            if config.center:
                self.x_means, self.y_means = np.nan_to_num(x_means, nan=0.0), y_means
            if config.local_scale:
                with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                    inv = 1.0 / sq
                self.inv_scale = np.where(np.isfinite(inv) & (sq > 0), inv, 0.0)


def user_moments(block, center):
    """``(x_means, y_means, mean_sq_norms)`` of each user over all its rows
    (overflow-free; ``inf`` if centred norms overflow)."""
    d = block.X.shape[1]
    x_means = np.zeros((block.n_users, d))
    y_means = np.zeros(block.n_users)
    sq = np.zeros(block.n_users)
    for sub in block.split():
        lo = sub.first_user - block.first_user
        u = slice(lo, lo + sub.n_users)
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
    """``(users, positions, m)``: participants (``None``: all), their minibatch rows
    and sizes (Alg. 2/3, lines 4-6)."""
    users = None
    if config.sample_rate < 1.0:
        users = np.flatnonzero(mechanisms.poisson_sample(
            config.key, block.user_hash, round_index, config.sample_rate))
    if state.stream is None:
        state.stream = MinibatchStream(block, config.batch_size, config.key)
    positions, m = state.stream.draw(users)
    return users, positions, m


def gather_rows(block, positions):
    """Float64 ``X``, ``y`` rows at ``positions`` (``None``: all) in this thread's
    scratch buffers, valid until the next call."""
    rows = block.rows
    if positions is not None:
        if rows is None:
            rows = positions
        elif isinstance(rows, slice):
            rows = positions + rows.start
        else:
            rows = rows[positions]
    n = block.n_rows if positions is None else positions.shape[0]
    # fresh arrays every round made a MovieLens-sized fit 1.2x slower (page faults)
    Xb = scratch("ppsgd_X", n, block.X.shape[1], np.float64)
    y_width = int(np.prod(block.y.shape[1:], dtype=np.int64))
    yb = scratch("ppsgd_y", n, y_width, np.float64).reshape((n,) + block.y.shape[1:])
    for source, out in ((block.X, Xb), (block.y, yb)):
        if rows is None or isinstance(rows, slice):
            np.copyto(out, source if rows is None else source[rows], casting="unsafe")
        elif source.dtype == np.float64:
            # mode="clip": rows valid by construction (mode="raise" buffers ``out``)
            np.take(source, rows, axis=0, out=out, mode="clip")
        else:
            np.copyto(out, np.take(source, rows, axis=0, mode="clip"), casting="unsafe")
    return Xb, yb


def center_rows(A, users, means, m):
    """``A -= means`` of each row's user in place (``m`` rows of each of ``users``)."""
    means = means if users is None else means[users]
    n = m.shape[0]
    if n and A.shape[0] == n * int(m[0]) and (m == m[0]).all():  # no repeated copy
        A.reshape((n, int(m[0])) + A.shape[1:])[...] -= means[:, None]
    else:
        A -= np.repeat(means, m, axis=0)
    return A


_EINSUM_MAX_FEATURES = 16  # below, einsum beats stacked matmul on tiny products


def _user_gradients(Xb, yb, m, coef):
    """Per-user ``sum_rows x (<x, c> - y)`` of ``Xb``/``yb`` (``m`` rows per user) at
    ``coef`` (``(n, d)`` or ``(d,)``): one batched product per minibatch size, so a
    user's bits depend on its own rows only (joint DP; a stack-wide switch would not).
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


def _clipped_sum(grad, clip_norm):  # a name of its own: tests patch it
    return clip_by_norm(grad, clip_norm).sum(axis=0)


def local_steps(state, users, Xb, yb, m, w, round_index, config):
    """Alg. 2/3, lines 7-9 for ``users`` (``None``: all): gradients, local steps, and
    the clipped sum (``None`` without ``release``). A non-finite gradient
    contributes 0 (in the clipping ball) and an overflowing step keeps ``theta_i``:
    the sensitivity is unchanged and nothing fails."""
    idx = slice(None) if users is None else users
    personal = config.lr_local > 0
    theta = state.theta[idx] if personal else None
    # Alg. 1, line 6: the gradients in w and in theta_i are equal (additive model)
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
    """One round on one block (broadcast ``(round, w)``; :func:`local_steps`)."""
    round_index, w = broadcast
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        state = _with_state(block, state, config)
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


def _with_state(block, state, config):
    return BlockState(block, config) if state is None else state


def _centred_rows(sub, state, offset, config):
    """A sub-block's float64 rows and targets (centred with ``center``)."""
    X, y = gather_rows(sub, None)
    if config.center:
        u = slice(offset, offset + sub.n_users)
        with np.errstate(over="ignore", invalid="ignore"):
            center_rows(X, None, state.x_means[u], sub.counts)
            center_rows(y, None, state.y_means[u], sub.counts)
    return X, y


def _user_grams(sub, X):
    """Per-user ``X_u^T X_u``: equal row counts in one batched product (PPSGD fit 1.3x
    faster, ``bench_refactor_speed.py``), else :func:`~skdpp.utils._grouped.segment_outer_sum`."""
    m = sub.counts
    if sub.n_users and m[0] > 0 and (m == m[0]).all():
        X3 = X.reshape(sub.n_users, int(m[0]), X.shape[1])
        return np.matmul(X3.transpose(0, 2, 1), X3)
    return sub.outer_sum(X)


def gradient_norm_statistic(block, state, config):
    """Block function (``"auto"`` ``clip_norm``): each user's contribution norm at ``w =
    theta_i = 0``, all rows as minibatch (``"sample"``: times ``min(m_i, B) / B``)."""
    norms = np.zeros(block.n_users)
    coef = np.zeros(config.n_features)
    state = _with_state(block, state, config)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for sub in block.split():
            offset = sub.first_user - block.first_user
            X, y = _centred_rows(sub, state, offset, config)
            m = sub.counts.astype(np.float64)
            grad = _user_gradients(X, y, sub.counts, coef) / m[:, None]
            if config.weighting == "sample":
                grad *= (np.minimum(m, config.batch_size) / config.batch_size)[:, None]
            norms[offset:offset + sub.n_users] = unit_row_norms(grad)  # unit_rows' norms
    return norms, state


def feature_scale_statistic(block, state, config):
    """Block function (``"auto"`` ``feature_scale``): users' RMS centred row norms
    (``mean_sq``: ``feature_scale="auto"`` sets ``local_scale``)."""
    state = _with_state(block, state, config)
    return np.sqrt(state.mean_sq), state


def offset_values(block, state, config):
    """Block function: ``fn`` of the users' offsets ``ȳ_i - <x̄_i, w>`` (centring only)."""
    w, fn = config
    with np.errstate(over="ignore", invalid="ignore"):
        values = state.y_means - state.x_means @ w
    return fn(values), state


@dataclass(frozen=True, eq=False)
class PersonalPrior:
    """Public inputs of the personal parts (released values, ``personal_ridge``)."""

    w: np.ndarray             # released global weights (prior mean of every w + theta_i)
    intercept: float          # released cold-start intercept
    intercept_scale: object   # R_b: prior std of a user's level is R_b / sqrt(kappa)
    ridge: float              # kappa
    config: SGDConfig
    variance_floor: float = 0.0  # floor of the penalty's feature variances
    local_only: bool = False  # shrink towards 0 and the user's own mean


_REFIT_BYTES = 64 * 2**20  # per-chunk d x d statistics of the personal refit


def personal_refit(block, state, prior):
    """``(theta, intercepts)`` from all the user's rows: ``theta_i`` minimises ``sum_r (y_r
    - <x_r, w + theta>)^2 + λ_i sum_j v_ij theta_j^2`` (``λ_i``:
    :func:`~skdpp.linear_model._auto.shrinkage_penalty`), levels by
    :func:`~skdpp.linear_model._auto.shrink_levels`; non-finite: the prior."""
    from .._heads import _relative_ridge, _solve_stack, shrunk_heads

    config = prior.config
    state = _with_state(block, state, config)
    d = config.n_features
    w_released = np.asarray(prior.w, dtype=np.float64)
    # local_only: shrink towards zero weights and the user's own mean level
    w = np.zeros(d) if prior.local_only else w_released
    intercept_scale = None if prior.local_only else prior.intercept_scale
    kappa = float(prior.ridge)
    theta = np.zeros((block.n_users, d))
    sigma2 = np.zeros(block.n_users)
    n_fixed = int(config.center)  # the profiled intercept's degree of freedom
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
                dof = m - d - n_fixed
                rich = dof >= 1
                n_eff = np.maximum(m - n_fixed, 1.0)
                s2 = rss_w / n_eff
                if rich.any():
                    ridge = _relative_ridge(A[rich], m[rich], per_column=True)
                    M = A[rich] + ridge[:, :, None] * np.eye(d)
                    beta = _solve_stack(M, r[rich])
                    rss = np.maximum(yy[rich] - np.einsum("ij,ij->i", beta, r[rich]), 0.0)
                    s2[rich] = rss / dof[rich]
                var_y = yy / n_eff
                D = np.einsum("nii->ni", A) / m[:, None]  # the user's feature variances
                penalty = shrinkage_penalty(kappa, d, s2, var_y, D,
                                            float(prior.variance_floor))
                # theta = argmin ||y - X (w + theta)||^2 + sum_j q_j theta_j^2
                t = shrunk_heads(A, r - Aw, np.zeros(d), penalty, sub.counts,
                                 per_column=True)  # raw features: own units
                t[~np.isfinite(t).all(axis=1)] = 0.0
            theta[u] = t
            sigma2[u] = s2
    if not config.center:
        return theta, np.zeros(block.n_users)
    levels, xm = state.y_means, state.x_means
    with np.errstate(all="ignore"):
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
    """Block function: SGD offsets, intercepts ``ȳ_i - <x̄_i, w + theta_i>`` (or 0)."""
    w, n_rounds, sgd_config = config
    theta = final_offsets(block, state, n_rounds, config=sgd_config)
    if state is None or state.x_means is None:
        return theta, np.zeros(block.n_users)
    with np.errstate(all="ignore"):
        b = state.y_means - np.einsum("ij,ij->i", state.x_means, w[None, :] + theta)
    return theta, np.where(np.isfinite(b), b, 0.0)
