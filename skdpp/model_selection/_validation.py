"""Out-of-fold predictions that reach each user's personal part (scikit-learn's
``cross_val_predict`` never passes ``groups`` to ``predict``)."""

import numbers

import numpy as np
from sklearn import get_config
from sklearn.base import clone
from sklearn.model_selection import check_cv
from sklearn.utils import indexable
from sklearn.utils._indexing import _safe_indexing
from sklearn.utils.metadata_routing import MetadataRouter, get_routing_for_object
from sklearn.utils.parallel import Parallel, delayed

from ..utils._grouped import _to_numpy
from ._split import PerUserKFold, _check_groups

__all__ = ["cross_val_predict"]

_METHODS = ("predict", "predict_proba", "predict_log_proba", "decision_function")


def cross_val_predict(estimator, X, y=None, *, groups, cv=None, n_jobs=None, verbose=0,
                      params=None, pre_dispatch="2*n_jobs", method="predict"):
    """Out-of-fold predictions, with each row's user id passed to ``predict``.

    Like :func:`sklearn.model_selection.cross_val_predict` (which routes
    ``groups`` to the splitter and ``fit`` only), but every fold predicts with its
    test rows' ``groups``: a held-out row gets its user's personal prediction
    (not the cold start).

    Parameters
    ----------
    estimator : estimator object
        A personalized estimator (its ``fit`` and ``method`` take ``groups``),
        or a ``Pipeline`` ending in one (then metadata routing must be enabled,
        ``sklearn.set_config(enable_metadata_routing=True)``, so that the
        pipeline passes ``groups`` on). Cloned for every fold.
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,), default=None
    groups : array-like of shape (n_samples,)
        User id of each row (required, keyword-only).
    cv : int, cross-validation generator or iterable, default=None
        ``None``: ``PerUserKFold(n_splits=5)``; an int ``k``:
        ``PerUserKFold(n_splits=k)``; else a splitter or an iterable of
        ``(train, test)`` index arrays whose test sets partition the rows.
    n_jobs : int, default=None
        Folds fitted in parallel (joblib; scikit-learn's configuration, incl.
        metadata routing, reaches the workers).
    verbose : int, default=0
    params : dict, default=None
        Further parameters of ``estimator.fit``; arrays with one entry per row
        are indexed per fold like ``X``. Must not contain ``groups``.
    pre_dispatch : int or str, default="2*n_jobs"
        Number of jobs dispatched ahead (joblib).
    method : {"predict", "predict_proba", "predict_log_proba", \
            "decision_function"}, default="predict"
        The method producing the predictions.

    Returns
    -------
    predictions : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        ``predictions[i]`` comes from the fold whose test set holds row ``i``.

    Raises
    ------
    ValueError
        If ``groups`` is missing or has the wrong length, ``params`` contains
        ``groups``, the test folds are not a partition of the rows (e.g.
        :class:`PerUserKFold` never tests users with fewer rows than folds),
        or ``estimator`` is a meta-estimator while metadata routing is off.

    Notes
    -----
    Every fold is a separate private fit spending its own budget (on
    overlapping data): the predictions are for the data owner, not a release.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model import PrivateFedRepRegressor
    >>> from skdpp.model_selection import cross_val_predict
    >>> X, y, groups, _ = make_shared_representation_regression(
    ...     n_users=200, n_features=10, n_samples_per_user=9, random_state=0)
    >>> est = PrivateFedRepRegressor(n_components=2, epsilon=np.inf, random_state=0)
    >>> pred = cross_val_predict(est, X, y, groups=groups, cv=3)
    >>> pred.shape
    (1800,)
    >>> bool(np.mean((pred - y) ** 2) < np.var(y))  # personalized beats the mean
    True
    """
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {list(_METHODS)}; got {method!r}.")
    if not hasattr(estimator, method):
        raise AttributeError(
            f"{type(estimator).__name__} has no method {method!r}; pass one of its "
            f"prediction methods as method=...")
    params = {} if params is None else dict(params)
    if "groups" in params:
        raise ValueError(
            "cross_val_predict got groups in params: pass groups=groups (the user ids "
            "go to the splitter, to fit and to predict).")
    if not get_config().get("enable_metadata_routing", False) and isinstance(
            get_routing_for_object(estimator), MetadataRouter):
        raise ValueError(
            f"{type(estimator).__name__} passes groups on to its steps only with "
            f"metadata routing: call sklearn.set_config(enable_metadata_routing=True) "
            f"(or use sklearn.config_context(enable_metadata_routing=True)).")
    X, y = indexable(X, y)
    n_samples = _check_groups(groups, X, "cross_val_predict").n_samples
    ids = _to_numpy(groups)
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        cv = PerUserKFold(n_splits=int(cv))
    cv = PerUserKFold() if cv is None else check_cv(cv)
    # groups to the splitter if it asks for them (KFold would warn that it ignores them)
    wants_groups = get_routing_for_object(cv).consumes("split", ["groups"])
    splits = list(cv.split(X, y, **({"groups": ids} if wants_groups else {})))
    test_rows = np.concatenate([np.asarray(test, dtype=np.intp) for _, test in splits])
    _check_partition(test_rows, n_samples, cv)

    predictions = Parallel(n_jobs=n_jobs, verbose=verbose, pre_dispatch=pre_dispatch)(
        delayed(_fit_and_predict)(clone(estimator), X, y, ids, train, test, params,
                                  method, n_samples)
        for train, test in splits)
    shapes = {np.shape(p)[1:] for p in predictions}
    if len(shapes) > 1:
        raise ValueError(
            f"The folds' {method} outputs have different shapes {sorted(shapes)} (e.g. "
            f"a class missing from some fold's training rows); use folds whose "
            f"training rows hold every class.")
    inverse = np.argsort(test_rows)  # test_rows is a permutation (_check_partition)
    return np.concatenate([np.asarray(p) for p in predictions])[inverse]


def _check_partition(test_rows, n_samples, cv):
    counts = np.bincount(test_rows, minlength=n_samples)
    missing, repeated = int(np.sum(counts == 0)), int(np.sum(counts > 1))
    detail = []
    if missing:
        detail.append(f"{missing} rows are never in a test fold")
        if isinstance(cv, PerUserKFold):
            detail[-1] += (f" (PerUserKFold never tests users with fewer than "
                           f"n_splits={cv.n_splits} rows: drop those users or lower "
                           f"n_splits)")
    if repeated:
        detail.append(f"{repeated} rows are in several test folds (e.g. "
                      f"PerUserShuffleSplit)")
    if detail:
        raise ValueError(
            f"cross_val_predict needs every row in exactly one test fold; with "
            f"cv={cv!r}, {' and '.join(detail)}. Use cross_validate for scores on "
            f"such splits.")


def _fold(value, rows, n_samples):
    """Index ``value`` by ``rows`` if it has one entry per sample, else pass it."""
    if (hasattr(value, "shape") and len(value.shape) >= 1 and value.shape[0] == n_samples) \
            or (isinstance(value, (list, tuple)) and len(value) == n_samples):
        return _safe_indexing(value, rows)
    return value


def _fit_and_predict(estimator, X, y, ids, train, test, params, method, n_samples):
    fit_params = {k: _fold(v, train, n_samples) for k, v in params.items()}
    y_train = None if y is None else _safe_indexing(y, train)
    estimator.fit(_safe_indexing(X, train), y_train, groups=ids[train], **fit_params)
    return getattr(estimator, method)(_safe_indexing(X, test), groups=ids[test])
