"""Fit skdpp's estimators on a Dask cluster, when users outgrow one machine.

:func:`fit_distributed` runs an estimator's own fit template with a
:class:`DaskExecutor`: block functions run on the workers over partitions of
whole users, every release (every draw of privacy noise) once in the driver.
Released attributes and ``privacy_report_`` equal those of ``fit`` with the
same ``random_state`` up to the order of floating-point summation; personal
parts stay on the workers (:class:`DistributedPersonalParts`).

Needs ``pip install skdpp[dask]`` (``import skdpp`` never imports dask). See
the user guide page *Fitting on a Dask cluster* for the trust model: the
cluster sees the private data.
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
