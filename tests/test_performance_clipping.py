"""clip_by_norm / row_norms: the fast norm-and-scale path keeps the robust path's bounds.

The fast path (one ``sqrt(sum v**2)`` pass and a multiply) is taken by every
row whose computed norm lies in ``[1e-100, 1e100]``; the robust path
(:func:`unit_rows`, scaling by the largest entry first) by the others. Here
every row is also clipped through the robust path alone, on adversarial
magnitudes mixed with ordinary rows, and the two must agree to rounding and
give norms at most ``C`` (up to ``O(d eps)``).
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from skdpp.privacy import clip_by_norm, row_norms, unit_rows

TINY = np.finfo(float).tiny
HUGE = np.finfo(float).max


def _robust_clip(values, C):
    """The robust path alone: every row through unit_rows."""
    unit, norms = unit_rows(values)
    out = values.astype(float).copy()
    big = norms > C
    out[big] = unit[big] * C
    return out


def _adversarial_rows(d, rng):
    scales = [1.0, 1e-3, 1e3, 1e99, 1e100, 1e101, 1e150, 1e154, 1e155, 1e200, 1e300,
              1e-99, 1e-100, 1e-101, 1e-146, 1e-160, 1e-300, 1e-310, 5e-324, TINY]
    rows = [rng.normal(size=d) * s for s in scales]
    rows += [np.full(d, s) / np.sqrt(d) for s in (1e100, 1e-100, 0.5, 2.0)]  # at the edges
    rows += [np.r_[HUGE, np.zeros(d - 1)], np.r_[HUGE, -HUGE, np.zeros(d - 2)],
             np.r_[1e-160, 1.0, np.zeros(d - 2)],             # one square underflows
             np.r_[1e200, 1e-200, np.zeros(d - 2)],            # one square overflows
             np.r_[5e-324, -5e-324, np.zeros(d - 2)],
             np.r_[np.inf, 1.0, np.zeros(d - 2)], np.r_[-np.inf, np.inf, np.zeros(d - 2)],
             np.r_[np.inf, 1e300, np.zeros(d - 2)],
             np.zeros(d)]
    return np.array(rows)


@pytest.mark.parametrize("d", [2, 7, 64])
@pytest.mark.parametrize("C", [1e-100, 1e-3, 1.0, 2.5, 1e99, 1e200])
def test_fast_path_matches_robust_path_on_adversarial_norms(d, C):
    rng = np.random.default_rng(d)
    special = _adversarial_rows(d, rng)
    normal = rng.normal(size=(200, d)) * rng.lognormal(0, 2, size=(200, 1))
    values = np.concatenate([normal, special, normal[:50]])[rng.permutation(250 + len(special))]
    # underflow of negligible entries is fine (numpy ignores it by default)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        fast = clip_by_norm(values, C)
    robust = _robust_clip(values, C)
    assert np.all(np.isfinite(fast))
    # same bound: norms (measured robustly) at most C up to O(d eps)
    tol = 4 * d * np.finfo(float).eps
    for out in (fast, robust):
        assert np.all(unit_rows(out)[1] <= C * (1 + tol))
    # rows that need no clipping are returned bit for bit by both paths
    keep = unit_rows(values)[1] <= C
    assert_array_equal(fast[keep], values[keep])
    assert_array_equal(robust[keep], values[keep])
    # clipped rows agree to rounding, relative to C
    diff = np.abs(fast - robust).max(axis=1)
    assert np.all(diff[~keep] <= tol * C)


@pytest.mark.parametrize("d", [2, 7, 64])
def test_row_norms_fast_path_matches_robust_norms(d):
    rng = np.random.default_rng(d)
    values = np.concatenate([_adversarial_rows(d, rng), rng.normal(size=(100, d))])
    # underflow of negligible entries is fine (numpy ignores it by default)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        fast = row_norms(values)
    robust = unit_rows(values)[1]
    finite = np.isfinite(robust)
    assert_array_equal(np.isinf(fast), ~finite)
    tol = 4 * d * np.finfo(float).eps
    assert np.all(np.abs(fast[finite] - robust[finite]) <= tol * robust[finite])


@pytest.mark.parametrize("position", [0, 57, -1])
def test_nan_rows_among_normal_rows_raise(position):
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(size=(100, 3)), _adversarial_rows(3, rng)])
    values[position, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clip_by_norm(values, 1.0)


@pytest.mark.parametrize("d", [2, 7])
def test_clipping_never_signals_on_adversarial_finite_rows(d):
    # A caller running under np.errstate(all="raise") must not see an exception
    # that depends on one user's finite (or infinite) values: over- and
    # underflow of negligible terms is part of the computation, not an error.
    from skdpp.privacy._clipping import clipped_outer_sum
    rng = np.random.default_rng(d)
    rows = _adversarial_rows(d, rng)
    rows = np.concatenate([rows, np.r_[1e300, 1e-300, np.zeros(d - 2)][None]])
    with np.errstate(all="raise"):
        for C in (1e-100, 1.0, 1e200):
            assert np.all(np.isfinite(clip_by_norm(rows, C)))
            clipped_outer_sum(rows, rows[::-1], C)
        unit_rows(rows)
        row_norms(rows)
