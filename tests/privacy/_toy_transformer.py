"""A test-only private transformer: one Gaussian mean released through the Releaser.

It stands in for the private transformers of :mod:`skdpp.preprocessing` in the
tests of the composed report, the budget split, the search over Pipelines and
the export: ``fit`` releases the mean of the users' mean rows (each clipped to
``clip_norm``; L2 sensitivity ``2 clip_norm`` under replace-one-user) and
``transform`` subtracts it.
"""

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpp.base import quiet_numerics
from skdpp.privacy import BudgetPlan, Releaser
from skdpp.utils._grouped import UserIndex
from skdpp.utils._random import FitRandomness


class ToyPrivateCenterer(TransformerMixin, BaseEstimator):
    """Subtract a DP mean (test-only)."""

    __metadata_request__fit = {"groups": True}

    def __init__(self, *, epsilon=1.0, delta=1e-6, clip_norm=1.0, random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.random_state = random_state

    def _budget_plan(self, meta):
        plan = BudgetPlan(self.epsilon, self.delta)
        plan.add_rest("mean")
        return plan

    def fit(self, X, y=None, groups=None):
        with quiet_numerics():
            X = validate_data(self, X, reset=True)
            index = UserIndex.from_groups(groups, X.shape[0])
            n = int(index.n_users)
            sums = np.zeros((n, X.shape[1]))
            np.add.at(sums, index.codes, X)
            user_means = sums / index.counts[:, None]
            randomness = FitRandomness(self.random_state)
            release = Releaser(self._budget_plan({"n_users": n}), randomness.noise,
                               seeded=randomness.seeded)
            total = release.gaussian_sum("mean", user_means, clip_norm=self.clip_norm)
            self.mean_ = total / n
            self.n_users_ = n
            self.privacy_report_ = release.report(n_users=n, released=("mean_",), local=())
        return self

    def transform(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return X - self.mean_
