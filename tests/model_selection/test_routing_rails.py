"""Safety rails for scikit-learn's metadata routing (issue 13, items 1, 5 and 6).

* Routing off (scikit-learn's default): meta-estimators pass ``groups`` to the
  splitter only, so every fit would treat each row as a user (row-level DP) and
  every score would be cold start. skdpp's splitters refuse to run there.
* The declared scikit-learn floor routes ``groups`` to a Pipeline's own score.
* ``skdpp.model_selection.cross_val_predict`` passes ``groups`` to ``predict``;
  scikit-learn's does not, and the estimator's warning points at ours.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import sklearn
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    cross_val_score,
    cross_validate,
    learning_curve,
)
from sklearn.model_selection import cross_val_predict as sklearn_cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skdpp.model_selection import PerUserKFold, PerUserShuffleSplit, cross_val_predict
from tests._toy import ToyPersonalizedMean

ROUTING_OFF = "metadata routing is disabled"


def _data(n_users=40, rows=6, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(groups.size, 3))
    y = 0.2 + rng.normal(scale=0.5, size=n_users)[groups] + 0.01 * rng.normal(size=groups.size)
    perm = rng.permutation(groups.size)
    return X[perm], y[perm], groups[perm]


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


@pytest.fixture
def no_routing():
    with sklearn.config_context(enable_metadata_routing=False):
        yield


SPLITTERS = [PerUserKFold(n_splits=3), PerUserShuffleSplit(n_splits=2, random_state=0)]


# --------------------------------------------------------------------------- #
# Item 1: routing off
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("cv", SPLITTERS, ids=repr)
def test_grid_search_with_routing_off_raises(no_routing, cv):
    X, y, g = _data()
    search = GridSearchCV(ToyPersonalizedMean(), {"epsilon": [1.0, np.inf]}, cv=cv)
    with pytest.raises(RuntimeError, match=ROUTING_OFF) as error:
        search.fit(X, y, groups=g)
    message = str(error.value)
    assert type(cv).__name__ in message
    assert "row-level" in message and "cold start" in message
    assert "sklearn.set_config(enable_metadata_routing=True)" in message
    assert not hasattr(search, "best_estimator_")


@pytest.mark.parametrize(
    "run",
    [
        lambda est, X, y, g, cv: cross_validate(est, X, y, groups=g, cv=cv),
        lambda est, X, y, g, cv: cross_val_score(est, X, y, groups=g, cv=cv),
        # fit gets the ids through params, scoring still cannot: still refused
        lambda est, X, y, g, cv: cross_validate(est, X, y, groups=g, cv=cv,
                                                params={"groups": g}),
        lambda est, X, y, g, cv: sklearn_cross_val_predict(est, X, y, groups=g, cv=cv),
        lambda est, X, y, g, cv: learning_curve(est, X, y, groups=g, cv=cv,
                                                train_sizes=[0.5, 1.0]),
    ],
    ids=["cross_validate", "cross_val_score", "cross_validate_params",
         "cross_val_predict", "learning_curve"],
)
def test_sklearn_model_selection_with_routing_off_raises(no_routing, run):
    X, y, g = _data()
    with pytest.raises(RuntimeError, match=ROUTING_OFF):
        run(ToyPersonalizedMean(), X, y, g, PerUserKFold(n_splits=3))


def test_routing_off_message_points_at_skdpp_cross_val_predict(no_routing):
    X, y, g = _data()
    with pytest.raises(RuntimeError, match=r"skdpp\.model_selection\.cross_val_predict"):
        sklearn_cross_val_predict(ToyPersonalizedMean(), X, y, groups=g,
                                  cv=PerUserKFold(n_splits=3))


def test_routing_off_also_refuses_estimators_without_groups(no_routing):
    # The splitter cannot see the estimator; with routing on the same call works.
    X, y, g = _data()
    with pytest.raises(RuntimeError, match=ROUTING_OFF):
        GridSearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=PerUserKFold(3)).fit(X, y, groups=g)
    with sklearn.config_context(enable_metadata_routing=True):
        GridSearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=PerUserKFold(3)).fit(X, y, groups=g)


@pytest.mark.parametrize("cv", SPLITTERS, ids=repr)
def test_direct_split_with_routing_off_is_fine(no_routing, cv):
    # Looping over the splits by hand passes groups to every call yourself.
    X, y, g = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        splits = list(cv.split(X, y, g))
    assert len(splits) == cv.get_n_splits()


def test_routing_on_search_fits_and_scores_with_ids(routing):
    X, y, g = _data()
    search = GridSearchCV(ToyPersonalizedMean(random_state=0), {"epsilon": [1.0, np.inf]},
                          cv=PerUserKFold(3), refit=True).fit(X, y, groups=g)
    assert search.best_estimator_.n_users_ == 40
    assert search.best_score_ > 0.9


def test_the_check_uses_public_facts_only(no_routing):
    # Same call, data that differ in one user: the same error, word for word.
    X, y, g = _data()
    messages = []
    for groups in (g, np.where(g == 0, 999, g)):
        with pytest.raises(RuntimeError) as error:
            cross_validate(ToyPersonalizedMean(), X, y, groups=groups, cv=PerUserKFold(3))
        messages.append(str(error.value))
    assert messages[0] == messages[1]


# --------------------------------------------------------------------------- #
# Item 5: the declared scikit-learn floor routes groups to a Pipeline's score
# --------------------------------------------------------------------------- #
def _floor(requirement):
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists() or sys.version_info < (3, 11):
        pytest.skip("pyproject.toml (or tomllib) not available")
    import tomllib

    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.split(">=")[0].strip() == requirement)
    return tuple(int(p) for p in spec.split(">=")[1].split(",")[0].strip().split("."))


def test_declared_scikit_learn_floor_routes_groups_to_pipeline_scorer():
    # scikit-learn < 1.8 builds the default (scoring=None) scorer of a Pipeline
    # from the Pipeline's own score request, which never includes groups:
    # GridSearchCV(Pipeline(...)) and cross_validate(Pipeline(...)) then score
    # cold start. The floor must be a version that routes them.
    assert _floor("scikit-learn") >= (1, 8)


@pytest.mark.parametrize("how", ["grid_search", "cross_validate"])
def test_pipeline_default_scoring_is_personalized(routing, how):
    X, y, g = _data()
    pipe = Pipeline([("scale", StandardScaler()),
                     ("toy", ToyPersonalizedMean(epsilon=np.inf))])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*called with groups=None")
        if how == "grid_search":
            scores = GridSearchCV(pipe, {"toy__clip_norm": [1.0, 2.0]},
                                  cv=PerUserKFold(3)).fit(X, y, groups=g).cv_results_[
                "mean_test_score"]
        else:
            scores = cross_validate(pipe, X, y, cv=PerUserKFold(3),
                                    params={"groups": g})["test_score"]
    assert np.all(scores > 0.99), scores


# --------------------------------------------------------------------------- #
# Item 6: cross_val_predict with groups to predict
# --------------------------------------------------------------------------- #
def _by_hand(est, X, y, g, cv):
    pred = np.empty(y.shape)
    for train, test in cv.split(X, y, None if isinstance(cv, KFold) else g):
        fitted = clone(est).fit(X[train], y[train], groups=g[train])
        pred[test] = fitted.predict(X[test], groups=g[test])
    return pred


@pytest.mark.parametrize("routing_on", [False, True])
def test_cross_val_predict_personalizes(routing_on):
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf)
    with sklearn.config_context(enable_metadata_routing=routing_on):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pred = cross_val_predict(est, X, y, groups=g, cv=PerUserKFold(3))
    assert_allclose(pred, _by_hand(est, X, y, g, PerUserKFold(3)), rtol=1e-12)
    assert np.mean((pred - y) ** 2) < 1e-3  # personal offsets, not cold start


def test_cross_val_predict_default_cv_is_per_user_kfold():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf)
    assert_allclose(cross_val_predict(est, X, y, groups=g),
                    _by_hand(est, X, y, g, PerUserKFold(5)), rtol=1e-12)
    assert_allclose(cross_val_predict(est, X, y, groups=g, cv=4),
                    _by_hand(est, X, y, g, PerUserKFold(4)), rtol=1e-12)


def test_cross_val_predict_pipeline_with_routing(routing):
    X, y, g = _data()
    pipe = Pipeline([("scale", StandardScaler()),
                     ("toy", ToyPersonalizedMean(epsilon=np.inf))])
    pred = cross_val_predict(pipe, X, y, groups=g, cv=PerUserKFold(3), n_jobs=2)
    expected = np.empty(y.shape)
    for train, test in PerUserKFold(3).split(X, y, g):
        fitted = clone(pipe).fit(X[train], y[train], groups=g[train])
        expected[test] = fitted.predict(X[test], groups=g[test])
    assert_allclose(pred, expected, rtol=1e-12)


def test_cross_val_predict_pandas_and_string_ids():
    pd = pytest.importorskip("pandas")
    X, y, g = _data()
    ids = pd.Series([f"user-{u:03d}" for u in g])
    est = ToyPersonalizedMean(epsilon=np.inf)
    pred = cross_val_predict(est, pd.DataFrame(X), pd.Series(y), groups=ids, cv=3)
    assert_allclose(pred, cross_val_predict(est, X, y, groups=g, cv=3), rtol=1e-12)


def test_cross_val_predict_passes_fit_params():
    X, y, g = _data()

    class Recorder(ToyPersonalizedMean):
        def fit(self, X, y, groups=None, marker=None):
            assert marker is not None and marker.shape == (X.shape[0],)
            return super().fit(X, y, groups=groups)

    cross_val_predict(Recorder(epsilon=np.inf), X, y, groups=g, cv=3,
                      params={"marker": np.arange(y.size)})


def test_cross_val_predict_requires_groups():
    X, y, _ = _data()
    with pytest.raises(ValueError, match="needs `groups`"):
        cross_val_predict(ToyPersonalizedMean(), X, y, groups=None)
    with pytest.raises(ValueError, match="groups"):
        cross_val_predict(ToyPersonalizedMean(), X, y, groups=np.arange(3))


def test_cross_val_predict_groups_in_params_is_an_error():
    X, y, g = _data()
    with pytest.raises(ValueError, match="pass groups=groups"):
        cross_val_predict(ToyPersonalizedMean(), X, y, groups=g, params={"groups": g})


def test_cross_val_predict_needs_a_partition():
    X, y, g = _data()
    g = g.copy()
    g[:3] = [1000, 1001, 1002]  # three users with one row: never tested by PerUserKFold
    with pytest.raises(ValueError, match=r"3 rows .* never in a test fold"):
        cross_val_predict(ToyPersonalizedMean(epsilon=np.inf), X, y, groups=g, cv=3)
    with pytest.raises(ValueError, match="exactly one test fold"):
        cross_val_predict(ToyPersonalizedMean(), X, y, groups=g,
                          cv=PerUserShuffleSplit(n_splits=2, random_state=0))


def test_cross_val_predict_accepts_any_partitioning_splitter():
    # KFold deals rows, not users: most test users keep rows in training.
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # KFold does not get the groups it ignores
        pred = cross_val_predict(est, X, y, groups=g, cv=KFold(3))
    assert_allclose(pred,
                    _by_hand(est, X, y, g, KFold(3)), rtol=1e-12)


def test_sklearn_cross_val_predict_warning_points_at_ours(routing):
    X, y, g = _data()
    with pytest.warns(UserWarning, match=r"called with groups=None.*"
                                         r"skdpp\.model_selection\.cross_val_predict"):
        pred = sklearn_cross_val_predict(ToyPersonalizedMean(epsilon=np.inf), X, y,
                                         cv=PerUserKFold(3), params={"groups": g})
    ours = cross_val_predict(ToyPersonalizedMean(epsilon=np.inf), X, y, groups=g,
                             cv=PerUserKFold(3))
    assert np.mean((pred - y) ** 2) > 10 * np.mean((ours - y) ** 2)


def test_cross_val_predict_method_and_classifier():
    from sklearn.base import BaseEstimator, ClassifierMixin

    class PersonalSign(ClassifierMixin, BaseEstimator):
        """Predicts each user's majority label; unknown users get 'neg'."""

        def fit(self, X, y, groups=None):
            self.classes_ = np.unique(y)
            self.majority_ = {u: max(set(y[g == u]), key=list(y[g == u]).count)
                              for g in [np.asarray(groups)] for u in np.unique(g)}
            return self

        def predict(self, X, groups=None):
            return np.array([self.majority_.get(u, "neg") for u in groups])

    X, y, g = _data()
    labels = np.where(g % 2 == 0, "pos", "neg")
    pred = cross_val_predict(PersonalSign(), X, labels, groups=g, cv=3)
    assert_array_equal(pred, labels)
    with pytest.raises(AttributeError, match="predict_proba"):
        cross_val_predict(PersonalSign(), X, labels, groups=g, cv=3, method="predict_proba")
