"""JLMarginClassifier: the labels' input domain, the per-user label candidate cap,
and the head divide that warned for one user's tiny rows (issue 19, defects 6-7).

Each privacy property is also shown to fail on a broken variant.
"""

import contextlib
import inspect
import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.utils.multiclass import check_classification_targets

import skdpp.base as base
from skdpp.linear_model._algorithms import jl_margin as jla
from skdpp.linear_model import _jl_margin as jlm
from skdpp.linear_model import _labels as labels_mod
from skdpp.linear_model._algorithms import jl_kernels as ms
from skdpp.linear_model._jl_margin import JLMarginClassifier
from tests.privacy.harness import assert_same_observables, record_releases

# Small and fast: a public label set, a fixed clip radius, random candidates.
FAST = dict(n_components=1, jl_dim=4, n_candidates=16, n_directions=8, clip_norm=1.0,
            candidates="random", random_state=0)


def make_data(n_users=40, n_rows=5, n_features=6, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), n_rows)
    X = rng.normal(size=(n_users * n_rows, n_features))
    y = (X[:, 0] + 0.3 * rng.normal(size=X.shape[0]) > 0).astype(np.int64)
    return X, y, g


# --------------------------------------------------------------------------- #
# Defect 7: the labels' input domain
# --------------------------------------------------------------------------- #
def _one_user_label(y, g, value, user=3):
    y = y.astype(np.float64)
    y[g == user] = value
    return y


def _fit_and_predict(**params):
    def fit_on(X, y, g):
        clf = JLMarginClassifier(**{**FAST, **params}).fit(X, y, groups=g)
        clf.predict(X[:5], groups=g[:5])
    return fit_on


def test_float_label_outside_given_classes_is_handled_like_any_other_label():
    """classes=[0, 1]: one user's label 1.5 is 'not class 1', never an exception."""
    X, y, g = make_data()
    with_half = _one_user_label(y, g, 1.5)
    with_zero = _one_user_label(y, g, 0.0)
    observed = assert_same_observables(_fit_and_predict(classes=[0, 1]),
                                       (X, with_half, g), (X, with_zero, g))
    assert observed["warnings"] == []
    # Matched by equality: 1.5 equals no class, so it is a negative of the problem.
    codes = labels_mod.label_codes(np.array([1.5, 1.0, 0.0]), np.array([0, 1]))
    assert_array_equal(labels_mod.binary_problems(codes, 2)[:, 0], [-1.0, 1.0, -1.0])


def test_broken_whole_y_target_check_is_caught(monkeypatch):
    """The old rule (scikit-learn's check on the whole y) raises for one user's 1.5."""
    X, y, g = make_data()
    monkeypatch.setattr(jlm, "check_label_domain",
                        lambda y, classes, estimator: check_classification_targets(y))
    with pytest.raises(AssertionError, match="one user replaced"):
        assert_same_observables(_fit_and_predict(classes=[0, 1]),
                                (X, _one_user_label(y, g, 0.0), g),
                                (X, _one_user_label(y, g, 1.5), g))


def test_personalize_compares_labels_to_the_fitted_classes():
    X, y, g = make_data()
    clf = JLMarginClassifier(**FAST, classes=[0, 1]).fit(X, y, groups=g)
    mine = g == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.personalize(X[mine], np.full(mine.sum(), 1.5), groups=g[mine] + 1000)
    assert 1003 in clf.user_ids_


def test_non_integral_label_without_classes_is_a_domain_error_before_any_computation(
        monkeypatch):
    """classes=None: labels are integers or strings; 1.5 is rejected by the stated rule."""
    X, y, g = make_data()

    def no_computation(*args, **kwargs):
        raise AssertionError("computation started before the domain check")

    monkeypatch.setattr(JLMarginClassifier, "_make_blocks", no_computation)
    for classes in (None, "observed"):
        with pytest.raises(ValueError, match="Unknown label type: continuous.*input domain"):
            JLMarginClassifier(**{**FAST, "classes": classes}).fit(
                X, _one_user_label(y, g, 1.5), groups=g)
    # Integral floats are integer labels (the domain, not the dtype, decides).
    with pytest.raises(AssertionError, match="computation started"):
        JLMarginClassifier(**{**FAST, "classes": None}).fit(X, y.astype(float), groups=g)


@pytest.mark.parametrize("y_kind, classes, match", [
    ("mixed", None, "all be numbers or all be strings"),
    ("mixed", ["0", "1"], "all be numbers or all be strings"),
    ("int", ["a", "b"], "no label could equal a class"),
])
def test_labels_of_another_kind_are_domain_errors(y_kind, classes, match, monkeypatch):
    X, y, g = make_data()
    if y_kind == "mixed":
        y = y.astype(str).astype(object)
        y[g == 3] = 1  # one user's label is a number among strings
    monkeypatch.setattr(JLMarginClassifier, "_make_blocks",
                        lambda *a: pytest.fail("computation before the domain check"))
    with pytest.raises(ValueError, match=match):
        JLMarginClassifier(**{**FAST, "classes": classes}).fit(X, y, groups=g)


def test_non_finite_labels_are_rejected_by_validation():
    X, y, g = make_data()
    with pytest.raises(ValueError, match="NaN"):
        JLMarginClassifier(**FAST, classes=[0, 1]).fit(X, _one_user_label(y, g, np.nan),
                                                       groups=g)


# --------------------------------------------------------------------------- #
# The label candidate cap (private label selection, classes=None)
# --------------------------------------------------------------------------- #
def _label_release(X, y, g, cap, monkeypatch):
    """The pre-noise label counts released by a fit, with their labels and sensitivity."""
    seen = []
    real_select = jla.select_classes

    def spy(release, phase, counts, *, max_per_user):
        seen.append(counts)
        return real_select(release, phase, counts, max_per_user=max_per_user)

    monkeypatch.setattr(jla, "select_classes", spy)
    clf = JLMarginClassifier(**{**FAST, "classes": None, "max_classes_per_user": cap,
                                "epsilon": 4.0, "budget_shares": {"labels": 0.3}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a fallback on observed labels
        releases = record_releases(lambda: clf.fit(X, y, groups=g))
    counts = seen[-1]
    first = releases[0]  # the label counts are the fit's first release
    assert_array_equal(first.value, counts.counts)
    return dict(zip(counts.labels.tolist(), counts.counts.tolist())), first.sensitivity


def _unique_labels_user(X, y, g, user, labels):
    """``user`` replaced by one row per label in ``labels`` (labels nobody else has)."""
    keep = g != user
    rng = np.random.default_rng(user)
    X2 = np.vstack([X[keep], rng.normal(size=(len(labels), X.shape[1]))])
    y2 = np.concatenate([y[keep].astype(object), np.asarray(labels, dtype=object)])
    g2 = np.concatenate([g[keep], np.full(len(labels), user)])
    return X2, y2, g2


def check_label_cap(cap, n_extra, monkeypatch):
    """A user with ``cap + n_extra`` unique labels creates exactly ``cap`` candidates,
    and the neighbour holding ``cap`` other unique labels moves the counts by
    exactly the stated sensitivity (attained, never exceeded)."""
    X, y, g = make_data(n_users=40)
    y = np.where(y == 1, "pos", "neg")
    mine = [f"u{j:03d}" for j in range(cap + n_extra)]
    other = [f"w{j:03d}" for j in range(cap + n_extra)]
    counts_a, sens_a = _label_release(*_unique_labels_user(X, y, g, 7, mine), cap,
                                      monkeypatch)
    counts_b, sens_b = _label_release(*_unique_labels_user(X, y, g, 7, other), cap,
                                      monkeypatch)
    created = sorted(set(counts_a) - {"neg", "pos"})
    assert len(created) == cap, (
        f"a user holding {cap + n_extra} unique labels created {len(created)} candidates; "
        f"the cap is {cap}")
    assert all(counts_a[label] == 1.0 for label in created)  # zero-count labels absent
    union = set(counts_a) | set(counts_b)
    diff = math.sqrt(sum((counts_a.get(k, 0.0) - counts_b.get(k, 0.0)) ** 2 for k in union))
    assert sens_a == sens_b
    assert diff <= sens_a * (1 + 1e-12), (
        f"the label counts moved by {diff:.6g}, more than the stated sensitivity "
        f"{sens_a:.6g}")
    # The neighbour attains the sensitivity: the bound is not loose, and the test
    # would see a cap raised by one.
    assert diff == pytest.approx(sens_a, rel=1e-12)


@pytest.mark.parametrize("n_extra", [1, 5])
def test_one_user_creates_at_most_the_cap_of_label_candidates(n_extra, monkeypatch):
    check_label_cap(2, n_extra, monkeypatch)


def test_broken_cap_plus_one_is_caught(monkeypatch):
    """The per-user cap raised by one (sensitivity unchanged) fails the check."""
    real = labels_mod.label_counts_block
    monkeypatch.setattr(jla, "label_counts_block",
                        lambda block, state, cap: real(block, state, cap + 1))
    with pytest.raises(AssertionError, match="created 3 candidates"):
        check_label_cap(2, 1, monkeypatch)


# --------------------------------------------------------------------------- #
# Defect 6: the head divide of one user's tiny rows
# --------------------------------------------------------------------------- #
def _tiny_user(X, g, value, user=3):
    X = X.copy()
    rng = np.random.default_rng(5)
    X[g == user] = np.where(rng.random((int(np.sum(g == user)), X.shape[1])) < 0.5,
                            value, -value)
    return X


def _fit_personalize(clf_params):
    def run(X, y, g):
        clf = JLMarginClassifier(**{**FAST, **clf_params}).fit(X, y, groups=g)
        mine = g == 3
        clf.personalize(X[mine], y[mine], groups=g[mine] + 1000)
        return clf
    return run


@pytest.mark.parametrize("value", [1e-300, 1e-310, 5e-324])
@pytest.mark.parametrize("params", [dict(classes=[0, 1]),
                                    dict(classes=[0, 1], fit_intercept=False)])
def test_tiny_rows_are_quiet_without_the_entry_point_guard(value, params, monkeypatch):
    """The head divide sits in its own quiet block: silent even with the entry-point
    guard disabled (numpy's default error handling, warnings as errors); a
    head that is not representable is replaced by the cold-start head, a
    decision from that user's values only, so every head stays finite."""
    monkeypatch.setattr(base, "quiet_numerics", contextlib.nullcontext)
    X, y, g = make_data()
    X2 = _tiny_user(X, g, value)
    with warnings.catch_warnings(), np.errstate(all="warn", under="ignore"):
        warnings.simplefilter("error")
        clf = _fit_personalize(params)(X2, y, g)
    assert np.isfinite(clf.heads_).all() and np.isfinite(clf.intercepts_).all()


def _unguarded_divide_source():
    src = inspect.getsource(ms.logistic_heads)
    guarded = "    with np.errstate(**_QUIET):\n        # Back to the user's own coordinates"
    line = "        heads = theta[:, :k] / scale[:, None]\n"
    assert guarded in src and line in src
    return src.replace(line, "").replace(
        guarded, "    heads = theta[:, :k] / scale[:, None]\n" + guarded)


def test_broken_unguarded_divide_is_caught(monkeypatch):
    """The divide moved back out of its quiet block warns for one user's 5e-324 rows."""
    namespace = dict(vars(ms))
    exec(compile(_unguarded_divide_source(), ms.__file__, "exec"), namespace)
    monkeypatch.setattr(ms, "logistic_heads", namespace["logistic_heads"])
    monkeypatch.setattr(base, "quiet_numerics", contextlib.nullcontext)
    X, y, g = make_data()
    with warnings.catch_warnings(), pytest.raises(RuntimeWarning, match="divide"):
        warnings.simplefilter("error")
        _fit_personalize(dict(classes=[0, 1]))(_tiny_user(X, g, 5e-324), y, g)


@pytest.mark.parametrize("value", [1e-300, 5e-324])
def test_tiny_rows_give_the_same_observables_as_a_neighbour(value):
    X, y, g = make_data()
    observed = assert_same_observables(
        lambda X_, y_, g_: _fit_personalize(dict(classes=[0, 1]))(X_, y_, g_),
        (_tiny_user(X, g, value), y, g), (X, y, g))
    assert observed["warnings"] == []
