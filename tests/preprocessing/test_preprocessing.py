"""Behaviour of the private transformers (accuracy, conventions, pipelines, secure noise)."""

import importlib.util
import warnings

import numpy as np
import pytest
import sklearn
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline, make_pipeline

import skdpp
from skdpp import PPSGDRegressor
from skdpp.preprocessing import (
    PrivateOneHotEncoder,
    PrivateSimpleImputer,
    PrivateStandardScaler,
)


def _numeric(n_users=1500, rows=4, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    X = np.c_[1.6e9 + 3e7 * rng.normal(size=g.size),   # a raw Unix timestamp
              1990 + 10 * rng.normal(size=g.size),       # a release year
              1e-6 * rng.normal(size=g.size)]            # a tiny-scale column
    return X, g


# --------------------------------------------------------------------------- #
# PrivateStandardScaler
# --------------------------------------------------------------------------- #
def test_scaler_matches_sklearn_without_noise_on_raw_columns():
    X, g = _numeric()
    ref = sklearn.preprocessing.StandardScaler().fit(X)
    est = PrivateStandardScaler(epsilon=np.inf).fit(X, groups=g)
    # means over users of per-user statistics, clipped at a released radius:
    # close to the row statistics on balanced users (tolerances: a few % of sd)
    assert_allclose((est.mean_ - ref.mean_) / ref.scale_, 0, atol=0.02)
    assert_allclose(est.scale_ / ref.scale_, 1, atol=0.05)
    assert not est.privacy_report_.is_private


def test_scaler_error_falls_with_epsilon():
    X, g = _numeric()
    ref = sklearn.preprocessing.StandardScaler().fit(X)

    def error(eps):
        errs = []
        for seed in range(4):
            est = PrivateStandardScaler(epsilon=eps, random_state=seed).fit(X, groups=g)
            errs.append(np.max(np.abs(est.mean_ - ref.mean_) / ref.scale_)
                        + np.max(np.abs(np.log(est.scale_ / ref.scale_))))
        return np.mean(errs)

    e1, e8 = error(1.0), error(8.0)
    assert e8 < e1
    assert e1 < 0.5   # usable at epsilon=1 with 1500 users and a raw timestamp column


def test_scaler_transform_inverse_and_flags():
    X, g = _numeric()
    est = PrivateStandardScaler(random_state=0).fit(X, groups=g)
    Z = est.transform(X)
    assert_allclose(est.inverse_transform(Z), X, rtol=1e-9)
    no_mean = PrivateStandardScaler(with_mean=False, random_state=0).fit(X, groups=g)
    assert_allclose(no_mean.transform(X), X / no_mean.scale_)
    none = PrivateStandardScaler(with_mean=False, with_std=False).fit(X, groups=g)
    assert none.mean_ is None and none.scale_ is None
    assert none.privacy_report_.phases == () and none.privacy_report_.epsilon_spent == 0
    assert_array_equal(none.transform(X), X)


def test_scaler_report_has_the_named_plan():
    X, g = _numeric()
    report = PrivateStandardScaler(epsilon=2.0, random_state=0).fit(X, groups=g) \
        .privacy_report_
    assert [p.name for p in report.phases] == ["clip", "location", "scale"]
    assert report.epsilon == 2.0 and report.epsilon_spent <= 2.0 * (1 + 1e-9)
    assert report.n_users == 1500
    assert set(report.released) == {"mean_", "var_", "scale_"}


def test_scaler_transform_saturates_instead_of_overflowing():
    X, g = _numeric()
    est = PrivateStandardScaler(random_state=0).fit(X[:, 2:], groups=g)
    out = est.transform(np.array([[1e308], [-1e308]]))
    assert np.all(np.isfinite(out)) and out[0, 0] > 1e300 and out[1, 0] < -1e300


def test_fit_is_a_function_of_the_set_of_records():
    X, g = _numeric(n_users=300)
    perm = np.random.default_rng(1).permutation(g.size)
    a = PrivateStandardScaler(random_state=0).fit(X, groups=g)
    b = PrivateStandardScaler(random_state=0).fit(X[perm], groups=g[perm])
    assert_array_equal(a.mean_, b.mean_)
    assert_array_equal(a.scale_, b.scale_)


# --------------------------------------------------------------------------- #
# PrivateSimpleImputer
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("strategy, target", [("mean", 3.0), ("median", 3.0)])
def test_imputer_fill_values(strategy, target):
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(2000), 4)
    X = 3.0 + rng.normal(size=(g.size, 2))
    X[rng.random(X.shape) < 0.3] = np.nan
    X[g == 5] = np.nan  # a NaN-only user
    est = PrivateSimpleImputer(strategy=strategy, epsilon=2.0, random_state=0) \
        .fit(X, groups=g)
    assert_allclose(est.statistics_, target, atol=0.15)
    out = est.transform(X)
    assert not np.isnan(out).any()
    kept = ~np.isnan(X)
    assert_array_equal(out[kept], X[kept])
    # the released number of users with an observation (noisy)
    has_obs = np.zeros((2000, 2), dtype=bool)
    np.logical_or.at(has_obs, g, ~np.isnan(X))
    assert_allclose(est.n_observed_, has_obs.sum(axis=0), rtol=0.02)


def test_imputer_numeric_placeholder_and_constant():
    rng = np.random.default_rng(0)
    X = np.c_[2.0 + 0.1 * rng.normal(size=600), 3.0 + 0.1 * rng.normal(size=600)]
    X[::3, 0] = X[1::3, 1] = -1.0
    est = PrivateSimpleImputer(missing_values=-1.0, epsilon=np.inf).fit(X)
    assert not (est.transform(X) == -1.0).any()
    assert_allclose(est.statistics_, [2.0, 3.0], atol=0.02)
    const = PrivateSimpleImputer(missing_values=-1.0, strategy="constant",
                                 fill_value=7.0).fit(X)
    assert const.privacy_report_.phases == ()
    assert_array_equal(const.transform(X)[1], [X[1, 0], 7.0])


# --------------------------------------------------------------------------- #
# PrivateOneHotEncoder
# --------------------------------------------------------------------------- #
def _genres(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.choice(["Comedy", "Drama", "Comedy|Drama", "Horror"], size=n)


def test_encoder_drops_one_users_category_and_keeps_common_ones():
    genres = _genres()
    genres[:3] = "Secret"  # one user's three rows
    g = np.r_[[0, 0, 0], np.arange(1, genres.size - 2)]
    est = PrivateOneHotEncoder(separator="|", random_state=0).fit(genres[:, None], groups=g)
    assert_array_equal(est.categories_[0], ["Comedy", "Drama", "Horror"])
    out = est.transform([["Drama|Comedy"], ["Secret"], ["Horror|Horror"]]).toarray()
    assert_array_equal(out, [[1, 1, 0], [0, 0, 0], [0, 0, 1]])
    assert est.privacy_report_.is_private


def test_encoder_public_categories_are_free():
    genres = _genres()
    est = PrivateOneHotEncoder(categories=[["Comedy", "Drama", "Western"]],
                               separator="|").fit(genres[:, None])
    report = est.privacy_report_
    assert report.phases == () and report.epsilon_spent == 0
    assert "public" in " ".join(report.notes)
    assert_array_equal(est.get_feature_names_out(), ["x0_Comedy", "x0_Drama", "x0_Western"])


def test_encoder_handle_unknown_modes():
    genres = _genres()
    X = genres[:, None]
    infreq = PrivateOneHotEncoder(handle_unknown="infrequent_if_exist",
                                  random_state=0).fit(X)
    names = infreq.get_feature_names_out(["genre"])
    assert names[-1] == "genre_infrequent_sklearn"
    out = infreq.transform([["Western"]]).toarray()
    assert_array_equal(out[0], np.eye(len(names))[-1])
    err = PrivateOneHotEncoder(handle_unknown="error", random_state=0).fit(X)
    with pytest.raises(ValueError, match="unknown categories.*'Western'"):
        err.transform([["Western"]])


def test_encoder_pandas_mixed_columns_and_set_output():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"device": rng.choice(["ios", "android", "web"], 2000),
                       "level": rng.choice([1, 2, 3], 2000)})
    est = PrivateOneHotEncoder(sparse_output=False, random_state=0).set_output(
        transform="pandas").fit(df)
    out = est.transform(df)
    assert list(out.columns) == ["device_android", "device_ios", "device_web",
                                 "level_1", "level_2", "level_3"]
    assert est.categories_[1].dtype.kind == "i"   # numeric column: numeric categories
    assert_allclose(out.to_numpy().sum(axis=1), 2.0)


def test_encoder_many_columns_share_one_selection():
    X = np.c_[_genres(seed=0), _genres(seed=1)]
    est = PrivateOneHotEncoder(random_state=0, max_categories_per_user=2).fit(X)
    (phase,) = est.privacy_report_.phases
    assert phase.name == "categories"
    assert_allclose(phase.sensitivity, np.sqrt(2 * 2 * 2))   # sqrt(2 L), L = cap * columns


# --------------------------------------------------------------------------- #
# Inside ColumnTransformer / Pipeline with metadata routing
# --------------------------------------------------------------------------- #
def _ratings_frame(n_users=300, rows=6, seed=0):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    year = 1990 + 10 * rng.normal(size=g.size)
    ts = 1.5e9 + 1e7 * rng.normal(size=g.size)
    genre = rng.choice(["Comedy", "Drama", "Comedy|Drama"], size=g.size)
    y = 3 + 0.02 * (year - 1990) + 0.5 * (genre == "Drama") + (g % 3) * 0.3 \
        + 0.3 * rng.normal(size=g.size)
    X = pd.DataFrame({"year": year, "timestamp": ts, "genres": genre})
    return X, y, g


def test_pipeline_with_routed_groups():
    X, y, g = _ratings_frame()
    pre = ColumnTransformer([
        ("num", make_pipeline(PrivateSimpleImputer(epsilon=2.0, random_state=0),
                              PrivateStandardScaler(epsilon=2.0, random_state=0)),
         ["year", "timestamp"]),
        ("cat", PrivateOneHotEncoder(separator="|", sparse_output=False, epsilon=2.0,
                                     random_state=0), ["genres"]),
    ])
    pipe = Pipeline([("pre", pre), ("reg", PPSGDRegressor(epsilon=2.0, random_state=0))])
    with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings():
        warnings.simplefilter("error")   # groups reach every step: no warning
        pipe.fit(X, y, groups=g)
        pred = pipe.predict(X, groups=g)
    assert pred.shape == y.shape and np.all(np.isfinite(pred))
    enc = pipe.named_steps["pre"].named_transformers_["cat"]
    scaler = pipe.named_steps["pre"].named_transformers_["num"][-1]
    # user-level: each transformer saw 300 users, not 1800 rows
    assert enc.n_users_ == 300 and scaler.n_users_ == 300
    assert_array_equal(enc.categories_[0], ["Comedy", "Drama"])
    assert list(pipe[:-1].get_feature_names_out()) == [
        "num__year", "num__timestamp", "cat__genres_Comedy", "cat__genres_Drama"]


# --------------------------------------------------------------------------- #
# Secure noise (OpenDP samplers) works through skdpp.privacy.mechanisms
# --------------------------------------------------------------------------- #
@pytest.mark.skipif(importlib.util.find_spec("opendp") is None,
                    reason='OpenDP is not installed (pip install "skdpp[secure]")')
@pytest.mark.parametrize("make", [
    lambda: PrivateStandardScaler(),
    lambda: PrivateSimpleImputer(strategy="median"),
    lambda: PrivateOneHotEncoder(separator="|"),
], ids=["scaler", "imputer", "encoder"])
def test_secure_noise_mode(make, monkeypatch):
    from skdpp.privacy import mechanisms

    calls = []
    secure = mechanisms._secure_additive

    def counting(*args, **kwargs):
        calls.append(1)
        return secure(*args, **kwargs)

    def numpy_noise(*args, **kwargs):
        raise AssertionError("numpy privacy noise drawn in secure mode")

    monkeypatch.setattr(mechanisms, "_secure_additive", counting)
    monkeypatch.setattr(mechanisms, "_numpy_noise", numpy_noise)
    X, g = _numeric(n_users=300)
    data = _genres(1200)[:, None] if "Encoder" in type(make()).__name__ else X
    with skdpp.config_context(noise="secure"):
        est = make().fit(data, groups=np.repeat(np.arange(300), data.shape[0] // 300))
    assert calls, "no secure draw"
    assert not est.privacy_report_.noise_seeded



def _year_like(n_users=600, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), 5)
    X = rng.normal(1995.0, 15.0, size=(g.size, 1))
    X[rng.random(g.size) < 0.05] = np.nan
    return X, g


def test_useless_budget_falls_back_to_the_prior_with_a_public_warning(monkeypatch):
    """At a budget where the searches' count noise is 0.23 n, the imputer fills 0 and
    warns, whatever the data (the same text for data shifted by 1e6); with the rule
    removed (broken variant) its released mean lands far off in some fits."""
    from skdpp.exceptions import UselessFitWarning
    from skdpp.preprocessing import _base

    X, g = _year_like()
    texts = []
    for shift in (0.0, 1e6):
        with pytest.warns(UselessFitWarning) as record:
            imp = PrivateSimpleImputer(epsilon=0.24, random_state=0).fit(X + shift, groups=g)
        assert_array_equal(imp.statistics_, [0.0])
        texts.append([str(w.message) for w in record])
    assert texts[0] == texts[1]
    assert any("prior" in note for note in imp.privacy_report_.notes)
    with pytest.warns(UselessFitWarning):
        sc = PrivateStandardScaler(epsilon=0.24, random_state=0).fit(np.nan_to_num(X), groups=g)
    assert_array_equal(sc.mean_, [0.0])
    assert_array_equal(sc.scale_, [1.0])
    # a budget the rule accepts: no warning, a sensible mean
    with warnings.catch_warnings():
        warnings.simplefilter("error", UselessFitWarning)
        imp = PrivateSimpleImputer(epsilon=2.0, random_state=0).fit(X, groups=g)
    assert abs(imp.statistics_[0] - 1995.0) < 5.0
    # broken variant: the rule removed
    monkeypatch.setattr(_base.BasePrivateTransformer, "_useless_message",
                        lambda self, plan, n_users: None)
    means = np.array([PrivateSimpleImputer(epsilon=0.24, random_state=s).fit(X, groups=g)
                      .statistics_[0] for s in range(60)])
    assert np.any(np.abs(means - 1995.0) > 100.0)
