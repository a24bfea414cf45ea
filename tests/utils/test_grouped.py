import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.utils import (
    UserIndex,
    rank_within_user,
    segment_counts,
    segment_mean,
    segment_outer_sum,
    segment_sum,
    split_within_users,
)


def _naive_segment_sum(values, groups):
    users = sorted(set(groups.tolist()))
    return np.stack([values[groups == u].sum(axis=0) for u in users])


def _naive_outer(A, B, groups):
    users = sorted(set(groups.tolist()))
    return np.stack([A[groups == u].T @ B[groups == u] for u in users])


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 30, size=200) * 7 - 50  # unsorted, gaps, negatives
    return rng, groups


def test_inputs_not_mutated(data):
    rng, groups = data
    A = rng.normal(size=(groups.shape[0], 3))
    A0, g0 = A.copy(), groups.copy()
    index = UserIndex.from_groups(groups, groups.shape[0])
    segment_sum(A, index)
    segment_outer_sum(A, A, index)
    assert_array_equal(A, A0)
    assert_array_equal(groups, g0)


def test_string_ids_sorted_and_codes():
    index = UserIndex.from_groups(np.array(["bob", "al", "bob", "cy"]), 4)
    assert_array_equal(index.users, ["al", "bob", "cy"])
    assert_array_equal(index.users[index.codes], ["bob", "al", "bob", "cy"])
    assert_array_equal(index.counts, [1, 2, 1])


def test_unsorted_rows_order_and_offsets(data):
    _, groups = data
    index = UserIndex.from_groups(groups, groups.shape[0])
    sorted_codes = index.codes[index.order]
    assert np.all(np.diff(sorted_codes) >= 0)
    assert_array_equal(index.offsets, np.r_[0, np.cumsum(index.counts)])
    # stable: rows of each user keep their original order
    for u in range(index.n_users):
        block = index.order[index.offsets[u]:index.offsets[u + 1]]
        assert np.all(np.diff(block) > 0)


def test_none_groups_every_row_a_user():
    index = UserIndex.from_groups(None, 5)
    assert index.n_users == 5
    assert_array_equal(index.codes, np.arange(5))


def test_none_groups_requires_n_samples():
    with pytest.raises(ValueError, match="n_samples"):
        UserIndex.from_groups(None)


def test_one_user():
    index = UserIndex.from_groups(["u"] * 6, 6)
    assert index.n_users == 1
    assert_allclose(segment_sum(np.arange(6.0), index), [15.0], rtol=1e-12)


def test_million_users():
    # Speed is measured in benchmarks/, not asserted here.
    rng = np.random.default_rng(1)
    groups = rng.permutation(1_000_000)
    values = rng.normal(size=(1_000_000, 2))
    index = UserIndex.from_groups(groups, groups.shape[0])
    sums = segment_sum(values, index)
    rank = rank_within_user(index, rng)
    assert index.n_users == 1_000_000
    assert_allclose(sums[groups], values, rtol=1e-12)
    assert_array_equal(rank, 0)


def test_users_with_one_row_split_and_rank():
    index = UserIndex.from_groups([5, 6, 6, 7], 4)
    mask = split_within_users(index, 0.5, np.random.default_rng(0))
    assert mask[0] and mask[3]  # single-row users go to the first part
    assert mask[1] != mask[2]
    assert_array_equal(rank_within_user(index)[[0, 3]], [0, 0])


@pytest.mark.parametrize("groups", [
    np.array([1, "a", 2, "a", 1], dtype=object),
    np.array([7, "7"], dtype=object),
    pd.Series([7, "7", 7], dtype=object),
    [7.0, "7"],
    np.array([b"7", "7"], dtype=object),
])
def test_mixed_kind_ids_raise(groups):
    # input-domain rule: all numbers or all strings (7 and "7" are never one user)
    with pytest.raises(ValueError, match="all be numbers or all be strings"):
        UserIndex.from_groups(groups, len(groups))


def test_mixed_kind_rule_depends_on_types_only():
    # numbers of different Python/numpy types are one kind; so are str and np.str_
    index = UserIndex.from_groups(np.array([1, 1.0, True, np.int64(2)], dtype=object), 4)
    assert index.n_users == 2
    index = UserIndex.from_groups(np.array(["a", np.str_("a"), "b"], dtype=object), 3)
    assert index.n_users == 2
    # the same types with other values raise the same way
    for values in ([0, "x"], [123456, "zzz"]):
        with pytest.raises(ValueError, match="number and str"):
            UserIndex.from_groups(np.array(values, dtype=object), 2)


def test_unorderable_ids_of_one_type_fallback():
    groups = np.empty(4, dtype=object)
    groups[:] = [(1, "a"), ("a", 1), (1, "a"), ("b", 2)]
    index = UserIndex.from_groups(groups, 4)
    assert index.n_users == 3
    assert index.codes[0] == index.codes[2]
    probe = np.empty(2, dtype=object)
    probe[:] = [("a", 1), ("zz", 0)]
    assert_array_equal(index.lookup(probe), [index.codes[1], -1])


def test_pandas_series_accepted():
    index = UserIndex.from_groups(pd.Series(["x", "y", "x"]), 3)
    assert_array_equal(index.counts, [2, 1])


@pytest.mark.parametrize(
    "groups",
    [np.array([1.0, np.nan]), pd.Series(["a", None]), np.array(["a", None], dtype=object),
     pd.Series([1, pd.NA], dtype="Int64")],
)
def test_missing_ids_raise(groups):
    with pytest.raises(ValueError, match="`groups` contains 1 missing"):
        UserIndex.from_groups(groups, 2)


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="`groups` has 3 ids but the data have 4"):
        UserIndex.from_groups([1, 2, 3], 4)


def test_two_dimensional_groups_raise():
    with pytest.raises(ValueError, match="1-D"):
        UserIndex.from_groups(np.zeros((3, 2)), 3)


def test_lookup_unseen_and_seen():
    index = UserIndex.from_groups([10, 30, 20], 3)
    assert_array_equal(index.lookup([30, 40, 10, 5]), [2, -1, 0, -1])


def test_lookup_dtype_mismatch_all_unseen():
    index = UserIndex.from_groups([1, 2, 3], 3)
    assert_array_equal(index.lookup(["1", "2"]), [-1, -1])
    sindex = UserIndex.from_groups(["a", "b"], 2)
    assert_array_equal(sindex.lookup([0, 1]), [-1, -1])


def test_lookup_object_strings_against_str_index():
    index = UserIndex.from_groups(pd.Series(["a", "b"]), 2)
    assert_array_equal(index.lookup(np.array(["b", "c"])), [1, -1])
    assert_array_equal(index.lookup(pd.Series(["a", "q"])), [0, -1])


def test_lookup_nan_is_unseen():
    index = UserIndex.from_groups([1.5, 2.5], 2)
    assert_array_equal(index.lookup([np.nan, 2.5]), [-1, 1])


def test_index_is_immutable():
    index = UserIndex.from_groups([0, 1], 2)
    with pytest.raises(AttributeError):
        index.n_users = 3
    with pytest.raises(ValueError):
        index.codes[0] = 1


def test_subset_rows_drops_and_renumbers():
    index = UserIndex.from_groups(["a", "b", "c", "b"], 4)
    sub = index.subset_rows(np.array([True, False, False, True]))
    assert_array_equal(sub.users, ["a", "b"])
    assert_array_equal(sub.codes, [0, 1])
    assert_array_equal(index.lookup(sub.users), [0, 1])


def test_segment_sum_matches_naive_loop(data):
    rng, groups = data
    values = rng.normal(size=(groups.shape[0], 3, 2))
    index = UserIndex.from_groups(groups, groups.shape[0])
    assert_allclose(segment_sum(values, index), _naive_segment_sum(values, groups),
                    rtol=1e-12, atol=1e-12)


def test_segment_sum_1d_matches_naive_loop(data):
    rng, groups = data
    values = rng.normal(size=groups.shape[0])
    index = UserIndex.from_groups(groups, groups.shape[0])
    assert_allclose(segment_sum(values, index), _naive_segment_sum(values, groups),
                    rtol=1e-12, atol=1e-12)


def test_segment_sum_integer_values_stay_integer(data):
    _, groups = data
    index = UserIndex.from_groups(groups, groups.shape[0])
    sums = segment_sum(np.ones(groups.shape[0], dtype=int), index)
    assert sums.dtype.kind == "i"
    assert_array_equal(sums, index.counts)


def test_segment_mean_matches_naive_loop(data):
    rng, groups = data
    values = rng.normal(size=(groups.shape[0], 4))
    index = UserIndex.from_groups(groups, groups.shape[0])
    naive = _naive_segment_sum(values, groups) / index.counts[:, None]
    assert_allclose(segment_mean(values, index), naive, rtol=1e-12)


def test_segment_ops_empty_data():
    index = UserIndex.from_groups(np.array([], dtype=int), 0)
    assert segment_sum(np.zeros((0, 3)), index).shape == (0, 3)
    assert segment_outer_sum(np.zeros((0, 3)), None, index).shape == (0, 3, 3)
    assert segment_counts(index).shape == (0,)


@pytest.mark.parametrize("max_bytes", [8 * 6, 64 * 2**20])
def test_segment_outer_sum_matches_naive_loop(data, max_bytes):
    rng, groups = data
    A = rng.normal(size=(groups.shape[0], 3))
    B = rng.normal(size=(groups.shape[0], 2))
    index = UserIndex.from_groups(groups, groups.shape[0])
    assert_allclose(segment_outer_sum(A, B, index, max_bytes=max_bytes),
                    _naive_outer(A, B, groups), rtol=1e-10, atol=1e-12)


def test_segment_outer_sum_gram_default(data):
    rng, groups = data
    A = rng.normal(size=(groups.shape[0], 3))
    index = UserIndex.from_groups(groups, groups.shape[0])
    assert_allclose(segment_outer_sum(A, None, index), _naive_outer(A, A, groups),
                    rtol=1e-10, atol=1e-12)


def test_rank_within_user_is_permutation_per_user(data):
    rng, groups = data
    index = UserIndex.from_groups(groups, groups.shape[0])
    rank = rank_within_user(index, np.random.default_rng(5))
    key = index.codes * groups.shape[0] + rank
    assert np.unique(key).shape[0] == groups.shape[0]
    assert np.all(rank < index.counts[index.codes])


def test_rank_within_user_deterministic_under_seed(data):
    _, groups = data
    index = UserIndex.from_groups(groups, groups.shape[0])
    assert_array_equal(rank_within_user(index, 7), rank_within_user(index, 7))
    assert not np.array_equal(rank_within_user(index, 7), rank_within_user(index, 8))


def test_split_within_users_sizes():
    groups = np.repeat(np.arange(4), [10, 3, 2, 1])
    index = UserIndex.from_groups(groups, groups.shape[0])
    mask = split_within_users(index, 0.5, np.random.default_rng(0))
    assert_array_equal(segment_sum(mask.astype(int), index), [5, 2, 1, 1])


def test_split_within_users_rounding_guard():
    index = UserIndex.from_groups(np.zeros(10, dtype=int), 10)
    assert split_within_users(index, 0.3).sum() == 3


@pytest.mark.parametrize("fraction", [0, 1, -0.2, 1.5])
def test_split_within_users_bad_fraction(fraction):
    index = UserIndex.from_groups([0, 0], 2)
    with pytest.raises(ValueError, match="`fraction`"):
        split_within_users(index, fraction)


def test_tuple_ids_are_users():
    index = UserIndex.from_groups([(1, "a"), (2, "b"), (1, "a")], 3)
    assert index.n_users == 2
    assert_array_equal(index.codes, [0, 1, 0])
    assert_array_equal(index.lookup([(2, "b"), (3, "c")]), [1, -1])


def test_constructor_allows_users_without_rows():
    index = UserIndex(np.array([0, 1, 2]), np.array([0, 2, 2]))
    assert_array_equal(index.counts, [1, 0, 2])
    assert_allclose(segment_sum(np.ones((3, 2)), index), [[1, 1], [0, 0], [2, 2]])
    assert_allclose(segment_outer_sum(np.ones((3, 1)), None, index)[:, 0, 0], [1, 0, 2])


def test_user_index_pickles():
    import pickle

    index = UserIndex.from_groups(["b", "a", "b", "c"], n_samples=4)
    again = pickle.loads(pickle.dumps(index))
    np.testing.assert_array_equal(again.codes, index.codes)
    np.testing.assert_array_equal(again.offsets, index.offsets)
    assert list(again.users) == list(index.users)


@pytest.mark.parametrize("key_kind", ["hash", "small", "equal"])
def test_canonical_order_is_the_exact_lexicographic_order(key_kind):
    from skdpp.utils._grouped import canonical_order

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 50, size=2000)
    keys = {"hash": rng.integers(0, 2**63, size=2000, dtype=np.int64).astype(np.uint64),
            "small": rng.integers(0, 30, size=2000).astype(np.uint64),  # e.g. item codes
            "equal": np.zeros(2000, dtype=np.uint64)}[key_kind]
    assert_array_equal(canonical_order(codes, 50, keys), np.lexsort((keys, codes)))


@pytest.mark.parametrize("name", ["PPSGDRegressor", "AdaptiveWeightMF"])
def test_estimators_reject_mixed_kind_user_ids(name):
    import skdpp

    rng = np.random.default_rng(0)
    ids = pd.Series([7, "7", 8, "8"] * 5, dtype=object)  # one pandas object column
    X = rng.integers(0, 4, size=(20, 1)).astype(float)
    y = rng.uniform(1, 5, size=20)
    est = getattr(skdpp, name)(epsilon=np.inf)
    with pytest.raises(ValueError, match="all be numbers or all be strings"):
        est.fit(X, y, groups=ids)
    est.fit(X, y, groups=ids.astype(str))  # one kind: fine
    with pytest.raises(ValueError, match="all be numbers or all be strings"):
        est.personalize(X[:2], y[:2], pd.Series(["9", 9], dtype=object))
