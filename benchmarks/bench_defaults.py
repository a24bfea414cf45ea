"""Defaults benchmark (issue 20): raw columns, graceful degradation, catastrophic fits.

Usage::

    nice -n 5 python benchmarks/bench_defaults.py [--data PATH] [--quick] [--tag NAME]
        [--parts timestamp invariance budgets catastrophic] [--seeds N] [--cat-seeds N]
    nice -n 5 python benchmarks/bench_defaults.py --jl-speed [--tag NAME]

MovieLens small (``--data`` or ``$SKDPP_MOVIELENS``, default
``/work/shared/data/ml-latest-small``), the features of
``benchmarks/bench_real_data.py`` (genres multi-hot + release year), per-user
80/20 split (``skdpp.model_selection.per_user_train_test_split``), every
estimator with only ``epsilon`` and ``random_state`` set. Parts:

(a) ``timestamp``: the rating's raw Unix timestamp as an extra passthrough column,
    ε = 1, 4, inf. Target: |ΔRMSE| <= 0.01 against genres + year; predictions in
    a sane range of the labels [0.5, 5] (25 % of the label range as slack).
(b) ``invariance``: the year shifted by +1e4, scaled by 1e-3, standardised by the
    public constants (year - 1990) / 20, ε = 1, 4, inf. Target: |ΔRMSE| <= 0.002.
(c) ``budgets``: 300 users (a public random subset) at ε = 0.1 ... 8, personalised
    and cold-start RMSE against the per-user-mean and global-mean baselines;
    plus every row its own user (no ``groups``) at ε = 4. Target: RMSE <= 1.1 x
    the global-mean baseline (never worse than the cold-start prior by more than
    10 %) and predictions in the sane range.
(d) ``catastrophic``: 200 draws (300 random users, split, random_state) at ε = 1,
    genres + (year + 1e4). Target: worst test error <= 1.5 x median per estimator,
    for the personal and for the cold-start error (unseen user ids).

(a) and (b) compare the personal and the cold-start error, each a mean over seeds
on the same split and random_state.

JL (``JLMarginClassifier`` on "rating >= 4", as in bench_real_data) is held to
the same numbers on accuracy (its test error is 1 - accuracy); MF
(``AdaptiveWeightMF`` on item ids) has no feature columns, so only (c) and (d)
apply to it.

``--jl-speed`` (item 6): fit time of JL, PPSGD and FedRep at ε = 1 on a synthetic
MovieLens-like data set with 6 000 users and 10**6 rows (see ``movielens_like``).

Writes ``benchmarks/results/defaults_TAG.{csv,md,png}`` (or
``jl_speed_TAG.{csv,md}``); ``--from-csv FILE --tag TAG`` re-renders the .md
and .png from a CSV without fitting. ``--quick``: 1 seed, ε in {0.1, 1, 8} for (c), 20
draws for (d); TAG defaults to "quick" then, else "latest". Seeded: the same
command gives the same numbers.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_data import load as load_features  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_DATA = "/work/shared/data/ml-latest-small"
LINEAR = ("fedrep", "altmin", "ppsgd")
FEATURE_EST = LINEAR + ("jl",)
ALL_EST = LINEAR + ("mf", "jl")
LABEL_LO, LABEL_HI = 0.5, 5.0
SLACK = 0.25 * (LABEL_HI - LABEL_LO)  # sane prediction range: labels +- 25 % of width
YEAR_CENTER, YEAR_SCALE = 1990.0, 20.0  # public standardisation constants
TOL_TIMESTAMP, TOL_INVARIANCE, TOL_CATASTROPHIC, TOL_BUDGET = 0.01, 0.002, 1.5, 1.1


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #
def load(path):
    """Genres + year (bench_real_data's features), the raw timestamp, items, y, users."""
    from skdpp.datasets import load_movielens

    data = load_features(path, "all")
    raw = load_movielens(path)
    data["ts"] = raw.timestamps.astype(np.float64)  # rows aligned (users="all")
    return data


def split(data, seed, users=None):
    """Per-user 80/20 split of all rows, or of the rows of ``users``."""
    from skdpp.model_selection import per_user_train_test_split

    keep = np.ones(data["y"].shape[0], bool) if users is None else np.isin(data["groups"], users)
    Xf = np.column_stack([data["X"], data["ts"]])[keep]  # genres..., year, timestamp
    parts = per_user_train_test_split(Xf, data["items"][keep], data["y"][keep],
                                      groups=data["groups"][keep], test_size=0.2,
                                      random_state=seed)
    Xtr, Xte, Itr, Ite, ytr, yte, gtr, gte = parts
    return dict(X=Xtr, I=Itr, y=ytr, g=gtr), dict(X=Xte, I=Ite, y=yte, g=gte)


def features(Xf, variant):
    """Column variants of [genres..., year, timestamp]."""
    genres, year, ts = Xf[:, :-2], Xf[:, -2], Xf[:, -1]
    col = {"raw": year, "timestamp": year, "shift": year + 1e4, "scale": year * 1e-3,
           "standardised": (year - YEAR_CENTER) / YEAR_SCALE}[variant]
    cols = [genres, col[:, None]] + ([ts[:, None]] if variant == "timestamp" else [])
    return np.column_stack(cols)


def user_subset(data, n_users, seed):
    """A public random subset of users (depends on the seed only)."""
    users = np.unique(data["groups"])
    return np.random.default_rng(10_000 + seed).choice(users, n_users, replace=False)


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a, float) - np.asarray(b, float)) ** 2)))


def baselines(tr, te):
    uniq, u_tr = np.unique(tr["g"], return_inverse=True)
    u_te = np.searchsorted(uniq, te["g"])
    mu = tr["y"].mean()
    user_mean = np.bincount(u_tr, tr["y"], uniq.size) / np.bincount(u_tr, minlength=uniq.size)
    c, ct = tr["y"] >= 4, te["y"] >= 4
    frac = np.bincount(u_tr, c, uniq.size) / np.bincount(u_tr, minlength=uniq.size)
    return {"global mean": rmse(te["y"], np.full_like(te["y"], mu)),
            "per-user mean": rmse(te["y"], user_mean[u_te]),
            "global majority err": float(np.mean(ct != (c.mean() >= 0.5))),
            "per-user majority err": float(np.mean(ct != (frac[u_te] >= 0.5)))}


# --------------------------------------------------------------------------- #
# One fit
# --------------------------------------------------------------------------- #
def fit_eval(name, tr, te, epsilon, seed, variant="raw", groups=True):
    """Fit one estimator with defaults; test error, cold-start error, prediction range."""
    import skdpp

    out = dict(model=name, epsilon=epsilon, seed=seed, variant=variant, error=np.nan,
               cold_error=np.nan, pred_min=np.nan, pred_max=np.nan, n_warnings=0,
               warning="", exception="", fit_s=np.nan)
    g_tr = tr["g"] if groups else None
    g_te = te["g"] if groups else None
    if name == "mf":
        Xtr, Xte = tr["I"], te["I"]
    else:
        Xtr, Xte = features(tr["X"], variant), features(te["X"], variant)
    unseen = None if not groups else np.full(Xte.shape[0], -1)  # cold start: unseen ids
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # warnings of fit only
            warnings.simplefilter("always")
            t0 = time.process_time()
            if name == "jl":
                est = skdpp.JLMarginClassifier(epsilon=epsilon, random_state=seed)
                est.fit(Xtr, tr["y"] >= 4, groups=g_tr)
            else:
                cls = {"fedrep": skdpp.PrivateFedRepRegressor,
                       "altmin": skdpp.PrivAltMinRegressor, "ppsgd": skdpp.PPSGDRegressor,
                       "mf": skdpp.AdaptiveWeightMF}[name]
                est = cls(epsilon=epsilon, random_state=seed).fit(Xtr, tr["y"], groups=g_tr)
            out["fit_s"] = time.process_time() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name == "jl":
                out["error"] = float(np.mean(est.predict(Xte, groups=g_te) != (te["y"] >= 4)))
                out["cold_error"] = float(np.mean(est.predict(Xte, groups=unseen)
                                                  != (te["y"] >= 4)))
            else:
                pred = est.predict(Xte, groups=g_te)
                cold = est.predict(Xte, groups=unseen)
                out["error"], out["cold_error"] = rmse(te["y"], pred), rmse(te["y"], cold)
                both = np.concatenate([pred, cold])
                out["pred_min"], out["pred_max"] = float(both.min()), float(both.max())
    except Exception as exc:  # record, don't stop the benchmark
        out["exception"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        out["error"] = out["cold_error"] = np.inf
    msgs = [str(w.message).replace("\n", " ") for w in caught]
    out["n_warnings"] = len(msgs)
    out["warning"] = msgs[0][:160] if msgs else ""
    return out


def log(r, part):
    extra = f" {r['exception']}" if r["exception"] else ""
    print(f"[{part}] {r['model']:6s} {r['variant']:12s} eps={r['epsilon']:<5g} "
          f"seed={r['seed']:<3d} err={r['error']:.4g} cold={r['cold_error']:.4g} "
          f"pred=[{r['pred_min']:.3g}, {r['pred_max']:.3g}] fit={r['fit_s']:.2f}s{extra}",
          flush=True)


# --------------------------------------------------------------------------- #
# Parts
# --------------------------------------------------------------------------- #
def part_features(data, seeds, epsilons, variants, part):
    rows = []
    for seed in range(seeds):
        tr, te = split(data, seed)
        for name in FEATURE_EST:
            for eps in epsilons:
                for variant in variants:
                    r = fit_eval(name, tr, te, eps, seed, variant)
                    r["part"] = part
                    rows.append(r)
                    log(r, part)
    return rows


def part_budgets(data, seeds, epsilons):
    rows = []
    for seed in range(seeds):
        tr, te = split(data, seed, user_subset(data, 300, seed))
        for bname, value in baselines(tr, te).items():
            rows.append(dict(part="budgets", model=bname, kind="baseline", seed=seed,
                             error=value, epsilon=np.nan, variant="raw"))
        for name in ALL_EST:
            for eps in epsilons:
                r = fit_eval(name, tr, te, eps, seed)
                r["part"] = "budgets"
                rows.append(r)
                log(r, "budgets")
    # every row its own user (no groups), all users, ε = 4
    tr, te = split(data, 0)
    for name in LINEAR:
        r = fit_eval(name, tr, te, 4.0, 0, groups=False)
        r["part"], r["variant"] = "nogroups", "raw, no groups"
        rows.append(r)
        log(r, "nogroups")
    for bname, value in baselines(tr, te).items():
        rows.append(dict(part="nogroups", model=bname, kind="baseline", seed=0,
                         error=value, epsilon=np.nan, variant="raw, no groups"))
    return rows


def part_catastrophic(data, n_draws):
    rows = []
    for seed in range(n_draws):
        tr, te = split(data, seed, user_subset(data, 300, seed))
        for bname, value in baselines(tr, te).items():
            rows.append(dict(part="catastrophic", model=bname, kind="baseline", seed=seed,
                             error=value, epsilon=1.0, variant="shift"))
        for name in ALL_EST:
            r = fit_eval(name, tr, te, 1.0, seed, "shift")
            r["part"] = "catastrophic"
            rows.append(r)
            if seed % 10 == 0 or not np.isfinite(r["error"]):
                log(r, "catastrophic")
    return rows


# --------------------------------------------------------------------------- #
# Verdicts
# --------------------------------------------------------------------------- #
def sane(lo, hi):
    return bool(lo >= LABEL_LO - SLACK and hi <= LABEL_HI + SLACK)


def verdicts(df):
    """One row per (estimator, setting, target): value, threshold, pass."""
    out = []
    est = df[df.kind == "estimator"]

    def add(model, setting, target, value, ok, note=""):
        out.append(dict(model=model, setting=setting, target=target, value=value,
                        passed=bool(ok), note=note))

    feat = est[est.part == "features"]
    for (model, eps), g in feat.groupby(["model", "epsilon"]):
        by = g.groupby("variant")
        mean, cold = by["error"].mean(), by["cold_error"].mean()
        sd = by["error"].std().get("raw", np.nan)
        note = f"raw {mean.get('raw', np.nan):.4f} (seed sd {sd:.4f})"
        for variant, tol, label in (("timestamp", TOL_TIMESTAMP, "(a) +timestamp"),
                                    ("shift", TOL_INVARIANCE, "(b) year+1e4"),
                                    ("scale", TOL_INVARIANCE, "(b) year*1e-3"),
                                    ("standardised", TOL_INVARIANCE, "(b) year standardised")):
            if variant not in mean:
                continue
            diff = mean[variant] - mean["raw"]
            dcold = cold[variant] - cold["raw"]
            ok = bool(np.isfinite(diff) and np.isfinite(dcold) and abs(diff) <= tol
                      and abs(dcold) <= tol)
            add(model, f"{label}, eps={eps:g}", f"|Δerr|, |Δcold| <= {tol}",
                f"{diff:+.4g} / cold {dcold:+.4g}", ok,
                note + f", {variant} {mean[variant]:.4f}; cold raw {cold['raw']:.4f}, "
                f"{variant} {cold[variant]:.4f}")
        if model != "jl":
            for variant in ("raw", "timestamp"):
                v = g[g.variant == variant]
                if len(v):
                    lo, hi = v.pred_min.min(), v.pred_max.max()
                    add(model, f"(a) range, {variant}, eps={eps:g}",
                        f"preds in [{LABEL_LO - SLACK:g}, {LABEL_HI + SLACK:g}]",
                        f"[{lo:.3g}, {hi:.3g}]", sane(lo, hi))
    bud = df[df.part == "budgets"]
    if len(bud):
        base = bud[bud.kind == "baseline"].groupby("model")["error"].mean()
        for (model, eps), g in bud[bud.kind == "estimator"].groupby(["model", "epsilon"]):
            if model == "jl":
                ref, lim = base["global majority err"], base["global majority err"] + 0.05
                add(model, f"(c) 300 users, eps={eps:g}", "err <= global-majority err + 0.05",
                    g.error.mean(), max(g.error.max(), g.cold_error.max()) <= lim,
                    f"cold {g.cold_error.mean():.3f}, global majority {ref:.3f}, "
                    f"per-user majority {base['per-user majority err']:.3f}")
                continue
            ref = base["global mean"]
            worst = max(g.error.max(), g.cold_error.max())
            lo, hi = g.pred_min.min(), g.pred_max.max()
            add(model, f"(c) 300 users, eps={eps:g}",
                f"RMSE, cold RMSE <= {TOL_BUDGET} x global mean",
                f"{g.error.mean():.4g} / cold {g.cold_error.mean():.4g}",
                worst <= TOL_BUDGET * ref,
                f"worst over seeds {worst:.4g}, global mean {ref:.3f}, per-user mean "
                f"{base['per-user mean']:.3f}, fits warned {int((g.n_warnings > 0).sum())}/"
                f"{len(g)}")
            add(model, f"(c) range, 300 users, eps={eps:g}",
                f"preds in [{LABEL_LO - SLACK:g}, {LABEL_HI + SLACK:g}]",
                f"[{lo:.3g}, {hi:.3g}]", sane(lo, hi))
    nog = df[(df.part == "nogroups")]
    if len(nog):
        ref = nog[nog.model == "global mean"].error.mean()
        for _, r in nog[nog.kind == "estimator"].iterrows():
            add(r.model, "(c) no groups, eps=4", f"RMSE <= {TOL_BUDGET} x global mean",
                r.error, r.error <= TOL_BUDGET * ref and sane(r.pred_min, r.pred_max),
                f"preds [{r.pred_min:.3g}, {r.pred_max:.3g}], global mean {ref:.3f}, "
                f"warned: {r.n_warnings > 0}"
                + (f"; {r.exception}" if r.exception else ""))
    cat = df[df.part == "catastrophic"]
    if len(cat):
        for model, g in cat.groupby("model"):
            if g.kind.iloc[0] == "baseline" and model != "per-user mean":
                continue
            for col, what in (("error", "personal"), ("cold_error", "cold start")):
                e = g[col].to_numpy(float)
                if g.kind.iloc[0] == "baseline" and col == "cold_error":
                    continue
                e = np.where(np.isnan(e), np.inf, e)
                med, worst = np.median(e), np.max(e)
                bad = g[e > TOL_CATASTROPHIC * med]
                note = (f"median {med:.4g}, worst {worst:.4g} (seed "
                        f"{int(g.seed.iloc[np.argmax(e)])})")
                if len(bad):
                    note += f"; {len(bad)}/{len(g)} draws > 1.5x median: seeds " + ", ".join(
                        str(int(s)) for s in bad.seed[:10])
                ratio = worst / med if med > 0 else np.inf
                kind = "baseline, reference" if g.kind.iloc[0] == "baseline" else what
                add(model, f"(d) {len(g)} draws, 300 users, eps=1, year+1e4 ({kind})",
                    f"worst <= {TOL_CATASTROPHIC} x median", ratio,
                    ratio <= TOL_CATASTROPHIC, note)
    import pandas as pd

    return pd.DataFrame(out)


# --------------------------------------------------------------------------- #
# Output
# --------------------------------------------------------------------------- #
def command_line():
    return "nice -n 5 python benchmarks/bench_defaults.py " + " ".join(
        a for a in sys.argv[1:] if not a.startswith("/"))


def write_md(df, ver, path, args, elapsed, command):
    fmt = lambda v: f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)  # noqa: E731
    lines = [f"# Defaults benchmark (issue 20), tag `{args.tag}`", "",
             f"Command: `{command}` (MovieLens small; {elapsed / 60:.1f} min wall on the "
             "shared 2-core machine; re-render without fitting: `--from-csv FILE --tag TAG`)",
             "",
             f"Passed {int(ver.passed.sum())} of {len(ver)} checks. Errors: RMSE for the "
             "regressors and MF, 1 - accuracy for JL (rating >= 4). Δerr = mean over seeds "
             "of (variant - raw), same split and random_state. Sane range: labels "
             f"[{LABEL_LO}, {LABEL_HI}] +- {SLACK:g}.", ""]
    for section in ("(a)", "(b)", "(c)", "(d)"):
        sub = ver[ver.setting.str.startswith(section)]
        if sub.empty:
            continue
        lines += [f"## {section}", "", "| estimator | setting | target | value | pass | note |",
                  "|---|---|---|---|---|---|"]
        for _, r in sub.iterrows():
            lines.append(f"| {r.model} | {r.setting} | {r.target} | {fmt(r.value)} | "
                         f"{'PASS' if r.passed else '**FAIL**'} | {r.note} |")
        lines.append("")
    est = df[(df.kind == "estimator")]
    exc = est[est.exception.fillna("") != ""]
    if len(exc):
        lines += ["## Exceptions", ""] + [
            f"- {r.model} {r.part} {r.variant} eps={r.epsilon:g} seed={r.seed}: {r.exception}"
            for _, r in exc.head(20).iterrows()] + [""]
    warn = est[est.n_warnings.fillna(0) > 0].groupby(["part", "model"]).size()
    if len(warn):
        lines += ["## Fits that warned (count)", ""] + [
            f"- {p} / {m}: {n}" for (p, m), n in warn.items()] + [""]
    path.write_text("\n".join(lines))
    return lines


def plot(df, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    cat = df[df.part == "catastrophic"]
    ax = axes[0]
    if len(cat):
        names, data = [], []
        for n in list(ALL_EST) + ["per-user mean"]:
            sub = cat[cat.model == n]
            for col, suffix in (("error", ""), ("cold_error", " cold")):
                if n == "per-user mean" and col == "cold_error":
                    continue
                e = sub[col].to_numpy(float)
                e = np.where(np.isfinite(e), e, np.nan)
                names.append(n + suffix)
                data.append(e / np.nanmedian(e))
        ax.boxplot([d[np.isfinite(d)] for d in data], whis=(0, 100))
        for i, d in enumerate(data):
            ax.scatter(np.full(d.size, i + 1) + np.linspace(-0.15, 0.15, d.size), d, s=4,
                       alpha=0.4)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=35, fontsize=7)
        ax.axhline(TOL_CATASTROPHIC, color="red", ls="--", lw=1, label="target 1.5x median")
        ax.set_yscale("log")
        ax.set_ylabel("test error / median (log)")
        ax.set_title(f"(d) {cat.seed.nunique()} draws, 300 users, eps=1, year+1e4")
        ax.legend(fontsize=8)
    bud = df[df.part == "budgets"]
    ax = axes[1]
    if len(bud):
        est = bud[(bud.kind == "estimator") & (bud.model != "jl")]
        for model, g in est.groupby("model"):
            m = g.groupby("epsilon")[["error", "cold_error"]].mean()
            ax.plot(m.index, m.error, marker="o", label=f"{model}")
            ax.plot(m.index, m.cold_error, marker="x", ls=":", label=f"{model} cold")
        base = bud[bud.kind == "baseline"].groupby("model").error.mean()
        for b in ("global mean", "per-user mean"):
            ax.axhline(base[b], color="gray", ls="--", lw=0.8)
            ax.annotate(b, (est.epsilon.min(), base[b]), fontsize=7, va="bottom")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("test RMSE (log)")
        ax.set_title("(c) 300 users")
        ax.legend(fontsize=6, ncol=2)
    feat = df[(df.part == "features") & (df.kind == "estimator")]
    ax = axes[2]
    if len(feat):
        mean = feat.groupby(["model", "epsilon", "variant"]).error.mean().unstack("variant")
        labels, vals, colors = [], [], []
        for variant, color in (("timestamp", "C0"), ("shift", "C1"), ("scale", "C2"),
                               ("standardised", "C3")):
            if variant not in mean:
                continue
            d = (mean[variant] - mean["raw"]).abs()
            for (model, eps), v in d.items():
                labels.append(f"{model} {eps:g}")
                vals.append(max(v, 1e-6))
                colors.append(color)
        x = np.arange(len(vals))
        ax.bar(x, vals, color=colors)
        ax.set_xticks(x, labels, rotation=90, fontsize=5)
        ax.set_yscale("log")
        ax.axhline(TOL_TIMESTAMP, color="C0", ls="--", lw=1)
        ax.axhline(TOL_INVARIANCE, color="C1", ls="--", lw=1)
        ax.set_ylabel("|Δ test error| vs raw (log)")
        ax.set_title("(a)/(b) C0 timestamp (tol .01), C1 shift, C2 scale, C3 std (tol .002)",
                     fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- #
# Item 6: JL speed
# --------------------------------------------------------------------------- #
def movielens_like(n_users=6000, n_rows=1_000_000, n_genres=19, seed=0):
    """Synthetic ratings with MovieLens shapes: heavy-tailed rows per user
    (log-normal, >= 20), 9 000 movies with Zipf popularity, 19 multi-hot genres
    (~2 per movie), release year 1920-2018 (skewed recent), ratings in
    {0.5, ..., 5} from a user bias + user-specific genre tastes + noise."""
    rng = np.random.default_rng(seed)
    w = rng.lognormal(0.0, 1.1, n_users)
    counts = 20 + np.floor(w / w.sum() * (n_rows - 20 * n_users)).astype(int)
    counts[: n_rows - counts.sum()] += 1
    groups = np.repeat(np.arange(n_users), counts)
    n_movies = 9000
    pop = 1.0 / np.arange(1, n_movies + 1) ** 0.9
    items = rng.choice(n_movies, n_rows, p=pop / pop.sum())
    G = rng.random((n_movies, n_genres)) < 2.0 / n_genres
    year = np.clip(2018 - rng.exponential(18, n_movies), 1920, 2018).round()
    X = np.column_stack([G[items], year[items]]).astype(np.float64)
    taste = rng.normal(0, 0.4, (n_users, n_genres))
    score = (3.5 + rng.normal(0, 0.5, n_users)[groups] + np.einsum(
        "ij,ij->i", G[items], taste[groups]) + rng.normal(0, 0.3, n_movies)[items]
        - 0.005 * (year[items] - 1990) + rng.normal(0, 0.8, n_rows))
    y = np.clip(np.round(score * 2) / 2, 0.5, 5.0)
    return X, y, groups


def jl_speed(args):
    import skdpp

    t0 = time.time()
    X, y, g = movielens_like()
    gen_s = time.time() - t0
    rows = []
    for name, make, target in (
            ("ppsgd", lambda: skdpp.PPSGDRegressor(epsilon=1.0, random_state=0), y),
            ("fedrep", lambda: skdpp.PrivateFedRepRegressor(epsilon=1.0, random_state=0), y),
            ("jl", lambda: skdpp.JLMarginClassifier(epsilon=1.0, random_state=0), y >= 4)):
        for rep in range(args.speed_reps):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                w0, c0 = time.perf_counter(), time.process_time()
                make().fit(X, target, groups=g)
                rows.append(dict(model=name, rep=rep, wall_s=time.perf_counter() - w0,
                                 cpu_s=time.process_time() - c0))
            print(rows[-1], flush=True)
    import pandas as pd

    df = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    df.to_csv(RESULTS / f"jl_speed_{args.tag}.csv", index=False)
    med = df.groupby("model")[["wall_s", "cpu_s"]].median()
    ratio = med.loc["jl", "cpu_s"] / med.loc["ppsgd", "cpu_s"]
    lines = [f"# JL fit time (issue 20 item 6), tag `{args.tag}`", "",
             "Command: `nice -n 5 python benchmarks/bench_defaults.py --jl-speed "
             f"--tag {args.tag}` (OPENBLAS/OMP threads = 1)", "",
             f"Data: `bench_defaults.movielens_like()`: {len(np.unique(g))} users, "
             f"{X.shape[0]} rows, {X.shape[1]} features (19 multi-hot genres + year), "
             f"rows per user {np.bincount(g).min()}-{np.bincount(g).max()} (median "
             f"{np.median(np.bincount(g)):.0f}); generated in {gen_s:.1f} s. JL on "
             "rating >= 4, the regressors on the rating; ε = 1, defaults, random_state=0. "
             f"Median of {args.speed_reps} fits; the machine is shared (wall time noisy, "
             "CPU time is the process's).", "",
             "| estimator | wall s | CPU s |", "|---|---|---|"]
    for name, r in med.iterrows():
        lines.append(f"| {name} | {r.wall_s:.2f} | {r.cpu_s:.2f} |")
    lines += ["", f"JL / PPSGD CPU time: {ratio:.2f} (target <= 2): "
              f"{'PASS' if ratio <= 2 else '**FAIL**'}", ""]
    (RESULTS / f"jl_speed_{args.tag}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


# --------------------------------------------------------------------------- #
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("SKDPP_MOVIELENS", DEFAULT_DATA))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--parts", nargs="+", default=["timestamp", "invariance", "budgets",
                                                      "catastrophic"],
                        choices=["timestamp", "invariance", "budgets", "catastrophic"])
    parser.add_argument("--seeds", type=int, default=None, help="seeds for (a)-(c)")
    parser.add_argument("--cat-seeds", type=int, default=None, help="draws for (d)")
    parser.add_argument("--jl-speed", action="store_true")
    parser.add_argument("--speed-reps", type=int, default=3)
    parser.add_argument("--command", default="(unknown)", help=argparse.SUPPRESS)
    parser.add_argument("--from-csv", default=None,
                        help="re-render the .md and .png of TAG from this CSV (no fits)")
    args = parser.parse_args(argv)
    args.tag = args.tag or ("quick" if args.quick else "latest")
    if args.jl_speed:
        return jl_speed(args)
    import pandas as pd

    if args.from_csv:
        df = pd.read_csv(args.from_csv, keep_default_na=False, na_values=[""])
        for col in ("exception", "warning"):
            df[col] = df[col].fillna("")
        ver = verdicts(df)
        wall = float(df["run_wall_s"].iloc[0]) if "run_wall_s" in df else np.nan
        cmd = str(df["command"].iloc[0]) if "command" in df else args.command
        lines = write_md(df, ver, RESULTS / f"defaults_{args.tag}.md", args, wall, cmd)
        plot(df, RESULTS / f"defaults_{args.tag}.png")
        print("\n".join(lines))
        return 0
    seeds = args.seeds or (1 if args.quick else 3)
    cat_seeds = args.cat_seeds or (20 if args.quick else 200)
    budget_eps = [0.1, 1.0, 8.0] if args.quick else [0.1, 0.3, 1.0, 2.0, 4.0, 8.0]
    start = time.time()
    data = load(args.data)
    rows = []
    variants = ["raw"]
    if "timestamp" in args.parts:
        variants.append("timestamp")
    if "invariance" in args.parts:
        variants += ["shift", "scale", "standardised"]
    if len(variants) > 1:
        rows += part_features(data, seeds, [1.0, 4.0, np.inf], variants, "features")
    if "budgets" in args.parts:
        rows += part_budgets(data, seeds, budget_eps)
    if "catastrophic" in args.parts:
        rows += part_catastrophic(data, cat_seeds)
    df = pd.DataFrame(rows)
    df["kind"] = df["kind"].fillna("estimator") if "kind" in df else "estimator"
    for col in ("exception", "warning"):
        df[col] = df[col].fillna("")
    elapsed = time.time() - start
    df["run_wall_s"], df["command"] = elapsed, command_line()
    RESULTS.mkdir(exist_ok=True)
    df.to_csv(RESULTS / f"defaults_{args.tag}.csv", index=False)
    ver = verdicts(df)
    lines = write_md(df, ver, RESULTS / f"defaults_{args.tag}.md", args, elapsed,
                     command_line())
    plot(df, RESULTS / f"defaults_{args.tag}.png")
    print("\n".join(lines))
    print(f"elapsed {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
