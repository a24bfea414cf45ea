"""PrivateRandomizedSearchCV over a Pipeline of private steps."""

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from skdpp import PPSGDRegressor
from skdpp.model_selection import PrivateRandomizedSearchCV
from skdpp.privacy._tuning import report_rho

from ..privacy._toy_transformer import ToyPrivateCenterer

pytestmark = [pytest.mark.filterwarnings("ignore::skdpp.exceptions.UselessFitWarning"),
              pytest.mark.usefixtures("full_plan")]  # the full plan (conftest.py)


def _data(n_users=150, rows=6, d=3):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(n_users * rows, d)) + 3.0
    y = X @ rng.normal(size=d) + rng.normal(size=n_users)[groups]
    return X, y, groups


def _search(pipe, **kw):
    return PrivateRandomizedSearchCV(
        pipe, {"ppsgdregressor__learning_rate": [0.05, 0.1]}, epsilon=2.0, n_iter=2,
        score_clip=10.0, random_state=0, **kw)


def test_search_over_a_private_pipeline_covers_preprocessing():
    X, y, g = _data()
    pipe = make_pipeline(FunctionTransformer(), ToyPrivateCenterer(),
                         PPSGDRegressor(n_rounds=5, batch_size=8))
    search = _search(pipe, step_shares={"toyprivatecenterer": 1, "ppsgdregressor": 3})
    search.fit(X, y, groups=g)
    best = search.best_estimator_
    chosen = search.privacy_report_.chosen_trial
    assert chosen.covered and [s.status for s in chosen.steps] == [
        "stateless", "covered", "covered"]
    # the per-trial fit budget is split 1:3 in zCDP and spent exactly
    rho_c = report_rho(best[1].privacy_report_)
    rho_f = report_rho(best[2].privacy_report_)
    assert rho_f / rho_c == pytest.approx(3.0, rel=1e-6)
    rho_fit = (1 - search.score_share) * search.privacy_report_.trial_rho
    assert rho_c + rho_f == pytest.approx(rho_fit, rel=1e-6)
    assert rho_c + rho_f <= rho_fit * (1 + 1e-9)
    assert search.privacy_report_.epsilon_spent <= 2.0 * (1 + 1e-9)
    # no seed left in any step; predict and personalize route groups to the final step
    assert all(s.random_state is None for s in (best[1], best[2]))
    assert search.predict(X[:6], groups=g[:6]).shape == (6,)
    search.personalize(X[:6], y[:6], np.full(6, 10_000))
    assert 10_000 in best[-1].user_ids_


def test_broken_split_is_caught(monkeypatch):
    """A trial that gives every step the whole budget is refused by the per-step check."""
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(), PPSGDRegressor(n_rounds=5, batch_size=8))
    from skdpp.model_selection import _search as mod

    monkeypatch.setattr(mod, "_normalised_shares",
                        lambda names, shares: {n: 1.0 for n in names})
    with pytest.raises(Exception, match="per-trial budget"):
        _search(pipe).fit(X, y, groups=g)


def test_non_private_step_is_refused_with_the_remedy():
    X, y, g = _data()
    pipe = make_pipeline(StandardScaler(), PPSGDRegressor(n_rounds=5))
    with pytest.raises(ValueError, match="'standardscaler'.*PrivateStandardScaler"):
        _search(pipe).fit(X, y, groups=g)
    with pytest.raises(ValueError, match="may not set 'ppsgdregressor__epsilon'"):
        PrivateRandomizedSearchCV(pipe, {"ppsgdregressor__epsilon": [1.0]}).fit(
            X, y, groups=g)
    with pytest.raises(ValueError, match="ending in an estimator of skdpp"):
        _search(make_pipeline(ToyPrivateCenterer(), StandardScaler())).fit(X, y, groups=g)
