"""Tests for skdpp.privacy.accounting, against dp-accounting (test-only oracle).

Reproduce the maximum relative errors with::

    /tmp/venv/bin/pytest tests/privacy/test_accounting.py -q
"""

import itertools
import logging
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import integrate, stats

from skdpp.privacy._gdp import gaussian_delta, gaussian_epsilon, gaussian_mu
from skdpp.privacy._rdp import (
    DEFAULT_RDP_ORDERS,
    _log_a_frac,
    _log_a_int,
    _rdp_poisson_gaussian,
    rdp_to_delta,
    rdp_to_epsilon,
)
from skdpp.privacy.accounting import PrivacyAccountant
from skdpp.privacy.events import (
    ComposedEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    NoOpEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)

dp = pytest.importorskip("dp_accounting")
from dp_accounting import gaussian_mechanism as dp_gauss  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant  # noqa: E402
from dp_accounting.pld import privacy_loss_distribution as dp_pld  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant  # noqa: E402

logging.getLogger("absl").setLevel(logging.ERROR)


def _acc(event, count=1):
    return PrivacyAccountant().compose(event, count, phase="p")


# ---------------------------------------------------------------- known values
def test_known_value_five_gaussian_releases_exact():
    # T=5 releases at sigma=9.446669 are (1, 1e-6)-DP by the exact analysis.
    acc = _acc(GaussianEvent(9.446669), 5)
    assert acc.method == "exact-gdp"
    assert_allclose(acc.get_epsilon(1e-6), 1.0, rtol=1e-6)


def test_known_value_five_gaussian_releases_rdp_needs_more_noise():
    # The RDP analysis of the same 5 releases needs sigma = 10.131352 for (1, 1e-6).
    rdp = 5 * DEFAULT_RDP_ORDERS / (2 * 10.131352 ** 2)
    assert_allclose(rdp_to_epsilon(DEFAULT_RDP_ORDERS, rdp, 1e-6), 1.0, rtol=1e-6)
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dp.SelfComposedDpEvent(dp.GaussianDpEvent(10.131352), 5))
    assert_allclose(ref.get_epsilon(1e-6), 1.0, rtol=1e-6)


def test_known_value_ten_releases_sigma_five():
    acc = _acc(SelfComposedEvent(GaussianEvent(5.0), 10))
    assert_allclose(acc.get_epsilon(1e-5), 2.594383, rtol=1e-6)
    rdp = 10 * DEFAULT_RDP_ORDERS / (2 * 25.0)
    assert_allclose(rdp_to_epsilon(DEFAULT_RDP_ORDERS, rdp, 1e-5), 2.813653, rtol=1e-6)


def _zero_out_epsilon(acc, delta):
    """ε0 against the zero-out neighbour (what dp-accounting's add/remove RDP computes)."""
    return rdp_to_epsilon(acc.orders, acc.rdp(), delta)


def test_known_value_poisson_subsampled():
    # Our multipliers are relative to the replace-one sensitivity 2C, so the
    # dp-accounting (add/remove, sensitivity C) event with sigma=1.0 is ours with 0.5.
    acc = _acc(PoissonSampledEvent(0.01, GaussianEvent(0.5)), 1000)
    assert acc.method == "rdp-zero-out"
    assert_allclose(_zero_out_epsilon(acc, 1e-5), 2.101, atol=5e-4)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(dp.SelfComposedDpEvent(
        dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.0)), 1000))
    pld_eps = pld.get_epsilon(1e-5)
    assert_allclose(pld_eps, 1.828, atol=2e-3)
    assert _zero_out_epsilon(acc, 1e-5) > pld_eps  # RDP is an upper bound


def test_replace_one_via_zero_out_is_group_privacy_of_two():
    acc = _acc(PoissonSampledEvent(0.01, GaussianEvent(0.5)), 1000)
    eps = acc.get_epsilon(1e-5)
    eps0 = eps / 2
    delta0 = rdp_to_delta(acc.orders, acc.rdp(), eps0)
    # (eps0, delta0) against D0 gives (2 eps0, (1 + e^eps0) delta0) under replace-one.
    assert (1 + math.exp(eps0)) * delta0 <= 1e-5 * (1 + 1e-9)
    # Never below the doubled add/remove epsilon at delta itself.
    assert eps >= 2 * _zero_out_epsilon(acc, 1e-5)
    assert_allclose(acc.get_delta(eps), (1 + math.exp(eps0)) * delta0, rtol=1e-12)
    assert acc.get_delta(eps) <= 1e-5 * (1 + 1e-9)


# ---------------------------------------------------------------- exact path
EXACT_POINTS = list(itertools.product([0.5, 1.0, 3.0, 10.0, 40.0], [1, 7, 100],
                                      [1e-3, 1e-6, 1e-10]))


@pytest.mark.parametrize("sigma, count, delta", EXACT_POINTS)
def test_exact_path_matches_analytic_gaussian(sigma, count, delta):
    # T releases at sigma compose to one release at sigma / sqrt(T).
    ours = _acc(GaussianEvent(sigma), count).get_epsilon(delta)
    theirs = dp_gauss.get_epsilon_gaussian(sigma / math.sqrt(count), delta, tol=1e-14)
    assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize(
    "sigma, count, delta",
    [p for p in EXACT_POINTS if 0.3 <= p[0] / math.sqrt(p[1]) <= 10][::3])
def test_exact_path_between_pld_bounds(sigma, count, delta):
    ours = _acc(GaussianEvent(sigma), count).get_epsilon(delta)
    std = sigma / math.sqrt(count)
    bounds = []
    for pessimistic in (False, True):
        pld = dp_pld.from_gaussian_mechanism(
            std, pessimistic_estimate=pessimistic, value_discretization_interval=1e-4)
        bounds.append(pld.get_epsilon_for_delta(delta))
    lower, upper = bounds
    # never smaller than PLD's lower bound, never larger than its upper bound
    assert lower * (1 - 1e-9) <= ours <= upper * (1 + 1e-9)
    assert_allclose(ours, upper, rtol=1e-4, atol=1e-4)


def test_exact_path_matches_pld_accountant_nested_composition():
    event = ComposedEvent((SelfComposedEvent(GaussianEvent(4.0), 3), GaussianEvent(2.0),
                           SelfComposedEvent(ComposedEvent((GaussianEvent(8.0),)), 5)))
    acc = _acc(event)
    assert acc.method == "exact-gdp"
    mu = math.sqrt(3 / 16 + 1 / 4 + 5 / 64)
    assert_allclose(acc.gdp_mu(), mu, rtol=1e-14)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp.ComposedDpEvent([
        dp.SelfComposedDpEvent(dp.GaussianDpEvent(4.0), 3), dp.GaussianDpEvent(2.0),
        dp.SelfComposedDpEvent(dp.GaussianDpEvent(8.0), 5)]))
    theirs = pld.get_epsilon(1e-6)
    ours = acc.get_epsilon(1e-6)
    assert ours <= theirs * (1 + 1e-9)
    assert_allclose(ours, theirs, rtol=1e-4)


@pytest.mark.parametrize("mu, epsilon", [(1e-8, 1e-8), (1e-5, 3e-5), (1e-3, 0.01),
                                         (0.5, 2.0), (3.0, 5.0), (30.0, 400.0)])
def test_gaussian_delta_matches_high_precision_formula(mu, epsilon):
    # With b = a - mu: e^eps Phi(b) = int_{-inf}^{a} phi(s) e^{eps + mu s - mu^2/2} ds, so
    # delta = int_{-inf}^{a} phi(s) (1 - e^{eps + mu s - mu^2/2}) ds (no cancellation).
    a = -epsilon / mu + mu / 2

    def integrand(s):
        return stats.norm.pdf(s) * -math.expm1(epsilon + mu * s - mu * mu / 2)
    ref, _ = integrate.quad(integrand, a - 40, a, epsabs=0, epsrel=1e-12, limit=200)
    assert_allclose(gaussian_delta(mu, epsilon), ref, rtol=1e-8)


@pytest.mark.parametrize("mu, delta", [(1e-4, 1e-6), (0.05, 1e-5), (1.0, 1e-9),
                                       (20.0, 1e-5), (200.0, 1e-12)])
def test_gaussian_epsilon_inverts_delta(mu, delta):
    eps = gaussian_epsilon(mu, delta)
    assert_allclose(gaussian_delta(mu, eps), delta, rtol=1e-9)
    assert_allclose(gaussian_mu(eps, delta), mu, rtol=1e-9)


def test_gaussian_epsilon_edge_cases():
    assert gaussian_epsilon(0.0, 1e-6) == 0.0
    assert gaussian_epsilon(1.0, 0.0) == math.inf
    assert gaussian_epsilon(1e-3, 0.5) == 0.0  # delta above delta(0)
    assert gaussian_delta(np.inf, 1.0) == 1.0
    with pytest.raises(ValueError, match="delta"):
        gaussian_epsilon(1.0, 1.5)
    with pytest.raises(ValueError, match="mu"):
        gaussian_epsilon(-1.0, 1e-5)


def test_exact_get_delta_inverts_get_epsilon():
    acc = _acc(GaussianEvent(3.0), 4)
    eps = acc.get_epsilon(1e-7)
    assert_allclose(acc.get_delta(eps), 1e-7, rtol=1e-9)


# ---------------------------------------------------------------- RDP path
INTEGER_ORDERS = np.array([float(a) for a in range(2, 64)] + [128.0, 256.0, 512.0, 1024.0])
RDP_POINTS = list(itertools.product([0.001, 0.01, 0.1, 0.3], [0.7, 1.0, 2.0, 5.0],
                                    [1, 50, 2000], [1e-5, 1e-9]))


def _dp_rdp_eps(event, delta, orders=None):
    acc = rdp_privacy_accountant.RdpAccountant(orders=orders)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("q, sigma, steps, delta", RDP_POINTS[::3])
def test_rdp_subsampled_gaussian_matches_dp_accounting_integer_orders(q, sigma, steps,
                                                                      delta):
    acc = PrivacyAccountant(orders=INTEGER_ORDERS).compose(
        PoissonSampledEvent(q, GaussianEvent(sigma / 2)), steps, phase="p")
    theirs = _dp_rdp_eps(dp.SelfComposedDpEvent(
        dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)), steps), delta,
        orders=INTEGER_ORDERS)
    assert_allclose(_zero_out_epsilon(acc, delta), theirs, rtol=1e-6)


@pytest.mark.parametrize("q, sigma, steps, delta",
                         [p for p in RDP_POINTS if p[0] <= 0.01 and p[1] >= 1.0][::2])
def test_rdp_subsampled_gaussian_matches_dp_accounting_default_orders(q, sigma, steps,
                                                                      delta):
    ours = _zero_out_epsilon(_acc(PoissonSampledEvent(q, GaussianEvent(sigma / 2)), steps),
                             delta)
    theirs = _dp_rdp_eps(dp.SelfComposedDpEvent(
        dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)), steps), delta)
    assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("q, sigma, steps", [(0.05, 0.7, 2000), (0.1, 1.0, 50)])
def test_rdp_never_above_dp_accounting(q, sigma, steps):
    # dp-accounting 0.6 truncates the fractional-order series (it can only
    # over-estimate); our series is summed to convergence.
    ours = _zero_out_epsilon(_acc(PoissonSampledEvent(q, GaussianEvent(sigma / 2)), steps),
                             1e-5)
    theirs = _dp_rdp_eps(dp.SelfComposedDpEvent(
        dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)), steps), 1e-5)
    assert ours <= theirs * (1 + 1e-9)


@pytest.mark.parametrize("q, sigma", [(0.3, 1.0), (0.5, 0.7), (0.9, 2.0)])
def test_large_q_fractional_orders_bounded_by_next_integer_order(q, sigma):
    # Above q = 0.1 fractional orders use the (monotone) RDP at ceil(alpha): a valid
    # upper bound of the exact series value, computed in microseconds.
    orders = np.array([1.5, 2.5, 7.3])
    rdp = _rdp_poisson_gaussian(q, sigma, orders)
    exact = np.array([_log_a_frac(q, sigma, a) / (a - 1) for a in orders])
    ceil = np.array([_log_a_int(q, sigma, math.ceil(a)) / (math.ceil(a) - 1) for a in orders])
    assert_allclose(rdp, ceil, rtol=1e-12)
    assert np.all(rdp >= exact * (1 - 1e-12))


def _log_a_quadrature(q, sigma, alpha):
    # A_alpha = E_{z ~ N(0, sigma^2)} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha]
    def integrand(z):
        return stats.norm.pdf(z, scale=sigma) * (
            (1 - q) + q * math.exp((2 * z - 1) / (2 * sigma ** 2))) ** alpha
    val, _ = integrate.quad(integrand, -40 * sigma, 40 * sigma + 1, epsabs=0,
                            epsrel=1e-13, limit=500, points=[0.0, 0.5, 1.0])
    return math.log(val)


@pytest.mark.parametrize("q, sigma, alpha", [(0.01, 1.0, 1.1), (0.5, 0.7, 1.1),
                                             (0.1, 3.0, 5.5), (0.2, 1.0, 2.7),
                                             (0.001, 0.5, 7.3)])
def test_fractional_order_series_matches_quadrature(q, sigma, alpha):
    assert_allclose(_log_a_frac(q, sigma, alpha), _log_a_quadrature(q, sigma, alpha),
                    rtol=1e-7)


@pytest.mark.parametrize("q, sigma, alpha", [(0.01, 1.0, 2), (0.2, 0.8, 7), (0.05, 2.0, 30)])
def test_integer_order_expansion_matches_quadrature(q, sigma, alpha):
    assert_allclose(_log_a_int(q, sigma, alpha), _log_a_quadrature(q, sigma, alpha),
                    rtol=1e-7)


@pytest.mark.parametrize("z", [0.1, 0.5, 1.0, 3.0, 20.0])
def test_rdp_laplace_matches_dp_accounting(z):
    acc = _acc(LaplaceEvent(z), 3)
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dp.SelfComposedDpEvent(dp.LaplaceDpEvent(z), 3))
    assert_allclose(acc.rdp(), ref._rdp, rtol=1e-9)
    for delta in (1e-3, 1e-7):
        assert_allclose(min(acc.get_epsilon(delta), 3 / z),
                        min(ref.get_epsilon(delta), 3 / z), rtol=1e-6)


@pytest.mark.parametrize("delta", [1e-4, 1e-6, 1e-9])
def test_rdp_mixed_composition_matches_dp_accounting(delta):
    ours = PrivacyAccountant()
    ours.compose(GaussianEvent(3.0), 2, phase="init")
    ours.compose(PoissonSampledEvent(0.01, GaussianEvent(0.6)), 500, phase="sgd")
    ours.compose(LaplaceEvent(4.0), 1, phase="counts")
    assert ours.method == "rdp-zero-out"
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dp.ComposedDpEvent([
        dp.SelfComposedDpEvent(dp.GaussianDpEvent(3.0), 2),
        dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.2)), 500),
        dp.LaplaceDpEvent(4.0)]))
    assert_allclose(_zero_out_epsilon(ours, delta), ref.get_epsilon(delta), rtol=1e-6)
    eps0 = _zero_out_epsilon(ours, delta)
    assert_allclose(rdp_to_delta(ours.orders, ours.rdp(), eps0), ref.get_delta(eps0),
                    rtol=1e-6)


def test_rdp_get_delta_matches_dp_accounting_gaussian_subsampled():
    ours = _acc(PoissonSampledEvent(0.01, GaussianEvent(0.5)), 1000)
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dp.SelfComposedDpEvent(
        dp.PoissonSampledDpEvent(0.01, dp.GaussianDpEvent(1.0)), 1000))
    for eps in (1.0, 2.0, 5.0):
        assert_allclose(rdp_to_delta(ours.orders, ours.rdp(), eps), ref.get_delta(eps),
                        rtol=1e-5)
        # Replace-one: (eps, (1 + e^(eps/2)) delta0(eps/2)). The two RDP->delta
        # conversions agree to ~3e-5 relative at eps/2 = 0.5.
        assert_allclose(ours.get_delta(eps),
                        min(1.0, (1 + math.exp(eps / 2)) * ref.get_delta(eps / 2)), rtol=1e-4)


def test_default_orders_equal_dp_accounting():
    assert_allclose(DEFAULT_RDP_ORDERS, rdp_privacy_accountant.DEFAULT_RDP_ORDERS,
                    rtol=0, atol=1e-12)


def test_rdp_conversions_validate():
    with pytest.raises(ValueError, match="orders"):
        rdp_to_epsilon([1.0, 2.0], [0.1, 0.2], 1e-5)
    with pytest.raises(ValueError, match="non-negative"):
        rdp_to_delta([2.0], [-0.1], 1.0)
    assert rdp_to_epsilon([2.0, 3.0], [0.0, 0.0], 1e-5) == 0.0
    assert rdp_to_epsilon([2.0, 3.0], [0.1, 0.2], 0.0) == math.inf


# ---------------------------------------------------------------- exponential / pure
def test_exponential_rdp_is_min_of_bounds():
    eps = 0.8
    rdp = _acc(ExponentialEvent(eps)).rdp()
    a = DEFAULT_RDP_ORDERS
    pure = (np.logaddexp(a * eps, (1 - a) * eps) - np.log1p(np.exp(eps))) / (a - 1)
    assert_allclose(rdp, np.minimum(np.minimum(a * eps ** 2 / 8, pure), eps), rtol=1e-12)
    assert np.all(rdp <= eps)


def test_pure_path_basic_composition_at_delta_zero():
    acc = PrivacyAccountant()
    acc.compose(LaplaceEvent(2.0), 3, phase="counts")
    acc.compose(ExponentialEvent(0.25), 2, phase="select")
    assert acc.method == "pure"
    assert_allclose(acc.get_epsilon(0.0), 3 * 0.5 + 2 * 0.25, rtol=1e-15)
    assert acc.get_delta(2.0) == 0.0


def test_pure_path_uses_rdp_when_tighter():
    acc = _acc(ExponentialEvent(0.1), 1000)
    basic = 100.0
    eps = acc.get_epsilon(1e-6)
    assert eps < basic / 10
    assert_allclose(eps, rdp_to_epsilon(DEFAULT_RDP_ORDERS, acc.rdp(), 1e-6), rtol=1e-12)


def test_pure_path_uses_basic_composition_when_tighter():
    acc = _acc(LaplaceEvent(0.5))
    assert_allclose(acc.get_epsilon(1e-6), 2.0, rtol=1e-15)


# ---------------------------------------------------------------- methods and ledger
def test_empty_accountant():
    acc = PrivacyAccountant()
    assert acc.method == "none"
    assert acc.get_epsilon(1e-6) == 0.0
    assert acc.get_delta(0.1) == 0.0


def test_noop_contributes_nothing():
    acc = _acc(GaussianEvent(2.0), 3)
    eps = acc.get_epsilon(1e-6)
    acc.compose(NoOpEvent(), 10, phase="nothing")
    acc.compose(PoissonSampledEvent(0.0, GaussianEvent(0.5)), phase="nothing")
    assert acc.method == "exact-gdp"
    assert acc.get_epsilon(1e-6) == eps


@pytest.mark.parametrize("event", [NonPrivateEvent(), GaussianEvent(0.0), LaplaceEvent(0.0),
                                   ExponentialEvent(np.inf)])
def test_non_private_event_gives_infinite_epsilon(event):
    acc = _acc(GaussianEvent(2.0), 3)
    acc.compose(event, phase="leak")
    assert acc.method == "non-private"
    assert acc.get_epsilon(1e-6) == math.inf
    assert acc.get_delta(10.0) == 1.0


def test_gaussian_with_delta_zero_is_infinite():
    assert _acc(GaussianEvent(2.0)).get_epsilon(0.0) == math.inf


def test_poisson_rate_one_is_exact_path():
    acc = _acc(PoissonSampledEvent(1.0, GaussianEvent(2.0)), 4)
    assert acc.method == "exact-gdp"
    assert_allclose(acc.get_epsilon(1e-6), _acc(GaussianEvent(1.0)).get_epsilon(1e-6),
                    rtol=1e-12)


def test_ledger_records_entries_in_order():
    acc = PrivacyAccountant()
    out = acc.compose(GaussianEvent(2.0), 3, phase="init", mechanism="gaussian_sum",
                      sensitivity=2.0, clip_norm=1.0)
    acc.compose(LaplaceEvent(1.0), phase="counts")
    assert out is acc
    assert [e.phase for e in acc.ledger] == ["init", "counts"]
    first = acc.ledger[0]
    assert (first.count, first.mechanism, first.sensitivity, first.clip_norm) == (
        3, "gaussian_sum", 2.0, 1.0)
    assert acc.ledger[1].mechanism == "laplace"
    assert isinstance(acc.ledger, tuple)


def test_compose_validates_arguments():
    acc = PrivacyAccountant()
    with pytest.raises(TypeError, match="DpEvent"):
        acc.compose("gaussian", phase="x")
    with pytest.raises(ValueError, match="count"):
        acc.compose(GaussianEvent(1.0), -1, phase="x")
    with pytest.raises(ValueError, match="phase"):
        acc.compose(GaussianEvent(1.0), phase="")
    with pytest.raises(ValueError, match="sensitivity"):
        acc.compose(GaussianEvent(1.0), phase="x", sensitivity=-1.0)
    with pytest.raises(NotImplementedError, match="PoissonSampledEvent"):
        acc.compose(PoissonSampledEvent(0.5, SelfComposedEvent(GaussianEvent(1.0), 2)),
                    phase="x")
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(-1e-6)
