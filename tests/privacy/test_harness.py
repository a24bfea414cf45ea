"""The privacy harness on the toy estimator: it passes when correct and fails when broken."""

import numpy as np
import pytest
from scipy.stats import chi2
from numpy.testing import assert_allclose

from tests._toy import ToyNoClipping, ToyPerRowClipping, ToyPersonalizedMean
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
)

EPSILON = 1.0
N_AUDIT_RUNS = 400  # per dataset; the bound uses the second half (200 fits each)


def _data(n_users=50, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(n_users * rows, 3))
    y = np.clip(rng.normal(scale=0.5, size=n_users * rows), -1, 1)
    return X, y, groups


def _fitter(cls):
    def fit_on(X, y, groups):
        return cls(epsilon=EPSILON, clip_norm=1.0, random_state=0).fit(X, y, groups)

    return fit_on


# --------------------------------------------------------------------------- #
# (a) sensitivity
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("case", ["huge", "many_rows", "one_row", "zeros"])
def test_sensitivity_holds_for_correct_estimator(case):
    X, y, g = _data()
    neighbours = dict(
        (name, (X2, y2, g2)) for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=7)
    )
    ratios = assert_sensitivity(_fitter(ToyPersonalizedMean), (X, y, g), neighbours[case])
    assert len(ratios) == 1 and ratios[0] <= 1


@pytest.mark.parametrize(
    "broken, case",
    [(ToyNoClipping, "huge"), (ToyPerRowClipping, "many_rows")],
)
def test_sensitivity_catches_broken_clipping(broken, case):
    X, y, g = _data()
    neighbours = dict(
        (name, (X2, y2, g2)) for name, X2, y2, g2 in adversarial_neighbours(X, y, g, user=7)
    )
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(_fitter(broken), (X, y, g), neighbours[case])


def test_adversarial_neighbours_do_not_modify_inputs():
    X, y, g = _data()
    copies = X.copy(), y.copy(), g.copy()
    names = [name for name, *_ in adversarial_neighbours(X, y, g, user=3)]
    assert names == ["huge", "many_rows", "one_row", "zeros"]
    for a, b in zip((X, y, g), copies):
        assert_allclose(a, b, rtol=0, atol=0)


# --------------------------------------------------------------------------- #
# (b) black-box audit with a canary user
# --------------------------------------------------------------------------- #
def _audit(cls, *, canary_rows=1, canary_value=1e3, patch_noise_off=False):
    X, y, g = _data()
    canary_X = np.zeros((canary_rows, X.shape[1]))
    canary_y = np.full(canary_rows, canary_value)
    mine = g == 0
    X2 = np.concatenate([X[~mine], canary_X])
    y2 = np.concatenate([y[~mine], canary_y])
    g2 = np.concatenate([g[~mine], np.zeros(canary_rows, dtype=g.dtype)])

    def run(seed, neighbour):
        est = cls(epsilon=EPSILON, clip_norm=1.0, random_state=seed)
        data = (X2, y2, g2) if neighbour else (X, y, g)
        return est.fit(*data).mean_

    if patch_noise_off:
        with noise_off():
            return audit_epsilon_lower_bound(run, N_AUDIT_RUNS, delta=1e-6)
    return audit_epsilon_lower_bound(run, N_AUDIT_RUNS, delta=1e-6)


def test_audit_lower_bound_below_claimed_epsilon():
    # False-alarm rate of this comparison for a correct implementation: <= alpha = 0.01.
    assert _audit(ToyPersonalizedMean) <= EPSILON


@pytest.mark.parametrize(
    "kwargs",
    [
        {"patch_noise_off": True},  # noise off
        {"cls": ToyNoClipping},  # clipping off, canary with a huge value
        {"cls": ToyPerRowClipping, "canary_rows": 10_000, "canary_value": 1.0},
    ],
    ids=["noise_off", "clipping_off", "per_row_clipping"],
)
def test_audit_catches_broken_variants(kwargs):
    kwargs = dict(kwargs)
    cls = kwargs.pop("cls", ToyPersonalizedMean)
    assert _audit(cls, **kwargs) > EPSILON


# --------------------------------------------------------------------------- #
# (c) noise level
# --------------------------------------------------------------------------- #
def _chi2_band(n, alpha=1e-3):
    return chi2.ppf(alpha / 2, n) / n, chi2.ppf(1 - alpha / 2, n) / n


def _noise_draws(n_fits=300):
    X, y, g = _data()
    draws = []
    for seed in range(n_fits):
        est = ToyPersonalizedMean(epsilon=EPSILON, clip_norm=1.0, random_state=seed)
        draws += record_noise(lambda: est.fit(X, y, g))
    return est, draws


def test_noise_level_matches_ledger():
    est, draws = _noise_draws()
    (entry,) = est.privacy_report_.phases
    for d in draws:
        assert d["kind"] == "gaussian"
        assert_allclose(d["sensitivity"], 2.0, rtol=1e-12)
        assert_allclose(d["scale"], entry.noise_multiplier * d["sensitivity"], rtol=1e-12)
    noise = np.concatenate([np.ravel(d["noise"]) for d in draws]) / draws[0]["scale"]
    # Standardised noise ~ N(0, 1): n * mean(noise**2) ~ chi-square(n); false-alarm rate 0.001.
    low, high = _chi2_band(noise.size)
    assert low < np.mean(noise**2) < high


def test_noise_level_catches_noise_off():
    X, y, g = _data()
    with noise_off():
        draws = record_noise(lambda: ToyPersonalizedMean(random_state=0).fit(X, y, g))
    # With noise patched off, record_noise sees the release unchanged: zero noise.
    assert all(np.all(d["noise"] == 0) for d in draws)
    noise = np.concatenate([np.ravel(d["noise"]) for d in draws])
    low, _ = _chi2_band(noise.size)
    assert np.mean(noise**2) < low


def test_same_observables_passes_for_the_toy_and_catches_a_data_dependent_warning():
    import warnings as _warnings

    from tests.privacy.harness import adversarial_neighbours, assert_same_observables

    X, y, groups = _data()
    _, X2, y2, g2 = next(adversarial_neighbours(X, y, groups, user=groups[0]))

    def fit_on(X_, y_, g_):
        return ToyPersonalizedMean(epsilon=1.0, random_state=0).fit(X_, y_, g_)

    assert_same_observables(fit_on, (X, y, groups), (X2, y2, g2))

    def leaky_fit_on(X_, y_, g_):  # broken: warns about a statistic of the data
        if np.max(np.abs(y_)) > 100:
            _warnings.warn("large targets")
        return fit_on(X_, y_, g_)

    with pytest.raises(AssertionError, match="warnings differ"):
        assert_same_observables(leaky_fit_on, (X, y, groups), (X2, y2, g2))


# --------------------------------------------------------------------------- #
# (d) the one-user catalogue and checks
# --------------------------------------------------------------------------- #
from tests.privacy.harness import (  # noqa: E402
    CATALOGUE,
    WIDE,
    assert_other_users_identical,
    replacement_catalogue,
    selection_leak_probability,
)


@pytest.mark.parametrize("kind", ["regression", "classification", "mf"])
def test_replacement_catalogue_replaces_only_the_user(kind):
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(10), 4)
    if kind == "mf":
        X = rng.integers(0, 6, size=(40, 1))
        y = rng.normal(size=40)
    else:
        X = rng.normal(size=(40, 3))
        y = rng.normal(size=40) if kind == "regression" else rng.integers(0, 3, 40)
    copies = X.copy(), y.copy(), g.copy()
    out = list(replacement_catalogue(X, y, g, 4, kind=kind, catalogue=np.arange(6)))
    assert [name for name, *_ in out] == list(CATALOGUE[kind])
    for name, X2, y2, g2 in out:
        keep = g != 4
        np.testing.assert_array_equal(X2[:keep.sum()], X[keep], err_msg=name)
        np.testing.assert_array_equal(y2[:keep.sum()], y[keep], err_msg=name)
        assert np.all(g2[keep.sum():] == 4) and np.sum(g2 == 4) >= 1, name
        assert X2.shape[1] == X.shape[1], name
    for a, b in zip((X, y, g), copies):
        np.testing.assert_array_equal(a, b)
    wide = [n for n, *_ in replacement_catalogue(X, y, g, 4, kind=kind, wide=True)]
    assert wide[-1] == WIDE[kind][0]


def test_replacement_catalogue_values():
    X, y, g = _data(n_users=5, rows=4)
    cases = {n: (X2, y2) for n, X2, y2, _ in replacement_catalogue(X, y, g, 2)}
    mine = slice(-4, None)
    assert np.all(np.abs(cases["rows_5e-324"][0][mine]) == 5e-324)
    big = cases["rows_max_over_sqrt_d"][0][mine]
    assert np.all(np.isfinite(big))
    fmax = np.finfo(float).max
    np.testing.assert_allclose(np.linalg.norm(big / 1e200, axis=1), fmax / 1e200, rtol=1e-12)
    assert np.all(cases["targets_+1e305"][1][mine] == 1e305)
    assert np.linalg.matrix_rank(cases["rank_deficient_rows"][0][-5:]) == 1


def _selection_fit(counts, max_partitions, delta_t=2.5e-7):
    """A fit that only selects partitions: ids 0.. of ``counts``, published ones returned."""
    from skdpp.privacy import BudgetPlan, Releaser

    def fit():
        plan = BudgetPlan(epsilon=1.0, delta=1e-6)
        plan.add("counts", share=0.5, threshold_delta=delta_t)
        plan.add_rest("other")
        release = Releaser(plan, np.random.default_rng(0))
        keep, _ = release.select_partitions("counts", np.asarray(counts, float),
                                            sensitivity=np.sqrt(2 * max_partitions),
                                            max_contribution=1.0,
                                            max_partitions=max_partitions)
        return np.flatnonzero(keep)
    return fit


def test_selection_leak_probability_is_exact():
    # Two candidates of the replaced user (count 1), cap 2: each published with
    # probability delta_t / 2 exactly, so P(any) = 1 - (1 - delta_t / 2)^2.
    counts = [5000.0, 1.0, 1.0]
    p, info = selection_leak_probability(_selection_fit(counts, 2),
                                         lambda ids: np.asarray(ids) >= 1)
    assert len(info["margins"]) == 2
    np.testing.assert_allclose(p, 1 - (1 - 2.5e-7 / 2) ** 2, rtol=1e-4)


def test_selection_leak_probability_catches_uncapped_candidates():
    # Broken: the user creates 4 candidates while the threshold assumes 2.
    counts = [5000.0, 1.0, 1.0, 1.0, 1.0]
    p, _ = selection_leak_probability(_selection_fit(counts, 2),
                                      lambda ids: np.asarray(ids) >= 1)
    assert p > 1.9 * 2.5e-7


class _Parts:
    _personal_attributes = ("heads_",)

    def __init__(self, heads):
        self.user_ids_ = np.arange(len(heads))
        self.heads_ = np.asarray(heads, dtype=float)


def test_other_users_identical_catches_a_last_bit_change():
    a = _Parts([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    b = _Parts([[1.0, 2.0], [9.0, 9.0], [5.0, 6.0]])
    assert_other_users_identical(a, b, user=1)  # only user 1 changed
    c = _Parts([[1.0, np.nextafter(2.0, 3.0)], [9.0, 9.0], [5.0, 6.0]])
    with pytest.raises(AssertionError, match="joint DP broken"):
        assert_other_users_identical(a, c, user=1)


def test_observables_under_errstate_raise_record_the_exception():
    from tests.privacy.harness import compare_observables, observables

    def divide(x):
        return lambda: np.float64(1.0) / np.float64(x)

    ok = observables(divide(2.0), errstate={"all": "raise"})
    bad = observables(divide(0.0), errstate={"all": "raise"})
    assert ok["error"] is None and bad["error"][0] == "FloatingPointError"
    with pytest.raises(AssertionError, match="whether it succeeds"):
        compare_observables(ok, bad)
    warned = observables(divide(0.0))
    with pytest.raises(AssertionError, match="warnings differ"):
        compare_observables(observables(divide(2.0)), warned)
