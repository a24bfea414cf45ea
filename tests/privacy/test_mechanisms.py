"""Tests for skdpp.privacy.mechanisms.

Statistical tests are seeded; each states its false-alarm rate (the
probability that a correct implementation fails for a random seed).
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from skdpp.privacy import mechanisms
from skdpp.privacy.events import ExponentialEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent
from skdpp.privacy.mechanisms import (
    clip_by_norm,
    exponential_mechanism,
    exponential_mechanism_probabilities,
    gaussian_mechanism,
    gaussian_sum,
    laplace_mechanism,
    noisy_counts,
)


def _norms(a):
    return np.sqrt(np.sum(np.asarray(a, dtype=float).reshape(len(a), -1) ** 2, axis=1))


# ---------------------------------------------------------------- clipping
def test_clip_norm_at_most_c():
    rng = np.random.default_rng(0)
    values = rng.normal(scale=10.0, size=(200, 3, 4))
    clipped = clip_by_norm(values, 2.5)
    assert np.all(_norms(clipped) <= 2.5 * (1 + 1e-12))


def test_clip_unchanged_below_norm():
    values = np.array([[0.3, 0.4], [0.0, -0.99], [3.0, 4.0]])
    clipped = clip_by_norm(values, 1.0)
    assert_array_equal(clipped[:2], values[:2])
    assert_allclose(clipped[2], [0.6, 0.8], rtol=1e-15)


def test_clip_preserves_direction():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(50, 6)) * 100
    clipped = clip_by_norm(values, 1.0)
    cos = np.sum(values * clipped, axis=1) / (_norms(values) * _norms(clipped))
    assert_allclose(cos, 1.0, rtol=1e-12)


def test_clip_huge_values_no_overflow():
    values = np.array([[1e300, 1e300, -1e300], [np.finfo(float).max, 0.0, 0.0]])
    with np.errstate(all="raise"):
        clipped = clip_by_norm(values, 2.0)
    assert np.all(np.isfinite(clipped))
    assert_allclose(clipped[0], 2.0 / np.sqrt(3) * np.array([1, 1, -1]), rtol=1e-14)
    assert_allclose(clipped[1], [2.0, 0.0, 0.0], rtol=1e-15)


def test_clip_infinite_values():
    clipped = clip_by_norm(np.array([[np.inf, 1.0], [-np.inf, np.inf]]), 1.0)
    assert_allclose(clipped, [[1.0, 0.0], [-np.sqrt(0.5), np.sqrt(0.5)]], rtol=1e-15)


def test_clip_zeros_stay_zero():
    clipped = clip_by_norm(np.zeros((3, 4)), 1.0)
    assert_array_equal(clipped, np.zeros((3, 4)))


def test_clip_tiny_values_unchanged():
    values = np.array([[1e-310, -1e-320]])
    assert_array_equal(clip_by_norm(values, 1.0), values)


def test_clip_does_not_modify_input():
    values = np.array([[3.0, 4.0], [1.0, 0.0]])
    before = values.copy()
    out = clip_by_norm(values, 1.0)
    assert_array_equal(values, before)
    assert out is not values


def test_clip_none_returns_copy():
    values = np.array([[3.0, 4.0]])
    out = clip_by_norm(values, None)
    assert_array_equal(out, values)
    assert out is not values


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_clip_rejects_bad_clip_norm(bad):
    with pytest.raises(ValueError, match="clip_norm"):
        clip_by_norm(np.ones((2, 2)), bad)


def test_clip_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        clip_by_norm(np.array([[np.nan, 1.0]]), 1.0)


# ---------------------------------------------------------------- gaussian
def test_gaussian_sum_noise_std_matches():
    # chi-square two-sided test of the noise variance at level 1e-6 (false alarms
    # 1e-6 per seed); the std must be z * 2C.
    rng = np.random.default_rng(42)
    contributions = np.tile([3.0, 4.0], (10, 1))  # each clipped to [0.6, 0.8]
    z, C, n = 1.7, 1.0, 20000
    release, event = gaussian_sum(np.broadcast_to(contributions, (10, 2)), clip_norm=C,
                                  noise_multiplier=z, rng=rng)
    assert event == GaussianEvent(z)
    draws = np.array([gaussian_sum(contributions, clip_norm=C, noise_multiplier=z,
                                   rng=rng)[0] for _ in range(n // 2)]).ravel()
    noise = draws - np.tile([6.0, 8.0], n // 2)
    stat = np.sum(noise ** 2) / (z * 2 * C) ** 2
    lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], df=noise.size)
    assert lo < stat < hi
    # the wrong sensitivity (C instead of 2C) is rejected by the same test
    stat_wrong = np.sum(noise ** 2) / (z * C) ** 2
    assert not lo < stat_wrong < hi


def test_gaussian_sum_sums_clipped_contributions_without_noise():
    contributions = np.array([[3.0, 4.0], [0.1, 0.0]])
    release, event = gaussian_sum(contributions, clip_norm=1.0, noise_multiplier=0.0,
                                  rng=None)
    assert isinstance(event, NonPrivateEvent)
    assert_allclose(release, [0.7, 0.8], rtol=1e-15)


def test_gaussian_sum_requires_clip_norm_when_private():
    with pytest.raises(ValueError, match="clip_norm"):
        gaussian_sum(np.ones((3, 2)), clip_norm=None, noise_multiplier=1.0,
                     rng=np.random.default_rng(0))


def test_gaussian_sum_passes_sensitivity_two_c_to_hook(monkeypatch):
    calls = []

    def fake(value, *, distribution, scale, sensitivity, rng, symmetric=False):
        calls.append((distribution, scale, sensitivity, symmetric))
        return np.array(value, copy=True)

    monkeypatch.setattr(mechanisms, "_add_noise", fake)
    gaussian_sum(np.ones((5, 2)), clip_norm=0.5, noise_multiplier=3.0,
                 rng=np.random.default_rng(0))
    assert calls == [("gaussian", 3.0, 1.0, False)]


def test_noise_hook_is_the_only_noise_source(monkeypatch):
    # With the hooks patched to identity/argmax, every mechanism is deterministic.
    monkeypatch.setattr(mechanisms, "_add_noise",
                        lambda value, **kw: np.array(value, dtype=float, copy=True))
    monkeypatch.setattr(mechanisms, "_sample_index",
                        lambda scores, **kw: int(np.argmax(scores)))
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert_allclose(gaussian_mechanism([1.0, 2.0], sensitivity=1.0, noise_multiplier=5.0,
                                       rng=rng)[0], [1.0, 2.0])
    assert_allclose(laplace_mechanism([1.0], sensitivity=1.0, noise_multiplier=5.0,
                                      rng=rng)[0], [1.0])
    assert exponential_mechanism([0.0, 3.0, 1.0], sensitivity=1.0, epsilon=0.1,
                                 rng=rng)[0] == 1
    assert rng.bit_generator.state == state


def test_gaussian_mechanism_zero_multiplier_is_non_private_copy():
    value = np.array([1.0, 2.0])
    release, event = gaussian_mechanism(value, sensitivity=1.0, noise_multiplier=0.0,
                                        rng=np.random.default_rng(0))
    assert isinstance(event, NonPrivateEvent)
    assert_array_equal(release, value)
    assert release is not value


def test_gaussian_mechanism_does_not_modify_input():
    value = np.array([1.0, 2.0])
    gaussian_mechanism(value, sensitivity=1.0, noise_multiplier=1.0,
                       rng=np.random.default_rng(0))
    assert_array_equal(value, [1.0, 2.0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(sensitivity=-1.0), "sensitivity"), (dict(sensitivity=np.nan), "sensitivity"),
    (dict(noise_multiplier=-0.1), "noise_multiplier"),
    (dict(noise_multiplier=np.inf), "noise_multiplier"),
])
def test_gaussian_mechanism_validates(kwargs, match):
    args = dict(sensitivity=1.0, noise_multiplier=1.0, rng=np.random.default_rng(0))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        gaussian_mechanism([1.0], **args)


def test_gaussian_mechanism_rejects_bad_rng():
    with pytest.raises(TypeError, match="rng"):
        gaussian_mechanism([1.0], sensitivity=1.0, noise_multiplier=1.0, rng=0)


def test_symmetric_noise_is_symmetric_with_correct_variance():
    # Chi-square tests on diagonal and off-diagonal entries separately, each at
    # level 1e-6 (total false-alarm rate <= 2e-6).
    rng = np.random.default_rng(7)
    p, reps, z, sens = 6, 4000, 0.8, 1.5
    value = np.zeros((reps, p, p))
    release, event = gaussian_mechanism(value, sensitivity=sens, noise_multiplier=z,
                                        rng=rng, symmetric=True)
    assert event == GaussianEvent(z)
    assert_array_equal(release, np.swapaxes(release, -1, -2))
    s2 = (z * sens) ** 2
    iu = np.triu_indices(p, 1)
    for entries in (release[:, np.arange(p), np.arange(p)].ravel(),
                    release[:, iu[0], iu[1]].ravel()):
        stat = np.sum(entries ** 2) / s2
        lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], df=entries.size)
        assert lo < stat < hi


def test_symmetric_requires_square():
    with pytest.raises(ValueError, match="p, p"):
        gaussian_mechanism(np.zeros((2, 3)), sensitivity=1.0, noise_multiplier=1.0,
                           rng=np.random.default_rng(0), symmetric=True)


# ---------------------------------------------------------------- laplace / counts
def test_laplace_noise_scale_matches():
    # The mean absolute deviation of Laplace(b) noise is b with sd b; with
    # n = 40000 a 6-sigma band has false-alarm rate ~2e-9.
    rng = np.random.default_rng(3)
    z, sens, n = 2.0, 0.5, 40000
    release, event = laplace_mechanism(np.zeros(n), sensitivity=sens, noise_multiplier=z,
                                       rng=rng)
    assert event == LaplaceEvent(z)
    b = z * sens
    assert abs(np.mean(np.abs(release)) - b) < 6 * b / np.sqrt(n)


def test_noisy_counts_dispatch_and_validation():
    rng = np.random.default_rng(0)
    assert isinstance(noisy_counts([1, 2], sensitivity=1.0, noise_multiplier=1.0, rng=rng)[1],
                      GaussianEvent)
    assert isinstance(noisy_counts([1, 2], sensitivity=1.0, noise_multiplier=1.0, rng=rng,
                                   mechanism="laplace")[1], LaplaceEvent)
    with pytest.raises(ValueError, match="mechanism"):
        noisy_counts([1], sensitivity=1.0, noise_multiplier=1.0, rng=rng, mechanism="exp")


# ---------------------------------------------------------------- exponential
def test_exponential_probabilities_match_softmax():
    scores = np.array([0.0, 1.5, -2.0, 3.0])
    eps, sens = 0.7, 2.0
    logits = eps * scores / (2 * sens)
    expected = np.exp(logits) / np.exp(logits).sum()
    assert_allclose(exponential_mechanism_probabilities(scores, sensitivity=sens,
                                                        epsilon=eps), expected, rtol=1e-14)


def test_exponential_probabilities_stable_for_huge_scores():
    probs = exponential_mechanism_probabilities([1e6, 1e6 + 1.0, -1e6], sensitivity=1.0,
                                                epsilon=2.0)
    e = np.exp(1.0)
    assert_allclose(probs, [1 / (1 + e), e / (1 + e), 0.0], rtol=1e-12, atol=1e-300)


def test_exponential_log_ratio_bounded_by_epsilon():
    rng = np.random.default_rng(11)
    eps, sens = 1.3, 0.5
    worst = 0.0
    for _ in range(200):
        scores = rng.normal(size=8) * 3
        neighbour = scores + rng.uniform(-sens, sens, size=8)
        neighbour[rng.integers(8)] = scores[0] + sens  # some shifts at the boundary
        neighbour = np.clip(neighbour, scores - sens, scores + sens)
        p = exponential_mechanism_probabilities(scores, sensitivity=sens, epsilon=eps)
        q = exponential_mechanism_probabilities(neighbour, sensitivity=sens, epsilon=eps)
        worst = max(worst, np.max(np.abs(np.log(p) - np.log(q))))
    assert worst <= eps * (1 + 1e-12)
    # the extreme neighbour (one score up, the others down) attains the bound
    scores = np.zeros(5)
    neighbour = scores - sens
    neighbour[0] = sens
    p = exponential_mechanism_probabilities(scores, sensitivity=sens, epsilon=eps)
    q = exponential_mechanism_probabilities(neighbour, sensitivity=sens, epsilon=eps)
    assert np.max(np.abs(np.log(p) - np.log(q))) <= eps * (1 + 1e-12)


def test_exponential_sampling_frequencies_match_probabilities():
    # Chi-square goodness of fit at level 1e-6 (false-alarm rate 1e-6).
    rng = np.random.default_rng(5)
    scores = np.array([0.0, 1.0, 2.0, 0.5])
    eps, n = 1.0, 20000
    probs = exponential_mechanism_probabilities(scores, sensitivity=1.0, epsilon=eps)
    draws = [exponential_mechanism(scores, sensitivity=1.0, epsilon=eps, rng=rng)[0]
             for _ in range(n)]
    counts = np.bincount(draws, minlength=4)
    stat = np.sum((counts - n * probs) ** 2 / (n * probs))
    assert stat < stats.chi2.ppf(1 - 1e-6, df=3)


def test_exponential_returns_event():
    index, event = exponential_mechanism([1.0, 2.0], sensitivity=1.0, epsilon=0.5,
                                         rng=np.random.default_rng(0))
    assert event == ExponentialEvent(0.5)
    assert index in (0, 1)


def test_exponential_infinite_epsilon_argmax_ties_random():
    rng = np.random.default_rng(0)
    scores = [1.0, 3.0, 3.0, 0.0]
    picks = {exponential_mechanism(scores, sensitivity=1.0, epsilon=np.inf, rng=rng)[0]
             for _ in range(50)}
    assert picks == {1, 2}  # both ties chosen (fails w.p. 2^-49)
    _, event = exponential_mechanism(scores, sensitivity=1.0, epsilon=np.inf, rng=rng)
    assert isinstance(event, NonPrivateEvent)
    assert_allclose(exponential_mechanism_probabilities(scores, sensitivity=1.0,
                                                        epsilon=np.inf), [0, .5, .5, 0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(sensitivity=0.0), "sensitivity"), (dict(sensitivity=-1.0), "sensitivity"),
    (dict(epsilon=0.0), "epsilon"), (dict(scores=[]), "scores"),
    (dict(scores=[1.0, np.nan]), "scores"), (dict(scores=[[1.0]]), "scores"),
])
def test_exponential_validates(kwargs, match):
    args = dict(scores=[1.0, 2.0], sensitivity=1.0, epsilon=1.0,
                rng=np.random.default_rng(0))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        exponential_mechanism(**args)


# ---------------------------------------------------------------- sensitivity checks
def _neighbour_shift(contributions, neighbour_contributions, clip_norm):
    a, _ = gaussian_sum(contributions, clip_norm=clip_norm, noise_multiplier=0.0, rng=None)
    b, _ = gaussian_sum(neighbour_contributions, clip_norm=clip_norm, noise_multiplier=0.0,
                        rng=None)
    return np.linalg.norm(a - b)


@pytest.mark.parametrize("replacement", ["huge", "zeros", "opposite"])
def test_gaussian_sum_replace_one_user_within_two_c(replacement):
    rng = np.random.default_rng(0)
    C = 1.0
    contributions = rng.normal(size=(30, 3, 3))
    neighbour = contributions.copy()
    neighbour[4] = {"huge": np.full((3, 3), 1e300), "zeros": np.zeros((3, 3)),
                    "opposite": -1e6 * contributions[4]}[replacement]
    assert _neighbour_shift(contributions, neighbour, C) <= 2 * C * (1 + 1e-9)


def test_clipping_off_is_caught_by_sensitivity_check():
    rng = np.random.default_rng(0)
    contributions = rng.normal(size=(30, 4))
    neighbour = contributions.copy()
    neighbour[0] = 1e6
    assert _neighbour_shift(contributions, neighbour, None) > 2 * 1.0 * (1 + 1e-9)


def test_per_row_clipping_is_caught_by_sensitivity_check():
    # Clipping each row instead of each user's total: a user with 10 000 rows
    # moves the sum by far more than 2C.
    rng = np.random.default_rng(0)
    C = 1.0
    rows_d = rng.normal(size=(10, 2))
    rows_d2 = np.vstack([rows_d[1:], np.tile([5.0, 0.0], (10_000, 1))])
    per_row_d = clip_by_norm(rows_d, C).sum(axis=0)
    per_row_d2 = clip_by_norm(rows_d2, C).sum(axis=0)
    assert np.linalg.norm(per_row_d - per_row_d2) > 2 * C
    # per-user clipping (the 10 000 rows are one user's contribution) is within 2C
    users_d = rows_d[:, None, :]
    users_d2 = np.concatenate([rows_d[1:], rows_d2[9:].sum(axis=0, keepdims=True)])[:, None]
    assert _neighbour_shift(users_d, users_d2, C) <= 2 * C * (1 + 1e-9)
