"""Tests for skdpp.privacy._tuning: the RDP of random stopping and the per-trial budget.

Three independent checks of the search accountant:

* the paper's closed forms (Papernot & Steinke 2022, arXiv:2110.03620,
  Definition 1, Theorems 2 and 6) re-implemented here directly, with ``λ̂``
  and ``λ`` minimised numerically;
* dp-accounting's ``_compute_rdp_repeat_and_select`` (test-only oracle);
* brute force: the exact Rényi divergence of the "best of K trials" output
  distribution for a discretised Gaussian score and for randomized response,
  which must never exceed the bound.
"""

import math
import pickle

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import optimize, special, stats

from skdpp.privacy import BudgetPlan, PrivacyAccountant, PrivacyReport, Releaser
from skdpp.privacy._gdp import gaussian_epsilon, gaussian_mu
from skdpp.privacy._rdp import DEFAULT_RDP_ORDERS, _rdp_laplace, rdp_to_delta, rdp_to_epsilon
from skdpp.privacy._tuning import (
    RandomStopping,
    SearchPrivacyReport,
    epsilon_for_rho,
    plan_rho,
    release_validation_score,
    report_rho,
    zcdp_delta,
    zcdp_epsilon,
)
from skdpp.privacy.calibration import calibrate, params_for_rho, plan_events
from skdpp.privacy.events import GaussianEvent
from tests.privacy.harness import noise_off, record_noise

ORDERS = DEFAULT_RDP_ORDERS
TNB = "truncated_negative_binomial"

# (eta, gamma) settings of Definition 1 (gamma given, mean derived by the test).
TNB_SETTINGS = [(1.0, 0.1), (0.0, 0.05), (0.5, 0.2), (-0.5, 0.01), (2.0, 0.3), (1.0, 0.02)]
POISSON_MEANS = [1.0, 3.0, 10.0, 40.0]
RHOS = [1e-4, 0.005, 0.05, 0.5]


# ------------------------------------------------------------------ reference formulas
def paper_mean(eta, gamma):
    """E[K] of D_{eta,gamma} (Definition 1), written as in the paper."""
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
    return eta * (1.0 - gamma) / (gamma * (1.0 - gamma ** eta))


def paper_pmf(k, eta, gamma):
    """P[K = k] of Definition 1 by the product formula (k >= 1)."""
    if eta == 0.0:
        return (1.0 - gamma) ** k / (k * math.log(1.0 / gamma))
    prod = 1.0
    for ell in range(k):
        prod *= (ell + eta) / (ell + 1.0)
    return (1.0 - gamma) ** k / (gamma ** (-eta) - 1.0) * prod


def theorem2_constant(eps_at, eta, gamma):
    """min over lambda-hat >= 1 of Theorem 2's middle terms (numerically, over [1, 1e6])."""
    def term(lam_hat):
        return ((1 + eta) * (1 - 1 / lam_hat) * eps_at(lam_hat)
                + (1 + eta) * math.log(1 / gamma) / lam_hat)

    grid = np.geomspace(1.0, 1e6, 4001)
    values = [term(x) for x in grid]
    j = int(np.argmin(values))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    res = optimize.minimize_scalar(term, bounds=(lo, hi), method="bounded",
                                   options={"xatol": 1e-12})
    return min(res.fun, values[j])


def theorem2(lam, eps_at, eta, gamma):
    """Theorem 2: eps(lam) + min_lamhat [...] + log(E[K]) / (lam - 1)."""
    return (eps_at(lam) + theorem2_constant(eps_at, eta, gamma)
            + math.log(paper_mean(eta, gamma)) / (lam - 1))


_DENSE = np.geomspace(1.0 + 1e-6, 1e7, 200001)


def zcdp_delta_dense(rho, eps, lam=_DENSE):
    """delta of rho-zCDP at eps (CKS conversion) on a dense grid of orders."""
    log_d = (lam - 1) * (rho * lam - eps + np.log1p(-1 / lam)) - np.log(lam)
    return float(min(1.0, math.exp(min(log_d.min(), 0.5 * math.log(-math.expm1(-rho))))))


def theorem6(lam, rho, mu):
    """Theorem 6 for a rho-zCDP trial, delta-hat by the dense conversion."""
    eps_hat = math.log(1 + 1 / (lam - 1))
    return rho * lam + mu * zcdp_delta_dense(rho, eps_hat) + math.log(mu) / (lam - 1)


def rr_curve(p, orders):
    """Exact RDP of binary randomized response (keeps the bit with probability p)."""
    lp, lq = math.log(p), math.log(1 - p)
    return np.logaddexp(orders * lp + (1 - orders) * lq,
                        orders * lq + (1 - orders) * lp) / (orders - 1)


def cks_epsilon_dense(rdp_at, delta):
    """eps = min over a dense grid of orders of the CKS conversion of rdp_at."""
    lam = np.geomspace(1.0 + 1e-4, 1e6, 20001)
    values = rdp_at(lam) + np.log1p(-1 / lam) - (math.log(delta) + np.log(lam)) / (lam - 1)
    return float(values.min())


# ------------------------------------------------------------------ the law of K
@pytest.mark.parametrize("eta, gamma", TNB_SETTINGS)
def test_tnb_gamma_and_pmf_match_definition_1(eta, gamma):
    s = RandomStopping(TNB, paper_mean(eta, gamma), eta)
    assert_allclose(s.gamma, gamma, rtol=1e-10)
    k = np.arange(1, 40)
    assert_allclose(s.pmf(k), [paper_pmf(int(i), eta, gamma) for i in k], rtol=1e-10)


@pytest.mark.parametrize("eta, gamma", TNB_SETTINGS)
def test_tnb_pmf_sums_to_one_with_the_requested_mean_and_pgf(eta, gamma):
    s = RandomStopping(TNB, paper_mean(eta, gamma), eta)
    k = np.arange(0, 200_000)
    p = s.pmf(k)
    assert p[0] == 0.0
    assert_allclose(p.sum(), 1.0, rtol=1e-9)
    assert_allclose((k * p).sum(), s.mean, rtol=1e-7)
    for x in (0.0, 0.3, 0.9, 1.0):
        assert_allclose(s.pgf(x), (p * x ** k).sum(), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("stopping", [RandomStopping(TNB, 10, 1.0), RandomStopping(TNB, 10, 0.0),
                                      RandomStopping(TNB, 4, -0.5), RandomStopping("poisson", 5)])
def test_sample_follows_the_pmf(stopping):
    # Chi-square goodness of fit of 4000 seeded draws (cells with >= 5 expected
    # draws; the tail merged). False alarm rate of the test: 1e-3.
    rng = np.random.default_rng(0)
    draws = np.array([stopping.sample(rng) for _ in range(4000)])
    k = np.arange(0, 100_000)
    p = stopping.pmf(k)
    cells = np.flatnonzero(p * 4000 >= 5)
    observed = np.array([np.sum(draws == c) for c in cells] + [np.sum(~np.isin(draws, cells))])
    expected = np.concatenate([p[cells], [1 - p[cells].sum()]]) * 4000
    keep = expected > 0
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert stats.chi2.sf(stat, keep.sum() - 1) > 1e-3


def test_mean_one_is_a_single_trial():
    s = RandomStopping(TNB, 1.0)
    assert s.gamma == 1.0
    assert s.sample(np.random.default_rng(0)) == 1
    assert_allclose(s.pmf([0, 1, 2]), [0.0, 1.0, 0.0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(distribution="uniform", mean=3), "distribution"),
    (dict(distribution=TNB, mean=0.5), "mean number of trials"),
    (dict(distribution="poisson", mean=0.5), "mean number of trials"),
    (dict(distribution=TNB, mean=3, eta=-1.0), "eta"),
    (dict(distribution=TNB, mean=np.inf), "mean number of trials"),
])
def test_invalid_stopping_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomStopping(**kwargs)


# ------------------------------------------------------------------ Theorems 2 and 6
@pytest.mark.parametrize("eta, gamma", TNB_SETTINGS)
@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_rdp_equals_theorem_2(eta, gamma, rho):
    s = RandomStopping(TNB, paper_mean(eta, gamma), eta)
    for lam in (1.5, 2.0, 8.0, 64.0, 700.0):
        expected = theorem2(lam, lambda x: rho * x, eta, gamma)
        assert_allclose(s.zcdp_rdp(rho, lam), expected, rtol=1e-9)


@pytest.mark.parametrize("mu", POISSON_MEANS)
@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_rdp_equals_theorem_6(mu, rho):
    s = RandomStopping("poisson", mu)
    for lam in (1.5, 3.0, 16.0, 200.0):
        # The module minimises delta-hat over continuous orders: never above
        # the dense grid, and equal to it up to the grid's resolution.
        got, expected = float(s.zcdp_rdp(rho, lam)), theorem6(lam, rho, mu)
        assert got <= expected * (1 + 1e-12)
        assert_allclose(got, expected, rtol=1e-7)


@pytest.mark.parametrize("eta, gamma", TNB_SETTINGS)
@pytest.mark.parametrize("rho", RHOS)
def test_search_epsilon_equals_converted_theorem_2(eta, gamma, rho):
    s = RandomStopping(TNB, paper_mean(eta, gamma), eta)
    c = theorem2_constant(lambda a: rho * a, eta, gamma)
    log_mean = math.log(paper_mean(eta, gamma))
    for delta in (1e-5, 1e-8):
        expected = cks_epsilon_dense(lambda lam: rho * lam + c + log_mean / (lam - 1), delta)
        got = s.epsilon(rho, delta)
        assert got <= expected * (1 + 1e-9)
        assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("mu", [3.0, 10.0])
@pytest.mark.parametrize("rho", [0.005, 0.05])
def test_search_epsilon_equals_converted_theorem_6(mu, rho):
    s = RandomStopping("poisson", mu)
    lam = np.geomspace(1.01, 2e3, 600)
    coarse = np.geomspace(1.0 + 1e-6, 1e7, 20001)
    values = np.array([rho * x + mu * zcdp_delta_dense(rho, math.log(1 + 1 / (x - 1)), coarse)
                       + math.log(mu) / (x - 1) for x in lam])
    conv = values + np.log1p(-1 / lam) - (math.log(1e-6) + np.log(lam)) / (lam - 1)
    got = s.epsilon(rho, 1e-6)
    assert got <= conv.min() * (1 + 1e-9)
    assert_allclose(got, conv.min(), rtol=1e-4)


@pytest.mark.parametrize("mean, shape", [(10, 1.0), (10, 0.0), (5, 0.5), (20, 2.0)])
@pytest.mark.parametrize("base", ["zcdp", "laplace"])
def test_grid_rdp_matches_dp_accounting_tnb(mean, shape, base):
    rdp_acc = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    curve = 0.02 * ORDERS if base == "zcdp" else _rdp_laplace(1 / 0.3, ORDERS)
    theirs = rdp_acc._compute_rdp_repeat_and_select(list(ORDERS), list(curve), mean, shape)
    mine = RandomStopping(TNB, mean, shape).rdp(ORDERS, curve)
    assert_allclose(mine, theirs, rtol=1e-8)


@pytest.mark.parametrize("mean", [1.0, 3.0, 10.0])
@pytest.mark.parametrize("base", ["zcdp", "laplace"])
def test_grid_rdp_matches_dp_accounting_poisson(mean, base):
    rdp_acc = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    curve = 0.02 * ORDERS if base == "zcdp" else _rdp_laplace(1 / 0.3, ORDERS)
    theirs = rdp_acc._compute_rdp_repeat_and_select(list(ORDERS), list(curve), mean, np.inf)
    s = RandomStopping("poisson", mean)
    assert_allclose(s.rdp(ORDERS, curve, monotone=False), theirs, rtol=1e-12)
    # The monotone envelope only lowers the bound.
    assert np.all(s.rdp(ORDERS, curve) <= np.asarray(theirs) + 1e-15)


@pytest.mark.parametrize("stopping", [RandomStopping(TNB, 10, 1.0), RandomStopping(TNB, 6, 0.0),
                                      RandomStopping(TNB, 4, 0.5), RandomStopping("poisson", 3),
                                      RandomStopping("poisson", 10)], ids=lambda s: s.describe())
@pytest.mark.parametrize("rho", [0.005, 0.05])
def test_search_epsilon_against_dp_accounting_accountant(stopping, rho):
    # dp-accounting's RdpAccountant with a RepeatAndSelectDpEvent of a Gaussian
    # (rho = 1/(2 sigma^2)) minimises over its grid of orders: never below
    # skdpp's value, and within 1e-3 relative of it.
    dp_event = pytest.importorskip("dp_accounting.dp_event")
    rdp_acc = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    shape = np.inf if stopping.distribution == "poisson" else stopping.eta
    acc = rdp_acc.RdpAccountant(orders=list(ORDERS))
    acc.compose(dp_event.RepeatAndSelectDpEvent(
        dp_event.GaussianDpEvent(1 / math.sqrt(2 * rho)), stopping.mean, shape))
    theirs = acc.get_epsilon(1e-6)
    mine = stopping.epsilon(rho, 1e-6)
    assert mine <= theirs * (1 + 1e-9)
    assert_allclose(mine, theirs, rtol=1e-3)


@pytest.mark.parametrize("stopping", [RandomStopping(TNB, 10, 1.0), RandomStopping(TNB, 10, 0.0),
                                      RandomStopping("poisson", 10)])
def test_closed_form_is_at_least_as_tight_as_the_grid(stopping):
    rho = 0.01
    grid = stopping.rdp(ORDERS, rho * ORDERS, monotone=False)
    assert np.all(stopping.zcdp_rdp(rho, ORDERS) <= grid * (1 + 1e-12))
    assert stopping.epsilon(rho, 1e-6) <= rdp_to_epsilon(ORDERS, stopping.rdp(ORDERS, rho * ORDERS),
                                                         1e-6) * (1 + 1e-12)


def test_pure_dp_limit_is_liu_talwar():
    # A pure eps0-DP trial (randomized response has the extremal RDP curve):
    # at the largest orders Theorem 2 tends to (2 + eta) eps0; geometric: 3 eps0.
    eps0 = 0.3
    p = math.exp(eps0) / (1 + math.exp(eps0))
    lam = np.array([1e4, 1e5, 1e6])
    curve = rr_curve(p, lam)
    for eta in (1.0, 0.0, 2.0):
        s = RandomStopping(TNB, 10, eta)
        bound = s.rdp(lam, curve)
        assert bound[-1] <= (2 + eta) * eps0 + 1e-4
        assert bound[-1] >= (2 + eta) * eps0 - 1e-2


# ------------------------------------------------------------------ brute force
def _survival_pgf(s, S):
    """1 - E[(1 - S)^K], stable for small S."""
    S = np.asarray(S, dtype=float)
    if s.distribution == "poisson":
        return -np.expm1(-s.mean * S)
    if s.gamma == 1.0:
        return S.copy()
    g, eta = s.gamma, s.eta
    t = (1 - g) * S / g
    if eta == 0.0:
        return np.log1p(t) / -math.log(g)
    return -np.expm1(-eta * np.log1p(t)) / -np.expm1(eta * math.log(g))


def best_of_k(s, cdf, sf):
    """Output distribution of the best of K draws of a score on an ordered grid.

    ``cdf[i] = P[Q <= y_i]`` and ``sf[i] = P[Q > y_i]`` (both computed
    accurately). Returns ``[P(K = 0) (output ⊥), P[A = y_0], ...]``, from
    ``P[A <= y] = E[F(y)^K]`` (the probability generating function at the
    CDF), differences taken on the side where they are accurate.
    """
    p_none = float(s.pgf(0.0))
    if s.distribution == "poisson":
        low = math.exp(-s.mean) * np.expm1(s.mean * cdf)  # P[A <= y] - P(K = 0)
    else:
        low = s.pgf(cdf)
    high = _survival_pgf(s, sf)  # P[A > y]
    pm = np.where(cdf < 0.5, low - np.concatenate([[0.0], low[:-1]]),
                  np.concatenate([[1 - p_none], high[:-1]]) - high)
    return np.concatenate([[p_none], pm])


def renyi(P, Q, lam):
    m = P > 0
    return float(special.logsumexp(lam * np.log(P[m]) + (1 - lam) * np.log(Q[m])) / (lam - 1))


def _gaussian_score(mean, sigma, edges):
    cdf, sf = stats.norm.cdf(edges, mean, sigma), stats.norm.sf(edges, mean, sigma)
    cdf[-1], sf[-1] = 1.0, 0.0  # the last bin lumps the upper tail
    return cdf, sf


BRUTE = [RandomStopping(TNB, 10, 1.0), RandomStopping(TNB, 10, 0.0), RandomStopping(TNB, 5, -0.5),
         RandomStopping(TNB, 3, 2.0), RandomStopping("poisson", 10), RandomStopping("poisson", 2),
         RandomStopping(TNB, 1.0)]


@pytest.mark.parametrize("stopping", BRUTE, ids=lambda s: s.describe())
@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_brute_force_discretised_gaussian_within_bound(stopping, sigma):
    # Q outputs a score N(0, sigma^2) on x, N(1, sigma^2) on x' (sensitivity 1),
    # rounded to a grid: rho-zCDP with rho = 1/(2 sigma^2) (post-processing).
    edges = np.arange(-12 * sigma, 12 * sigma + 1, 0.02 * sigma)
    P = best_of_k(stopping, *_gaussian_score(0.0, sigma, edges))
    Q = best_of_k(stopping, *_gaussian_score(1.0, sigma, edges))
    assert_allclose([P.sum(), Q.sum()], 1.0, rtol=1e-12)
    assert P.min() >= 0 and Q.min() >= 0
    rho = 1 / (2 * sigma ** 2)
    for lam in (1.5, 2.0, 4.0, 10.0, 30.0):
        exact = max(renyi(P, Q, lam), renyi(Q, P, lam))
        bound = float(stopping.zcdp_rdp(rho, lam))
        assert exact <= bound + 1e-9, (lam, exact, bound)
    if stopping.gamma == 1.0:  # K = 1: the base divergence (grid fine enough at order 2)
        assert_allclose(renyi(P, Q, 2.0), 2.0 * rho, rtol=1e-3)


@pytest.mark.parametrize("stopping", BRUTE, ids=lambda s: s.describe())
@pytest.mark.parametrize("eps0", [0.2, 1.0])
def test_brute_force_randomized_response_within_bound(stopping, eps0):
    # Q: randomized response on one bit, outputs 1 ("better") with probability
    # e^eps0/(1+e^eps0) on x and 1/(1+e^eps0) on x'. Its exact RDP curve is
    # fed to the grid version of Theorems 2 / 6.
    p, q = math.exp(eps0) / (1 + math.exp(eps0)), 1 / (1 + math.exp(eps0))
    P = best_of_k(stopping, np.array([1 - p, 1.0]), np.array([p, 0.0]))
    Q = best_of_k(stopping, np.array([1 - q, 1.0]), np.array([q, 0.0]))
    curve = rr_curve(p, ORDERS)
    bound = stopping.rdp(ORDERS, curve)
    for i in range(0, ORDERS.size, 7):
        lam = ORDERS[i]
        exact = max(renyi(P, Q, lam), renyi(Q, P, lam))
        assert exact <= bound[i] + 1e-9, (lam, exact, bound[i])


def test_brute_force_shows_that_releasing_k_would_break_the_bound():
    # Knowing K = k, the best of k randomized responses is ~k eps0-DP: at
    # k = 40 it exceeds the bound of the hidden-K search at order 30.
    eps0, k, lam = 0.5, 40, 30.0
    p, q = math.exp(eps0) / (1 + math.exp(eps0)), 1 / (1 + math.exp(eps0))
    P = np.array([(1 - p) ** k, 1 - (1 - p) ** k])
    Q = np.array([(1 - q) ** k, 1 - (1 - q) ** k])
    s = RandomStopping(TNB, 10, 1.0)
    curve = rr_curve(p, ORDERS)
    i = int(np.flatnonzero(ORDERS == lam)[0])
    assert max(renyi(P, Q, lam), renyi(Q, P, lam)) > s.rdp(ORDERS, curve)[i]


# ------------------------------------------------------------------ calibration
@pytest.mark.parametrize("stopping", [RandomStopping(TNB, 10, 1.0), RandomStopping(TNB, 10, 0.0),
                                      RandomStopping(TNB, 25, 0.5), RandomStopping("poisson", 10),
                                      RandomStopping(TNB, 1.0)], ids=lambda s: s.describe())
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.3, 1e-5), (8.0, 1e-8)])
def test_calibrate_meets_the_target_exactly(stopping, epsilon, delta):
    rho = stopping.calibrate(epsilon, delta)
    spent = stopping.epsilon(rho, delta)
    assert spent <= epsilon
    assert_allclose(spent, epsilon, rtol=1e-9)


def test_single_trial_spends_one_trials_budget():
    # K = 1: the search's curve is the trial's (rho lambda), converted alike.
    s = RandomStopping(TNB, 1.0)
    rho = s.calibrate(1.0, 1e-6)
    assert_allclose(s.zcdp_rdp(rho, ORDERS), rho * ORDERS, rtol=0)
    assert_allclose(zcdp_epsilon(rho, 1e-6), 1.0, rtol=1e-9)
    curve = 0.01 * ORDERS
    assert_allclose(s.rdp(ORDERS, curve), curve, rtol=0)


def test_calibrate_tiny_epsilon_gives_a_tiny_valid_budget():
    # The log(E[K])/(lambda - 1) term vanishes at large orders: any epsilon > 0
    # is reachable, with a correspondingly tiny per-trial budget.
    s = RandomStopping("poisson", 50)
    rho = s.calibrate(1e-3, 1e-6)
    assert 0 < rho < 1e-7 and s.epsilon(rho, 1e-6) <= 1e-3


def test_calibrate_needs_positive_delta():
    with pytest.raises(ValueError, match="delta"):
        RandomStopping(TNB, 10).calibrate(1.0, 0.0)
    assert RandomStopping(TNB, 10).calibrate(np.inf, 1e-6) == np.inf


def test_zcdp_conversions_are_consistent_with_rdp_to_epsilon():
    for rho in (1e-3, 0.05, 1.0):
        eps = zcdp_epsilon(rho, 1e-6)
        assert eps <= rdp_to_epsilon(ORDERS, rho * ORDERS, 1e-6) + 1e-12
        assert_allclose(zcdp_delta(rho, eps), 1e-6, rtol=1e-6)
        assert zcdp_delta(rho, eps) <= rdp_to_delta(ORDERS, rho * ORDERS, eps) + 1e-15
        # rho = mu^2 / 2 of a Gaussian: the exact GDP epsilon is smaller.
        assert gaussian_epsilon(math.sqrt(2 * rho), 1e-6) < eps


# ------------------------------------------------------------------ plans and reports
def _plan(epsilon, delta=1e-6, mechanisms=("gaussian",), fixed=None):
    plan = BudgetPlan(epsilon, delta)
    if fixed is not None:
        plan.fix("a", noise_multiplier=fixed)
        return plan
    for i, mech in enumerate(mechanisms):
        plan.add_rest(f"p{i}", mechanism=mech, count=3)
    return plan


def test_plan_rho_of_gaussian_plans_is_mu_squared_over_two():
    for eps in (0.1, 1.0, 5.0):
        mu = gaussian_mu(eps, 1e-6)
        assert_allclose(plan_rho(_plan(eps)), mu * mu / 2, rtol=1e-8)
    assert plan_rho(_plan(np.inf)) == np.inf
    assert plan_rho(BudgetPlan(1.0, 1e-6)) == 0.0


def test_plan_rho_per_mechanism():
    plan = BudgetPlan(1.0, 1e-6)
    plan.add("g", share=0.5, count=2)
    plan.add("e", share=0.3, mechanism="exponential")
    plan.add_rest("l", mechanism="laplace", count=4)
    plan.calibrate()
    expected = 2 / (2 * plan["g"] ** 2) + plan["e"] ** 2 / 8 + 4 / (2 * plan["l"] ** 2)
    assert_allclose(plan_rho(plan), expected, rtol=1e-12)


@pytest.mark.parametrize("mechanisms", [("gaussian",), ("gaussian", "exponential"),
                                        ("laplace",), ("gaussian", "laplace", "exponential")])
@pytest.mark.parametrize("rho", [1e-3, 0.05])
def test_epsilon_for_rho_spends_exactly_rho(mechanisms, rho):
    eps = epsilon_for_rho(lambda e: _plan(e, mechanisms=mechanisms), rho, 1e-6)
    spent = plan_rho(_plan(eps, mechanisms=mechanisms))
    assert spent <= rho
    assert_allclose(spent, rho, rtol=1e-8)
    if mechanisms == ("gaussian",):
        assert eps == gaussian_epsilon(math.sqrt(2 * rho), 1e-6)


def test_epsilon_for_rho_when_the_plan_changes_with_epsilon():
    # The shares depend on epsilon (a Gaussian and a Laplace phase): the direct
    # route fails its check and the brentq fallback finds the epsilon.
    calls = []

    def plan_at(e):
        calls.append(e)
        plan = BudgetPlan(e, 1e-6)
        plan.add("a", share=min(0.9, e / 4), count=2)
        plan.add_rest("b", mechanism="laplace")
        return plan

    for rho in (1e-3, 0.05):
        calls.clear()
        eps = epsilon_for_rho(plan_at, rho, 1e-6)
        assert len(calls) > 10  # the fallback ran
        assert plan_rho(plan_at(eps)) <= rho
        assert_allclose(plan_rho(plan_at(eps)), rho, rtol=1e-8)


def test_params_for_rho_is_the_zcdp_calibration():
    plan = BudgetPlan(1.0, 1e-6)
    plan.add("g", share=0.5, count=2)
    plan.add("e", share=0.3, mechanism="exponential")
    plan.add_rest("l", mechanism="laplace", count=4)
    phases = plan.calibrate().phases
    params = params_for_rho(phases, 0.02)
    assert_allclose(2 / (2 * params["g"] ** 2), 0.5 * 0.02, rtol=1e-12)
    assert_allclose(params["e"] ** 2 / 8, 0.3 * 0.02, rtol=1e-12)
    assert_allclose(4 / (2 * params["l"] ** 2), 0.2 * 0.02, rtol=1e-12)
    # Gaussian plans: the same noise as calibrating to the exact-GDP epsilon.
    gauss = _plan(1.0).calibrate()
    mu2 = 2 * 0.02
    expected = calibrate(gauss.phases, epsilon=gaussian_epsilon(math.sqrt(mu2), 1e-6),
                         delta=1e-6)
    got = params_for_rho(gauss.phases, 0.02)
    assert_allclose([got[k] for k in expected], list(expected.values()), rtol=1e-9)
    assert params_for_rho(phases, np.inf) == {"g": 0.0, "e": np.inf, "l": 0.0}
    with pytest.raises(ValueError, match="rho"):
        params_for_rho(phases, 0.0)


def test_epsilon_for_rho_with_fixed_noise():
    assert np.isfinite(epsilon_for_rho(lambda e: _plan(e, fixed=50.0), 0.01, 1e-6))
    with pytest.raises(ValueError, match="fixed"):
        epsilon_for_rho(lambda e: _plan(e, fixed=1.0), 0.01, 1e-6)
    assert epsilon_for_rho(lambda e: BudgetPlan(e, 1e-6), 0.01, 1e-6) > 0  # no release


def _report(plan, ledger):
    release = Releaser(plan, np.random.default_rng(0))
    for phase, value, sens in ledger:
        getattr(release, value)(phase, np.zeros(2), sensitivity=sens) if value != "exp" \
            else release.exponential(phase, np.zeros(3), sensitivity=sens)
    return release.report(n_users=10, released=(), local=())


def test_report_rho_exact_gdp_and_rdp():
    plan = _plan(1.0).calibrate()
    report = _report(plan, [("p0", "gaussian", 1.0)] * 3)
    assert report.accountant == "exact-gdp"
    assert_allclose(report_rho(report), plan_rho(plan), rtol=1e-8)
    mixed = BudgetPlan(1.0, 1e-6)
    mixed.add("g", share=0.6)
    mixed.add_rest("e", mechanism="exponential")
    mixed.calibrate()
    report = _report(mixed, [("g", "gaussian", 1.0), ("e", "exp", 1.0)])
    assert report.accountant == "rdp"
    assert_allclose(report_rho(report), plan_rho(mixed), rtol=1e-12)
    assert report_rho(_report(BudgetPlan(1.0, 1e-6), [])) == 0.0
    nonpriv = _report(_plan(np.inf).calibrate(), [("p0", "gaussian", 1.0)])
    assert report_rho(nonpriv) == np.inf


# ------------------------------------------------------------------ the score release
def _score_releaser(z):
    plan = BudgetPlan(1.0, 1e-6)
    plan.fix("score", noise_multiplier=z)
    return Releaser(plan, np.random.default_rng(0))


def test_validation_score_clips_and_has_sensitivity_c():
    losses = np.array([0.5, 3.0, np.inf, np.nan, -1.0, 1e308 * 10])
    with noise_off():
        total = release_validation_score(_score_releaser(5.0), "score", losses, score_clip=2.0)
    assert total == 0.5 + 2.0 + 2.0 + 2.0 + 0.0 + 2.0
    draws = record_noise(lambda: release_validation_score(_score_releaser(5.0), "score",
                                                          losses, score_clip=2.0))
    assert len(draws) == 1
    assert draws[0]["sensitivity"] == 2.0 and draws[0]["scale"] == 10.0


def test_validation_score_ledger():
    release = _score_releaser(5.0)
    release_validation_score(release, "score", np.ones(4), score_clip=1.0)
    (entry,) = release.accountant.ledger
    assert entry.event == GaussianEvent(5.0) and entry.sensitivity == 1.0


# ------------------------------------------------------------------ the report
def test_search_report_nests_and_serialises():
    acc = PrivacyAccountant().compose(plan_events(_plan(1.0).calibrate().phases,
                                                  _plan(1.0).calibrate()._params), phase="p")
    trial = PrivacyReport.from_accountant(acc, epsilon=1.0, delta=1e-6, n_users=5)
    report = SearchPrivacyReport(epsilon=2.0, delta=1e-6, epsilon_spent=2.0, delta_spent=1e-6,
                                 accountant="rdp-random-stopping", n_users=5, stopping="x",
                                 trial_rho=0.01, trial_epsilon=0.5, chosen_trial=trial)
    text = str(report)
    assert "chosen trial's fit" in text and "exact-gdp" in text
    d = report.to_dict()
    assert d["chosen_trial"]["accountant"] == "exact-gdp"
    assert pickle.loads(pickle.dumps(report)) == report
    assert "chosen trial" in report._repr_html_()
