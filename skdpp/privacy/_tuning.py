"""Privacy of hyperparameter search with random stopping (Rényi DP).

A private search runs a DP trial a random number ``K`` of times and releases only
the best output (Liu & Talwar 2019). :class:`RandomStopping` implements Theorems 2
(truncated negative binomial ``K``) and 6 (Poisson ``K``) of Papernot & Steinke
(2022, arXiv:2110.03620v2 numbering) and their closed form for ρ-zCDP trials,
converted to (ε, δ) by Canonne, Kamath & Steinke (2020). Every trial meets one
common ρ-zCDP budget (a data-independent mixture is no less private than its least
private component): :func:`plan_rho` adds a plan's zCDP up, :func:`epsilon_for_rho`
finds the ``epsilon`` at which a plan spends exactly ρ. Formulas in :ref:`tuning`.

References
----------
.. [1] Papernot, N. and Steinke, T. (2022). Hyperparameter Tuning with Renyi
       Differential Privacy. ICLR 2022. arXiv:2110.03620.
.. [2] Liu, J. and Talwar, K. (2019). Private Selection from Private
       Candidates. STOC 2019. arXiv:1811.07971.
.. [3] Canonne, C., Kamath, G. and Steinke, T. (2020). arXiv:2004.00010.
.. [4] Cesar, M. and Rogers, R. (2021). arXiv:2004.07223.

Examples
--------
>>> from skdpp.privacy._tuning import RandomStopping
>>> stopping = RandomStopping("truncated_negative_binomial", mean=10, eta=1.0)
>>> round(stopping.gamma, 6)
0.1
>>> rho = stopping.calibrate(epsilon=1.0, delta=1e-6)
>>> round(stopping.epsilon(rho, 1e-6), 9)
1.0
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from scipy import optimize, special

from ._gdp import gaussian_epsilon, gaussian_mu
from ._rdp import _cks_epsilon, rdp_to_delta, zcdp_delta, zcdp_epsilon  # noqa: F401
from .calibration import (_ZCDP, _epsilon_of, _is_real, largest_root_below,
                          params_for_rho)
from .report import PrivacyReport, _fmt

__all__ = ["STOPPING_DISTRIBUTIONS", "RandomStopping", "SearchPrivacyReport",
           "epsilon_for_rho", "largest_root_below", "plan_rho",
           "release_validation_score", "report_rho", "zcdp_delta", "zcdp_epsilon"]

STOPPING_DISTRIBUTIONS = ("truncated_negative_binomial", "poisson")


def _tnb_mean(gamma, eta):
    """Mean of the truncated negative binomial ``D_{η,γ}`` (Definition 1)."""
    if gamma == 1.0:
        return 1.0
    log_g = math.log(gamma)
    # E[K] = η (1 − γ) / (γ (1 − γ^η)) = (1 − γ) / (γ (−log γ) expm1(x)/x), x = η log γ,
    # continuous at η = 0 (logarithmic distribution: (1/γ − 1)/log(1/γ)).
    x = eta * log_g
    expm1_over_x = 1.0 + x / 2.0 + x * x / 6.0 if abs(x) < 1e-5 else math.expm1(x) / x
    return (1.0 - gamma) / (gamma * (-log_g) * expm1_over_x)


def _tnb_gamma(mean, eta):
    """The γ of ``D_{η,γ}`` with the given mean (``brentq`` on log γ)."""
    if mean == 1.0:
        return 1.0

    def f(log_gamma):
        return math.log(_tnb_mean(math.exp(log_gamma), eta)) - math.log(mean)

    hi = -1e-12  # γ → 1: mean → 1 < target
    lo = -1.0
    while f(lo) < 0.0:
        lo *= 2.0
        if lo < -1e4:  # pragma: no cover - means beyond exp(1e4)
            raise ValueError(f"Cannot find gamma for mean={mean!r}, eta={eta!r}.")
    return math.exp(optimize.brentq(f, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500))


@dataclass(frozen=True)
class RandomStopping:
    """Random number of trials ``K`` of a private search, and the search's privacy.

    ``distribution``: the truncated negative binomial ``D_{η,γ}`` (``K >= 1``;
    ``mean=1`` is ``K ≡ 1``) of shape ``eta > -1``, or Poisson (``K = 0``
    possible, ``eta`` ignored); ``mean = E[K] >= 1``; ``gamma``: the ``γ`` with
    that mean (1.0 for ``mean=1``, nan for Poisson). The bounds (:ref:`tuning`)
    release the best trial only: ``K`` and the other trials stay secret.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy._tuning import RandomStopping
    >>> s = RandomStopping("truncated_negative_binomial", mean=5, eta=0.0)
    >>> bool(np.isclose(s.pmf(np.arange(1, 2000)).sum(), 1.0))
    True
    >>> bool(np.isclose((np.arange(1, 2000) * s.pmf(np.arange(1, 2000))).sum(), 5.0))
    True
    """

    distribution: str
    mean: float
    eta: float = 1.0
    gamma: float = field(default=float("nan"), init=False)

    def __post_init__(self):
        if self.distribution not in STOPPING_DISTRIBUTIONS:
            raise ValueError(
                f"`distribution` must be one of {STOPPING_DISTRIBUTIONS}, got "
                f"{self.distribution!r}.")
        mean = self.mean
        if not _is_real(mean, lambda v: 1.0 <= v < math.inf):
            raise ValueError(
                f"The mean number of trials must be a finite number >= 1, got {mean!r} "
                "(Theorems 2 and 6 of Papernot & Steinke 2022 need E[K] >= 1).")
        object.__setattr__(self, "mean", float(mean))
        eta = self.eta
        if not _is_real(eta, lambda v: -1.0 < v < math.inf):
            raise ValueError(f"`eta` must be a finite number > -1, got {eta!r}.")
        object.__setattr__(self, "eta", float(eta))
        object.__setattr__(self, "gamma", float("nan") if self.distribution == "poisson"
                           else _tnb_gamma(self.mean, self.eta))

    @property
    def _is_constant(self):
        return self.distribution != "poisson" and self.gamma == 1.0

    def pmf(self, k):
        """``P[K = k]`` (vectorised over integer ``k >= 0``)."""
        k = np.asarray(k)
        kf = k.astype(float)
        if self.distribution == "poisson":
            from scipy import stats

            return stats.poisson.pmf(k, self.mean)
        if self._is_constant:
            return (k == 1).astype(float)
        g, eta = self.gamma, self.eta
        out = np.zeros(kf.shape)
        pos = kf >= 1
        kp = kf[pos]
        if eta == 0.0:
            logp = kp * math.log1p(-g) - np.log(kp) - math.log(-math.log(g))
        else:
            # Π_{l<k} (l + η)/(l + 1) = Γ(k + η) / (Γ(η) Γ(k + 1)), signed for η < 0.
            log_prod = (special.gammaln(kp + eta) - special.gammaln(eta)
                        - special.gammaln(kp + 1.0))
            sign = special.gammasgn(kp + eta) * special.gammasgn(eta)
            log_norm = math.log(abs(math.expm1(-eta * math.log(g))))
            logp = kp * math.log1p(-g) + log_prod - log_norm
            # For η < 0 both the product and γ^{-η} − 1 are negative.
            logp = np.where(sign * np.sign(math.expm1(-eta * math.log(g))) > 0, logp, -np.inf)
        out[pos] = np.exp(logp)
        return out

    def pgf(self, x):
        """Probability generating function ``E[x^K]`` (vectorised over ``x`` in [0, 1])."""
        x = np.asarray(x, dtype=float)
        if self.distribution == "poisson":
            return np.exp(self.mean * (x - 1.0))
        if self._is_constant:
            return x.copy()
        g, eta = self.gamma, self.eta
        y = np.log1p(-(1.0 - g) * x)  # log(1 − (1 − γ) x) <= 0
        if eta == 0.0:
            return y / math.log(g)
        return np.expm1(-eta * y) / math.expm1(-eta * math.log(g))

    def sample(self, rng):
        """Draw ``K`` (one uniform or one Poisson draw from ``rng``) by CDF inversion with
        ``P[K = k + 1] / P[K = k] = (1 − γ)(k + η)/(k + 1)``, stopped when a term is
        below 1e-17 of the CDF (a tail cut of about ``1e-17/γ`` in total variation)."""
        if self.distribution == "poisson":
            return int(rng.poisson(self.mean))
        if self._is_constant:
            return 1
        u = float(rng.random())
        g, eta = self.gamma, self.eta
        p = float(self.pmf(np.array([1]))[0])
        cdf, k = p, 1
        while cdf < u:
            p *= (1.0 - g) * (k + eta) / (k + 1.0)
            k += 1
            cdf += p
            if p <= 1e-17 * cdf:
                break
        return k

    def rdp(self, orders, rdp, *, monotone=True):
        """RDP of the search given one trial's RDP curve on orders > 1: Theorem 2
        (``λ̂`` minimised over the grid) or Theorem 6 (``δ̂`` by :func:`rdp_to_delta`);
        ``monotone``: each value lowered to the smallest at a larger order."""
        orders = np.asarray(orders, dtype=float)
        rdp = np.asarray(rdp, dtype=float)
        if orders.shape != rdp.shape or np.any(orders <= 1.0):
            raise ValueError("`orders` (all > 1) and `rdp` must have the same shape.")

        def tnb_constant():  # Theorem 2's minimum over λ̂ on the grid
            return (1.0 + self.eta) * float(np.min((1.0 - 1.0 / orders) * rdp
                                                   - math.log(self.gamma) / orders))

        out = self._theorem(orders, rdp, lambda eps: rdp_to_delta(orders, rdp, eps),
                            tnb_constant)
        if monotone:  # out[i] <= min_{j: orders[j] >= orders[i]} out[j]
            order = np.argsort(orders)
            out[order] = np.minimum.accumulate(out[order][::-1])[::-1]
        return out

    def zcdp_rdp(self, rho, orders):
        """RDP of the search at real orders ``λ > 1`` when every trial is ρ-zCDP
        (Theorem 2's closed form, :ref:`tuning`, or Theorem 6)."""
        lam = np.asarray(orders, dtype=float)
        rho = float(rho)
        return self._theorem(lam, rho * lam, lambda eps: zcdp_delta(rho, eps),
                             lambda: self._tnb_constant(rho))

    def _theorem(self, lam, trial_rdp, trial_delta, tnb_constant):
        """The search's RDP at orders ``lam`` from the trial's RDP there: Theorem 6
        (Poisson; ``trial_delta(ε̂)`` the trial's δ at ``ε̂ = log(1 + 1/(λ − 1))``) or
        Theorem 2 (``tnb_constant()`` its minimum over ``λ̂``)."""
        if self._is_constant:
            return trial_rdp.copy()
        if self.distribution == "poisson":
            mu = self.mean
            delta_hat = np.array([trial_delta(math.log1p(1.0 / (x - 1.0)))
                                  for x in lam.reshape(-1)]).reshape(lam.shape)
            return trial_rdp + mu * delta_hat + math.log(mu) / (lam - 1.0)
        return trial_rdp + tnb_constant() + math.log(self.mean) / (lam - 1.0)

    def _tnb_constant(self, rho):
        """``min_{λ̂>=1} (1 + η)[(1 − 1/λ̂) ρλ̂ + log(1/γ)/λ̂]`` (closed form)."""
        log_inv_gamma = -math.log(self.gamma)
        if rho == 0.0:
            return 0.0
        if log_inv_gamma >= rho:  # λ̂* = sqrt(log(1/γ)/ρ) >= 1
            value = 2.0 * math.sqrt(rho * log_inv_gamma) - rho
        else:  # the minimum over λ̂ >= 1 is at λ̂ = 1
            value = log_inv_gamma
        return (1.0 + self.eta) * value

    def epsilon(self, rho, delta):
        """ε at δ in ``(0, 1)`` of the search with ρ-zCDP trials (``inf`` for ``rho=inf``)."""
        rho, delta = float(rho), float(delta)
        if math.isinf(rho):
            return math.inf
        if not 0.0 < delta < 1.0:
            raise ValueError(f"`delta` must be in (0, 1), got {delta!r}.")
        return _cks_epsilon(lambda lam: self.zcdp_rdp(rho, lam), delta)

    def calibrate(self, epsilon, delta):
        """The largest per-trial ρ (to ~1e-10 relative) with ``self.epsilon(rho, delta)
        <= epsilon`` (``inf`` for ``epsilon=inf``)."""
        epsilon, delta = float(epsilon), float(delta)
        if math.isinf(epsilon):
            return math.inf
        if not epsilon > 0.0:
            raise ValueError(f"`epsilon` must be > 0, got {epsilon!r}.")
        if not 0.0 < delta < 1.0:
            raise ValueError(
                f"The search needs delta in (0, 1) (its RDP bound converts to (epsilon, "
                f"delta) with delta > 0), got delta={delta!r}.")

        def f(log_rho):
            return self.epsilon(math.exp(log_rho), delta) - epsilon

        # Start from the zCDP budget of one (ε, δ) release.
        lo = hi = math.log(max(epsilon ** 2 / (4.0 * math.log(1.0 / delta)), 1e-300))
        while f(lo) >= 0.0:
            lo -= 2.0
            if lo < math.log(1e-300):  # pragma: no cover - ε(ρ) -> 0 as ρ -> 0
                raise ValueError(
                    f"epsilon={epsilon!r} is too small for a search with {self.mean:g} "
                    f"trials on average at delta={delta!r}.")
        while f(hi) <= 0.0:
            hi += 2.0
        return math.exp(largest_root_below(f, lo, hi))

    def describe(self):
        """A short description (for the report)."""
        if self.distribution == "poisson":
            return f"Poisson(mean={self.mean:g})"
        if self._is_constant:
            return "K = 1 (a single trial)"
        return (f"truncated negative binomial(eta={self.eta:g}, gamma={self.gamma:.6g}, "
                f"mean={self.mean:g})")


def _phase_rho(mechanism, value, count):
    """zCDP of ``count`` releases of one mechanism with parameter ``value``."""
    value = float(value)
    if value == (math.inf if mechanism == "exponential" else 0.0):  # non-private
        return math.inf
    _, rho_of = _ZCDP["gaussian" if mechanism == "sampled-gaussian" else mechanism]
    return rho_of(value, count)


def plan_rho(plan):
    """zCDP ρ of a :class:`~skdpp.privacy.BudgetPlan` (calibrated here): the sum of its
    phases' per-mechanism zCDP (0 without releases, ``inf`` if non-private).

    Examples
    --------
    >>> from skdpp.privacy import BudgetPlan, gaussian_mu
    >>> from skdpp.privacy._tuning import plan_rho
    >>> plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    >>> plan.add_rest("mean", count=4)
    >>> round(plan_rho(plan.calibrate()), 6), round(gaussian_mu(1.0, 1e-6) ** 2 / 2, 6)
    (0.028014, 0.028014)
    """
    plan = plan.calibrate()
    return float(sum(_phase_rho(p.mechanism, plan[p.name], p.count) for p in plan.phases))


def epsilon_for_rho(plan_at, rho, delta, *, rtol=1e-9):
    """The ``epsilon`` at which ``plan_at(epsilon)`` (a data-independent plan) spends at
    most a zCDP budget ``rho`` (within ``rtol``): ``gaussian_epsilon(sqrt(2ρ), δ)``
    for Gaussian plans, else the accountant's ε of the plan at scale ``rho``
    (:func:`~skdpp.privacy.calibration.params_for_rho`), checked, or solved by
    ``brentq`` when the plan's structure changes with epsilon. ``ValueError`` if the
    plan spends more than ``rho`` at every ``epsilon`` (fixed noise)."""
    rho, delta = float(rho), float(delta)
    if math.isinf(rho):
        return math.inf
    e0 = gaussian_epsilon(math.sqrt(2.0 * rho), delta)
    plan0 = plan_at(e0).calibrate()
    r0 = plan_rho(plan0)
    if r0 <= rho and (r0 >= rho * (1.0 - rtol) or r0 == 0.0):
        return e0
    if plan0.fixed_noise:  # the noise does not depend on epsilon
        if r0 <= rho:
            return e0
        raise ValueError(
            f"The estimator's plan spends rho={r0:.6g} (zCDP) whatever its epsilon (its "
            f"noise is fixed), more than the per-trial budget rho={rho:.6g}. Do not fix "
            "the noise (e.g. noise_multiplier=None) in a private search.")
    # a calibrated plan's zCDP is its calibration scale: read epsilon at scale rho
    e = _epsilon_of(plan0.phases, params_for_rho(plan0.phases, rho), delta)
    step = 1e-12
    for _ in range(40):  # nudge down past float noise in the plan's calibration
        if not 0.0 < e < math.inf:
            break
        r = plan_rho(plan_at(e).calibrate())
        if r <= rho:
            if r >= rho * (1.0 - 1e-6):
                return e
            break
        e *= 1.0 - step
        step *= 2.0

    # The plan's structure depends on epsilon: solve for it.
    def f(log_e):
        r = plan_rho(plan_at(math.exp(log_e)))
        return (math.log(r) if r > 0 else -math.inf) - math.log(rho)

    lo = hi = math.log(e0)
    failed = f"Could not find an epsilon at which the plan spends rho={rho:.6g}."
    while f(lo) > 0.0:
        lo -= 1.0
        if lo < math.log(e0) - 80:
            raise ValueError(failed)
    while f(hi) < 0.0:
        hi += 1.0
        if hi > math.log(e0) + 80:  # pragma: no cover - rho(e) grows without bound
            raise ValueError(failed)
    return math.exp(largest_root_below(
        f, lo, hi, xtol=1e-13, rtol=1e-12,
        exceeds=lambda log_e: plan_rho(plan_at(math.exp(log_e))) > rho))


_RHO_MECHANISMS = ("gaussian", "sampled-gaussian", "laplace", "exponential")


def report_rho(report):
    """An upper bound on a fit's zCDP ρ from its report (None if undetermined):
    ``μ²/2`` for ``"exact-gdp"``, else phase by phase from the worst noise
    multiplier (largest ε) and the count."""
    if report.accountant == "none":
        return 0.0
    if report.accountant == "non-private" or not math.isfinite(report.epsilon_spent):
        return math.inf
    if report.accountant == "exact-gdp":
        if report.epsilon_spent == 0.0:
            return 0.0
        mu = gaussian_mu(report.epsilon_spent, report.delta_spent)
        return mu * mu / 2.0
    total = 0.0
    for phase in report.phases:
        mechanism = phase.mechanism
        if mechanism == "none" or phase.count == 0:
            continue
        if mechanism not in _RHO_MECHANISMS:
            return None
        values = phase.noise_multiplier
        values = values if isinstance(values, tuple) else (values,)
        if any(v is None for v in values):
            return None
        worst = max(values) if mechanism == "exponential" else min(values)
        total += _phase_rho(mechanism, worst, phase.count)
    return total


def release_validation_score(release, phase, user_losses, *, score_clip):
    """Release (``release.gaussian`` in ``phase``) the sum of the users' mean held-out
    losses clipped to ``[0, score_clip]`` (non-finite: ``score_clip``). One user's
    term moves in ``[0, C]``: L2 sensitivity ``C`` under replace-one-user."""
    losses = np.asarray(user_losses, dtype=np.float64)
    clipped = np.where(np.isfinite(losses), losses, score_clip)
    clipped = np.clip(clipped, 0.0, score_clip)
    total = np.array([math.fsum(clipped)])
    return float(release.gaussian(phase, total, sensitivity=float(score_clip),
                                  clip_norm=float(score_clip))[0])


@dataclass(frozen=True, kw_only=True)
class SearchPrivacyReport(PrivacyReport):
    """:class:`~skdpp.privacy.PrivacyReport` of a private search (random stopping):
    adds ``stopping`` (the law of ``K``), ``trial_rho`` (zCDP of every trial),
    ``trial_epsilon`` (ε at ``delta`` of one trial) and ``chosen_trial`` (the
    selected fit's report)."""

    stopping: str = ""
    trial_rho: float = 0.0
    trial_epsilon: float = 0.0
    chosen_trial: Optional[PrivacyReport] = None

    def __str__(self):
        lines = [super().__str__(),
                 f"  stopping: {self.stopping}; per trial: rho={_fmt(self.trial_rho)} "
                 f"(zCDP), alone epsilon={_fmt(self.trial_epsilon)} at delta={_fmt(self.delta)}"]
        if self.chosen_trial is not None:
            lines.append("  chosen trial's fit:")
            lines.extend("    " + line for line in str(self.chosen_trial).splitlines())
        return "\n".join(lines)

    def _repr_html_(self):
        parts = [super()._repr_html_(),
                 f"<div>stopping: {html.escape(self.stopping)}; per trial rho="
                 f"{html.escape(_fmt(self.trial_rho))}</div>"]
        if self.chosen_trial is not None:
            parts.append("<div><em>chosen trial's fit</em>"
                         + self.chosen_trial._repr_html_() + "</div>")
        return "".join(parts)

    def to_dict(self):
        """The report as plain Python types (``chosen_trial`` nested)."""
        out = super().to_dict()
        out["chosen_trial"] = None if self.chosen_trial is None else self.chosen_trial.to_dict()
        return out
