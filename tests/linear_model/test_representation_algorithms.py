"""FedRep / AltMin through the algorithm interface (issue 21): the plan the search and
the report use is the plan the run spends, and it is a function of public values."""

import warnings

import numpy as np
import pytest

from skdpp import PrivAltMinRegressor, PrivateFedRepRegressor
from skdpp.exceptions import PrivacyBudgetError
from skdpp.linear_model._algorithms import altmin, fedrep
from skdpp.linear_model._algorithms import representation as rep

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

CASES = [
    (PrivateFedRepRegressor, {}),
    (PrivateFedRepRegressor, {"init": "private_pairwise", "clip_norm": 1.0, "max_iter": 3}),
    (PrivateFedRepRegressor, {"batch_mode": "disjoint", "fit_intercept": False,
                              "budget_shares": {"cold_start": 0.0, "init": 0.2}}),
    (PrivAltMinRegressor, {}),
    (PrivAltMinRegressor, {"schedule": "disjoint", "max_iter": 3, "init": "random"}),
    (PrivAltMinRegressor, {"max_iter": 2, "budget_shares": {"clip": 0.3}}),
]


def _data(seed=0, n_users=60, m=6, d=4):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), m)
    X = rng.standard_normal((g.size, d))
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(g.size)
    return X, y, g


def _fit(cls, params, X, y, g):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(epsilon=2.0, random_state=0, **params).fit(X, y, groups=g)


def _phases(phases):
    return [(p.name, p.count, round(p.share, 12)) for p in phases]


@pytest.mark.parametrize("cls, params", CASES)
def test_plan_is_what_the_run_spends(cls, params):
    X, y, g = _data()
    est = _fit(cls, params, X, y, g)
    planned = cls(epsilon=2.0, **params)._budget_plan(
        {"n_users": 60, "n_features": 4}).calibrate()
    assert _phases(planned.phases) == _phases(est.privacy_report_.phases)
    assert est.privacy_report_.epsilon_spent == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("cls, params", CASES[:1] + CASES[3:4])
def test_plan_depends_on_public_values_only(cls, params):
    """The same plan for other data with the same (n_users, n_features)."""
    a = _fit(cls, params, *_data(0))
    X, y, g = _data(1)
    b = _fit(cls, params, X * 1e3, y * 1e-2, g)
    assert _phases(a.privacy_report_.phases) == _phases(b.privacy_report_.phases)
    config = a._fit_config({"n_users": 60, "n_features": 4})
    with pytest.raises(AttributeError):  # frozen: the run cannot change its configuration
        config.max_iter = 7


@pytest.mark.parametrize("module, cls", [(fedrep, PrivateFedRepRegressor),
                                         (altmin, PrivAltMinRegressor)])
def test_broken_plan_undercounting_the_iterations_is_caught(monkeypatch, module, cls):
    """Broken variant: a plan declaring one round fewer than the run releases. The fit
    then spends more than its target and raises; the test above would also fail."""
    X, y, g = _data()
    _fit(cls, {"max_iter": 2}, X, y, g)  # the correct plan passes
    monkeypatch.setattr(module, "plan", lambda config, meta: rep.plan(
        config, meta, iteration_releases=module._iteration_releases(config) - 1)[0])
    with pytest.raises(PrivacyBudgetError):
        _fit(cls, {"max_iter": 2}, X, y, g)


def test_budget_shares_keys_are_the_report_phases():
    X, y, g = _data()
    est = _fit(PrivateFedRepRegressor, {"budget_shares": {"init": 0.2, "cold_start": 0.05,
                                                          "clip": 0.1}}, X, y, g)
    shares = {p.name: p.share for p in est.privacy_report_.phases}
    assert set(rep.DEFAULT_SHARES) <= set(shares)
    assert (shares["init"], shares["cold_start"], shares["clip"]) == pytest.approx(
        (0.2, 0.05, 0.1))
    with pytest.raises(ValueError, match=r"budget_shares\['init'\] must be"):
        PrivateFedRepRegressor(budget_shares={"init": 1.5}).fit(X, y, groups=g)
    with pytest.raises(ValueError, match="must be a dict|'budget_shares' parameter"):
        PrivateFedRepRegressor(budget_shares=0.1).fit(X, y, groups=g)
