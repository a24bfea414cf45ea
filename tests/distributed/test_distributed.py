"""skdpp.distributed: the same fit on a Dask cluster, noise on the driver only."""

import os
import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("distributed")

from sklearn.base import clone  # noqa: E402

from skdpp.decomposition import AdaptiveWeightMF  # noqa: E402
from skdpp.distributed import (  # noqa: E402
    DaskExecutor,
    UserBlocks,
    fit_distributed,
    predict_distributed,
)
from skdpp.distributed._blocks import RawPartition  # noqa: E402
from skdpp.distributed._fit import _prepare_partition, _validate_partition  # noqa: E402
from skdpp.exceptions import PrivacyLeakWarning  # noqa: E402
from skdpp.linear_model import (  # noqa: E402
    JLMarginClassifier,
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
)
from skdpp.privacy import mechanisms  # noqa: E402
from skdpp.utils._executor import LocalExecutor  # noqa: E402
from skdpp.utils._grouped import UserIndex, make_blocks  # noqa: E402
from skdpp.utils._random import FitRandomness  # noqa: E402
from tests._toy import ToyPersonalizedMean  # noqa: E402

RTOL = 1e-9


def test_workers_run_blas_on_one_thread(client):
    # skdpp's thread policy (skdpp.base.blas_threads: one BLAS thread below
    # 2048 features) holds on the workers too: Dask's nanny starts them with
    # OPENBLAS/MKL/OMP_NUM_THREADS=1 and local_cluster keeps that.
    def blas_pools():
        from threadpoolctl import threadpool_info
        return [pool["num_threads"] for pool in threadpool_info()
                if pool["user_api"] == "blas"]

    pools = client.run(blas_pools)
    assert len(pools) == 2
    for threads in pools.values():
        assert threads and all(n == 1 for n in threads)

def _data(n_users=40, n_rows=300, d=5, seed=0):
    rng = np.random.default_rng(seed)
    # Every user has at least n_rows // n_users rows (> n_components + 1). A
    # user with fewer centred rows than n_components has a rank-deficient head
    # system whose null direction is set by solve_heads' 1e-10 relative ridge:
    # it amplifies the last-bit differences of BLAS products over blocks of
    # other sizes about 1e6-fold (measured in-process, max_rows=40 vs default:
    # cold_start_head_ 2.5e-8 relative with 1-3-row users and fit_intercept).
    # That is not an effect of Dask, and not what this file tests.
    base = n_rows // n_users
    g = np.concatenate([np.repeat(np.arange(n_users), base),
                        rng.integers(0, n_users, n_rows - base * n_users)])
    g = rng.permutation(g)
    X = rng.normal(size=(n_rows, d))
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n_rows) + (g % 3)
    return X, y, g


# Every estimator with its default parameters (only the number of rounds is cut
# where it is long, and random_state fixed) and with fixed clip bounds and
# public label sets / catalogues. Parameters an estimator does not have are
# left out, so the cases hold when defaults change (e.g. auto clip bounds).
_ESTIMATORS = {
    "fedrep": (PrivateFedRepRegressor, {}, {
        "clip_norm": 1.0, "head_clip_norm": 1.0, "init_clip_norm": 5.0}),
    "altmin": (PrivAltMinRegressor, {}, {
        "clip_norm": 5.0, "head_clip_norm": 1.0, "init_clip_norm": 5.0,
        "label_clip": 1.0}),
    "ppsgd": (PPSGDRegressor, {"n_rounds": 4}, {"clip_norm": 1.0}),
    "mf": (AdaptiveWeightMF, {"n_components": 3}, {
        "clip_norm": 0.1, "mean_clip": 5.0, "rating_clip": 1.0, "items": np.arange(8)}),
    "jl": (JLMarginClassifier, {"n_candidates": 32}, {"clip_norm": 1.0, "classes": [0, 1]}),
}


def _make(name, variant):
    cls, base, fixed = _ESTIMATORS[name]
    params = {"random_state": 0, "epsilon": 2.0, **base}
    if variant == "fixed":
        params.update(fixed)
    known = cls().get_params()
    return cls(**{k: v for k, v in params.items() if k in known})


def _xy(name):
    X, y, g = _data()
    if name == "mf":
        # 8 items: every partition rates every item, so the catalogue that
        # items=None derives from each partition's rows is the same in all
        # (test_partitions_must_agree_on_data_derived_values covers the rest).
        items = np.random.default_rng(1).integers(0, 8, X.shape[0])
        return items[:, None], np.clip(y, -3, 3), g
    if name == "jl":
        # more users: with classes=None the label set may be selected under DP
        X, y, g = _data(n_users=200, n_rows=1000)
        return X, (y > 1).astype(int), g
    return X, y, g


CASES = [pytest.param(name, variant, id=f"{name}-{variant}")
         for name in _ESTIMATORS for variant in ("default", "fixed")]


def _predict(est, blocks):
    """predict_distributed in the input row order of UserBlocks.from_arrays."""
    pred = predict_distributed(est, blocks)
    labels = blocks.row_labels()
    assert pred.chunks == labels.chunks
    out = np.empty(pred.shape, dtype=pred.dtype)
    out[labels.compute()] = pred.compute()
    return out


def _fitted(est):
    return {k: v for k, v in vars(est).items()
            if k.endswith("_") and not k.startswith("__")
            and k not in ("privacy_report_", "personal_parts_")}


def _assert_same_attributes(a, b, rtol=RTOL):
    fa, fb = _fitted(a), _fitted(b)
    assert sorted(fa) == sorted(fb)
    for name, value in fa.items():
        other = fb[name]
        if hasattr(value, "toarray"):  # scipy.sparse
            value, other = value.toarray(), other.toarray()
        if isinstance(value, (np.ndarray, float)) and np.asarray(value).dtype.kind == "f":
            # relative to the array's scale (entries near 0, e.g. of personal
            # heads, differ by rounding far below it)
            scale = float(np.max(np.abs(value), initial=0.0))
            np.testing.assert_allclose(other, value, rtol=rtol, atol=rtol * scale,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(other, value, err_msg=name)


# --------------------------------------------------------------------------- #
# The executor
# --------------------------------------------------------------------------- #
def _partition_blocks(n_partitions, seed=0):
    """Blocks of whole users cut into partitions of several blocks each."""
    rng = np.random.default_rng(seed)
    n = 400
    g = np.repeat(np.arange(100), 4)
    X = rng.normal(size=(n, 2)) * 10.0 ** rng.integers(-6, 7, size=(n, 1))
    y = rng.normal(size=n) * 1e6
    blocks = make_blocks(X, y, UserIndex.from_groups(g), max_rows=12)
    cuts = np.linspace(0, len(blocks), n_partitions + 1).astype(int)
    return blocks, [blocks[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _sum_block(block, state, scale):
    state = (state or 0) + 1
    return block.segment_sum(block.take(block.X)).sum(axis=0) * scale, state


def _user_values(block, state, _):
    return {"ids": block.users, "rounds": np.full(block.n_users, state),
            "sums": block.segment_sum(block.take(block.X))}


def test_dask_executor_is_bit_identical_to_local_executor(client):
    blocks, parts = _partition_blocks(3)
    futures = client.scatter(parts, hash=False)
    ex = DaskExecutor(client, futures, [len(p) for p in parts],
                      [sum(b.n_users for b in p) for p in parts])
    local = LocalExecutor(blocks)
    for scale in (1.0, 3.0):  # two rounds: the state is carried on the workers
        np.testing.assert_array_equal(ex.map(_sum_block, scale), local.map(_sum_block, scale))
    got = ex.collect(_user_values)
    want = local.collect(_user_values)
    for key in want:
        np.testing.assert_array_equal(got[key].compute(), want[key])
    assert got["sums"].chunks[0] == tuple(sum(b.n_users for b in p) for p in parts)
    ex.close()


# --------------------------------------------------------------------------- #
# The fit: same release as in-process, for every estimator
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("name, variant", CASES)
def test_fit_distributed_equals_fit(client, name, variant):
    X, y, g = _xy(name)
    ref = _make(name, variant).fit(X, y, groups=g)
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=3)
    dist = fit_distributed(_make(name, variant), blocks)
    # released and public attributes on the driver; personal parts on the workers
    for attr in type(ref)._personal_attributes + ("user_ids_",):
        assert not hasattr(dist, attr)
    assert dist.personal_parts_.n_users == ref.n_users_
    assert dist.privacy_report_ == ref.privacy_report_
    for key, value in dist.personal_parts_.collect().items():
        setattr(dist, key, value)
    _assert_same_attributes(ref, dist)
    # predictions on the training blocks, and on other users partitioned differently
    np.testing.assert_allclose(_predict(dist, blocks), ref.predict(X, groups=g), rtol=RTOL)
    g_new = np.where(g % 2 == 0, g, g + 1000)  # half the users unseen (cold start)
    other = UserBlocks.from_arrays(X, y, g_new, n_partitions=2)
    np.testing.assert_allclose(_predict(dist, other), ref.predict(X, groups=g_new),
                               rtol=RTOL)


@pytest.mark.parametrize("name, variant", CASES)
def test_result_does_not_depend_on_the_number_of_partitions(client, name, variant):
    X, y, g = _xy(name)
    fits = [fit_distributed(_make(name, variant),
                            UserBlocks.from_arrays(X, y, g, n_partitions=n),
                            collect_personal=True) for n in (1, 4)]
    assert fits[0].privacy_report_ == fits[1].privacy_report_
    _assert_same_attributes(*fits)


@pytest.mark.parametrize("name", ["fedrep", "ppsgd", "mf"])
def test_same_blocks_give_bit_identical_fit(client, name):
    """With the partitions' own blocks in-process, the fit is equal to the bit."""
    X, y, g = _xy(name)
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=3)
    # PPSGD with keyed client sampling (Poisson, per user and round)
    params = {"sample_rate": 0.5} if name == "ppsgd" else {}
    dist = fit_distributed(_make(name, "fixed").set_params(**params), blocks,
                           collect_personal=True)
    local_est = _make(name, "fixed").set_params(**params)
    randomness = FitRandomness(local_est.random_state)
    validated = [_validate_partition(local_est, raw)
                 for raw in client.gather(blocks.partitions)]
    vocabulary = None
    if hasattr(local_est, "_partition_vocabulary"):
        vocabulary = local_est._merge_vocabularies(
            [v.summary["vocabulary"] for v in validated])
    all_blocks, n_users = [], 0
    for v in validated:
        prepared = _prepare_partition(local_est, v, vocabulary, randomness)
        all_blocks += prepared.blocks
        n_users += prepared.summary["meta"]["n_users"]
    meta = {**prepared.summary["meta"], "n_users": n_users}
    fitted = local_est._fit_executor(LocalExecutor(all_blocks), randomness, meta)
    assert fitted.pop("privacy_report_") == dist.privacy_report_
    for key, value in fitted.items():  # the public fitted attributes
        if key.endswith("_") and not key.startswith("_") \
                and key not in type(local_est)._personal_attributes:
            np.testing.assert_array_equal(getattr(dist, key), value, err_msg=key)


def test_dask_dataframe_round_trip(client):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, y, g = _xy("fedrep")
    est = _make("fedrep", "fixed")
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    df["user"], df["rating"] = g, y
    df.index = pd.RangeIndex(1000, 1000 + len(df))
    ref = type(est)(**est.get_params()).fit(X, y, groups=g)
    ddf = dd.from_pandas(df, npartitions=3)  # users spread over the partitions
    blocks = UserBlocks.from_dask_dataframe(ddf, groups="user", target="rating")
    dist = fit_distributed(type(est)(**est.get_params()), blocks, collect_personal=True)
    assert dist.privacy_report_ == ref.privacy_report_
    _assert_same_attributes(ref, dist)
    pred = predict_distributed(dist, blocks).compute().sort_index()
    np.testing.assert_array_equal(pred.index, df.index)
    np.testing.assert_allclose(pred.to_numpy(), ref.predict(X, groups=g), rtol=RTOL)
    # indexed and sorted by user: the partitioning (and its divisions) are kept
    by_user = dd.from_pandas(df.set_index("user").sort_index(), npartitions=3)
    blocks = UserBlocks.from_dask_dataframe(by_user, groups="user", target="rating")
    assert blocks.divisions == tuple(by_user.divisions)
    dist = fit_distributed(type(est)(**est.get_params()), blocks, collect_personal=True)
    _assert_same_attributes(ref, dist)
    # a DataFrame whose users are split across partitions is refused as is
    with pytest.raises(ValueError, match="more than one partition"):
        UserBlocks.from_dask_dataframe(ddf, groups="user", target="rating", shuffle=False)


# --------------------------------------------------------------------------- #
# Privacy: a split user is refused; noise only on the driver
# --------------------------------------------------------------------------- #
def _part(X, y, g, rows):
    return X[rows], y[rows], g[rows]


def test_user_split_across_partitions_raises(client):
    X, y, g = _data()
    rows = np.arange(X.shape[0])
    split = [client.scatter([_part(X, y, g, r)], hash=False)[0]
             for r in (rows[:150], rows[150:])]
    with pytest.raises(ValueError, match="more than one partition"):
        UserBlocks.from_delayed(split)
    # whole users in each part (interleaved ids): accepted
    whole = [client.scatter([_part(X, y, g, rows[g % 2 == k])], hash=False)[0]
             for k in (0, 1)]
    blocks = UserBlocks.from_delayed(whole)
    ref = ToyPersonalizedMean(random_state=0).fit(X, y, groups=g)
    dist = fit_distributed(ToyPersonalizedMean(random_state=0), blocks)
    np.testing.assert_allclose(dist.mean_, ref.mean_, rtol=RTOL)


@pytest.mark.parametrize("name", list(_ESTIMATORS))
def test_fit_refuses_a_user_split_across_partitions(client, name):
    """Blocks built without the constructors' check are checked by the fit."""
    X, y, g = _xy(name)
    order = np.argsort(g, kind="stable")  # sorted by user; user g[order][100] is cut
    cut = 100 + int(g[order][99] != g[order][100])
    assert g[order][cut - 1] == g[order][cut]
    parts = [RawPartition(X[r], y[r], g[r], r) for r in (order[:cut], order[cut:])]
    futures = client.scatter(parts, hash=False)
    ranges = [(g[r].min(), g[r].max()) for r in (order[:cut], order[cut:])]
    blocks = UserBlocks(client, futures, n_features=X.shape[1], id_ranges=ranges,
                        n_rows=[len(p.y) for p in parts])
    est = _make(name, "fixed")
    with pytest.raises(ValueError, match="more than one partition"):
        fit_distributed(est, blocks)
    assert not hasattr(est, "privacy_report_")


def test_partitions_rating_disjoint_items_fit_as_in_process(client):
    """Items validation derives from each partition's rows are merged as in ``fit``."""
    X, y, g = _xy("mf")
    X = np.where(g[:, None] < 20, X, X + 100)  # the two halves rate disjoint items
    # ids as numbers, as strings, and as rows of two columns
    for ids in (X, X.astype(int).astype(str), np.hstack([X, X % 3])):
        blocks = UserBlocks.from_arrays(ids, y, g, n_partitions=2)
        # private catalogue; public, half of the items outside it; observed
        for items in (None, np.unique(ids[g < 20], axis=0), "observed"):
            est = _make("mf", "default").set_params(items=items)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # two columns of ids
                ref = clone(est).fit(ids, y, groups=g)
                dist = fit_distributed(est, blocks, collect_personal=True)
            assert dist.privacy_report_ == ref.privacy_report_
            _assert_same_attributes(ref, dist)


def test_per_user_attributes_are_declared_not_guessed_from_lengths(client):
    """One partition whose number of items equals its number of users: the item
    catalogue is still public metadata (it was once taken for a per-user value
    because of its length, and the fit failed)."""
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(8), 5)
    X = np.concatenate([rng.permutation(8)[:5] for _ in range(8)])[:, None]
    y = rng.normal(size=g.shape[0])
    est = _make("mf", "default").set_params(epsilon=np.inf, rating_clip=1.0)
    ref = clone(est).fit(X, y, groups=g)
    assert ref.n_items_ == ref.n_users_ == 8
    dist = fit_distributed(est, UserBlocks.from_arrays(X, y, g, n_partitions=1),
                           collect_personal=True)
    _assert_same_attributes(ref, dist)


def _forbid_noise():
    from skdpp.privacy import mechanisms as m

    def refuse(*args, **kwargs):
        raise AssertionError(f"privacy noise drawn on a worker (pid {os.getpid()})")

    m._saved_hooks = (m._add_noise, m._sample_index)
    m._add_noise = m._sample_index = refuse


def _restore_noise():
    from skdpp.privacy import mechanisms as m

    m._add_noise, m._sample_index = m._saved_hooks


def _recording(calls):
    real_add, real_sample = mechanisms._add_noise, mechanisms._sample_index

    def add_noise(value, *, distribution, scale, sensitivity, **kwargs):
        out = real_add(value, distribution=distribution, scale=scale,
                       sensitivity=sensitivity, **kwargs)
        calls.append((distribution, os.getpid(), float(scale), float(sensitivity),
                      np.asarray(value, dtype=float),
                      np.asarray(out) - np.asarray(value, dtype=float)))
        return out

    def sample_index(scores, *, sensitivity, epsilon, **kwargs):
        out = real_sample(scores, sensitivity=sensitivity, epsilon=epsilon, **kwargs)
        calls.append(("exponential", os.getpid(), float(epsilon), float(sensitivity),
                      np.asarray(scores, dtype=float), out))
        return out

    return add_noise, sample_index


@pytest.mark.parametrize("name", list(_ESTIMATORS))
def test_noise_is_drawn_once_per_release_on_the_driver(client, name, monkeypatch):
    """The same releases as in-process, in the same order, each drawn once, here."""
    X, y, g = _xy(name)
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=3)
    in_process, distributed = [], []
    for calls, fit in ((in_process, lambda e: e.fit(X, y, groups=g)),
                       (distributed, lambda e: fit_distributed(e, blocks))):
        add_noise, sample_index = _recording(calls)
        with monkeypatch.context() as m:
            m.setattr(mechanisms, "_add_noise", add_noise)
            m.setattr(mechanisms, "_sample_index", sample_index)
            client.run(_forbid_noise)
            try:
                fit(_make(name, "default"))
            finally:
                client.run(_restore_noise)
    assert len(distributed) == len(in_process) > 0
    assert {call[1] for call in distributed} == {os.getpid()}
    for a, b in zip(in_process, distributed):
        kind, _, scale, sensitivity, value, out = a
        assert b[0] == kind and b[2] == scale and b[3] == sensitivity
        np.testing.assert_allclose(b[4], value, rtol=RTOL, atol=1e-12)
        if kind != "exponential":  # the same draws of the same stream
            np.testing.assert_allclose(b[5], out, rtol=1e-6, atol=1e-9)
        else:
            assert b[5] == out


def test_workers_never_get_the_noise_stream():
    with pytest.raises(TypeError, match="noise"):
        pickle.dumps(FitRandomness(0))


# --------------------------------------------------------------------------- #
# Behaviour
# --------------------------------------------------------------------------- #
def test_failed_fit_leaves_estimator_unfitted(client):
    X, y, g = _data()
    X = X.copy()
    X[5, 0] = np.nan
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=2)
    est = ToyPersonalizedMean(random_state=0)
    est.mean_ = 1.0
    with pytest.raises(ValueError, match="NaN"):
        fit_distributed(est, blocks)
    assert not hasattr(est, "mean_") and not hasattr(est, "privacy_report_")


def test_warnings_once_on_the_driver_from_the_total_number_of_users(client):
    X, y, g = _data(n_users=40)
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=4)
    for delta, expected in ((1.0 / 30, 1), (1.0 / 50, 0)):  # 1/n_users = 1/40
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit_distributed(ToyPersonalizedMean(delta=delta, random_state=0), blocks)
        leaks = [w for w in caught if issubclass(w.category, PrivacyLeakWarning)]
        assert len(leaks) == expected
        assert all("1/40" in str(w.message) for w in leaks)


def test_personal_parts_stay_on_workers_until_collected(client):
    X, y, g = _data()
    est = ToyPersonalizedMean(epsilon=1.0, random_state=0)
    blocks = UserBlocks.from_arrays(X, y, g, n_partitions=3)
    dist = fit_distributed(type(est)(**est.get_params()), blocks)
    parts = dist.personal_parts_
    assert parts.names == ("user_ids_", "offsets_")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(dist)
    offsets = parts.to_dask("offsets_")
    assert offsets.chunks[0] == tuple(parts.users_per_partition)
    ids = parts.to_dask("user_ids_").compute()
    np.testing.assert_array_equal(np.sort(ids), np.unique(g))
    collected = fit_distributed(type(est)(**est.get_params()), blocks, collect_personal=True)
    assert not hasattr(collected, "personal_parts_")
    pickle.dumps(collected)
    dist.fit(X, y, groups=g)  # a refit in-process leaves no handle of the earlier fit
    assert not hasattr(dist, "personal_parts_")


def test_local_cluster_unsets_the_nanny_malloc_threshold(client):
    values = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert set(values.values()) == {os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def test_local_cluster_serves_no_http_pages(client):
    import urllib.error
    import urllib.request

    def ports(dask_worker=None, dask_scheduler=None):
        return (dask_worker or dask_scheduler).http_server.port

    for port in [client.run_on_scheduler(ports), *client.run(ports).values()]:
        for page in ("metrics", "health", "json/counts.json"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/{page}", timeout=5)
