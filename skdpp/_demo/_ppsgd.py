"""Demo: PPSGDRegressor (Bietti et al. 2022) on the additive model y = <x, w + theta_i>."""

import numpy as np


def run(random_state=0):
    """Print a short tour of PPSGDRegressor (< 10 s)."""
    from ..datasets import make_additive_personalized_regression
    from ..linear_model import PPSGDRegressor

    X, y, groups, info = make_additive_personalized_regression(
        n_users=5000, n_features=10, n_samples_per_user=20, n_personal_features=2,
        personal_scale=2.0, global_scale=1.0, noise=0.1, random_state=random_state)
    var = info.feature_variances
    print("Additive model y = <x, w + theta_i>: 5000 users x 20 rows, d=10, users differ "
          "on 2 coordinates.")

    def excess_risk(est):
        full = est.coef_ + est.offsets_
        return float(np.mean(np.sum(var * (full - info.coef) ** 2, axis=1)))

    report = None
    for alpha, name in [(0.0, "local only "), (1.0, "personalized"), (np.inf, "global only")]:
        est = PPSGDRegressor(epsilon=1.0, delta=1e-6, clip_norm=2.0, alpha=alpha,
                             learning_rate=0.5, n_rounds=60, fit_intercept=False,
                             random_state=random_state).fit(X, y, groups=groups)
        print(f"  {name} (alpha={alpha:<3}) epsilon=1: excess risk {excess_risk(est):.4f}, "
              f"epsilon spent {est.privacy_report_.epsilon_spent:.3g}")
        if alpha == 1.0:
            report = est.privacy_report_
    print("Privacy report of PPSGDRegressor(alpha=1.0, epsilon=1.0):")
    print(report)
