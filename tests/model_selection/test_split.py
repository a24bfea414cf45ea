import numpy as np
import pytest
import sklearn
from numpy.testing import assert_array_equal
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, cross_validate

from skdpp.model_selection import (
    PerUserKFold,
    PerUserShuffleSplit,
    per_user_train_test_split,
)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    groups = rng.choice(np.array(["u1", "u2", "u3", "u4", "u5", "solo"]), size=60,
                        p=[0.3, 0.3, 0.2, 0.1, 0.09, 0.01])
    groups[-1] = "solo"  # a user with (at least) one row
    X = rng.normal(size=(60, 3))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.1 * rng.normal(size=60)
    return X, y, groups


SPLITTERS = [
    PerUserKFold(n_splits=3),
    PerUserKFold(n_splits=3, shuffle=True, random_state=0),
    PerUserShuffleSplit(n_splits=3, test_size=0.3, random_state=0),
]


@pytest.mark.parametrize("cv", SPLITTERS, ids=repr)
def test_every_test_user_appears_in_train(data, cv):
    X, y, groups = data
    for train, test in cv.split(X, y, groups):
        assert len(test) > 0
        assert set(groups[test]) <= set(groups[train])


@pytest.mark.parametrize("cv", SPLITTERS, ids=repr)
def test_train_and_test_disjoint_and_cover(data, cv):
    X, y, groups = data
    for train, test in cv.split(X, y, groups):
        assert np.intersect1d(train, test).size == 0
        assert_array_equal(np.sort(np.r_[train, test]), np.arange(X.shape[0]))


def test_kfold_test_folds_partition_eligible_rows(data):
    X, y, groups = data
    cv = PerUserKFold(n_splits=4, shuffle=True, random_state=1)
    tests = np.concatenate([test for _, test in cv.split(X, y, groups)])
    users, counts = np.unique(groups, return_counts=True)
    eligible = np.flatnonzero(np.isin(groups, users[counts >= 4]))
    assert_array_equal(np.sort(tests), eligible)


def test_kfold_small_users_stay_in_training():
    groups = np.array([0, 0, 0, 1, 1, 2])
    for train, test in PerUserKFold(n_splits=3).split(np.zeros((6, 1)), groups=groups):
        assert set(groups[test]) == {0}
        assert set(np.flatnonzero(groups != 0)) <= set(train)


def test_kfold_balanced_per_user():
    groups = np.repeat(np.arange(5), 7)
    for _, test in PerUserKFold(n_splits=3).split(np.zeros((35, 1)), groups=groups):
        per_user = np.bincount(groups[test], minlength=5)
        assert per_user.min() >= 2 and per_user.max() <= 3


@pytest.mark.parametrize("cv", SPLITTERS[1:], ids=repr)
def test_deterministic_under_random_state(data, cv):
    X, y, groups = data
    first = [test for _, test in cv.split(X, y, groups)]
    second = [test for _, test in cv.split(X, y, groups)]
    for a, b in zip(first, second):
        assert_array_equal(a, b)


@pytest.mark.parametrize("cv", SPLITTERS, ids=repr)
def test_groups_none_raises_with_remedy(data, cv):
    X, y, _ = data
    with pytest.raises(ValueError, match="needs `groups`.*enable_metadata_routing"):
        next(cv.split(X, y))


def test_kfold_random_state_without_shuffle_raises():
    with pytest.raises(ValueError, match="shuffle"):
        PerUserKFold(3, random_state=0)


@pytest.mark.parametrize("n_splits", [1, 0, 2.5, True])
def test_kfold_bad_n_splits(n_splits):
    with pytest.raises(ValueError, match="n_splits"):
        PerUserKFold(n_splits)


@pytest.mark.parametrize("test_size", [0, 1, 3, -0.1])
def test_shuffle_split_bad_test_size(test_size):
    with pytest.raises(ValueError, match="test_size"):
        PerUserShuffleSplit(test_size=test_size)


def test_get_n_splits():
    assert PerUserKFold(4).get_n_splits() == 4
    assert PerUserShuffleSplit(7).get_n_splits() == 7


def test_shuffle_split_per_user_sizes():
    groups = np.repeat(np.arange(4), [10, 3, 2, 1])
    cv = PerUserShuffleSplit(n_splits=2, test_size=0.3, random_state=0)
    for _, test in cv.split(np.zeros((16, 1)), groups=groups):
        assert_array_equal(np.bincount(groups[test], minlength=4), [3, 1, 1, 0])


def test_metadata_request_groups():
    for cv in SPLITTERS:
        routing = cv.get_metadata_routing()
        assert routing.split.requests["groups"] is True


def test_cross_validate_with_routing(data):
    X, y, groups = data
    with sklearn.config_context(enable_metadata_routing=True):
        res = cross_validate(Ridge(), X, y, cv=PerUserKFold(3),
                             params={"groups": groups}, return_indices=True)
    assert len(res["test_score"]) == 3
    for train, test in zip(res["indices"]["train"], res["indices"]["test"]):
        assert set(groups[test]) <= set(groups[train])


def test_grid_search_with_routing(data):
    X, y, groups = data
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(Ridge(), {"alpha": [0.1, 10.0]},
                              cv=PerUserShuffleSplit(2, random_state=0))
        search.fit(X, y, groups=groups)
    assert search.best_params_["alpha"] in (0.1, 10.0)
    assert search.n_splits_ == 2


def test_train_test_split_returns_groups_and_keeps_users(data):
    X, y, groups = data
    idx = np.arange(X.shape[0])
    X_tr, X_te, i_tr, i_te, g_tr, g_te = per_user_train_test_split(
        X, idx, groups=groups, test_size=0.25, random_state=0)
    assert_array_equal(X_te, X[i_te])
    assert_array_equal(g_te, groups[i_te])
    assert_array_equal(g_tr, groups[i_tr])
    assert set(g_te) <= set(g_tr)


def test_train_test_split_min_train_rows():
    groups = np.repeat(np.arange(3), [5, 3, 2])
    _, X_te, g_tr, g_te = per_user_train_test_split(
        np.arange(10), groups=groups, test_size=0.5, min_train_rows=2, random_state=0)
    assert_array_equal(np.bincount(g_te, minlength=3), [3, 1, 0])
    assert_array_equal(np.bincount(g_tr, minlength=3), [2, 2, 2])


def test_train_test_split_deterministic(data):
    X, y, groups = data
    a = per_user_train_test_split(X, groups=groups, random_state=3)
    b = per_user_train_test_split(X, groups=groups, random_state=3)
    assert_array_equal(a[1], b[1])


def test_train_test_split_does_not_mutate(data):
    X, y, groups = data
    X0, g0 = X.copy(), groups.copy()
    per_user_train_test_split(X, y, groups=groups, random_state=0)
    assert_array_equal(X, X0)
    assert_array_equal(groups, g0)


def test_train_test_split_requires_groups(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="`groups`"):
        per_user_train_test_split(X, y, groups=None)
