"""A minimal, test-only personalized DP estimator that exercises skdpp's base.

``ToyPersonalizedMean`` predicts ``mean_ + offsets_[user]``: the global mean of
the per-user mean targets is released under user-level DP (Gaussian sum of
per-user contributions clipped to ``clip_norm``, divided by the public number
of users); each user's offset is the mean residual of its own rows.

Broken variants (subclasses below) exist only to show that the privacy tests
can fail: clipping off, per-row clipping.
"""

from numbers import Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpp.base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from skdpp.privacy import Phase, calibrate, mechanisms
from skdpp.utils._grouped import segment_mean, segment_sum


class ToyPersonalizedMean(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """DP global mean plus per-user offsets (test-only).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget, in (0, inf].
    delta : float, default=1e-6
        Privacy parameter delta, in [0, 1).
    clip_norm : float or None, default=1.0
        Bound on each user's contribution (its mean target).
    random_state : int, RandomState instance or None, default=None
        Seeds the privacy noise.

    Attributes
    ----------
    mean_ : float
        The DP global mean (released).
    offsets_ : ndarray of shape (n_users,)
        Per-user offsets (personal), aligned with ``user_ids_``.
    user_ids_ : ndarray of shape (n_users,)
    privacy_report_ : PrivacyReport
    """

    _parameter_constraints = {
        **BasePersonalizedEstimator._parameter_constraints,
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None],
    }
    _personal_attributes = ("offsets_",)

    def __init__(self, *, epsilon=1.0, delta=1e-6, clip_norm=1.0, random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.random_state = random_state

    # The released sum; broken variants override it.
    def _release_sum(self, y, index, noise_multiplier, rng):
        contributions = segment_mean(y, index)[:, None]  # one scalar per user
        return mechanisms.gaussian_sum(
            contributions,
            clip_norm=self.clip_norm,
            noise_multiplier=noise_multiplier,
            rng=rng,
        )

    def fit(self, X, y, groups=None):
        X, y, index = self._validate_fit_input(X, y, groups, y_numeric=True)
        rng = check_random_state(self.random_state)
        phases = [Phase("mean", share=1.0, mechanism="gaussian")]
        params = calibrate(phases, epsilon=self.epsilon, delta=self.delta)
        accountant = self._new_accountant()
        total, event = self._release_sum(y, index, params["mean"], rng)
        sensitivity = None if self.clip_norm is None else 2.0 * self.clip_norm
        accountant.compose(
            event, phase="mean", mechanism="gaussian", sensitivity=sensitivity,
            clip_norm=self.clip_norm,
        )
        # Post-processing by the public number of users.
        self.mean_ = float(np.ravel(total)[0] / index.n_users)
        self.offsets_ = self._fit_personal(X, y, index)["offsets_"]
        self.privacy_report_ = self._build_report(
            accountant, n_users=index.n_users, released=("mean_",), local=("offsets_",)
        )
        return self

    def _fit_personal(self, X, y, index):
        return {"offsets_": segment_mean(y - self.mean_, index)}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The checks never pass groups: every test row is a new user and gets the
        # cold-start prediction (the DP mean), which cannot reach R² > 0.5.
        tags.regressor_tags.poor_score = True
        return tags

    def predict(self, X, groups=None):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        pred = np.full(X.shape[0], self.mean_)
        pred[known] += self.offsets_[codes[known]]
        return pred


class ToyNoClipping(ToyPersonalizedMean):
    """Broken: contributions are not clipped, noise still calibrated to ``clip_norm``."""

    def _release_sum(self, y, index, noise_multiplier, rng):
        total = segment_mean(y, index).sum(keepdims=True)
        return mechanisms.gaussian_mechanism(
            total, sensitivity=2.0 * self.clip_norm, noise_multiplier=noise_multiplier, rng=rng
        )


class ToyPerRowClipping(ToyPersonalizedMean):
    """Broken: each *row* is clipped, so a user with many rows contributes many times C."""

    def _release_sum(self, y, index, noise_multiplier, rng):
        rows = mechanisms.clip_by_norm(y[:, None], self.clip_norm)
        per_user = segment_sum(rows, index)
        total = per_user.sum(axis=0)
        return mechanisms.gaussian_mechanism(
            total, sensitivity=2.0 * self.clip_norm, noise_multiplier=noise_multiplier, rng=rng
        )
