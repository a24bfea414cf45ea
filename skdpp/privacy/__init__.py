"""Differential-privacy layer of skdpp (knows nothing about estimators).

A fit plans its budget as a :class:`BudgetPlan` and makes every release through
a :class:`Releaser`, which calls :mod:`skdpp.privacy.mechanisms` (the only place
noise is drawn) and composes the event into the fit's :class:`PrivacyAccountant`
with the same sensitivity; :class:`PrivacyReport` is built from that ledger.
See :ref:`privacy_model` and :ref:`privacy_report`.
"""

from ._composed import PipelinePrivacyReport, StepReport, privacy_report, split_budget
from ._clipping import (MIN_CLIP, clip_by_norm, clip_factors, clip_values,
                        clipped_magnitudes, row_norms, stack_norms, unit_rows)
from ._plan import BudgetPlan
from ._release import Releaser
from .accounting import (DEFAULT_RDP_ORDERS, LedgerEntry, PrivacyAccountant,
                         gaussian_delta, gaussian_epsilon, gaussian_mu)
from .calibration import Phase, calibrate, plan_events
from .events import (ComposedEvent, DpEvent, ExponentialEvent, GaussianEvent,
                     LaplaceEvent, NonPrivateEvent, NoOpEvent, PoissonSampledEvent,
                     SelfComposedEvent, ThresholdEvent)
from .mechanisms import (exponential_mechanism, exponential_mechanism_probabilities,
                         gaussian_mechanism, gaussian_sum, laplace_mechanism,
                         noisy_counts, poisson_sample)
from .report import PhaseReport, PrivacyReport

__all__ = ["DEFAULT_RDP_ORDERS", "MIN_CLIP", "BudgetPlan", "Releaser", "clip_factors",
           "clip_values", "clipped_magnitudes", "row_norms", "stack_norms", "unit_rows",
           "poisson_sample", "ComposedEvent", "DpEvent", "ExponentialEvent",
           "GaussianEvent", "LaplaceEvent", "LedgerEntry", "NoOpEvent",
           "NonPrivateEvent", "PoissonSampledEvent", "PrivacyAccountant",
           "SelfComposedEvent", "ThresholdEvent", "gaussian_delta", "gaussian_epsilon",
           "gaussian_mu", "Phase", "calibrate", "plan_events", "clip_by_norm",
           "exponential_mechanism", "exponential_mechanism_probabilities",
           "gaussian_mechanism", "gaussian_sum", "laplace_mechanism", "noisy_counts",
           "PhaseReport", "PrivacyReport", "PipelinePrivacyReport", "StepReport",
           "privacy_report", "split_budget"]
