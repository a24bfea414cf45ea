"""UserBlock.segment_sum_wide: per-user sums of wide arrays as one sparse product."""

import numpy as np
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.utils._grouped import UserIndex, make_blocks


def _block(groups, X):
    return make_blocks(X, np.zeros(len(groups)), UserIndex.from_groups(groups),
                       max_rows=None)[0]


def test_segment_sum_wide_matches_segment_sum():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 7, size=50)
    X = rng.standard_normal((50, 30))
    block = _block(groups, X)
    rows = block.take(X)
    assert_allclose(block.segment_sum_wide(rows), block.segment_sum(rows),
                    rtol=1e-12, atol=1e-12)


def test_segment_sum_wide_counts_bools_in_float32_and_empty_users_are_zero():
    rng = np.random.default_rng(1)
    groups = np.repeat([0, 1, 2, 3], [3, 1, 4, 2])
    X = rng.standard_normal((10, 2))
    block = _block(groups, X)
    block = block.select(block.take(groups) != 2)          # user 2 keeps no row
    flags = block.take(X) > 0
    got = block.segment_sum_wide(flags, dtype=np.float32)
    assert got.dtype == np.float32
    want = np.array([flags[block.row_user == u].sum(axis=0) for u in range(4)])
    assert_array_equal(got, want)
    assert_array_equal(got[2], 0.0)


def test_segment_sum_wide_with_weights_is_the_sum_of_the_weighted_rows():
    """The weights enter as the sparse matrix's entries, without forming
    ``weights[:, None] * values``."""
    rng = np.random.default_rng(2)
    groups = rng.integers(0, 9, size=200)
    X = rng.standard_normal((200, 9))
    block = _block(groups, X)
    rows, w = block.take(X), rng.random(200)
    got = block.segment_sum_wide(rows, weights=w)
    assert_allclose(got, block.segment_sum(w[:, None] * rows), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, block.segment_sum_wide(rows))  # the weights are used
