"""Rényi DP of skdpp's mechanisms and its conversion to (ε, δ) (:ref:`accounting`).

RDP of the Poisson-subsampled Gaussian, the Laplace mechanism, pure ε-DP and
ε-bounded-range selections, and the RDP → (ε, δ) conversion of Canonne, Kamath &
Steinke (2020, Proposition 12), for every ledger that is not a plain composition
of Gaussian mechanisms.

References
----------
.. [1] Mironov, I. (2017). Rényi Differential Privacy. arXiv:1702.07476.
.. [2] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi Differential
       Privacy of the Sampled Gaussian Mechanism. arXiv:1908.10530.
.. [3] Canonne, C., Kamath, G. and Steinke, T. (2020). The Discrete Gaussian
       for Differential Privacy. arXiv:2004.00010.
.. [4] Cesar, M. and Rogers, R. (2021). arXiv:2004.07223.
"""

import math

import numpy as np
from scipy import optimize, special

from ._gdp import _check_delta, _check_nonneg

__all__ = ["DEFAULT_RDP_ORDERS", "rdp_to_delta", "rdp_to_epsilon", "zcdp_delta", "zcdp_epsilon"]

#: Rényi orders of the RDP path (dp-accounting's ``RdpAccountant`` default):
#: 1.1, 1.2, ..., 10.9, 11, ..., 63, 128, 256, 512, 1024.
DEFAULT_RDP_ORDERS = np.array(
    [1.0 + x / 10.0 for x in range(1, 100)]
    + [float(x) for x in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0]
)


def _log_abs_binom(alpha, i):
    """log|C(alpha, i)| and its sign (alpha real, i integer array >= 0)."""
    i = np.asarray(i, dtype=float)
    log_abs = special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0) \
        - special.gammaln(alpha - i + 1.0)
    sign = special.gammasgn(alpha - i + 1.0)
    return log_abs, sign


def _log_a_int(q, sigma, alpha):
    """log A_α for integer α by the binomial expansion (MTZ 2019, Sec. 3.3)."""
    n = int(alpha)
    i = np.arange(n + 1, dtype=float)
    log_binom, _ = _log_abs_binom(float(n), i)
    log_terms = (log_binom + i * math.log(q) + (n - i) * math.log1p(-q)
                 + (i * i - i) / (2.0 * sigma * sigma))
    return float(special.logsumexp(log_terms))


def _log_a_frac(q, sigma, alpha, max_terms=10_000_000):
    """log A_α for fractional α by the two signed series of MTZ 2019 (Sec. 3.3), in
    chunks growing geometrically until the tail is below ~e^-36 of the total."""
    z0 = sigma * sigma * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    inv2s2 = 1.0 / (2.0 * sigma * sigma)
    log_total, sign_total = -math.inf, 0.0
    start, chunk = 0, 256
    while start < max_terms:
        i = np.arange(start, start + chunk, dtype=float)
        j = alpha - i
        log_binom, sign = _log_abs_binom(alpha, i)
        # First series: Φ((z0 − i)/σ) is ½ erfc((i − z0)/(√2 σ)); second
        # series: Φ((j − z0)/σ) = ½ erfc((z0 − j)/(√2 σ)).
        s0 = (log_binom + i * log_q + j * log_1mq + (i * i - i) * inv2s2
              + special.log_ndtr((z0 - i) / sigma))
        s1 = (log_binom + j * log_q + i * log_1mq + (j * j - j) * inv2s2
              + special.log_ndtr((j - z0) / sigma))
        chunk_log, chunk_sign = special.logsumexp(
            np.concatenate([s0, s1]), b=np.concatenate([sign, sign]),
            return_sign=True)
        log_total, sign_total = special.logsumexp(
            [log_total, chunk_log], b=[sign_total if sign_total else 1.0, chunk_sign],
            return_sign=True)
        start += chunk
        last = max(s0[-1], s1[-1])
        if start > alpha + 1 and last + math.log(start) < log_total - 36.0:
            break
        chunk = min(2 * chunk, 1 << 18)
    return float(log_total)


# Above this sampling rate fractional orders are bounded by the next integer order.
_FRACTIONAL_SERIES_MAX_Q = 0.1


def _rdp_poisson_gaussian(q, sigma, orders):
    """RDP of the Poisson-subsampled Gaussian mechanism at each order."""
    orders = np.asarray(orders, dtype=float)
    if q == 0.0:
        return np.zeros_like(orders)
    if sigma == 0.0:
        return np.full_like(orders, np.inf)
    if q == 1.0:
        return orders / (2.0 * sigma * sigma)
    out = np.empty_like(orders)
    for k, alpha in enumerate(orders):
        if math.isinf(alpha):
            out[k] = math.inf
            continue
        if q > _FRACTIONAL_SERIES_MAX_Q:
            # The series decays only polynomially for large q (tens of seconds per
            # order); RDP is non-decreasing in the order: ceil(alpha) bounds it.
            alpha = float(math.ceil(alpha))
        if float(alpha).is_integer():
            log_a = _log_a_int(q, sigma, alpha)
        else:
            log_a = _log_a_frac(q, sigma, alpha)
        out[k] = max(log_a, 0.0) / (alpha - 1.0)
    return out


def _rdp_laplace(noise_multiplier, orders):
    """RDP of the Laplace mechanism with scale b = z · L1 sensitivity (Mironov 2017)."""
    orders = np.asarray(orders, dtype=float)
    b = float(noise_multiplier)
    eps = 1.0 / b
    out = np.empty_like(orders)
    for k, alpha in enumerate(orders):
        if alpha == 1.0:
            out[k] = eps + math.expm1(-eps)
        elif math.isinf(alpha):
            out[k] = eps
        else:
            val = np.logaddexp(math.log(alpha / (2 * alpha - 1)) + (alpha - 1) * eps,
                               math.log((alpha - 1) / (2 * alpha - 1)) - alpha * eps)
            out[k] = min(float(val) / (alpha - 1.0), eps)
    return out


def _rdp_exponential(epsilon, orders):
    """RDP of an ε-bounded-range selection: min(α ε²/8, the pure ε-DP bound)."""
    a = np.asarray(orders, dtype=float)
    # Tight pure ε-DP bound: the Rényi moment of randomized response (extremal), <= ε.
    log_m = np.logaddexp(a * epsilon, (1.0 - a) * epsilon) - np.log1p(np.exp(epsilon))
    pure = np.minimum(log_m / (a - 1.0), epsilon)
    return np.minimum(a * epsilon * epsilon / 8.0, pure)


def _cks_penalty(orders, log_delta):
    """``log1p(-1/α) - (log δ + log α)/(α - 1)``: ε at δ is ``min_α rdp(α) + this``."""
    return np.log1p(-1.0 / orders) - (log_delta + np.log(orders)) / (orders - 1.0)


def _cks_log_delta(orders, rdp, epsilon):
    """``(α - 1)(rdp(α) - ε + log1p(-1/α)) - log α``: log δ at ε is its minimum over α."""
    return (orders - 1.0) * (rdp - epsilon + np.log1p(-1.0 / orders)) - np.log(orders)


def _check_curve(orders, rdp):
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if np.any(orders <= 1.0):
        raise ValueError("RDP orders must all be > 1.")
    if np.any(rdp < 0) or np.any(np.isnan(rdp)):
        raise ValueError("RDP values must be non-negative.")
    return orders, rdp


def rdp_to_epsilon(orders, rdp, delta):
    """ε at δ in ``[0, 1]`` of an RDP curve (Canonne, Kamath & Steinke 2020,
    arXiv:2004.00010, Proposition 12): ``ε = min_α rdp(α) + log1p(−1/α) − (log δ
    + log α)/(α − 1)`` over the orders ``α > 1`` of the curve, floored at 0.

    Examples
    --------
    >>> from skdpp.privacy.accounting import rdp_to_epsilon, DEFAULT_RDP_ORDERS
    >>> rdp = DEFAULT_RDP_ORDERS / (2 * 5.0 ** 2) * 10
    >>> round(rdp_to_epsilon(DEFAULT_RDP_ORDERS, rdp, 1e-5), 6)
    2.813653
    """
    orders, rdp = _check_curve(orders, rdp)
    delta = _check_delta(delta)
    if np.all(rdp == 0.0):
        return 0.0
    if delta == 0.0:
        return math.inf
    with np.errstate(invalid="ignore"):
        eps = rdp + _cks_penalty(orders, math.log(delta))
    eps = eps[~np.isnan(eps)]
    if eps.size == 0:
        return math.inf
    return max(0.0, float(np.min(eps)))


def rdp_to_delta(orders, rdp, epsilon):
    """δ at ε >= 0 of an RDP curve (Canonne, Kamath & Steinke 2020): ``log δ = min_α
    (α − 1)(rdp(α) − ε + log1p(−1/α)) − log α`` (α > 1.01), also bounded by
    ``sqrt(1 − exp(−rdp(α)))`` (Bretagnolle–Huber, KL <= D_α) and by 1.

    Examples
    --------
    >>> from skdpp.privacy.accounting import rdp_to_delta, DEFAULT_RDP_ORDERS
    >>> rdp = DEFAULT_RDP_ORDERS / (2 * 5.0 ** 2) * 10
    >>> rdp_to_delta(DEFAULT_RDP_ORDERS, rdp, 2.813653) <= 1.0001e-5
    True
    """
    orders, rdp = _check_curve(orders, rdp)
    epsilon = _check_nonneg(epsilon, "epsilon")
    best = 0.0
    for a, r in zip(orders, rdp):
        if math.isinf(r):
            continue
        log_d = -math.inf if r == 0.0 else 0.5 * math.log(-math.expm1(-r))
        if a > 1.01:
            log_d = min(log_d, float(_cks_log_delta(a, r, epsilon)))
        best = min(best, log_d)
    return min(1.0, math.exp(best))


# Largest continuous Rényi order searched by the conversions (the bounds hold
# for every real order > 1; very small budgets have their optimum far out).
_MAX_ORDER = 1e7
_MIN_ORDER = 1.0 + 1e-9
_DELTA_GRID = np.geomspace(1.0 + 1e-6, _MAX_ORDER, 400)
# The RDP orders extended to _MAX_ORDER (2 x 1024 first).
_EPSILON_GRID = np.concatenate([DEFAULT_RDP_ORDERS,
                                np.geomspace(2048.0, _MAX_ORDER, 14)])


def _cks_epsilon(rdp_at, delta):
    """min over orders λ > 1 of ``rdp_at(λ) + log1p(−1/λ) − (log δ + log λ)/(λ − 1)``
    for an RDP bound ``rdp_at`` valid at every real order (vectorised): over a
    grid, then refined over continuous orders around the best grid point
    (every value is a valid ε; the refinement only tightens it)."""
    log_delta = math.log(delta)

    def conv(lam):
        lam = np.asarray(lam, dtype=float)
        return rdp_at(lam) + _cks_penalty(lam, log_delta)

    grid = _EPSILON_GRID
    # On the grid, a bound at a higher order is also a bound at a lower one.
    rdp = np.minimum.accumulate(np.asarray(rdp_at(grid), dtype=float)[::-1])[::-1]
    values = rdp + _cks_penalty(grid, log_delta)
    i = int(np.nanargmin(values))
    best = float(values[i])
    lo = grid[i - 1] if i > 0 else _MIN_ORDER
    hi = grid[i + 1] if i + 1 < grid.size else _MAX_ORDER
    res = optimize.minimize_scalar(lambda x: float(conv(x)), bounds=(lo, hi),
                                   method="bounded", options={"xatol": 1e-10 * hi})
    if res.success and res.fun < best:
        best = float(res.fun)
    return max(0.0, best)


def zcdp_epsilon(rho, delta):
    """ε at δ in ``(0, 1)`` of a ρ-zCDP mechanism (RDP ``ρλ``; CKS 2020 conversion).

    Examples
    --------
    >>> from skdpp.privacy._rdp import zcdp_epsilon
    >>> round(zcdp_epsilon(0.01, 1e-6), 4)
    0.6217
    """
    rho, delta = float(rho), float(delta)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return math.inf
    return _cks_epsilon(lambda lam: rho * lam, delta)


def zcdp_delta(rho, epsilon):
    """δ at ε of a ρ-zCDP mechanism: ``log δ = min_{λ>1} (λ − 1)(ρλ − ε +
    log1p(−1/λ)) − log λ`` (convex in λ) over continuous orders, also bounded by
    ``sqrt(1 − e^{−ρ})`` (Bretagnolle–Huber, KL <= ρ) and by 1.

    Examples
    --------
    >>> from skdpp.privacy._rdp import zcdp_delta, zcdp_epsilon
    >>> bool(abs(zcdp_delta(0.01, zcdp_epsilon(0.01, 1e-6)) - 1e-6) < 1e-9)
    True
    """
    rho, epsilon = float(rho), float(epsilon)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return 1.0

    def log_delta(lam):
        lam = np.asarray(lam, dtype=float)
        return _cks_log_delta(lam, rho * lam, epsilon)

    # Convex in λ: locate the minimum on a logarithmic grid, then refine it.
    grid = _DELTA_GRID
    values = log_delta(grid)
    i = int(np.argmin(values))
    lo = grid[i - 1] if i > 0 else _MIN_ORDER
    hi = grid[i + 1] if i + 1 < grid.size else _MAX_ORDER
    res = optimize.minimize_scalar(lambda x: float(log_delta(x)), bounds=(lo, hi),
                                   method="bounded", options={"xatol": 1e-12 * hi})
    # Also δ <= sqrt(1 − e^{−KL}) with KL <= ρ (Bretagnolle–Huber), as rdp_to_delta.
    best = min(float(res.fun), float(values[i]), 0.5 * math.log(-math.expm1(-rho)))
    return float(min(1.0, math.exp(min(best, 0.0))))
