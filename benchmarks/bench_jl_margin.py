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

``--speed`` (issue 20, item 6) instead times one fit on MovieLens-1M-sized
synthetic ratings (:func:`movielens_like`: 6 000 users, 10^6 rows with a
heavy-tailed number of rows per user, 18 multi-hot genres + a raw release
year, "rating >= 4" as the label) of ``JLMarginClassifier`` (defaults,
``margin="auto"`` and ``margin=0.1``), ``PPSGDRegressor`` and
``PrivateFedRepRegressor`` (defaults, ``epsilon = 1``), each in its own
subprocess (CPU seconds of the fit); JL also with ``random_state=1`` and with
the 5 ratings as classes. ``--baseline PATH`` also times the JL fits of
another checkout of skdpp (``PATH`` holds its ``skdpp`` package, e.g.
``git archive <commit> skdpp | tar -x -C PATH``) in the same run and checks
that both release bit-identical fitted arrays (every attribute ending in
``_``); ``--quick`` times PPSGD, FedRep and the default JL only::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_jl_margin.py --speed \
        [--baseline PATH] [--repeats N] [--out benchmarks/results/jl_speed.md]

and then ``N`` interleaved PPSGD / default-JL fits for the ratio of their CPU
times (medians).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
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


def movielens_like(n_users=6000, n_rows=1_000_000, n_items=3700, seed=0):
    """ML-1M-sized ratings: heavy-tailed rows per user, 18 multi-hot genres + a raw year."""
    rng = np.random.default_rng(seed)
    w = rng.lognormal(0.0, 1.0, n_users)
    counts = np.maximum(20, np.floor(w / w.sum() * n_rows)).astype(int)
    groups = np.repeat(np.arange(n_users), counts)
    n = groups.size
    genres = rng.random((n_items, 18)) < 0.12
    years = np.round(rng.normal(1990, 12, n_items)).clip(1920, 2000)
    quality = rng.normal(0, 0.6, n_items)
    items = rng.integers(0, n_items, n)
    taste = rng.normal(0, 0.4, (n_users, 18))
    bias = rng.normal(3.5, 0.5, n_users)
    X = np.column_stack([genres[items].astype(float), years[items]])
    r = bias[groups] + quality[items] \
        + np.einsum("nk,nk->n", genres[items], taste[groups]) + rng.normal(0, 0.8, n)
    return X, np.clip(np.round(r), 1, 5), groups


_SPEED_CHILD = """
import json, sys, time, warnings
import numpy as np
sys.path.insert(0, {bench!r})
warnings.simplefilter("ignore")
from bench_jl_margin import movielens_like
import skdpp
X, y, g = movielens_like()
name, params = {name!r}, dict({params!r})
seed = params.pop("random_state", 0)
if name == "jlts":    # + a raw timestamp column: every row distinct
    X = np.column_stack([X, np.random.default_rng(1).uniform(9.5e8, 1e9, X.shape[0])])
if name in ("jl", "jlts"):  # binary: "rating >= 4"
    est, target = skdpp.JLMarginClassifier(epsilon=1.0, random_state=seed, **params), y >= 4
elif name == "jl5":   # the 5 ratings as classes (one-vs-rest, 5 binary problems)
    est, target = skdpp.JLMarginClassifier(epsilon=1.0, random_state=seed, **params), \\
        y.astype(int)
elif name == "ppsgd":
    est, target = skdpp.PPSGDRegressor(epsilon=1.0, random_state=seed), y
else:
    est, target = skdpp.PrivateFedRepRegressor(epsilon=1.0, random_state=seed), y
t, w = time.process_time(), time.perf_counter()
est.fit(X, target, groups=g)
cpu, wall = time.process_time() - t, time.perf_counter() - w
if name.startswith("jl"):  # every fitted array (attributes ending in "_")
    np.savez({save!r}, **{{k: v for k, v in vars(est).items() if k.endswith("_")
                           and isinstance(v, np.ndarray) and v.dtype != object}})
print(json.dumps(dict(cpu=cpu, wall=wall, skdpp=skdpp.__file__)))
"""


_SPEED_NOTES = """## What changed (issue 20, item 6)

Before, the selection's scores took ~80% of a default fit on this data:
`n_rows x n_candidates x n_directions` = 10^6 x 256 x 64 = 1.6 * 10^10 dot
products (k = 3), comparisons and byte counts, plus the projections
`y U~^T M x` of every row (`benchmarks/results/jl_speed_before.md`). Now
(`_algorithms/jl_kernels.candidate_user_losses`, `_GridCounter`):

* the rows of a block are deduplicated bit for bit (a hash of their 64-bit
  words, collisions checked): on ratings data a row is an item's features
  times the label, so a block of ~33 000 rows holds ~5 300 distinct rows;
* the projections `y U~^T M x` and the direction grid's 0/1 losses are
  computed once per distinct row (the same BLAS products on the same operands:
  equal rows give equal products), stored as bytes; a distinct row whose
  negation is also one (an item rated both ways) takes its losses from the
  same product (`-g <= t` iff `g >= -t`; BLAS rounding is sign-symmetric);
* every user's loss counts are one sparse product `A @ losses` per chunk of
  candidates, `A[p, key]` the number of rows of piece `p` (<= 255 rows of one
  user) equal to distinct row `key`, the bytes viewed as 64-bit words (one
  byte per (candidate, direction): no carry below 256), pieces of longer users
  added in int64; the own-direction losses are counted the same way;
* the users' own-direction dots (every row: the direction is the user's) add
  the three products in the order `einsum` does (`(p0 + p2) + p1`, checked
  once at run time against `einsum`; otherwise `einsum` itself is used);
* a block whose distinct rows are more than half its rows (`_DISTINCT_FRACTION`,
  e.g. with a raw timestamp column) is scored row by row as before (last rows
  of the table: no gain, no loss).
* the personal heads' Newton steps form their weighted sums as sparse
  products with the weights as the matrix entries (one rounding per product,
  as before: checked once at run time, otherwise the old products are formed).

The released values are bit-identical (`released values` column: every fitted
array, compared with `np.array_equal`, the baseline run from its own folder;
also `tests/linear_model/test_jl_speed_equivalence.py` against the row-by-row
kernel, with the broken variants it catches). Fit time is not covered by the
privacy guarantee (as before: it depends on the data's size and repetitions).

Profile of one default fit after the change (cProfile, 6.3 s in all before the
heads change, a lightly loaded machine): the selection's scores 4.1 s (sparse
counts ~1.0 s, distinct rows' grid products and comparisons ~0.8 s,
own-direction dots and gathers ~1.4 s), the personal heads 1.5 s (then ~1.1 s
with the sparse weighted sums), the other phases 0.7 s. The ratio to PPSGD is
at the 2x target, not clearly below it: 1.93 in the interleaved fits above,
2.0-2.2 in other runs on the same shared machine."""


def _speed_case(name, params, path, save):
    code = _SPEED_CHILD.format(bench=str(Path(__file__).resolve().parent), name=name,
                               params=params, save=str(save))
    env = dict(os.environ, PYTHONPATH=str(path))
    # run outside the repository: `python -c` puts the working directory first
    # on sys.path, which would import this checkout's skdpp whatever PYTHONPATH
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True, cwd=Path(save).parent).stdout
    res = json.loads(out.strip().splitlines()[-1])
    if not Path(res["skdpp"]).resolve().is_relative_to(Path(path).resolve()):
        raise RuntimeError(f"the fit imported {res['skdpp']}, not the skdpp in {path}")
    return res


def speed(args):
    repo = Path(__file__).resolve().parent.parent
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    cmd = f"OPENBLAS_NUM_THREADS={threads} python benchmarks/bench_jl_margin.py --speed" \
        + (" --baseline PATH" if args.baseline else "") + f" --repeats {args.repeats}"
    lines = ["# JLMarginClassifier fit time on MovieLens-1M-sized data (issue 20, item 6)", "",
             f"Command: `{cmd}`" + (" (PATH: `git archive 0bc0bd6 skdpp | tar -x -C PATH`, "
                                    "the code before this change)" if args.baseline else ""), "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy "
             f"{np.__version__}, 2 cores shared with other jobs (compare CPU seconds). "
             f"1-minute load average at the start: {os.getloadavg()[0]:.2f}.", "",
             "Data: `movielens_like()` (6 000 users, 1 000 000+ rows, 19 raw columns); "
             "epsilon = 1, random_state = 0, defaults otherwise. One fit per row, each in "
             "its own subprocess.", "",
             "| code | estimator | CPU (s) | wall (s) | released values |",
             "|---|---|---:|---:|---|"]
    cases = [("ppsgd", {}), ("fedrep", {}), ("jl", {}), ("jl", {"margin": 0.1}),
             ("jl", {"random_state": 1}), ("jl5", {}), ("jlts", {})]
    if args.quick:
        cases = cases[:3]
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in cases:
            label = name if not name.startswith("jl") else \
                {"jl": "jl", "jl5": "jl, 5 classes", "jlts": "jl, + raw timestamp column"}[
                    name] + " " + (", ".join(
                    f"{k}={v}" for k, v in params.items()) or "defaults (margin='auto')")
            runs = [("this", repo)] + ([("baseline", args.baseline)]
                                       if args.baseline and name.startswith("jl") else [])
            saved = {}
            for code, path in runs:
                save = Path(tmp) / f"{code}_{len(saved)}_{name}.npz"
                res = _speed_case(name, params, path, save)
                same = ""
                if name.startswith("jl"):
                    saved[code] = save
                    if code == "baseline":
                        a, b = np.load(saved["this"]), np.load(save)
                        equal = set(a.files) == set(b.files) and all(
                            np.array_equal(a[k], b[k]) for k in a.files)
                        same = (f"all {len(a.files)} fitted arrays identical to this code"
                                if equal else "DIFFER")
                lines.append(f"| {code} | {label} | {res['cpu']:.2f} | {res['wall']:.2f} "
                             f"| {same} |")
                print(lines[-1], flush=True)
        # the target's ratio, from interleaved fits (a shared machine drifts)
        cpu = {"ppsgd": [], "jl": []}
        for r in range(args.repeats):
            for name in cpu:
                cpu[name].append(_speed_case(name, {}, repo, Path(tmp) / f"r{r}.npz")["cpu"])
        ppsgd, jl = (float(np.median(cpu[name])) for name in ("ppsgd", "jl"))
        lines += ["", f"Interleaved fits of this code ({args.repeats} each, `--repeats`): "
                  f"PPSGD CPU {', '.join(f'{c:.2f}' for c in cpu['ppsgd'])} s, JL defaults "
                  f"{', '.join(f'{c:.2f}' for c in cpu['jl'])} s; median ratio JL / PPSGD "
                  f"= {jl / ppsgd:.2f}."]
        print(lines[-1], flush=True)
    args.out = args.out or RESULTS / "jl_speed.md"
    args.out.write_text("\n".join(lines + ["", _SPEED_NOTES]) + "\n")
    print(f"wrote {args.out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--speed", action="store_true",
                        help="fit time on MovieLens-1M-sized data (issue 20, item 6)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="with --speed: a folder holding another skdpp to compare")
    args = parser.parse_args()
    if args.speed:
        return speed(args)
    args.out = args.out or RESULTS / "jl_margin_benchmark.md"
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
