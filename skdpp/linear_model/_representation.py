"""What :class:`PrivateFedRepRegressor` and :class:`PrivAltMinRegressor` share.

The model is ``y ≈ b_i + <x, U v_i>``: a shared embedding ``U`` (``d × k``,
orthonormal columns, released under user-level DP), a personal head ``v_i``
(``k``) and a personal intercept ``b_i`` per user, computed from the released
values and that user's rows only (``fit_intercept=False``: ``b_i = 0``, the
papers' model). Both algorithms work on blocks of whole users
(:class:`~skdpp.utils._grouped.UserBlock`) and share:

* :func:`prepare_split` -- the block function that splits each user's rows into
  ``S^0`` (initialisation and iterations) and ``S^1`` with keyed randomness,
  centres each user's ``S^0`` rows on the user's own means (the per-user
  intercept profiled out: a function of that user's rows only) and keeps the
  block's ``S^0`` arrays in its :class:`BlockState`;
* :func:`take_rows`, :func:`s0_rows`, :func:`s0_block`, :func:`source_row_sum`
  -- gathers and per-user sums over a block's rows;
* :func:`fit_heads` -- exact per-user least-squares heads on a block;
* :func:`head_statistics`, :func:`personal_parts` -- each user's sufficient
  statistics and its personal head and intercept, shrunk towards the released
  cold-start part (the same block functions in ``fit`` and ``personalize``);
* :func:`final_heads` -- the driver of the end of a fit: the final heads
  (Snedeker et al. 2025, Alg. 1, line 14), the DP cold-start head and
  intercept, the personal parts;
* :func:`subspace_distance` -- the principal-angle distance;
* :class:`_RepresentationMixin` -- validation, budget plan, the fit's core
  around the algorithm's iterations, ``personalize`` and ``predict``.
"""

import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitResult, linear_predictions
from ..exceptions import UselessFitWarning
from ..privacy import BudgetPlan
from ..privacy._clipping import clip_by_norm, unit_rows
from ..privacy._quantile import LOCATION_SEARCH_STEPS, private_location
from ..utils._executor import LocalExecutor
from ..utils._grouped import UserBlock, make_blocks
from . import _auto
from ._auto import (
    AUTO_STEPS,
    CLIP_PHASE,
    FEATURE_SCALE_STEPS,
    LABEL_RANGE_STEPS,
    VARIANCE_FLOOR,
    at_grid_edge,
    auto_bound,
    clamp_predictions,
    feature_scales,
    inverse_scales,
    label_range,
    resolve_clip_share,
    rms_per_user,
    scaling_notes,
    shrink_levels,
    shrinkage_penalty,
    standardize,
    standardize_block,
    useless_fit_message,
    user_means,
)
from ._heads import shrunk_heads, solve_heads
from ._scratch import release_scratch, scratch
from ._spectral_init import initial_components

__all__ = ["BlockState", "final_heads", "fit_heads", "head_statistics", "personal_parts",
           "prepare_split", "subspace_distance", "take_rows"]

_INIT_OPTIONS = ("private_spectral", "private_pairwise", "random")

# A block keeps a contiguous copy of its S^0 rows of X (read every round) when the
# source X takes at most this much memory (S^0 is about half of it); otherwise
# each round gathers them into a reused per-thread buffer: a copy of half of a
# large X costs more in fresh memory (page faults) than the gathers, and adds
# half of X to the peak memory.
_CACHE_SOURCE_BYTES = 128 * 2**20

_FLOAT_MAX = np.finfo(np.float64).max

#: The ``"auto"`` bound of the private initialisation is the ``clip_quantile *
#: _INIT_QUANTILE_FACTOR`` quantile of its per-user statistic: the norms of the
#: users' U-statistics are heavy-tailed (products of four rows), and clipping
#: half of the users below the median keeps the direction of the mean while
#: halving the noise (measured on the papers' setting, n = 20 000, ε = 1).
_INIT_QUANTILE_FACTOR = 0.5


def take_rows(block, A, scratch_name=None):
    """The block's rows of the source-aligned array ``A`` (canonical order).

    Like :meth:`UserBlock.take`, but gathers with ``np.take(..., mode="clip")``
    (the block's rows are valid indices): numpy buffers the output of the
    default ``mode="raise"`` when ``out`` is given, and fancy indexing is
    slower (measured 2.7 ms and 2.0 ms vs 0.56 ms for 16384 rows of 50
    columns). ``scratch_name``: gather into that reused buffer of this thread
    (valid until the next gather into it).
    """
    rows = block.rows
    if rows is None:
        return A
    if isinstance(rows, slice):
        return A[rows]
    if scratch_name is None:
        return np.take(A, rows, axis=0, mode="clip")
    out = scratch(scratch_name, rows.shape[0], A.shape[1], A.dtype)
    return np.take(A, rows, axis=0, out=out, mode="clip")


def _center_in_place(block, A, means, finite=None):
    """``A -= means`` of each row's user; non-finite results are clamped to the float range.

    Centring a user with values near the float maximum can overflow (``x - mean``
    up to twice the largest entry): the clamp keeps every later computation on
    finite values (a function of that user's rows only).

    ``finite``: whether the centred values are known to be finite (the same
    rows and means were centred before), or None (checked here). Returns
    ``(A, finite)``.
    """
    c = block.uniform_count()
    with np.errstate(over="ignore", invalid="ignore"):
        if c and A.ndim == 2 and A.flags.c_contiguous:  # broadcast: no expanded copy
            A.reshape(block.n_users, c, A.shape[1])[...] -= means[:, None, :]
        else:
            A -= block.expand(means)
        if finite is None:
            # a finite sum proves every entry finite (one read pass, no n x d mask);
            # a sum that overflows is checked entry by entry
            finite = bool(np.isfinite(A.sum()) or np.isfinite(A).all())
    if not finite:  # (the identity on finite entries)
        np.nan_to_num(A, copy=False, nan=0.0, posinf=_FLOAT_MAX, neginf=-_FLOAT_MAX)
    return A, finite


# --------------------------------------------------------------------------- #
# Block state: the S^0 / S^1 split
# --------------------------------------------------------------------------- #
@dataclass
class BlockState:
    """What a block keeps between the rounds of a fit (its users only).

    Attributes
    ----------
    s0 : UserBlock
        The block's ``S^0`` rows (over the fit's ``X``, ``y``).
    local : UserBlock
        The same users and row counts over the block's own ``S^0`` arrays
        (rows ``0 .. n0 - 1``; sources ``X0`` and ``y0``, or ``y0`` alone when
        ``X0`` is not cached): batches of a round are selections of it, so
        their ``source_rows`` index ``X0``, ``y0`` and ``X0 @ U``.
    y0 : ndarray of shape (n0,)
        Targets of the ``S^0`` rows (centred on each user's mean over all its
        rows when ``fit_intercept``).
    X0 : ndarray of shape (n0, d) or None
        A contiguous copy of the ``S^0`` rows of ``X`` (centred like ``y0``;
        small data), or None: they are gathered (and centred) every round
        (:func:`s0_rows`).
    final : UserBlock
        Rows of the paper's final heads: ``S^1``, or ``S^0`` for a user without
        ``S^1`` (``personal_rows="holdout"``).
    x_means : ndarray of shape (n_users, d) or None
        Each user's mean row (all its rows), subtracted from the gathered
        ``S^0`` rows when ``X0`` is not cached and ``fit_intercept``.
    extra : dict
        Algorithm-specific per-user state.
    """

    s0: UserBlock
    local: UserBlock
    y0: np.ndarray
    X0: object
    final: UserBlock
    x_means: object = None
    extra: dict = field(default_factory=dict)

    def s0_rows(self, block):
        """The (centred) ``S^0`` rows of ``X``: the cached copy, or a gather into scratch."""
        return s0_rows(block, self)

    def s0_block(self, block):
        """The ``S^0`` rows as a :class:`UserBlock` over (centred) arrays holding them."""
        return s0_block(block, self)


def split_mask(block, key):
    """``True`` for the block's ``S^0`` rows (Snedeker et al. 2025, Alg. 1, preamble).

    Each user puts ``ceil(m / 2)`` of its ``m`` rows (clipped to ``[1, m - 1]``;
    a one-row user keeps its row) in ``S^0``: those with the smallest keyed
    uniforms ``hash(key, "split", user id, rank of the row)``, so the split
    of a user depends only on the fit key and that user's own rows.
    """
    return block.split_users_rows(0.5, block.row_uniforms(key, "split"))


def prepare_split(block, state, config):
    """Block function: split the block's users into ``S^0`` / ``S^1``; returns its state.

    ``config`` is ``(key, fit_intercept)`` (or the key alone: no centring).
    With ``fit_intercept`` each user's ``S^0`` rows and targets are centred on
    the user's means over all its rows: minimising over a per-user intercept
    profiles it out (``sum_r (y_r - b - <x_r, U v>)^2`` is smallest at ``b =
    ȳ - <x̄, U v>``), and every per-user contribution stays a function of that
    user's rows only.
    """
    key, fit_intercept = config if isinstance(config, tuple) else (config, False)
    # A throw-away view of the block: the per-row arrays it caches while splitting
    # (row users, ranks: 16 bytes a row) are freed on return.
    block = block.user_range(0, block.n_users)
    s0_mask = split_mask(block, key)
    s0 = block.select(s0_mask)
    no_s1 = (block.counts - s0.counts) == 0
    final = block.select(~s0_mask | block.expand(no_s1))  # Alg. 1, line 14 (S^1)
    y0 = np.array(take_rows(s0, block.y), dtype=np.float64)
    cache = block.X.nbytes <= _CACHE_SOURCE_BYTES
    X0 = None
    if cache and not fit_intercept:
        X0 = np.take(block.X, s0.source_rows(), axis=0, mode="clip")
    x_means = None
    if fit_intercept:
        # the user's means over all its rows (S^0 and S^1): estimated from twice
        # the rows, they leave more of the S^0 rows' signal than S^0 means
        # (measured: FedRep converges about twice as fast on the papers' setting)
        _center_in_place(s0, y0, user_means(block, np.asarray(take_rows(block, block.y),
                                                               dtype=np.float64)))
        Xb = take_rows(block, block.X, "s0_rows")  # the block's rows, gathered once
        if cache:  # the S^0 rows, from the gathered (cache-resident) rows
            X0 = np.take(Xb, np.flatnonzero(s0_mask), axis=0, mode="clip")
        x_means = user_means(block, np.asarray(Xb, dtype=np.float64))
        if X0 is not None:
            X0 = _center_in_place(s0, np.asarray(X0, dtype=np.float64), x_means)[0]
            x_means = None
    # the S^0 rows over the block's own S^0 arrays (X0 when cached; its X is only
    # read through s0_rows otherwise)
    local = UserBlock(y0 if X0 is None else X0, y0, None, s0.users, s0.user_hash,
                      s0.counts, s0.first_user)
    return None, BlockState(s0=s0, local=local, y0=y0, X0=X0, final=final, x_means=x_means)


def s0_rows(block, state):
    """The block's (centred) ``S^0`` rows of ``X``: the cached copy, or a gather into scratch."""
    if state.X0 is not None:
        return state.X0
    X0 = take_rows(state.s0, block.X, "s0_rows")
    if state.x_means is not None:
        if X0.dtype != np.float64:
            X0 = X0.astype(np.float64)
        # every round centres the same rows on the same means: their finiteness is
        # checked once per fit
        X0, state.extra["s0_finite"] = _center_in_place(
            state.s0, X0, state.x_means, state.extra.get("s0_finite"))
    return X0


def s0_block(block, state):
    """The block's ``S^0`` rows as a :class:`UserBlock` over (centred) arrays holding them."""
    local = state.local
    return UserBlock(s0_rows(block, state), state.y0, None, local.users, local.user_hash,
                     local.counts, local.first_user)


# --------------------------------------------------------------------------- #
# Heads
# --------------------------------------------------------------------------- #
def fit_heads(block, P, y):
    """Exact per-user least-squares heads ``argmin_v sum_r (y_r - <p_r, v>)^2``.

    Parameters
    ----------
    block : UserBlock
        The rows to fit on, grouped by user.
    P : ndarray of shape (block.n_rows, k)
        ``X @ U`` for the block's rows (canonical order).
    y : ndarray of shape (block.n_rows,)
        Their targets.

    Returns
    -------
    V : ndarray of shape (block.n_users, k)
        Zero for users without rows, for users whose projections ``P`` are not
        finite (``X U`` overflows for values near the float maximum) and for
        users whose head is not finite: a function of that user's rows only.

    Notes
    -----
    Each user's system is solved for ``P / max|P|`` and ``y / max|y|`` (no
    overflow in the ``k × k`` Grams for any finite values; the relative ridge
    of :func:`~skdpp.linear_model._heads.solve_heads` is scale invariant),
    then ``v = v' max|y| / max|P|``.
    """
    stats = head_statistics(block, P, y, center=False)
    return stats.raw_heads


@dataclass
class HeadStats:
    """Each user's sufficient statistics for its head (rescaled, overflow-free).

    With ``P' = P_c / s_p`` and ``y' = y_c / s_y`` (``P_c``, ``y_c``: the rows
    centred on the user's means when ``center``; ``s_p = max|P_c|``,
    ``s_y = max|y_c|`` per user, 1 for zeros):

    Attributes
    ----------
    counts : ndarray of shape (n_users,)
    p_mean, y_mean : ndarray of shape (n_users, k), (n_users,)
        The users' mean projection and target (original units; zeros without
        centring).
    A, r, yy : ndarray
        ``P'^T P'`` (``n × k × k``), ``P'^T y'`` (``n × k``), ``y'^T y'`` (``n``).
    sp, sy : ndarray of shape (n_users,)
    raw_heads : ndarray of shape (n_users, k)
        The least-squares heads (original units; tiny relative ridge): zero for
        users without rows or with non-finite statistics.
    bad : ndarray of shape (n_users,), bool
        Users whose projections are not finite (their heads are zero).
    """

    counts: np.ndarray
    p_mean: np.ndarray
    y_mean: np.ndarray
    A: np.ndarray
    r: np.ndarray
    yy: np.ndarray
    sp: np.ndarray
    sy: np.ndarray
    raw_heads: np.ndarray
    bad: np.ndarray


def head_statistics(block, P, y, *, center):
    """:class:`HeadStats` of the block's users from their projections ``P`` and targets."""
    n_users, k = block.n_users, P.shape[1]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        if center:
            p_mean = user_means(block, P) if k else np.zeros((n_users, 0))
            y_mean = user_means(block, y)
            c = block.uniform_count()
            if c and P.flags.c_contiguous and y.flags.c_contiguous:  # broadcast
                P = (P.reshape(n_users, c, k) - p_mean[:, None, :]).reshape(-1, k)
                y = (y.reshape(n_users, c) - y_mean[:, None]).reshape(-1)
            else:
                P = P - block.expand(p_mean)
                y = y - block.expand(y_mean)
        else:
            p_mean, y_mean = np.zeros((n_users, k)), np.zeros(n_users)
        # The targets' per-user statistics do not change between the rounds of a fit
        # (the same block and the same uncentred target array): kept on the block.
        cached = None if center else getattr(block, "_head_targets", None)
        if cached is not None and cached[0] is y:
            _, sy_, yy_clean = cached
        else:
            my = block.segment_max(np.abs(y), initial=0.0)
            sy_, yy_clean = np.where(my > 0, my, 1.0), None
        mp = block.segment_max(np.abs(P), initial=0.0) if k else np.zeros(n_users)
        sp_ = np.where(mp > 0, mp, 1.0)
        # users whose projections overflowed (inf, or NaN from inf - inf in X U)
        bad = ~np.isfinite(mp) | ~np.isfinite(sy_) | ~np.isfinite(y_mean) \
            | (~np.isfinite(p_mean).all(axis=1) if k else False)
        c = block.uniform_count()
        if c and P.flags.c_contiguous and y.flags.c_contiguous:  # broadcast, no expand
            Ps = (P.reshape(n_users, c, k) / sp_[:, None, None]).reshape(-1, k)
            ys = (y.reshape(n_users, c) / sy_[:, None]).reshape(-1)
        else:
            Ps = P / block.expand(sp_)[:, None]
            ys = y / block.expand(sy_)
        any_bad = bool(bad.any())
        if any_bad:
            rows = block.expand(bad)
            Ps[rows] = 0.0
            ys[rows] = 0.0
        A = block.gram(Ps)
        r = block.segment_sum(Ps * ys[:, None])
        yy = yy_clean if yy_clean is not None and not any_bad \
            else block.segment_sum(ys * ys)
        if not center and not any_bad:
            block._head_targets = (y, sy_, yy)
        V = solve_heads(A, r, block.counts) * (sy_ / sp_)[:, None]
    V[bad | ~np.all(np.isfinite(V), axis=1)] = 0.0
    return HeadStats(counts=block.counts.copy(), p_mean=p_mean, y_mean=y_mean, A=A, r=r,
                     yy=yy, sp=sp_, sy=sy_, raw_heads=V, bad=bad)


@dataclass(frozen=True, eq=False)
class PersonalPrior:
    """The released cold-start part and the shrinkage of the personal parts (public).

    Attributes
    ----------
    head : ndarray of shape (k,)
        Prior mean of every head (the released cold-start head).
    intercept : float
        Released cold-start intercept (the prior mean of a user's mean level
        is ``intercept + <p̄_i, head>``).
    intercept_scale : float or None
        Released radius ``R_b`` of the users' offsets (the prior variance of a
        mean level is ``2 R_b^2``; ``None``: no shrinkage of the levels).
    ridge : float
        ``personal_ridge`` (``κ``, pseudo-rows per parameter); 0 gives the
        unshrunk least-squares parts.
    fit_intercept : bool
    """

    head: np.ndarray
    intercept: float
    intercept_scale: object
    ridge: float
    fit_intercept: bool
    variance_floor: float = 0.0
    local_only: bool = False


def _noise_variance(stats, k, fit_intercept):
    """Each user's residual and target variances in the rescaled units (``y' = y_c / s_y``).

    Residual: ``RSS / (m - k - 1)`` (``m - k`` without intercept) when positive,
    else the target variance. Target: ``yy / (m - 1)`` (``yy / m`` without
    intercept). NaN for users with no variance information (one row with an
    intercept).
    """
    m = stats.counts.astype(np.float64)
    c = 1 if fit_intercept else 0
    dof = m - k - c
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rss = stats.yy - np.einsum("ij,ij->i", stats.raw_heads * (stats.sp / stats.sy)[:, None],
                                   stats.r)
        rss = np.maximum(rss, 0.0)
        total = stats.yy / np.maximum(m - c, 1.0)
        s2 = np.where(dof >= 1, rss / np.maximum(dof, 1.0), total)
    valid = m - c >= 1
    return np.where(valid, s2, np.nan), np.where(valid, total, np.nan)


def personal_parts(stats, prior):
    """Each user's personal head and intercept from its statistics and the public prior.

    The head minimises ``sum_r (y_r - b - <p_r, v>)^2 + sum_j q_ij (v_j -
    v_cold,j)^2`` with the penalties of
    :func:`~skdpp.linear_model._auto.shrinkage_penalty` (``κ k`` pseudo-rows
    scaled by the share of the user's target variance its own fit leaves
    unexplained, each with the user's own variance of that coordinate). The
    user's mean level ``a_i = b_i + <p̄_i, v_i>`` is shrunk towards the
    cold-start prediction ``b_cold + <p̄_i, v_cold>`` as in a normal-normal
    model with between-user variance ``2 R_b^2``
    (:func:`~skdpp.linear_model._auto.shrink_levels`). ``κ = 0``: the
    least-squares parts. A user whose parts are not finite gets the cold-start
    part. Scale-free: rescaling ``X`` or ``y`` rescales the parts and the
    released values alike.

    Returns
    -------
    heads : ndarray of shape (n_users, k)
    intercepts : ndarray of shape (n_users,)
    """
    k = stats.r.shape[1]
    v0 = np.asarray(prior.head, dtype=np.float64)
    kappa = float(prior.ridge)
    n = stats.counts.shape[0]
    intercept_scale = prior.intercept_scale
    if prior.local_only:
        # the released part is noise: each user's own ridge fit, shrunk towards a
        # zero head and its own mean level (local data only)
        v0, intercept_scale = np.zeros(k), None
    with np.errstate(all="ignore"):
        s2, var_y = _noise_variance(stats, k, prior.fit_intercept)  # rescaled units
        if kappa > 0:
            m = np.maximum(stats.counts, 1).astype(np.float64)
            penalty = shrinkage_penalty(kappa, k, s2, var_y,
                                        np.einsum("nii->ni", stats.A) / m[:, None],
                                        _variance_floor(stats, prior.variance_floor))
            heads = shrunk_heads(stats.A, stats.r, v0 * (stats.sp / stats.sy)[:, None],
                                 penalty, stats.counts) * (stats.sy / stats.sp)[:, None]
        else:
            heads = stats.raw_heads.copy()
        ok = np.isfinite(heads).all(axis=1) & ~stats.bad
        heads[~ok] = v0
        if not prior.fit_intercept:
            return heads, np.zeros(n)
        level = stats.y_mean  # the user's mean level a_i (least squares)
        if kappa > 0 and intercept_scale is not None:
            level = shrink_levels(level, stats.counts, s2 * stats.sy**2,
                                  prior.intercept + stats.p_mean @ v0, intercept_scale)
        intercepts = level - np.einsum("ij,ij->i", stats.p_mean, heads)
        ok &= np.isfinite(intercepts)
    heads[~ok] = v0
    intercepts[~ok] = prior.intercept
    return heads, intercepts


def heads_on(block, U):
    """Heads of the block's users from all its rows (:func:`fit_heads` of ``X U``)."""
    Xb = take_rows(block, block.X)
    with np.errstate(over="ignore", invalid="ignore"):
        P = Xb @ U
    return fit_heads(block, P, np.asarray(take_rows(block, block.y), dtype=np.float64))


def source_row_sum(block, weights, A):
    """``out[u] = sum_{r in u} w_r A[row_r]`` over the block's rows of ``A`` (one sparse product).

    ``A`` is the block's *source* (e.g. the ``S^0`` array of a :class:`BlockState`):
    the rows are not gathered.
    """
    W = sp.csr_matrix((np.asarray(weights, dtype=np.float64), block.source_rows(),
                       block.offsets), shape=(block.n_users, A.shape[0]))
    return np.asarray(W @ A)


# --------------------------------------------------------------------------- #
# Final heads, cold start and personal parts
# --------------------------------------------------------------------------- #
@dataclass
class FinalState:
    """A block's state at the end of a fit (and in ``personalize``): its users' statistics."""

    stats: HeadStats


def final_statistics(block, state, config):
    """Block function: each user's :class:`HeadStats` on its final rows.

    ``config = (U, rows, fit_intercept)``; ``rows="all"``: all of the user's
    rows; ``"holdout"``: ``S^1`` (``S^0`` for a user without ``S^1``), the
    rows of Alg. 1, line 14.
    """
    U, rows, fit_intercept = config
    fin = state.final if rows == "holdout" else block
    Xf = take_rows(fin, block.X, "final_rows")
    with np.errstate(over="ignore", invalid="ignore"):
        P = Xf @ U
    stats = head_statistics(fin, P, np.asarray(take_rows(fin, block.y), dtype=np.float64),
                            center=fit_intercept)
    return None, FinalState(stats)


#: Variance floor (standardised units) of the heads whose mean is the cold-start
#: head: larger than the personal refit's ``VARIANCE_FLOOR``, because a
#: coefficient a user's own rows leave undetermined is averaged over users and
#: then applied to every new user's rows (chosen on MovieLens, user split seed 0,
#: FedRep at epsilon=inf: with a raw timestamp column the cold-start RMSE is 1.75 /
#: 1.13 / 1.065 / 1.055 at 0.05 / 0.15 / 0.3 / 0.5, against 1.051 to 1.054 without
#: it; held out (seed 1, all users; seed 2, 300 users): 4.43 -> 1.054 and 4.53 ->
#: 1.056 with the timestamp, 1.0425 -> 1.0496 and 1.0413 -> 1.0516 without it).
#: Topping each coordinate's variance up to the floor instead of adding it was
#: worse with the timestamp (1.11, 1.30) and no better without it.
COLD_VARIANCE_FLOOR = 0.5


def _variance_floor(stats, variance_floor):
    """``variance_floor`` (standardised units) in the rescaled units of ``stats``, per coordinate."""
    return np.broadcast_to((float(variance_floor) / stats.sp ** 2)[:, None], stats.r.shape)


def cold_statistic_heads(stats, variance_floor):
    """Each user's contribution to the cold-start head.

    Features in their own units (``variance_floor == 0``): its least-squares
    head. Standardised by released feature scales (``variance_floor > 0``, the
    personal refit's floor): its ridge head with :data:`COLD_VARIANCE_FLOOR`
    pseudo-variance per coordinate, ``(P_c^T P_c + floor n_i I) v = P_c^T y_c``.
    A coordinate nearly constant within a user (a rating session's timestamp)
    leaves its least-squares coefficient undetermined (any value fits), and
    the mean of such heads extrapolates for every new user; with the floor
    such coordinates get about 0. Each head depends on its user's rows only,
    so the sensitivity of the clipped sum is unchanged.
    """
    if not variance_floor:
        return stats.raw_heads
    with np.errstate(all="ignore"):
        m = np.maximum(stats.counts, 1).astype(np.float64)[:, None]
        penalty = _variance_floor(stats, COLD_VARIANCE_FLOOR) * m  # in P' units
        heads = shrunk_heads(stats.A, stats.r, np.zeros(stats.r.shape[1]), penalty,
                             stats.counts) * (stats.sy / stats.sp)[:, None]
    heads[stats.bad | ~np.all(np.isfinite(heads), axis=1)] = 0.0
    return heads


def _head_norms(block, state, variance_floor):
    return unit_rows(cold_statistic_heads(state.stats, variance_floor))[1], state


def _clipped_heads(block, state, config):
    clip, variance_floor = config
    return clip_by_norm(cold_statistic_heads(state.stats, variance_floor), clip).sum(axis=0), \
        state


def _offsets(block, state, config):
    """Block function: ``fn`` of the users' offsets ``ȳ_i - <p̄_i, v_cold>``."""
    head, fn = config
    stats = state.stats
    with np.errstate(over="ignore", invalid="ignore"):
        values = stats.y_mean - stats.p_mean @ head
    values = np.where(stats.bad | (stats.counts == 0), np.nan, values)
    return fn(values), state


def _personal_block(block, state, prior):
    return personal_parts(state.stats, prior)


def cold_head_shrinkage(head, sigma):
    """``max(0, 1 - k sigma^2 / ||head||^2) * head``: a released mean of ``k``
    coordinates, each with public noise std ``sigma``, shrunk towards 0.

    A positive-part James-Stein-type factor (``k`` instead of ``k - 2``: also
    for one or two coordinates, and more conservative): a head dominated by
    its noise becomes 0 and the cold start falls back to the released
    intercept (the users' mean level). Post-processing of a released value.
    """
    head = np.asarray(head, dtype=np.float64)
    with np.errstate(all="ignore"):
        norm2 = float(head @ head)
        factor = 1.0 - head.shape[0] * float(sigma) ** 2 / norm2 if norm2 > 0 else 0.0
    if not np.isfinite(factor):
        factor = 0.0
    return max(factor, 0.0) * head


def final_heads(executor, release, U, *, rows, fit_intercept, head_clip_norm, cold_start,
                personal_ridge, clip_quantile, n_users, variance_floor=0.0, local_only=False):
    """The end of a fit: final heads, cold start (head and intercept), personal parts.

    1. Each user's least-squares head (Alg. 1, line 14) on its final rows
       (``rows="holdout"``: ``S^1``; ``"all"``: all its rows), centred on its
       own means with ``fit_intercept``.
    2. ``head_clip_norm="auto"``: the ``clip_quantile`` of the heads' norms
       (phase ``"clip"``).
    3. Cold-start head: the released ``sum_i clip(v_i, C_head)`` (Gaussian,
       sensitivity ``2 C_head``, phase ``"cold_start"``) over the public ``n``.
    4. Cold-start intercept (``fit_intercept``): the private location
       (:func:`~skdpp.privacy._quantile.private_location`) of the users' offsets
       ``ȳ_i - <p̄_i, v_cold>``: searches in phase ``"clip"``, a clipped mean
       in ``"cold_start"``.
    5. Personal parts (:func:`personal_parts`), shrunk towards the released
       cold-start part with ``personal_ridge``: post-processing.

    Returns
    -------
    heads, intercepts, cold_head, cold_intercept, head_clip
    """
    k = U.shape[1]
    executor.map(final_statistics, (U, rows, fit_intercept))
    if head_clip_norm == "auto" and cold_start:
        head_clip_norm = auto_bound(executor, release, _head_norms, variance_floor,
                                    quantile=clip_quantile, n_users=n_users)
    cold_head, cold_intercept, intercept_scale = np.zeros(k), 0.0, None
    if cold_start:
        total = executor.map(_clipped_heads, (head_clip_norm, variance_floor))
        sensitivity = None if head_clip_norm is None else 2.0 * head_clip_norm
        noisy = release.gaussian("cold_start", total, sensitivity=sensitivity,
                                 clip_norm=head_clip_norm)
        cold_head = noisy / max(n_users, 1)  # division by the public n: post-processing
        if at_grid_edge(head_clip_norm):  # the heads are about 0: no information
            cold_head = np.zeros(k)
        elif sensitivity is not None:
            # shrunk towards 0 (the intercept-only cold start) by its public
            # noise: positive-part factor 1 - k sigma^2 / ||v||^2 (post-processing)
            sigma = float(release.noise_multiplier("cold_start")) * sensitivity / max(n_users, 1)
            cold_head = cold_head_shrinkage(cold_head, sigma)
        if fit_intercept:
            def reduce(fn):
                return executor.map(_offsets, (cold_head, fn))

            cold_intercept, intercept_scale = private_location(
                release, reduce, n_users=n_users, search_phase=CLIP_PHASE,
                mean_phase="cold_start", radius_quantile=clip_quantile)
    prior = PersonalPrior(cold_head, float(cold_intercept), intercept_scale,
                          float(personal_ridge), bool(fit_intercept), float(variance_floor),
                          bool(local_only))
    heads, intercepts = executor.collect(_personal_block, prior)
    return heads, intercepts, cold_head, float(cold_intercept), head_clip_norm, prior


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
# The estimators' shared plumbing
# --------------------------------------------------------------------------- #
def _clip_constraint():
    return [Interval(Real, 0, None, closed="neither"), None, StrOptions({"auto"})]


def _common_constraints():
    return {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions(set(_INIT_OPTIONS)), "array-like"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "personal_rows": [StrOptions({"all", "holdout"})],
        "personal_ridge": [Interval(Real, 0, None, closed="left")],
        "clip_norm": _clip_constraint(),
        "init_clip_norm": _clip_constraint(),
        "head_clip_norm": _clip_constraint(),
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "clip_share": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "init_share": [Interval(Real, 0, 1, closed="left")],
        "cold_start_share": [Interval(Real, 0, 1, closed="left")],
        "batch_mode": [StrOptions({"same", "disjoint"})],
        "verbose": ["verbose"],
    }


class _RepresentationMixin:
    """Plumbing shared by the two shared-representation regressors (not public).

    Subclasses implement ``_iterate`` (the private iterations), ``_notes``,
    ``_n_iteration_releases`` and ``_auto_bound_names``; this mixin validates
    the representation parameters, plans the budget (``clip``, ``init``,
    ``iterations``, ``cold_start``), runs the rest of the core (split,
    initialisation, final heads, cold start, personal parts) and provides
    ``predict`` and the ``personalize`` hook.
    """

    _personal_attributes = ("heads_", "intercepts_")
    _scale_param_names = ()

    # ----------------------------------------------------------- validation
    def _validate_fit_data(self, X, y, groups):
        # scikit-learn's finiteness check sums X first (overflow ignored, but
        # inf + -inf warns "invalid value"): a warning that would depend on one
        # user's near-maximal values. The element-wise check that follows still
        # rejects NaN and inf.
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        data.y = np.asarray(data.y, dtype=np.float64)
        self._check_params_for_data(data.meta["n_features"])
        return data

    def _check_params_for_data(self, n_features):
        k = self.n_components
        if k > n_features:
            raise ValueError(
                f"n_components={k} must be <= n_features={n_features} (the shared "
                f"embedding U is n_features x n_components with orthonormal columns). "
                f"Pass n_components <= {n_features}."
            )
        if self.epsilon != np.inf:
            for name in self._clip_param_names:
                if getattr(self, name) is None:
                    raise ValueError(
                        f"{name}=None (no clipping) gives unbounded sensitivity and is "
                        f"only allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. "
                        f"Pass a positive {name}, or 'auto'."
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

    def _cold_start(self):
        return self.cold_start_share > 0

    def _init_clip_param(self):
        """The parameter bounding the private initialisation's contributions (or None)."""
        if not self._private_init():
            return None
        return "init_clip_norm" if self.init == "private_spectral" else \
            self._pairwise_label_clip

    def _auto_bound_names(self):
        """The ``"auto"`` bounds this fit resolves (each one private quantile)."""
        names = [name for name in self._iteration_auto_params() if getattr(self, name) == "auto"]
        init = self._init_clip_param()
        if init is not None and getattr(self, init) == "auto" and init not in names:
            names.append(init)
        if self.head_clip_norm == "auto" and self._cold_start():
            names.append("head_clip_norm")
        return names

    def _releases_label_range(self):
        """Whether the fit releases a label range (and clamps its predictions to it):
        when every clip bound is ``"auto"`` (a public rule: explicit bounds are in
        the caller's units)."""
        return bool(_auto.SCALE_FEATURES) and all(
            getattr(self, name) == "auto" for name in self._clip_param_names)

    def _scales_features(self):
        """Whether the fit standardises the features by released per-feature scales:
        with a label range, when the public gate of ``_budget_plan`` is open."""
        return self._releases_label_range() and getattr(self, "_scaling_gate", True)

    def _n_clip_releases(self, n_features=0):
        n = AUTO_STEPS * len(self._auto_bound_names())
        if self._releases_label_range():
            n += LABEL_RANGE_STEPS
        if self._scales_features():
            n += FEATURE_SCALE_STEPS * int(n_features)
        if self.fit_intercept and self._cold_start():
            n += LOCATION_SEARCH_STEPS
        return n

    # ---------------------------------------------------------- budget plan
    def _budget_plan(self, meta):
        """Phases ``clip`` (``clip_share``: the private quantiles of the ``"auto"``
        bounds and of the cold-start intercept's searches), ``init``
        (``init_share``, private inits only), ``iterations`` (the rest,
        ``_n_iteration_releases()`` Gaussian releases) and ``cold_start``
        (``cold_start_share``: the head, and the intercept with
        ``fit_intercept``). ``clip_share="auto"``:
        :func:`~skdpp.linear_model._auto.resolve_clip_share` (public values)."""
        plans = {}

        def build(share):  # one plan per share: the one calibrated by the rule is reused
            if share not in plans:
                plans[share] = self._plan_with_clip_share(share)
            return plans[share]

        self._plan_features = int(meta["n_features"])
        self._scaling_gate = True
        if not self._n_clip_releases(self._plan_features):
            return build(0.05)
        plan = build(resolve_clip_share(self.clip_share, build, meta["n_users"]))
        if self._scales_features():
            # Public rule: the per-feature scales need accurate searches; when
            # the plan's count noise exceeds SCALE_GATE_NOISE * n_users the fit
            # runs without them (fewer releases in phase "clip").
            calibrated = plan.calibrate()
            if calibrated[CLIP_PHASE] > _auto.SCALE_GATE_NOISE * max(meta["n_users"], 1):
                self._scaling_gate = False
                plans.clear()
                plan = build(resolve_clip_share(self.clip_share, build, meta["n_users"]))
        return plan

    def _plan_with_clip_share(self, clip_share):
        plan = BudgetPlan(self.epsilon, self.delta)
        n_clip = self._n_clip_releases(getattr(self, "_plan_features", 0))
        if n_clip:
            plan.add(CLIP_PHASE, share=clip_share, count=n_clip, param="clip_share")
        if self._private_init():
            if self.init_share == 0:
                raise ValueError(
                    f"init={self.init!r} releases a private statistic and needs a positive "
                    f"init_share; got init_share=0. Pass init_share > 0, or init='random' "
                    f"/ an array."
                )
            plan.add("init", share=self.init_share, param="init_share")
        plan.add_rest("iterations", count=self._n_iteration_releases())
        plan.add("cold_start", share=self.cold_start_share, param="cold_start_share",
                 count=1 + int(bool(self.fit_intercept)))
        return plan

    # ------------------------------------------------------------- the core
    def _fit_core(self, executor, release, randomness, meta):
        """Split, initialise, iterate (subclass), final heads and cold start.

        Subclasses provide ``_iterate(executor, release, U0, key, meta) ->
        (U, bounds)`` (``bounds``: the resolved iteration clip bounds),
        ``_notes()``, optionally ``_prepare(executor, key)`` (more per-block
        state), ``_init_statistic`` (the per-user statistic of an ``"auto"``
        initialisation bound) and ``_pairwise_label_clip`` (the parameter used
        as ``ζ`` by ``init="private_pairwise"``).
        """
        key = randomness.key
        n_users = meta["n_users"]
        fit_intercept = bool(self.fit_intercept)
        scales, dropped, labels, scaled = None, 0, None, self._scales_features()
        labelled = self._releases_label_range()
        clip_noise = release.noise_multiplier(CLIP_PHASE) if CLIP_PHASE in release.plan \
            else None
        message = useless_fit_message(clip_noise, n_users, type(self).__name__)
        if message is not None:
            warnings.warn(message, UselessFitWarning, stacklevel=4)
        local_only = labelled and message is not None
        try:
            if labelled:
                labels = label_range(executor, release, n_users=n_users)
            if scaled:
                scales, dropped = feature_scales(executor, release,
                                                 n_features=meta["n_features"],
                                                 n_users=n_users)
                executor.map(standardize_block, inverse_scales(scales))
            executor.map(prepare_split, (key, fit_intercept))  # S^0 / S^1, centring
            self._prepare(executor, key)
            bounds = {}
            init_param = self._init_clip_param()
            init_kind = self.init if isinstance(self.init, str) else None
            init_clip = getattr(self, init_param) if init_param else None
            if init_clip == "auto":
                init_clip = auto_bound(executor, release, _init_statistic, self.init,
                                       quantile=_INIT_QUANTILE_FACTOR * self.clip_quantile,
                                       n_users=n_users)
            if init_param:
                bounds[init_param] = init_clip
            U0 = initial_components(
                executor, release, init=self.init, n_components=self.n_components,
                n_features=meta["n_features"],
                clip_norm=init_clip if init_kind == "private_spectral" else None,
                label_clip=init_clip if init_kind == "private_pairwise" else None,
                rng=randomness.public)
            release_scratch()  # each phase gathers into its own buffers: free them
            U, iteration_bounds = self._iterate(executor, release, U0, key, meta, bounds)
            bounds.update(iteration_bounds)
            release_scratch()
            heads, intercepts, head, intercept, head_clip, prior = final_heads(
                executor, release, U, rows=self.personal_rows, fit_intercept=fit_intercept,
                head_clip_norm=self.head_clip_norm, cold_start=self._cold_start(),
                personal_ridge=float(self.personal_ridge),
                clip_quantile=float(self.clip_quantile), n_users=n_users,
                variance_floor=VARIANCE_FLOOR if scaled else 0.0, local_only=local_only)
            bounds["head_clip_norm"] = head_clip
        finally:
            release_scratch()
        attributes = {"components_": U, "heads_": heads, "intercepts_": intercepts,
                      "cold_start_head_": head, "cold_start_intercept_": intercept,
                      "intercept_clip_": prior.intercept_scale, "n_iter_": int(self.max_iter),
                      "feature_scales_": scales,
                      "label_range_": labels,
                      "local_only_": bool(local_only)}
        for name in self._clip_param_names + self._scale_param_names:
            value = bounds.get(name, getattr(self, name))
            attributes[f"{name}_"] = None if value is None or isinstance(value, str) \
                else float(value)
        released = ("components_", "cold_start_head_")
        if fit_intercept and self._cold_start():
            released += ("cold_start_intercept_",)
        released += tuple(f"{name}_" for name in self._auto_bound_names())
        if fit_intercept and self._cold_start():
            released += ("intercept_clip_",)
        notes = self._notes() + self._common_notes()
        if labelled:
            released += ("feature_scales_",) * scaled + ("label_range_",)
            notes += scaling_notes(scaled, dropped, labels, bounds, message)
        return FitResult(attributes, released=released, local=("heads_", "intercepts_"),
                         notes=notes)

    def _common_notes(self):
        notes = []
        if self._auto_bound_names():
            notes.append(
                f"{', '.join(self._auto_bound_names())}='auto': each bound is the "
                f"{self.clip_quantile:g}-quantile of a per-user statistic, released by a "
                f"noisy bisection over a public log grid ({AUTO_STEPS} Gaussian counts of "
                f"sensitivity 1, phase 'clip').")
        if self.fit_intercept and self._cold_start():
            notes.append(
                "fit_intercept=True: every contribution is computed on the user's rows "
                "centred on the user's own means; the cold-start intercept is a private "
                "location of the users' offsets (median searches in phase 'clip', a "
                "clipped mean of sensitivity 2*radius in phase 'cold_start').")
        return tuple(notes)

    def _prepare(self, executor, key):
        """More per-block state after the split (none by default)."""

    # ------------------------------------------------------------ personal
    def _prior(self):
        """The public prior of the personal parts, from the fitted (released) values."""
        scaled = getattr(self, "feature_scales_", None) is not None
        return PersonalPrior(self.cold_start_head_, float(self.cold_start_intercept_),
                             getattr(self, "intercept_clip_", None), float(self.personal_ridge),
                             bool(self.fit_intercept), VARIANCE_FLOOR if scaled else 0.0,
                             bool(getattr(self, "local_only_", False)))

    def _fit_personal(self, X, y, index):
        """Personal parts of the users of ``index`` from all their rows and the released part.

        The same block functions as the end of ``fit`` (:func:`final_statistics`,
        :func:`personal_parts`), on all the given rows.
        """
        y = np.asarray(y, dtype=np.float64)
        if getattr(self, "feature_scales_", None) is not None:
            X = standardize(X, inverse_scales(self.feature_scales_))
        executor = LocalExecutor(make_blocks(X, y, index))
        executor.map(final_statistics, (self.components_, "all", bool(self.fit_intercept)))
        heads, intercepts = executor.collect(_personal_block, self._prior())
        release_scratch()
        return {"heads_": heads, "intercepts_": intercepts}

    # -------------------------------------------------------------- predict
    def predict(self, X, groups=None):
        """Predict with each known user's part, the cold-start part for unseen users.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` (or added by
            ``personalize``) use ``b_i + x^T U v_i``; other rows (and all rows
            when ``groups=None``) use the cold-start part
            ``b_cold + x^T U v_cold``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            If a prediction exceeds the float64 range (about 1.8e308) for
            finite ``X``; the error names the rows. Products that overflow
            only in an intermediate (``x^T U``) are re-evaluated on the row
            divided by its largest entry
            (:func:`skdpp.base.linear_predictions`).
        """
        return self._predict_unchecked(X, groups)

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the floating-point guard and the finiteness check."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if getattr(self, "feature_scales_", None) is not None:
            X = standardize(X, inverse_scales(self.feature_scales_))
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        H = np.empty((X.shape[0], self.components_.shape[1]))
        H[known] = self.heads_[codes[known]]
        H[~known] = self.cold_start_head_
        b = np.where(known, self.intercepts_[np.maximum(codes, 0)], self.cold_start_intercept_)
        pred = np.einsum("ij,ij->i", X @ self.components_, H) + b
        return clamp_predictions(linear_predictions(
            X, pred, lambda rows: ((H[rows] @ self.components_.T)[:, None, :], b[rows, None])),
            getattr(self, "label_range_", None),
            ~known if getattr(self, "local_only_", False) else None)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        return tags


def _init_statistic(block, state, init):
    """Per-user statistic of an ``"auto"`` initialisation bound (``S^0`` rows, centred).

    ``"private_spectral"``: ``||Z_i||_F``; ``"private_pairwise"``: the root
    mean square of the user's targets (the label clip ``ζ``).
    """
    from ._spectral_init import spectral_statistic

    rows = s0_block(block, state)
    if init == "private_spectral":
        # the Grams' (nu, fast) are kept for the release pass (_spectral_block)
        routes = state.extra.setdefault("spectral_routes", {})
        return spectral_statistic(rows, None, norms_only=True, routes=routes)[1], state
    return rms_per_user(rows, rows.y), state
