"""Per-user splitters: hold out rows *within* each user, so that every test user is in
the training set (:class:`sklearn.model_selection.GroupKFold` only measures cold start)."""

import numbers
import sys

import numpy as np
from sklearn import get_config
from sklearn.model_selection import BaseCrossValidator, BaseShuffleSplit
from sklearn.utils import check_random_state, indexable
from sklearn.utils._indexing import _safe_indexing

from ..utils._grouped import UserIndex, _to_numpy, rank_within_user

__all__ = ["PerUserKFold", "PerUserShuffleSplit", "per_user_train_test_split"]


def _check_groups(groups, X, owner):
    if groups is None:
        raise ValueError(
            f"{owner} needs `groups` (one user id per row) to split rows within users; got "
            "groups=None. Pass split(X, y, groups=groups); inside cross_validate or "
            "GridSearchCV call sklearn.set_config(enable_metadata_routing=True) and pass "
            "params={'groups': groups} (or fit(X, y, groups=groups)).")
    n_samples = X.shape[0] if hasattr(X, "shape") else len(X)
    return UserIndex.from_groups(groups, n_samples)


def _check_routing(splitter, groups):
    """Refuse a split called by scikit-learn (the caller of ``split``) with groups and
    routing off."""
    if groups is None or get_config().get("enable_metadata_routing", False):
        return
    caller = sys._getframe(2) if hasattr(sys, "_getframe") else None
    module = caller.f_globals.get("__name__", "") if caller is not None else ""
    if module.split(".")[0] != "sklearn":
        return
    raise RuntimeError(
        f"{type(splitter).__name__} got groups from scikit-learn ({module}) while "
        f"metadata routing is disabled (scikit-learn's default): groups would reach the "
        f"splitter only (every fit row-level DP, every score cold start). Call "
        f"sklearn.set_config(enable_metadata_routing=True) and pass groups the routed way "
        f"(GridSearchCV(...).fit(X, y, groups=groups), cross_validate(..., "
        f"params={{'groups': groups}})); for out-of-fold predictions use "
        f"skdpp.model_selection.cross_val_predict(estimator, X, y, groups=groups).")


def _n_test_per_row(index, test_size, min_train_rows):
    """Per row, its user's ``ceil(test_size * n)`` clipped to ``[1, n - min_train_rows]``
    (0 if infeasible)."""
    n_test = np.ceil(np.round(test_size * index.counts, 9)).astype(np.int64)
    cap = index.counts - min_train_rows
    return np.where(cap >= 1, np.clip(n_test, 1, np.maximum(cap, 1)), 0)[index.codes]


def _check_int(name, value, low):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"`{name}` must be an integer >= {low}; got {value!r}.")


def _check_test_size(test_size):
    if isinstance(test_size, bool) or not isinstance(test_size, numbers.Real) \
            or not 0 < test_size < 1:
        raise ValueError(
            f"`test_size` must be a float in the open interval (0, 1) (the fraction of "
            f"each user's rows to hold out); got {test_size!r}.")


class _PerUserSplitter:
    """The ``split`` of the per-user splitters, which request ``groups`` by default."""

    __metadata_request__split = {"groups": True}

    def split(self, X, y=None, groups=None):
        """Generate train/test row indices, splitting within each user.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Only its number of rows is used.
        y : None
            Ignored.
        groups : array-like of shape (n_samples,)
            User id of each row (required: ``None`` raises a ``ValueError``).

        Yields
        ------
        train, test : ndarray of int
            Row indices of the split.

        Raises
        ------
        RuntimeError
            If called by scikit-learn with ``groups`` while metadata routing is
            disabled (:ref:`safety_rails`).
        """
        _check_routing(self, groups)
        return super().split(X, y, groups)


class PerUserKFold(_PerUserSplitter, BaseCrossValidator):
    """K-fold cross-validation of the rows *within* each user.

    Each user's rows are dealt into ``n_splits`` folds, so every fold tests
    some rows of (almost) every user while its other rows stay in training.
    Users with fewer than ``n_splits`` rows are never tested (their rows are
    in the training set of every split).

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds, at least 2.
    shuffle : bool, default=False
        Shuffle each user's rows before dealing them (else original order).
    random_state : int, RandomState instance or None, default=None
        Randomness of the shuffle and of each user's first fold; only with
        ``shuffle=True``.

    Notes
    -----
    Fold of a row: ``(rank + start_u) % n_splits``, ``rank`` its position
    within its user and ``start_u`` a per-user offset balancing fold sizes
    (both random if ``shuffle``). A user with ``n >= n_splits`` rows has
    ``floor`` or ``ceil(n / n_splits)`` rows in each test fold and at least
    one in training; the test folds partition the eligible users' rows.

    ``groups`` is required and requested by default for metadata routing, which
    scikit-learn's meta-estimators need enabled (else :meth:`split` raises a
    ``RuntimeError``: :ref:`safety_rails`).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.model_selection import PerUserKFold
    >>> groups = np.array(["a", "a", "b", "b", "a", "c"])
    >>> X = np.zeros((6, 1))
    >>> for train, test in PerUserKFold(n_splits=2).split(X, groups=groups):
    ...     print(train, test)
    [1 2 5] [0 3 4]
    [0 3 4 5] [1 2]
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None):
        _check_int("n_splits", n_splits, 2)
        if not isinstance(shuffle, bool):
            raise TypeError(f"`shuffle` must be True or False; got {shuffle!r}.")
        if not shuffle and random_state is not None:
            raise ValueError(
                "Setting `random_state` has no effect since `shuffle` is False; "
                "leave random_state=None or set shuffle=True.")
        self.n_splits = int(n_splits)
        self.shuffle = shuffle
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None):
        """Number of splits, ``n_splits`` (the arguments are ignored)."""
        return self.n_splits

    def _iter_test_masks(self, X, y, groups):
        index = _check_groups(groups, X, type(self).__name__)
        if self.shuffle:
            rng = check_random_state(self.random_state)
            start = rng.randint(self.n_splits, size=index.n_users)
            rank = rank_within_user(index, rng)
        else:
            start = np.arange(index.n_users) % self.n_splits
            rank = rank_within_user(index)
        fold = (rank + start[index.codes]) % self.n_splits
        # users with fewer than n_splits rows are never tested (fold -1)
        fold = np.where(index.counts[index.codes] >= self.n_splits, fold, -1)
        for f in range(self.n_splits):  # loop over folds, not users
            yield fold == f


class PerUserShuffleSplit(_PerUserSplitter, BaseShuffleSplit):
    """Random train/test splits of the rows *within* each user.

    In each split, every user with ``n >= 2`` rows puts ``ceil(test_size * n)``
    of them (at least 1, at most ``n - 1``; as :func:`per_user_train_test_split`
    with ``min_train_rows=1``), chosen uniformly at random, in the test set.

    Parameters
    ----------
    n_splits : int, default=5
        Number of re-shuffling and splitting iterations.
    test_size : float in (0, 1), default=0.2
        Fraction of each user's rows to hold out.
    random_state : int, RandomState instance or None, default=None
        Randomness of the splits (an int: the same splits at each call).

    Notes
    -----
    ``groups`` and metadata routing as for :class:`PerUserKFold`.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.model_selection import PerUserShuffleSplit
    >>> groups = np.repeat([10, 20], 5)
    >>> cv = PerUserShuffleSplit(n_splits=1, test_size=0.4, random_state=0)
    >>> train, test = next(cv.split(np.zeros((10, 1)), groups=groups))
    >>> np.bincount(groups[test] // 10)[1:]
    array([2, 2])
    """

    def __init__(self, n_splits=5, *, test_size=0.2, random_state=None):
        _check_int("n_splits", n_splits, 1)
        _check_test_size(test_size)
        super().__init__(n_splits=n_splits, test_size=test_size, train_size=None,
                         random_state=random_state)
        self._default_test_size = 0.2

    def _iter_indices(self, X, y=None, groups=None):
        index = _check_groups(groups, X, type(self).__name__)
        n_test = _n_test_per_row(index, self.test_size, 1)
        rng = check_random_state(self.random_state)
        for _ in range(self.n_splits):  # loop over splits, not users
            test = rank_within_user(index, rng) < n_test
            yield np.flatnonzero(~test), np.flatnonzero(test)


def per_user_train_test_split(*arrays, groups, test_size=0.2, random_state=None,
                              min_train_rows=1):
    """Split arrays into train and test rows *within* each user.

    Parameters
    ----------
    *arrays : sequence of indexables with the same number of rows
        Lists, numpy arrays, scipy sparse matrices or pandas DataFrames.
    groups : array-like of shape (n_samples,)
        User id of each row (required, keyword-only).
    test_size : float in (0, 1), default=0.2
        Fraction of each user's rows to hold out.
    random_state : int, RandomState instance or None, default=None
        Randomness of the choice of test rows.
    min_train_rows : int, default=1
        Minimum number of training rows every user keeps.

    Returns
    -------
    splitting : list of length ``2 * (len(arrays) + 1)``
        ``[a_train, a_test]`` for each input array, followed by
        ``[groups_train, groups_test]``.

    Notes
    -----
    A user with ``n`` rows holds out ``ceil(test_size * n)`` rows (``test_size * n``
    rounded to 9 decimals first: 0.3 of 10 rows is 3 rows), clipped to
    ``[1, n - min_train_rows]``; a user with ``n <= min_train_rows`` rows stays
    entirely in training. Rows keep their original order in both parts.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.model_selection import per_user_train_test_split
    >>> X = np.arange(12).reshape(6, 2)
    >>> y = np.arange(6)
    >>> groups = np.array([0, 0, 0, 0, 1, 2])
    >>> X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
    ...     X, y, groups=groups, test_size=0.25, random_state=0)
    >>> g_tr, g_te
    (array([0, 0, 0, 1, 2]), array([0]))
    """
    if len(arrays) == 0:
        raise ValueError("At least one array is required as input, e.g. "
                         "per_user_train_test_split(X, y, groups=groups).")
    _check_test_size(test_size)
    _check_int("min_train_rows", min_train_rows, 1)
    arrays = indexable(*arrays)
    index = _check_groups(groups, arrays[0], "per_user_train_test_split")
    groups_arr = _to_numpy(groups)
    test_mask = (rank_within_user(index, check_random_state(random_state))
                 < _n_test_per_row(index, test_size, int(min_train_rows)))
    train, test = np.flatnonzero(~test_mask), np.flatnonzero(test_mask)
    return [_safe_indexing(a, rows) for a in (*arrays, groups_arr) for rows in (train, test)]
