"""Scale benchmark of AdaptiveWeightMF on an ML-10M-sized synthetic problem.

ML-10M has 10^7 ratings, 69 878 users and 10 677 movies; the paper trains
embeddings of dimension up to 128 (32 for the Million Song Data). This script
generates a synthetic rating matrix of that shape (Zipf-like item popularity,
log-normal user activity, low-rank ratings on a 0.5-5 scale), fits
``AdaptiveWeightMF`` and records wall-clock time per stage and peak memory.

Usage::

    python benchmarks/bench_adaptive_mf.py                       # full size
    python benchmarks/bench_adaptive_mf.py --n-ratings 1000000   # smaller

Appends one row per run to ``benchmarks/results/adaptive_mf_scale.csv``.
Timings on a shared machine are inflated by contention: the ``note`` column
says so when given with ``--note``.
"""

import argparse
import resource
import time
from pathlib import Path

import numpy as np

from skdpp.decomposition._adaptive_mf import AdaptiveWeightMF

RESULTS = Path(__file__).resolve().parent / "results"


def make_data(n_ratings, n_users, n_items, rank=8, seed=0):
    """Synthetic ratings with skewed item popularity and user activity."""
    rng = np.random.default_rng(seed)
    item_p = 1.0 / np.arange(1, n_items + 1) ** 0.9
    item_p /= item_p.sum()
    user_p = rng.lognormal(0.0, 1.0, n_users)
    user_p /= user_p.sum()
    # Draw more pairs than needed, deduplicate, keep n_ratings.
    n_draw = int(n_ratings * 1.15)
    users = rng.choice(n_users, size=n_draw, p=user_p)
    items = rng.choice(n_items, size=n_draw, p=item_p)
    pairs = np.unique(users.astype(np.int64) * n_items + items)
    pairs = rng.permutation(pairs)[:n_ratings]
    users, items = pairs // n_items, pairs % n_items
    U = rng.standard_normal((n_users, rank)) / np.sqrt(rank)
    V = rng.standard_normal((n_items, rank)) / np.sqrt(rank)
    y = 3.5 + np.einsum("nk,nk->n", U[users], V[items]) + 0.5 * rng.standard_normal(users.size)
    return items[:, None], np.clip(y, 0.5, 5.0), users


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ratings", type=int, default=10_000_000)
    parser.add_argument("--n-users", type=int, default=70_000)
    parser.add_argument("--n-items", type=int, default=10_000)
    parser.add_argument("--n-components", type=int, default=32)
    parser.add_argument("--n-iter", type=int, default=5)
    parser.add_argument("--solver", default="als", choices=["als", "sgd"])
    parser.add_argument("--weighting", default="adaptive")
    parser.add_argument("--note", default="")
    args = parser.parse_args()

    t0 = time.perf_counter()
    X, y, groups = make_data(args.n_ratings, args.n_users, args.n_items)
    t_data = time.perf_counter() - t0
    print(f"data: {y.size} ratings, {np.unique(groups).size} users, "
          f"{np.unique(X).size} items ({t_data:.1f} s)", flush=True)

    est = AdaptiveWeightMF(
        n_components=args.n_components, epsilon=1.0, delta=1e-5, rating_clip=2.0,
        n_iter=args.n_iter, solver=args.solver, weighting=args.weighting,
        user_budget=50, random_state=0, verbose=1,
    )
    t0 = time.perf_counter()
    est.fit(X, y, groups)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = est.predict(X[:1_000_000], groups[:1_000_000])
    t_pred = time.perf_counter() - t0
    train_rmse = float(np.sqrt(np.mean((pred - y[:1_000_000]) ** 2)))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"fit {t_fit:.1f} s ({t_fit / args.n_iter:.1f} s / iteration incl. setup), "
          f"predict 1e6 rows {t_pred:.2f} s, peak RSS {peak_gb:.2f} GB, "
          f"train RMSE {train_rmse:.3f}, epsilon spent "
          f"{est.privacy_report_.epsilon_spent:.3f}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "adaptive_mf_scale.csv"
    new = not out.exists()
    with open(out, "a") as f:
        if new:
            f.write("n_ratings,n_users,n_items,n_components,n_iter,solver,weighting,"
                    "data_s,fit_s,predict_1e6_s,peak_rss_gb,note\n")
        f.write(f"{y.size},{np.unique(groups).size},{np.unique(X).size},"
                f"{args.n_components},{args.n_iter},{args.solver},{args.weighting},"
                f"{t_data:.1f},{t_fit:.1f},{t_pred:.2f},{peak_gb:.2f},{args.note}\n")


if __name__ == "__main__":
    main()
