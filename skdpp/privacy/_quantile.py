"""Private quantiles and locations of per-user statistics (:ref:`private_bounds`).

Users' values enter only through sums over blocks of whole users
(:func:`cumulative_counts`, :func:`distance_counts`, :func:`clipped_deviation_sum`,
summed by the ``reduce(fn)`` callables), so the same code runs in-process and on Dask.

References
----------
.. [1] Smith, A. (2011). Privacy-preserving statistical estimation with optimal
       convergence rates. STOC 2011.
.. [2] Karwa, V. and Vadhan, S. (2018). Finite sample differentially private
       confidence intervals. ITCS 2018. arXiv:1711.03908.

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy import BudgetPlan, Releaser
>>> from skdpp.privacy._quantile import (cumulative_counts, private_quantile,
...                                      quantile_grid, search_steps)
>>> grid = quantile_grid()
>>> values = np.random.default_rng(0).lognormal(mean=1.0, size=5000)
>>> plan = BudgetPlan(epsilon=1.0, delta=1e-6)
>>> plan.add_rest("clip", count=search_steps(grid))
>>> release = Releaser(plan.calibrate(), np.random.default_rng(0))
>>> c = private_quantile(release, "clip", cumulative_counts(values, grid), grid,
...                      quantile=0.5, n_users=5000)
>>> bool(0.5 * np.exp(1.0) < c < 2.0 * np.exp(1.0))   # the median is e
True
"""

import functools
import math

import numpy as np

from ._clipping import clip_values

__all__ = ["CLIP_PHASE", "LOCATION_SEARCH_STEPS", "clipped_deviation_sum", "cumulative_counts",
           "distance_counts", "median_found", "private_location", "private_median",
           "private_quantile", "quantile_grid", "refined_median", "search_steps"]

#: The phase of the clip-bound searches of the estimators and transformers.
CLIP_PHASE = "clip"
#: Public range of the candidate grids (values outside it map to the end points).
GRID_RANGE = (1e-8, 1e8)
#: Candidates of the positive grid (adjacent ones differ by 10**(16/63) = 1.79).
GRID_SIZE = 64
#: Candidates of each linear refinement of :func:`private_location`.
FINE_SIZE = 256
#: Linear refinements of the median in :func:`private_location`: after two the
#: resolution is ``|median| * 0.79 / 256**2`` (0.1 at 10^4).
FINE_LEVELS = 2


def quantile_grid(*, signed=False, size=GRID_SIZE, low=GRID_RANGE[0], high=GRID_RANGE[1]):
    """The public candidate grid of :func:`private_quantile` (increasing): ``size`` (a
    power of two) log-spaced values in ``[low, high]`` (``0 < low < high < inf``),
    and with ``signed=True`` also their negatives (``2 * size`` candidates)."""
    if size < 2 or size & (size - 1):
        raise ValueError(f"size must be a power of two >= 2, got {size!r}.")
    if not 0 < low < high < np.inf:
        raise ValueError(f"quantile_grid needs 0 < low < high < inf, got {low!r}, {high!r}.")
    pos = np.logspace(math.log10(low), math.log10(high), size)
    return np.concatenate([-pos[::-1], pos]) if signed else pos


def search_steps(grid):
    """Number of releases of :func:`private_quantile` on ``grid`` (or its length)."""
    n = grid if isinstance(grid, (int, np.integer)) else len(grid)
    if n < 2 or n & (n - 1):
        raise ValueError(f"the grid must hold a power of two >= 2 of candidates, got {n}.")
    return int(n).bit_length() - 1


def cumulative_counts(values, grid):
    """``counts[j] = #{i : values[i] <= grid[j]}`` over a block's users (NaN and +inf
    above every candidate): block sums give all users' counts; one user moves each by <= 1."""
    values = np.asarray(values, dtype=np.float64)
    first = np.searchsorted(grid, np.where(np.isnan(values), np.inf, values), side="left")
    hist = np.bincount(first, minlength=grid.shape[0] + 1)[:grid.shape[0]]
    return np.cumsum(hist).astype(np.float64)


def private_quantile(release, phase, counts, grid, *, quantile, n_users):
    """The ``quantile`` (in (0, 1]) of one value per user on ``grid``, by noisy binary search.

    Finds (up to the noise) the smallest ``grid[j]`` with at least ``quantile *
    n_users`` values ``<= grid[j]``: each of the ``search_steps(grid)`` steps releases
    ``counts[mid]`` (:func:`cumulative_counts` over all users) with Gaussian noise in
    ``phase``, L2 sensitivity 1 under replace-one-user (``n_users`` and the increasing
    ``grid`` are public). Returns a point of the selected cell (post-processing).
    """
    steps = search_steps(grid)
    counts = np.asarray(counts, dtype=np.float64)
    target = float(quantile) * float(n_users)
    lo, hi = 0, len(grid) - 1
    for _ in range(steps):
        mid = (lo + hi) // 2
        noisy = release.gaussian(phase, counts[mid], sensitivity=1.0)
        if float(noisy) >= target:
            hi = mid
        else:
            lo = mid + 1
    return _cell_point(grid, lo)


def _cell_point(grid, j):
    """A point of the cell ``(grid[j - 1], grid[j]]``: geometric midpoint for ends of
    one sign, else arithmetic; ``grid[0]`` for ``j = 0``."""
    if j == 0:
        return float(grid[0])
    a, b = float(grid[j - 1]), float(grid[j])
    if a > 0:
        return math.sqrt(a * b)
    if b < 0:
        return -math.sqrt(a * b)
    return 0.5 * (a + b)


def _cell(grid, j):
    """The cell ``[grid[j - 1], grid[j]]`` of a quantile selected as ``grid[j]``."""
    if j == 0:
        return 2.0 * grid[0] - grid[1], grid[0]  # below the grid: one cell further
    return grid[j - 1], grid[j]


#: Releases of :func:`refined_median`.
REFINED_MEDIAN_STEPS = search_steps(2 * GRID_SIZE) + FINE_LEVELS * search_steps(FINE_SIZE)
#: Releases of the searches of :func:`private_location` (its mean is one more).
LOCATION_SEARCH_STEPS = REFINED_MEDIAN_STEPS + search_steps(GRID_SIZE)


def _finite_or(values, fill):
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, fill)


def value_counts(values, grid):
    """:func:`cumulative_counts` with every non-finite value above all candidates."""
    return cumulative_counts(_finite_or(values, np.inf), grid)


def distance_counts(values, center, grid):
    """``counts[j] = #{i : |values[i] - center| <= grid[j]}`` (non-finite: above all)."""
    with np.errstate(over="ignore", invalid="ignore"):
        dist = np.abs(_finite_or(values, np.inf) - center)
    return cumulative_counts(dist, grid)


def clipped_deviation_sum(values, center, radius):
    """``[sum_i clip(values[i] - center, radius)]``; a non-finite value contributes 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        dev = _finite_or(values, center) - center
    return np.array([clip_values(_finite_or(dev, 0.0), radius).sum()])


def refined_median(release, phase, reduce, *, n_users):
    """The median of one scalar per user: :func:`private_quantile` on the signed grid,
    then ``FINE_LEVELS`` times on ``FINE_SIZE`` linear candidates over the selected
    cell (:data:`REFINED_MEDIAN_STEPS` releases of ``phase``, sensitivity 1; resolution
    ``|median| * 0.79 / 256**2``). ``reduce`` as in :func:`private_location`."""
    def search(grid):
        counts = reduce(functools.partial(value_counts, grid=grid))
        return private_quantile(release, phase, counts, grid, quantile=0.5, n_users=n_users)

    grid = quantile_grid(signed=True)
    median = search(grid)
    for _ in range(FINE_LEVELS):
        grid = np.linspace(*_cell(grid, int(np.searchsorted(grid, median))), FINE_SIZE)
        median = search(grid)
    return median


def private_location(release, reduce, *, n_users, search_phase, mean_phase,
                     radius_quantile=0.9, return_shift=False):
    """DP mean of one scalar per user, clipped around a private median (:ref:`private_bounds`).

    Median ``m`` (:func:`refined_median`) and radius ``R`` (the ``radius_quantile``
    of ``|v_i - m|``): the :data:`LOCATION_SEARCH_STEPS` releases (sensitivity 1) of
    ``search_phase``; then ``m + (sum_i clip(v_i - m, R) + N(0, (2 R z)^2)) / n_users``,
    one release of ``mean_phase`` (L2 sensitivity ``2 R``; ``n_users`` public). ``reduce(fn)``: the
    sum over all users' blocks of ``fn(values)`` (a non-finite value counts above
    every candidate and contributes 0 to the mean). Returns ``(mean, R)``, and with
    ``return_shift`` also ``(mean - m) / R`` (about ``±1`` when the search went astray).
    """
    center = refined_median(release, search_phase, reduce, n_users=n_users)
    pos = quantile_grid()
    counts = reduce(functools.partial(distance_counts, center=center, grid=pos))
    radius = private_quantile(release, search_phase, counts, pos,
                              quantile=radius_quantile, n_users=n_users)
    total = reduce(functools.partial(clipped_deviation_sum, center=center, radius=radius))
    noisy = release.gaussian(mean_phase, total, sensitivity=2.0 * radius, clip_norm=radius)
    shift = float(np.asarray(noisy).reshape(-1)[0]) / max(n_users, 1)
    if return_shift:
        return center + shift, radius, shift / radius if radius > 0 else 0.0
    return center + shift, radius


#: Positive candidates of :func:`private_median` (ratio ``10**(16/1023) = 1.037``).
MEDIAN_GRID_SIZE = 1024
#: :func:`median_found`'s bound on the chance of a selection outside the values.
MEDIAN_FAILURE = 1e-5


def private_median(release, phase, reduce, *, n_users):
    """The median of one scalar per user: one exponential-mechanism selection.

    Candidates ``quantile_grid(signed=True, size=MEDIAN_GRID_SIZE)``, score ``-|#{i :
    v_i <= c_j} - n/2|``: replacing one user moves each score by at most 1
    (``n_users`` public), so sensitivity 1, one release of the exponential phase
    ``phase``, pure ε-DP. ``reduce`` as in :func:`private_location`.
    """
    grid = quantile_grid(signed=True, size=MEDIAN_GRID_SIZE)
    below = np.asarray(reduce(functools.partial(value_counts, grid=grid)), dtype=np.float64)
    scores = -np.abs(below - 0.5 * float(n_users))
    return float(grid[release.exponential(phase, scores, sensitivity=1.0)])


def median_found(epsilon, n_users):
    """Public rule: :func:`private_median` at ``epsilon`` lands among the values, i.e.
    ``G exp(-ε n / 4) <= MEDIAN_FAILURE`` (``G = 2 * MEDIAN_GRID_SIZE``; :ref:`private_bounds`)."""
    if epsilon == np.inf:
        return True
    size = 2 * MEDIAN_GRID_SIZE
    return float(epsilon) * max(int(n_users), 0) >= 4.0 * math.log(size / MEDIAN_FAILURE)
