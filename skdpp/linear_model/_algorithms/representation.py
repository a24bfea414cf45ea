"""The start and end of a fit shared by FedRep and Priv-AltMin (model ``y ≈ b_i +
<x, U v_i>``, ``U`` released): :func:`plan`, :func:`start` (label range, scales,
the ``S^0`` / ``S^1`` split, ``U_0``), then their iterations, then :func:`finish`
(Snedeker et al. 2025, Alg. 1, line 14, the cold start, the personal parts).
"""

import warnings
from dataclasses import dataclass, field, fields

import numpy as np
from scipy import stats

from ...base import FitResult
from ...exceptions import UselessFitWarning
from ...privacy import BudgetPlan
from ...privacy._clipping import FLOAT_MAX as _FLOAT_MAX
from ...privacy._clipping import clip_by_norm, unit_rows
from ...utils._executor import LocalExecutor
from ...utils._grouped import UserBlock, make_blocks
from .. import _auto
from .._auto import (
    AUTO_STEPS, CLIP_PHASE, COLD_START_CLIP_RELEASES, FEATURE_SCALE_STEPS, LABEL_RANGE_STEPS,
    VARIANCE_FLOOR, at_grid_edge, auto_bound, auto_bounds_note, cold_start_levels,
    fallback_plan, feature_scales, gated_plan, head_votes, inverse_scales, label_range,
    own_label_ranges, rms_per_user, scaling_notes, shrink_levels, shrinkage_penalty,
    standardize, standardize_block, useless_fit_message, user_means)
from .._heads import shrunk_heads, solve_heads
from .spectral_init import initial_components, spectral_statistic

#: Default ``budget_shares`` (``"iterations"`` takes the rest).
DEFAULT_SHARES = {"clip": "auto", "init": 0.1, "cold_start": 0.02}

#: The "auto" initialisation bound: the ``clip_quantile * 0.5`` quantile (:ref:`auto_rules`).
_INIT_QUANTILE_FACTOR = 0.5


def _center_in_place(block, A, means):
    """``A -= means`` of each row's user, overflows clamped to the float range."""
    with np.errstate(over="ignore", invalid="ignore"):
        A -= block.expand(means)
        # a finite sum proves every entry finite (one read pass, no n x d mask)
        finite = bool(np.isfinite(A.sum()) or np.isfinite(A).all())
    if not finite:  # (the identity on finite entries)
        np.nan_to_num(A, copy=False, nan=0.0, posinf=_FLOAT_MAX, neginf=-_FLOAT_MAX)
    return A


@dataclass
class BlockState:
    """A block's state: ``s0`` (its ``S^0`` rows), ``local`` (the same users over the
    block's own, centred ``S^0`` arrays ``X0``, ``y0``), ``final`` (rows of the final
    heads: ``S^1``, or ``S^0`` without ``S^1``), ``extra`` (algorithm-specific)."""

    s0: UserBlock
    local: UserBlock
    X0: np.ndarray
    y0: np.ndarray
    final: UserBlock
    extra: dict = field(default_factory=dict)


def prepare_split(block, state, config):
    """Block function: the :class:`BlockState` of the ``S^0`` / ``S^1`` split (Snedeker
    et al. 2025, Alg. 1, preamble): each user's ``ceil(m / 2)`` rows of smallest
    keyed uniforms; ``fit_intercept``: ``S^0`` centred on the user's means over all
    its rows (profiling out ``b = ȳ - <x̄, U v>``; FedRep converges twice as fast)."""
    key, fit_intercept = config
    # a throw-away view: its cached per-row arrays are freed on return
    block = block.user_range(0, block.n_users)
    s0_mask = block.split_users_rows(0.5, block.row_uniforms(key, "split"))
    s0 = block.select(s0_mask)
    no_s1 = (block.counts - s0.counts) == 0
    final = block.select(~s0_mask | block.expand(no_s1))  # Alg. 1, line 14 (S^1)
    y0 = np.array(s0.take(block.y), dtype=np.float64)
    if not fit_intercept:
        X0 = np.take(block.X, s0.source_rows(), axis=0, mode="clip")
    else:
        _center_in_place(s0, y0, user_means(block, np.asarray(block.take(block.y),
                                                               dtype=np.float64)))
        Xb = block.take(block.X)  # the block's rows, gathered once
        X0 = np.take(Xb, np.flatnonzero(s0_mask), axis=0, mode="clip")
        X0 = _center_in_place(s0, np.asarray(X0, dtype=np.float64),
                              user_means(block, np.asarray(Xb, dtype=np.float64)))
    local = UserBlock(X0, y0, None, s0.users, s0.user_hash, s0.counts, s0.first_user)
    return None, BlockState(s0=s0, local=local, X0=X0, y0=y0, final=final)


def fit_heads(block, P, y):
    """Per-user least-squares heads from the block's rows of ``P = X U`` and ``y``
    (:func:`head_statistics`; zero without rows or if not finite)."""
    return head_statistics(block, P, y, center=False).raw_heads


@dataclass
class HeadStats:
    """Each user's head statistics on ``P' = P_c / sp``, ``y' = y_c / sy`` (``sp``, ``sy``:
    max magnitudes): ``A = P'^T P'``, ``r = P'^T y'``, ``yy = y'^T y'``; means and
    ``raw_heads`` in original units; ``bad``: non-finite projections."""

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
            P = P - block.expand(p_mean)
            y = y - block.expand(y_mean)
        else:
            p_mean, y_mean = np.zeros((n_users, k)), np.zeros(n_users)
        my = block.segment_max(np.abs(y), initial=0.0)
        sy_ = np.where(my > 0, my, 1.0)
        mp = block.segment_max(np.abs(P), initial=0.0) if k else np.zeros(n_users)
        sp_ = np.where(mp > 0, mp, 1.0)
        # users whose projections overflowed (inf, or NaN from inf - inf in X U)
        bad = ~np.isfinite(mp) | ~np.isfinite(sy_) | ~np.isfinite(y_mean) \
            | (~np.isfinite(p_mean).all(axis=1) if k else False)
        Ps = P / block.expand(sp_)[:, None]
        ys = y / block.expand(sy_)
        if bad.any():
            rows = block.expand(bad)
            Ps[rows] = 0.0
            ys[rows] = 0.0
        A = block.gram(Ps)
        r = block.segment_sum(Ps * ys[:, None])
        yy = block.segment_sum(ys * ys)
        V = solve_heads(A, r, block.counts) * (sy_ / sp_)[:, None]
    V[bad | ~np.all(np.isfinite(V), axis=1)] = 0.0
    return HeadStats(counts=block.counts.copy(), p_mean=p_mean, y_mean=y_mean, A=A, r=r,
                     yy=yy, sp=sp_, sy=sy_, raw_heads=V, bad=bad)


@dataclass(frozen=True, eq=False)
class PersonalPrior:
    """The public prior of the personal parts: the released cold-start ``head`` and
    ``intercept``, ``intercept_scale`` (``R_b``; None: levels not shrunk), ``ridge``
    (``κ``; 0: least squares), ``variance_floor`` and ``local_only`` (the fallback)."""

    head: np.ndarray
    intercept: float
    intercept_scale: object
    ridge: float
    fit_intercept: bool
    variance_floor: float = 0.0
    local_only: bool = False


def _noise_variance(stats, k, fit_intercept):
    """Each user's residual and target variances in rescaled units (NaN if ``m <= c``)."""
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
    """``(heads, intercepts)``: heads minimise ``sum_r (y_r - b - <p_r, v>)^2 + sum_j q_ij
    (v_j - v_cold,j)^2`` (:func:`~skdpp.linear_model._auto.shrinkage_penalty`), levels
    shrunk by :func:`~skdpp.linear_model._auto.shrink_levels`; non-finite: the prior."""
    k = stats.r.shape[1]
    v0 = np.asarray(prior.head, dtype=np.float64)
    kappa = float(prior.ridge)
    n = stats.counts.shape[0]
    intercept_scale = prior.intercept_scale
    if prior.local_only:
        # the released part is noise: shrink towards a zero head and the own mean
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


@dataclass
class FinalState:
    """A block's state at the end of a fit and in ``personalize``."""

    stats: HeadStats


def final_statistics(block, state, config):
    """Block function: each user's :class:`HeadStats` on ``rows`` ``"all"`` or
    ``"holdout"`` (``BlockState.final``: Alg. 1, line 14)."""
    U, rows, fit_intercept = config
    fin = state.final if rows == "holdout" else block
    with np.errstate(over="ignore", invalid="ignore"):
        P = fin.take(block.X) @ U
    stats = head_statistics(fin, P, np.asarray(fin.take(block.y), dtype=np.float64),
                            center=fit_intercept)
    return None, FinalState(stats)


#: Variance floor (standardised units) of the heads averaged into the cold-start head
#: (measured: :ref:`auto_rules`).
COLD_VARIANCE_FLOOR = 0.5


def _variance_floor(stats, variance_floor):
    """``variance_floor`` (standardised units) in the rescaled units of ``stats``."""
    return np.broadcast_to((float(variance_floor) / stats.sp ** 2)[:, None], stats.r.shape)


def cold_statistic_heads(stats, floored):
    """Each user's contribution to the cold-start head: its least-squares head, or if
    ``floored`` (scaled features) its ridge head ``(P_c^T P_c + floor n_i I) v = P_c^T
    y_c`` (:data:`COLD_VARIANCE_FLOOR`). The user's rows only: sensitivity unchanged."""
    if not floored:
        return stats.raw_heads
    with np.errstate(all="ignore"):
        m = np.maximum(stats.counts, 1).astype(np.float64)[:, None]
        penalty = _variance_floor(stats, COLD_VARIANCE_FLOOR) * m  # in P' units
        heads = shrunk_heads(stats.A, stats.r, np.zeros(stats.r.shape[1]), penalty,
                             stats.counts) * (stats.sy / stats.sp)[:, None]
    heads[stats.bad | ~np.all(np.isfinite(heads), axis=1)] = 0.0
    return heads


def _head_norms(block, state, floored):
    return unit_rows(cold_statistic_heads(state.stats, floored))[1], state


def _clipped_heads(block, state, config):
    clip, floored = config
    return clip_by_norm(cold_statistic_heads(state.stats, floored), clip).sum(axis=0), state


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


#: Level of the test keeping a released cold-start head (:ref:`auto_rules`).
COLD_HEAD_LEVEL = 0.01


def cold_head_shrinkage(head, sigma):
    """A released ``k``-vector of public noise std ``sigma``: 0 unless ``||head||^2 >
    sigma^2 chi2_k(1 - COLD_HEAD_LEVEL)``, else times ``1 - k sigma^2 / ||head||^2``."""
    head = np.asarray(head, dtype=np.float64)
    k = head.shape[0]
    with np.errstate(all="ignore"):
        norm2 = float(head @ head)
        noise2 = float(sigma) ** 2
        significant = norm2 > noise2 * float(stats.chi2.ppf(1.0 - COLD_HEAD_LEVEL, k))
        factor = 1.0 - k * noise2 / norm2 if norm2 > 0 and significant else 0.0
    if not np.isfinite(factor):
        factor = 0.0
    return max(factor, 0.0) * head


def _cold_head(executor, release, head_clip_norm, floored, n_users, k):
    """The cold-start head: the released ``sum_i clip(v_i, C_head)`` (sensitivity ``2
    C_head``) over the public ``n``, shrunk by its public noise (post-processing)."""
    total = executor.map(_clipped_heads, (head_clip_norm, floored))
    sensitivity = None if head_clip_norm is None else 2.0 * head_clip_norm
    noisy = release.gaussian("cold_start", total, sensitivity=sensitivity,
                             clip_norm=head_clip_norm)
    if at_grid_edge(head_clip_norm):  # the heads are about 0: no information
        return np.zeros(k)
    cold_head = noisy / max(n_users, 1)  # division by the public n: post-processing
    if sensitivity is None:
        return cold_head
    noise_std = float(release.noise_multiplier("cold_start")) * sensitivity
    return cold_head_shrinkage(cold_head, noise_std / max(n_users, 1))


@dataclass(frozen=True, eq=False)
class Round:
    """The broadcast of round ``t``: ``U``, the fit's key, its public ``config`` and the
    iterations' resolved ``bounds`` (empty while they are resolved)."""

    U: np.ndarray
    t: int
    key: np.ndarray
    config: object
    bounds: dict


def round_heads(state, U, rows):
    """``(P, V)``: ``P = X0 U`` on the block's ``S^0`` rows, ``V`` the heads fitted on
    ``rows`` (a selection of them)."""
    with np.errstate(over="ignore", invalid="ignore"):
        P = state.X0 @ U
    return P, fit_heads(rows, rows.take(P), rows.take(state.y0))


def label_statistic(block, state, _=None):
    """Block function: each user's RMS of its (centred) ``S^0`` targets."""
    return rms_per_user(state.local, state.y0), state


def _init_statistic(block, state, init):
    """Per-user statistic of an ``"auto"`` initialisation bound on ``S^0``."""
    if init == "private_spectral":
        return spectral_statistic(state.local, None, norms_only=True)[1], state
    return label_statistic(block, state)


@dataclass(frozen=True, eq=False)
class RepresentationConfig:
    """The parameters of a FedRep / AltMin fit; subclasses add fields and set
    ``clip_names``, ``scale_names`` (reported as ``<name>_``), ``iteration_bounds`` and
    ``pairwise_label_clip`` (``ζ`` of ``init="private_pairwise"``)."""

    epsilon: float
    delta: float
    n_components: int
    init: object
    max_iter: int
    fit_intercept: bool
    personal_rows: str
    personal_ridge: float
    clip_norm: object
    init_clip_norm: object
    head_clip_norm: object
    clip_quantile: float
    shares: dict
    batch_mode: str
    verbose: int

    clip_names = ()
    scale_names = ()
    iteration_bounds = ()
    pairwise_label_clip = "init_clip_norm"  # ζ of Jain et al.'s Alg. 3 (FedRep's default)

    @classmethod
    def from_params(cls, params, shares):
        names = {f.name for f in fields(cls)} - {"shares"}
        return cls(shares=shares, **{name: params[name] for name in names})

    @property
    def private_init(self):
        return isinstance(self.init, str) and self.init.startswith("private")

    @property
    def cold_start(self):
        return self.shares["cold_start"] > 0

    @property
    def init_clip_param(self):
        if not self.private_init:
            return None
        return "init_clip_norm" if self.init == "private_spectral" else self.pairwise_label_clip

    @property
    def auto_bound_names(self):
        names = [n for n in self.iteration_bounds * (self.max_iter > 0)
                 if getattr(self, n) == "auto"]
        init = self.init_clip_param
        if init is not None and getattr(self, init) == "auto" and init not in names:
            names.append(init)
        if self.head_clip_norm == "auto" and self.cold_start:
            names.append("head_clip_norm")
        return names

    @property
    def label_range(self):
        """Whether the fit releases a label range (every clip bound ``"auto"``)."""
        return bool(_auto.SCALE_FEATURES) and all(
            getattr(self, name) == "auto" for name in self.clip_names)


def _clip_releases(config, n_features, scaled):
    """Releases of phase ``"clip"``."""
    return (AUTO_STEPS * len(config.auto_bound_names)
            + LABEL_RANGE_STEPS * config.label_range
            + FEATURE_SCALE_STEPS * int(n_features) * scaled
            + COLD_START_CLIP_RELEASES * (bool(config.fit_intercept) and config.cold_start))


def _plan(config, clip_share, n_clip, iteration_releases):
    shares = config.shares
    plan = BudgetPlan(config.epsilon, config.delta)
    if n_clip:
        if clip_share == 0:
            raise ValueError(
                f"budget_shares['clip']=0 leaves no budget for the {n_clip} private "
                f"searches of the 'auto' bounds {config.auto_bound_names}. Pass a share "
                f"in (0, 1) or 'auto', or numeric bounds.")
        plan.add(CLIP_PHASE, share=clip_share, count=n_clip, param="budget_shares['clip']")
    if config.private_init:
        if shares["init"] == 0:
            raise ValueError(
                f"init={config.init!r} releases a private statistic and needs a positive "
                f"budget_shares['init']; got 0. Pass a share in (0, 1), or init='random' "
                f"/ an array.")
        plan.add("init", share=shares["init"], param="budget_shares['init']")  # start()
    plan.add_rest("iterations", count=iteration_releases)
    plan.add("cold_start", share=shares["cold_start"], param="budget_shares['cold_start']",
             count=1 + 2 * int(bool(config.fit_intercept)))  # finish()
    return plan


def plan(config, meta, *, iteration_releases):
    """``(plan, scaled)``: phases ``clip``, ``init``, ``iterations``
    (``iteration_releases``, the rest) and ``cold_start``; ``scaled``: the feature
    scales' gate (:func:`~skdpp.linear_model._auto.gated_plan`). Public inputs only."""
    n_users, n_features = meta["n_users"], int(meta["n_features"])
    result, scaled = gated_plan(
        lambda share, n_clip: _plan(config, share, n_clip, iteration_releases),
        config.shares["clip"], n_users, _clip_releases(config, n_features, False),
        FEATURE_SCALE_STEPS * n_features, config.label_range)
    if config.label_range:  # predicted useless: fallback_fit's plan
        result = fallback_plan(result, n_users, config.owner,
                               level=config.fit_intercept and config.cold_start)
    return result, scaled


@dataclass
class Start:

    U0: np.ndarray
    bounds: dict
    scaled: bool
    labels: object
    scales: object
    dropped: int


def start(executor, release, randomness, meta, config):
    """Label range and feature scales (phase ``clip``), the split, ``U_0`` (phase ``init``:
    Snedeker et al. 2025, Alg. 2, or Jain et al. 2021, Alg. 3)."""
    n_users = meta["n_users"]
    # whether plan() kept the feature scales, read off the (public) plan
    counts = {p.name: p.count for p in release.plan.phases}
    scaled = bool(config.label_range) and counts.get(CLIP_PHASE) == _clip_releases(
        config, meta["n_features"], True)
    clip_noise = release.noise_multiplier(CLIP_PHASE) if CLIP_PHASE in release.plan \
        else None
    message = useless_fit_message(clip_noise, n_users, config.owner)  # (no fallback)
    if message is not None:
        warnings.warn(message, UselessFitWarning, stacklevel=5)
    labels, scales, dropped = None, None, 0
    if config.label_range:
        labels = label_range(executor, release, n_users=n_users)
    if scaled:
        scales, dropped = feature_scales(executor, release, n_features=meta["n_features"],
                                         n_users=n_users)
        executor.map(standardize_block, inverse_scales(scales))
    executor.map(prepare_split, (randomness.key, bool(config.fit_intercept)))
    init_param = config.init_clip_param
    init_clip = getattr(config, init_param) if init_param else None
    if init_clip == "auto":
        init_clip = auto_bound(executor, release, _init_statistic, config.init,
                               quantile=_INIT_QUANTILE_FACTOR * config.clip_quantile,
                               n_users=n_users)
    U0 = initial_components(executor, release, init=config.init, clip=init_clip,
                            n_components=config.n_components,
                            n_features=meta["n_features"], rng=randomness.public)
    bounds = {init_param: init_clip} if init_param else {}
    return Start(U0, bounds, scaled, labels, scales, dropped)


def finish(executor, release, meta, config, begun, U, bounds, notes):
    """Each user's head on its final rows (Alg. 1, line 14), the cold start
    (:func:`_cold_head`, :func:`~skdpp.linear_model._auto.cold_start_levels`), the
    personal parts (:func:`personal_parts`, post-processing) and the
    :class:`~skdpp.base.FitResult` (``bounds``, ``notes``: the iterations')."""
    fit_intercept, n_users, k = bool(config.fit_intercept), meta["n_users"], U.shape[1]
    bounds = {**begun.bounds, **bounds}
    executor.map(final_statistics, (U, config.personal_rows, fit_intercept))
    head_clip = config.head_clip_norm
    if head_clip == "auto" and config.cold_start:
        head_clip = auto_bound(executor, release, _head_norms, begun.scaled,
                               quantile=float(config.clip_quantile), n_users=n_users)
    head, intercept, intercept_scale, labels = np.zeros(k), 0.0, None, begun.labels
    if config.cold_start:
        head = _cold_head(executor, release, head_clip, begun.scaled, n_users, k)
        if fit_intercept:
            head, intercept, intercept_scale, labels = cold_start_levels(
                release, lambda v, fn: executor.map(_offsets, (v, fn)), head,
                n_users=n_users, clip_quantile=float(config.clip_quantile),
                labels=labels,
                reduce_votes=lambda v, b, b0: executor.map(head_votes, (U, v, b, b0)))
    prior = PersonalPrior(head, float(intercept), intercept_scale,
                          float(config.personal_ridge), fit_intercept,
                          VARIANCE_FLOOR if begun.scaled else 0.0)
    heads, intercepts = executor.collect(_personal_block, prior)
    bounds["head_clip_norm"] = head_clip
    attributes = _attributes(executor, config, bounds, U, heads, intercepts, head,
                             float(intercept), intercept_scale, int(config.max_iter),
                             begun.scales, labels, False)
    intercept_released = fit_intercept and config.cold_start
    released = ("components_", "cold_start_head_") \
        + ("cold_start_intercept_",) * intercept_released \
        + tuple(f"{name}_" for name in config.auto_bound_names) \
        + ("intercept_clip_",) * intercept_released
    notes = tuple(notes)
    if config.auto_bound_names:
        notes += (auto_bounds_note(config.auto_bound_names, config.clip_quantile,
                                   "each bound is "),)
    if intercept_released:
        notes += (
            "fit_intercept=True: every contribution is computed on the user's rows "
            "centred on the user's own means; "
            + _auto.COLD_START_NOTE.format(head="the cold-start head"),)
    if config.label_range:
        released += ("feature_scales_",) * begun.scaled + ("label_range_",)
        notes += scaling_notes(begun.scaled, begun.dropped, labels, bounds,
                               begun.labels)
    return FitResult(attributes, released=released, local=_LOCAL, notes=notes)


_LOCAL = ("heads_", "intercepts_", "own_label_ranges_")


def _attributes(executor, config, bounds, U, heads, intercepts, head, intercept,
                intercept_clip, n_iter, scales, labels, local_only):
    """The fitted attributes (``<name>_`` of every clip bound and scale: resolved or None)."""
    values = {name: bounds.get(name, getattr(config, name))
              for name in config.clip_names + config.scale_names}
    return {"components_": U, "heads_": heads, "intercepts_": intercepts,
            "cold_start_head_": head, "cold_start_intercept_": intercept,
            "intercept_clip_": intercept_clip, "n_iter_": n_iter, "feature_scales_": scales,
            "label_range_": labels, "local_only_": local_only,
            "own_label_ranges_": executor.collect(own_label_ranges),
            **{f"{name}_": None if value is None or isinstance(value, str) else float(value)
               for name, value in values.items()}}


def fallback_fit(executor, release, randomness, meta, config):
    """The fit of a :class:`~skdpp.linear_model._auto.FallbackPlan`: components ``init``
    (an array) or public random ones, known users' own shrunk ridge fits."""
    k, fit_intercept = int(config.n_components), bool(config.fit_intercept)

    def attributes(level):
        U = initial_components(
            executor, release, n_components=k, n_features=meta["n_features"],
            init=config.init if not isinstance(config.init, str) else "random",
            clip=None, rng=randomness.public)
        executor.map(prepare_split, (randomness.key, fit_intercept))
        executor.map(final_statistics, (U, config.personal_rows, fit_intercept))
        prior = PersonalPrior(np.zeros(k), level, None, float(config.personal_ridge),
                              fit_intercept, 0.0, True)
        heads, intercepts = executor.collect(_personal_block, prior)
        # n_iter_ >= 1 (scikit-learn's contract): the one pass of personal fits
        return _attributes(executor, config, {}, U, heads, intercepts, np.zeros(k), level,
                           None, 1, None, None, True)

    return _auto.fallback_fit(executor, release, meta["n_users"], attributes,
                              level_attr="cold_start_intercept_", local=_LOCAL,
                              released=("components_",))


def fit_personal(estimator, X, y, index):
    """``personalize``: the users' parts from all their rows, the released values as prior."""
    scales = getattr(estimator, "feature_scales_", None)
    if scales is not None:
        X = standardize(X, inverse_scales(scales))
    prior = PersonalPrior(estimator.cold_start_head_, float(estimator.cold_start_intercept_),
                          getattr(estimator, "intercept_clip_", None),
                          float(estimator.personal_ridge), bool(estimator.fit_intercept),
                          VARIANCE_FLOOR if scales is not None else 0.0,
                          bool(getattr(estimator, "local_only_", False)))
    executor = LocalExecutor(make_blocks(X, np.asarray(y, dtype=np.float64), index))
    executor.map(final_statistics, (estimator.components_, "all",
                                    bool(estimator.fit_intercept)))
    heads, intercepts = executor.collect(_personal_block, prior)
    return {"heads_": heads, "intercepts_": intercepts,
            "own_label_ranges_": executor.collect(own_label_ranges)}
