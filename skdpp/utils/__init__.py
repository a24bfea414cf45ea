"""Utilities: the per-user data layer (:class:`UserIndex` and segment operations)."""

from ._grouped import (
    UserIndex,
    argsort_within,
    batched_solve,
    rank_within_user,
    segment_counts,
    segment_mean,
    segment_outer_sum,
    segment_sum,
    split_within_users,
)

__all__ = [
    "UserIndex",
    "argsort_within",
    "batched_solve",
    "rank_within_user",
    "segment_counts",
    "segment_mean",
    "segment_outer_sum",
    "segment_sum",
    "split_within_users",
]
