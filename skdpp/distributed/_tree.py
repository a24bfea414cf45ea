"""The fixed pairwise sum of :class:`~skdpp.utils._executor.TreeSum`, computed in pieces.

The tree over ``n`` partials has a node for every aligned dyadic range
``[a 2**j, (a + 1) 2**j)`` inside ``[0, n)`` (left child + right child); its
result folds the maximal such ranges from the right. A contiguous run of
partials (one partition's blocks) computes the nodes inside it; merging the
runs' nodes in any grouping gives bit for bit the sum of ``tree_sum``.
"""

from ..utils._executor import tree_add

__all__ = ["merge_tree_nodes", "tree_nodes", "tree_nodes_result"]


def _siblings(left, right):
    (level_a, pos_a, _), (level_b, pos_b, _) = left, right
    return (level_a == level_b and pos_a % (2 << level_a) == 0
            and pos_b == pos_a + (1 << level_a))


def tree_nodes(partials, start=0):
    """The nodes ``(level, position, value)`` of the :func:`tree_sum` tree covered by
    ``partials`` at global positions ``start, start + 1, ...``: the maximal aligned
    dyadic ranges ``[position, position + 2**level)`` inside the run.

    Examples
    --------
    >>> from skdpp.distributed._tree import (merge_tree_nodes, tree_nodes,
    ...                                      tree_nodes_result)
    >>> from skdpp.utils._executor import tree_sum
    >>> x = [0.1, 0.2, 0.3, 1e16, -1e16, 0.7]
    >>> runs = [tree_nodes(x[:1], 0), tree_nodes(x[1:4], 1), tree_nodes(x[4:], 4)]
    >>> tree_nodes_result(merge_tree_nodes(*runs)) == tree_sum(x)
    True
    """
    return merge_tree_nodes([(0, int(start) + i, p) for i, p in enumerate(partials)])


def merge_tree_nodes(*node_lists):
    """Merge the nodes of several runs (:func:`tree_nodes`, any grouping, not
    necessarily adjacent): siblings summed as :class:`TreeSum` does; sorted."""
    nodes = sorted((node for nodes in node_lists for node in nodes),
                   key=lambda node: node[1])
    stack = []
    for node in nodes:
        stack.append(node)
        while len(stack) >= 2 and _siblings(stack[-2], stack[-1]):
            (level, pos, left), (_, _, right) = stack[-2], stack.pop()
            stack[-1] = (level + 1, pos, tree_add(left, right))
    return stack


def tree_nodes_result(nodes):
    """The total of the merged ``nodes`` of runs covering ``0 .. n - 1``: equal to
    :func:`tree_sum` of the partials."""
    nodes = merge_tree_nodes(nodes)
    expected = 0
    for level, pos, _ in nodes:
        if pos != expected:
            raise ValueError(f"the runs do not cover position {expected} (next node "
                             f"starts at {pos}): merge the nodes of every run.")
        expected = pos + (1 << level)
    value = None
    for _, _, v in reversed(nodes):  # the fold of TreeSum.result
        value = v if value is None else tree_add(v, value)
    return value
