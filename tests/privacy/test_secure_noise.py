"""Secure noise mode: ``skdpp.set_config(noise="secure")`` (OpenDP samplers, OS entropy).

Every privacy-relevant draw must go through the secure source: the tests make
the numpy path raise inside secure mode and count the secure calls; OpenDP's
own privacy map of every release must be at most what the accountant charges
(a broken, under-charging calibration is caught); the default mode is unchanged.
The module is skipped without OpenDP, except the missing-extra test.
"""

import builtins
import importlib.util
import math
import warnings

import numpy as np
import pytest

import skdpp
from skdpp import (
    AdaptiveWeightMF,
    JLMarginClassifier,
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
    config_context,
)
from skdpp.datasets import (
    make_personalized_margin_classification,
    make_shared_representation_regression,
    make_skewed_ratings,
)
from skdpp.exceptions import SecureNoiseSeedWarning
from skdpp.model_selection import PrivateRandomizedSearchCV
from skdpp.privacy import mechanisms
from skdpp.privacy._tuning import RandomStopping

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)


def test_missing_extra_names_install_command(monkeypatch):
    """Without OpenDP, asking for secure mode raises an ImportError naming the extra."""
    real_import = builtins.__import__

    def no_opendp(name, *args, **kwargs):
        if name == "opendp" or name.startswith("opendp."):
            raise ImportError("No module named 'opendp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_opendp)
    with pytest.raises(ImportError, match=r'pip install "skdpp\[secure\]"'):
        skdpp.set_config(noise="secure")
    with pytest.raises(ImportError, match=r"skdpp\[secure\]"):
        with config_context(noise="secure"):
            pass  # pragma: no cover
    assert skdpp.get_config()["noise"] == "numpy"


def test_invalid_mode_names_parameter_and_values():
    with pytest.raises(ValueError, match=r"`noise` must be one of .*'fast'"):
        skdpp.set_config(noise="fast")


requires_opendp = pytest.mark.skipif(
    importlib.util.find_spec("opendp") is None,
    reason='OpenDP is not installed (pip install "skdpp[secure]")')


# --------------------------------------------------------------------------- #
# data and estimators (tiny)
# --------------------------------------------------------------------------- #
def _regression():
    X, y, g, _ = make_shared_representation_regression(
        n_users=120, n_features=4, n_samples_per_user=8, n_test_samples_per_user=0,
        random_state=0)
    return X, y, g


def _classification():
    X, y, g, _ = make_personalized_margin_classification(
        n_users=120, n_features=4, n_samples_per_user=8, random_state=0)
    return X, y, g


def _ratings():
    X, y, g, _ = make_skewed_ratings(n_users=120, n_items=15, random_state=0)
    return X, y, g


CASES = {
    "fedrep": (lambda: PrivateFedRepRegressor(max_iter=2, epsilon=2.0), _regression),
    "altmin": (lambda: PrivAltMinRegressor(epsilon=2.0), _regression),
    "ppsgd": (lambda: PPSGDRegressor(n_rounds=5, sample_rate=0.5, epsilon=2.0),
              _regression),
    "mf": (lambda: AdaptiveWeightMF(n_components=2, n_iter=2, epsilon=2.0, delta=1e-5),
           _ratings),
    "jl": (lambda: JLMarginClassifier(n_candidates=16, n_directions=8, epsilon=2.0),
           _classification),
    "search": (lambda: PrivateRandomizedSearchCV(
        PrivateFedRepRegressor(max_iter=1), {"learning_rate": [0.5, 1.0]}, n_iter=2,
        epsilon=2.0), _regression),
}


class _SecureCounter:
    """Counts the secure draws; makes every numpy privacy draw raise."""

    def __init__(self, monkeypatch):
        self.additive = self.selection = self.trials = self.keys = self.ties = 0
        self.records = []  # (distribution, size, sensitivity, scale) of every release
        secure_additive = mechanisms._secure_additive
        secure_index = mechanisms._secure_index
        sample_count = mechanisms.sample_trial_count
        fit_key = mechanisms.fit_key

        def additive(values, *, distribution, scale, sensitivity):
            assert mechanisms._secure_mode()
            self.additive += 1
            self.records.append((distribution, int(np.size(values)), float(sensitivity),
                                 float(scale)))
            return secure_additive(values, distribution=distribution, scale=scale,
                                   sensitivity=sensitivity)

        def index(scores, *, sensitivity, epsilon):
            self.selection += 1
            self.records.append(("exponential", int(np.size(scores)), float(sensitivity),
                                 float(epsilon)))
            return secure_index(scores, sensitivity=sensitivity, epsilon=epsilon)

        def trials(stopping, rng):
            self.trials += 1
            return sample_count(stopping, _Raising())

        def key(k, random_state=None):
            self.keys += 1
            return fit_key(k, random_state)

        def numpy_noise(*args, **kwargs):
            raise AssertionError("numpy privacy noise drawn in secure mode")

        original_tie = mechanisms._uniform_tie

        def tie(best, rng):
            self.ties += 1
            return original_tie(best, _Raising())

        monkeypatch.setattr(mechanisms, "_secure_additive", additive)
        monkeypatch.setattr(mechanisms, "_secure_index", index)
        monkeypatch.setattr(mechanisms, "sample_trial_count", trials)
        monkeypatch.setattr(mechanisms, "fit_key", key)
        monkeypatch.setattr(mechanisms, "_numpy_noise", numpy_noise)
        monkeypatch.setattr(mechanisms, "_numpy_gumbel", numpy_noise)
        monkeypatch.setattr(mechanisms, "_uniform_tie", tie)


class _Raising:
    """Stands in for a numpy generator: any draw from it is a test failure."""

    def __getattr__(self, name):
        raise AssertionError(f"numpy draw rng.{name} in secure mode")


def _fit(name):
    make, data = CASES[name]
    X, y, g = data()
    est = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y, groups=g)


def _charge_and_map(record):
    """(OpenDP's privacy loss, what the accountant charges) of one recorded release."""
    kind, size, sensitivity, param = record
    if kind == "exponential":
        meas, _, charged = mechanisms._secure_selection(size, sensitivity, param)
        # the ledger's ExponentialEvent(eps): eps-bounded range, zCDP eps^2/8
        assert charged == pytest.approx(param ** 2 / 8.0, rel=1e-15)
    else:
        meas, _, _, charged = mechanisms._secure_measurement(kind, size, sensitivity, param)
        z = param / sensitivity  # the event's noise multiplier
        ledger = 1.0 / (2.0 * z * z) if kind == "gaussian" else 1.0 / z
        assert charged == pytest.approx(ledger, rel=1e-12)
    return float(meas.map(sensitivity)), charged


def _check_charges(records):
    assert records
    for record in records:
        used, charged = _charge_and_map(record)
        assert used <= charged, (record, used, charged)


# --------------------------------------------------------------------------- #
# every estimator and the search, same API, every draw secure
# --------------------------------------------------------------------------- #
@requires_opendp
@pytest.mark.parametrize("name", list(CASES))
def test_fit_in_secure_mode_draws_only_from_secure_source(name, monkeypatch):
    counter = _SecureCounter(monkeypatch)
    with config_context(noise="secure"):
        est = _fit(name)
    report = est.privacy_report_
    assert report.noise_source == "OpenDP exact discrete Gaussian, OS entropy"
    assert "noise: OpenDP exact discrete Gaussian, OS entropy" in str(report)
    assert counter.additive + counter.selection > 0
    assert counter.keys >= 1
    if name == "search":
        assert counter.trials == 1
    # OpenDP's own map of every release is at most what our ledger charges
    _check_charges(counter.records)
    assert math.isfinite(report.epsilon_spent) and report.epsilon_spent <= 2.0 * (1 + 1e-9)
    assert skdpp.get_config()["noise"] == "numpy"


@requires_opendp
def test_numpy_path_raising_is_detected(monkeypatch):
    """Broken variant: the counting patch catches numpy noise drawn in secure mode."""
    _SecureCounter(monkeypatch)
    monkeypatch.setattr(mechanisms, "_secure_mode", lambda: False)  # secure ignored
    with config_context(noise="secure"), pytest.raises(AssertionError, match="numpy"):
        _fit("fedrep")


@requires_opendp
@pytest.mark.parametrize("kind", ["gaussian", "laplace", "exponential"])
def test_opendp_map_at_most_charge_and_undercharge_caught(kind, monkeypatch):
    sens, size = 0.7, 50
    param = 1.3 if kind == "exponential" else 3.1 * sens
    _check_charges([(kind, size, sens, param)])
    # broken variant: a coarse grid and no calibration under-charges the release
    if kind == "exponential":
        def broken(size, sensitivity, epsilon):
            dp = mechanisms._require_opendp()
            dom = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
            meas = dp.m.make_noisy_max(dom, dp.linf_distance(T=float),
                                       dp.zero_concentrated_divergence(),
                                       scale=sensitivity / epsilon)  # forgot the 2
            return meas, sensitivity / epsilon, epsilon ** 2 / 8.0
        monkeypatch.setattr(mechanisms, "_secure_selection", broken)
    else:
        def broken(distribution, size, sensitivity, scale):
            k = math.floor(math.log2(scale)) - 2  # grid far too coarse, not charged
            return (mechanisms._opendp_additive(distribution, size, scale, k), scale, k,
                    mechanisms._opendp_charge(distribution, sensitivity, scale))
        monkeypatch.setattr(mechanisms, "_secure_measurement", broken)
    with pytest.raises(AssertionError):
        _check_charges([(kind, size, sens, param)])


@requires_opendp
def test_secure_release_statistics_and_grid():
    """The secure Gaussian has the planned std (within sampling error), symmetric too."""
    value = np.zeros((40, 3, 3))
    with config_context(noise="secure"):
        out, event = mechanisms.gaussian_mechanism(value, sensitivity=2.0,
                                                   noise_multiplier=1.5, rng=np.random.default_rng(0),
                                                   symmetric=True)
        counts, _ = mechanisms.laplace_mechanism(np.zeros(2000), sensitivity=1.0,
                                                 noise_multiplier=2.0, rng=np.random.default_rng(0))
    assert np.array_equal(out, np.swapaxes(out, -1, -2))
    iu = np.triu_indices(3)
    draws = out[:, iu[0], iu[1]].ravel()
    assert abs(draws.std() - 3.0) < 0.6
    assert abs(np.abs(counts).mean() - 2.0) < 0.3   # Laplace: E|X| = b
    assert event.noise_multiplier == 1.5


@requires_opendp
def test_partition_threshold_covers_grid_and_scale():
    with config_context(noise="secure"):
        secure = mechanisms.gaussian_threshold(2.0, 1e-6, sensitivity=1.0, size=10)
        _, s, k, _ = mechanisms._secure_measurement("gaussian", 10, 1.0, 2.0)
    plain = mechanisms.gaussian_threshold(2.0, 1e-6, sensitivity=1.0, size=10)
    assert s >= 2.0 and secure >= plain + 2.0 * 2.0 ** k


def test_discrete_gaussian_tail_bound_used_by_the_threshold():
    """P[X >= m] <= P[N(0, s^2) >= m - 1] for the discrete Gaussian on Z (exact sums)."""
    from scipy import stats

    for s in (0.3, 0.5, 1.0, 2.0, 5.0, 20.0):
        x = np.arange(-int(60 * s) - 50, int(60 * s) + 50)
        p = np.exp(-x.astype(float) ** 2 / (2 * s * s))
        p /= p.sum()
        for m in range(1, int(8 * s) + 5):
            assert p[x >= m].sum() <= stats.norm.sf((m - 1) / s) * (1 + 1e-12)


# --------------------------------------------------------------------------- #
# seeds, report, trial count, default mode
# --------------------------------------------------------------------------- #
@requires_opendp
def test_int_random_state_warns_once_and_none_does_not():
    X, y, g = _regression()
    with config_context(noise="secure"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            PrivateFedRepRegressor(max_iter=1, random_state=0).fit(X, y, groups=g)
        seeded = [w for w in caught if issubclass(w.category, SecureNoiseSeedWarning)]
        assert len(seeded) == 1 and "random_state=0" in str(seeded[0].message)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            PrivateFedRepRegressor(max_iter=1).fit(X, y, groups=g)
        assert not [w for w in caught if issubclass(w.category, SecureNoiseSeedWarning)]
    with warnings.catch_warnings(record=True) as caught:  # numpy mode: no warning
        warnings.simplefilter("always")
        PrivateFedRepRegressor(max_iter=1, random_state=0).fit(X, y, groups=g)
    assert not [w for w in caught if issubclass(w.category, SecureNoiseSeedWarning)]


@requires_opendp
def test_secure_fits_not_reproducible_from_seed():
    X, y, g = _regression()
    with config_context(noise="secure"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = PrivateFedRepRegressor(max_iter=1, random_state=0).fit(X, y, groups=g)
        b = PrivateFedRepRegressor(max_iter=1, random_state=0).fit(X, y, groups=g)
    assert not np.array_equal(a.components_, b.components_)
    # so the report must not claim the noise is reproducible from the seed
    assert not a.privacy_report_.noise_seeded
    assert "reproducible from random_state" not in str(a.privacy_report_)
    c = PrivateFedRepRegressor(max_iter=1, random_state=0).fit(X, y, groups=g)
    assert c.privacy_report_.noise_seeded  # numpy mode: it is


@requires_opendp
def test_trial_count_from_os_entropy_has_the_law(monkeypatch):
    stop = RandomStopping("poisson", mean=3.0)
    with config_context(noise="secure"):
        draws = [mechanisms.sample_trial_count(stop, _Raising()) for _ in range(3000)]
    assert abs(np.mean(draws) - 3.0) < 0.2 and abs(np.var(draws) - 3.0) < 0.4
    assert mechanisms._OSRandom().poisson(1200.0) > 1000  # split means, no underflow
    tnb = RandomStopping("truncated_negative_binomial", mean=4.0)
    with config_context(noise="secure"):
        draws = [mechanisms.sample_trial_count(tnb, _Raising()) for _ in range(2000)]
    assert abs(np.mean(draws) - 4.0) < 0.5 and min(draws) >= 1


@requires_opendp
def test_default_mode_unchanged_bit_for_bit():
    X, y, g = _regression()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = PrivateFedRepRegressor(max_iter=1, random_state=3).fit(X, y, groups=g)
        with config_context(noise="numpy"):
            b = PrivateFedRepRegressor(max_iter=1, random_state=3).fit(X, y, groups=g)
    assert np.array_equal(a.components_, b.components_)
    assert a.privacy_report_.noise_source == "numpy PCG64 (floating-point samplers)"
    rng = np.random.default_rng(0)
    out, _ = mechanisms.gaussian_mechanism(np.zeros(5), sensitivity=1.0,
                                           noise_multiplier=2.0, rng=rng)
    assert np.array_equal(out, np.random.default_rng(0).normal(0.0, 2.0, size=5))


@requires_opendp
def test_config_is_thread_local():
    import threading

    seen = {}
    with config_context(noise="secure"):
        t = threading.Thread(target=lambda: seen.update(skdpp.get_config()))
        t.start()
        t.join()
        assert skdpp.get_config()["noise"] == "secure"
    assert seen["noise"] == "numpy"


def _keys_differ():
    from skdpp.utils._random import FitRandomness

    with config_context(noise="secure"), warnings.catch_warnings():
        warnings.simplefilter("ignore", SecureNoiseSeedWarning)
        a, b = FitRandomness(0).key, FitRandomness(0).key
    return not np.array_equal(a, b)


@requires_opendp
def test_sampling_key_from_os_entropy(monkeypatch):
    """The Poisson-sampling key ignores the seed in secure mode (a seeded key is caught)."""
    from skdpp.utils._random import FitRandomness

    assert _keys_differ()
    assert np.array_equal(FitRandomness(0).key, FitRandomness(0).key)  # numpy mode
    # broken variant: the key still derived from random_state in secure mode
    monkeypatch.setattr(mechanisms, "fit_key", lambda key, random_state=None: key)
    assert not _keys_differ()


@requires_opendp
def test_environment_variable_sets_new_processes_default(tmp_path):
    """joblib/Dask worker processes do not inherit set_config: SKDPP_NOISE covers them."""
    import os
    import subprocess
    import sys

    code = "import skdpp; print(skdpp.get_config()['noise'])"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "SKDPP_NOISE": "secure"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "secure"
    env["SKDPP_NOISE"] = "fast"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "SKDPP_NOISE must be one of" in bad.stderr
