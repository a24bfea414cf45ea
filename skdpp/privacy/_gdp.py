"""Gaussian differential privacy: the exact (ε, δ) curve of μ-GDP.

A composition of Gaussian mechanisms with multipliers ``z_j`` is exactly μ-GDP,
``μ = sqrt(Σ 1/z_j²)``, with ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``
(evaluated in log space): the ``"exact-gdp"`` path of
:class:`~skdpp.privacy.accounting.PrivacyAccountant` (:ref:`accounting`).

References
----------
.. [1] Balle, B. and Wang, Y.-X. (2018). Improving the Gaussian Mechanism for
       Differential Privacy: Analytical Calibration and Optimal Denoising.
       arXiv:1805.06530.
.. [2] Dong, J., Roth, A. and Su, W. (2019). Gaussian Differential Privacy.
       arXiv:1905.02383.
"""

import math

import numpy as np
from scipy import optimize, special

__all__ = ["gaussian_delta", "gaussian_epsilon", "gaussian_mu"]

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


def _check_nonneg(value, name="mu"):
    value = float(value)
    if not value >= 0.0:
        raise ValueError(f"`{name}` must be in [0, inf], got {value!r}.")
    return value


def _check_delta(delta):
    delta = float(delta)
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"`delta` must be in [0, 1], got {delta!r}. Use e.g. delta=1e-6.")
    return delta


def gaussian_delta(mu, epsilon):
    """δ(ε) of a μ-GDP mechanism (exact; Balle & Wang 2018, Theorem 8; Dong, Roth &
    Su 2019, Corollary 2.13).

    Parameters
    ----------
    mu : float
        μ >= 0 (multiplier z: ``1/z``-GDP; compositions add μ²).
    epsilon : float
        Target ε >= 0.

    Returns
    -------
    delta : float
        ``Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_delta
    >>> round(gaussian_delta(1.0, 1.0), 6)
    0.126937
    """
    mu, epsilon = _check_nonneg(mu), _check_nonneg(epsilon, "epsilon")
    return math.exp(_log_gaussian_delta(mu, epsilon))


def gaussian_epsilon(mu, delta):
    """Smallest ε such that a μ-GDP mechanism is (ε, δ)-DP (exact).

    Parameters
    ----------
    mu : float
        μ >= 0.
    delta : float
        Target δ in ``[0, 1]``.

    Returns
    -------
    epsilon : float
        Root of ``gaussian_delta(mu, epsilon) = delta`` (``brentq`` on log ε, ~1e-13
        relative); ``inf`` when ``delta = 0`` and ``mu > 0``.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_epsilon
    >>> round(gaussian_epsilon(1.0, 1e-5), 6)
    4.377178
    """
    mu, delta = _check_nonneg(mu), _check_delta(delta)
    if mu == 0.0:
        return 0.0
    if math.isinf(mu) or delta == 0.0:
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
        Root of ``gaussian_delta(mu, epsilon) = delta``.

    Examples
    --------
    >>> from skdpp.privacy import gaussian_mu
    >>> round(1 / gaussian_mu(1.0, 1e-5) * 10 ** 0.5, 4)   # sigma for 10 releases
    11.7973
    """
    epsilon, delta = _check_nonneg(epsilon, "epsilon"), _check_delta(delta)
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
