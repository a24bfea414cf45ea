"""PrivateStandardScaler: per-feature location and scale under user-level DP."""

import numpy as np
from sklearn.base import OneToOneFeatureMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..privacy import BudgetPlan
from ._base import (
    CLIP_PHASE,
    SCALE_FREE_STEPS,
    BasePrivateTransformer,
    saturate,
    scale_free_location,
    user_means,
)

__all__ = ["PrivateStandardScaler"]


class PrivateStandardScaler(OneToOneFeatureMixin, BasePrivateTransformer):
    """Standardize features by a location and a scale released under user-level DP.

    The user-level private :class:`sklearn.preprocessing.StandardScaler`:
    ``z = (x - mean_) / scale_``. Every bound is chosen privately (no clip
    parameter in data units): raw columns of any scale and offset work with
    the defaults. Read more in the :ref:`User Guide <preprocessing>`.

    Parameters
    ----------
    with_mean : bool, default=True
        Center the data (subtract ``mean_``).
    with_std : bool, default=True
        Scale the data to unit variance (divide by ``scale_``). The scale is
        measured around the released location, which is then in ``mean_``
        even with ``with_mean=False`` (as in scikit-learn).
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
    mean_ : ndarray of shape (n_features,) or None
        The released per-feature locations (``None`` when ``with_mean`` and
        ``with_std`` are both False).
    var_ : ndarray of shape (n_features,) or None
        The released per-feature variances (``None`` without ``with_std``).
        May be ``<= 0`` from the noise for a nearly constant column.
    scale_ : ndarray of shape (n_features,) or None
        ``sqrt(var_)``, or 1 where ``var_ <= 0`` (scikit-learn's convention
        for a constant feature); ``None`` without ``with_std``.
    n_users_ : int
    privacy_report_ : PrivacyReport
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` has feature names that are all strings.

    See Also
    --------
    sklearn.preprocessing.StandardScaler : the non-private transformer.
    PrivateSimpleImputer : private per-column means or medians.

    Notes
    -----
    Guarantee: :class:`~skdpp.preprocessing._base.BasePrivateTransformer` (every release
    Gaussian: exact μ-GDP). Per feature, ``mean_`` is the DP location
    (:func:`~skdpp.preprocessing._base.scale_free_location`) of the users' means and
    ``var_`` that of their mean squared deviations from ``mean_``: means over users, not
    rows. Phases: ``"clip"`` (noisy bisections, 36 counts of sensitivity 1 per
    location), ``"location"`` and ``"scale"`` (one clipped Gaussian sum per feature,
    sensitivity ``2 R_j``; the rest of the budget split equally). Non-finite ``X`` is
    rejected (impute first). Details: :ref:`preprocessing_statistics`.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.preprocessing import PrivateStandardScaler
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(2000), 5)
    >>> X = np.c_[1.6e9 + 3e7 * rng.normal(size=10000), 1990 + 10 * rng.normal(size=10000)]
    >>> scaler = PrivateStandardScaler(epsilon=1.0, random_state=0).fit(X, groups=groups)
    >>> np.round(scaler.mean_ / [1.6e9, 1990], 2)
    array([1., 1.])
    >>> Z = scaler.transform(X)
    >>> bool(np.all(np.abs(Z.std(axis=0) - 1) < 0.2))
    True
    >>> scaler.privacy_report_.epsilon
    1.0
    """

    _prior_description = "the identity: mean 0, scale 1"
    _parameter_constraints: dict = {
        **BasePrivateTransformer._parameter_constraints,
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "budget_shares": [dict, None],
    }

    def __init__(self, with_mean=True, with_std=True, *, epsilon=1.0, delta=1e-6,
                 budget_shares=None, random_state=None):
        self.with_mean = with_mean
        self.with_std = with_std
        self.epsilon = epsilon
        self.delta = delta
        self.budget_shares = budget_shares
        self.random_state = random_state

    def _validate_fit_input(self, X):
        X = validate_data(self, X, dtype=np.float64, reset=True)
        return X, *X.shape

    def _n_locations(self):
        """Locations released per feature: the mean (if needed) and the variance."""
        return int(self.with_mean or self.with_std) + int(self.with_std)

    def _plan(self, n_features, share):
        plan = BudgetPlan(self.epsilon, self.delta)
        k = self._n_locations()
        if k == 0 or n_features == 0:
            return plan
        plan.add(CLIP_PHASE, share=share, count=k * n_features * SCALE_FREE_STEPS,
                 param="budget_shares['clip']")
        plan.add_rest("location", count=n_features)
        if self.with_std:
            plan.add_rest("scale", count=n_features)
        return plan

    def _fit_core(self, X, index, release, n_users):
        d = X.shape[1]
        if self._n_locations() == 0:
            return ({"mean_": None, "var_": None, "scale_": None}, (),
                    ("with_mean=False and with_std=False: nothing is released.",))

        def locations(values, phase):  # one location per feature, in order
            return np.array([scale_free_location(release, values[:, j], n_users=n_users,
                                                 mean_phase=phase)[0] for j in range(d)],
                            dtype=np.float64)

        loc = locations(user_means(X, index), "location")
        attributes = {"mean_": loc, "var_": None, "scale_": None}
        released = ("mean_",)
        if self.with_std:
            var = locations(user_means((X - loc) ** 2, index), "scale")
            attributes["var_"] = var
            attributes["scale_"] = np.where(var > 0, np.sqrt(np.maximum(var, 0.0)), 1.0)
            released = ("mean_", "var_", "scale_")
        notes = (
            "Each user contributes one value per feature: its mean (location) and its mean "
            "squared deviation from the released location (variance); each released as a "
            "Gaussian mean of values clipped to a released radius around a released median, "
            "after a released magnitude (a noisy histogram and noisy bisections, phase "
            "'clip').",
            "Means over users (each user weighs the same), not over rows.",
        )
        return attributes, released, notes

    def _prior_attributes(self, attributes):
        d = np.shape(attributes["mean_"])[0]  # a "clip" phase: mean_ was released
        prior = {"mean_": np.zeros(d)}
        if self.with_std:
            prior.update(var_=np.ones(d), scale_=np.ones(d))
        return prior

    def _validated_copy(self, X):
        check_is_fitted(self)
        with np.errstate(over="ignore", invalid="ignore"):
            return validate_data(self, X, dtype=np.float64, reset=False, copy=True)

    def transform(self, X):
        """Standardize ``X`` with the released statistics (post-processing).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_tr : ndarray of shape (n_samples, n_features)
            ``(X - mean_) / scale_`` (as configured), saturated at the float64 range.
        """
        X = self._validated_copy(X)
        if self.with_mean:
            X -= self.mean_
        if self.with_std:
            X /= self.scale_
        return saturate(X)

    def inverse_transform(self, X):
        """Undo :meth:`transform` (``X * scale_ + mean_`` as configured).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)
        """
        X = self._validated_copy(X)
        if self.with_std:
            X *= self.scale_
        if self.with_mean:
            X += self.mean_
        return saturate(X)
