"""Ablation of the real-data defaults of the linear regressors (issue 11).

Usage::

    SKDPP_MOVIELENS=/path/to/ml-latest-small OPENBLAS_NUM_THREADS=1 \\
        python benchmarks/ablation_real_data_linear.py --users even odd \\
        [--epsilons 1 4 inf] [--seeds 2]

Same data, split and features as ``benchmarks/bench_real_data.py``. For
``PrivateFedRepRegressor``, ``PrivAltMinRegressor`` and ``PPSGDRegressor``,
each variant switches one part of the defaults back to the papers' behaviour:

* ``no intercept``: ``fit_intercept=False``;
* ``paper personal parts``: FedRep/AltMin ``personal_rows="holdout",
  personal_ridge=0`` (least-squares heads on ``S^1``); PPSGD
  ``personal_ridge=None`` (the SGD offsets);
* ``all rows, no shrinkage``: ``personal_ridge=0``;
* ``fixed bounds (wave 1)``: the numeric bounds and steps of wave 1 instead of
  ``"auto"``;
* ``paper (all off)``: all of the above.

Writes ``benchmarks/results/real_data_linear_ablation.csv`` and ``.md``.
"""

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_real_data as B  # noqa: E402

FIXED = {"fedrep": dict(clip_norm=1.0, init_clip_norm=5.0, head_clip_norm=1.0,
                        label_scale=1.0, learning_rate=1.0),
         "altmin": dict(clip_norm=5.0, label_clip=1.0, init_clip_norm=5.0, head_clip_norm=1.0),
         "ppsgd": dict(clip_norm=1.0, feature_scale=1.0)}


def variants(name):
    paper_parts = (dict(personal_ridge=None) if name == "ppsgd"
                   else dict(personal_rows="holdout", personal_ridge=0.0))
    return {"defaults": {}, "no intercept": dict(fit_intercept=False),
            "paper personal parts": paper_parts,
            "all rows, no shrinkage": dict(personal_ridge=0.0),
            "fixed bounds (wave 1)": FIXED[name],
            "paper (all off)": dict(fit_intercept=False, **paper_parts, **FIXED[name])}


def main(argv=None):
    import pandas as pd
    import skdpp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("SKDPP_MOVIELENS"))
    parser.add_argument("--users", nargs="+", default=["even", "odd"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1, 4, np.inf])
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("pass --data PATH or set SKDPP_MOVIELENS to a MovieLens folder")
    classes = {"fedrep": skdpp.PrivateFedRepRegressor, "altmin": skdpp.PrivAltMinRegressor,
               "ppsgd": skdpp.PPSGDRegressor}
    rows = []
    for users in args.users:
        data = B.load(args.data, users)
        for seed in range(args.seeds):
            tr, te = B.split(data, seed)
            for name, cls in classes.items():
                for variant, params in variants(name).items():
                    for eps in args.epsilons:
                        with warnings.catch_warnings(), np.errstate(all="ignore"):
                            warnings.simplefilter("ignore")
                            est = cls(epsilon=eps, random_state=seed, **params)
                            est.fit(tr["X"], tr["y"], groups=tr["g"])
                            value = B.rmse(te["y"], est.predict(te["X"], groups=te["g"]))
                        rows.append(dict(users=users, model=name, variant=variant,
                                         epsilon=eps, seed=seed, rmse=value))
                        print(users, seed, name, variant, eps, f"{value:.4f}", flush=True)
    df = pd.DataFrame(rows)
    B.RESULTS.mkdir(exist_ok=True)
    df.to_csv(B.RESULTS / "real_data_linear_ablation.csv", index=False)
    lines = ["# Ablation of the linear regressors' real-data defaults", "",
             "Command: `python benchmarks/ablation_real_data_linear.py --users "
             f"{' '.join(args.users)} --seeds {args.seeds}` (test RMSE, mean over seeds; "
             "raw 1-5 ratings, genres + year, per-user 80/20 split).", ""]
    for users in args.users:
        t = (df[df.users == users].groupby(["model", "variant", "epsilon"], sort=False)["rmse"]
             .mean().unstack("epsilon"))
        lines += [f"## users = {users}", "",
                  "| model | variant | " + " | ".join(f"ε={e:g}" for e in t.columns) + " |",
                  "|---|---|" + "---|" * len(t.columns)]
        for (model, variant), row in t.iterrows():
            lines.append(f"| {model} | {variant} | "
                         + " | ".join(f"{x:.3f}" for x in row) + " |")
        lines.append("")
    (B.RESULTS / "real_data_linear_ablation.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
