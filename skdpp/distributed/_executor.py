"""Run an algorithm's block functions on a Dask cluster: :class:`DaskExecutor`.

Partials are combined on the workers, then on the driver, as nodes of the fixed
pairwise tree over *all* blocks (:mod:`skdpp.distributed._tree`): with the same
blocks the sum is bit for bit ``LocalExecutor``'s, whatever the scheduling.
"""

import functools
import operator
import uuid

import numpy as np

from ..base import quiet_numerics
from ..utils._executor import _concat
from ._tree import merge_tree_nodes, tree_nodes, tree_nodes_result

__all__ = ["DaskExecutor"]

# Broadcasts larger than this are scattered to every worker once per call.
_SCATTER_BYTES = 256 * 2**10


def _quiet_call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` under :func:`~skdpp.base.quiet_numerics`."""
    with quiet_numerics():
        return fn(*args, **kwargs)


def submit_quiet(client, fn, *args, **kwargs):
    """``client.submit`` under :func:`~skdpp.base.quiet_numerics` (a floating-point
    warning or error on a worker that depends on one user's values would leak)."""
    return client.submit(_quiet_call, fn, *args, **kwargs)


def _name(fn):
    """The name of a block function (of the function a ``functools.partial`` wraps)."""
    fn = getattr(fn, "func", fn)
    return getattr(fn, "__name__", type(fn).__name__).replace("<", "").replace(">", "")


def _run_blocks(fn, part, previous, broadcast):
    """``fn(block, state, broadcast)`` over one partition's blocks (states of ``previous``)."""
    blocks = part.blocks if hasattr(part, "blocks") else part
    states = [None] * len(blocks) if previous is None else previous[1]
    return [fn(b, s, broadcast) for b, s in zip(blocks, states)]


def _map_partition(fn, part, previous, broadcast, start):
    """``fn`` over one partition's blocks: (tree nodes of the partials, new states)."""
    out = _run_blocks(fn, part, previous, broadcast)
    partials, states = zip(*out) if out else ((), ())
    return tree_nodes(partials, start), list(states)


def _merge_nodes(*results):
    """The tree nodes of several partitions' results (run on their worker)."""
    return merge_tree_nodes(*[r[0] for r in results])


def _collect_partition(fn, part, previous, broadcast):
    return _concat(_run_blocks(fn, part, previous, broadcast))


def _spec(value):
    """The nested structure of ``value`` with ``(shape, dtype)`` at the leaves."""
    if isinstance(value, dict):
        return {k: _spec(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_spec(v) for v in value)
    value = np.asarray(value)
    return (value.shape, value.dtype)


def _from_chunks(futures, specs):
    """The dask array concatenating the arrays ``futures`` hold (``specs``: their
    ``(shape, dtype)``), one chunk each."""
    import dask
    import dask.array as da

    return da.concatenate([da.from_delayed(dask.delayed(f), shape=shape, dtype=dtype)
                           for f, (shape, dtype) in zip(futures, specs)])


def concat_chunks(client, futures):
    """:func:`_from_chunks` with the shapes and dtypes read on the workers."""
    return _from_chunks(futures, client.gather([submit_quiet(client, _spec, f)
                                                for f in futures]))


def _leaf(value, path):
    return functools.reduce(operator.getitem, path, value)


def _is_leaf(spec):
    return isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], np.dtype)


class DaskExecutor:
    """Runs block functions on Dask workers, one task per partition of users.

    The interface of :class:`~skdpp.utils._executor.LocalExecutor`; blocks and
    their states stay on the workers. No noise is drawn here.

    Parameters
    ----------
    client : distributed.Client
    partitions : list of distributed.Future
        One per partition: its list of :class:`~skdpp.utils._grouped.UserBlock`
        (or an object with ``blocks``), consecutive in the fit's user order.
    n_blocks : list of int
        Number of blocks of each partition.
    n_users : list of int
        Number of users of each partition.
    workers : list of str, default=None
        Address of the worker holding each partition: its tasks run there,
        and its partials are combined there first.

    Attributes
    ----------
    n_users : int
        Number of users (public).
    """

    def __init__(self, client, partitions, n_blocks, n_users, workers=None):
        self.client = client
        self.partitions = list(partitions)
        self.n_blocks = [int(n) for n in n_blocks]
        self.starts = [int(s) for s in np.cumsum([0] + self.n_blocks[:-1])]
        self.users_per_partition = [int(n) for n in n_users]
        self.n_users = int(sum(self.users_per_partition))
        self.workers = list(workers) if workers is not None else [None] * len(self.partitions)
        self._results = [None] * len(self.partitions)  # last (nodes, states) per partition

    def _submit(self, p, fn, *args, name=None):
        # task keys name the block function (public code names, never data)
        key = f"skdpp-{name or fn.__name__}-{p}-{uuid.uuid4().hex}"
        worker = self.workers[p]
        placement = {} if worker is None else {"workers": [worker],
                                                "allow_other_workers": True}
        return submit_quiet(self.client, fn, *args, key=key, **placement)

    def _broadcast(self, broadcast):
        from dask.sizeof import sizeof

        if broadcast is None or sizeof(broadcast) <= _SCATTER_BYTES:
            return broadcast
        return self.client.scatter([broadcast], broadcast=True, hash=False)[0]

    def map(self, fn, broadcast=None):
        """Run ``fn(block, state, broadcast) -> (partial, state)`` on every block;
        returns the :class:`~skdpp.utils._executor.TreeSum` of the partials."""
        if not self.partitions:
            return None
        broadcast = self._broadcast(broadcast)
        name = _name(fn)
        results = [self._submit(p, _map_partition, fn, part, self._results[p], broadcast,
                                self.starts[p], name=name)
                   for p, part in enumerate(self.partitions)]
        self._results = results
        by_worker = {}
        for p, worker in enumerate(self.workers):
            by_worker.setdefault(worker, []).append(p)
        merged = [self._submit(ps[0], _merge_nodes, *[results[p] for p in ps])
                  for ps in by_worker.values()]
        return tree_nodes_result(merge_tree_nodes(*self.client.gather(merged)))

    def collect(self, fn, broadcast=None):
        """Per-user results ``fn(block, state, broadcast)``, kept on the workers.

        Returns
        -------
        result : dask.array.Array, or tuple / dict of them
            ``fn``'s structure, every array a dask array with one chunk per
            partition along the first axis.
        """
        broadcast = self._broadcast(broadcast)
        name = "collect_" + _name(fn)
        parts = [self._submit(p, _collect_partition, fn, part, self._results[p], broadcast,
                              name=name)
                 for p, part in enumerate(self.partitions)]
        specs = self.client.gather([self._submit(p, _spec, f) for p, f in enumerate(parts)])

        def build(spec0, path):
            if isinstance(spec0, dict):
                return {k: build(v, path + (k,)) for k, v in spec0.items()}
            if not _is_leaf(spec0):
                return tuple(build(v, path + (i,)) for i, v in enumerate(spec0))
            leaves = [part if not path else self._submit(p, _leaf, part, path)
                      for p, part in enumerate(parts)]
            return _from_chunks(leaves, [_leaf(spec, path) for spec in specs])

        return build(specs[0], ())

    def close(self):
        """Release the blocks' states held on the workers."""
        for r in self._results:
            if r is not None:
                r.release()
        self._results = [None] * len(self.partitions)
