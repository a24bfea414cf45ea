"""Privacy mechanisms: the only place in skdpp where privacy noise is drawn.

Every mechanism is a pure function of ``(value, *, sensitivity, ..., rng)``
returning the release and its :mod:`~skdpp.privacy.events` event. Noise is drawn
only by :func:`_add_noise` (Gaussian, Laplace) and :func:`_sample_index` (the
exponential mechanism), looked up at call time so that the privacy test harness
can monkeypatch them. Sensitivities are under replace-one-user: a sum of
contributions clipped to Frobenius norm ``C`` has L2 sensitivity ``2C``. In every
mechanism ``rng`` (a numpy ``Generator`` or ``RandomState``) serves the default
``noise="numpy"`` source (floating-point samplers, not hardened against floating-point
side channels, Mironov 2012); with :func:`skdpp.set_config` ``noise="secure"`` the
noise comes from OpenDP's exact samplers and the OS source instead (:ref:`secure_noise`).

References
----------
.. [1] Dwork, C. and Roth, A. (2014). The Algorithmic Foundations of
       Differential Privacy.
.. [2] McSherry, F. and Talwar, K. (2007). Mechanism Design via Differential
       Privacy.
.. [3] Cesar, M. and Rogers, R. (2021). arXiv:2004.07223.

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy.mechanisms import gaussian_sum
>>> release, event = gaussian_sum(np.array([[3.0, 4.0], [0.3, 0.4]]), clip_norm=1.0,
...                               noise_multiplier=2.0, rng=np.random.default_rng(0))
>>> release.shape, event
((2,), GaussianEvent(noise_multiplier=2.0))
"""

from __future__ import annotations

import functools
import math
import numbers
import secrets
import warnings

import numpy as np
from scipy import special

from .._config import _require_opendp, get_config
from ._clipping import clip_by_norm
from .events import (ExponentialEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent,
                     _check_real)

__all__ = ["exponential_mechanism", "exponential_mechanism_probabilities",
           "gaussian_mechanism", "gaussian_sum", "laplace_mechanism", "noisy_counts",
           "fit_key", "noise_source", "poisson_sample", "sample_trial_count"]


def _check_nonneg(name, value, *, allow_zero=True, allow_inf=False, remedy=""):
    return _check_real(name, value, cls=None, low=0, low_inclusive=allow_zero,
                       high_inclusive=allow_inf, remedy=remedy)


def _check_rng(rng):
    if not isinstance(rng, (np.random.Generator, np.random.RandomState)):
        raise TypeError(
            "`rng` must be a numpy Generator or RandomState (e.g. from "
            f"sklearn.utils.check_random_state), got {type(rng).__name__}.")


def _mirror_upper(a, check=False):
    """Symmetric matrix from the upper triangle (incl. diagonal) of ``a`` (..., p, p);
    ``+ 0.0`` gives exactly the values of ``triu(a) + triu(a, 1).T``."""
    a = np.asarray(a)
    if check and (a.ndim < 2 or a.shape[-1] != a.shape[-2]):
        raise ValueError(f"symmetric=True needs a value of shape (..., p, p), got {a.shape}.")
    p = a.shape[-1]
    upper = np.triu(np.ones((p, p), dtype=bool))
    out = np.where(upper, a, np.swapaxes(a, -1, -2))
    if out.dtype.kind in "fc":
        out += 0.0
    return out


def _secure_mode():
    """Whether privacy noise comes from the secure source (``noise="secure"``)."""
    return get_config()["noise"] == "secure"


def noise_source():
    """The name of the current noise source, as the privacy report prints it.

    Examples
    --------
    >>> from skdpp.privacy.mechanisms import noise_source
    >>> noise_source()
    'numpy PCG64 (floating-point samplers)'
    """
    if _secure_mode():
        return "OpenDP exact discrete Gaussian, OS entropy"
    return "numpy PCG64 (floating-point samplers)"


def _numpy_noise(distribution, scale, shape, rng):
    """Floating-point noise from ``rng`` (``noise="numpy"``; checked by the caller)."""
    sampler = rng.normal if distribution == "gaussian" else rng.laplace
    return sampler(0.0, scale, size=shape)


# OpenDP grid 2^k, k = floor(log2(scale)) - _GRID_BITS: rounding n entries moves
# them by at most sqrt(n) 2^(k-1) in L2 (n 2^(k-1) in L1), which OpenDP's map adds
# to the sensitivity: below 1e-6 of the charge for any vector that fits in memory.
_GRID_BITS = 40
_CALIBRATION_SLACK = 2.0 ** -40  # relative step when a scale is raised to meet the charge


def _opendp_charge(distribution, sensitivity, scale):
    """What the accountant charges a release: zCDP rho (gaussian), pure eps (laplace)."""
    if distribution == "gaussian":
        return 0.5 * (sensitivity / scale) ** 2
    return sensitivity / scale


def _opendp_domain(size):
    dp = _require_opendp()
    dp.enable_features("contrib")
    return dp, dp.vector_domain(dp.atom_domain(T=float, nan=False), size=int(size))


def _opendp_additive(distribution, size, scale, k):
    dp, domain = _opendp_domain(size)
    if distribution == "gaussian":
        return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale, k=k)
    return dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=scale, k=k)


def _calibrated(make, scale, sensitivity, charged, step, what):
    """``(measurement, scale)``: the first ``make(scale)`` (scale raised by ``step(used /
    charged)`` per try) whose OpenDP map is <= ``charged``; raises after 8 tries."""
    for _ in range(8):
        meas = make(scale)
        used = float(meas.map(sensitivity))
        if used <= charged:
            return meas, scale
        scale *= step(used / charged) * (1.0 + _CALIBRATION_SLACK)
    raise RuntimeError(
        f"OpenDP's {what} could not be calibrated to the charged privacy loss "
        f"{charged!r} (sensitivity {sensitivity!r}): refusing to under-charge it.")


@functools.lru_cache(maxsize=256)
def _secure_measurement(distribution, size, sensitivity, scale):
    """``(measurement, opendp_scale, k, charged)`` of one release, OpenDP's map at
    ``sensitivity`` <= ``charged`` (what the accountant composes); cached (no randomness)."""
    charged = _opendp_charge(distribution, sensitivity, scale)
    k = max(math.floor(math.log2(scale)) - _GRID_BITS, -1074)
    meas, s = _calibrated(lambda s: _opendp_additive(distribution, size, s, k),
                          scale, sensitivity, charged,
                          math.sqrt if distribution == "gaussian" else float,
                          f"{distribution} mechanism (scale {scale!r}, {size} entries)")
    return meas, s, k, charged


def _secure_additive(values, *, distribution, scale, sensitivity):
    """``values`` (1-d) on OpenDP's grid plus exact discrete Gaussian (L2
    ``sensitivity``) or Laplace (L1) noise from the OS source, in one OpenDP call."""
    values = np.ascontiguousarray(values, dtype=float).ravel()
    if values.size == 0:
        return values.copy()
    meas = _secure_measurement(distribution, values.size, float(sensitivity),
                               float(scale))[0]
    # non-finite entries (only at overflow) cannot enter OpenDP's domain
    finite = np.isfinite(values)
    out = np.asarray(meas(np.where(finite, values, 0.0).tolist()), dtype=float)
    return np.where(finite, out, values)


def _add_noise(value, *, distribution, scale, sensitivity, rng, symmetric=False):
    """``value`` plus noise of std / Laplace scale ``scale`` (a new array).

    THE function every mechanism calls to draw additive noise (monkeypatched by the
    privacy harness); ``sensitivity`` calibrates the secure source, ``rng`` serves
    ``noise="numpy"``. ``symmetric``: iid noise on the upper triangle of a (..., p, p)
    value, mirrored (in secure mode only the upper triangles enter OpenDP, one call).
    """
    value = np.asarray(value, dtype=float)
    if symmetric:
        value = _mirror_upper(value, check=True)
    if scale == 0.0:
        return np.array(value, copy=True)
    if _secure_mode():
        if symmetric:
            iu = np.triu_indices(value.shape[-1])
            upper = _secure_additive(value[..., iu[0], iu[1]], distribution=distribution,
                                     scale=scale, sensitivity=sensitivity)
            out = np.zeros_like(value)
            out[..., iu[0], iu[1]] = upper.reshape(value.shape[:-2] + (iu[0].size,))
            return _mirror_upper(out)
        return _secure_additive(value, distribution=distribution, scale=scale,
                                sensitivity=sensitivity).reshape(value.shape)
    noise = _numpy_noise(distribution, scale, value.shape, rng)
    if symmetric:
        noise = _mirror_upper(noise)
    return value + noise


def _uniform_tie(best, rng):
    """A uniformly random element of ``best`` (the secure source in secure mode)."""
    if _secure_mode():
        return int(best[secrets.randbelow(best.size)])
    return int(rng.choice(best))


@functools.lru_cache(maxsize=256)
def _secure_selection(size, sensitivity, epsilon):
    """OpenDP's Gumbel report-noisy-max (scale ``2Δ/ε``: the exponential mechanism)
    calibrated to the charge ``ε²/8`` zCDP; returns ``(measurement, scale, charged)``."""
    dp, domain = _opendp_domain(size)
    charged = epsilon ** 2 / 8.0
    meas, scale = _calibrated(
        lambda s: dp.m.make_noisy_max(domain, dp.linf_distance(T=float),
                                      dp.zero_concentrated_divergence(), scale=s),
        2.0 * sensitivity / epsilon, sensitivity, charged, math.sqrt,
        f"report-noisy-max (epsilon={epsilon!r})")
    return meas, scale, charged


def _secure_index(scores, *, sensitivity, epsilon):
    """The exponential mechanism's draw by OpenDP's exact Gumbel noisy max."""
    meas = _secure_selection(int(scores.size), float(sensitivity), float(epsilon))[0]
    return int(meas(np.asarray(scores, dtype=float).tolist()))


def _sample_index(scores, *, sensitivity, epsilon, rng):
    """The exponential mechanism's draw (Gumbel-max, ``P(i) ∝ exp(ε s_i / (2Δ))``);
    ``epsilon=inf``: argmax, ties uniform. Monkeypatched by the harness."""
    scores = np.asarray(scores, dtype=float)
    if math.isinf(epsilon):
        best = np.flatnonzero(scores == scores.max())
        return int(best[0]) if best.size == 1 else _uniform_tie(best, rng)
    if _secure_mode():
        return _secure_index(scores, sensitivity=sensitivity, epsilon=epsilon)
    # shift by the max score first (exact for nearby scores, no overflow)
    logits = (epsilon / (2.0 * sensitivity)) * (scores - scores.max())
    return int(np.argmax(logits + _numpy_gumbel(scores.shape, rng)))


def _numpy_gumbel(shape, rng):
    """Gumbel noise from ``rng`` (the ``noise="numpy"`` path only)."""
    return rng.gumbel(size=shape)


_Z_REMEDY = "Use noise_multiplier=0 for the non-private baseline."


def _additive(value, distribution, sensitivity, noise_multiplier, rng, symmetric=False):
    """The Gaussian or Laplace mechanism (``distribution``) and its event."""
    sensitivity = _check_nonneg("sensitivity", sensitivity)
    z = _check_nonneg("noise_multiplier", noise_multiplier, remedy=_Z_REMEDY)
    value = np.array(value, dtype=float, copy=True)
    if np.isnan(value).any():
        raise ValueError("`value` contains NaN; privacy mechanisms need finite inputs.")
    if z == 0.0:
        return (_mirror_upper(value, check=True) if symmetric else value), NonPrivateEvent()
    _check_rng(rng)
    release = _add_noise(value, distribution=distribution, scale=z * sensitivity,
                         sensitivity=sensitivity, rng=rng, symmetric=symmetric)
    return release, (GaussianEvent if distribution == "gaussian" else LaplaceEvent)(z)


def gaussian_mechanism(value, *, sensitivity, noise_multiplier, rng, symmetric=False):
    """Release ``value`` with Gaussian noise of std ``noise_multiplier · sensitivity``.

    Parameters
    ----------
    value : array-like
        Pre-noise value (not modified).
    sensitivity : float
        L2 sensitivity Δ >= 0 of ``value`` under replace-one-user.
    noise_multiplier : float
        z >= 0; 0 releases ``value`` without noise (non-private).
    rng : numpy.random.Generator or RandomState
    symmetric : bool, default=False
        ``value`` (..., p, p): release the mirrored upper triangle plus iid noise (Δ
        bounds its sensitivity: ``||u(D)||_2 <= ||D||_F`` for the upper triangle ``u``
        of any difference ``D``).

    Returns
    -------
    release : ndarray
    event : GaussianEvent or NonPrivateEvent

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import gaussian_mechanism
    >>> release, event = gaussian_mechanism(np.eye(2), sensitivity=1.0, noise_multiplier=1.0,
    ...                                     rng=np.random.default_rng(0), symmetric=True)
    >>> bool(np.array_equal(release, release.T)), event
    (True, GaussianEvent(noise_multiplier=1.0))
    """
    return _additive(value, "gaussian", sensitivity, noise_multiplier, rng, symmetric)


def gaussian_sum(contributions, *, clip_norm, noise_multiplier, rng, symmetric=False):
    """Noisy sum of per-user contributions, each clipped to ``clip_norm``.

    Parameters
    ----------
    contributions : array-like of shape (n_users, ...)
        One contribution per user (not modified).
    clip_norm : float or None
        Frobenius clip norm C of each slice; ``None`` only with ``noise_multiplier=0``.
    noise_multiplier : float
        z >= 0; the noise std is ``z · 2C`` (replace-one-user sensitivity 2C).
    rng : numpy.random.Generator or RandomState
    symmetric : bool, default=False
        Symmetric contributions and noise (:func:`gaussian_mechanism`).

    Returns
    -------
    release : ndarray of shape contributions.shape[1:]
    event : GaussianEvent or NonPrivateEvent

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import gaussian_sum
    >>> release, event = gaussian_sum(np.ones((4, 3)), clip_norm=1.0,
    ...                               noise_multiplier=0.0, rng=None)
    >>> release.round(4), event
    (array([2.3094, 2.3094, 2.3094]), NonPrivateEvent())
    """
    z = _check_nonneg("noise_multiplier", noise_multiplier, remedy=_Z_REMEDY)
    if clip_norm is None and z > 0.0:
        raise ValueError(
            "`clip_norm` is None but noise_multiplier > 0: a private sum needs a "
            "finite clip norm (clip_norm=None is only allowed when epsilon=inf).")
    arr = np.asarray(contributions, dtype=float)
    if arr.ndim < 1:
        raise ValueError("`contributions` must have a leading per-user axis.")
    total = clip_by_norm(arr, clip_norm).sum(axis=0)
    sensitivity = 0.0 if clip_norm is None else 2.0 * float(clip_norm)
    return gaussian_mechanism(total, sensitivity=sensitivity, noise_multiplier=z,
                              rng=rng, symmetric=symmetric)


def laplace_mechanism(value, *, sensitivity, noise_multiplier, rng):
    """Release ``value`` with Laplace noise of scale ``noise_multiplier · sensitivity``.

    As :func:`gaussian_mechanism` (no ``symmetric``) with ``sensitivity`` the L1
    sensitivity: pure ``1/z``-DP, a ``LaplaceEvent`` (``NonPrivateEvent`` for z = 0).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import laplace_mechanism
    >>> _, event = laplace_mechanism([3.0, 5.0], sensitivity=2.0, noise_multiplier=4.0,
    ...                              rng=np.random.default_rng(0))
    >>> event
    LaplaceEvent(noise_multiplier=4.0)
    """
    return _additive(value, "laplace", sensitivity, noise_multiplier, rng)


def noisy_counts(counts, *, sensitivity, noise_multiplier, rng, mechanism="gaussian"):
    """Noisy count vector: :func:`gaussian_mechanism` or :func:`laplace_mechanism`
    (``mechanism``), ``sensitivity`` the L2 or L1 sensitivity under replace-one-user.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import noisy_counts
    >>> _, event = noisy_counts([10, 3], sensitivity=2.0, noise_multiplier=1.5,
    ...                         rng=np.random.default_rng(0), mechanism="laplace")
    >>> event
    LaplaceEvent(noise_multiplier=1.5)
    """
    if mechanism not in ("gaussian", "laplace"):
        raise ValueError(f"`mechanism` must be 'gaussian' or 'laplace', got {mechanism!r}.")
    return _additive(counts, mechanism, sensitivity, noise_multiplier, rng)


def _check_selection(scores, sensitivity, epsilon):
    """Validated ``(scores, sensitivity, epsilon)`` of an exponential mechanism."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1 or scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError("`scores` must be a non-empty 1-d array of finite values, got "
                         f"shape {scores.shape}.")
    return (scores, _check_nonneg("sensitivity", sensitivity, allow_zero=False),
            _check_nonneg("epsilon", epsilon, allow_zero=False, allow_inf=True,
                          remedy="Use epsilon=np.inf for a non-private argmax."))


def exponential_mechanism_probabilities(scores, *, sensitivity, epsilon):
    """Selection probabilities ``softmax(ε s / (2Δ))`` of the exponential mechanism
    (log-sum-exp), shape (n_candidates,); parameters as
    :func:`exponential_mechanism`; ``epsilon=inf``: uniform over the argmax set.

    Examples
    --------
    >>> from skdpp.privacy.mechanisms import exponential_mechanism_probabilities
    >>> exponential_mechanism_probabilities([0.0, 1.0], sensitivity=1.0,
    ...                                     epsilon=2.0).round(4)
    array([0.2689, 0.7311])
    """
    scores, sensitivity, epsilon = _check_selection(scores, sensitivity, epsilon)
    if math.isinf(epsilon):
        best = scores == scores.max()
        return best / best.sum()
    logits = (epsilon / (2.0 * sensitivity)) * (scores - scores.max())
    return np.exp(logits - special.logsumexp(logits))


def exponential_mechanism(scores, *, sensitivity, epsilon, rng):
    """Select an index with probability ∝ ``exp(ε · score / (2Δ))``.

    Parameters
    ----------
    scores : array-like of shape (n_candidates,)
        Finite quality scores (higher is better).
    sensitivity : float
        Δ > 0: max change of any score under replace-one-user (L∞).
    epsilon : float
        ε in ``(0, inf]``; ``inf`` returns the argmax (ties at random).
    rng : numpy.random.Generator or RandomState

    Returns
    -------
    index : int
    event : ExponentialEvent or NonPrivateEvent
        The selection is ε-DP and ε-bounded-range.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import exponential_mechanism
    >>> exponential_mechanism([0.0, 0.0, 50.0], sensitivity=1.0, epsilon=1.0,
    ...                       rng=np.random.default_rng(0))
    (2, ExponentialEvent(epsilon=1.0))
    """
    scores, sensitivity, epsilon = _check_selection(scores, sensitivity, epsilon)
    _check_rng(rng)
    index = int(_sample_index(scores, sensitivity=sensitivity, epsilon=epsilon, rng=rng))
    event = NonPrivateEvent() if math.isinf(epsilon) else ExponentialEvent(epsilon)
    return index, event


def poisson_sample(key, user_hash, round_index, sampling_rate):
    """Poisson client sampling: the mask (n_users,) of users in round ``round_index``.

    Each user takes part w.p. ``sampling_rate`` in ``(0, 1]``, by a keyed hash of
    (``key``, user id hash, round) (:func:`skdpp.utils._random.keyed_uniform`).
    Amplification (``PoissonSampledEvent``) needs the secret ``key`` (uint64, (2,))
    and the sample kept secret: never printed, logged or released.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import poisson_sample
    >>> key = np.array([3, 4], dtype=np.uint64)
    >>> mask = poisson_sample(key, np.arange(10_000, dtype=np.uint64), 0, 0.1)
    >>> 900 < int(mask.sum()) < 1100
    True
    """
    from ..utils._random import keyed_uniform

    user_hash = np.asarray(user_hash, dtype=np.uint64)
    if sampling_rate >= 1.0:
        return np.ones(user_hash.shape[0], dtype=bool)
    return keyed_uniform(key, "poisson-sample", user_hash, int(round_index)) < sampling_rate


def fit_key(key, random_state=None):
    """The secret key of a fit's client sampling: ``key`` with ``noise="numpy"``; 128
    bits of :func:`secrets.token_bytes` with ``noise="secure"`` (an int
    ``random_state`` then warns, :class:`~skdpp.exceptions.SecureNoiseSeedWarning`).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy.mechanisms import fit_key
    >>> fit_key(np.array([1, 2], dtype=np.uint64)).tolist()
    [1, 2]
    """
    if not _secure_mode():
        return key
    warn_seeded_secure(random_state)
    return np.frombuffer(secrets.token_bytes(16), dtype=np.uint64).copy()


def warn_seeded_secure(random_state):
    """Warn that an int ``random_state`` cannot seed secure noise (data-independent)."""
    if _secure_mode() and isinstance(random_state, numbers.Integral) \
            and not isinstance(random_state, bool):
        from ..exceptions import SecureNoiseSeedWarning

        warnings.warn(
            f"random_state={int(random_state)!r} cannot seed secure noise (noise='secure' "
            "draws from OpenDP and the OS entropy): it seeds only the public randomness "
            "(initialisation, candidates). Use random_state=None.",
            SecureNoiseSeedWarning, stacklevel=4)


class _OSRandom:
    """The two draws of ``RandomStopping.sample`` from :mod:`secrets`."""

    @staticmethod
    def random():
        """A uniform on the 2^-53 grid of [0, 1)."""
        return secrets.randbits(53) * 2.0 ** -53

    def poisson(self, mean):
        """Poisson(mean) by CDF inversion, in parts of mean <= 500 (a sum of Poissons is
        Poisson) so that ``exp(-mean)`` never underflows."""
        mean = float(mean)
        total = 0
        while mean > 0.0:
            part = min(mean, 500.0)
            mean -= part
            u = self.random()
            p = math.exp(-part)
            cdf, k = p, 0
            while cdf <= u:
                k += 1
                p *= part / k
                cdf += p
                if p <= 1e-17 * cdf:  # float CDF no longer moves
                    break
            total += k
        return total


def sample_trial_count(stopping, rng):
    """The private search's number of trials ``K`` (``stopping.sample``) from ``rng``, or
    from :mod:`secrets` with ``noise="secure"`` (``K`` must stay secret)."""
    return int(stopping.sample(_OSRandom() if _secure_mode() else rng))


def gaussian_threshold(sigma, tail, *, sensitivity, size):
    """Noise level exceeded with probability <= ``tail`` by a release's noise.

    ``sigma Φ⁻¹(1 - tail)`` for numpy's Gaussian (``sigma = z Δ``). Secure mode:
    OpenDP's discrete Gaussian of scale ``s >= sigma`` on the grid ``g = 2^k``, added
    to the count rounded to the grid (moved by <= ``g/2``), has ``P[X >= t] <= P[N(0,
    s²) >= t - g]`` (Canonne, Kamath & Steinke 2020): threshold ``s Φ⁻¹(1 - tail) +
    2g`` (``sensitivity``: L2 of the ``size`` counts of the call).
    """
    q = float(special.ndtri(1.0 - tail))
    if not _secure_mode():
        return sigma * q
    _, s, k, _ = _secure_measurement("gaussian", int(size), float(sensitivity), float(sigma))
    return s * q + 2.0 * 2.0 ** k
