"""Scaling benchmark: fit time (wall, CPU) and peak memory of every estimator vs problem size.

Usage::

    python benchmarks/bench_scaling.py [--quick] [--only NAME ...] [--no-paired]

Every case runs in its own subprocess (fresh heap): it generates the data,
then measures one ``fit`` of the estimator with its **default parameters**
(``epsilon=1.0``, ``random_state=0``; public API only): wall seconds, CPU
seconds of the process (all threads), and the peak resident memory *added*
by the fit (``VmHWM`` after the fit minus ``VmRSS`` before it, the peak
being reset just before the fit through ``/proc/self/clear_refs``), compared
with the size of ``X``.

Sweeps (full run; ``--quick`` uses the first sizes only):

* users: 10^3..10^6 users (10 rows each; FedRep / AltMin / JL: d=50,
  PPSGD: d=20; AdaptiveWeightMF: 20 ratings per user, 10^4 items). Capped so
  that the full run stays within ~20 minutes on the shared 2-core machine
  (measured under a load average of 10-15 from other jobs, wall time 5-8x
  the CPU time): ``--max-users`` (default 3*10^5) caps FedRep and AltMin
  (10^6 with ``--max-users 1000000`` on a quiet machine: the 4 GB data set
  alone took > 5 minutes to generate under that load); PPSGD (200 rounds by
  default), JL and AdaptiveWeightMF stop at 10^5 users (MF: 2*10^6 ratings);
* rows per user m and features d for FedRep and PPSGD (10^4 users);
* paired thread-policy run (FedRep, AltMin at 10^5 users, PPSGD, JL at 10^4):
  with and without one CPU-bound background process (``python -c "while
  True: pass"``, killed afterwards), each with the fit's BLAS thread policy
  (:func:`skdpp.base.blas_threads`) and with it switched off (the library's
  default thread count; the only non-public hook, for this comparison).

Log-log slopes of CPU seconds and peak memory vs the swept size are printed
(least squares over sizes >= 10^4 users, and between the last two sizes).
Writes ``benchmarks/results/scaling{,_quick}.csv``, ``.png`` and ``.md``.

``--big`` runs instead the large cases of issue 15, each at its own
parameters (``BIG``: the papers' settings and 10^6 users / 2*10^7 ratings),
after measuring the machine's floors in a subprocess: read bandwidth
(``np.sum`` over 1 GiB), copy bandwidth and single-thread GEMM rate. Each
case gets a *read floor* (the reads of its input, ``X`` + ``y`` + ``groups``,
at the measured read bandwidth) and, where the algorithm's arithmetic
dominates, a *flop floor* (:func:`big_floor`: the passes over the input and
the flops the algorithm as designed cannot avoid). Writes
``benchmarks/results/scaling_big.{csv,md}``.
"""

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve()

ESTIMATORS = ["PrivateFedRepRegressor", "PrivAltMinRegressor", "PPSGDRegressor",
              "JLMarginClassifier", "AdaptiveWeightMF"]
SHORT = {"PrivateFedRepRegressor": "FedRep", "PrivAltMinRegressor": "AltMin",
         "PPSGDRegressor": "PPSGD", "JLMarginClassifier": "JL", "AdaptiveWeightMF": "MF"}

# users sweep: (estimator, rows per user, d, sizes of the full run)
USERS = {
    "PrivateFedRepRegressor": (10, 50, [10**3, 10**4, 10**5, 3 * 10**5, 10**6]),
    "PrivAltMinRegressor": (10, 50, [10**3, 10**4, 10**5, 3 * 10**5, 10**6]),
    "PPSGDRegressor": (10, 20, [10**3, 10**4, 10**5]),
    "JLMarginClassifier": (10, 50, [10**3, 10**4, 10**5]),
    "AdaptiveWeightMF": (20, 1, [10**3, 10**4, 10**5]),
}
ROWS = {"PrivateFedRepRegressor": (50, [10, 30, 100, 120, 300]),
        "PPSGDRegressor": (20, [10, 30, 100])}
FEATURES = {"PrivateFedRepRegressor": (10, [20, 50, 200]),
            "PPSGDRegressor": (10, [20, 100, 400])}
PAIRED = [("PrivateFedRepRegressor", 10**5), ("PrivAltMinRegressor", 10**5),
          ("PPSGDRegressor", 10**4), ("JLMarginClassifier", 10**4)]
CASE_TIMEOUT = 600

# --big: the issue's large cases, (label, spec); "params" are passed to the estimator
# on top of epsilon=1, random_state=0.
_MF_BENCH = dict(n_components=32, delta=1e-5, rating_clip=2.0, n_iter=5, solver="als",
                 reg=1.0, user_budget=50)  # benchmarks/bench_adaptive_mf.py
BIG = [
    ("FedRep, paper setting (2*10^4 users x 10 rows, d=50, k=2)",
     dict(estimator="PrivateFedRepRegressor", n_users=20_000, m=10, d=50)),
    ("FedRep, 10^6 users x 10 rows, d=50",
     dict(estimator="PrivateFedRepRegressor", n_users=10**6, m=10, d=50)),
    ("AltMin, 10^6 users x 10 rows, d=50",
     dict(estimator="PrivAltMinRegressor", n_users=10**6, m=10, d=50)),
    ("PPSGD, paper setting (10^3 users x 100 rows, d=100, 1000 rounds)",
     dict(estimator="PPSGDRegressor", n_users=1000, m=100, d=100,
          params=dict(delta=1e-8, clip_norm=1.0, alpha=1.0, learning_rate=0.1,
                      n_rounds=1000, batch_size=10))),  # benchmarks/bench_ppsgd.py
    ("PPSGD, 10^6 users x 10 rows, d=20, 20 rounds",
     dict(estimator="PPSGDRegressor", n_users=10**6, m=10, d=20, params=dict(n_rounds=20))),
    ("JL, 3*10^5 users x 10 rows, d=50",
     dict(estimator="JLMarginClassifier", n_users=3 * 10**5, m=10, d=50)),
    # 10^6 users at the defaults take ~320 s CPU (slope 1.02 from 3*10^5): the
    # memory target is shown with fewer candidates (the temporaries are
    # block-sized whatever their number).
    ("JL, 10^6 users x 10 rows, d=50, n_candidates=16",
     dict(estimator="JLMarginClassifier", n_users=10**6, m=10, d=50,
          params=dict(n_candidates=16))),
    ("AdaptiveWeightMF, 10^4 users x 20 ratings, 10^4 items, k=32",
     dict(estimator="AdaptiveWeightMF", n_users=10**4, m=20, d=1, params=_MF_BENCH)),
    ("AdaptiveWeightMF, 2*10^7 ratings (10^6 users), 10^4 items, k=32",
     dict(estimator="AdaptiveWeightMF", n_users=10**6, m=20, d=1, params=_MF_BENCH)),
]


def big_floor(spec):
    """(passes over the input, flops) the algorithm as designed cannot avoid.

    The physical floor of a case is ``max(passes * input bytes / read
    bandwidth, flops / single-thread GEMM rate)``. Counts (from the profiles
    in ``scaling.md``):

    * FedRep / AltMin: 8 reads of ``X`` (validation 1, row hashes 1, the
      keyed S^0/S^1 split 1, the two spectral-init passes and the ``"auto"``
      clip pass over S^0 1.5, 5 rounds over S^0 2.5, the final heads 1); their
      products (``n x d`` by ``d x k``, k = 2) are far below the GEMM floor.
    * PPSGD: each round reads its minibatch rows (``batch_size`` of a user's
      ``m`` rows), plus 3 setup passes (validation, row hashes, moments).
    * JL: the candidate projections and the direction grid,
      ``2 n_rows C k (d + D)`` flops (``C`` candidates, ``k = n_components +
      1``, ``D = 64`` grid directions).
    * AdaptiveWeightMF (ALS, ``k = n_components + 1`` with the user bias):
      per-user Grams ``2 R k^2`` per iteration, for the ridge grid and for
      the personal parts; item statistics ``2 R k^2`` per iteration; one
      ``k x k`` solve (``2 k^3 / 3``) per user per iteration, per grid ridge
      (6) and for the personal parts. The items' eigendecompositions are left
      out (they depend on how many items the private catalogue publishes).
    """
    name, p = spec["estimator"], spec.get("params", {})
    n_rows = spec["n_users"] * spec["m"]
    if name in ("PrivateFedRepRegressor", "PrivAltMinRegressor"):
        return 8.0, 0.0
    if name == "PPSGDRegressor":
        batch = min(p.get("batch_size", spec["m"]) or spec["m"], spec["m"])
        return p.get("n_rounds", 200) * batch / spec["m"] + 3.0, 0.0
    if name == "JLMarginClassifier":
        C, k = p.get("n_candidates", 256), 3
        return 1.0, 2.0 * n_rows * C * k * (spec["d"] + 64)
    k, n_iter = p.get("n_components", 32) + 1, p.get("n_iter", 5)
    grams = 2.0 * n_rows * k * k * ((n_iter + 2) + n_iter)
    solves = spec["n_users"] * (n_iter + 6 + 1) * 2.0 * k**3 / 3.0
    return 1.0, grams + solves


def measure_floors():
    """Read / copy bandwidth (GB/s) and single-thread GEMM rate (GFLOP/s) of this machine."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).random(2**27)  # 1 GiB
    b = np.empty_like(a)

    def best(f, n=5):
        t = []
        for _ in range(n):
            w = time.perf_counter()
            f()
            t.append(time.perf_counter() - w)
        return min(t)

    read = a.nbytes / best(a.sum) / 1e9
    copy = 2 * a.nbytes / best(lambda: np.copyto(b, a)) / 1e9
    A = np.random.default_rng(1).random((2000, 2000))
    with threadpool_limits(1, user_api="blas"):
        gemm = 2 * 2000**3 / best(lambda: A @ A, 3) / 1e9
    return {"read_GBps": read, "copy_GBps": copy, "gemm_GFLOPps": gemm,
            "load_1min": os.getloadavg()[0]}


# --------------------------------------------------------------------------- #
# One case (runs in a subprocess)
# --------------------------------------------------------------------------- #
def make_data(name, n_users, m, d, seed=0):
    """(X, y, groups) of the case; the generators of the estimators' benchmarks."""
    if name in ("PrivateFedRepRegressor", "PrivAltMinRegressor"):
        from skdpp.datasets import make_shared_representation_regression
        return make_shared_representation_regression(
            n_users=n_users, n_features=d, n_components=2, n_samples_per_user=m,
            noise=0.01, random_state=seed)[:3]
    if name == "JLMarginClassifier":
        from skdpp.datasets import make_personalized_margin_classification
        return make_personalized_margin_classification(
            n_users=n_users, n_features=d, n_components=2, n_samples_per_user=m,
            random_state=seed)[:3]
    rng = np.random.default_rng(seed)
    if name == "PPSGDRegressor":  # benchmarks/bench_ppsgd.py
        groups = np.repeat(np.arange(n_users), m)
        X = rng.standard_normal((n_users * m, d))
        y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(groups.size)
        return X, y, groups
    if name == "AdaptiveWeightMF":  # benchmarks/bench_adaptive_mf.py, 10^4 items
        sys.path.insert(0, str(HERE.parent))
        from bench_adaptive_mf import make_data as mf_data
        items, y, users = mf_data(m * n_users, n_users, 10_000)
        return items, y, users
    raise ValueError(name)


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def run_case(spec):
    import skdpp
    import skdpp.base

    if not spec.get("policy", True):
        skdpp.base.MULTITHREAD_MIN_FEATURES = 0  # every fit keeps the library's threads
    X, y, groups = make_data(spec["estimator"], spec["n_users"], spec["m"], spec["d"])
    est = getattr(skdpp, spec["estimator"])(
        **{"epsilon": 1.0, "random_state": 0, **spec.get("params", {})})
    gc.collect()
    rss0 = _status_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        hwm_reset = True
    except OSError:
        hwm_reset = False
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    est.fit(X, y, groups=groups)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = max(0, _status_kb("VmHWM") - rss0) * 1024
    print(json.dumps({**spec, "n_rows": int(X.shape[0]), "x_bytes": int(X.nbytes),
                      "input_bytes": int(X.nbytes + y.nbytes + np.asarray(groups).nbytes),
                      "wall_s": wall, "cpu_s": cpu, "peak_extra_bytes": int(peak),
                      "peak_over_x": peak / X.nbytes, "load_1min": load,
                      "hwm_reset": hwm_reset}))


# --------------------------------------------------------------------------- #
# Driver
# --------------------------------------------------------------------------- #
def subprocess_case(spec, env=None):
    cmd = [sys.executable, str(HERE), "--case", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CASE_TIMEOUT,
                              env=env)
    except subprocess.TimeoutExpired:
        print(f"  TIMEOUT {spec}", flush=True)
        return {**spec, "error": f"timeout {CASE_TIMEOUT}s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        print(f"  FAILED {spec}: {done.stderr[-800:]}", flush=True)
        return {**spec, "error": done.stderr.strip().splitlines()[-1][:200]
                if done.stderr.strip() else f"exit {done.returncode}"}
    row = json.loads(lines[-1])
    print(f"  {SHORT[row['estimator']]:7s} {row['sweep']:8s} users={row['n_users']:>8} "
          f"m={row['m']:>4} d={row['d']:>4} bg={row['background']} "
          f"policy={'on' if row['policy'] else 'off'}: wall {row['wall_s']:7.2f} s, "
          f"cpu {row['cpu_s']:7.2f} s, peak +{row['peak_extra_bytes'] / 2**20:8.1f} MiB "
          f"({row['peak_over_x']:.2f}x X)", flush=True)
    return row


def slope(xs, ys):
    xs, ys = np.log(np.asarray(xs, float)), np.log(np.maximum(np.asarray(ys, float), 1e-9))
    if xs.size < 2:
        return np.nan
    return float(np.polyfit(xs, ys, 1)[0])


def slopes_table(frame, sweep, size_col):
    lines = []
    sub = frame[(frame.sweep == sweep) & frame.error.isna() & (frame.background == 0)
                & frame.policy]
    for name, g in sub.groupby("estimator", sort=False):
        g = g.sort_values(size_col)
        big = g[g[size_col] >= (10**4 if sweep == "users" else 0)]
        last = g.tail(2)
        lines.append(
            f"| {SHORT[name]} | {int(g[size_col].min())}..{int(g[size_col].max())} | "
            f"{slope(big[size_col], big.cpu_s):.2f} | {slope(last[size_col], last.cpu_s):.2f} | "
            f"{slope(big[size_col], big.peak_extra_bytes):.2f} |")
    if not lines:
        return ""
    head = (f"| estimator | {size_col} | CPU slope ({'>= 1e4' if sweep == 'users' else 'all'}) "
            f"| CPU slope (last two) | peak-memory slope |\n|---|---|---|---|---|\n")
    return head + "\n".join(lines) + "\n"


def markdown_table(frame):
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def plot(frame, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = frame[(frame.sweep == "users") & frame.error.isna() & (frame.background == 0)
                & frame.policy]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, (name, g) in enumerate(sub.groupby("estimator", sort=False)):
        g = g.sort_values("n_users")
        color = f"C{i}"
        ax_t.loglog(g.n_users, g.cpu_s, "o-", color=color, label=f"{SHORT[name]} CPU")
        ax_t.loglog(g.n_users, g.wall_s, "x:", color=color, alpha=0.6)
        ax_m.loglog(g.n_users, g.peak_extra_bytes / 2**20, "o-", color=color,
                    label=f"{SHORT[name]} fit peak")
        ax_m.loglog(g.n_users, g.x_bytes / 2**20, "--", color=color, alpha=0.5,
                    label=f"{SHORT[name]} size of X")
    if len(sub):
        n = np.array([sub.n_users.min(), sub.n_users.max()], float)
        ax_t.loglog(n, sub.cpu_s.min() * n / n[0], "k--", alpha=0.4, label="slope 1")
    ax_t.set(xlabel="users", ylabel="seconds (o CPU, x wall)",
             title="fit time vs users (default params, epsilon=1)")
    ax_m.set(xlabel="users", ylabel="MiB", title="peak memory added by fit vs size of X")
    ax_t.legend(fontsize=7)
    ax_m.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cases(args):
    out = []
    only = set(args.only or ESTIMATORS)
    for name, (m, d, sizes) in USERS.items():
        if name in only:
            out += [dict(estimator=name, sweep="users", n_users=n, m=m, d=d)
                    for n in (sizes[:2] if args.quick else sizes) if n <= args.max_users]
    for name, (d, ms) in ROWS.items():
        if name in only:
            out += [dict(estimator=name, sweep="rows", n_users=10**4 if not args.quick else
                         10**3, m=m, d=d) for m in ([ms[0], ms[-1]] if args.quick else ms)]
    for name, (m, ds) in FEATURES.items():
        if name in only:
            out += [dict(estimator=name, sweep="features", n_users=10**4 if not args.quick
                         else 10**3, m=m, d=d) for d in (ds[:2] if args.quick else ds)]
    return [{**c, "background": 0, "policy": True} for c in out]


def paired_cases(args):
    out = []
    for name, n in (PAIRED[:1] if args.quick else PAIRED):
        if name in set(args.only or ESTIMATORS):
            m, d, _ = USERS[name]
            n = 10**4 if args.quick else n
            out += [dict(estimator=name, sweep="paired", n_users=n, m=m, d=d, policy=p)
                    for p in (True, False)]
    return out


def micro():
    """BLAS 1 vs 2 threads on block-sized products, and clipping rows of X (10^5 users)."""
    import tracemalloc

    from threadpoolctl import threadpool_limits

    from skdpp.privacy import clip_by_norm, unit_rows

    rng = np.random.default_rng(0)
    print("BLAS products of one block (32768 rows): ms per call, 1 thread vs 2 threads")
    for d in (50, 128, 512, 1024):
        A, V = rng.standard_normal((32768, d)), rng.standard_normal((d, 5))
        for name, f in (("A @ V", lambda: A @ V), ("A.T @ A", lambda: A.T @ A)):
            res = []
            for t in (1, 2):
                with threadpool_limits(t, user_api="blas"):
                    f()
                    n, w, c = 0, time.perf_counter(), time.process_time()
                    while time.perf_counter() - w < 0.5:
                        f()
                        n += 1
                    res.append(((time.perf_counter() - w) / n, (time.process_time() - c) / n))
            print(f"  d={d:5d} {name:8s} 1 thread: wall {res[0][0] * 1e3:8.2f}  "
                  f"2 threads: wall {res[1][0] * 1e3:8.2f}, cpu {res[1][1] * 1e3:8.2f}")
    X = rng.standard_normal((10**6, 50)) * 0.3

    def norm_and_scale(X):
        n = np.sqrt(np.einsum("ij,ij->i", X, X))
        return X * np.minimum(1.0, 1.0 / np.maximum(n, 1e-300))[:, None]

    def robust_only(X):
        unit, n = unit_rows(X)
        out = X.copy()
        out[n > 1.0] = unit[n > 1.0]
        return out

    print("clip the rows of X (10^6 x 50: 10^5 users x 10 rows) to norm 1")
    for name, f in (("norm and scale", norm_and_scale),
                    ("clip_by_norm", lambda X: clip_by_norm(X, 1.0)),
                    ("robust path only", robust_only)):
        cpu = []
        for _ in range(3):
            c = time.process_time()
            f(X)
            cpu.append(time.process_time() - c)
        tracemalloc.start()
        f(X)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  {name:18s} CPU {min(cpu):.3f} s, peak {peak / X.nbytes:.2f}x X")


def big(args):
    """The issue's large cases with their floors: scaling_big.{csv,md}."""
    import pandas as pd

    t_start = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE), "--floors"], capture_output=True,
                          text=True, check=True)
    floors = json.loads(done.stdout.splitlines()[-1])
    print(f"floors: {floors}", flush=True)
    rows = []
    only = set(args.only or ESTIMATORS)
    for label, spec in BIG:
        if spec["estimator"] not in only:
            continue
        row = subprocess_case({**spec, "sweep": "big", "background": 0, "policy": True})
        rows.append({**row, "case": label,
                     **{f"floor_{k}": v for k, v in floors.items()}})
    frame = pd.DataFrame(rows)
    if "error" not in frame:
        frame["error"] = np.nan
    OUT.mkdir(exist_ok=True)
    frame.to_csv(OUT / "scaling_big.csv", index=False)
    write_big(frame, elapsed=time.perf_counter() - t_start)


def write_big(frame, elapsed=None):
    """scaling_big.md from the cases' measurements and the floors stored with them.

    ``python benchmarks/bench_scaling.py --big-table`` rewrites it from
    ``scaling_big.csv`` (e.g. after a change of :func:`big_floor`).
    """
    floors = {k[len("floor_"):]: frame[k].iloc[0] for k in frame if k.startswith("floor_")}
    frame = frame.copy()
    specs = dict(BIG)
    ok = frame["input_bytes"].notna() if "input_bytes" in frame else frame.index < 0
    for col in ("passes", "read_floor_s", "flop_floor_s", "cpu_over_floor",
                "peak_over_input"):
        frame[col] = np.nan
    for i in frame.index[ok]:
        passes, flops = big_floor(specs[frame.at[i, "case"]])
        frame.at[i, "passes"] = passes
        frame.at[i, "read_floor_s"] = (passes * frame.at[i, "input_bytes"]
                                       / (floors["read_GBps"] * 1e9))
        frame.at[i, "flop_floor_s"] = flops / (floors["gemm_GFLOPps"] * 1e9)
        frame.at[i, "cpu_over_floor"] = frame.at[i, "cpu_s"] / max(
            frame.at[i, "read_floor_s"], frame.at[i, "flop_floor_s"])
        frame.at[i, "peak_over_input"] = (frame.at[i, "peak_extra_bytes"]
                                          / frame.at[i, "input_bytes"])
    cols = ["case", "cpu_s", "wall_s", "peak_over_x", "peak_over_input", "passes",
            "read_floor_s", "flop_floor_s", "cpu_over_floor", "load_1min", "error"]
    table = frame[[c for c in cols if c in frame]]
    took = "" if elapsed is None else f"total {elapsed / 60:.1f} min "
    md = [
        "# Large cases of issue 15\n",
        f"Command: `python benchmarks/bench_scaling.py --big` (from the repository root, "
        f"`PYTHONPATH=$PWD`); {took}on {platform.node()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}, numpy {np.__version__}. Defaults with "
        f"`epsilon=1`, `random_state=0` plus the case's parameters (`BIG` in the "
        f"script); one fit per case in a fresh subprocess.\n",
        f"Floors measured first (load {floors['load_1min']:.1f}): read "
        f"{floors['read_GBps']:.1f} GB/s, copy {floors['copy_GBps']:.1f} GB/s (read + "
        f"write), single-thread GEMM {floors['gemm_GFLOPps']:.1f} GFLOP/s. "
        f"`read_floor_s`: `passes` reads of the input (X, y, groups) at the read "
        f"bandwidth; `flop_floor_s`: the flops the algorithm cannot avoid at the GEMM "
        f"rate (both from `big_floor` in the script); `cpu_over_floor`: CPU seconds "
        f"over the larger floor. `peak_over_x` / `peak_over_input`: peak "
        f"memory added by the fit over the size of X / of the input.\n",
        markdown_table(table),
    ]
    (OUT / "scaling_big.md").write_text("\n".join(md))
    print(markdown_table(table))
    print(f"wrote {OUT / 'scaling_big.md'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (~1 minute)")
    parser.add_argument("--only", nargs="+", choices=ESTIMATORS)
    parser.add_argument("--no-paired", action="store_true",
                        help="skip the paired run with a CPU-bound background process")
    parser.add_argument("--max-users", type=int, default=3 * 10**5,
                        help="largest number of users of the users sweep")
    parser.add_argument("--micro", action="store_true",
                        help="only the BLAS-thread and clipping micro-benchmarks")
    parser.add_argument("--big", action="store_true",
                        help="only the issue's large cases (BIG), with floors")
    parser.add_argument("--big-table", action="store_true",
                        help="rewrite scaling_big.md from scaling_big.csv")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--floors", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.micro:
        micro()
        return
    if args.case:
        run_case(json.loads(args.case))
        return
    if args.floors:
        print(json.dumps(measure_floors()))
        return
    if args.big:
        big(args)
        return
    if args.big_table:
        import pandas as pd
        write_big(pd.read_csv(OUT / "scaling_big.csv"))
        return
    import pandas as pd

    t_start = time.perf_counter()
    rows = []
    print("sweeps (no background process, thread policy on):", flush=True)
    for spec in cases(args):
        rows.append(subprocess_case(spec))
    if not args.no_paired:
        # library default threads when the policy is off: do not pass a global limit on
        env = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        pairs = paired_cases(args)
        print("paired thread-policy run, idle:", flush=True)
        for spec in pairs:
            rows.append(subprocess_case({**spec, "background": 0}, env))
        print("paired thread-policy run, with one CPU-bound background process:", flush=True)
        background = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(1.0)
            for spec in pairs:
                rows.append(subprocess_case({**spec, "background": 1}, env))
        finally:
            background.kill()  # only the process started here, by its handle
            background.wait()
    frame = pd.DataFrame(rows)
    if "error" not in frame:
        frame["error"] = np.nan
    elapsed = time.perf_counter() - t_start
    suffix = "_quick" if args.quick else ""
    OUT.mkdir(exist_ok=True)
    frame.to_csv(OUT / f"scaling{suffix}.csv", index=False)
    plot(frame, OUT / f"scaling{suffix}.png")

    slopes = "".join(
        f"\n### vs {title}\n\n{slopes_table(frame, sweep, col)}"
        for sweep, col, title in (("users", "n_users", "number of users"),
                                  ("rows", "m", "rows per user"),
                                  ("features", "d", "features")))
    print(slopes)
    cols = ["estimator", "sweep", "n_users", "m", "d", "background", "policy", "wall_s",
            "cpu_s", "peak_extra_bytes", "peak_over_x", "load_1min"]
    table = frame[[c for c in cols + ["error"] if c in frame]].copy()
    table["estimator"] = table.estimator.map(SHORT)
    table["peak_extra_MiB"] = (table.pop("peak_extra_bytes") / 2**20).round(1)
    command = "python benchmarks/bench_scaling.py" + (" --quick" if args.quick else "") + (
        f" --max-users {args.max_users}" if args.max_users != 3 * 10**5 else "")
    md = [
        f"# Scaling benchmark{' (quick)' if args.quick else ''}\n",
        f"Command: `{command}` (from the repository root, `PYTHONPATH=$PWD`); "
        f"total {elapsed / 60:.1f} min on {platform.node()} ({os.cpu_count()} cores, "
        f"shared), Python {platform.python_version()}, numpy {np.__version__}.\n",
        __doc__.split("\n\n", 2)[2].split("Writes")[0].strip() + "\n",
        "The issue's large cases at their own parameters, with their physical floors: "
        "`scaling_big.md` (`--big`).\n",
        "## Log-log slopes (CPU seconds, peak memory added by fit)\n", slopes,
        "\n## All cases\n",
        markdown_table(table), "\n",
    ]
    (OUT / f"scaling{suffix}.md").write_text("\n".join(md))
    print(f"wrote {OUT / f'scaling{suffix}.csv'} (.png, .md) in {elapsed / 60:.1f} min")


if __name__ == "__main__":
    main()
