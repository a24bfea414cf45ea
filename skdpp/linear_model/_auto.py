"""Automatic (private, scale-free) bounds shared by the linear models.

A clip bound, or a scale a step size is relative to, whose right value depends
on the data's units is chosen from the private data by a private quantile of
one statistic per user and charged in the plan's phase ``"clip"``:

* :func:`auto_bound` -- the driver: the users' values are counted over the
  public grid by a block function (map/reduce), and the quantile is released
  by a noisy bisection (:func:`~skdpp.privacy._quantile.private_quantile`:
  ``AUTO_STEPS`` Gaussian counts of sensitivity 1);
* :func:`user_means`, :func:`rms_per_user` -- per-user statistics over a
  block's rows (overflow-free for finite values).
"""

import functools
import warnings

import numpy as np

from ..base import _caller_stacklevel
from ..exceptions import UselessFitWarning
from ..privacy import BudgetPlan
from ..privacy._plan import AUTO_CLIP_NOISE, AUTO_CLIP_SHARES, resolve_clip_share
from ..privacy._quantile import (LOCATION_SEARCH_STEPS, MEDIAN_GRID_SIZE, median_found,
                                private_median,
                                cumulative_counts, private_location, private_quantile,
                                quantile_grid, search_steps)

__all__ = ["AUTO_CLIP_NOISE", "AUTO_CLIP_SHARES", "AUTO_STEPS", "CLIP_PHASE",
           "GRADIENT_BOUND_SLACK", "LEVEL_PRIOR_VARIANCE", "auto_bound",
           "gradient_bound_inconsistent", "resolve_clip_share", "rms_per_user",
           "shrink_levels", "shrinkage_penalty", "user_means"]

#: The phase of every private quantile that resolves an ``"auto"`` bound.
CLIP_PHASE = "clip"
#: Releases of one ``"auto"`` bound (a noisy bisection over the positive grid).
AUTO_STEPS = search_steps(quantile_grid())


def user_weights(block):
    """Each row's weight ``1 / m`` (``m`` its user's number of rows): the weights of a mean."""
    return block.expand(1.0 / np.maximum(block.counts, 1))


def user_means(block, A):
    """Per-user means of the row-aligned ``A`` (``sum_r A_r / m``: no overflow for finite ``A``)."""
    w = user_weights(block)
    with np.errstate(under="ignore"):
        return block.segment_sum(A * (w if A.ndim == 1 else w[:, None]))


def rms_per_user(block, values):
    """``sqrt(mean_r values_r^2)`` per user (overflow-safe; 0 for users without rows)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        top = block.segment_max(np.abs(values), initial=0.0)
        s = np.where(top > 0, top, 1.0)
        mean_sq = user_means(block, (values / block.expand(s)) ** 2)
        return s * np.sqrt(mean_sq)


def _statistic_counts(block, state, config):
    """Block function: cumulative counts of one statistic per user over the public grid."""
    statistic, broadcast, grid = config
    values, state = statistic(block, state, broadcast)
    with np.errstate(invalid="ignore", over="ignore"):
        return cumulative_counts(np.abs(values), grid), state


def auto_bound(executor, release, statistic, broadcast, *, quantile, n_users):
    """A bound chosen as a private quantile of one value per user (phase ``"clip"``).

    Parameters
    ----------
    executor : LocalExecutor or compatible
    release : Releaser
        Its plan must hold ``AUTO_STEPS`` Gaussian releases of phase
        ``"clip"`` for this call.
    statistic : callable
        ``statistic(block, state, broadcast) -> (values, state)``: each of the
        block's users' value (e.g. the norm of its contribution before
        clipping; the absolute value is used). A module-level function, so the
        call runs on any executor.
    broadcast : object
        Public input of ``statistic``.
    quantile : float in (0, 1]
    n_users : int
        The public number of users.

    Returns
    -------
    bound : float
        A point of the public grid cell holding the ``quantile``
        (:func:`~skdpp.privacy._quantile.private_quantile`).
    """
    grid = quantile_grid()
    counts = executor.map(_statistic_counts, (statistic, broadcast, grid))
    return private_quantile(release, CLIP_PHASE, counts, grid, quantile=quantile,
                            n_users=n_users)


#: A user's mean level has prior variance ``LEVEL_PRIOR_VARIANCE * R_b^2``
#: around the cold-start prediction, ``R_b`` the released radius of the
#: cold-start intercept (the ``clip_quantile``, by default the median, of the
#: users' absolute deviations: about 0.67 standard deviations for normal
#: spreads, so ``2 R_b^2`` is about the between-user variance).
LEVEL_PRIOR_VARIANCE = 2.0


def shrink_levels(levels, counts, noise_var, prior_levels, radius):
    """Users' mean levels shrunk towards the cold-start prediction (normal-normal model).

    ``a_i = (m_i ȳ_i / σ_i^2 + a0_i / τ^2) / (m_i / σ_i^2 + 1 / τ^2)`` with
    ``τ^2 = LEVEL_PRIOR_VARIANCE * radius^2``; a user without a noise estimate
    (``σ_i^2`` NaN: one row) counts as ``σ_i^2 = τ^2``. Non-finite results
    fall back to ``ȳ_i`` (or the prior when the weight is infinite).
    """
    with np.errstate(all="ignore"):
        tau2 = LEVEL_PRIOR_VARIANCE * float(radius) ** 2
        s2 = np.where(np.isnan(noise_var), tau2, noise_var)
        weight = s2 / (np.maximum(counts, 1) * tau2)
        shrunk = (levels + weight * prior_levels) / (1.0 + weight)
        return np.where(np.isfinite(shrunk), shrunk,
                        np.where(np.isfinite(weight), levels, prior_levels))


def shrinkage_penalty(ridge, n_params, noise_var, target_var, feature_var, floor=0.0):
    """Diagonal penalties of a personal fit: ``κ p min(1, σ_i^2 / s_i^2)`` pseudo-rows.

    A personal part of ``p`` parameters is shrunk towards the released prior as
    if the prior contributed ``κ p`` pseudo-rows scaled by the share of the
    user's target variance ``s_i^2`` that its own fit leaves unexplained
    (``σ_i^2``): a user whose own rows determine its part (noise-free data) is
    hardly shrunk, a user whose data look like noise gets ``κ p`` pseudo-rows.
    Each coordinate's pseudo-rows have the user's own variance ``v_ij`` of that
    coordinate, so the penalty ``q_ij = λ_i v_ij`` is invariant to rescaling a
    feature (and the whole is scale-free).

    Parameters
    ----------
    ridge : float
        ``κ`` (``personal_ridge``).
    n_params : int
        ``p``.
    noise_var, target_var : ndarray of shape (n_users,)
        ``σ_i^2`` and ``s_i^2`` in the same units (NaN or non-positive
        ``s_i^2``: the share is 1).
    feature_var : ndarray of shape (n_users, p)
        ``v_ij``.
    floor : float or ndarray of shape (p,), default=0.0
        Lower bound of ``v_ij`` (:data:`VARIANCE_FLOOR` in standardised
        units): a coordinate nearly constant within a user is penalised as if
        it had this variance, so that it cannot extrapolate on later rows.

    Returns
    -------
    penalty : ndarray of shape (n_users, p)
    """
    with np.errstate(all="ignore"):
        share = np.where(target_var > 0, noise_var / target_var, 1.0)
        share = np.where(np.isfinite(share), np.minimum(share, 1.0), 1.0)
        v = np.maximum(feature_var, floor)
        return (float(ridge) * n_params * share)[:, None] * v


# --------------------------------------------------------------------------- #
# Per-feature scales (scale-free per feature) and a released label range
# --------------------------------------------------------------------------- #
#: Whether fits whose clip bounds are all ``"auto"`` release a label range
#: (predictions clamped to it), fall back to the users' own means when the plan
#: predicts a useless fit, and -- behind the public gate ``SCALE_GATE_NOISE`` --
#: standardise the features by released per-feature scales. A switch for
#: comparisons (measured costs in the issue-20 report).
SCALE_FEATURES = True
#: The per-feature scales and the label range are released only when the
#: plan's count noise (phase ``"clip"``, with them) is at most this fraction of
#: the public number of users (a public rule); otherwise the fit runs without
#: them.
SCALE_GATE_NOISE = AUTO_CLIP_NOISE
#: The quantile over users of a column's within-user range that becomes the
#: column's scale. A high quantile: a column constant within most users (a
#: session's timestamp, a rare genre) still gets the spread of the users in
#: whom it varies, so that a later row of a one-session user lies within about
#: one unit of the user's mean instead of thousands.
FEATURE_SCALE_QUANTILE = 0.75
#: Every column's scale is one private quantile (``AUTO_STEPS`` releases).
FEATURE_SCALE_STEPS = AUTO_STEPS
#: Penalty floor of a personal refit, in standardised units: each coordinate's
#: pseudo-rows have variance at least this (a column nearly constant within a
#: user is then penalised like a typical column, not left free to extrapolate).
VARIANCE_FLOOR = 0.05
#: The released label range: the ``q`` and ``1 - q`` quantiles of the users'
#: minimum and maximum labels, on a signed log grid of ``2 * LABEL_GRID_SIZE``
#: candidates, ``q = clip(3 σ / n, LABEL_QUANTILES)`` (``σ`` the plan's count
#: noise std: the search's rank error stays inside the tail it may cut), then
#: widened by ``LABEL_SLACK`` of its width on each side.
#: The grid's ratio between neighbours is 1.075 (an earlier 128-point grid, ratio
#: 1.34, with a slack of 0.25 released 8.0 as the top of 1-5 ratings: MovieLens,
#: ``benchmarks/bench_defaults.py``); the outer end of the selected cell already
#: errs on the wide side, so the slack is small.
#: The upper end 0.5 (a median of the users' extremes) keeps every comparison of
#: the searches at least ``n / 2`` users from the far counts (0 or ``n``): with 0.25
#: at 300 users and epsilon 1 (count noise 0.2 n) a flipped early step released
#: (-70, 1472) for 0.5-5 ratings.
LABEL_QUANTILES = (0.01, 0.5)
LABEL_SLACK = 0.05
LABEL_GRID_SIZE = 512
#: Releases of the label range (two noisy bisections).
LABEL_RANGE_STEPS = 2 * search_steps(2 * LABEL_GRID_SIZE)
#: A fit is predicted useless when the count noise std of its phase ``"clip"``
#: exceeds this fraction of the public number of users: the noisy bisections
#: then go astray often enough that bounds, scales, the label range and the
#: cold-start part cannot be trusted. Measured on 300-user MovieLens subsets
#: (``benchmarks/bench_defaults.py``, 3 seeds): at 0.46-0.51 (epsilon 0.3) PPSGD
#: and FedRep predicted up to 1e5 for new users and PPSGD up to 9e3 for known
#: ones; on a year-like column (600 users, 150 seeds) 0.23 gave 17 locations
#: more than 100 off, 0.18 gave 3, 0.14 gave 1.
USELESS_CLIP_NOISE = 0.25


def _column_ranges(block, X):
    """Each user's ``max - min`` of every column of the row-aligned ``X`` (0 without rows)."""
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
    """Block function: cumulative counts over ``grid`` of every column's within-user range."""
    ranges = _column_ranges(block, block.take(block.X))
    with np.errstate(invalid="ignore"):
        ranges = np.where(np.isfinite(ranges), ranges, np.inf)
    return np.stack([cumulative_counts(r, grid) for r in ranges.T]), state


def feature_scales(executor, release, *, n_features, n_users):
    """Per-feature scales: the :data:`FEATURE_SCALE_QUANTILE` of each column's within-user range.

    One private quantile per column (phase ``"clip"``, ``FEATURE_SCALE_STEPS``
    Gaussian counts of sensitivity 1 each: one user moves every count of a
    column by at most 1). A scale on the lower end of the public grid (at
    least ``1 - q`` of the users hold the column constant, or the counts are
    noise) means "no within-user information": the column is dropped
    (scale ``inf``), post-processing of the released comparisons.

    Returns
    -------
    scales : ndarray of shape (n_features,)
        Positive, ``inf`` for a dropped column.
    dropped : int
        Number of dropped columns.
    """
    grid = quantile_grid()
    counts = executor.map(_feature_range_counts, grid)
    if counts is None:
        counts = np.zeros((n_features, grid.shape[0]))
    scales = np.empty(n_features)
    for j in range(n_features):
        scales[j] = private_quantile(release, CLIP_PHASE, counts[j], grid,
                                     quantile=FEATURE_SCALE_QUANTILE, n_users=n_users)
    low = scales <= grid[0]
    scales[low] = np.inf
    return scales, int(low.sum())


def standardize_block(block, state, inv_scales):
    """Block function: the block's rows of ``X`` times ``inv_scales``, owned by the block.

    The block then holds its own (standardised, float64) rows and targets in
    canonical order; its users and their order are unchanged. Returns
    ``(None, state)``.
    """
    rows = block.source_rows()
    with np.errstate(over="ignore", invalid="ignore"):
        X = np.take(np.asarray(block.X), rows, axis=0) * np.asarray(inv_scales)
    y = np.take(np.asarray(block.y), rows, axis=0)
    block.X, block.y, block.rows = X, y, None
    return None, state


def standardize(X, inv_scales):
    """``X * inv_scales`` (float64; the public per-feature scales of a fit)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(X, dtype=np.float64) * np.asarray(inv_scales)


def inverse_scales(scales):
    """``1 / scales`` (0 for a dropped column, 1 when ``scales`` is None)."""
    if scales is None:
        return None
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(scales), 1.0 / np.asarray(scales, dtype=np.float64), 0.0)


def _label_extremes(block):
    """Each of the block's users' minimum and maximum label (``inf`` without rows)."""
    y = np.asarray(block.take(block.y), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = block.segment_max(y, initial=-np.inf)
        lo = -block.segment_max(-y, initial=-np.inf)
    return np.where(block.counts > 0, lo, np.inf), np.where(block.counts > 0, hi, np.inf)


def _label_extreme_counts(block, state, grid):
    """Block function: cumulative counts of the users' minimum and maximum labels."""
    lo, hi = _label_extremes(block)
    return np.stack([cumulative_counts(lo, grid), cumulative_counts(hi, grid)]), state


def own_label_ranges(block, state, _=None):
    """Block function (``collect``): each user's own ``[min, max]`` label, shape (n, 2).

    A personal attribute (the user's own rows only): a useless fit
    (``local_only``) clamps each known user's predictions to it
    (:func:`released_predictions`), where the released label range is noise.
    """
    return np.column_stack(_label_extremes(block))


def label_range(executor, release, *, n_users):
    """A released range of the labels (phase ``"clip"``, ``LABEL_RANGE_STEPS`` counts).

    ``lo``: the ``q`` quantile of the users' minimum labels, ``hi``: the
    ``1 - q`` quantile of their maximum labels (``q`` from the public plan, see
    :data:`LABEL_QUANTILES`), each by a noisy bisection on the signed log grid
    (counts of sensitivity 1), taken at the outer end of the selected grid
    cell and widened by ``LABEL_SLACK`` of the width. An end on the edge of
    the grid is "no information" and becomes infinite (no clamp on that side).

    Returns
    -------
    lo, hi : float
    """
    grid = quantile_grid(signed=True, size=LABEL_GRID_SIZE)
    counts = executor.map(_label_extreme_counts, grid)
    if counts is None:
        counts = np.zeros((2, grid.shape[0]))
    sigma = float(release.noise_multiplier(CLIP_PHASE))
    q = float(np.clip(3.0 * sigma / max(int(n_users), 1), *LABEL_QUANTILES))
    ends = []
    for row, q, outer in ((0, q, -1), (1, 1.0 - q, 0)):
        point = private_quantile(release, CLIP_PHASE, counts[row], grid, quantile=q,
                                 n_users=n_users)
        j = int(np.searchsorted(grid, point))
        if j <= 0 or j >= grid.shape[0] - 1:
            ends.append(-np.inf if row == 0 else np.inf)
        else:  # the outer end of the cell (grid[j - 1], grid[j]]
            ends.append(float(grid[j + outer]))
    lo, hi = ends
    if np.isfinite(lo) and np.isfinite(hi):
        lo, hi = min(lo, hi), max(lo, hi)
        lo, hi = lo - LABEL_SLACK * (hi - lo), hi + LABEL_SLACK * (hi - lo)
    return lo, hi


#: :func:`cold_start_levels` drops a head whose offsets' released radius exceeds
#: this multiple of the mean labels' (more than two cells of the public radius
#: grid, ratio 1.79, above it; MovieLens with a raw timestamp: ratios 24 to 190).
COLD_SPREAD_FACTOR = 4.0
#: A location whose clipped mean lies more than ``max(LOCATION_SHIFT_LIMIT, 1 -
#: 2 s)`` radii from its private median (``s``: the mean's public noise std in
#: radii) is treated as astray (:func:`~skdpp.privacy._quantile.private_location`,
#: ``return_shift``; an astray median puts it about one radius away): at 300 users
#: and epsilon 1 one flipped step of a median search (and one of the radius
#: search) released a cold-start intercept of 80.6 for offsets near 229, shift 0.59.
LOCATION_SHIFT_LIMIT = 0.5
#: Report note of :func:`cold_start_levels` (``{head}``: what the head is).
COLD_START_NOTE = (
    "the cold-start intercept is one of two private locations, of the users' mean labels "
    "and of their offsets from {head} (median and radius searches in phase 'clip', "
    "clipped means of sensitivity 2*radius in phase 'cold_start'); {head} is set to 0 "
    "when the offsets' released radius exceeds " + f"{COLD_SPREAD_FACTOR:g}" + " times the "
    "mean labels', or when a noisy count (phase 'clip', sensitivity 1) of the users whose "
    "own rows it fits better than the mean labels' location alone is at most n_users / 2 "
    "plus one std of its noise (post-processing of released values).")


#: The head is kept when more than ``n_users / 2`` plus this many count-noise
#: stds of users prefer it (public).
HEAD_VOTE_MARGIN = 1.0
#: Releases of phase ``"clip"`` of :func:`cold_start_levels`: two locations'
#: searches and the vote on the head.
COLD_START_CLIP_RELEASES = 2 * LOCATION_SEARCH_STEPS + 1


def head_votes(block, state, config):
    """Block function: how many of the block's users prefer the cold-start head.

    ``config = (project, head, b_head, b_level)``: a user prefers the head
    when its rows' squared error under ``b_head + <x_r project, head>`` is
    below that under the level ``b_level`` alone (``project``: the released
    components, or ``None``). One user adds 0 or 1; a non-finite error counts
    as not preferring.
    """
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
    """The cold-start intercept, and whether the released ``head`` is kept.

    Two private locations (:func:`~skdpp.privacy._quantile.private_location`,
    searches in phase ``"clip"``, clipped means in ``"cold_start"``): of the
    users' mean labels ``ȳ_i`` and of their offsets ``ȳ_i - <x̄_i, head>``
    (``reduce_offsets(v, fn)`` sums ``fn`` of the offsets with head ``v`` over
    all users). A head that carries between-user information narrows the
    offsets' spread; a head dominated by its noise widens it, by the noise
    times the users' spread of ``x̄_i`` -- unbounded for a column nearly
    constant within every user but not across users (a raw timestamp), where
    the prediction ``b + <x̄_new, head>`` for a new user then misses by
    hundreds. So the head is dropped (the location of the mean labels with
    head 0) when the released radius of the offsets exceeds
    :data:`COLD_SPREAD_FACTOR` times that of the mean labels: the head then
    moves a new user's predicted level by several times the spread of the
    users' mean labels. A useful head is never dropped by this rule only
    because its users' mean rows are alike (features centred within users
    leave both spreads equal, while the head still predicts within users).
    Both locations are always released (the plan's count is fixed); the
    choice compares released values: post-processing.

    A location whose median search went astray (one flipped comparison of
    noisy counts sends it where no user is; its clipped mean then sits about
    one radius away, :data:`LOCATION_SHIFT_LIMIT`) is not used when the other
    one is central: an astray offsets location drops the head, an astray
    mean-labels location keeps it. At the smallest useful budgets the limit
    also flags about one central location in seven (the mean's noise); the
    fallback is then the other, equally private, location.

    The head is also kept only if a majority of users prefer it: one noisy
    count (phase ``"clip"``, sensitivity 1) of the users whose own rows the
    head's prediction fits better than the mean labels' location alone
    (``reduce_votes(head, b_head, b_level)``, :func:`head_votes`), by more
    than :data:`HEAD_VOTE_MARGIN` stds of the count's noise (a bare majority
    is within the noise, and such heads change little: on MovieLens the
    margin costs 0.003-0.007 of raw cold-start RMSE and made 7 more of the
    defaults benchmark's raw-timestamp and shift/scale checks pass). The
    spread rule compares users' mean rows; a head can pass it and still move
    a user's *rows* by several rating points (a column shifted by 1e4 whose
    coefficient is noise: 6-7 % of the users preferred such heads, against
    50-75 % for useful ones, MovieLens 300-user draws; cold-start RMSE 1.66 and
    1.49 with them against 1.08 and 1.10 without).

    ``labels``, the released label range, is checked against the mean labels'
    location: every user's mean label lies between its minimum and maximum,
    so the median of the means lies between the medians of the extremes, and
    the range's ends (quantiles ``q <= 0.5`` of the extremes) on either side
    of it. An end on the wrong side means its noisy search went astray (one
    flipped step at 300 users and epsilon 1 released (4.8, 9.9) for 0.5-5
    ratings, clamping every prediction to 4.8): that end becomes infinite, no
    clamp on that side (post-processing).

    Measured (MovieLens, ``benchmarks/bench_defaults.py``, FedRep at epsilon 4
    with the raw timestamp, user splits 1 and 2): released offset radii 59.9 and
    18.6 against about 0.8 for the mean labels, cold-start RMSE 4.59 / 4.24
    with the head against 1.06 with the mean level alone.

    Returns
    -------
    head : ndarray
        ``head``, or zeros.
    intercept, radius : float
        The kept location and its released radius.
    labels : tuple of float or None
        ``labels`` with an end on the wrong side of the mean labels' location
        replaced by an infinity.
    """
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
    if labels is not None:  # (an astray level can only remove a clamp, never add one)
        lo, hi = labels
        labels = (lo if lo <= level else -np.inf, hi if hi >= level else np.inf)
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


def released_predictions(pred, codes, label_range, local_only, own_ranges=None):
    """A linear model's predictions after its post-processing.

    ``codes``: each row's user position (``-1`` for a new user). A fit
    predicted useful: every prediction clamped to the released
    ``label_range``. A useless fit (``local_only``, :class:`FallbackPlan`:
    no label range): a known user's own ridge prediction clamped to its own
    label range (``own_ranges``, its personal attribute,
    :func:`own_label_ranges`); new users keep the cold-start level.
    """
    known = codes >= 0
    if not local_only:
        return clamp_predictions(pred, label_range)
    if own_ranges is not None and known.any():
        own = np.asarray(own_ranges)[codes[known]]
        pred = pred.copy()
        pred[known] = clamp_predictions(pred[known], (own[:, 0], own[:, 1]))
    return pred


def clamp_predictions(pred, label_range, rows=None):
    """Predictions clamped to a released ``label_range`` (``None``: unchanged).

    ``rows``: a boolean mask of the rows to clamp (default: all). Non-finite
    values are left as they are (a prediction beyond the float range is still
    reported by ``predict``'s finiteness check).
    """
    if label_range is None:
        return pred
    lo, hi = label_range
    mask = np.isfinite(pred) if rows is None else np.asarray(rows) & np.isfinite(pred)
    return np.where(mask, np.clip(pred, lo, hi), pred)


#: What a useless linear fit does for its known users (the text of its warning).
LINEAR_FALLBACK = "each known user gets its own ridge fit (local data only)"
#: The one phase of a :class:`FallbackPlan` (an exponential-mechanism selection).
LEVEL_PHASE = "cold_start"


def useless_fit_message(clip_noise, n_users, name, fallback=None, level=False):
    """A warning text when the plan predicts a useless fit, else None (public values only).

    ``clip_noise`` is the calibrated noise multiplier of the phase ``"clip"``
    (the std of each released count, sensitivity 1); the rule compares it to
    ``USELESS_CLIP_NOISE * n_users``. ``fallback`` says what the known users
    get instead (``None``: the fit runs as planned); ``level``: whether the
    fallback releases the users' median
    (:func:`~skdpp.privacy._quantile.median_found`).
    """
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
    return (f"{text}. Use more users or a larger epsilon. (A data-independent rule: "
            f"n_users, epsilon, delta and the plan.)")


class FallbackPlan(BudgetPlan):
    """The plan of a fit predicted useless: at most one release (:func:`fallback_plan`).

    Phase :data:`LEVEL_PHASE` (one exponential-mechanism selection, the whole
    ε, pure DP) when :func:`~skdpp.privacy._quantile.median_found`, else no
    phase: nothing is released.

    Attributes
    ----------
    message : str
        The :class:`~skdpp.exceptions.UselessFitWarning` of the fit.
    """

    def __init__(self, epsilon, delta, *, message, level):
        super().__init__(epsilon, delta)
        self.message = message
        if level:
            self.add_rest(LEVEL_PHASE, mechanism="exponential")


def fallback_plan(plan, n_users, name, fallback=LINEAR_FALLBACK, *, level=True):
    """``plan``, or the :class:`FallbackPlan` of a fit ``plan`` predicts useless.

    The rule of :func:`useless_fit_message` on ``plan``'s phase ``"clip"``
    (public: ``n_users``, ε, δ, the release counts). A useless fit's releases
    would be mostly noise, and its budget is better spent on the one value
    that is still within reach: the cold-start level (``level``: the model
    has one, and :func:`~skdpp.privacy._quantile.median_found`). A plan with
    a user-fixed noise multiplier, or without ``"clip"``, is kept.
    """
    if plan.fixed_noise or CLIP_PHASE not in plan:
        return plan
    level = bool(level) and median_found(plan.epsilon, n_users)
    message = useless_fit_message(plan.calibrate()[CLIP_PHASE], n_users, name, fallback,
                                  level)
    if message is None:
        return plan
    return FallbackPlan(plan.epsilon, plan.delta, message=message, level=level)


def fallback_level(release, reduce, n_users):
    """A :class:`FallbackPlan` fit's cold-start level, after its warning.

    The users' median of one value each (``reduce``, as for
    :func:`~skdpp.privacy._quantile.private_median`: the mean labels), or the
    prior 0 when the plan releases nothing.
    """
    warnings.warn(release.plan.message, UselessFitWarning, stacklevel=_caller_stacklevel())
    if LEVEL_PHASE not in release.plan:
        return 0.0
    return private_median(release, LEVEL_PHASE, reduce, n_users=n_users)


def mean_label_values(block, state, fn):
    """Block function: ``fn`` of the block's users' mean labels (for :func:`fallback_level`)."""
    return fn(user_means(block, np.asarray(block.take(block.y), dtype=np.float64))), state


def fallback_note(release, level_attr):
    """The report note of a :class:`FallbackPlan` fit (public values only)."""
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


def at_grid_edge(value):
    """Whether a released ``"auto"`` bound is on the lower end of the public grid."""
    grid = quantile_grid()
    return isinstance(value, (int, float, np.floating)) and 0 < float(value) <= grid[0]


#: A released clip bound of the users' gradient norms above this multiple of
#: its public upper bound (:func:`gradient_bound_inconsistent`) means the
#: noisy search went astray.
GRADIENT_BOUND_SLACK = 4.0


def gradient_bound_inconsistent(clip_norm, feature_scale, labels, centred):
    """Whether a released gradient-norm bound contradicts the other releases.

    Each user's squared-loss gradient at ``w = 0`` is
    ``mean_r x_r y_r``, of norm at most ``rms_r ||x_r|| * max_r |y_r|``
    (Cauchy-Schwarz); ``|y_r|`` is at most the label range's width for rows
    centred on the user's means (else its largest absolute end). The bound
    holds user by user, so every quantile of the norms is at most the same
    quantile of the rms row norms (``feature_scale``) times that label bound.
    A released ``clip_norm`` more than ``GRADIENT_BOUND_SLACK`` times that
    is impossible up to the searches' noise: the noisy bisection went astray
    and the weights learned with it are noise. Post-processing of released
    values only (no privacy cost).
    """
    if labels is None or not all(isinstance(v, (int, float, np.floating))
                                 for v in (clip_norm, feature_scale)):
        return False
    lo, hi = labels
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    width = (hi - lo) if centred else max(abs(lo), abs(hi))
    return float(clip_norm) > GRADIENT_BOUND_SLACK * float(feature_scale) * width


def scaling_notes(scaled, dropped, labels, bounds):
    """Report notes of the per-feature scales, the label range and grid-edge bounds."""
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
        notes.append(
            f"{dropped} column(s) got a scale on the lower edge of the public grid (constant "
            f"within most users, or counts dominated by noise): treated as no information "
            f"and dropped (scale inf); post-processing, no privacy cost.")
    if not all(np.isfinite(labels)):
        notes.append("An end of the label range fell on the edge of its public grid, or on "
                     "the wrong side of the released location of the users' mean labels "
                     "(its search went astray): that side is not clamped (post-processing, "
                     "no privacy cost).")
    edge = sorted(name for name, value in bounds.items() if at_grid_edge(value))
    if edge:
        notes.append(
            f"{', '.join(edge)}: on the lower edge of the public grid (the users' "
            f"statistics are about 0 in the standardised units, or noise): the shared "
            f"part learns nothing from them; predictions rest on the users' own means "
            f"and the cold-start intercept (post-processing, no privacy cost).")
    return tuple(notes)
