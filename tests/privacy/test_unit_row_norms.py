"""unit_row_norms: the norms of unit_rows, bit for bit, on adversarial magnitudes."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from skdpp.privacy._clipping import unit_row_norms, unit_rows


@pytest.mark.parametrize("seed", range(5))
def test_unit_row_norms_equal_unit_rows_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n, p = 200, int(rng.integers(1, 40))
    M = rng.standard_normal((n, p)) * 10.0 ** rng.integers(-320, 308, size=(n, 1))
    M[:5] = 0.0
    M[5, 0] = np.inf
    M[6, -1] = -np.inf
    M[7, 0] = np.nan
    M[8] = np.nan
    M[9, 0], M[9, -1] = np.inf, np.nan
    M[10] = 1.7e308
    M[11] = 5e-324
    assert_array_equal(unit_row_norms(M), unit_rows(M)[1])
    assert_array_equal(unit_row_norms(M[:, ::2]), unit_rows(M[:, ::2])[1])  # strided


def test_unit_row_norms_edge_shapes():
    assert unit_row_norms(np.zeros((0, 3))).shape == (0,)
    assert_array_equal(unit_row_norms(np.zeros((2, 0))), [0.0, 0.0])
    with pytest.raises(ValueError, match="2-D"):
        unit_row_norms(np.zeros(3))
