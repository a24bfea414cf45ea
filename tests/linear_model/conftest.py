"""Fixtures shared by the FedRep and AltMin tests."""

import pytest

from skdpp.datasets import make_shared_representation_regression


@pytest.fixture(scope="module")
def medium():
    """Seeded shared-representation data: 3000 users, d=10, k=2, 10+10 rows each."""
    return make_shared_representation_regression(
        n_users=3000, n_features=10, n_components=2, n_samples_per_user=10,
        n_test_samples_per_user=10, random_state=0)
