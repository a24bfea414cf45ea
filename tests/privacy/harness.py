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
    adversarial replacements (huge values, 10 000 rows, one row, zeros);
    :func:`replacement_catalogue` the wider catalogue of the one-user fuzz
    suite (``tests/privacy/test_one_user.py``): values at the float maximum
    and subnormal, targets of 1e305, duplicate / equal / rank-deficient rows,
    labels of one class or float-valued, items nobody else rated, items
    outside a public catalogue.

(b) **Black-box audit** (:func:`audit_epsilon_lower_bound`): many seeded fits on
    ``D`` and ``D'``; a threshold test on a scalar statistic is tuned on one half
    of the runs and evaluated on the other; Clopper-Pearson bounds on its false
    positive and true positive rates give a lower bound on epsilon that holds
    with probability at least ``1 - alpha`` for a correct implementation.

(c) **Noise level** (:func:`record_noise`): the noise actually added by each
    release, with its stated scale and sensitivity, so a test can check that the
    noise has the claimed standard deviation and matches the accountant's ledger.

(d) **One-user checks** (:func:`observables`, :func:`assert_same_observables`,
    :func:`personal_parts`, :func:`assert_other_users_identical`,
    :func:`selection_leak_probability`): warnings, printed lines and
    exceptions identical between neighbours (also under the caller's
    ``np.errstate(all="raise")``); every other user's personal part
    bit-identical given the same releases; the exact probability that a
    partition-selection candidate held only by the replaced user is published.

The harness monkeypatches the two sampling hooks of
:mod:`skdpp.privacy.mechanisms` (``_add_noise`` and ``_sample_index``) inside a
context manager and always restores them.
"""

import contextlib
import io
import sys
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from skdpp.privacy import mechanisms

__all__ = [
    "Release",
    "adversarial_neighbours",
    "assert_other_users_identical",
    "assert_releases_within_sensitivity",
    "assert_same_observables",
    "assert_sensitivity",
    "audit_epsilon_lower_bound",
    "clopper_pearson",
    "compare_observables",
    "noise_off",
    "observables",
    "personal_parts",
    "record_noise",
    "record_releases",
    "replacement_catalogue",
    "selection_leak_probability",
]


@dataclass
class Release:
    """One release seen by the harness: its kind, pre-noise value and stated sensitivity."""

    kind: str  # "gaussian", "laplace" or "exponential"
    value: np.ndarray  # pre-noise value (or the score vector of the exponential mechanism)
    sensitivity: float
    output: object = None  # what the patched hook returned (value, or the chosen index)
    phase: str = None  # the plan's phase (when made through a skdpp.privacy.Releaser)


_PHASE = []  # the phase of the Releaser call being made (innermost last)


@contextlib.contextmanager
def _phase_tags():
    """Tag releases made through :class:`skdpp.privacy.Releaser` with their phase."""
    from skdpp.privacy import _release

    cls = _release.Releaser
    names = [n for n in ("gaussian", "laplace", "exponential", "select_partitions")
             if n in vars(cls)]
    saved = {n: vars(cls)[n] for n in names}

    def wrap(method):
        def tagged(self, phase, *args, **kwargs):
            _PHASE.append(phase)
            try:
                return method(self, phase, *args, **kwargs)
            finally:
                _PHASE.pop()
        return tagged

    for n in names:
        setattr(cls, n, wrap(saved[n]))
    try:
        yield
    finally:
        for n in names:
            setattr(cls, n, saved[n])


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
        releases.append(Release(distribution, value, float(sensitivity), out,
                                _PHASE[-1] if _PHASE else None))
        return out

    def sample_index(scores, *, sensitivity, epsilon, rng):
        scores = np.array(scores, dtype=float, copy=True)
        out = _next_replayed("exponential", scores)
        out = _argmax(scores) if out is None else out
        releases.append(Release("exponential", scores, float(sensitivity), out,
                                _PHASE[-1] if _PHASE else None))
        return out

    with _patched(add_noise, sample_index), _phase_tags():
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
    return assert_releases_within_sensitivity(first, second, rtol=rtol)


def assert_releases_within_sensitivity(first, second, *, rtol=1e-9):
    """Assert release ``i`` of ``second`` is within its stated sensitivity of ``first``'s.

    ``second`` replayed ``first`` (:func:`record_releases`). Returns the
    ratios ``distance / sensitivity`` (see :func:`assert_sensitivity`).
    """
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


#: Names of :func:`replacement_catalogue`'s replacements, by kind (``wide``
#: ones only with ``wide=True``).
CATALOGUE = {
    "regression": (
        "rows_1e308", "rows_max_over_sqrt_d", "rows_1e-300", "rows_5e-324",
        "targets_+1e305", "targets_-1e305", "tiny_rows_huge_targets", "single_row",
        "duplicate_rows", "all_equal_rows", "rank_deficient_rows", "zeros", "huge"),
    "classification": (
        "rows_1e308", "rows_max_over_sqrt_d", "rows_1e-300", "rows_5e-324",
        "single_row", "duplicate_rows", "all_equal_rows", "rank_deficient_rows",
        "zeros", "huge", "one_class_labels", "integral_float_labels", "float_labels"),
    "mf": (
        "single_rating", "ratings_+1e305", "ratings_-1e305", "duplicate_ratings",
        "all_equal_ratings", "unique_items", "outside_catalogue", "zeros"),
}
WIDE = {"regression": ("rows_1e5",), "classification": ("rows_1e5",),
        "mf": ("unique_items_1e5",)}


def replacement_catalogue(X, y, groups, user, *, kind="regression", catalogue=None,
                          wide=False, n_unique=500, seed=0):
    """Yield ``(name, X2, y2, groups2)``: ``user``'s rows replaced, one way each.

    The one-user fuzz suite's catalogue of replacements (issue 19, section 3).
    The replaced user keeps its id; every other user's rows are untouched and
    keep their order (the new rows come last). Inputs are not modified.

    Parameters
    ----------
    X, y, groups : arrays
        The dataset. For ``kind="mf"``, ``X`` has one column of integer item ids.
    user : object
        The id of the user to replace (must hold at least one row).
    kind : {"regression", "classification", "mf"}, default="regression"
        Which replacements apply (:data:`CATALOGUE`). ``"classification"``
        keeps the user's labels (they stay in the label set) except in
        ``"one_class_labels"`` (every row gets the dataset's most frequent
        label) and ``"integral_float_labels"`` (the user's labels as floats,
        so that ``y`` becomes float with integral values).
    catalogue : array-like or None
        ``kind="mf"``: the public catalogue; ``"outside_catalogue"`` rates
        items outside it (without a catalogue: items nobody else rated).
    wide : bool, default=False
        Also yield the wide replacements (:data:`WIDE`): ``10**5`` rows, or
        ``10**5`` items nobody else rated.
    n_unique : int, default=500
        ``"unique_items"``: how many items nobody else rated the user rates.
    seed : int, default=0

    Notes
    -----
    ``rows_max_over_sqrt_d`` has entries ``finfo.max / sqrt(d)``: each row's
    norm is the float maximum (finite) while its square overflows;
    ``rows_1e308`` has entries 1e308 (norm overflows); ``rows_5e-324`` is the
    smallest subnormal (its square underflows to 0, ``1 / x`` overflows).
    """
    rng = np.random.default_rng(seed)
    X, y, groups = np.asarray(X), np.asarray(y), np.asarray(groups)
    mine = groups == user
    if not mine.any():
        raise ValueError(f"user {user!r} holds no row")
    keep_X, keep_y, keep_g = X[~mine], y[~mine], groups[~mine]
    uX, uy = X[mine], y[mine]
    n, d = uX.shape[0], X.shape[1]
    names = CATALOGUE[kind] + (WIDE[kind] if wide else ())

    def build(nX, ny):
        nX = np.asarray(nX).reshape(-1, d)
        ny = np.asarray(ny)
        ng = np.full(ny.shape[0], user, dtype=groups.dtype)
        yt = np.result_type(keep_y.dtype, ny.dtype)
        return (np.concatenate([keep_X, nX.astype(X.dtype, copy=False)]),
                np.concatenate([keep_y.astype(yt, copy=False), ny.astype(yt, copy=False)]),
                np.concatenate([keep_g, ng]))

    def signs(shape):
        return np.where(rng.random(shape) < 0.5, -1.0, 1.0)

    out = {}
    if kind == "mf":
        items = uX[:, 0]
        first_new = int(np.max(X[:, 0])) + 1
        if catalogue is not None:
            first_new = max(first_new, int(np.max(np.asarray(catalogue))) + 1)
        rating = float(np.max(np.abs(y))) if y.size else 1.0
        out["single_rating"] = (items[:1], uy[:1])
        out["ratings_+1e305"] = (items, np.full(n, 1e305))
        out["ratings_-1e305"] = (items, np.full(n, -1e305))
        out["duplicate_ratings"] = (np.repeat(items[:1], 50), np.full(50, rating))
        out["all_equal_ratings"] = (items, np.full(n, rating))
        new = first_new + np.arange(n_unique)
        out["unique_items"] = (new, np.full(n_unique, rating))
        out["outside_catalogue"] = (first_new + np.arange(n), uy)
        out["zeros"] = (items, np.zeros(n))
        if wide:
            big = first_new + np.arange(100_000)
            out["unique_items_1e5"] = (big, np.full(big.shape[0], rating))
    else:
        regression = kind == "regression"
        fmax = np.finfo(np.float64).max
        out["rows_1e308"] = (signs(uX.shape) * 1e308, uy)
        out["rows_max_over_sqrt_d"] = (signs(uX.shape) * (fmax / np.sqrt(d)), uy)
        out["rows_1e-300"] = (signs(uX.shape) * 1e-300, uy)
        out["rows_5e-324"] = (signs(uX.shape) * 5e-324, uy)
        if regression:
            out["targets_+1e305"] = (uX, np.full(n, 1e305))
            out["targets_-1e305"] = (uX, np.full(n, -1e305))
            # issue 19, defect 5: a degenerate system whose solve overflows
            # (Gram ~1e-300, moments ~1e155) while its inverse is finite
            out["tiny_rows_huge_targets"] = (uX * 1e-150, np.full(n, 1e305))
        out["single_row"] = (uX[:1], uy[:1])
        out["duplicate_rows"] = (np.repeat(uX[:1], 50, axis=0), np.repeat(uy[:1], 50))
        out["all_equal_rows"] = (np.full(uX.shape, 2.5),
                                 np.full(n, 2.5) if regression else np.repeat(uy[:1], n))
        direction = rng.normal(size=d)
        out["rank_deficient_rows"] = (np.outer(rng.normal(size=max(n, d + 2)), direction),
                                      rng.normal(size=max(n, d + 2)) * np.std(y) + np.mean(y)
                                      if regression else np.resize(uy, max(n, d + 2)))
        out["zeros"] = (np.zeros_like(uX, dtype=float),
                        np.zeros(n) if regression else uy)
        out["huge"] = (uX * 1e6, uy * 1e6 if regression else uy)
        if not regression:
            labels, freq = np.unique(y, return_counts=True)
            out["one_class_labels"] = (uX, np.full(n, labels[np.argmax(freq)], dtype=y.dtype))
            out["integral_float_labels"] = (uX, uy.astype(np.float64))
            out["float_labels"] = (uX, uy.astype(np.float64) + 0.5)
    if wide and kind != "mf":
        idx = rng.integers(0, n, size=100_000)
        out["rows_1e5"] = (uX[idx] * (1 + 0.01 * rng.normal(size=(idx.shape[0], 1))),
                           uy[idx] * 100 + 50 if regression else uy[idx])
    for name in names:
        yield (name, *build(*out[name]))


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


def observables(fit, *, errstate=None):
    """Run ``fit()`` and return what a user could observe besides the releases.

    Parameters
    ----------
    fit : callable
    errstate : dict or None
        Run ``fit()`` under the caller's ``np.errstate(**errstate)`` (e.g.
        ``{"all": "raise"}``): an entry point must not let it turn a
        data-dependent floating-point condition into an exception.

    Returns
    -------
    observed : dict
        ``warnings`` (category name and message of every warning, in order,
        with every filter set to "always"), ``stdout`` (everything printed),
        ``error`` (``None`` or the type name and message of the exception
        ``fit`` raised) and ``result`` (what ``fit()`` returned).
    """
    out = io.StringIO()
    error = result = None
    guard = np.errstate(**errstate) if errstate else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            guard:
        warnings.simplefilter("always")
        try:
            result = fit()
        except AssertionError:  # a check of the harness itself (e.g. a replay mismatch)
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, compared by the caller
            error = (type(exc).__name__, str(exc))
    return {
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
        "stdout": out.getvalue(),
        "error": error,
        "result": result,
    }


def compare_observables(first, second, *, allow_error=False, what="the fit"):
    """Assert two :func:`observables` records are the same (see :func:`assert_same_observables`)."""
    if not allow_error:
        assert first["error"] is None, f"{what} raised on the original data: {first['error']}"
    assert second["error"] == first["error"], (
        f"{what} raised {second['error']} on a neighbouring dataset (one user replaced) "
        f"and {first['error']} on the original; whether it succeeds must not depend on "
        "one user's data")
    assert first["warnings"] == second["warnings"], (
        f"warnings differ between neighbouring datasets ({what}):\n{first['warnings']}\nvs\n"
        f"{second['warnings']}")
    assert first["stdout"] == second["stdout"], (
        f"printed output differs between neighbouring datasets ({what}):\n{first['stdout']}"
        f"\nvs\n{second['stdout']}")


def assert_same_observables(fit_on, data, neighbour, *, errstate=None):
    """Assert that neighbouring datasets give the same warnings, output and errors.

    Nothing observable may depend on one user's data except through a charged
    release (DESIGN §7): a warning, a log line or an exception that appears
    for ``data`` but not for ``neighbour`` (one user replaced) is a
    privacy leak. ``fit_on(X, y, groups)`` must print with ``verbose`` on if
    the estimator has it. Neither fit may raise. ``errstate``: see
    :func:`observables`.

    Returns
    -------
    observed : dict
        What :func:`observables` recorded for ``data``.
    """
    first = observables(lambda: fit_on(*data), errstate=errstate)
    second = observables(lambda: fit_on(*neighbour), errstate=errstate)
    compare_observables(first, second)
    return first


def _user_axis(value, n_users):
    shape = np.shape(value)
    if len(shape) and shape[0] == n_users:
        return 0
    raise AssertionError(f"a personal attribute of shape {shape} has no leading user axis "
                         f"of length {n_users}")


def personal_parts(estimator, users=None):
    """The personal parts of ``users`` (default: every user), by user id.

    Returns
    -------
    parts : dict
        ``{user_id: {attribute: ndarray}}`` over the estimator's
        ``_personal_attributes`` (entries along their leading, per-user axis).
    """
    ids = np.asarray(estimator.user_ids_)
    names = type(estimator)._personal_attributes
    values = {name: np.asarray(getattr(estimator, name)) for name in names}
    for name, value in values.items():
        _user_axis(value, ids.shape[0])
    position = {u: i for i, u in enumerate(ids.tolist())}
    users = ids.tolist() if users is None else list(users)
    return {u: {name: values[name][position[u]] for name in names} for u in users}


def assert_other_users_identical(first, second, user):
    """Assert every user but ``user`` has a bit-identical personal part in both fits.

    ``first`` and ``second`` are estimators fitted (or personalized) on
    neighbouring data with the *same releases* (e.g. the second replaying the
    first's transcript, :func:`record_releases`): joint DP needs each personal
    part to be a function of the releases and that user's rows only, so a
    batched solve's method or fallback must not depend on the stack it is
    solved with.
    """
    a, b = personal_parts(first), personal_parts(second)
    others = [u for u in a if u != user]
    assert sorted(map(str, others)) == sorted(map(str, (u for u in b if u != user))), (
        "the two fits know different users")
    worst = None
    for u in others:
        for name, value in a[u].items():
            other = b[u][name]
            same = np.array_equal(value, other, equal_nan=True) and \
                np.asarray(value).dtype == np.asarray(other).dtype
            if not same:
                diff = float(np.nanmax(np.abs(np.asarray(value, float) - np.asarray(other, float)),
                                       initial=0.0))
                if worst is None or diff > worst[2]:
                    worst = (u, name, diff)
    assert worst is None, (
        f"user {worst[0]!r}'s {worst[1]} changed by up to {worst[2]:.3g} when user {user!r} "
        "was replaced, with every release held fixed: a personal part depends on another "
        "user's data (joint DP broken)")


def _inside(function_name):
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == function_name:
            return True
        frame = frame.f_back
    return False


def selection_leak_probability(fit, is_unique, *, selector="select_partitions",
                               unique_max=1.0, span=60.0, tol=1e-6):
    """Exact probability that a candidate held only by the replaced user is published.

    A private partition selection adds independent Gaussian noise of std
    ``sigma`` to a count per candidate and publishes the candidates whose
    noisy count clears a threshold. This measures, from the estimator's
    behaviour only, for every candidate unique to the replaced user, the
    noise ``m_j`` above which it is published: the fit is rerun with the
    selection's noise set to the same constant ``t sigma`` on every candidate
    whose exact count is at most ``unique_max`` (one user's largest
    contribution; every other candidate, held by many users, gets no noise),
    and ``t`` is bisected at each point where the number of published unique
    candidates steps. With independent noise the probability that at least
    one of them is published is ``1 - prod_j Phi(m_j)``.

    Parameters
    ----------
    fit : callable
        ``fit()`` fits the estimator on the neighbouring dataset and returns
        the published partitions (any iterable of ids).
    is_unique : callable
        ``is_unique(ids)`` -> boolean array: which published ids are unique
        to the replaced user.
    selector : str
        Name of the function that adds the selection's noise (a release made
        from inside a call to it is shifted; every other release is exact).
    unique_max : float, default=1.0
    span : float
        Bisection range ``[-span, span]`` in units of ``sigma``.
    tol : float
        Bisection tolerance in units of ``sigma``.

    Returns
    -------
    probability : float
        The exact publication probability (from the measured thresholds and
        ``sigma``; not sampled).
    details : dict
        ``sigma``, ``margins`` (``m_j / sigma`` of every step, repeated by
        its multiplicity) and ``n_candidates`` (the size of the noisy count
        vector).
    """
    from scipy.special import log_ndtr

    info = {}

    def run(t):
        def add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
            value = np.array(value, dtype=float, copy=True)
            if _inside(selector):
                info["sigma"] = float(scale)
                info["n_candidates"] = int(value.size)
                return value + np.where(value <= unique_max, t * float(scale), 0.0)
            return value

        def sample_index(scores, *, sensitivity, epsilon, rng):
            return _argmax(scores)

        with _patched(add_noise, sample_index):
            published = np.asarray(list(fit()), dtype=object)
        return int(np.sum(is_unique(published))) if published.size else 0

    lo, hi = -span, span
    n_lo, n_hi = run(lo), run(hi)
    assert "sigma" in info, f"no release was made inside {selector}"
    margins = []

    def split(a, na, b, nb):
        if na == nb:
            return
        if b - a <= tol:
            margins.extend([b] * (nb - na))
            return
        m = (a + b) / 2
        nm = run(m)
        split(a, na, m, nm)
        split(m, nm, b, nb)

    split(lo, n_lo, hi, n_hi)
    if n_lo > 0:  # published whatever the noise
        probability = 1.0
    else:  # published when the standardised noise exceeds its margin: never with prob Phi(m)
        probability = float(-np.expm1(np.sum(log_ndtr(np.asarray(margins, dtype=float)))))
    info["margins"] = margins
    return probability, info
