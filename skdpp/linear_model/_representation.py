"""What the linear regressors share as estimators: ``predict`` (:class:`_LinearRegressor`)
and, for the model ``y ≈ b_i + <x, U v_i>`` of FedRep and Priv-AltMin, constraints,
validation, configuration and personal parts (:class:`_RepresentationRegressor`)."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin, linear_predictions
from ..privacy._plan import phase_shares
from ._algorithms import representation
from ._auto import inverse_scales, released_predictions, standardize

__all__ = ["subspace_distance"]

_INIT_OPTIONS = ("private_spectral", "private_pairwise", "random")


def _clip_constraint():
    return [Interval(Real, 0, None, closed="neither"), None, StrOptions({"auto"})]


class _LinearRegressor(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """``predict`` from the subclass's ``_linear_scores(X, codes) -> (pred, linear_parts)``
    (:func:`skdpp.base.linear_predictions`)."""

    def predict(self, X, groups=None):
        """Predict with each known user's personal model, the cold start for other users.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` or
            ``personalize`` use their personal parts, other rows (all with
            ``None``) the released cold-start parts.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            If a prediction exceeds the float64 range for finite ``X``
            (:func:`skdpp.base.linear_predictions`).
        """
        return self._predict_unchecked(X, groups)

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the floating-point guard and the finiteness check."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if getattr(self, "feature_scales_", None) is not None:
            X = standardize(X, inverse_scales(self.feature_scales_))
        codes = self._user_codes(groups, X.shape[0])
        pred, linear_parts = self._linear_scores(X, codes)
        return released_predictions(linear_predictions(X, pred, linear_parts), codes,
                                    getattr(self, "label_range_", None),
                                    getattr(self, "local_only_", False),
                                    getattr(self, "own_label_ranges_", None))


class _RepresentationRegressor(_LinearRegressor):
    """Shared constraints, validation and personal parts; subclasses set ``_algorithm``."""

    _personal_attributes = ("heads_", "intercepts_", "own_label_ranges_")

    @property
    def _clip_bounds(self):
        """Every clip bound of the algorithm (``None``: only with ``epsilon=np.inf``)."""
        return self._algorithm.Config.clip_names

    _parameter_constraints = {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions(set(_INIT_OPTIONS)), "array-like"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "personal_rows": [StrOptions({"all", "holdout"})],
        "personal_ridge": [Interval(Real, 0, None, closed="left")],
        "clip_norm": _clip_constraint(),
        "init_clip_norm": _clip_constraint(),
        "head_clip_norm": _clip_constraint(),
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "budget_shares": [dict, None],
        "batch_mode": [StrOptions({"same", "disjoint"})],
        "verbose": ["verbose"],
    }

    def _fit_config(self, meta):
        shares = phase_shares(self.budget_shares, representation.DEFAULT_SHARES,
                              owner=type(self).__name__)
        return self._algorithm.Config.from_params(self.get_params(deep=False), shares)

    def _validate_fit_data(self, X, y, groups):
        data = super()._validate_fit_data(X, y, groups)
        data.y = np.asarray(data.y, dtype=np.float64)
        n_features, k = data.meta["n_features"], self.n_components
        if k > n_features:
            raise ValueError(
                f"n_components={k} must be <= n_features={n_features} (the shared "
                f"embedding U is n_features x n_components with orthonormal columns). "
                f"Pass n_components <= {n_features}.")
        if not isinstance(self.init, str):
            U0 = np.asarray(self.init, dtype=np.float64)
            if U0.shape != (n_features, k) or not np.all(np.isfinite(U0)):
                raise ValueError(
                    f"init as an array must be a finite public warm start of shape "
                    f"(n_features, n_components) = ({n_features}, {k}); got shape "
                    f"{U0.shape}. Pass an array of that shape or one of {_INIT_OPTIONS}.")
            if np.linalg.matrix_rank(U0) < k:
                raise ValueError(
                    f"init as an array must have rank n_components={k}; the given "
                    f"matrix is rank deficient. Pass a full-rank warm start.")
        return data

    def _fit_personal(self, X, y, index):
        return representation.fit_personal(self, X, y, index)

    def _linear_scores(self, X, codes):
        """``b_i + x^T U v_i`` (known users) or ``b_cold + x^T U v_cold``."""
        known = codes >= 0
        H = np.empty((X.shape[0], self.components_.shape[1]))
        H[known] = self.heads_[codes[known]]
        H[~known] = self.cold_start_head_
        b = np.where(known, self.intercepts_[np.maximum(codes, 0)], self.cold_start_intercept_)
        pred = np.einsum("ij,ij->i", X @ self.components_, H) + b
        return pred, lambda rows: ((H[rows] @ self.components_.T)[:, None, :], b[rows, None])


def subspace_distance(U1, U2):
    """Principal-angle distance between column spaces (Snedeker et al. 2025, Def. 2).

    ``||(I - Q1 Q1^T) Q2||_2`` for orthonormal bases ``Q1``, ``Q2`` of the columns
    of ``U1``, ``U2`` (shape (d, k)): the sine of the largest principal angle.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._representation import subspace_distance
    >>> round(subspace_distance(np.eye(3)[:, :1], np.eye(3)[:, 1:2]), 6)
    1.0
    """
    Q1, _ = np.linalg.qr(np.asarray(U1, dtype=np.float64))
    Q2, _ = np.linalg.qr(np.asarray(U2, dtype=np.float64))
    R = Q2 - Q1 @ (Q1.T @ Q2)
    return float(min(1.0, np.linalg.norm(R, 2)))
