"""Cost of the secure noise mode: default (numpy) vs secure (OpenDP) fit times.

For every estimator (and the private search) one fit in each mode on small
synthetic data and on MovieLens small (``--data`` or ``$SKDPP_MOVIELENS``,
default ``/work/shared/data/ml-latest-small``; skipped if absent), with the
number of OpenDP calls and of noise entries drawn in secure mode. Writes
``benchmarks/results/secure_noise.md`` and ``.csv``.

Run (``--quick``: one repetition, fewer users)::

    OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/bench_secure_noise.py --quick
"""

import argparse
import csv
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import skdpp  # noqa: E402
from skdpp import (  # noqa: E402
    AdaptiveWeightMF,
    JLMarginClassifier,
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
)
from skdpp.datasets import (  # noqa: E402
    make_additive_personalized_regression,
    make_personalized_margin_classification,
    make_shared_representation_regression,
    make_skewed_ratings,
)
from skdpp.model_selection import PrivateRandomizedSearchCV  # noqa: E402
from skdpp.privacy import mechanisms  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def estimators():
    return {
        "PrivateFedRepRegressor": lambda: PrivateFedRepRegressor(),
        "PrivAltMinRegressor": lambda: PrivAltMinRegressor(),
        "PPSGDRegressor": lambda: PPSGDRegressor(),
        "AdaptiveWeightMF": lambda: AdaptiveWeightMF(),
        "JLMarginClassifier": lambda: JLMarginClassifier(),
        "PrivateRandomizedSearchCV": lambda: PrivateRandomizedSearchCV(
            PrivateFedRepRegressor(max_iter=3), {"learning_rate": [0.5, 1.0, 1.5]},
            n_iter=3),
    }


# The MovieLens example's settings (examples/plot_adaptive_mf_movielens.py), at eps=5.
MF_EXAMPLE = dict(n_components=8, delta=1e-5, rating_clip=2.0, clip_norm=0.1, reg=10.0,
                  user_budget=50, n_iter=5, epsilon=5.0)


def movielens_extras():
    """MF on MovieLens in the example's settings, and with every observed item
    (``items="observed"``: 9724 per-item 8x8 Gram matrices per iteration, the
    largest releases of any skdpp fit)."""
    return {
        "AdaptiveWeightMF (example, eps=5)": lambda: AdaptiveWeightMF(**MF_EXAMPLE),
        "AdaptiveWeightMF (example, eps=5, items='observed')":
            lambda: AdaptiveWeightMF(**MF_EXAMPLE, items="observed"),
    }


def synthetic(n_users):
    reg = make_shared_representation_regression(
        n_users=n_users, n_features=20, n_components=2, n_samples_per_user=10,
        n_test_samples_per_user=0, random_state=0)[:3]
    clf = make_personalized_margin_classification(
        n_users=n_users, n_features=20, n_samples_per_user=10, random_state=0)[:3]
    mf = make_skewed_ratings(n_users=n_users, n_items=100, random_state=0)[:3]
    return {"regression": reg, "classification": clf, "ratings": mf}


def papers():
    """The generators' defaults (the papers' settings), one per estimator family."""
    reg = make_shared_representation_regression(n_test_samples_per_user=0,
                                                random_state=0)[:3]
    add = make_additive_personalized_regression(random_state=0)[:3]
    clf = make_personalized_margin_classification(random_state=0)[:3]
    mf = make_skewed_ratings(random_state=0)[:3]
    return {"regression": reg, "additive": add, "classification": clf, "ratings": mf}


def movielens(path):
    from skdpp.datasets import load_movielens

    r = load_movielens(path)
    rows = np.searchsorted(r.movie_ids, r.X[:, 0])
    years = np.nan_to_num((r.years[rows].astype(float) - 1990.0) / 20.0)
    X = np.column_stack([r.genres[rows].astype(float), years])
    y = r.y.astype(float)
    return {"regression": (X, y, r.groups), "classification": (X, (y >= 4).astype(int),
                                                               r.groups),
            "ratings": (r.X, y, r.groups)}


def data_kind(name, data):
    if name.startswith("AdaptiveWeightMF"):
        return "ratings"
    kind = {"AdaptiveWeightMF": "ratings", "JLMarginClassifier": "classification",
            "PPSGDRegressor": "additive"}.get(name, "regression")
    return kind if kind in data else "regression"


def timed_fit(make, X, y, g, mode):
    calls = {"n": 0, "entries": 0, "trials": 0}
    secure_additive = mechanisms._secure_additive
    sample_trial_count = mechanisms.sample_trial_count

    def trials(stopping, rng):
        k = sample_trial_count(stopping, rng)
        calls["trials"] += k
        return k

    def counting(values, **kwargs):
        calls["n"] += 1
        calls["entries"] += int(np.size(values))
        return secure_additive(values, **kwargs)

    mechanisms._secure_additive = counting
    mechanisms.sample_trial_count = trials
    try:
        est = make()
        if mode == "numpy":
            est.set_params(random_state=0)
        with skdpp.config_context(noise=mode), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            est.fit(X, y, groups=g)
            elapsed = time.perf_counter() - start
    finally:
        mechanisms._secure_additive = secure_additive
        mechanisms.sample_trial_count = sample_trial_count
    # a search's cost is per trial: its number of trials K is random
    return elapsed / max(calls["trials"], 1), calls["n"], calls["entries"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data", default=os.environ.get(
        "SKDPP_MOVIELENS", "/work/shared/data/ml-latest-small"))
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    datasets = {"synthetic": synthetic(500 if args.quick else 2000)}
    if not args.quick:
        datasets["papers' settings"] = papers()
    if Path(args.data).exists():
        datasets["MovieLens small"] = movielens(args.data)
    else:
        print(f"MovieLens not found at {args.data}: skipped")
    rows = []
    for dname, data in datasets.items():
        cases = dict(estimators())
        if dname == "MovieLens small":
            cases.update(movielens_extras())
        for name, make in cases.items():
            if dname != "synthetic" and name == "PrivateRandomizedSearchCV" and args.quick:
                continue
            X, y, g = data[data_kind(name, data)]
            out = {}
            for mode in ("numpy", "secure"):
                times = []
                for _ in range(repeats):
                    t, n_calls, n_entries = timed_fit(make, X, y, g, mode)
                    times.append(t)
                out[mode] = (float(np.median(times)), n_calls, n_entries)
            row = dict(data=dname, estimator=name, numpy_s=out["numpy"][0],
                       secure_s=out["secure"][0],
                       slowdown=out["secure"][0] / out["numpy"][0],
                       opendp_calls=out["secure"][1], noise_entries=out["secure"][2])
            rows.append(row)
            print(f"{dname:16s} {name:26s} numpy {row['numpy_s']:7.2f}s  secure "
                  f"{row['secure_s']:7.2f}s  x{row['slowdown']:5.1f}  "
                  f"{row['opendp_calls']} calls, {row['noise_entries']} entries", flush=True)
    RESULTS.mkdir(exist_ok=True)
    stem = "secure_noise_quick" if args.quick else "secure_noise"
    with open(RESULTS / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cmd = "OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/bench_secure_noise.py" + (
        " --quick" if args.quick else "")
    lines = [
        "# Secure noise mode: fit time, default (numpy) vs secure (OpenDP)", "",
        f"Command: `{cmd}`; median of {repeats} fit(s) per cell, default parameters "
        f"(search: FedRep, 3 configurations, n_iter=3); {platform.processor() or 'cpu'}, "
        f"1 BLAS thread, 2 cores shared; OpenDP {_opendp_version()}.", "",
        "`calls`: OpenDP calls of the secure fit (one per release vector); `entries`: "
        "noise entries drawn by them (symmetric matrices: upper triangles only). "
        "The search's times are per trial (its number of trials is random, drawn from "
        "OS entropy in secure mode). Data: `synthetic` = 2000 users (500 with `--quick`), "
        "20 features; `papers' settings` = the `skdpp.datasets` generators' defaults "
        "(FedRep/AltMin/search: 20000 users, d=50; PPSGD: 1000 users, d=100, 100 "
        "rows each; MF: 10000 users, 100 items; JL: 1000 users, d=50); MovieLens "
        "small: genres + year for the regressors, rating >= 4 for JL, item ids for MF.", "",
        "| data | estimator | numpy (s) | secure (s) | slowdown | calls | entries |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['data']} | {r['estimator']} | {r['numpy_s']:.2f} | "
                     f"{r['secure_s']:.2f} | {r['slowdown']:.1f}x | {r['opendp_calls']} | "
                     f"{r['noise_entries']} |")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / (stem + '.md')}")


def _opendp_version():
    from importlib.metadata import version

    return version("opendp")


if __name__ == "__main__":
    main()
