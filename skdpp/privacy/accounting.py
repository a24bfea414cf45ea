"""Privacy accounting: compose events and convert them to (ε, δ).

One :class:`PrivacyAccountant` is used per fit. Every release is composed into
its ledger; :meth:`PrivacyAccountant.get_epsilon` then picks the tightest
available analysis:

``"exact-gdp"``
    All events are non-subsampled Gaussian mechanisms. Their composition is
    exactly μ-GDP with ``μ = sqrt(Σ count / z²)`` (Dong, Roth & Su 2019) and
    the (ε, δ) curve of μ-GDP is the analytic-Gaussian formula of Balle &
    Wang (2018), ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``. This is exact,
    not an upper bound.
``"pure"``
    Only pure-ε events (Laplace, exponential): basic composition
    ``ε = Σ ε_i`` with δ = 0; for δ > 0 the RDP bound is also computed and the
    smaller ε is reported.
``"rdp"``
    Anything else without subsampling (mixtures of Gaussian, Laplace and
    exponential events): Rényi DP over the same default orders as
    dp-accounting's ``RdpAccountant`` and the conversion to (ε, δ) of Canonne,
    Kamath & Steinke (2020).
``"rdp-zero-out"``
    The ledger holds Poisson-subsampled Gaussians. The sampled-Gaussian RDP
    bound of Mironov, Talwar & Zhang (2019) is an *add/remove* analysis; it
    does not directly cover replace-one-user. skdpp charges such ledgers
    through *zero-out* neighbours: datasets ``D`` and ``D'`` that differ in one
    user are both neighbours of ``D0``, in which that user is replaced by a
    null user contributing zero to every sampled sum. Against ``D0`` a sampled
    sum of contributions clipped to ``C`` has sensitivity ``C`` (half its
    replace-one sensitivity ``2C``), so ``PoissonSampledEvent(q,
    GaussianEvent(z))`` is charged as the add/remove sampled Gaussian with
    noise multiplier ``2 z``; every other event keeps its replace-one analysis
    (replacing a user by the null user is a replacement). The composition is
    ``(ε0, δ0)``-DP against ``D0``, hence ``(2 ε0, (1 + e^ε0) δ0)``-DP under
    replace-one-user (group privacy of size 2); the best split of δ is used.
``"non-private"``
    Some release was made without noise: ε = inf.
``"none"``
    Nothing touching the data was released: ε = 0.

This module depends only on numpy and scipy.

References
----------
.. [1] Balle, B. and Wang, Y.-X. (2018). Improving the Gaussian Mechanism for
       Differential Privacy: Analytical Calibration and Optimal Denoising.
       arXiv:1805.06530.
.. [2] Dong, J., Roth, A. and Su, W. (2019). Gaussian Differential Privacy.
       arXiv:1905.02383.
.. [3] Mironov, I. (2017). Rényi Differential Privacy. arXiv:1702.07476.
.. [4] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi Differential
       Privacy of the Sampled Gaussian Mechanism. arXiv:1908.10530.
.. [5] Canonne, C., Kamath, G. and Steinke, T. (2020). The Discrete Gaussian
       for Differential Privacy. arXiv:2004.00010.
.. [6] Cesar, M. and Rogers, R. (2021). Bounding, Concentrating, and
       Truncating: Unifying Privacy Loss Composition for Data Analytics.
       arXiv:2004.07223.

Examples
--------
>>> from skdpp.privacy import GaussianEvent, PrivacyAccountant
>>> acc = PrivacyAccountant().compose(GaussianEvent(5.0), count=10, phase="iterations")
>>> acc.method
'exact-gdp'
>>> round(acc.get_epsilon(1e-5), 6)
2.594383
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np
from scipy import optimize, special

from .events import (
    ComposedEvent,
    DpEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    NoOpEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "LedgerEntry",
    "PrivacyAccountant",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "rdp_to_epsilon",
    "rdp_to_delta",
]

#: Rényi orders used by the RDP path (the same set as dp-accounting's
#: ``RdpAccountant`` default): 1.1, 1.2, ..., 10.9, 11, ..., 63, 128, 256,
#: 512, 1024.
DEFAULT_RDP_ORDERS = np.array(
    [1.0 + x / 10.0 for x in range(1, 100)]
    + [float(x) for x in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0]
)


# --------------------------------------------------------------------------
# Exact GDP <-> (epsilon, delta) (analytic Gaussian, Balle & Wang 2018)
# --------------------------------------------------------------------------

# Gauss-Legendre nodes on [0, 1] for the short-interval integral below.
_GL_X, _GL_W = np.polynomial.legendre.leggauss(40)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W


def _log_gaussian_delta(mu, epsilon):
    """log δ(ε) of μ-GDP, numerically stable for tiny and large μ and ε."""
    if mu == 0.0:
        return -math.inf
    if math.isinf(mu):
        return 0.0
    if math.isinf(epsilon):
        return -math.inf
    a = -epsilon / mu + mu / 2.0
    b = a - mu
    if a >= 0.0:
        # δ = Φ(a) − exp(ε + log Φ(b)); Φ(a) >= 1/2, no harmful cancellation.
        value = special.ndtr(a) - math.exp(epsilon + special.log_ndtr(b))
        return math.log(value) if value > 0 else -math.inf
    # Tail region. With Φ(x) = erfcx(−x/√2) exp(−x²/2)/2 and
    # e^ε exp(−b²/2) = exp(−a²/2):
    #   δ = exp(−a²/2)/2 · [erfcx(x0) − erfcx(x1)],  x0 = −a/√2 < x1 = −b/√2.
    x0 = -a / math.sqrt(2.0)
    x1 = -b / math.sqrt(2.0)
    h = mu / math.sqrt(2.0)  # = x1 - x0, computed without cancellation
    if h < 1.0:
        # erfcx(x0) − erfcx(x1) = ∫_{x0}^{x1} (2/√π − 2t erfcx(t)) dt, computed
        # by quadrature to avoid cancellation when μ is tiny.
        t = x0 + h * _GL_X
        integrand = 2.0 / math.sqrt(math.pi) - 2.0 * t * special.erfcx(t)
        diff = h * float(np.dot(_GL_W, integrand))
    else:
        diff = float(special.erfcx(x0) - special.erfcx(x1))
    if diff <= 0.0:
        return -math.inf
    return -0.5 * a * a + math.log(0.5) + math.log(diff)


def _check_mu(mu):
    mu = float(mu)
    if not mu >= 0.0:
        raise ValueError(f"`mu` must be in [0, inf], got {mu!r}.")
    return mu


def gaussian_delta(mu, epsilon):
    """δ(ε) of a μ-GDP mechanism (exact, analytic Gaussian).

    Parameters
    ----------
    mu : float
        GDP parameter μ >= 0 (a Gaussian mechanism with noise multiplier z is
        ``1/z``-GDP; compositions add μ² ).
    epsilon : float
        Target ε >= 0.

    Returns
    -------
    delta : float
        ``Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``.

    References
    ----------
    .. [1] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530, Theorem 8.
    .. [2] Dong, J., Roth, A. and Su, W. (2019). arXiv:1905.02383, Corollary 2.13.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_delta
    >>> round(gaussian_delta(1.0, 1.0), 6)
    0.126937
    """
    mu = _check_mu(mu)
    epsilon = float(epsilon)
    if not epsilon >= 0.0:
        raise ValueError(f"`epsilon` must be in [0, inf], got {epsilon!r}.")
    return math.exp(_log_gaussian_delta(mu, epsilon))


def gaussian_epsilon(mu, delta):
    """Smallest ε such that a μ-GDP mechanism is (ε, δ)-DP (exact).

    Parameters
    ----------
    mu : float
        GDP parameter μ >= 0.
    delta : float
        Target δ in ``[0, 1]``.

    Returns
    -------
    epsilon : float
        Solves ``gaussian_delta(mu, epsilon) = delta`` (``brentq`` on log ε,
        relative accuracy ~1e-13); ``inf`` when ``delta = 0`` and ``mu > 0``.

    References
    ----------
    .. [1] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_epsilon
    >>> round(gaussian_epsilon(1.0, 1e-5), 6)
    4.377178
    """
    mu = _check_mu(mu)
    delta = float(delta)
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"`delta` must be in [0, 1], got {delta!r}.")
    if mu == 0.0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if delta == 0.0:
        return math.inf
    log_delta = math.log(delta)
    if _log_gaussian_delta(mu, 0.0) <= log_delta:
        return 0.0

    def f(log_eps):
        return _log_gaussian_delta(mu, math.exp(log_eps)) - log_delta

    lo = math.log(mu)
    while f(lo) <= 0.0:
        lo -= 2.0
        if lo < -700:
            return 0.0
    hi = math.log(max(mu, 1.0))
    while f(hi) > 0.0:
        hi += 1.0
    log_eps = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps,
                              maxiter=500)
    return math.exp(log_eps)


def gaussian_mu(epsilon, delta):
    """Largest μ such that μ-GDP implies (ε, δ)-DP (exact).

    Parameters
    ----------
    epsilon : float
        Target ε > 0.
    delta : float
        Target δ in ``(0, 1)``.

    Returns
    -------
    mu : float
        Solves ``gaussian_delta(mu, epsilon) = delta``.

    References
    ----------
    .. [1] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_mu
    >>> round(1 / gaussian_mu(1.0, 1e-5) * 10 ** 0.5, 4)   # sigma for 10 releases
    11.7973
    """
    epsilon = float(epsilon)
    delta = float(delta)
    if not epsilon >= 0.0:
        raise ValueError(f"`epsilon` must be in [0, inf], got {epsilon!r}.")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"`delta` must be in [0, 1], got {delta!r}.")
    if math.isinf(epsilon) or delta == 1.0:
        return math.inf
    if delta == 0.0:
        return 0.0
    log_delta = math.log(delta)

    def f(log_mu):
        return _log_gaussian_delta(math.exp(log_mu), epsilon) - log_delta

    lo, hi = -1.0, 1.0
    while f(lo) > 0.0:
        lo -= 2.0
    while f(hi) < 0.0:
        hi += 1.0
    return math.exp(optimize.brentq(f, lo, hi, xtol=1e-15,
                                    rtol=4 * np.finfo(float).eps, maxiter=500))


# --------------------------------------------------------------------------
# RDP of the individual mechanisms
# --------------------------------------------------------------------------

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
    """log A_α for fractional α by the two series of MTZ 2019 (Sec. 3.3).

    The terms are summed in log space with their signs (binomial coefficients
    of a fractional α alternate in sign). The series decay only polynomially
    (like i^(-α-2)) when q is large, so chunks grow geometrically and the sum
    stops once the remaining tail is below ~e^-36 of the total.
    """
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
        if float(alpha).is_integer():
            log_a = _log_a_int(q, sigma, alpha)
        elif q > _FRACTIONAL_SERIES_MAX_Q:
            # The fractional series decays only polynomially for large q (tens of
            # seconds per order). Rényi divergence is non-decreasing in the order,
            # so the RDP at ceil(alpha) is a valid (slightly looser) bound.
            out[k] = max(_log_a_int(q, sigma, math.ceil(alpha)), 0.0) / (math.ceil(alpha) - 1.0)
            continue
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


def _rdp_pure(epsilon, orders):
    """Tight RDP bound implied by pure ε-DP (randomized response is extremal)."""
    orders = np.asarray(orders, dtype=float)
    a = orders
    val = (np.logaddexp(a * epsilon, (1.0 - a) * epsilon) - np.log1p(np.exp(epsilon))) \
        / (a - 1.0)
    return np.minimum(val, epsilon)


def _rdp_exponential(epsilon, orders):
    """RDP of an ε-bounded-range selection: min(ε, α ε²/8, pure-DP bound)."""
    orders = np.asarray(orders, dtype=float)
    return np.minimum(orders * epsilon * epsilon / 8.0, _rdp_pure(epsilon, orders))


def rdp_to_epsilon(orders, rdp, delta):
    """Convert an RDP curve to ε at a given δ (Canonne, Kamath & Steinke 2020).

    ``ε = min_α rdp(α) + log1p(−1/α) − (log δ + log α)/(α − 1)``, floored at 0.

    Parameters
    ----------
    orders : array-like of shape (n_orders,)
        Rényi orders α > 1.
    rdp : array-like of shape (n_orders,)
        RDP guarantee at each order.
    delta : float
        Target δ in ``[0, 1]``.

    Returns
    -------
    epsilon : float

    References
    ----------
    .. [1] Canonne, C., Kamath, G. and Steinke, T. (2020). arXiv:2004.00010,
           Proposition 12.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.accounting import rdp_to_epsilon, DEFAULT_RDP_ORDERS
    >>> rdp = DEFAULT_RDP_ORDERS / (2 * 5.0 ** 2) * 10
    >>> round(rdp_to_epsilon(DEFAULT_RDP_ORDERS, rdp, 1e-5), 6)
    2.813653
    """
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    delta = float(delta)
    if np.any(orders <= 1.0):
        raise ValueError("RDP orders must all be > 1.")
    if np.any(rdp < 0) or np.any(np.isnan(rdp)):
        raise ValueError("RDP values must be non-negative.")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"`delta` must be in [0, 1], got {delta!r}.")
    if np.all(rdp == 0.0):
        return 0.0
    if delta == 0.0:
        return math.inf
    with np.errstate(invalid="ignore"):
        eps = rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) \
            / (orders - 1.0)
    eps = eps[~np.isnan(eps)]
    if eps.size == 0:
        return math.inf
    return max(0.0, float(np.min(eps)))


def rdp_to_delta(orders, rdp, epsilon):
    """Convert an RDP curve to δ at a given ε (Canonne, Kamath & Steinke 2020).

    ``log δ = min_α (α − 1)(rdp(α) − ε + log1p(−1/α)) − log α`` (for α > 1.01),
    also bounded by ``δ <= sqrt(1 − exp(−rdp(α)))`` (total variation via
    Bretagnolle–Huber, since KL <= D_α), and by 1.

    Parameters
    ----------
    orders : array-like of shape (n_orders,)
    rdp : array-like of shape (n_orders,)
    epsilon : float
        Target ε >= 0.

    Returns
    -------
    delta : float

    References
    ----------
    .. [1] Canonne, C., Kamath, G. and Steinke, T. (2020). arXiv:2004.00010.

    Examples
    --------
    >>> from skdpp.privacy.accounting import rdp_to_delta, DEFAULT_RDP_ORDERS
    >>> rdp = DEFAULT_RDP_ORDERS / (2 * 5.0 ** 2) * 10
    >>> rdp_to_delta(DEFAULT_RDP_ORDERS, rdp, 2.813653) <= 1.0001e-5
    True
    """
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    epsilon = float(epsilon)
    if np.any(orders <= 1.0):
        raise ValueError("RDP orders must all be > 1.")
    if np.any(rdp < 0) or np.any(np.isnan(rdp)):
        raise ValueError("RDP values must be non-negative.")
    if not epsilon >= 0.0:
        raise ValueError(f"`epsilon` must be >= 0, got {epsilon!r}.")
    best = 0.0
    for a, r in zip(orders, rdp):
        if math.isinf(r):
            continue
        log_d = -math.inf if r == 0.0 else 0.5 * math.log(-math.expm1(-r))
        if a > 1.01:
            log_d = min(log_d, (a - 1.0) * (r - epsilon + math.log1p(-1.0 / a))
                        - math.log(a))
        best = min(best, log_d)
    return min(1.0, math.exp(best))


# --------------------------------------------------------------------------
# The accountant
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class LedgerEntry:
    """One composed release (or block of identical releases).

    Attributes
    ----------
    phase : str
        Name of the budget phase the release belongs to.
    event : DpEvent
        The release's privacy event.
    count : int
        Number of times ``event`` is composed.
    mechanism : str or None
        Human-readable mechanism name (for the report).
    sensitivity : float or None
        Stated sensitivity of the released value.
    clip_norm : float or None
        Clip norm used to bound the sensitivity.
    """

    phase: str
    event: DpEvent
    count: int = 1
    mechanism: Optional[str] = None
    sensitivity: Optional[float] = None
    clip_norm: Optional[float] = None


def _flatten(event, count, out):
    """Append (atom, multiplicity) pairs of ``event`` repeated ``count`` times."""
    if count == 0:
        return
    if isinstance(event, NoOpEvent):
        return
    if isinstance(event, SelfComposedEvent):
        _flatten(event.event, count * event.count, out)
    elif isinstance(event, ComposedEvent):
        for e in event.events:
            _flatten(e, count, out)
    elif isinstance(event, PoissonSampledEvent):
        q, inner = event.sampling_probability, event.event
        if q == 0.0 or isinstance(inner, NoOpEvent):
            return
        if q == 1.0:
            _flatten(inner, count, out)
        elif isinstance(inner, GaussianEvent):
            if inner.noise_multiplier == 0.0:
                out.append((NonPrivateEvent(), count))
            else:
                out.append((event, count))
        elif isinstance(inner, (NonPrivateEvent, LaplaceEvent, ExponentialEvent)):
            # Conservative: subsampling never weakens a pure-eps guarantee;
            # amplification is not credited.
            _flatten(inner, count, out)
        else:
            raise NotImplementedError(
                f"PoissonSampledEvent of {type(inner).__name__} is not supported; "
                "only a GaussianEvent (or a pure-eps event, without amplification) "
                "can be Poisson-subsampled. Compose per-release sampled events instead."
            )
    elif isinstance(event, GaussianEvent):
        if event.noise_multiplier == 0.0:
            out.append((NonPrivateEvent(), count))
        else:
            out.append((event, count))
    elif isinstance(event, LaplaceEvent):
        if event.noise_multiplier == 0.0:
            out.append((NonPrivateEvent(), count))
        else:
            out.append((event, count))
    elif isinstance(event, ExponentialEvent):
        if math.isinf(event.epsilon):
            out.append((NonPrivateEvent(), count))
        else:
            out.append((event, count))
    elif isinstance(event, NonPrivateEvent):
        out.append((event, count))
    else:
        raise TypeError(
            f"Unsupported privacy event {event!r}; expected one of the events in "
            "skdpp.privacy.events."
        )


class PrivacyAccountant:
    """Composes the privacy events of one fit and reports (ε, δ).

    Parameters
    ----------
    orders : array-like of float, default=None
        Rényi orders for the RDP path; ``None`` uses :data:`DEFAULT_RDP_ORDERS`
        (dp-accounting's default set).

    Attributes
    ----------
    ledger : tuple of LedgerEntry
        Every composed release, in order.
    method : str
        The analysis :meth:`get_epsilon` uses: ``"exact-gdp"``, ``"pure"``,
        ``"rdp"``, ``"rdp-zero-out"``, ``"non-private"`` or ``"none"``.

    Notes
    -----
    ``"exact-gdp"`` applies when every event is a non-subsampled Gaussian
    (nested :class:`SelfComposedEvent` / :class:`ComposedEvent` allowed): the
    composition is exactly μ-GDP with ``μ = sqrt(Σ count/z²)``, converted with
    the analytic Gaussian formula. ``"rdp"`` uses the sampled-Gaussian RDP
    (integer orders by the binomial expansion, fractional orders by the two
    series of Mironov, Talwar & Zhang), the Laplace closed form (Mironov 2017),
    ``min(ε, αε²/8)`` for the exponential mechanism (ε-bounded range ⇒
    ε²/8-zCDP, Cesar & Rogers 2021; also capped by the pure-DP RDP bound), and
    ``α/(2z²)`` for Gaussians. ``"pure"`` adds pure ε's and, when δ > 0,
    reports the minimum with the RDP bound. ``"rdp-zero-out"`` (ledgers with
    Poisson-subsampled Gaussians) composes against the zero-out neighbour and
    doubles ε by group privacy, because the sampled-Gaussian RDP bound is an
    add/remove analysis (see the module docstring).

    References
    ----------
    .. [1] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530.
    .. [2] Dong, J., Roth, A. and Su, W. (2019). arXiv:1905.02383.
    .. [3] Mironov, I. (2017). arXiv:1702.07476.
    .. [4] Mironov, I., Talwar, K. and Zhang, L. (2019). arXiv:1908.10530.
    .. [5] Canonne, C., Kamath, G. and Steinke, T. (2020). arXiv:2004.00010.
    .. [6] Cesar, M. and Rogers, R. (2021). arXiv:2004.07223.

    Examples
    --------
    >>> from skdpp.privacy import (GaussianEvent, PoissonSampledEvent,
    ...                            PrivacyAccountant)
    >>> acc = PrivacyAccountant()
    >>> _ = acc.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), count=1000,
    ...                 phase="sgd")
    >>> acc.method
    'rdp-zero-out'
    >>> round(acc.get_epsilon(1e-5), 3)
    1.471
    """

    def __init__(self, orders=None):
        if orders is None:
            orders = DEFAULT_RDP_ORDERS
        orders = np.asarray(orders, dtype=float).ravel()
        if orders.size == 0 or np.any(~(orders > 1.0)):
            raise ValueError("`orders` must be a non-empty array of Rényi orders > 1.")
        self._orders = orders.copy()
        self._ledger = []

    # -- ledger ------------------------------------------------------------
    def compose(self, event, count=1, *, phase, mechanism=None, sensitivity=None,
                clip_norm=None):
        """Add ``count`` repetitions of ``event`` to the ledger.

        Parameters
        ----------
        event : DpEvent
            The release's privacy event.
        count : int, default=1
            Number of repetitions (>= 0).
        phase : str
            Budget phase the release is charged to.
        mechanism : str, default=None
            Mechanism name for the report (inferred from the event if None).
        sensitivity : float, default=None
            Stated sensitivity of the release (for the report).
        clip_norm : float, default=None
            Clip norm bounding the sensitivity (for the report).

        Returns
        -------
        self : PrivacyAccountant
        """
        if not isinstance(event, DpEvent):
            raise TypeError(f"`event` must be a DpEvent, got {event!r}.")
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError(f"`count` must be a non-negative int, got {count!r}.")
        if not isinstance(phase, str) or not phase:
            raise ValueError(f"`phase` must be a non-empty str, got {phase!r}.")
        if sensitivity is not None and not float(sensitivity) >= 0.0:
            raise ValueError(f"`sensitivity` must be >= 0 or None, got {sensitivity!r}.")
        _flatten(event, int(count), [])  # validates support early
        if mechanism is None:
            mechanism = _mechanism_name(event)
        self._ledger.append(LedgerEntry(
            phase=phase, event=event, count=int(count), mechanism=mechanism,
            sensitivity=None if sensitivity is None else float(sensitivity),
            clip_norm=None if clip_norm is None else float(clip_norm)))
        return self

    @property
    def ledger(self):
        """tuple of LedgerEntry: every composed release, in order."""
        return tuple(self._ledger)

    @property
    def orders(self):
        """ndarray: the Rényi orders of the RDP path."""
        return self._orders.copy()

    def _atoms(self):
        out = []
        for entry in self._ledger:
            _flatten(entry.event, entry.count, out)
        return out

    @property
    def method(self):
        """str: ``"exact-gdp"``, ``"pure"``, ``"rdp"``, ``"rdp-zero-out"``, ``"non-private"``
        or ``"none"`` (see the module docstring)."""
        atoms = self._atoms()
        if not atoms:
            return "none"
        if any(isinstance(a, NonPrivateEvent) for a, _ in atoms):
            return "non-private"
        if all(isinstance(a, GaussianEvent) for a, _ in atoms):
            return "exact-gdp"
        if all(isinstance(a, (LaplaceEvent, ExponentialEvent)) for a, _ in atoms):
            return "pure"
        if any(isinstance(a, PoissonSampledEvent) for a, _ in atoms):
            return "rdp-zero-out"
        return "rdp"

    # -- summaries ---------------------------------------------------------
    def gdp_mu(self):
        """μ of the composition when ``method == "exact-gdp"`` (0 when empty)."""
        method = self.method
        if method == "none":
            return 0.0
        if method != "exact-gdp":
            raise ValueError(f"gdp_mu is only defined for method 'exact-gdp', not {method!r}.")
        return math.sqrt(sum(c / a.noise_multiplier ** 2 for a, c in self._atoms()))

    def pure_epsilon(self):
        """Basic-composition ε of pure-ε events (``inf`` if any event is not pure)."""
        total = 0.0
        for a, c in self._atoms():
            if isinstance(a, LaplaceEvent):
                total += c / a.noise_multiplier
            elif isinstance(a, ExponentialEvent):
                total += c * a.epsilon
            else:
                return math.inf
        return total

    def rdp(self):
        """Composed RDP guarantee at each of :attr:`orders` (ndarray).

        For ``method == "rdp-zero-out"`` this is the RDP against the zero-out
        neighbour (sampled Gaussians at noise multiplier ``2 z``), see the
        module docstring; it is *not* a replace-one-user RDP guarantee.
        """
        orders = self._orders
        total = np.zeros_like(orders)
        cache = {}
        for a, c in self._atoms():
            if a not in cache:
                if isinstance(a, NonPrivateEvent):
                    cache[a] = np.full_like(orders, np.inf)
                elif isinstance(a, GaussianEvent):
                    cache[a] = orders / (2.0 * a.noise_multiplier ** 2)
                elif isinstance(a, PoissonSampledEvent):
                    # Zero-out sensitivity C = half the replace-one sensitivity 2C.
                    cache[a] = _rdp_poisson_gaussian(
                        a.sampling_probability, 2.0 * a.event.noise_multiplier, orders)
                elif isinstance(a, LaplaceEvent):
                    cache[a] = _rdp_laplace(a.noise_multiplier, orders)
                elif isinstance(a, ExponentialEvent):
                    cache[a] = _rdp_exponential(a.epsilon, orders)
                else:  # pragma: no cover - _flatten rejects others
                    raise TypeError(f"Unsupported atom {a!r}.")
            total = total + c * cache[a]
        return total

    # -- conversions -------------------------------------------------------
    def get_epsilon(self, delta):
        """Smallest ε (by the best available analysis) at the given δ.

        Parameters
        ----------
        delta : float
            Target δ in ``[0, 1]``.

        Returns
        -------
        epsilon : float
            ``inf`` with a :class:`NonPrivateEvent` (or δ = 0 with Gaussian
            events), ``0`` when nothing was released.
        """
        delta = float(delta)
        if not 0.0 <= delta <= 1.0:
            raise ValueError(
                f"`delta` must be in [0, 1], got {delta!r}. Use e.g. delta=1e-6.")
        method = self.method
        if method == "none":
            return 0.0
        if method == "non-private":
            return math.inf
        if method == "exact-gdp":
            return gaussian_epsilon(self.gdp_mu(), delta)
        if method == "pure":
            eps = self.pure_epsilon()
            if delta > 0.0:
                eps = min(eps, rdp_to_epsilon(self._orders, self.rdp(), delta))
            return eps
        if method == "rdp-zero-out":
            return _zero_out_epsilon(self._orders, self.rdp(), delta)
        return rdp_to_epsilon(self._orders, self.rdp(), delta)

    def get_delta(self, epsilon):
        """Smallest δ (by the best available analysis) at the given ε.

        Parameters
        ----------
        epsilon : float
            Target ε >= 0.

        Returns
        -------
        delta : float
            In ``[0, 1]``; ``1`` with a :class:`NonPrivateEvent` (finite ε).
        """
        epsilon = float(epsilon)
        if not epsilon >= 0.0:
            raise ValueError(f"`epsilon` must be >= 0, got {epsilon!r}.")
        method = self.method
        if method == "none":
            return 0.0
        if method == "non-private":
            return 0.0 if math.isinf(epsilon) else 1.0
        if math.isinf(epsilon):
            return 0.0
        if method == "exact-gdp":
            return gaussian_delta(self.gdp_mu(), epsilon)
        if method == "pure" and epsilon >= self.pure_epsilon():
            return 0.0
        if method == "rdp-zero-out":
            # (eps0, delta0) against the zero-out neighbour gives
            # (2 eps0, (1 + e^eps0) delta0) under replace-one-user.
            half = epsilon / 2.0
            return min(1.0, (1.0 + math.exp(half))
                       * rdp_to_delta(self._orders, self.rdp(), half))
        return rdp_to_delta(self._orders, self.rdp(), epsilon)

    def __repr__(self):
        return (f"PrivacyAccountant(method={self.method!r}, "
                f"n_entries={len(self._ledger)})")


def _zero_out_epsilon(orders, rdp, delta):
    """Replace-one ε from RDP against the zero-out neighbour (group privacy of 2).

    Returns ``min 2 ε0(δ0)`` over ``δ0`` with ``(1 + e^ε0(δ0)) δ0 <= delta``,
    searched on a fine logarithmic grid of ``δ0 / delta`` (any feasible point
    gives a valid guarantee; the grid only affects tightness).
    """
    if delta <= 0.0:
        return math.inf
    best = math.inf
    for ratio in np.logspace(-8, 0, 321)[:-1]:
        d0 = delta * ratio
        eps0 = rdp_to_epsilon(orders, rdp, d0)
        if (1.0 + math.exp(min(eps0, 700.0))) * d0 <= delta:
            best = min(best, 2.0 * eps0)
    return best


def _mechanism_name(event):
    if isinstance(event, SelfComposedEvent):
        return _mechanism_name(event.event)
    if isinstance(event, PoissonSampledEvent):
        return "sampled-" + _mechanism_name(event.event)
    if isinstance(event, ComposedEvent):
        names = {_mechanism_name(e) for e in event.events}
        return names.pop() if len(names) == 1 else "composed"
    return {
        GaussianEvent: "gaussian",
        LaplaceEvent: "laplace",
        ExponentialEvent: "exponential",
        NoOpEvent: "none",
        NonPrivateEvent: "non-private",
    }.get(type(event), type(event).__name__)
