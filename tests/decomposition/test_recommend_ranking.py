"""AdaptiveWeightMF.recommend's popularity-aware ranking and the tiny-catalogue warning.

Issue 20, item 7 (fast, synthetic). The benchmark on MovieLens is
benchmarks/bench_mf_recommend.py.
"""

import copy
import warnings

import numpy as np
import pytest

from skdpp import AdaptiveWeightMF
from skdpp.metrics import recall_at_k
from skdpp.model_selection import per_user_train_test_split


def _popular_ratings(n_users=400, n_items=60, per_user=12, seed=0):
    """Zipf popularity decides WHICH items a user rates; the ratings favour rare items.

    A user's held-out items are then mostly popular items, while the predicted
    rating prefers the (higher rated) long tail: the setting where a ranking
    by predicted rating alone fails at recall.
    """
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1) ** 1.1
    pop /= pop.sum()
    quality = 0.8 * np.linspace(-1, 1, n_items)  # rare items are rated higher
    taste = rng.standard_normal((n_users, 2)) * 0.3
    V = rng.standard_normal((n_items, 2))
    users, items = [], []
    for j in range(n_users):  # test-only data generation
        users.append(np.full(per_user, j))
        items.append(rng.choice(n_items, size=per_user, replace=False, p=pop))
    users, items = np.concatenate(users), np.concatenate(items)
    y = 3.5 + quality[items] + np.einsum("nk,nk->n", taste[users], V[items]) \
        + 0.3 * rng.standard_normal(users.size)
    return items[:, None], np.clip(y, 1, 5), users


def _mf(**params):
    base = dict(n_components=2, n_iter=2, random_state=0, delta=1e-5,
                items=np.arange(60))
    base.update(params)
    return AdaptiveWeightMF(**base)


# --------------------------------------------------------------------------- #
# Privacy: a user's list is a function of the releases and that user's rows
# --------------------------------------------------------------------------- #
def _with_other_users_changed(est, X, y, g, user):
    """A copy of ``est`` with the same releases whose OTHER users rated other items."""
    other = copy.deepcopy(est)
    rng = np.random.default_rng(1)
    mask = g != user
    X2 = rng.integers(0, 60, size=(int(mask.sum()), 1))  # other items, other ratings
    y2 = rng.uniform(1, 5, size=int(mask.sum()))
    other.personalize(X2, y2, groups=g[mask])
    return other


def _popularity_from_seen(est, groups, n_items=10):
    """BROKEN variant: popularity from the users' rated items (not released)."""
    counts = np.asarray(est._seen.sum(axis=0)).ravel()
    order = np.argsort(-counts, kind="stable")[:n_items]
    return np.tile(est.item_ids_[order], (len(groups), 1))


@pytest.mark.parametrize("ranking", ["blend", "rating", "popularity"])
def test_recommendations_are_a_function_of_releases_and_own_rows(ranking):
    X, y, g = _popular_ratings(n_users=120)
    est = _mf(epsilon=4.0).fit(X, y, g)
    user = 7
    other = _with_other_users_changed(est, X, y, g, user)
    # Every other user's personal part and seen items changed; the releases
    # and user 7's own part did not.
    assert not np.allclose(other.user_embeddings_, est.user_embeddings_)
    assert other.item_counts_ is est.item_counts_ or np.array_equal(
        other.item_counts_, est.item_counts_)
    np.testing.assert_array_equal(est.recommend([user], ranking=ranking),
                                  other.recommend([user], ranking=ranking))
    # ... and for a cold user, whose list depends on the releases only.
    np.testing.assert_array_equal(est.recommend([-5], ranking=ranking),
                                  other.recommend([-5], ranking=ranking))


def test_neighbour_check_catches_a_ranking_by_unreleased_counts():
    # The same check detects a popularity computed from other users' rated
    # items (what the released noisy counts replace).
    X, y, g = _popular_ratings(n_users=120)
    est = _mf(epsilon=4.0).fit(X, y, g)
    other = _with_other_users_changed(est, X, y, g, 7)
    assert not np.array_equal(_popularity_from_seen(est, [7]),
                              _popularity_from_seen(other, [7]))


# --------------------------------------------------------------------------- #
# Utility: the blend beats the rating alone when popularity drives the test set
# --------------------------------------------------------------------------- #
def _recall(est, X_te, g_te, ranking):
    users = np.unique(g_te)
    recs = est.recommend(users, n_items=10, ranking=ranking)
    return recall_at_k(recs, g_te, X_te[:, 0], users=users)


@pytest.mark.parametrize("epsilon", [4.0, np.inf])
def test_blend_beats_rating_only_with_popularity_structure(epsilon):
    X, y, g = _popular_ratings()
    X_tr, X_te, y_tr, _, g_tr, g_te = per_user_train_test_split(
        X, y, groups=g, test_size=0.25, random_state=0)
    est = _mf(epsilon=epsilon).fit(X_tr, y_tr, g_tr)
    blend = _recall(est, X_te, g_te, "blend")
    rating = _recall(est, X_te, g_te, "rating")
    assert blend > rating + 0.05


def test_default_ranking_is_blend_and_options_validated():
    X, y, g = _popular_ratings(n_users=120)
    est = _mf(epsilon=4.0).fit(X, y, g)
    np.testing.assert_array_equal(est.recommend([1, 2]), est.recommend([1, 2], ranking="blend"))
    # popularity_weight=0: the factor score alone (known users); cold users
    # get the popularity order.
    scores = est.user_embeddings_[est._user_codes([1], 1)] @ est.item_embeddings_.T
    scores[est._seen[est._user_codes([1], 1)].toarray() > 0] = -np.inf
    np.testing.assert_array_equal(
        est.recommend([1], popularity_weight=0.0, n_items=5)[0],
        est.item_ids_[np.argsort(-scores[0], kind="stable")[:5]])
    np.testing.assert_array_equal(est.recommend([-1]), est.recommend([-1], ranking="popularity"))
    with pytest.raises(ValueError, match="ranking"):
        est.recommend([1], ranking="votes")
    with pytest.raises(ValueError, match="popularity_weight"):
        est.recommend([1], popularity_weight=-1.0)
    no_counts = _mf(epsilon=4.0, weighting="uniform", user_budget=5).fit(X, y, g)
    assert no_counts.item_counts_ is None
    np.testing.assert_array_equal(no_counts.recommend([1, 2]),
                                  no_counts.recommend([1, 2], ranking="rating"))
    with pytest.raises(ValueError, match="released item counts"):
        no_counts.recommend([1], ranking="popularity")


# --------------------------------------------------------------------------- #
# The tiny-catalogue warning: at fit, from the released number of items only
# --------------------------------------------------------------------------- #
def _fit_warnings(est, X, y, g):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, g)
    return [str(w.message) for w in caught if "private item catalogue" in str(w.message)]


def test_tiny_catalogue_warns_at_fit_and_in_the_report(full_plan):
    X, y, g = _popular_ratings(n_users=30)
    est = _mf(epsilon=1.0, items=None)
    messages = _fit_warnings(est, X, y, g)
    assert est.n_items_ == 0
    assert len(messages) == 1 and "published no item" in messages[0]
    assert "items=[...]" in messages[0]
    note = [n for n in est.privacy_report_.notes if "item(s) published" in n]
    assert note and "0 item(s) published" in note[0] and "empty" in note[0]


def test_tiny_catalogue_warning_is_a_function_of_the_release(full_plan):
    # Neighbouring data sets (user 0 replaced by an extreme user) with the same
    # release (same number of published items): the same warning, word for word.
    X, y, g = _popular_ratings(n_users=30)
    X2, y2 = X.copy(), y.copy()
    mine = g == 0
    X2[mine, 0] = 59
    y2[mine] = 1e6
    a, b = _mf(epsilon=1.0, items=None), _mf(epsilon=1.0, items=None)
    wa, wb = _fit_warnings(a, X, y, g), _fit_warnings(b, X2, y2, g)
    assert a.n_items_ == b.n_items_ == 0
    assert wa == wb and len(wa) == 1


def test_no_tiny_catalogue_warning_for_a_public_or_large_catalogue():
    X, y, g = _popular_ratings(n_users=60)
    assert _fit_warnings(_mf(epsilon=1.0), X, y, g) == []  # public catalogue
    est = _mf(epsilon=np.inf, items=None)
    assert _fit_warnings(est, X, y, g) == [] and est.n_items_ >= 10
