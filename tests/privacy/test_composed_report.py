"""One report for a whole fitted Pipeline / search, and one budget for a Pipeline."""

import math
import pickle

import numpy as np
import pytest
import sklearn
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import FeatureUnion, Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from skdpp import JLMarginClassifier, PPSGDRegressor
from skdpp.model_selection import PerUserKFold
from skdpp.privacy import PrivacyAccountant, privacy_report, split_budget
from skdpp.privacy import _composed

from ._toy_transformer import ToyPrivateCenterer

DELTA = 1e-6

pytestmark = [pytest.mark.filterwarnings("ignore::skdpp.exceptions.UselessFitWarning"),
              pytest.mark.usefixtures("full_plan")]  # the full plan (conftest.py)


@pytest.fixture(autouse=True)
def _routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def _data(n_users=80, rows=6, d=3, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(n_users * rows, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n_users)[groups]
    return X, y, groups


def _ppsgd(**kw):
    return PPSGDRegressor(n_rounds=5, batch_size=8, random_state=0, **kw)


def _exact(reports, delta=DELTA):
    """The oracle: every release of every fit re-added to one fresh accountant."""
    acc = PrivacyAccountant()
    for report, count in reports:
        for e in report.ledger:
            acc.compose(e.event, e.count * count, phase=e.phase)
    return acc.get_epsilon(delta)


def _check_exact(report, reports):
    assert report.epsilon_spent == pytest.approx(_exact(reports), rel=1e-9)


def test_pipeline_composes_every_step_exactly():
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(epsilon=1.0, random_state=0),
                         _ppsgd(epsilon=2.0)).fit(X, y, groups=g)
    report = privacy_report(pipe)
    steps = [pipe[0].privacy_report_, pipe[1].privacy_report_]
    _check_exact(report, [(r, 1) for r in steps])
    assert report.covered and report.is_private
    assert [s.status for s in report.steps] == ["covered", "covered"]
    # exact composition is below the sum of the epsilons and above each one
    assert max(r.epsilon_spent for r in steps) < report.epsilon_spent < 3.0 - 0.1
    # broken variants are caught by the same check: summing, forgetting a step
    broken_sum = sum(r.epsilon_spent for r in steps)
    with pytest.raises(AssertionError):
        assert broken_sum == pytest.approx(_exact([(r, 1) for r in steps]), rel=1e-9)


def test_forgetting_a_step_is_caught(monkeypatch):
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(epsilon=1.0, random_state=0),
                         _ppsgd(epsilon=2.0)).fit(X, y, groups=g)
    steps = [(pipe[0].privacy_report_, 1), (pipe[1].privacy_report_, 1)]
    original = _composed._walk

    def forgetful(obj, name, out):  # the broken variant: skips the first step
        original(obj, name, out)
        if not name:
            del out[0]

    monkeypatch.setattr(_composed, "_walk", forgetful)
    with pytest.raises(AssertionError):
        _check_exact(privacy_report(pipe), steps)


def test_non_private_step_is_not_covered_everywhere():
    X, y, g = _data()
    pipe = make_pipeline(StandardScaler(), FunctionTransformer(), _ppsgd()).fit(X, y, groups=g)
    report = privacy_report(pipe)
    assert not report.covered and not report.is_private
    assert report.not_covered == ("standardscaler (StandardScaler)",)
    assert [s.status for s in report.steps] == ["NOT COVERED", "stateless", "covered"]
    assert "NOT COVERED" in str(report) and "standardscaler" in str(report)
    assert "NOT COVERED" in report._repr_html_()
    d = report.to_dict()
    assert d["covered"] is False and d["not_covered"] == ["standardscaler (StandardScaler)"]
    assert "ledger" not in d
    # the private part is still composed exactly
    _check_exact(report, [(pipe[-1].privacy_report_, 1)])


def test_column_transformer_and_feature_union():
    X, y, g = _data(d=4)
    ct = ColumnTransformer([("a", ToyPrivateCenterer(epsilon=0.5, random_state=1), [0, 1]),
                            ("b", ToyPrivateCenterer(epsilon=0.7, random_state=2), [2]),
                            ("c", "drop", [3])])
    union = FeatureUnion([("u", ToyPrivateCenterer(epsilon=0.3, random_state=3)),
                          ("id", FunctionTransformer())])
    pipe = Pipeline([("ct", ct), ("union", union), ("est", _ppsgd(epsilon=1.0))])
    pipe.fit(X, y, groups=g)
    report = privacy_report(pipe)
    names = [s.name for s in report.steps]
    assert names == ["ct__a", "ct__b", "ct__c", "union__u", "union__id", "est"]
    fitted = [pipe["ct"].named_transformers_["a"], pipe["ct"].named_transformers_["b"],
              pipe["union"].transformer_list[0][1], pipe["est"]]
    _check_exact(report, [(f.privacy_report_, 1) for f in fitted])
    assert report.covered
    assert report.n_users == 80


def test_bare_estimator_matches_its_own_report():
    X, y, g = _data()
    est = _ppsgd(epsilon=1.5).fit(X, y, groups=g)
    report = privacy_report(est)
    assert report.epsilon_spent == pytest.approx(est.privacy_report_.epsilon_spent, rel=1e-9)
    assert report.covered


def test_grid_search_composes_every_fit_and_the_refit():
    X, y, g = _data()
    grid = {"epsilon": [0.5, 1.0], "learning_rate": [0.05, 0.1]}
    search = GridSearchCV(_ppsgd(), grid, cv=PerUserKFold(n_splits=3)).fit(X, y, groups=g)
    report = privacy_report(search)
    # the oracle: every candidate fitted on a training fold (all users: PerUserKFold),
    # three times, plus the refit
    train, _ = next(PerUserKFold(n_splits=3).split(X, y, g))
    fold_reports = [(_ppsgd(**p).fit(X[train], y[train], groups=g[train]).privacy_report_, 3)
                    for p in search.cv_results_["params"]]
    _check_exact(report, fold_reports + [(search.best_estimator_.privacy_report_, 1)])
    step = report.steps[0]
    assert step.n_fits == 4 * 3 + 1 and "re-planned" in step.how
    assert not report.covered
    assert any("selection" in n for n in report.not_covered)
    # the old answer (the refit alone) is far below
    assert report.epsilon_spent > 3 * search.best_estimator_.privacy_report_.epsilon_spent
    # broken variant: forgetting the refit is caught
    with pytest.raises(AssertionError):
        _check_exact(report, fold_reports)


def test_grid_search_over_a_pipeline():
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(epsilon=0.5, random_state=0), _ppsgd())
    search = GridSearchCV(pipe, {"ppsgdregressor__epsilon": [0.5, 1.0]},
                          cv=PerUserKFold(n_splits=2)).fit(X, y, groups=g)
    report = privacy_report(search)
    cent = [s for s in report.steps if s.name.endswith("toyprivatecenterer")][0]
    assert cent.n_fits == 2 * 2 + 1 and cent.status == "covered"
    train, _ = next(PerUserKFold(n_splits=2).split(X, y, g))
    oracle = []
    for p in search.cv_results_["params"]:
        fold = pipe.set_params(**p).fit(X[train], y[train], groups=g[train])
        oracle += [(fold[0].privacy_report_, 2), (fold[1].privacy_report_, 2)]
    best = search.best_estimator_
    oracle += [(best[0].privacy_report_, 1), (best[1].privacy_report_, 1)]
    _check_exact(report, oracle)


def test_split_budget_meets_the_target_exactly():
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(random_state=0), _ppsgd())
    split = split_budget(pipe, epsilon=3.0, delta=DELTA,
                         shares={"toyprivatecenterer": 1, "ppsgdregressor": 4})
    assert pipe[0].epsilon == 1.0  # the input is not modified
    e0, e1 = split[0].epsilon, split[1].epsilon
    assert e1 / e0 == pytest.approx(4.0, rel=1e-12)
    split.fit(X, y, groups=g)
    spent = privacy_report(split).epsilon_spent
    assert spent <= 3.0 * (1 + 1e-9) and spent == pytest.approx(3.0, rel=1e-6)
    # broken variant: dividing epsilon by the shares wastes budget (caught)
    naive = pipe.set_params(toyprivatecenterer__epsilon=0.6, ppsgdregressor__epsilon=2.4)
    naive.fit(X, y, groups=g)
    assert privacy_report(naive).epsilon_spent < 0.95 * 3.0


def test_split_budget_errors_and_inf():
    with pytest.raises(ValueError, match="no private step"):
        split_budget(make_pipeline(StandardScaler()), epsilon=1.0)
    pipe = make_pipeline(ToyPrivateCenterer(), _ppsgd())
    with pytest.raises(ValueError, match="no share"):
        split_budget(pipe, epsilon=1.0, shares={"ppsgdregressor": 1})
    with pytest.raises(ValueError, match="names 0 private step"):
        split_budget(pipe, epsilon=1.0, shares={"scaler": 1, "ppsgdregressor": 1})
    out = split_budget(pipe, epsilon=np.inf)
    assert out[0].epsilon == out[1].epsilon == np.inf
    with pytest.raises(ValueError, match="n_users"):
        split_budget(make_pipeline(ToyPrivateCenterer(), JLMarginClassifier()), epsilon=1.0)


def test_split_budget_with_a_non_gaussian_plan():
    pipe = make_pipeline(ToyPrivateCenterer(), JLMarginClassifier(n_components=2))
    split = split_budget(pipe, epsilon=2.0, n_users=500, n_features=3)
    rows = []
    for name, leaf in _composed._private_leaves(split):
        rows += _composed._step_rows(leaf, leaf.epsilon, leaf.delta,
                                     {"n_users": 500, "n_features": 3}, name)
    assert _composed._compose(rows).get_epsilon(DELTA) == pytest.approx(2.0, rel=1e-6)


def test_report_pickles_and_keeps_the_ledger_out_of_to_dict():
    X, y, g = _data()
    pipe = make_pipeline(ToyPrivateCenterer(random_state=0), _ppsgd()).fit(X, y, groups=g)
    report = privacy_report(pipe)
    again = pickle.loads(pickle.dumps(report))
    assert again.epsilon_spent == report.epsilon_spent and len(again.ledger) > 1
    assert math.isfinite(report.epsilon_spent)
