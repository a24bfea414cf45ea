"""Loop-based, test-only references shared by the FedRep and AltMin tests.

The references take the randomness a fit used (its ``S^0`` split, batches and
rounds) from the estimators' own block functions, run on the same blocks and
key as the fit (:func:`fit_executor`), and then compute everything else with
plain loops over users and rows.
"""

import numpy as np

from skdpp.linear_model._altmin import prepare_altmin, user_rounds
from skdpp.linear_model._fedrep import fedrep_batches
from skdpp.linear_model._representation import prepare_split
from skdpp.utils._executor import LocalExecutor
from skdpp.utils._grouped import UserIndex, make_blocks
from skdpp.utils._random import FitRandomness

_RIDGE, _RIDGE_DEFICIENT = 1e-10, 1e-6


def _ref_head(P, y, k):
    """Per-user least squares with the documented tiny relative ridge."""
    A, r = P.T @ P, P.T @ y
    c = _RIDGE_DEFICIENT if len(y) < k else _RIDGE
    lam = max(c * np.trace(A) / k, np.finfo(float).tiny)
    return np.linalg.solve(A + lam * np.eye(k), r)


def fit_executor(X, y, groups, random_state, **block_kwargs):
    """The blocks, states and key of a fit with this ``random_state`` (split prepared)."""
    y = np.asarray(y, dtype=np.float64)
    index = UserIndex.from_groups(groups, len(y))
    executor = LocalExecutor(make_blocks(X, y, index, **block_kwargs))
    key = FitRandomness(random_state).key
    executor.map(prepare_split, key)
    return executor, key


def s0_mask(executor, n_samples):
    """``True`` for the rows (original numbering) the fit put in ``S^0``."""
    mask = np.zeros(n_samples, dtype=bool)
    for state in executor.states:
        mask[state.s0.source_rows()] = True
    return mask


def _rows_of(state, sub):
    """Original row numbers of a selection ``sub`` of a block's ``S^0`` rows."""
    return state.s0.source_rows()[sub.source_rows()]


def fedrep_round_batches(executor, key, t, batch_mode, batch_size):
    """``(head_rows, grad_rows)`` of round ``t``: sets of original row numbers."""
    head, grad = [], []
    for state in executor.states:
        hb, gb = fedrep_batches(state.local, key, t, batch_mode, batch_size)
        head.append(_rows_of(state, hb))
        grad.append(_rows_of(state, gb))
    return set(np.concatenate(head).tolist()), set(np.concatenate(grad).tolist())


def altmin_randomness(executor, key, batch_mode, n_rounds):
    """``(head_rows, stat_rows, round_of_user)`` of an AltMin fit (rows as sets).

    ``round_of_user`` maps each user id to its round with ``schedule="disjoint"``.
    """
    executor.map(prepare_altmin, (key, batch_mode))
    head, stat, rounds = [], [], {}
    for state in executor.states:
        hb, sb = state.extra["halves"]
        head.append(_rows_of(state, hb))
        stat.append(_rows_of(state, sb))
        r = user_rounds(state.local, key, n_rounds)
        rounds.update(zip(state.s0.users.tolist(), r.tolist()))
    return (set(np.concatenate(head).tolist()), set(np.concatenate(stat).tolist()), rounds)


def _canary_last(X, y, groups):
    """Reorder so the user with the largest id holds the last rows (shared prefix with D')."""
    user = groups.max()
    order = np.r_[np.flatnonzero(groups != user), np.flatnonzero(groups == user)]
    return X[order], y[order], groups[order], user


def _test_mse(est, info):
    """Test MSE of the personalized predictions on the held-out rows of ``info``."""
    pred = est.predict(info.X_test, groups=info.groups_test)
    return float(np.mean((pred - info.y_test) ** 2))
