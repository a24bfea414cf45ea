"""skdpp.distributed on a 2-worker LocalCluster against in-process ``fit``.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_distributed.py [--quick] [--skip-10m]

* ``PrivateFedRepRegressor`` (T = 5) and ``PPSGDRegressor`` (10 rounds, every
  user every round) on 10^6 users x 10 rows x d = 50: in-process ``fit`` and
  :func:`skdpp.distributed.fit_distributed` on ``local_cluster(n_workers=2)``
  (16 partitions generated on the workers; never on the driver). Per-round wall
  time on the driver, CPU seconds of all processes, where the workers' time
  goes (task stream), peak RSS of the driver and of each worker, and the
  equality of the results (released values, report).
* The same distributed FedRep fit with Dask's default
  ``MALLOC_TRIM_THRESHOLD_=65536`` (what :func:`local_cluster` overrides).
* FedRep on 10^7 users x 5 rows x d = 20 (float32) generated on the workers
  (64 partitions): the driver's memory stays O(d k) while the workers hold the
  data (``--skip-10m`` skips it).

Every configuration runs in its own subprocess (fresh cluster, clean peak
RSS). ``--quick``: 10^5 and 10^6 users instead. Writes
``benchmarks/results/distributed_benchmark.{md,csv}`` (``_quick`` suffix with
``--quick``).
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results"
K = 2

NOTES = """
## How to read it

* ``fit_s``: wall-clock seconds of ``fit`` / ``fit_distributed`` (data already in
  memory, on the driver or on the workers); ``cpu_s``: CPU seconds of every
  process (driver, which also runs the scheduler, and both workers). The cores
  are shared with other jobs: compare CPU seconds.
* ``round_s`` / ``round_cpu_s``: median wall-clock and CPU seconds (all
  processes) of one round (``executor.map`` of the round function).
* ``driver_peak_mib`` / ``worker_peak_mib``: peak RSS of the driver process
  (in-process: data + fit) and of each worker (its partitions, the blocks and
  their states).
* ``where``: seconds the workers spent in each task, by block function
  (``prepare``: the estimator's validation and blocks of each partition, once per
  fit; ``prepare_split``: FedRep's keyed S^0/S^1 split; ``_spectral_block``: the
  private initialisation; ``fedrep_round`` / ``sgd_round``: the rounds;
  ``final_statistics``, ``_head_norms``, ``_clipped_heads``, ``_offsets``: FedRep's
  final heads and cold start; ``collect_*``: personal parts, e.g.
  ``collect__personal_block``, ``collect_personal_refit``).
"""


# --------------------------------------------------------------------------- #
# Data: generated partition by partition (on the workers, or concatenated here)
# --------------------------------------------------------------------------- #
def generate(part, n_parts, n_users, rows, d, seed=0, dtype="float64"):
    """Rows of users ``[a, b)`` of partition ``part``: ``y = <x, U v_i> + noise``."""
    a, b = part * n_users // n_parts, (part + 1) * n_users // n_parts
    U = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, K)))[0]
    rng = np.random.default_rng([seed, part])
    V = rng.normal(size=(b - a, K))
    V /= np.linalg.norm(V, axis=1, keepdims=True)  # unit heads (DESIGN section 7)
    X = rng.normal(size=((b - a) * rows, d)).astype(dtype)
    y = np.einsum("ij,ij->i", X @ U, np.repeat(V, rows, axis=0)) \
        + 0.1 * rng.normal(size=X.shape[0])
    return X, y, np.repeat(np.arange(a, b, dtype=np.int64), rows)


def make_estimator(name):
    from skdpp.linear_model import PPSGDRegressor, PrivateFedRepRegressor

    if name == "fedrep":
        return PrivateFedRepRegressor(n_components=K, epsilon=1.0, random_state=0)
    return PPSGDRegressor(n_rounds=10, epsilon=1.0, random_state=0)


ROUND_FUNCTIONS = {"fedrep": "fedrep_round", "ppsgd": "sgd_round"}


# --------------------------------------------------------------------------- #
# One configuration (run in a subprocess)
# --------------------------------------------------------------------------- #
def _timed_maps(cls, record, client=None):
    """Record (function, wall, CPU of all processes) of every ``cls.map`` call.

    With a client, the CPU time of the round functions includes the workers'
    (read before and after the call; other calls count the driver only).
    """
    from skdpp.distributed._executor import _name

    original = cls.map

    def map(self, fn, broadcast=None):
        name = _name(fn)
        workers = client is not None and name in ROUND_FUNCTIONS.values()
        before = sum(s["cpu"] for s in client.run(_worker_stats).values()) if workers else 0.0
        t, c = time.perf_counter(), time.process_time()
        out = original(self, fn, broadcast)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        if workers:
            cpu += sum(s["cpu"] for s in client.run(_worker_stats).values()) - before
        record.append((name, wall, cpu))
        return out

    cls.map = map


def _worker_stats():
    import psutil

    cpu = psutil.Process().cpu_times()
    return {"cpu": cpu.user + cpu.system,
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_local(cfg):
    from skdpp.utils._executor import LocalExecutor

    est = make_estimator(cfg["estimator"])
    n = cfg["n_users"] * cfg["rows"]
    X, y = np.empty((n, cfg["d"]), dtype=cfg["dtype"]), np.empty(n)
    g = np.empty(n, dtype=np.int64)
    start = 0
    for p in range(cfg["n_parts"]):  # the workers' partitions, filled in place
        part = generate(p, cfg["n_parts"], cfg["n_users"], cfg["rows"], cfg["d"],
                        dtype=cfg["dtype"])
        stop = start + part[0].shape[0]
        X[start:stop], y[start:stop], g[start:stop] = part
        start = stop
    del part
    maps = []
    _timed_maps(LocalExecutor, maps)
    t, c = time.perf_counter(), time.process_time()
    est.fit(X, y, groups=g)
    out = {"fit_seconds": time.perf_counter() - t, "fit_cpu": time.process_time() - c,
           "maps": maps, "driver_maxrss_mib": _worker_stats()["maxrss_mib"],
           "x_mib": X.nbytes / 2**20}
    return out, est


def run_distributed(cfg):
    import dask
    from distributed import Client, get_task_stream

    from skdpp.distributed import DaskExecutor, UserBlocks, fit_distributed, local_cluster

    est = make_estimator(cfg["estimator"])
    malloc = cfg.get("malloc_trim_threshold")
    with local_cluster(n_workers=2, threads_per_worker=1,
                       malloc_trim_threshold=malloc) as cluster, Client(cluster) as client:
        t = time.perf_counter()
        blocks = UserBlocks.from_delayed([
            dask.delayed(generate)(p, cfg["n_parts"], cfg["n_users"], cfg["rows"], cfg["d"],
                                   dtype=cfg["dtype"])
            for p in range(cfg["n_parts"])])
        load_seconds = time.perf_counter() - t
        maps = []
        _timed_maps(DaskExecutor, maps, client)
        before = client.run(_worker_stats)
        t, c = time.perf_counter(), time.process_time()
        with get_task_stream() as ts:
            fit_distributed(est, blocks)
        fit_seconds, fit_cpu = time.perf_counter() - t, time.process_time() - c
        after = client.run(_worker_stats)
        compute = {}
        for task in ts.data:
            for kind, start, stop in ((s["action"], s["start"], s["stop"])
                                      for s in task["startstops"]):
                if kind == "compute":
                    key = str(task["key"])  # skdpp-<block function>-<partition>-<uuid>
                    name = key.split("-")[1] if key.startswith("skdpp-") else "dask"
                    compute[name] = compute.get(name, 0.0) + stop - start
        out = {"fit_seconds": fit_seconds, "fit_cpu": fit_cpu, "load_seconds": load_seconds,
               "maps": maps, "worker_cpu": sum(after[w]["cpu"] - before[w]["cpu"]
                                               for w in after),
               "worker_maxrss_mib": sorted(a["maxrss_mib"] for a in after.values()),
               "driver_maxrss_mib": _worker_stats()["maxrss_mib"],
               "task_compute": compute,
               "malloc_env": sorted(set(client.run(
                   lambda: str(os.environ.get("MALLOC_TRIM_THRESHOLD_"))).values()))}
    return out, est


def child(cfg):
    runner = run_local if cfg["mode"] == "local" else run_distributed
    out, est = runner(cfg)
    if cfg.get("save"):
        released = {k: np.asarray(getattr(est, k), dtype=float)
                    for k in ("components_", "cold_start_head_", "coef_", "intercept_")
                    if hasattr(est, k)}
        np.savez(cfg["save"], **released)
        out["report"] = str(est.privacy_report_.to_dict())
    print("RESULT " + json.dumps(out, default=float))


def run(cfg):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)],
                          capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"configuration {cfg} failed")
    return json.loads(lines[-1][len("RESULT "):])


# --------------------------------------------------------------------------- #
# Main
# --------------------------------------------------------------------------- #
def _result_row(r, estimator, mode, **case):
    """One row of the results table from a run's measurements."""
    n_rounds, round_wall, round_cpu = _round_stats(r, estimator)
    row = {"estimator": estimator, "mode": mode, **case,
           "fit_s": r["fit_seconds"], "cpu_s": r["fit_cpu"] + r.get("worker_cpu", 0.0),
           "round_s": round_wall, "round_cpu_s": round_cpu, "rounds": n_rounds,
           "driver_peak_mib": r["driver_maxrss_mib"],
           "worker_peak_mib": "/".join(f"{m:.0f}" for m in r.get("worker_maxrss_mib", []))
           or "-"}
    if "task_compute" in r:  # distributed runs: where the workers spent their time
        row["where"] = ", ".join(f"{k} {v:.1f}s" for k, v in
                                 sorted(r["task_compute"].items(), key=lambda kv: -kv[1])
                                 if v >= 0.05)
    return row


def _round_stats(result, estimator):
    rounds = [(w, c) for name, w, c in result["maps"] if name == ROUND_FUNCTIONS[estimator]]
    return len(rounds), float(np.median([w for w, _ in rounds])), \
        float(np.median([c for _, c in rounds]))  # wall, CPU of all processes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-10m", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))

    big = 100_000 if args.quick else 1_000_000
    huge = 1_000_000 if args.quick else 10_000_000
    base = {"n_users": big, "rows": 10, "d": 50, "n_parts": 16, "dtype": "float64"}
    rows, equality = [], []
    load = os.getloadavg()[0]
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for estimator in ("fedrep", "ppsgd"):
        results = {}
        for mode in ("local", "distributed"):
            cfg = dict(base, estimator=estimator, mode=mode,
                       save=str(tmp / f"skdpp_bench_{estimator}_{mode}.npz"))
            results[mode] = run(cfg)
            print(mode, estimator, {k: v for k, v in results[mode].items()
                                    if k not in ("maps", "report")}, flush=True)
        a = np.load(tmp / f"skdpp_bench_{estimator}_local.npz")
        b = np.load(tmp / f"skdpp_bench_{estimator}_distributed.npz")
        rel = max(float(np.max(np.abs(a[k] - b[k]) / np.maximum(np.abs(a[k]), 1e-300)))
                  for k in a.files)
        equality.append({"estimator": estimator, "n_users": big, "attributes": a.files,
                         "max_relative_difference": rel,
                         "report_identical": results["local"]["report"]
                         == results["distributed"]["report"]})
        for mode, r in results.items():
            rows.append(_result_row(r, estimator, mode, n_users=big, rows=10, d=50,
                                    partitions=base["n_parts"] if mode == "distributed"
                                    else "-"))
    # Dask's own MALLOC_TRIM_THRESHOLD_ (what local_cluster overrides)
    r = run(dict(base, estimator="fedrep", mode="distributed", malloc_trim_threshold=65536))
    rows.append(_result_row(r, "fedrep", "distributed, MALLOC_TRIM_THRESHOLD_=65536",
                            n_users=big, rows=10, d=50, partitions=base["n_parts"]))
    if not args.skip_10m:
        cfg = {"n_users": huge, "rows": 5, "d": 20, "n_parts": 64, "dtype": "float32",
               "estimator": "fedrep", "mode": "distributed"}
        rows.append(_result_row(run(cfg), "fedrep", "distributed (float32)", n_users=huge,
                                rows=5, d=20, partitions=64))
    write(rows, equality, args, load)


def write(rows, equality, args, load):
    import csv

    import dask
    import distributed

    suffix = "_quick" if args.quick else ""
    OUT.mkdir(exist_ok=True)
    columns = ["estimator", "mode", "n_users", "rows", "d", "partitions", "fit_s", "cpu_s",
               "round_s", "round_cpu_s", "rounds", "driver_peak_mib",
               "worker_peak_mib", "where"]
    with open(OUT / f"distributed_benchmark{suffix}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "") for c in columns})

    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    cmd = "OPENBLAS_NUM_THREADS=1 python benchmarks/bench_distributed.py" + \
        (" --quick" if args.quick else "") + (" --skip-10m" if args.skip_10m else "")
    lines = [
        "# skdpp.distributed benchmark", "",
        f"Command: `{cmd}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs "
        f"(1-minute load average at the start: {load:.2f}), Python "
        f"{platform.python_version()}, numpy {np.__version__}, dask {dask.__version__}, "
        f"distributed {distributed.__version__}. Distributed runs: "
        f"`local_cluster(n_workers=2, threads_per_worker=1)`, data generated on the "
        f"workers.", "",
        "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    lines += ["", "## Equality with in-process fit (same data, same random_state)", "",
              "| estimator | n_users | released attributes | max relative difference | "
              "privacy_report_ identical |", "|---|---|---|---|---|"]
    lines += [f"| {e['estimator']} | {e['n_users']} | {', '.join(e['attributes'])} | "
              f"{e['max_relative_difference']:.2e} | {e['report_identical']} |"
              for e in equality]
    lines += ["", NOTES.strip()]
    (OUT / f"distributed_benchmark{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
