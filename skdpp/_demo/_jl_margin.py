"""Demo: JLMarginClassifier (Snedeker et al. 2025, Alg. 3) on margin-separable users."""

import numpy as np


def run(random_state=0):
    """Print a short tour of JLMarginClassifier (< 10 s)."""
    from ..datasets import make_personalized_margin_classification
    from ..linear_model import JLMarginClassifier

    X, y, groups, info = make_personalized_margin_classification(
        n_users=5000, n_features=20, n_components=1, n_samples_per_user=10, margin=0.1,
        n_test_samples_per_user=10, random_state=random_state)
    print("Personalized margin classification y = sign(<x, U v_i>): 5000 users x 10 rows, "
          "d=20, k=1, margin 0.1.")
    W = np.zeros((5000, X.shape[1]))
    np.add.at(W, groups, y[:, None] * X)
    local = np.mean(np.sign(np.einsum("nd,nd->n", info.X_test, W[info.groups_test]))
                    == info.y_test)
    print(f"  local-only (each user alone, w_i = sum y x): test accuracy {local:.3f}")
    private = None
    for eps in (1.0, np.inf):
        est = JLMarginClassifier(n_components=1, jl_dim=32, margin=0.1, epsilon=eps,
                                 n_candidates=64, random_state=random_state)
        est.fit(X, y, groups=groups)
        acc = est.score(info.X_test, info.y_test, groups=info.groups_test)
        print(f"  JLMarginClassifier epsilon={eps:<4}: test accuracy {acc:.3f} "
              f"(k'={est.jl_dim_}, U_priv {est.embeddings_.shape[1:]})")
        if eps == 1.0:
            private = est
    print("Privacy report of JLMarginClassifier(epsilon=1.0):")
    print(private.privacy_report_)
