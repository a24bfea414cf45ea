"""export_released: only the released part, safe to pickle; skdpp.pipeline; sparse input."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

import skdpp
from skdpp import PPSGDRegressor, PrivateFedRepRegressor, export_released
from skdpp.pipeline import personalize, to_dense

from .privacy._toy_transformer import ToyPrivateCenterer

pytestmark = pytest.mark.filterwarnings("ignore::skdpp.exceptions.UselessFitWarning")


def _data(n_users=80, rows=6, d=3):
    rng = np.random.default_rng(0)
    ids = np.array([f"user_{i:05d}" for i in range(n_users)])
    groups = np.repeat(ids, rows)
    X = rng.normal(size=(n_users * rows, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n_users)[np.repeat(np.arange(n_users), rows)]
    return X, y, groups


def _leaks(blob, est, X):
    """User ids or a personal-part array in a pickle (the property under test)."""
    ids = any(uid.encode() in blob for uid in est.user_ids_[:20])
    parts = [np.ascontiguousarray(getattr(est, n)) for n in est._personal_attributes]
    arrays = any(p.size and p.tobytes()[:64] in blob for p in parts)
    return ids or arrays


@pytest.mark.parametrize("make", [
    lambda: PPSGDRegressor(n_rounds=5, random_state=0),
    lambda: PrivateFedRepRegressor(n_components=2, max_iter=2, random_state=0),
])
def test_export_has_no_ids_no_personal_parts(make):
    X, y, g = _data()
    est = make().fit(X, y, groups=g)
    assert _leaks(pickle.dumps(est), est, X)  # the fitted estimator holds both
    public = export_released(est)
    blob = pickle.dumps(public)
    assert not _leaks(blob, est, X)
    assert b"user_0" not in blob
    # broken variant: exporting vars(est) is caught by the same check
    assert _leaks(pickle.dumps(vars(est)), est, X)
    # seeds are gone; the report and the shared part are kept
    assert public.estimator.random_state is None
    assert public.privacy_report.epsilon_spent == pytest.approx(
        est.privacy_report_.epsilon_spent)
    # cold start for everyone, identical to the fitted model's cold start
    new = np.repeat(["new_user"], X.shape[0])
    restored = pickle.loads(blob)
    np.testing.assert_allclose(restored.predict(X, groups=new), est.predict(X, groups=new))
    # personalize new users from their own rows: the same personal fit as the full model
    rows = slice(0, 12)
    restored.personalize(X[rows], y[rows], np.repeat(["a", "b"], 6))
    est.personalize(X[rows], y[rows], np.repeat(["a", "b"], 6))
    ab = np.repeat(["a", "b"], 6)
    np.testing.assert_allclose(restored.predict(X[rows], groups=ab),
                               est.predict(X[rows], groups=ab), rtol=1e-10)


def test_export_pipeline_keeps_dp_preprocessing():
    X, y, g = _data()
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(ToyPrivateCenterer(random_state=0),
                             PPSGDRegressor(n_rounds=5, random_state=0)).fit(X, y, groups=g)
    public = export_released(pipe)
    np.testing.assert_array_equal(public.estimator[0].mean_, pipe[0].mean_)
    assert public.estimator[0].random_state is None
    assert not _leaks(pickle.dumps(public), pipe[-1], X)
    new = np.repeat(["x"], 5)
    expected = pipe[-1].predict(pipe[0].transform(X[:5]), groups=new)
    np.testing.assert_allclose(public.predict(X[:5], groups=new), expected)
    assert public.privacy_report.covered


def test_export_refuses_not_covered_steps():
    X, y, g = _data()
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(StandardScaler(), PPSGDRegressor(n_rounds=5)).fit(X, y, groups=g)
    with pytest.raises(ValueError, match="standardscaler"):
        export_released(pipe)


def test_pipeline_personalize_matches_manual():
    X, y, g = _data()
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(ToyPrivateCenterer(random_state=0),
                             PPSGDRegressor(n_rounds=5, random_state=0)).fit(X, y, groups=g)
    manual = pickle.loads(pickle.dumps(pipe))
    ids = np.repeat(["n1", "n2"], 6)
    assert personalize(pipe, X[:12], y[:12], ids) is pipe
    manual[-1].personalize(manual[:-1].transform(X[:12]), y[:12], ids)
    np.testing.assert_allclose(pipe[-1].offsets_, manual[-1].offsets_)
    with pytest.raises(TypeError, match="no personalize"):
        personalize(make_pipeline(StandardScaler().fit(X)), X, y, ids)


def test_sparse_input_error_names_the_recipe():
    X, y, g = _data()
    for call in (lambda e: e.fit(sp.csr_matrix(X), y, groups=g),):
        with pytest.raises(TypeError, match="sparse_output=False.*to_dense"):
            call(PPSGDRegressor(n_rounds=5))
    est = PPSGDRegressor(n_rounds=5, random_state=0).fit(X, y, groups=g)
    with pytest.raises(TypeError, match="needs dense X"):
        est.personalize(sp.csr_matrix(X[:6]), y[:6], g[:6])
    # the recipe works and pickles
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(FunctionTransformer(to_dense, accept_sparse=True),
                             PPSGDRegressor(n_rounds=5, random_state=0))
        pipe.fit(sp.csr_matrix(X), y, groups=g)
    pickle.loads(pickle.dumps(pipe))
    assert skdpp.export_released is export_released
