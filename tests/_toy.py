"""A minimal, test-only personalized DP estimator that exercises skdpp's base.

``ToyPersonalizedMean`` predicts ``mean_ + offsets_[user]``: the global mean of
the per-user mean targets is released under user-level DP (Gaussian sum of
per-user contributions clipped to ``clip_norm``, divided by the public number
of users); each user's offset is the mean residual of its own rows.

Broken variants (subclasses below) exist only to show that the privacy tests
can fail: clipping off, per-row clipping.
"""

from dataclasses import dataclass
from numbers import Real

import numpy as np
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpp.base import BasePersonalizedEstimator, FitResult, PersonalizedRegressorMixin
from skdpp.privacy import BudgetPlan, clip_by_norm
from skdpp.utils._grouped import segment_mean


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

    # ------------------------------------------------------------ algorithm
    _algorithm = None  # set below the class: ``_ToyMean``

    def _fit_config(self, meta):
        return _ToyConfig(epsilon=self.epsilon, delta=self.delta, clip_norm=self.clip_norm,
                          block_sum=self._block_sum)

    # The per-block partial sum of clipped contributions; broken variants override it.
    def _block_sum(self, block):
        user_means = block.segment_sum(block.take(block.y)) / block.counts
        return clip_by_norm(user_means[:, None], self.clip_norm).sum(axis=0)

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


@dataclass(frozen=True)
class _ToyConfig:
    epsilon: float
    delta: float
    clip_norm: object
    block_sum: object


class _ToyMean:
    """The toy's algorithm, in the shape of skdpp's algorithm modules."""

    @staticmethod
    def plan(config, meta):
        plan = BudgetPlan(config.epsilon, config.delta)
        plan.add_rest("mean")  # one Gaussian release, the whole budget
        return plan

    @staticmethod
    def run(executor, release, randomness, meta, config):
        # map: each block's sum of per-user means clipped to C; the driver adds
        # the noise once (sensitivity 2C under replace-one-user).
        total = executor.map(lambda block, state, _: (config.block_sum(block), state))
        sensitivity = None if config.clip_norm is None else 2.0 * config.clip_norm
        noisy = release.gaussian("mean", total, sensitivity=sensitivity,
                                 clip_norm=config.clip_norm)
        mean = float(noisy[0] / meta["n_users"])  # post-processing by the public n
        offsets = executor.collect(
            lambda block, state, m: block.segment_sum(block.take(block.y) - m) / block.counts,
            broadcast=mean)
        return FitResult({"mean_": mean, "offsets_": offsets},
                         released=("mean_",), local=("offsets_",))


ToyPersonalizedMean._algorithm = _ToyMean


class ToyNoClipping(ToyPersonalizedMean):
    """Broken: contributions are not clipped, noise still calibrated to ``clip_norm``."""

    def _block_sum(self, block):
        return (block.segment_sum(block.take(block.y)) / block.counts).sum(keepdims=True)


class ToyPerRowClipping(ToyPersonalizedMean):
    """Broken: each *row* is clipped, so a user with many rows contributes many times C."""

    def _block_sum(self, block):
        rows = clip_by_norm(block.take(block.y)[:, None], self.clip_norm)
        return rows.sum(axis=0)
