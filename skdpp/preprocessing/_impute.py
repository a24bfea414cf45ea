"""PrivateSimpleImputer: per-column mean or median under user-level DP."""

import math
from numbers import Real

import numpy as np
from sklearn.base import OneToOneFeatureMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..privacy import BudgetPlan
from ._base import (
    CLIP_PHASE,
    MEDIAN_STEPS,
    SCALE_FREE_STEPS,
    BasePrivateTransformer,
    scale_free_location,
    scale_free_median,
    user_means,
)

__all__ = ["PrivateSimpleImputer"]


class PrivateSimpleImputer(OneToOneFeatureMixin, BasePrivateTransformer):
    """Replace missing values by a per-column mean or median released under user-level DP.

    The user-level private :class:`sklearn.impute.SimpleImputer` for numeric data: a
    column's fill value is the DP location (``"mean"``) or median (``"median"``), over
    the users with an observation, of each user's mean (or median) of its observed
    values. Read more in the :ref:`User Guide <preprocessing>`.

    Parameters
    ----------
    missing_values : float, default=np.nan
        The placeholder of a missing value (``np.nan`` or a number).
    strategy : {"mean", "median", "constant"}, default="mean"
        ``"mean"``: a DP mean of the users' means (clipped around a released
        median); ``"median"``: a DP median of the users' medians;
        ``"constant"``: ``fill_value`` (public: no release, no privacy cost).
    fill_value : float, default=None
        The value of ``strategy="constant"`` (``None``: 0).
    epsilon : float, default=1.0
        Privacy budget ε in ``(0, inf]`` (``np.inf``: no noise).
    delta : float, default=1e-6
        Privacy parameter δ in ``[0, 1)``.
    budget_shares : dict or None, default=None
        Shares by phase name (``"clip"``; see
        :class:`~skdpp.preprocessing._base.BasePrivateTransformer`).
    random_state : int, RandomState instance or None, default=None
        Seeds the privacy noise (``None``: fresh OS entropy).

    Attributes
    ----------
    statistics_ : ndarray of shape (n_features,)
        The released fill value of each column.
    n_observed_ : ndarray of shape (n_features,) or None
        The released (noisy) number of users with at least one observation
        in each column (``None`` for ``"constant"``).
    n_users_ : int
    privacy_report_ : PrivacyReport
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` has feature names that are all strings.

    See Also
    --------
    sklearn.impute.SimpleImputer : the non-private transformer.
    PrivateStandardScaler : private per-feature location and scale.

    Notes
    -----
    Guarantee: :class:`~skdpp.preprocessing._base.BasePrivateTransformer`
    (exact μ-GDP). Phases: ``"counts"`` (users with an observation per
    column, one Gaussian vector of L2 sensitivity ``sqrt(n_features)``; the
    quantiles and the mean refer to it), ``"clip"`` (noisy bisections, counts
    of sensitivity 1), ``"mean"`` (``sum_i clip(a_ij - m_j, R_j)``,
    sensitivity ``2 R_j``, divided by the noisy count). Every column is kept
    (``keep_empty_features=True``). Details: :ref:`preprocessing_statistics`.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.preprocessing import PrivateSimpleImputer
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(2000), 5)
    >>> X = 3.0 + rng.normal(size=(10000, 2))
    >>> X[rng.random(X.shape) < 0.2] = np.nan
    >>> imp = PrivateSimpleImputer(epsilon=1.0, random_state=0).fit(X, groups=groups)
    >>> np.round(imp.statistics_, 1)
    array([3., 3.])
    >>> bool(np.isnan(imp.transform(X)).any())
    False
    """

    _prior_description = "missing values filled with 0"
    _parameter_constraints: dict = {
        **BasePrivateTransformer._parameter_constraints,
        "missing_values": [Real],
        "strategy": [StrOptions({"mean", "median", "constant"})],
        "fill_value": [Real, None],
        "budget_shares": [dict, None],
    }

    def __init__(self, *, missing_values=np.nan, strategy="mean", fill_value=None,
                 epsilon=1.0, delta=1e-6, budget_shares=None, random_state=None):
        self.missing_values = missing_values
        self.strategy = strategy
        self.fill_value = fill_value
        self.epsilon = epsilon
        self.delta = delta
        self.budget_shares = budget_shares
        self.random_state = random_state

    def _nan_missing(self):
        return isinstance(self.missing_values, float) and math.isnan(self.missing_values)

    def _missing_mask(self, X):
        return np.isnan(X) if self._nan_missing() else X == self.missing_values

    def _validate(self, X, reset):
        finite = "allow-nan" if self._nan_missing() else True
        return validate_data(self, X, dtype=np.float64, reset=reset, copy=not reset,
                             ensure_all_finite=finite)

    def _validate_fit_input(self, X):
        X = self._validate(X, reset=True)
        return X, *X.shape

    def _plan(self, n_features, share):
        plan = BudgetPlan(self.epsilon, self.delta)
        if self.strategy == "constant" or n_features == 0:
            return plan
        steps = SCALE_FREE_STEPS if self.strategy == "mean" else MEDIAN_STEPS
        plan.add(CLIP_PHASE, share=share, count=n_features * steps, param="budget_shares['clip']")
        plan.add_rest("counts")
        if self.strategy == "mean":
            plan.add_rest("mean", count=n_features)
        return plan

    def _fit_core(self, X, index, release, n_users):
        d = X.shape[1]
        if self.strategy == "constant":
            fill = 0.0 if self.fill_value is None else float(self.fill_value)
            return ({"statistics_": np.full(d, fill), "n_observed_": None}, (),
                    ("strategy='constant': the fill value is public; nothing is released.",))
        mask = ~self._missing_mask(X)
        per_user = user_means(X, index, mask) if self.strategy == "mean" \
            else _user_medians(X, mask, index)
        observed = np.isfinite(per_user)
        n_obs = release.gaussian("counts", observed.sum(axis=0).astype(np.float64),
                                 sensitivity=math.sqrt(d))
        # post-processing: at least one user (the quantiles' targets, the divisor)
        n_ref = np.maximum(np.asarray(n_obs, dtype=np.float64), 1.0)
        stats = np.empty(d)
        for j in range(d):
            if self.strategy == "mean":
                stats[j], _ = scale_free_location(release, per_user[:, j], n_users=n_ref[j],
                                                  mean_phase="mean")
            else:
                stats[j] = scale_free_median(release, per_user[:, j], n_users=n_ref[j])
        notes = (  # strategy is "mean" or "median" here
            f"Each user contributes one value per column: the {self.strategy} of its "
            f"observed values; users without an observation contribute nothing. The "
            f"number of users with an observation is released per column (phase "
            f"'counts', sensitivity sqrt(n_features)).",
            "Every column is kept (an empty column would otherwise be published as such).",
        )
        return ({"statistics_": stats, "n_observed_": np.asarray(n_obs, dtype=np.float64)},
                ("statistics_", "n_observed_"), notes)

    def _prior_attributes(self, attributes):  # a "clip" phase: not "constant"
        return {"statistics_": np.zeros_like(attributes["statistics_"])}

    def transform(self, X):
        """Replace the missing values of ``X`` by ``statistics_`` (post-processing).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_tr : ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return np.where(self._missing_mask(X), self.statistics_[None, :], X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


def _user_medians(X, mask, index):
    """Each user's median of its observed values per column (NaN without any): the
    mean of the two middle observed entries of its segment, rows sorted by (user,
    value) with missing values last."""
    n_users, d = index.n_users, X.shape[1]
    out = np.full((n_users, d), np.nan)
    codes = index.codes
    for j in range(d):  # a loop over columns, not users or rows
        col = np.where(mask[:, j], X[:, j], np.inf)
        order = np.lexsort((col, codes))
        n_obs = np.bincount(codes, weights=mask[:, j], minlength=n_users).astype(np.int64)
        start, has, sorted_col = index.offsets[:-1], n_obs > 0, col[order]
        lo_v = sorted_col[np.where(has, start + (n_obs - 1) // 2, 0)]
        hi_v = sorted_col[np.where(has, start + n_obs // 2, 0)]
        out[:, j] = np.where(has, 0.5 * lo_v + 0.5 * hi_v, np.nan)  # no overflow
    return out
