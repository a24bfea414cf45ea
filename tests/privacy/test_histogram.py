"""Scale-free bounds from noisy log-histograms (skdpp.privacy._histogram)."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.privacy import BudgetPlan, Releaser
from skdpp.privacy._histogram import bin_counts, detected_quantile, log_bins
from tests.privacy.harness import clopper_pearson


def test_log_bins():
    edges = log_bins(1e-2, 1e2, per_decade=2)
    assert_allclose(edges, [0.0, 1e-2, 10**-1.5, 0.1, 10**-0.5, 1.0, 10**0.5, 10.0,
                            10**1.5, 100.0])
    signed = log_bins(1e-2, 1e2, per_decade=2, signed=True)
    positive = edges[1:]
    assert_allclose(signed, np.concatenate([-positive[::-1], [0.0], positive]))
    with pytest.raises(ValueError, match="low < high"):
        log_bins(1.0, 1.0)


def test_bin_counts_one_count_per_value():
    edges = log_bins(1e-2, 1e2, per_decade=1)  # [0, .01, .1, 1, 10, 100]
    values = np.array([0.0, 5e-3, 0.5, 1.0, 99.0, 1e9, np.inf, np.nan, -3.0])
    counts = bin_counts(values, edges)
    # bins [0,.01) [.01,.1) [.1,1) [1,10) [10,100); below/above fold into the ends
    assert_array_equal(counts, [3, 0, 1, 1, 4])
    assert counts.sum() == values.size


def test_replacing_one_value_moves_the_histogram_by_at_most_sqrt2():
    edges = log_bins(signed=True)
    rng = np.random.default_rng(0)
    values = rng.normal(3.0, 1.0, 50)
    base = bin_counts(values, edges)
    for new in [0.0, -1e300, 1e300, np.nan, np.inf, 3.0, 1e-12]:
        changed = values.copy()
        changed[7] = new
        assert np.linalg.norm(bin_counts(changed, edges) - base) <= np.sqrt(2)


def test_detected_quantile_without_noise_is_the_exact_bin():
    edges = log_bins()
    values = np.random.default_rng(1).uniform(2.0, 9.0, 1000)
    counts = bin_counts(values, edges)
    for q in (0.1, 0.5, 0.9):
        low, high = detected_quantile(counts, edges, q, noise_std=0.0)
        assert low <= np.quantile(values, q) < high * (1 + 1e-12)
        assert high / low == pytest.approx(10 ** (1 / 8))


def test_detection_ignores_noise_bins():
    # Pure noise never passes the threshold more often than alpha; mass on
    # the data's bins is found even with many noisy empty bins.
    edges = log_bins(signed=True)
    rng = np.random.default_rng(2)
    n_runs, sigma = 500, 10.0
    false = sum(int((rng.normal(0, sigma, edges.size - 1)
                     > sigma * 4.05).any()) for _ in range(n_runs))  # the tau of alpha=.01
    low, _ = clopper_pearson(false, n_runs, 1e-3)
    assert low <= 0.01
    counts = bin_counts(rng.normal(3.6, 0.3, 300), edges)
    for _ in range(20):
        noisy = counts + rng.normal(0, 25.0, counts.shape)
        lo = detected_quantile(noisy, edges, 0.25, noise_std=25.0)[0]
        hi = detected_quantile(noisy, edges, 0.75, noise_std=25.0)[1]
        assert 2.0 < lo < hi < 6.0


def test_no_detected_bin_falls_back_to_the_largest_count():
    edges = log_bins(1e-2, 1e2, per_decade=1)
    low, high = detected_quantile(np.array([0.0, 1.0, 3.0, 2.0, 0.5]), edges, 0.5,
                                  noise_std=100.0)
    assert (low, high) == (0.1, 1.0)  # bin 2 of [0, .01, .1, 1, 10, 100]


def test_gaussian_release_of_a_histogram_has_the_stated_noise():
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add_rest("clip")
    release = Releaser(plan.calibrate(), np.random.default_rng(0))
    edges = log_bins()
    counts = bin_counts(np.full(100, 4.0), edges)
    noisy = release.gaussian("clip", counts, sensitivity=np.sqrt(2))
    std = release.noise_std("clip", np.sqrt(2))
    assert_allclose(np.std(noisy - counts), std, rtol=0.15)
    assert detected_quantile(noisy, edges, 0.5, noise_std=std)[0] < 4.0
