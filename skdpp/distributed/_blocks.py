"""Users' rows partitioned by user and persisted on a Dask cluster: :class:`UserBlocks`
(the distributed counterpart of ``fit``'s ``X, y, groups``)."""

import numbers
import operator

import numpy as np

from ..utils._grouped import UserIndex, _to_numpy
from ..utils._random import hash_ids
from ._executor import _quiet_call, concat_chunks, submit_quiet

__all__ = ["UserBlocks"]


class RawPartition:
    """One partition's ``X``, ``y``, ``groups`` and row ``labels`` (index or row numbers)."""

    __slots__ = ("X", "y", "groups", "labels")

    def __init__(self, X, y, groups, labels):
        self.X, self.y, self.groups, self.labels = X, y, groups, labels

    @property
    def n_rows(self):
        return int(self.groups.shape[0])

    def __repr__(self):
        return f"RawPartition(n_rows={self.n_rows})"


def _raw_from_arrays(X, y, groups, labels=None):
    """A :class:`RawPartition` from array-likes (pandas objects converted)."""
    X, y, groups = _to_numpy(X), _to_numpy(y), _to_numpy(groups)
    if X.ndim == 1:
        X = X[:, None]
    if groups.ndim != 1:
        raise ValueError(f"groups must be 1-D (one user id per row), got shape "
                         f"{groups.shape}.")
    if not X.shape[0] == y.shape[0] == groups.shape[0]:
        raise ValueError(
            f"X, y and groups must have the same number of rows; got {X.shape[0]}, "
            f"{y.shape[0]} and {groups.shape[0]}.")
    return RawPartition(X, y, groups, np.arange(groups.shape[0], dtype=np.int64)
                        if labels is None else labels)


def _raw_from_tuple(part):
    if isinstance(part, RawPartition):
        return part
    if not (isinstance(part, (tuple, list)) and len(part) in (3, 4)):
        raise TypeError(
            f"each part must compute to a tuple (X, y, groups) of arrays (or (X, y, "
            f"groups, row_labels)); got {type(part).__name__}.")
    return _raw_from_arrays(*part)


def _raw_from_pandas(df, groups, target, features, groups_in_index):
    ids = df.index.to_numpy() if groups_in_index else df[groups].to_numpy()
    return RawPartition(df[list(features)].to_numpy(), df[target].to_numpy(), ids,
                        df.index)


def _labels(raw):
    return np.asarray(raw.labels)


def id_range(users):
    """``(first, last)`` of the sorted unique ``users`` if their kind is ordered."""
    ordered = users.size and users.dtype.kind in "biufUSmM"
    return (users[0], users[-1]) if ordered else None


def _summary(raw):
    """Public-to-the-driver facts of one partition: its size and its id range."""
    out = {"n_rows": raw.n_rows, "n_features": int(raw.X.shape[1]), "id_range": None}
    try:
        out["id_range"] = id_range(UserIndex.from_groups(raw.groups, raw.n_rows).users)
    except (TypeError, ValueError):
        pass  # missing ids are reported by the estimator's validation
    return out


def _hash_buckets(raw, n_buckets):
    """Sorted unique hashes of the partition's user ids, split into buckets."""
    try:
        users = UserIndex.from_groups(raw.groups, raw.n_rows).users
    except ValueError:  # missing ids: the fit reports them
        users = np.zeros(0, dtype=np.int64)
    h = np.unique(hash_ids(users))
    bucket = (h % np.uint64(n_buckets)).astype(np.int64)
    order = np.argsort(bucket, kind="stable")
    cuts = np.searchsorted(bucket[order], np.arange(n_buckets + 1))
    return [h[order[a:b]] for a, b in zip(cuts[:-1], cuts[1:])]


def _shared_in_bucket(*hashes):
    """Number of user-id hashes found in more than one partition."""
    allh = np.concatenate(hashes)
    return int(allh.shape[0] - np.unique(allh).shape[0])


def ranges_disjoint(ranges):
    """True if the partitions' [min, max] id ranges are known and pairwise disjoint."""
    if any(r is None for r in ranges):
        return False
    try:
        ranges = sorted(ranges, key=lambda r: r[0])
        return all(a[1] < b[0] for a, b in zip(ranges[:-1], ranges[1:]))
    except TypeError:  # ids of different types in different partitions
        return False


class UserBlocks:
    """Rows of whole users, partitioned by user and persisted on a Dask cluster.

    Built by :meth:`from_dask_dataframe`, :meth:`from_arrays` or :meth:`from_delayed`
    for :func:`~skdpp.distributed.fit_distributed` and ``predict_distributed``.

    Attributes
    ----------
    client : distributed.Client
    partitions : list of distributed.Future
        One future per partition (its rows as numpy arrays).
    n_partitions : int
    n_features : int
    from_dataframe : bool
        Built from a dask DataFrame (predictions are a dask Series indexed like it).
    divisions : tuple or None
        The DataFrame's divisions when its partitioning was kept, else None.

    Notes
    -----
    Every user's rows are in exactly one partition (checked: ``ValueError``);
    the cluster sees the private data (:ref:`distributed`).
    """

    def __init__(self, client, partitions, *, n_features, id_ranges, n_rows,
                 from_dataframe=False, divisions=None):
        self.client = client
        self.partitions = list(partitions)
        self.n_partitions = len(self.partitions)
        self.n_features = int(n_features)
        self.from_dataframe = bool(from_dataframe)
        self.divisions = divisions
        self._id_ranges = list(id_ranges)
        self._n_rows = [int(n) for n in n_rows]
        # every user known to be in one partition (else fit_distributed checks)
        self._users_disjoint = False

    def __repr__(self):
        return f"UserBlocks(n_partitions={self.n_partitions}, n_features={self.n_features})"

    @classmethod
    def from_arrays(cls, X, y, groups, *, n_partitions, client=None):
        """Partition in-memory arrays by user (ranges of sorted ids, about equal
        numbers of rows) and scatter them to the workers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        groups : array-like of shape (n_samples,)
            User id of each row (required; ``np.arange(n_samples)``: row-level).
        n_partitions : int
            Number of partitions (at most the number of users).
        client : distributed.Client, default=None
            Default: the current client (``distributed.get_client()``).

        Returns
        -------
        blocks : UserBlocks
            Row labels (:meth:`row_labels`): the row numbers.
        """
        client = _get_client(client)
        if groups is None:
            raise ValueError(
                "from_arrays needs groups (one user id per row); got None. Pass "
                "groups=np.arange(len(X)) to make every row its own user.")
        raw = _raw_from_arrays(X, y, groups)
        if isinstance(n_partitions, bool) or not isinstance(n_partitions, numbers.Integral) \
                or n_partitions < 1:
            raise ValueError(f"n_partitions must be a positive int, got {n_partitions!r}.")
        index = UserIndex.from_groups(raw.groups, raw.n_rows)
        n_parts = min(int(n_partitions), max(index.n_users, 1))
        before = np.concatenate([[0], np.cumsum(index.counts)[:-1]])
        part_of_user = np.minimum(before * n_parts // max(raw.n_rows, 1), n_parts - 1)
        part_of_row = part_of_user[index.codes]
        order = np.argsort(part_of_row, kind="stable")
        cuts = np.searchsorted(part_of_row[order], np.arange(n_parts + 1))
        parts = [RawPartition(raw.X[rows], raw.y[rows], raw.groups[rows], rows)
                 for rows in (order[a:b] for a, b in zip(cuts[:-1], cuts[1:]))]
        return cls._from_futures(client, client.scatter(parts, hash=False), check=True)

    @classmethod
    def from_delayed(cls, parts, *, client=None):
        """Persist partitions computed on the workers (e.g. read from files there).

        Parameters
        ----------
        parts : list of dask.delayed.Delayed or distributed.Future
            Each computes to a tuple ``(X, y, groups)`` of numpy arrays (or
            ``(X, y, groups, row_labels)``) holding the rows of whole users.
        client : distributed.Client, default=None

        Returns
        -------
        blocks : UserBlocks

        Raises
        ------
        ValueError
            If a user has rows in more than one part.
        """
        import dask
        from distributed import Future

        client = _get_client(client)
        futures = [submit_quiet(client, _raw_from_tuple, part) if isinstance(part, Future)
                   else client.compute(dask.delayed(_quiet_call)(_raw_from_tuple, part))
                   for part in parts]
        return cls._from_futures(client, futures, check=True)

    @classmethod
    def from_dask_dataframe(cls, ddf, *, groups, target, features=None, client=None,
                            shuffle="auto"):
        """Partition a dask DataFrame by user and persist it as numpy arrays.

        Parameters
        ----------
        ddf : dask.dataframe.DataFrame
            One row per record.
        groups : str
            The column (or the name of the index) holding the user ids.
        target : str
            The column of the targets.
        features : list of str, default=None
            The feature columns; default: every other column.
        client : distributed.Client, default=None
        shuffle : {"auto", True, False}, default="auto"
            ``"auto"``: keep the partitioning when the DataFrame is indexed
            by ``groups`` with known divisions (checked), else shuffle by
            user. ``True``: always shuffle. ``False``: keep it and check.

        Returns
        -------
        blocks : UserBlocks
            Predictions are a dask Series indexed by the DataFrame's index.

        Raises
        ------
        ValueError
            If ``shuffle=False`` and a user has rows in more than one partition.
        """
        client = _get_client(client)
        in_index = ddf.index.name == groups and groups not in ddf.columns
        if not in_index and groups not in ddf.columns:
            raise ValueError(f"groups={groups!r} is neither a column nor the index name of "
                             f"the DataFrame (columns: {list(ddf.columns)}).")
        if target not in ddf.columns:
            raise ValueError(f"target={target!r} is not a column of the DataFrame "
                             f"(columns: {list(ddf.columns)}).")
        features = [c for c in ddf.columns if c not in (groups, target)] \
            if features is None else list(features)
        missing = [c for c in features if c not in ddf.columns]
        if missing or not features:
            raise ValueError(f"features must be columns of the DataFrame; missing "
                             f"{missing}, got {features}.")
        if shuffle not in ("auto", True, False):
            raise ValueError(f"shuffle must be 'auto', True or False; got {shuffle!r}.")
        sorted_by_user = in_index and ddf.known_divisions
        do_shuffle = shuffle is True or (shuffle == "auto" and not sorted_by_user)
        divisions = None
        if do_shuffle:
            ddf = (ddf.reset_index() if in_index else ddf).shuffle(on=groups)
            in_index = False
        elif ddf.known_divisions:
            divisions = tuple(ddf.divisions)
        import dask

        futures = client.compute([
            dask.delayed(_quiet_call)(_raw_from_pandas, part, groups, target, features,
                                      in_index)
            for part in ddf.to_delayed()])
        # A shuffle by user puts every user in one partition by construction.
        return cls._from_futures(client, futures, check=not do_shuffle,
                                 from_dataframe=True, divisions=divisions)

    @classmethod
    def _from_futures(cls, client, futures, *, check, from_dataframe=False, divisions=None):
        summaries = client.gather([submit_quiet(client, _summary, f) for f in futures])
        widths = {s["n_features"] for s in summaries if s["n_rows"]}
        if len(widths) > 1:
            raise ValueError(f"the partitions have different numbers of features: "
                             f"{sorted(widths)}.")
        n_features = widths.pop() if widths else 0
        blocks = cls(client, futures, n_features=n_features,
                     id_ranges=[s["id_range"] for s in summaries],
                     n_rows=[s["n_rows"] for s in summaries],
                     from_dataframe=from_dataframe, divisions=divisions)
        if check:
            blocks._check_users_disjoint()
        blocks._users_disjoint = True
        return blocks

    def _check_users_disjoint(self, id_ranges=None):
        """Raise if a user has rows in several partitions (disjoint ``id_ranges``, else
        hashed ids compared bucket by bucket on the workers)."""
        live = self._live_partitions()
        ranges = [self._id_ranges[i] for i in live] if id_ranges is None else list(id_ranges)
        shared = 0 if len(live) <= 1 or ranges_disjoint(ranges) \
            else self._count_shared_users(live)
        if shared:
            raise ValueError(
                f"{shared} user(s) have rows in more than one partition. Every user's "
                f"rows must be in one partition: a split user would contribute one "
                f"clipped term per partition, more than the stated sensitivity. "
                f"Partition the data by user (UserBlocks.from_dask_dataframe shuffles "
                f"by user with shuffle='auto' or True; ddf.set_index(user_column) "
                f"sorts by user).")
        self._users_disjoint = True

    def _count_shared_users(self, live):
        client = self.client
        n_buckets = max(1, min(len(live), 32))
        splits = [submit_quiet(client, _hash_buckets, self.partitions[i], n_buckets)
                  for i in live]
        counts = []
        for b in range(n_buckets):  # loop over hash buckets: one task each
            pieces = [submit_quiet(client, operator.getitem, s, b) for s in splits]
            counts.append(submit_quiet(client, _shared_in_bucket, *pieces))
        return int(sum(client.gather(counts)))

    def row_labels(self):
        """The row labels as a dask array aligned with
        :func:`~skdpp.distributed.predict_distributed`'s (input row numbers for
        :meth:`from_arrays`)."""
        return concat_chunks(self.client, [submit_quiet(self.client, _labels, f)
                                           for f in self.partitions])

    def _live_partitions(self):
        """Indices of the partitions holding rows."""
        return [i for i, n in enumerate(self._n_rows) if n]

    def release(self):
        """Free the partitions on the workers."""
        for f in self.partitions:
            f.release()
        self.partitions = []
        self.n_partitions = 0


def _require_distributed():
    """The ``distributed`` package, or an ImportError saying how to install it."""
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(
            "skdpp.distributed needs Dask's distributed scheduler: "
            "pip install 'skdpp[dask]' (dask[distributed]).") from exc
    return distributed


def _get_client(client):
    if client is not None:
        return client
    get_client = _require_distributed().get_client
    try:
        return get_client()
    except ValueError as exc:
        raise ValueError(
            "No Dask client: pass client=... or create one first, e.g. "
            "client = distributed.Client(skdpp.distributed.local_cluster()).") from exc
