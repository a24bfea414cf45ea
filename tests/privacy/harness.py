"""Reusable privacy test harness for skdpp estimators.

Three checks, each usable on any estimator whose releases go through
:mod:`skdpp.privacy.mechanisms` (which every skdpp estimator must):

(a) **Sensitivity** (:func:`assert_sensitivity`): with noise patched to zero,
    fit on a dataset ``D``, recording every release before noise; then fit on a
    neighbour ``D'`` (one user replaced) while *replaying* ``D``'s releases, so
    every adaptive step of ``D'`` sees the same transcript, and record ``D'``'s
    pre-noise values. Every release must move by at most its stated sensitivity
    (L2 for Gaussian, L1 for Laplace, L-infinity of the score vector for the
    exponential mechanism). :func:`adversarial_neighbours` yields the standard
    adversarial replacements (huge values, 10 000 rows, one row, zeros).

(b) **Black-box audit** (:func:`audit_epsilon_lower_bound`): many seeded fits on
    ``D`` and ``D'``; a threshold test on a scalar statistic is tuned on one half
    of the runs and evaluated on the other; Clopper-Pearson bounds on its false
    positive and true positive rates give a lower bound on epsilon that holds
    with probability at least ``1 - alpha`` for a correct implementation.

(c) **Noise level** (:func:`record_noise`): the noise actually added by each
    release, with its stated scale and sensitivity, so a test can check that the
    noise has the claimed standard deviation and matches the accountant's ledger.

The harness monkeypatches the two sampling hooks of
:mod:`skdpp.privacy.mechanisms` (``_add_noise`` and ``_sample_index``) inside a
context manager and always restores them.
"""

import contextlib
import io
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from skdpp.privacy import mechanisms

__all__ = [
    "Release",
    "adversarial_neighbours",
    "assert_same_observables",
    "assert_sensitivity",
    "audit_epsilon_lower_bound",
    "clopper_pearson",
    "noise_off",
    "record_noise",
    "record_releases",
]


@dataclass
class Release:
    """One release seen by the harness: its kind, pre-noise value and stated sensitivity."""

    kind: str  # "gaussian", "laplace" or "exponential"
    value: np.ndarray  # pre-noise value (or the score vector of the exponential mechanism)
    sensitivity: float
    output: object = None  # what the patched hook returned (value, or the chosen index)


@contextlib.contextmanager
def _patched(add_noise, sample_index):
    saved = mechanisms._add_noise, mechanisms._sample_index
    mechanisms._add_noise, mechanisms._sample_index = add_noise, sample_index
    try:
        yield
    finally:
        mechanisms._add_noise, mechanisms._sample_index = saved


def _argmax(scores):
    return int(np.argmax(np.asarray(scores)))


@contextlib.contextmanager
def noise_off():
    """Context manager: every release is its exact value; the exponential mechanism is argmax.

    This is the *broken* "noise off" variant used to show that the audit and
    noise-level tests can fail.
    """

    def add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
        return np.array(value, dtype=float, copy=True)

    def sample_index(scores, *, sensitivity, epsilon, rng):
        return _argmax(scores)

    with _patched(add_noise, sample_index):
        yield


def record_releases(fit, replay=None):
    """Call ``fit()`` with noise off, recording every release.

    Parameters
    ----------
    fit : callable
        Fits an estimator (no arguments).
    replay : list of Release or None
        If given, the i-th release *returns* ``replay[i].output`` instead of the
        value computed now (the current pre-noise value is still recorded), so
        the fit follows the transcript of another dataset.

    Returns
    -------
    releases : list of Release
    """
    releases = []

    def _next_replayed(kind, value):
        i = len(releases)
        if replay is None:
            return None
        assert i < len(replay), (
            f"the neighbouring fit made more releases ({i + 1}) than the original "
            f"({len(replay)}): the number of releases must not depend on the data"
        )
        assert replay[i].kind == kind, f"release {i}: kind {kind} != {replay[i].kind}"
        assert np.shape(replay[i].value) == np.shape(value), (
            f"release {i}: shape {np.shape(value)} != {np.shape(replay[i].value)}"
        )
        return replay[i].output

    def add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
        value = np.array(value, dtype=float, copy=True)
        out = _next_replayed(distribution, value)
        out = value.copy() if out is None else np.array(out, copy=True)
        releases.append(Release(distribution, value, float(sensitivity), out))
        return out

    def sample_index(scores, *, sensitivity, epsilon, rng):
        scores = np.array(scores, dtype=float, copy=True)
        out = _next_replayed("exponential", scores)
        out = _argmax(scores) if out is None else out
        releases.append(Release("exponential", scores, float(sensitivity), out))
        return out

    with _patched(add_noise, sample_index):
        fit()
    return releases


def _distance(kind, a, b):
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if kind == "gaussian":
        return float(np.sqrt(np.sum(d**2)))
    if kind == "laplace":
        return float(np.sum(np.abs(d)))
    return float(np.max(np.abs(d))) if d.size else 0.0


def assert_sensitivity(fit_on, data, neighbour, *, rtol=1e-9):
    """Assert every release moves by at most its stated sensitivity between neighbours.

    Parameters
    ----------
    fit_on : callable
        ``fit_on(X, y, groups)`` fits a fresh estimator (seeded identically on
        both calls).
    data, neighbour : tuple (X, y, groups)
        Neighbouring datasets (one user replaced).

    Returns
    -------
    ratios : list of float
        ``distance / sensitivity`` for every release (all <= 1 + rtol).
    """
    first = record_releases(lambda: fit_on(*data))
    second = record_releases(lambda: fit_on(*neighbour), replay=first)
    assert len(first) == len(second), (
        f"number of releases differs between neighbours: {len(first)} vs {len(second)}"
    )
    assert first, "the fit made no release through skdpp.privacy.mechanisms"
    ratios = []
    for i, (r1, r2) in enumerate(zip(first, second)):
        dist = _distance(r1.kind, r1.value, r2.value)
        if r1.sensitivity == 0:
            assert dist == 0, f"release {i} ({r1.kind}) states sensitivity 0 but moved by {dist}"
            ratios.append(0.0)
            continue
        ratio = dist / r1.sensitivity
        assert ratio <= 1 + rtol, (
            f"release {i} ({r1.kind}) moved by {dist:.6g} between neighbouring datasets, "
            f"more than its stated sensitivity {r1.sensitivity:.6g}"
        )
        ratios.append(ratio)
    return ratios


def adversarial_neighbours(X, y, groups, user, *, scale=1e6, n_rows=10_000, seed=0):
    """Yield ``(name, X2, y2, groups2)``: the dataset with ``user``'s rows replaced.

    Replacements: ``"huge"`` (the user's rows times ``scale``), ``"many_rows"``
    (``n_rows`` rows resampled from the user's rows, with large targets),
    ``"one_row"`` (a single row), ``"zeros"`` (all-zero features and targets).
    Inputs are not modified.
    """
    rng = np.random.default_rng(seed)
    X, y, groups = np.asarray(X), np.asarray(y), np.asarray(groups)
    mine = groups == user
    keep_X, keep_y, keep_g = X[~mine], y[~mine], groups[~mine]
    uX, uy = X[mine], y[mine]

    def build(nX, ny):
        ng = np.full(len(ny), user, dtype=groups.dtype)
        return (
            np.concatenate([keep_X, nX]),
            np.concatenate([keep_y, ny]),
            np.concatenate([keep_g, ng]),
        )

    numeric_y = np.issubdtype(y.dtype, np.number)
    yield ("huge", *build(uX * scale, uy * scale if numeric_y else uy))
    idx = rng.integers(0, len(uy), size=n_rows)
    big_y = (uy[idx] * 100 + 50) if numeric_y else uy[idx]
    yield ("many_rows", *build(uX[idx] * 10, big_y))
    yield ("one_row", *build(uX[:1], uy[:1]))
    yield ("zeros", *build(np.zeros_like(uX), np.zeros_like(uy) if numeric_y else uy))


def clopper_pearson(successes, trials, alpha):
    """Two-sided Clopper-Pearson interval ``(low, high)`` at confidence ``1 - alpha``."""
    low = 0.0 if successes == 0 else beta.ppf(alpha / 2, successes, trials - successes + 1)
    high = 1.0 if successes == trials else beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    return float(low), float(high)


def _epsilon_bound(tp, fp, n, delta, alpha):
    """Lower bound on epsilon from a test with ``tp`` / ``fp`` hits out of ``n`` runs each."""
    tpr_lo, _ = clopper_pearson(tp, n, alpha / 2)
    _, fpr_hi = clopper_pearson(fp, n, alpha / 2)
    bounds = [0.0]
    if tpr_lo - delta > 0 and fpr_hi > 0:
        bounds.append(np.log((tpr_lo - delta) / fpr_hi))
    # The complementary test (reject when the statistic is small).
    tnr_lo = 1 - clopper_pearson(fp, n, alpha / 2)[1]
    fnr_hi = 1 - clopper_pearson(tp, n, alpha / 2)[0]
    if tnr_lo - delta > 0 and fnr_hi > 0:
        bounds.append(np.log((tnr_lo - delta) / fnr_hi))
    return float(max(bounds))


def audit_epsilon_lower_bound(run, n_runs, *, delta=0.0, alpha=0.01):
    """Black-box lower bound on epsilon from fits on neighbouring datasets.

    Parameters
    ----------
    run : callable
        ``run(seed, neighbour)`` fits on ``D`` (``neighbour=False``) or ``D'``
        (``True``) with ``random_state=seed`` and returns a scalar statistic.
    n_runs : int
        Fits per dataset; the first half tunes the threshold, the second half
        (fresh seeds) is used for the bound.
    delta : float, default=0.0
        The delta of the guarantee being audited.
    alpha : float, default=0.01
        The bound holds with probability >= 1 - alpha for a correct
        (epsilon, delta)-DP implementation: the false-alarm rate of a test that
        compares it to the claimed epsilon.

    Returns
    -------
    epsilon_lower_bound : float
    """
    seeds = np.arange(n_runs)
    s0 = np.array([run(int(s), False) for s in seeds], dtype=float)
    s1 = np.array([run(int(s) + n_runs, True) for s in seeds], dtype=float)
    half = n_runs // 2
    tune0, test0 = s0[:half], s0[half:]
    tune1, test1 = s1[:half], s1[half:]
    # Tune: the threshold and direction that maximise the bound on the tuning half.
    candidates = np.unique(np.concatenate([tune0, tune1]))
    best, best_t, best_sign = -np.inf, 0.0, 1.0
    for sign in (1.0, -1.0):
        for t in candidates:
            tp = int(np.sum(sign * tune1 >= sign * t))
            fp = int(np.sum(sign * tune0 >= sign * t))
            value = _epsilon_bound(tp, fp, half, delta, alpha)
            if value > best:
                best, best_t, best_sign = value, t, sign
    n_test = n_runs - half
    tp = int(np.sum(best_sign * test1 >= best_sign * best_t))
    fp = int(np.sum(best_sign * test0 >= best_sign * best_t))
    return _epsilon_bound(tp, fp, n_test, delta, alpha)


def record_noise(fit):
    """Call ``fit()`` with real noise, returning what each release added.

    Returns
    -------
    draws : list of dict
        One per noisy release: ``kind``, ``scale`` (std or Laplace b),
        ``sensitivity`` and ``noise`` (the array actually added).
    """
    draws = []
    real_add, real_sample = mechanisms._add_noise, mechanisms._sample_index

    def add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
        out = real_add(
            value,
            distribution=distribution,
            scale=scale,
            sensitivity=sensitivity,
            rng=rng,
            symmetric=symmetric,
        )
        draws.append(
            {
                "kind": distribution,
                "scale": float(scale),
                "sensitivity": float(sensitivity),
                "noise": np.asarray(out, dtype=float) - np.asarray(value, dtype=float),
                "symmetric": symmetric,
            }
        )
        return out

    with _patched(add_noise, real_sample):
        fit()
    return draws


def observables(fit):
    """Run ``fit()`` and return what a user could observe besides the releases.

    Returns
    -------
    observed : dict
        ``warnings`` (category name and message of every warning, in order,
        with every filter set to "always"), ``stdout`` (everything printed)
        and ``error`` (``None`` or the type name and message of the exception
        ``fit`` raised).
    """
    out = io.StringIO()
    error = None
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        try:
            fit()
        except Exception as exc:  # noqa: BLE001 - recorded, compared by the caller
            error = (type(exc).__name__, str(exc))
    return {
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
        "stdout": out.getvalue(),
        "error": error,
    }


def assert_same_observables(fit_on, data, neighbour):
    """Assert that neighbouring datasets give the same warnings, output and errors.

    Nothing observable may depend on one user's data except through a charged
    release (DESIGN §7): a warning, a log line or an exception that appears
    for ``data`` but not for ``neighbour`` (one user replaced) is a
    privacy leak. ``fit_on(X, y, groups)`` must print with ``verbose`` on if
    the estimator has it. Neither fit may raise.

    Returns
    -------
    observed : dict
        What :func:`observables` recorded for ``data``.
    """
    first = observables(lambda: fit_on(*data))
    second = observables(lambda: fit_on(*neighbour))
    assert first["error"] is None, f"the fit raised on the original data: {first['error']}"
    assert second["error"] is None, (
        f"the fit raised on a neighbouring dataset (one user replaced): {second['error']}; "
        "whether fit succeeds must not depend on one user's data")
    assert first["warnings"] == second["warnings"], (
        f"warnings differ between neighbouring datasets:\n{first['warnings']}\nvs\n"
        f"{second['warnings']}")
    assert first["stdout"] == second["stdout"], (
        f"printed output differs between neighbouring datasets:\n{first['stdout']}\nvs\n"
        f"{second['stdout']}")
    return first
