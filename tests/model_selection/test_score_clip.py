"""score_clip="auto": a bound on the users' validation losses that fits the labels' scale."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skdpp.linear_model import JLMarginClassifier
from skdpp.model_selection import PrivateRandomizedSearchCV
from skdpp.model_selection import _search as search_module
from skdpp.privacy._tuning import RandomStopping
from tests.model_selection.test_search import ShrunkUserMean
from tests.privacy.harness import record_releases


def _ratings(n_users=400, rows=10, seed=0):
    """1-5 ratings: each user rates two values 2 apart ({1, 3} or {3, 5}).

    Predicting a user's own mean errs by about 1 on every row, predicting 3
    by 0 or 2: every user's mean squared error is at least about 1 under both,
    so a bound C = 1 clips every user of both configurations.
    """
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    low = rng.choice([1.0, 3.0], size=n_users)
    y = low[g] + 2.0 * rng.integers(0, 2, size=g.size)
    return np.zeros((g.size, 1)), y, g


SPACE = [{"shrinkage": [1.0]}, {"shrinkage": [0.0]}]  # the prior 3 / the user's mean


def _search(**kwargs):
    kwargs.setdefault("n_iter", 6)
    kwargs.setdefault("validation_size", 0.5)
    kwargs.setdefault("refit_personal", False)
    return PrivateRandomizedSearchCV(ShrunkUserMean(prior=3.0), SPACE, **kwargs)


def _scores(search):
    res = search.cv_results_
    return {p["shrinkage"]: s for p, s in zip(res["params"], res["validation_score"])}


def test_fixed_clip_cannot_tell_the_configurations_apart_auto_can():
    X, y, g = _ratings()
    fixed = _search(epsilon=np.inf, score_clip=1.0, random_state=0).fit(X, y, groups=g)
    auto = _search(epsilon=np.inf, random_state=0).fit(X, y, groups=g)
    assert set(_scores(fixed)) == set(_scores(auto)) == {0.0, 1.0}  # both tried
    # almost every user clipped under both: the exact scores differ by < 0.01
    assert abs(_scores(fixed)[0.0] - _scores(fixed)[1.0]) < 0.01
    assert 2.0 <= auto.score_clip_ <= 6.0  # about 3 x the users' variance, 1
    assert _scores(auto)[0.0] > _scores(auto)[1.0] + 0.5
    assert auto.best_params_ == {"shrinkage": 0.0}


def test_private_search_with_auto_clip_picks_the_better_configuration():
    # seeded; a miss needs every trial to sample the worse configuration
    # (probability <= 1/2 per seed for K = 1, far less otherwise) or a flip of
    # scores about 0.9 / C apart by the score noise
    X, y, g = _ratings()
    picks = [_search(epsilon=2.0, delta=1e-6, random_state=seed).fit(X, y, groups=g)
             for seed in range(8)]
    good = sum(s.best_params_ == {"shrinkage": 0.0} for s in picks)
    assert good >= 7
    # with score_clip=1.0 the same seeds pick by the noise (measured: 4 / 8)
    fixed = [_search(epsilon=2.0, delta=1e-6, score_clip=1.0, random_state=seed)
             .fit(X, y, groups=g).best_params_ == {"shrinkage": 0.0} for seed in range(8)]
    assert sum(fixed) <= 6
    assert all(1.0 <= s.score_clip_ <= 10.0 for s in picks)


def test_auto_clip_is_charged_once_with_sensitivity_one():
    X, y, g = _ratings(n_users=60, rows=6)
    search = _search(epsilon=1.0, delta=1e-6, n_iter=1, random_state=0)
    releases = record_releases(lambda: search.fit(X, y, groups=g))
    # the bound's counts, then the one trial's score (ShrunkUserMean releases nothing)
    assert [r.sensitivity for r in releases] == (
        [1.0] * search_module._CLIP_STEPS + [search.score_clip_])
    report = search.privacy_report_
    assert report.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert_allclose(report.epsilon_spent, 1.0, rtol=1e-6)
    # the bound costs score_share * rho: rho is smaller than without it
    stopping = RandomStopping("truncated_negative_binomial", 1.0, 1.0)
    assert report.trial_rho < stopping.calibrate(1.0, 1e-6)
    phase = next(p for p in report.phases if p.name == "score_clip")
    assert_allclose(phase.noise_multiplier,
                    math.sqrt(search_module._CLIP_STEPS / (2 * 0.1 * report.trial_rho)),
                    rtol=1e-12)
    assert "score_clip_" in report.released


def _statistic_counts(X, y, g, monkeypatch):
    """The counts the automatic bound releases (noise patched out)."""
    seen = []
    original = search_module.private_quantile

    def spy(release, phase, counts, grid, **kw):
        seen.append(np.array(counts))
        return original(release, phase, counts, grid, **kw)

    monkeypatch.setattr(search_module, "private_quantile", spy)
    _search(epsilon=np.inf, n_iter=1, random_state=0).fit(X, y, groups=g)
    return seen[0]


@pytest.mark.parametrize("adversary", ["huge", "many_rows", "one_row", "zeros", "nan_free"])
def test_auto_clip_counts_move_by_at_most_one(adversary, monkeypatch):
    # sensitivity under replace-one-user, noise off: every released count
    # (a cumulative count of the users' statistic) moves by at most 1
    X, y, g = _ratings(n_users=30, rows=6)
    base = _statistic_counts(X, y, g, monkeypatch)
    keep = g != 0
    rows = {"huge": (6, 1e300), "many_rows": (500, None), "one_row": (1, None),
            "zeros": (6, 0.0), "nan_free": (6, 1e-300)}[adversary]
    n, value = rows
    rng = np.random.default_rng(1)
    y_new = rng.uniform(-1e6, 1e6, size=n) if value is None else np.full(n, value)
    if adversary == "huge":
        y_new[::2] = -1e300
    X2 = np.vstack([X[keep], np.zeros((n, 1))])
    y2 = np.concatenate([y[keep], y_new])
    g2 = np.concatenate([g[keep], np.full(n, 10_000)])
    other = _statistic_counts(X2, y2, g2, monkeypatch)
    assert np.max(np.abs(other - base)) <= 1.0


def test_broken_variant_per_row_statistic_moves_counts_by_more_than_one(monkeypatch):
    # the same check on a broken statistic (one value per *row*): it fails
    X, y, g = _ratings(n_users=30, rows=6)

    def per_row(loss, y, codes, n_users):  # one value per row, not per user
        return (np.asarray(y, dtype=float) - 3.0) ** 2

    monkeypatch.setattr(search_module, "_own_mean_losses", per_row)
    base = _statistic_counts(X, y, g, monkeypatch)
    keep = g != 0
    X2 = np.vstack([X[keep], np.zeros((50, 1))])
    y2 = np.concatenate([y[keep], np.full(50, 5.0)])
    g2 = np.concatenate([g[keep], np.full(50, 10_000)])
    other = _statistic_counts(X2, y2, g2, monkeypatch)
    assert np.max(np.abs(other - base)) > 1.0


def test_zero_one_loss_bound_is_public():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(40), 6)
    X = rng.normal(size=(240, 3))
    y = (X[:, 0] > 0).astype(int)
    search = PrivateRandomizedSearchCV(
        JLMarginClassifier(classes=[0, 1], n_components=1), {"margin": [0.1]},
        epsilon=np.inf, n_iter=1, refit_personal=False, random_state=0)
    search.fit(X, y, groups=g)
    assert search.score_clip_ == 1.0
    assert "score_clip" not in [p.name for p in search.privacy_report_.phases]
    with pytest.raises(ValueError, match="score_clip='auto'.*zero-one"):
        PrivateRandomizedSearchCV(
            JLMarginClassifier(classes=[0, 1]), {"margin": [0.1]}, loss="absolute_error",
            n_iter=1).fit(X, y, groups=g)


def test_explicit_score_clip_is_used_as_is():
    X, y, g = _ratings(n_users=40, rows=6)
    search = _search(epsilon=1.0, score_clip=2.5, n_iter=1, random_state=0)
    releases = record_releases(lambda: search.fit(X, y, groups=g))
    assert search.score_clip_ == 2.5
    assert [r.sensitivity for r in releases] == [2.5]  # the score only
