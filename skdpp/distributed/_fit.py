"""Fit and predict on a Dask cluster with the estimators' own template: validation
and ``_make_blocks`` per partition on the workers, vocabularies merged, public
metadata combined, then ``_fit_executor`` (all noise) in the driver."""

import copy
import operator
import uuid
import warnings
from collections import namedtuple

import numpy as np

from ..base import BasePersonalizedEstimator, quiet_numerics
from ..utils._grouped import UserIndex, check_id_kinds, id_kinds
from ..utils._random import FitRandomness
from ._blocks import UserBlocks, _get_client, id_range, ranges_disjoint
from ._executor import DaskExecutor, concat_chunks
from ._executor import submit_quiet as _submit

__all__ = ["DistributedPersonalParts", "fit_distributed", "predict_distributed"]


class _KeyOnly:
    """The fit's randomness on a worker: only the key of the per-user randomness."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = np.array(key, dtype=np.uint64)

    def __repr__(self):
        return "_KeyOnly(<secret>)"

    @property
    def noise(self):
        raise RuntimeError("privacy noise is drawn on the driver only, never on a worker.")

    @property
    def public(self):
        raise RuntimeError("public randomness is drawn on the driver only, never on a "
                           "worker (its draws must not depend on the partitioning).")


# One partition (on a worker) after validation, and with its blocks; their summaries
# (public metadata) are what the driver gathers.
_Validated = namedtuple("_Validated", "data summary")
_Prepared = namedtuple("_Prepared", "blocks attributes summary")
_SUMMARY = operator.attrgetter("summary")


def _per_user_names(estimator):
    """``user_ids_`` and the declared ``_per_user_data_attributes`` (kept on the workers)."""
    return ("user_ids_",) + tuple(getattr(type(estimator), "_per_user_data_attributes", ()))


def _validate_partition(estimator, raw):
    """One partition through the pure ``_validate_fit_data``: the data (kept on the
    worker) and a summary for the driver (id range and kinds, vocabulary, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = estimator._validate_fit_data(raw.X, raw.y, raw.groups)
    vocabulary = estimator._partition_vocabulary(data) \
        if hasattr(estimator, "_partition_vocabulary") else None
    users = np.asarray(data.attributes.get("user_ids_", []))
    summary = {"id_range": id_range(users), "vocabulary": vocabulary,
               "id_kinds": id_kinds(users) if users.size else frozenset(),
               "warnings": [(w.category, str(w.message)) for w in caught]}
    return _Validated(data, summary)


def _prepare_partition(estimator, validated, vocabulary, randomness):
    """One partition's blocks: data recoded by ``_apply_vocabulary`` (the merged
    vocabulary) if any, then ``_make_blocks``."""
    data = validated.data
    if vocabulary is not None:
        data = estimator._apply_vocabulary(data, vocabulary)
    blocks = estimator._make_blocks(data, randomness)
    names = _per_user_names(estimator)
    summary = {"meta": data.meta,
               "attributes": {k: v for k, v in data.attributes.items() if k not in names},
               "n_blocks": len(blocks), "n_users": int(sum(b.n_users for b in blocks))}
    return _Prepared(blocks, dict(data.attributes), summary)


def _same_value(a, b):
    """Whether two validation results are equal (arrays, sparse matrices, scalars)."""
    if a is b:
        return True
    if hasattr(a, "nnz") or hasattr(b, "nnz"):  # scipy.sparse
        return hasattr(a, "nnz") and hasattr(b, "nnz") and a.shape == b.shape \
            and (a != b).nnz == 0
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) \
            and a.shape == b.shape and a.dtype == b.dtype \
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _combine_partitions(estimator, dicts):
    """The partitions' public metadata (or validation attributes) together: ``n_users``
    (``n_users_``) summed; every other value is public or merged, so a difference
    between partitions is a defect of the estimator's validation."""
    out = {}
    for key in dicts[0]:
        values = [d.get(key) for d in dicts]
        if key in ("n_users", "n_users_"):
            out[key] = int(sum(values))
            continue
        if not all(_same_value(values[0], v) for v in values[1:]):
            raise RuntimeError(
                f"{type(estimator).__name__}: validation derived {key!r} from each "
                f"partition's rows without merging it, so a distributed fit would "
                f"differ from fit: a bug of the estimator's validation (declare its "
                f"vocabulary with _partition_vocabulary / _merge_vocabularies / "
                f"_apply_vocabulary, or its per-user attribute in "
                f"_per_user_data_attributes); fit in-process meanwhile.")
        out[key] = values[0]
    return out


def _reemit(warning_lists):
    """Re-emit the workers' warnings on the driver, each distinct one once."""
    for category, message in dict.fromkeys(w for caught in warning_lists for w in caught):
        warnings.warn(message, category, stacklevel=3)


def _personal_chunks(client, array, users_per_partition):
    """Futures of the per-partition chunks of a per-user value (a collected dask array,
    or an array the core computed in this process: each partition gets its users)."""
    import dask.array as da

    if not isinstance(array, da.Array):
        cuts = np.cumsum(users_per_partition)[:-1]
        return client.scatter(np.split(np.asarray(array), cuts), hash=False)
    if tuple(array.chunks[0]) != tuple(users_per_partition):
        array = array.rechunk({0: tuple(users_per_partition)})
    if array.ndim > 1 and any(len(c) > 1 for c in array.chunks[1:]):
        array = array.rechunk({i: -1 for i in range(1, array.ndim)})
    return client.compute(list(array.to_delayed().reshape(-1)))


def _assemble(prepared, per_user_names, names, setter, *chunks):
    """One partition's personal parts, through ``setter = (estimator, public)``'s
    overridden ``_set_fitted_attributes`` (as in ``fit``) if not None."""
    parts = {k: prepared.attributes[k] for k in per_user_names}
    parts.update(zip(names, chunks))
    if setter is not None:
        estimator, public = setter
        est = copy.copy(estimator)
        est._set_fitted_attributes({**public, **parts})
        parts = {k: getattr(est, k) for k in parts if hasattr(est, k)}
    return parts


def _empty_slices(prepared, names):
    """The per-user values of a partition, for no user (their types and widths)."""
    return {k: prepared.attributes[k][:0] for k in names}


def fit_distributed(estimator, blocks, *, client=None, collect_personal=False):
    """Fit ``estimator`` on a cluster: the same release as ``fit``, noise on the driver.

    The estimator's own fit template with a
    :class:`~skdpp.distributed.DaskExecutor`: validation and blocks on the
    workers, every release and the report in this process.

    Parameters
    ----------
    estimator : skdpp estimator
        Unfitted or fitted (refitted from scratch).
    blocks : UserBlocks
        The training rows, partitioned by user.
    client : distributed.Client, default=None
        Default: ``blocks.client``.
    collect_personal : bool, default=False
        Also gather the personal parts into the estimator, so that it is
        exactly what ``fit`` gives (only when they fit in the driver's memory).

    Returns
    -------
    estimator : object
        Fitted: released and public attributes and ``privacy_report_`` in
        this process; ``personal_parts_`` is a
        :class:`DistributedPersonalParts` on the workers.

    Notes
    -----
    With the same ``random_state``: the same report and noise draws as
    ``fit``, released values equal up to the floating-point summation order;
    nothing depends on the partitioning (see :ref:`distributed`). If the fit
    raises, the estimator is left unfitted.
    """
    if not isinstance(estimator, BasePersonalizedEstimator):
        raise TypeError(f"fit_distributed needs a skdpp estimator, got "
                        f"{type(estimator).__name__}.")
    if not isinstance(blocks, UserBlocks):
        raise TypeError(f"blocks must be a UserBlocks (UserBlocks.from_dask_dataframe, "
                        f"from_arrays or from_delayed), got {type(blocks).__name__}.")
    client = client if client is not None else (blocks.client or _get_client(None))
    executor = None
    try:
        estimator._discard_fitted_attributes()  # nothing stale is shipped to workers
        estimator._validate_params()
        estimator._validate_privacy_params()
        live = blocks._live_partitions()
        if not live:
            raise ValueError("blocks holds no rows: fit needs at least one user.")
        randomness = FitRandomness(estimator.random_state)
        worker_randomness = _KeyOnly(randomness.key)
        validated = [_submit(client, _validate_partition, estimator, blocks.partitions[i],
                             key=f"skdpp-validate-{i}-{uuid.uuid4().hex}")
                     for i in live]
        checked = client.gather([_submit(client, _SUMMARY, f) for f in validated])
        # The ids' input domain over all partitions, as fit checks it on all rows.
        check_id_kinds(frozenset().union(*(s["id_kinds"] for s in checked)))
        if not blocks._users_disjoint:  # built without the constructors' check
            blocks._check_users_disjoint([s["id_range"] for s in checked])
        vocabulary = None
        if hasattr(estimator, "_partition_vocabulary"):  # e.g. the items: their union
            vocabulary = estimator._merge_vocabularies([s["vocabulary"] for s in checked])
            vocabulary = client.scatter([vocabulary], broadcast=True, hash=False)[0]
        prepared = [_submit(client, _prepare_partition, estimator, f, vocabulary,
                            worker_randomness, key=f"skdpp-prepare-{i}-{uuid.uuid4().hex}")
                    for i, f in zip(live, validated)]
        summaries = client.gather([_submit(client, _SUMMARY, f) for f in prepared])
        for f in validated:
            f.release()
        meta, attributes = (_combine_partitions(estimator, [s[part] for s in summaries])
                            for part in ("meta", "attributes"))
        # as in ``fit``: validation's warnings, then the delta warning
        _reemit([s["warnings"] for s in checked])
        estimator._check_delta(meta["n_users"])
        per_user_names = _per_user_names(estimator)
        who = client.who_has(prepared)
        workers = [(who.get(f.key) or (None,))[0] for f in prepared]
        users = [s["n_users"] for s in summaries]
        executor = DaskExecutor(client, prepared, [s["n_blocks"] for s in summaries], users,
                                workers=workers)
        with quiet_numerics():
            fitted = estimator._fit_executor(executor, randomness, meta)
        personal, empties = _personal_parts(
            client, estimator, fitted, attributes, prepared, per_user_names, users,
            [s["id_range"] for s in checked], [blocks.partitions[i].key for i in live])
    except BaseException:
        estimator._discard_fitted_attributes()
        raise
    finally:
        if executor is not None:
            executor.close()
    public = {k: v for k, v in fitted.items() if k not in personal.names}
    # the estimator's setter with no user's values (each partition's ran on the workers)
    estimator._set_fitted_attributes({**attributes, **public, **empties})
    for name in personal.names:
        if hasattr(estimator, name):
            delattr(estimator, name)
    estimator.personal_parts_ = personal
    if collect_personal:  # already through the estimator's setter
        for name, value in personal.collect().items():
            setattr(estimator, name, value)
        del estimator.personal_parts_
    return estimator


def _personal_parts(client, estimator, fitted, attributes, prepared, per_user_names, users,
                    id_ranges, source_keys):
    """The personal parts on the workers, and their empty slices for the driver."""
    import dask.array as da

    names = [n for n in estimator._personal_attributes if n in fitted]
    stray = [k for k, v in fitted.items() if isinstance(v, da.Array) and k not in names]
    if stray:
        raise TypeError(
            f"{type(estimator).__name__}: the fit collected per-user values {stray} that "
            f"are not listed in _personal_attributes; list them there.")
    chunks = [_personal_chunks(client, fitted[name], users) for name in names]
    setter, empties = None, {}
    if type(estimator)._set_fitted_attributes \
            is not BasePersonalizedEstimator._set_fitted_attributes:
        public = {**attributes, **{k: v for k, v in fitted.items() if k not in names}}
        setter = client.scatter([(estimator, public)], broadcast=True, hash=False)[0]
        empties = _submit(client, _empty_slices, prepared[0], tuple(per_user_names)).result()
        for name in names:
            value = fitted[name]
            empties[name] = value[:0].compute() if isinstance(value, da.Array) \
                else np.asarray(value)[:0]
    parts = [_submit(client, _assemble, prep, tuple(per_user_names), tuple(names), setter,
                     *[c[p] for c in chunks], pure=False)
             for p, prep in enumerate(prepared)]
    all_names = tuple(dict.fromkeys(list(per_user_names) + names))
    return DistributedPersonalParts(client, parts, all_names, users, id_ranges,
                                    source_keys), empties


class DistributedPersonalParts:
    """Every user's personal part, kept on the workers with its partition.

    Attributes
    ----------
    names : tuple of str
        The per-user attributes held (``user_ids_``, e.g. ``heads_``).
    n_users, n_partitions : int
    parts : list of distributed.Future
        One dict ``{name: array}`` per partition (users sorted by id).
    """

    def __init__(self, client, parts, names, users_per_partition, id_ranges, source_keys):
        self.client = client
        self.parts = list(parts)
        self.names = tuple(names)
        self.users_per_partition = [int(n) for n in users_per_partition]
        self.n_users = int(sum(self.users_per_partition))
        self.n_partitions = len(self.parts)
        self._id_ranges = list(id_ranges)
        self._source_keys = list(source_keys)

    def __repr__(self):
        return (f"DistributedPersonalParts(n_users={self.n_users}, "
                f"n_partitions={self.n_partitions}, names={self.names})")

    def __reduce__(self):
        raise TypeError(
            "DistributedPersonalParts refers to data held by a Dask cluster and cannot "
            "be pickled. Collect the personal parts first (fit_distributed(..., "
            "collect_personal=True), or est.personal_parts_.collect()).")

    def collect(self):
        """Gather the personal parts into this process: ``{name: array}`` sorted by
        user id, the layout of an in-process ``fit``."""
        return _merge_by_id(self.client.gather(self.parts), self.names)

    def to_dask(self, name):
        """The personal attribute ``name`` as a dask array, one chunk per partition
        (rows in partition order: ``to_dask("user_ids_")`` gives their ids)."""
        return concat_chunks(self.client, [
            _submit(self.client, operator.getitem, f, name) for f in self.parts])

    def release(self):
        """Free the personal parts on the workers."""
        for f in self.parts:
            f.release()
        self.parts = []


def _merge_by_id(parts, names):
    """``{name: rows of all parts}`` sorted by ``user_ids_`` (arrays or sparse)."""
    import scipy.sparse as sp

    ids = np.concatenate([np.asarray(p["user_ids_"]) for p in parts])
    order = np.argsort(UserIndex.from_groups(ids, ids.shape[0]).codes)  # ids are unique
    out = {}
    for name in names:
        values = [p[name] for p in parts]
        if sp.issparse(values[0]):
            out[name] = sp.vstack(values, format="csr")[order]
        else:
            out[name] = np.concatenate([np.asarray(v) for v in values])[order]
    return out


# Prediction
def _select(parts, raw):
    """The personal parts of the users of ``raw`` found in one partition's parts."""
    wanted = UserIndex.from_groups(raw.groups, raw.n_rows)
    keep = wanted.lookup(parts["user_ids_"]) >= 0
    if not keep.any():  # predict as a fitted estimator does: with some known user
        keep[:1] = True
    return {name: value[keep] for name, value in parts.items()}


def _predict_partition(estimator, raw, names, as_series, *selected):
    """``estimator.predict`` on one partition with its users' personal parts: the
    predictions (a Series by row label when ``as_series``) and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pred = np.zeros(0)
        if raw.n_rows:
            est = copy.copy(estimator) if names else estimator
            if names:
                for name, merged in _merge_by_id(selected, names).items():
                    setattr(est, name, merged)
            pred = est.predict(raw.X, groups=raw.groups)
    if as_series:
        import pandas as pd

        pred = pd.Series(pred, index=raw.labels)
    return pred, [(w.category, str(w.message)) for w in caught]


def predict_distributed(estimator, blocks, *, client=None):
    """Predict every row of ``blocks`` with each user's personal part, on the workers.

    The estimator's own ``predict`` per partition, with its users' personal
    parts (unseen users get the cold-start prediction).

    Parameters
    ----------
    estimator : skdpp estimator
        Fitted by :func:`fit_distributed` (personal parts on the workers) or
        in-process (the whole estimator is sent to the workers).
    blocks : UserBlocks
        The rows to predict (e.g. the training blocks, or test rows
        partitioned by user).
    client : distributed.Client, default=None
        Default: ``blocks.client``.

    Returns
    -------
    y_pred : dask.dataframe.Series or dask.array.Array
        One prediction per row: a Series indexed like the source dask DataFrame, or an
        array with one chunk per partition aligned with ``blocks.row_labels()``.
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    client = client if client is not None else (blocks.client or _get_client(None))
    parts = getattr(estimator, "personal_parts_", None)
    if parts is None:
        light, names = estimator, ()
    else:
        light = copy.copy(estimator)
        del light.personal_parts_
        names = parts.names
    light = client.scatter([light], broadcast=True, hash=False)[0]
    # Predicting the training blocks: each partition's users are in its own parts.
    same = parts is not None and [f.key for f in blocks.partitions] == parts._source_keys
    futures = []
    for q, raw in enumerate(blocks.partitions):
        if parts is None:
            selected = []
        elif same:
            selected = [parts.parts[q]]
        else:
            wanted = blocks._id_ranges[q]
            overlap = [p for p in range(parts.n_partitions)
                       if not ranges_disjoint([parts._id_ranges[p], wanted])]
            selected = [_submit(client, _select, parts.parts[p], raw) for p in overlap or [0]]
        futures.append(_submit(client, _predict_partition, light, raw, names,
                               blocks.from_dataframe, *selected, pure=False))
    preds = [_submit(client, operator.getitem, f, 0) for f in futures]
    _reemit(client.gather([_submit(client, operator.getitem, f, 1) for f in futures]))
    if blocks.from_dataframe:
        import dask.dataframe as dd

        meta = _submit(client, operator.methodcaller("head", 0), preds[0]).result()
        return dd.from_delayed(preds, meta=meta, divisions=blocks.divisions,
                               verify_meta=False)
    return concat_chunks(client, preds)
