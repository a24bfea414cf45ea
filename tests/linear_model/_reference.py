"""Loop-based, test-only references shared by the FedRep and AltMin tests."""

import math

import numpy as np

_RIDGE, _RIDGE_DEFICIENT = 1e-10, 1e-6


def _ref_head(P, y, k):
    """Per-user least squares with the documented tiny relative ridge."""
    A, r = P.T @ P, P.T @ y
    c = _RIDGE_DEFICIENT if len(y) < k else _RIDGE
    lam = max(c * np.trace(A) / k, np.finfo(float).tiny)
    return np.linalg.solve(A + lam * np.eye(k), r)


def _ref_split(groups, rng):
    """S^0 mask: per user, rows ranked by a uniform key; the first ceil(m/2) (in [1, m-1])."""
    keys = rng.random_sample(len(groups))
    s0 = np.zeros(len(groups), dtype=bool)
    for u in np.unique(groups):
        rows = np.flatnonzero(groups == u)
        rows = rows[np.lexsort((rows, keys[rows]))]
        m = len(rows)
        n_first = m if m == 1 else min(max(math.ceil(m / 2), 1), m - 1)
        s0[rows[:n_first]] = True
    return s0


def _canary_last(X, y, groups):
    """Reorder so the user with the largest id holds the last rows (shared prefix with D')."""
    user = groups.max()
    order = np.r_[np.flatnonzero(groups != user), np.flatnonzero(groups == user)]
    return X[order], y[order], groups[order], user


def _test_mse(est, info):
    """Test MSE of the personalized predictions on the held-out rows of ``info``."""
    pred = est.predict(info.X_test, groups=info.groups_test)
    return float(np.mean((pred - info.y_test) ** 2))
