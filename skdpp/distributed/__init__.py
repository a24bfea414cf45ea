"""Fit skdpp's estimators on a Dask cluster, when users outgrow one machine.

The same estimators, the same algorithms and the same privacy guarantee as
``fit``: :func:`fit_distributed` runs an estimator's own fit template with a
:class:`DaskExecutor`, whose block functions run on the workers over
partitions of whole users, while every release (and so every draw of privacy
noise) happens once, in the driver process. Released attributes and
``privacy_report_`` equal those of ``fit`` with the same ``random_state`` up
to the order of floating-point summation; personal parts stay on the workers
(:class:`DistributedPersonalParts`).

Needs the optional dependencies ``pip install skdpp[dask]`` (``import skdpp``
never imports dask; this module imports it when first used). See the user guide page *Fitting on a Dask cluster* for
the trust model: the cluster sees the private data.
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
