"""The algorithm behind :class:`~skdpp.decomposition.AdaptiveWeightMF` (Krichene et al.
2023, Alg. 1-3): configuration, ``plan``, ``run`` and the personal-part fit, with
its kernels beside it (see ``docs/architecture.rst``).
"""
