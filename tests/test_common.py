"""scikit-learn's estimator checks on every estimator skdpp exports (plus the toy).

Estimators are discovered from ``skdpp.__all__``, so a new estimator is checked
automatically. ``CHECK_PARAMS`` only shrinks work so the checks stay fast;
``EXPECTED_FAILED_CHECKS`` lists checks that cannot apply, each with its reason.
"""

import inspect

import numpy as np
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
