"""Recall@10 of ``AdaptiveWeightMF.recommend``: rating, popularity and blended rankings.

Issue 20, item 7. On MovieLens small (``/work/shared/data/ml-latest-small``),
for epsilon in {1, 2, 4, 8, inf} and two catalogues:

- ``private``: the default ``items=None`` (the catalogue is selected under DP);
- ``public``: ``items=movie ids of movies.csv`` (public metadata: free).

Protocol
--------
- Split: :func:`skdpp.model_selection.per_user_train_test_split`, 20 % of
  every user's ratings held out (``random_state=0``); the model is fitted on
  the training rows of all users (``random_state`` = seed: the privacy noise).
- Relevant items of a user: ALL the user's held-out items (the paper's App.
  D.1 definition; column ``relevant="all"``), and, as a second reading, the
  held-out items rated >= 4 (``relevant="ge4"``). Both include items outside
  the published catalogue, so a tiny catalogue is paid for. Users with no
  relevant item are skipped.
- Candidates: published catalogue items the user did not rate in training
  (every ranking below, model and baselines alike).
- recall@10 = |top-10 ∩ relevant| / min(10, |relevant|), averaged over users
  (:func:`skdpp.metrics.recall_at_k`; a list shorter than 10, from a catalogue
  of fewer than 10 items, is padded with a non-item). 0 when nothing is
  published.
- Rankings: ``rating`` (predicted rating), ``popularity`` (released noisy
  counts ``item_counts_``), ``popularity_combined`` (``ranking="popularity"``:
  ``item_counts_`` and ``item_weighted_counts_`` combined), ``true_popularity``
  (the exact training counts: a NON-private reference), ``blend``
  (``recommend``'s default), and a grid of blend variants
  (``grid:<form>:<weight>``, on the combined popularity) for the choice of
  the default.
- Users: even user ids choose the blend (the grid's mean over seeds), odd
  user ids report.

Run::

    nice -n 5 python benchmarks/bench_mf_recommend.py            # 3 seeds
    nice -n 5 python benchmarks/bench_mf_recommend.py --seeds 1  # quick
    # the budget of a fit meant for recommendations (User Guide)
    nice -n 5 python benchmarks/bench_mf_recommend.py --counts-share 0.5 \
        --epsilons 4 8 --tag _counts0.5

Writes ``benchmarks/results/mf_recommend{TAG}.{csv,md,png}``.
"""

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np

from skdpp import AdaptiveWeightMF
from skdpp.datasets import load_movielens
from skdpp.metrics import recall_at_k
from skdpp.model_selection import per_user_train_test_split

DATA = Path("/work/shared/data/ml-latest-small")
RESULTS = Path(__file__).resolve().parent / "results"
EPSILONS = (1.0, 2.0, 4.0, 8.0, np.inf)
K = 10
GRID_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)
GRID_FORMS = ("bias+uv", "uv")  # item bias + factor score, or factor score only


def _recall(recommended, sel, rel_users, rel_items):
    rec = np.asarray(recommended, dtype=np.int64)
    if rec.shape[1] < K:  # a catalogue of fewer than K items: pad with a non-item
        rec = np.hstack([rec, np.full((rec.shape[0], K - rec.shape[1]), -1)])
    return float(recall_at_k(rec[:, :K], rel_users, rel_items, k=K, users=sel))


def _top(scores, seen):
    scores = np.where(seen, -np.inf, scores)
    n_top = min(K, scores.shape[1])
    return np.argsort(-scores, axis=1, kind="stable")[:, :n_top]


def evaluate(mf, X_tr, X_te, y_te, g_te, true_counts):
    """Rows (users, relevant, ranking, recall) of one fit."""
    rows = []
    te_items = X_te[:, 0]
    for relevant, mask in (("all", np.ones(y_te.shape[0], bool)), ("ge4", y_te >= 4)):
        eval_users = np.unique(g_te[mask])
        for parity, name in ((0, "even"), (1, "odd")):
            sel = eval_users[eval_users % 2 == parity]
            keep = mask & np.isin(g_te, sel)
            ru, ri = g_te[keep], te_items[keep]
            if mf.n_items_ == 0:
                for ranking in ("rating", "popularity", "popularity_combined",
                                "true_popularity", "blend"):
                    rows.append((name, relevant, ranking, 0.0))
                continue
            for ranking in ("rating", "blend"):
                rows.append((name, relevant, ranking,
                             _recall(mf.recommend(sel, n_items=K, ranking=ranking), sel,
                                     ru, ri)))
            rows.append((name, relevant, "popularity_combined",
                         _recall(mf.recommend(sel, n_items=K, ranking="popularity"), sel,
                                 ru, ri)))
            # Baselines and grid from the released attributes (same candidates).
            codes = mf._user_codes(sel, sel.shape[0])
            seen = mf._seen[codes].toarray() > 0
            nc = np.tile(np.asarray(mf.item_counts_, float), (sel.shape[0], 1))
            rows.append((name, relevant, "popularity",
                         _recall(mf.item_ids_[_top(nc, seen)], sel, ru, ri)))
            tp = np.tile(true_counts.astype(float), (sel.shape[0], 1))
            rows.append((name, relevant, "true_popularity",
                         _recall(mf.item_ids_[_top(tp, seen)], sel, ru, ri)))
            if name != "even" or relevant != "all":  # the grid: tuning users only
                continue
            unit = mf.rating_clip_ or 1.0
            uv = mf.user_embeddings_[codes] @ mf.item_embeddings_.T / unit
            logc = np.log(np.maximum(mf._item_popularity(), 1.0))
            for form in GRID_FORMS:
                s = uv + mf.item_biases_ / unit if form == "bias+uv" else uv
                for w in GRID_WEIGHTS:
                    rows.append((name, relevant, f"grid:{form}:{w:g}",
                                 _recall(mf.item_ids_[_top(s + w * logc, seen)], sel,
                                         ru, ri)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", type=float, nargs="*", default=list(EPSILONS))
    parser.add_argument("--counts-share", type=float, default=None,
                        help="budget_shares['counts'] of every fit (default: the "
                             "estimator's)")
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument("--from-csv", action="store_true",
                        help="only rewrite the .md and .png from the saved .csv")
    args = parser.parse_args()
    if args.from_csv:
        with open(RESULTS / f"mf_recommend{args.tag}.csv", newline="") as f:
            rows = list(csv.reader(f))[1:]
        out = [(r[0], float(r[1]), int(r[2]), int(r[3]), r[4], r[5], r[6], float(r[7]))
               for r in rows]
        args.seeds = len({r[2] for r in out})
        args.epsilons = sorted({r[1] for r in out})
        report(out, args)
        return

    data = load_movielens(DATA)
    X, y, g = data.X, data.y, data.groups
    X_tr, X_te, y_tr, y_te, g_tr, g_te = per_user_train_test_split(
        X, y, groups=g, test_size=0.2, random_state=0)
    items_tr, counts_tr = np.unique(X_tr[:, 0], return_counts=True)
    shares = None if args.counts_share is None else {"counts": args.counts_share}
    out = []
    for catalogue in ("private", "public"):
        items = None if catalogue == "private" else data.movie_ids
        for eps in args.epsilons:
            for seed in range(args.seeds):
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the tiny-catalogue warning
                    mf = AdaptiveWeightMF(epsilon=eps, items=items,
                                          budget_shares=shares,
                                          random_state=seed).fit(X_tr, y_tr, g_tr)
                pos = np.minimum(np.searchsorted(items_tr, mf.item_ids_), items_tr.size - 1)
                true_counts = np.where(items_tr[pos] == mf.item_ids_, counts_tr[pos], 0)
                for row in evaluate(mf, X_tr, X_te, y_te, g_te, true_counts):
                    out.append((catalogue, eps, seed, mf.n_items_) + row)
                err = mf.predict(X_te, groups=g_te) - y_te
                out.append((catalogue, eps, seed, mf.n_items_, "all", "-", "rmse",
                            float(np.sqrt(np.mean(err ** 2)))))
                print(f"{catalogue} eps={eps:g} seed={seed} items={mf.n_items_} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"mf_recommend{args.tag}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["catalogue", "epsilon", "seed", "n_published", "users",
                         "relevant", "ranking", "recall_at_10"])
        for row in out:
            writer.writerow(row[:7] + (f"{row[7]:.5f}",))
    report(out, args)


def _mean(out, **where):
    keys = ("catalogue", "epsilon", "seed", "n_published", "users", "relevant", "ranking")
    vals = [r[7] for r in out
            if all(r[keys.index(k)] == v for k, v in where.items())]
    return float(np.mean(vals)) if vals else float("nan")


def report(out, args):
    eps_list = args.epsilons
    flags = f"--seeds {args.seeds}"
    if args.counts_share is not None:
        flags += (f" --counts-share {args.counts_share:g} --epsilons "
                  f"{' '.join(f'{e:g}' for e in eps_list)} --tag {args.tag}")
    lines = ["# AdaptiveWeightMF.recommend: recall@10 on MovieLens small", "",
             f"Command: `nice -n 5 python benchmarks/bench_mf_recommend.py {flags}` "
             f"(mean over {args.seeds} fit seeds; "
             "see the module docstring for the protocol). 610 users, 20 % of each "
             "user's ratings held out; candidates = published items the user did not "
             "rate in training; recall@10 over ALL held-out items (published or not) "
             "unless said. `true popularity` ranks by the exact training counts: "
             "a non-private reference.", ""]
    if args.counts_share is not None:
        lines += [f"Every fit: budget_shares={{'counts': {args.counts_share:g}}} (the "
                  "other phases at their defaults). The blend's weight is the "
                  "default's; the even-id grid below is for reference.", ""]
    else:
        lines += [
            "Reading (3 seeds, written by hand): the default blend (factor score "
            "/ rating_clip_ + 1.0 x log popularity; chosen on the even-id grid at "
            "the end) beats the released-count popularity baseline at epsilon 4 and 8 "
            "(public catalogue: 0.125 vs 0.058, 0.152 vs 0.139; private: tie with 5 "
            "items, 0.153 vs 0.147); its gain comes from the combined popularity "
            "(item_counts_ + item_weighted_counts_), the factor score adds <= 0.002. "
            "It does NOT reach exact (non-private) popularity at epsilon <= 8 with "
            "610 users (0.172): the count noise (std ~38 users at epsilon 4 for "
            "9 742 items) hides the head of the popularity curve. Rating-only "
            "ranking stays at <= 0.054. A fit meant for recommendations can put more "
            "of the budget on the counts at no cost in RMSE here: "
            "mf_recommend_counts0.5.md.", ""]
    rankings = ("rating", "popularity", "popularity_combined", "true_popularity", "blend")
    for catalogue in ("private", "public"):
        for relevant in ("all", "ge4"):
            what = ("all held-out items" if relevant == "all"
                    else "held-out items rated >= 4")
            lines += [f"## {catalogue} catalogue, relevant = {what}, odd user ids (report)",
                      "",
                      "| epsilon | published items | rating | popularity (released counts) | "
                      "popularity (released, combined) | true popularity | blend (default) |",
                      "|---|---|---|---|---|---|---|"]
            for eps in eps_list:
                n_pub = [r[3] for r in out if r[0] == catalogue and r[1] == eps
                         and r[6] == "blend" and r[4] == "odd" and r[5] == relevant]
                cells = [_mean(out, catalogue=catalogue, epsilon=eps, users="odd",
                               relevant=relevant, ranking=rk) for rk in rankings]
                cells = [f"{c:.3f}" for c in cells]
                lines.append(f"| {eps:g} | {np.mean(n_pub):.0f} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += ["## Test RMSE of the same fits (all users, held-out rows)", "",
              "| catalogue | " + " | ".join(f"eps={e:g}" for e in eps_list) + " |",
              "|---|" + "---|" * len(eps_list)]
    for catalogue in ("private", "public"):
        cells = [_mean(out, catalogue=catalogue, epsilon=e, ranking="rmse")
                 for e in eps_list]
        lines.append(f"| {catalogue} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    lines += ["", "## Choice of the blend (even user ids, relevant = all, public "
              "catalogue)",
              "",
              "| form:weight | " + " | ".join(f"eps={e:g}" for e in eps_list) + " |",
              "|---|" + "---|" * len(eps_list)]
    for rk in ["popularity", "popularity_combined", "true_popularity"] + [
            f"grid:{f}:{w:g}" for f in GRID_FORMS for w in GRID_WEIGHTS]:
        cells = [_mean(out, catalogue="public", epsilon=e, users="even",
                       relevant="all", ranking=rk) for e in eps_list]
        cells = [f"{c:.3f}" for c in cells]
        lines.append(f"| {rk} | " + " | ".join(cells) + " |")
    (RESULTS / f"mf_recommend{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    xs = np.arange(len(eps_list))
    for ax, catalogue in zip(axes, ("private", "public")):
        for rk, style in zip(rankings, ("o-", "s:", "s-", "k--", "^-")):
            ys = [_mean(out, catalogue=catalogue, epsilon=e, users="odd", relevant="all",
                        ranking=rk) for e in eps_list]
            ax.plot(xs, ys, style, label=rk.replace("_", " "))
        ax.set_xticks(xs, [f"{e:g}" for e in eps_list])
        ax.set_xlabel("epsilon")
        ax.set_title(f"{catalogue} catalogue (odd user ids)")
    axes[0].set_ylabel("recall@10 (all held-out items)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(RESULTS / f"mf_recommend{args.tag}.png", dpi=120)


if __name__ == "__main__":
    main()
