"""Tests for PPSGDRegressor (Bietti et al. 2022, personalized-private SGD)."""

import math
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from tests.linear_model._reference import clamped, scaled_rows

from skdpp.datasets import make_additive_personalized_regression
from skdpp.linear_model._algorithms import ppsgd, ppsgd_kernels as sgd
from skdpp.linear_model._algorithms.ppsgd_kernels import MinibatchStream
from skdpp.linear_model._ppsgd import PPSGDRegressor
from skdpp.privacy import Phase, calibrate, clip_by_norm, mechanisms
from skdpp.utils._grouped import UserIndex, make_blocks
from skdpp.utils._random import FitRandomness, hash_ids
from tests.privacy.harness import (
    Release,
    adversarial_neighbours,
    assert_same_observables,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
    record_releases,
)

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)


# --------------------------------------------------------------------------- #
# Data and loop-based references (test only)
# --------------------------------------------------------------------------- #
def _additive_data(n_users=30, n_rows=12, d=4, n_personal=2, personal_scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), n_rows)
    X = rng.normal(size=(n_users * n_rows, d))
    w = rng.normal(size=d)
    theta = np.zeros((n_users, d))
    theta[:, d - n_personal:] = personal_scale * rng.normal(size=(n_users, n_personal))
    y = np.einsum("ij,ij->i", X, w + theta[groups]) + 0.1 * rng.normal(size=len(groups))
    return X, y, groups, w, theta


def _uneven_data(seed=1):
    """7 users of 5 rows, two of them with fewer rows; targets scaled so clipping binds."""
    X, y, groups, _, _ = _additive_data(n_users=7, n_rows=5, d=3, seed=seed)
    keep = np.ones(len(y), dtype=bool)
    keep[[0, 1, 2, 7]] = False
    return X[keep], 3 * y[keep], groups[keep]


#: The paper's algorithm: a feature scale of 1 (the steps in the features' units) and
#: the SGD offsets as personal parts (no shrunk refit).
PAPER = dict(feature_scale=1.0, personal_ridge=None)


def _centred(X, y, groups):
    """Each user's rows and targets centred on the user's own means (fit_intercept=True:
    the per-user intercept profiled out of every gradient)."""
    X, y = np.array(X, dtype=float), np.array(y, dtype=float)
    for u in np.unique(groups):
        mine = groups == u
        X[mine] -= X[mine].mean(axis=0)
        y[mine] -= y[mine].mean()
    return X, y


def _reference_alg1(X, y, groups, *, eta, alpha_paper, clip_norm, n_rounds,
                    fit_intercept=False, average=False):
    """Alg. 1 of Bietti et al. (2022) as written, one user at a time, zeta = 0.

    Every round each user uses all of its rows as its minibatch (mean gradient).
    """
    if fit_intercept:
        X, y = _centred(X, y, groups)
    users = list(np.unique(groups))
    n_users, d = len(users), X.shape[1]
    w = np.zeros(d)  # line 2
    theta = {u: np.zeros(d) for u in users}
    w_sum, theta_sum = np.zeros(d), {u: np.zeros(d) for u in users}
    for _ in range(n_rounds):  # line 3
        clipped = []
        w_old = w.copy()
        for u in users:  # line 4
            Xi, yi = X[groups == u], y[groups == u]  # line 5
            g = Xi.T @ (Xi @ (w_old + theta[u]) - yi) / len(yi)  # line 6
            theta[u] = theta[u] - eta / n_users * g  # line 7
            norm = math.sqrt(float(g @ g))
            clipped.append(g / max(1.0, norm / clip_norm))  # line 8
        total = np.zeros(d)
        for g in clipped:
            total = total + g
        w = w_old - alpha_paper * eta * (total / n_users)  # line 12, zeta = 0
        w_sum += w
        for u in users:
            theta_sum[u] += theta[u]
    if average:
        w = w_sum / n_rounds
        theta = {u: theta_sum[u] / n_rounds for u in users}
    return w, np.array([theta[u] for u in users])


def _record_minibatches(monkeypatch):
    """Record, per round, the participants and the rows of their minibatches.

    Wraps the block function that draws them; returns ``{round: [(user id,
    source rows), ...]}`` filled in by the fits that follow (users in order).
    """
    record = {}
    draw = sgd.draw_minibatches

    def recording(block, state, round_index, config):
        users, positions, m = draw(block, state, round_index, config)
        codes = np.arange(block.n_users) if users is None else users
        rows = block.source_rows()
        rows = rows if positions is None else rows[positions]
        parts = np.split(rows, np.cumsum(m)[:-1]) if len(m) else []
        record.setdefault(round_index, []).extend(
            zip(block.users[codes].tolist(), parts))
        return users, positions, m

    monkeypatch.setattr(sgd, "draw_minibatches", recording)
    return record


def _reference_recorded(X, y, groups, record, *, lr_global, lr_local, clip_norm,
                        sample_rate, weighting, batch_size, n_rounds,
                        fit_intercept=False, average=False):
    """Alg. 2/3 of Bietti et al. (2022), one user at a time, zeta = 0.

    Participants and minibatches are those the fit used (``record``).
    """
    if fit_intercept:
        X, y = _centred(X, y, groups)
    users = list(np.unique(groups))
    n_users, p = len(users), X.shape[1]
    w = np.zeros(p)  # line 2
    theta = {u: np.zeros(p) for u in users}
    w_sum, theta_sum = np.zeros(p), {u: np.zeros(p) for u in users}
    for t in range(1, n_rounds + 1):  # line 3
        total = np.zeros(p)
        for u, rows in record.get(t, []):  # lines 4-5: the sampled users
            Xi, yi = X[rows], y[rows]  # line 6
            g = Xi.T @ (Xi @ (w + theta[u]) - yi)  # line 7
            g = g / len(rows) if weighting == "user" else g / batch_size
            theta[u] = theta[u] - lr_local * g  # line 8
            total = total + g / max(1.0, math.sqrt(float(g @ g)) / clip_norm)  # line 9
        w = w - lr_global * total / (sample_rate * n_users)  # line 13, zeta = 0
        w_sum += w
        for u in users:
            theta_sum[u] += theta[u]
    if average:
        w = w_sum / n_rounds
        theta = {u: theta_sum[u] / n_rounds for u in users}
    return w, np.array([theta[u] for u in users])


def _paper_to_estimator(eta, alpha_paper, n_users):
    """(alpha, learning_rate) of PPSGDRegressor for Alg. 1's (eta, alpha)."""
    alpha = alpha_paper * n_users
    return alpha, max(eta / n_users, alpha_paper * eta)


def _excess_risk(est, w_true, theta_true):
    full = est.coef_ + est.offsets_
    return float(np.mean(np.sum((full - (w_true + theta_true)) ** 2, axis=1)))


def _params_of(est):
    """(w, theta): with fit_intercept the slopes of the fit on centred rows."""
    return est.coef_, est.offsets_


#: Every option of the paper's algorithm (tests of its mechanics): a given clip
#: norm, no intercept, the SGD offsets as personal parts.
PAPER_ALL = dict(PAPER, clip_norm=1.0, fit_intercept=False)


def _paper(**params):
    """A PPSGDRegressor with the paper's options (``params`` override them)."""
    return PPSGDRegressor(**{**PAPER_ALL, **params})


def _n_releases(est):
    """The number of releases the report plans (every one must be checked)."""
    return sum(p.count for p in est.privacy_report_.phases)


def _fit_on(paper=False, **params):
    make = _paper if paper else PPSGDRegressor

    def fit(X, y, groups):
        return make(random_state=0, **params).fit(X, y, groups)
    return fit


# --------------------------------------------------------------------------- #
# Exactness against the paper's algorithm
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("alpha_paper", [0.01, 0.2])
def test_matches_reference_alg1_without_noise(fit_intercept, average, alpha_paper):
    X, y, groups = _uneven_data()
    eta, clip, T = 2.0, 0.5, 25  # clip small enough to bind
    w_ref, theta_ref = _reference_alg1(X, y, groups, eta=eta, alpha_paper=alpha_paper,
                                       clip_norm=clip, n_rounds=T,
                                       fit_intercept=fit_intercept, average=average)
    alpha, lr = _paper_to_estimator(eta, alpha_paper, n_users=7)
    est = PPSGDRegressor(epsilon=np.inf, clip_norm=clip, alpha=alpha, learning_rate=lr,
                         n_rounds=T, batch_size=None, fit_intercept=fit_intercept,
                         average=average, random_state=0, **PAPER).fit(X, y, groups)
    w, theta = _params_of(est)
    assert_allclose(w, w_ref, rtol=0, atol=1e-10)
    assert_allclose(theta, theta_ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("sample_rate", [1.0, 0.5])
@pytest.mark.parametrize("weighting, average, fit_intercept",
                         [("user", False, True), ("user", True, False),
                          ("sample", False, False), ("sample", True, True)])
def test_matches_reference_with_the_fits_minibatches(sample_rate, weighting, average,
                                                     fit_intercept, monkeypatch):
    # Minibatches of 2 of 3-5 rows (several passes, pass boundaries inside a
    # minibatch) and client sampling: the reference reads the participants
    # and rows the fit used.
    X, y, groups = _uneven_data(seed=2)
    record = _record_minibatches(monkeypatch)
    est = PPSGDRegressor(epsilon=np.inf, clip_norm=0.5, alpha=0.7, learning_rate=0.3,
                         n_rounds=20, batch_size=2, sample_rate=sample_rate,
                         weighting=weighting, average=average, fit_intercept=fit_intercept,
                         random_state=0, **PAPER).fit(X, y, groups)
    lr_global, lr_local = ppsgd.step_sizes(est.alpha, est.learning_rate)
    w_ref, theta_ref = _reference_recorded(
        X, y, groups, record, lr_global=lr_global, lr_local=lr_local, clip_norm=0.5,
        sample_rate=sample_rate, weighting=weighting, batch_size=2, n_rounds=20,
        fit_intercept=fit_intercept, average=average)
    w, theta = _params_of(est)
    assert_allclose(w, w_ref, rtol=0, atol=1e-10)
    assert_allclose(theta, theta_ref, rtol=0, atol=1e-10)
    n_part = sum(len(v) for v in record.values())
    assert n_part == 20 * 7 if sample_rate == 1 else 0 < n_part < 20 * 7


def test_alpha_zero_is_local_only_and_spends_nothing():
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(epsilon=1.0, alpha=0.0, n_rounds=20, random_state=0)
    releases = record_releases(lambda: est.fit(X, y, groups))
    assert releases == []
    assert_array_equal(est.coef_, np.zeros(X.shape[1]))
    assert est.intercept_ == 0.0
    assert est.noise_multiplier_ == 0.0
    assert np.abs(est.offsets_).max() > 0
    report = est.privacy_report_
    assert report.epsilon_spent == 0.0
    assert report.released == ()
    assert [(p.name, p.mechanism) for p in report.phases] == [("iterations", "none")]
    assert any("no privacy is spent" in note for note in report.notes)


def test_alpha_zero_offsets_do_not_depend_on_other_users():
    # Keyed minibatches and sampling: a user's offsets are a function of the
    # key and of its own rows, whatever the other users (different blocks).
    X, y, groups, _, _ = _additive_data(seed=3)
    params = dict(epsilon=1.0, alpha=0.0, n_rounds=20, batch_size=3, sample_rate=0.5,
                  random_state=0)
    est = PPSGDRegressor(**params).fit(X, y, groups)
    mine = groups < 5
    sub = PPSGDRegressor(**params).fit(X[mine], y[mine], groups[mine])
    assert_allclose(sub.offsets_, est.offsets_[:5], rtol=1e-12, atol=1e-15)
    assert_allclose(sub.intercept_offsets_, est.intercept_offsets_[:5], rtol=1e-12,
                    atol=1e-15)


def test_alpha_inf_is_global_only():
    X, y, groups, _, _ = _additive_data()
    est = _paper(epsilon=2.0, delta=1e-5, alpha=np.inf, n_rounds=30,
                         random_state=0).fit(X, y, groups)
    assert_array_equal(est.offsets_, 0.0)
    assert_array_equal(est.intercept_offsets_, 0.0)
    assert np.abs(est.coef_).max() > 0
    # Global step is learning_rate: matches alpha = 1e12 (local step ~ 0) closely.
    big = _paper(epsilon=2.0, delta=1e-5, alpha=1e12, n_rounds=30,
                         random_state=0).fit(X, y, groups)
    assert_allclose(big.coef_, est.coef_, rtol=0, atol=1e-8)


# --------------------------------------------------------------------------- #
# Keyed randomness: permutation invariance, other users unchanged
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("sample_rate", [1.0, 0.3])
@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("average", [False, True])
def test_row_permutation_gives_identical_fit(sample_rate, batch_size, average):
    X, y, groups, _, _ = _additive_data(n_users=25, n_rows=7, seed=8)
    keep = np.random.default_rng(0).random(len(y)) < 0.8  # uneven users
    X, y, groups = X[keep], y[keep], groups[keep]
    params = dict(epsilon=1.0, n_rounds=15, sample_rate=sample_rate,
                  batch_size=batch_size, average=average, random_state=0)
    a = PPSGDRegressor(**params).fit(X, y, groups)
    p = np.random.default_rng(1).permutation(len(y))
    b = PPSGDRegressor(**params).fit(X[p], y[p], groups[p])
    for name in ("coef_", "intercept_", "offsets_", "intercept_offsets_"):
        assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)


@pytest.mark.parametrize("replacement", ["many_rows", "one_row", "huge"])
def test_replacing_a_user_leaves_other_users_batches_unchanged(replacement, monkeypatch):
    X, y, groups, _, _ = _additive_data(n_users=20, n_rows=6, seed=9)
    _, X2, y2, g2 = next((n, *r) for n, *r in adversarial_neighbours(X, y, groups, user=3)
                         if n == replacement)
    params = dict(epsilon=1.0, n_rounds=12, sample_rate=0.5, batch_size=4)
    seen = []
    for data in [(X, y, groups), (X2, y2, g2)]:
        record = _record_minibatches(monkeypatch)
        _fit_on(**params)(*data)
        Xd = data[0]
        seen.append({(t, u): Xd[rows] for t, parts in record.items() for u, rows in parts})
    others = {k for k in seen[0] if k[1] != 3}
    assert others == {k for k in seen[1] if k[1] != 3}  # the same participants
    assert len(others) < 12 * 19  # some users were not sampled in some rounds
    for key in others:  # the same rows, in the same order
        assert_array_equal(seen[1][key], seen[0][key], err_msg=str(key))


def test_participants_are_the_keyed_poisson_sample(monkeypatch):
    X, y, groups, _, _ = _additive_data(n_users=200, n_rows=2)
    record = _record_minibatches(monkeypatch)
    _fit_on(epsilon=1.0, n_rounds=5, sample_rate=0.3)(X, y, groups)
    key = FitRandomness(0).key
    ids = np.arange(200)
    for t in range(1, 6):
        expected = ids[mechanisms.poisson_sample(key, hash_ids(ids), t, 0.3)]
        assert_array_equal([u for u, _ in record.get(t, [])], expected)


# --------------------------------------------------------------------------- #
# Minibatch streams
# --------------------------------------------------------------------------- #
def _stream(counts, batch_size, seed=0, ids=None):
    ids = np.arange(len(counts)) if ids is None else np.asarray(ids)
    groups = np.repeat(ids, counts)
    X = np.arange(len(groups), dtype=float)[:, None]  # distinct rows
    (block,) = make_blocks(X, np.zeros(len(groups)), UserIndex.from_groups(groups),
                           max_rows=None)
    return block, MinibatchStream(block, batch_size, FitRandomness(seed).key)


def test_stream_uses_every_row_once_per_pass():
    counts = np.array([7, 3, 10, 1])
    block, stream = _stream(counts, 4)
    n_draws = 70  # 70 * min(4, n_i) rows = a whole number of passes for every user
    seen = []
    for _ in range(n_draws):
        positions, m = stream.draw(None)
        assert_array_equal(m, np.minimum(counts, 4))
        assert_array_equal(block.row_user[positions], np.repeat(np.arange(4), m))
        seen.append(positions)
    seen = np.concatenate(seen)
    for u, n in enumerate(counts):
        passes = seen[block.row_user[seen] == u].reshape(-1, n)
        for p in passes:  # every pass is a permutation of the user's rows
            assert_array_equal(np.sort(p), np.flatnonzero(block.row_user == u))
    # The order changes between passes (user with 10 rows, 28 passes).
    passes = seen[block.row_user[seen] == 2].reshape(-1, 10)
    assert len({tuple(p) for p in passes}) > 20


def test_stream_never_reshuffles_a_user_whose_batch_is_all_its_rows():
    block, stream = _stream(np.array([3, 5, 2]), 3)
    for _ in range(6):
        positions, m = stream.draw(np.array([0, 2]))
        assert_array_equal(positions, [0, 1, 2, 8, 9])  # canonical order, every time
    block, stream = _stream(np.array([3, 5]), None)
    assert_array_equal(stream.draw(None)[0], np.arange(8))  # every row, canonical order


def test_stream_of_a_user_is_keyed_by_its_id_pass_and_rows_only():
    # The same user (id 7, 6 rows) among other users of other sizes, as the
    # first or a later user of its block: the same minibatches.
    draws = []
    for counts, ids, pos in [([6, 2], [7, 9], 0), ([4, 11, 6], [1, 3, 7], 2)]:
        block, stream = _stream(np.array(counts), 4, ids=ids)
        users = np.array([pos])
        out = []
        for _ in range(9):
            positions, _ = stream.draw(users)
            out.append(block.rank[positions])
        draws.append(np.concatenate(out))
    assert_array_equal(draws[0], draws[1])
    _, other_key = _stream(np.array([6, 2]), 4, seed=1, ids=[7, 9])
    assert not np.array_equal(np.concatenate([other_key.draw(np.array([0]))[0]
                                              for _ in range(9)]), draws[0])


def test_sample_weighting_normalises_by_batch_size():
    X, y, groups, _, _ = _additive_data(n_users=10, n_rows=6, seed=6)
    # Every user has >= batch_size rows: "sample" and "user" coincide.
    a = _paper(epsilon=np.inf, batch_size=4, weighting="sample", n_rounds=15,
                       random_state=0).fit(X, y, groups)
    b = _paper(epsilon=np.inf, batch_size=4, weighting="user", n_rounds=15,
                       random_state=0).fit(X, y, groups)
    assert_allclose(a.coef_, b.coef_, rtol=1e-12)
    # A user with fewer rows than batch_size weighs less under "sample".
    keep = ~((groups == 0) & (np.arange(len(y)) % 6 >= 2))
    a = _paper(epsilon=np.inf, batch_size=4, weighting="sample", n_rounds=1,
                       alpha=np.inf, learning_rate=1.0, clip_norm=1e6, fit_intercept=False,
                       random_state=0).fit(X[keep], y[keep], groups[keep])
    b = _paper(epsilon=np.inf, batch_size=4, weighting="user", n_rounds=1,
                       alpha=np.inf, learning_rate=1.0, clip_norm=1e6, fit_intercept=False,
                       random_state=0).fit(X[keep], y[keep], groups[keep])
    Xk, yk, gk = X[keep], y[keep], groups[keep]
    g0 = -Xk[gk == 0].T @ yk[gk == 0]  # gradient sum of user 0 at w = 0
    assert_allclose(a.coef_ - b.coef_, -(g0 / 4 - g0 / 2) / 10, rtol=1e-10)


# --------------------------------------------------------------------------- #
# Utility
# --------------------------------------------------------------------------- #
def test_excess_risk_falls_with_rounds_without_noise():
    X, y, groups, w, theta = _additive_data(n_users=40, n_rows=30, d=5, seed=2)
    risks = []
    for T in (5, 50, 400):
        est = _paper(epsilon=np.inf, clip_norm=100.0, alpha=1.0, learning_rate=0.1,
                             n_rounds=T, fit_intercept=False, random_state=0)
        risks.append(_excess_risk(est.fit(X, y, groups), w, theta))
    assert risks[0] > 2 * risks[1] > 4 * risks[2]


def test_personalization_beats_global_only_with_noise():
    # Users differ on 2 of 5 coordinates (scale 1); global-only cannot fit them.
    X, y, groups, w, theta = _additive_data(n_users=200, n_rows=40, d=5, seed=4)
    common = dict(epsilon=1.0, delta=1e-5, clip_norm=5.0, learning_rate=0.1, n_rounds=200,
                  fit_intercept=False, random_state=0)
    personal = PPSGDRegressor(alpha=0.3, **common).fit(X, y, groups)
    global_only = PPSGDRegressor(alpha=np.inf, **common).fit(X, y, groups)
    r_personal = _excess_risk(personal, w, theta)
    r_global = _excess_risk(global_only, w, theta)
    # Seeded; measured ratio ~ 0.05. Global-only's risk is at least the offsets' energy.
    assert r_personal < 0.5 * r_global
    assert r_global > 0.5 * np.mean(np.sum(theta**2, axis=1))


def test_works_with_paper_generator():
    X, y, groups, info = make_additive_personalized_regression(
        n_users=50, n_features=10, n_samples_per_user=20, random_state=0)
    est = PPSGDRegressor(epsilon=np.inf, clip_norm=10.0, alpha=1.0, learning_rate=0.5,
                         n_rounds=100, fit_intercept=False, random_state=0)
    est.fit(X, y, groups)
    full = est.coef_ + est.offsets_
    risk = np.mean(np.sum(info.feature_variances * (full - info.coef) ** 2, axis=1))
    start = np.mean(np.sum(info.feature_variances * info.coef**2, axis=1))
    assert risk < 0.05 * start


# --------------------------------------------------------------------------- #
# Cold start and personalize
# --------------------------------------------------------------------------- #
def test_cold_start_uses_global_model():
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(epsilon=1.0, n_rounds=20, random_state=0).fit(X, y, groups)
    new_groups = np.full(len(y), 10_000)
    # rows in the fitted units (released feature scales), clamped to the label range
    Xs = scaled_rows(est, X)
    assert_allclose(est.predict(X, groups=new_groups),
                    clamped(est, Xs @ est.coef_ + est.intercept_), rtol=1e-12)
    known = est.predict(X, groups=groups)
    expected = (Xs @ est.coef_ + est.intercept_
                + np.einsum("ij,ij->i", Xs, est.offsets_[groups])
                + est.intercept_offsets_[groups])
    assert_allclose(known, clamped(est, expected, codes=groups), rtol=1e-12)


def test_personalize_fits_new_users_without_touching_shared_part():
    X, y, groups, _, _ = _additive_data(n_users=40, n_rows=20, seed=5)
    train = groups < 30
    est = PPSGDRegressor(epsilon=16.0, delta=1e-5, n_rounds=50, random_state=0)
    est.fit(X[train], y[train], groups[train])
    coef, report = est.coef_.copy(), est.privacy_report_
    cold = np.mean((est.predict(X[~train], groups=groups[~train]) - y[~train]) ** 2)
    releases = record_releases(
        lambda: est.personalize(X[~train], y[~train], groups[~train]))
    warm = np.mean((est.predict(X[~train], groups=groups[~train]) - y[~train]) ** 2)
    assert releases == []
    assert_array_equal(est.coef_, coef)
    assert est.privacy_report_ is report
    assert_array_equal(est.user_ids_, np.arange(40))
    assert warm < 0.5 * cold


@pytest.mark.parametrize("average", [False, True])
def test_personalize_runs_the_fits_local_steps(average):
    # alpha=0, q=1: fit's offsets are T local steps from w=0 with the fit's
    # key; personalize runs the same block functions with w fixed (= 0 here).
    X, y, groups, _, _ = _additive_data(seed=10)
    est = PPSGDRegressor(epsilon=1.0, alpha=0.0, n_rounds=12, batch_size=5,
                         average=average, random_state=0).fit(X, y, groups)
    offsets, intercepts = est.offsets_.copy(), est.intercept_offsets_.copy()
    est.personalize(X, y, groups)
    assert_array_equal(est.offsets_, offsets)
    assert_array_equal(est.intercept_offsets_, intercepts)


def test_personalize_with_alpha_inf_gives_zero_offsets():
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(epsilon=1.0, alpha=np.inf, n_rounds=10, random_state=0)
    est.fit(X, y, groups).personalize(X[:20], y[:20], groups[:20] + 100)
    assert_array_equal(est.offsets_, 0.0)


# --------------------------------------------------------------------------- #
# Privacy: accounting
# --------------------------------------------------------------------------- #
def test_report_lists_rounds_noise_and_clip_norm():
    X, y, groups, _, _ = _additive_data()
    est = _paper(epsilon=1.0, delta=1e-5, clip_norm=2.0, n_rounds=40,
                         random_state=0).fit(X, y, groups)
    report = est.privacy_report_
    assert_allclose(report.epsilon_spent, 1.0, rtol=1e-6)
    assert report.accountant == "exact-gdp"
    (phase,) = report.phases
    assert phase.name == "iterations"
    assert phase.count == 40
    assert phase.sampling_rate == 1.0
    assert_allclose(phase.noise_multiplier, est.noise_multiplier_, rtol=1e-12)
    assert_allclose(phase.sensitivity, 4.0)
    assert phase.clip_norm == 2.0
    # Exact GDP: mu = sqrt(T) / z.
    from skdpp.privacy import gaussian_epsilon
    assert_allclose(gaussian_epsilon(math.sqrt(40) / est.noise_multiplier_, 1e-5), 1.0,
                    rtol=1e-6)


@pytest.mark.parametrize("sample_rate", [1.0, 0.2])
def test_noise_is_calibrated_on_one_phase_of_n_rounds_releases(sample_rate):
    # The plan is one phase of T (sampled) Gaussian releases calibrated jointly.
    X, y, groups, _, _ = _additive_data(n_users=50)
    est = _paper(epsilon=1.5, delta=1e-5, sample_rate=sample_rate, n_rounds=60,
                         random_state=0).fit(X, y, groups)
    expected = calibrate([Phase("iterations", share=1.0, mechanism="gaussian", count=60,
                                sampling_rate=sample_rate)], epsilon=1.5, delta=1e-5)
    assert est.noise_multiplier_ == expected["iterations"]


def test_sampled_accounting_matches_dp_accounting_rdp():
    # sample_rate < 1: the accountant charges the zero-out analysis (see the
    # estimator's Notes): the add/remove Poisson-subsampled Gaussian with noise
    # multiplier 2z (sensitivity C against a null user), then group privacy of
    # size 2: (2 eps0, (1 + e^eps0) delta0). Recompute it with dp-accounting.
    dp_accounting = pytest.importorskip("dp_accounting")
    X, y, groups, _, _ = _additive_data(n_users=50)
    est = _paper(epsilon=1.5, delta=1e-5, sample_rate=0.2, n_rounds=60,
                         random_state=0).fit(X, y, groups)
    (phase,) = est.privacy_report_.phases
    assert est.privacy_report_.accountant == "rdp-zero-out"
    assert phase.sampling_rate == 0.2
    assert phase.count == 60
    eps = est.privacy_report_.epsilon_spent
    assert_allclose(eps, 1.5, rtol=1e-6)
    z = est.noise_multiplier_
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(2 * z)), 60))
    eps0 = acc.get_epsilon(1e-5 / (1 + math.exp(eps / 2)))
    # Never below the oracle; within 0.5% of it (measured: 0.08% above, the
    # accountant's split of delta is solved on a grid).
    assert 2 * eps0 <= eps * (1 + 1e-9)
    assert_allclose(eps, 2 * eps0, rtol=5e-3)


def test_epsilon_inf_reports_non_private():
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(epsilon=np.inf, n_rounds=5, random_state=0).fit(X, y, groups)
    assert est.noise_multiplier_ == 0.0
    assert est.privacy_report_.epsilon_spent == np.inf


def test_noise_multiplier_override_reports_spent_epsilon():
    X, y, groups, _, _ = _additive_data()
    est = _paper(noise_multiplier=2.0, delta=1e-5, n_rounds=30, clip_norm=1.5,
                         random_state=0)
    draws = record_noise(lambda: est.fit(X, y, groups))
    from skdpp.privacy import gaussian_epsilon
    expected = gaussian_epsilon(math.sqrt(30) / 2.0, 1e-5)
    assert est.noise_multiplier_ == 2.0
    assert [d["scale"] for d in draws] == [2.0 * 3.0] * 30  # z * 2C
    assert_allclose(est.privacy_report_.epsilon_spent, expected, rtol=1e-9)
    assert_allclose(est.privacy_report_.epsilon, expected, rtol=1e-9)


def test_noise_multiplier_override_with_alpha_zero_spends_nothing():
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(noise_multiplier=2.0, alpha=0.0, n_rounds=5,
                         random_state=0).fit(X, y, groups)
    assert est.privacy_report_.epsilon_spent == 0.0


# --------------------------------------------------------------------------- #
# Privacy: harness (sensitivity, broken variants, audit, noise level)
# --------------------------------------------------------------------------- #
SENSITIVITY_CASES = [
    dict(epsilon=1.0, n_rounds=8),
    dict(epsilon=1.0, n_rounds=8, batch_size=None),
    dict(epsilon=1.0, n_rounds=8, weighting="sample", batch_size=3),
    dict(epsilon=1.0, n_rounds=8, sample_rate=0.2, average=True),
    dict(epsilon=1.0, n_rounds=8, alpha=np.inf, fit_intercept=False),
]


@pytest.mark.parametrize("params", SENSITIVITY_CASES)
def test_sensitivity_with_adversarial_neighbours(params):
    X, y, groups, _, _ = _additive_data(n_users=12, n_rows=6)
    n_releases = _n_releases(_fit_on(**params)(X, y, groups))
    for name, X2, y2, g2 in adversarial_neighbours(X, y, groups, user=3):
        ratios = assert_sensitivity(_fit_on(**params), (X, y, groups), (X2, y2, g2))
        assert len(ratios) == n_releases, name


def _patch_broken(monkeypatch, broken):
    """Swap in a broken block function; returns the list of its calls."""
    calls = []

    def no_clipping(grad, clip_norm):
        calls.append(grad.shape)
        return grad.sum(axis=0)

    def per_row_clipping(Xb, yb, m, coef):
        # Row-level DP-SGD mistaken for user-level: every row's gradient is
        # clipped to 1 and the rows summed, with no per-user clip.
        calls.append(Xb.shape)
        coef_rows = np.broadcast_to(coef, (len(m), coef.shape[-1]))
        coef_rows = np.repeat(coef_rows, m, axis=0)
        residual = np.einsum("ij,ij->i", Xb, coef_rows) - yb
        rows = Xb * residual[:, None]
        starts = np.concatenate([[0], np.cumsum(m)[:-1]])
        return np.add.reduceat(clip_by_norm(rows, 1.0), starts, axis=0) * m[:, None]

    monkeypatch.setattr(sgd, "_clipped_sum", no_clipping)
    if broken == "per_row_clipping":
        calls.clear()
        monkeypatch.setattr(sgd, "_user_gradients", per_row_clipping)
    return calls


@pytest.mark.parametrize("broken", ["no_clipping", "per_row_clipping"])
def test_sensitivity_test_catches_broken_variants(broken, monkeypatch):
    # Clipping off: user gradients summed unclipped. Per-row clipping: a user
    # with many rows moves the sum by many times C.
    calls = _patch_broken(monkeypatch, broken)
    X, y, groups, _, _ = _additive_data(n_users=12, n_rows=6)
    params = dict(epsilon=1.0, n_rounds=5, batch_size=None, paper=True)
    name, X2, y2, g2 = list(adversarial_neighbours(X, y, groups, user=3))[1]  # many_rows
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(_fit_on(**params), (X, y, groups), (X2, y2, g2))
    assert calls  # the fit called the broken function


def _audit_data():
    rng = np.random.default_rng(0)
    n_users, d = 20, 2
    groups = np.repeat(np.arange(n_users), [50] + [5] * (n_users - 1))
    X = rng.normal(size=(len(groups), d))
    y = rng.normal(size=len(groups))
    # Canary (user 0): a gradient far along +e1; neighbour: far along -e1, so the
    # clipped contributions differ by the full sensitivity 2C.
    X[groups == 0] = [1.0, 0.0]
    y[groups == 0] = -50.0
    X2, y2 = X.copy(), y.copy()
    y2[groups == 0] = 50.0
    return (X, y, groups), (X2, y2, groups)


def _audit_run(params):
    D, D2 = _audit_data()

    def run(seed, neighbour):
        X, y, g = D2 if neighbour else D
        est = _paper(random_state=seed, fit_intercept=False, alpha=np.inf,
                             learning_rate=1.0, n_rounds=1, batch_size=None, **params)
        return -est.fit(X, y, g).coef_[0]  # the canary pushes coef_[0] down
    return run


@pytest.mark.slow
def test_audit_lower_bound_below_claimed_epsilon():
    eps = 1.0
    bound = audit_epsilon_lower_bound(_audit_run(dict(epsilon=eps, delta=1e-5)), 300,
                                      delta=1e-5)
    assert bound <= eps


@pytest.mark.slow
def test_audit_catches_noise_off():
    run = _audit_run(dict(epsilon=1.0, delta=1e-5))
    with noise_off():
        bound = audit_epsilon_lower_bound(run, 100, delta=1e-5)
    assert bound > 1.0


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["no_clipping", "per_row_clipping"])
def test_audit_catches_broken_variants(broken, monkeypatch):
    calls = _patch_broken(monkeypatch, broken)
    bound = audit_epsilon_lower_bound(_audit_run(dict(epsilon=0.5, delta=1e-5)), 200,
                                      delta=1e-5)
    assert bound > 0.5
    assert calls


def test_global_step_divides_the_release_by_public_values_only():
    # Force every round's release to a fixed vector v: with client sampling the
    # global step must be -lr * v / (q N) (public normaliser), whatever users
    # were sampled; dividing by the realised number of participants (or rows)
    # would make w depend on the secret sampling and on the data.
    X, y, groups, _, _ = _additive_data(n_users=40, n_rows=3, d=4)
    v = np.array([1.0, -2.0, 3.0, 0.5])  # 4 features (no intercept)
    forced = [Release("gaussian", np.zeros(4), 0.0, v) for _ in range(6)]
    for seed, weighting in [(0, "user"), (1, "user"), (2, "sample")]:
        est = _paper(epsilon=1.0, sample_rate=0.25, alpha=np.inf, learning_rate=0.5,
                             n_rounds=6, batch_size=2, weighting=weighting,
                             random_state=seed)
        record_releases(lambda: est.fit(X, y, groups), replay=forced)
        assert_allclose(est.coef_, -0.5 * 6 * v / (0.25 * 40), rtol=1e-12)


def test_noise_level_matches_report():
    X, y, groups, _, _ = _additive_data(n_users=20, d=50)
    est = _paper(epsilon=1.0, delta=1e-5, clip_norm=3.0, n_rounds=40,
                         random_state=0)
    draws = record_noise(lambda: est.fit(X, y, groups))
    assert len(draws) == 40
    z = est.privacy_report_.phases[0].noise_multiplier
    for draw in draws:
        assert draw["kind"] == "gaussian"
        assert_allclose(draw["sensitivity"], 6.0)
        assert_allclose(draw["scale"], z * 6.0, rtol=1e-12)
    noise = np.concatenate([d["noise"].ravel() for d in draws])  # 40 * 51 draws
    # The sample std of 2040 Gaussian draws has relative standard error
    # 1/sqrt(2 * 2040) = 1.6%; 7% is 4.5 standard errors (false alarm < 1e-5).
    assert_allclose(noise.std(), z * 6.0, rtol=0.07)


# --------------------------------------------------------------------------- #
# Hardening: nothing observable depends on one user's data
# --------------------------------------------------------------------------- #
def _diverging(X, y, groups, user, kind):
    """``user`` replaced by rows on which local SGD diverges (see the test)."""
    X2, y2 = X.copy(), y.copy()
    mine = groups == user
    if kind == "overflowing_step":
        X2[mine], y2[mine] = [1.0, 1.0, 0.0, 0.0], 1e301
    else:
        X2[mine], y2[mine] = 1e20, 1.0
    return X2, y2, groups


def _neighbours(X, y, groups, user):
    """The harness's adversarial neighbours, a 1e300-valued user and a diverging one."""
    yield from adversarial_neighbours(X, y, groups, user=user)
    yield next(adversarial_neighbours(X, y, groups, user=user, scale=1e300))
    yield "diverging", *_diverging(X, y, groups, user, "overflowing_gradient")


OBSERVABLE_CASES = [
    dict(n_rounds=12),
    dict(n_rounds=12, average=True, sample_rate=0.5, batch_size=4),
    dict(n_rounds=12, batch_size=None, weighting="user", fit_intercept=False),
    dict(n_rounds=12, weighting="sample", batch_size=3, average=True),
    dict(n_rounds=12, alpha=0.0, average=True),
]


@pytest.mark.parametrize("params", OBSERVABLE_CASES)
def test_observables_do_not_depend_on_one_user(params):
    # Identical warnings and printed output (verbose=1), and no exception, on
    # neighbouring data sets: a 1e300-valued user, a user whose local model
    # diverges, the harness's adversarial users.
    X, y, groups, _, _ = _additive_data(n_users=12, n_rows=6)
    fit = _fit_on(epsilon=1.0, verbose=1, learning_rate=0.5, **params)
    for name, X2, y2, g2 in _neighbours(X, y, groups, user=3):
        observed = assert_same_observables(fit, (X, y, groups), (X2, y2, g2))
        assert observed["stdout"].splitlines() == [f"[PPSGD] round {t}/12"
                                                   for t in range(1, 13)], name
        # only the public useless-fit warning (12 users; identical on both sides)
        assert [w for w in observed["warnings"] if w[0] != "UselessFitWarning"] == [], name


@pytest.mark.parametrize("kind, learning_rate", [("overflowing_gradient", 0.5),
                                                 ("overflowing_step", 10.0)])
@pytest.mark.parametrize("params", [
    dict(n_rounds=12, batch_size=None, fit_intercept=False),
    dict(n_rounds=12, average=True, sample_rate=0.5, batch_size=4, fit_intercept=False),
    dict(n_rounds=12, weighting="sample", batch_size=3, average=True),
])
def test_diverging_user_neither_fails_nor_changes_the_releases(kind, learning_rate, params):
    # x = 1e20: |x|^2 = 4e40, every local step multiplies theta_i by ~1e40
    # until its gradient overflows. x = (1, 1, 0, 0), y = 1e301, step 10: the
    # gradient stays finite while the step overflows (theta_i would become
    # inf, then NaN in the average, with a RuntimeWarning).
    X, y, groups, _, _ = _additive_data(n_users=12, n_rows=6)
    X2, y2, g2 = _diverging(X, y, groups, 3, kind)
    # (no intercept: centring would turn the constant 1e20 rows into zeros)
    fit = _fit_on(epsilon=1.0, learning_rate=learning_rate, paper=True, **params)
    observed = assert_same_observables(fit, (X, y, groups), (X2, y2, g2))
    assert observed["warnings"] == []
    ratios = assert_sensitivity(fit, (X, y, groups), (X2, y2, g2))  # same count, shapes
    assert len(ratios) == _n_releases(fit(X, y, groups))
    est = fit(X2, y2, g2)
    for attr in ("coef_", "offsets_", "intercept_offsets_"):
        assert np.isfinite(getattr(est, attr)).all(), attr
    assert np.abs(est.offsets_[3]).max() > 1e100  # the diverged user stopped moving


def test_verbose_prints_rounds_only(capsys):
    X, y, groups, _, _ = _additive_data()
    PPSGDRegressor(epsilon=1.0, n_rounds=20, verbose=1, random_state=0).fit(X, y, groups)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[PPSGD] round {t}/20" for t in range(2, 21, 2)]
    PPSGDRegressor(epsilon=1.0, n_rounds=20, random_state=0).fit(X, y, groups)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_verbose_never_prints_the_sampled_users(alpha, capsys):
    # With client sampling, which users took part in a round (even how many)
    # is secret: the amplification by subsampling assumes it. Different keys
    # sample different users: the output must not change.
    X, y, groups, _, _ = _additive_data(n_users=200, n_rows=2)
    outs = []
    for seed in (0, 1):
        PPSGDRegressor(alpha=alpha, sample_rate=0.5, n_rounds=10, verbose=1,
                       random_state=seed).fit(X, y, groups)
        outs.append(capsys.readouterr().out)
    assert outs[0] != ""
    assert outs[0] == outs[1]
    for line in outs[0].splitlines():
        assert re.fullmatch(r"\[PPSGD\] round \d+/10", line), line


# --------------------------------------------------------------------------- #
# Determinism, inputs
# --------------------------------------------------------------------------- #
def test_deterministic_given_random_state():
    X, y, groups, _, _ = _additive_data()
    params = dict(epsilon=1.0, n_rounds=15, sample_rate=0.2, random_state=3)
    a = PPSGDRegressor(**params).fit(X, y, groups)
    b = PPSGDRegressor(**params).fit(X, y, groups)
    assert_array_equal(a.coef_, b.coef_)
    assert_array_equal(a.offsets_, b.offsets_)
    c = PPSGDRegressor(**{**params, "random_state": 4}).fit(X, y, groups)
    # 30 users at epsilon 1: a useless fit whose coef_ may be 0 for both seeds; the
    # released intercept still carries the seed's noise
    assert not (np.array_equal(a.coef_, c.coef_) and a.intercept_ == c.intercept_)


def test_client_sampling_rate():
    # alpha=0, one round: exactly the sampled users have a non-zero offset.
    X, y, groups, _, _ = _additive_data(n_users=2000, n_rows=2, d=2, seed=7)
    est = PPSGDRegressor(alpha=0.0, sample_rate=0.3, n_rounds=1,
                         random_state=0).fit(X, y, groups)
    rate = np.mean(np.any(est.offsets_ != 0, axis=1))
    # Binomial(2000, 0.3) / 2000 has std 0.010; 0.05 is 5 std (false alarm < 1e-6).
    assert abs(rate - 0.3) < 0.05


def test_inputs_not_modified():
    X, y, groups, _, _ = _additive_data()
    X0, y0, g0 = X.copy(), y.copy(), groups.copy()
    PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0).fit(X, y, groups)
    assert_array_equal(X, X0)
    assert_array_equal(y, y0)
    assert_array_equal(groups, g0)


def test_string_user_ids():
    X, y, groups, _, _ = _additive_data()
    names = np.array([f"user-{g}" for g in groups])
    a = PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0).fit(X, y, groups)
    b = PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0).fit(X, y, names)
    assert b.offsets_.shape == a.offsets_.shape
    assert b.predict(X[:3], groups=names[:3]).shape == (3,)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=1.0), "delta"),
        (dict(alpha=-0.5), "alpha"),
        (dict(sample_rate=0.0), "sample_rate"),
        (dict(n_rounds=0), "n_rounds"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(weighting="rows"), "weighting"),
        (dict(clip_norm=None), "clip_norm"),
        (dict(weighting="sample", batch_size=None), "batch_size"),
        (dict(noise_multiplier=1.0, clip_norm=None, epsilon=np.inf), "clip_norm"),
        (dict(epsilon=True), "epsilon"),
    ],
)
def test_bad_parameters(params, match):
    X, y, groups, _, _ = _additive_data()
    est = PPSGDRegressor(**params)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, groups)
    assert not hasattr(est, "coef_")


def test_bad_data():
    X, y, groups, _, _ = _additive_data()
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PPSGDRegressor().fit(X_nan, y, groups)
    with pytest.raises(ValueError):
        PPSGDRegressor().fit(X[:0], y[:0], groups[:0])
    with pytest.raises(ValueError, match="groups"):
        PPSGDRegressor().fit(X, y, groups[:-1])


def test_one_user_and_one_row_users():
    X, y, groups, _, _ = _additive_data(n_users=1, n_rows=8)
    est = PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0).fit(X, y, groups)
    assert est.offsets_.shape == (1, X.shape[1])
    assert est.privacy_report_.n_users == 1
    X, y, _, _, _ = _additive_data(n_users=30, n_rows=1)
    est = PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0).fit(X, y)
    assert est.offsets_.shape == (30, X.shape[1])


def test_integer_and_float32_inputs():
    X, y, groups, _, _ = _additive_data()
    a = PPSGDRegressor(epsilon=np.inf, n_rounds=5, random_state=0)
    a.fit(np.round(X * 10).astype(np.int64), np.round(y).astype(np.int64), groups)
    b = PPSGDRegressor(epsilon=np.inf, n_rounds=5, random_state=0)
    b.fit(np.round(X * 10), np.round(y), groups)
    assert_allclose(a.coef_, b.coef_, rtol=1e-12)
    c = PPSGDRegressor(epsilon=1.0, n_rounds=5, random_state=0)
    c.fit(X.astype(np.float32), y, groups)
    assert c.coef_.dtype == np.float64 and np.isfinite(c.coef_).all()


# --------------------------------------------------------------------------- #
# Per-round scratch buffers
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("groups_kind", ["none", "sorted", "shuffled"])
def test_fit_never_modifies_its_input(groups_kind):
    # The rounds gather and centre rows in reused buffers in place: the
    # input must never be one of them (rows already in canonical order, e.g.
    # groups=None, are copied too).
    X, y, groups, _, _ = _additive_data(n_users=6, n_rows=5)
    if groups_kind == "none":
        groups = None
    elif groups_kind == "shuffled":
        p = np.random.default_rng(0).permutation(len(y))
        X, y, groups = X[p], y[p], groups[p]
    X0, y0 = X.copy(), y.copy()
    for params in ({}, dict(batch_size=2, sample_rate=0.5), PAPER):
        est = PPSGDRegressor(epsilon=1.0, n_rounds=4, random_state=0, **params)
        est.fit(X, y, groups=groups)
        assert_array_equal(X, X0)
        assert_array_equal(y, y0)


def test_gather_rows_and_center_rows_match_fancy_indexing():
    X, y, groups, _, _ = _additive_data(n_users=7, n_rows=4, d=3)
    keep = np.r_[np.ones(20, dtype=bool), np.zeros(3, dtype=bool), np.ones(5, dtype=bool)]
    X, y, groups = X[keep], y[keep], groups[keep]  # one user of 1 row
    (block,) = make_blocks(X, y, UserIndex.from_groups(groups), max_rows=None)
    rows = block.source_rows()
    positions = np.array([0, 3, 4, 9, 10, 11, 20])
    Xb, yb = sgd.gather_rows(block, positions)
    assert_array_equal(Xb, X[rows[positions]])
    assert_array_equal(yb, y[rows[positions]])
    Xb, yb = sgd.gather_rows(block, None)
    assert_array_equal(Xb, X[rows])
    means = np.arange(block.n_users * 3, dtype=float).reshape(-1, 3)
    expected = X[rows] - np.repeat(means, block.counts, axis=0)  # ragged users
    assert_array_equal(sgd.center_rows(Xb, None, means, block.counts), expected)
    users, m = np.array([1, 2]), np.array([4, 4])  # equal groups
    Xb, _ = sgd.gather_rows(block, np.r_[4:12])
    assert_array_equal(sgd.center_rows(Xb, users, means, m),
                       X[rows[4:12]] - np.repeat(means[users], 4, axis=0))


def test_budget_shares_are_keyed_by_the_plans_phase_names():
    """budget_shares moves the named phase's share (the others keep their
    defaults, "iterations" takes the rest); a key that is not a phase with a
    share of its own, or a zero "clip" share, is refused before any release."""
    meta = {"n_users": 500, "n_features": 3}
    default = PPSGDRegressor()._budget_plan(meta).calibrate().shares
    moved = PPSGDRegressor(budget_shares={"cold_start": 0.1})._budget_plan(meta)
    moved = moved.calibrate().shares
    assert default["cold_start"] == pytest.approx(0.02)
    assert moved["cold_start"] == pytest.approx(0.1)
    assert moved["clip"] == pytest.approx(default["clip"])       # still the "auto" rule
    assert "cold_start" not in PPSGDRegressor(
        budget_shares={"cold_start": 0.0})._budget_plan(meta).calibrate().shares
    X, y, groups = _uneven_data()
    for shares, match in (({"iterations": 0.5}, "not a phase"),
                          ({"clip": 0}, r"budget_shares\['clip'\]")):
        est = PPSGDRegressor(budget_shares=shares, n_rounds=2)
        with pytest.raises(ValueError, match=match):
            est.fit(X, y, groups)
        assert not hasattr(est, "coef_")
