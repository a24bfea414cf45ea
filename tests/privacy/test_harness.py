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
