"""Run block functions ``fn(block, state, broadcast) -> (partial, state)``
(:ref:`architecture`): here (:class:`LocalExecutor`) or on Dask workers
(:mod:`skdpp.distributed`), partials (nested arrays or ``None``; never noise)
summed in one fixed order (:class:`TreeSum`) whatever the scheduling.

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

__all__ = ["LocalExecutor", "TreeSum", "tree_add", "tree_sum"]


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
    """Streaming pairwise sum (``add``, then ``result()``), merged like a binary
    counter: ``log2(n)`` sums held, the order a function of ``n`` only."""

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
    """Sum of a sequence of partials in the fixed pairwise order of :class:`TreeSum`."""
    acc = TreeSum()
    for p in partials:
        acc.add(p)
    return acc.result()


def _concat(parts):
    first = parts[0]
    if isinstance(first, dict):
        return {k: _concat([p[k] for p in parts]) for k in first}
    if isinstance(first, tuple):
        return tuple(_concat([p[i] for p in parts]) for i in range(len(first)))
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


class LocalExecutor:
    """Runs block functions here over ``blocks`` in user order; ``states``: the state
    the last function returned for each block."""

    def __init__(self, blocks):
        self.blocks = list(blocks)
        self.states = [None] * len(self.blocks)
        self.n_users = int(sum(b.n_users for b in self.blocks))

    def map(self, fn, broadcast=None):
        """Run ``fn`` on every block; the :class:`TreeSum` of the partials."""
        total = TreeSum()
        for i, block in enumerate(self.blocks):
            partial, self.states[i] = fn(block, self.states[i], broadcast)
            total.add(partial)
        return total.result()

    def collect(self, fn, broadcast=None):
        """Per-user results ``fn(block, state, broadcast)`` concatenated in user order."""
        return _concat([fn(b, s, broadcast) for b, s in zip(self.blocks, self.states)])
