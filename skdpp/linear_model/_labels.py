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

__all__ = ["LabelCounts", "binary_problems", "label_codes", "label_counts_block",
           "labels_sensitivity", "select_classes"]


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
