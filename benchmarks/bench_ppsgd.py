"""Speed and memory of PPSGDRegressor.fit: time per round and peak memory.

Settings: the paper's synthetic setting (Bietti et al. 2022, §6: N = 1000
users, d = 100, minibatch 10; 100 stored rows per user, so 1000 rounds make
10 passes), then 10^5 and 10^6 users, with every user in every round
(``sample_rate=1``) and with client sampling (``sample_rate=0.1``).

Peak memory is measured with ``tracemalloc`` (numpy reports its buffers to
it) during ``fit`` only, i.e. on top of the input arrays. Times are CPU
seconds of this process (``time.process_time``: other jobs on shared cores do
not inflate them; run with ``OPENBLAS_NUM_THREADS=1`` so that CPU time is
work, not spinning threads) and wall-clock seconds.

Writes ``benchmarks/results/ppsgd_benchmark.csv`` and prints a markdown table
(copied into ``benchmarks/results/ppsgd_benchmark.md``).
Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_ppsgd.py [--quick]``
(``--quick``: the paper setting and 10^5 users only, no CSV).

``--issue15 N [N ...]``: the cases of issue 15 instead, printed as JSON lines
(no CSV): ``N`` users x 10 rows, d = 20, ``n_rounds=20`` and every other
parameter at its default (``epsilon=1``, ``random_state=0``), on the data of
``benchmarks/bench_scaling.py``, with its memory measure (peak RSS added by
the fit, ``VmHWM`` after minus ``VmRSS`` before, the peak reset through
``/proc/self/clear_refs``); ``N = 0`` runs the paper setting above
(``sample_rate=1``, CPU seconds, min of 2 fits).
"""

import argparse
import csv
import time
import tracemalloc
from pathlib import Path

import numpy as np

from skdpp import PPSGDRegressor

RESULTS = Path(__file__).resolve().parent / "results"

# (n_users, rows per user, n_features, batch_size, n_rounds, sample_rate)
SETTINGS = [
    (1_000, 100, 100, 10, 1000, 1.0),
    (1_000, 100, 100, 10, 1000, 0.1),
    (100_000, 10, 20, 10, 50, 1.0),
    (100_000, 10, 20, 10, 200, 0.1),
    (1_000_000, 4, 8, 4, 10, 1.0),
    (1_000_000, 4, 8, 4, 50, 0.1),
]


def make_data(n_users, n_rows, d, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), n_rows)
    X = rng.standard_normal((n_users * n_rows, d))
    w = rng.standard_normal(d)
    y = X @ w + 0.1 * rng.standard_normal(len(groups))
    return X, y, groups


def timed_fit(est, X, y, groups):
    """(CPU seconds, wall seconds) of one ``fit``."""
    cpu, wall = time.process_time(), time.perf_counter()
    est.fit(X, y, groups=groups)
    return time.process_time() - cpu, time.perf_counter() - wall


def issue15(sizes):
    """The issue-15 cases (see the module docstring): one JSON line per case."""
    import gc
    import json
    import os
    import sys
    import warnings

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_scaling import _status_kb, make_data as scaling_data

    warnings.simplefilter("ignore")  # delta >= 1/n_users at 10^6 users
    for n_users in sizes:
        if n_users == 0:  # the paper setting, min of 2
            X, y, groups = make_data(1_000, 100, 100)
            est = PPSGDRegressor(epsilon=1.0, delta=1e-8, clip_norm=1.0, alpha=1.0,
                                 learning_rate=0.1, n_rounds=1000, batch_size=10,
                                 random_state=0)
            cpu = min(timed_fit(est, X, y, groups)[0] for _ in range(2))
            print(json.dumps({"case": "paper", "cpu_s": round(cpu, 3),
                              "load_1min": os.getloadavg()[0]}), flush=True)
            continue
        X, y, groups = scaling_data("PPSGDRegressor", n_users, 10, 20)
        est = PPSGDRegressor(epsilon=1.0, n_rounds=20, random_state=0)
        gc.collect()
        rss0 = _status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        cpu, wall = timed_fit(est, X, y, groups)
        peak = max(0, _status_kb("VmHWM") - rss0) * 1024
        print(json.dumps({"case": "issue15", "n_users": n_users, "cpu_s": round(cpu, 2),
                          "wall_s": round(wall, 2), "peak_over_x": round(peak / X.nbytes, 3),
                          "load_1min": os.getloadavg()[0]}), flush=True)
        del X, y, groups, est


def main(quick=False):
    rows = []
    for n_users, n_rows, d, batch, n_rounds, q in SETTINGS[:4] if quick else SETTINGS:
        X, y, groups = make_data(n_users, n_rows, d)
        est = PPSGDRegressor(epsilon=1.0, delta=1e-8, clip_norm=1.0, alpha=1.0,
                             learning_rate=0.1, n_rounds=n_rounds, batch_size=batch,
                             sample_rate=q, random_state=0)
        cpu, wall = timed_fit(est, X, y, groups)  # timed without tracemalloc
        tracemalloc.start()
        est.fit(X, y, groups=groups)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # Time of the rounds alone: the same fit with one round, subtracted.
        one = PPSGDRegressor(**{**est.get_params(), "n_rounds": 1})
        cpu_one, _ = timed_fit(one, X, y, groups)
        per_round = (cpu - cpu_one) / max(n_rounds - 1, 1)
        row = {"n_users": n_users, "rows_per_user": n_rows, "n_features": d,
               "batch_size": batch, "sample_rate": q, "n_rounds": n_rounds,
               "fit_cpu_s": round(cpu, 3), "fit_wall_s": round(wall, 3),
               "setup_cpu_s": round(cpu_one, 3),
               "cpu_ms_per_round": round(1e3 * per_round, 3),
               "peak_fit_memory_MB": round(peak / 2**20, 1),
               "input_MB": round((X.nbytes + y.nbytes + groups.nbytes) / 2**20, 1)}
        rows.append(row)
        print(row, flush=True)
        del X, y, groups
    if quick:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "ppsgd_benchmark.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[h]) for h in header) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the paper setting and 10^5 users only; no CSV written")
    parser.add_argument("--issue15", type=int, nargs="+", metavar="N",
                        help="the issue-15 cases with N users (0: the paper setting)")
    args = parser.parse_args()
    if args.issue15:
        issue15(args.issue15)
    else:
        main(quick=args.quick)
