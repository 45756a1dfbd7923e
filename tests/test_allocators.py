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


def test_classify_remembers_by_its_arguments_the_same_answers_and_a_bounded_number() -> None:
    """classify() keeps its answers by (resource, extra prefixes): a kept answer is the one the
    patterns give, another config's prefixes get their own, and a review naming thousands of
    resources (the tenant's words) never keeps more than the bound, nor a name over 512 bytes."""
    allocators._CLASSIFIED.clear()
    for name in ("cpu", "memory", "nvidia.com/gpu", "rdma/hca", "example.com/roce-pool", "example.com/disk"):
        assert allocators.classify(name) == allocators._classify(name, ())
        assert allocators.classify(name) == allocators._classify(name, ())  # now from the memo
    found = allocators.classify("example.com/disk", ("example.com/",))
    assert found is not None and "rdmaResourcePrefixes" in found.what  # not the () answer, None
    for i in range(3 * allocators._CLASSIFIED_MAX):
        allocators.classify(f"example.com/r{i}")
        assert len(allocators._CLASSIFIED) <= allocators._CLASSIFIED_MAX
    allocators.classify("example.com/" + "x" * 600)
    assert ("example.com/" + "x" * 600, ()) not in allocators._CLASSIFIED
