"""What the private transformers share: the fit template and the private statistics.

:class:`BasePrivateTransformer` is the preprocessing counterpart of
:class:`skdpp.base.BasePersonalizedEstimator`: the privacy parameters, the
meaning of ``groups`` (one user id per row, ``None``: every row its own user),
``groups`` requested by ``fit`` for metadata routing, every entry point under
:func:`skdpp.base.quiet_numerics`, and the fixed ``fit`` order -- validate,
plan the budget (calibrated once), make every release through one
:class:`~skdpp.privacy.Releaser`, build and check ``privacy_report_`` from its
ledger, only then set the fitted attributes.

The private statistics of one scalar per user (a column's per-user mean, a
per-user mean squared deviation) reuse :mod:`skdpp.privacy._quantile`:

* :func:`scale_free_location` -- a released magnitude (one noisy bisection of
  the users' ``|v_i|`` on a public log grid spanning the float range) makes
  the values unit-free, then :func:`~skdpp.privacy._quantile.private_location`
  (median, radius, clipped mean) runs on ``v_i / c``. Without the magnitude a
  raw Unix timestamp (``~1.6e9``) lies above the public grid of
  ``private_location`` (``1e-8 .. 1e8``) and its location would be off by an
  order of magnitude.
* :func:`scale_free_median` -- the same magnitude, then the median steps of
  ``private_location`` (coarse signed log grid, ``FINE_LEVELS`` linear
  refinements) built from the public helpers of that module.
"""

import functools
import inspect
import warnings
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval

from ..base import BasePersonalizedEstimator, quiet_numerics
from ..exceptions import UselessFitWarning
from ..privacy import Releaser
from ..privacy._quantile import (
    FINE_LEVELS,
    FINE_SIZE,
    LOCATION_SEARCH_STEPS,
    _cell,
    private_location,
    private_quantile,
    quantile_grid,
    search_steps,
    value_counts,
)
from ..utils._grouped import UserIndex, canonical_order
from ..utils._random import FitRandomness, row_hashes

__all__ = ["BasePrivateTransformer", "MAGNITUDE_GRID", "MAGNITUDE_STEPS", "MEDIAN_STEPS",
           "SCALE_FREE_STEPS", "saturate", "scale_free_location", "scale_free_median",
           "user_means"]

#: Public log grid of the magnitude search: 128 candidates from 1e-300 to
#: 1e300 (adjacent candidates differ by a factor 10**(600/127) ~ 5.4e4, so the
#: released magnitude is within a factor ~230 of the users' median ``|v_i|``:
#: the values divided by it fall well inside the grids of ``private_location``).
MAGNITUDE_GRID = quantile_grid(size=128, low=1e-300, high=1e300)
#: Releases of one magnitude search.
MAGNITUDE_STEPS = search_steps(MAGNITUDE_GRID)
#: Count releases (phase ``"clip"``) of :func:`scale_free_location` (its mean
#: is one more release, of the caller's mean phase).
SCALE_FREE_STEPS = MAGNITUDE_STEPS + LOCATION_SEARCH_STEPS
#: Count releases of :func:`scale_free_median`.
MEDIAN_STEPS = (MAGNITUDE_STEPS + search_steps(2 * quantile_grid().shape[0])
                + FINE_LEVELS * search_steps(FINE_SIZE))
#: The phase of every noisy count of a search (sensitivity 1 each).
CLIP_PHASE = "clip"
#: A fit whose counts of phase "clip" have a noise std above this fraction of the
#: number of users falls back to the transformer's prior, with a
#: ``UselessFitWarning`` (see ``BasePrivateTransformer._useless_message``). A
#: little above the target of the automatic share rule (``AUTO_CLIP_NOISE`` =
#: 1/8): fits the share rule could not bring to its target but that are still
#: reliable (about 1 in 150 off at 0.14) keep their releases.
USELESS_SEARCH_NOISE = 0.15
_FLOAT_MAX = np.finfo(np.float64).max


# --------------------------------------------------------------------------- #
# Private statistics of one scalar per user
# --------------------------------------------------------------------------- #
def user_means(X, index, mask=None):
    """Per-user means of the columns of ``X`` (of the entries where ``mask``).

    ``sum_r x_r / m`` (no overflow for finite values: every term is at most
    ``max |x| / m``). A user with no entry in a column gets NaN there.

    Returns
    -------
    means : ndarray of shape (n_users, n_features)
    """
    X = np.asarray(X, dtype=np.float64)
    # Rows in canonical order (by user, then content), so that the sums -- and
    # every released value -- are a function of the set of records.
    order = canonical_order(index.codes, index.n_users, row_hashes(X))
    X, codes = X[order], index.codes[order]
    starts = index.offsets[:-1][index.counts > 0]

    def sums(values):
        out = np.zeros((index.n_users,) + values.shape[1:])
        out[index.counts > 0] = np.add.reduceat(values, starts, axis=0)
        return out

    if mask is None:
        w = 1.0 / index.counts
        return sums(X * w[codes][:, None])
    mask = np.asarray(mask)[order]
    n_obs = sums(mask.astype(np.float64))
    w = np.divide(1.0, n_obs, out=np.zeros_like(n_obs), where=n_obs > 0)
    return np.where(n_obs > 0, sums(np.where(mask, X, 0.0) * w[codes]), np.nan)


def _magnitude(release, values, n_users):
    """A released scale ``c > 0`` of ``|values|`` (their median magnitude, on a wide grid)."""
    counts = value_counts(np.abs(values), MAGNITUDE_GRID)
    c = private_quantile(release, CLIP_PHASE, counts, MAGNITUDE_GRID, quantile=0.5,
                         n_users=n_users)
    return float(c) if np.isfinite(c) and c > 0 else 1.0


def scale_free_location(release, values, *, n_users, mean_phase):
    """The DP location of one scalar per user, whatever its scale and offset.

    1. ``c``: the median of ``|v_i|`` on :data:`MAGNITUDE_GRID` (noisy
       bisection, :data:`MAGNITUDE_STEPS` counts of sensitivity 1);
    2. :func:`~skdpp.privacy._quantile.private_location` of ``v_i / c``
       (``LOCATION_SEARCH_STEPS`` counts of sensitivity 1, phase ``"clip"``;
       the mean of the values clipped to a released radius ``R`` around a
       released median, one Gaussian release of sensitivity ``2 R`` in phase
       ``mean_phase``), times ``c``.

    Parameters
    ----------
    release : Releaser
    values : ndarray of shape (n_users,)
        One value per user (non-finite: above every candidate in the
        searches, 0 in the clipped sum -- e.g. a user without observations).
    n_users : float
        The number of users the quantiles and the mean refer to (public, or a
        released count).
    mean_phase : str

    Returns
    -------
    location : float
    scale : float
        ``c``, the released magnitude.
    """
    c = _magnitude(release, values, n_users)
    scaled = np.asarray(values, dtype=np.float64) / c
    location, _ = private_location(release, lambda fn: fn(scaled), n_users=n_users,
                                   search_phase=CLIP_PHASE, mean_phase=mean_phase,
                                   radius_quantile=radius_quantile(release, n_users))
    return c * location, c


#: Range of the quantile of the distances to the median that becomes the
#: clip radius of :func:`scale_free_location` (see :func:`radius_quantile`).
RADIUS_QUANTILES = (0.5, 0.9)


def radius_quantile(release, n_users):
    """The radius quantile ``q = clip(1 - 3 sigma / n, 0.5, 0.9)`` (public values only).

    ``sigma`` is the noise std of one count of phase ``"clip"``. A noisy
    bisection for the ``q`` quantile goes astray when the target ``q n`` is
    within the noise of the largest count ``n``: every count beyond the true
    quantile is then "not enough" with a large probability and the radius
    lands orders of magnitude too far (measured: 2000 users at epsilon=1,
    sigma = 0.11 n, ``q = 0.9``: a variance 36 times too large in one fit of
    three). Keeping ``q n`` three noise std below ``n`` costs a clipping bias
    (a skewed statistic's mean is underestimated) only where the noise forces
    it.
    """
    sigma = float(release.noise_multiplier(CLIP_PHASE))
    q = 1.0 - 3.0 * sigma / max(float(n_users), 1.0)
    return float(np.clip(q, *RADIUS_QUANTILES))


def scale_free_median(release, values, *, n_users):
    """The DP median of one scalar per user (:data:`MEDIAN_STEPS` counts, phase ``"clip"``).

    The magnitude step of :func:`scale_free_location`, then the median steps
    of :func:`~skdpp.privacy._quantile.private_location`: a noisy bisection
    on the signed log grid, refined ``FINE_LEVELS`` times on ``FINE_SIZE``
    linear candidates inside the selected cell. Its resolution is
    ``|median| * 0.79 / 256**2`` (plus the rank error of the noisy counts).
    """
    c = _magnitude(release, values, n_users)
    scaled = np.asarray(values, dtype=np.float64) / c
    grid = quantile_grid(signed=True)
    median = private_quantile(release, CLIP_PHASE, value_counts(scaled, grid), grid,
                              quantile=0.5, n_users=n_users)
    for _ in range(FINE_LEVELS):
        grid = np.linspace(*_cell(grid, int(np.searchsorted(grid, median))), FINE_SIZE)
        median = private_quantile(release, CLIP_PHASE, value_counts(scaled, grid), grid,
                                  quantile=0.5, n_users=n_users)
    return c * median


def saturate(values):
    """``values`` with overflows saturated at the float64 range (NaN unchanged).

    A transform of a finite row never returns ``inf``: whether a pipeline
    runs must not depend on one user's values being large.
    """
    return np.clip(values, -_FLOAT_MAX, _FLOAT_MAX)


# --------------------------------------------------------------------------- #
# The base class
# --------------------------------------------------------------------------- #
#: Public methods of every private transformer that run under ``quiet_numerics``.
ENTRY_POINTS = ("fit", "transform", "fit_transform", "inverse_transform")


def _quiet(method):
    @functools.wraps(method)
    def entry_point(self, *args, **kwargs):
        with quiet_numerics():
            return method(self, *args, **kwargs)

    entry_point._quiet_entry_point = True
    return entry_point


class BasePrivateTransformer(TransformerMixin, BaseEstimator):
    """Base class of the user-level DP transformers of :mod:`skdpp.preprocessing`.

    Subclasses implement ``_validate_fit_input(X)`` (returns the validated
    data), ``_budget_plan(meta)`` (an uncalibrated
    :class:`~skdpp.privacy.BudgetPlan`) and ``_fit_core(data, index, release,
    n_users)`` returning ``(attributes, released, notes)``; and ``transform``.

    Notes
    -----
    **Privacy unit.** One user: all rows sharing a ``groups`` value; the
    neighbouring relation is *replace one user's entire data*; the number of
    users is public. ``groups=None``: every row is its own user (row-level
    DP). Every fitted attribute is a DP release or a function of releases and
    public parameters; the transformers keep nothing per user.
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, np.inf, closed="right")],
        "delta": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    # Route ``groups`` to fit by default once metadata routing is enabled.
    __metadata_request__fit = {"groups": True}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ENTRY_POINTS:
            method = inspect.getattr_static(cls, name, None)
            if not inspect.isfunction(method) or getattr(method, "_quiet_entry_point", False):
                continue
            setattr(cls, name, _quiet(method))

    def fit(self, X, y=None, groups=None):
        """Fit the transformer's statistics under user-level DP.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : None
            Ignored.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (the privacy unit). ``None``: every row is
            its own user (row-level DP).

        Returns
        -------
        self : object
            Fitted transformer, with ``privacy_report_``.
        """
        self._validate_params()
        BasePersonalizedEstimator._validate_privacy_params(self)
        with np.errstate(over="ignore", invalid="ignore"):
            data = self._validate_fit_input(X)
        n_samples = _num_rows(data)
        index = UserIndex.from_groups(groups, n_samples)
        n_users = int(index.n_users)
        # A warning on public values only (the number of users is public).
        BasePersonalizedEstimator._check_delta(self, n_users)
        randomness = FitRandomness(self.random_state)
        meta = {"n_users": n_users, "n_features": self._n_columns(data)}
        release = Releaser(self._budget_plan(meta), randomness.noise,
                           seeded=randomness.seeded)
        attributes, released, notes = self._fit_core(data, index, release, n_users)
        message = self._useless_message(release.plan, n_users)
        if message is not None:
            # The releases were made as planned (the ledger is the plan's); they are
            # replaced by the transformer's prior (post-processing).
            warnings.warn(message, UselessFitWarning, stacklevel=2)
            attributes = {**attributes, **self._prior_attributes(attributes)}
            notes = tuple(notes) + (message,)
        report = release.report(n_users=n_users, released=released, local=(), notes=notes)
        for name, value in attributes.items():
            setattr(self, name, value)
        self.n_users_ = n_users
        self.privacy_report_ = report
        return self

    def _useless_message(self, plan, n_users):
        """The warning of a fit whose searches are predicted to go astray (else None).

        A public rule (``n_users``, epsilon, delta and the plan): the noise std of
        one count of phase ``"clip"`` above :data:`USELESS_SEARCH_NOISE` times the
        number of users. Measured on a year-like column (600 users, 150 seeds of
        ``PrivateSimpleImputer``): count noise 0.23 n gave a mean more than 100
        off in 17 fits (one at -1.2e29 on MovieLens), 0.18 n in 3, 0.14 n in 1.
        """
        if CLIP_PHASE not in plan or not self._prior_attributes({}):
            return None
        sigma = float(plan[CLIP_PHASE])
        if not np.isfinite(sigma) or sigma <= USELESS_SEARCH_NOISE * max(n_users, 1):
            return None
        return (f"{type(self).__name__}: with {n_users} users at epsilon={self.epsilon!r} "
                f"the private searches count users with noise std {sigma:.3g} > "
                f"{USELESS_SEARCH_NOISE:g} * n_users, so the released statistics could be "
                f"anywhere; the transformer uses its prior instead "
                f"({self._prior_description()}). Give this step a larger share of the "
                f"budget (split_budget shares), a larger epsilon, or fit on more users. "
                f"(A data-independent rule: n_users, epsilon, delta and the plan.)")

    def _prior_attributes(self, attributes):
        """Fitted attributes of the prior a useless fit falls back to ({}: none)."""
        return {}

    def _prior_description(self):
        return ""

    @staticmethod
    def _n_columns(data):
        """The public number of columns of validated data (an array or the encoder's dict)."""
        return data.shape[1] if hasattr(data, "shape") else len(data["columns"])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.requires_fit = True
        return tags


def _num_rows(data):
    return data.shape[0] if hasattr(data, "shape") else data["n_samples"]

