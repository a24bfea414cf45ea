"""Privacy accounting: compose events and convert them to (ε, δ).

One :class:`PrivacyAccountant` per fit composes every release into its ledger;
:meth:`PrivacyAccountant.get_epsilon` picks the tightest analysis: ``"exact-gdp"``
(:mod:`skdpp.privacy._gdp`), ``"pure"``, ``"rdp"`` (:mod:`skdpp.privacy._rdp`),
``"rdp-zero-out"``, ``"non-private"`` or ``"none"``, defined in :ref:`accounting`.
A Poisson-subsampled Gaussian with multiplier ``z`` is charged as the add/remove
sampled Gaussian with multiplier ``2 z`` against the neighbour where the replaced
user contributes zero; ``(ε0, δ0)`` against it gives ``(2 ε0, (1 + e^ε0) δ0)``
under replace-one-user (group privacy of 2).

Examples
--------
>>> from skdpp.privacy import GaussianEvent, PrivacyAccountant
>>> acc = PrivacyAccountant().compose(GaussianEvent(5.0), count=10, phase="iterations")
>>> acc.method, round(acc.get_epsilon(1e-5), 6)
('exact-gdp', 2.594383)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ._gdp import _check_delta, _check_nonneg, gaussian_delta, gaussian_epsilon, gaussian_mu
from ._rdp import (DEFAULT_RDP_ORDERS, _rdp_exponential, _rdp_laplace,
                   _rdp_poisson_gaussian, rdp_to_delta, rdp_to_epsilon)
from .events import (ComposedEvent, DpEvent, ExponentialEvent, GaussianEvent,
                     LaplaceEvent, NonPrivateEvent, NoOpEvent, PoissonSampledEvent,
                     SelfComposedEvent, ThresholdEvent)

__all__ = ["DEFAULT_RDP_ORDERS", "LedgerEntry", "PrivacyAccountant", "gaussian_delta",
           "gaussian_epsilon", "gaussian_mu", "rdp_to_epsilon", "rdp_to_delta"]


@dataclass(frozen=True)
class LedgerEntry:
    """One composed release (or block of ``count`` identical releases of ``event``).

    Attributes
    ----------
    phase : str
        The budget phase charged.
    event : DpEvent
    count : int
    mechanism, sensitivity, clip_norm : str, float, float or None
        For the report: mechanism name, stated sensitivity and the clip norm bounding it.
    """

    phase: str
    event: DpEvent
    count: int = 1
    mechanism: Optional[str] = None
    sensitivity: Optional[float] = None
    clip_norm: Optional[float] = None


def _noiseless(event):
    """A Gaussian/Laplace event without noise or an exponential one at ε = inf."""
    if isinstance(event, ExponentialEvent):
        return math.isinf(event.epsilon)
    return event.noise_multiplier == 0.0


def _flatten(event, count, out):
    """Append the (atom, multiplicity) pairs of ``event`` repeated ``count`` times."""
    if count == 0 or isinstance(event, NoOpEvent):
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
        if q == 1.0 or isinstance(inner, (NonPrivateEvent, LaplaceEvent,
                                          ExponentialEvent)):
            _flatten(inner, count, out)  # not subsampled, or pure-eps: no amplification
        elif isinstance(inner, GaussianEvent):
            out.append((NonPrivateEvent() if _noiseless(inner) else event, count))
        else:
            raise NotImplementedError(
                f"PoissonSampledEvent of {type(inner).__name__} is not supported; "
                "only a GaussianEvent (or a pure-eps event, without amplification) "
                "can be Poisson-subsampled. Compose per-release sampled events instead.")
    elif isinstance(event, (GaussianEvent, LaplaceEvent, ExponentialEvent)):
        out.append((NonPrivateEvent() if _noiseless(event) else event, count))
    elif isinstance(event, (NonPrivateEvent, ThresholdEvent)):
        out.append((event, count))
    else:
        raise TypeError(
            f"Unsupported privacy event {event!r}; expected one of the events in "
            "skdpp.privacy.events.")


class PrivacyAccountant:
    """Composes the privacy events of one fit and reports (ε, δ).

    Parameters
    ----------
    orders : array-like of float, default=None
        Rényi orders of the RDP path; ``None``: :data:`DEFAULT_RDP_ORDERS`.

    Attributes
    ----------
    ledger : tuple of LedgerEntry
        Every composed release, in order.
    method : str
        The analysis of :meth:`get_epsilon` (:ref:`accounting`).

    Notes
    -----
    The analyses and RDP curves are described in :ref:`accounting`.

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
    >>> from skdpp.privacy import GaussianEvent, PoissonSampledEvent, PrivacyAccountant
    >>> acc = PrivacyAccountant().compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)),
    ...                                   count=1000, phase="sgd")
    >>> acc.method, round(acc.get_epsilon(1e-5), 3)
    ('rdp-zero-out', 1.471)
    """

    def __init__(self, orders=None):
        orders = np.asarray(DEFAULT_RDP_ORDERS if orders is None else orders,
                            dtype=float).ravel()
        if orders.size == 0 or np.any(~(orders > 1.0)):
            raise ValueError("`orders` must be a non-empty array of Rényi orders > 1.")
        self._orders = orders.copy()
        self._ledger = []

    def compose(self, event, count=1, *, phase, mechanism=None, sensitivity=None,
                clip_norm=None):
        """Add ``count`` (>= 0) repetitions of ``event`` to the ledger in ``phase``;
        ``mechanism`` (inferred if None), ``sensitivity`` and ``clip_norm`` are for
        the report. Returns self."""
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

    def _atoms(self, thresholds=False):
        """(atom, multiplicity) of every release: the threshold events (accounted
        additively) if ``thresholds``, else all the others."""
        out = []
        for entry in self._ledger:
            _flatten(entry.event, entry.count, out)
        return [(a, c) for a, c in out if isinstance(a, ThresholdEvent) == thresholds]

    @property
    def threshold_delta(self):
        """float: total δ of the :class:`~skdpp.privacy.events.ThresholdEvent` s."""
        return float(sum(c * a.delta for a, c in self._atoms(thresholds=True)))

    def _threshold_epsilon(self):
        return float(sum(-c * math.log1p(-a.delta)
                         for a, c in self._atoms(thresholds=True)))

    @property
    def method(self):
        """str: the analysis used (:ref:`accounting`)."""
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
        """Composed RDP at each of :attr:`orders`; for ``"rdp-zero-out"`` it is against
        the zero-out neighbour (module docstring), *not* a replace-one-user RDP."""
        total = np.zeros_like(self._orders)
        cache = {}
        for a, c in self._atoms():
            if a not in cache:
                rdp_of = next(f for cls, f in _ATOM_RDP.items() if isinstance(a, cls))
                cache[a] = rdp_of(a, self._orders)
            total = total + c * cache[a]
        return total

    def get_epsilon(self, delta):
        """Smallest ε at δ in ``[0, 1]`` by the best available analysis (``inf`` with a
        :class:`NonPrivateEvent` or δ = 0 with Gaussians, ``0`` if empty)."""
        delta = _check_delta(delta)
        t_delta = self.threshold_delta
        if t_delta > 0.0 and delta <= t_delta:
            return math.inf
        # Threshold events: (eps' + log 1/(1 - d_t), delta' + d_t), see ThresholdEvent
        # (both terms are 0.0 without thresholds).
        return self._epsilon_without_thresholds(delta - t_delta) \
            + self._threshold_epsilon()

    def _epsilon_without_thresholds(self, delta):
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
        """Smallest δ at ε >= 0 by the best available analysis (``1`` with a
        :class:`NonPrivateEvent` at finite ε)."""
        rest = _check_nonneg(epsilon, "epsilon") - self._threshold_epsilon()
        if rest < 0.0:
            return 1.0
        return min(1.0, self._delta_without_thresholds(rest) + self.threshold_delta)

    def _delta_without_thresholds(self, epsilon):
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
    """Replace-one ε from RDP against the zero-out neighbour (group privacy of 2):
    ``min 2 ε0(δ0)`` over ``δ0`` with ``(1 + e^ε0(δ0)) δ0 <= delta``, on a log
    grid of ``δ0 / delta`` (every feasible point is valid; the grid only affects
    tightness)."""
    if delta <= 0.0:
        return math.inf
    best = math.inf
    for ratio in np.logspace(-8, 0, 321)[:-1]:
        d0 = delta * ratio
        eps0 = rdp_to_epsilon(orders, rdp, d0)
        if (1.0 + math.exp(min(eps0, 700.0))) * d0 <= delta:
            best = min(best, 2.0 * eps0)
    return best


# The RDP curve of each atom of ``_flatten`` at an array of orders.
_ATOM_RDP = {
    NonPrivateEvent: lambda a, orders: np.full_like(orders, np.inf),
    GaussianEvent: lambda a, orders: orders / (2.0 * a.noise_multiplier ** 2),
    # Zero-out sensitivity C = half the replace-one sensitivity 2C.
    PoissonSampledEvent: lambda a, orders: _rdp_poisson_gaussian(
        a.sampling_probability, 2.0 * a.event.noise_multiplier, orders),
    LaplaceEvent: lambda a, orders: _rdp_laplace(a.noise_multiplier, orders),
    ExponentialEvent: lambda a, orders: _rdp_exponential(a.epsilon, orders),
}


def _mechanism_name(event):
    if isinstance(event, SelfComposedEvent):
        return _mechanism_name(event.event)
    if isinstance(event, PoissonSampledEvent):
        return "sampled-" + _mechanism_name(event.event)
    if isinstance(event, ComposedEvent):
        names = {_mechanism_name(e) for e in event.events}
        return names.pop() if len(names) == 1 else "composed"
    return {GaussianEvent: "gaussian", LaplaceEvent: "laplace", ExponentialEvent: "exponential",
            NoOpEvent: "none", NonPrivateEvent: "non-private",
            ThresholdEvent: "threshold"}.get(type(event), type(event).__name__)
