"""Per-feature scales, label range, variance floor and the useless-fit rule (issue 20)."""

import numpy as np
import pytest

from skdpp.linear_model import PrivateFedRepRegressor
from skdpp.linear_model import _representation
from skdpp.linear_model._auto import (USELESS_CLIP_NOISE, clamp_predictions,
                                      shrinkage_penalty, useless_fit_message)


def _data(seed=0, n_users=300, m=16, d=4):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), m)
    X = rng.normal(size=(g.size, d))
    W = rng.normal(size=d) + 0.3 * rng.normal(size=(n_users, d))
    y = np.einsum("ij,ij->i", X, W[g]) + 0.5 * rng.normal(size=g.size) + 3.0
    session = rng.uniform(1e9, 1.6e9, n_users)[g] + rng.exponential(600, g.size)
    later = rng.random(g.size) < 0.1
    ts = session + later * rng.exponential(3e7, g.size)
    test = rng.random(g.size) < 0.2
    return X, y, g, ts, test


def test_variance_floor_penalises_near_constant_coordinates():
    p = shrinkage_penalty(10.0, 2, np.array([1.0]), np.array([1.0]),
                          np.array([[1e-12, 2.0]]), floor=0.05)
    assert p[0, 0] == pytest.approx(10.0 * 2 * 0.05)
    assert p[0, 1] == pytest.approx(10.0 * 2 * 2.0)


def test_useless_fit_rule_is_public():
    # a function of (noise multiplier, n_users) only: fires above the rule, not below
    assert useless_fit_message(USELESS_CLIP_NOISE * 300 * 1.01, 300, "E") is not None
    assert useless_fit_message(USELESS_CLIP_NOISE * 300 * 0.99, 300, "E") is None
    assert useless_fit_message(0.0, 300, "E") is None


def test_useless_fit_warns_at_tiny_budget_only():
    X, y, g, _, _ = _data(n_users=60, m=5)
    with pytest.warns(UserWarning, match="noise std"):
        PrivateFedRepRegressor(epsilon=0.1, random_state=0).fit(X, y, groups=g)
    y2 = y.copy()
    y2[g == 0] = 1e6  # a neighbouring dataset: the same warning (public rule)
    with pytest.warns(UserWarning, match="noise std"):
        PrivateFedRepRegressor(epsilon=0.1, random_state=0).fit(X, y2, groups=g)


def test_clamp():
    assert clamp_predictions(np.array([-5.0, 2.0, 9.0]), (0.0, 5.0)).tolist() == [0, 2, 5]


def test_raw_timestamp_column_is_harmless_when_scaling(monkeypatch):
    monkeypatch.setattr(_representation, "SCALE_FEATURES", True)
    X, y, g, ts, test = _data()
    tr = ~test

    def rmse(A):
        est = PrivateFedRepRegressor(epsilon=np.inf, random_state=0)
        est.fit(A[tr], y[tr], groups=g[tr])
        pred = est.predict(A[test], groups=g[test])
        lo, hi = est.label_range_
        assert np.all((pred >= lo) & (pred <= hi))
        return np.sqrt(np.mean((pred - y[test]) ** 2))

    base = rmse(X)
    assert abs(rmse(np.c_[X, ts]) - base) < 0.02
    shifted = X.copy()
    shifted[:, 0] = shifted[:, 0] * 1e-3 + 1e4
    assert abs(rmse(shifted) - base) < 0.02
