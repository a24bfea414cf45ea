"""Every BudgetPlan split rule, by behaviour (issue 19: "tests must check behaviour").

The rules (skdpp/privacy/_plan.py, calibration.py): shares are fractions of
the zCDP budget rho; a phase of ``count`` Gaussian releases with noise
multiplier ``z`` spends ``rho_j = count / (2 z^2)``, an exponential phase of
``count`` selections at epsilon ``e`` spends ``count e^2 / 8``; the shares fix
the ratios ``rho_j / rho``; the "rest" phases split what the explicit shares
leave, equally; the global scale is solved so that the composed plan spends
exactly the target epsilon at delta (minus the thresholds' delta). Each rule is
checked against an independent oracle (the analytic Gaussian of Balle & Wang
2018 for a composition of Gaussians, which is exact under mu-GDP), both on
:class:`BudgetPlan` and on the five estimators' fitted reports; the broken
variants (a share mis-split, a phase dropped from the accounting) fail.
"""

import math
import warnings

import numpy as np
import pytest
from scipy import optimize
from scipy.stats import norm

from skdpp.privacy import BudgetPlan
from tests.privacy.test_one_user import ESTIMATORS, _data, _make

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

RTOL = 1e-6


def gdp_epsilon(mu, delta):
    """Exact epsilon of mu-GDP at delta (Balle & Wang 2018, Theorem 8)."""
    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) \
            - delta
    if excess(0.0) <= 0:
        return 0.0
    return optimize.brentq(excess, 0.0, 500.0, xtol=1e-14, rtol=1e-14)


def phase_rho(mechanism, multiplier, count):
    if mechanism.startswith("exponential"):
        return count * multiplier**2 / 8.0
    return count / (2.0 * multiplier**2)


def _plan(init_share=0.1, cold_share=0.02, rest=("iterations",), counts=None):
    counts = counts or {}
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add("init", share=init_share, count=counts.get("init", 1), param="init_share")
    plan.add("cold_start", share=cold_share, count=counts.get("cold_start", 2),
             param="cold_start_share")
    for name in rest:
        plan.add_rest(name, count=counts.get(name, 5))
    return plan.calibrate()


def _check_shares(plan):
    """rho_j / sum rho == share_j for every phase (the documented split)."""
    rhos = {p.name: phase_rho(p.mechanism, plan[p.name], p.count) for p in plan.phases}
    total = sum(rhos.values())
    for name, share in plan.shares.items():
        np.testing.assert_allclose(rhos[name] / total, share, rtol=1e-9, err_msg=name)
    return rhos


# --------------------------------------------------------------------------- #
# BudgetPlan
# --------------------------------------------------------------------------- #
def test_shares_sum_to_one_and_rest_phases_split_equally():
    plan = _plan(rest=("iterations", "refine"))
    shares = plan.shares
    assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-12)
    assert shares["init"] == pytest.approx(0.1) and shares["cold_start"] == pytest.approx(0.02)
    assert shares["iterations"] == pytest.approx(0.44) == shares["refine"]


@pytest.mark.parametrize("counts", [{}, {"init": 3, "cold_start": 1, "iterations": 40}])
def test_each_phase_spends_its_share_of_rho(counts):
    _check_shares(_plan(counts=counts))


def test_composed_epsilon_equals_the_target():
    plan = _plan(counts={"iterations": 12})
    mu = math.sqrt(sum(p.count / plan[p.name] ** 2 for p in plan.phases))
    assert gdp_epsilon(mu, 1e-6) == pytest.approx(1.0, rel=RTOL)


def test_raising_a_share_lowers_its_noise_and_raises_the_rest():
    # Total rho is fixed by (epsilon, delta) for Gaussian phases, so
    # z_j = sqrt(count_j / (2 share_j rho)): z_init scales by sqrt(0.1 / 0.2),
    # the rest phase's by sqrt(0.88 / 0.78), cold_start's is unchanged.
    a, b = _plan(init_share=0.1), _plan(init_share=0.2)
    assert b["init"] / a["init"] == pytest.approx(math.sqrt(0.1 / 0.2), rel=1e-9)
    assert b["iterations"] / a["iterations"] == pytest.approx(math.sqrt(0.88 / 0.78), rel=1e-9)
    assert b["cold_start"] == pytest.approx(a["cold_start"], rel=1e-9)


def test_zero_share_drops_the_phase_and_its_budget_goes_to_the_rest():
    a, b = _plan(cold_share=0.02), _plan(cold_share=0.0)
    assert "cold_start" not in b.names
    assert b["iterations"] / a["iterations"] == pytest.approx(math.sqrt(0.88 / 0.9), rel=1e-9)


def test_explicit_shares_leaving_nothing_raise_naming_the_parameters():
    with pytest.raises(ValueError, match="init_share.*cold_start_share"):
        _plan(init_share=0.7, cold_share=0.3)


def test_threshold_delta_is_reserved_before_the_rest_is_calibrated():
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add("counts", share=0.3, threshold_delta=2.5e-7)
    plan.add_rest("iterations", count=4)
    plan.calibrate()
    mu = math.sqrt(sum(p.count / plan[p.name] ** 2 for p in plan.phases))
    # the Gaussian part spends epsilon at delta - delta_t, not at delta
    assert gdp_epsilon(mu, 1e-6 - 2.5e-7) == pytest.approx(1.0, rel=RTOL)
    assert gdp_epsilon(mu, 1e-6) < 1.0 - 1e-3
    assert plan.selection_phases == ("counts",)


def test_exponential_phase_spends_its_share():
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add("selection", share=0.15, mechanism="exponential", count=3)
    plan.add_rest("iterations", count=4)
    _check_shares(plan.calibrate())


def test_fixed_noise_is_not_calibrated():
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.fix("iterations", noise_multiplier=2.5, count=3)
    assert plan.calibrate()["iterations"] == 2.5 and plan.fixed_noise


def test_broken_split_is_caught():
    # Broken: the rest phase's share computed as if cold_start were not there.
    plan = _plan()
    wrong = dict(plan.shares)
    wrong["iterations"] = 0.9
    rhos = {p.name: phase_rho(p.mechanism, plan[p.name], p.count) for p in plan.phases}
    total = sum(rhos.values())
    with pytest.raises(AssertionError):
        for name, share in wrong.items():
            np.testing.assert_allclose(rhos[name] / total, share, rtol=1e-9)


def test_broken_dropped_phase_is_caught():
    # Broken: composing without the cold_start phase (an accounting term dropped).
    plan = _plan()
    mu = math.sqrt(sum(p.count / plan[p.name] ** 2 for p in plan.phases
                       if p.name != "cold_start"))
    assert not gdp_epsilon(mu, 1e-6) == pytest.approx(1.0, rel=RTOL)


# --------------------------------------------------------------------------- #
# The estimators' plans, from their fitted reports
# --------------------------------------------------------------------------- #
SHARE_PARAMS = {  # a share parameter of each estimator, and a second value
    "fedrep": ("budget_shares", 0.1, 0.2, "init"),
    "altmin": ("budget_shares", 0.02, 0.05, "cold_start"),
    "ppsgd": ("budget_shares", 0.02, 0.05, "cold_start"),
    "mf": ("budget_shares", 0.05, 0.02, "mean"),
    "jl": ("budget_shares", 0.7, 0.5, "subspace"),
}


def _report(name, **params):
    X, y, g = _data(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _make(name, "default", verbose=0, **params).fit(X, y, groups=g).privacy_report_


def _multiplier(phase):
    return phase.noise_multiplier if not phase.mechanism.startswith("exponential") \
        else phase.epsilon


def _rhos(report):
    return {p.name: phase_rho(p.mechanism, _multiplier(p), p.count) for p in report.phases}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_estimator_plan_spends_the_target_split_by_its_shares(name):
    report = _report(name)
    assert sum(p.share for p in report.phases) == pytest.approx(1.0, rel=1e-12)
    rhos = _rhos(report)
    total = sum(rhos.values())
    for p in report.phases:
        assert rhos[p.name] / total == pytest.approx(p.share, rel=1e-9), p.name
    assert report.epsilon_spent == pytest.approx(report.epsilon, rel=RTOL)
    gaussian = [p for p in report.phases if not p.mechanism.startswith("exponential")]
    if len(gaussian) == len(report.phases):
        # all Gaussian: the exact mu-GDP composition, at delta minus the thresholds'
        threshold = sum(1e-6 / 4 for p in report.phases if "threshold" in p.mechanism)
        mu = math.sqrt(sum(p.count / p.noise_multiplier**2 for p in report.phases))
        assert gdp_epsilon(mu, report.delta - threshold) == pytest.approx(report.epsilon,
                                                                          rel=RTOL)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_estimator_share_parameter_moves_the_noise_the_documented_way(name):
    param, old, new, phase = SHARE_PARAMS[name]
    def given(share):  # budget_shares: keyed by the phase
        return {param: {phase: share} if param == "budget_shares" else share}

    a, b = _report(name, **given(old)), _report(name, **given(new))
    pa = {p.name: p for p in a.phases}
    pb = {p.name: p for p in b.phases}
    assert pa[phase].share == pytest.approx(old) and pb[phase].share == pytest.approx(new)
    ra, rb = _rhos(a), _rhos(b)
    # the total rho is the same (same target), the phase's rho moves with its share
    assert sum(rb.values()) == pytest.approx(sum(ra.values()), rel=1e-6)
    assert rb[phase] / ra[phase] == pytest.approx(new / old, rel=1e-6)
    if pa[phase].mechanism == "gaussian" and pa[phase].count == pb[phase].count:
        assert pb[phase].noise_multiplier / pa[phase].noise_multiplier == pytest.approx(
            math.sqrt(old / new), rel=1e-6)
    # every other phase's rho moves with its share, and what the phase took
    # (or gave) came out of (or went to) the others' shares
    others = [n for n in pa if n != phase]
    assert sorted(others) == sorted(n for n in pb if n != phase)
    for n in others:
        assert rb[n] / ra[n] == pytest.approx(pb[n].share / pa[n].share, rel=1e-6), n
    moved = sum(pb[n].share - pa[n].share for n in others)
    assert moved == pytest.approx(old - new, rel=1e-9)
