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
        The ``MALLOC_TRIM_THRESHOLD_`` of the worker processes. ``None``
        (default): not set, glibc's own dynamic threshold. See Notes.
    **kwargs
        Passed on to ``distributed.LocalCluster``.

    Returns
    -------
    cluster : distributed.LocalCluster
        Connect with ``distributed.Client(cluster)``.

    Notes
    -----
    **Dashboard off** (``dashboard_address=None``): the dashboard and Dask's
    other HTTP pages (Prometheus metrics, task and worker pages) show task
    timings and partition sizes, statistics of the private data; with the
    dashboard off none of them is served. Pass ``dashboard_address=":8787"``
    to turn both on for a trusted session.

    **MALLOC_TRIM_THRESHOLD_.** Dask's nanny sets it to 65536, which turns
    off glibc's dynamic mmap threshold: every numpy temporary above 128 KiB
    is then page-faulted in again each round, and the measured per-round CPU
    time doubled. This helper unsets it for its workers (or sets the value
    you pass); a value in this process's environment still wins. The
    nanny's BLAS thread limits of 1 (skdpp's policy below 2048 features,
    :func:`skdpp.base.blas_threads`) are kept.

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
