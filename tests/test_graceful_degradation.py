"""Graceful degradation with only ``epsilon`` set (issue 20), on MovieLens-like data.

A small synthetic ratings set shaped like MovieLens (300 users, multi-hot genres,
a release-year column in the thousands, the rating's raw Unix timestamp nearly
constant within each user's session, half-star ratings in [0.5, 5]), split per
user. The targets every estimator should meet (``benchmarks/bench_defaults.py``
measures the same on real MovieLens):

- no catastrophic fit: the worst test error over seeds is <= 1.5x the median;
- predictions stay in a sane range of the labels, also with a raw timestamp
  column and at a small budget;
- adding the raw timestamp column changes the test RMSE by <= 0.01 (+ slack);
- shifting / scaling one column (the year) by public constants changes the test
  RMSE by <= 0.002 (+ slack) (these two: the mean over seeds of the paired changes);
- a tiny budget (or every row its own user) degrades toward the cold-start
  prior: RMSE <= 1.1x the global-mean baseline.

Cases that fail on main before the issue-20 fixes are marked
``xfail(strict=True)``: unmark them when the fix lands (a strict xfail that
passes fails the suite, so the marks cannot go stale).
"""

import warnings
from functools import lru_cache

import numpy as np
import pytest

import skdpp
from skdpp.model_selection import per_user_train_test_split

N_USERS = 300
LABEL_LO, LABEL_HI = 0.5, 5.0
SLACK = 0.25 * (LABEL_HI - LABEL_LO)  # sane range: labels +- 25 % of their width
TOL_TIMESTAMP = 0.01 + 0.01  # target + slack
TOL_INVARIANCE = 0.002 + 0.003  # target + slack
ALL_EST = ("fedrep", "altmin", "ppsgd", "mf", "jl")


def _xfail(item, why):
    return pytest.mark.xfail(strict=True, reason=f"issue 20 item {item} (open): {why}")


X1 = _xfail(1, "at epsilon=1 with 300 users the per-feature scales are not released "
            "(their public noise gate is shut), so a raw timestamp still moves the "
            "fit: personal RMSE +0.014 FedRep, +0.037 AltMin, +0.027 PPSGD (mean over "
            "6 seeds; PPSGD was +0.12 before its refit's ridge became per column). On "
            "MovieLens (610 users, 20 seeds) all three are within 0.01")
X2 = _xfail(2, "300 users at epsilon=0.1 is the fallback fit (public useless-fit rule) with "
            "epsilon * n_users = 30, below what even one private median of the users' "
            "mean labels needs (about 76): new users get the prior 0, which is bounded "
            "but worse than 1.1x the global mean")
X2_MF = _xfail(2, "AdaptiveWeightMF at 300 users and epsilon=0.1 is the fallback fit (public "
               "useless-fit rule) with epsilon * n_users = 30, too small for one private "
               "median: known users predict their own mean, new users the prior 0, which "
               "is bounded but worse than 1.1x the global mean")
X2_JL = _xfail(2, "JL's cold start predicts the minority label at eps=0.1")
X4 = _xfail(4, "at epsilon=1 with 300 users the per-feature scales are not released "
            "(their public noise gate is shut), so the year in its own units costs "
            "FedRep and AltMin 0.02-0.03 RMSE against the year scaled by 1e-3 or "
            "standardised (mean over 6 seeds, se <= 0.008)")
# (name, variant, epsilon) of the invariance cases still open
INVARIANCE_OPEN = {(name, variant, 1.0): X4 for name in ("fedrep", "altmin")
                   for variant in ("scale", "standardised")}
#: Items 1 and 4 compare a variant with the raw features by the mean over these seeds of
#: the paired (same split, same random_state) differences: one seed's difference also
#: holds the seed-to-seed spread of the keyed S0/S1 split (row-content keys change with
#: a column's units), sd about 0.0035 at epsilon=inf.
PAIRED_SEEDS = range(6)


# --------------------------------------------------------------------------- #
# Data and fits (cached: each fit is shared by the tests that need it)
# --------------------------------------------------------------------------- #
@lru_cache(maxsize=None)
def _data(seed=0):
    rng = np.random.default_rng(1000 + seed)
    n_genres, n_movies = 8, 400
    counts = 10 + rng.poisson(np.exp(rng.normal(3.2, 0.6, N_USERS)))  # heavy-ish tail
    g = np.repeat(np.arange(N_USERS), counts)
    n = g.size
    items = rng.choice(n_movies, n, p=(p := 1.0 / np.arange(1, n_movies + 1)) / p.sum())
    G = (rng.random((n_movies, n_genres)) < 0.25).astype(float)
    year = np.clip(2018 - rng.exponential(18, n_movies), 1930, 2018).round()
    start = rng.uniform(9.5e8, 1.5e9, N_USERS)  # each user's rating session
    # nearly constant within a user: most rows in one session of minutes, a few
    # (15 %) months later -- the rows a session-fitted slope extrapolates to
    later = rng.random(n) < 0.15
    ts = (start[g] + rng.exponential(600, n) + later * rng.uniform(0, 6e7, n)).round()
    taste = rng.normal(0, 0.5, (N_USERS, n_genres))
    score = (3.5 + rng.normal(0, 0.5, N_USERS)[g] + np.einsum("ij,ij->i", G[items], taste[g])
             + rng.normal(0, 0.3, n_movies)[items] - 0.01 * (year[items] - 1990)
             + rng.normal(0, 0.7, n))
    y = np.clip(np.round(score * 2) / 2, LABEL_LO, LABEL_HI)
    Xf = np.column_stack([G[items], year[items], ts])
    parts = per_user_train_test_split(Xf, items[:, None], y, groups=g, test_size=0.2,
                                      random_state=seed)
    return parts


def _features(Xf, variant):
    genres, year, ts = Xf[:, :-2], Xf[:, -2], Xf[:, -1]
    col = {"raw": year, "timestamp": year, "shift": year + 1e4, "scale": year * 1e-3,
           "standardised": (year - 1990.0) / 20.0}[variant]
    extra = [ts[:, None]] if variant == "timestamp" else []
    return np.column_stack([genres, col[:, None]] + extra)


@lru_cache(maxsize=None)
def _fit(name, epsilon, variant="raw", seed=0, groups=True):
    """(test error, cold-start error, min prediction, max prediction)."""
    Xtr, Xte, Itr, Ite, ytr, yte, gtr, gte = _data(seed)
    g_tr, g_te = (gtr, gte) if groups else (None, None)
    unseen = np.full(yte.shape[0], -1) if groups else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "mf":
            est = skdpp.AdaptiveWeightMF(epsilon=epsilon, random_state=seed)
            est.fit(Itr, ytr, groups=g_tr)
            A, B = Itr, Ite
        else:
            A, B = _features(Xtr, variant), _features(Xte, variant)
            if name == "jl":
                est = skdpp.JLMarginClassifier(epsilon=epsilon, random_state=seed)
                est.fit(A, ytr >= 4, groups=g_tr)
                err = float(np.mean(est.predict(B, groups=g_te) != (yte >= 4)))
                cold = float(np.mean(est.predict(B, groups=unseen) != (yte >= 4)))
                return err, cold, np.nan, np.nan
            cls = {"fedrep": skdpp.PrivateFedRepRegressor,
                   "altmin": skdpp.PrivAltMinRegressor, "ppsgd": skdpp.PPSGDRegressor}[name]
            est = cls(epsilon=epsilon, random_state=seed).fit(A, ytr, groups=g_tr)
        pred, cold = est.predict(B, groups=g_te), est.predict(B, groups=unseen)
    both = np.concatenate([pred, cold])
    return (float(np.sqrt(np.mean((pred - yte) ** 2))),
            float(np.sqrt(np.mean((cold - yte) ** 2))), float(both.min()), float(both.max()))


def _global_mean_rmse(seed=0):
    _, _, _, _, ytr, yte, _, _ = _data(seed)
    return float(np.sqrt(np.mean((yte - ytr.mean()) ** 2)))


# --------------------------------------------------------------------------- #
# Tests
# --------------------------------------------------------------------------- #
def test_data_is_movielens_like():
    Xtr, Xte, _, _, ytr, _, gtr, _ = _data(0)
    assert np.unique(gtr).size == N_USERS
    assert set(np.unique(ytr)) <= set(np.arange(0.5, 5.01, 0.5))
    assert Xtr[:, -2].min() >= 1930 and Xtr[:, -1].min() > 9e8
    # the timestamp spans years across users but minutes within a user
    ts = [Xtr[gtr == u, -1] for u in range(20)]
    spread = np.array([np.median(np.abs(t - np.median(t))) for t in ts])
    assert np.median(spread) < 1e4 < np.ptp(Xtr[:, -1]) / 100


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "fedrep", "altmin", "ppsgd", "mf", "jl"])
def test_no_catastrophic_fit_over_seeds(name):
    """Item 5: 5 seeds, 300 users, ε = 1, the year shifted by 1e4; personal and
    cold-start error. (The benchmark's 200 draws on MovieLens catch the rarer
    failures: FedRep's cold start was > 1.5x its median in 16 of 200 on main.)"""
    errors = np.array([_fit(name, 1.0, "shift", seed)[:2] for seed in range(5)])
    assert np.all(np.isfinite(errors))
    assert np.all(errors.max(axis=0) <= 1.5 * np.median(errors, axis=0)), errors


def _paired_change(name, epsilon, variant):
    """Mean over :data:`PAIRED_SEEDS` of (variant - raw): (test error, cold error)."""
    return np.mean([np.subtract(_fit(name, epsilon, variant, seed)[:2],
                                _fit(name, epsilon, "raw", seed)[:2])
                    for seed in PAIRED_SEEDS], axis=0)


@pytest.mark.parametrize("name,epsilon", [
    pytest.param("fedrep", 1.0, marks=X1), ("fedrep", np.inf),
    pytest.param("altmin", 1.0, marks=X1), ("altmin", np.inf),
    pytest.param("ppsgd", 1.0, marks=X1), ("ppsgd", np.inf),
    ("jl", 1.0), ("jl", np.inf)])
def test_timestamp_column_changes_little(name, epsilon):
    """Item 1: a raw timestamp column (passthrough) changes the personal and the
    cold-start test error by <= 0.01 (+ slack), mean over seeds."""
    change = _paired_change(name, epsilon, "timestamp")
    assert np.all(np.abs(change) <= TOL_TIMESTAMP), change


@pytest.mark.parametrize("name,epsilon", [
    ("fedrep", 1.0), ("fedrep", np.inf), ("altmin", 1.0), ("altmin", np.inf),
    ("ppsgd", 1.0), ("ppsgd", np.inf)])
def test_predictions_stay_in_label_range_with_timestamp(name, epsilon):
    """Items 1-2: predictions (personal and cold-start) stay near the label range."""
    _, _, lo, hi = _fit(name, epsilon, "timestamp")
    assert LABEL_LO - SLACK <= lo and hi <= LABEL_HI + SLACK, (lo, hi)


def _inv_params():
    out = []
    for name in ("fedrep", "altmin", "ppsgd"):
        for variant in ("shift", "scale", "standardised"):
            for eps in (1.0, np.inf):
                marks = INVARIANCE_OPEN.get((name, variant, eps), ())
                out.append(pytest.param(name, variant, eps, marks=marks,
                                        id=f"{name}-{variant}-{eps:g}"))
    return out


@pytest.mark.parametrize("name,variant,epsilon", _inv_params())
def test_shift_scale_invariance(name, variant, epsilon):
    """Items 1 and 4: the year shifted by 1e4, scaled by 1e-3 or standardised by
    public constants changes the personal and the cold-start RMSE by <= 0.002
    (+ slack), mean over seeds. (JL is held to this in the benchmark only: not a
    target of item 4.)"""
    change = _paired_change(name, epsilon, variant)
    assert np.all(np.abs(change) <= TOL_INVARIANCE), change


def _tiny_params():
    marks = {"fedrep": X2, "altmin": X2, "ppsgd": X2, "mf": X2_MF, "jl": X2_JL}
    out = [pytest.param(name, 0.1, marks=mark, id=f"{name}-0.1") for name, mark in marks.items()]
    # epsilon 0.3: the fallback fit's one release (the users' median mean label)
    out += [pytest.param(name, 0.3, id=f"{name}-0.3") for name in marks if name != "jl"]
    return out


@pytest.mark.parametrize("name,epsilon", _tiny_params())
def test_tiny_budget_degrades_toward_the_prior(name, epsilon):
    """Item 2: 300 users at ε = 0.1 and 0.3: no worse than 1.1x the global mean, sane range."""
    err, cold, lo, hi = _fit(name, epsilon)
    if name == "jl":
        _, _, _, _, ytr, yte, _, _ = _data(0)
        majority = float(np.mean((yte >= 4) != (np.mean(ytr >= 4) >= 0.5)))
        assert max(err, cold) <= majority + 0.05
        return
    ref = _global_mean_rmse()
    assert max(err, cold) <= 1.1 * ref, (err, cold, ref)
    assert LABEL_LO - SLACK <= lo and hi <= LABEL_HI + SLACK, (lo, hi)


@pytest.mark.parametrize("name", ["ppsgd", "fedrep", "altmin"])
def test_no_groups_degrades_toward_the_prior(name):
    """Item 2: every row its own user (no ``groups``) at ε = 4."""
    err, cold, lo, hi = _fit(name, 4.0, groups=False)
    assert err <= 1.1 * _global_mean_rmse(), err
    assert LABEL_LO - SLACK <= lo and hi <= LABEL_HI + SLACK, (lo, hi)


def test_astray_label_range_end_is_mended():
    """Item 2: with the raw timestamp, 300 users and ε = 1, seed 1's search for the low
    end of FedRep's label range goes astray; that end is mended from released values
    (before: unclamped, and a known user was predicted -964 on the 0.5-5 scale)."""
    Xtr, Xte, _, _, ytr, _, gtr, gte = _data(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = skdpp.PrivateFedRepRegressor(epsilon=1.0, random_state=1)
        est.fit(_features(Xtr, "timestamp"), ytr, groups=gtr)
        pred = np.concatenate([est.predict(_features(Xte, "timestamp"), groups=g)
                               for g in (gte, np.full(gte.shape, -1))])
    lo, hi = est.label_range_
    assert any("went astray): that side is the other end mirrored" in note
               for note in est.privacy_report_.notes)
    assert np.isfinite(lo) and np.isfinite(hi)
    assert lo <= pred.min() and pred.max() <= hi
    assert np.sqrt(np.mean((pred[:gte.size] - _data(1)[5]) ** 2)) < 1.2


@pytest.mark.parametrize("labels,level,ok,expected", [
    ((1.0, 5.0), 3.0, True, (1.0, 5.0)),
    ((-np.inf, 5.0), 3.0, True, (-1.0, 5.0)),
    ((4.0, 5.0), 3.0, True, (-1.0, 5.0)),  # the low end above the level: astray
    ((1.0, np.inf), 3.0, True, (1.0, 7.0)),
    ((1.0, 2.0), 3.0, True, (1.0, 7.0)),
    ((-np.inf, 5.0), 3.0, False, (-np.inf, 5.0)),  # the level itself astray: no clamp
    ((4.0, 2.0), 3.0, True, (-np.inf, np.inf)),  # both ends astray: no clamp
])
def test_mended_label_range(labels, level, ok, expected):
    from skdpp.linear_model._auto import mended_label_range

    assert mended_label_range(labels, level, ok) == expected
