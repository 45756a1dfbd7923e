"""Who hands a pod its NICs (app/core/allocators.py): the resource names each allocator's own docs
give, GPU resources of the same domain left out, NIC-looking names assumed, DRA claims."""

from __future__ import annotations

import pytest

from app.core import allocators


@pytest.mark.parametrize(
    ("resource", "who"),
    [
        ("rdma/rdma_shared_device_a", "the RDMA shared device plugin"),
        ("rdma/ib", "the RDMA shared device plugin"),  # Azure's SR-IOV plugin configured with prefix rdma
        ("nvidia.com/hostdev", "the NVIDIA Network Operator's host-device plugin"),
        ("nvidia.com/rdma-vf", "an SR-IOV network device plugin pool (NVIDIA Network Operator)"),  # OCI
        ("nvidia.com/sriovlegacy", "an SR-IOV network device plugin pool (NVIDIA Network Operator)"),
        ("openshift.io/mlxnics", "OpenShift's SR-IOV network device plugin"),
        ("intel.com/intel_sriov_netdevice", "the SR-IOV network device plugin (its default prefix)"),
        ("vpc.amazonaws.com/efa", "the AWS EFA device plugin"),
    ],
)
def test_known_allocators(resource: str, who: str) -> None:
    found = allocators.classify(resource)
    assert found is not None and found.what == who and not found.assumed


@pytest.mark.parametrize(
    "resource", ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-3g.40gb", "amd.com/gpu", "cpu",
                 "example.com/fpga", "example.com/ibm-crypto", "hugepages-2Mi"],
)  # fmt: skip
def test_not_nic_resources(resource: str) -> None:
    assert allocators.classify(resource) is None


@pytest.mark.parametrize("resource", ["example.com/roce_vf", "acme.io/ib", "acme.io/hca-pool", "acme.io/sriov0",
                                      "acme.io/efa", "acme.io/my-rdma-nics"])  # fmt: skip
def test_nic_looking_resources_are_assumed(resource: str) -> None:
    found = allocators.classify(resource)
    assert found is not None and found.assumed


def test_a_clusters_own_prefix_is_known_and_dra_claims_follow_the_config() -> None:
    assert allocators.classify("acme.io/nics", ("acme.io/",)) == allocators.Allocation(
        "the allocator of acme.io/ (config rdmaResourcePrefixes)", False, "acme.io/nics"
    )
    pod = {"spec": {"resourceClaims": [{"name": "nics"}], "containers": [{"name": "c"}]}}
    found = allocators.allocation(pod, (), dra_nics=True)
    assert found is not None and found.assumed and "DRA resource claim (nics)" in found.what
    assert allocators.allocation(pod, (), dra_nics=False) is None
