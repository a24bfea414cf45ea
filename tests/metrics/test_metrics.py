import numpy as np
import pytest
import sklearn
from numpy.testing import assert_allclose
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import GridSearchCV, cross_validate

from skdpp.metrics import make_personalized_scorer, recall_at_k, rmse
from skdpp.model_selection import PerUserKFold


def _naive_recall(recommended, pairs, k):
    per_user = []
    for u in range(recommended.shape[0]):
        test = {i for (v, i) in pairs if v == u}
        if test:
            per_user.append(len(test & set(recommended[u, :k].tolist())) / min(k, len(test)))
    return np.mean(per_user)


def test_rmse_matches_definition():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    assert_allclose(rmse(a, b), np.sqrt(np.mean((a - b) ** 2)), rtol=1e-12)


def test_rmse_shape_mismatch_raises():
    with pytest.raises(ValueError):
        rmse([1.0, 2.0], [1.0, 2.0, 3.0])


def test_recall_at_k_matches_naive_loop():
    rng = np.random.default_rng(1)
    recommended = np.stack([rng.permutation(30)[:10] for _ in range(20)])
    pairs = {(int(u), int(i)) for u, i in zip(rng.integers(0, 20, 150),
                                              rng.integers(0, 30, 150))}
    users, items = np.array(sorted(pairs)).T
    for k in (1, 5, 10):
        assert_allclose(recall_at_k(recommended, users, items, k=k),
                        _naive_recall(recommended, pairs, k), rtol=1e-12)


def test_recall_at_k_min_k_denominator():
    # one held-out item, found at rank 3 -> recall 1 with k=3 (denominator min(k, 1))
    assert recall_at_k(np.array([[7, 8, 9]]), [0], [9], k=3) == 1.0
    assert recall_at_k(np.array([[7, 8, 9]]), [0], [9], k=2) == 0.0


def test_recall_at_k_string_ids_and_users_order():
    recommended = np.array([["a", "b"], ["c", "d"]])
    value = recall_at_k(recommended, ["bob", "al"], ["c", "c"], users=["al", "bob"])
    assert_allclose(value, 0.5, rtol=1e-12)


def test_recall_at_k_excludes_users_without_test_items():
    per_user = recall_at_k(np.array([[1], [2]]), [0], [1], average=False)
    assert per_user[0] == 1.0 and np.isnan(per_user[1])


def test_recall_at_k_duplicates_count_once():
    assert recall_at_k(np.array([[1, 1]]), [0, 0, 0], [1, 1, 2]) == 0.5


def test_recall_at_k_unknown_user_raises():
    with pytest.raises(ValueError, match="no row in `recommended`"):
        recall_at_k(np.array([[1]]), [5], [1])


@pytest.mark.parametrize("k", [0, 3, 1.5])
def test_recall_at_k_bad_k(k):
    with pytest.raises(ValueError, match="`k`"):
        recall_at_k(np.array([[1, 2]]), [0], [1], k=k)


class GroupsRecorder(RegressorMixin, BaseEstimator):
    """Test-only estimator: per-user mean, records the groups seen at predict."""

    __metadata_request__fit = {"groups": True}
    __metadata_request__predict = {"groups": True}

    seen = []  # class-level log (clones are fitted inside the searches)

    def __init__(self, shrink=0.0):
        self.shrink = shrink

    def fit(self, X, y, groups=None):
        g = np.asarray(groups)
        self.users_, inv = np.unique(g, return_inverse=True)
        self.means_ = (1 - self.shrink) * np.bincount(inv, weights=y) / np.bincount(inv)
        return self

    def predict(self, X, groups=None):
        GroupsRecorder.seen.append(None if groups is None else np.asarray(groups))
        if groups is None:
            return np.zeros(len(X))
        pos = np.searchsorted(self.users_, np.asarray(groups))
        return self.means_[np.clip(pos, 0, len(self.users_) - 1)]


@pytest.fixture
def user_data():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(12), 6)
    y = rng.normal(size=12)[groups] * 5 + 0.1 * rng.normal(size=72)
    X = rng.normal(size=(72, 2))
    return X, y, groups


def test_scorer_passes_groups_to_predict(user_data):
    X, y, groups = user_data
    est = GroupsRecorder().fit(X, y, groups=groups)
    GroupsRecorder.seen.clear()
    scorer = make_personalized_scorer(rmse, greater_is_better=False)
    score = scorer(est, X, y, groups=groups)
    np.testing.assert_array_equal(GroupsRecorder.seen[-1], groups)
    assert_allclose(score, -rmse(y, est.predict(X, groups=groups)), rtol=1e-12)


def test_scorer_requests_groups():
    scorer = make_personalized_scorer(rmse)
    assert scorer.get_metadata_routing().score.requests["groups"] is True
    scorer.set_score_request(groups=False)
    assert scorer.get_metadata_routing().score.requests["groups"] is False


def test_cross_validate_routes_groups_to_scorer(user_data):
    X, y, groups = user_data
    GroupsRecorder.seen.clear()
    scorer = make_personalized_scorer(rmse, greater_is_better=False)
    with sklearn.config_context(enable_metadata_routing=True):
        res = cross_validate(GroupsRecorder(), X, y, cv=PerUserKFold(3), scoring=scorer,
                             params={"groups": groups}, return_indices=True)
    assert len(GroupsRecorder.seen) == 3
    for seen, test in zip(GroupsRecorder.seen, res["indices"]["test"]):
        np.testing.assert_array_equal(seen, groups[test])
    assert np.all(res["test_score"] > -1.0)  # personal means beat the zero cold-start


def test_grid_search_routes_groups_to_scorer(user_data):
    X, y, groups = user_data
    GroupsRecorder.seen.clear()
    scorer = make_personalized_scorer(rmse, greater_is_better=False)
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(GroupsRecorder(), {"shrink": [0.0, 0.9]}, scoring=scorer,
                              cv=PerUserKFold(2), refit=False)
        search.fit(X, y, groups=groups)
    assert len(GroupsRecorder.seen) == 4
    assert all(s is not None for s in GroupsRecorder.seen)
    assert search.best_params_ == {"shrink": 0.0}


def test_scorer_multimetric_dict_routes_groups(user_data):
    X, y, groups = user_data
    GroupsRecorder.seen.clear()
    scoring = {"rmse": make_personalized_scorer(rmse, greater_is_better=False),
               "r2": make_personalized_scorer(sklearn.metrics.r2_score)}
    with sklearn.config_context(enable_metadata_routing=True):
        res = cross_validate(GroupsRecorder(), X, y, cv=PerUserKFold(2), scoring=scoring,
                             params={"groups": groups})
    assert all(s is not None for s in GroupsRecorder.seen)
    assert np.all(res["test_r2"] > 0.5)


def test_scorer_without_groups_calls_plain_predict(user_data):
    X, y, groups = user_data
    est = GroupsRecorder().fit(X, y, groups=groups)
    GroupsRecorder.seen.clear()
    make_personalized_scorer(rmse)(est, X, y)
    assert GroupsRecorder.seen == [None]


def test_make_personalized_scorer_bad_response_method():
    with pytest.raises(ValueError, match="response_method"):
        make_personalized_scorer(rmse, response_method="transform")


def test_make_personalized_scorer_not_callable():
    with pytest.raises(TypeError, match="metric"):
        make_personalized_scorer("rmse")
