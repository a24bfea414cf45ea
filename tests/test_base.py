"""The shared estimator base, exercised through the test-only toy estimator."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
import sklearn
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skdpp.exceptions import PrivacyBudgetError, PrivacyLeakWarning
from skdpp.model_selection import PerUserKFold
from tests._toy import ToyPersonalizedMean


def _data(n_users=40, rows=6, seed=0, string_ids=False):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    offsets = rng.normal(scale=0.3, size=n_users)
    X = rng.normal(size=(n_users * rows, 3))
    y = 0.2 + offsets[groups] + 0.01 * rng.normal(size=n_users * rows)
    if string_ids:
        groups = np.array([f"user-{g:03d}" for g in groups])
    perm = rng.permutation(len(y))  # rows not sorted by user
    return X[perm], y[perm], groups[perm]


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


# --------------------------------------------------------------------------- #
# groups semantics, cold start, personalize
# --------------------------------------------------------------------------- #
def test_known_users_get_personal_predictions_unseen_get_cold_start():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf, random_state=0).fit(X, y, g)
    pred = est.predict(X, groups=g)
    assert np.mean((pred - y) ** 2) < 1e-3
    cold = est.predict(X[:5], groups=np.array([10_000] * 5))
    assert_allclose(cold, est.mean_, rtol=0, atol=0)


def test_string_ids_and_unsorted_rows():
    X, y, g = _data(string_ids=True)
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, g)
    assert est.user_ids_.dtype.kind == "U"
    assert est.n_users_ == 40
    assert est.score(X, y, groups=g) > 0.99


def test_predict_without_groups_after_fit_with_groups_warns():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, g)
    with pytest.warns(UserWarning, match="groups=None"):
        pred = est.predict(X)
    assert_allclose(pred, est.mean_, rtol=0, atol=0)


def test_groups_none_means_every_row_is_a_user():
    X, y, _ = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)
    assert est.n_users_ == len(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.predict(X)  # fitted without ids: no warning


def test_personalize_adds_new_users_and_keeps_report():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=1.0, random_state=0).fit(X, y, g)
    report, mean = est.privacy_report_, est.mean_
    Xn, yn = X[:4], np.array([5.0, 5.0, 6.0, 6.0])
    gn = np.array([100, 100, 101, 101])
    assert est.personalize(Xn, yn, gn) is est
    assert est.privacy_report_ is report and est.mean_ == mean
    assert_array_equal(est.user_ids_[-2:], [100, 101])
    assert_allclose(est.predict(Xn, groups=gn), yn, rtol=1e-12)
    # Known users keep their offsets.
    assert_allclose(est.predict(X, groups=g), ToyPersonalizedMean(
        epsilon=1.0, random_state=0).fit(X, y, g).predict(X, groups=g), rtol=1e-12)


def test_personalize_refits_known_user():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, g)
    est.personalize(X[:2], np.array([9.0, 9.0]), np.array([g[0], g[0]]))
    assert_allclose(est.predict(X[:1], groups=g[:1]), 9.0, rtol=1e-12)
    assert est.user_ids_.shape == (40,)


def test_personalize_requires_groups_and_matching_id_type():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, g)
    with pytest.raises(ValueError, match="personalize requires groups"):
        est.personalize(X, y, None)
    with pytest.raises(TypeError, match="Ids of different types never match"):
        est.personalize(X[:2], y[:2], np.array(["a", "b"]))


# --------------------------------------------------------------------------- #
# privacy parameters and the report
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "params, match",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": np.nan}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"delta": -1e-9}, "delta"),
        ({"delta": True}, "delta"),
        ({"clip_norm": None}, "clip_norm"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"clip_norm": 1e-120}, "clip_norm"),
        ({"clip_norm": np.inf}, "clip_norm"),
    ],
)
def test_bad_privacy_parameters(params, match):
    X, y, g = _data()
    with pytest.raises(ValueError, match=match):
        ToyPersonalizedMean(**params).fit(X, y, g)


def test_clip_norm_none_allowed_without_privacy():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf, clip_norm=None).fit(X, y, g)
    assert est.privacy_report_.epsilon_spent == np.inf


def test_delta_too_large_warns():
    X, y, g = _data()
    with pytest.warns(PrivacyLeakWarning, match="1/n_users"):
        ToyPersonalizedMean(delta=0.05).fit(X, y, g)


def test_report_spends_requested_budget():
    X, y, g = _data()
    report = ToyPersonalizedMean(epsilon=0.7, random_state=0).fit(X, y, g).privacy_report_
    assert report.epsilon == 0.7 and report.delta == 1e-6
    assert report.epsilon_spent <= 0.7 * (1 + 1e-9)
    assert_allclose(report.epsilon_spent, 0.7, rtol=1e-6)
    assert report.n_users == 40
    assert report.neighbouring == "replace-one-user"


def test_overspending_raises_budget_error_and_leaves_no_model(monkeypatch):
    from skdpp.privacy import _plan

    real = _plan.calibrate

    def half_noise(phases, *, epsilon, delta):
        return {k: v / 2 for k, v in real(phases, epsilon=epsilon, delta=delta).items()}

    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=1.0, random_state=0).fit(X, y, g)  # a previous fit
    monkeypatch.setattr(_plan, "calibrate", half_noise)
    with pytest.raises(PrivacyBudgetError):
        est.fit(X, y, g)
    # The template sets fitted attributes only after the report is checked, and a
    # failed fit discards the previous ones: nothing usable is left.
    assert not [name for name in vars(est) if name.endswith("_")]
    with pytest.raises(NotFittedError):
        est.predict(X, groups=g)


# --------------------------------------------------------------------------- #
# bad input, no mutation
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda X, y, g: (X, y[:-1], g), "inconsistent numbers of samples"),
        (lambda X, y, g: (X, y, g[:-1]), "groups"),
        (lambda X, y, g: (np.where(np.arange(X.size).reshape(X.shape) == 0, np.nan, X), y, g),
         "NaN"),
        (lambda X, y, g: (X, np.where(np.arange(y.size) == 0, np.inf, y), g), "infinity"),
        (lambda X, y, g: (X, y, np.where(np.arange(g.size) == 0, np.nan, g.astype(float))),
         "groups"),
        (lambda X, y, g: (X[:0], y[:0], g[:0]), "0 sample"),
    ],
    ids=["y_length", "groups_length", "nan_X", "inf_y", "nan_ids", "empty"],
)
def test_bad_input_is_rejected(mutate, match):
    X, y, g = mutate(*_data())
    with pytest.raises(ValueError, match=match):
        ToyPersonalizedMean().fit(X, y, g)


def test_one_user_and_one_row_users_are_documented_behaviour():
    X, y, _ = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, np.zeros(len(y), dtype=int))
    assert est.n_users_ == 1
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X[:5], y[:5], np.arange(5))
    assert_allclose(est.predict(X[:5], groups=np.arange(5)), y[:5], rtol=1e-12)


def test_inputs_are_not_modified():
    X, y, g = _data()
    copies = X.copy(), y.copy(), g.copy()
    est = ToyPersonalizedMean(random_state=0).fit(X, y, g)
    est.predict(X, groups=g)
    est.personalize(X, y, g)
    for a, b in zip((X, y, g), copies):
        assert_array_equal(a, b)


def test_determinism_under_random_state():
    X, y, g = _data()
    a = ToyPersonalizedMean(random_state=3).fit(X, y, g).mean_
    b = ToyPersonalizedMean(random_state=3).fit(X, y, g).mean_
    c = ToyPersonalizedMean(random_state=4).fit(X, y, g).mean_
    assert a == b and a != c


def test_pickle_and_clone():
    X, y, g = _data()
    est = ToyPersonalizedMean(random_state=0).fit(X, y, g)
    again = pickle.loads(pickle.dumps(est))
    assert_array_equal(again.predict(X, groups=g), est.predict(X, groups=g))
    assert not hasattr(clone(est), "mean_")


# --------------------------------------------------------------------------- #
# scikit-learn workflows with metadata routing
# --------------------------------------------------------------------------- #
def test_pipeline_routes_groups(routing):
    X, y, g = _data()
    pipe = Pipeline([("scale", StandardScaler()), ("toy", ToyPersonalizedMean(epsilon=np.inf))])
    pipe.fit(X, y, groups=g)
    assert pipe[-1].n_users_ == 40
    assert pipe.score(X, y, groups=g) > 0.99
    assert_allclose(pipe.predict(X, groups=g), pipe[-1].predict(pipe[0].transform(X), groups=g))


def test_grid_search_over_epsilon_routes_groups(routing):
    X, y, g = _data(n_users=60)
    pipe = Pipeline([("scale", StandardScaler()), ("toy", ToyPersonalizedMean(random_state=0))])
    search = GridSearchCV(
        pipe, {"toy__epsilon": [0.5, 5.0, np.inf]}, cv=PerUserKFold(n_splits=3)
    ).fit(X, y, groups=g)
    assert search.best_params_["toy__epsilon"] in (0.5, 5.0, np.inf)
    # Personalized scores on held-out rows of seen users are high (offsets are learned).
    assert search.best_score_ > 0.9
    assert search.best_estimator_[-1].n_users_ == 60


def test_cross_validate_routes_groups(routing):
    X, y, g = _data()
    res = cross_validate(
        ToyPersonalizedMean(epsilon=np.inf), X, y, cv=PerUserKFold(n_splits=3),
        params={"groups": g},
    )
    assert np.all(res["test_score"] > 0.99)


@pytest.mark.parametrize("hook", ["_fit_core", "_budget_plan", "_fit_executor"])
def test_old_fit_hooks_are_refused_at_class_creation(hook):
    """An override the template would ignore (or that would plan other releases than
    the run makes) fails loudly when the subclass is defined."""
    with pytest.raises(TypeError, match=f"defines {hook}"):
        type("Legacy", (ToyPersonalizedMean,), {hook: lambda self, *args: None})
