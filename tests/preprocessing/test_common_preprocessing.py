"""scikit-learn's estimator checks on the private transformers of skdpp.preprocessing."""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdpp.preprocessing import (
    PrivateOneHotEncoder,
    PrivateSimpleImputer,
    PrivateStandardScaler,
)

INSTANCES = [
    PrivateStandardScaler(random_state=0),
    PrivateSimpleImputer(random_state=0),
    PrivateSimpleImputer(strategy="median", random_state=0),
    PrivateOneHotEncoder(random_state=0),
]

EXPECTED_FAILED_CHECKS = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(INSTANCES, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_transformer(estimator, check):
    check(estimator)


@pytest.mark.parametrize("cls", [PrivateStandardScaler, PrivateSimpleImputer,
                                 PrivateOneHotEncoder])
def test_fit_requests_groups(cls):
    assert cls().get_metadata_routing().fit.requests.get("groups") is True
