"""The one-user suite for the private transformers of skdpp.preprocessing.

On a dataset ``D`` and each neighbour ``D'`` (one user replaced by an
adversarial one: rows of 1e308, 1e-300 and the smallest subnormal, 10 000
rows, one row, a NaN-only user for the imputer, 10^5 invented categories for
the encoder), with the noise patched out and ``D'`` replaying ``D``'s releases
(:func:`tests.privacy.harness.record_releases`):

(i)   warnings, printed lines and exceptions of ``fit`` and ``transform`` are
      identical (also under the caller's ``np.errstate(all="raise")``);
(ii)  every fitted attribute is identical given the same releases (it is a
      function of the releases), so every other user's transformed rows are
      bit-identical;
(iii) every release moves by at most its stated sensitivity (each phase of
      each transformer's plan is exercised);
(iv)  the category selection publishes a category held only by the replaced
      user with probability at most the delta it charges
      (:func:`~tests.privacy.harness.selection_leak_probability`).

Each is shown to fail on a broken variant: a per-row instead of a per-user
statistic (scaler, imputer), no clipping of the clipped sums, uncapped
candidates (encoder).
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from skdpp.preprocessing import (
    PrivateOneHotEncoder,
    PrivateSimpleImputer,
    PrivateStandardScaler,
)
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_releases_within_sensitivity,
    compare_observables,
    observables,
    record_releases,
    replacement_catalogue,
    selection_leak_probability,
)
from tests.privacy.test_one_user import _charged_threshold_delta

USER = 3
RAISE = {"all": "raise"}


# --------------------------------------------------------------------------- #
# Data, transformers, neighbours
# --------------------------------------------------------------------------- #
def _numeric(n_users=200, rows=5, d=3, nan=False, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    X = np.c_[1.6e9 + 3e7 * rng.normal(size=g.size), 1990 + 10 * rng.normal(size=g.size),
              rng.normal(size=(g.size, d - 2))]
    if nan:
        X[rng.random(X.shape) < 0.2] = np.nan
    return X, g


CATS = np.array(["Action", "Comedy", "Drama", "Horror", "Romance", "Sci-Fi"])


def _categorical(n_users=400, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_users), rows)
    first = rng.choice(CATS, size=g.size)
    second = np.char.add(np.char.add(rng.choice(CATS, size=g.size), "|"),
                         rng.choice(CATS, size=g.size))
    return np.c_[first, second].astype(object), g


TRANSFORMERS = {
    "scaler": (lambda: PrivateStandardScaler(random_state=0), "numeric"),
    "scaler_no_mean": (lambda: PrivateStandardScaler(with_mean=False, random_state=0),
                       "numeric"),
    "imputer_mean": (lambda: PrivateSimpleImputer(random_state=0), "missing"),
    "imputer_median": (lambda: PrivateSimpleImputer(strategy="median", random_state=0),
                       "missing"),
    "encoder": (lambda: PrivateOneHotEncoder(separator="|", max_categories_per_user=2,
                                             random_state=0), "categorical"),
}
PHASES = {"scaler": {"clip", "location", "scale"}, "scaler_no_mean": {"clip", "location",
                                                                      "scale"},
          "imputer_mean": {"counts", "clip", "mean"}, "imputer_median": {"counts", "clip"},
          "encoder": {"categories"}}
DATA = {"numeric": lambda: _numeric(), "missing": lambda: _numeric(nan=True),
        "categorical": lambda: _categorical()}


def _numeric_neighbours(kind):
    X, g = DATA[kind]()
    y = np.zeros(g.size)
    out = {name: (X2, g2) for name, X2, _, g2 in replacement_catalogue(X, y, g, USER)
           if not name.startswith("targets") and name != "tiny_rows_huge_targets"}
    out.update({name: (X2, g2) for name, X2, _, g2 in adversarial_neighbours(X, y, g, USER)
                if name == "many_rows"})
    if kind == "missing":
        mine = g == USER
        out["nan_only"] = (np.r_[X[~mine], np.full((7, X.shape[1]), np.nan)],
                           np.r_[g[~mine], np.full(7, USER)])
        half = np.full((10_000, X.shape[1]), 1e300)
        half[::2] = np.nan
        out["nan_and_1e300_many_rows"] = (np.r_[X[~mine], half],
                                          np.r_[g[~mine], np.full(10_000, USER)])
    return out


def _categorical_neighbours():
    """Replacements whose categories are all held by other users (same candidates)."""
    X, g = _categorical()
    mine = g == USER
    every = "|".join(CATS)
    rows = {
        "many_rows_every_category": np.c_[np.resize(CATS, 10_000),
                                          np.full(10_000, every)].astype(object),
        "one_row": X[mine][:1],
        "repeated_labels_in_a_cell": np.array([[CATS[1], "|".join([CATS[2]] * 50)]],
                                              dtype=object),
        "most_frequent_elsewhere": np.tile(X[~mine][:3], (5, 1)),
    }
    return {name: (np.r_[X[~mine], r], np.r_[g[~mine], np.full(r.shape[0], USER)])
            for name, r in rows.items()}


def _neighbours(name):
    kind = TRANSFORMERS[name][1]
    return _categorical_neighbours() if kind == "categorical" else _numeric_neighbours(kind)


def _cases(names=TRANSFORMERS):
    cases = []
    for name in names:
        for entry in _neighbours(name):
            for errstate in ((None, "raise") if name in ("scaler", "encoder") else (None,)):
                cases.append(pytest.param(name, entry, errstate,
                                          id=f"{name}-{entry}-{errstate}"))
    return cases


def _fitted(est):
    names = ("mean_", "var_", "scale_", "statistics_", "n_observed_", "categories_")
    return {n: getattr(est, n) for n in names if hasattr(est, n)}


def _assert_same_attributes(a, b):
    fa, fb = _fitted(a), _fitted(b)
    assert fa.keys() == fb.keys()
    for name in fa:
        va, vb = fa[name], fb[name]
        if isinstance(va, list):
            assert len(va) == len(vb)
            for x, y in zip(va, vb):
                assert_array_equal(x, y, err_msg=name)
        elif va is None:
            assert vb is None
        else:
            assert_array_equal(va, vb, err_msg=f"{name} differs given the same releases")


def _dense(Z):
    return Z.toarray() if hasattr(Z, "toarray") else np.asarray(Z)


def check_one_user(make, data, neighbour, *, errstate=None):
    """Checks (i)-(iii) of fit and transform; returns the phases of the releases."""
    (X, g), (X2, g2) = data, neighbour
    est1, est2 = make(), make()
    o1 = observables(lambda: record_releases(lambda: est1.fit(X, groups=g)),
                     errstate=errstate)
    first = o1["result"]
    o2 = observables(lambda: record_releases(lambda: est2.fit(X2, groups=g2), replay=first),
                     errstate=errstate)
    compare_observables(o1, o2, what="fit")                                    # (i)
    assert_releases_within_sensitivity(first, o2["result"])                    # (iii)
    _assert_same_attributes(est1, est2)                                        # (ii)
    t1 = observables(lambda: est1.transform(X), errstate=errstate)
    t2 = observables(lambda: est2.transform(X2), errstate=errstate)
    compare_observables(t1, t2, what="transform")                              # (i)
    keep = int(np.sum(g != USER))
    assert_array_equal(_dense(t1["result"])[g != USER], _dense(t2["result"])[:keep],
                       err_msg="transform: other users' rows changed")        # (ii)
    return {r.phase for r in first}


@pytest.mark.parametrize("name, entry, errstate", _cases())
def test_one_user_transformers(name, entry, errstate):
    make, kind = TRANSFORMERS[name]
    phases = check_one_user(make, DATA[kind](), _neighbours(name)[entry],
                            errstate=RAISE if errstate else None)
    assert phases == PHASES[name], f"releases of phases {phases}, planned {PHASES[name]}"


def test_encoder_one_row_user_against_every_category_user():
    # The widest contribution change among existing categories: a user with one
    # row (at most 3 categories) replaced by one holding all 12 (column, category)
    # pairs in 10 000 rows; only the cap keeps it within sqrt(2 L).
    neighbours = _neighbours("encoder")
    check_one_user(TRANSFORMERS["encoder"][0], neighbours["one_row"],
                   neighbours["many_rows_every_category"])


# --------------------------------------------------------------------------- #
# Invented categories: observables with real noise, and (iv) the selection's delta
# --------------------------------------------------------------------------- #
def _invented(n_new, seed=0):
    X, g = _categorical(seed=seed)
    mine = g == USER
    new = np.array([f"new{i}" for i in range(n_new)], dtype=object)
    rows = np.c_[new, np.char.add(new.astype(str), "|x").astype(object)]
    return X, g, np.r_[X[~mine], rows], np.r_[g[~mine], np.full(n_new, USER)]


def test_invented_categories_change_nothing_observable():
    # 10^5 categories nobody else holds: no warning, no error, none published
    # (real noise, same seed: the count vector is longer, so no replay).
    X, g, X2, g2 = _invented(100_000)
    make = TRANSFORMERS["encoder"][0]
    a, b = make(), make()
    o1 = observables(lambda: a.fit(X, groups=g), errstate=RAISE)
    o2 = observables(lambda: b.fit(X2, groups=g2), errstate=RAISE)
    compare_observables(o1, o2, what="fit")
    for cats in b.categories_:
        assert not any(str(c).startswith("new") for c in cats.tolist())
    t1 = observables(lambda: a.transform(X2), errstate=RAISE)
    t2 = observables(lambda: b.transform(X2), errstate=RAISE)
    compare_observables(t1, t2, what="transform")


def encoder_leak(monkeypatch, n_new, **params):
    """(probability, charged delta) for a user holding ``n_new`` categories nobody else holds."""
    _, _, X2, g2 = _invented(n_new)
    charged = _charged_threshold_delta(monkeypatch)

    def fit():
        est = PrivateOneHotEncoder(separator="|", max_categories_per_user=2,
                                   random_state=0, **params)
        est.fit(X2, groups=g2)
        return [c for cats in est.categories_ for c in cats.tolist()]

    def is_unique(ids):
        return np.array([str(i).startswith("new") for i in ids.tolist()], dtype=bool)

    p, info = selection_leak_probability(fit, is_unique)
    return p, charged[-1], info


@pytest.mark.parametrize("n_new", [1, 3, 200])
def test_encoder_selection_delta_within_charge(monkeypatch, n_new):
    p, charged, info = encoder_leak(monkeypatch, n_new)
    assert p <= charged * (1 + 1e-9), (
        f"a user holding {n_new} categories nobody else holds publishes one with "
        f"probability {p:.3g} > the delta {charged:.3g} charged")
    if n_new >= 2:  # the cap (2 per column, L = 4 over both columns) is reached
        assert p >= 0.5 * charged


# --------------------------------------------------------------------------- #
# The checks fail on broken variants
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name, module", [("scaler", "_data"), ("imputer_mean", "_impute")])
def test_broken_per_row_statistic_is_caught(monkeypatch, name, module):
    # Broken: each row contributes its own value (as if it were a user).
    import importlib

    mod = importlib.import_module(f"skdpp.preprocessing.{module}")

    def per_row(X, index, mask=None):
        X = np.asarray(X, dtype=np.float64)
        return X if mask is None else np.where(mask, X, np.nan)

    monkeypatch.setattr(mod, "user_means", per_row)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        test_one_user_transformers(name, "many_rows", None)


def test_broken_unclipped_sum_is_caught(monkeypatch):
    # Broken: the location's sum of deviations is not clipped to the radius.
    from skdpp.privacy import _quantile

    def unclipped(values, center, radius):
        dev = _quantile._finite_or(values, center) - center
        return np.array([_quantile._finite_or(dev, 0.0).sum()])

    monkeypatch.setattr(_quantile, "clipped_deviation_sum", unclipped)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        test_one_user_transformers("scaler", "huge", None)


def test_broken_uncapped_candidates_are_caught(monkeypatch):
    # Broken: every category of a user counts (the cap ignored).
    from skdpp.linear_model import _labels
    from skdpp.preprocessing import _encoders

    def uncapped(block, state, max_per_user):
        return _labels.label_counts_block(block, state, 10**9)

    monkeypatch.setattr(_encoders, "label_counts_block", uncapped)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        test_encoder_one_row_user_against_every_category_user()
    with pytest.raises(AssertionError, match="publishes one with probability"):
        test_encoder_selection_delta_within_charge(monkeypatch, 200)
