"""`hostnet-rdma fabric-watch --clear` against the real API server: Nodes carrying our condition,
report annotation and taint beside another agent's condition, other taints and another
annotation; the real command, run with the token of the chart's own uninstall-hook
ServiceAccount (its RBAC as rendered: what the hook Job gets), takes off ours and nothing else,
and a second run changes nothing. Its wait: it clears only once the agents' pods are gone, and
when they do not go within --timeout it clears all the same and says which are left (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.fleet import condition as cond
from app.fleet import report as rep
from tests.apiserver.conftest import RELEASE, RELEASE_NS, Kube, helm, local_only
from tests.apiserver.controlplane import ROOT, ControlPlane

pytestmark = pytest.mark.apiserver

HOOK = f"{RELEASE}-fabric-watch-clear"
AGENT_LABELS = {"app.kubernetes.io/name": "hostnet-rdma", "app.kubernetes.io/instance": RELEASE,
                "app.kubernetes.io/component": "fabric-watch"}  # fmt: skip
SELECTOR = ",".join(f"{k}={v}" for k, v in AGENT_LABELS.items())
OURS = {"type": cond.CONDITION, "status": "True", "reason": cond.LARGE_FRAMES_DROPPED, "message": "1517 B do not cross",
        "lastHeartbeatTime": "2026-12-07T09:00:00Z", "lastTransitionTime": "2026-12-07T09:00:00Z"}  # fmt: skip
NPD = {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock",
       "lastHeartbeatTime": "2026-12-07T09:00:00Z", "lastTransitionTime": "2026-12-07T09:00:00Z"}  # fmt: skip
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-12-07T09:00:00Z", "lastTransitionTime": "2026-12-07T09:00:00Z"}  # fmt: skip
OUR_TAINT = {"key": cond.TAINT_KEY, "value": "true", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
REPORT = rep.Report((rep.Netdev("rdma0", "10.0.3.7", 9000),), True, 60, 300).to_annotation()


def _strategic(kube: Kube, path: str, body: dict[str, Any]) -> None:
    r = kube.http.patch(
        path, content=json.dumps(body), headers={"content-type": "application/strategic-merge-patch+json"}
    )
    assert r.status_code == 200, r.text


def _make_node(kube: Kube, name: str, *, ours: bool) -> dict[str, Any]:
    """A Node with another annotation, another taint and the kubelet's and NPD's conditions; ours
    too when `ours`. Returns it as stored."""
    annotations = {"example.com/owner": "team-a", **({rep.ANNOTATION: REPORT} if ours else {})}
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu": "h100"},
                         "annotations": annotations},
            "spec": {"taints": [GPU_TAINT, *([OUR_TAINT] if ours else [])], "podCIDR": "10.244.7.0/24"}}  # fmt: skip
    r = kube.request("POST", "/api/v1/nodes", body)
    assert r.status_code == 201, r.text
    conditions = [READY, NPD, *([OURS] if ours else [])]
    _strategic(kube, f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}})
    return kube.ok("GET", f"/api/v1/nodes/{name}")


def _without_volatile(node: dict[str, Any]) -> dict[str, Any]:
    node = json.loads(json.dumps(node))
    for key in ("resourceVersion", "managedFields"):
        node["metadata"].pop(key, None)
    return node


def _expected_after(node: dict[str, Any]) -> dict[str, Any]:
    want = _without_volatile(node)
    want["metadata"]["annotations"].pop(rep.ANNOTATION, None)
    want["spec"]["taints"] = [t for t in want["spec"]["taints"] if t["key"] != cond.TAINT_KEY]
    want["status"]["conditions"] = [c for c in want["status"]["conditions"] if c["type"] != cond.CONDITION]
    return want


def _hook_kubeconfig(plane: ControlPlane, kube: Kube, workdir: Path) -> Path:
    """The chart's uninstall-hook RBAC, applied as rendered, and a kubeconfig with a real token of
    its ServiceAccount: the command runs with exactly what the hook Job gets."""
    p = helm(plane, "template", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--kube-version", "1.36.3",
             "--set", "fabricWatch.enabled=true", "--set", "fabricWatch.taint=true")  # fmt: skip
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d and d["metadata"]["name"] == HOOK and d["kind"] != "Job"]
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                                "ServiceAccount"]  # fmt: skip
    for d in docs:
        r = kube.apply(d)
        assert r.status_code in (200, 201), r.text
    token = kube.token(RELEASE_NS, HOOK)
    path = workdir / "hook-kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: hook\n"
        f"clusters: [{{name: test, cluster: {{server: '{plane.url}', insecure-skip-tls-verify: true}}}}]\n"
        f"users: [{{name: hook, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: hook, context: {cluster: test, user: hook}}]\n"
    )
    # RBAC takes effect asynchronously: wait until the hook's account may list Nodes and the pods.
    deadline = time.monotonic() + 30
    for attributes in ({"verb": "list", "resource": "nodes"},
                       {"verb": "list", "resource": "pods", "namespace": RELEASE_NS}):  # fmt: skip
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": f"system:serviceaccount:{RELEASE_NS}:{HOOK}", "resourceAttributes": attributes},
        }
        while not kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get(
            "allowed"
        ):
            assert time.monotonic() < deadline, f"the hook's RBAC never took effect: {attributes}"
            time.sleep(0.5)
    return path


def _clear(kubeconfig: Path, *extra: str, background: bool = False) -> Any:
    argv = [sys.executable, "-m", "app.cli", "fabric-watch", "--clear", "--kubeconfig", str(kubeconfig), *extra]
    if background:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


def _agent_pod(kube: Kube, name: str) -> None:
    # No nodeName: without a kubelet, a pod bound to a node would never finish terminating.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": AGENT_LABELS},
           "spec": {"containers": [{"name": "agent", "image": "hostnet-rdma"}]}}  # fmt: skip
    r = kube.create_pod(RELEASE_NS, pod)
    assert r.status_code == 201, r.text


@local_only
def test_clear_takes_off_only_ours_and_a_second_run_changes_nothing(
    plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    kubeconfig = _hook_kubeconfig(plane, kube, tmp_path)
    marked = {name: _make_node(kube, name, ours=True) for name in ("clear-a", "clear-b")}
    clean = _make_node(kube, "clear-clean", ours=False)
    for node in marked.values():
        assert cond.read_condition(node) is not None and OUR_TAINT in node["spec"]["taints"]

    p = _clear(kubeconfig)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = set(p.stdout.splitlines())
    for name in marked:
        assert (
            f"{name}: removed condition {cond.CONDITION}, annotation {rep.ANNOTATION}, taint {cond.TAINT_KEY}" in lines
        )
    assert not [line for line in lines if line.startswith("clear-clean")], "a Node with nothing of ours is not named"
    for name, before in marked.items():
        after = kube.ok("GET", f"/api/v1/nodes/{name}")
        assert _without_volatile(after) == _expected_after(before), name
        # Spelled out: the others' taints, conditions and annotation are all there.
        assert GPU_TAINT in after["spec"]["taints"] and OUR_TAINT not in after["spec"]["taints"]
        assert {c["type"] for c in after["status"]["conditions"]} == {"Ready", "KernelDeadlock"}
        assert after["metadata"]["annotations"] == {"example.com/owner": "team-a"}
        assert after["metadata"]["labels"]["gpu"] == "h100"
    after_clean = kube.ok("GET", "/api/v1/nodes/clear-clean")
    assert after_clean["metadata"]["resourceVersion"] == clean["metadata"]["resourceVersion"], "not written at all"

    versions = {
        n: kube.ok("GET", f"/api/v1/nodes/{n}")["metadata"]["resourceVersion"] for n in [*marked, "clear-clean"]
    }
    again = _clear(kubeconfig)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    assert "0 of" in again.stderr and "0 failed" in again.stderr
    for name, version in versions.items():
        assert kube.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["resourceVersion"] == version, "a second run wrote"


@local_only
def test_clear_waits_for_the_agents_pods_and_names_those_that_do_not_go(
    plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    kubeconfig = _hook_kubeconfig(plane, kube, tmp_path)
    before = _make_node(kube, "clear-wait", ours=True)
    _agent_pod(kube, "fabric-watch-wait")
    run = _clear(kubeconfig, f"--wait-for-agents={RELEASE_NS}/{SELECTOR}", "--timeout=60", background=True)
    try:
        time.sleep(4)
        assert run.poll() is None, "it waits while an agent is there"
        assert cond.read_condition(kube.ok("GET", "/api/v1/nodes/clear-wait")) is not None, "and clears nothing yet"
        r = kube.request("DELETE", f"/api/v1/namespaces/{RELEASE_NS}/pods/fabric-watch-wait")
        assert r.status_code == 200, r.text
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out + err
    assert f"clear-wait: removed condition {cond.CONDITION}" in out
    assert _without_volatile(kube.ok("GET", "/api/v1/nodes/clear-wait")) == _expected_after(before)

    # An agent that does not go (a pod stuck terminating on a node that is gone): cleared all the
    # same once the time is up, and said, with a non-zero exit.
    _make_node(kube, "clear-stuck", ours=True)
    _agent_pod(kube, "fabric-watch-stuck")
    p = _clear(kubeconfig, f"--wait-for-agents={RELEASE_NS}/{SELECTOR}", "--timeout=2")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "fabric-watch-stuck" in p.stderr and "still there after 2 s" in p.stderr
    assert "hostnet-rdma fabric-watch --clear" in p.stderr, "says what to run once it is gone"
    assert "clear-stuck: removed" in p.stdout
    assert cond.read_condition(kube.ok("GET", "/api/v1/nodes/clear-stuck")) is None
    kube.request("DELETE", f"/api/v1/namespaces/{RELEASE_NS}/pods/fabric-watch-stuck")
