"""Evaluation metrics for personalized models: RMSE and per-user Recall@k."""

import numbers

import numpy as np
from sklearn.utils.validation import check_consistent_length

from ..utils._grouped import UserIndex, _as_id_array

__all__ = ["recall_at_k", "rmse"]


def rmse(y_true, y_pred):
    """Root mean squared error.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
    y_pred : array-like of the same shape as ``y_true``

    Returns
    -------
    rmse : float
        ``sqrt(mean((y_true - y_pred) ** 2))`` over all entries (the RMSE of Krichene et
        al. 2023, arXiv:2302.07975, App. D.1, on held-out ratings: :func:`recall_at_k`).

    Examples
    --------
    >>> from skdpp.metrics import rmse
    >>> rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0])
    1.1547005383792515
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    check_consistent_length(y_true, y_pred)
    if y_true.shape != y_pred.shape and y_true.size == y_pred.size:
        y_pred = y_pred.reshape(y_true.shape)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"`y_true` and `y_pred` must have the same shape; got "
                         f"{y_true.shape} and {y_pred.shape}.")
    if y_true.size == 0:
        raise ValueError("rmse() needs at least one sample; got empty `y_true`.")
    return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))


def recall_at_k(recommended, relevant_users, relevant_items, *, k=None, users=None,
                average=True):
    """Per-user Recall@k over held-out items, averaged over users.

    The definition of Krichene et al. (2023), App. D.1::

        Recall@k = 1/n sum_j |Omega_j^test ∩ hat(Omega)_j| / min(k, |Omega_j^test|)

    where ``Omega_j^test`` is the set of held-out items of user ``j``, ``hat(Omega)_j``
    the top ``k`` items recommended to ``j`` and the average runs over the ``n`` users
    with at least one held-out item.

    Parameters
    ----------
    recommended : array-like of shape (n_users, n_recommended)
        Item ids recommended to each user, best first; row ``u`` belongs to user
        ``users[u]``. Only the first ``k`` columns are used; a repeated item counts once.
    relevant_users : array-like of shape (n_pairs,)
        User id of each held-out (user, item) pair.
    relevant_items : array-like of shape (n_pairs,)
        Item id of each held-out pair (comparable with ``recommended``, e.g. both
        integers); duplicated pairs count once.
    k : int, default=None
        Cut-off, ``<= n_recommended``; ``None`` uses ``n_recommended``.
    users : array-like of shape (n_users,), default=None
        Unique user id of each row of ``recommended``; ``None`` means ``0..n_users-1``.
    average : bool, default=True
        If False, return the per-user recall instead of the mean.

    Returns
    -------
    recall : float or ndarray of shape (n_users,)
        Mean over users with at least one held-out item; with ``average=False`` the
        recall of each row of ``recommended`` (NaN for users without held-out items).

    Raises
    ------
    ValueError
        If a held-out pair belongs to a user without a row in ``recommended``, or if no
        user has a held-out item.

    References
    ----------
    .. [1] Krichene, Jain, Song, Sundararajan, Thakurta, Zhang. "Multi-Task Differential
       Privacy Under Distribution Skew", ICML 2023, arXiv:2302.07975, App. D.1.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.metrics import recall_at_k
    >>> recommended = np.array([[1, 2], [3, 4]])
    >>> # user 0 held out items {1, 5}; user 1 held out item {9}
    >>> recall_at_k(recommended, [0, 0, 1], [1, 5, 9], k=2)
    0.25
    """
    rec = np.asarray(recommended)
    if rec.ndim != 2:
        raise ValueError(f"`recommended` must be 2-D (n_users, n_recommended); got shape "
                         f"{rec.shape}.")
    n_rows, n_rec = rec.shape
    k = n_rec if k is None else k
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= n_rec:
        raise ValueError(f"`k` must be an integer in [1, {n_rec}] (the number of "
                         f"recommended columns); got {k!r}.")
    k = int(k)
    rel_users = _as_id_array(relevant_users, "relevant_users")
    rel_items = _as_id_array(relevant_items, "relevant_items")
    check_consistent_length(rel_users, rel_items)
    row_index = UserIndex.from_groups(np.arange(n_rows) if users is None else users, n_rows)
    if row_index.n_users != n_rows:
        raise ValueError("`users` must contain unique ids, one per row of `recommended`.")
    code_to_row = np.argsort(row_index.codes)  # row of each user in `recommended`
    codes = row_index.lookup(rel_users)
    if np.any(codes < 0):
        raise ValueError(
            f"Held-out pairs of user {rel_users[np.flatnonzero(codes < 0)[0]]!r} have no "
            "row in `recommended`; recommend items to every user with held-out items (pass "
            "their ids in `users`).")
    items = UserIndex.from_groups(np.concatenate([rec[:, :k].ravel(), rel_items]))
    item_codes, n_items = items.codes, items.n_users
    top_keys = (np.repeat(np.arange(n_rows, dtype=np.int64), k) * n_items
                + item_codes[: n_rows * k])
    rel_keys = np.unique(code_to_row[codes] * n_items + item_codes[n_rows * k:])
    key_rows = rel_keys // n_items
    n_hits = np.bincount(key_rows, weights=np.isin(rel_keys, top_keys), minlength=n_rows)
    n_rel = np.bincount(key_rows, minlength=n_rows)
    per_user = np.full(n_rows, np.nan)
    has = n_rel > 0
    per_user[has] = n_hits[has] / np.minimum(k, n_rel[has])
    if not average:
        return per_user
    if not has.any():
        raise ValueError("No user has a held-out item: Recall@k is undefined. Pass at least "
                         "one (user, item) pair in `relevant_users` / `relevant_items`.")
    return float(np.mean(per_user[has]))
