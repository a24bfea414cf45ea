"""Scale-free clip bounds from a noisy log-histogram of per-user statistics.

A clip bound chosen from the private data is a release. This module chooses it
from a **Gaussian histogram** over fixed, public, log-spaced bins: every user
adds a one-hot vector (the bin of their statistic), so replacing one user
moves the histogram by ``sqrt(2)`` in L2; the fit releases it with the Gaussian
mechanism and reads quantiles off the noisy counts (post-processing), keeping
only the bins whose noisy count clears a threshold set so that all empty bins
stay below it with probability ``1 - alpha``.

Compared with the exponential-mechanism quantile of :mod:`._quantile`, whose
score ``-|count - q n|`` is flat over the many candidates outside the data's
range (they share one score, and together they win when ``epsilon n`` is
small), the histogram's evidence is per bin: a statistic concentrated in a
few bins (e.g. users' mean ratings) stands out clearly while the empty bins
carry noise only. Measured on MovieLens with 305 users at ``epsilon = 1``:
the exponential-mechanism median of the users' mean ratings over a signed log
grid picked a candidate outside the data in most fits; the histogram's
detected median stays in the data's bins.

Bins are ``[e_i, e_{i+1})`` for the sorted edges ``e``; values outside
``[e_0, e_last)`` are folded into the end bins and NaN counts in the last bin
(so one user's extreme values only move their own count).

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy._histogram import bin_counts, detected_quantile, log_bins
>>> edges = log_bins()
>>> counts = bin_counts(np.random.default_rng(0).uniform(3.0, 4.0, 500), edges)
>>> lo, hi = detected_quantile(counts, edges, 0.5, noise_std=0.0)
>>> bool(lo <= 3.5 < hi)
True
"""

import numpy as np
from scipy import special

__all__ = ["bin_counts", "detected_quantile", "log_bins"]

#: Family-wise probability that some empty bin passes the detection threshold.
DEFAULT_ALPHA = 0.01


def log_bins(low=1e-8, high=1e8, per_decade=8, *, signed=False):
    """Public bin edges: ``per_decade`` log-spaced edges per decade over ``[low, high]``.

    Parameters
    ----------
    low, high : float, default=1e-8, 1e8
        Range of the positive edges (values outside fall in the end bins).
    per_decade : int, default=8
        Edges per decade (adjacent edges differ by ``10**(1/per_decade)``).
    signed : bool, default=False
        Mirror the edges for negative values, with ``0`` as an edge.

    Returns
    -------
    edges : ndarray
        Sorted edges; ``len(edges) - 1`` bins.
    """
    if not 0 < low < high < np.inf:
        raise ValueError(f"log_bins needs 0 < low < high < inf, got {low!r}, {high!r}.")
    n = int(round(np.log10(high / low) * per_decade)) + 1
    edges = np.logspace(np.log10(low), np.log10(high), n)
    if signed:
        edges = np.concatenate([-edges[::-1], [0.0], edges])
    else:
        edges = np.concatenate([[0.0], edges])
    return edges


def bin_counts(values, edges):
    """Counts of ``values`` per bin (one per value): a per-block partial histogram.

    Parameters
    ----------
    values : array-like of shape (n_users_in_block,)
        One value per user. Values below ``edges[0]`` count in the first bin,
        values at or above ``edges[-1]`` (and NaN) in the last.
    edges : ndarray of shape (n_bins + 1,)

    Returns
    -------
    counts : ndarray of shape (n_bins,), float
        Sums over blocks give the histogram of all users; replacing one user
        moves it by at most ``sqrt(2)`` in L2.
    """
    values = np.asarray(values, dtype=np.float64)
    n_bins = edges.shape[0] - 1
    index = np.searchsorted(edges, np.where(np.isnan(values), np.inf, values),
                            side="right") - 1
    index = np.clip(index, 0, n_bins - 1)
    return np.bincount(index, minlength=n_bins).astype(np.float64)


def detected_quantile(noisy_counts, edges, quantile, *, noise_std, alpha=DEFAULT_ALPHA):
    """The bin holding the ``quantile`` of the detected mass of a noisy histogram.

    Post-processing of a released histogram: bins whose noisy count is at
    most ``tau = noise_std * Phi^-1(1 - alpha / n_bins)`` are dropped (every
    empty bin stays below ``tau`` with probability at least ``1 - alpha``;
    ``tau = 0`` without noise), the others keep their noisy count as mass.
    If no bin passes, the bin with the largest noisy count is used.

    Parameters
    ----------
    noisy_counts : ndarray of shape (n_bins,)
    edges : ndarray of shape (n_bins + 1,)
    quantile : float in [0, 1]
    noise_std : float
        Standard deviation of the Gaussian noise of each count (public).
    alpha : float, default=0.01

    Returns
    -------
    low, high : float
        Edges of the selected bin.
    """
    noisy = np.asarray(noisy_counts, dtype=np.float64)
    n_bins = noisy.shape[0]
    tau = 0.0
    if noise_std > 0:
        tau = float(noise_std) * float(special.ndtri(1.0 - alpha / n_bins))
    mass = np.where(noisy > tau, noisy, 0.0)
    total = mass.sum()
    if not total > 0:
        index = int(np.argmax(noisy))
    else:
        cumulative = np.cumsum(mass)
        index = int(np.searchsorted(cumulative, quantile * total, side="left"))
        index = min(index, n_bins - 1)
        while mass[index] == 0 and index < n_bins - 1:  # land on a detected bin
            index += 1
    return float(edges[index]), float(edges[index + 1])
