"""segment_outer_sum as batched per-user products: same sums as the row-by-row loop."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from skdpp.utils import UserIndex, segment_outer_sum
from skdpp.utils._grouped import EXACT_SIZES, padded_sizes


def _row_by_row(A, B, index):
    """The definition: one outer product per row, added to its user's sum."""
    out = np.zeros((index.n_users, A.shape[1], B.shape[1]))
    for r in range(A.shape[0]):
        out[index.codes[r]] += np.outer(A[r], B[r])
    return out


def _assert_close(got, want, rtol=1e-12):
    scale = np.max(np.abs(want), axis=(1, 2), keepdims=True)
    assert np.all(np.abs(got - want) <= rtol * scale), np.max(np.abs(got - want) / (scale + 1e-300))


@pytest.mark.parametrize("counts", [
    [3] * 20,                                   # uniform (one batch, no padding)
    list(range(1, 101)),                        # > 64 distinct counts: padded ladder
    [1, 2, 60, 7, 7, 300, 1],                   # a few distinct counts, one larger user
])
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("max_bytes", [64, 5000, 64 * 2**20])
def test_matches_row_by_row_sum(counts, same, max_bytes):
    rng = np.random.default_rng(len(counts))
    groups = np.repeat(np.arange(len(counts)) * 3 - 7, counts)
    perm = rng.permutation(groups.size)  # rows of a user not contiguous
    groups = groups[perm]
    A = rng.normal(size=(groups.size, 4)) * rng.lognormal(0, 3, size=(groups.size, 1))
    B = None if same else rng.normal(size=(groups.size, 3))
    index = UserIndex.from_groups(groups, groups.size)
    got = segment_outer_sum(A, B, index, max_bytes=max_bytes)
    _assert_close(got, _row_by_row(A, A if same else B, index))


def test_users_without_rows_and_integer_input():
    index = UserIndex(np.arange(4), np.array([0, 0, 3, 0, 3]))
    A = np.arange(10).reshape(5, 2)
    got = segment_outer_sum(A, None, index)
    assert got.dtype == np.float64
    assert_array_equal(got[[1, 2]], 0.0)
    assert_array_equal(got, _row_by_row(A.astype(float), A.astype(float), index))


def test_input_not_modified_and_read_only_ok():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 5, size=40)
    A = rng.normal(size=(40, 3))
    A.setflags(write=False)
    before = A.copy()
    segment_outer_sum(A, A, UserIndex.from_groups(groups, 40), max_bytes=100)
    assert_array_equal(A, before)


def test_padded_sizes_ladder():
    counts = np.arange(0, 1000)
    sizes = padded_sizes(counts)
    assert np.all(sizes >= counts)
    assert_array_equal(sizes[counts <= EXACT_SIZES], counts[counts <= EXACT_SIZES])
    assert np.all(sizes <= np.ceil(1.125 * counts) + 1)
    assert np.unique(sizes).size < EXACT_SIZES + 40
    # a user's size is a function of its own count: the same in any block
    few = np.array([5, 5, 0, 9, 700])
    assert_array_equal(padded_sizes(few), sizes[few])
