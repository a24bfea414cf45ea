"""The one-user harness on whole private Pipelines (issue 22).

A Pipeline of private transformers and a personalized estimator, and a
``PrivateRandomizedSearchCV`` over such a Pipeline, on ``D`` and on neighbours
``D'`` (one user replaced by an adversarial one), the noise patched out and
``D'`` replaying ``D``'s releases: (i) identical exceptions, warnings and printed
lines; (ii) every other user's predictions bit-identical; (iii) every release of
every step within its stated sensitivity. A broken variant (unclipped private
locations) is caught.
"""

import numpy as np
import pytest
import sklearn
from sklearn.pipeline import Pipeline

from skdpp import PPSGDRegressor
from skdpp.model_selection import PrivateRandomizedSearchCV
from skdpp.preprocessing import PrivateSimpleImputer, PrivateStandardScaler
from tests.privacy.harness import (
    assert_releases_within_sensitivity,
    compare_observables,
    observables,
    record_releases,
)
from tests.privacy.test_one_user import USER, _neighbours, _regression

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

ENTRIES = ("rows_1e308", "rows_max_over_sqrt_d", "rows_5e-324", "targets_+1e305",
           "single_row", "tiny_rows_huge_targets", "huge", "zeros")


def _pipe():
    return Pipeline([("impute", PrivateSimpleImputer(random_state=0)),
                     ("scale", PrivateStandardScaler(random_state=0)),
                     ("model", PPSGDRegressor(n_rounds=10, random_state=0, verbose=1))])


def _check(make, entry):
    X, y, g = _regression()
    X2, y2, g2 = _neighbours("ppsgd")[entry]
    with sklearn.config_context(enable_metadata_routing=True):
        a, b = make(), make()
        o1 = observables(lambda: record_releases(lambda: a.fit(X, y, groups=g)))
        o2 = observables(lambda: record_releases(lambda: b.fit(X2, y2, groups=g2),
                                                 replay=o1["result"]))
        compare_observables(o1, o2, what="Pipeline.fit")
        assert_releases_within_sensitivity(o1["result"], o2["result"])
        mine, theirs = g != USER, slice(0, int(np.sum(g != USER)))
        p1 = observables(lambda: a.predict(X, groups=g))
        p2 = observables(lambda: b.predict(X2, groups=g2))
        compare_observables(p1, p2, what="Pipeline.predict")
        np.testing.assert_array_equal(np.asarray(p1["result"])[mine],
                                      np.asarray(p2["result"])[theirs])


@pytest.mark.parametrize("entry", ENTRIES)
def test_one_user_private_pipeline(entry):
    _check(_pipe, entry)


@pytest.mark.parametrize("entry", ENTRIES[:3])
def test_one_user_search_over_private_pipeline(entry):
    def make():
        return PrivateRandomizedSearchCV(_pipe(), {"model__learning_rate": [0.05, 0.1]},
                                         n_iter=2, delta=1e-4, random_state=0)

    _check(make, entry)


def test_broken_unclipped_step_is_caught(monkeypatch):
    """Broken variant: private locations (the scaler's, the imputer's, the model's
    intercept) sum deviations without clipping them to the released radius; the
    harness on the whole Pipeline catches it."""
    from skdpp.privacy import _quantile

    def unclipped(values, center, radius):
        dev = _quantile._finite_or(values, center) - center
        return np.array([_quantile._finite_or(dev, 0.0).sum()])

    monkeypatch.setattr(_quantile, "clipped_deviation_sum", unclipped)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        _check(_pipe, "huge")
