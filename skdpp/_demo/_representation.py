"""Demo: PrivateFedRepRegressor and PrivAltMinRegressor on the papers' synthetic task."""

import numpy as np


def run(random_state=0):
    """Print a short tour of the two shared-representation regressors (< 10 s)."""
    from ..datasets import make_shared_representation_regression
    from ..linear_model import PrivAltMinRegressor, PrivateFedRepRegressor
    from ..linear_model._representation import subspace_distance

    X, y, groups, info = make_shared_representation_regression(
        n_users=5000, n_features=20, n_components=2, n_samples_per_user=10, noise=0.01,
        n_test_samples_per_user=10, random_state=random_state)
    print("Shared representation y = <x, U v_i>: 5000 users x 10 rows, d=20, k=2, "
          "noise 0.01.")
    fedrep = None
    for cls in (PrivateFedRepRegressor, PrivAltMinRegressor):
        for eps in (1.0, np.inf):
            est = cls(epsilon=eps, random_state=random_state).fit(X, y, groups=groups)
            pred = est.predict(info.X_test, groups=info.groups_test)
            mse = float(np.mean((pred - info.y_test) ** 2))
            dist = subspace_distance(est.components_, info.U)
            print(f"  {cls.__name__:<24} epsilon={eps:<4}: test MSE {mse:.2e}, "
                  f"dist(U, U*) {dist:.3f}")
            if cls is PrivateFedRepRegressor and eps == 1.0:
                fedrep = est
    print("Privacy report of PrivateFedRepRegressor(epsilon=1.0):")
    print(fedrep.privacy_report_)
