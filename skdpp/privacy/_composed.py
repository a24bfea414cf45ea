"""One user-level privacy report for a whole fitted Pipeline, and one budget for it.

:func:`privacy_report` composes every step's ledger in one fresh accountant;
:func:`split_budget` returns a clone whose private steps' budgets compose
exactly to one ``(epsilon, delta)`` (:ref:`privacy_report`, *Whole Pipelines*).

Examples
--------
>>> import numpy as np
>>> from sklearn.pipeline import make_pipeline
>>> from sklearn.preprocessing import FunctionTransformer
>>> from skdpp import PPSGDRegressor
>>> from skdpp.privacy import privacy_report
>>> rng = np.random.default_rng(0)
>>> groups = np.repeat(np.arange(200), 5)
>>> X = rng.normal(size=(1000, 3)); y = X @ [1.0, -1.0, 0.5]
>>> pipe = make_pipeline(FunctionTransformer(), PPSGDRegressor(n_rounds=5, random_state=0))
>>> pipe = pipe.fit(X, y, ppsgdregressor__groups=groups)
>>> report = privacy_report(pipe)
>>> report.covered, round(report.epsilon_spent, 6)
(True, 1.0)
"""

from __future__ import annotations

import contextlib
import html
import math
from dataclasses import dataclass, replace

import numpy as np
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.model_selection._search import BaseSearchCV
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.utils import get_tags

from ._gdp import gaussian_mu
from ._tuning import SearchPrivacyReport, largest_root_below
from .accounting import LedgerEntry, PrivacyAccountant
from .calibration import plan_events
from .events import GaussianEvent
from .report import PrivacyReport, _fmt

__all__ = ["PipelinePrivacyReport", "StepReport", "privacy_report", "split_budget"]

#: The status of a step in :class:`StepReport`.
COVERED, NOT_COVERED, STATELESS = "covered", "NOT COVERED", "stateless"


@dataclass(frozen=True)
class StepReport:
    """What one step of a composed object released, and how it is accounted.

    Attributes
    ----------
    name : str
        The step's path (its scikit-learn parameter prefix).
    estimator : str
        The step's class name.
    status : {"covered", "NOT COVERED", "stateless"}
        Composed; fitted on the data without a usable report; or learns nothing.
    epsilon, delta : float or None
        The step's own (ε, δ), if covered.
    n_fits : int
        Number of fits composed (searches: candidates x splits, plus the refit).
    how : str
        How the step's events were obtained.
    """

    name: str
    estimator: str
    status: str
    epsilon: float | None = None
    delta: float | None = None
    n_fits: int = 1
    how: str = ""


@dataclass(frozen=True, kw_only=True)
class PipelinePrivacyReport(PrivacyReport):
    """:class:`~skdpp.privacy.PrivacyReport` of a whole fitted object (its steps composed).

    ``epsilon`` is the composed ε (a composition has no target of its own).

    Attributes
    ----------
    steps : tuple of StepReport
        Every step found, covered or not.
    """

    steps: tuple = ()
    _title = "PipelinePrivacyReport"

    @property
    def covered(self):
        """bool: every step that learnt from the data is inside the guarantee."""
        return not self.not_covered

    def _headline(self):
        n = sum(s.status == COVERED for s in self.steps)
        fits = sum(s.n_fits for s in self.steps if s.status == COVERED)
        what = f"{n} private step(s), {fits} fit(s) composed"
        if not math.isfinite(self.epsilon_spent):
            return f"NON-PRIVATE ({what}; spent epsilon=inf)"
        if self.not_covered:
            return (f"NOT COVERED: {', '.join(self.not_covered)} outside the guarantee; "
                    f"the rest ({what}) is ({_fmt(self.epsilon_spent)}, "
                    f"{_fmt(self.delta_spent)})-DP")
        return (f"({_fmt(self.epsilon_spent)}, {_fmt(self.delta_spent)})-DP for "
                f"everything released ({what})")

    def _step_lines(self):
        return [f"{s.name} [{s.estimator}]: {s.status}"
                + (f", epsilon alone={_fmt(s.epsilon)} at delta={_fmt(s.delta)}"
                   if s.epsilon is not None else "")
                + (f", {s.n_fits} fits" if s.n_fits != 1 else "")
                + (f" ({s.how})" if s.how else "") for s in self.steps]

    def __str__(self):
        lines = super().__str__().splitlines()
        lines.insert(1, f"  covered: {self.covered}")
        lines.extend("  step: " + line for line in self._step_lines())
        return "\n".join(lines)

    def _repr_html_(self):
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self._step_lines())
        return (super()._repr_html_() + f"<div>covered: {self.covered}</div>"
                + f"<div>steps:<ul>{items}</ul></div>")

    def to_dict(self):
        """The report as plain Python types (steps as a list of dicts, ``covered``)."""
        out = super().to_dict()
        out["steps"] = [dict(vars(s)) for s in self.steps]
        out["covered"] = self.covered
        return out


@dataclass
class _Part:
    """One step found by the walk: its report, ledger rows and how they were found."""

    name: str
    obj: object
    status: str
    ledger: tuple = ()  # LedgerEntry rows, phases prefixed by the step's path
    report: object = None
    n_fits: int = 1
    how: str = ""


def _is_stateless(obj):
    if obj is None or (isinstance(obj, str) and obj in ("passthrough", "drop")):
        return True
    try:
        return not get_tags(obj).requires_fit
    except Exception:  # pragma: no cover - objects without tags
        return False


def _cls(obj):
    return obj if isinstance(obj, str) else type(obj).__name__


def _children(obj):
    """The fitted sub-steps (name, step) of a composite, or None for a leaf."""
    if isinstance(obj, Pipeline):
        return list(obj.steps)
    if isinstance(obj, ColumnTransformer):
        return [(n, t) for n, t, _ in getattr(obj, "transformers_", obj.transformers)]
    if isinstance(obj, FeatureUnion):
        return list(obj.transformer_list)
    return None


def _walk(obj, name, out):
    children = _children(obj)
    if children is not None:
        for child_name, child in children:
            _walk(child, f"{name}__{child_name}" if name else child_name, out)
        return
    label = name or type(obj).__name__
    report = getattr(obj, "privacy_report_", None)
    if isinstance(report, SearchPrivacyReport):
        out.append(_Part(label, obj, COVERED, report=report,
                         how="the private search's own report (random stopping, "
                             "Papernot & Steinke 2022)"))
    elif isinstance(report, PrivacyReport):
        if report.ledger:
            out.append(_Part(label, obj, COVERED, report=report, how="its fit's ledger",
                             ledger=tuple(replace(e, phase=f"{label}:{e.phase}")
                                          for e in report.ledger)))
        else:
            out.append(_Part(label, obj, NOT_COVERED, report=report,
                             how="its report holds no ledger (fitted before ledgers were "
                                 "kept): refit it"))
    elif isinstance(obj, BaseSearchCV) and hasattr(obj, "cv_results_"):
        _walk_sklearn_search(obj, label, out)
    elif _is_stateless(obj):
        out.append(_Part(label, obj, STATELESS))
    else:
        out.append(_Part(label, obj, NOT_COVERED,
                         how="fitted on the data without a privacy report"))


def _private_leaves(obj, name=""):
    """(path, leaf) of every step with ``epsilon`` and ``delta`` parameters."""
    children = _children(obj)
    if children is not None:
        return [leaf for n, child in children
                for leaf in _private_leaves(child, f"{name}__{n}" if name else n)]
    if hasattr(obj, "get_params") and not isinstance(obj, type):
        params = obj.get_params(deep=False)
        if "epsilon" in params and "delta" in params:
            return [(name or type(obj).__name__, obj)]
    return []


def _leaf(obj, path):
    """The sub-step of ``obj`` at a ``__``-separated path (None if absent)."""
    if not path or path == type(obj).__name__:
        return obj
    for part in path.split("__"):
        obj = dict(_children(obj) or ()).get(part)  # None: a leaf or no such step
        if obj is None:
            return None
    return obj


@contextlib.contextmanager
def _budget_set(step, epsilon, delta):
    """``step.epsilon, step.delta`` set for the block, then restored."""
    saved = step.epsilon, step.delta
    step.epsilon, step.delta = epsilon, delta
    try:
        yield step
    finally:
        step.epsilon, step.delta = saved


def _plan_event(plan):
    plan = plan.calibrate()
    return plan_events(plan.phases, {p.name: plan[p.name] for p in plan.phases})


def _planned_rows(step, fitted, prefix):
    """A step's events re-planned from its parameters and the fitted step's public
    ``n_users_`` / ``n_features_in_`` (None if impossible)."""
    plan_fn = getattr(step, "_budget_plan", None)
    meta = {"n_users": int(getattr(fitted, "n_users_", 0) or 0),
            "n_features": int(getattr(fitted, "n_features_in_", 0) or 0)}
    if plan_fn is None or not meta["n_users"]:
        return None
    try:
        event = _plan_event(plan_fn(meta))
    except Exception:  # the plan needs more than public n_users / n_features
        return None
    return (LedgerEntry(f"{prefix}:plan", event, mechanism="planned"),)


def _compose(rows):
    """A fresh accountant with every :class:`LedgerEntry` of ``rows`` composed."""
    acc = PrivacyAccountant()
    for e in rows:
        acc.compose(e.event, e.count, phase=e.phase, mechanism=e.mechanism,
                    sensitivity=e.sensitivity, clip_norm=e.clip_norm)
    return acc


def _budget_of(step):
    params = step.get_params(deep=False)
    return {k: params[k] for k in ("epsilon", "delta") if k in params}


def _walk_sklearn_search(search, label, out):
    """Every candidate x split fit of a scikit-learn search plus the refit."""
    refit = getattr(search, "best_estimator_", None)
    if refit is None:
        out.append(_Part(f"{label} (all fits)", search, NOT_COVERED,
                         how="refit=False: no fitted estimator to read the public n_users "
                             "and plans from"))
        return
    inner = []
    _walk(refit, f"{label}__refit", inner)
    for part in inner:
        path = part.name[len(f"{label}__refit"):].lstrip("_")
        part.name = f"{label}__{path}" if path else label
        out.append(part)
        if part.status == COVERED and not isinstance(part.report, SearchPrivacyReport):
            _charge_candidates(search, label, part, path, out)
    out.append(_Part(f"{label} selection", search, NOT_COVERED,
                     how="best_params_/best_score_/cv_results_: the argmax over non-private "
                         "validation scores"))


def _charge_candidates(search, label, part, path, out):
    """Add every candidate x split fit of the refit's covered step ``part`` to its
    ledger: re-planned (checked against the refit) or charged the refit's ledger."""
    params_list = list(search.cv_results_["params"])
    n_splits = int(getattr(search, "n_splits_", 1))
    delta = part.report.delta
    steps = [clone(search.estimator).set_params(**params) for params in params_list]
    if path:
        steps = [_leaf(est, path) for est in steps]
    planned = [None if step is None else _planned_rows(
        step, part.obj, f"{label}[{i}]__{path or type(part.obj).__name__}")
        for i, step in enumerate(steps)]
    ok = all(p is not None for p in planned)
    best = getattr(search, "best_params_", None)
    if ok and best is not None and best in params_list:
        ok = math.isclose(
            _compose(planned[params_list.index(best)]).get_epsilon(delta),
            _compose(part.ledger).get_epsilon(delta),
            rel_tol=1e-6, abs_tol=1e-12)
    rows = []
    if ok:
        rows = [replace(e, count=e.count * n_splits) for p in planned for e in p]
        part.n_fits += len(planned) * n_splits
        part.how = (
            f"{len(params_list)} candidates x {n_splits} splits re-planned from their "
            f"parameters on the refit's public n_users={part.obj.n_users_} (checked "
            "against the refit's ledger), plus the refit's ledger; folds holding "
            "fewer users (GroupKFold) plan on their own n_users")
    else:
        own = _budget_of(part.obj)
        for i, (params, step) in enumerate(zip(params_list, steps)):
            if step is not None and _budget_of(step) == own:
                rows += [replace(e, count=e.count * n_splits,
                                 phase=f"{label}[{i}]:{e.phase}") for e in part.ledger]
                part.n_fits += n_splits
            else:
                out.append(_Part(f"{label} candidate {i} ({params})", search,
                                 NOT_COVERED, how="budget differs from the refit's, "
                                                  "no public plan"))
        part.how = ("no public plan: every fit of a candidate with the refit's epsilon/"
                    "delta is charged the refit's ledger (assumes the same plan)")
    part.ledger += tuple(rows)


def privacy_report(obj, *, delta=None):
    """One user-level privacy report for everything a fitted object releases.

    Walks a fitted ``Pipeline``, ``ColumnTransformer``, ``FeatureUnion``,
    :class:`~skdpp.model_selection.PrivateRandomizedSearchCV`, ``GridSearchCV`` /
    ``RandomizedSearchCV`` or a bare estimator and re-adds every step's ledger to one
    fresh :class:`~skdpp.privacy.PrivacyAccountant` (exact sequential composition).

    Parameters
    ----------
    obj : fitted estimator or meta-estimator
    delta : float, default=None
        δ of the composed ε; ``None``: the largest ``delta`` of the covered steps.

    Returns
    -------
    report : PipelinePrivacyReport
        ``steps`` lists every step (covered, NOT COVERED or stateless); ``covered``
        is False as soon as one step learnt from the data without a privacy report.

    Notes
    -----
    Every step is assumed to see the same users (an upper bound otherwise). A
    private search's own report is used as is (with other steps: basic
    composition); every fit of a scikit-learn search is re-planned from public
    values or charged the refit's ledger, and its selection is NOT COVERED
    (:ref:`privacy_report`, *Whole Pipelines*).
    """
    parts = []
    _walk(obj, "", parts)
    covered = [p for p in parts if p.status == COVERED]
    searches = [p for p in covered if isinstance(p.report, SearchPrivacyReport)]
    reports = [p.report for p in covered]
    if delta is None:
        delta = max((float(r.delta) for r in reports), default=0.0)
    delta = float(delta)
    acc = _compose([e for p in covered for e in p.ledger])  # searches: no ledger
    if len(searches) == len(covered) == 1:
        base = searches[0].report
        eps_spent, delta_spent, method = base.epsilon_spent, base.delta_spent, base.accountant
        phases, released, local = base.phases, base.released, base.local
        notes = list(base.notes)
    else:
        tmp = PrivacyReport.from_accountant(acc, epsilon=math.inf if acc.method == "non-private"
                                            else 1e300, delta=delta, n_users=1)
        eps_spent, delta_spent, method = tmp.epsilon_spent, tmp.delta_spent, tmp.accountant
        phases, notes = tmp.phases, []
        released = tuple(f"{p.name}: {r}" for p in covered for r in p.report.released)
        local = tuple(f"{p.name}: {r}" for p in covered for r in p.report.local)
        if searches:
            eps_spent += sum(p.report.epsilon_spent for p in searches)
            delta_spent += sum(p.report.delta_spent for p in searches)
            method = f"{method}+basic"
            notes.append("A private search is composed with the other steps by basic "
                         "composition (epsilons and deltas summed: an upper bound).")
            phases += tuple(replace(ph, name=f"{p.name}:{ph.name}")
                            for p in searches for ph in p.report.phases)
        if math.isinf(eps_spent):
            notes.append("Non-private: a step was fitted with epsilon=inf (no noise); no "
                         "privacy guarantee holds.")
    users = sorted({int(r.n_users) for r in reports})
    if len(users) > 1:
        notes.append(f"The steps report different n_users ({users}); the composition "
                     "assumes they saw the same users (n_users is the largest).")
    notes.append("Sequential composition of every step (same users), exact: every step's "
                 "ledger events re-added to one accountant.")
    steps = tuple(StepReport(
        name=p.name, estimator=_cls(p.obj), status=p.status, n_fits=p.n_fits, how=p.how,
        epsilon=float(p.report.epsilon_spent) if p.status == COVERED else None,
        delta=float(p.report.delta) if p.status == COVERED else None) for p in parts)
    return PipelinePrivacyReport(
        epsilon=float(eps_spent),
        delta=delta, epsilon_spent=float(eps_spent), delta_spent=float(delta_spent),
        accountant=method, n_users=users[-1] if users else 0, phases=tuple(phases),
        released=released, local=local, notes=tuple(notes),
        not_covered=tuple(f"{p.name} ({_cls(p.obj)})" for p in parts
                          if p.status == NOT_COVERED),
        noise_seeded=any(r.noise_seeded for r in reports),
        noise_source=reports[0].noise_source if reports else "",
        ledger=acc.ledger, steps=steps)


def _step_rows(step, epsilon, delta, meta, name):
    """Ledger rows of ``step`` at finite ``(epsilon, delta)``, its plan on ``meta``."""
    if getattr(step, "_budget_plan", None) is not None:
        with _budget_set(step, epsilon, delta):
            return [LedgerEntry(name, _plan_event(step._budget_plan(meta)))]
    raise ValueError(
        f"Step {name!r} ({type(step).__name__}) has no public budget plan "
        f"(_budget_plan(meta)), so its releases at epsilon={epsilon!r} cannot be composed "
        f"exactly. Set its epsilon and delta yourself and check privacy_report(fitted).")


def _gaussian_only(step, delta):
    """Whether ``step``'s plan is made of (non-sampled) Gaussian releases only."""
    if getattr(step, "_budget_plan", None) is None:  # nothing shows it is Gaussian
        return False
    try:
        with _budget_set(step, 1.0, delta):
            plan = step._budget_plan({"n_users": 10 ** 6, "n_features": 1}).calibrate()
    except Exception:
        return False
    return all(p.mechanism == "gaussian" and p.sampling_rate == 1.0
               and p.threshold_delta == 0.0 for p in plan.phases)


def _normalised_shares(names, shares):
    if shares is None:
        return {n: 1.0 / len(names) for n in names}
    resolved = {}
    for key, value in dict(shares).items():
        matches = [n for n in names if n == key or n.split("__")[-1] == key]
        if len(matches) != 1:
            raise ValueError(
                f"shares has key {key!r}, which names {len(matches)} private step(s) of "
                f"{names}; use the full step path (scikit-learn parameter prefix).")
        if not (isinstance(value, (int, float, np.floating)) and value > 0
                and math.isfinite(value)):
            raise ValueError(f"shares[{key!r}] must be a positive number, got {value!r}.")
        resolved[matches[0]] = float(value)
    missing = [n for n in names if n not in resolved]
    if missing:
        raise ValueError(f"shares gives no share to the private step(s) {missing}; give "
                         f"every private step of {names} a positive share.")
    total = sum(resolved.values())
    return {n: resolved[n] / total for n in names}


def split_budget(estimator, *, epsilon, delta=1e-6, shares=None, n_users=None,
                 n_features=None):
    """A clone of ``estimator`` whose private steps compose exactly to ``(epsilon, delta)``.

    Every step with ``epsilon`` and ``delta`` parameters (at any depth) gets
    ``epsilon_i = c * share_i * epsilon``, ``c`` solved so that the exact
    composition spends ``epsilon`` at ``delta`` (never more, within 1e-9 relative).

    Parameters
    ----------
    estimator : estimator, Pipeline or composite
        Not modified.
    epsilon : float
        Budget of the whole object in ``(0, inf]`` (``inf``: every step non-private).
    delta : float, default=1e-6
        δ in ``(0, 1)``; every step is calibrated at it.
    shares : dict of str to float, default=None
        Relative ε of each private step, keyed by its path (e.g.
        ``"columntransformer__num"``) or unambiguous name; ``None``: equal shares.
    n_users, n_features : int, default=None
        Public metadata, needed only for a step whose plan is not all Gaussian.

    Returns
    -------
    estimator : clone
        Unfitted, with every private step's ``epsilon`` and ``delta`` set.

    Raises
    ------
    ValueError
        No private step; bad shares; a non-Gaussian plan without ``n_users``.

    Notes
    -----
    All-Gaussian plans are composed as their exact μ-GDP equivalent, other plans
    as built on ``n_users``/``n_features`` (:ref:`privacy_report`, *Whole Pipelines*).

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdpp import PPSGDRegressor
    >>> from skdpp.privacy import split_budget
    >>> split_budget(make_pipeline(PPSGDRegressor()), epsilon=2.0)[-1].epsilon
    2.0
    """
    epsilon, delta = float(epsilon), float(delta)
    if not epsilon > 0:
        raise ValueError(f"epsilon must be in (0, inf], got {epsilon!r}.")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}; every step is "
                         "calibrated at it.")
    out = clone(estimator)
    leaves = _private_leaves(out)
    if not leaves:
        raise ValueError(
            f"{type(estimator).__name__} has no private step (no step with epsilon and "
            "delta parameters): nothing to split. Use skdpp's estimators and private "
            "transformers.")
    names = [n for n, _ in leaves]
    weights = _normalised_shares(names, shares)
    if math.isinf(epsilon):
        for _, leaf in leaves:
            leaf.set_params(epsilon=np.inf, delta=delta)
        return out
    planned = [(name, leaf) for name, leaf in leaves if not _gaussian_only(leaf, delta)]
    if planned and n_users is None:
        raise ValueError(
            f"Step {planned[0][0]!r} ({type(planned[0][1]).__name__}) makes "
            "non-Gaussian releases: its plan depends on the public number of users. "
            "Pass split_budget(..., n_users=<number of users>, n_features=<columns it "
            "sees>).")
    meta = {"n_users": int(n_users or 0), "n_features": int(n_features or 1)}

    def composed(log_c):
        c = math.exp(log_c)
        rows = []
        for name, leaf in leaves:
            eps_i = c * weights[name] * epsilon
            if (name, leaf) in planned:
                rows += _step_rows(leaf, eps_i, delta, meta, name)
            else:
                mu = gaussian_mu(eps_i, delta)
                rows.append(LedgerEntry(name, GaussianEvent(1.0 / mu)))
        return _compose(rows).get_epsilon(delta) - epsilon

    if len(leaves) == 1:
        c = 1.0 / weights[names[0]]
    else:
        hi = math.log(1.0 / max(weights.values()))  # one step alone spends epsilon
        lo = hi - 1.0
        while composed(lo) >= 0.0:
            lo -= 1.0
        c = math.exp(largest_root_below(composed, lo, hi)) if composed(hi) > 0 \
            else math.exp(hi)
    for name, leaf in leaves:
        leaf.set_params(epsilon=float(c * weights[name] * epsilon), delta=delta)
    return out
