"""What the private transformers share: the fit template and the private statistics
(whose magnitude search spans the float range: a raw Unix timestamp is located)."""

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
from ..privacy._plan import phase_shares, resolve_clip_share
from ..privacy._clipping import FLOAT_MAX
from ..privacy._quantile import (
    CLIP_PHASE,
    LOCATION_SEARCH_STEPS,
    REFINED_MEDIAN_STEPS,
    private_location,
    private_quantile,
    quantile_grid,
    refined_median,
    search_steps,
    value_counts,
)
from ..utils._grouped import UserIndex, canonical_order
from ..utils._random import FitRandomness, row_hashes

__all__ = ["BasePrivateTransformer", "MAGNITUDE_GRID", "MAGNITUDE_STEPS", "MEDIAN_STEPS",
           "SCALE_FREE_STEPS", "saturate", "scale_free_location", "scale_free_median",
           "user_means"]

#: Public log grid of the magnitude search (128 values, 1e-300 .. 1e300: within a
#: factor ~230 of the users' median ``|v_i|``).
MAGNITUDE_GRID = quantile_grid(size=128, low=1e-300, high=1e300)
#: Releases of one magnitude search.
MAGNITUDE_STEPS = search_steps(MAGNITUDE_GRID)
#: Count releases (phase ``"clip"``) of :func:`scale_free_location` (plus its mean).
SCALE_FREE_STEPS = MAGNITUDE_STEPS + LOCATION_SEARCH_STEPS
#: Count releases of :func:`scale_free_median`.
MEDIAN_STEPS = MAGNITUDE_STEPS + REFINED_MEDIAN_STEPS
#: Count noise std (fraction of the users) above which a fit falls back to the prior
#: (``_useless_message``); a little above the share rule's target 1/8.
USELESS_SEARCH_NOISE = 0.15


def user_means(X, index, mask=None):
    """Per-user means (n_users, n_features) of the columns of ``X`` (entries where
    ``mask``; NaN without one), as ``sum_r x_r / m``: no overflow."""
    X = np.asarray(X, dtype=np.float64)
    # canonical order: the sums are a function of the set of records
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
    """A released scale ``c > 0`` of ``|values|`` (their median magnitude, on a wide
    grid) and ``values / c``."""
    counts = value_counts(np.abs(values), MAGNITUDE_GRID)
    c = private_quantile(release, CLIP_PHASE, counts, MAGNITUDE_GRID, quantile=0.5,
                         n_users=n_users)
    c = float(c) if np.isfinite(c) and c > 0 else 1.0
    return c, np.asarray(values, dtype=np.float64) / c


def scale_free_location(release, values, *, n_users, mean_phase):
    """The DP location of one scalar per user (``values``; non-finite: above every
    candidate, 0 in the sum), whatever its scale; returns ``(location, c)``.

    ``c`` (median of ``|v_i|``, :data:`MAGNITUDE_STEPS` counts of sensitivity 1)
    times :func:`~skdpp.privacy._quantile.private_location` of ``v_i / c``
    (counts of sensitivity 1, then a mean clipped to a released radius ``R``:
    sensitivity ``2 R`` in ``mean_phase``); :ref:`preprocessing_statistics`.
    ``n_users`` is public or a released count.
    """
    c, scaled = _magnitude(release, values, n_users)
    location, _ = private_location(release, lambda fn: fn(scaled), n_users=n_users,
                                   search_phase=CLIP_PHASE, mean_phase=mean_phase,
                                   radius_quantile=radius_quantile(release, n_users))
    return c * location, c


#: Range of the quantile of the distances to the median that becomes the clip radius.
RADIUS_QUANTILES = (0.5, 0.9)


def radius_quantile(release, n_users):
    """The radius quantile ``q = clip(1 - 3 sigma / n, 0.5, 0.9)`` (public values only),
    ``sigma`` the noise std of one ``"clip"`` count (:ref:`preprocessing_statistics`)."""
    sigma = float(release.noise_multiplier(CLIP_PHASE))
    q = 1.0 - 3.0 * sigma / max(float(n_users), 1.0)
    return float(np.clip(q, *RADIUS_QUANTILES))


def scale_free_median(release, values, *, n_users):
    """The DP median of one scalar per user (:data:`MEDIAN_STEPS` counts, phase
    ``"clip"``): the magnitude of :func:`scale_free_location`, then
    :func:`~skdpp.privacy._quantile.refined_median` of ``v_i / c``."""
    c, scaled = _magnitude(release, values, n_users)
    return c * refined_median(release, CLIP_PHASE, lambda fn: fn(scaled), n_users=n_users)


def saturate(values):
    """``values`` saturated at the float64 range (NaN unchanged): whether a pipeline
    runs must not depend on one user's values being large."""
    return np.clip(values, -FLOAT_MAX, FLOAT_MAX)


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

    ``fit`` (entry points under :func:`skdpp.base.quiet_numerics`): validate,
    plan, release through one :class:`~skdpp.privacy.Releaser`, report, set
    attributes. Subclasses implement ``_validate_fit_input(X) -> (data, n_samples,
    n_features)``, ``_plan(n_features, clip_share)`` (or ``_budget_plan(meta)``),
    ``_fit_core(data, index, release, n_users)`` returning ``(attributes,
    released, notes)``, and ``transform``.

    Notes
    -----
    **Guarantee** (every private transformer): ``(epsilon, delta)``-DP under
    replace-one-user (all rows sharing a ``groups`` value; ``groups=None``: row-level)
    for every fitted attribute; ``n_users`` is public, nothing is kept per user,
    ``transform`` is post-processing. ``budget_shares``: shares by phase name;
    ``"clip"`` (the private searches) defaults to ``"auto"``
    (:func:`~skdpp.privacy._plan.resolve_clip_share`), the other phases split the rest.
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, np.inf, closed="right")],
        "delta": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    # Route ``groups`` to fit by default once metadata routing is enabled.
    __metadata_request__fit = {"groups": True}
    #: What a useless fit falls back to (``_prior_attributes``), for its warning.
    _prior_description = ""

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
            data, n_samples, n_features = self._validate_fit_input(X)
        index = UserIndex.from_groups(groups, n_samples)
        n_users = int(index.n_users)
        BasePersonalizedEstimator._check_delta(self, n_users)  # public n_users only
        randomness = FitRandomness(self.random_state)
        meta = {"n_users": n_users, "n_features": n_features}
        release = Releaser(self._budget_plan(meta), randomness.noise,
                           seeded=randomness.seeded)
        attributes, released, notes = self._fit_core(data, index, release, n_users)
        message = self._useless_message(release.plan, n_users)
        if message is not None:  # releases made as planned, replaced by the prior
            warnings.warn(message, UselessFitWarning, stacklevel=2)
            attributes = {**attributes, **self._prior_attributes(attributes)}
            notes = tuple(notes) + (message,)
        report = release.report(n_users=n_users, released=released, local=(), notes=notes)
        for name, value in attributes.items():
            setattr(self, name, value)
        self.n_users_ = n_users
        self.privacy_report_ = report
        return self

    def _budget_plan(self, meta):
        """``_plan`` at the clip share of ``budget_shares`` (``"auto"``: the share rule)."""
        d = meta["n_features"]
        shares = phase_shares(self.budget_shares, {CLIP_PHASE: "auto"},
                              owner=type(self).__name__)
        share = resolve_clip_share(shares[CLIP_PHASE], lambda s: self._plan(d, s),
                                   meta["n_users"])
        return self._plan(d, share)

    def _useless_message(self, plan, n_users):
        """The warning of a fit whose count noise std exceeds :data:`USELESS_SEARCH_NOISE`
        times ``n_users`` (a public rule, :ref:`preprocessing`), else None."""
        if CLIP_PHASE not in plan:  # the subclasses with a "clip" phase have a prior
            return None
        sigma = float(plan[CLIP_PHASE])
        if not np.isfinite(sigma) or sigma <= USELESS_SEARCH_NOISE * max(n_users, 1):
            return None
        return (f"{type(self).__name__}: with {n_users} users at epsilon={self.epsilon!r} "
                f"the private searches count users with noise std {sigma:.3g} > "
                f"{USELESS_SEARCH_NOISE:g} * n_users, so the released statistics could be "
                f"anywhere; the transformer uses its prior instead "
                f"({self._prior_description}). Give this step a larger share of the "
                f"budget (split_budget shares), a larger epsilon, or fit on more users. "
                f"(A data-independent rule: n_users, epsilon, delta and the plan.)")

    def _prior_attributes(self, attributes):
        """Fitted attributes of the prior a useless fit falls back to."""
        return {}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.requires_fit = True
        return tags

