"""A fit its plan predicts useless releases one value, the cold-start level (or nothing).

:func:`skdpp.linear_model._auto.fallback_plan` replaces such a plan by one
exponential-mechanism selection (:func:`skdpp.privacy._quantile.private_median`):
its exact selection probabilities on neighbouring data sets are within
``exp(epsilon)`` of each other (a broken variant whose scores move by 2 is
caught), it lands among the users' values when :func:`median_found` says so
(and not always without that rule), and the estimators report exactly that
release.
"""

import functools
import warnings

import numpy as np
import pytest

from skdpp import AdaptiveWeightMF, PPSGDRegressor, PrivAltMinRegressor, PrivateFedRepRegressor
from skdpp.exceptions import UselessFitWarning
from skdpp.privacy import BudgetPlan, Releaser
from skdpp.privacy import _quantile
from skdpp.privacy.mechanisms import exponential_mechanism_probabilities


class _Recorder:
    """Stands in for a Releaser: records the scores and sensitivity of the selection."""

    def __init__(self):
        self.calls = []

    def exponential(self, phase, scores, *, sensitivity):
        self.calls.append((np.array(scores, dtype=float), float(sensitivity)))
        return int(np.argmax(scores))


def _selection_probabilities(values, epsilon):
    rec = _Recorder()
    _quantile.private_median(rec, "cold_start", lambda fn: fn(np.asarray(values, float)),
                             n_users=len(values))
    (scores, sensitivity), = rec.calls
    return exponential_mechanism_probabilities(scores, sensitivity=sensitivity,
                                               epsilon=epsilon)


def _max_log_ratio(values, epsilon):
    """Max over replacements of one user (extreme floats included) of |log p/p'|."""
    p = _selection_probabilities(values, epsilon)
    worst = 0.0
    for replacement in (1e308, -1e308, np.inf, -np.inf, np.nan, 5e-324, 0.0, -3.0, 1e4):
        other = np.array(values, dtype=float)
        other[3] = replacement
        q = _selection_probabilities(other, epsilon)
        with np.errstate(divide="ignore"):
            worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    return worst


VALUES = np.random.default_rng(0).normal(3.5, 0.6, size=40)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_private_median_is_epsilon_dp_on_neighbours(epsilon):
    assert _max_log_ratio(VALUES, epsilon) <= epsilon * (1 + 1e-9)


def test_broken_scores_are_caught(monkeypatch):
    # broken: each user counted twice (the scores move by 2 for sensitivity 1)
    original = _quantile.value_counts
    monkeypatch.setattr(_quantile, "value_counts",
                        lambda values, grid: 2.0 * original(values, grid))
    assert _max_log_ratio(VALUES, 1.0) > 1.5


def test_median_found_is_a_public_threshold_on_epsilon_times_users():
    assert not _quantile.median_found(0.1, 300)
    assert _quantile.median_found(0.3, 300)
    assert _quantile.median_found(np.inf, 1)
    # monotone in both
    assert _quantile.median_found(0.3, 1000) and not _quantile.median_found(0.25, 300)


def _median_draws(values, epsilon, n_draws):
    plan = BudgetPlan(epsilon, 0.0)
    plan.add_rest("cold_start", mechanism="exponential")
    out = []
    for seed in range(n_draws):
        release = Releaser(plan.calibrate(), np.random.default_rng(seed))
        out.append(_quantile.private_median(
            release, "cold_start", lambda fn: fn(values), n_users=len(values)))
    return np.array(out)


def test_median_lands_among_the_values_when_the_rule_says_so():
    values = np.random.default_rng(1).normal(3.5, 0.6, size=300)
    inside = lambda m: (m >= values.min()) & (m <= values.max())  # noqa: E731
    assert _quantile.median_found(0.3, values.size)
    draws = _median_draws(values, 0.3, 200)
    assert inside(draws).all()
    assert np.median(np.abs(draws - np.median(values))) < 0.3
    # where the rule says no (epsilon * n = 30), draws land where no user is
    assert not _quantile.median_found(0.1, values.size)
    assert (~inside(_median_draws(values, 0.1, 200))).mean() > 0.05


# --------------------------------------------------------------------------- #
# The estimators' fallback fits
# --------------------------------------------------------------------------- #
def _regression(n_users=300, rows=6, d=3, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(g.size, d))
    y = 3.5 + 0.5 * rng.normal(size=n_users)[g] + X @ rng.normal(size=d) * 0.3 \
        + 0.3 * rng.normal(size=g.size)
    return X, y, g


def _ratings(n_users=300, rows=6, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    items = rng.integers(0, 50, g.size)[:, None]
    y = np.clip(3.5 + 0.5 * rng.normal(size=n_users)[g] + 0.5 * rng.normal(size=g.size), 1, 5)
    return items, y, g


ESTIMATORS = {
    "fedrep": (functools.partial(PrivateFedRepRegressor, n_components=2), _regression,
               "cold_start_intercept_"),
    "altmin": (functools.partial(PrivAltMinRegressor, n_components=2), _regression,
               "cold_start_intercept_"),
    "ppsgd": (PPSGDRegressor, _regression, "intercept_"),
    "mf": (functools.partial(AdaptiveWeightMF, n_components=2), _ratings, "mean_"),
}


def _fit(name, epsilon, **data_kw):
    make, data, level = ESTIMATORS[name]
    X, y, g = data(**data_kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = make(epsilon=epsilon, random_state=0).fit(X, y, groups=g)
    useless = [w for w in caught if issubclass(w.category, UselessFitWarning)]
    return est, (X, y, g), level, useless


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fallback_fit_releases_only_the_median(name):
    est, (X, y, g), level, useless = _fit(name, 0.3)
    assert len(useless) == 1 and "median" in str(useless[0].message)
    report = est.privacy_report_
    assert est.local_only_
    assert report.accountant == "pure"
    assert [p.name for p in report.phases] == ["cold_start"]
    assert report.phases[0].mechanism == "exponential"
    assert report.epsilon_spent == pytest.approx(0.3)
    assert report.released[-1] == level or level in report.released
    means = np.bincount(g, y) / np.bincount(g)
    value = float(getattr(est, level))
    assert means.min() <= value <= means.max()
    assert abs(value - np.median(means)) < 0.3
    # new users get that level
    new = est.predict(X[:5], groups=np.full(5, -1))
    np.testing.assert_allclose(new, value)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fallback_fit_below_the_rule_releases_nothing(name):
    est, (X, y, g), level, useless = _fit(name, 0.1)
    assert len(useless) == 1 and "prior 0" in str(useless[0].message)
    assert est.local_only_
    assert est.privacy_report_.epsilon_spent == 0.0
    assert level not in est.privacy_report_.released
    np.testing.assert_array_equal(est.predict(X[:5], groups=np.full(5, -1)), 0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_useful_fit_is_not_a_fallback(name):
    est, _, _, useless = _fit(name, 8.0, n_users=3000)
    assert not useless and not est.local_only_
    assert len(est.privacy_report_.phases) > 1


def test_private_search_trials_may_be_fallback_fits_within_their_budget():
    # 400 users at a total epsilon of 1 over 3 trials: each trial's plan is the
    # fallback (one exponential-mechanism release); the search's check of every
    # trial's spent zCDP passes (it raises PrivacyBudgetError otherwise)
    from skdpp.model_selection import PrivateRandomizedSearchCV

    X, y, g = _regression(n_users=400)
    search = PrivateRandomizedSearchCV(PPSGDRegressor(), {"personal_ridge": [0.5, 1.0, 2.0]},
                                       epsilon=1.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UselessFitWarning)
        search.fit(X, y, groups=g)
    best = search.best_estimator_
    assert best.local_only_
    assert [p.name for p in best.privacy_report_.phases] == ["cold_start"]
    assert search.privacy_report_.epsilon_spent <= 1.0 + 1e-9
