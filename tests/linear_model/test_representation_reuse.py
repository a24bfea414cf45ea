"""Values reused between the passes of a fit equal the values computed afresh."""

import numpy as np

from skdpp.linear_model import _fedrep as fr
from skdpp.linear_model import _spectral_init as si
from skdpp.linear_model._representation import _init_statistic, prepare_split
from skdpp.utils._executor import LocalExecutor
from skdpp.utils._grouped import UserIndex, make_blocks


def _executor(seed=0, n_users=300, max_rows=700):
    rng = np.random.default_rng(seed)
    counts = rng.choice([1, 2, 3, 5, 8, 60], size=n_users)  # incl. users with more rows than d
    groups = np.repeat(np.arange(n_users), counts)
    X = rng.standard_normal((groups.size, 6))
    X[groups == 3] *= 1e6  # a user with a very different scale
    y = X[:, 0] - 2 * X[:, 1] + rng.standard_normal(groups.size)
    index = UserIndex.from_groups(groups, n_samples=groups.size)
    executor = LocalExecutor(make_blocks(X, y, index, max_rows=max_rows))
    key = np.array([3, 4], dtype=np.uint64)
    executor.map(prepare_split, (key, True))
    return executor, key


def _run_statistic(executor, fn, broadcast):
    """Run a per-user statistic block function on every block (values dropped)."""
    for i, block in enumerate(executor.blocks):
        _, executor.states[i] = fn(block, executor.states[i], broadcast)


def test_spectral_release_pass_reusing_auto_pass_routes_is_identical():
    executor, _ = _executor()
    fresh = executor.map(si._spectral_block, 0.7)  # no routes cached: computed afresh
    _run_statistic(executor, _init_statistic, "private_spectral")  # the "auto" pass caches the routes
    assert all("spectral_routes" in s.extra for s in executor.states)
    reused = executor.map(si._spectral_block, 0.7)
    np.testing.assert_array_equal(reused, fresh)
    assert not any("spectral_routes" in s.extra for s in executor.states)  # used once


def test_fedrep_round_zero_reusing_gradient_norms_is_identical():
    executor, key = _executor(1)
    U = np.linalg.qr(np.random.default_rng(2).standard_normal((6, 2)))[0]
    rnd = fr._Round(U, 0, key, "same", None, 0.5)
    fresh = executor.map(fr.fedrep_round, rnd)
    _run_statistic(executor, fr.gradient_norms, fr._Round(U, 0, key, "same", None, None))
    assert all("fedrep_gradients" in s.extra for s in executor.states)
    np.testing.assert_array_equal(executor.map(fr.fedrep_round, rnd), fresh)
    # another U (or round) never uses a cached value
    _run_statistic(executor, fr.gradient_norms, fr._Round(U, 0, key, "same", None, None))
    U2 = np.linalg.qr(U + 0.1)[0]
    rnd2 = fr._Round(U2, 0, key, "same", None, 0.5)
    cached = executor.map(fr.fedrep_round, rnd2)
    assert not any("fedrep_gradients" in s.extra for s in executor.states)
    np.testing.assert_array_equal(cached, executor.map(fr.fedrep_round, rnd2))


def test_altmin_round_zero_reusing_auto_pass_heads_is_identical():
    from skdpp.linear_model import _altmin as am

    executor, key = _executor(2)
    executor.map(am.prepare_altmin, (key, "same"))
    U = np.linalg.qr(np.random.default_rng(3).standard_normal((6, 2)))[0]
    rnd = am._Round(U, 0, key, 1, "full", 0.8, 1.5)
    fresh = executor.map(am.altmin_round, rnd)
    _run_statistic(executor, am.row_norm_statistic, am._Round(U, 0, key, 1, "full", None, None))
    assert all("altmin_heads" in s.extra for s in executor.states)
    reused = executor.map(am.altmin_round, rnd)
    for a, b in zip(reused, fresh):
        np.testing.assert_array_equal(a, b)
    assert not any("altmin_heads" in s.extra for s in executor.states)
