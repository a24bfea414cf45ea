"""The fixed summation order, computed whole or in pieces (skdpp.distributed._tree)."""

import numpy as np
import pytest

from skdpp.distributed._tree import merge_tree_nodes, tree_nodes, tree_nodes_result
from skdpp.utils._executor import (
    LocalExecutor,
    TreeSum,
    tree_sum,
)
from skdpp.utils._grouped import UserIndex, make_blocks


def _partials(n, seed):
    # Values over many magnitudes: any change of association changes the bits.
    rng = np.random.default_rng(seed)
    return [rng.normal(size=3) * 10.0 ** rng.integers(-8, 9, size=3) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 13, 64, 100])
def test_pieces_give_the_tree_sum_bit_for_bit(n):
    partials = _partials(n, n)
    expected = tree_sum(partials)
    rng = np.random.default_rng(n)
    for _ in range(5):
        cuts = np.unique(np.r_[0, rng.integers(0, n + 1, size=rng.integers(0, 5)), n])
        runs = [tree_nodes(partials[a:b], a) for a, b in zip(cuts[:-1], cuts[1:])]
        rng.shuffle(runs)
        # merge in an arbitrary grouping (e.g. per worker, then on the driver)
        half = len(runs) // 2
        nodes = merge_tree_nodes(merge_tree_nodes(*runs[:half]), merge_tree_nodes(*runs[half:]))
        np.testing.assert_array_equal(tree_nodes_result(nodes), expected)


def test_tree_sum_of_none_partials_is_none():
    assert tree_nodes_result(merge_tree_nodes(tree_nodes([None, None], 0),
                                              tree_nodes([None], 2))) is None
    acc = TreeSum()
    acc.add(None)
    assert acc.result() is None


def test_missing_run_raises():
    partials = _partials(5, 0)
    with pytest.raises(ValueError, match="do not cover position 2"):
        tree_nodes_result(merge_tree_nodes(tree_nodes(partials[:2], 0),
                                           tree_nodes(partials[3:], 3)))


def test_local_executor_sums_in_tree_order():
    X = np.ones((40, 1))
    y = np.random.default_rng(0).normal(size=40) * 1e8
    blocks = make_blocks(X, y, UserIndex.from_groups(np.arange(40) // 2), max_rows=4)
    total = LocalExecutor(blocks).map(lambda b, s, _: (b.take(b.y).sum(keepdims=True), s))
    expected = tree_sum([b.take(b.y).sum(keepdims=True) for b in blocks])
    np.testing.assert_array_equal(total, expected)
