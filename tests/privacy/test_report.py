"""Tests for skdpp.privacy.report."""

import dataclasses
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.exceptions import PrivacyBudgetError
from skdpp.privacy.accounting import PrivacyAccountant
from skdpp.privacy.calibration import Phase, calibrate, plan_events
from skdpp.privacy.events import (
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    PoissonSampledEvent,
)
from skdpp.privacy.report import PhaseReport, PrivacyReport


def _fit_like_accountant(z_init=3.0, z_iter=8.0, n_iter=10):
    acc = PrivacyAccountant()
    acc.compose(GaussianEvent(z_init), phase="init", mechanism="gaussian_sum",
                sensitivity=2.0, clip_norm=1.0)
    for _ in range(n_iter):
        acc.compose(GaussianEvent(z_iter), phase="iterations", mechanism="gaussian_sum",
                    sensitivity=2.0, clip_norm=1.0)
    return acc


def _report(acc, epsilon=3.0, delta=1e-6, **kw):
    return PrivacyReport.from_accountant(acc, epsilon=epsilon, delta=delta, n_users=100,
                                        released=("V",), local=("U",), **kw)


def test_report_groups_ledger_by_phase():
    report = _report(_fit_like_accountant(), shares={"init": 1.0, "iterations": 3.0})
    assert [p.name for p in report.phases] == ["init", "iterations"]
    init, it = report.phases
    assert (it.count, it.noise_multiplier, it.sensitivity, it.clip_norm,
            it.sampling_rate, it.mechanism) == (10, 8.0, 2.0, 1.0, 1.0, "gaussian_sum")
    assert_allclose([init.share, it.share], [0.25, 0.75], rtol=1e-15)


def test_report_epsilon_spent_from_accountant():
    acc = _fit_like_accountant()
    report = _report(acc)
    assert report.accountant == "exact-gdp"
    assert_allclose(report.epsilon_spent, acc.get_epsilon(1e-6), rtol=1e-15)
    assert report.delta_spent == 1e-6
    assert (report.unit, report.neighbouring, report.n_users) == (
        "user", "replace-one-user", 100)


def test_phase_standalone_epsilon():
    report = _report(_fit_like_accountant())
    alone = PrivacyAccountant().compose(GaussianEvent(8.0), 10, phase="x").get_epsilon(1e-6)
    assert_allclose(report.phases[1].epsilon, alone, rtol=1e-12)


def test_report_is_frozen():
    report = _report(_fit_like_accountant())
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.epsilon = 10.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.phases[0].count = 3


def test_overspent_budget_raises():
    acc = _fit_like_accountant(z_init=0.5)
    with pytest.raises(PrivacyBudgetError, match="requested epsilon=1"):
        _report(acc, epsilon=1.0)


def test_calibrated_plan_passes_budget_check():
    phases = [Phase("init", 0.2, "gaussian"), Phase("iterations", 0.8, "gaussian", count=7)]
    params = calibrate(phases, epsilon=1.0, delta=1e-6)
    acc = PrivacyAccountant()
    acc.compose(plan_events(phases[:1], params), phase="init")
    for _ in range(7):
        acc.compose(GaussianEvent(params["iterations"]), phase="iterations")
    report = _report(acc, epsilon=1.0)
    assert report.epsilon_spent <= 1.0 * (1 + 1e-9)


def test_gaussian_with_delta_zero_overspends():
    with pytest.raises(PrivacyBudgetError):
        _report(_fit_like_accountant(), delta=0.0)


def test_pure_plan_reports_zero_delta():
    acc = PrivacyAccountant()
    acc.compose(LaplaceEvent(4.0), phase="counts", sensitivity=2.0)
    acc.compose(ExponentialEvent(0.25), 2, phase="select", sensitivity=1.0)
    report = _report(acc, epsilon=1.0, delta=1e-6)
    assert report.accountant == "pure"
    assert report.delta_spent == 0.0
    assert_allclose(report.epsilon_spent, 0.75, rtol=1e-15)


def test_non_private_report():
    acc = _fit_like_accountant()
    acc.compose(NonPrivateEvent(), phase="iterations")
    report = _report(acc, epsilon=np.inf)
    assert report.accountant == "non-private"
    assert report.epsilon_spent == math.inf
    assert not report.is_private
    assert "NON-PRIVATE" in str(report)
    assert any("Non-private" in n for n in report.notes)


def test_non_private_release_with_finite_epsilon_raises():
    acc = _fit_like_accountant()
    acc.compose(NonPrivateEvent(), phase="leak")
    with pytest.raises(PrivacyBudgetError):
        _report(acc, epsilon=1.0)


def test_sampling_rate_reported():
    acc = PrivacyAccountant().compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 100,
                                      phase="sgd")
    report = _report(acc, epsilon=10.0)
    assert (report.accountant, report.phases[0].sampling_rate, report.phases[0].count) == (
        "rdp-zero-out", 0.01, 100)


def test_to_dict_round_trips_plain_types():
    d = _report(_fit_like_accountant()).to_dict()
    assert d["released"] == ["V"] and d["local"] == ["U"]
    assert isinstance(d["phases"], list) and d["phases"][1]["count"] == 10
    assert set(d) >= {"epsilon", "delta", "epsilon_spent", "delta_spent", "accountant",
                      "unit", "neighbouring", "n_users", "phases", "notes"}


def test_str_is_a_table():
    text = str(_report(_fit_like_accountant(), notes=("a note",)))
    lines = text.splitlines()
    assert lines[0].startswith("PrivacyReport: (")
    assert any(line.split()[:1] == ["iterations"] for line in lines)
    assert "replace-one-user" in text and "note: a note" in text
    assert all(line == line.rstrip() for line in lines)


def test_repr_html_escapes():
    html = _report(_fit_like_accountant(), notes=("<b>x</b>",))._repr_html_()
    assert "<table>" in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_empty_accountant_report():
    report = _report(PrivacyAccountant())
    assert (report.accountant, report.epsilon_spent, report.delta_spent, report.phases) == (
        "none", 0.0, 0.0, ())


@pytest.mark.parametrize("kwargs, match", [(dict(epsilon=0.0), "epsilon"),
                                           (dict(delta=1.0), "delta")])
def test_from_accountant_validates(kwargs, match):
    args = dict(epsilon=1.0, delta=1e-6, n_users=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        PrivacyReport.from_accountant(PrivacyAccountant(), **args)


def test_phase_report_fields():
    names = [f.name for f in dataclasses.fields(PhaseReport)]
    assert names[:8] == ["name", "share", "mechanism", "sensitivity", "noise_multiplier",
                         "count", "sampling_rate", "clip_norm"]


def test_not_covered_releases_make_the_report_not_private():
    from skdpp.privacy import GaussianEvent, PrivacyAccountant, PrivacyReport

    acc = PrivacyAccountant().compose(GaussianEvent(9.45), count=5, phase="iterations")
    covered = PrivacyReport.from_accountant(acc, epsilon=1.0, delta=1e-6, n_users=10)
    partial = PrivacyReport.from_accountant(acc, epsilon=1.0, delta=1e-6, n_users=10,
                                            not_covered=("item_ids_",))
    assert covered.is_private and not partial.is_private
    assert str(partial).splitlines()[0].startswith(
        "PrivacyReport: NOT FULLY PRIVATE: item_ids_ released outside the guarantee")
    assert partial.to_dict()["not_covered"] == ["item_ids_"]


def test_parallel_branches_are_charged_once_and_must_repeat_branch_zero():
    import numpy as np

    from skdpp.privacy import BudgetPlan, Releaser

    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add_rest("iterations", count=1)
    release = Releaser(plan.calibrate(), np.random.default_rng(0))
    for t in range(3):  # three rounds on disjoint users
        release.gaussian("iterations", np.zeros(2), sensitivity=2.0, branch=t)
    report = release.report(n_users=100, released=("U",), local=())
    assert report.phases[0].count == 1
    assert report.epsilon_spent == pytest.approx(1.0, rel=1e-9)
    assert "parallel" in report.phases[0].mechanism
    # a branch whose release differs from branch 0's is refused
    with pytest.raises(RuntimeError, match="branch 0"):
        release.gaussian("iterations", np.zeros(2), sensitivity=4.0, branch=3)


# --------------------------------------------------------------------------- #
# The seed caveat (issue 19): the report says when the noise is reproducible
# --------------------------------------------------------------------------- #
def test_seeded_report_carries_the_note_everywhere():
    from skdpp.privacy.report import SEEDED_NOISE_NOTE

    seeded = _report(_fit_like_accountant(), notes=("a note",), noise_seeded=True)
    plain = _report(_fit_like_accountant(), notes=("a note",))
    assert seeded.noise_seeded is True and plain.noise_seeded is False
    assert seeded.notes == (SEEDED_NOISE_NOTE, "a note") and plain.notes == ("a note",)
    assert f"note: {SEEDED_NOISE_NOTE}" in str(seeded)
    assert "random_state" not in str(plain)
    d = seeded.to_dict()
    assert d["noise_seeded"] is True and d["notes"][0] == SEEDED_NOISE_NOTE
    assert plain.to_dict()["noise_seeded"] is False
    assert "guarantee holds only while the seed is secret" in seeded._repr_html_()
    assert "use random_state=None in deployment" in SEEDED_NOISE_NOTE


def test_seed_note_follows_the_flag_only():
    """The flag decides the note: never one without the other, never twice."""
    from skdpp.privacy.report import SEEDED_NOISE_NOTE

    forged = _report(_fit_like_accountant(), notes=(SEEDED_NOISE_NOTE,))
    assert forged.notes == ()
    twice = _report(_fit_like_accountant(), notes=(SEEDED_NOISE_NOTE,), noise_seeded=True)
    assert twice.notes == (SEEDED_NOISE_NOTE,)
    replaced = dataclasses.replace(twice, noise_seeded=False)
    assert SEEDED_NOISE_NOTE not in replaced.notes
    with pytest.raises(dataclasses.FrozenInstanceError):
        twice.noise_seeded = False
    # epsilon=inf: no guarantee to qualify, the flag stays but no note
    acc = _fit_like_accountant()
    acc.compose(NonPrivateEvent(), phase="iterations")
    inf = _report(acc, epsilon=np.inf, noise_seeded=True)
    assert inf.noise_seeded and SEEDED_NOISE_NOTE not in inf.notes


_SEEDS = {"None": (lambda: None, False), "int": (lambda: 3, True),
          "RandomState": (lambda: np.random.RandomState(3), True),
          "Generator": (lambda: np.random.default_rng(3), True)}


@pytest.mark.parametrize("name", sorted(_SEEDS))
def test_releaser_report_knows_whether_the_noise_is_seeded(name):
    from skdpp.privacy import BudgetPlan, Releaser
    from skdpp.utils._random import FitRandomness

    make, expected = _SEEDS[name]
    randomness = FitRandomness(make())
    assert randomness.seeded is expected
    plan = BudgetPlan(epsilon=1.0, delta=1e-6)
    plan.add_rest("mean")
    release = Releaser(plan.calibrate(), randomness.noise, seeded=randomness.seeded)
    release.gaussian_sum("mean", np.ones((3, 1)), clip_norm=1.0)
    assert release.report(n_users=3, released=("mean_",), local=()).noise_seeded is expected


class _Unaware:
    """Broken variant: a FitRandomness that does not tell seeded from fresh noise."""

    def __init__(self, random_state):
        from skdpp.utils._random import FitRandomness

        inner = FitRandomness(random_state)
        self.noise, self.public, self.key = inner.noise, inner.public, inner.key
        self.seeded = False


@pytest.mark.parametrize("broken", [False, True], ids=["fixed", "unaware-randomness"])
@pytest.mark.parametrize("name", ["None", "int", "RandomState"])
def test_fitted_estimator_report_says_whether_noise_is_seeded(name, broken, monkeypatch):
    # (Estimators accept None, an int or a RandomState; Generators are
    # covered at the FitRandomness/Releaser level above and by the search.)
    import skdpp.base
    from skdpp.privacy.report import SEEDED_NOISE_NOTE
    from tests._toy import ToyPersonalizedMean

    if broken:
        monkeypatch.setattr(skdpp.base, "FitRandomness", _Unaware)
    make, expected = _SEEDS[name]
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(20), 3)
    X, y = rng.normal(size=(60, 2)), rng.normal(size=60)
    report = ToyPersonalizedMean(random_state=make()).fit(X, y, groups=groups).privacy_report_
    truthful = (report.noise_seeded is expected
                and (SEEDED_NOISE_NOTE in str(report)) is expected)
    assert truthful is not (broken and expected)


# --------------------------------------------------------------------------- #
# epsilon=inf: no delta spent, no noise, exact bounds (all five estimators)
# --------------------------------------------------------------------------- #
def _five_non_private_fits():
    import skdpp

    rng = np.random.default_rng(0)
    n, m = 40, 6
    g = np.repeat(np.arange(n), m)
    X = rng.normal(size=(n * m, 3))
    y = X @ [1.0, 2.0, 3.0] + rng.normal(size=n * m) + 3.0
    items = rng.integers(0, 15, size=(n * m, 1))
    ratings = rng.integers(1, 6, size=n * m).astype(float)
    kw = dict(epsilon=np.inf, random_state=0)
    return {
        "fedrep": skdpp.PrivateFedRepRegressor(n_components=2, **kw).fit(X, y, groups=g),
        "altmin": skdpp.PrivAltMinRegressor(n_components=2, **kw).fit(X, y, groups=g),
        "ppsgd": skdpp.PPSGDRegressor(**kw).fit(X, y, groups=g),
        "mf": skdpp.AdaptiveWeightMF(**kw).fit(items, ratings, groups=g),
        "jl": skdpp.JLMarginClassifier(**kw).fit(X, y > 3, groups=g),
    }


@pytest.fixture(scope="module")
def non_private_fits():
    return _five_non_private_fits()


@pytest.mark.parametrize("name", ["fedrep", "altmin", "ppsgd", "mf", "jl"])
def test_non_private_report_spends_no_delta_and_adds_no_noise(non_private_fits, name):
    report = non_private_fits[name].privacy_report_
    text, d = str(report), report.to_dict()
    assert d["delta_spent"] == 0.0 and report.delta_spent == 0.0
    assert d["epsilon_spent"] == math.inf and "NON-PRIVATE" in text
    assert "noisy" not in text.lower() and "noisy" not in repr(d).lower()
    assert d["phases"] and all(p["mechanism"].startswith("exact")
                               and p["noise_multiplier"] in (0.0, None) for p in d["phases"])
    assert "delta spent 0" in text
    if any(p["name"] == "clip" for p in d["phases"]):  # automatic bounds: exact quantiles
        assert "exact quantile" in text


def test_non_private_wording_of_the_automatic_bounds():
    from skdpp.privacy.report import non_private_wording

    private = ("clip_norm='auto': the 0.5-quantile of a per-user statistic, released by a "
               "noisy bisection over a public log grid (6 Gaussian counts of sensitivity 1, "
               "phase 'clip'); the intercept is a private location.")
    exact = non_private_wording(private)
    assert "noisy" not in exact and "Gaussian" not in exact and "private" not in exact
    assert "computed exactly (no noise) by bisection" in exact and "6 exact counts" in exact
    assert non_private_wording(exact) == exact  # idempotent


def test_private_report_keeps_its_delta_and_wording():
    # the broken variant of the rule: a finite epsilon keeps delta and "noisy"
    acc = PrivacyAccountant().compose(GaussianEvent(3.0), count=6, phase="clip",
                                      sensitivity=1.0)
    note = "released by a noisy bisection (6 Gaussian counts of sensitivity 1)"
    private = PrivacyReport.from_accountant(acc, epsilon=5.0, delta=1e-6, n_users=10,
                                            notes=(note,))
    assert private.delta_spent == 1e-6 and note in private.notes
    assert private.phases[0].mechanism == "gaussian"
