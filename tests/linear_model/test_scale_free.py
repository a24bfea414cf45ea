"""Per-feature scales, label range, variance floor and the useless-fit rule (issue 20)."""

import numpy as np
import pytest

from skdpp.exceptions import UselessFitWarning
from skdpp.linear_model import PPSGDRegressor, PrivAltMinRegressor, PrivateFedRepRegressor
from skdpp.linear_model import _auto
from skdpp.linear_model._auto import (USELESS_CLIP_NOISE, clamp_predictions,
                                      shrinkage_penalty, useless_fit_message)
from tests.privacy.harness import adversarial_neighbours, assert_sensitivity


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
    with pytest.warns(UselessFitWarning, match="noise std"):
        PrivateFedRepRegressor(epsilon=0.1, random_state=0).fit(X, y, groups=g)
    y2 = y.copy()
    y2[g == 0] = 1e6  # a neighbouring dataset: the same warning (public rule)
    with pytest.warns(UselessFitWarning, match="noise std"):
        PrivateFedRepRegressor(epsilon=0.1, random_state=0).fit(X, y2, groups=g)


def test_clamp():
    assert clamp_predictions(np.array([-5.0, 2.0, 9.0]), (0.0, 5.0)).tolist() == [0, 2, 5]


@pytest.mark.parametrize("cls", [PrivateFedRepRegressor, PrivAltMinRegressor, PPSGDRegressor])
def test_raw_timestamp_column_is_harmless_when_scaling(cls, monkeypatch):
    monkeypatch.setattr(_auto, "SCALE_FEATURES", True)
    X, y, g, ts, test = _data()
    tr = ~test

    def rmse(A):
        est = cls(epsilon=np.inf, random_state=0)
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


# ----------------------------------------------------------------- privacy
def _small(n_users=30, m=5, d=3, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), m)
    X = rng.normal(size=(g.size, d))
    X[:, -1] = X[:, -1] * 1e7 + 1.5e9  # a raw timestamp-like column
    y = X[:, 0] + rng.normal(size=g.size) + 3.0
    return X, y, g, n_users - 1


def _fit_on(cls, **kw):
    def fit(X, y, groups):
        return cls(epsilon=50.0, random_state=0, **kw).fit(X, y, groups=groups)
    return fit


ESTIMATORS = [PrivateFedRepRegressor, PrivAltMinRegressor, PPSGDRegressor]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_scaling_releases_are_charged_and_bounded(cls, monkeypatch):
    monkeypatch.setattr(_auto, "SCALE_FEATURES", True)
    X, y, g, user = _small()
    fit_on = _fit_on(cls, **({"n_rounds": 5} if cls is PPSGDRegressor else {"max_iter": 2}))
    est = fit_on(X, y, g)
    assert est.feature_scales_ is not None  # the public gate is open at this budget
    for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user):
        assert_sensitivity(fit_on, (X, y, g), (X2, y2, g2))


def test_broken_feature_scale_counts_rows_not_users(monkeypatch):
    """A per-feature count over rows (not users) is caught by the sensitivity check."""
    monkeypatch.setattr(_auto, "SCALE_FEATURES", True)
    X, y, g, user = _small()
    fit_on = _fit_on(PrivateFedRepRegressor, max_iter=2)
    many = {n: (a, b, c) for n, a, b, c in adversarial_neighbours(X, y, g, user)}["many_rows"]
    assert_sensitivity(fit_on, (X, y, g), many)

    def by_rows(block, state, grid):
        Xb = np.asarray(block.take(block.X), dtype=np.float64)
        return np.stack([_auto.cumulative_counts(np.abs(c), grid) for c in Xb.T]), state

    monkeypatch.setattr(_auto, "_feature_range_counts", by_rows)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(fit_on, (X, y, g), many)


# ------------------------------------------------------- graceful degradation
@pytest.mark.parametrize("epsilon", [0.1, 2.0])
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_tiny_budget_degrades_to_local_fits_and_the_median(cls, epsilon):
    # 60 users at epsilon 0.1 or 2: the plan predicts a useless fit (public rule)
    X, y, g, ts, _ = _data(n_users=60, m=10)
    X = np.c_[X, ts]
    with pytest.warns(UselessFitWarning, match="noise std") as record:
        est = cls(epsilon=epsilon, random_state=0).fit(X, y, groups=g)
    assert est.local_only_ and est.label_range_ is None
    # the remedy for the prior 0 is named only where new users get it
    remedy = "subtract a public constant from y"
    assert any(remedy in str(w.message) for w in record) == (epsilon * 60 < 76)
    known = est.predict(X, groups=g)
    # each known user's own ridge fit: no worse than predicting the global mean
    assert np.sqrt(np.mean((known - y) ** 2)) < np.std(y)
    cold = est.predict(X, groups=np.full(g.size, -1))
    means = np.bincount(g, y) / np.bincount(g)
    if epsilon * 60 < 76:  # too few users even for the private median: the prior 0
        np.testing.assert_array_equal(cold, 0.0)
    else:  # the median of the users' mean labels: among them
        assert np.all((cold >= means.min()) & (cold <= means.max()))
        assert np.ptp(cold) == 0.0
    assert "Predicted useless" in str(est.privacy_report_)


def test_rows_as_users_hit_the_grid_edge_and_fall_back():
    # groups=None: every row its own user -- centred contributions are all 0
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=(4000, 3)), rng.uniform(1e9, 1.6e9, 4000)]
    y = X[:, 0] + rng.normal(size=4000) + 3.0
    est = PPSGDRegressor(epsilon=4.0, random_state=0).fit(X, y)
    assert not est.local_only_
    assert np.all(np.isinf(est.feature_scales_))  # no within-user information
    pred = est.predict(X)
    lo, hi = est.label_range_
    assert np.all((pred >= lo) & (pred <= hi))
    assert abs(np.mean(pred) - np.mean(y)) < 0.5
    report = str(est.privacy_report_)
    assert "lower edge of the public grid" in report


def test_broken_label_range_counts_rows_not_users(monkeypatch):
    """Counting the labels of every row (not each user's min/max) is caught."""
    monkeypatch.setattr(_auto, "SCALE_FEATURES", True)
    X, y, g, user = _small()
    fit_on = _fit_on(PPSGDRegressor, n_rounds=5)
    many = {n: (a, b, c) for n, a, b, c in adversarial_neighbours(X, y, g, user)}["many_rows"]
    assert_sensitivity(fit_on, (X, y, g), many)

    def by_rows(block, state, grid):
        yb = np.asarray(block.take(block.y), dtype=np.float64)
        c = _auto.cumulative_counts(yb, grid)
        return np.stack([c, c]), state

    monkeypatch.setattr(_auto, "_label_extreme_counts", by_rows)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(fit_on, (X, y, g), many)


def test_scaling_gate_is_public():
    # the gate and the plan depend on (n_users, n_features, epsilon, delta) only
    X, y, g, user = _small(n_users=30)
    a = PPSGDRegressor(epsilon=50.0, random_state=0).fit(X, y, groups=g)
    y2 = y.copy()
    y2[g == user] *= 1e6
    b = PPSGDRegressor(epsilon=50.0, random_state=0).fit(X, y2, groups=g)
    assert (a.feature_scales_ is None) == (b.feature_scales_ is None)
    pa = {p.name: p.count for p in a.privacy_report_.phases}
    pb = {p.name: p.count for p in b.privacy_report_.phases}
    assert pa == pb
    shut = PPSGDRegressor(epsilon=16.0, random_state=0).fit(X, y, groups=g)
    assert not shut.local_only_
    assert shut.feature_scales_ is None and shut.label_range_ is not None


@pytest.mark.parametrize("per_column", [True, False])
def test_ppsgd_personal_offsets_survive_an_unscaled_timestamp(per_column, monkeypatch):
    """Without per-feature scales (switched off here; the gate shuts them at small
    budgets) a raw timestamp column must not shrink PPSGD's other personal offsets to 0:
    the refit's relative ridge is per column (``_heads._relative_ridge``). Broken
    variant: the trace-based ridge on raw features (offsets 300x smaller)."""
    from skdpp.linear_model import _heads

    monkeypatch.setattr(_auto, "SCALE_FEATURES", False)
    if not per_column:
        ridge = _heads._relative_ridge
        monkeypatch.setattr(_heads, "_relative_ridge",
                            lambda A, counts, per_column=False: ridge(A, counts))
    X, y, g, ts, test = _data(n_users=200)
    norms = []
    for Xv in (X, np.column_stack([X, ts])):
        est = PPSGDRegressor(epsilon=np.inf, random_state=0).fit(Xv, y, groups=g)
        norms.append(np.median(np.linalg.norm(est.offsets_[:, :X.shape[1]], axis=1)))
    if per_column:
        assert norms[1] >= 0.5 * norms[0], norms
    else:
        assert norms[1] < 0.1 * norms[0], norms
