"""Differential-privacy layer of skdpp: events, accounting, calibration,
mechanisms and the privacy report.

This subpackage knows nothing about estimators. Privacy noise is drawn only in
:mod:`skdpp.privacy.mechanisms`; every release is described by an event from
:mod:`skdpp.privacy.events`, composed into a
:class:`~skdpp.privacy.accounting.PrivacyAccountant`, and summarised by a
:class:`~skdpp.privacy.report.PrivacyReport`.
"""

from .accounting import (
    DEFAULT_RDP_ORDERS,
    LedgerEntry,
    PrivacyAccountant,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
)
from .calibration import Phase, calibrate, plan_events
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
from .mechanisms import (
    clip_by_norm,
    exponential_mechanism,
    exponential_mechanism_probabilities,
    gaussian_mechanism,
    gaussian_sum,
    laplace_mechanism,
    noisy_counts,
)
from .report import PhaseReport, PrivacyReport

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "ComposedEvent",
    "DpEvent",
    "ExponentialEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "LedgerEntry",
    "NoOpEvent",
    "NonPrivateEvent",
    "PoissonSampledEvent",
    "PrivacyAccountant",
    "SelfComposedEvent",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "Phase",
    "calibrate",
    "plan_events",
    "clip_by_norm",
    "exponential_mechanism",
    "exponential_mechanism_probabilities",
    "gaussian_mechanism",
    "gaussian_sum",
    "laplace_mechanism",
    "noisy_counts",
    "PhaseReport",
    "PrivacyReport",
]
