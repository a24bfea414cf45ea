"""
=======================================================================
Private FedRep vs. Priv-AltMin on the papers' synthetic regression task
=======================================================================

Reproduces the comparison of Snedeker, Zhou & Bassily (2025), Section 3.4 and
Figure 1 / App. B.4: ``n = 20 000`` users, ``d = 50`` features, a shared
``k = 2`` dimensional representation, ``m = 10`` training rows per user,
label noise ``R = 0.01``, ``δ = 1e-6`` and ``ε ∈ {1, 2, 4, 6, 8}``.

Compared (test MSE on 10 fresh rows per user, averaged over seeds):

* :class:`~skdpp.linear_model.PrivateFedRepRegressor` (Alg. 1 + Alg. 2 init),
* :class:`~skdpp.linear_model.PrivAltMinRegressor` (Jain et al. 2021, initialised
  with Snedeker et al.'s Alg. 2 as in the paper's comparison),
* non-private FedRep and AltMin (the same estimators with ``epsilon=np.inf``;
  AltMin with 10 epochs, trained to convergence as in Jain et al.'s baseline),
* local-only least squares (each user alone: minimum-norm least squares on its
  10 rows in 50 dimensions).

Defaults of both estimators are used (tuned once on this synthetic task, see
``benchmarks/bench_representation.py``). The budget of every fit covers the
private initialisation, all iterations and the cold-start head, calibrated
with the exact Gaussian (μ-GDP) accountant.

Run ``python examples/plot_fedrep_vs_altmin.py [--quick]``; results go to
``benchmarks/results/fedrep_vs_altmin.{csv,png}``.
"""

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from skdpp.datasets import make_shared_representation_regression  # noqa: E402
from skdpp import PrivAltMinRegressor  # noqa: E402
from skdpp import PrivateFedRepRegressor  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[1])
parser.add_argument("--quick", action="store_true",
                    help="2 000 users, 2 seeds (a smoke run; not the paper's setting)")
args, _ = parser.parse_known_args(sys.argv[1:] if __name__ == "__main__" else [])

N_USERS = 2_000 if args.quick else 20_000
SEEDS = [0, 1] if args.quick else [0, 1, 2]
EPSILONS = [1.0, 2.0, 4.0, 6.0, 8.0]
DELTA = 1e-6
try:
    OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
except NameError:  # executed without __file__ (e.g. some notebook runners)
    OUT = Path("benchmarks") / "results"
OUT.mkdir(parents=True, exist_ok=True)


def local_only_mse(X, y, groups, X_test, y_test, groups_test, n_users):
    """Each user alone: minimum-norm least squares on its own rows (rows sorted by user)."""
    m = X.shape[0] // n_users
    Xu = X.reshape(n_users, m, -1)
    yu = y.reshape(n_users, m)
    K = Xu @ Xu.transpose(0, 2, 1)  # (n, m, m); m < d: w = X^T (X X^T)^-1 y
    alpha = np.linalg.solve(K + 1e-10 * np.eye(m), yu[..., None])[..., 0]
    W = np.einsum("umd,um->ud", Xu, alpha)
    pred = np.einsum("ij,ij->i", X_test, W[groups_test])
    return float(np.mean((pred - y_test) ** 2))


def test_mse(est, info):
    pred = est.predict(info.X_test, groups=info.groups_test)
    return float(np.mean((pred - info.y_test) ** 2))


rows = []
for seed in SEEDS:
    X, y, groups, info = make_shared_representation_regression(
        n_users=N_USERS, n_features=50, n_components=2, n_samples_per_user=10,
        noise=0.01, head_norm="unit", n_test_samples_per_user=10, random_state=seed)
    rows.append(dict(method="local-only least squares", epsilon=np.inf, seed=seed,
                     mse=local_only_mse(X, y, groups, info.X_test, info.y_test,
                                        info.groups_test, N_USERS)))
    for name, cls in [("FedRep", PrivateFedRepRegressor), ("AltMin", PrivAltMinRegressor)]:
        tic = time.perf_counter()
        # Non-private baselines run to convergence (AltMin's default is one epoch,
        # the best choice under privacy; without noise more epochs keep improving).
        extra = {"max_iter": 10} if name == "AltMin" else {}
        est = cls(epsilon=np.inf, delta=DELTA, random_state=seed, **extra).fit(
            X, y, groups=groups)
        rows.append(dict(method=f"non-private {name}", epsilon=np.inf, seed=seed,
                         mse=test_mse(est, info), seconds=time.perf_counter() - tic))
        for eps in EPSILONS:
            tic = time.perf_counter()
            # the fit raises PrivacyBudgetError if its releases would spend more than eps
            est = cls(epsilon=eps, delta=DELTA, random_state=seed).fit(X, y, groups=groups)
            label = "PrivateFedRep" if name == "FedRep" else "PrivAltMin"
            rows.append(dict(method=label, epsilon=eps, seed=seed, mse=test_mse(est, info),
                             seconds=time.perf_counter() - tic))
    print(f"seed {seed} done", flush=True)

results = pd.DataFrame(rows)
suffix = "_quick" if args.quick else ""
results.to_csv(OUT / f"fedrep_vs_altmin{suffix}.csv", index=False)
summary = (results.groupby(["method", "epsilon"])["mse"].agg(["mean", "std", "count"])
           .reset_index())
print(summary.to_string(index=False))

fig, ax = plt.subplots(figsize=(6.4, 4.2))
styles = {"PrivateFedRep": ("C0", "o-"), "PrivAltMin": ("C1", "s-")}
for method, (color, fmt) in styles.items():
    part = summary[summary.method == method]
    ax.errorbar(part.epsilon, part["mean"], yerr=part["std"], fmt=fmt, color=color,
                label=method, capsize=3)
baselines = {"non-private FedRep": ("C0", "--"), "non-private AltMin": ("C1", ":"),
             "local-only least squares": ("C2", "-.")}
for method, (color, ls) in baselines.items():
    value = summary.loc[summary.method == method, "mean"].iloc[0]
    ax.axhline(value, color=color, ls=ls, label=f"{method} ({value:.2g})")
ax.set_yscale("log")
ax.set_xlabel("ε (δ = 1e-6)")
ax.set_ylabel("test MSE (10 fresh rows per user)")
ax.set_title(f"n={N_USERS}, d=50, k=2, m=10, R=0.01; {len(SEEDS)} seeds")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / f"fedrep_vs_altmin{suffix}.png", dpi=120)
print(f"saved {OUT / f'fedrep_vs_altmin{suffix}.png'}")
