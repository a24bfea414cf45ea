"""Tests of PrivAltMinRegressor (Jain, Rush, Smith, Song & Thakurta 2021, Alg. 1-3)."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from skdpp.datasets import make_shared_representation_regression
from skdpp.linear_model._algorithms import altmin as _altmin
from skdpp.linear_model._altmin import PrivAltMinRegressor
from skdpp.linear_model._auto import (AUTO_STEPS, COLD_START_CLIP_RELEASES, FEATURE_SCALE_STEPS,
                                     LABEL_RANGE_STEPS)
from skdpp.privacy._quantile import LOCATION_SEARCH_STEPS
from skdpp.linear_model._algorithms.representation import fit_heads
from skdpp.linear_model._representation import subspace_distance
from skdpp.utils._grouped import UserBlock
from tests.linear_model._reference import (
    _canary_last,
    _observable_neighbours,
    _ref_head,
    _test_mse,
    _with_canary,
    altmin_randomness,
    assert_permutation_invariant,
    clamped,
    fit_executor,
    row_contents,
    s0_mask,
    with_other_users,
)
from tests.privacy.harness import (
    adversarial_neighbours,
    assert_same_observables,
    assert_sensitivity,
    audit_epsilon_lower_bound,
    noise_off,
    record_noise,
)

pytestmark = pytest.mark.usefixtures("full_plan")  # small data: the full plan (conftest.py)


def _ref_altmin(X, y, groups, U0, *, T, eta, zeta, schedule, batch_mode, seed):
    """Plain-loop Alg. 1 + Alg. 2 without noise, materialising every vec(x v^T).

    The S^0 split, the halves of S^0 and the users' rounds are read from the
    fit's block functions (same blocks and key as a fit with ``random_state=seed``).
    """
    executor, key = fit_executor(X, y, groups, seed)
    s0 = s0_mask(executor, len(y))
    head_set, stat_set, round_of = altmin_randomness(executor, key, batch_mode, T)
    users = np.unique(groups)
    n, (d, k) = len(users), U0.shape
    U = U0.copy()
    for t in range(T):
        G, b = np.zeros((d * k, d * k)), np.zeros(d * k)
        for i, u in enumerate(users):
            if schedule == "disjoint" and round_of[u] != t:
                continue
            rows = np.flatnonzero(groups == u)
            head_rows = np.array([r for r in rows if r in head_set], dtype=int)
            stat_rows = np.array([r for r in rows if r in stat_set], dtype=int)
            v = _ref_head(X[head_rows] @ U, y[head_rows], k) if head_rows.size else np.zeros(k)
            for r in stat_rows:
                W = np.outer(X[r], v).ravel(order="F")  # vec(x v^T), columns stacked
                norm = np.linalg.norm(W)
                if norm > eta:
                    W = W * eta / norm
                yt = np.clip(y[r], -zeta, zeta)
                G += np.outer(W, W) / len(stat_rows)
                b += yt * W / len(stat_rows)
        u = np.linalg.solve(G, b)
        U, _ = np.linalg.qr(u.reshape((d, k), order="F"))
    heads = np.zeros((n, k))
    for i, u in enumerate(users):
        rows = np.flatnonzero((groups == u) & ~s0)
        heads[i] = _ref_head(X[rows] @ U, y[rows], k)
    return U, heads


def _small_data(n_users=30, d=5, m=8, seed=0, noise=0.1):
    X, y, groups, info = make_shared_representation_regression(
        n_users=n_users, n_features=d, n_components=2, n_samples_per_user=m, noise=noise,
        n_test_samples_per_user=0, random_state=seed)
    return X, y, groups, info


#: The paper's model and final heads: no intercept, unshrunk heads on S^1 only.
PAPER = dict(fit_intercept=False, personal_rows="holdout", personal_ridge=0.0)


def _n_releases(est):
    """The number of releases a fit makes (every one must be checked).

    The report's counts, with each of the ``max_iter`` rounds releasing a Gram and a
    moment (with ``schedule="disjoint"`` the report counts rounds of disjoint users
    once: parallel composition).
    """
    phases = est.privacy_report_.phases
    return sum(p.count for p in phases if p.name != "iterations") + 2 * est.max_iter


@pytest.mark.parametrize("schedule", ["full", "disjoint"])
@pytest.mark.parametrize("batch_mode", ["same", "disjoint"])
def test_epsilon_inf_matches_loop_reference(schedule, batch_mode):
    """The paper's model and final heads (what the loop reference implements)."""
    X, y, groups, _ = _small_data()
    U0 = np.linalg.qr(np.random.default_rng(5).standard_normal((5, 2)))[0]
    est = PrivAltMinRegressor(
        epsilon=np.inf, init=U0, max_iter=3, clip_norm=2.0, label_clip=0.8,
        schedule=schedule, batch_mode=batch_mode, random_state=3, **PAPER,
    ).fit(X, y, groups=groups)
    U, heads = _ref_altmin(X, y, groups, U0, T=3, eta=2.0, zeta=0.8, schedule=schedule,
                           batch_mode=batch_mode, seed=3)
    assert_allclose(est.components_, U, rtol=1e-10, atol=1e-10)
    assert_allclose(est.heads_, heads, rtol=1e-10, atol=1e-10)


def test_error_falls_as_epsilon_grows(medium):
    X, y, groups, info = medium
    dist, mse = [], []
    for eps in [0.1, 1.0, np.inf]:
        est = PrivAltMinRegressor(epsilon=eps, random_state=0).fit(X, y, groups=groups)
        dist.append(subspace_distance(est.components_, info.U))
        mse.append(_test_mse(est, info))
    # seeded; measured (0.1, 1, inf): dist (0.90, 0.17, 0.026), mse (1.2, 0.046, 1.1e-3)
    assert dist[0] > dist[1] > dist[2]
    assert mse[0] > mse[1] > mse[2]
    assert dist[2] < 0.05 and mse[2] < 2e-3


def test_components_are_orthonormal(medium):
    X, y, groups, _ = medium
    est = PrivAltMinRegressor(epsilon=0.5, random_state=0).fit(X, y, groups=groups)
    assert_allclose(est.components_.T @ est.components_, np.eye(2), atol=1e-12)


def test_deterministic_under_random_state(medium):
    X, y, groups, _ = medium
    a = PrivAltMinRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    b = PrivAltMinRegressor(epsilon=1.0, random_state=7).fit(X, y, groups=groups)
    assert_array_equal(a.components_, b.components_)
    assert_array_equal(a.heads_, b.heads_)


@pytest.mark.parametrize("init", ["private_spectral", "private_pairwise", "random"])
@pytest.mark.parametrize("schedule, batch_mode", [("full", "same"), ("full", "disjoint"),
                                                  ("disjoint", "same"),
                                                  ("disjoint", "disjoint")])
def test_row_permutation_gives_identical_fit(init, schedule, batch_mode):
    X, y, groups, _ = _small_data(n_users=20, m=7)
    assert_permutation_invariant(
        PrivAltMinRegressor, dict(epsilon=1.0, init=init, max_iter=3, schedule=schedule,
                                  batch_mode=batch_mode, random_state=11),
        X, y, groups.astype(str))


def test_other_users_do_not_change_a_users_rows_or_round():
    """Adding a user and relabelling another (user 3) leaves every other user's S^0,
    halves and round unchanged (keyed by the user's own id and rows)."""
    X, y, groups, _ = _small_data(n_users=10, m=9)

    def per_user(X, y, g):
        executor, key = fit_executor(X, y, g, 4)
        s0 = s0_mask(executor, len(y))
        head, stat, rounds = altmin_randomness(executor, key, "disjoint", 4)
        out = {}
        for u in np.unique(g):
            rows = np.flatnonzero(g == u)
            out[u] = (row_contents(X, y, rows[s0[rows]]),
                      row_contents(X, y, [r for r in rows if r in head]),
                      row_contents(X, y, [r for r in rows if r in stat]), rounds[u])
        return out

    before, after = per_user(X, y, groups), per_user(*with_other_users(X, y, groups))
    for u, value in before.items():
        if u != 3:
            assert after[u] == value, u


def test_inputs_not_modified():
    X, y, groups, _ = _small_data()
    X0, y0, g0 = X.copy(), y.copy(), groups.copy()
    PrivAltMinRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=groups)
    assert_allclose(X, X0, rtol=0, atol=0)
    assert_allclose(y, y0, rtol=0, atol=0)
    assert (groups == g0).all()


@pytest.mark.parametrize("schedule, count", [("full", 6), ("disjoint", 2)])
def test_budget_plan_and_parallel_composition(schedule, count):
    X, y, groups, _ = _small_data()
    est = PrivAltMinRegressor(epsilon=1.0, max_iter=3, schedule=schedule,
                              random_state=0).fit(X, y, groups=groups)
    report = est.privacy_report_
    phases = {p.name: p for p in report.phases}
    assert list(phases) == ["clip", "init", "iterations", "cold_start"]
    # four 'auto' bounds (clip_norm, label_clip, init_clip_norm, head_clip_norm), the
    # searches of the cold start's two locations and the label range (the per-feature
    # scales only when the public gate opens)
    assert phases["clip"].count == 4 * AUTO_STEPS + COLD_START_CLIP_RELEASES \
        + LABEL_RANGE_STEPS + FEATURE_SCALE_STEPS * X.shape[1] * (est.feature_scales_ is not None)
    assert phases["cold_start"].count == 3  # the head, the two locations' clipped means
    assert phases["iterations"].count == count
    # the calibrated plan spends the whole budget (no loose accounting)
    assert_allclose(report.epsilon_spent, 1.0, rtol=1e-6)


@pytest.mark.parametrize("schedule, init", [("full", "private_spectral"),
                                            ("disjoint", "private_pairwise")])
def test_neighbours_give_identical_warnings_and_output(schedule, init):
    """Warnings (NumPy overflow RuntimeWarnings included), printed lines and errors
    are the same on neighbouring datasets (noise off, verbose on)."""
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])

    def fit_on(X, y, g):
        with noise_off():
            return PrivAltMinRegressor(max_iter=2, schedule=schedule, init=init, verbose=1,
                                       random_state=0).fit(X, y, groups=g)

    for name, X2, y2, g2 in _observable_neighbours(X, y, groups, user):
        observed = assert_same_observables(fit_on, (X, y, groups), (X2, y2, g2))
        assert observed["stdout"].count("[PrivAltMin]") == 2, name


def test_bad_input():
    X, y, groups, _ = _small_data()
    with pytest.raises(ValueError, match="n_components=6 must be <= n_features=5"):
        PrivAltMinRegressor(n_components=6).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="label_clip=None"):
        PrivAltMinRegressor(label_clip=None).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="schedule"):
        PrivAltMinRegressor(schedule="sometimes").fit(X, y, groups=groups)
    Xn = X.copy()
    Xn[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        PrivAltMinRegressor().fit(Xn, y, groups=groups)


def test_one_row_users_groups_none_and_unseen_users():
    X, y, groups, _ = _small_data()
    g = groups.copy()
    g[:4] = np.arange(100, 104)
    est = PrivAltMinRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=g)
    assert np.all(np.isfinite(est.heads_))
    expected = clamped(est, X[:2] @ est.components_ @ est.cold_start_head_
                       + est.cold_start_intercept_)
    assert_allclose(est.predict(X[:2], groups=["a", "b"]), expected, rtol=1e-12)
    est = PrivAltMinRegressor(epsilon=1.0, random_state=0).fit(X, y)
    assert np.all(np.isfinite(est.predict(X)))


# --------------------------------------------------------------------------- #
# Privacy
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("schedule, init", [("full", "private_spectral"),
                                            ("disjoint", "private_pairwise")])
def test_sensitivity_adversarial_neighbours(schedule, init):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])

    def fit_on(X, y, g):
        return PrivAltMinRegressor(epsilon=1.0, max_iter=2, schedule=schedule, init=init,
                                   random_state=0).fit(X, y, groups=g)

    n_releases = _n_releases(fit_on(X, y, groups))
    for name, X2, y2, g2 in adversarial_neighbours(X, y, groups, user):
        ratios = assert_sensitivity(fit_on, (X, y, groups), (X2, y2, g2))
        assert len(ratios) == n_releases, name


def _broken_no_clipping(monkeypatch):
    """Rows and labels enter the statistics unclipped (the fit's clipping calls replaced)."""
    monkeypatch.setattr(_altmin, "clipped_magnitudes",
                        lambda norms, clip_norm: (norms, np.ones_like(norms)))
    monkeypatch.setattr(_altmin, "clip_values", lambda y, clip: np.asarray(y, float))


def _broken_per_row(monkeypatch):
    """Rows clipped but SUMMED per user (no per-user mean): many rows, many times the bound."""
    monkeypatch.setattr(_altmin, "user_weights", lambda block: np.ones(block.n_rows))


@pytest.mark.parametrize("breaker", [_broken_no_clipping, _broken_per_row])
def test_sensitivity_test_catches_broken_variants(monkeypatch, breaker):
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])

    def fit_on(X, y, g):
        return PrivAltMinRegressor(epsilon=1.0, max_iter=1, init=np.eye(4)[:, :2],
                                   budget_shares={"cold_start": 0.0},
                                   random_state=0).fit(X, y, groups=g)

    neighbours = {name: (X2, y2, g2) for name, X2, y2, g2 in
                  adversarial_neighbours(X, y, groups, user)}
    assert_sensitivity(fit_on, (X, y, groups), neighbours["many_rows"])  # correct: passes
    breaker(monkeypatch)
    with pytest.raises(AssertionError, match="more than its stated sensitivity"):
        assert_sensitivity(fit_on, (X, y, groups), neighbours["many_rows"])


def _audit_data(d=10):
    """40 users with true subspace span(e1, e2) in R^10; the canary pulls U towards e3."""
    rng = np.random.default_rng(1)
    n_users, m = 40, 20
    X = rng.standard_normal((n_users * m, d))
    heads = rng.standard_normal((n_users, 2))
    heads /= np.linalg.norm(heads, axis=1, keepdims=True)
    groups = np.repeat(np.arange(n_users), m)
    y = np.einsum("ij,ij->i", X[:, :2], heads[groups]) + 0.01 * rng.standard_normal(len(groups))
    user = n_users - 1
    keep = groups != user
    Xc = np.zeros((50, d))
    Xc[:, [0, 2]] = 1000.0 * rng.standard_normal((50, 2))
    yc = Xc[:, 0] + 10.0 * Xc[:, 2]  # huge rows: only clipping bounds the canary's influence
    return (X, y, groups), (np.r_[X[keep], Xc], np.r_[y[keep], yc],
                            np.r_[groups[keep], np.full(50, user)])


def _audit_run(data, neighbour_data, epsilon):
    U0 = np.eye(data[0].shape[1])[:, :2]

    def run(seed, neighbour):
        X, y, g = neighbour_data if neighbour else data
        est = PrivAltMinRegressor(epsilon=epsilon, init=U0, max_iter=1,
                                  budget_shares={"cold_start": 0.0},
                                  clip_norm=5.0, label_clip=5.0,
                                  random_state=seed).fit(X, y, groups=g)
        return float(np.linalg.norm(est.components_[2]))  # weight on the canary's e3

    return run


@pytest.mark.slow
def test_audit_lower_bound_below_claimed_epsilon():
    data, neighbour = _audit_data()
    lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, 1.0), 300, delta=1e-6)
    assert lower <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("breaker", ["noise_off", "no_clipping"])
def test_audit_catches_broken_variants(monkeypatch, breaker):
    data, neighbour = _audit_data()
    if breaker == "no_clipping":
        _broken_no_clipping(monkeypatch)
        lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, 1.0), 300, delta=1e-6)
    else:
        with noise_off():
            lower = audit_epsilon_lower_bound(_audit_run(data, neighbour, 1.0), 300,
                                              delta=1e-6)
    assert lower > 1.0


def test_noise_level_matches_report():
    X, y, groups, _ = _small_data(n_users=40, d=8, m=6)
    est = PrivAltMinRegressor(epsilon=1.0, max_iter=2, random_state=0)
    draws = record_noise(lambda: est.fit(X, y, groups=groups))
    phases = {p.name: p for p in est.privacy_report_.phases}
    # release order: the init bound's search, init, the searches of clip_norm and
    # label_clip, 2 rounds of (Gram, moment), the head bound's search, the cold-start
    # head, the two locations' searches and clipped means
    names = (["clip"] * LABEL_RANGE_STEPS
             + ["clip"] * FEATURE_SCALE_STEPS * X.shape[1] * (est.feature_scales_ is not None)
             + ["clip"] * AUTO_STEPS + ["init"] + ["clip"] * 2 * AUTO_STEPS
             + ["iterations"] * 4 + ["clip"] * AUTO_STEPS + ["cold_start"]
             + (["clip"] * LOCATION_SEARCH_STEPS + ["cold_start"]) * 2 + ["clip"])  # the vote
    assert len(draws) == len(names) == _n_releases(est)
    pooled = []
    for draw, name in zip(draws, names):
        p = phases[name]
        assert_allclose(draw["scale"], p.noise_multiplier * draw["sensitivity"], rtol=1e-12)
        noise = draw["noise"]
        if draw["symmetric"]:
            assert_allclose(noise, noise.T, rtol=0, atol=1e-9 * draw["scale"])
            noise = noise[np.triu_indices(noise.shape[0])]
        pooled.append(np.ravel(noise) / draw["scale"])
    pooled = np.concatenate(pooled)
    assert pooled.size > 300
    assert abs(pooled.std() - 1.0) < 0.15  # false-alarm rate < 1e-4 at this size
    gram, moment = draws[names.index("iterations")], draws[names.index("iterations") + 1]
    assert_allclose(gram["sensitivity"], np.sqrt(2) * est.clip_norm_**2, rtol=1e-12)
    assert_allclose(moment["sensitivity"], 2 * est.label_clip_ * est.clip_norm_, rtol=1e-12)
    assert all(d["sensitivity"] == 1.0 for d, n in zip(draws, names) if n == "clip")


@pytest.mark.parametrize("scale", [1e-155, 1e-160])
@pytest.mark.parametrize("init", ["random", "private_pairwise"])
def test_sensitivity_tiny_rows(scale, init):
    """A canary with tiny rows (huge heads) stays within the stated sensitivities.

    ``c^2 v_a v_b`` overflowed to ``inf * 0 = NaN`` (the fit raised, i.e. one
    user could make it fail) and norms of subnormal squares under-clipped.
    """
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    keep = groups != user
    rng = np.random.default_rng(0)
    Xc, yc = rng.standard_normal((12, 4)) * scale, 1e3 * rng.standard_normal(12)
    neighbour = (np.r_[X[keep], Xc], np.r_[y[keep], yc], np.r_[groups[keep], np.full(12, user)])

    def fit_on(X, y, g):
        return PrivAltMinRegressor(epsilon=1.0, max_iter=2, init=init, label_clip=1e3,
                                   budget_shares={"cold_start": 0.0},
                                   random_state=0).fit(X, y, groups=g)

    assert_sensitivity(fit_on, (X, y, groups), neighbour)


@pytest.mark.parametrize("x_scale, y_scale", [(1e160, 1e160), (1e300, 1e300), (1.7e308, 1.0),
                                              (1e-300, 1e300)])
@pytest.mark.parametrize("init", ["random", "private_spectral", "private_pairwise"])
def test_sensitivity_extreme_magnitudes(x_scale, y_scale, init):
    """A canary with extreme (finite) values neither breaks the bounds nor makes fit raise."""
    X, y, groups, user = _canary_last(*_small_data(n_users=15, d=4, m=6)[:3])
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):
        Xc = np.clip(rng.standard_normal((7, 4)) * x_scale, -1.7e308, 1.7e308)
    neighbour = _with_canary(X, y, groups, user, Xc, rng.standard_normal(7) * y_scale)

    def fit_on(X, y, g):
        return PrivAltMinRegressor(epsilon=1.0, max_iter=2, init=init,
                                   random_state=0).fit(X, y, groups=g)

    n = len(assert_sensitivity(fit_on, (X, y, groups), neighbour))
    assert n == _n_releases(fit_on(X, y, groups))


def test_statistics_fuzz_bounded_and_finite():
    """Seeded fuzz of one user's Gram and moment contributions with huge, tiny and
    overflowing values: the Gram is PSD with trace <= eta^2, the moment has norm
    <= zeta eta, both finite, and no warning is emitted."""
    rng = np.random.default_rng(2027)
    d, k, eta, zeta = 4, 2, 1.5, 0.8
    U = np.linalg.qr(rng.standard_normal((d, k)))[0]
    for _ in range(300):
        m = int(rng.integers(1, 6))
        with np.errstate(over="ignore"):
            X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-300, 308.2, size=(m, 1))
            y = rng.standard_normal(m) * 10.0 ** rng.uniform(-300, 308.2, size=m)
        X, y = np.clip(X, -1.7e308, 1.7e308), np.clip(y, -1.7e308, 1.7e308)
        local = UserBlock(y, y, None, np.array([0]), np.array([1], dtype=np.uint64), [m])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with np.errstate(over="ignore", invalid="ignore"):
                P = X @ U
            V = fit_heads(local, P, y)
            grams, moments = _altmin.altmin_statistics(local, X, y, V, eta, zeta)
        G = _altmin._assemble_gram(grams, k)
        assert np.all(np.isfinite(G)) and np.all(np.isfinite(moments))
        assert np.trace(G) <= eta**2 * (1 + 1e-12)
        assert np.linalg.eigvalsh(G).min() >= -1e-12 * eta**2
        assert np.linalg.norm(moments) <= zeta * eta * (1 + 1e-12)
