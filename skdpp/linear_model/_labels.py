"""The label set of a classifier: public, observed, or selected under DP.

Unless given, ``classes_`` depends on each user (a label held by one user comes
and goes with it), so it is selected privately from distinct-user counts
(:func:`select_classes`: partition selection, Gopi et al. 2020; Desfontaines et
al. 2022). :func:`label_codes` and :func:`binary_problems` are the one place
where labels become ``{-1, +1}`` columns. Labels outside the label set are
*negatives in every problem*: raising instead would make whether ``fit``
succeeds depend on one user's labels.

Examples
--------
>>> import numpy as np
>>> from skdpp.linear_model._labels import label_codes, binary_problems
>>> codes = label_codes(np.array(["b", "a", "z", "c"]), np.array(["a", "b", "c"]))
>>> codes
array([ 1,  0, -1,  2])
>>> binary_problems(codes, 3)
array([[-1.,  1., -1.],
       [ 1., -1., -1.],
       [-1., -1., -1.],
       [-1., -1.,  1.]])
"""

import math
from dataclasses import dataclass

import numpy as np

from ..utils._grouped import id_kinds  # labels are typed like user ids

__all__ = ["LabelCounts", "binary_problems", "check_label_domain", "label_codes",
           "label_counts_block", "labels_sensitivity", "select_classes"]


def check_label_domain(y, classes, *, estimator):
    """Raise a ``ValueError`` naming the broken rule if ``y`` is outside the input domain
    (:class:`~skdpp.linear_model.JLMarginClassifier`'s Notes): all numbers or all
    strings, of the kind of ``classes`` when it is an array, else integral numbers."""
    y = np.asarray(y)
    kinds = id_kinds(y.reshape(-1)) if y.size else frozenset()
    if len(kinds) > 1 or (kinds and not kinds <= {"number", "str", "bytes"}):
        raise ValueError(
            f"Unknown label type: {estimator} labels must all be numbers or all be "
            f"strings (the input domain of the labels); got labels of types "
            f"{' and '.join(sorted(kinds))}. Convert y to one type, e.g. "
            f"np.asarray(y).astype(str).")
    if isinstance(classes, np.ndarray):
        class_kinds = id_kinds(classes.reshape(-1))
        if kinds and kinds != class_kinds:
            raise ValueError(
                f"{estimator}: the labels in y are of type {' and '.join(sorted(kinds))} "
                f"but `classes` holds labels of type {' and '.join(sorted(class_kinds))}: "
                f"no label could equal a class (labels are compared to `classes` by "
                f"equality). Pass y and `classes` of the same type.")
        return
    if kinds == {"number"}:
        with np.errstate(all="ignore"):
            values = y.astype(np.float64) if y.dtype.kind in "Ofc" else None
            integral = values is None or bool(np.all(np.floor(values) == values))
        if not integral:
            raise ValueError(
                f"Unknown label type: continuous. {estimator} with classes=None or "
                f"classes='observed' takes integer or string labels (the input domain of "
                f"the labels); y holds a non-integral number, i.e. a regression target. "
                f"Pass integer or string labels, or the label set as classes=[...] (labels "
                f"are then compared to it by equality; a label equal to no class is "
                f"'not this class' in every binary problem).")


def _sorted_unique(values):
    """``np.unique`` (sorted labels and inverse codes) for any label dtype."""
    labels, inverse = np.unique(values, return_inverse=True)
    return labels, inverse.reshape(-1)


@dataclass(frozen=True, eq=False)
class LabelCounts:
    """Distinct-user counts (float) of the sorted ``labels``; ``a + b`` merges two
    partials, so the executor's tree sum gives the same counts whatever the blocks."""

    labels: np.ndarray
    counts: np.ndarray

    def __add__(self, other):
        if other is None:
            return self
        labels, inverse = _sorted_unique(np.concatenate([self.labels, other.labels]))
        counts = np.bincount(inverse, weights=np.concatenate([self.counts, other.counts]),
                             minlength=labels.shape[0])
        return LabelCounts(labels, counts)

    __radd__ = __add__


def label_counts_block(block, state, max_per_user):
    """Block function: ``(LabelCounts or None, state)``; a user counts once for each of
    its ``max_per_user`` most frequent labels (ties by label order): a 0/1 vector."""
    y = np.asarray(block.take(block.y))
    if y.shape[0] == 0:
        return None, state
    labels, codes = _sorted_unique(y)
    n_labels = labels.shape[0]
    # distinct (user, label) pairs and their row counts
    pair = block.row_user * n_labels + codes
    pairs, rows = np.unique(pair, return_counts=True)
    user, code = pairs // n_labels, pairs % n_labels
    # rank of each pair within its user: most rows first, then label order
    order = np.lexsort((code, -rows, user))
    user_sorted = user[order]
    starts = np.r_[0, np.flatnonzero(np.diff(user_sorted)) + 1]
    rank = np.arange(order.shape[0]) - np.repeat(starts, np.diff(np.r_[starts,
                                                                      order.shape[0]]))
    kept = code[order][rank < max_per_user]
    counts = np.bincount(kept, minlength=n_labels).astype(np.float64)
    present = counts > 0
    return LabelCounts(labels[present], counts[present]), state


def labels_sensitivity(max_per_user):
    """L2 sensitivity ``sqrt(2 L)`` of the distinct-user counts under replace-one-user:
    two 0/1 vectors of at most ``L = max_per_user`` ones change ``2 L`` entries by 1."""
    return math.sqrt(2.0 * max_per_user)


def select_classes(release, phase, counts, *, max_per_user):
    """The published labels (sorted), selected under DP from the summed ``counts`` (or
    None) in the Gaussian ``phase`` (``threshold_delta > 0``)."""
    if counts is None:  # no rows at all: nothing to select, the release still happens
        counts = LabelCounts(np.empty(0), np.empty(0))
    keep, _ = release.select_partitions(
        phase, counts.counts, sensitivity=labels_sensitivity(max_per_user),
        max_contribution=1.0, max_partitions=int(max_per_user))
    return counts.labels[keep]


def label_codes(y, classes):
    """Position of each label in the sorted ``classes`` (``-1`` if absent)."""
    y = np.asarray(y)
    classes = np.asarray(classes)
    if classes.shape[0] == 0:
        return np.full(y.shape[0], -1, dtype=np.int64)
    pos = np.searchsorted(classes, y)
    pos_c = np.minimum(pos, classes.shape[0] - 1)
    return np.where((pos < classes.shape[0]) & (classes[pos_c] == y), pos_c, -1
                    ).astype(np.int64)


def binary_problems(codes, n_classes):
    """Labels in ``{-1, +1}``, shape (n_samples, n_problems): one problem (``+1`` for
    ``classes[1]``) for two classes, else one-vs-rest; code ``-1`` is ``-1`` everywhere."""
    codes = np.asarray(codes)
    if n_classes == 2:
        return np.where(codes == 1, 1.0, -1.0)[:, None]
    return np.where(codes[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)
