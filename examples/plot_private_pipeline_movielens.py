"""
==========================================================================
A whole Pipeline under one user-level guarantee (MovieLens, raw columns)
==========================================================================

What a scikit-learn user writes on a ratings table with raw columns -- the
movie's release year (missing for some titles), the rating's Unix timestamp and
the genre string ``"Comedy|Drama"`` -- is a ``ColumnTransformer`` of an imputer,
a scaler and a one-hot encoder in front of a regressor. Fitted on the private
data, each of those steps publishes statistics of it (a scaler's mean, every
rare genre a user typed). Here every step is private:

* :class:`~skdpp.preprocessing.PrivateSimpleImputer` and
  :class:`~skdpp.preprocessing.PrivateStandardScaler` for ``year`` and
  ``timestamp``,
* :class:`~skdpp.preprocessing.PrivateOneHotEncoder` (``separator="|"``) for the
  genres (private partition selection: only genres many users rated are
  published),
* :class:`~skdpp.PPSGDRegressor` or :class:`~skdpp.PrivateFedRepRegressor`,

and :func:`skdpp.privacy.split_budget` gives the *whole* Pipeline one budget
(shares: 10 % imputer, 20 % scaler, 5 % encoder, 65 % model; the common factor
is solved so that the exact composition spends the target), after which
:func:`skdpp.privacy.privacy_report` states one (ε, δ) for everything the fitted
Pipeline releases. The same Pipeline with scikit-learn's non-private
transformers (``SimpleImputer``, ``StandardScaler``, a binary
``CountVectorizer`` for the genres; NOT COVERED by any guarantee) and the model
at the same ε is the comparison.

610 users, 100 836 ratings, 20 % of each user's ratings held out
(:func:`skdpp.model_selection.per_user_train_test_split`), δ = 1e-6, three
seeds. Writes ``benchmarks/results/private_pipeline_movielens.{csv,png}``.
Run: ``python examples/plot_private_pipeline_movielens.py [path]`` (about a
minute).
"""

import csv
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import sklearn  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.pipeline import Pipeline, make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skdpp import PPSGDRegressor, PrivateFedRepRegressor  # noqa: E402
from skdpp.datasets import load_movielens  # noqa: E402
from skdpp.model_selection import per_user_train_test_split  # noqa: E402
from skdpp.preprocessing import (  # noqa: E402
    PrivateOneHotEncoder,
    PrivateSimpleImputer,
    PrivateStandardScaler,
)
from skdpp.privacy import privacy_report, split_budget  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared" / "data" / "ml-latest-small"
EPSILONS = [1.0, 4.0, np.inf]
SEEDS = (0, 1, 2)
MODELS = {"PPSGD": PPSGDRegressor, "FedRep": PrivateFedRepRegressor}
SHARES = {"privatesimpleimputer": 0.1, "privatestandardscaler": 0.2,
          "cat": 0.05, "model": 0.65}


def frame(path):
    """Raw columns: year (NaN when the title has none), timestamp, genre string."""
    data = load_movielens(path)
    row = np.searchsorted(data.movie_ids, data.item_ids)
    names = np.asarray(data.genre_names)
    genre = np.array(["|".join(names[r]) for r in data.genres], dtype=object)
    X = pd.DataFrame({"year": data.years[row], "timestamp": data.timestamps.astype(float),
                      "genres": genre[row]})
    return X, data.ratings, data.user_ids


def _tokens(s):
    return s.split("|")


def pipeline(model, private, epsilon, seed, n_users=None):
    if private:
        num = make_pipeline(PrivateSimpleImputer(random_state=seed),
                            PrivateStandardScaler(random_state=seed))
        cat, cols = PrivateOneHotEncoder(separator="|", sparse_output=False,
                                         random_state=seed), ["genres"]
    else:
        num = make_pipeline(SimpleImputer(), StandardScaler())
        cat, cols = CountVectorizer(tokenizer=_tokens, token_pattern=None, lowercase=False,
                                    binary=True), "genres"
    pre = ColumnTransformer([("num", num, ["year", "timestamp"]), ("cat", cat, cols)],
                            sparse_threshold=0)
    pipe = Pipeline([("pre", pre), ("model", MODELS[model](random_state=seed))])
    if private:
        # n_users (public) plans the encoder's partition selection, not a Gaussian.
        return split_budget(pipe, epsilon=epsilon, delta=1e-6, shares=SHARES,
                            n_users=n_users, n_features=1)
    return pipe.set_params(model__epsilon=epsilon)


def main(path=DEFAULT_PATH):
    sklearn.set_config(enable_metadata_routing=True)
    X, y, g = frame(path)
    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=g, test_size=0.2, random_state=0)
    n_users = len(np.unique(g_tr))
    rows, start = [], time.perf_counter()
    for model in MODELS:
        for eps in EPSILONS:
            for private in (True, False):
                for seed in SEEDS:
                    pipe = pipeline(model, private, eps, seed, n_users)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        pipe.fit(X_tr, y_tr, groups=g_tr)
                        pred = pipe.predict(X_te, groups=g_te)
                    report = privacy_report(pipe)
                    rows.append(dict(
                        model=model, epsilon=eps,
                        preprocessing="private" if private else "scikit-learn",
                        seed=seed, rmse=float(np.sqrt(np.mean((pred - y_te) ** 2))),
                        pipeline_epsilon=report.epsilon, covered=report.covered))
                r = [x["rmse"] for x in rows[-len(SEEDS):]]
                print(f"{model:6s} eps={eps:<4} {rows[-1]['preprocessing']:12s} "
                      f"RMSE {np.mean(r):.4f} (seeds {', '.join(f'{v:.4f}' for v in r)}) "
                      f"pipeline epsilon {rows[-1]['pipeline_epsilon']:.3g} "
                      f"covered={rows[-1]['covered']}")
    print(f"{time.perf_counter() - start:.0f} s")
    print(privacy_report(pipeline("PPSGD", True, 4.0, 0, n_users).fit(X_tr, y_tr,
                                                                     groups=g_tr)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "private_pipeline_movielens.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(pd.DataFrame(rows))


def plot(df):
    fig, ax = plt.subplots(figsize=(6.5, 4))
    labels = ["1", "4", "inf"]
    for i, (model, prep) in enumerate([(m, p) for m in MODELS
                                       for p in ("private", "scikit-learn")]):
        sub = df[(df.model == model) & (df.preprocessing == prep)]
        mean = sub.groupby("epsilon").rmse.mean().reindex(EPSILONS)
        x = np.arange(len(EPSILONS)) + (i - 1.5) * 0.18
        ax.bar(x, mean.values, width=0.18,
               label=f"{model}, {prep} preprocessing" +
               (" (whole Pipeline DP)" if prep == "private" else " (NOT COVERED)"))
    ax.set_xticks(np.arange(len(EPSILONS)), labels)
    ax.set_xlabel("epsilon (whole Pipeline for private preprocessing; model only otherwise)")
    ax.set_ylabel("test RMSE (mean of 3 seeds)")
    ax.set_ylim(0.85, max(1.1, float(df.groupby(["model", "preprocessing", "epsilon"])
                                     .rmse.mean().max()) + 0.02))
    ax.set_title("MovieLens, raw year / timestamp / genre string")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(RESULTS / "private_pipeline_movielens.png", dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:2])
