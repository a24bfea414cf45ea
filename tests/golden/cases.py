"""Golden-output cases: fixed fits whose released and local values must not change.

Written before the simplification refactor (issue 21) to freeze what every estimator
releases and predicts. Each case is a name, a function building the data and a
function making the estimator. :func:`outputs` turns a fitted case into a flat dict
of arrays: every public fitted attribute (ending in ``_``; shared and personal
parts), the predictions (and decision values) on held-out rows of known and new
users, and the report's epsilon.

``python -m tests.golden.generate`` writes ``synthetic.npz`` (always) and
``movielens.npz`` (when ``../shared/data/ml-latest-small`` is present) next to this
file, with the environment's fingerprint; ``tests/test_golden.py`` compares.
Parameter renames in a refactor update the cases here, never the stored values.
"""

import platform
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MOVIELENS = HERE.parents[2] / "shared" / "data" / "ml-latest-small"
#: largest array stored whole; bigger ones are stored as a fixed evenly spaced subsample
MAX_STORED = 2_000


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #
def _representation():
    from skdpp.datasets import make_shared_representation_regression

    X, y, g, info = make_shared_representation_regression(
        n_users=1500, n_features=20, n_components=2, n_samples_per_user=10, noise=0.01,
        head_norm="unit", n_test_samples_per_user=4, random_state=0)
    return dict(X=X, y=y, g=g, Xt=info.X_test, yt=info.y_test, gt=info.groups_test)


def _additive():
    from skdpp.datasets import make_additive_personalized_regression

    X, y, g, info = make_additive_personalized_regression(
        n_users=1500, n_features=10, n_samples_per_user=6, n_personal_features=3,
        personal_scale=1.0, global_scale=10.0, noise=0.01, random_state=0)
    rng = np.random.default_rng(1)
    Xt = rng.normal(size=(400, X.shape[1]))
    gt = np.concatenate([g[:300], np.arange(10_000, 10_100)])
    return dict(X=X, y=y, g=g, Xt=Xt, yt=None, gt=gt)


def _ratings():
    from skdpp.datasets import make_skewed_ratings

    X, y, g, info = make_skewed_ratings(
        n_users=3000, n_items=60, n_components=3, power=1.0, noise=0.1, test_size=0.2,
        random_state=0)
    return dict(X=X, y=y, g=g, Xt=info.X_test, yt=info.y_test, gt=info.groups_test)


def _margin():
    from skdpp.datasets import make_personalized_margin_classification

    X, y, g, info = make_personalized_margin_classification(
        n_users=3000, n_features=20, n_components=2, n_samples_per_user=10, margin=0.05,
        n_test_samples_per_user=4, random_state=0)
    return dict(X=X, y=y, g=g, Xt=info.X_test, yt=info.y_test, gt=info.groups_test)


_MOVIELENS_CACHE = {}


def movielens_available():
    return (MOVIELENS / "ratings.csv").is_file()


def _movielens(kind):
    """The split of ``benchmarks/bench_real_data.py`` (seed 0): raw genres + year."""
    if "split" not in _MOVIELENS_CACHE:
        from skdpp.datasets import load_movielens
        from skdpp.model_selection import per_user_train_test_split

        data = load_movielens(MOVIELENS)
        pos = np.searchsorted(data.movie_ids, data.item_ids)
        pos = np.minimum(pos, data.movie_ids.shape[0] - 1)
        known = data.movie_ids[pos] == data.item_ids
        genres = np.where(known[:, None], data.genres[pos], False).astype(np.float64)
        year = np.where(known, data.years[pos], np.nan)
        year = np.where(np.isnan(year), np.nanmedian(data.years), year)
        X = np.column_stack([genres, year])
        parts = per_user_train_test_split(X, data.item_ids[:, None], data.ratings,
                                          groups=data.user_ids, test_size=0.2,
                                          random_state=0)
        X_tr, X_te, I_tr, I_te, y_tr, y_te, g_tr, g_te = parts
        _MOVIELENS_CACHE["split"] = (X_tr, X_te, I_tr, I_te, y_tr, y_te, g_tr, g_te)
    X_tr, X_te, I_tr, I_te, y_tr, y_te, g_tr, g_te = _MOVIELENS_CACHE["split"]
    if kind == "items":
        return dict(X=I_tr, y=y_tr, g=g_tr, Xt=I_te, yt=y_te, gt=g_te)
    if kind == "labels":
        return dict(X=X_tr, y=y_tr >= 4, g=g_tr, Xt=X_te, yt=y_te >= 4, gt=g_te)
    return dict(X=X_tr, y=y_tr, g=g_tr, Xt=X_te, yt=y_te, gt=g_te)


# --------------------------------------------------------------------------- #
# Cases: name -> (data function, estimator class name, parameters)
# --------------------------------------------------------------------------- #
INF = np.inf
SYNTHETIC = {
    "fedrep-eps1": (_representation, "PrivateFedRepRegressor", dict(epsilon=1.0)),
    "fedrep-inf": (_representation, "PrivateFedRepRegressor", dict(epsilon=INF)),
    "fedrep-paper": (_representation, "PrivateFedRepRegressor",
                     dict(epsilon=2.0, fit_intercept=False, personal_rows="holdout",
                          batch_mode="disjoint", init="random", max_iter=3)),
    "altmin-eps1": (_representation, "PrivAltMinRegressor", dict(epsilon=1.0)),
    "altmin-inf": (_representation, "PrivAltMinRegressor", dict(epsilon=INF, max_iter=3)),
    "altmin-paper": (_representation, "PrivAltMinRegressor",
                     dict(epsilon=2.0, fit_intercept=False, schedule="disjoint",
                          max_iter=2)),
    "ppsgd-eps1": (_additive, "PPSGDRegressor", dict(epsilon=1.0, n_rounds=60)),
    "ppsgd-inf": (_additive, "PPSGDRegressor", dict(epsilon=INF, n_rounds=60)),
    "ppsgd-sampled": (_additive, "PPSGDRegressor",
                      dict(epsilon=2.0, n_rounds=40, sample_rate=0.3, clip_norm=5.0,
                           feature_scale=1.0, alpha=3.0, average=True)),
    "mf-eps1": (_ratings, "AdaptiveWeightMF", dict(epsilon=1.0, n_components=3)),
    "mf-inf": (_ratings, "AdaptiveWeightMF", dict(epsilon=INF, n_components=3)),
    "mf-paper": (_ratings, "AdaptiveWeightMF",
                 dict(epsilon=5.0, delta=1e-5, n_components=3, mu=0.25, center=False,
                      user_bias=False, item_bias=False, items=np.arange(60), solver="als")),
    "jl-eps2": (_margin, "JLMarginClassifier", dict(epsilon=2.0, n_components=2)),
    "jl-inf": (_margin, "JLMarginClassifier", dict(epsilon=INF, n_components=2)),
    "jl-paper": (_margin, "JLMarginClassifier",
                 dict(epsilon=4.0, n_components=2, margin=0.05, n_candidates=64,
                      fit_intercept=False)),
}
MOVIELENS_CASES = {
    f"movielens-{name}-{eps}": (
        (lambda kind: (lambda: _movielens(kind)))(kind), cls, dict(epsilon=eps))
    for name, kind, cls in [
        ("fedrep", "features", "PrivateFedRepRegressor"),
        ("altmin", "features", "PrivAltMinRegressor"),
        ("ppsgd", "features", "PPSGDRegressor"),
        ("mf", "items", "AdaptiveWeightMF"),
        ("jl", "labels", "JLMarginClassifier"),
    ]
    for eps in (1.0, INF)
}


def fit_case(case):
    import skdpp

    data_fn, cls_name, params = case
    data = data_fn()
    est = getattr(skdpp, cls_name)(**{"random_state": 0, **params})
    est.fit(data["X"], data["y"], groups=data["g"])
    return est, data


def _subsample(a):
    flat = np.ravel(a)
    if flat.size <= MAX_STORED:
        return a
    return flat[np.linspace(0, flat.size - 1, MAX_STORED).astype(np.int64)]


def outputs(est, data):
    """Flat dict of every released and local value of a fitted case."""
    out = {}
    for name in sorted(vars(est)):
        if not name.endswith("_") or name.startswith("_"):
            continue
        value = getattr(est, name)
        if isinstance(value, (bool, int, float, np.number, np.bool_)):
            value = np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[f"attr:{name}"] = _subsample(value)
    out["predict"] = _subsample(np.asarray(est.predict(data["Xt"], groups=data["gt"])))
    if hasattr(est, "decision_function"):
        out["decision_function"] = _subsample(np.asarray(
            est.decision_function(data["Xt"], groups=data["gt"]), dtype=float))
    out["report:epsilon"] = np.asarray(est.privacy_report_.epsilon, dtype=float)
    return out


def fingerprint():
    """What must match for bit-for-bit comparisons to be meaningful."""
    import scipy
    import sklearn
    from threadpoolctl import threadpool_info

    blas = sorted(f"{i.get('internal_api')}-{i.get('version')}-{i.get('architecture')}"
                  for i in threadpool_info() if i.get("user_api") == "blas")
    return "|".join([platform.machine(), platform.python_version(), np.__version__,
                     scipy.__version__, sklearn.__version__, *blas])
