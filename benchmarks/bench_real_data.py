"""Real-data benchmark: every estimator with its defaults on raw MovieLens ratings.

Usage::

    SKDPP_MOVIELENS=/path/to/ml-latest-small \\
        OPENBLAS_NUM_THREADS=1 python benchmarks/bench_real_data.py \\
        [--data PATH] [--seeds 2] [--epsilons 1 2 4 8 inf] [--users all|even|odd]
        [--estimators fedrep altmin ppsgd mf jl] [--tag NAME]

The task a new user would try: a per-user 80/20 split of the ratings (every test
user is seen in training); raw 1-5 ratings; for the linear models the movie's
genres (multi-hot) and release year as features, the user id as ``groups``;
item ids for ``AdaptiveWeightMF``; "rating >= 4" for ``JLMarginClassifier``.
Estimators use their defaults with only ``epsilon`` and ``random_state`` set.

Baselines (non-private, fitted on the training rows): global mean, per-user
mean, mean + user + item biases, global ridge on the features, per-user ridge,
non-private ALS with biases (regressors); global majority, per-user majority and
per-user logistic regression (classification).

``--users even|odd`` keeps only users with an even / odd id: tune defaults on
one half, judge them on the other (and on ``all``). Writes
``benchmarks/results/real_data[_TAG].csv``, ``.md`` and ``.png`` (baselines as
horizontal lines).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
ESTIMATORS = ("fedrep", "altmin", "ppsgd", "mf", "jl")


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #
def load(path, users):
    from skdpp.datasets import load_movielens

    data = load_movielens(path)
    keep = np.ones(data.ratings.shape[0], dtype=bool)
    if users == "even":
        keep = data.user_ids % 2 == 0
    elif users == "odd":
        keep = data.user_ids % 2 == 1
    pos = np.searchsorted(data.movie_ids, data.item_ids)
    known = (pos < data.movie_ids.shape[0]) & (data.movie_ids[np.minimum(
        pos, data.movie_ids.shape[0] - 1)] == data.item_ids)
    pos = np.where(known, pos, 0)
    genres = np.where(known[:, None], data.genres[pos], False).astype(np.float64)
    year = np.where(known, data.years[pos], np.nan)
    year = np.where(np.isnan(year), np.nanmedian(data.years), year)
    X = np.column_stack([genres, year])[keep]  # raw features: 0/1 genres, the year
    return {
        "X": X, "items": data.item_ids[keep][:, None], "y": data.ratings[keep],
        "groups": data.user_ids[keep], "genre_names": list(data.genre_names) + ["year"],
    }


def split(data, seed):
    from skdpp.model_selection import per_user_train_test_split

    parts = per_user_train_test_split(data["X"], data["items"], data["y"],
                                      groups=data["groups"], test_size=0.2,
                                      random_state=seed)
    X_tr, X_te, I_tr, I_te, y_tr, y_te, g_tr, g_te = parts
    return dict(X=X_tr, I=I_tr, y=y_tr, g=g_tr), dict(X=X_te, I=I_te, y=y_te, g=g_te)


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


# --------------------------------------------------------------------------- #
# Baselines (non-private)
# --------------------------------------------------------------------------- #
def _codes(train_ids, test_ids):
    uniq, tr = np.unique(train_ids, return_inverse=True)
    te = np.searchsorted(uniq, test_ids)
    te = np.where((te < uniq.size) & (uniq[np.minimum(te, uniq.size - 1)] == test_ids), te, -1)
    return tr.reshape(-1), te, uniq.size


def _biases(u, i, y, n_u, n_i, reg=5.0, n_iter=10):
    mu = y.mean()
    bu, bi = np.zeros(n_u), np.zeros(n_i)
    for _ in range(n_iter):  # alternating ridge for the biases
        bu = np.bincount(u, y - mu - bi[i], n_u) / (np.bincount(u, minlength=n_u) + reg)
        bi = np.bincount(i, y - mu - bu[u], n_i) / (np.bincount(i, minlength=n_i) + reg)
    return mu, bu, bi


def _als(u, i, y, n_u, n_i, k=10, reg=5.0, n_iter=10, seed=0):
    rng = np.random.default_rng(seed)
    mu, bu, bi = _biases(u, i, y, n_u, n_i)
    P = rng.normal(scale=0.1, size=(n_u, k))
    Q = rng.normal(scale=0.1, size=(n_i, k))

    def solve(rows, cols, target, F, n):
        A = np.zeros((n, k + 1, k + 1))
        Fa = np.column_stack([F, np.ones(F.shape[0])])
        np.add.at(A, rows, Fa[cols][:, :, None] * Fa[cols][:, None, :])
        b = np.zeros((n, k + 1))
        np.add.at(b, rows, Fa[cols] * target[:, None])
        A += reg * np.eye(k + 1)
        return np.linalg.solve(A, b[..., None])[..., 0]

    for _ in range(n_iter):
        sol = solve(u, i, y - mu - bi[i], Q, n_u)
        P, bu = sol[:, :k], sol[:, k]
        sol = solve(i, u, y - mu - bu[u], P, n_i)
        Q, bi = sol[:, :k], sol[:, k]
    return mu, bu, bi, P, Q


def baselines(tr, te):
    from sklearn.linear_model import LogisticRegression, Ridge

    out = {}
    u_tr, u_te, n_u = _codes(tr["g"], te["g"])
    i_tr, i_te, n_i = _codes(tr["I"][:, 0], te["I"][:, 0])
    y, yt = tr["y"], te["y"]
    mu = y.mean()
    out["global mean"] = rmse(yt, np.full_like(yt, mu))
    user_mean = np.bincount(u_tr, y, n_u) / np.bincount(u_tr, minlength=n_u)
    out["per-user mean"] = rmse(yt, user_mean[u_te])
    bu_only = np.bincount(u_tr, y - mu, n_u) / (np.bincount(u_tr, minlength=n_u) + 5.0)
    out["mean + user bias"] = rmse(yt, mu + bu_only[u_te])
    m, bu, bi = _biases(u_tr, i_tr, y, n_u, n_i)
    pred = m + bu[u_te] + np.where(i_te >= 0, bi[np.maximum(i_te, 0)], 0.0)
    out["mean + user + item bias"] = rmse(yt, pred)
    out["global ridge"] = rmse(yt, Ridge(alpha=1.0).fit(tr["X"], y).predict(te["X"]))
    # per-user ridge (features standardised globally; public-free baseline)
    sc = tr["X"].std(axis=0) + 1e-12
    Xs, Xst = (tr["X"] - tr["X"].mean(0)) / sc, (te["X"] - tr["X"].mean(0)) / sc
    d = Xs.shape[1] + 1
    Xa = np.column_stack([Xs, np.ones(len(y))])
    A = np.zeros((n_u, d, d))
    np.add.at(A, u_tr, Xa[:, :, None] * Xa[:, None, :])
    b = np.zeros((n_u, d))
    np.add.at(b, u_tr, Xa * y[:, None])
    A[:, :-1, :-1] += 1.0 * np.eye(d - 1)  # ridge on the slopes, not the intercept
    A[:, -1, -1] += 1e-8
    W = np.linalg.solve(A, b[..., None])[..., 0]
    Xat = np.column_stack([Xst, np.ones(len(yt))])
    out["per-user ridge"] = rmse(yt, np.einsum("ij,ij->i", Xat, W[u_te]))
    m, bu, bi, P, Q = _als(u_tr, i_tr, y, n_u, n_i)
    known = i_te >= 0
    pred = m + bu[u_te] + np.where(known, bi[np.maximum(i_te, 0)]
                                   + np.einsum("ij,ij->i", P[u_te], Q[np.maximum(i_te, 0)]),
                                   0.0)
    out["ALS with biases"] = rmse(yt, pred)
    # classification: rating >= 4
    c, ct = (y >= 4).astype(int), (yt >= 4).astype(int)
    out["global majority (acc)"] = float(np.mean(ct == int(c.mean() >= 0.5)))
    frac = np.bincount(u_tr, c, n_u) / np.bincount(u_tr, minlength=n_u)
    out["per-user majority (acc)"] = float(np.mean(ct == (frac[u_te] >= 0.5)))
    correct = []
    for user in range(n_u):  # a baseline, not library code: one small model per user
        rows, trows = u_tr == user, u_te == user
        if not trows.any():
            continue
        if np.unique(c[rows]).size < 2:
            correct.append(ct[trows] == c[rows][0])
        else:
            clf = LogisticRegression(C=1.0, max_iter=200).fit(Xs[rows], c[rows])
            correct.append(ct[trows] == clf.predict(Xst[trows]))
    out["per-user logistic (acc)"] = float(np.mean(np.concatenate(correct)))
    return out


# --------------------------------------------------------------------------- #
# Estimators with defaults
# --------------------------------------------------------------------------- #
def run_estimator(name, tr, te, epsilon, seed):
    import skdpp

    if name == "mf":
        est = skdpp.AdaptiveWeightMF(epsilon=epsilon, random_state=seed)
        est.fit(tr["I"], tr["y"], groups=tr["g"])
        return "rmse", rmse(te["y"], est.predict(te["I"], groups=te["g"])), est
    if name == "jl":
        est = skdpp.JLMarginClassifier(epsilon=epsilon, random_state=seed)
        est.fit(tr["X"], tr["y"] >= 4, groups=tr["g"])
        acc = float(np.mean(est.predict(te["X"], groups=te["g"]) == (te["y"] >= 4)))
        return "accuracy", acc, est
    cls = {"fedrep": skdpp.PrivateFedRepRegressor, "altmin": skdpp.PrivAltMinRegressor,
           "ppsgd": skdpp.PPSGDRegressor}[name]
    est = cls(epsilon=epsilon, random_state=seed).fit(tr["X"], tr["y"], groups=tr["g"])
    return "rmse", rmse(te["y"], est.predict(te["X"], groups=te["g"])), est


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("SKDPP_MOVIELENS"),
                        help="MovieLens folder (default: $SKDPP_MOVIELENS)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1, 2, 4, 8, np.inf])
    parser.add_argument("--users", choices=["all", "even", "odd"], default="all")
    parser.add_argument("--estimators", nargs="+", default=list(ESTIMATORS),
                        choices=ESTIMATORS)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("pass --data PATH or set SKDPP_MOVIELENS to a MovieLens folder")
    import pandas as pd
    import warnings

    data = load(args.data, args.users)
    rows = []
    for seed in range(args.seeds):
        tr, te = split(data, seed)
        for name, value in baselines(tr, te).items():
            metric = "accuracy" if "(acc)" in name else "rmse"
            rows.append(dict(model=name.replace(" (acc)", ""), kind="baseline",
                             epsilon=np.nan, seed=seed, metric=metric, value=value,
                             cpu_s=np.nan))
        for name in args.estimators:
            for eps in args.epsilons:
                t0 = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    metric, value, _ = run_estimator(name, tr, te, eps, seed)
                rows.append(dict(model=name, kind="estimator", epsilon=eps, seed=seed,
                                 metric=metric, value=value,
                                 cpu_s=time.process_time() - t0))
                print(f"seed {seed} {name:7s} eps={eps:<5g} {metric}={value:.4f}", flush=True)
    df = pd.DataFrame(rows)
    suffix = f"_{args.tag}" if args.tag else ("" if args.users == "all" else f"_{args.users}")
    RESULTS.mkdir(exist_ok=True)
    df.to_csv(RESULTS / f"real_data{suffix}.csv", index=False)
    summary = df.groupby(["kind", "model", "metric", "epsilon"], dropna=False)["value"] \
        .mean().reset_index()
    lines = [f"# Real-data benchmark (users: {args.users}, {args.seeds} seeds)", "",
             "Command: `python benchmarks/bench_real_data.py "
             + " ".join(a for a in sys.argv[1:] if not a.startswith("/")) + "` "
             "(data path from `--data` or `SKDPP_MOVIELENS`)", ""]
    for metric in ("rmse", "accuracy"):
        sub = summary[summary.metric == metric]
        if sub.empty:
            continue
        lines += [f"## {metric}", "", "| model | " + " | ".join(
            f"ε={e:g}" for e in args.epsilons) + " |",
            "|---|" + "---|" * len(args.epsilons)]
        for model, g in sub[sub.kind == "estimator"].groupby("model"):
            vals = {e: v for e, v in zip(g.epsilon, g.value)}
            lines.append(f"| {model} | " + " | ".join(
                f"{vals.get(e, np.nan):.3f}" for e in args.epsilons) + " |")
        for _, r in sub[sub.kind == "baseline"].iterrows():
            lines.append(f"| *{r.model}* (baseline) | {r.value:.3f} |" + " |"
                         * (len(args.epsilons) - 1))
        lines.append("")
    (RESULTS / f"real_data{suffix}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric in zip(axes, ("rmse", "accuracy")):
        sub = summary[summary.metric == metric]
        finite = [e for e in args.epsilons if np.isfinite(e)]
        xmax = max(finite) * 2 if finite else 1
        for model, g in sub[sub.kind == "estimator"].groupby("model"):
            x = np.where(np.isfinite(g.epsilon), g.epsilon, xmax)
            ax.plot(x, g.value, marker="o", label=model)
        for _, r in sub[sub.kind == "baseline"].iterrows():
            ax.axhline(r.value, ls="--", lw=0.8, color="gray")
            ax.annotate(r.model, (min(finite or [1]), r.value), fontsize=7, va="bottom")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon (rightmost point: inf)")
        ax.set_ylabel(f"test {metric}")
        ax.legend(fontsize=8)
    fig.suptitle(f"MovieLens, defaults, users: {args.users}")
    fig.tight_layout()
    fig.savefig(RESULTS / f"real_data{suffix}.png", dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
