"""The per-user data layer: :class:`UserIndex` (``groups`` to user codes) and
:class:`UserBlock` (whole users in canonical order, the unit of every fit); the
input-order functions (``segment_*``, ``*_within_user*``) serve code that
releases nothing (splitters, generators, tests). See :ref:`data_layer`.
"""

import numbers
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from ._random import hash_ids, keyed_uniform, row_hashes

__all__ = ["UserIndex", "check_id_kinds", "id_kinds", "rank_within_user",
           "segment_counts", "segment_mean", "segment_outer_sum", "segment_sum",
           "split_within_users"]

_OUTER_SUM_MAX_BYTES = 64 * 2**20


def _is_missing_scalar(value):
    """True for None / NaN / NaT / pd.NA-like scalars."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # pd.NA: bool(NA != NA) raises
        return True


_is_missing_ufunc = np.frompyfunc(_is_missing_scalar, 1, 1)
_type_key_ufunc = np.frompyfunc(lambda v: f"{type(v).__module__}.{type(v).__qualname__}", 1, 1)


def _to_numpy(values):
    """``values`` as a numpy array (pandas objects through ``to_numpy``), shape kept."""
    return np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values)


def _as_id_array(groups, name="groups"):
    if hasattr(groups, "to_numpy") and not isinstance(groups, np.ndarray):
        groups = groups.to_numpy()
    arr = np.asarray(groups)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    elif arr.ndim > 1 and not isinstance(groups, np.ndarray):
        # a sequence of tuples (hashable ids) -> 1-D object array of tuples
        arr = np.fromiter(groups, dtype=object, count=len(groups))
    if arr.ndim != 1:
        raise ValueError(
            f"`{name}` must be a 1-D array with one user id per row; got an array of "
            f"shape {arr.shape}. Pass a 1-D array-like (list, numpy array or pandas "
            "Series) of user ids.")
    return arr


def _missing_mask(arr):
    kind = arr.dtype.kind
    if kind in "fc":
        return np.isnan(arr)
    if kind in "mM":
        return np.isnat(arr)
    if kind == "O" and arr.size:
        return _is_missing_ufunc(arr).astype(bool)
    return np.zeros(arr.shape, dtype=bool)


def _factorize_unorderable(arr):
    """Factorise ids numpy cannot sort: by ``(type name, value or repr)``."""
    type_keys = _type_key_ufunc(arr).astype(str)
    type_names, type_codes = np.unique(type_keys, return_inverse=True)
    users_parts = []
    codes = np.empty(arr.shape[0], dtype=np.int64)
    offset = 0
    for t in range(type_names.shape[0]):  # loop over distinct types only
        rows = np.flatnonzero(type_codes == t)
        values = arr[rows]
        try:
            uniq, inv = np.unique(values, return_inverse=True)
        except TypeError:
            reprs = np.frompyfunc(repr, 1, 1)(values).astype(str)
            _, first, inv = np.unique(reprs, return_index=True, return_inverse=True)
            uniq = values[first]
        users_parts.append(np.asarray(uniq, dtype=object))
        codes[rows] = inv.reshape(-1) + offset
        offset += uniq.shape[0]
    return np.concatenate(users_parts), codes  # not empty: np.unique raised


_DTYPE_ID_KINDS = {**dict.fromkeys("biufc", "number"), "U": "str", "S": "bytes",
                   "M": "datetime64", "m": "timedelta64"}
_PYTHON_ID_KINDS = (((numbers.Number, np.bool_), "number"), ((str, np.str_), "str"),
                    ((bytes, np.bytes_), "bytes"))


def id_kinds(ids):
    """The set of id kinds (``"number"``, ``"str"``, ``"bytes"`` or a type name) of ``ids``."""
    ids = np.asarray(ids)
    if ids.dtype.kind != "O":
        return frozenset({_DTYPE_ID_KINDS.get(ids.dtype.kind, str(ids.dtype))})
    return frozenset(next((kind for types, kind in _PYTHON_ID_KINDS
                           if issubclass(cls, types)), cls.__qualname__)
                     for cls in set(map(type, ids.tolist())))


def check_id_kinds(kinds, *, name="groups"):
    """Raise for ids of more than one kind (:meth:`UserIndex.from_groups`)."""
    kinds = frozenset(kinds)
    if len(kinds) > 1:
        listed = " and ".join(sorted(kinds))
        raise ValueError(
            f"`{name}` mixes user ids of different types ({listed}). User ids must "
            f"all be numbers or all be strings (7 and '7' are two users): convert "
            f"them first, e.g. np.asarray({name}).astype(str) (or .astype(np.int64)).")


def _readonly(a):
    a = np.asarray(a)
    a.flags.writeable = False
    return a


class UserIndex:
    """Immutable index of the users (``groups``): rows with one id are one user.

    Parameters
    ----------
    users : array-like of shape (n_users,)
        Sorted unique user ids (``object`` for mixed types).
    codes : array-like of shape (n_samples,) of int
        Code of each row's user in ``0..n_users-1`` (not validated).

    Attributes
    ----------
    users, codes : ndarray
        As given (``codes`` int64; ``users[codes]`` gives the ids).
    counts : ndarray of shape (n_users,), dtype int64
        Number of rows of each user.
    order, offsets : ndarray of dtype int64
        ``order[offsets[u]:offsets[u + 1]]`` are the rows of user ``u``.
    n_users, n_samples : int

    Examples
    --------
    >>> from skdpp.utils import UserIndex
    >>> index = UserIndex.from_groups(["b", "a", "b", "c"], n_samples=4)
    >>> index.users
    array(['a', 'b', 'c'], dtype='<U1')
    >>> index.codes
    array([1, 0, 1, 2])
    >>> index.counts
    array([1, 2, 1])
    >>> index.lookup(["c", "z"])
    array([ 2, -1])
    """

    __slots__ = ("users", "codes", "counts", "order", "offsets", "n_users", "n_samples",
                 "_mixed", "_lookup_table")

    def __init__(self, users, codes, *, _mixed=False):
        users = np.asarray(users)
        codes = np.asarray(codes, dtype=np.int64)
        n_users = int(users.shape[0])
        counts = np.bincount(codes, minlength=n_users).astype(np.int64)
        offsets = np.zeros(n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        order = np.argsort(codes, kind="stable").astype(np.int64, copy=False)
        for name, value in [("users", _readonly(users)), ("codes", _readonly(codes)),
                            ("counts", _readonly(counts)), ("order", _readonly(order)),
                            ("offsets", _readonly(offsets)), ("n_users", n_users),
                            ("n_samples", int(codes.shape[0])), ("_mixed", bool(_mixed)),
                            ("_lookup_table", None)]:
            object.__setattr__(self, name, value)

    def __reduce__(self):  # immutable slots: rebuilt from the ids and codes
        return (_rebuild_user_index, (np.asarray(self.users), np.asarray(self.codes),
                                      self._mixed))

    def __setattr__(self, name, value):
        raise AttributeError(
            f"UserIndex is immutable: cannot set {name!r}. Build a new index with "
            "UserIndex.from_groups or UserIndex.subset_rows.")

    def __repr__(self):
        return f"UserIndex(n_users={self.n_users}, n_samples={self.n_samples})"

    @classmethod
    def from_groups(cls, groups, n_samples=None):
        """Build the index from one user id per row.

        Parameters
        ----------
        groups : array-like of shape (n_samples,) or None
            User id of each row (numbers, strings or any hashable objects; a
            pandas Series is accepted). ``None``: every row is its own user
            (ids ``0..n_samples-1``: row-level privacy).
        n_samples : int, default=None
            Number of rows; required when ``groups`` is None, else checked.

        Raises
        ------
        ValueError
            If ``groups`` has missing ids (None, NaN, NaT, pd.NA), mixes ids of
            different kinds (numbers and strings: rule in :ref:`user_ids`), is not
            1-D, or its length differs from ``n_samples``.
        """
        if groups is None:
            if n_samples is None:
                raise ValueError(
                    "`n_samples` is required when `groups` is None (every row is its "
                    "own user); pass n_samples=X.shape[0].")
            ids = np.arange(cls._check_n_samples(n_samples), dtype=np.int64)
            return cls(ids, ids)
        arr = kinds_of = _as_id_array(groups)
        if arr.dtype.kind in "US" and not isinstance(groups, np.ndarray) \
                and not hasattr(groups, "to_numpy"):
            # np.asarray([7, "7"]) is ['7', '7']: look at the list's own types
            kinds_of = _as_id_array(np.asarray(list(groups), dtype=object))
        if n_samples is not None:
            n_samples = cls._check_n_samples(n_samples)
            if arr.shape[0] != n_samples:
                raise ValueError(
                    f"`groups` has {arr.shape[0]} ids but the data have {n_samples} "
                    "rows; pass exactly one user id per row of X.")
        missing = _missing_mask(arr)
        if missing.any():
            first = int(np.flatnonzero(missing)[0])
            raise ValueError(
                f"`groups` contains {int(missing.sum())} missing user id(s) "
                f"(None/NaN/NaT/NA; first at row {first}: {arr[first]!r}). Every row "
                "must belong to a known user: drop those rows or give them explicit "
                "ids (e.g. one new id per row to treat them as separate users).")
        check_id_kinds(id_kinds(kinds_of) if arr.size else (), name="groups")
        try:
            users, codes = np.unique(arr, return_inverse=True)
            mixed = False
        except TypeError:  # object ids numpy cannot sort together
            users, codes = _factorize_unorderable(arr)
            mixed = True
        return cls(users, codes.reshape(-1), _mixed=mixed)

    @staticmethod
    def _check_n_samples(n_samples):
        if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) \
                or n_samples < 0:
            raise ValueError(
                f"`n_samples` must be a non-negative integer; got {n_samples!r}. "
                "Pass n_samples=X.shape[0].")
        return int(n_samples)

    def _lookup_hash(self, ids):
        if self._lookup_table is None:
            object.__setattr__(self, "_lookup_table",
                               {u: i for i, u in enumerate(self.users.tolist())})
        table = self._lookup_table

        def get(v):
            try:
                return table.get(v, -1)
            except TypeError:  # unhashable id
                return -1

        return np.fromiter((get(v) for v in ids.tolist()), dtype=np.int64,
                           count=ids.shape[0])

    def lookup(self, groups):
        """Codes (int64) of the user ids ``groups``, ``-1`` for ids not in the index."""
        ids = _as_id_array(groups)
        out = np.full(ids.shape[0], -1, dtype=np.int64)
        if ids.shape[0] == 0 or self.n_users == 0:
            return out
        if self._mixed:
            return self._lookup_hash(ids)
        kinds = {_DTYPE_ID_KINDS.get(k, k) for k in (self.users.dtype.kind,
                                                      ids.dtype.kind)}
        if len(kinds) > 1 and "O" not in kinds:
            return out  # e.g. str ids asked of an index of int ids: all unseen
        try:
            pos = np.searchsorted(self.users, ids)
            np.clip(pos, 0, self.n_users - 1, out=pos)
            found = np.asarray(self.users[pos] == ids)
            if found.shape != out.shape:
                raise TypeError("elementwise comparison failed")
            found = found.astype(bool)
        except (TypeError, ValueError, OverflowError):
            return self._lookup_hash(ids)
        out[found] = pos[found]
        return out

    def subset_rows(self, mask):
        """Index of the rows ``mask`` (booleans or row indices); users left without
        rows are dropped, the others renumbered."""
        rows = np.asarray(mask)
        if rows.dtype == bool:
            if rows.shape != (self.n_samples,):
                raise ValueError(
                    f"`mask` must have shape ({self.n_samples},); got {rows.shape}. "
                    "Pass one boolean per row of the index.")
            sub_codes = self.codes[rows]
        else:
            sub_codes = self.codes[rows.astype(np.int64, copy=False)]
        kept = np.bincount(sub_codes, minlength=self.n_users) > 0
        remap = np.cumsum(kept) - 1
        return UserIndex(self.users[kept], remap[sub_codes], _mixed=self._mixed)


def _rebuild_user_index(users, codes, mixed):
    return UserIndex(users, codes, _mixed=mixed)


def _check_index(index):
    if not isinstance(index, UserIndex):
        raise TypeError(
            f"`index` must be a UserIndex; got {type(index).__name__}. Build one with "
            "UserIndex.from_groups(groups, n_samples).")


def _check_rows(values, index, name="values"):
    _check_index(index)
    values = np.asarray(values)
    if values.ndim == 0 or values.shape[0] != index.n_samples:
        raise ValueError(
            f"`{name}` must have one row per sample ({index.n_samples}); got shape "
            f"{values.shape}. Pass an array whose first axis is aligned with `groups`.")
    return values


def segment_counts(index):
    """Number of rows of each user: a writable int64 copy of ``index.counts``.

    Examples
    --------
    >>> from skdpp.utils import UserIndex, segment_counts
    >>> segment_counts(UserIndex.from_groups([3, 1, 3], n_samples=3))
    array([1, 2])
    """
    _check_index(index)
    return np.array(index.counts, dtype=np.int64)


def segment_sum(values, index):
    """Per-user sums of ``values`` of shape (n_samples, ...) (0 for a user without rows).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.utils import UserIndex, segment_sum
    >>> index = UserIndex.from_groups(["x", "y", "x"], n_samples=3)
    >>> segment_sum(np.array([1.0, 2.0, 3.0]), index)
    array([4., 2.])
    """
    values = _check_rows(values, index)
    if values.ndim == 1 and values.dtype.kind == "f":
        return np.bincount(index.codes, weights=values, minlength=index.n_users
                           ).astype(np.result_type(values.dtype, np.float64))
    out_dtype = np.result_type(values.dtype, np.int64) if values.dtype.kind in "bui" \
        else values.dtype
    out = np.zeros((index.n_users,) + values.shape[1:], dtype=out_dtype)
    return _reduceat(np.add, values[index.order].astype(out_dtype, copy=False),
                     index.counts, index.offsets, out)


def _reduceat(ufunc, values, counts, offsets, out):
    """``out`` with ``ufunc.reduceat`` of the rows of each non-empty segment of the
    user-sorted ``values`` (segment ``u`` starts at ``offsets[u]``)."""
    nonempty = counts > 0
    if nonempty.any():
        out[nonempty] = ufunc.reduceat(values, offsets[:-1][nonempty], axis=0)
    return out


def segment_mean(values, index):
    """Per-user means of rows (NaN for a user without rows).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.utils import UserIndex, segment_mean
    >>> index = UserIndex.from_groups([0, 1, 0], n_samples=3)
    >>> segment_mean(np.array([[1.0, 2.0], [5.0, 5.0], [3.0, 4.0]]), index)
    array([[2., 3.],
           [5., 5.]])
    """
    sums = segment_sum(values, index)
    sums = sums.astype(np.result_type(sums.dtype, np.float64), copy=False)
    counts = index.counts.reshape((-1,) + (1,) * (sums.ndim - 1)).astype(np.float64)
    out = np.full(sums.shape, np.nan, dtype=sums.dtype)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def segment_outer_sum(A, B=None, index=None, *, max_bytes=_OUTER_SUM_MAX_BYTES):
    """Per-user sums ``sum_r a_r b_r^T`` (n_users, p, q) of ``A`` (n_samples, p) and
    ``B`` (n_samples, q; ``None``: ``A``): one batched ``A_u^T B_u`` per
    :func:`padded_sizes` group, in chunks of about ``max_bytes``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.utils import UserIndex, segment_outer_sum
    >>> index = UserIndex.from_groups([0, 0, 1], n_samples=3)
    >>> A = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> segment_outer_sum(A, None, index)[0]
    array([[1., 0.],
           [0., 4.]])
    """
    A = _check_rows(A, index, "A")
    same = B is None
    B = A if same else _check_rows(B, index, "B")
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(
            f"`A` and `B` must be 2-D (n_samples, p) and (n_samples, q); got shapes "
            f"{A.shape} and {B.shape}. Reshape 1-D arrays with a[:, None].")
    p, q = A.shape[1], B.shape[1]
    dtype = np.result_type(A.dtype, B.dtype, np.float64)
    out = np.zeros((index.n_users, p, q), dtype=dtype)
    n = index.n_samples
    if n == 0 or p == 0 or q == 0:
        return out
    counts, starts, order = index.counts, index.offsets[:-1], index.order
    item = np.dtype(dtype).itemsize
    sizes = padded_sizes(counts)
    width = item * (p + (0 if same else q))  # bytes of one gathered row
    for size in np.unique(sizes[counts > 0]):  # O(log max count) sizes, not users
        users = np.flatnonzero(sizes == size)
        step = int(min(size, max(1, max_bytes // width)))
        chunk = max(1, int(max_bytes // (step * width + item * p * q)))
        for lo in range(0, users.size, chunk):  # memory chunks of users
            u = users[lo:lo + chunk]
            for r0 in range(0, size, step):  # one window unless a user is huge
                within = np.arange(r0, min(size, r0 + step))
                pad = within >= counts[u][:, None]  # (users, window): padding rows
                rows = order[np.minimum(starts[u][:, None] + within, n - 1)]
                Au = A[rows].astype(dtype, copy=False)
                Au[pad] = 0.0
                Bu = Au if same else B[rows].astype(dtype, copy=False)
                if not same:
                    Bu[pad] = 0.0
                out[u] += np.matmul(Au.transpose(0, 2, 1), Bu)
    return out


EXACT_SIZES = 32  # row counts batched exactly by padded_sizes
LADDER_RATIO = 1.125  # its geometric ladder above EXACT_SIZES


def padded_sizes(counts):
    """Batch size (``>= counts``) of each segment: the count up to ``EXACT_SIZES``,
    then the next rung of ``EXACT_SIZES * LADDER_RATIO**j`` (:ref:`data_layer`).

    Examples
    --------
    >>> from skdpp.utils._grouped import padded_sizes
    >>> padded_sizes([0, 3, 32, 33, 40]).tolist()
    [0, 3, 32, 36, 41]
    """
    counts = np.asarray(counts, dtype=np.int64)
    top = int(counts.max(initial=0))
    ladder = [EXACT_SIZES]
    while ladder[-1] < top:
        ladder.append(int(np.ceil(ladder[-1] * LADDER_RATIO)))
    ladder = np.asarray(ladder, dtype=np.int64)
    big = counts > EXACT_SIZES
    sizes = counts.copy()
    sizes[big] = ladder[np.searchsorted(ladder, counts[big])]
    return sizes


def argsort_within(codes, keys):
    """Row order by ``(codes, keys)``, ``keys`` in ``[0, 1)``: one stable argsort of
    ``code + key`` (10x faster than ``np.lexsort`` on 10^7 rows)."""
    return np.argsort(np.asarray(codes, dtype=np.float64) + keys, kind="stable")


def rank_within_user(index, rng=None):
    """Position of each row within its user's rows, in input order (``rng=None``) or
    uniformly random (an int, ``RandomState`` or ``Generator``).

    Examples
    --------
    >>> from skdpp.utils import UserIndex, rank_within_user
    >>> index = UserIndex.from_groups(["a", "b", "a", "a"], n_samples=4)
    >>> rank_within_user(index)
    array([0, 0, 1, 2])
    """
    _check_index(index)
    n = index.n_samples
    if rng is None:
        perm = index.order
    else:  # check_random_state does not take a Generator
        keys = rng.random(n) if isinstance(rng, np.random.Generator) \
            else check_random_state(rng).random_sample(n)
        perm = argsort_within(index.codes, keys)
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n, dtype=np.int64) - index.offsets[index.codes[perm]]
    return rank


def split_within_users(index, fraction, rng=None):
    """``True`` for the :func:`first_part_sizes` rows of lowest :func:`rank_within_user`
    of each user (``fraction`` in (0, 1)).

    Examples
    --------
    >>> from skdpp.utils import UserIndex, split_within_users
    >>> index = UserIndex.from_groups([0, 0, 0, 0, 1], n_samples=5)
    >>> split_within_users(index, 0.5)
    array([ True,  True, False, False,  True])
    """
    if not (isinstance(fraction, numbers.Real) and 0 < fraction < 1):
        raise ValueError(
            f"`fraction` must be a float in the open interval (0, 1); got {fraction!r}.")
    return rank_within_user(index, rng) < first_part_sizes(index.counts, fraction)[index.codes]


def first_part_sizes(counts, fraction):
    """``ceil(fraction * n)`` (rounded to 9 decimals first: ``0.3 * 10`` gives 3),
    clipped to ``[1, n - 1]`` for ``n >= 2``; a one-row user keeps its row."""
    n_first = np.ceil(np.round(fraction * counts, 9)).astype(np.int64)
    return np.where(counts >= 2, np.clip(n_first, 1, np.maximum(counts - 1, 1)), counts)


DEFAULT_BLOCK_ROWS = 32768  # rows per block: a block's working set stays in cache


def canonical_order(codes, n_users, row_keys):
    """``np.lexsort((row_keys, codes))``: code and the key's top bits packed in one
    uint64 (20-30x faster on 10^7 rows), tied runs re-sorted by the full keys."""
    codes = np.asarray(codes, dtype=np.int64)
    keys = np.asarray(row_keys).astype(np.uint64, copy=False)
    bits = int(max(n_users - 1, 1)).bit_length()
    if bits > 32:
        return np.lexsort((keys, codes)).astype(np.int64, copy=False)
    shift = np.uint64(64 - bits)
    composite = (codes.astype(np.uint64) << shift) | (keys >> np.uint64(bits))
    order = np.argsort(composite, kind="stable").astype(np.int64, copy=False)
    packed = composite[order]
    tie = packed[1:] == packed[:-1]
    if tie.any():
        pos = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])  # whole tied runs
        sub = order[pos]
        order[pos] = sub[np.lexsort((keys[sub], packed[pos]))]
    return order


def _as_rows(rows, n):
    """``rows`` as None (all ``n``), a slice, or an int64 array."""
    if rows is None or isinstance(rows, slice):
        return rows
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows[0] + rows.size - 1 == rows[-1] \
            and (rows.size == 1 or np.all(np.diff(rows) == 1)):
        if rows[0] == 0 and rows.size == n:
            return None
        return slice(int(rows[0]), int(rows[0]) + rows.size)
    return rows


class UserBlock:
    """The rows of whole users in canonical order over *source* arrays (not copies).

    Parameters
    ----------
    X, y : ndarray
        Row-aligned source arrays (``y`` may be 2-D).
    rows : None, slice or ndarray of int
        The block's source rows in canonical order (``None``: all).
    users, user_hash, counts : ndarray of shape (n_users,)
        Sorted user ids, their :func:`skdpp.utils._random.hash_ids` and row counts.
    first_user : int, default=0
        Position of the block's first user among all users of the fit.

    Attributes
    ----------
    offsets : ndarray of shape (n_users + 1,)
        Start of each user's rows within the block.
    row_user, rank : ndarray of shape (n_rows,)
        Local user code of each row, and its position within its user.
    """

    def __init__(self, X, y, rows, users, user_hash, counts, first_user=0):
        self.X, self.y = X, y
        self.rows = _as_rows(rows, X.shape[0])
        self.users = np.asarray(users)
        self.user_hash = np.asarray(user_hash, dtype=np.uint64)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.offsets = np.zeros(self.counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.counts, out=self.offsets[1:])
        self.first_user = int(first_user)
        self._uniform = None

    def __repr__(self):
        return f"UserBlock(n_users={self.n_users}, n_rows={self.n_rows})"

    @property
    def n_users(self):
        return int(self.counts.shape[0])

    @property
    def n_rows(self):
        return int(self.offsets[-1])

    @cached_property
    def row_user(self):
        return np.repeat(np.arange(self.n_users, dtype=np.int64), self.counts)

    @cached_property
    def rank(self):
        return (np.arange(self.n_rows, dtype=np.int64)
                - np.repeat(self.offsets[:-1], self.counts))

    def take(self, A, out=None):
        """The block's rows of a source-aligned ``A`` (a view, or a gather into ``out``)."""
        if self.rows is None:
            return A
        if isinstance(self.rows, slice):
            return A[self.rows]
        # mode="clip": rows are valid; mode="raise" buffers ``out`` (5x slower)
        return np.take(A, self.rows, axis=0, mode="clip",
                       out=None if out is None else out[:self.rows.shape[0]])

    def source_rows(self):
        """Indices of the block's rows in the sources (int64 array)."""
        if self.rows is None:
            return np.arange(self.X.shape[0], dtype=np.int64)
        if isinstance(self.rows, slice):
            return np.arange(self.rows.start, self.rows.stop, dtype=np.int64)
        return self.rows

    def select(self, mask):
        """The block restricted to the rows ``mask`` (same users)."""
        mask = np.asarray(mask, dtype=bool)
        counts = np.bincount(self.row_user[mask], minlength=self.n_users)
        return UserBlock(self.X, self.y, self.source_rows()[mask], self.users,
                         self.user_hash, counts, self.first_user)

    def user_range(self, u0, u1):
        """The sub-block of users ``u0 .. u1 - 1`` (a view of the same sources)."""
        a, b = int(self.offsets[u0]), int(self.offsets[u1])
        if self.rows is None:
            rows = slice(a, b)
        elif isinstance(self.rows, slice):
            rows = slice(self.rows.start + a, self.rows.start + b)
        else:
            rows = self.rows[a:b]
        return UserBlock(self.X, self.y, rows, self.users[u0:u1], self.user_hash[u0:u1],
                         self.counts[u0:u1], self.first_user + u0)

    def split(self, max_rows=DEFAULT_BLOCK_ROWS):
        """Consecutive sub-blocks of about ``max_rows`` rows (at least one user each)."""
        cid = self.offsets[:-1] // max(int(max_rows), 1)
        cuts = np.r_[0, np.flatnonzero(np.diff(cid)) + 1, self.n_users]
        return [self.user_range(int(a), int(b))
                for a, b in zip(cuts[:-1], cuts[1:]) if b > a]

    def expand(self, per_user):
        """One value per user repeated over its rows."""
        return np.repeat(per_user, self.counts, axis=0)

    def segment_sum(self, values):
        """Per-user sums of row-aligned ``values`` (0 for empty users)."""
        values = np.asarray(values)
        if values.ndim == 1:
            return np.bincount(self.row_user, weights=values, minlength=self.n_users)
        out = np.zeros((self.n_users,) + values.shape[1:],
                       dtype=np.result_type(values.dtype, np.float64))
        return _reduceat(np.add, values, self.counts, self.offsets, out)

    def uniform_count(self):
        """The users' common row count (0 if they differ)."""
        if self._uniform is None:
            c = int(self.counts[0]) if self.n_users else 0
            self._uniform = c if c and bool((self.counts == c).all()) else 0
        return self._uniform

    def segment_max(self, values, initial=-np.inf):
        """Per-user maximum of row-aligned ``values`` over all trailing axes."""
        values = np.ascontiguousarray(values)
        width = values.size // max(self.n_rows, 1)
        out = np.full(self.n_users, initial, dtype=np.result_type(values.dtype, np.float64))
        return _reduceat(np.maximum, values.reshape(-1), self.counts,
                         self.offsets * width, out)

    def gram(self, P, weights=None):
        """Per-user ``sum_r w_r p_r p_r^T`` of row-aligned ``P`` (n_rows, k) -> (n_users, k, k)."""
        k = P.shape[1]
        out = np.empty((self.n_users, k, k))
        for a in range(k):  # loop over the k (k + 1) / 2 entries, not users or rows
            pa = P[:, a] if weights is None else P[:, a] * weights
            for b in range(a, k):
                out[:, a, b] = out[:, b, a] = np.bincount(
                    self.row_user, weights=pa * P[:, b], minlength=self.n_users)
        return out

    def outer_sum(self, A):
        """Per-user Gram matrices of row-aligned ``A`` (:func:`segment_outer_sum`)."""
        return segment_outer_sum(A, None, UserIndex(np.arange(self.n_users), self.row_user))

    def segment_sum_wide(self, values, dtype=np.float64, weights=None):
        """Per-user sums of a wide ``(n_rows, p)`` array, one sparse product in the result
        type of ``dtype`` and ``values`` (float32 counts exact up to ``2**24`` rows);
        ``weights`` (n_rows,): of ``weights[:, None] * values``, without forming it."""
        data = np.ones(self.n_rows, dtype=dtype) if weights is None \
            else np.asarray(weights, dtype=dtype)
        owner = sp.csr_matrix((data, np.arange(self.n_rows), self.offsets),
                              shape=(self.n_users, self.n_rows))
        return np.asarray(owner @ values)

    def row_uniforms(self, key, stream, *words):
        """Keyed uniforms per row: ``hash(key, stream, user id, rank, *words)``."""
        return keyed_uniform(key, stream, self.expand(self.user_hash), self.rank, *words)

    def user_uniforms(self, key, stream, *words):
        """Keyed uniforms per user: ``hash(key, stream, user id, *words)``."""
        return keyed_uniform(key, stream, self.user_hash, *words)

    def ranks_by(self, keys):
        """Rank of each row within its user by ``keys`` in ``[0, 1)`` (equal-size users:
        one ``(n_users, c)`` sort, the order of :func:`argsort_within`, faster)."""
        c = self.uniform_count()
        if c > 1:
            values = np.arange(self.n_users, dtype=np.float64)[:, None] \
                + np.asarray(keys, dtype=np.float64).reshape(self.n_users, c)
            order = np.argsort(values, axis=1, kind="stable")
            out = np.empty((self.n_users, c), dtype=np.int64)
            np.put_along_axis(out, order, np.arange(c, dtype=np.int64)[None, :], axis=1)
            return out.reshape(-1)
        perm = argsort_within(self.row_user, keys)
        out = np.empty(self.n_rows, dtype=np.int64)
        out[perm] = self.rank
        return out

    def split_users_rows(self, fraction, keys):
        """``True`` for each user's :func:`first_part_sizes` rows of smallest ``keys``."""
        return self.ranks_by(keys) < self.expand(first_part_sizes(self.counts, fraction))


def make_blocks(X, y, index, *, row_keys=None, max_rows=DEFAULT_BLOCK_ROWS):
    """Blocks of about ``max_rows`` rows (``None``: one) over ``X``, ``y``; each user's
    rows ordered by ``row_keys`` (default :func:`~skdpp.utils._random.row_hashes`)."""
    _check_index(index)
    if row_keys is None:
        row_keys = row_hashes(X, y)
    order = canonical_order(index.codes, index.n_users, row_keys)
    whole = UserBlock(X, y, order, index.users, hash_ids(index.users), index.counts)
    return [whole] if max_rows is None else whole.split(max_rows)
