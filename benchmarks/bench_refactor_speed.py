"""Whole-fit CPU time of two skdpp checkouts, side by side (issue 21, "Done when").

Times one ``fit`` of each of the five estimators, with only ``epsilon`` and
``random_state`` set (parameters both versions have), for the code in two source
trees (``--before DIR``, ``--after DIR``: each a checkout of the repository, i.e.
holding the ``skdpp`` package). Every fit runs in its own subprocess with
``PYTHONPATH=DIR`` (the child checks which ``skdpp`` it imported, as
``bench_jl_margin.py --baseline`` does), ``OPENBLAS_NUM_THREADS=1``; the child
reports ``time.process_time`` of the fit only. Before and after runs are
interleaved (their order alternates between repeats) and each case is repeated
``--repeats`` times; the tables give the median CPU seconds.

The data are built once in the parent (with the ``--after`` tree's
``skdpp.datasets``) and handed to every child as a ``.npz`` file, so both versions
fit the very same arrays and no data-loading import has to exist in both.

Cases (realistic ones, as issue 21 asks):

* MovieLens small (``--data``, default ``/work/shared/data/ml-latest-small``), the
  training rows of ``bench_real_data.py``'s per-user 80/20 split (seed 0): genres
  multi-hot + release year for the linear models, item ids for
  ``AdaptiveWeightMF``, "rating >= 4" for ``JLMarginClassifier``; epsilon = 1.
* The papers' synthetic settings at a moderate size (a fit of 0.5-10 s): FedRep /
  AltMin on ``make_shared_representation_regression`` (20 000 users, d = 50,
  k = 2, 10 rows per user: the generator's defaults), PPSGD on
  ``make_additive_personalized_regression`` (1 000 users, d = 100, 100 rows per
  user), MF on ``make_skewed_ratings`` (10 000 users, 100 items, k = 5, as in
  ``examples/plot_adaptive_mf_synthetic.py``), JL on
  ``make_personalized_margin_classification`` (5 000 users, d = 50, k = 2, 10 rows
  per user); epsilon = 1.
* Scaling: FedRep at 100 000 users (10^6 rows, d = 50) and PPSGD at 20 000 users
  (d = 20, 10 rows per user).

Released values differ between versions where behaviour changed on purpose; only
time is compared here.

Run::

    nice -n 5 python benchmarks/bench_refactor_speed.py --before OLD --after NEW \\
        [--repeats 3] [--cases NAME ...] [--tag NAME]

e.g. ``OLD`` = ``git archive 03bbf7d | tar -x -C OLD`` (the commit that froze the
golden outputs before the refactor). Writes
``benchmarks/results/refactor_speed[_TAG].{md,csv}``.
"""

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_DATA = "/work/shared/data/ml-latest-small"
THRESHOLD = 1.10  # "slower by more than 10%"


# --------------------------------------------------------------------------- #
# Data (built in the parent)
# --------------------------------------------------------------------------- #
def _movielens(path):
    """Training rows of bench_real_data's split (seed 0): features, items, y, groups."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_real_data import load, split

    train, _ = split(load(path, "all"), 0)
    return train["X"], train["I"], train["y"], train["g"]


def _representation(n_users):
    from skdpp.datasets import make_shared_representation_regression

    return make_shared_representation_regression(
        n_users=n_users, n_features=50, n_components=2, n_samples_per_user=10,
        noise=0.01, head_norm="unit", n_test_samples_per_user=0, random_state=0)[:3]


def _additive(n_users, n_features=20, n_samples_per_user=10):
    from skdpp.datasets import make_additive_personalized_regression

    return make_additive_personalized_regression(
        n_users=n_users, n_features=n_features, n_samples_per_user=n_samples_per_user,
        n_personal_features=5, personal_scale=1.0, global_scale=10.0, noise=0.01,
        random_state=0)[:3]


def _additive_paper(n_users):
    """The generator's defaults (d = 100, 100 rows per user)."""
    return _additive(n_users, n_features=100, n_samples_per_user=100)


def _ratings(n_users):
    from skdpp.datasets import make_skewed_ratings

    X, y, g, _ = make_skewed_ratings(n_users=n_users, n_items=100, n_components=5,
                                     power=1.0, noise=1e-3, test_size=0.2, random_state=0)
    return X, y, g


def _margin(n_users):
    from skdpp.datasets import make_personalized_margin_classification

    return make_personalized_margin_classification(
        n_users=n_users, n_features=50, n_components=2, n_samples_per_user=10,
        margin=0.05, random_state=0)[:3]


FEDREP, ALTMIN, PPSGD, MF, JL = ("PrivateFedRepRegressor", "PrivAltMinRegressor",
                                 "PPSGDRegressor", "AdaptiveWeightMF", "JLMarginClassifier")

#: name -> (estimator, data description, data builder (None: MovieLens), n_users,
#: timed fits per child). Children of cases with more than one timed fit first run
#: one untimed warm-up fit (first-call costs such as lazy imports are not fit work)
#: and report the median of theirs: short fits on a shared machine are noisy.
CASES = {
    "movielens-fedrep": (FEDREP, "MovieLens small, genres + year", None, None, 5),
    "movielens-altmin": (ALTMIN, "MovieLens small, genres + year", None, None, 5),
    "movielens-ppsgd": (PPSGD, "MovieLens small, genres + year", None, None, 5),
    "movielens-mf": (MF, "MovieLens small, item ids", None, None, 5),
    "movielens-jl": (JL, "MovieLens small, genres + year, y >= 4", None, None, 3),
    "paper-fedrep": (FEDREP, "shared representation, d=50 k=2 m=10", _representation,
                     20000, 3),
    "paper-altmin": (ALTMIN, "shared representation, d=50 k=2 m=10", _representation,
                     20000, 3),
    "paper-ppsgd": (PPSGD, "additive, d=100 (5 personal) m=100", _additive_paper, 1000, 2),
    "paper-mf": (MF, "skewed ratings, 100 items k=5", _ratings, 10000, 3),
    "paper-jl": (JL, "margin classification, d=50 k=2 m=10", _margin, 5000, 2),
    "scaling-fedrep": (FEDREP, "shared representation, d=50 k=2 m=10", _representation,
                       100000, 1),
    "scaling-ppsgd": (PPSGD, "additive, d=20 (5 personal) m=10", _additive, 20000, 1),
}


def build(name, data_path, tmp, cache):
    """Write the case's arrays to ``tmp/name.npz``; return (path, n_users, n_rows)."""
    est, _, builder, n_users, _ = CASES[name]
    if builder is None:
        if "ml" not in cache:
            cache["ml"] = _movielens(data_path)
        Xf, I, y, g = cache["ml"]
        X = I if est == MF else Xf
        y = (y >= 4) if est == JL else y
    else:
        X, y, g = builder(n_users)
    out = Path(tmp) / f"{name}.npz"
    np.savez(out, X=X, y=y, g=g)
    return out, int(np.unique(g).size), int(X.shape[0])


# --------------------------------------------------------------------------- #
# One fit (child process)
# --------------------------------------------------------------------------- #
_CHILD = """
import json, time, warnings
import numpy as np
warnings.simplefilter("ignore")
import skdpp
d = np.load({npz!r})
X, y, g = d["X"], d["y"], d["g"]
cpu = []
for i in range({inner!r} + ({inner!r} > 1)):  # the first of several: a warm-up
    est = getattr(skdpp, {est!r})(epsilon={epsilon!r}, random_state={seed!r})
    t = time.process_time()
    est.fit(X, y, groups=g)
    cpu.append(time.process_time() - t)
print(json.dumps(dict(cpu=float(np.median(cpu[-{inner!r}:])), skdpp=skdpp.__file__)))
"""


def fit_once(tree, est, npz, inner=1, epsilon=1.0, seed=0):
    """Median CPU seconds of ``inner`` fits in one child (after a warm-up if > 1)."""
    code = _CHILD.format(npz=str(npz), est=est, epsilon=epsilon, seed=seed, inner=inner)
    env = dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # run outside both trees: `python -c` puts the working directory first on
    # sys.path, which would shadow PYTHONPATH
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=Path(npz).parent)
    if proc.returncode:
        raise RuntimeError(f"{est} in {tree} failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(res["skdpp"]).resolve().is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"the fit imported {res['skdpp']}, not the skdpp in {tree}")
    return res["cpu"]


# --------------------------------------------------------------------------- #
# Main
# --------------------------------------------------------------------------- #
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout before")
    parser.add_argument("--after", type=Path, required=True, help="checkout after")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--data", default=os.environ.get("SKDPP_MOVIELENS", DEFAULT_DATA))
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument("--before-label", default="", help="what --before holds (for the .md)")
    parser.add_argument("--after-label", default="", help="what --after holds (for the .md)")
    args = parser.parse_args()
    for tree in (args.before, args.after):
        if not (tree / "skdpp" / "__init__.py").is_file():
            parser.error(f"{tree} holds no skdpp package")
    sys.path.insert(0, str(args.after.resolve()))  # the data: the after tree's datasets

    cmd = "nice -n 5 python benchmarks/bench_refactor_speed.py " + " ".join(
        f"'{a}'" if " " in a else a for a in sys.argv[1:])
    load0 = os.getloadavg()[0]
    times = {name: {"before": [], "after": []} for name in args.cases}
    info = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = {}
        for name in args.cases:
            info[name] = build(name, args.data, tmp, cache)
        for r in range(args.repeats):
            for name in args.cases:
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for which in order:
                    tree = args.before if which == "before" else args.after
                    cpu = fit_once(tree.resolve(), CASES[name][0], info[name][0],
                                   inner=CASES[name][4])
                    times[name][which].append(cpu)
                    print(f"[{r}] {name:16s} {which:6s} {cpu:7.2f} s", flush=True)
    total = time.perf_counter() - t_start

    rows = []
    for name in args.cases:
        est, desc = CASES[name][:2]
        b, a = (float(np.median(times[name][w])) for w in ("before", "after"))
        rows.append(dict(case=name, estimator=est, data=desc, n_users=info[name][1],
                         n_rows=info[name][2], fits_per_child=CASES[name][4],
                         before_s=round(b, 3), after_s=round(a, 3),
                         ratio=round(a / b, 3),
                         before_runs=" ".join(f"{c:.2f}" for c in times[name]["before"]),
                         after_runs=" ".join(f"{c:.2f}" for c in times[name]["after"])))
    slower = [r["case"] for r in rows if r["ratio"] > THRESHOLD]
    slower_line = f"slower by > 10%: {', '.join(slower) if slower else 'none'}"

    stem = "refactor_speed" + (f"_{args.tag}" if args.tag else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / f"{stem}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# Whole-fit CPU time before / after the refactor (issue 21)", "",
        f"Command: `{cmd}`", "",
        f"Before: `{args.before}`{' = ' + args.before_label if args.before_label else ''}. "
        f"After: `{args.after}`{' = ' + args.after_label if args.after_label else ''}.", "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy "
        f"{np.__version__}, 2 cores shared with other jobs (CPU seconds of the fit only, "
        f"`time.process_time` in the child). 1-minute load average at the start: "
        f"{load0:.2f}; whole run {total / 60:.1f} min.", "",
        f"Each fit in its own subprocess (`PYTHONPATH=<tree>`, the imported skdpp "
        f"checked), OPENBLAS_NUM_THREADS=1, only `epsilon=1` and `random_state=0` set; "
        f"before/after interleaved (order alternating), median of {args.repeats} "
        f"children (the runs columns). A child of a case with `fits/child` > 1 runs one "
        f"untimed warm-up fit, then that many timed fits of the same estimator on the "
        f"same arrays, and reports their median (short fits are noisy on a shared "
        f"machine). "
        f"ratio = after / before. Both versions fit the same arrays (built once, with "
        f"the after tree's `skdpp.datasets`, passed as .npz).", "",
        "| case | estimator | data | users | rows | fits/child | before (s) | after (s) "
        "| ratio | before runs | after runs |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {r['estimator']} | {r['data']} | {r['n_users']} "
                     f"| {r['n_rows']} | {r['fits_per_child']} | {r['before_s']:.2f} "
                     f"| {r['after_s']:.2f} "
                     f"| {r['ratio']:.2f} | {r['before_runs']} | {r['after_runs']} |")
    lines += ["", slower_line]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(rows) - 4:]))
    print(f"wrote {RESULTS / stem}.md and .csv")


if __name__ == "__main__":
    main()
