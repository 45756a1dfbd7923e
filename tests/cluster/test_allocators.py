"""Tier 5: a pod whose NICs come from an allocator the cluster runs is never made privileged
(issue 52), held to the real thing: a device plugin speaking the kubelet's device-plugin API on
the kubelet's socket (`nvidia.com/hostdev`, as the Network Operator's host-device plugin names
it), and a DRA driver's kubelet plugin whose devices the API server's `resource.k8s.io/v1`
claims and the real scheduler allocates. Both are `tests/cluster/allocators/` (Go, the
Kubernetes release's own `k8s.io/kubelet` and `k8s.io/dynamic-resource-allocation` packages),
one of each per node, handing out character devices (the null device's numbers) from a
directory of the run's under /dev as /dev/infiniband/uverbs<i>.

Per allocator, a two-pod Indexed Job with plain torchrun on the host network (one pod per
node) asks for one device per pod; each pod lists /dev/infiniband before it trains. Shown:
the job completes; the stored pods have IPC_LOCK but no privileged, no SYS_ADMIN and no
InfiniBand hostPath; the device the allocator gave is in the container; and `hostnet-rdma
explain POD` names the allocator and what was left out.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster import jobs
from tests.cluster.conftest import torch_sites
from tests.cluster.harness import Cluster, hostdev_dir, log, sh
from tests.cluster.release import ON, image_ref
from tests.cluster.test_cluster import dump, logs, pods, wait_job
from tests.cluster.timings import TIMINGS

pytestmark = pytest.mark.cluster

RESOURCE = "nvidia.com/hostdev"
DRIVER = "nic.hostnet-rdma.test"
DEVICES = 2  # per node
PORTS = {"hostdev": 29430, "dra": 29431}
# `ls -l /dev/infiniband/` and the allocator's env, before torchrun (the wrapper's shim catches it).
CHECK = "ls -l /dev/infiniband/ && env | grep ^HOSTNET_RDMA_TEST_ | sort && "
DEVICE_LINE = re.compile(r"^c[rwx-]{9}\S*\s.*\s1,\s+3 .* uverbs(\d)$", re.M)


def _stop(c: Cluster, names: list[str]) -> None:
    for name in names:
        pid = c.state.pids.pop(name, None)
        if pid is not None:
            sh("kill", str(pid), check=False)
    c.save()


@pytest.fixture(scope="module")
def allocators(cluster: Cluster, release: dict[str, Any]) -> Iterator[None]:
    """The device plugin and the DRA kubelet plugin on every node, ready: each node's
    allocatable lists the devices, and each node's ResourceSlice is published."""
    t0 = time.monotonic()
    binary = cluster.bin / "hostnet-rdma-test-allocators"
    assert binary.exists(), f"{binary} is not built (scripts/testenv/build-binaries.sh builds it)"
    devdir = hostdev_dir(cluster.state.tag)
    devdir.mkdir(exist_ok=True)
    for i in range(DEVICES):
        if not (devdir / f"uverbs{i}").exists():
            sh("mknod", str(devdir / f"uverbs{i}"), "c", "1", "3")
    started: list[str] = []
    try:
        for node in cluster.nodes:
            kubelet_dir = str(cluster.node_dir(node) / "kubelet")
            started.append(f"{node}-hostdev-plugin")
            cluster.spawn(started[-1], [
                # The node's /var/lib/kubelet/device-plugins is its own directory (harness.py).
                str(binary), "deviceplugin", "-kubelet-dir", str(cluster.node_dir(node)), "-resource", RESOURCE,
                "-dev-dir", str(devdir), "-devices", str(DEVICES),
            ])  # fmt: skip
            started.append(f"{node}-dra-plugin")
            cluster.spawn(started[-1], [
                str(binary), "dra", "-kubelet-dir", kubelet_dir, "-node", node, "-kubeconfig", str(cluster.kubeconfig),
                "-driver", DRIVER, "-dev-dir", str(devdir), "-cdi-dir", str(cluster.node_dir(node) / "cdi-specs"),
                "-devices", str(DEVICES),
            ])  # fmt: skip

        def ready() -> bool:
            nodes = cluster.kubectl_json("get", "nodes")["items"]
            slices = cluster.kubectl_json("get", "resourceslices")["items"]
            published = {s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == DRIVER}
            return published == set(cluster.nodes) and all(
                n["status"].get("allocatable", {}).get(RESOURCE) == str(DEVICES) for n in nodes
            )

        try:
            cluster._wait(ready, 60, "the allocators' devices on every node")
        except RuntimeError:
            for name in started:
                log(f"--- {name}\n" + (cluster.logs / f"{name}.log").read_text()[-2000:])
            raise
        TIMINGS["device plugin + DRA driver on both nodes, devices listed"] = time.monotonic() - t0
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }))  # fmt: skip
        yield
    finally:
        _stop(cluster, started)


def _job(cluster: Cluster, allocator: str) -> list[dict[str, Any]]:
    name = f"nic-{allocator}"
    objs = jobs.indexed_job(ON, name, image_ref(cluster, "train"), torch_sites(), PORTS[allocator])
    spec = objs[-1]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    container["command"][-1] = CHECK + container["command"][-1]
    if allocator == "hostdev":
        container["resources"] = {"limits": {RESOURCE: "1"}}
    else:
        objs.insert(0, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "nic", "namespace": ON},
            "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": DRIVER}}]}}},
        })  # fmt: skip
        spec["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
        container["resources"] = {"claims": [{"name": "nic"}]}
    return objs


@pytest.fixture(scope="module")
def started(cluster: Cluster, allocators: None) -> float:
    """Both jobs at once (they wait on pods most of their time)."""
    for allocator in PORTS:
        jobs.apply(cluster, _job(cluster, allocator))
    return time.monotonic()


def _explain(cluster: Cluster, pod: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "explain", pod, "-n", ON, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _check(cluster: Cluster, allocator: str, started: float, allocated: dict[str, str] | None) -> list[str]:
    """The job completed; each stored pod is unprivileged with IPC_LOCK; each container saw the
    device `allocated[pod]` names (None: the one its device plugin's env names). Returns the
    explain outputs."""
    name = f"nic-{allocator}"
    outcome = wait_job(cluster, ON, name, 240)
    TIMINGS[f"Indexed Job with {allocator} NICs to Complete"] = time.monotonic() - started
    assert outcome == "Complete", dump(cluster, ON, f"app={name}")
    found = pods(cluster, ON, f"app={name}")
    assert len(found) == 2 and len({p["spec"]["nodeName"] for p in found}) == 2
    explained = []
    for p in found:
        pod = p["metadata"]["name"]
        assert "hostnet-rdma.io/injected" in p["metadata"]["annotations"], p["metadata"]
        spec = p["spec"]
        (c,) = spec["containers"]
        sc = c.get("securityContext") or {}
        print(f"\n{allocator} {pod} securityContext: {json.dumps(sc)}")
        assert not sc.get("privileged"), sc
        added = (sc.get("capabilities") or {}).get("add") or []
        assert "IPC_LOCK" in added and "SYS_ADMIN" not in added, sc
        host_paths = [v["hostPath"]["path"] for v in spec.get("volumes") or [] if "hostPath" in v]
        assert not [h for h in host_paths if "infiniband" in h], host_paths  # cluster.infiniband too
        text = logs(cluster, ON, pod)
        devices = DEVICE_LINE.findall(text)
        assert len(devices) == 1, text[-3000:]
        env = dict(line.split("=", 1) for line in re.findall(r"^HOSTNET_RDMA_TEST_\w+=.*$", text, re.M))
        given = allocated[pod] if allocated is not None else env.get("HOSTNET_RDMA_TEST_HOSTDEV", "")
        print(f"{allocator} {pod} saw /dev/infiniband/uverbs{devices[0]}, allocated {given}, env {env}")
        assert given and given.endswith(devices[0]), (given, text[-3000:])
        assert env, text[-3000:]
        assert len(re.findall(r"^DDP-OK rank=\d+ world=4 sum=10 ", text, re.M)) == jobs.NPROC, text[-3000:]
        e = _explain(cluster, pod)
        print(f"$ hostnet-rdma explain {pod}\n{e.stdout}{e.stderr}")
        assert e.returncode == 0, e.stdout + e.stderr
        assert re.search(r"skipped privileged: .+", e.stdout), e.stdout
        assert re.search(r"skipped infiniband: .+", e.stdout), e.stdout
        explained.append(e.stdout)
    cluster.kubectl("delete", "job", name, "-n", ON, "--wait=false", check=False)
    return explained


def test_device_plugin_nic_pod_is_not_privileged(cluster: Cluster, started: float) -> None:
    """`nvidia.com/hostdev: 1` from the device plugin: the kubelet asked the plugin to allocate
    one device per pod (the plugin's Allocate answer sets HOSTNET_RDMA_TEST_HOSTDEV to its ID),
    and the container has that device node and no other."""
    for text in _check(cluster, "hostdev", started, None):
        assert RESOURCE in text, text


def test_dra_claimed_nic_pod_is_not_privileged(cluster: Cluster, started: float) -> None:
    """A ResourceClaim from a template, allocated by the scheduler from the driver's
    ResourceSlices and prepared by its kubelet plugin on the pod's node (a CDI device that
    containerd adds): the container has the claimed device node, and the pod is unprivileged.
    The generated claims are deleted with the finished pods, so the allocation is read from what
    the kubelet plugin was given to prepare (the claim as the API server holds it)."""
    name = "nic-dra"
    wait_job(cluster, ON, name, 240)
    allocated: dict[str, str] = {}
    for p in pods(cluster, ON, f"app={name}"):
        node = p["spec"]["nodeName"]
        (status,) = p["status"]["resourceClaimStatuses"]
        prepared = (cluster.logs / f"{node}-dra-plugin.log").read_text()
        found = re.findall(rf"Prepare {ON}/{status['resourceClaimName']}: (\S+)/(nic\d)$", prepared, re.M)
        assert found and found[0][0] == node, prepared  # the pool is the node's
        allocated[p["metadata"]["name"]] = found[0][1]
    for text in _check(cluster, "dra", started, allocated):
        assert "claim" in text, text
