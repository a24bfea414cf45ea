"""Safety rails on user ids: no silent matching of ids against row positions, no
silent cold start because of an id type mismatch (issue 13, items 2 and 3).

Each rail is tested on the test-only toy estimator and on every estimator skdpp
exports (small, fast fits; ``tests/test_workflows.py`` holds the data cases).
The messages asserted here are the ones quoted in ``docs/user_guide/groups.rst``.
"""

import re
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from numpy.testing import assert_allclose, assert_array_equal

import skdpp
from tests._toy import ToyPersonalizedMean
from tests.test_workflows import CASES, EXPORTED

pd = pytest.importorskip("pandas")

NO_IDS = "was fitted without user ids"
KIND = "Ids of different types never match"


def _data(n_users=30, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(n_users * rows, 3))
    y = 0.2 + rng.normal(scale=0.5, size=n_users)[groups] + 0.01 * rng.normal(size=groups.size)
    perm = rng.permutation(groups.size)
    return X[perm], y[perm], groups[perm]


def _no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


# --------------------------------------------------------------------------- #
# Item 2: fitted without user ids, then asked with ids
# --------------------------------------------------------------------------- #
def test_predict_with_ids_after_fit_without_groups_is_cold_start_with_warning():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)  # every row its own user
    # The ids 0..29 are also row positions 0..29 of the training data: before the
    # rail, user k silently got the offset of training row k.
    with pytest.warns(UserWarning, match=NO_IDS) as record:
        pred = est.predict(X, groups=g)
    assert_allclose(pred, est.mean_, rtol=0, atol=0)
    message = str(record[0].message)
    assert "row-level" in message and "groups=" in message
    assert "enable_metadata_routing=True" in message


def test_score_with_ids_after_fit_without_groups_warns():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)
    with pytest.warns(UserWarning, match=NO_IDS):
        score = est.score(X, y, groups=g)
    cold = ToyPersonalizedMean(epsilon=np.inf).fit(X, y).predict(X)
    assert_allclose(score, 1 - np.sum((y - cold) ** 2) / np.sum((y - y.mean()) ** 2))


def test_predict_without_ids_after_fit_without_groups_is_silent():
    X, y, _ = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)
    assert_allclose(_no_warnings(est.predict, X), est.mean_, rtol=0, atol=0)


def test_personalize_after_fit_without_groups_raises():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)
    with pytest.raises(ValueError, match=NO_IDS + r".*groups=np\.arange"):
        est.personalize(X[:5], y[:5], groups=np.full(5, 1000))


def test_refit_with_groups_clears_the_rail():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y)
    est.fit(X, y, groups=g)
    assert _no_warnings(est.score, X, y, groups=g) > 0.99


def test_explicit_row_ids_personalize_like_any_ids():
    # The documented way to say "every row is a different user" and still
    # personalize later: pass the row ids explicitly.
    X, y, _ = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=np.arange(y.size))
    est.personalize(X[:2], np.array([7.0, 7.0]), groups=np.array([10**6, 10**6]))
    assert_allclose(_no_warnings(est.predict, X[:1], groups=[10**6]), 7.0, rtol=1e-12)


# --------------------------------------------------------------------------- #
# Item 3: id types
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize(
    "fit_ids, query",
    [
        (lambda g: g, lambda g: g.astype(str)),                       # int fit, str query
        (lambda g: np.char.add("u", g.astype(str)), lambda g: g),     # str fit, int query
        (lambda g: pd.Series(np.char.add("u", g.astype(str)), dtype=object),
         lambda g: g),                                                # pandas str, int query
        (lambda g: g, lambda g: g.astype(str).astype(bytes)),         # int fit, bytes query
    ],
    ids=["int-str", "str-int", "pandas_str-int", "int-bytes"],
)
def test_predict_with_ids_of_another_type_warns_and_is_cold_start(fit_ids, query):
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=fit_ids(g))
    with pytest.warns(UserWarning, match=KIND + ": these rows get the cold-start"):
        pred = est.predict(X, groups=query(g))
    assert_allclose(pred, est.mean_, rtol=0, atol=0)
    with pytest.warns(UserWarning, match=KIND):
        est.score(X, y, groups=query(g))


def test_personalize_with_ids_of_another_type_raises():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    offsets = est.offsets_.copy()
    with pytest.warns(UserWarning, match=KIND) as record:
        est.predict(X[:2], groups=np.array(["3", "4"]))
    with pytest.raises(TypeError, match=KIND) as error:
        est.personalize(X[:2], y[:2], np.array(["3", "4"]))
    # one rule, one description (the consequence differs: predict is a query,
    # personalize would change the type of user_ids_ for good)
    shared = str(record[0].message).split(KIND)[0]
    assert str(error.value).startswith(shared)
    assert "np.asarray(groups).astype('int64')" in str(error.value)
    assert_array_equal(est.offsets_, offsets)
    assert est.user_ids_.dtype == np.int64


def test_warning_names_both_types_and_the_conversion():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    with pytest.warns(UserWarning) as record:
        est.predict(X[:2], groups=np.array(["3", "4"]))
    message = str(record[0].message)
    assert re.search(r"user ids in groups are of type str", message)
    assert re.search(r"user_ids_\) are of type number \(dtype int64\)", message)
    assert "np.asarray(groups).astype('int64')" in message


def test_unseen_ids_of_the_fitted_type_are_cold_start_without_warning():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    pred = _no_warnings(est.predict, X[:4], groups=np.array([1000, 1001, g[2], 1002]))
    assert_allclose(pred[[0, 1, 3]], est.mean_, rtol=0, atol=0)
    assert pred[2] != est.mean_


def test_float_ids_match_integer_ids():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    assert_allclose(_no_warnings(est.predict, X, groups=g.astype(float)),
                    est.predict(X, groups=g), rtol=0, atol=0)


def test_pandas_string_ids_and_numpy_string_ids_are_the_same_type():
    # fit with a pandas Series of str (an object array), then numpy str arrays:
    # predict matched before, personalize raised a TypeError.
    X, y, g = _data()
    ids = np.char.add("user-", g.astype(str))
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=pd.Series(ids, dtype=object))
    assert est.user_ids_.dtype == object
    assert_allclose(_no_warnings(est.predict, X, groups=ids),
                    est.predict(X, groups=pd.Series(ids, dtype=object)), rtol=0, atol=0)
    _no_warnings(est.personalize, X[:2], np.array([9.0, 9.0]), np.array(["new", "new"]))
    assert_allclose(est.predict(X[:1], groups=np.array(["new"])), 9.0, rtol=1e-12)
    assert "new" in set(est.user_ids_.tolist())


def test_mixed_type_ids_are_rejected_in_fit_and_personalize():
    # input-domain rule (UserIndex.from_groups): all numbers or all strings
    X, y, _ = _data(n_users=4, rows=3)
    g = np.array([1, "a", 2, "b"], dtype=object)[np.arange(12) % 4]
    with pytest.raises(ValueError, match="all be numbers or all be strings"):
        ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=np.arange(12) % 4)
    with pytest.raises(ValueError, match="all be numbers or all be strings"):
        est.personalize(X[:2], y[:2], pd.Series([7, "7"], dtype=object))


def test_query_mixing_a_foreign_type_warns():
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=g)
    with pytest.warns(UserWarning, match="of type str, but"):
        pred = est.predict(X[:2], groups=np.array([g[0], "guest"], dtype=object))
    assert pred[0] != est.mean_ and pred[1] == est.mean_


def test_type_rule_does_not_depend_on_which_users_were_fitted():
    # The rule looks at the types of ids only: whether a query warns does not
    # change when one training user is replaced by another.
    X, y, g = _data()
    for groups in (g, np.where(g == 0, 10_000, g)):
        est = ToyPersonalizedMean(epsilon=np.inf).fit(X, y, groups=groups)
        with pytest.warns(UserWarning, match=KIND):
            est.predict(X[:2], groups=np.array(["0", "1"]))
        _no_warnings(est.predict, X[:2], groups=np.array([0, 10_000]))


# --------------------------------------------------------------------------- #
# The same rails on every exported estimator
# --------------------------------------------------------------------------- #
@pytest.fixture(params=sorted(CASES))
def name(request):
    if request.param not in EXPORTED:
        pytest.skip(f"{request.param} is not exported by skdpp yet")
    return request.param


def _estimator(name, **overrides):
    return getattr(skdpp, name)(**{**CASES[name].params, **overrides})


def test_estimators_fitted_without_ids_never_match_row_positions(name):
    d = CASES[name].make_data(0)
    est = _estimator(name, epsilon=np.inf).fit(d["X"], d["y"])
    cold = _no_warnings(est.predict, d["X_test"])  # every row a new user, silently
    with pytest.warns(UserWarning, match=NO_IDS):
        pred = est.predict(d["X_test"], groups=d["groups_test"])
    assert_array_equal(pred, cold)


def test_estimators_flag_ids_of_another_type(name):
    d = CASES[name].make_data(0)
    est = _estimator(name, epsilon=np.inf).fit(d["X"], d["y"], groups=d["groups"])
    as_str = np.asarray(d["groups_test"]).astype(str)
    cold = est.predict(d["X_test"], groups=np.full(as_str.shape, -12345))
    with pytest.warns(UserWarning, match=KIND):
        assert_array_equal(est.predict(d["X_test"], groups=as_str), cold)
    with pytest.raises(TypeError, match=KIND):
        est.personalize(d["X_test"], d["y_test"], groups=as_str)


# --------------------------------------------------------------------------- #
# A caller's np.errstate does not reach into a fit
# --------------------------------------------------------------------------- #
def _errstate_data_sets(name):
    from tests.privacy.harness import adversarial_neighbours

    d = CASES[name].make_data(0)
    X, y, g = d["X"], d["y"], d["groups"]
    sets = [("data", X, y, g)]
    for kind, X2, y2, g2 in adversarial_neighbours(X, y, g, g[0], scale=1e150):
        # MF's X holds item ids and JL's y labels: scaling them is not a neighbour.
        if kind == "huge" and name in ("AdaptiveWeightMF", "JLMarginClassifier"):
            continue
        sets.append((kind, X2, y2, g2))
    return d, sets


@pytest.mark.parametrize("name", list(CASES))
def test_fit_ignores_the_callers_errstate(name):
    # Under the caller's np.errstate(all="raise"), an underflow the algorithm
    # handles (e.g. a negligible logaddexp term) would raise depending on the
    # users' values. The fit runs under numpy's defaults instead: same model.
    d, sets = _errstate_data_sets(name)
    est = getattr(skdpp, name)(**CASES[name].params)
    for kind, X, y, g in sets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. delta >= 1 / n_users on toy data
            expected = clone(est).fit(X, y, groups=g).predict(d["X_test"], d["groups_test"])
            with np.errstate(all="raise"):
                got = clone(est).fit(X, y, groups=g).predict(d["X_test"], d["groups_test"])
        assert_array_equal(got, expected, err_msg=kind)


def test_callers_errstate_test_catches_a_fit_without_its_own(monkeypatch):
    # Broken variant: the template leaves the caller's errstate in force; the
    # JL fit then raises on ordinary data (an underflowing logaddexp term).
    import skdpp.base

    monkeypatch.setattr(skdpp.base, "FIT_ERRSTATE", {})
    d, _ = _errstate_data_sets("JLMarginClassifier")
    est = skdpp.JLMarginClassifier(**CASES["JLMarginClassifier"].params)
    with np.errstate(all="raise"), pytest.raises(FloatingPointError):
        est.fit(d["X"], d["y"], groups=d["groups"])
