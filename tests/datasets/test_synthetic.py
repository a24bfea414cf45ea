import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.datasets import (
    make_additive_personalized_regression,
    make_personalized_margin_classification,
    make_shared_representation_regression,
    make_skewed_ratings,
)

GENERATORS = [
    (make_shared_representation_regression,
     dict(n_users=50, n_features=6, n_components=2, n_samples_per_user=4)),
    (make_additive_personalized_regression,
     dict(n_users=30, n_features=10, n_samples_per_user=5, n_personal_features=2)),
    (make_skewed_ratings, dict(n_users=100, n_items=20, mean_items_per_user=5)),
    (make_personalized_margin_classification,
     dict(n_users=30, n_features=8, n_samples_per_user=4, margin=0.05)),
]


@pytest.mark.parametrize("make, kwargs", GENERATORS, ids=lambda v: getattr(v, "__name__", ""))
def test_deterministic_under_random_state(make, kwargs):
    X1, y1, g1, _ = make(**kwargs, random_state=3)
    X2, y2, g2, _ = make(**kwargs, random_state=3)
    X3, y3, _, _ = make(**kwargs, random_state=4)
    assert_array_equal(X1, X2)
    assert_array_equal(y1, y2)
    assert_array_equal(g1, g2)
    assert not np.array_equal(y1, y3)


@pytest.mark.parametrize("make, kwargs", GENERATORS, ids=lambda v: getattr(v, "__name__", ""))
def test_shapes_and_sorted_groups(make, kwargs):
    X, y, groups, _ = make(**kwargs, random_state=0)
    assert X.ndim == 2 and X.shape[0] == y.shape[0] == groups.shape[0]
    assert np.all(np.diff(groups) >= 0)
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))


def test_shared_representation_ground_truth():
    X, y, groups, info = make_shared_representation_regression(
        n_users=40, n_features=7, n_components=3, n_samples_per_user=5, noise=0.0,
        random_state=0)
    assert_allclose(info.U.T @ info.U, np.eye(3), atol=1e-12)
    assert_allclose(np.linalg.norm(info.V, axis=1), 1.0, rtol=1e-12)
    assert_allclose(y, np.einsum("ij,ij->i", X, info.coef[groups]), rtol=1e-10, atol=1e-12)
    assert_array_equal(np.bincount(groups), np.full(40, 5))


def test_shared_representation_noise_level():
    X, y, groups, info = make_shared_representation_regression(
        n_users=500, n_features=5, n_samples_per_user=20, noise=0.5, random_state=1,
        n_test_samples_per_user=0)
    resid = y - np.einsum("ij,ij->i", X, info.coef[groups])
    assert_allclose(resid.std(), 0.5, rtol=0.05)  # 10 000 draws: ~1% std error
    assert "X_test" not in info


def test_shared_representation_gaussian_heads_not_unit():
    *_, info = make_shared_representation_regression(
        n_users=200, n_features=5, head_norm="gaussian", random_state=0)
    assert np.linalg.norm(info.V, axis=1).std() > 0.1


@pytest.mark.parametrize("feature_dist", ["gaussian", "uniform", "rademacher"])
def test_shared_representation_feature_dists_unit_variance(feature_dist):
    X, *_ = make_shared_representation_regression(
        n_users=1000, n_features=4, feature_dist=feature_dist, random_state=0)
    assert_allclose(X.var(axis=0), 1.0, rtol=0.05)  # 10 000 draws per column


def test_shared_representation_test_rows_same_users():
    _, _, groups, info = make_shared_representation_regression(
        n_users=20, n_features=4, n_test_samples_per_user=3, random_state=0)
    assert_array_equal(np.unique(info.groups_test), np.unique(groups))
    assert info.X_test.shape == (60, 4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_components=9, n_features=4), "n_components"),
    (dict(head_norm="l2"), "head_norm"),
    (dict(feature_dist="cauchy"), "feature_dist"),
    (dict(noise=-1.0), "noise"),
    (dict(n_users=0), "n_users"),
])
def test_shared_representation_bad_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_shared_representation_regression(**kwargs)


def test_additive_ground_truth_and_variances():
    X, y, groups, info = make_additive_personalized_regression(
        n_users=200, n_features=6, n_samples_per_user=50, n_personal_features=2,
        noise=0.0, random_state=0)
    assert_allclose(info.coef, info.w + info.theta, rtol=1e-12)
    assert np.all(info.theta[:, :4] == 0) and np.all(info.theta[:, 4:] != 0)
    assert_allclose(y, np.einsum("ij,ij->i", X, info.coef[groups]), rtol=1e-10)
    assert_allclose(X.var(axis=0), 1.0 / np.arange(1, 7), rtol=0.05)
    assert info.bayes_risk == 0.0


def test_additive_personal_spread():
    *_, info = make_additive_personalized_regression(
        n_users=2000, n_features=10, n_samples_per_user=1, random_state=0)
    assert_allclose(info.theta[:, -5:].std(), 0.01, rtol=0.05)


def test_skewed_ratings_ground_truth():
    X, y, groups, info = make_skewed_ratings(n_users=300, noise=0.0, test_size=0.0,
                                             random_state=0)
    pred = np.einsum("ij,ij->i", info.user_factors[groups], info.item_factors[X[:, 0]])
    assert_allclose(y, pred, rtol=1e-10, atol=1e-12)
    assert np.all(np.linalg.norm(info.user_factors, axis=1) <= 1 + 1e-12)
    assert np.all(np.linalg.norm(info.item_factors, axis=1) <= 1 + 1e-12)
    assert_allclose(info.item_probabilities.sum(), 20.0, rtol=1e-12)
    assert_array_equal(info.item_counts, np.bincount(X[:, 0], minlength=100))
    assert "X_test" not in info


def test_skewed_ratings_mean_items_per_user():
    _, _, groups, _ = make_skewed_ratings(n_users=2000, test_size=0.0, random_state=0)
    assert_allclose(groups.shape[0] / 2000, 20.0, rtol=0.02)


def test_skewed_ratings_power_skews_frequencies():
    *_, info1 = make_skewed_ratings(n_users=10, n_items=2000, power=1.0, random_state=0)
    *_, info2 = make_skewed_ratings(n_users=10, n_items=2000, power=3.0, random_state=0)
    # a x^(a-1): larger a concentrates q near its maximum -> smaller relative spread
    cv1 = info1.item_probabilities.std() / info1.item_probabilities.mean()
    cv2 = info2.item_probabilities.std() / info2.item_probabilities.mean()
    assert cv2 < cv1


def test_skewed_ratings_per_user_split():
    X, y, groups, info = make_skewed_ratings(n_users=500, test_size=0.2, random_state=0)
    assert set(info.groups_test.tolist()) <= set(groups.tolist())
    n_train = np.bincount(groups, minlength=500)
    n_test = np.bincount(info.groups_test, minlength=500)
    total = n_train + n_test
    many = total >= 2
    assert_array_equal(n_test[many], total[many] - np.clip(
        np.ceil(np.round(0.8 * total[many], 9)), 1, total[many] - 1))


def test_margin_classification_margin_and_ball():
    X, y, groups, info = make_personalized_margin_classification(
        n_users=50, n_features=12, n_components=3, n_samples_per_user=6, radius=2.0,
        margin=0.1, head_norm=1.5, n_test_samples_per_user=4, random_state=0)
    assert np.all(np.linalg.norm(X, axis=1) <= 2.0 + 1e-12)
    scores = np.einsum("ij,ij->i", X @ info.U, info.V[groups])
    assert np.all(y * scores >= 0.1)
    assert_allclose(np.linalg.norm(info.V, axis=1), 1.5, rtol=1e-12)
    assert_array_equal(np.bincount(groups), np.full(50, 6))
    assert info.X_test.shape == (200, 12)


def test_margin_classification_flips():
    X, y, groups, info = make_personalized_margin_classification(
        n_users=400, n_features=5, n_samples_per_user=10, flip_y=0.2, random_state=0)
    scores = np.einsum("ij,ij->i", X @ info.U, info.V[groups])
    assert_array_equal(y * np.sign(scores) < 0, info.flipped)
    assert_allclose(info.flipped.mean(), 0.2, rtol=0.1)  # 4000 draws: ~3% std error


def test_margin_classification_impossible_margin_raises():
    with pytest.raises(ValueError, match="margin"):
        make_personalized_margin_classification(margin=1.0)
    with pytest.raises(ValueError, match="margin"):
        make_personalized_margin_classification(n_users=2, n_features=400, margin=0.9,
                                                random_state=0)
