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
        Threads per worker. skdpp's block functions are numpy-bound; one
        thread per worker and one worker per core avoids contention (and
        BLAS threads are pinned to 1 by Dask's defaults).
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
        Connect with ``distributed.Client(cluster)``; close both when done
        (or use them as context managers).

    Notes
    -----
    **Dashboard off** (``dashboard_address=None``): the dashboard shows task
    timings and partition sizes, statistics of the private data, to anyone
    who can reach its port. Dask's other HTTP pages (Prometheus metrics, JSON
    and info pages about tasks and workers) carry the same statistics: with
    the dashboard off, the scheduler and the workers serve none of them
    (``distributed.scheduler.http.routes`` and
    ``distributed.worker.http.routes`` empty). Pass
    ``dashboard_address=":8787"`` to turn both on for a trusted session.

    **MALLOC_TRIM_THRESHOLD_.** Dask's nanny starts worker processes with
    ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``)
    so that freed memory returns to the operating system quickly. Setting
    any glibc malloc threshold also turns off glibc's *dynamic* mmap
    threshold: every numpy temporary above 128 KiB is then a fresh ``mmap``,
    page-faulted in again on every round. skdpp's rounds allocate such
    temporaries per block (products of a block's rows with a ``d x k``
    matrix), and the measured per-round CPU time doubled. This helper removes
    the variable from the nanny's pre-spawn environment (or sets the value you
    pass), for the workers it starts; a variable already set in this process's
    environment still wins (Dask's precedence).

    **BLAS threads.** The nanny's pre-spawn environment also sets
    ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OMP_NUM_THREADS`` to 1,
    which is skdpp's in-process policy for fewer than 2048 features
    (:func:`skdpp.base.blas_threads`); this helper keeps those.

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
    if kwargs["dashboard_address"] is None:
        # Without a dashboard Dask still serves its other HTTP pages (Prometheus
        # metrics, JSON and info pages about tasks and workers): none of them.
        config.update({"distributed.scheduler.http.routes": [],
                       "distributed.worker.http.routes": []})
    with dask.config.set(config):
        return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                            memory_limit=memory_limit, **kwargs)
