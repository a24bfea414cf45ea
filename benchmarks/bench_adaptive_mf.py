"""Scale benchmark of AdaptiveWeightMF on an ML-10M-sized synthetic problem.

ML-10M has 10^7 ratings, 69 878 users and 10 677 movies; the paper trains
embeddings of dimension up to 128 (32 for the Million Song Data). This script
generates a synthetic rating matrix of that shape (Zipf-like item popularity,
log-normal user activity, low-rank ratings on a 0.5-5 scale), fits
``AdaptiveWeightMF`` and records wall-clock and CPU time per stage and peak
memory (run with ``OPENBLAS_NUM_THREADS=1`` and compare CPU seconds on a shared
machine).

Usage::

    python benchmarks/bench_adaptive_mf.py                       # full size
    python benchmarks/bench_adaptive_mf.py --n-ratings 1000000   # smaller
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_adaptive_mf.py --n-ratings 2000000 \
        --no-save                                                # before/after runs

Appends one row per run to ``benchmarks/results/adaptive_mf_scale.csv`` (unless
``--no-save``);
``--compare`` also writes ``adaptive_mf_scale_rmse.csv`` (test RMSE of the
budget allocations at epsilon = 1 on this skewed ML-10M-sized problem).
Timings on a shared machine are inflated by contention: the ``note`` column
says so when given with ``--note``.
"""

import argparse
import csv
import gc
import resource
import time
from pathlib import Path

import numpy as np

from skdpp.decomposition import AdaptiveWeightMF

RESULTS = Path(__file__).resolve().parent / "results"


def _current_rss_gb():
    """Resident memory of this process now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return pages * resource.getpagesize() / 2**30


def _status_kb(field):
    """A field of ``/proc/self/status`` in kB (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak():
    """Reset the peak RSS (VmHWM) to the current RSS (as ``bench_scaling.py``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def make_data(n_ratings, n_users, n_items, rank=8, seed=0):
    """Synthetic ratings with skewed item popularity and user activity."""
    rng = np.random.default_rng(seed)
    item_p = 1.0 / np.arange(1, n_items + 1) ** 0.9
    item_p /= item_p.sum()
    user_p = rng.lognormal(0.0, 1.0, n_users)
    user_p /= user_p.sum()
    # Draw pairs in rounds until n_ratings distinct ones (a few rounds).
    pairs = np.empty(0, dtype=np.int64)
    while pairs.size < n_ratings:
        n_draw = int(1.2 * (n_ratings - pairs.size)) + 1000
        users = rng.choice(n_users, size=n_draw, p=user_p)
        items = rng.choice(n_items, size=n_draw, p=item_p)
        pairs = np.unique(np.concatenate([pairs, users.astype(np.int64) * n_items + items]))
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
    parser.add_argument("--reg", type=float, default=1.0)
    parser.add_argument("--solver", default="als", choices=["als", "sgd"])
    parser.add_argument("--weighting", default="adaptive")
    parser.add_argument("--note", default="")
    parser.add_argument("--no-save", action="store_true",
                        help="print the results only (no CSV row)")
    parser.add_argument("--compare", action="store_true",
                        help="also fit uniform/tail/adaptive at epsilon=1 on a 90/10 "
                             "split and record test RMSE")
    args = parser.parse_args()

    t0 = time.perf_counter()
    X, y, groups = make_data(args.n_ratings, args.n_users, args.n_items)
    t_data = time.perf_counter() - t0
    print(f"data: {y.size} ratings, {np.unique(groups).size} users, "
          f"{np.unique(X).size} items ({t_data:.1f} s)", flush=True)

    est = AdaptiveWeightMF(
        n_components=args.n_components, epsilon=1.0, delta=1e-5, rating_clip=2.0,
        n_iter=args.n_iter, solver=args.solver, weighting=args.weighting, reg=args.reg,
        user_budget=50, random_state=0, verbose=1,
    )
    rss_before_gb = _current_rss_gb()
    input_bytes = X.nbytes + y.nbytes + np.asarray(groups).nbytes
    gc.collect()
    rss0_kb = _status_kb("VmRSS")
    _reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X, y, groups)
    t_fit, c_fit = time.perf_counter() - t0, time.process_time() - c0
    fit_extra_gb = max(0, _status_kb("VmHWM") - rss0_kb) / 2**20
    t0 = time.perf_counter()
    pred = est.predict(X[:1_000_000], groups[:1_000_000])
    t_pred = time.perf_counter() - t0
    train_rmse = float(np.sqrt(np.mean((pred - y[:1_000_000]) ** 2)))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"fit {t_fit:.1f} s wall, {c_fit:.1f} s CPU "
          f"({c_fit / args.n_iter:.1f} CPU s / iteration incl. setup), "
          f"predict 1e6 rows {t_pred:.2f} s, RSS before fit {rss_before_gb:.2f} GB, "
          f"peak RSS {peak_gb:.2f} GB, peak added by the fit {fit_extra_gb:.2f} GB "
          f"({fit_extra_gb * 2**30 / input_bytes:.2f}x the input X, y, groups of "
          f"{input_bytes / 2**30:.2f} GB), train RMSE {train_rmse:.3f}, epsilon spent "
          f"{est.privacy_report_.epsilon_spent:.3f}")
    if args.no_save:
        if args.compare:
            compare(X, y, groups, args)
        return

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "adaptive_mf_scale.csv"
    new = not out.exists()
    with open(out, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["n_ratings", "n_users", "n_items", "n_components", "n_iter",
                             "solver", "weighting", "data_s", "fit_s", "predict_1e6_s",
                             "peak_rss_gb", "note", "fit_cpu_s"])
        writer.writerow([y.size, np.unique(groups).size, np.unique(X).size,
                         args.n_components, args.n_iter, args.solver, args.weighting,
                         f"{t_data:.1f}", f"{t_fit:.1f}", f"{t_pred:.2f}", f"{peak_gb:.2f}",
                         args.note, f"{c_fit:.1f}"])
    if args.compare:
        compare(X, y, groups, args)


def compare(X, y, groups, args):
    """Test RMSE of uniform / tail / adaptive at epsilon=1 on a 90/10 split."""
    from skdpp.model_selection import per_user_train_test_split

    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=groups, test_size=0.1, random_state=0
    )
    rows = []
    mean = y_tr.mean()
    rows.append(("mean only (non-private)", float(np.sqrt(np.mean((y_te - mean) ** 2))), 0.0))
    users, codes = np.unique(g_tr, return_inverse=True)
    bias = np.bincount(codes, weights=y_tr - mean) / (np.bincount(codes) + args.reg)
    pred = mean + bias[np.searchsorted(users, g_te)]
    rows.append(("mean + user bias (non-private)",
                 float(np.sqrt(np.mean((y_te - pred) ** 2))), 0.0))
    for name, score, _ in rows:
        print(f"{name:<32} test RMSE {score:.4f}", flush=True)
    for name, params in [("uniform", dict(weighting="uniform")),
                         ("tail", dict(weighting="tail")),
                         ("adaptive mu=1/4", dict(weighting="adaptive", mu=0.25)),
                         ("adaptive mu=1/2", dict(weighting="adaptive", mu=0.5))]:
        t0 = time.perf_counter()
        est = AdaptiveWeightMF(
            n_components=args.n_components, epsilon=1.0, delta=1e-5, rating_clip=2.0,
            n_iter=args.n_iter, solver=args.solver, user_budget=50, reg=args.reg,
            random_state=0, **params,
        ).fit(X_tr, y_tr, g_tr)
        pred = est.predict(X_te, g_te)
        score = float(np.sqrt(np.mean((pred - y_te) ** 2)))
        rows.append((name, score, time.perf_counter() - t0))
        print(f"epsilon=1 {name:<16} test RMSE {score:.4f} "
              f"({rows[-1][2]:.0f} s)", flush=True)
    out = RESULTS / "adaptive_mf_scale_rmse.csv"
    new = not out.exists()
    with open(out, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["n_ratings", "n_components", "n_iter", "reg", "solver",
                             "epsilon", "method", "test_rmse", "fit_s"])
        for name, score, secs in rows:
            eps = "inf" if "non-private" in name else 1.0
            writer.writerow([y.size, args.n_components, args.n_iter, args.reg, args.solver,
                             eps, name, f"{score:.4f}", f"{secs:.0f}"])


if __name__ == "__main__":
    main()
