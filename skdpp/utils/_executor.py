"""Run an algorithm's block functions: map over blocks of users, sum the partials.

Every skdpp algorithm is written as a *driver* (runs in the fitting process:
plans, releases through :class:`~skdpp.privacy.Releaser`, computes the next
broadcast) that calls ``executor.map(fn, broadcast)`` where ``fn`` is a pure
function of one block of whole users::

    fn(block, state, broadcast) -> (partial, state)

``partial`` is a (possibly nested tuple/dict of) array(s) summed over blocks,
typically a sum of clipped per-user contributions, or ``None``; ``state`` is
the block's per-user state carried to the next call (e.g. personal
parameters, a data split), or ``None``. Privacy noise is never added inside
``fn``: the driver adds it once, to the combined sum.

:class:`LocalExecutor` runs the blocks in this process, in order; the Dask
executor of :mod:`skdpp.distributed` runs the same functions on workers. Both
combine partials in a fixed order, so a fit does not depend on scheduling.

Examples
--------
>>> import numpy as np
>>> from skdpp.utils._executor import LocalExecutor
>>> from skdpp.utils._grouped import UserIndex, make_blocks
>>> X, y = np.ones((6, 2)), np.arange(6.0)
>>> blocks = make_blocks(X, y, UserIndex.from_groups([0, 0, 1, 1, 2, 2]), max_rows=2)
>>> ex = LocalExecutor(blocks)
>>> float(ex.map(lambda block, state, b: (block.take(block.y).sum() * b, state),
...                  broadcast=2.0))
30.0
"""

import numpy as np

__all__ = ["LocalExecutor", "TreeSum", "merge_tree_nodes", "tree_add", "tree_nodes",
           "tree_nodes_result", "tree_sum"]


def tree_add(a, b):
    """``a + b`` for nested tuples/lists/dicts of arrays (``None`` is the zero)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict):
        return {k: tree_add(a[k], b[k]) for k in a}
    if isinstance(a, (tuple, list)):
        return type(a)(tree_add(x, z) for x, z in zip(a, b))
    return a + b


class TreeSum:
    """Streaming pairwise sum: ``add`` partials one at a time, read ``result()``.

    Partials are merged like a binary counter (two sums of ``2**j`` partials
    merge into one of ``2**(j+1)``), so at most ``log2(n)`` partial sums are
    held at once and the association order depends only on the number of
    partials, not on when they arrive.
    """

    def __init__(self):
        self._stack = []  # (level, value), levels strictly decreasing

    def add(self, partial):
        level, value = 0, partial
        while self._stack and self._stack[-1][0] == level:
            _, left = self._stack.pop()
            value, level = tree_add(left, value), level + 1
        self._stack.append((level, value))

    def result(self):
        value = None
        for _, v in reversed(self._stack):
            value = v if value is None else tree_add(v, value)
        return value


def tree_sum(partials):
    """Sum of a sequence of partials in the fixed pairwise order of :class:`TreeSum`.

    Every executor combines block partials this way, so results agree to the
    bit for the same partition into blocks.
    """
    acc = TreeSum()
    for p in partials:
        acc.add(p)
    return acc.result()


# --------------------------------------------------------------------------- #
# The same sum, computed in pieces (distributed executors)
# --------------------------------------------------------------------------- #
# The tree of :class:`TreeSum` over ``n`` partials has a node for every aligned
# dyadic range ``[a 2**j, (a + 1) 2**j)`` inside ``[0, n)`` (its value: left child
# + right child), and its result folds the maximal such ranges (the binary
# digits of ``n``) from the right. Any contiguous run of partials can compute
# the nodes that lie inside it; merging the runs' nodes in any grouping gives the
# same nodes, hence bit for bit the same sum as ``tree_sum`` of all partials.


def _siblings(left, right):
    (level_a, pos_a, _), (level_b, pos_b, _) = left, right
    return (level_a == level_b and pos_a % (2 << level_a) == 0
            and pos_b == pos_a + (1 << level_a))


def _push(stack, node):
    stack.append(node)
    while len(stack) >= 2 and _siblings(stack[-2], stack[-1]):
        (level, pos, left), (_, _, right) = stack[-2], stack.pop()
        stack[-1] = (level + 1, pos, tree_add(left, right))


def tree_nodes(partials, start=0):
    """The nodes of the :func:`tree_sum` tree covered by consecutive partials.

    Parameters
    ----------
    partials : sequence
        Partials at global positions ``start, start + 1, ...`` of the full
        sequence (e.g. the blocks of one partition of users).
    start : int, default=0
        Global position of ``partials[0]``.

    Returns
    -------
    nodes : list of (level, position, value)
        The maximal aligned dyadic ranges ``[position, position + 2**level)``
        inside the run, with their sums computed as :class:`TreeSum` does.
        Combine runs with :func:`merge_tree_nodes` and read the total with
        :func:`tree_nodes_result`.

    Examples
    --------
    >>> from skdpp.utils._executor import (merge_tree_nodes, tree_nodes,
    ...                                    tree_nodes_result, tree_sum)
    >>> x = [0.1, 0.2, 0.3, 1e16, -1e16, 0.7]
    >>> runs = [tree_nodes(x[:1], 0), tree_nodes(x[1:4], 1), tree_nodes(x[4:], 4)]
    >>> tree_nodes_result(merge_tree_nodes(*runs)) == tree_sum(x)
    True
    """
    stack = []
    for i, partial in enumerate(partials):
        _push(stack, (0, int(start) + i, partial))
    return stack


def merge_tree_nodes(*node_lists):
    """Merge the nodes of several runs (:func:`tree_nodes`), in any grouping.

    Sibling nodes are summed into their parent (left + right), exactly as
    :class:`TreeSum` does; runs need not be adjacent (nodes of a gap stay
    apart until the run between them is merged in).

    Returns
    -------
    nodes : list of (level, position, value)
        Sorted by position.
    """
    nodes = sorted((node for nodes in node_lists for node in nodes),
                   key=lambda node: node[1])
    stack = []
    for node in nodes:
        _push(stack, node)
    return stack


def tree_nodes_result(nodes):
    """The total of the nodes of *all* partials: equal to :func:`tree_sum` of them.

    Parameters
    ----------
    nodes : list of (level, position, value)
        The merged nodes of runs covering positions ``0 .. n - 1``.
    """
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


def _concat(parts):
    first = parts[0]
    if isinstance(first, dict):
        return {k: _concat([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(_concat([p[i] for p in parts]) for i in range(len(first)))
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


class LocalExecutor:
    """Runs block functions in this process, over blocks in user order.

    Parameters
    ----------
    blocks : sequence of UserBlock
        Blocks of whole users, consecutive in user order.

    Attributes
    ----------
    blocks : list of UserBlock
    states : list
        The per-block state returned by the last function run on each block.
    n_users : int
        Number of users (public).
    """

    def __init__(self, blocks):
        self.blocks = list(blocks)
        self.states = [None] * len(self.blocks)
        self.n_users = int(sum(b.n_users for b in self.blocks))

    def map(self, fn, broadcast=None):
        """Run ``fn(block, state, broadcast) -> (partial, state)`` on every block.

        Returns
        -------
        total
            The pairwise-tree sum of the partials (``None`` if all are ``None``).
        """
        total = TreeSum()
        for i, block in enumerate(self.blocks):
            partial, self.states[i] = fn(block, self.states[i], broadcast)
            total.add(partial)
        return total.result()

    def collect(self, fn, broadcast=None):
        """Per-user results ``fn(block, state, broadcast)`` concatenated in user order.

        ``fn`` returns an array (or a tuple/dict of arrays) whose first axis
        is the block's users. In-process the result is the concatenation; the
        Dask executor returns a handle to the parts kept on the workers.
        """
        parts = [fn(b, s, broadcast) for b, s in zip(self.blocks, self.states)]
        return _concat(parts)
