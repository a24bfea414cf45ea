"""Privacy events: immutable descriptions of differentially private releases.

Every noisy release is described by a frozen, validated :class:`DpEvent`
composed into the fit's :class:`~skdpp.privacy.accounting.PrivacyAccountant`
(:ref:`accounting`); the vocabulary follows dp-accounting, which skdpp does not
depend on.

References
----------
.. [1] Mironov, I. (2017). Rényi Differential Privacy. arXiv:1702.07476.
.. [2] Balle, B. and Wang, Y.-X. (2018). arXiv:1805.06530.

Examples
--------
>>> from skdpp.privacy.events import GaussianEvent, SelfComposedEvent
>>> SelfComposedEvent(GaussianEvent(2.0), count=5)
SelfComposedEvent(event=GaussianEvent(noise_multiplier=2.0), count=5)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["DpEvent", "GaussianEvent", "LaplaceEvent", "ExponentialEvent",
           "SelfComposedEvent", "ComposedEvent", "PoissonSampledEvent", "NoOpEvent",
           "NonPrivateEvent", "ThresholdEvent"]


def _check_real(name, value, *, cls, low, high=math.inf, low_inclusive=True,
                high_inclusive=False, remedy=""):
    """``float(value)``, checked real (not bool) and in the range (``cls``: prefix)."""
    where = f"{cls}: " if cls else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{where}`{name}` must be a real number, got {value!r} "
            f"(type {type(value).__name__}).")
    value = float(value)
    if not ((value >= low if low_inclusive else value > low)
            and (value <= high if high_inclusive else value < high)):
        raise ValueError(
            f"{where}`{name}` must be in {'[(' [not low_inclusive]}{low}, {high}"
            f"{'])' [not high_inclusive]}, got {value!r}." + (f" {remedy}" if remedy else ""))
    return value


def _check_event(cls, name, event):
    if not isinstance(event, DpEvent):
        raise TypeError(f"{cls}: `{name}` must be a DpEvent, got {event!r}.")


def _check_multiplier(event):
    object.__setattr__(event, "noise_multiplier", _check_real(
        "noise_multiplier", event.noise_multiplier, cls=type(event).__name__, low=0.0,
        remedy="Use noise_multiplier=0 only for a non-private release."))


class DpEvent:
    """Base class of all privacy events (an event only *describes* a release)."""

    __slots__ = ()


@dataclass(frozen=True)
class NoOpEvent(DpEvent):
    """An event that touches no private data and releases nothing."""


@dataclass(frozen=True)
class NonPrivateEvent(DpEvent):
    """A release made without privacy noise (``epsilon=np.inf``): ε = inf."""


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """Gaussian mechanism: noise std = ``noise_multiplier`` × L2 sensitivity.

    Parameters
    ----------
    noise_multiplier : float
        z in ``[0, inf)`` (``0``: no noise, non-private); a release is ``1/z``-GDP
        (Dong, Roth & Su 2019) and ``α/(2z²)``-RDP at every order α (Mironov 2017).
    """

    noise_multiplier: float
    __post_init__ = _check_multiplier


@dataclass(frozen=True)
class LaplaceEvent(DpEvent):
    """Laplace mechanism: scale = ``noise_multiplier`` × L1 sensitivity.

    Parameters
    ----------
    noise_multiplier : float
        z in ``[0, inf)`` (``0``: no noise); a release is pure ``1/z``-DP.
    """

    noise_multiplier: float
    __post_init__ = _check_multiplier


@dataclass(frozen=True)
class ExponentialEvent(DpEvent):
    """Exponential mechanism with privacy parameter ``epsilon``.

    Parameters
    ----------
    epsilon : float
        In ``(0, inf]`` (``inf``: non-private argmax); ε-DP and ε-bounded-range, hence
        ε²/8-zCDP (Cesar & Rogers 2021, arXiv:2004.07223).
    """

    epsilon: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", _check_real(
            "epsilon", self.epsilon, cls="ExponentialEvent", low=0.0,
            low_inclusive=False, high_inclusive=True,
            remedy="Use epsilon=np.inf for a non-private argmax."))


@dataclass(frozen=True)
class SelfComposedEvent(DpEvent):
    """``count`` (an int >= 0) adaptive repetitions of the same ``event``."""

    event: DpEvent
    count: int

    def __post_init__(self):
        _check_event("SelfComposedEvent", "event", self.event)
        if isinstance(self.count, bool) or not isinstance(self.count, numbers.Integral):
            raise TypeError(
                f"SelfComposedEvent: `count` must be an int, got {self.count!r}.")
        if self.count < 0:
            raise ValueError(
                f"SelfComposedEvent: `count` must be >= 0, got {self.count}.")
        object.__setattr__(self, "count", int(self.count))


@dataclass(frozen=True)
class ComposedEvent(DpEvent):
    """Adaptive composition of several ``events`` (in order; a list becomes a tuple)."""

    events: tuple

    def __post_init__(self):
        events = tuple(self.events)
        for i, event in enumerate(events):
            _check_event("ComposedEvent", f"events[{i}]", event)
        object.__setattr__(self, "events", events)


@dataclass(frozen=True)
class PoissonSampledEvent(DpEvent):
    """``event`` on a Poisson subsample (each unit kept w.p. ``sampling_probability``).
    As in dp-accounting, a sampled Gaussian's noise multiplier is relative to the
    add/remove sensitivity (:mod:`skdpp.privacy.accounting` explains the charge)."""

    sampling_probability: float
    event: DpEvent

    def __post_init__(self):
        object.__setattr__(self, "sampling_probability", _check_real(
            "sampling_probability", self.sampling_probability,
            cls="PoissonSampledEvent", low=0.0, high=1.0, high_inclusive=True))
        _check_event("PoissonSampledEvent", "event", self.event)


@dataclass(frozen=True)
class ThresholdEvent(DpEvent):
    """Partitions held by one user only pass a noisy threshold w.p. at most ``delta``.

    The second half of a private partition selection: noisy counts of partitions
    present in both neighbouring datasets are an ordinary Gaussian release; those
    unique to the replaced user are published w.p. at most ``delta`` in ``[0, 1)``,
    independently of the fit's other random choices. If the rest is ``(ε, δ')``-DP
    the fit is ``(ε + log(1/(1 - delta)), δ' + delta)``-DP (proof in
    :ref:`partition_selection`; Gopi et al. 2020, arXiv:2002.09745; Desfontaines et
    al. 2022, arXiv:2006.03684).
    """

    delta: float

    def __post_init__(self):
        object.__setattr__(self, "delta", _check_real(
            "delta", self.delta, cls="ThresholdEvent", low=0.0, high=1.0))
