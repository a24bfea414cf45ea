"""Demo: AdaptiveWeightMF (Krichene et al. 2023) on skewed synthetic ratings."""

import numpy as np


def run(random_state=0):
    """Print a short tour of AdaptiveWeightMF (< 10 s)."""
    from ..datasets import make_skewed_ratings
    from ..decomposition import AdaptiveWeightMF
    from ..metrics import rmse

    X, y, groups, info = make_skewed_ratings(n_users=10000, n_items=100, power=0.5,
                                             random_state=random_state)
    Xt, yt, gt = info.X_test, info.y_test, info.groups_test
    order = np.argsort(info.item_counts)
    tail = np.isin(Xt[:, 0], order[:50])
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
    print("Privacy report of AdaptiveWeightMF(weighting='adaptive', epsilon=3):")
    print(est.privacy_report_)
