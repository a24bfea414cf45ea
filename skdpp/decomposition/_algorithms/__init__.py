"""The algorithm behind :class:`~skdpp.decomposition.AdaptiveWeightMF` and its kernels."""
