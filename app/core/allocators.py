"""Who hands a pod its RDMA NICs: the one home of the allocators the webhook knows.

A pod whose NICs come from an allocator (a device plugin's extended resource, a DRA claim) has
exactly the devices it was given. Mounting the node's whole /dev/infiniband and making the
container privileged would open every HCA of the node to it and defeat the allocation (NCCL
with `NCCL_IB_HCA=^mlx5_0` would then use HCAs the allocator gave to another pod), so such a pod
gets neither, nor SYS_ADMIN; IPC_LOCK is all its devices need. The names below come from each
plugin's own documentation (docs/configuration.md, "NICs from an allocator", cites them);
`config.rdmaResourcePrefixes` adds a cluster's own.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

# (resource name, or prefix ending in "/", who advertises it). First match wins: the exact names
# before the prefixes of their domain.
KNOWN: tuple[tuple[str, str], ...] = (
    ("nvidia.com/hostdev", "the NVIDIA Network Operator's host-device plugin"),
    ("vpc.amazonaws.com/efa", "the AWS EFA device plugin"),
    ("rdma/", "the RDMA shared device plugin"),
    ("openshift.io/", "OpenShift's SR-IOV network device plugin"),
    ("intel.com/", "the SR-IOV network device plugin (its default prefix)"),
    ("nvidia.com/", "an SR-IOV network device plugin pool (NVIDIA Network Operator)"),
)
# nvidia.com/ also names the GPU operator's resources: GPUs, their shared and MIG forms.
_GPU = re.compile(r"nvidia\.com/(?:gpu(?:\..*)?|mig-.*|pgpu|vgpu)$")
# Words that make an unknown resource look like a NIC pool (its name's tokens).
_NIC_WORDS = ("rdma", "hca", "roce", "ib", "sriov", "hostdev", "efa")
_TOKENS = re.compile(r"[^a-z0-9]+")
MAX_RESOURCES = 64  # names looked at per pod (the API server bounds a pod; this bounds our walk)


class Allocation(NamedTuple):
    """Where a pod's NICs come from: `what` for the status annotation and explain, `assumed`
    when the webhook guessed (an unknown NIC-looking resource, a DRA claim)."""

    what: str
    assumed: bool
    resource: str


# classify() by its arguments: a cluster has a few resource names, every pod lists several
# (cpu and memory cost ~1 µs each through the patterns below). Bounded: a review may name any.
_CLASSIFIED: dict[tuple[str, tuple[str, ...]], Allocation | None] = {}
_CLASSIFIED_MAX = 1024


def classify(resource: str, extra_prefixes: tuple[str, ...] = ()) -> Allocation | None:
    """The allocator behind an extended resource, or None when it is not a NIC resource."""
    key = (resource, extra_prefixes)
    if key in _CLASSIFIED:
        return _CLASSIFIED[key]
    found = _classify(resource, extra_prefixes)
    if len(resource) <= 512:  # the API server's bound on a qualified name is 317 bytes
        if len(_CLASSIFIED) >= _CLASSIFIED_MAX:
            _CLASSIFIED.clear()
        _CLASSIFIED[key] = found
    return found


def _classify(resource: str, extra_prefixes: tuple[str, ...]) -> Allocation | None:
    if _GPU.match(resource):
        return None
    for prefix in extra_prefixes:
        if prefix and resource.startswith(prefix):
            return Allocation(f"the allocator of {prefix} (config rdmaResourcePrefixes)", False, resource)
    for name, who in KNOWN:
        if resource == name or (name.endswith("/") and resource.startswith(name)):
            return Allocation(who, False, resource)
    tokens = _TOKENS.split(resource.lower().rpartition("/")[2])
    if any(t == w or (len(w) > 2 and t.startswith(w)) for t in tokens for w in _NIC_WORDS):
        return Allocation("an allocator hostnet-rdma does not know", True, resource)
    return None


def _claims(spec: dict[str, Any]) -> list[str]:
    claims = spec.get("resourceClaims")
    names = (
        [str(c.get("name")) for c in claims[:MAX_RESOURCES] if isinstance(c, dict)] if isinstance(claims, list) else []
    )
    return names


def pod_claims(pod: dict[str, Any]) -> list[str]:
    """The names of the pod's DRA resource claims (spec.resourceClaims), bounded."""
    spec = pod.get("spec")
    return _claims(spec) if isinstance(spec, dict) else []


def claims_devices(container: dict[str, Any]) -> bool:
    """The container uses one of the pod's DRA claims (resources.claims): devices handed out as
    an extended resource's are, GPUs or NICs (which, admission cannot see: the claim's device
    class is in its ResourceClaimTemplate)."""
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, dict) else None
    return isinstance(claims, list) and any(isinstance(c, dict) and c.get("name") for c in claims[:MAX_RESOURCES])


def allocation(pod: dict[str, Any], extra_prefixes: tuple[str, ...], dra_nics: bool) -> Allocation | None:
    """The allocator that hands this pod its NICs: a known or NIC-looking extended resource of
    any container, else (when `dra_nics`) a DRA resource claim, whose device class admission
    cannot see."""
    spec = pod.get("spec") or {}
    seen = 0
    for c in spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        resources = c.get("resources") or {}
        for kind in ("limits", "requests"):
            for key in resources.get(kind) or {}:
                seen += 1
                if seen > MAX_RESOURCES:
                    break
                found = classify(str(key), extra_prefixes)
                if found is not None:
                    return found
    claims = _claims(spec)
    if claims and dra_nics:
        return Allocation(f"a DRA resource claim ({', '.join(claims[:3])}), taken to carry the NICs", True, "")
    return None


def is_nic_resource(resource: str, extra_prefixes: tuple[str, ...] = ()) -> bool:
    return classify(resource, extra_prefixes) is not None


# DRA: what a claim's devices are, by their driver (a DeviceClass's `device.driver == "..."`
# selector) or a known DeviceClass name. Admission sees neither (they are other objects); the
# preview reads them where the file holds the ResourceClaimTemplate and DeviceClass.
DRA_DRIVERS: dict[str, tuple[str, str]] = {
    "dra.net": ("NIC", "dranet"),
    "gpu.nvidia.com": ("GPU", "NVIDIA's DRA driver"),
}
DRA_CLASSES: dict[str, str] = {"gpu.nvidia.com": "gpu.nvidia.com", "dranet": "dra.net"}
