"""The real-data defaults of the linear regressors (issue 11).

``PrivateFedRepRegressor``, ``PrivAltMinRegressor`` and ``PPSGDRegressor`` with
only ``epsilon`` set: scale-free (private) bounds, per-user intercepts with a DP
cold-start intercept, personal parts on all rows shrunk towards the released
cold-start part. Each new release (phase ``"clip"``: the private quantiles of
the ``"auto"`` bounds and the searches of the cold-start intercept; phase
``"cold_start"``: the intercept's clipped mean) is checked under the harness's
adversarial neighbours, with a broken variant shown to be caught.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp import PPSGDRegressor, PrivAltMinRegressor, PrivateFedRepRegressor
from skdpp.linear_model import _auto
from skdpp.linear_model._algorithms import representation as rep
from skdpp.privacy import _quantile
from skdpp.privacy._quantile import cumulative_counts
from tests.linear_model._reference import _canary_last
from tests.privacy.harness import adversarial_neighbours, assert_sensitivity

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

ESTIMATORS = [PrivateFedRepRegressor, PrivAltMinRegressor, PPSGDRegressor]


def _ratings_like(n_users=300, m=10, seed=0):
    """Genre-like 0/1 features, a year column, per-user levels: raw-data-like."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), m)
    X = np.c_[rng.random((n_users * m, 3)) < 0.3, rng.normal(1990, 10, n_users * m)]
    w = np.array([0.5, -0.3, 0.2, 0.02])
    levels = 3 + 0.5 * rng.standard_normal(n_users)
    y = levels[groups] + (X - [0, 0, 0, 1990]) @ w + 0.5 * rng.standard_normal(len(groups))
    test = rng.random(len(groups)) < 0.2
    return X, y, groups, test


def _relative_error(cls, X, y, groups, test, **params):
    est = cls(random_state=0, **params).fit(X[~test], y[~test], groups=groups[~test])
    pred = est.predict(X[test], groups=groups[test])
    return float(np.sqrt(np.mean((pred - y[test]) ** 2)) / np.std(y[test]))


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_defaults_are_scale_free(cls):
    """Ratings times 20, features times 1000, the year shifted by 10^4: the relative
    error barely moves (measured: within 4 % of the raw data's at epsilon = 4), and
    every fit beats predicting each user's training mean."""
    X, y, groups, test = _ratings_like()
    raw = _relative_error(cls, X, y, groups, test, epsilon=4.0)
    for name, (Xv, yv) in {"y*20": (X, 20 * y), "X*1000": (1000 * X, y),
                           "year+1e4": (X + [0, 0, 0, 1e4], y)}.items():
        assert_allclose(_relative_error(cls, Xv, yv, groups, test, epsilon=4.0), raw,
                        rtol=0.1, err_msg=name)
    means = {u: y[~test & (groups == u)].mean() for u in np.unique(groups)}
    baseline = np.sqrt(np.mean((np.array([means[u] for u in groups[test]]) - y[test]) ** 2))
    assert raw < baseline / np.std(y[test])


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_auto_bounds_are_released_attributes(cls):
    X, y, groups, test = _ratings_like(n_users=100)
    est = cls(epsilon=2.0, random_state=0).fit(X, y, groups=groups)
    report = est.privacy_report_
    phases = {p.name: p for p in report.phases}
    assert "clip" in phases and "cold_start" in phases
    assert_allclose(phases["clip"].sensitivity, 1.0)
    for name in ("clip_norm_", "intercept_clip_"):
        assert name in report.released
        assert np.isfinite(getattr(est, name)) and getattr(est, name) > 0
    # a user-given bound is used as is: nothing to release, no 'clip' phase for it
    given = cls(epsilon=2.0, random_state=0, clip_norm=1.0).fit(X, y, groups=groups)
    assert given.clip_norm_ == 1.0
    assert given.privacy_report_.phases[0].count < phases["clip"].count


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_row_permutation_gives_identical_fit(cls):
    X, y, groups, _ = _ratings_like(n_users=60, m=6)
    keep = np.random.default_rng(3).random(len(y)) < 0.8  # uneven users
    X, y, groups = X[keep], y[keep], groups[keep]
    p = np.random.default_rng(1).permutation(len(y))
    a = cls(epsilon=1.0, random_state=0).fit(X, y, groups=groups)
    b = cls(epsilon=1.0, random_state=0).fit(X[p], y[p], groups=groups[p])
    names = [n for n in vars(a) if n.endswith("_") and not n.startswith("_")
             and n not in ("privacy_report_", "n_features_in_")]
    assert "intercept_clip_" in names and "clip_norm_" in names
    for name in names:
        assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# --------------------------------------------------------------------------- #
# The new releases under adversarial neighbours, and broken variants caught
# --------------------------------------------------------------------------- #
def _small(seed=0):
    X, y, groups, _ = _ratings_like(n_users=15, m=6, seed=seed)
    return _canary_last(X, y, groups)


def _fit_on(cls, **params):
    def fit_on(X, y, g):
        return cls(epsilon=1.0, random_state=0, **params).fit(X, y, groups=g)
    return fit_on


def _iterations(cls):
    return dict(max_iter=2) if cls is not PPSGDRegressor else dict(n_rounds=4)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_new_releases_within_their_sensitivity(cls):
    """Every release of a default fit -- the 'clip' searches, the iterations, the
    cold-start head and intercept -- moves by at most its stated sensitivity."""
    X, y, groups, user = _small()
    fit_on = _fit_on(cls, **_iterations(cls))
    kinds = [p.name for p in fit_on(X, y, groups).privacy_report_.phases]
    assert {"clip", "cold_start"} <= set(kinds)
    for name, X2, y2, g2 in adversarial_neighbours(X, y, groups, user):
        assert len(assert_sensitivity(fit_on, (X, y, groups), (X2, y2, g2))) > 0, name


def _caught(fit_on, X, y, groups, user):
    """Whether some adversarial neighbour breaks a stated sensitivity."""
    for _, X2, y2, g2 in adversarial_neighbours(X, y, groups, user):
        try:
            assert_sensitivity(fit_on, (X, y, groups), (X2, y2, g2))
        except AssertionError as exc:
            if "more than its stated sensitivity" in str(exc):
                return True
            raise
    return False


def _counts_per_row(monkeypatch):
    """'auto' bounds from a cumulative histogram of ROWS (a user counted once per row)."""
    calls = []

    def per_row(block, state, config):
        statistic, broadcast, grid = config
        values, state = statistic(block, state, broadcast)
        calls.append(1)
        with np.errstate(invalid="ignore", over="ignore"):
            return cumulative_counts(np.repeat(np.abs(values), block.counts), grid), state

    monkeypatch.setattr(_auto, "_statistic_counts", per_row)
    return calls


def _unclipped_intercept(monkeypatch):
    """The cold-start intercept's mean of the users' offsets, not clipped to the radius."""
    calls = []

    def unclipped(values, center, radius):
        calls.append(1)
        values = np.asarray(values, dtype=np.float64)
        with np.errstate(all="ignore"):
            dev = np.where(np.isfinite(values), values - center, 0.0)
        return np.array([np.nan_to_num(dev).sum()])

    monkeypatch.setattr(_quantile, "clipped_deviation_sum", unclipped)
    return calls


def _unclipped_cold_head(monkeypatch):
    """The cold-start head summed from the users' unclipped heads."""
    calls = []

    def unclipped(block, state, clip):
        calls.append(1)
        return state.stats.raw_heads.sum(axis=0), state

    monkeypatch.setattr(rep, "_clipped_heads", unclipped)
    return calls


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("breaker", [_counts_per_row, _unclipped_intercept,
                                     _unclipped_cold_head])
def test_sensitivity_test_catches_broken_new_releases(monkeypatch, cls, breaker):
    if breaker is _unclipped_cold_head and cls is PPSGDRegressor:
        pytest.skip("PPSGD's cold start is the global model: no head release")
    X, y, groups, user = _small()
    fit_on = _fit_on(cls, **_iterations(cls))
    assert not _caught(fit_on, X, y, groups, user)  # the correct fit passes
    calls = breaker(monkeypatch)
    assert _caught(fit_on, X, y, groups, user)
    assert calls  # the fit called the broken function


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_auto_clip_share_is_a_public_rule(cls):
    """clip_share="auto": the smallest candidate share whose count noise is at most
    n_users / 8 -- a function of (epsilon, delta, the plan, n_users) only; the
    noisy binary searches of 300 users at epsilon = 1 would otherwise be noise."""
    from skdpp.linear_model._auto import AUTO_CLIP_NOISE, AUTO_CLIP_SHARES

    def clip_phase(n_users, epsilon):
        est = cls(epsilon=epsilon)
        plan = est._budget_plan({"n_users": n_users, "n_features": 4}).calibrate()
        share = {p.name: p.share for p in plan.phases}["clip"]
        return share, plan["clip"]

    share, z = clip_phase(20_000, 1.0)
    assert share == AUTO_CLIP_SHARES[0] and z <= AUTO_CLIP_NOISE * 20_000
    shares = [clip_phase(n, 1.0)[0] for n in (20_000, 3_000, 1_000, 300, 30)]
    assert shares == sorted(shares) and shares[-1] == AUTO_CLIP_SHARES[-1]
    share, z = clip_phase(300, 4.0)
    assert z <= AUTO_CLIP_NOISE * 300 or share == AUTO_CLIP_SHARES[-1]
    # a given share is used as is, and the fit's report shows the share used
    assert clip_phase(300, 1.0)[0] > 0.05
    given = {"budget_shares": {"clip": 0.05}}
    assert cls(epsilon=1.0, **given)._budget_plan(
        {"n_users": 300, "n_features": 4}).calibrate().phases[0].share == 0.05
