"""Speed, memory and tuning benchmark of PrivateFedRepRegressor / PrivAltMinRegressor.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_representation.py [--quick] [--tune]
        [--max-users N]

* fit time at the papers' setting (n=20 000, d=50, k=2, m=10), median of 3 fits;
* fit time and peak memory (tracemalloc, allocations made during ``fit``) of
  ``PrivateFedRepRegressor`` (T=5, defaults) for n ∈ {1e4, 1e5, 1e6} users with
  10 rows each and d=50, against the size of ``X``;
* ``--tune``: the small grid used to choose the defaults (test MSE at ε=1 and 4).

Writes ``benchmarks/results/fedrep_benchmark.md`` and ``fedrep_benchmark.csv``
(``_quick`` suffix with ``--quick``).
"""

import argparse
import gc
import itertools
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from skdpp.datasets import make_shared_representation_regression
from skdpp.linear_model._altmin import PrivAltMinRegressor
from skdpp.linear_model._fedrep import PrivateFedRepRegressor

OUT = Path(__file__).resolve().parent / "results"

NOTES = """
## Notes

* Targets: paper setting < 0.2 s per fit; 10^6 users < 20 s and peak memory
  < 2.5x the size of ``X``. Peak memory is the tracemalloc peak of allocations
  made *during* ``fit`` (``X`` itself is allocated before), divided by
  ``X.nbytes``.
* ``load_average`` is the 1-minute load when the row was measured; ``seconds``
  is wall-clock, ``cpu_seconds`` the process CPU time of the single-threaded
  fit (``OPENBLAS_NUM_THREADS=1``). On this 2-core machine two BLAS threads were
  not faster (0.170 s vs 0.164 s at the paper setting), so no thread limits are
  set inside ``fit``.
* Memory: no ``n_rows x d`` temporaries. The fit runs block functions over
  blocks of whole users (~32768 rows each, canonical order). The rounds read
  only the ``S^0`` rows: each block keeps a contiguous copy of them when ``X``
  takes at most 128 MiB; otherwise each round gathers them into one reused
  per-thread scratch buffer (a copy of half of ``X`` cost 0.3-4 s of
  fresh-memory page faults at 10^6 users). Per-row temporaries are per block
  and reused (fresh 6 MiB temporaries per block cost 10x the page faults).
* Since issue 10 (one data-and-randomness layer) every fit first puts the rows
  in canonical order (a content hash of every row, one sort) and draws the
  ``S^0`` split and batches as keyed hashes, so a fit is a function of the set
  of records (permuting rows gives bit-identical results). At 10^6 users the
  row hashes, the sorts and the keyed uniforms cost ~2.5 s of CPU (shared
  layer: ``utils/_random.row_hashes``, ``utils/_grouped.canonical_order``,
  ``UserBlock.row_uniforms`` / ``ranks_by``).
* Before the speed-ups of 2026-11-21 (same command, idle machine, load 0.5-0.8):
  paper setting 0.29 s (FedRep) / 0.35 s (AltMin); 10^6 users 27.4 s, peak 1.19x ``X``.
* Spectral initialisation: users with ``2 <= m <= d`` rows whose U-statistic
  does not cancel (all users of this benchmark) skip the thin QR: the norm of
  ``Z_i`` comes from the ``m x m`` Gram of the user's scaled rows (accurate to
  ~1e-12 relative there) and the clipped terms are added in one product;
  cancelling users keep the QR route (clip from the computed ``B_i``).
* Defaults were chosen on this setting (seed 1 data, see ``--tune``):
  FedRep ``learning_rate=1, clip_norm=1, init_clip_norm=5``, ``budget_shares={"init": 0.1}``;
  AltMin ``max_iter=1, clip_norm=5, label_clip=1, psd_floor=32``.
"""


def data(n_users, seed=0, n_test=0):
    return make_shared_representation_regression(
        n_users=n_users, n_features=50, n_components=2, n_samples_per_user=10, noise=0.01,
        n_test_samples_per_user=n_test, random_state=seed)


def timed_fit(est, X, y, groups, trace=False):
    gc.collect()
    if trace:
        tracemalloc.start()
    tic, cpu = time.perf_counter(), time.process_time()
    est.fit(X, y, groups=groups)
    seconds, cpu = time.perf_counter() - tic, time.process_time() - cpu
    peak = None
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return seconds, cpu, peak


def _markdown(frame):
    """A markdown table (no tabulate dependency)."""
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)

    head = "| " + " | ".join(frame.columns) + " |"
    sep = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--max-users", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    rows, lines = [], []
    load0 = os.getloadavg()[0]

    # 1. paper setting: median of 3 fits
    X, y, groups, info = data(2_000 if args.quick else 20_000, n_test=10)
    for name, cls in [("PrivateFedRepRegressor", PrivateFedRepRegressor),
                      ("PrivAltMinRegressor", PrivAltMinRegressor)]:
        times = np.array([timed_fit(cls(epsilon=1.0, random_state=s), X, y, groups)[:2]
                          for s in range(5)])
        rows.append(dict(benchmark="paper setting", estimator=name, n_users=len(info.V),
                         seconds=float(np.median(times[:, 0])),
                         cpu_seconds=float(np.median(times[:, 1])),
                         load_average=os.getloadavg()[0]))
        print(rows[-1], flush=True)

    # 2. scale: FedRep T=5, 10 rows per user, d=50
    sizes = [10_000, 100_000, 1_000_000]
    if args.quick:
        sizes = [10_000, 100_000]
    for n in [s for s in sizes if s <= args.max_users]:
        X, y, groups, _ = data(n)
        est = PrivateFedRepRegressor(epsilon=1.0, delta=min(1e-6, 0.1 / n), random_state=0)
        seconds, cpu, peak = timed_fit(est, X, y, groups, trace=True)
        rows.append(dict(benchmark="scale", estimator="PrivateFedRepRegressor", n_users=n,
                         seconds=seconds, cpu_seconds=cpu, peak_mib=peak / 2**20,
                         x_mib=X.nbytes / 2**20, peak_over_x=peak / X.nbytes,
                         load_average=os.getloadavg()[0]))
        print(rows[-1], flush=True)
        del X, y, groups
        gc.collect()

    # 3. tuning grid (optional)
    if args.tune:
        X, y, groups, info = data(20_000, seed=1, n_test=10)

        def mse(est):
            pred = est.predict(info.X_test, groups=info.groups_test)
            return float(np.mean((pred - info.y_test) ** 2))

        for eps, lr, clip in itertools.product([1.0, 4.0], [0.5, 1.0, 2.0], [0.5, 1.0, 2.0]):
            est = PrivateFedRepRegressor(epsilon=eps, learning_rate=lr, clip_norm=clip,
                                         random_state=0).fit(X, y, groups=groups)
            rows.append(dict(benchmark="tune", estimator="PrivateFedRepRegressor",
                             n_users=20_000, epsilon=eps, learning_rate=lr, clip_norm=clip,
                             mse=mse(est)))
            print(rows[-1], flush=True)
        for eps, T, clip, zeta in itertools.product([1.0, 8.0], [1, 2, 3], [3.0, 5.0, 7.0],
                                                    [1.0, 2.0]):
            est = PrivAltMinRegressor(epsilon=eps, max_iter=T, clip_norm=clip,
                                      label_clip=zeta, random_state=0).fit(X, y, groups=groups)
            rows.append(dict(benchmark="tune", estimator="PrivAltMinRegressor",
                             n_users=20_000, epsilon=eps, max_iter=T, clip_norm=clip,
                             label_clip=zeta, mse=mse(est)))
            print(rows[-1], flush=True)

    table = pd.DataFrame(rows)
    suffix = "_quick" if args.quick else ""
    table.to_csv(OUT / f"fedrep_benchmark{suffix}.csv", index=False)
    lines.append("# PrivateFedRepRegressor / PrivAltMinRegressor benchmark\n")
    lines.append("Command: `OPENBLAS_NUM_THREADS=1 python benchmarks/bench_representation.py "
                 + " ".join(argv) + "`\n")
    lines.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
                 f"{platform.python_version()}, numpy {np.__version__}; 1-minute load "
                 f"average at the start: {load0:.2f} (other jobs inflate wall-clock times).\n")
    for bench, part in table.groupby("benchmark", sort=False):
        lines.append(f"\n## {bench}\n")
        lines.append(_markdown(part.dropna(axis=1, how="all")))
        lines.append("")
    lines.append(NOTES)
    (OUT / f"fedrep_benchmark{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
