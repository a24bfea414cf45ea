"""Fit time of JLMarginClassifier vs the number of candidates and of users.

Data: :func:`skdpp.datasets.make_personalized_margin_classification` with
``d = 50``, ``k = 2``, 10 rows per user, ``margin = 0.05``; estimator with
``jl_dim = 32``, ``epsilon = 1``, default ``candidates="subspace"``,
``split="none"`` (the score uses all rows) and ``n_directions = 64``.  Each configuration is timed
``--repeats`` times (median reported).  The exponential mechanism's scoring
costs ``O(n_candidates * n_rows * (k' k + n_directions))`` and dominates.

Run::

    python benchmarks/bench_jl_margin.py [--quick]

Writes ``benchmarks/results/jl_margin_benchmark.md``.
"""

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from skdpp.datasets import make_personalized_margin_classification
from skdpp.linear_model._jl_margin import JLMarginClassifier

RESULTS = Path(__file__).resolve().parent / "results"


def time_fit(X, y, g, repeats, **params):
    times = []
    for r in range(repeats):
        clf = JLMarginClassifier(n_components=2, jl_dim=32, margin=0.05, epsilon=1.0,
                                 random_state=r, **params)
        t = time.perf_counter()
        clf.fit(X, y, groups=g)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    users_grid = (1000, 4000) if args.quick else (1000, 4000, 16000)
    cand_grid = (32, 128) if args.quick else (32, 128, 512)

    lines = [
        "# JLMarginClassifier fit time",
        "",
        f"Command: `python benchmarks/bench_jl_margin.py{' --quick' if args.quick else ''}`"
        f" (median of {args.repeats} fits)",
        "",
        f"Machine: {platform.machine()}, {platform.python_version()}, 2 cores shared with "
        "other jobs (timings are inflated by contention).",
        "",
        "d = 50, k = 2, k' = 32, 10 rows per user, epsilon = 1, n_directions = 64.",
        "",
        "| n_users | n_rows | n_candidates | fit time (s) | s per 1e6 candidate-rows |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n_users in users_grid:
        X, y, g, _ = make_personalized_margin_classification(
            n_users=n_users, n_features=50, n_components=2, margin=0.05, random_state=0)
        for n_cand in cand_grid:
            t = time_fit(X, y, g, args.repeats, n_candidates=n_cand)
            per = t / (n_cand * X.shape[0] / 1e6)
            lines.append(f"| {n_users} | {X.shape[0]} | {n_cand} | {t:.2f} | {per:.3f} |")
            print(lines[-1], flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "jl_margin_benchmark.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'jl_margin_benchmark.md'}")


if __name__ == "__main__":
    main()
