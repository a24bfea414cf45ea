"""Calibrate noise to a target (ε, δ) over a named budget plan.

:func:`calibrate` gives every :class:`Phase` the noise multiplier of each release
(Gaussian, Laplace) or the per-selection ε (exponential) by the share rule of
:ref:`calibration`: the planned events compose to exactly the target ε at δ,
never more.

References
----------
.. [1] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530.
.. [2] Dong, J., Roth, A. and Su, W. (2019). arXiv:1905.02383.
.. [3] Cesar, M. and Rogers, R. (2021). arXiv:2004.07223.
.. [4] Mironov, I., Talwar, K. and Zhang, L. (2019). arXiv:1908.10530.

Examples
--------
>>> from skdpp.privacy.calibration import Phase, calibrate
>>> round(calibrate([Phase("iterations", 1.0, "gaussian", count=5)],
...                 epsilon=1.0, delta=1e-6)["iterations"], 6)
9.446669
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from scipy import optimize

from .accounting import PrivacyAccountant
from .events import (ComposedEvent, ExponentialEvent, GaussianEvent, LaplaceEvent,
                     NonPrivateEvent, PoissonSampledEvent, SelfComposedEvent,
                     ThresholdEvent)

__all__ = ["Phase", "calibrate", "params_for_rho", "plan_events"]

# Per mechanism, ``count`` releases spend zCDP ``rho``: Gaussian 1/(2z²) each,
# Laplace ε²/2 (ε = 1/b), exponential ε²/8 (bounded range). The pair maps
# (rho, count) -> per-release parameter, and (parameter, count) -> rho.
_ZCDP = {"gaussian": (lambda rho, count: math.sqrt(count / (2.0 * rho)),
                      lambda z, count: count / (2.0 * z * z)),
         "laplace": (lambda rho, count: 1.0 / math.sqrt(2.0 * rho / count),
                     lambda b, count: count / (2.0 * b * b)),
         "exponential": (lambda rho, count: math.sqrt(8.0 * rho / count),
                         lambda eps, count: count * eps * eps / 8.0)}
_MECHANISMS = tuple(_ZCDP)


def _is_real(value, ok):
    """``value`` is a real number (not a bool) with ``ok(float(value))``."""
    return (not isinstance(value, bool) and isinstance(value, numbers.Real)
            and ok(float(value)))


@dataclass(frozen=True)
class Phase:
    """One named phase of a privacy budget plan.

    Parameters
    ----------
    name : str
        Phase name, e.g. ``"init"``, ``"iterations"``, ``"cold_start"``.
    share : float
        Fraction (> 0) of the zCDP budget ρ (a plan's shares are normalised).
    mechanism : {"gaussian", "laplace", "exponential"}
        Mechanism of every release in the phase.
    count : int, default=1
        Number of (adaptively composed) releases in the phase.
    sampling_rate : float, default=1.0
        Poisson sampling rate in ``(0, 1]`` of each release (Gaussian only).
    threshold_delta : float, default=0.0
        δ of a partition-selection threshold per release (Gaussian only,
        :ref:`partition_selection`), subtracted from the plan's δ first.

    Examples
    --------
    >>> from skdpp.privacy.calibration import Phase
    >>> Phase("counts", 0.1, "laplace").count
    1
    """

    name: str
    share: float
    mechanism: str
    count: int = 1
    sampling_rate: float = 1.0
    threshold_delta: float = 0.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Phase: `name` must be a non-empty str, got {self.name!r}.")
        for attr, kind, ok, what in (
                ("share", numbers.Real, lambda v: 0.0 < v < math.inf, "a finite number > 0"),
                ("count", numbers.Integral, lambda v: v >= 1, "an int >= 1"),
                ("sampling_rate", numbers.Real, lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
                ("threshold_delta", numbers.Real, lambda v: 0.0 <= v < 1.0, "in [0, 1)")):
            value = getattr(self, attr)
            if not (isinstance(value, kind) and _is_real(value, ok)):
                raise ValueError(
                    f"Phase {self.name!r}: `{attr}` must be {what}, got {value!r}."
                    + (" Drop the phase instead of giving it share 0."
                       if attr == "share" else ""))
            object.__setattr__(self, attr, int(value) if attr == "count" else float(value))
        if self.mechanism not in _MECHANISMS:
            raise ValueError(f"Phase {self.name!r}: `mechanism` must be one of "
                             f"{_MECHANISMS}, got {self.mechanism!r}.")
        for attr, neutral in (("threshold_delta", 0.0), ("sampling_rate", 1.0)):
            if getattr(self, attr) != neutral and self.mechanism != "gaussian":
                raise ValueError(
                    f"Phase {self.name!r}: `{attr}`={getattr(self, attr)!r} needs the "
                    f"gaussian mechanism, got mechanism={self.mechanism!r}. Use "
                    f"{attr}={neutral}.")


def _check_phases(phases):
    phases = tuple(phases)
    if not phases:
        raise ValueError("`phases` must contain at least one Phase.")
    for p in phases:
        if not isinstance(p, Phase):
            raise TypeError(f"`phases` must contain Phase objects, got {p!r}.")
    names = [p.name for p in phases]
    if len(set(names)) != len(names):
        raise ValueError(f"Phase names must be unique, got {names}.")
    return phases


def _non_private(phases):
    return {p.name: (math.inf if p.mechanism == "exponential" else 0.0) for p in phases}


def _params_for_scale(phases, scale):
    total = sum(p.share for p in phases)
    return {p.name: _ZCDP[p.mechanism][0](p.share / total * scale, p.count)
            for p in phases}


def plan_events(phases, params):
    """The composed event of a calibrated plan.

    Parameters
    ----------
    phases : sequence of Phase
    params : dict of str to float
        Per phase, the noise multiplier or per-selection ε (e.g. from :func:`calibrate`).

    Returns
    -------
    event : ComposedEvent
        One ``SelfComposedEvent(base, count)`` per phase, in order; a noise multiplier
        of 0 or an infinite ε gives a :class:`NonPrivateEvent`.

    Examples
    --------
    >>> from skdpp.privacy.calibration import Phase, plan_events
    >>> plan_events([Phase("a", 1.0, "gaussian", count=2)], {"a": 3.0})
    ComposedEvent(events=(SelfComposedEvent(event=GaussianEvent(noise_multiplier=3.0), count=2),))
    """
    phases = _check_phases(phases)
    events = []
    for p in phases:
        if p.name not in params:
            raise KeyError(f"`params` has no entry for phase {p.name!r}.")
        value = float(params[p.name])
        if p.mechanism == "exponential":
            base = NonPrivateEvent() if math.isinf(value) else ExponentialEvent(value)
        elif value == 0.0:
            base = NonPrivateEvent()
        elif p.mechanism == "gaussian":
            base = GaussianEvent(value)
            if p.sampling_rate < 1.0:
                base = PoissonSampledEvent(p.sampling_rate, base)
        else:
            base = LaplaceEvent(value)
        if p.threshold_delta > 0.0:
            base = ComposedEvent((base, ThresholdEvent(p.threshold_delta)))
        events.append(SelfComposedEvent(base, p.count))
    return ComposedEvent(tuple(events))


def _epsilon_of(phases, params, delta):
    acc = PrivacyAccountant()
    acc.compose(plan_events(phases, params), phase="plan")
    return acc.get_epsilon(delta)


def calibrate(phases, *, epsilon, delta):
    """Noise parameters of every phase so that the whole plan is (ε, δ)-DP.

    Parameters
    ----------
    phases : sequence of Phase
        The budget plan (unique names).
    epsilon : float
        Target ε in ``(0, inf]``; ``np.inf``: noise multipliers 0, per-selection ε inf.
    delta : float
        Target δ in ``[0, 1)``; ``0`` needs every phase pure-ε (laplace, exponential).

    Returns
    -------
    params : dict of str to float
        Per phase, the noise multiplier z (gaussian, laplace) or per-selection ε
        (exponential): a fresh accountant of :func:`plan_events` gives ``ε(δ) <=
        epsilon``, equal up to ~1e-10 relative.

    Raises
    ------
    ValueError
        For invalid arguments or infeasible targets.

    Examples
    --------
    >>> from skdpp.privacy.calibration import Phase, calibrate
    >>> params = calibrate([Phase("init", 0.2, "gaussian"),
    ...                     Phase("iterations", 0.8, "gaussian", count=10)],
    ...                    epsilon=2.0, delta=1e-6)
    >>> sorted(params), params["iterations"] > params["init"]
    (['init', 'iterations'], True)
    """
    phases = _check_phases(phases)
    if not _is_real(epsilon, lambda v: v > 0.0):
        raise ValueError(
            f"`epsilon` must be in (0, inf], got {epsilon!r}. Use np.inf for the "
            "non-private baseline.")
    if not _is_real(delta, lambda v: 0.0 <= v < 1.0):
        raise ValueError(f"`delta` must be in [0, 1), got {delta!r}; e.g. delta=1e-6.")
    epsilon, delta = float(epsilon), float(delta)
    if math.isinf(epsilon):
        return _non_private(phases)
    threshold = sum(p.count * p.threshold_delta for p in phases)
    if threshold > 0.0 and not threshold < delta:
        raise ValueError(
            f"The partition-selection thresholds use delta={threshold:g}, not less than the "
            f"target delta={delta:g}; lower their threshold_delta or raise delta.")
    gaussian = [p.name for p in phases if p.mechanism == "gaussian"]
    if delta == 0.0 and gaussian:
        raise ValueError(
            f"delta=0 is infeasible with Gaussian phases {gaussian}: use delta>0 or a "
            "pure-ε mechanism (laplace/exponential) for every phase.")

    def f(log_s):
        # epsilon(s) can be exactly 0 at a large delta: log(0) = -inf then.
        spent = _epsilon_of(phases, _params_for_scale(phases, math.exp(log_s)), delta)
        return (math.log(spent) if spent > 0.0 else -math.inf) - math.log(epsilon)

    def bracket(log_s, step):
        """The first ``log_s + k step`` (k < 200) where ``f`` has the sign of ``step``
        (epsilon(s) -> 0 as s -> 0, so only an upper end can be missing)."""
        for _ in range(200):
            if f(log_s) * step > 0.0:
                return log_s
            log_s += step
        raise ValueError(
            f"epsilon={epsilon} at delta={delta} cannot be reached by this plan; "
            "increase delta or epsilon.")

    # zCDP heuristic: rho ~ eps^2 / (4 log(1/delta)) or eps^2/2 for pure.
    guess = epsilon ** 2 / (4.0 * math.log(1.0 / delta)) if delta > 0 else epsilon ** 2 / 2
    start = math.log(max(guess, 1e-300))
    log_s = largest_root_below(
        f, bracket(start, -2.0), bracket(start, 2.0), xtol=1e-13, rtol=1e-14,
        exceeds=lambda log_s: _epsilon_of(
            phases, _params_for_scale(phases, math.exp(log_s)), delta) > epsilon)
    return _params_for_scale(phases, math.exp(log_s))


def largest_root_below(f, lo, hi, *, xtol=1e-14, rtol=1e-13, exceeds=None):
    """The root of an increasing ``f`` on ``[lo, hi]`` (``brentq``, ``xtol``/``rtol``),
    stepped down (1e-12, doubling) while ``exceeds(x)`` (default ``f(x) > 0``): never
    above the target."""
    x = optimize.brentq(f, lo, hi, xtol=xtol, rtol=rtol, maxiter=500)
    exceeds = exceeds or (lambda x: f(x) > 0.0)
    step = 1e-12
    while exceeds(x):
        x -= step
        step *= 2.0
    return x


def params_for_rho(phases, rho):
    """Noise parameters at which a plan spends exactly a zCDP budget ``rho`` (``> 0``;
    ``inf``: non-private): the share rule at global scale ``rho`` (private search).

    Examples
    --------
    >>> from skdpp.privacy.calibration import Phase, params_for_rho
    >>> params = params_for_rho([Phase("iterations", 1.0, "gaussian", count=5)], rho=0.1)
    >>> round(params["iterations"], 6)   # 5 releases: 5 / (2 z^2) = 0.1
    5.0
    """
    phases = _check_phases(phases)
    if not _is_real(rho, lambda v: v > 0.0):
        raise ValueError(f"`rho` must be in (0, inf], got {rho!r}.")
    if math.isinf(float(rho)):
        return _non_private(phases)
    return _params_for_scale(phases, float(rho))

