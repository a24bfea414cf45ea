"""Tests of the private quantile and location (scale-free bounds): Gaussian noisy search."""

import functools

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.privacy import BudgetPlan, Releaser
from skdpp.privacy._quantile import (
    LOCATION_SEARCH_STEPS,
    cumulative_counts,
    private_location,
    private_quantile,
    quantile_grid,
    search_steps,
)
from tests.privacy.harness import record_releases

N_USERS = 200


def _release(epsilon, seed=0, steps=None):
    plan = BudgetPlan(epsilon=epsilon, delta=1e-6)
    plan.add("search", share=0.8, count=steps or LOCATION_SEARCH_STEPS)
    plan.add_rest("mean")
    return Releaser(plan.calibrate(), np.random.default_rng(seed))


def _quantile(release, values, grid, q=0.9):
    return private_quantile(release, "search", cumulative_counts(values, grid), grid,
                            quantile=q, n_users=len(values))


def _location(release, values, blocks=2):
    parts = np.array_split(values, blocks)

    def reduce(fn):
        return functools.reduce(np.add, (fn(p) for p in parts))

    return private_location(release, reduce, n_users=len(values), search_phase="search",
                            mean_phase="mean")


def test_grid_and_steps_are_public_and_validated():
    assert search_steps(quantile_grid()) == 6
    assert search_steps(quantile_grid(signed=True)) == 7
    assert np.all(np.diff(quantile_grid(signed=True)) > 0)
    with pytest.raises(ValueError, match="power of two"):
        quantile_grid(size=100)
    with pytest.raises(ValueError, match="0 < low < high"):
        quantile_grid(low=0.0)


def test_counts_add_up_over_blocks():
    grid = quantile_grid()
    values = np.random.default_rng(0).lognormal(size=1000)
    whole = cumulative_counts(values, grid)
    parts = cumulative_counts(values[:300], grid) + cumulative_counts(values[300:], grid)
    assert_array_equal(whole, parts)
    assert whole[-1] == 1000 and np.all(np.diff(whole) >= 0)


@pytest.mark.parametrize("replacement", [0.0, -1e300, 1e-300, 1e300, np.inf, np.nan, 3.0])
@pytest.mark.parametrize("what", ["quantile", "location"])
def test_releases_have_the_stated_sensitivity(what, replacement):
    """Replace one user by an extreme value: every release moves by <= its sensitivity,
    and the number of releases does not change (replayed transcript)."""
    values = np.random.default_rng(1).lognormal(size=N_USERS)
    neighbour = values.copy()
    neighbour[7] = replacement
    grid = quantile_grid()

    def fit(v):
        if what == "quantile":
            _quantile(_release(1.0), v, grid)
        else:
            _location(_release(1.0), v)

    first = record_releases(lambda: fit(values))
    second = record_releases(lambda: fit(neighbour), replay=first)
    assert len(first) == len(second) == (6 if what == "quantile" else LOCATION_SEARCH_STEPS + 1)
    for a, b in zip(first, second):
        assert np.max(np.abs(np.asarray(a.value) - np.asarray(b.value))) <= a.sensitivity
        assert a.sensitivity == b.sensitivity


def test_broken_variant_unclipped_mean_is_caught():
    """The same sensitivity check fails for a mean without the clip to the radius."""
    values = np.random.default_rng(1).lognormal(size=N_USERS)
    neighbour = values.copy()
    neighbour[7] = 1e6

    def unclipped(v, center, radius):
        return np.array([np.sum(v - center)])

    import skdpp.privacy._quantile as q
    original = q.clipped_deviation_sum
    try:
        q.clipped_deviation_sum = unclipped
        first = record_releases(lambda: _location(_release(1.0), values))
        second = record_releases(lambda: _location(_release(1.0), neighbour), replay=first)
    finally:
        q.clipped_deviation_sum = original
    moved = [np.max(np.abs(np.asarray(a.value) - np.asarray(b.value))) > a.sensitivity
             for a, b in zip(first, second)]
    assert any(moved)


def test_quantile_is_accurate_with_enough_users():
    grid = quantile_grid()
    values = np.random.default_rng(2).lognormal(mean=2.0, sigma=1.0, size=20_000)
    picks = [_quantile(_release(1.0, seed), values, grid) for seed in range(10)]
    ranks = np.array([np.mean(values <= p) for p in picks])
    # the rank error is a few users; the grid's resolution (a factor 1.79
    # between candidates) dominates: ranks within +-0.1 of 0.9
    assert np.all(np.abs(ranks - 0.9) < 0.1), ranks


def test_noise_is_used_at_finite_epsilon():
    """Broken variant: without noise, different seeds always give the same pick."""
    grid = quantile_grid()
    values = np.random.default_rng(3).lognormal(size=30)
    exact = {_quantile(_release(np.inf, s), values, grid, q=0.5) for s in range(10)}
    noisy = {_quantile(_release(0.3, s), values, grid, q=0.5) for s in range(10)}
    assert len(exact) == 1 and len(noisy) > 1


@pytest.mark.parametrize("scale, shift", [(1.0, 0.0), (20.0, 0.0), (1.0, 1e4), (1e-3, -7.0)])
def test_location_is_scale_and_shift_free(scale, shift):
    """The relative error of the DP mean does not depend on the units or the offset."""
    values = np.random.default_rng(4).normal(3.5, 0.7, size=5000)
    errors = []
    for seed in range(5):
        mean, radius = _location(_release(1.0, seed), values * scale + shift)
        errors.append(abs(mean - (values.mean() * scale + shift)) / scale)
        assert 0.3 * scale < radius < 5.0 * scale
    assert np.max(errors) < 0.05, errors


def test_location_is_exact_without_noise_up_to_clipping():
    values = np.random.default_rng(5).normal(-2.0, 1.0, size=1000)
    mean, radius = _location(_release(np.inf), values)
    clipped = np.clip(values, mean - radius, mean + radius)
    assert abs(mean - values.mean()) < 0.05
    assert_allclose(radius, np.quantile(np.abs(values - np.median(values)), 0.9), rtol=1.0)
    assert np.mean(clipped != values) < 0.15
