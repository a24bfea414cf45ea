"""The fast JL selection scores (issue 20, item 6) release bit-identical values.

:func:`skdpp.linear_model._algorithms.jl_kernels.candidate_user_losses` computes the
projections and the direction-grid losses once per *distinct* row and counts
them per user with one sparse byte-counter product. ``reference_losses`` below
is the kernel before that change, row by row and unchunked (the same
floating-point operations on the same operands): every score term, and so
every fitted attribute, must be equal bit for bit.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from skdpp import JLMarginClassifier
from skdpp.linear_model._algorithms import jl_margin as jlc
from skdpp.linear_model._algorithms import jl_kernels as ms
from skdpp.utils._grouped import UserBlock


def reference_losses(seg, yZ, candidates, directions, threshold):
    """The old kernel: every row's projections, dots and 0/1 losses, counted in int64."""
    yZ = np.asarray(yZ, dtype=np.float64)
    n_rows, jl_dim = yZ.shape
    n_cand, _, k = candidates.shape
    n_dir = directions.shape[0]
    out = np.zeros((n_cand, seg.n_users))
    if n_rows == 0:
        return out
    with np.errstate(all="ignore"):
        flat = candidates.transpose(1, 0, 2).reshape(jl_dim, n_cand * k)
        yF = (yZ @ flat).reshape(n_rows, n_cand, k)
        sums = seg.segment_sum_wide(yZ)
        own = ms._unit((sums @ flat).reshape(seg.n_users, n_cand, k))
        loss_own = np.einsum("nbk,nbk->nb", yF, own[seg.row_user]) <= threshold
        left = yF.reshape(n_rows * n_cand, k)
        if left.shape[0] == 1:
            dots = left @ directions.T
        else:
            dots = left @ np.ascontiguousarray(directions.T)
        grid = (dots <= threshold).reshape(n_rows, n_cand, n_dir)
    users = seg.row_user
    own_counts = np.zeros((seg.n_users, n_cand), dtype=np.int64)
    np.add.at(own_counts, users, loss_own)
    grid_counts = np.zeros((seg.n_users, n_cand, n_dir), dtype=np.int64)
    np.add.at(grid_counts, users, grid)
    best = np.minimum(own_counts, grid_counts.min(axis=-1)).astype(np.float32)
    out[:] = (best / np.maximum(seg.counts, 1)[:, None]).T
    return np.clip(out, 0.0, 1.0, out=out)


def block(codes, n_users):
    """A block of users ``0 .. n_users - 1`` whose rows (sorted codes) come in order."""
    counts = np.bincount(codes, minlength=n_users)
    return UserBlock(np.zeros((codes.size, 1)), None, np.arange(codes.size),
                     np.arange(n_users), np.zeros(n_users, dtype=np.uint64), counts)


def ratings_like(rng, sizes, n_items=12, jl_dim=5, integer=False):
    """Rows drawn from a few items (many equal rows, within and across users)."""
    codes = np.repeat(np.arange(sizes.size), sizes)
    items = rng.standard_normal((n_items, jl_dim))
    if integer:  # exact products: dots exactly at the threshold 0
        items = rng.integers(-2, 3, (n_items, jl_dim)).astype(float)
    Z = items[rng.integers(0, n_items, codes.size)]
    y = np.where(rng.random(codes.size) < 0.5, -1.0, 1.0)
    return codes, y[:, None] * Z


def candidates_for(rng, jl_dim, k, n_cand, integer=False):
    if integer:
        return rng.integers(-1, 2, (n_cand, jl_dim, k)).astype(float)
    return jlc.random_candidates(rng.standard_normal((n_cand, jl_dim, k)))


CASES = [
    # sizes, k, n_dir, n_cand, threshold, integer
    (np.array([0, 1, 2, 9, 1, 30, 0, 5, 17, 1]), 3, 64, 7, 0.0, False),
    (np.array([3, 300, 2, 600, 1]), 3, 13, 5, 0.0, False),     # users > 255 rows
    (np.array([4, 7, 1, 12]), 3, 64, 6, 0.0, True),            # exact ties at 0
    (np.array([4, 7, 1, 12]), 3, 9, 6, 0.05, False),
    (np.array([5, 8, 2]), 1, 2, 4, 0.0, False),
    (np.array([6, 3, 9]), 4, 20, 3, 0.1, False),
    (np.array([1]), 3, 8, 1, 0.0, False),                      # one row, one candidate
    (np.array([1]), 3, 8, 4, 0.0, False),
    (np.array([5]), 3, 8, 1, 0.0, False),
]


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])  # 0: row by row; 1: distinct rows
@pytest.mark.parametrize("case", range(len(CASES)))
def test_losses_equal_the_row_by_row_kernel_bit_for_bit(monkeypatch, case, fraction):
    monkeypatch.setattr(ms, "_DISTINCT_FRACTION", fraction)
    sizes, k, n_dir, n_cand, threshold, integer = CASES[case]
    rng = np.random.default_rng(case)
    codes, yZ = ratings_like(rng, sizes, integer=integer)
    seg = block(codes, sizes.size)
    cands = candidates_for(rng, yZ.shape[1], k, n_cand, integer=integer)
    dirs = jlc.direction_grid(k, n_dir, np.random.default_rng(case))
    want = reference_losses(seg, yZ, cands, dirs, threshold)
    got = ms.candidate_user_losses(seg, yZ, cands, dirs, threshold)
    assert_array_equal(got, want)
    if sizes.size > 1:  # the scores move with the data: the comparison is not vacuous
        assert np.ptp(got) > 0


@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_unique_rows_and_small_chunks_equal_the_reference(monkeypatch, fraction):
    """Every row distinct (row by row by default, or forced through the distinct
    rows), one candidate per chunk, tiny steps."""
    monkeypatch.setattr(ms, "_DISTINCT_FRACTION", fraction)
    rng = np.random.default_rng(7)
    sizes = np.array([3, 20, 1, 40, 6])
    codes = np.repeat(np.arange(sizes.size), sizes)
    yZ = rng.standard_normal((codes.size, 6))
    seg = block(codes, sizes.size)
    cands = candidates_for(rng, 6, 3, 9)
    dirs = jlc.direction_grid(3, 11, np.random.default_rng(7))
    want = reference_losses(seg, yZ, cands, dirs, 0.0)
    monkeypatch.setattr(ms, "_GRID_TABLE_BYTES", 1)
    monkeypatch.setattr(ms, "_GRID_STEP_ELEMENTS", 5)
    monkeypatch.setattr(ms._GridCounter, "CAP", 4)
    assert_array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 0.0), want)


def test_broken_multiplicity_is_caught(monkeypatch):
    """Counting a distinct row once per piece (dropping its multiplicity) changes
    the scores of users who hold equal rows: the reference comparison fails."""
    rng = np.random.default_rng(3)
    codes, yZ = ratings_like(rng, np.array([30, 25, 40]), n_items=4)
    seg = block(codes, 3)
    cands = candidates_for(rng, yZ.shape[1], 3, 6)
    dirs = jlc.direction_grid(3, 16, np.random.default_rng(3))
    want = reference_losses(seg, yZ, cands, dirs, 0.0)
    assert_array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 0.0), want)
    real_init = ms._GridCounter.__init__

    def once(self, *args):
        real_init(self, *args)
        self.owner.data[:] = 1          # broken: multiplicity dropped

    monkeypatch.setattr(ms._GridCounter, "__init__", once)
    assert not np.array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 0.0), want)


def test_byte_counters_overflow_without_pieces(monkeypatch):
    """With pieces of 256 rows a byte counter wraps (256 losses count as 0): the
    CAP of 255 rows per piece is what keeps the counts exact."""
    rng = np.random.default_rng(4)
    codes = np.zeros(300, dtype=int)
    yZ = np.tile(rng.standard_normal((1, 4)), (300, 1))
    seg = block(codes, 1)
    cands = candidates_for(rng, 4, 3, 2)
    dirs = jlc.direction_grid(3, 8, np.random.default_rng(4))
    want = reference_losses(seg, yZ, cands, dirs, 1e9)      # every row loses
    assert_array_equal(want, 1.0)
    assert_array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 1e9), want)
    monkeypatch.setattr(ms._GridCounter, "CAP", 300)
    monkeypatch.setattr(ms, "_dot3", lambda F, U: np.full(F.shape[:2], np.inf))  # own loses never
    assert not np.array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 1e9), want)


def test_dot3_adds_in_the_einsum_order():
    """The k = 3 own-direction dots (one path, the faster) equal einsum bit for bit
    on values of every magnitude; the natural order (a broken variant) does not."""
    rng = np.random.default_rng(0)
    F = rng.standard_normal((64, 64, 3)) * 2.0 ** rng.integers(-40, 40, (64, 64, 3))
    U = rng.standard_normal((64, 64, 3))
    assert_array_equal(ms._dot3(F.copy(), U), ms._dot_einsum(F, U))
    natural = (F[..., 0] * U[..., 0] + F[..., 1] * U[..., 1]) + F[..., 2] * U[..., 2]
    assert not np.array_equal(natural, ms._dot_einsum(F, U))


def test_distinct_rows_are_bitwise_and_survive_hash_collisions(monkeypatch):
    A = np.array([[0.0, 1.0], [-0.0, 1.0], [0.0, 1.0], [np.nan, 2.0], [np.nan, 2.0],
                  [-0.0, -1.0], [3.0, -2.0]])
    for multiplier in (ms._HASH_MULTIPLIER, np.uint64(0)):  # 0: every hash collides
        monkeypatch.setattr(ms, "_HASH_MULTIPLIER", multiplier)
        first, key = ms._distinct_rows(A)
        assert first.size == 5      # 0.0 and -0.0 differ bitwise; NaN rows are equal
        assert_array_equal(A[first][key].view(np.uint64), A.view(np.uint64))
        order, n_pairs = ms._negation_order(A[first].view(np.uint64))
        rows = A[first][order]
        mirror = first.size - n_pairs
        assert_array_equal(rows[mirror:].view(np.uint64), (-rows[:n_pairs]).view(np.uint64))
        if multiplier:              # (0, 1) and (-0, -1) are negations of each other
            assert n_pairs == 1


def test_negated_rows_are_paired_on_ratings_data_and_a_wrong_pairing_is_caught(monkeypatch):
    """Items rated both ways give pairs of negated rows, whose grid losses come from
    one product (-g <= t iff g >= -t, exact ties included); pairing rows that are
    not negations of each other changes the scores."""
    rng = np.random.default_rng(5)
    codes, yZ = ratings_like(rng, np.array([20, 31, 12]), n_items=6)
    first, key = ms._distinct_rows(yZ)
    assert ms._negation_order(yZ[first].view(np.uint64))[1] >= 3
    seg = block(codes, 3)
    cands = candidates_for(rng, yZ.shape[1], 3, 5)
    dirs = jlc.direction_grid(3, 16, np.random.default_rng(5))
    want = reference_losses(seg, yZ, cands, dirs, 0.0)
    assert_array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 0.0), want)
    codes_i, yZ_i = ratings_like(rng, np.array([20, 31, 12]), n_items=6, integer=True)
    cands_i = candidates_for(rng, yZ.shape[1], 3, 5, integer=True)  # exact ties g = 0
    assert_array_equal(ms.candidate_user_losses(block(codes_i, 3), yZ_i, cands_i, dirs, 0.0),
                       reference_losses(block(codes_i, 3), yZ_i, cands_i, dirs, 0.0))
    real = ms._negation_order

    def shifted(words):             # broken: the negations in the reverse order
        order, n = real(words)
        order[order.size - n:] = order[order.size - n:][::-1].copy()
        return order, n

    monkeypatch.setattr(ms, "_negation_order", shifted)
    assert not np.array_equal(ms.candidate_user_losses(seg, yZ, cands, dirs, 0.0), want)


def _fitted(est):
    return {k: v for k, v in vars(est).items()
            if k.endswith("_") and not k.startswith("_") and isinstance(v, np.ndarray)}


@pytest.mark.parametrize("params", [dict(), dict(margin=0.1), dict(n_classes=3),
                                    dict(n_components=2, margin=0.05)])
def test_fit_equals_the_fit_with_the_reference_kernel(monkeypatch, params):
    """Whole fits (default margin='auto', a fixed margin, 3 classes, the k = 2 path)
    on ratings-like data: every fitted array is bit-identical."""
    params = dict(params)
    n_classes = params.pop("n_classes", 2)
    rng = np.random.default_rng(11)
    n_users, n_items = 60, 40
    counts = rng.integers(3, 30, n_users)
    groups = np.repeat(np.arange(n_users), counts)
    items = rng.integers(0, n_items, groups.size)
    genres = (rng.random((n_items, 6)) < 0.3).astype(float)
    X = np.column_stack([genres[items], np.round(rng.normal(1990, 10, n_items))[items]])
    y = rng.integers(0, n_classes, groups.size)
    classes = np.arange(n_classes)
    for seed in (0, 1):
        est = JLMarginClassifier(epsilon=4.0, random_state=seed, classes=classes,
                                 n_candidates=16, **params)
        new = _fitted(est.fit(X, y, groups=groups))
        with monkeypatch.context() as m:
            m.setattr(ms, "candidate_user_losses", reference_losses)
            old = _fitted(JLMarginClassifier(epsilon=4.0, random_state=seed, classes=classes,
                                             n_candidates=16, **params).fit(X, y, groups=groups))
        assert new.keys() == old.keys() and "embeddings_" in new
        for name in new:
            assert_array_equal(new[name], old[name], err_msg=name)
