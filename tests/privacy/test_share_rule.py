"""One public rule for the share of the automatic bounds (clip_share="auto"), all five estimators."""

import numpy as np
import pytest

import skdpp
from skdpp.privacy._plan import AUTO_CLIP_NOISE, AUTO_CLIP_SHARES, resolve_clip_share

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)

ESTIMATORS = {
    "fedrep": lambda clip_share="auto", **kw: skdpp.PrivateFedRepRegressor(
        n_components=2, budget_shares={"clip": clip_share}, **kw),
    "altmin": lambda clip_share="auto", **kw: skdpp.PrivAltMinRegressor(
        n_components=2, budget_shares={"clip": clip_share}, **kw),
    "ppsgd": lambda clip_share="auto", **kw: skdpp.PPSGDRegressor(
        budget_shares={"clip": clip_share}, **kw),
    "mf": lambda clip_share="auto", **kw: skdpp.AdaptiveWeightMF(
        budget_shares={"clip": clip_share}, **kw),
    "jl": lambda clip_share="auto", **kw: skdpp.JLMarginClassifier(
        budget_shares={"clip": clip_share}, **kw),
}


def _clip(name, n_users, with_count=False, **kw):
    """(share, noise multiplier[, releases]) of phase "clip" in the estimator's plan."""
    est = ESTIMATORS[name](**kw)
    plan = est._budget_plan({"n_users": n_users, "n_features": 3}).calibrate()
    if with_count:
        count = next(p.count for p in plan.phases if p.name == "clip")
        return plan.shares["clip"], plan["clip"], count
    return plan.shares["clip"], plan["clip"]


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("n_users, epsilon", [(100, 1.0), (300, 1.0), (300, 4.0),
                                              (1000, 0.5), (20_000, 1.0)])
def test_every_estimator_takes_the_smallest_share_that_meets_the_noise_target(
        name, n_users, epsilon):
    share, z, count = _clip(name, n_users, with_count=True, epsilon=epsilon)
    assert any(np.isclose(share, s) for s in AUTO_CLIP_SHARES)
    met = z <= AUTO_CLIP_NOISE * n_users
    smaller = [s for s in AUTO_CLIP_SHARES if s < share - 1e-12]
    if smaller:  # minimal: the next smaller candidate misses the target
        _, z_smaller, count_smaller = _clip(name, n_users, with_count=True,
                                            epsilon=epsilon, clip_share=smaller[-1])
        # (the linear models' public gate drops the per-feature scales at a share
        # too small for them: that plan has fewer releases and is not a candidate
        # of the rule, which prefers the scales)
        if count_smaller == count:
            assert z_smaller > AUTO_CLIP_NOISE * n_users
    if not met:  # else the largest candidate the other phases leave room for
        larger = [s for s in AUTO_CLIP_SHARES if s > share + 1e-12]
        for s in larger:
            with pytest.raises(ValueError, match="must be < 1"):
                _clip(name, n_users, epsilon=epsilon, clip_share=s)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_share_falls_with_users_and_epsilon(name):
    by_users = [_clip(name, n, epsilon=1.0)[0] for n in (100, 300, 1000, 3000, 30_000)]
    by_eps = [_clip(name, 300, epsilon=e)[0] for e in (0.25, 1.0, 4.0, 16.0)]
    assert by_users == sorted(by_users, reverse=True)
    assert by_eps == sorted(by_eps, reverse=True)
    assert by_users[-1] == AUTO_CLIP_SHARES[0]


def test_the_rule_is_public_the_same_share_for_any_data():
    # the resolved share is in the report; two data sets with the same number
    # of users (different values, rows per user) give the same share
    rng = np.random.default_rng(0)
    shares = []
    for rows, scale in ((4, 1.0), (9, 1e4)):
        g = np.repeat(np.arange(50), rows)
        X = scale * rng.normal(size=(g.size, 3))
        y = X @ [1.0, -1.0, 2.0] + rng.normal(size=g.size)
        est = skdpp.PPSGDRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=g)
        shares.append({p.name: p.share for p in est.privacy_report_.phases}["clip"])
        items = rng.integers(0, 10, size=(g.size, 1))
        mf = skdpp.AdaptiveWeightMF(epsilon=1.0, random_state=0).fit(items, y, groups=g)
        shares.append({p.name: p.share for p in mf.privacy_report_.phases}["clip"])
    assert shares[0] == shares[2] and shares[1] == shares[3]


def test_a_fixed_share_is_not_the_rule():
    # broken variant: MF's former fixed 0.3 (0.15 per bound) is not minimal
    # with many users -- the check of the first test fails for it
    n_users = 20_000
    share, _ = _clip("mf", n_users, epsilon=1.0, clip_share=0.3)
    _, z_smaller = _clip("mf", n_users, epsilon=1.0, clip_share=0.2)
    assert share == pytest.approx(0.3) and z_smaller <= AUTO_CLIP_NOISE * n_users


def test_one_rule_one_place():
    from skdpp.linear_model import _auto

    assert _auto.resolve_clip_share is resolve_clip_share
    assert resolve_clip_share(0.07, None, 10) == 0.07
