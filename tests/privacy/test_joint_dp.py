"""Joint DP: one user never changes another user's personal part (issue 19, rule 2).

Under joint differential privacy each user sees its own personal part; the
rest of the model must be the released shared part only. So with every release
held fixed, replacing one user by *any* other user must leave every other
user's personal part bit-for-bit identical: a dependence of a few ulps is an
observable difference between two neighbouring datasets (ε = ∞ for an observer
who knows another user's data and sees that user's model).

The releases are held fixed by fitting once and then calling ``personalize``
on two copies of the fitted model (the same block functions as the end of
``fit``, from the released shared part and each user's own rows only), once
with the data ``D`` and once with ``D'`` (one user replaced by a degenerate
one). A fit-level check replays ``D``'s releases in the fit on ``D'``
(``tests/privacy/harness.py``).

The broken variant puts back the old stack-wide fallback (re-solve every
system of a stack another way when one system fails) and shows the check
catches it.
"""

import copy

import numpy as np
import pytest

from skdpp.decomposition import AdaptiveWeightMF
from skdpp.linear_model import (
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
)
from skdpp.linear_model import _heads
from skdpp.linear_model._algorithms import ppsgd_kernels as _personalized_sgd
from skdpp.linear_model._jl_margin import JLMarginClassifier
from tests.privacy.harness import record_releases
from tests.linear_model.test_heads import _old_solve_stack  # the former whole-stack fallback

N_USERS, N_FEATURES, VICTIM = 14, 6, 3
TINY, HUGE = 1e-300, 1e305
FMAX = np.finfo(np.float64).max


# --------------------------------------------------------------------------- #
# data and degenerate replacements
# --------------------------------------------------------------------------- #
def _rows(seed=0, uniform=False):
    """Features, targets and users: ragged row counts (5 .. 11 rows a user), or
    8 rows each (``uniform``: the batched paths for equal users)."""
    rng = np.random.default_rng(seed)
    counts = np.full(N_USERS, 8) if uniform else 5 + np.arange(N_USERS) % 7
    groups = np.repeat(np.arange(N_USERS), counts)
    X = rng.normal(size=(groups.size, N_FEATURES))
    w = rng.normal(size=N_FEATURES)
    y = X @ w + 0.3 * rng.normal(size=N_USERS)[groups] + 0.1 * rng.normal(size=groups.size)
    # awkward users, so that any per-user fallback has company in its stack
    one = groups == 5
    X[one] = X[one][:1]            # duplicate rows: a rank-one Gram matrix
    X[groups == 9, 2:] = 0.0       # rank-deficient rows
    X[groups == 12] *= 1e-3        # small rows
    return X, y, groups


def _degenerate_rows(case, d, rng):
    """``(X_u, y_u)`` of a degenerate user (features ``d``)."""
    if case == "tiny":  # tiny rows, targets near the float maximum
        return TINY * rng.normal(size=(8, d)), HUGE * rng.choice([-1.0, 1.0], size=8)
    if case == "tiny_constant":  # tiny rows, one huge target (centred: 0)
        return TINY * rng.normal(size=(8, d)), np.full(8, HUGE)
    if case == "subnormal_gram":  # a Gram matrix of subnormals: its solution overflows
        return 1e-160 * rng.normal(size=(8, d)), HUGE * rng.choice([-1.0, 1.0], size=8)
    if case == "huge_rows":
        return 1e150 * rng.normal(size=(8, d)), rng.normal(size=8)
    if case == "subnormal":
        return np.full((6, d), 5e-324), np.full(6, -HUGE)
    if case == "singular":  # duplicate rows: an exactly singular Gram matrix
        row = np.round(rng.normal(size=d), 1)
        return np.tile(row, (7, 1)), np.arange(7.0)
    if case == "rank_deficient":  # integer rows on two columns only
        X = np.zeros((9, d))
        X[:, :2] = rng.integers(-2, 3, size=(9, 2))
        return X, rng.normal(size=9)
    if case == "one_row":
        return rng.normal(size=(1, d)), np.array([3.0])
    if case == "float_max":
        X = rng.normal(size=(4, d))
        X[0] = FMAX
        return X, np.array([FMAX, -FMAX, 1.0, 0.0])
    if case == "zeros":
        return np.zeros((6, d)), np.zeros(6)
    raise ValueError(case)


CASES = ["tiny", "tiny_constant", "subnormal_gram", "huge_rows", "subnormal", "singular", "rank_deficient", "one_row", "float_max", "zeros"]


def _replace(X, y, groups, X_u, y_u):
    keep = groups != VICTIM
    return (np.concatenate([X[keep], X_u]), np.concatenate([y[keep], y_u]),
            np.concatenate([groups[keep], np.full(y_u.shape[0], VICTIM)]))


def _labels(y):
    return np.where(y > np.median(y), "pos", "neg")


def _ratings(seed=0, n_items=10):
    rng = np.random.default_rng(seed)
    users, items = [], []
    for j in range(N_USERS):  # test-only data generation
        n = 4 + j % 5
        users.append(np.full(n, j))
        items.append(rng.choice(n_items, size=n, replace=False))
    users, items = np.concatenate(users), np.concatenate(items)
    items[:n_items] = np.arange(n_items)
    U, V = rng.normal(size=(N_USERS, 2)), rng.normal(size=(n_items, 2))
    y = np.einsum("nk,nk->n", U[users], V[items]) + 0.1 * rng.normal(size=users.size)
    return items[:, None], y, users


def _degenerate_ratings(case, rng, n_items=10):
    if case == "tiny":
        return np.arange(6)[:, None], TINY * rng.normal(size=6)
    if case == "huge":
        return np.arange(6)[:, None], HUGE * rng.choice([-1.0, 1.0], size=6)
    if case == "float_max":
        return np.array([[0], [1]]), np.array([FMAX, -FMAX])
    if case == "one_row":
        return np.array([[2]]), np.array([1.5])
    if case == "duplicates":  # one item rated many times
        return np.zeros((9, 1), dtype=int), np.arange(9.0)
    if case == "zeros":
        return np.arange(n_items)[:, None], np.zeros(n_items)
    if case == "unknown_items":  # items outside the fitted catalogue
        return np.arange(n_items, n_items + 40)[:, None], rng.normal(size=40)
    raise ValueError(case)


MF_CASES = ["tiny", "huge", "float_max", "one_row", "duplicates", "zeros", "unknown_items"]


# --------------------------------------------------------------------------- #
# estimators: the default configuration and non-default ones (small and fast)
# --------------------------------------------------------------------------- #
REGRESSORS = {
    "fedrep-default": lambda: PrivateFedRepRegressor(max_iter=2, random_state=0),
    "fedrep-k3": lambda: PrivateFedRepRegressor(n_components=3, max_iter=2, random_state=0),
    "fedrep-k5-noint": lambda: PrivateFedRepRegressor(n_components=5, max_iter=2,
                                                      fit_intercept=False, random_state=0),
    "altmin-default": lambda: PrivAltMinRegressor(random_state=0),
    "altmin-k3": lambda: PrivAltMinRegressor(n_components=3, random_state=0),
    "altmin-k5-ridge0": lambda: PrivAltMinRegressor(n_components=5, personal_ridge=0.0,
                                                    random_state=0),
    "ppsgd-default": lambda: PPSGDRegressor(n_rounds=5, random_state=0),
    "ppsgd-ridge0.5-noint": lambda: PPSGDRegressor(n_rounds=5, personal_ridge=0.5,
                                                   fit_intercept=False, random_state=0),
    # public bounds: the SGD offsets (personal_ridge=None) are then the personal
    # parts whatever the number of users (no local-only fallback)
    "ppsgd-sgd-offsets": lambda: PPSGDRegressor(n_rounds=5, personal_ridge=None,
                                                clip_norm=1.0, feature_scale=1.0,
                                                random_state=0),
}

_JL_LABELS = dict(epsilon=20.0, budget_shares={"labels": 0.3, "subspace": 0.4})

CLASSIFIERS = {
    # the defaults (private label set, auto clip, intercepts), small; a large
    # epsilon so that the private label selection publishes 14 users' labels
    "jl-default": lambda: JLMarginClassifier(n_components=1, jl_dim=4, n_candidates=16,
                                             n_directions=8, **_JL_LABELS, random_state=0),
    "jl-k2": lambda: JLMarginClassifier(n_components=2, jl_dim=5, n_candidates=16,
                                        n_directions=8, **_JL_LABELS, random_state=0),
    "jl-k3-holdout-noint": lambda: JLMarginClassifier(
        n_components=3, jl_dim=5, n_candidates=16, n_directions=8, personal_rows="holdout",
        fit_intercept=False, classes=["neg", "pos"], random_state=0),
}

# With this few users the default plan is predicted useless (local_only_: own
# means); public bounds keep the other configurations on the personal solve.
_MF_BOUNDS = dict(mean_clip=5.0, rating_clip=2.0)
FACTORISATIONS = {
    "mf-default": lambda: AdaptiveWeightMF(n_components=2, n_iter=2, random_state=0),
    "mf-bounds": lambda: AdaptiveWeightMF(n_components=2, n_iter=2, **_MF_BOUNDS,
                                          random_state=0),
    "mf-nobias-k3": lambda: AdaptiveWeightMF(n_components=3, n_iter=2, user_bias=False,
                                             **_MF_BOUNDS, random_state=0),
    "mf-k4-sgd-ridge": lambda: AdaptiveWeightMF(n_components=4, n_iter=2, solver="sgd",
                                                embedding_ridge=2.0, **_MF_BOUNDS,
                                                random_state=0),
}

_FITTED = {}


def _fitted(name, uniform=False):
    """Fit once per configuration (the releases every comparison holds fixed)."""
    if (name, uniform) not in _FITTED:
        if name in REGRESSORS:
            X, y, g = _rows(uniform=uniform)
            fitted = REGRESSORS[name]().fit(X, y, groups=g), (X, y, g)
        elif name in CLASSIFIERS:
            X, y, g = _rows(uniform=uniform)
            fitted = CLASSIFIERS[name]().fit(X, _labels(y), groups=g), (X, _labels(y), g)
        else:
            X, y, g = _ratings()
            fitted = FACTORISATIONS[name]().fit(X, y, g), (X, y, g)
            assert fitted[0].local_only_ == (name == "mf-default")
        _FITTED[name, uniform] = fitted
    return _FITTED[name, uniform]


def _personal_parts(est, X, y, g):
    """The personal attributes after ``personalize`` on a copy of ``est`` (releases fixed)."""
    est = copy.deepcopy(est)
    est.personalize(X, y, g)
    users = np.asarray(est.user_ids_)
    return users, {name: np.asarray(getattr(est, name)) for name in est._personal_attributes}


def _assert_others_identical(first, second):
    users, parts = first
    users2, parts2 = second
    np.testing.assert_array_equal(users, users2)
    others = users != VICTIM
    for name, value in parts.items():
        a, b = value[others], parts2[name][others]
        same = np.array_equal(a, b, equal_nan=True)
        if not same:
            diff = np.nanmax(np.abs(a - b))
            raise AssertionError(
                f"{name}: other users' personal parts changed when user {VICTIM} was "
                f"replaced (max difference {diff:.3g})")


def _neighbour(name, case, uniform=False):
    est, (X, y, g) = _fitted(name, uniform)
    rng = np.random.default_rng(1)
    if name in FACTORISATIONS:
        X_u, y_u = _degenerate_ratings(case, rng)
    else:
        X_u, y_u = _degenerate_rows(case, X.shape[1], rng)
        if name in CLASSIFIERS:
            y_u = np.where(np.arange(y_u.shape[0]) % 2 == 0, "pos", "neg")
    return est, (X, y, g), _replace(X, y, g, X_u, y_u)


# --------------------------------------------------------------------------- #
# the check
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(REGRESSORS) + list(CLASSIFIERS))
def test_one_user_leaves_other_personal_parts_identical(name, case):
    est, data, neighbour = _neighbour(name, case)
    _assert_others_identical(_personal_parts(est, *data), _personal_parts(est, *neighbour))


@pytest.mark.parametrize("case", ["one_row", "tiny", "subnormal_gram", "zeros"])
@pytest.mark.parametrize("name", list(REGRESSORS) + list(CLASSIFIERS))
def test_equal_users_one_user_leaves_other_personal_parts_identical(name, case):
    """Every other user has 8 rows: paths batched over equal users (one product for
    the stack) must give the values of the ragged path when one user differs."""
    est, data, neighbour = _neighbour(name, case, uniform=True)
    _assert_others_identical(_personal_parts(est, *data), _personal_parts(est, *neighbour))


@pytest.mark.parametrize("case", MF_CASES)
@pytest.mark.parametrize("name", list(FACTORISATIONS))
def test_one_user_leaves_other_embeddings_identical(name, case):
    est, data, neighbour = _neighbour(name, case)
    _assert_others_identical(_personal_parts(est, *data), _personal_parts(est, *neighbour))


@pytest.mark.parametrize("name", ["ppsgd-default", "ppsgd-ridge0.5-noint"])
def test_whole_stack_fallback_is_caught(monkeypatch, name):
    """Broken variant: the former stack-wide fallback of PPSGD's personal refit
    (reached through ``_solve_stack``) changes other users' offsets."""
    monkeypatch.setattr(_heads, "_solve_stack", _old_solve_stack)
    est, data, neighbour = _neighbour(name, "subnormal_gram")
    with pytest.raises(AssertionError, match="other users' personal parts changed"):
        _assert_others_identical(_personal_parts(est, *data),
                                 _personal_parts(est, *neighbour))


def _old_user_gradients(Xb, yb, m, coef):
    """The former stack-wide switch: batched products when every minibatch has the
    same size, segment sums (another rounding) for every user otherwise."""
    if m.min() == m.max():
        return _personalized_sgd._equal_gradients(Xb, yb, m.shape[0], int(m[0]), coef)
    n, d = m.shape[0], Xb.shape[1]
    grad = np.empty((n, d))
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    c = coef if coef.ndim == 1 else np.repeat(coef, m, axis=0)
    residual = Xb @ c if coef.ndim == 1 else np.einsum("ij,ij->i", Xb, c)
    residual -= yb
    grad[:] = np.add.reduceat(Xb * residual[:, None], starts, axis=0)
    return grad


def test_stack_wide_gradient_switch_is_caught(monkeypatch):
    """Broken variant: PPSGD's local steps switching every user to another
    summation when one user's minibatch size differs change other users' offsets."""
    monkeypatch.setattr(_personalized_sgd, "_user_gradients", _old_user_gradients)
    est, data, neighbour = _neighbour("ppsgd-sgd-offsets", "one_row", uniform=True)
    with pytest.raises(AssertionError, match="other users' personal parts changed"):
        _assert_others_identical(_personal_parts(est, *data),
                                 _personal_parts(est, *neighbour))


# --------------------------------------------------------------------------- #
# fit-level: the neighbour's fit replays the releases of the first fit
# --------------------------------------------------------------------------- #
def _fit_parts(make, X, y, g, replay=None):
    holder = {}

    def fit():
        holder["est"] = make().fit(X, y, g)

    releases = record_releases(fit, replay=replay)
    est = holder["est"]
    parts = {name: np.asarray(getattr(est, name)) for name in est._personal_attributes}
    return releases, (np.asarray(est.user_ids_), parts)


@pytest.mark.parametrize("case", ["subnormal_gram", "tiny_constant", "singular", "float_max"])
@pytest.mark.parametrize("name", ["fedrep-k3", "altmin-default", "ppsgd-default",
                                  "jl-k3-holdout-noint", "mf-bounds"])
def test_fit_with_replayed_releases_leaves_other_personal_parts_identical(name, case):
    if name in FACTORISATIONS:
        case = {"subnormal_gram": "tiny", "tiny_constant": "huge",
                "singular": "duplicates"}.get(case, case)
    make = {**REGRESSORS, **CLASSIFIERS, **FACTORISATIONS}[name]
    _, data, neighbour = _neighbour(name, case)
    releases, first = _fit_parts(make, *data)
    _, second = _fit_parts(make, *neighbour, replay=releases)
    _assert_others_identical(first, second)
