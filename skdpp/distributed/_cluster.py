"""A local Dask cluster set up for skdpp's numpy workloads: :func:`local_cluster`."""

__all__ = ["local_cluster"]


def local_cluster(n_workers=2, threads_per_worker=1, *, memory_limit="auto",
                  malloc_trim_threshold=None, **kwargs):
    """Start a ``distributed.LocalCluster`` for skdpp (worker processes, no dashboard).

    Parameters
    ----------
    n_workers : int, default=2
        Worker processes.
    threads_per_worker : int, default=1
        Threads per worker (numpy-bound block functions: one per core).
    memory_limit : str, float or int, default="auto"
        Memory limit per worker (see ``LocalCluster``).
    malloc_trim_threshold : int or None, default=None
        The workers' ``MALLOC_TRIM_THRESHOLD_`` (``None``: unset, glibc's
        dynamic threshold; see Notes).
    **kwargs
        Passed on to ``distributed.LocalCluster``.

    Returns
    -------
    cluster : distributed.LocalCluster
        Connect with ``distributed.Client(cluster)``.

    Notes
    -----
    Dashboard and Dask's other HTTP pages off (``dashboard_address=None``):
    they show statistics of the private data (``dashboard_address=":8787"``
    for a trusted session). Unsets the nanny's ``MALLOC_TRIM_THRESHOLD_``
    (measured: it doubled the per-round CPU time; see
    :ref:`distributed_malloc`); keeps its BLAS thread limit of 1.

    Examples
    --------
    >>> from distributed import Client  # doctest: +SKIP
    >>> from skdpp.distributed import local_cluster
    >>> with local_cluster(n_workers=2) as cluster, Client(cluster) as client:  # doctest: +SKIP
    ...     pass
    """
    from ._blocks import _require_distributed

    LocalCluster = _require_distributed().LocalCluster
    import dask

    kwargs.setdefault("dashboard_address", None)
    kwargs.setdefault("processes", True)
    config = {
        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_":
            None if malloc_trim_threshold is None else int(malloc_trim_threshold)}
    if kwargs["dashboard_address"] is None:  # nor Dask's other HTTP pages
        config.update({"distributed.scheduler.http.routes": [],
                       "distributed.worker.http.routes": []})
    with dask.config.set(config):
        return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                            memory_limit=memory_limit, **kwargs)
