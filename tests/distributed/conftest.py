"""One 2-worker local Dask cluster shared by the distributed tests."""

import pytest


@pytest.fixture(scope="package")
def client():
    pytest.importorskip("distributed")
    from distributed import Client

    from skdpp.distributed import local_cluster

    with local_cluster(n_workers=2, threads_per_worker=1) as cluster, \
            Client(cluster) as c:
        yield c
