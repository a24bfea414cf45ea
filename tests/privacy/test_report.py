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
