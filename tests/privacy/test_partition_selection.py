"""Private partition selection: the threshold event and the release helper."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.privacy import (
    BudgetPlan,
    GaussianEvent,
    PrivacyAccountant,
    Releaser,
    ThresholdEvent,
    gaussian_epsilon,
)
from skdpp.privacy.calibration import Phase, calibrate, plan_events
from tests.privacy.harness import clopper_pearson


def test_threshold_delta_is_subtracted_then_converted():
    acc = PrivacyAccountant()
    acc.compose(GaussianEvent(3.0), count=4, phase="counts")
    acc.compose(ThresholdEvent(2e-7), phase="counts")
    expected = gaussian_epsilon(2.0 / 3.0, 1e-6 - 2e-7) - math.log1p(-2e-7)
    assert_allclose(acc.get_epsilon(1e-6), expected, rtol=1e-12)
    assert acc.threshold_delta == pytest.approx(2e-7)
    # get_delta is the inverse: delta of the rest plus the threshold delta
    assert_allclose(acc.get_delta(expected), 1e-6, rtol=1e-6)
    # delta not above the threshold's: no finite epsilon
    assert acc.get_epsilon(2e-7) == math.inf


def test_calibration_reserves_the_threshold_delta():
    phases = [Phase("counts", 0.2, "gaussian", threshold_delta=3e-7),
              Phase("items", 0.8, "gaussian", count=5)]
    params = calibrate(phases, epsilon=2.0, delta=1e-6)
    acc = PrivacyAccountant()
    acc.compose(plan_events(phases, params), phase="plan")
    assert_allclose(acc.get_epsilon(1e-6), 2.0, rtol=1e-9)
    with pytest.raises(ValueError, match="threshold"):
        calibrate([Phase("counts", 1.0, "gaussian", threshold_delta=1e-6)],
                  epsilon=1.0, delta=1e-6)


_PLANS = {}


def _plan(delta_t):
    if delta_t not in _PLANS:  # calibrate once per delta_t (fits differ only in their seed)
        plan = BudgetPlan(epsilon=1.0, delta=0.2)
        plan.add("catalogue", share=0.5, threshold_delta=delta_t)
        plan.add_rest("other")
        _PLANS[delta_t] = plan.calibrate()
    return _PLANS[delta_t]


def _selection(delta_t, seed, counts, *, threshold_shift=None):
    release = Releaser(_plan(delta_t), np.random.default_rng(seed))
    if threshold_shift is not None:  # broken variant: a fixed threshold
        z = release.noise_multiplier("catalogue")
        noisy = np.asarray(counts) + np.random.default_rng(seed).normal(0, z, len(counts))
        return noisy > threshold_shift, release
    keep, _ = release.select_partitions("catalogue", counts, sensitivity=1.0,
                                        max_contribution=1.0, max_partitions=2)
    return keep, release


def test_unique_partitions_pass_with_probability_at_most_the_budget():
    # Two partitions held by one user only (count 1 each, max_partitions=2):
    # each must pass with probability <= delta_t / 2. 4000 fits, 99.9 % CI.
    delta_t, n = 0.05, 4000
    passed = sum(int(_selection(delta_t, s, [1.0, 1.0, 500.0])[0][:2].any())
                 for s in range(n))
    low, _ = clopper_pearson(passed, n, 1e-3)
    assert low <= delta_t, (passed / n, delta_t)
    # the popular partition is kept
    assert _selection(delta_t, 0, [1.0, 1.0, 500.0])[0][2]


def test_broken_fixed_threshold_is_caught():
    # Threshold at 2 (no noise-dependent margin): unique partitions pass far too often.
    delta_t, n = 0.05, 2000
    passed = sum(int(_selection(delta_t, s, [1.0, 1.0], threshold_shift=2.0)[0].any())
                 for s in range(n))
    low, _ = clopper_pearson(passed, n, 1e-3)
    assert low > delta_t


def test_report_accounts_for_the_threshold():
    keep, release = _selection(1e-3, 0, [1.0, 300.0])
    report = release.report(n_users=100, released=("catalogue",), local=())
    assert report.delta_spent == pytest.approx(0.2)
    assert report.epsilon_spent <= 1.0 * (1 + 1e-9)
    names = [p.name for p in report.phases]
    assert "catalogue" in names


def test_infinite_epsilon_keeps_every_present_partition():
    plan = BudgetPlan(epsilon=np.inf, delta=1e-6)
    plan.add("catalogue", share=0.5, threshold_delta=1e-7)
    plan.add_rest("other")
    release = Releaser(plan.calibrate(), np.random.default_rng(0))
    keep, counts = release.select_partitions("catalogue", np.array([0.0, 1.0, 3.0]),
                                             sensitivity=1.0, max_contribution=1.0,
                                             max_partitions=1)
    assert keep.tolist() == [False, True, True]
    assert counts.tolist() == [0.0, 1.0, 3.0]
