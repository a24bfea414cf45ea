"""The canonical order's row hashes are a function of the rows' values only.

The dtype of ``X`` or ``y`` belongs to the whole array, and one user can change
it (a single rating of 3.5 makes integer ratings float; a float label makes
integer labels float). A dtype-dependent hash would then reorder every user's
rows, move every keyed split, and so change every release and every other
user's personal part.
"""

import numpy as np
import pytest

from skdpp import PrivateFedRepRegressor
from skdpp.utils._random import row_hashes


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint16, np.float32, bool])
def test_row_hashes_ignore_the_dtype(dtype):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(50, 4)).astype(dtype)
    y = rng.integers(0, 2, size=50).astype(dtype)
    np.testing.assert_array_equal(
        row_hashes(X, y), row_hashes(X.astype(np.float64), y.astype(np.float64)))


def test_row_hashes_still_tell_rows_apart():
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [-0.0, 1.0]])
    h = row_hashes(X, np.array([1, 1, 2, 1]))
    assert h[0] != h[1] and h[0] != h[2]
    assert h[0] == h[3]  # -0.0 is 0.0


def test_a_fit_does_not_depend_on_the_dtype_of_y():
    # Integer targets, and the same targets as floats (what one user's rating of
    # 3.5 does to the whole array): the same keyed splits, hence the same fit.
    rng = np.random.default_rng(1)
    n_users, m, d = 40, 6, 5
    g = np.repeat(np.arange(n_users), m)
    X = rng.normal(size=(n_users * m, d))
    y = rng.integers(1, 6, size=n_users * m)
    kw = dict(epsilon=2.0, n_components=2, random_state=0)
    a = PrivateFedRepRegressor(**kw).fit(X, y, groups=g)
    b = PrivateFedRepRegressor(**kw).fit(X, y.astype(np.float64), groups=g)
    np.testing.assert_array_equal(a.components_, b.components_)
    for name in a._personal_attributes:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
