"""scikit-learn's estimator checks on every estimator skdpp exports (plus the toy).

Estimators are discovered from ``skdpp.__all__``, so a new estimator is checked
automatically. ``CHECK_PARAMS`` only shrinks work so the checks stay fast;
``EXPECTED_FAILED_CHECKS`` lists checks that cannot apply, each with its reason.
"""

import inspect

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

import skdpp
from tests._toy import ToyPersonalizedMean


def _exported_estimators():
    classes = []
    for name in skdpp.__all__:
        obj = getattr(skdpp, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
            classes.append(obj)
    return classes


# Constructor overrides that keep the checks fast (never needed for correctness).
CHECK_PARAMS = {}

# Checks that cannot apply, with the reason. Keyed by class name.
EXPECTED_FAILED_CHECKS = {}


def _instances():
    out = [ToyPersonalizedMean(random_state=0)]
    for cls in _exported_estimators():
        out.append(cls(**CHECK_PARAMS.get(cls.__name__, {})))
    return out


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(_instances(), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_all_five_estimators_are_exported():
    names = {cls.__name__ for cls in _exported_estimators()}
    expected = {
        "PrivateFedRepRegressor",
        "PrivAltMinRegressor",
        "PPSGDRegressor",
        "AdaptiveWeightMF",
        "JLMarginClassifier",
    }
    assert expected <= names, f"not exported: {sorted(expected - names)}"


def test_exported_estimators_request_groups():
    for cls in _exported_estimators() + [ToyPersonalizedMean]:
        routing = cls().get_metadata_routing()
        for method in ("fit", "predict", "score"):
            requests = getattr(routing, method).requests
            assert requests.get("groups") is True, (cls.__name__, method, requests)


def test_exported_estimators_have_privacy_params():
    for cls in _exported_estimators():
        params = cls().get_params()
        assert np.isfinite(params["epsilon"]) and params["epsilon"] > 0
        assert params["delta"] == 1e-6
        assert "random_state" in params


def _released_values(est):
    report = est.privacy_report_
    return np.concatenate([np.ravel(np.asarray(getattr(est, name.split(" ")[0]), dtype=float))
                           for name in report.released
                           if not name.startswith("jl_matrix_")])


@pytest.mark.parametrize("cls", _exported_estimators() + [ToyPersonalizedMean],
                         ids=lambda c: c.__name__)
def test_random_state_none_draws_fresh_entropy_not_numpy_global_seed(cls, full_plan):
    # random_state=None must not be reproducible through np.random.seed (an
    # adversary who can seed numpy's global generator could subtract the noise).
    # full_plan: 60 users at epsilon 1 would otherwise get the one-release fallback.
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(60), 4)
    X = rng.normal(size=(240, 3))
    if cls.__name__ == "AdaptiveWeightMF":
        X = rng.integers(0, 8, size=(240, 1))
    y = (X[:, 0] > 0).astype(int) if cls.__name__ == "JLMarginClassifier" else rng.normal(size=240)
    fits = []
    for _ in range(2):
        np.random.seed(0)
        fits.append(_released_values(cls(epsilon=1.0, random_state=None).fit(X, y, groups)))
    assert not np.array_equal(fits[0], fits[1])
    # an int seed is reproducible
    a = _released_values(cls(epsilon=1.0, random_state=3).fit(X, y, groups))
    b = _released_values(cls(epsilon=1.0, random_state=3).fit(X, y, groups))
    np.testing.assert_array_equal(a, b)


def _validation_data(cls, frame):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 4)
    X = rng.integers(0, 8, size=(120, 1)) if cls.__name__ == "AdaptiveWeightMF" \
        else rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int) if cls.__name__ == "JLMarginClassifier" \
        else rng.normal(size=120)
    if frame:
        import pandas as pd

        X = pd.DataFrame(X, columns=[f"c{j}" for j in range(X.shape[1])])
    return X, y, groups


def _validation_side_effects(cls, frame):
    """What ``_validate_fit_data`` changed on the estimator, and what it returned."""
    est = cls(epsilon=1.0, random_state=0)
    before = dict(vars(est))
    data = est._validate_fit_data(*_validation_data(cls, frame))
    changed = {k for k, v in vars(est).items() if k not in before or before[k] is not v}
    return changed, data.attributes


@pytest.mark.parametrize("frame", [False, True], ids=["array", "dataframe"])
@pytest.mark.parametrize("cls", _exported_estimators() + [ToyPersonalizedMean],
                         ids=lambda c: c.__name__)
def test_validation_is_pure_and_returns_what_it_decides(cls, frame, monkeypatch):
    # The distributed driver uses FitData.attributes as is: validation must set
    # nothing on the estimator, and return every attribute it decides.
    if not issubclass(cls, skdpp.base.BasePersonalizedEstimator):
        pytest.skip("not a personalized estimator")
    X, _, _ = _validation_data(cls, frame)
    changed, attributes = _validation_side_effects(cls, frame)
    assert changed == set()
    assert attributes["n_features_in_"] == X.shape[1]
    assert ("feature_names_in_" in attributes) == frame
    # broken variant: scikit-learn's validate_data on the estimator itself
    monkeypatch.setattr(skdpp.base.copy, "copy", lambda est: est)
    changed, _ = _validation_side_effects(cls, frame)
    assert "n_features_in_" in changed


def _unclipped_errors(est):
    """The parameters whose ``None`` with a finite epsilon the estimator refuses."""
    refused = []
    for name, constraints in est._parameter_constraints.items():
        if None not in constraints or "clip" not in name:
            continue
        try:
            clone = est.__class__(**{**est.get_params(deep=False), name: None, "epsilon": 1.0})
            clone._validate_privacy_params()
        except ValueError as exc:
            assert f"{name}=None" in str(exc) and "epsilon=np.inf" in str(exc)
            refused.append(name)
    return refused


@pytest.mark.parametrize("cls", _exported_estimators() + [ToyPersonalizedMean],
                         ids=lambda c: c.__name__)
def test_every_clip_bound_none_needs_infinite_epsilon(cls, monkeypatch):
    # "no clipping" is unbounded sensitivity: refused for every clip bound that
    # accepts None (declared in _clip_bounds), allowed with epsilon=np.inf.
    if not issubclass(cls, skdpp.base.BasePersonalizedEstimator):
        pytest.skip("not a personalized estimator")
    est = cls()
    bounds = [n for n, c in est._parameter_constraints.items() if None in c and "clip" in n]
    assert bounds and _unclipped_errors(est) == bounds
    for name in bounds:
        cls(**{name: None, "epsilon": np.inf})._validate_privacy_params()
    # broken variant: the one check skipped
    monkeypatch.setattr(skdpp.base, "check_unclipped", lambda est, names: None)
    assert _unclipped_errors(est) == []
