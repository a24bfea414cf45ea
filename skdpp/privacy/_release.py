"""The release helper: every DP release of a fit, in one call each.

:class:`Releaser` binds a fit's calibrated :class:`~skdpp.privacy.BudgetPlan`,
its noise generator and its :class:`~skdpp.privacy.PrivacyAccountant`: each
method calls a mechanism of :mod:`skdpp.privacy.mechanisms` and composes its
event with the *same* sensitivity and clip norm, so the two never disagree
(estimators never call a mechanism or ``accountant.compose`` themselves).

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy import BudgetPlan, Releaser
>>> plan = BudgetPlan(epsilon=1.0, delta=1e-6)
>>> plan.add_rest("mean")
>>> release = Releaser(plan.calibrate(), np.random.default_rng(0))
>>> total = release.gaussian_sum("mean", np.array([[0.5], [3.0], [-0.2]]), clip_norm=1.0)
>>> report = release.report(n_users=3, released=("mean_",), local=())
>>> report.accountant, report.phases[0].sensitivity
('exact-gdp', 2.0)
"""

import math

import numpy as np

from . import mechanisms
from ._clipping import clip_by_norm
from .accounting import PrivacyAccountant
from .events import NonPrivateEvent, NoOpEvent, PoissonSampledEvent, ThresholdEvent
from .report import PrivacyReport

__all__ = ["Releaser", "THRESHOLD_DELTA_FRACTION"]

#: Share of ``delta`` an estimator reserves for the threshold of
#: :meth:`Releaser.select_partitions`.
THRESHOLD_DELTA_FRACTION = 0.25


class Releaser:
    """Releases values under the plan and records each release in the ledger.

    Parameters
    ----------
    plan : BudgetPlan
        The calibrated budget plan of the fit.
    rng : numpy.random.Generator
        The fit's noise stream (:attr:`skdpp.utils._random.FitRandomness.noise`).
    seeded : bool, default=False
        ``rng`` is seeded from a user-supplied ``random_state``: the report says so.

    Attributes
    ----------
    accountant : PrivacyAccountant
        The fit's ledger: one entry per release.
    """

    def __init__(self, plan, rng, *, seeded=False):
        self.plan = plan.calibrate()
        self.rng = rng
        self.seeded = bool(seeded)
        self.accountant = PrivacyAccountant()
        self._branch0 = {}    # phase -> events of branch 0, in order
        self._branch_pos = {}  # (phase, branch) -> number of releases seen

    def noise_multiplier(self, phase):
        """The noise multiplier (or per-selection ε) the plan gives ``phase``."""
        return self.plan[phase]

    def noise_std(self, phase, sensitivity):
        """Standard deviation of the Gaussian noise of a release (public)."""
        return 0.0 if sensitivity is None else float(self.plan[phase]) * float(sensitivity)

    def _checked(self, phase, sensitivity):
        """``(z, sensitivity)``; a missing (no clipping) or overflowing sensitivity is
        None, allowed only where the plan adds no noise (``epsilon=inf``)."""
        z = float(self.plan[phase])
        if sensitivity is not None and math.isfinite(float(sensitivity)):
            return z, float(sensitivity)
        if z != 0.0:
            raise ValueError(
                f"Release in phase {phase!r} has sensitivity {sensitivity!r} (None: no "
                "clipping; inf: the clip bounds overflow floating point) but the plan adds "
                "noise: pass finite, smaller clip bounds, or use epsilon=np.inf.")
        return z, None

    def _compose(self, phase, event, *, mechanism, sensitivity, clip_norm, count=1,
                 branch=None):
        clip = None if clip_norm is None else float(clip_norm)
        if branch:  # a later branch of a parallel composition: checked, not charged
            pos = self._branch_pos.get((phase, branch), 0)
            reference = self._branch0.get(phase, [])
            if pos >= len(reference) or reference[pos] != (event, sensitivity, count):
                raise RuntimeError(
                    f"Branch {branch} of phase {phase!r} makes a release that branch 0 did "
                    "not make: parallel composition needs every branch to repeat branch "
                    "0's releases (mechanism, noise and sensitivity).")
            self._branch_pos[(phase, branch)] = pos + 1
            self.accountant.compose(NoOpEvent(), phase=phase,
                                    mechanism=f"{mechanism} (parallel)",
                                    sensitivity=sensitivity, clip_norm=clip)
            return
        if branch == 0:
            self._branch0.setdefault(phase, []).append((event, sensitivity, count))
        self.accountant.compose(event, count, phase=phase, mechanism=mechanism,
                                sensitivity=sensitivity, clip_norm=clip)

    def gaussian(self, phase, value, *, sensitivity, clip_norm=None, symmetric=False,
                 sampling_rate=1.0, branch=None):
        """Gaussian mechanism: ``value + N(0, (z Δ)²)`` with ``z`` from the plan.

        Parameters
        ----------
        phase : str
        value : array-like
            The exact value (not modified).
        sensitivity : float or None
            L2 sensitivity Δ under replace-one-user (``None``: only with ``epsilon=inf``).
        clip_norm : float, default=None
            The clip norm that bounds Δ (for the report).
        symmetric : bool, default=False
            ``value`` is a stack of symmetric matrices; the noise is symmetric.
        sampling_rate : float, default=1.0
            Poisson rate of the users in ``value``; ``< 1`` charges a sampled Gaussian.
        branch : int, default=None
            Parallel composition over disjoint sets of users: branch 0 is charged, every
            other branch must repeat its releases (same event and sensitivity) and is
            recorded at no cost (``"gaussian (parallel)"``). The caller must justify
            disjointness under replace-one-user (a replacing user with another id may
            fall in another branch: two branches then each see one user added or
            removed, which must cost no more than the replacement charged for branch 0).

        Returns
        -------
        release : ndarray
        """
        release, event, sens = self._additive(mechanisms.gaussian_mechanism, phase, value,
                                              sensitivity, symmetric=symmetric)
        if sampling_rate < 1.0 and not isinstance(event, NonPrivateEvent):
            event = PoissonSampledEvent(float(sampling_rate), event)
        self._compose(phase, event, mechanism="gaussian", sensitivity=sens,
                      clip_norm=clip_norm, branch=branch)
        return release

    def gaussian_sum(self, phase, contributions, *, clip_norm, symmetric=False):
        """Gaussian sum of per-user contributions (n_users, ...) clipped to Frobenius norm
        ``clip_norm`` (``None``: only at ``epsilon=inf``): sensitivity ``2 clip_norm``."""
        clipped = clip_by_norm(contributions, clip_norm)
        sens = None if clip_norm is None else 2.0 * float(clip_norm)
        return self.gaussian(phase, clipped.sum(axis=0), sensitivity=sens,
                             clip_norm=clip_norm, symmetric=symmetric)

    def laplace(self, phase, value, *, sensitivity, clip_norm=None):
        """Laplace mechanism with scale ``z Δ₁`` (``Δ₁`` the L1 sensitivity)."""
        release, event, sens = self._additive(mechanisms.laplace_mechanism, phase, value,
                                              sensitivity)
        self._compose(phase, event, mechanism="laplace", sensitivity=sens,
                      clip_norm=clip_norm)
        return release

    def _additive(self, mechanism, phase, value, sensitivity, **kwargs):
        """``(release, event, sensitivity)`` of ``mechanism`` (Gaussian or Laplace) at
        the plan's z; no noise where the sensitivity is None (``epsilon=inf``)."""
        z, sens = self._checked(phase, sensitivity)
        if sens is not None:
            return (*mechanism(value, sensitivity=sens, noise_multiplier=z, rng=self.rng,
                               **kwargs), sens)
        value = np.array(value, dtype=float, copy=True)
        if kwargs.get("symmetric"):
            value = mechanisms._mirror_upper(value)
        return value, NonPrivateEvent(), None

    def exponential(self, phase, scores, *, sensitivity):
        """Exponential mechanism: an index chosen with ``P ∝ exp(ε s / (2Δ))``,
        ``ε`` the plan's per-selection ε of ``phase`` (``inf``: argmax)."""
        epsilon = float(self.plan[phase])
        index, event = mechanisms.exponential_mechanism(
            scores, sensitivity=float(sensitivity), epsilon=epsilon, rng=self.rng)
        self._compose(phase, event, mechanism="exponential",
                      sensitivity=float(sensitivity), clip_norm=None)
        return index

    def select_partitions(self, phase, counts, *, sensitivity, max_contribution,
                          max_partitions, clip_norm=None):
        """Private partition selection: noisy counts, kept where above a threshold.

        For partitions (items, labels) whose universe is not public
        (:ref:`partition_selection`): each user contributes at most
        ``max_contribution`` to each of at most ``max_partitions`` partitions, with L2
        sensitivity ``sensitivity``. ``counts`` (n_partitions,): the exact counts of the
        present partitions; each gets noise of std ``σ = z · sensitivity`` and is kept
        iff above ``max_contribution + σ Φ⁻¹(1 - δ_t / max_partitions)``, ``δ_t`` the
        ``threshold_delta`` of ``phase`` (a Gaussian phase). Returns ``keep`` (all
        present at ``epsilon=inf``) and the noisy counts (published only where ``keep``).

        References
        ----------
        .. [1] Gopi, S. et al. (2020). Differentially Private Set Union. arXiv:2002.09745.
        .. [2] Desfontaines, D. et al. (2022). Differentially private partition
               selection. arXiv:2006.03684.
        """
        delta_t = next((p.threshold_delta for p in self.plan.phases if p.name == phase), 0.0)
        z, sens = self._checked(phase, sensitivity)
        counts = np.asarray(counts, dtype=float)
        if sens is None or z == 0.0:
            # epsilon=inf: every present partition is kept, counts are exact.
            self._compose(phase, NonPrivateEvent(), mechanism="gaussian",
                          sensitivity=sens, clip_norm=clip_norm)
            return counts > 0, counts.copy()
        if not delta_t > 0.0:
            raise ValueError(
                f"Phase {phase!r} selects partitions but reserves no threshold delta: add "
                "it to the plan with threshold_delta > 0.")
        sigma = z * sens
        threshold = float(max_contribution) + mechanisms.gaussian_threshold(
            sigma, delta_t / int(max_partitions), sensitivity=sens, size=counts.size)
        noisy, event = mechanisms.gaussian_mechanism(
            counts, sensitivity=sens, noise_multiplier=z, rng=self.rng)
        self._compose(phase, event, mechanism="gaussian", sensitivity=sens,
                      clip_norm=clip_norm)
        self._compose(phase, ThresholdEvent(delta_t), mechanism="threshold",
                      sensitivity=sens, clip_norm=clip_norm)
        return noisy > threshold, noisy

    def nothing(self, phase, *, clip_norm=None):
        """Record that ``phase`` released nothing (e.g. ``alpha=0``): no privacy spent."""
        self._compose(phase, NoOpEvent(), mechanism="none", sensitivity=0.0,
                      clip_norm=clip_norm)

    def charge(self, phase, event, *, mechanism, sensitivity, clip_norm=None, count=1):
        """Compose an event computed elsewhere in :mod:`skdpp.privacy` (e.g. a search)."""
        self._compose(phase, event, mechanism=mechanism, sensitivity=sensitivity,
                      clip_norm=clip_norm, count=count)

    def report(self, *, n_users, released, local, notes=(), not_covered=()):
        """The fit's :class:`PrivacyReport` from the ledger (``PrivacyBudgetError`` if it
        spent more than the plan's ε at its δ)."""
        epsilon = self.plan.epsilon
        notes = tuple(notes)
        if self.plan.fixed_noise:
            # The user fixed the noise: the requested epsilon is what is spent.
            spent = self.accountant.get_epsilon(self.plan.delta)
            epsilon = spent if spent > 0 else epsilon
            notes += ("The noise multiplier was fixed by the user; epsilon is the "
                      "value spent at delta (the epsilon parameter is not used).",)
        return PrivacyReport.from_accountant(
            self.accountant, epsilon=epsilon, delta=self.plan.delta, n_users=int(n_users),
            released=tuple(released), local=tuple(local), shares=self.plan.shares,
            notes=notes, not_covered=tuple(not_covered), noise_seeded=self.seeded)
