"""The public rules shared by the linear models (``"auto"`` bounds, feature scales,
label range, cold-start head, useless-fit fallback), explained with their
measurements in :ref:`auto_rules`; the docstrings say what each function computes.
"""

import functools
import warnings

import numpy as np

from ..base import FitResult, _caller_stacklevel
from ..exceptions import UselessFitWarning
from ..privacy import BudgetPlan
from ..privacy._plan import AUTO_CLIP_NOISE, AUTO_CLIP_SHARES, resolve_clip_share
from ..privacy._quantile import (CLIP_PHASE, LOCATION_SEARCH_STEPS, MEDIAN_GRID_SIZE,
                                 cumulative_counts, median_found, private_location,
                                 private_median, private_quantile, quantile_grid,
                                 search_steps)

__all__ = ["AUTO_CLIP_NOISE", "AUTO_CLIP_SHARES", "AUTO_STEPS", "CLIP_PHASE",
           "GRADIENT_BOUND_SLACK", "LEVEL_PRIOR_VARIANCE", "auto_bound",
           "gradient_bound_inconsistent", "resolve_clip_share", "rms_per_user",
           "shrink_levels", "shrinkage_penalty", "user_means"]

AUTO_STEPS = search_steps(quantile_grid())


def user_weights(block):
    """Each row's weight ``1 / m`` (``m``: its user's number of rows)."""
    return block.expand(1.0 / np.maximum(block.counts, 1))


def user_means(block, A):
    """Per-user means ``sum_r A_r / m`` of the row-aligned ``A`` (no overflow if finite)."""
    w = user_weights(block)
    with np.errstate(under="ignore"):
        return block.segment_sum(A * (w if A.ndim == 1 else w[:, None]))


def rms_per_user(block, values):
    """``sqrt(mean_r values_r^2)`` per user (overflow-safe; 0 without rows)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        top = block.segment_max(np.abs(values), initial=0.0)
        s = np.where(top > 0, top, 1.0)
        mean_sq = user_means(block, (values / block.expand(s)) ** 2)
        return s * np.sqrt(mean_sq)


def _statistic_counts(block, state, config):
    statistic, broadcast, grid = config
    values, state = statistic(block, state, broadcast)
    with np.errstate(invalid="ignore", over="ignore"):
        return cumulative_counts(np.abs(values), grid), state


def auto_bound(executor, release, statistic, broadcast, *, quantile, n_users):
    """The ``quantile`` of the users' ``|statistic(block, state, broadcast)[0]|``,
    released in phase ``"clip"`` (:func:`~skdpp.privacy._quantile.private_quantile`)."""
    grid = quantile_grid()
    counts = executor.map(_statistic_counts, (statistic, broadcast, grid))
    return private_quantile(release, CLIP_PHASE, counts, grid, quantile=quantile,
                            n_users=n_users)


LEVEL_PRIOR_VARIANCE = 2.0  # in units of R_b^2 (:ref:`auto_rules`)


def shrink_levels(levels, counts, noise_var, prior_levels, radius):
    """Mean levels shrunk to the prior: ``a_i = (m_i ȳ_i / σ_i^2 + a0_i / τ^2) / (m_i /
    σ_i^2 + 1 / τ^2)``, ``τ^2 = LEVEL_PRIOR_VARIANCE radius^2`` (NaN ``σ_i^2``: ``τ^2``;
    non-finite: ``ȳ_i``, or the prior for an infinite weight)."""
    with np.errstate(all="ignore"):
        tau2 = LEVEL_PRIOR_VARIANCE * float(radius) ** 2
        s2 = np.where(np.isnan(noise_var), tau2, noise_var)
        weight = s2 / (np.maximum(counts, 1) * tau2)
        shrunk = (levels + weight * prior_levels) / (1.0 + weight)
        return np.where(np.isfinite(shrunk), shrunk,
                        np.where(np.isfinite(weight), levels, prior_levels))


def shrinkage_penalty(ridge, n_params, noise_var, target_var, feature_var, floor=0.0):
    """Penalties ``q_ij = κ p min(1, σ_i^2 / s_i^2) max(v_ij, floor)`` (n_users, p): ``κ p``
    pseudo-rows of the user's own variance ``v_ij`` (scale-free), scaled by the
    unexplained share of its target variance (1 if NaN or ``s_i^2 <= 0``)."""
    with np.errstate(all="ignore"):
        share = np.where(target_var > 0, noise_var / target_var, 1.0)
        share = np.where(np.isfinite(share), np.minimum(share, 1.0), 1.0)
        v = np.maximum(feature_var, floor)
        return (float(ridge) * n_params * share)[:, None] * v


# The rules of all-"auto" fits (label range, feature scales, fallback):
# constants and their measurements in :ref:`auto_rules`.
SCALE_FEATURES = True  # switch for comparisons
SCALE_GATE_NOISE = AUTO_CLIP_NOISE  # scales kept if the clip noise <= this * n_users
FEATURE_SCALE_QUANTILE = 0.75
FEATURE_SCALE_STEPS = AUTO_STEPS  # one private quantile per column
VARIANCE_FLOOR = 0.05  # of the personal refit's pseudo-rows (standardised units)
LABEL_QUANTILES = (0.01, 0.5)
LABEL_SLACK = 0.05
LABEL_GRID_SIZE = 512
LABEL_RANGE_STEPS = 2 * search_steps(2 * LABEL_GRID_SIZE)  # two noisy bisections
USELESS_CLIP_NOISE = 0.25  # useless: clip count noise std > this * n_users


def _column_ranges(block, X):
    """Each user's ``max - min`` of every column of ``X`` (0 without rows)."""
    X = np.asarray(X, dtype=np.float64)
    out = np.zeros((block.n_users, X.shape[1]))
    nonempty = block.counts > 0
    if block.n_rows and nonempty.any():
        starts = block.offsets[:-1][nonempty]
        with np.errstate(over="ignore", invalid="ignore"):
            out[nonempty] = (np.maximum.reduceat(X, starts, axis=0)
                             - np.minimum.reduceat(X, starts, axis=0))
    return out


def _feature_range_counts(block, state, grid):
    ranges = _column_ranges(block, block.take(block.X))
    with np.errstate(invalid="ignore"):
        ranges = np.where(np.isfinite(ranges), ranges, np.inf)
    return np.stack([cumulative_counts(r, grid) for r in ranges.T]), state


def _grid_quantiles(executor, release, block_counts, grid, quantiles, n_users):
    """The released ``quantiles[j]`` (phase ``"clip"``) of row ``j`` of the users'
    cumulative counts ``executor.map(block_counts, grid)``."""
    counts = executor.map(block_counts, grid)
    if counts is None:  # no rows at all
        counts = np.zeros((len(quantiles), grid.shape[0]))
    return [private_quantile(release, CLIP_PHASE, row, grid, quantile=q, n_users=n_users)
            for row, q in zip(counts, quantiles)]


def feature_scales(executor, release, *, n_features, n_users):
    """``(scales, dropped)``: each column's :data:`FEATURE_SCALE_QUANTILE` of the users'
    within-user ranges (phase ``"clip"``); a scale on the grid's lower end is ``inf``."""
    grid = quantile_grid()
    scales = np.array(_grid_quantiles(executor, release, _feature_range_counts, grid,
                                      [FEATURE_SCALE_QUANTILE] * n_features, n_users),
                      dtype=np.float64)
    low = scales <= grid[0]
    scales[low] = np.inf
    return scales, int(low.sum())


def standardize_block(block, state, inv_scales):
    """Block function: the block then owns its rows ``X * inv_scales`` and targets."""
    rows = block.source_rows()
    X = standardize(np.take(np.asarray(block.X), rows, axis=0), inv_scales)
    y = np.take(np.asarray(block.y), rows, axis=0)
    block.X, block.y, block.rows = X, y, None
    return None, state


def standardize(X, inv_scales):
    """``X * inv_scales`` (float64)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(X, dtype=np.float64) * np.asarray(inv_scales)


def inverse_scales(scales):
    """``1 / scales`` (0 for a dropped column, 1 when ``scales`` is None)."""
    if scales is None:
        return None
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(scales), 1.0 / np.asarray(scales, dtype=np.float64), 0.0)


def _label_extremes(block):
    """Each user's minimum and maximum label (``inf`` without rows)."""
    y = np.asarray(block.take(block.y), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = block.segment_max(y, initial=-np.inf)
        lo = -block.segment_max(-y, initial=-np.inf)
    return np.where(block.counts > 0, lo, np.inf), np.where(block.counts > 0, hi, np.inf)


def _label_extreme_counts(block, state, grid):
    lo, hi = _label_extremes(block)
    return np.stack([cumulative_counts(lo, grid), cumulative_counts(hi, grid)]), state


def own_label_ranges(block, state, _=None):
    """Block function (``collect``): each user's own ``[min, max]`` label (local)."""
    return np.column_stack(_label_extremes(block))


def label_range(executor, release, *, n_users):
    """The released label range ``(lo, hi)`` (phase ``"clip"``; :ref:`auto_rules`)."""
    grid = quantile_grid(signed=True, size=LABEL_GRID_SIZE)
    sigma = float(release.noise_multiplier(CLIP_PHASE))
    q = float(np.clip(3.0 * sigma / max(int(n_users), 1), *LABEL_QUANTILES))
    points = _grid_quantiles(executor, release, _label_extreme_counts, grid, (q, 1.0 - q),
                             n_users)
    ends = []
    for point, outer, edge in zip(points, (-1, 0), (-np.inf, np.inf)):
        j = int(np.searchsorted(grid, point))
        off_grid = j <= 0 or j >= grid.shape[0] - 1  # then that side is not clamped
        # else the outer end of the cell (grid[j - 1], grid[j]]
        ends.append(edge if off_grid else float(grid[j + outer]))
    lo, hi = ends
    if np.isfinite(lo) and np.isfinite(hi):
        lo, hi = min(lo, hi), max(lo, hi)
        lo, hi = lo - LABEL_SLACK * (hi - lo), hi + LABEL_SLACK * (hi - lo)
    return lo, hi


# The cold-start head rules (:func:`cold_start_levels`, :ref:`auto_rules`)
COLD_SPREAD_FACTOR = 4.0
LOCATION_SHIFT_LIMIT = 0.5
COLD_START_NOTE = (
    "the cold-start intercept is one of two private locations, of the users' mean labels "
    "and of their offsets from {head} (median and radius searches in phase 'clip', "
    "clipped means of sensitivity 2*radius in phase 'cold_start'); {head} is set to 0 "
    "when the offsets' released radius exceeds " + f"{COLD_SPREAD_FACTOR:g}" + " times the "
    "mean labels', or when a noisy count (phase 'clip', sensitivity 1) of the users whose "
    "own rows it fits better than the mean labels' location alone is at most n_users / 2 "
    "plus one std of its noise (post-processing of released values).")

HEAD_VOTE_MARGIN = 1.0
COLD_START_CLIP_RELEASES = 2 * LOCATION_SEARCH_STEPS + 1


def head_votes(block, state, config):
    """Block function: the number of users whose rows' squared error is lower under
    ``b_head + <x_r project, head>`` than under ``b_level`` (sensitivity 1)."""
    project, head, b_head, b_level = config
    X = np.asarray(block.take(block.X), dtype=np.float64)
    y = np.asarray(block.take(block.y), dtype=np.float64)
    with np.errstate(all="ignore"):
        pred = X @ (head if project is None else np.asarray(project) @ head)
        with_head = block.segment_sum((y - b_head - pred) ** 2)
        level = block.segment_sum((y - b_level) ** 2)
    return float(np.count_nonzero(with_head < level)), state


def cold_start_levels(release, reduce_offsets, head, *, n_users, clip_quantile,
                      labels=None, reduce_votes=None):
    """The cold-start part ``(head or zeros, intercept, radius, labels)``: two private
    locations, of the users' mean labels and of their offsets ``ȳ_i - <x̄_i, head>``
    (``reduce_offsets(v, fn)``), the head rules of :ref:`auto_rules` and
    :func:`mended_label_range`. Post-processing."""
    kwargs = dict(n_users=n_users, search_phase=CLIP_PHASE, mean_phase="cold_start",
                  radius_quantile=clip_quantile, return_shift=True)
    zeros = np.zeros_like(head)
    level, level_radius, level_shift = private_location(
        release, functools.partial(reduce_offsets, zeros), **kwargs)
    intercept, radius, shift = private_location(
        release, functools.partial(reduce_offsets, head), **kwargs)
    # an astray median puts the clipped mean about one radius away; the mean's noise
    # std in radii is 2 z / n (public), so the limit is 2 such stds below 1
    limit = max(LOCATION_SHIFT_LIMIT,
                1.0 - 4.0 * float(release.noise_multiplier("cold_start")) / max(n_users, 1))
    level_ok = abs(level_shift) <= limit
    offsets_ok = abs(shift) <= limit
    if labels is not None:
        labels = mended_label_range(labels, level, level_ok)
    if level_ok != offsets_ok:  # one of them astray: the other one
        keep = offsets_ok
    else:  # both central (or both flagged: no evidence either way)
        keep = radius <= COLD_SPREAD_FACTOR * level_radius
    if reduce_votes is not None:  # always released: the plan's count is fixed
        votes = release.gaussian(CLIP_PHASE, np.array([reduce_votes(head, intercept, level)]),
                                 sensitivity=1.0)
        margin = HEAD_VOTE_MARGIN * release.noise_std(CLIP_PHASE, 1.0)
        keep = keep and float(votes[0]) > 0.5 * n_users + margin
    if keep:
        return head, intercept, radius, labels
    return zeros, level, level_radius, labels


#: An astray end of the label range becomes the sound end mirrored about the mean
#: labels' location at this many times its distance.
ASTRAY_END_MIRROR = 2.0


def mended_label_range(labels, level, level_ok):
    """``labels`` with each astray end mended (post-processing of released values).

    An end on the wrong side of ``level`` (the users' mean labels' location; the ends
    are quantiles ``q <= 0.5`` of the users' extremes), or off the grid (infinite),
    went astray. If ``level_ok`` and the other end is sound, the astray end is that end
    mirrored about ``level`` at :data:`ASTRAY_END_MIRROR` times its distance (so the
    predictions stay bounded); else it is infinite (no clamp on that side)."""
    lo, hi = labels
    lo, hi = (lo if lo <= level else -np.inf, hi if hi >= level else np.inf)
    if level_ok and np.isfinite(level) and np.isfinite(lo) != np.isfinite(hi):
        if np.isfinite(hi):
            lo = level - ASTRAY_END_MIRROR * (hi - level)
        else:
            hi = level + ASTRAY_END_MIRROR * (level - lo)
    return float(lo), float(hi)


def released_predictions(pred, codes, label_range, local_only, own_ranges=None):
    """Predictions clamped to ``label_range``, or (``local_only``) known users' to their
    ``own_ranges``."""
    known = codes >= 0
    if not local_only:
        return clamp_predictions(pred, label_range)
    if own_ranges is not None and known.any():
        own = np.asarray(own_ranges)[codes[known]]
        pred = pred.copy()
        pred[known] = clamp_predictions(pred[known], (own[:, 0], own[:, 1]))
    return pred


def clamp_predictions(pred, label_range):
    """Finite predictions clamped to ``label_range`` (or None)."""
    if label_range is None:
        return pred
    return np.where(np.isfinite(pred), np.clip(pred, *label_range), pred)


LINEAR_FALLBACK = "each known user gets its own ridge fit (local data only)"
LEVEL_PHASE = "cold_start"  # the one phase of a FallbackPlan


def useless_fit_message(clip_noise, n_users, name, fallback=None, level=False):
    """The warning if ``clip_noise`` exceeds ``USELESS_CLIP_NOISE * n_users``, else None;
    ``fallback``: what known users get instead (None: the fit runs as planned)."""
    if clip_noise is None or not np.isfinite(clip_noise) or \
            clip_noise <= USELESS_CLIP_NOISE * max(int(n_users), 1):
        return None
    would = "would " if fallback is not None else ""
    be = "would be" if fallback is not None else "are"
    text = (f"{name}: with {n_users} users at this epsilon/delta the private searches of "
            f"the fit's bounds {would}count users with noise std {clip_noise:.3g} > "
            f"{USELESS_CLIP_NOISE:g} * n_users, so the bounds and the model {be} mostly noise")
    if fallback is not None:
        new = ("new users the users' median mean label (the whole budget on one "
               "exponential-mechanism selection)" if level else
               "new users the prior 0 (too few users even for one private median: "
               "epsilon * n_users below about 76)")
        text += f". Instead, {fallback} and {new}"
    remedy = "" if fallback is None or level else (
        ", or subtract a public constant from y (e.g. the middle of the label scale): "
        "new users then get that constant")
    return (f"{text}. Use more users or a larger epsilon{remedy}. (A data-independent "
            f"rule: n_users, epsilon, delta and the plan.)")


class FallbackPlan(BudgetPlan):
    """The plan of a fit predicted useless: with ``level`` one exponential-mechanism
    selection (the whole ε), else nothing; ``message``: the fit's warning."""

    def __init__(self, epsilon, delta, *, message, level):
        super().__init__(epsilon, delta)
        self.message = message
        if level:
            self.add_rest(LEVEL_PHASE, mechanism="exponential")


def fallback_plan(plan, n_users, name, fallback=LINEAR_FALLBACK, *, level=True):
    """``plan``, or a :class:`FallbackPlan` when :func:`useless_fit_message` predicts it
    useless (public rule; plans with fixed noise or without ``"clip"`` are kept)."""
    if plan.fixed_noise or CLIP_PHASE not in plan:
        return plan
    level = bool(level) and median_found(plan.epsilon, n_users)
    message = useless_fit_message(plan.calibrate()[CLIP_PHASE], n_users, name, fallback,
                                  level)
    if message is None:
        return plan
    return FallbackPlan(plan.epsilon, plan.delta, message=message, level=level)


def fallback_level(release, reduce, n_users):
    """Warn, then the users' private median of ``reduce`` (0 without a release)."""
    warnings.warn(release.plan.message, UselessFitWarning, stacklevel=_caller_stacklevel())
    if LEVEL_PHASE not in release.plan:
        return 0.0
    return private_median(release, LEVEL_PHASE, reduce, n_users=n_users)


def mean_label_values(block, state, fn):
    """Block function: ``fn`` of the block's users' mean labels."""
    return fn(user_means(block, np.asarray(block.take(block.y), dtype=np.float64))), state


def fallback_note(release, level_attr):
    """The report note of a :class:`FallbackPlan` fit."""
    what = (f"{level_attr} is the users' median mean label, one exponential-mechanism "
            f"selection (phase {LEVEL_PHASE!r}, the whole epsilon, pure DP) over "
            f"{2 * MEDIAN_GRID_SIZE} signed log-spaced candidates with score "
            f"-|#(users' mean labels <= c) - n_users / 2| (sensitivity 1)"
            if LEVEL_PHASE in release.plan else
            f"nothing is released ({level_attr} is the prior 0: epsilon * n_users is too "
            f"small for even one private median)")
    return (f"Predicted useless (public rule: the count noise of the bounds' searches "
            f"would exceed {USELESS_CLIP_NOISE:g} * n_users): the fit makes none of its "
            f"usual releases; {what}; every known user's part is "
            f"its own fit on its local data only (local_only_ = True). Use more users or "
            f"a larger epsilon.")


def auto_bounds_note(names, quantile, lead=""):
    """The report note of the ``"auto"`` bounds ``names``."""
    return (f"{', '.join(names)}='auto': {lead}the {quantile:g}-quantile of a per-user "
            f"statistic, released by a noisy bisection over a public log grid ({AUTO_STEPS} "
            f"Gaussian counts of sensitivity 1, phase 'clip').")


def gated_plan(build, clip_share, n_users, n_base, n_scales, scaled):
    """``(plan, scaled)`` of ``build(share, n_clip)`` at the share of
    :func:`resolve_clip_share`; the ``n_scales`` feature-scale releases are dropped
    when the clip noise then exceeds ``SCALE_GATE_NOISE * n_users`` (public rule)."""
    cached = functools.cache(build)

    def resolved(n_clip):
        if not n_clip:
            return cached(0.05, 0)
        return cached(resolve_clip_share(clip_share, lambda s: cached(s, n_clip), n_users),
                      n_clip)

    plan = resolved(n_base + n_scales * scaled)
    if scaled and plan.calibrate()[CLIP_PHASE] > SCALE_GATE_NOISE * max(n_users, 1):
        scaled, plan = False, resolved(n_base)
    return plan, bool(scaled)


def fallback_fit(executor, release, n_users, attributes_of, *, level_attr, local,
                 released=()):
    """The fit of a :class:`FallbackPlan`: the level (:func:`fallback_level` of the mean
    labels), ``attributes_of(level)`` (the known users' local fits) and the note."""
    level = fallback_level(release, lambda fn: executor.map(mean_label_values, fn), n_users)
    return FitResult(attributes_of(level),
                     released=released + (level_attr,) * (LEVEL_PHASE in release.plan),
                     local=local, notes=(fallback_note(release, level_attr),))


def at_grid_edge(value):
    """Whether a released bound is on the lower end of the public grid."""
    grid = quantile_grid()
    return isinstance(value, (int, float, np.floating)) and 0 < float(value) <= grid[0]


GRADIENT_BOUND_SLACK = 4.0


def gradient_bound_inconsistent(clip_norm, feature_scale, labels, centred):
    """Whether ``clip_norm`` exceeds ``GRADIENT_BOUND_SLACK`` times its Cauchy-Schwarz
    bound from the other releases: a gradient at ``w = 0`` has norm at most
    ``feature_scale`` times the label range's width (centred) or largest end."""
    if labels is None or not all(isinstance(v, (int, float, np.floating))
                                 for v in (clip_norm, feature_scale)):
        return False
    lo, hi = labels
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    width = (hi - lo) if centred else max(abs(lo), abs(hi))
    return float(clip_norm) > GRADIENT_BOUND_SLACK * float(feature_scale) * width


def scaling_notes(scaled, dropped, labels, bounds, searched):
    """Report notes of the feature scales, the label range (``searched``: as released
    by :func:`label_range`, before :func:`mended_label_range`) and grid-edge bounds."""
    notes = [
        f"Per-feature scales: each column's {FEATURE_SCALE_QUANTILE:g}-quantile of the users' "
        f"within-user ranges (one noisy bisection per column, {FEATURE_SCALE_STEPS} Gaussian "
        f"counts of sensitivity 1, phase 'clip'); the algorithm runs on X / feature_scales_ "
        f"and the personal refit's penalty has variance at least {VARIANCE_FLOOR:g} in those "
        f"units." if scaled else
        f"No per-feature scales: with these releases the count noise of phase 'clip' would "
        f"exceed {SCALE_GATE_NOISE:g} * n_users (public rule); the features are used in "
        f"their own units.",
        f"Label range: low/high quantiles (q = clip(3 * count noise / n_users, "
        f"{LABEL_QUANTILES[0]:g}, {LABEL_QUANTILES[1]:g})) of the users' minimum and maximum "
        f"labels ({LABEL_RANGE_STEPS} Gaussian counts of sensitivity 1, phase 'clip'), "
        f"widened to their grid cells and by {LABEL_SLACK:g} of the width: "
        f"label_range_ = ({labels[0]:.6g}, {labels[1]:.6g}); predictions are clamped to it "
        f"(post-processing)."]
    if dropped:
        notes.append(f"{dropped} column(s) got a scale on the lower edge of the public grid "
                     f"(constant within most users, or noise): dropped (scale inf); "
                     f"post-processing, no privacy cost.")
    if not all(np.isfinite(labels)) or tuple(labels) != tuple(searched):
        mended = "that side is not clamped"
        if all(np.isfinite(labels)):
            mended = ("that side is the other end mirrored about that location at "
                      f"{ASTRAY_END_MIRROR:g} times its distance")
        notes.append("An end of the label range fell on the edge of its public grid, or on "
                     "the wrong side of the released location of the users' mean labels "
                     f"(its search went astray): {mended} (post-processing, no privacy "
                     "cost).")
    edge = sorted(name for name, value in bounds.items() if at_grid_edge(value))
    if edge:
        notes.append(f"{', '.join(edge)}: on the lower edge of the public grid (statistics "
                     f"about 0 in standardised units, or noise): the shared part learns "
                     f"nothing from them; predictions rest on the users' own means and the "
                     f"cold-start intercept (post-processing, no privacy cost).")
    return tuple(notes)
