"""Tests for skdpp.privacy.calibration."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.privacy.accounting import PrivacyAccountant
from skdpp.privacy.calibration import Phase, calibrate, plan_events
from skdpp.privacy.events import (
    ComposedEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)


def _spent(phases, params, delta):
    acc = PrivacyAccountant().compose(plan_events(phases, params), phase="plan")
    return acc.get_epsilon(delta), acc.method


def test_five_gaussian_releases_known_value():
    params = calibrate([Phase("iterations", 1.0, "gaussian", count=5)],
                       epsilon=1.0, delta=1e-6)
    assert_allclose(params["iterations"], 9.446669, rtol=1e-6)


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-9)])
def test_gaussian_plan_spends_exactly_target(epsilon, delta):
    phases = [Phase("init", 0.1, "gaussian"), Phase("iterations", 0.9, "gaussian", count=20)]
    params = calibrate(phases, epsilon=epsilon, delta=delta)
    spent, method = _spent(phases, params, delta)
    assert method == "exact-gdp"
    assert spent <= epsilon
    assert_allclose(spent, epsilon, rtol=1e-9)


def test_shares_are_zcdp_fractions():
    phases = [Phase("a", 1.0, "gaussian", count=4), Phase("b", 3.0, "gaussian", count=1)]
    params = calibrate(phases, epsilon=1.0, delta=1e-6)
    # rho_a = s/4 = count_a / (2 z_a^2), rho_b = 3s/4 = 1 / (2 z_b^2)
    rho_a = 4 / (2 * params["a"] ** 2)
    rho_b = 1 / (2 * params["b"] ** 2)
    assert_allclose(rho_b / rho_a, 3.0, rtol=1e-12)


def test_shares_are_normalised():
    p1 = calibrate([Phase("a", 1.0, "gaussian"), Phase("b", 1.0, "laplace")],
                   epsilon=1.0, delta=1e-6)
    p2 = calibrate([Phase("a", 10.0, "gaussian"), Phase("b", 10.0, "laplace")],
                   epsilon=1.0, delta=1e-6)
    assert_allclose([p1["a"], p1["b"]], [p2["a"], p2["b"]], rtol=1e-9)


def test_mixed_plan_uses_rdp_and_meets_target():
    phases = [Phase("init", 0.2, "gaussian"), Phase("counts", 0.1, "laplace"),
              Phase("select", 0.1, "exponential", count=3),
              Phase("sgd", 0.6, "gaussian", count=200, sampling_rate=0.05)]
    params = calibrate(phases, epsilon=3.0, delta=1e-6)
    spent, method = _spent(phases, params, 1e-6)
    assert method == "rdp-zero-out"
    assert spent <= 3.0
    assert_allclose(spent, 3.0, rtol=1e-9)


def test_pure_plan_at_delta_zero():
    phases = [Phase("counts", 1.0, "laplace", count=3),
              Phase("select", 1.0, "exponential", count=2)]
    params = calibrate(phases, epsilon=1.0, delta=0.0)
    spent, method = _spent(phases, params, 0.0)
    assert method == "pure"
    assert_allclose(3 / params["counts"] + 2 * params["select"], 1.0, rtol=1e-9)
    assert spent <= 1.0
    # zCDP split: laplace rho = count e^2/2, exponential rho = count eps^2/8, equal shares
    assert_allclose(3 * (1 / params["counts"]) ** 2 / 2, 2 * params["select"] ** 2 / 8,
                    rtol=1e-9)


def test_infinite_epsilon_gives_no_noise():
    phases = [Phase("a", 1.0, "gaussian"), Phase("b", 1.0, "laplace"),
              Phase("c", 1.0, "exponential")]
    params = calibrate(phases, epsilon=np.inf, delta=1e-6)
    assert params == {"a": 0.0, "b": 0.0, "c": math.inf}
    event = plan_events(phases, params)
    assert all(isinstance(e.event, NonPrivateEvent) for e in event.events)


def test_delta_zero_with_gaussian_is_infeasible():
    with pytest.raises(ValueError, match="use delta>0 or a pure-ε mechanism"):
        calibrate([Phase("a", 1.0, "gaussian")], epsilon=1.0, delta=0.0)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, np.nan, True])
def test_bad_epsilon_rejected(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        calibrate([Phase("a", 1.0, "gaussian")], epsilon=epsilon, delta=1e-6)


@pytest.mark.parametrize("delta", [-1e-6, 1.0, np.nan])
def test_bad_delta_rejected(delta):
    with pytest.raises(ValueError, match="delta"):
        calibrate([Phase("a", 1.0, "gaussian")], epsilon=1.0, delta=delta)


def test_duplicate_phase_names_rejected():
    with pytest.raises(ValueError, match="unique"):
        calibrate([Phase("a", 1.0, "gaussian"), Phase("a", 1.0, "laplace")],
                  epsilon=1.0, delta=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(share=0.0), "share"), (dict(mechanism="uniform"), "mechanism"),
    (dict(count=0), "count"), (dict(sampling_rate=0.0), "sampling_rate"),
    (dict(mechanism="laplace", sampling_rate=0.5), "sampling_rate"),
])
def test_phase_validation(kwargs, match):
    args = dict(name="a", share=1.0, mechanism="gaussian")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Phase(**args)


def test_plan_events_structure():
    phases = [Phase("g", 1.0, "gaussian", count=2, sampling_rate=0.1),
              Phase("l", 1.0, "laplace"), Phase("e", 1.0, "exponential", count=4)]
    event = plan_events(phases, {"g": 2.0, "l": 3.0, "e": 0.5})
    assert event == ComposedEvent((
        SelfComposedEvent(PoissonSampledEvent(0.1, GaussianEvent(2.0)), 2),
        SelfComposedEvent(LaplaceEvent(3.0), 1),
        SelfComposedEvent(ExponentialEvent(0.5), 4)))


def test_plan_events_missing_phase():
    with pytest.raises(KeyError, match="g"):
        plan_events([Phase("g", 1.0, "gaussian")], {})


def test_calibration_with_large_delta_where_epsilon_reaches_zero():
    # At delta=0.3 a noisy enough plan spends exactly epsilon=0: no math domain error.
    params = calibrate([Phase("g", 1.0, "gaussian")], epsilon=1.0, delta=0.3)
    assert params["g"] > 0
    acc = PrivacyAccountant().compose(GaussianEvent(params["g"]), phase="g")
    assert acc.get_epsilon(0.3) <= 1.0 * (1 + 1e-9)


def test_budget_plan_rejects_a_remainder_lost_to_rounding():
    from skdpp.privacy import BudgetPlan

    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    for p in range(3):  # 0.7/3 + 0.3/3 per problem sums to 0.9999999999999999
        plan.add(f"subspace[{p}]", share=0.7 / 3, param="subspace_share")
        plan.add(f"cold_start[{p}]", share=0.3 / 3, param="cold_start_share")
        plan.add_rest(f"selection[{p}]", mechanism="exponential")
    with pytest.raises(ValueError, match="subspace_share"):
        plan.calibrate()
