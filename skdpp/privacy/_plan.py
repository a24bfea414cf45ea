"""The budget plan of a fit: named phases, their shares, calibrated once
(:ref:`calibration`); the :class:`~skdpp.privacy.Releaser` reads each phase's noise.

Examples
--------
>>> from skdpp.privacy import BudgetPlan
>>> plan = BudgetPlan(epsilon=1.0, delta=1e-6)
>>> plan.add("init", share=0.1, param="budget_shares['init']")
>>> plan.add("cold_start", share=0.02, param="budget_shares['cold_start']")
>>> plan.add_rest("iterations", count=5)
>>> plan.calibrate().names
('init', 'cold_start', 'iterations')
>>> round(plan["iterations"], 3)
10.07
"""

import math
import numbers

from .calibration import Phase, calibrate

__all__ = ["AUTO_CLIP_NOISE", "AUTO_CLIP_SHARES", "BudgetPlan", "phase_shares",
           "resolve_clip_share"]

# Explicit shares summing to within this of 1 leave the rest phases no budget.
_SHARE_TOL = 1e-9


class BudgetPlan:
    """Named phases of a fit's privacy budget, calibrated jointly to (ε, δ).

    Parameters
    ----------
    epsilon : float
        Target ε in ``(0, inf]`` (``inf``: every noise multiplier is 0).
    delta : float
        Target δ in ``[0, 1)``.

    Notes
    -----
    Shares fix the *ratios* of the phases' noise (:ref:`calibration`): :meth:`add`
    takes a share from a parameter (0 drops the phase), :meth:`add_rest` phases
    split the rest equally, :meth:`fix` phases have a user-chosen noise multiplier
    (such a plan is not calibrated; the ε it spends is reported).
    """

    def __init__(self, epsilon, delta):
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self._explicit = []   # (Phase kwargs, param name)
        self._rest = []       # Phase kwargs with share filled in at calibration
        self._fixed = {}      # name -> noise multiplier (not calibrated)
        self._order = []
        self._params = None
        self._phases = None

    def _check_new(self, name):
        if self._params is not None:
            raise RuntimeError("The plan is calibrated; it cannot be changed.")
        if name in self._order:
            raise ValueError(f"Phase {name!r} is already in the plan.")

    def add(self, name, *, share, mechanism="gaussian", count=1, sampling_rate=1.0,
            param=None, threshold_delta=0.0):
        """Add a phase with an explicit share (from parameter ``param``; 0 drops it);
        ``threshold_delta > 0``: a partition selection whose threshold reserves that δ."""
        self._check_new(name)
        if isinstance(share, bool) or not isinstance(share, numbers.Real) \
                or not 0.0 <= float(share) < 1.0:
            label = param or f"the share of phase {name!r}"
            raise ValueError(f"{label} must be in [0, 1), got {share!r}.")
        if float(share) == 0.0 or count == 0:
            return
        self._explicit.append((dict(name=name, share=float(share), mechanism=mechanism,
                                    count=int(count), sampling_rate=float(sampling_rate),
                                    threshold_delta=float(threshold_delta)),
                               param))
        self._order.append(name)

    def add_rest(self, name, *, mechanism="gaussian", count=1, sampling_rate=1.0):
        """Add a phase taking an equal part of the share the explicit phases leave."""
        self._check_new(name)
        if count == 0:
            return
        self._rest.append(dict(name=name, mechanism=mechanism, count=int(count),
                               sampling_rate=float(sampling_rate)))
        self._order.append(name)

    def fix(self, name, *, noise_multiplier, mechanism="gaussian", count=1,
            sampling_rate=1.0):
        """Add a phase whose noise multiplier is fixed by the user (not calibrated)."""
        self._check_new(name)
        self._rest.append(dict(name=name, mechanism=mechanism, count=int(count),
                               sampling_rate=float(sampling_rate)))
        self._fixed[name] = float(noise_multiplier)
        self._order.append(name)

    def calibrate(self):
        """Validate the shares and solve every phase's noise (once); returns ``self``."""
        if self._params is not None:
            return self
        explicit = math.fsum(kw["share"] for kw, _ in self._explicit)
        # a remainder within rounding of 0 would silently starve the rest phases
        if self._rest and explicit >= 1.0 - _SHARE_TOL:
            params = [p for _, p in self._explicit if p]
            values = ", ".join(f"{p}={kw['share']!r}" for kw, p in self._explicit if p)
            rest = ", ".join(repr(kw["name"]) for kw in self._rest)
            raise ValueError(
                f"{' + '.join(params) or 'The explicit shares'} must be < 1 so that the "
                f"phase(s) {rest} get a positive share of the budget; got {values} "
                f"(sum {explicit:g}). Lower them.")
        remaining = (1.0 - explicit) / max(len(self._rest), 1)
        phases = {kw["name"]: Phase(**kw) for kw, _ in self._explicit}
        for kw in self._rest:
            phases[kw["name"]] = Phase(share=remaining, **kw)
        self._phases = tuple(phases[n] for n in self._order)
        if self._fixed:
            self._params = {p.name: self._fixed.get(p.name, 0.0) for p in self._phases}
            if len(self._fixed) != len(self._phases):
                raise ValueError("A plan with a fixed noise multiplier cannot also "
                                 "calibrate other phases.")
        elif self._phases:
            self._params = calibrate(self._phases, epsilon=self.epsilon, delta=self.delta)
        else:
            self._params = {}
        return self

    def leaves_rest(self, share_tol=_SHARE_TOL):
        """bool: the explicit shares leave the rest phases a positive share (or there are
        none); available before calibration."""
        explicit = math.fsum(kw["share"] for kw, _ in self._explicit)
        return not self._rest or explicit < 1.0 - max(share_tol, _SHARE_TOL)

    def _check_calibrated(self):
        if self._params is None:
            raise RuntimeError("Call BudgetPlan.calibrate() before reading the plan.")

    def __getitem__(self, name):
        """Noise multiplier (Gaussian/Laplace) or per-selection ε (exponential) of a phase."""
        self._check_calibrated()
        if name not in self._params:
            raise KeyError(f"Phase {name!r} is not in the plan {self.names}.")
        return self._params[name]

    def __contains__(self, name):
        return name in self._order

    @property
    def names(self):
        """tuple of str: the phase names, in order."""
        return tuple(self._order)

    @property
    def phases(self):
        """tuple of Phase: the calibrated phases."""
        self._check_calibrated()
        return self._phases

    @property
    def shares(self):
        """dict: each phase's share of the budget (normalised)."""
        self._check_calibrated()
        total = sum(p.share for p in self._phases) or 1.0
        return {p.name: p.share / total for p in self._phases}

    @property
    def selection_phases(self):
        """tuple of str: phases with a partition-selection threshold (before calibration)."""
        return tuple(kw["name"] for kw, _ in self._explicit if kw["threshold_delta"] > 0)

    @property
    def fixed_noise(self):
        """bool: the noise was fixed by the user (ε is what the fit spends)."""
        return bool(self._fixed)

    def __repr__(self):
        state = "calibrated" if self._params is not None else "not calibrated"
        return (f"BudgetPlan(epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"phases={self.names}, {state})")


#: Candidate shares of the ``"clip"`` phase's ``"auto"`` share (increasing).
AUTO_CLIP_SHARES = (0.05, 0.1, 0.2, 0.3, 0.5)
#: ``"auto"`` takes the smallest share whose count noise std is at most this
#: fraction of the users (the search then errs by about ``n / 8`` in rank; 300
#: users at ε = 1 with share 0.05 gave noise 0.45 n and bounds off by 10^5).
AUTO_CLIP_NOISE = 1.0 / 8.0


def resolve_clip_share(clip_share, build, n_users, *, phase="clip"):
    """The share of the automatic bounds' phase: ``clip_share``, or the ``"auto"`` rule.

    ``build(share)`` returns the fit's uncalibrated plan with ``phase`` at ``share``.
    ``"auto"``: the smallest of :data:`AUTO_CLIP_SHARES` whose noise multiplier of
    ``phase`` is at most ``AUTO_CLIP_NOISE * n_users``, else the largest that leaves
    the other phases a positive share (the smallest at ``epsilon=inf``). A function
    of public values only (ε, δ, release counts, ``n_users``): no privacy cost.
    """
    if not (isinstance(clip_share, str) and clip_share == "auto"):
        return float(clip_share)
    chosen = None
    for share in AUTO_CLIP_SHARES:
        plan = build(share)
        if chosen is not None and not plan.leaves_rest(share_tol=0.0):
            break  # the other phases' explicit shares leave no room for this candidate
        chosen = share
        plan.calibrate()
        if phase not in plan or plan[phase] <= AUTO_CLIP_NOISE * max(n_users, 1):
            break
    return chosen


def phase_shares(budget_shares, defaults, *, owner):
    """``defaults`` (phase -> share in ``[0, 1)`` or ``"auto"``) updated with an
    estimator's ``budget_shares`` (``None``: the defaults); ``ValueError`` naming
    ``owner`` for an unknown key or a bad share (``"auto"`` only where the default is).

    Examples
    --------
    >>> from skdpp.privacy._plan import phase_shares
    >>> phase_shares({"init": 0.2}, {"init": 0.1, "cold_start": 0.02}, owner="Est")
    {'init': 0.2, 'cold_start': 0.02}
    """
    shares = dict(defaults)
    if budget_shares is None:
        return shares
    if not isinstance(budget_shares, dict):
        raise ValueError(
            f"{owner}: budget_shares must be a dict mapping phase names to shares, or "
            f"None, got {budget_shares!r}. Valid phases: {sorted(defaults)}.")
    for name, share in budget_shares.items():
        if name not in defaults:
            raise ValueError(
                f"{owner}: budget_shares has the key {name!r}, which is not a phase with "
                f"a share of its own. Valid keys: {sorted(defaults)} (the other phases "
                f"split the rest).")
        auto_ok = isinstance(defaults[name], str)
        if isinstance(share, str) and auto_ok and share == "auto":
            shares[name] = share
            continue
        if isinstance(share, bool) or not isinstance(share, numbers.Real) \
                or not 0.0 <= float(share) < 1.0:
            allowed = "a number in [0, 1)" + (' or "auto"' if auto_ok else "")
            raise ValueError(
                f"{owner}: budget_shares[{name!r}] must be {allowed}, got {share!r}. A "
                f"share is a fraction of the fit's zCDP budget; 0 drops the phase.")
        shares[name] = float(share)
    return shares
