"""Fixtures of the virtual-cluster tests: whether this machine makes clusters, and that none leaves anything."""

from __future__ import annotations

import os

import pytest

from helpers import OwnClusters, assert_left_nothing
from mailrail.errors import ClusterError


@pytest.fixture(scope="session")
def cluster_support() -> str:
    """How this machine makes clusters ("admin" or "userns"); the cluster tests skip, saying why, without one."""
    from mailrail_tools.cluster.privileges import cluster_privileges
    from mailrail_tools.cluster.spec import ClusterSpec
    from mailrail_tools.cluster.virtual import VirtualCluster

    try:
        privileges = cluster_privileges()
        if privileges == "admin":
            with VirtualCluster(ClusterSpec(nodes=1)):
                pass
    except ClusterError as error:
        pytest.skip(f"no virtual cluster on this machine: {error}")
    return privileges


@pytest.fixture(scope="session")
def as_root(cluster_support) -> None:
    """Tests that use memory cgroups or drop privileges themselves need real root."""
    if cluster_support != "admin" or os.geteuid() != 0:
        pytest.skip("needs root (memory cgroups, or dropping privileges for the test)")


@pytest.fixture
def admin(cluster_support) -> None:
    """Tests that build a cluster in their own process need root or the capabilities (not a user namespace)."""
    if cluster_support != "admin":
        pytest.skip("builds a cluster in the test's own process: needs root or CAP_NET_ADMIN and CAP_SYS_ADMIN")


@pytest.fixture
def leaves_nothing(cluster_support):
    """The test may build clusters, but when it ends none of its own has left anything behind: the clusters
    this test's process and the processes it started made (:class:`helpers.OwnClusters`), never the machine's
    others (another job's, built or removed meanwhile)."""
    with OwnClusters() as own:
        yield own
        assert_left_nothing(own)
