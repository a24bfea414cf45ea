"""Fit skdpp's estimators on a Dask cluster, when users outgrow one machine.

:func:`fit_distributed` runs an estimator's own fit template with block
functions on the workers and every release in the driver; see
:ref:`distributed` (trust model: the cluster sees the private data). Needs
``pip install skdpp[dask]`` (``import skdpp`` never imports dask).
"""

from ._blocks import UserBlocks
from ._cluster import local_cluster
from ._executor import DaskExecutor
from ._fit import DistributedPersonalParts, fit_distributed, predict_distributed

__all__ = [
    "DaskExecutor",
    "DistributedPersonalParts",
    "UserBlocks",
    "fit_distributed",
    "local_cluster",
    "predict_distributed",
]
