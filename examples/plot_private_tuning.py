"""
===================================================
Tuning costs privacy: defaults, private search, grid
===================================================

Choosing hyperparameters by looking at validation scores of models trained on
private data is itself a use of the private data. This example compares, at
the same user-level (epsilon, delta):

(a) the estimator's **defaults**, one fit at (epsilon, delta);
(b) :class:`~skdpp.model_selection.PrivateRandomizedSearchCV` at the **same
    total** (epsilon, delta): a random number of trials (truncated negative
    binomial, mean 10), each fit with a smaller per-trial budget and scored
    with a DP validation score; the whole search is accounted (Papernot &
    Steinke 2022);
(c) scikit-learn's :class:`~sklearn.model_selection.GridSearchCV` over the same
    grid, every fit at (epsilon, delta), the best chosen by exact validation
    scores and refitted. Its *hidden cost*: the selection is not private at
    all (epsilon = inf); even if every candidate model were published instead,
    composing the fits would cost the epsilon shown in the table.

Two data sets:

* synthetic shared-representation regression (Snedeker et al. 2025), 10 000
  users, 10 rows each, d = 20, true rank 3 (the default ``n_components=2`` is
  wrong), :class:`~skdpp.linear_model.PrivateFedRepRegressor`, grid over
  ``n_components`` x ``learning_rate`` x ``clip_norm`` (27 configurations);
* MovieLens ``ml-latest-small`` (610 users), genres as features, ratings
  centred by the public midpoint 2.75,
  :class:`~skdpp.linear_model.PPSGDRegressor`, grid over ``alpha`` x
  ``learning_rate`` (20 configurations). The data folder comes from the first
  argument or the ``SKDPP_MOVIELENS`` environment variable (skipped if
  neither is given).

Utility is the test MSE on held-out rows of every user (20% of each user's
ratings for MovieLens, 5 fresh rows per user for the synthetic data), averaged
over 3 seeds. In all three methods the personal parts of the final model are
refitted on all of each user's training rows with ``personalize`` (no privacy
cost; the search does it by default, ``refit_personal=True``). The estimators' defaults will change in a later release; the
example uses only their public API, so it will show the new defaults.

Run: ``python examples/plot_private_tuning.py [path-to-ml-latest-small]``
(about 3 CPU minutes). Writes ``benchmarks/results/private_tuning.csv``,
``private_tuning.md``, ``private_tuning.rst`` (the table of the user guide) and
``private_tuning.png``.
"""

import csv
import math
import os
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.metrics import mean_squared_error  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402

from skdpp import PPSGDRegressor, PrivateFedRepRegressor  # noqa: E402
from skdpp.datasets import load_movielens, make_shared_representation_regression  # noqa: E402
from skdpp.metrics import make_personalized_scorer  # noqa: E402
from skdpp.model_selection import (  # noqa: E402
    PerUserShuffleSplit,
    PrivateRandomizedSearchCV,
    per_user_train_test_split,
)
from skdpp.privacy import gaussian_epsilon, gaussian_mu  # noqa: E402

try:
    RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
except NameError:  # executed by sphinx-gallery
    RESULTS = Path("benchmarks") / "results"
EPSILONS = [1.0, 4.0]
DELTA = 1e-6
SEEDS = [0, 1, 2]
N_ITER = 10
MIDPOINT = 2.75  # (0.5 + 5) / 2: public


def synthetic():
    X, y, g, info = make_shared_representation_regression(
        n_users=10_000, n_features=20, n_components=3, n_samples_per_user=10, noise=0.1,
        head_norm="unit", n_test_samples_per_user=5, random_state=0)
    grid = {"n_components": [2, 3, 4], "learning_rate": [0.5, 1.0, 2.5],
            "clip_norm": [0.3, 1.0, 3.0]}
    return dict(name="synthetic (FedRep)", estimator=PrivateFedRepRegressor(), grid=grid,
                train=(X, y, g), test=(info.X_test, info.y_test, info.groups_test),
                score_clip=1.0)


def movielens(path):
    data = load_movielens(path)
    X = data.genres[np.searchsorted(data.movie_ids, data.item_ids)].astype(float)
    y = data.ratings - MIDPOINT
    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=data.user_ids, test_size=0.2, random_state=0)
    grid = {"alpha": [0.1, 0.3, 1.0, 3.0, 10.0], "learning_rate": [0.05, 0.1, 0.2, 0.5]}
    # A user's mean squared error above 4 (2 stars of error on average) counts as 4.
    return dict(name="MovieLens (PPSGD)", estimator=PPSGDRegressor(), grid=grid,
                train=(X_tr, y_tr, g_tr), test=(X_te, y_te, g_te), score_clip=4.0)


def test_mse(est, test):
    X, y, g = test
    return float(np.mean((est.predict(X, groups=g) - y) ** 2))


def grid_hidden_epsilon(n_fits, epsilon):
    """epsilon of composing n_fits Gaussian fits, each (epsilon, DELTA)-DP (exact GDP)."""
    return gaussian_epsilon(math.sqrt(n_fits) * gaussian_mu(epsilon, DELTA), DELTA)


def run(dataset, epsilon, seed):
    X, y, g = dataset["train"]
    est = dataset["estimator"]
    rows = []
    t = time.process_time()
    default = clone_with(est, epsilon=epsilon, delta=DELTA, random_state=seed).fit(X, y, groups=g)
    default.personalize(X, y, g)  # free, as refit_personal=True in the search
    rows.append(dict(method="defaults", test_mse=test_mse(default, dataset["test"]),
                     epsilon_accounted=default.privacy_report_.epsilon_spent, n_fits=1,
                     chosen="defaults", cpu_s=time.process_time() - t))

    t = time.process_time()
    search = PrivateRandomizedSearchCV(
        est, dataset["grid"], epsilon=epsilon, delta=DELTA, n_iter=N_ITER,
        score_clip=dataset["score_clip"], random_state=seed)
    search.fit(X, y, groups=g)
    rows.append(dict(method="PrivateRandomizedSearchCV",
                     test_mse=test_mse(search, dataset["test"]),
                     epsilon_accounted=search.privacy_report_.epsilon_spent,
                     n_fits=search.n_trials_,  # private: shown here for the comparison only
                     chosen=str(search.best_params_), cpu_s=time.process_time() - t))

    t = time.process_time()
    n_configs = int(np.prod([len(v) for v in dataset["grid"].values()]))
    with sklearn.config_context(enable_metadata_routing=True):
        grid = GridSearchCV(
            clone_with(est, epsilon=epsilon, delta=DELTA, random_state=seed), dataset["grid"],
            cv=PerUserShuffleSplit(n_splits=1, test_size=0.2, random_state=seed),
            scoring=make_personalized_scorer(mean_squared_error, greater_is_better=False),
            refit=True)
        grid.fit(X, y, groups=g)
    grid.best_estimator_.personalize(X, y, g)
    rows.append(dict(method="GridSearchCV (non-private selection)",
                     test_mse=test_mse(grid.best_estimator_, dataset["test"]),
                     epsilon_accounted=math.inf, n_fits=n_configs + 1,
                     chosen=str(grid.best_params_), cpu_s=time.process_time() - t,
                     epsilon_if_all_fits_released=grid_hidden_epsilon(n_configs + 1, epsilon)))
    for r in rows:
        r.update(dataset=dataset["name"], epsilon=epsilon, seed=seed)
    return rows


def clone_with(est, **params):
    from sklearn.base import clone

    return clone(est).set_params(**params)


def summarise(rows):
    keys = []
    for r in rows:
        k = (r["dataset"], r["epsilon"], r["method"])
        if k not in keys:
            keys.append(k)
    out = []
    for k in keys:
        sel = [r for r in rows if (r["dataset"], r["epsilon"], r["method"]) == k]
        mse = np.array([r["test_mse"] for r in sel])
        out.append(dict(dataset=k[0], epsilon=k[1], method=k[2], test_mse=mse.mean(),
                        test_mse_std=mse.std(), epsilon_accounted=sel[0]["epsilon_accounted"],
                        epsilon_if_all_fits_released=sel[0].get(
                            "epsilon_if_all_fits_released", ""),
                        mean_fits=np.mean([r["n_fits"] for r in sel]),
                        cpu_s=np.mean([r["cpu_s"] for r in sel]),
                        chosen="; ".join(r["chosen"] for r in sel)))
    return out


def write(rows, summary, command):
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "private_tuning.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    lines = ["# Tuning costs privacy: measured utility", "",
             f"Command: `{command}` (OPENBLAS_NUM_THREADS=1; CPU seconds per run).", "",
             "| data | epsilon | method | test MSE (mean ± sd, 3 seeds) | epsilon accounted | "
             "fits (search: K, private, shown for illustration) | CPU s |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        acc = s["epsilon_accounted"]
        acc = (f"inf (selection); >= {s['epsilon_if_all_fits_released']:.2f} if all fits "
               "were released") if math.isinf(acc) else f"{acc:.3g}"
        lines.append(f"| {s['dataset']} | {s['epsilon']:g} | {s['method']} | "
                     f"{s['test_mse']:.4f} ± {s['test_mse_std']:.4f} | {acc} | "
                     f"{s['mean_fits']:.1f} | {s['cpu_s']:.1f} |")
    lines += ["", "Configurations chosen (per seed):", ""]
    lines += [f"- {s['dataset']}, epsilon={s['epsilon']:g}, {s['method']}: {s['chosen']}"
              for s in summary]
    (RESULTS / "private_tuning.md").write_text("\n".join(lines) + "\n")
    table = [".. list-table::", "   :header-rows: 1", "",
             "   * - data", "     - ε", "     - method", "     - test MSE",
             "     - ε accounted"]
    for s in summary:
        acc = s["epsilon_accounted"]
        acc = (f"∞ (selection); ≥ {s['epsilon_if_all_fits_released']:.1f} if all "
               f"{s['mean_fits']:.0f} fits were released") if math.isinf(acc) else f"{acc:.3g}"
        table += [f"   * - {s['dataset']}", f"     - {s['epsilon']:g}",
                  f"     - {s['method']}",
                  f"     - {s['test_mse']:.4f} ± {s['test_mse_std']:.4f}", f"     - {acc}"]
    (RESULTS / "private_tuning.rst").write_text("\n".join(table) + "\n")

    plot(summary)


def plot(summary):
    datasets = list(dict.fromkeys(s["dataset"] for s in summary))
    methods = list(dict.fromkeys(s["method"] for s in summary))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, name in zip(axes[0], datasets):
        width = 0.8 / len(methods)
        values = [s["test_mse"] for s in summary if s["dataset"] == name]
        for j, method in enumerate(methods):
            sel = [s for s in summary if s["dataset"] == name and s["method"] == method]
            x = np.arange(len(sel)) + j * width
            ax.bar(x, [s["test_mse"] for s in sel], width, yerr=[s["test_mse_std"] for s in sel],
                   label=method.replace(" (non-private selection)", "\n(selection not private)"))
            for xi, s in zip(x, sel):
                acc = float(s["epsilon_accounted"])
                label = "ε=∞" if math.isinf(acc) else f"ε={acc:.2g}"
                ax.text(xi, s["test_mse"] + s["test_mse_std"], label, ha="center",
                        va="bottom", fontsize=7)
        if min(values) > 0.5 * max(values):  # zoom on close values
            spread = max(values) - min(values)
            ax.set_ylim(min(values) - 2 * spread, max(values) + 1.5 * spread)
        ax.set_xticks(np.arange(len(EPSILONS)) + 0.4 - width / 2,
                      [f"epsilon = {e:g}" for e in EPSILONS])
        ax.set_ylabel("test MSE")
        ax.set_title(name)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "private_tuning.png", dpi=110)


def main(path=None):
    path = path or os.environ.get("SKDPP_MOVIELENS")
    datasets = [synthetic()]
    if path:
        datasets.append(movielens(path))
    else:
        print("MovieLens skipped: pass the ml-latest-small folder as the first argument or "
              "set SKDPP_MOVIELENS.")
    rows = []
    for dataset in datasets:
        for epsilon in EPSILONS:
            for seed in SEEDS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    rows.extend(run(dataset, epsilon, seed))
            for s in summarise([r for r in rows if r["dataset"] == dataset["name"]
                                and r["epsilon"] == epsilon]):
                print(f"{s['dataset']:20s} eps={epsilon:g} {s['method']:38s} "
                      f"test MSE {s['test_mse']:.4f} ± {s['test_mse_std']:.4f}  "
                      f"[{s['cpu_s']:.1f} CPU s/run]", flush=True)
    summary = summarise(rows)
    write(rows, summary, "python examples/plot_private_tuning.py $SKDPP_MOVIELENS")
    print(f"wrote {RESULTS / 'private_tuning.csv'}, private_tuning.md and private_tuning.png")


if __name__ == "__main__":
    main(*sys.argv[1:2])
