"""The privacy report attached to every fitted skdpp estimator.

:meth:`PrivacyReport.from_accountant` builds it from a fit's accountant ledger
and raises :class:`~skdpp.exceptions.PrivacyBudgetError` when the spent budget
exceeds the requested one (:ref:`report_building`).

Examples
--------
>>> from skdpp.privacy import GaussianEvent, PrivacyAccountant, PrivacyReport
>>> acc = PrivacyAccountant().compose(GaussianEvent(9.45), count=5, phase="iterations",
...                                   sensitivity=2.0, clip_norm=1.0)
>>> report = PrivacyReport.from_accountant(acc, epsilon=1.0, delta=1e-6, n_users=1000,
...                                        released=("V",), local=("U",))
>>> report.accountant, round(report.epsilon_spent, 4), report.phases[0].count
('exact-gdp', 0.9996, 5)
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..exceptions import PrivacyBudgetError
from .accounting import PrivacyAccountant, _flatten
from .events import NonPrivateEvent, PoissonSampledEvent, ThresholdEvent

__all__ = ["NON_PRIVATE_NOTE", "PhaseReport", "PrivacyReport", "non_private_wording"]

_REL_TOL = 1e-9

#: The note of every report whose noise is seeded (:attr:`PrivacyReport.noise_seeded`).
SEEDED_NOISE_NOTE = (
    "noise reproducible from random_state: the guarantee holds only while the seed is "
    "secret; use random_state=None in deployment.")
#: The note of every non-private (``epsilon=inf``) report.
NON_PRIVATE_NOTE = (
    "Non-private: epsilon=inf was requested; no noise is added (delta spent 0), every "
    "automatic bound is the exact quantile or location of the data, and no privacy "
    "guarantee holds.")

# How the notes of a fit describe its releases, and what they are without noise.
_EXACT_WORDING = (
    (re.compile(r"\breleased by a noisy (bisection|binary search)"),
     r"computed exactly (no noise) by \1"),
    (re.compile(r"\b(a|an) noisy (bisection|binary search)"), r"an exact \2 (no noise)"),
    (re.compile(r"\bnoisy (bisection|binary search)"), r"exact \1 (no noise)"),
    (re.compile(r"\bGaussian count(s?)\b"), r"exact count\1"),
    (re.compile(r"\b(a|an) private (quantile|location|median)"), r"the exact \2"),
    (re.compile(r"\bprivate (quantile|location|median)"), r"exact \1"),
    (re.compile(r"\bits noisy count \(phase '(\w+)'\) clears a threshold; [^.;]*"
                r"with probability at most delta(/\d+)?"),
     r"its count (phase '\1') is positive (at epsilon=inf every item present is "
     r"published)"),
    (re.compile(r"\bselected (under DP|privately)\b"), "selected exactly (no noise)"),
    (re.compile(r"\bthe DP '(\w+)' release"), r"the exact '\1' release"),
    (re.compile(r"\bselected by the exponential mechanism\b"),
     "selected by the argmax of its scores (the exponential mechanism without noise)"),
    (re.compile(r"\b(a|an) noisy\b"), "an exact"),
    (re.compile(r"\bnoisy\b"), "exact"),
    (re.compile(r"\bNoisy\b"), "Exact"),
)


def non_private_wording(note):
    """A fit's note as it holds without noise (``epsilon=inf``): no "noisy", no private quantile.

    Examples
    --------
    >>> non_private_wording("the 0.5-quantile, released by a noisy bisection")
    'the 0.5-quantile, computed exactly (no noise) by bisection'
    """
    for pattern, replacement in _EXACT_WORDING:
        note = pattern.sub(replacement, note)
    return note


@dataclass(frozen=True)
class PhaseReport:
    """Summary of one budget phase (:ref:`privacy_report`).

    Attributes
    ----------
    name : str
    share : float or None
        Planned fraction of the zCDP budget (normalised), if known.
    mechanism : str
        Mechanism(s) used, e.g. ``"gaussian"``.
    sensitivity, clip_norm : float, tuple of float or None
        Stated sensitivity of each release and its clip norm (a tuple when it varies).
    noise_multiplier : float, tuple of float or None
        z of each release (Gaussian, Laplace) or per-selection ε; ``0.0`` without noise.
    count : int
        Total number of releases in the phase.
    sampling_rate : float or tuple of float
        Poisson sampling rate (1.0 when not subsampled).
    epsilon : float or None
        ε of the phase alone at the report's δ (not additive across phases).
    """

    name: str
    share: Optional[float]
    mechanism: str
    sensitivity: object
    noise_multiplier: object
    count: int
    sampling_rate: object
    clip_norm: object
    epsilon: Optional[float] = None


@dataclass(frozen=True, kw_only=True)
class PrivacyReport:
    """User-level differential-privacy guarantee of a fitted estimator.

    Read more in the :ref:`User Guide <privacy_report>`.

    Attributes
    ----------
    epsilon, delta : float
        The requested budget.
    epsilon_spent : float
        ε composed over every release (at ``delta_spent``).
    delta_spent : float
        δ used (0 for pure-ε plans met by basic composition and for ``epsilon=inf``).
    accountant : str
        ``"exact-gdp"``, ``"rdp"``, ``"rdp-zero-out"``, ``"pure"``, ``"non-private"``
        or ``"none"`` (:ref:`accounting`).
    unit : str, default="user"
    neighbouring : str, default="replace-one-user"
    n_users : int
        Number of users (public).
    phases : tuple of PhaseReport
        The budget plan as executed.
    released, local : tuple of str
        What is released (the DP "billboard") and what is kept local (joint DP).
    notes : tuple of str
        Free-text notes (deviations, conventions).
    not_covered : tuple of str
        Released quantities the guarantee does NOT cover (e.g. an inferred item
        catalogue): the headline says so and :attr:`is_private` is False.
    noise_seeded : bool, default=False
        The noise was seeded from a user-supplied ``random_state``; ``notes`` then
        start with :data:`SEEDED_NOISE_NOTE`.
    noise_source : str, default=""
        Where the noise came from; empty: the configured source
        (:func:`skdpp.privacy.mechanisms.noise_source`).
    ledger : tuple of LedgerEntry, default=()
        The fit's (public) ledger, for :func:`skdpp.privacy.privacy_report`; not in
        ``to_dict``, ``str`` or equality.
    """

    epsilon: float
    delta: float
    epsilon_spent: float
    delta_spent: float
    accountant: str
    unit: str = "user"
    neighbouring: str = "replace-one-user"
    n_users: int
    phases: tuple = ()
    released: tuple = ()
    local: tuple = ()
    notes: tuple = ()
    not_covered: tuple = ()
    noise_seeded: bool = False
    noise_source: str = ""
    ledger: tuple = field(default=(), repr=False, compare=False)
    _title = "PrivacyReport"  # the first word of ``str`` and HTML (not a field)

    def __post_init__(self):
        if not self.noise_source:  # the fit's configured source (it is built in the fit)
            from .mechanisms import noise_source

            object.__setattr__(self, "noise_source", noise_source())
        # the seed note follows the flag (never one without the other)
        notes = tuple(n for n in self.notes if n != SEEDED_NOISE_NOTE)
        if self.noise_seeded and not math.isinf(self.epsilon):
            notes = (SEEDED_NOISE_NOTE,) + notes
        object.__setattr__(self, "notes", notes)
        object.__setattr__(self, "noise_seeded", bool(self.noise_seeded))

    @property
    def is_private(self):
        """bool: the guarantee is finite and covers everything released."""
        return math.isfinite(self.epsilon_spent) and not self.not_covered

    @classmethod
    def from_accountant(cls, accountant, *, epsilon, delta, n_users, released=(),
                        local=(), shares=None, notes=(), not_covered=(), noise_seeded=False):
        """Build the report from an accountant's ledger and check the budget.

        ``epsilon`` in ``(0, inf]`` and ``delta`` in ``[0, 1)``: the requested budget;
        ``shares``: each phase's planned share; the other arguments fill the attributes
        of the same name. Raises :class:`~skdpp.exceptions.PrivacyBudgetError` if the
        spent ε exceeds ``epsilon`` (relative tolerance 1e-9).
        """
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(
                f"`accountant` must be a PrivacyAccountant, got {type(accountant).__name__}.")
        epsilon, delta = float(epsilon), float(delta)
        if not epsilon > 0.0:
            raise ValueError(f"`epsilon` must be in (0, inf], got {epsilon!r}.")
        if not 0.0 <= delta < 1.0:
            raise ValueError(f"`delta` must be in [0, 1), got {delta!r}.")
        method = accountant.method
        notes = tuple(notes)
        if method == "none":
            eps_spent, delta_spent = 0.0, 0.0
        elif method == "non-private":
            # No noise, no guarantee: there is no delta to spend.
            eps_spent, delta_spent = math.inf, 0.0
        elif method == "pure" and accountant.threshold_delta == 0.0:
            basic = accountant.pure_epsilon()
            if basic <= epsilon * (1 + _REL_TOL) or delta == 0.0:
                eps_spent, delta_spent = basic, 0.0
            else:
                eps_spent, delta_spent = accountant.get_epsilon(delta), delta
        else:
            eps_spent, delta_spent = accountant.get_epsilon(delta), delta
        if math.isinf(epsilon):
            notes = tuple(non_private_wording(n) for n in notes) + (NON_PRIVATE_NOTE,)
        elif eps_spent > epsilon * (1 + _REL_TOL):
            raise PrivacyBudgetError(
                f"The fit spent epsilon={eps_spent:.6g} at delta={delta_spent:g} "
                f"(accountant {method!r}), more than the requested epsilon={epsilon:g}. "
                "Increase the noise (re-calibrate the plan) or request a larger epsilon.")
        total_share = sum(float(v) for v in shares.values()) if shares else None
        groups = {}
        for entry in accountant.ledger:
            groups.setdefault(entry.phase, []).append(entry)
        phase_reports = [
            _phase_report(name, float(shares[name]) / total_share
                          if shares and name in shares and total_share else None,
                          entries, delta, accountant.orders)
            for name, entries in groups.items()]
        return cls(epsilon=epsilon, delta=delta, epsilon_spent=float(eps_spent),
                   delta_spent=float(delta_spent), accountant=method,
                   n_users=int(n_users), phases=tuple(phase_reports),
                   released=tuple(released), local=tuple(local), notes=notes,
                   not_covered=tuple(not_covered), noise_seeded=bool(noise_seeded),
                   ledger=accountant.ledger)

    def to_dict(self):
        """The report as plain Python types (phases as a list of dicts)."""
        out = asdict(self)
        out.pop("ledger", None)  # events, not plain types (see the attribute)
        out["phases"] = [asdict(p) for p in self.phases]
        for key in ("released", "local", "notes", "not_covered"):
            out[key] = list(out[key])
        return out

    def _rows(self):
        header = ["phase", "share", "mechanism", "sensitivity", "noise", "count",
                  "sampling", "clip", "eps alone"]
        return header, [[p.name, _fmt(p.share), p.mechanism, _fmt(p.sensitivity),
                         _fmt(p.noise_multiplier), str(p.count), _fmt(p.sampling_rate),
                         _fmt(p.clip_norm), _fmt(p.epsilon)] for p in self.phases]

    def _headline(self):
        if not math.isfinite(self.epsilon_spent) or math.isinf(self.epsilon):
            return (f"NON-PRIVATE (requested epsilon={_fmt(self.epsilon)}; "
                    f"spent epsilon={_fmt(self.epsilon_spent)})")
        head = (f"({_fmt(self.epsilon_spent)}, {_fmt(self.delta_spent)})-DP "
                f"[requested ({_fmt(self.epsilon)}, {_fmt(self.delta)})]")
        if self.not_covered:
            head = (f"NOT FULLY PRIVATE: {', '.join(self.not_covered)} released outside "
                    f"the guarantee; the rest is {head}")
        return head

    def _summary(self):
        """The headline and the lines under it (shared by ``str`` and HTML)."""
        return [self._headline(),
                f"unit: {self.unit}, neighbouring: {self.neighbouring}, "
                f"n_users: {self.n_users}, accountant: {self.accountant}",
                f"noise: {self.noise_source}",
                f"released: {', '.join(self.released) or '-'}; "
                f"kept local: {', '.join(self.local) or '-'}"]

    def __str__(self):
        head, *rest = self._summary()
        lines = [f"{self._title}: {head}"] + ["  " + line for line in rest]
        header, rows = self._rows()
        if rows:
            widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
            fmt = "  " + "  ".join("{:<%d}" % w for w in widths)
            lines.append(fmt.format(*header).rstrip())
            lines.append("  " + "  ".join("-" * w for w in widths))
            lines.extend(fmt.format(*r).rstrip() for r in rows)
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def _repr_html_(self):
        esc = html.escape
        header, rows = self._rows()
        parts = [f"<div><strong>{self._title}</strong>: "
                 + "<br>".join(esc(line) for line in self._summary())]
        if rows:
            parts.append("<table><thead><tr>"
                         + "".join(f"<th>{esc(h)}</th>" for h in header)
                         + "</tr></thead><tbody>")
            for r in rows:
                parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
            parts.append("</tbody></table>")
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in self.notes)
                         + "</ul>")
        parts.append("</div>")
        return "".join(parts)


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return "/".join(_fmt(v) for v in value)
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


def _unique(values):
    vals = tuple(dict.fromkeys(values))
    return (vals[0] if len(vals) == 1 else vals) if vals else None


def _phase_report(name, share, entries, delta, orders):
    count = 0
    noise, rates, mechs = [], [], []
    exact = True  # every release of the phase is the exact value (epsilon=inf)
    for entry in entries:
        atoms = []
        _flatten(entry.event, entry.count, atoms)
        for atom, c in atoms:
            if isinstance(atom, ThresholdEvent):
                continue  # its delta is in the phase's epsilon, not a release count
            exact = exact and isinstance(atom, NonPrivateEvent)
            count += c
            rate = 1.0
            if isinstance(atom, PoissonSampledEvent):
                rate, atom = atom.sampling_probability, atom.event
            rates.append(rate)
            noise.append(getattr(atom, "noise_multiplier",  # Gaussian, Laplace
                                 getattr(atom, "epsilon", 0.0)))  # exponential, none
        mechs.append(entry.mechanism)
    standalone = PrivacyAccountant(orders=orders)
    for entry in entries:
        standalone.compose(entry.event, entry.count, phase=name)
    phase_eps = standalone.get_epsilon(delta)
    mechanism = _unique(mechs)
    if isinstance(mechanism, tuple):
        mechanism = "+".join(str(m) for m in mechanism)
    if exact and count:
        mechanism = f"exact ({mechanism} without noise)"
    return PhaseReport(
        name=name, share=share, mechanism=str(mechanism), count=int(count),
        sensitivity=_unique([e.sensitivity for e in entries]),
        noise_multiplier=_unique(noise), sampling_rate=_unique(rates) or 1.0,
        clip_norm=_unique([e.clip_norm for e in entries]), epsilon=float(phase_eps))
