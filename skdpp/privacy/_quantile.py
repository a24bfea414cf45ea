"""Private quantiles of per-user statistics (for data-driven clip bounds).

A clip bound chosen from the private data is itself a release: skdpp chooses it
with the exponential mechanism over a fixed, public, log-spaced grid of
candidates (Smith 2011; the "one-shot" alternative to the adaptive clipping of
Andrew et al. 2021). Each user contributes one value ``a_i >= 0`` (e.g. the norm
of its contribution at the start of training); the score of candidate ``c_j``
is

    s_j = -| #{i : a_i <= c_j} - q n |,

whose sensitivity under replace-one-user is 1 (one user's value moves each count
by at most 1; ``n`` is public). The counts are a cumulative histogram of the
users' values over the grid, a sum over users, so blocks of users contribute
partial histograms (:func:`cumulative_counts`) that add up.

References
----------
.. [1] Smith, A. (2011). Privacy-preserving statistical estimation with optimal
       convergence rates. STOC 2011.
.. [2] Andrew, G., Thakkar, O., McMahan, H. B. and Ramaswamy, S. (2021).
       Differentially Private Learning with Adaptive Clipping. NeurIPS 2021.
       arXiv:1905.03871.

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy import BudgetPlan, Releaser
>>> from skdpp.privacy._quantile import cumulative_counts, private_quantile, quantile_grid
>>> grid = quantile_grid()
>>> values = np.random.default_rng(0).lognormal(mean=1.0, size=5000)
>>> plan = BudgetPlan(epsilon=1.0, delta=0.0)
>>> plan.add_rest("clip_scale", mechanism="exponential")
>>> release = Releaser(plan.calibrate(), np.random.default_rng(0))
>>> c = private_quantile(release, "clip_scale", cumulative_counts(values, grid), grid,
...                      quantile=0.5, n_users=5000)
>>> bool(0.5 * np.exp(1.0) < c < 2.0 * np.exp(1.0))   # the median is e
True
"""

import numpy as np

__all__ = ["cumulative_counts", "interval_quantile_scores", "private_interval_quantile",
           "private_quantile", "quantile_grid"]

#: Default grid: 8 candidates per decade over [1e-8, 1e8] (129 values).
DEFAULT_GRID_RANGE = (1e-8, 1e8)
DEFAULT_PER_DECADE = 8


def quantile_grid(low=DEFAULT_GRID_RANGE[0], high=DEFAULT_GRID_RANGE[1],
                  per_decade=DEFAULT_PER_DECADE):
    """The public candidate grid: ``per_decade`` log-spaced values per decade.

    Parameters
    ----------
    low, high : float, default=1e-8, 1e8
        Range of the grid (public; values outside it are represented by the
        end points).
    per_decade : int, default=8
        Resolution (adjacent candidates differ by a factor ``10**(1/per_decade)``).

    Returns
    -------
    grid : ndarray of shape (n_candidates,)
    """
    if not 0 < low < high < np.inf:
        raise ValueError(f"quantile_grid needs 0 < low < high < inf, got {low!r}, {high!r}.")
    n = int(round(np.log10(high / low) * per_decade)) + 1
    return np.logspace(np.log10(low), np.log10(high), n)


def cumulative_counts(values, grid):
    """Partial cumulative histogram ``counts[j] = #{i : values[i] <= grid[j]}``.

    Parameters
    ----------
    values : array-like of shape (n_users_in_block,)
        One non-negative value per user (NaN counts as above every candidate,
        +inf likewise).
    grid : ndarray of shape (n_candidates,)

    Returns
    -------
    counts : ndarray of shape (n_candidates,), float
        Sums over blocks of users give the counts of all users; one user
        changes every entry by at most 1.
    """
    values = np.asarray(values, dtype=np.float64)
    first = np.searchsorted(grid, np.where(np.isnan(values), np.inf, values), side="left")
    hist = np.bincount(first, minlength=grid.shape[0] + 1)[:grid.shape[0]]
    return np.cumsum(hist).astype(np.float64)


def private_quantile(release, phase, counts, grid, *, quantile, n_users):
    """Release the grid value closest (in rank) to the ``quantile`` of the users' values.

    Parameters
    ----------
    release : Releaser
        The fit's release helper; ``phase`` must be an exponential-mechanism
        phase of its plan.
    phase : str
    counts : ndarray of shape (n_candidates,)
        :func:`cumulative_counts` summed over all users.
    grid : ndarray of shape (n_candidates,)
        The public candidates.
    quantile : float in (0, 1]
        Target quantile (e.g. 0.9: about 90 % of the users are not clipped).
    n_users : int
        The public number of users.

    Returns
    -------
    value : float
        The selected candidate (``grid[j]``).

    Notes
    -----
    Scores ``-|counts_j - q n|`` have sensitivity 1 under replace-one-user;
    the selection is an exponential mechanism (ε-DP, ε-bounded range).
    """
    scores = -np.abs(np.asarray(counts, dtype=np.float64) - quantile * n_users)
    return float(grid[release.exponential(phase, scores, sensitivity=1.0)])


def interval_quantile_scores(counts, *, quantile, n_users):
    """Scores of the grid values as the ``quantile``: ``-dist(q n, [C_{j-1}, C_j])``.

    ``C_j = counts[j]`` is the number of users with a value ``<= grid[j]``
    (``C_{-1} = 0``); the ``q``-quantile lies in ``(grid[j-1], grid[j]]``
    exactly when ``C_{j-1} < q n <= C_j``, and those candidates score 0. Unlike
    ``-|C_j - q n|`` (:func:`private_quantile`), the score stays informative
    when every value falls between two adjacent grid values (then that
    score is flat over the whole grid). Each ``C`` moves by at most 1 under
    replace-one-user, so every score does too: sensitivity 1.

    Returns
    -------
    scores : ndarray of shape (n_candidates,)
    """
    counts = np.asarray(counts, dtype=np.float64)
    target = quantile * n_users
    below = np.concatenate([[0.0], counts[:-1]])
    return -np.maximum(0.0, np.maximum(below - target, target - counts))


def private_interval_quantile(release, phase, counts, grid, *, quantile, n_users):
    """Release the grid value ending the grid interval that holds the ``quantile``.

    The exponential mechanism (score sensitivity 1) over
    :func:`interval_quantile_scores`; same arguments as
    :func:`private_quantile`.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy import BudgetPlan, Releaser
    >>> from skdpp.privacy._quantile import (cumulative_counts, private_interval_quantile,
    ...                                      quantile_grid)
    >>> grid = quantile_grid()
    >>> values = np.full(5000, 0.9)           # all between the grid values 0.75 and 1
    >>> plan = BudgetPlan(epsilon=1.0, delta=0.0)
    >>> plan.add_rest("clip", mechanism="exponential")
    >>> release = Releaser(plan.calibrate(), np.random.default_rng(0))
    >>> float(private_interval_quantile(release, "clip", cumulative_counts(values, grid),
    ...                                 grid, quantile=0.5, n_users=5000))
    1.0
    """
    scores = interval_quantile_scores(counts, quantile=quantile, n_users=n_users)
    return float(grid[release.exponential(phase, scores, sensitivity=1.0)])
