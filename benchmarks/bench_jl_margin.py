"""Fit time and peak memory of JLMarginClassifier vs the number of candidates and users.

Data: :func:`skdpp.datasets.make_personalized_margin_classification` with
``d = 50``, ``k = 2``, 10 rows per user, ``margin = 0.05``; estimator with
``jl_dim = 32``, ``epsilon = 1``, default ``candidates="subspace"``,
``personal_rows="all"`` (the score uses all rows) and ``n_directions = 64``.  Each
configuration is fitted ``--repeats`` times; the table reports the median
wall-clock and CPU seconds (``time.process_time``: compare these on a shared
machine) and the peak memory of one more fit, traced with ``tracemalloc``
(numpy reports its buffers to it: the peak of the allocations made during
``fit``, over the input ``X``).  The exponential mechanism's scoring costs
``O(n_candidates * n_rows * (k' k + n_directions))`` and dominates.

Run (one BLAS thread, as recorded)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_jl_margin.py [--quick] [--out FILE]

Writes ``benchmarks/results/jl_margin_benchmark.md`` (or ``--out``).
"""

import argparse
import os
import platform
import time
import tracemalloc
from pathlib import Path

import numpy as np

from skdpp import JLMarginClassifier
from skdpp.datasets import make_personalized_margin_classification

RESULTS = Path(__file__).resolve().parent / "results"


def _estimator(seed, **params):
    return JLMarginClassifier(n_components=2, jl_dim=32, margin=0.05, epsilon=1.0,
                              random_state=seed, **params)


def time_fit(X, y, g, repeats, **params):
    """Median wall-clock and CPU seconds of ``repeats`` fits, and one traced peak."""
    wall, cpu = [], []
    for r in range(repeats):
        clf = _estimator(r, **params)
        t, c = time.perf_counter(), time.process_time()
        clf.fit(X, y, groups=g)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    tracemalloc.start()
    _estimator(0, **params).fit(X, y, groups=g)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return float(np.median(wall)), float(np.median(cpu)), peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "jl_margin_benchmark.md")
    args = parser.parse_args()
    users_grid = (1000, 4000) if args.quick else (1000, 4000, 16000)
    cand_grid = (32, 128) if args.quick else (32, 128, 512)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    lines = [
        "# JLMarginClassifier fit time and memory",
        "",
        f"Command: `OPENBLAS_NUM_THREADS={threads} python benchmarks/bench_jl_margin.py"
        f"{' --quick' if args.quick else ''}` (median of {args.repeats} fits; peak of "
        "one more fit under tracemalloc)",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy "
        f"{np.__version__}, 2 cores shared with other jobs (wall-clock times are "
        f"inflated by contention; compare CPU seconds). 1-minute load average at the "
        f"start: {os.getloadavg()[0]:.2f}.",
        "",
        "d = 50, k = 2, k' = 32, 10 rows per user, epsilon = 1, n_directions = 64.",
        "",
        "| n_users | n_rows | n_candidates | fit time (s) | CPU (s) | CPU s per 1e6 "
        "candidate-rows | peak (MiB) | X (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n_users in users_grid:
        X, y, g, _ = make_personalized_margin_classification(
            n_users=n_users, n_features=50, n_components=2, margin=0.05, random_state=0)
        for n_cand in cand_grid:
            wall, cpu, peak = time_fit(X, y, g, args.repeats, n_candidates=n_cand)
            per = cpu / (n_cand * X.shape[0] / 1e6)
            lines.append(f"| {n_users} | {X.shape[0]} | {n_cand} | {wall:.2f} | {cpu:.2f} "
                         f"| {per:.3f} | {peak / 2**20:.1f} | {X.nbytes / 2**20:.1f} |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
