"""Loop-based, test-only references shared by the FedRep and AltMin tests.

The references take the randomness a fit used (its ``S^0`` split, batches and
rounds) from the estimators' own block functions, run on the same blocks and
key as the fit (:func:`fit_executor`), and then compute everything else with
plain loops over users and rows.
"""

import numpy as np

from skdpp.linear_model._algorithms.altmin import prepare_altmin, user_rounds
from skdpp.linear_model._algorithms.fedrep import fedrep_batches
from skdpp.linear_model._algorithms.representation import prepare_split
from skdpp.utils._executor import LocalExecutor
from skdpp.utils._grouped import UserIndex, make_blocks
from skdpp.utils._random import FitRandomness
from tests.privacy.harness import adversarial_neighbours

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
    executor.map(prepare_split, (key, False))
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


def assert_permutation_invariant(cls, params, X, y, groups, seed=1):
    """Fitting on permuted rows gives bit-identical released and personal parts."""
    p = np.random.default_rng(seed).permutation(len(y))
    a = cls(**params).fit(X, y, groups=groups)
    b = cls(**params).fit(X[p], y[p], groups=groups[p])
    for name in ("components_", "cold_start_head_", "cold_start_intercept_", "heads_",
                 "intercepts_", "user_ids_", "intercept_clip_", "clip_norm_",
                 "init_clip_norm_", "head_clip_norm_", "label_clip_", "label_scale_"):
        if hasattr(a, name):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def with_other_users(X, y, groups, relabel=3, seed=2):
    """The data with user ``relabel`` renamed 99 and a new user 50 (5 rows) added."""
    rng = np.random.default_rng(seed)
    return (np.r_[X, rng.standard_normal((5, X.shape[1]))], np.r_[y, rng.standard_normal(5)],
            np.r_[np.where(groups == relabel, 99, groups), np.full(5, 50)])


def row_contents(X, y, rows):
    """The sorted contents ``(x, y)`` of some rows (a set of records, in any order)."""
    rows = list(rows)
    return sorted(map(tuple, np.c_[X[rows], y[rows]].tolist()))


def _canary_last(X, y, groups):
    """Reorder so the user with the largest id holds the last rows (shared prefix with D')."""
    user = groups.max()
    order = np.r_[np.flatnonzero(groups != user), np.flatnonzero(groups == user)]
    return X[order], y[order], groups[order], user


def _with_canary(X, y, groups, user, Xc, yc):
    """The data set with ``user``'s rows replaced by ``(Xc, yc)``."""
    keep = groups != user
    return (np.r_[X[keep], Xc], np.r_[y[keep], yc],
            np.r_[groups[keep], np.full(len(yc), user)])


def _observable_neighbours(X, y, groups, user):
    """The harness's adversarial neighbours plus users with near-maximal values."""
    yield from adversarial_neighbours(X, y, groups, user)
    mine = groups == user
    yield ("1e300", *_with_canary(X, y, groups, user, 1e300 * X[mine], 1e300 * y[mine]))
    yield ("near_max", *_with_canary(X, y, groups, user, 1.7e308 * np.sign(X[mine]),
                                     1.7e308 * np.sign(y[mine])))
    yield ("1e160", *_with_canary(X, y, groups, user, 1e160 * np.ones((2, X.shape[1])),
                                  np.array([1e160, 3e160])))


def _test_mse(est, info):
    """Test MSE of the personalized predictions on the held-out rows of ``info``."""
    pred = est.predict(info.X_test, groups=info.groups_test)
    return float(np.mean((pred - info.y_test) ** 2))


def scaled_rows(est, X):
    """``X`` in the fitted units: divided by the released ``feature_scales_`` (if any)."""
    scales = getattr(est, "feature_scales_", None)
    X = np.asarray(X, dtype=np.float64)
    if scales is None:
        return X
    with np.errstate(divide="ignore"):
        return X * np.where(np.isfinite(scales), 1.0 / scales, 0.0)


def clamped(est, pred, codes=None):
    """Predictions after ``predict``'s post-processing: clamped to the released
    ``label_range_``; for a useless fit (``local_only_``) known users' (``codes``: each
    row's user position, -1 for new) clamped to their own label range and new users
    (all rows when ``codes`` is None) the prior 0."""
    if getattr(est, "local_only_", False):
        codes = np.full(np.shape(pred), -1) if codes is None else np.asarray(codes)
        known = codes >= 0
        own = est.own_label_ranges_[np.maximum(codes, 0)]
        return np.where(known, np.clip(pred, own[:, 0], own[:, 1]), 0.0)
    lo, hi = getattr(est, "label_range_", None) or (-np.inf, np.inf)
    return np.where(np.isfinite(pred), np.clip(pred, lo, hi), pred)
