"""The total privacy cost of a scikit-learn GridSearchCV, from skdpp.privacy.privacy_report.

A 3 x 3 grid of PPSGDRegressor(epsilon=1) with 3 per-user folds is 27 fits plus the refit;
the report composes all 28 exactly (GDP) and lists the selection as NOT COVERED. Prints the
composed epsilon and the closed-form value sqrt(28) mu. Run: python benchmarks/bench_grid_search_report.py
"""
import numpy as np, sklearn, warnings
from sklearn.model_selection import GridSearchCV
from skdpp import PPSGDRegressor
from skdpp.datasets import make_additive_personalized_regression
from skdpp.model_selection import PerUserKFold
from skdpp.privacy import privacy_report
from skdpp.privacy._gdp import gaussian_epsilon, gaussian_mu
sklearn.set_config(enable_metadata_routing=True)
X, y, g, _ = make_additive_personalized_regression(n_users=2000, n_features=5, n_samples_per_user=6, random_state=0)
grid = {"learning_rate": [0.02, 0.05, 0.1], "alpha": [0.3, 1.0, 3.0]}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    s = GridSearchCV(PPSGDRegressor(epsilon=1.0, n_rounds=20, random_state=0), grid, cv=PerUserKFold(n_splits=3)).fit(X, y, groups=g)
r = privacy_report(s)
print("covered fits", max(st.n_fits for st in r.steps), "epsilon", round(r.epsilon, 3), "closed form", round(gaussian_epsilon(np.sqrt(28) * gaussian_mu(1.0, 1e-6), 1e-6), 3))
