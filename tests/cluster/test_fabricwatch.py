"""The fabric watch on a real cluster (four namespace nodes, real kubelets), the chart installed
with fabricWatch on: the agents come up on every node and report healthy; a silent drop of every
frame over 1500 bytes between node1 and node2 only (seed 001; links at MTU 9000 end to end, no
ICMP, no counter on the nodes: ../shared/recipes/mtu-blackhole) turns both nodes' condition True
within about one interval, naming the peer and the sizes, taints them, and leaves node3 and node4
healthy; the metrics say the same; a new two-node training job (the real Job controller, torchrun
through the webhook) runs on node3 and node4, off the bad pair, and completes; healing clears the
conditions and the taints. The policy holds with the agent's own token, from inside its pod:
another node's status is refused. `helm uninstall` while two nodes are degraded removes the agents,
and its hook takes our conditions, reports and taints off every node."""

from __future__ import annotations

import contextlib
import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from app.fleet import condition as cond
from app.fleet import report
from tests.cluster import jobs
from tests.cluster.conftest import torch_sites
from tests.cluster.harness import (
    ROOT,
    Cluster,
    available,
    binaries,
    build_images,
    cleanup_stale,
    leftovers,
    log,
    new_workdir,
    sh,
)
from tests.cluster.release import ON, RELEASE, RELEASE_NS, helm, image_ref, install, namespaces
from tests.cluster.test_cluster import dump, wait_job
from tests.cluster.timings import TIMINGS

pytestmark = pytest.mark.cluster
INTERVAL = 10
SETS = ["fabricWatch.enabled=true", f"fabricWatch.interval={INTERVAL}", "fabricWatch.heartbeat=30",
        "fabricWatch.peersPerRound=3", "fabricWatch.taint=true", "fabricWatch.requireRdma=false",
        "fabricWatch.netdevs={eth0}", "replicaCount=1", "podDisruptionBudget.enabled=false"]  # fmt: skip


@pytest.fixture(scope="module")
def four() -> Iterator[Cluster]:
    why = available()
    if why:
        pytest.fail(f"cluster tier cannot run: {why}")
    cleanup_stale()
    c = Cluster(new_workdir(), binaries(), build_images(), nodes=4)
    try:
        c.up()
        yield c
    finally:
        c.down()
        assert not leftovers(c.state), leftovers(c.state)


def _jumbo(c: Cluster, mtu: int) -> None:
    """Every node's link and the bridge (their switch) at this MTU."""
    for i in range(1, len(c.nodes) + 1):
        sh("ip", "link", "set", f"hrc{c.state.tag}v{i}", "mtu", str(mtu))
    sh("ip", "link", "set", c.state.bridge, "mtu", str(mtu))
    for ns in c.state.netns:
        sh("ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtu))


@contextlib.contextmanager
def _drop_between(c: Cluster, a: int, b: int) -> Iterator[None]:
    """The switch drops every frame over 1500 bytes between nodes a and b only, both ways."""
    pa, pb = f"hrc{c.state.tag}v{a}", f"hrc{c.state.tag}v{b}"
    rules = [f"FORWARD -m physdev --physdev-in {x} --physdev-out {y} -m length --length 1501:65535 -j DROP"
             for x, y in ((pa, pb), (pb, pa))]  # fmt: skip
    c.state.firewall += rules
    c.save()
    try:
        for rule in rules:
            sh("iptables", "-I", *rule.split())
        yield
    finally:
        for rule in rules:
            sh("iptables", "-D", *rule.split(), check=False)
        c.state.firewall = [r for r in c.state.firewall if r not in rules]
        c.save()


def _conditions(c: Cluster) -> dict[str, tuple[cond.Condition, bool]]:
    out: dict[str, tuple[cond.Condition, bool]] = {}
    for node in c.kubectl_json("get", "nodes")["items"]:
        found = cond.read_condition(node)
        tainted = any(t.get("key") == cond.TAINT_KEY for t in node["spec"].get("taints") or [])
        if found is not None:
            out[node["metadata"]["name"]] = (found[0], tainted)
    return out


def _wait(c: Cluster, ok: Any, timeout: float, what: str) -> tuple[dict[str, tuple[cond.Condition, bool]], float]:
    t0 = time.monotonic()
    while True:
        got = _conditions(c)
        if ok(got):
            return got, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            log(c.kubectl("logs", "-n", RELEASE_NS, "-l", "app.kubernetes.io/component=fabric-watch", "--tail=20",
                          "--prefix", check=False))  # fmt: skip
            pytest.fail(f"{what} not reached in {timeout:.0f}s: {got}")
        time.sleep(1)


def _metrics(c: Cluster, i: int) -> str:
    with urllib.request.urlopen(f"http://{c.net.node_ip(i)}:9470/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_a_silent_drop_between_two_nodes_is_on_their_nodes_and_clears(four: Cluster) -> None:
    c = four
    _jumbo(c, 9000)  # the fleet at jumbo frames, healthy, before the agents start
    try:
        t0 = time.monotonic()
        p = install(c, *SETS)
        assert p.returncode == 0, p.stderr
        TIMINGS["fabric-watch: helm install --wait (4 nodes)"] = time.monotonic() - t0
        namespaces(c)
        healthy = lambda got: len(got) == 4 and all(  # noqa: E731
            x.status == "False" and x.reason == cond.NO_RDMA_DEVICES and "up to 9000 B" in x.message and not t
            for x, t in got.values())  # fmt: skip
        _, seconds = _wait(c, healthy, 6 * INTERVAL, "every node healthy at MTU 9000")
        TIMINGS["fabric-watch: every node healthy after install"] = seconds
        bad = {"node1": "node2", "node2": "node1"}
        with _drop_between(c, 1, 2):
            dropped = lambda got: all(  # noqa: E731
                got[n][0].reason == cond.LARGE_FRAMES_DROPPED and got[n][1] for n in bad)  # fmt: skip
            got, seconds = _wait(c, dropped, 3 * INTERVAL, "node1 and node2 degraded")
            TIMINGS["fabric-watch: drop named on both nodes"] = seconds
            log(f"drop seen in {seconds:.1f}s: {got}")
            assert seconds <= 2 * INTERVAL, f"not within about one interval: {seconds:.1f}s"
            for node, peer in bad.items():
                msg = got[node][0].message
                i = int(peer[-1])
                assert msg.startswith(f"packets of up to 1500 B cross to {peer} ({c.net.node_ip(i)} on eth0), "), msg
                assert msg.endswith(" B do not") and got[node][0].status == "True", msg
            for node in ("node3", "node4"):
                assert got[node][0].status == "False" and not got[node][1], got[node]
            text = _metrics(c, 1)
            assert 'hostnet_rdma_fabric_path_largest_bytes{netdev="eth0",peer="node2"} 1500.0' in text, text
            assert 'hostnet_rdma_fabric_path_largest_bytes{netdev="eth0",peer="node3"} 9000.0' in text, text
            assert f'hostnet_rdma_fabric_degraded{{reason="{cond.LARGE_FRAMES_DROPPED}"}} 1.0' in text, text
            events = c.kubectl_json("get", "events", "-n", "default", "--field-selector",
                                    f"reason={cond.LARGE_FRAMES_DROPPED}")["items"]  # fmt: skip
            assert {e["involvedObject"]["name"] for e in events} >= set(bad), events
            # The policy, with the agent's own token from inside its pod on node1: node2 refused.
            pod = next(p for p in c.kubectl_json("get", "pods", "-n", RELEASE_NS, "-l",
                                                 "app.kubernetes.io/component=fabric-watch")["items"]
                       if p["spec"]["nodeName"] == "node1")  # fmt: skip
            probe = ("from app import kube\n"
                     "api = kube.NodeAgentApi(kube.api_client(), '', '')\n"
                     "try:\n api.write_condition('node2', {'type': 'HostnetRdmaFabricDegraded', 'status': 'False',"
                     " 'reason': 'FabricHealthy', 'message': 'forged'})\n print('WRITTEN')\n"
                     "except kube.ApiException as e:\n print(e.status, kube.api_message(e))\n")  # fmt: skip
            out = c.kubectl("exec", "-n", RELEASE_NS, pod["metadata"]["name"], "--", "python", "-c", probe)
            assert out[:3] in ("403", "422") and "the fabric watch on node1 may not change Node node2" in out, out
            assert _conditions(c)["node2"][0].reason == cond.LARGE_FRAMES_DROPPED
            # The taint keeps a new two-node job off the bad pair: the Job controller's pods, one a
            # node, land on node3 and node4, rendezvous through the webhook's wrapper and train.
            t1 = time.monotonic()
            jobs.apply(c, jobs.indexed_job(ON, "fabric-ddp", image_ref(c, "train"), torch_sites()))
            outcome = wait_job(c, ON, "fabric-ddp", 300)
            TIMINGS["fabric-watch: two-node job beside the bad pair to Complete"] = time.monotonic() - t1
            assert outcome == "Complete", dump(c, ON, "app=fabric-ddp")
            placed = {p["spec"]["nodeName"] for p in c.kubectl_json("get", "pods", "-n", ON, "-l",
                                                                     "app=fabric-ddp")["items"]}  # fmt: skip
            assert placed == {"node3", "node4"}, placed
        cleared = lambda got: all(x.status == "False" and not t for x, t in got.values())  # noqa: E731
        _, seconds = _wait(c, cleared, 3 * INTERVAL, "healed: every node healthy, no taint")
        TIMINGS["fabric-watch: healed and untainted"] = seconds
        table = json.loads(sh(sys.executable, "-m", "app.cli", "doctor", "--cluster", "--kubeconfig",
                              str(c.kubeconfig), "-o", "json", cwd=ROOT).stdout)  # fmt: skip
        assert {r["node"]: r["state"] for r in table} == dict.fromkeys(c.nodes, "HEALTHY"), table
        # Uninstalled while two nodes are degraded and tainted: the agents go, and the chart's
        # post-delete hook takes what they wrote off every node (a taint left behind would keep
        # the pair unschedulable for good, with nothing left to lift it).
        with _drop_between(c, 1, 2):
            _wait(c, lambda got: all(got[n][1] for n in bad), 3 * INTERVAL, "node1 and node2 tainted again")
            t2 = time.monotonic()
            p = helm(c, "uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "4m")
            TIMINGS["fabric-watch: helm uninstall with its hook"] = time.monotonic() - t2
            assert p.returncode == 0, p.stdout + p.stderr
            agents = c.kubectl_json("get", "pods", "-n", RELEASE_NS, "-l", "app.kubernetes.io/component=fabric-watch")
            assert agents["items"] == [], [a["metadata"]["name"] for a in agents["items"]]
            for node in c.kubectl_json("get", "nodes")["items"]:
                name = node["metadata"]["name"]
                assert cond.read_condition(node) is None, (name, node["status"]["conditions"])
                assert report.ANNOTATION not in (node["metadata"].get("annotations") or {}), name
                assert not any(t.get("key") == cond.TAINT_KEY for t in node["spec"].get("taints") or []), name
            left = c.kubectl("get", "jobs,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings", "-A", "-l",
                             "app.kubernetes.io/component=fabric-watch-clear", "-o", "name", check=False)  # fmt: skip
            assert left.strip() == "", f"the hook's objects outlived it: {left}"
    finally:
        _jumbo(c, 1500)
