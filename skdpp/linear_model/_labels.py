"""The label set of a classifier: public, observed, or selected under DP.

A classifier's label set ``classes_`` is released with the model. When the
caller does not give it, it depends on the users' labels: a label held by one
user only appears or disappears with that user. This module provides

* :class:`LabelCounts`, a partial sum over blocks of users: for every label
  present, the number of *distinct users* holding it (each user counted at
  most once per label, for at most ``max_per_user`` of its labels);
* :func:`label_counts_block`, the block function computing it;
* :func:`select_classes`, which turns the summed counts into the label set:
  privately (partition selection, :meth:`~skdpp.privacy.Releaser.select_partitions`,
  Gopi et al. 2020; Desfontaines et al. 2022) or, on explicit request, as
  observed (not covered by the guarantee);
* :func:`label_codes` and :func:`binary_problems`, the one place where labels
  become ``{-1, +1}`` columns (one per binary problem).

Labels outside the label set (not selected, or not in a given ``classes``)
are *negatives in every one-vs-rest problem* ("not this class"); for two
classes, where the one problem is ``classes_[1]`` against the rest, they
count as not ``classes_[1]``. Raising an error instead would make whether
``fit`` succeeds depend on one user's labels.

Labels have a stated input domain, checked by :func:`check_label_domain`
before any computation (a documented rule, never an incidental numeric
exception): labels are numbers or strings, all of one kind; with a given
label set they are compared to it by equality (a label equal to no class, such
as ``1.5`` for ``classes=[0, 1]``, is "not this class" in every problem);
without one (private selection or ``"observed"``) numbers must be integers
(``1.0`` is the integer label 1; ``1.5`` is rejected as a continuous target).

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


def _label_kinds(values):
    """The kinds of the labels in ``values``: a subset of {"number", "str", "bytes", other}.

    A function of the dtype, or for object arrays of each element's Python
    type (booleans, integers and floats are all "number": they compare equal
    across types).
    """
    return id_kinds(np.asarray(values).reshape(-1))


def check_label_domain(y, classes, *, estimator):
    """Check that the labels ``y`` are in the input domain (raise before any computation).

    The rules (documented in :class:`~skdpp.linear_model.JLMarginClassifier`'s
    Notes and the README's privacy model) depend on the labels' kinds and
    values only through these fixed predicates:

    1. every label is a number (bool, integer or float) or every label is a
       string: mixed kinds (in an object array) are rejected;
    2. with a given label set (``classes`` an array), the labels' kind must be
       the kind of ``classes`` (a number never equals a string); *values* are
       not restricted: a label equal to no class is handled (negative in every
       problem), never rejected;
    3. without one (``classes`` None or ``"observed"``), number labels must be
       integers (finite floats with an integral value count: ``1.0`` is 1);
       a non-integral label is a continuous (regression) target and is
       rejected.

    Non-finite labels are rejected earlier by scikit-learn's
    ``validate_data`` (rule "y finite").

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
    classes : ndarray, None or "observed"
    estimator : str
        Name for the messages.

    Raises
    ------
    ValueError
        Naming the rule that the labels break.
    """
    y = np.asarray(y)
    kinds = _label_kinds(y) if y.size else frozenset()
    if len(kinds) > 1 or (kinds and not kinds <= {"number", "str", "bytes"}):
        raise ValueError(
            f"Unknown label type: {estimator} labels must all be numbers or all be "
            f"strings (the input domain of the labels); got labels of types "
            f"{' and '.join(sorted(kinds))}. Convert y to one type, e.g. "
            f"np.asarray(y).astype(str)."
        )
    if isinstance(classes, np.ndarray):
        class_kinds = _label_kinds(classes)
        if kinds and kinds != class_kinds:
            raise ValueError(
                f"{estimator}: the labels in y are of type {' and '.join(sorted(kinds))} "
                f"but `classes` holds labels of type {' and '.join(sorted(class_kinds))}: "
                f"no label could equal a class (labels are compared to `classes` by "
                f"equality). Pass y and `classes` of the same type."
            )
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
                f"'not this class' in every binary problem)."
            )


def _sorted_unique(values):
    """``np.unique`` (sorted labels and inverse codes) for any label dtype."""
    labels, inverse = np.unique(values, return_inverse=True)
    return labels, inverse.reshape(-1)


@dataclass(frozen=True, eq=False)
class LabelCounts:
    """Distinct-user counts of labels: a partial that adds up over blocks.

    ``a + b`` merges two partials (labels of either; counts added), so the
    executor's tree sum (:func:`~skdpp.utils._executor.tree_add`) gives the
    counts of all users whatever the partition into blocks; the result is
    sorted by label.

    Attributes
    ----------
    labels : ndarray of shape (n_labels,)
        Sorted distinct labels.
    counts : ndarray of shape (n_labels,), float
        Number of users holding each label (each user at most once per label).
    """

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
    """Partial :class:`LabelCounts` of a block: users holding each label.

    A user counts once for each of its labels, and for at most
    ``max_per_user`` of them: its most frequent labels (ties broken by label
    order), a function of that user's rows only. The contribution of one
    user to the vector of counts is thus a 0/1 vector with at most
    ``max_per_user`` ones.

    Returns ``(LabelCounts or None, state)`` (``None`` for a block without rows).
    """
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
    """L2 sensitivity of the distinct-user counts under replace-one-user.

    The replaced user's 0/1 vector (at most ``L = max_per_user`` ones) is
    subtracted and the new user's added: at most ``2 L`` entries change, each
    by 1, so the sensitivity is ``sqrt(2 L)``.
    """
    return math.sqrt(2.0 * max_per_user)


def select_classes(release, phase, counts, *, max_per_user):
    """The label set from the summed counts, selected under DP.

    Parameters
    ----------
    release : Releaser
    phase : str
        A Gaussian phase of the plan with ``threshold_delta > 0``.
    counts : LabelCounts or None
        The distinct-user counts of all users.
    max_per_user : int
        The cap used by :func:`label_counts_block`.

    Returns
    -------
    classes : ndarray
        The published labels, sorted (all present labels at ``epsilon=inf``).
    """
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
    """Labels in ``{-1, +1}``, one column per binary problem.

    Two classes: one problem (``+1`` for ``classes[1]``); more: one-vs-rest
    (column ``p`` is ``+1`` for class ``p``). Code ``-1`` (a label outside the
    label set) is ``-1`` in every column.

    Returns
    -------
    Y : ndarray of shape (n_samples, n_problems)
    """
    codes = np.asarray(codes)
    if n_classes == 2:
        return np.where(codes == 1, 1.0, -1.0)[:, None]
    return np.where(codes[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)
