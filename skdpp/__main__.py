"""A short tour of skdpp: ``python -m skdpp`` fits each estimator on synthetic data
(seconds each) and prints a score and its privacy report."""

import sys
import time

import numpy as np

import skdpp
from skdpp.datasets import (make_additive_personalized_regression,
                            make_personalized_margin_classification,
                            make_shared_representation_regression, make_skewed_ratings)
from skdpp.decomposition import AdaptiveWeightMF
from skdpp.linear_model import (JLMarginClassifier, PPSGDRegressor, PrivAltMinRegressor,
                                PrivateFedRepRegressor)
from skdpp.linear_model._representation import subspace_distance
from skdpp.metrics import rmse


def _representation(random_state):
    X, y, groups, info = make_shared_representation_regression(
        n_users=5000, n_features=20, n_components=2, n_samples_per_user=10, noise=0.01,
        n_test_samples_per_user=10, random_state=random_state)
    print("Shared representation y = <x, U v_i>: 5000 users x 10 rows, d=20, k=2, "
          "noise 0.01.")
    for cls in (PrivateFedRepRegressor, PrivAltMinRegressor):
        for eps in (1.0, np.inf):
            est = cls(epsilon=eps, random_state=random_state).fit(X, y, groups=groups)
            pred = est.predict(info.X_test, groups=info.groups_test)
            mse = float(np.mean((pred - info.y_test) ** 2))
            dist = subspace_distance(est.components_, info.U)
            print(f"  {cls.__name__:<24} epsilon={eps:<4}: test MSE {mse:.2e}, "
                  f"dist(U, U*) {dist:.3f}")
            if cls is PrivateFedRepRegressor and eps == 1.0:
                shown = est
    return "PrivateFedRepRegressor(epsilon=1.0)", shown


def _ppsgd(random_state):
    X, y, groups, info = make_additive_personalized_regression(
        n_users=5000, n_features=10, n_samples_per_user=20, n_personal_features=2,
        personal_scale=2.0, global_scale=1.0, noise=0.1, random_state=random_state)
    print("Additive model y = <x, w + theta_i>: 5000 users x 20 rows, d=10, users differ "
          "on 2 coordinates.")
    for alpha, name in [(0.0, "local only "), (1.0, "personalized"), (np.inf, "global only")]:
        est = PPSGDRegressor(epsilon=1.0, delta=1e-6, clip_norm=2.0, alpha=alpha,
                             learning_rate=0.5, n_rounds=60, fit_intercept=False,
                             random_state=random_state).fit(X, y, groups=groups)
        err = est.coef_ + est.offsets_ - info.coef
        risk = float(np.mean(np.sum(info.feature_variances * err**2, axis=1)))
        print(f"  {name} (alpha={alpha:<3}) epsilon=1: excess risk {risk:.4f}, "
              f"epsilon spent {est.privacy_report_.epsilon_spent:.3g}")
        if alpha == 1.0:
            shown = est
    return "PPSGDRegressor(alpha=1.0, epsilon=1.0)", shown


def _adaptive_mf(random_state):
    X, y, groups, info = make_skewed_ratings(n_users=10000, n_items=100, power=0.5,
                                             random_state=random_state)
    Xt, yt, gt = info.X_test, info.y_test, info.groups_test
    tail = np.isin(Xt[:, 0], np.argsort(info.item_counts)[:50])
    print(f"Skewed ratings (Krichene et al. 2023, App. C): {np.unique(groups).size} users, "
          f"100 items rated {info.item_counts.min()}..{info.item_counts.max()} times, "
          f"rank 5; RMSE of predicting 0: {rmse(yt, np.zeros_like(yt)):.3f}.")
    common = dict(n_components=5, epsilon=3.0, delta=1e-5, center=False, user_bias=False,
                  random_state=random_state)
    for name, params in [("uniform sampling (DPALS)", dict(weighting="uniform")),
                         ("tail sampling (Chien et al.)", dict(weighting="tail")),
                         ("adaptive weights, mu=1/2", dict(weighting="adaptive", mu=0.5))]:
        est = AdaptiveWeightMF(**common, **params).fit(X, y, groups)
        pred = est.predict(Xt, groups=gt)
        print(f"  epsilon=3 {name:<29}: test RMSE {rmse(yt, pred):.3f} "
              f"(rarer half of the items {rmse(yt[tail], pred[tail]):.3f})")
    top = est.recommend(groups[:1], n_items=5)[0]
    print(f"  top-5 unseen items for user {groups[0]}: {top.tolist()}")
    return "AdaptiveWeightMF(weighting='adaptive', epsilon=3)", est


def _jl_margin(random_state):
    print("Personalized margin classification y = sign(<x, U v_i>): 5000 users x 10 rows, "
          "d=20, k=1, margin 0.1.")
    X, y, groups, info = make_personalized_margin_classification(
        n_users=5000, n_features=20, n_components=1, n_samples_per_user=10, margin=0.1,
        n_test_samples_per_user=10, random_state=random_state)
    W = np.zeros((5000, X.shape[1]))
    np.add.at(W, groups, y[:, None] * X)
    local = np.mean(np.sign(np.einsum("nd,nd->n", info.X_test, W[info.groups_test]))
                    == info.y_test)
    print(f"  local-only (each user alone, w_i = sum y x): test accuracy {local:.3f}")
    for eps in (1.0, np.inf):
        est = JLMarginClassifier(n_components=1, jl_dim=32, margin=0.1, epsilon=eps,
                                 n_candidates=64, random_state=random_state)
        est.fit(X, y, groups=groups)
        acc = est.score(info.X_test, info.y_test, groups=info.groups_test)
        print(f"  JLMarginClassifier epsilon={eps:<4}: test accuracy {acc:.3f} "
              f"(k'={est.jl_dim_}, U_priv {est.embeddings_.shape[1:]})")
        if eps == 1.0:
            shown = est
    return "JLMarginClassifier(epsilon=1.0)", shown


# (title, demo returning the name and the estimator whose report is printed), in the
# order of the README's table; each demo takes < 10 s
_DEMOS = (
    ("PrivateFedRepRegressor / PrivAltMinRegressor", _representation),
    ("PPSGDRegressor", _ppsgd),
    ("AdaptiveWeightMF", _adaptive_mf),
    ("JLMarginClassifier", _jl_margin),
)


def main(argv=None):
    """Run every demo; return a process exit code."""
    print(f"skdpp {skdpp.__version__}: user-level differentially private personalization")
    print("Each demo fits on synthetic data, prints a score and the privacy report.\n")
    for title, demo in _DEMOS:
        print(f"{'=' * 78}\n{title}\n{'=' * 78}")
        start = time.perf_counter()
        name, est = demo(random_state=0)
        print(f"Privacy report of {name}:")
        print(est.privacy_report_)
        print(f"[{time.perf_counter() - start:.1f} s]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
