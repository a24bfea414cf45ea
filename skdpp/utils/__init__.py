"""Utilities: the per-user data layer (:class:`UserIndex`, user blocks, segment
operations) and the randomness of a fit (:mod:`skdpp.utils._random`)."""

from ._grouped import (UserIndex, argsort_within, rank_within_user, segment_counts,
                       segment_mean, segment_outer_sum, segment_sum, split_within_users)

__all__ = ["UserIndex", "argsort_within", "rank_within_user", "segment_counts",
           "segment_mean", "segment_outer_sum", "segment_sum", "split_within_users"]
