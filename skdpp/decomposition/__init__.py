"""Private matrix factorization with personal user embeddings."""

from ._adaptive_mf import AdaptiveWeightMF

__all__ = ["AdaptiveWeightMF"]
