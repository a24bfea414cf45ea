"""The scikit-learn workflows users rely on, for every estimator skdpp exports.

For each estimator in ``skdpp.__all__`` (and each of the five the design
promises; those not exported yet are skipped with the reason), with metadata
routing enabled:

* ``Pipeline([scaler, est])`` fit / predict / score with ``groups``;
* ``GridSearchCV(est, {"epsilon": ..., <hyperparameter>: ...}, cv=PerUserKFold())``
  with ``scoring=None`` and with :func:`skdpp.metrics.make_personalized_scorer`;
* ``cross_validate(..., params={"groups": g})``, personalized vs cold-start scores;
* ``skdpp.model_selection.cross_val_predict`` (personalized out-of-fold predictions)
  against scikit-learn's ``cross_val_predict`` (cold start, with the warning);
* with routing *off*, ``GridSearchCV``/``cross_validate`` with ``PerUserKFold`` refuse
  to run (they would fit at row-level DP and score cold start);
* pandas input (DataFrame ``X``, Series ``y`` and Series of string user ids);
* pickling a fitted estimator and ``clone``.

Every test asserts on results, not only that the call runs. The data are small
(the whole module runs in well under 90 s on a 2-core machine); the
hyperparameters of each case are chosen for speed, not accuracy.

What these tests guard is measured behaviour of scikit-learn's metadata routing
(documented in ``docs/user_guide/groups.rst``): ``groups`` silently dropped
anywhere shows up as the base class's "called with groups=None" warning, which
this module turns into an error.
"""

import pickle
from dataclasses import dataclass

import numpy as np
import pytest
import sklearn
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils.validation import check_is_fitted

import skdpp
from skdpp.metrics import make_personalized_scorer
from skdpp.model_selection import PerUserKFold, cross_val_predict

pd = pytest.importorskip("pandas")

# A dropped `groups` is a bug in every test below unless a test says otherwise.
pytestmark = pytest.mark.filterwarnings("error:.*called with groups=None")

EXPECTED = (
    "PrivateFedRepRegressor",
    "PrivAltMinRegressor",
    "PPSGDRegressor",
    "AdaptiveWeightMF",
    "JLMarginClassifier",
)


def _exported_estimators():
    out = []
    for name in getattr(skdpp, "__all__", ()):
        obj = getattr(skdpp, name, None)
        if isinstance(obj, type) and issubclass(obj, BaseEstimator):
            out.append(name)
    return out


EXPORTED = _exported_estimators()
ALL_NAMES = list(EXPECTED) + sorted(set(EXPORTED) - set(EXPECTED))


# --------------------------------------------------------------------------- #
# Per-estimator cases: small data, fast hyperparameters
# --------------------------------------------------------------------------- #
@dataclass
class Case:
    params: dict                      # constructor parameters (fast, seeded)
    grid: dict                        # {"epsilon": [...], <one hyperparameter>: [...]}
    make_data: callable               # seed -> dict(X, y, groups, X_test, y_test, groups_test)
    scaler: callable = StandardScaler  # first pipeline step
    scaler_reason: str = ""
    personal_margin: float = 0.05     # personalized score must beat cold start by this


def _split_dict(X, y, groups, X_test, y_test, groups_test):
    return dict(X=X, y=y, groups=groups, X_test=X_test, y_test=y_test,
                groups_test=groups_test)


def _shared_representation_data(seed):
    from skdpp.datasets import make_shared_representation_regression

    X, y, g, info = make_shared_representation_regression(
        n_users=150, n_features=8, n_components=2, n_samples_per_user=12,
        noise=0.01, n_test_samples_per_user=4, random_state=seed)
    return _split_dict(X, y, g, info.X_test, info.y_test, info.groups_test)


def _additive_data(seed):
    from skdpp.datasets import make_additive_personalized_regression

    X, y, g, info = make_additive_personalized_regression(
        n_users=150, n_features=8, n_samples_per_user=12, n_personal_features=4,
        personal_scale=1.0, global_scale=1.0, noise=0.01,
        n_test_samples_per_user=4, random_state=seed)
    return _split_dict(X, y, g, info.X_test, info.y_test, info.groups_test)


def _ratings_data(seed):
    from skdpp.datasets import make_skewed_ratings
    from skdpp.model_selection import per_user_train_test_split

    X, y, g, _ = make_skewed_ratings(
        n_users=200, n_items=30, n_components=2, mean_items_per_user=12.0,
        noise=1e-3, test_size=0.0, random_state=seed)
    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=g, test_size=0.25, random_state=seed, min_train_rows=3)
    return _split_dict(X_tr, y_tr, g_tr, X_te, y_te, g_te)


def _margin_data(seed):
    from skdpp.datasets import make_personalized_margin_classification

    X, y, g, info = make_personalized_margin_classification(
        n_users=150, n_features=8, n_components=2, n_samples_per_user=12,
        margin=0.05, n_test_samples_per_user=4, random_state=seed)
    return _split_dict(X, y, g, info.X_test, info.y_test, info.groups_test)


CASES = {
    "PrivateFedRepRegressor": Case(
        params=dict(n_components=2, max_iter=3, epsilon=2.0, random_state=0),
        grid={"epsilon": [2.0, np.inf], "max_iter": [2, 3]},
        make_data=_shared_representation_data,
    ),
    "PrivAltMinRegressor": Case(
        params=dict(n_components=2, max_iter=3, epsilon=2.0, random_state=0),
        grid={"epsilon": [2.0, np.inf], "max_iter": [2, 3]},
        make_data=_shared_representation_data,
    ),
    "PPSGDRegressor": Case(
        params=dict(n_rounds=30, batch_size=4, learning_rate=0.1, epsilon=2.0,
                    random_state=0),
        grid={"epsilon": [2.0, np.inf], "alpha": [0.5, 1.0]},
        make_data=_additive_data,
    ),
    "AdaptiveWeightMF": Case(
        params=dict(n_components=2, n_iter=3, epsilon=2.0, random_state=0),
        grid={"epsilon": [2.0, np.inf], "n_components": [2, 3]},
        make_data=_ratings_data,
        # X is one column of item ids: categorical, so standardising it would
        # be meaningless. The pipeline step is an identity FunctionTransformer.
        scaler=lambda: FunctionTransformer(),
        scaler_reason="X holds item ids (categorical): identity transformer instead",
    ),
    "JLMarginClassifier": Case(
        params=dict(n_components=2, n_candidates=32, n_directions=16, epsilon=2.0,
                    random_state=0),
        grid={"epsilon": [2.0, np.inf], "margin": [0.05, 0.1]},
        make_data=_margin_data,
    ),
}


@pytest.fixture(params=ALL_NAMES)
def name(request):
    name = request.param
    if name not in EXPORTED:
        pytest.skip(f"{name} is not exported by skdpp yet (not in skdpp.__all__)")
    if name not in CASES:
        pytest.skip(f"{name} has no workflow case in tests/test_workflows.py: add one "
                    "to CASES")
    return name


@pytest.fixture(autouse=True)
def _routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def _estimator(name, **overrides):
    return getattr(skdpp, name)(**{**CASES[name].params, **overrides})


def _metric(est):
    return accuracy_score if is_classifier(est) else r2_score


def _string_scorer(est):
    return "accuracy" if is_classifier(est) else "r2"


# --------------------------------------------------------------------------- #
# Pipeline
# --------------------------------------------------------------------------- #
def test_pipeline_fit_predict_routes_groups(name):
    """Pipeline.fit/predict(groups=...) equal the steps applied by hand."""
    case, d = CASES[name], CASES[name].make_data(0)
    pipe = Pipeline([("pre", case.scaler()), ("est", _estimator(name))])
    pipe.fit(d["X"], d["y"], groups=d["groups"])
    pred = pipe.predict(d["X_test"], groups=d["groups_test"])

    pre = case.scaler().fit(d["X"])
    est = _estimator(name).fit(pre.transform(d["X"]), d["y"], groups=d["groups"])
    expected = est.predict(pre.transform(d["X_test"]), groups=d["groups_test"])

    assert pipe[-1].n_users_ == np.unique(d["groups"]).shape[0]
    assert_array_equal(pipe[-1].user_ids_, np.unique(d["groups"]))
    if is_classifier(est):
        assert_array_equal(pred, expected)
    else:
        assert_allclose(pred, expected, rtol=1e-10, atol=1e-12)


def test_pipeline_score_routes_groups(name):
    """Pipeline.score(groups=...) is the metric of the personalized predictions."""
    case, d = CASES[name], CASES[name].make_data(0)
    pipe = Pipeline([("pre", case.scaler()), ("est", _estimator(name))])
    pipe.fit(d["X"], d["y"], groups=d["groups"])
    pred = pipe.predict(d["X_test"], groups=d["groups_test"])
    score = pipe.score(d["X_test"], d["y_test"], groups=d["groups_test"])
    assert_allclose(score, _metric(pipe[-1])(d["y_test"], pred), rtol=1e-12)


# --------------------------------------------------------------------------- #
# GridSearchCV
# --------------------------------------------------------------------------- #
def _search(name, scoring):
    d = CASES[name].make_data(0)
    search = GridSearchCV(_estimator(name), CASES[name].grid,
                          cv=PerUserKFold(n_splits=3), scoring=scoring)
    search.fit(d["X"], d["y"], groups=d["groups"])
    return search, d


def test_grid_search_default_scoring_best_estimator_saw_all_users(name):
    search, d = _search(name, scoring=None)
    n_candidates = int(np.prod([len(v) for v in CASES[name].grid.values()]))
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (n_candidates,)
    assert np.all(np.isfinite(scores)), scores
    best = search.best_estimator_
    # refitted with the user ids (not one user per row) on all users
    assert best.n_users_ == np.unique(d["groups"]).shape[0]
    assert_array_equal(best.user_ids_, np.unique(d["groups"]))
    assert best.get_params()["epsilon"] == search.best_params_["epsilon"]
    # the search's score routes groups to the refitted estimator
    assert_allclose(
        search.score(d["X_test"], d["y_test"], groups=d["groups_test"]),
        best.score(d["X_test"], d["y_test"], groups=d["groups_test"]), rtol=1e-12)


def test_grid_search_personalized_scorer_matches_default_scoring(name):
    """make_personalized_scorer(metric) gives the estimator's own score, fold by fold."""
    est = _estimator(name)
    own, _ = _search(name, scoring=None)
    pers, _ = _search(name, scoring=make_personalized_scorer(_metric(est)))
    for key in ("split0_test_score", "split1_test_score", "split2_test_score"):
        assert np.all(np.isfinite(pers.cv_results_[key]))
        assert_allclose(pers.cv_results_[key], own.cv_results_[key], rtol=1e-10,
                        atol=1e-12)
    assert pers.best_params_ == own.best_params_


# --------------------------------------------------------------------------- #
# cross_validate
# --------------------------------------------------------------------------- #
def test_cross_validate_personalized_beats_cold_start_at_epsilon_inf(name):
    d = CASES[name].make_data(0)
    est = _estimator(name, epsilon=np.inf)
    scoring = {"personalized": make_personalized_scorer(_metric(est)),
               "cold_start": _string_scorer(est)}
    # the string scorer drops groups on purpose: the estimator warns
    with pytest.warns(UserWarning, match="called with groups=None"):
        res = cross_validate(est, d["X"], d["y"], cv=PerUserKFold(n_splits=3),
                             scoring=scoring, params={"groups": d["groups"]},
                             return_estimator=True)
    pers, cold = res["test_personalized"], res["test_cold_start"]
    assert np.all(np.isfinite(pers)) and np.all(np.isfinite(cold))
    assert pers.mean() > cold.mean() + CASES[name].personal_margin, (pers, cold)
    n_users = np.unique(d["groups"]).shape[0]
    assert [e.n_users_ for e in res["estimator"]] == [n_users] * 3


def test_cross_validate_default_scoring_is_personalized(name):
    d = CASES[name].make_data(0)
    est = _estimator(name)
    own = cross_validate(est, d["X"], d["y"], cv=PerUserKFold(n_splits=3),
                         params={"groups": d["groups"]})["test_score"]
    pers = cross_validate(est, d["X"], d["y"], cv=PerUserKFold(n_splits=3),
                          scoring=make_personalized_scorer(_metric(est)),
                          params={"groups": d["groups"]})["test_score"]
    assert np.all(np.isfinite(own))
    assert_allclose(own, pers, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- #
# cross_val_predict
# --------------------------------------------------------------------------- #
def _users_with_rows(d, n_rows):
    """The training rows of users with at least ``n_rows`` rows (PerUserKFold tests them)."""
    g = np.asarray(d["groups"])
    users, counts = np.unique(g, return_counts=True)
    keep = np.isin(g, users[counts >= n_rows])
    return d["X"][keep], d["y"][keep], g[keep]


def test_cross_val_predict_personalizes(name):
    X, y, g = _users_with_rows(CASES[name].make_data(0), 3)
    est = _estimator(name, epsilon=np.inf)
    pred = cross_val_predict(est, X, y, groups=g, cv=PerUserKFold(n_splits=3), n_jobs=2)
    expected = np.empty_like(pred)
    for train, test in PerUserKFold(n_splits=3).split(X, y, g):
        fitted = clone(est).fit(X[train], y[train], groups=g[train])
        expected[test] = fitted.predict(X[test], groups=g[test])
    # joblib's workers run BLAS with another thread count: equal up to rounding
    assert_allclose(pred, expected, rtol=1e-9, atol=1e-12)
    # scikit-learn's cross_val_predict drops groups at predict: cold start
    with pytest.warns(UserWarning, match=r"called with groups=None.*"
                                         r"skdpp\.model_selection\.cross_val_predict"):
        cold = sklearn_cross_val_predict(est, X, y, cv=PerUserKFold(n_splits=3),
                                         params={"groups": g})
    metric = _metric(est)
    assert metric(y, pred) > metric(y, cold) + CASES[name].personal_margin


def test_model_selection_with_routing_off_refuses_to_run(name):
    d = CASES[name].make_data(0)
    est = _estimator(name)
    with sklearn.config_context(enable_metadata_routing=False):
        with pytest.raises(RuntimeError, match="metadata routing is disabled"):
            GridSearchCV(est, CASES[name].grid, cv=PerUserKFold(n_splits=3)).fit(
                d["X"], d["y"], groups=d["groups"])
        with pytest.raises(RuntimeError, match="metadata routing is disabled"):
            cross_validate(est, d["X"], d["y"], groups=d["groups"],
                           cv=PerUserKFold(n_splits=3))


# --------------------------------------------------------------------------- #
# pandas
# --------------------------------------------------------------------------- #
def _to_pandas(d, classifier):
    def ids(g):  # zero-padded: string ids sort like the integer ids
        return pd.Series([f"user-{int(u):05d}" for u in g], name="user")

    def frame(X):
        cols = [f"f{j}" for j in range(X.shape[1])]
        return pd.DataFrame(X, columns=cols)

    def target(y):
        if classifier:
            return pd.Series(np.where(np.asarray(y) > 0, "pos", "neg"), name="y")
        return pd.Series(y, name="y")

    return dict(X=frame(d["X"]), y=target(d["y"]), groups=ids(d["groups"]),
                X_test=frame(d["X_test"]), y_test=target(d["y_test"]),
                groups_test=ids(d["groups_test"]))


def test_pandas_input_with_series_of_string_ids(name):
    """DataFrame X, Series y and string ids give the numpy fit's predictions.

    The numpy fit uses the same string ids: per-user randomness is keyed by a
    hash of the id, so the fit depends on the ids themselves (not on how they
    are stored).
    """
    d = CASES[name].make_data(0)
    est = _estimator(name)
    classifier = is_classifier(est)
    p = _to_pandas(d, classifier)
    est_pd = clone(est).fit(p["X"], p["y"], groups=p["groups"])
    est_np = clone(est).fit(d["X"], d["y"], groups=p["groups"].to_numpy())

    assert_array_equal(est_pd.feature_names_in_, p["X"].columns.to_numpy())
    assert_array_equal(est_pd.user_ids_, np.unique(p["groups"]))
    pred_pd = est_pd.predict(p["X_test"], groups=p["groups_test"])
    pred_np = est_np.predict(d["X_test"], groups=p["groups_test"].to_numpy())
    if classifier:
        assert_array_equal(pred_pd, np.where(np.asarray(pred_np) > 0, "pos", "neg"))
    else:
        assert_allclose(pred_pd, pred_np, rtol=1e-10, atol=1e-12)
    assert_allclose(est_pd.score(p["X_test"], p["y_test"], groups=p["groups_test"]),
                    _metric(est)(p["y_test"], pred_pd), rtol=1e-12)


# --------------------------------------------------------------------------- #
# pickle and clone
# --------------------------------------------------------------------------- #
def _unseen_rows(d):
    """Test rows re-labelled as one unseen user (cold start)."""
    return d["X_test"][:5], np.full(5, -12345, dtype=np.asarray(d["groups"]).dtype)


def test_pickle_roundtrip_keeps_predictions_and_report(name):
    d = CASES[name].make_data(0)
    est = _estimator(name).fit(d["X"], d["y"], groups=d["groups"])
    restored = pickle.loads(pickle.dumps(est))
    assert_array_equal(restored.predict(d["X_test"], groups=d["groups_test"]),
                       est.predict(d["X_test"], groups=d["groups_test"]))
    X_new, g_new = _unseen_rows(d)
    assert_array_equal(restored.predict(X_new, groups=g_new),
                       est.predict(X_new, groups=g_new))
    assert restored.privacy_report_.to_dict() == est.privacy_report_.to_dict()
    assert_array_equal(restored.user_ids_, est.user_ids_)


def test_clone_is_unfitted_and_refits_identically(name):
    d = CASES[name].make_data(0)
    est = _estimator(name).fit(d["X"], d["y"], groups=d["groups"])
    cloned = clone(est)
    with pytest.raises(NotFittedError):
        check_is_fitted(cloned)
    assert cloned.get_params() == est.get_params()
    # same parameters and random_state: the same noise, the same model
    cloned.fit(d["X"], d["y"], groups=d["groups"])
    assert_array_equal(cloned.predict(d["X_test"], groups=d["groups_test"]),
                       est.predict(d["X_test"], groups=d["groups_test"]))
    assert cloned.privacy_report_.to_dict() == est.privacy_report_.to_dict()


def test_every_expected_estimator_is_listed():
    """Guard for the parametrisation: the design's five estimators all have a case."""
    assert set(EXPECTED) <= set(CASES)
    assert set(EXPECTED) <= set(ALL_NAMES)
