"""AdaptiveWeightMF at a budget the plan predicts useless (issue 20, item 2).

With 300 users at epsilon = 0.1 the count noise of the bounds' searches is
larger than half the number of users: every noisy bisection turns at random and
the released ``mean_`` was seen at 3e3 .. 4e6 on MovieLens. The public
useless-fit rule (the linear models' rule) replaces the plan by its fallback
(local-only): each known user predicts its own mean, a new user the users'
median mean rating (one exponential-mechanism release) or, below
``epsilon * n_users`` of about 76, the prior 0; a warning computed from
n_users, epsilon, delta and the plan says so.
"""

import warnings

import numpy as np
import pytest

import skdpp
from skdpp.exceptions import UselessFitWarning


def _ratings(seed=0, n_users=300, shift=0.0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(5, 40, n_users)
    g = np.repeat(np.arange(n_users), counts)
    rank = np.arange(g.size) - np.repeat(np.cumsum(counts) - counts, counts)
    items = ((rank + 7 * g) % 200)[:, None]  # no duplicate (user, item) pairs
    y = np.clip(np.round(2 * rng.normal(3.5 + rng.normal(0, 0.5, n_users)[g], 0.9)) / 2,
                0.5, 5.0) + shift
    return items, y, g


def _fit(epsilon, seed=0, **data):
    items, y, g = _ratings(**data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = skdpp.AdaptiveWeightMF(epsilon=epsilon, random_state=seed).fit(items, y, groups=g)
    return est, [w for w in caught if issubclass(w.category, UselessFitWarning)], (items, y, g)


def test_useless_budget_predicts_own_means_and_the_prior():
    est, caught, (items, y, g) = _fit(0.1)
    assert est.local_only_ and len(caught) == 1
    assert "300 users" in str(caught[0].message)
    own = np.bincount(g, y) / np.bincount(g)
    np.testing.assert_allclose(est.predict(items, groups=g), own[g])
    np.testing.assert_array_equal(est.predict(items, groups=np.full(g.size, -1)), 0.0)
    assert any("Predicted useless" in note for note in est.privacy_report_.notes)
    # personalize: a new user's part is its own mean too
    est.personalize(items[:7], y[:7] + 1.0, groups=np.full(7, 10_000))
    np.testing.assert_allclose(est.predict(items[:1], groups=[10_000]), y[:7].mean() + 1.0)


def test_useless_budget_with_enough_users_for_the_median():
    est, caught, (items, y, g) = _fit(0.3)
    assert est.local_only_ and len(caught) == 1 and "median" in str(caught[0].message)
    means = np.bincount(g, y) / np.bincount(g)
    cold = est.predict(items, groups=np.full(g.size, -1))
    assert np.all(cold == est.mean_) and means.min() <= est.mean_ <= means.max()
    assert [p.name for p in est.privacy_report_.phases] == ["cold_start"]


def test_useless_rule_is_data_independent():
    """Same warning text and local_only_ whatever the ratings (public rule)."""
    a = _fit(0.1)
    b = _fit(0.1, seed=3, shift=1e6)
    assert str(a[1][0].message) == str(b[1][0].message)
    assert a[0].local_only_ == b[0].local_only_


def test_enough_budget_is_not_local_only():
    est, caught, (items, y, g) = _fit(4.0)
    assert not est.local_only_ and not caught
    pred = est.predict(items, groups=np.full(g.size, -1))
    assert np.all((pred > 1.0) & (pred < 6.0))


@pytest.mark.parametrize("seed", range(4))
def test_useless_budget_never_predicts_garbage(seed):
    est, _, (items, y, g) = _fit(0.1, seed=seed)
    both = np.concatenate([est.predict(items, groups=g),
                           est.predict(items, groups=np.full(g.size, -1))])
    assert both.min() >= 0.0 and both.max() <= 5.0


def test_broken_rule_gives_garbage(monkeypatch):
    """Broken variant: without the rule the same fits predict far outside [0.5, 5]."""
    import skdpp.decomposition._algorithms.adaptive_mf as mod

    monkeypatch.setattr(mod, "fallback_plan", lambda plan, *a, **k: plan)
    worst = 0.0
    for seed in range(4):
        est, _, (items, y, g) = _fit(0.1, seed=seed)
        assert not est.local_only_
        cold = est.predict(items, groups=np.full(g.size, -1))
        worst = max(worst, float(np.abs(cold).max()))
    assert worst > 50.0, worst
