"""Blocks of equal-size users: segment sums and per-user means are numpy's reductions,
and ranks_by (which keeps an equal-size path) matches argsort_within."""

import numpy as np
import pytest

from skdpp.linear_model._auto import user_means
from skdpp.utils._grouped import UserBlock


def _block(n_users, c, d, rng):
    X = rng.standard_normal((n_users * c, d)) * rng.lognormal(0, 3, size=(n_users * c, d))
    X[rng.random(X.shape) < 0.05] = -0.0  # signed zeros must survive as numpy keeps them
    X[rng.random(X.shape) < 0.05] = 0.0
    return UserBlock(X, np.zeros(n_users * c), None, np.arange(n_users),
                     np.arange(n_users, dtype=np.uint64), np.full(n_users, c)), X


@pytest.mark.parametrize("c", [1, 2, 5, 10, 16, 30])
def test_segment_sum_and_user_means_unchanged_for_equal_size_users(c):
    """Per-user sums and means of equal-size users are np.add.reduceat's."""
    rng = np.random.default_rng(c)
    block, X = _block(300, c, 12, rng)
    offsets = np.arange(0, 300 * c, c)
    np.testing.assert_array_equal(block.segment_sum(X), np.add.reduceat(X, offsets, axis=0))
    w = np.repeat(1.0 / np.full(300, c), c)
    np.testing.assert_array_equal(user_means(block, X),
                                  np.add.reduceat(X * w[:, None], offsets, axis=0))
    assert block.uniform_count() == c


def test_uniform_count_mixed_sizes():
    X = np.ones((5, 8))
    block = UserBlock(X, np.zeros(5), None, np.arange(2), np.arange(2, dtype=np.uint64), [2, 3])
    assert block.uniform_count() == 0
    np.testing.assert_array_equal(block.segment_sum(X), [[2.0] * 8, [3.0] * 8])


@pytest.mark.parametrize("c", [2, 5, 10])
def test_ranks_by_equal_size_users_matches_argsort_within(c):
    """Per-user sorts give the ranks of the block-wide sort, ties included."""
    from skdpp.utils._grouped import argsort_within

    rng = np.random.default_rng(c)
    block, _ = _block(4000, c, 8, rng)
    keys = rng.random(block.n_rows)
    ties = np.arange(0, block.n_rows - 1, 7)
    keys[ties] = keys[ties + 1]  # exact ties (within a user or across two users)
    keys[3] = np.nextafter(1.0, 0.0)  # rounds up to code + 1 for large codes
    keys[-1] = np.nextafter(1.0, 0.0)
    perm = argsort_within(block.row_user, keys)
    expected = np.empty(block.n_rows, dtype=np.int64)
    expected[perm] = block.rank
    np.testing.assert_array_equal(block.ranks_by(keys), expected)
