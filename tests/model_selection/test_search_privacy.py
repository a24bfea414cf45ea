"""Privacy of what a fitted PrivateRandomizedSearchCV lets an observer see (issue 19).

* Defect 2: no seed on an observed object. A trial's ``RandomState`` left in
  ``best_estimator_``'s parameters can be rewound (the Mersenne Twister's
  step is invertible) to the words its fit drew, which rebuild the fit's
  noise generator. The tests run that attack against the fitted search.
* Defect 3: no warning or exception that depends on one user. Neighbouring
  datasets (one user replaced by rows near the float maximum, by subnormal
  rows, by targets of 1e305) must give the same warnings and no exception,
  even under the caller's ``np.errstate(all="raise")``.
* The seed caveat: the report says whether the noise is reproducible from a
  user-supplied ``random_state``.

Every property is also shown to fail on a broken variant (the old behaviour
patched back in).
"""

import contextlib
import pickle
import warnings

import numpy as np
import pytest

import skdpp.base
from skdpp.decomposition import AdaptiveWeightMF
from skdpp.exceptions import PrivacyLeakWarning
from skdpp.linear_model import (
    JLMarginClassifier,
    PPSGDRegressor,
    PrivAltMinRegressor,
    PrivateFedRepRegressor,
)
from skdpp.model_selection import PrivateRandomizedSearchCV
from skdpp.model_selection import _search as search_module
from skdpp.privacy.report import SEEDED_NOISE_NOTE
from skdpp.utils._random import DerivedRandomState, FitRandomness
from tests._toy import ToyPersonalizedMean, _ToyMean

_RNG_TYPES = (np.random.RandomState, np.random.Generator, np.random.BitGenerator,
              np.random.SeedSequence, FitRandomness)


def _data(n_users=30, rows=6, d=3, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_users), rows)
    X = rng.normal(size=(n_users * rows, d))
    y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=n_users * rows)
    return X, y, groups


def _search(estimator, random_state=None, n_iter=1, **kwargs):
    # n_iter=1 with the truncated negative binomial: exactly one trial (fast).
    kwargs = {"epsilon": 2.0, "delta": 1e-5, **kwargs}
    return PrivateRandomizedSearchCV(estimator, {"clip_norm": [0.5, 1.0]}, n_iter=n_iter,
                                     random_state=random_state, **kwargs)


# --------------------------------------------------------------------------- #
# Defect 2: the attack
# --------------------------------------------------------------------------- #
def _rng_objects(obj, path="search", seen=None, found=None):
    """Every generator, bit generator, seed sequence or FitRandomness reachable."""
    if seen is None:
        seen, found = set(), []
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)):
        return found
    seen.add(id(obj))
    if isinstance(obj, _RNG_TYPES):
        found.append((path, obj))
        return found
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, np.ndarray):
        children = ([(f"{path}[{i}]", v) for i, v in enumerate(obj.ravel())]
                    if obj.dtype == object else [])
    elif hasattr(obj, "__dataclass_fields__"):
        children = [(f"{path}.{n}", getattr(obj, n)) for n in obj.__dataclass_fields__]
    elif hasattr(obj, "__dict__"):
        children = [(f"{path}.{n}", v) for n, v in vars(obj).items()]
    else:
        children = []
    for p, v in children:
        _rng_objects(v, p, seen, found)
    return found


def _untwist(key):
    """The MT19937 state before the last twist (the twist is invertible)."""
    mt = [int(v) for v in key]
    for i in range(623, -1, -1):
        tmp = mt[i] ^ mt[(i + 397) % 624]
        if tmp & 0x80000000:
            tmp ^= 0x9908B0DF
        res = (tmp << 1) & 0x80000000
        tmp = mt[(i - 1) % 624] ^ mt[(i + 396) % 624]
        if tmp & 0x80000000:
            tmp ^= 0x9908B0DF
            res |= 1
        res |= (tmp << 1) & 0x7FFFFFFF
        mt[i] = res
    return np.array(mt, dtype=np.uint32)


def _rebuilt_noise_states(obj):
    """The noise-generator states an observer rebuilds from ``obj``'s generators.

    For every ``RandomState`` reachable (also after a pickle round trip), the
    attacker rewinds it to every earlier position of the current and the
    previous Mersenne Twister block and builds the fit's randomness from
    there, as ``fit`` would have.
    """
    states = []
    for _, rs in _rng_objects(pickle.loads(pickle.dumps(obj))):
        if not isinstance(rs, np.random.RandomState):
            continue
        name, key, pos = rs.get_state()[:3]
        for k, p in [(key, p) for p in range(pos)] + [(_untwist(key), p) for p in range(624)]:
            rewound = np.random.RandomState()
            rewound.set_state((name, k, p, 0, 0.0))
            states.append(FitRandomness(rewound).noise.bit_generator.state)
    return states


@pytest.fixture
def fit_noise(monkeypatch):
    """The initial state of every fit's noise generator (what the attacker wants)."""
    recorded = []

    class Recording(FitRandomness):
        def __init__(self, random_state):
            super().__init__(random_state)
            recorded.append(self.noise.bit_generator.state)

    monkeypatch.setattr(skdpp.base, "FitRandomness", Recording)
    return recorded


def _leave_seed(est):
    """The old behaviour: the trial's seed stays in its parameters."""
    return est.get_params(deep=False)["random_state"]


@pytest.mark.parametrize("broken", [False, True], ids=["fixed", "seed-left-on-estimator"])
@pytest.mark.parametrize("make", [lambda: PrivateFedRepRegressor(n_components=2),
                                  lambda: PPSGDRegressor()], ids=["FedRep", "PPSGD"])
def test_fitted_search_cannot_rebuild_the_noise(make, broken, fit_noise, monkeypatch):
    # PPSGD's personal refit (refit_personal) draws again from the trial's seed.
    if broken:
        monkeypatch.setattr(search_module, "_take_back_seed", _leave_seed)
    X, y, g = _data()
    search = _search(make(), random_state=None).fit(X, y, groups=g)
    chosen = fit_noise[search.best_index_]
    rebuilt = _rebuilt_noise_states(search)
    if broken:
        # The attack of issue 19: the chosen trial's noise generator, bit for bit.
        assert chosen in rebuilt
        stolen = next(s for s in rebuilt if s == chosen)
        a, b = np.random.Generator(np.random.PCG64()), np.random.Generator(np.random.PCG64())
        a.bit_generator.state, b.bit_generator.state = stolen, chosen
        assert np.array_equal(a.standard_normal(50), b.standard_normal(50))
        return
    assert rebuilt == []
    assert chosen not in rebuilt
    # Nothing that rebuilds noise anywhere: params, attributes, results, pickle.
    assert search.best_estimator_.get_params()["random_state"] is None
    assert _rng_objects(search) == []
    assert _rng_objects(pickle.loads(pickle.dumps(search))) == []
    assert _rng_objects(search.best_estimator_.get_params(deep=True)) == []
    assert _rng_objects(search.cv_results_) == []


@pytest.mark.parametrize("random_state, expected", [
    (None, DerivedRandomState), (np.random.RandomState(3), DerivedRandomState),
    (np.random.default_rng(3), DerivedRandomState), (7, int)],
    ids=["None", "RandomState", "Generator", "int"])
def test_trials_get_a_seed_that_is_taken_back(random_state, expected, monkeypatch):
    """128 bits for unseeded and generator-seeded searches; none of it survives."""
    handed, take_back = [], search_module._take_back_seed

    def spy(est):
        handed.append(est.get_params(deep=False)["random_state"])
        return take_back(est)

    monkeypatch.setattr(search_module, "_take_back_seed", spy)
    X, y, g = _data()
    search = _search(ToyPersonalizedMean(), random_state=random_state, n_iter=3).fit(
        X, y, groups=g)
    # one per trial, one more around the personal refit of the selected trial
    assert len(handed) == search.n_trials_ + 1
    assert all(isinstance(h, expected) for h in handed)
    assert search.best_estimator_.random_state is None


def test_int_seeded_search_stays_reproducible():
    """Taking the seeds back does not cost reproducibility (PPSGD's refit included)."""
    X, y, g = _data()
    a = _search(PPSGDRegressor(), random_state=5).fit(X, y, groups=g)
    b = _search(PPSGDRegressor(), random_state=5).fit(X, y, groups=g)
    assert a.best_score_ == b.best_score_
    np.testing.assert_array_equal(a.best_estimator_.coef_, b.best_estimator_.coef_)
    np.testing.assert_array_equal(a.best_estimator_.offsets_, b.best_estimator_.offsets_)
    assert a.best_estimator_.random_state is None


class _KeyKeepingAlgorithm(_ToyMean):
    @staticmethod
    def run(executor, release, randomness, meta, config):
        result = _ToyMean.run(executor, release, randomness, meta, config)
        result.attributes["key_"] = randomness.key.copy()
        return result


class _ToyKeepingItsKey(ToyPersonalizedMean):
    """Broken: keeps the fit key in a fitted attribute."""

    _algorithm = _KeyKeepingAlgorithm


def _secret_words(randomness):
    """64-bit words (little-endian bytes) of everything that rebuilds a fit's randomness."""
    bit_generator = randomness.noise.bit_generator
    # numpy >= 1.25 names it seed_seq; older numpy only has the private _seed_seq
    seq = getattr(bit_generator, "seed_seq", None) or bit_generator._seed_seq
    state = randomness.noise.bit_generator.state["state"]
    ints = [seq.entropy, state["state"], state["inc"]]
    words = [int(w) for w in randomness.key]
    words += [(v >> s) & (2**64 - 1) for v in ints for s in (0, 64)]
    return [w.to_bytes(8, "little") for w in words if w > 2**32]


_FITS = {
    "FedRep": lambda: PrivateFedRepRegressor(n_components=2),
    "AltMin": lambda: PrivAltMinRegressor(n_components=2),
    "PPSGD": lambda: PPSGDRegressor(),
    "JL": lambda: JLMarginClassifier(classes=[0, 1]),
    "JL-private-labels": lambda: JLMarginClassifier(),
    "MF": lambda: AdaptiveWeightMF(n_components=2, items=np.arange(8)),
    "MF-private-catalogue": lambda: AdaptiveWeightMF(n_components=2),
    "Toy": ToyPersonalizedMean,
    "Toy-keeping-its-key(broken)": _ToyKeepingItsKey,
}


@pytest.mark.parametrize("name", sorted(_FITS))
def test_fitted_estimators_hold_no_seed(name, monkeypatch):
    """Construction rule: no fitted estimator keeps its generators, seed or key.

    With ``random_state=None``, neither the object graph nor the pickle bytes
    of a fitted estimator hold a generator, a seed sequence, the fit key, the
    seed entropy or the noise generator's state.
    """
    secrets = []

    class Recording(FitRandomness):
        def __init__(self, random_state):
            super().__init__(random_state)
            secrets.extend(_secret_words(self))

    monkeypatch.setattr(skdpp.base, "FitRandomness", Recording)
    X, y, g = _data(n_users=40)
    if name.startswith("JL"):
        y = (y > 0).astype(int)
    if name.startswith("MF"):
        X = (np.arange(len(g)) % 8).reshape(-1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. private label selection falling back
        est = _FITS[name]().fit(X, y, groups=g)
    blob = pickle.dumps(est)
    leaks = [w for w in secrets if w in blob] + _rng_objects(est)
    assert len(secrets) >= 6
    assert bool(leaks) is name.endswith("(broken)")


# --------------------------------------------------------------------------- #
# Defect 3: warnings and exceptions of neighbouring datasets
# --------------------------------------------------------------------------- #
def _neighbour(X, y, g, kind):
    """Replace user 0's rows (same number of rows and users)."""
    X, y = X.copy(), y.copy()
    mine = g == 0
    if kind == "huge_rows":
        X[mine] = 1e308 * np.where(X[mine] < 0, -1.0, 1.0)
    elif kind == "subnormal_rows":
        X[mine] = 5e-324
    elif kind == "huge_targets":
        y[mine] = 1e305 * np.where(y[mine] < 0, -1.0, 1.0)
    return X, y


def _observe(search, X, y, g, errstate):
    """Exception and warnings the caller sees (messages and categories)."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(all=errstate):
        warnings.simplefilter("always")
        try:
            search.fit(X, y, groups=g)
            error = None
        except Exception as exc:  # noqa: BLE001 -- recorded, compared
            error = f"{type(exc).__name__}: {exc}"
    return error, [(str(w.message), w.category) for w in caught]


_ESTIMATORS = {
    "FedRep": (lambda: PrivateFedRepRegressor(n_components=2), False),
    "AltMin": (lambda: PrivAltMinRegressor(n_components=2), False),
    "JL": (lambda: JLMarginClassifier(classes=[0, 1]), True),
}


@pytest.mark.parametrize("errstate", ["warn", "raise"])
@pytest.mark.parametrize("name", sorted(_ESTIMATORS))
def test_neighbours_give_identical_warnings_and_no_exception(name, errstate):
    make, classifier = _ESTIMATORS[name]
    X, y, g = _data()
    if classifier:
        y = (y > 0).astype(int)
    kinds = ["huge_rows", "subnormal_rows"] + ([] if classifier else ["huge_targets"])
    base = _observe(_search(make(), random_state=0), X, y, g, errstate)
    assert base[0] is None
    for kind in kinds:
        Xn, yn = _neighbour(X, y, g, kind)
        assert _observe(_search(make(), random_state=0), Xn, yn, g, errstate) == base, kind


@pytest.mark.slow
@pytest.mark.parametrize("errstate", ["warn", "raise"])
def test_neighbours_ppsgd_and_longer_searches(errstate):
    X, y, g = _data()
    for make in (PPSGDRegressor, lambda: PrivateFedRepRegressor(n_components=2)):
        base = _observe(_search(make(), random_state=1, n_iter=4), X, y, g, errstate)
        assert base[0] is None
        for kind in ("huge_rows", "subnormal_rows", "huge_targets"):
            Xn, yn = _neighbour(X, y, g, kind)
            assert _observe(_search(make(), random_state=1, n_iter=4), Xn, yn, g,
                            errstate) == base


def _replay_everything(caught):
    return [(w.message, w.category) for w in caught]


@pytest.mark.parametrize("errstate, replay_all", [("raise", False), ("warn", True)],
                         ids=["guard-removed", "guard-removed-and-replay-all"])
def test_neighbour_check_catches_the_old_search(errstate, replay_all, monkeypatch):
    """The old search: trials scored outside the guard, every warning replayed."""
    monkeypatch.setattr(search_module, "quiet_numerics", contextlib.nullcontext)
    if replay_all:
        monkeypatch.setattr(search_module, "_replayable", _replay_everything)
    X, y, g = _data()
    make = _ESTIMATORS["FedRep"][0]
    base = _observe(_search(make(), random_state=0), X, y, g, errstate)
    # (huge targets: since the cold-start location checks, this small search's huge-row
    # neighbour no longer overflows in scoring; its huge-target neighbour does)
    Xn, yn = _neighbour(X, y, g, "huge_targets")
    assert _observe(_search(make(), random_state=0), Xn, yn, g, errstate) != base


class _CheckedToy(ToyPersonalizedMean):
    """Test-only: predictions ``x_0 / x_0 * (mean + offset)``, NaN where ``x_0 = 0``.

    ``predict`` refuses non-finite predictions (as the estimators' public
    predict does); ``_predict_unchecked`` is its unchecked core.
    """

    def _predict_unchecked(self, X, groups=None):
        X = np.asarray(X, dtype=float)
        return X[:, 0] / X[:, 0] * super().predict(X, groups=groups)

    def predict(self, X, groups=None):
        out = self._predict_unchecked(X, groups=groups)
        if not np.isfinite(out).all():
            raise ValueError("non-finite prediction on finite input")
        return out


@pytest.mark.parametrize("broken", [False, True], ids=["fixed", "scored-with-predict"])
def test_non_finite_predictions_cost_only_their_users_clip(broken, monkeypatch):
    """User 0's rows make its predictions NaN: it scores C, the others as before."""
    if broken:
        monkeypatch.setattr(search_module, "_trial_predictions",
                            lambda est, X, groups: est.predict(X, groups=groups))
    X, y, g = _data()
    Xn = X.copy()
    Xn[g == 0, 0] = 0.0  # 0/0 for every row of user 0 (NaN, and a warning if unguarded)
    clip = 1.0
    kwargs = dict(epsilon=np.inf, score_clip=clip, refit_personal=False)

    def fit(X_):
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            return _search(_CheckedToy(clip_norm=1.0), random_state=0, **kwargs).fit(
                X_, y, groups=g)

    if broken:
        with pytest.raises(ValueError, match="non-finite"):
            fit(Xn)
        return
    a, b = fit(X), fit(Xn)
    assert np.isfinite(b.best_score_)
    # Recompute both scores from the released models: n * score = -sum of
    # clipped user losses; user 0 counts exactly C in the neighbour.
    order, _, held = search_module._split_within_users(
        X, y, search_module.UserIndex.from_groups(g, len(g)),
        np.random.SeedSequence(0).spawn(4)[2].generate_state(2, dtype=np.uint64), 0.2)
    for search, X_ in ((a, X), (b, Xn)):
        with np.errstate(all="ignore"):
            pred = search.best_estimator_._predict_unchecked(X_[held], groups=g[held])
        per_user = np.bincount(g[held], weights=(y[held] - pred) ** 2) / np.bincount(g[held])
        per_user = np.clip(np.where(np.isfinite(per_user), per_user, clip), 0, clip)
        np.testing.assert_allclose(search.best_score_, -per_user.mean(), rtol=1e-12)
        if search is b:
            assert per_user[0] == clip


def test_replay_rule_is_privacy_leak_warnings_only():
    """The rule of ``_replayable``: by category, never by content."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("overflow encountered in matmul", RuntimeWarning)
        warnings.warn("something about the data", UserWarning)
        warnings.warn("delta too large for these params", PrivacyLeakWarning)
    assert search_module._replayable(caught) == [
        (caught[2].message, PrivacyLeakWarning)]


# --------------------------------------------------------------------------- #
# The seed caveat in the search's report
# --------------------------------------------------------------------------- #
def _old_trial_random_state(self, seed):
    """The old behaviour: a plain RandomState, whose seededness nobody knows."""
    return np.random.RandomState(np.random.MT19937(seed.spawn(1)[0]))


@pytest.mark.parametrize("broken", [False, True], ids=["fixed", "plain-RandomState"])
@pytest.mark.parametrize("random_state, seeded", [
    (None, False), (3, True), (np.random.RandomState(3), True),
    (np.random.default_rng(3), True)], ids=["None", "int", "RandomState", "Generator"])
def test_search_report_says_whether_noise_is_seeded(random_state, seeded, broken,
                                                    monkeypatch):
    if broken:
        monkeypatch.setattr(PrivateRandomizedSearchCV, "_trial_random_state",
                            _old_trial_random_state)
    X, y, g = _data()
    report = _search(ToyPersonalizedMean(), random_state=random_state).fit(
        X, y, groups=g).privacy_report_
    reports = (report, report.chosen_trial)
    truthful = all(r.noise_seeded is seeded for r in reports) and all(
        (SEEDED_NOISE_NOTE in r.notes) is seeded and (SEEDED_NOISE_NOTE in str(r)) is seeded
        for r in reports)
    # The old trial seed made an unseeded search's chosen trial claim seeded noise.
    assert truthful is not (broken and not seeded)
