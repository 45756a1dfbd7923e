"""The fabric watch may write only its own Node (chart: fabricwatch-rbac.yaml + fabricwatch-vap.yaml),
held by the real API server. A pod of the agent's ServiceAccount bound to node-a gets a real
token (TokenRequest bound to the pod: the API server puts the pod's node name into it); with that
token the agent's own client (app.kube.NodeAgentApi) writes its condition, report and taint on
node-a, and is refused on node-b; anything else on its own Node (a label, another annotation, the
kubelet's Ready condition, a NoExecute taint) is refused too."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import httpx
import pytest
import yaml

from app.fleet import condition as cond
from app.fleet import report as rep
from tests.apiserver.conftest import RELEASE, RELEASE_NS, Kube, helm, local_only
from tests.apiserver.controlplane import ROOT, ControlPlane

pytestmark = pytest.mark.apiserver

AGENT = f"{RELEASE}-fabric-watch"
KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
         "ValidatingAdmissionPolicyBinding"}  # fmt: skip
REPORT = rep.Report((rep.Netdev("rdma0", "10.0.3.7", 9000),), True, 60, 300).to_annotation()


def _node(kube: Kube, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
    r = kube.request("POST", "/api/v1/nodes", body)
    assert r.status_code in (201, 409), r.text
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                         "message": "kubelet is posting ready status"}]}}  # fmt: skip
    r = kube.http.patch(f"/api/v1/nodes/{name}/status", content=json.dumps(status),
                        headers={"content-type": "application/strategic-merge-patch+json"})  # fmt: skip
    assert r.status_code == 200, r.text


def _patch(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return client.patch(
        path, content=json.dumps(body), headers={"content-type": "application/strategic-merge-patch+json"}
    )


@local_only
def test_the_agents_real_token_writes_only_its_own_node(plane: ControlPlane, kube: Kube) -> None:
    p = helm(plane, "template", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--kube-version", "1.36.3",
             "--set", "fabricWatch.enabled=true", "--set", "fabricWatch.taint=true")  # fmt: skip
    assert p.returncode == 0, p.stderr
    docs = [
        d for d in yaml.safe_load_all(p.stdout)
        if d and d["kind"] in KINDS and "fabric-watch" in d["metadata"]["name"]
        and "helm.sh/hook" not in (d["metadata"].get("annotations") or {})  # the uninstall hook's: its own test
    ]  # fmt: skip
    assert {d["kind"] for d in docs} == KINDS
    for d in docs:
        r = kube.apply(d)
        assert r.status_code in (200, 201), r.text
    for name in ("node-a", "node-b"):
        _node(kube, name)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fabric-watch-a", "namespace": RELEASE_NS},
           "spec": {"serviceAccountName": AGENT, "nodeName": "node-a", "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "hostnet-rdma"}]}}  # fmt: skip
    r = kube.create_pod(RELEASE_NS, pod)
    assert r.status_code in (201, 409), r.text
    uid = kube.ok("GET", f"/api/v1/namespaces/{RELEASE_NS}/pods/fabric-watch-a")["metadata"]["uid"]
    token = kube.token(RELEASE_NS, AGENT, {"kind": "Pod", "apiVersion": "v1", "name": "fabric-watch-a", "uid": uid})
    agent = httpx.Client(base_url=plane.url, headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=30)
    who = agent.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                     json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).json()  # fmt: skip
    assert who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/node-name"] == ["node-a"], who

    ours = {"status": {"conditions": [{"type": cond.CONDITION, "status": "True", "reason": cond.LARGE_FRAMES_DROPPED,
                                       "message": "forged", "lastHeartbeatTime": "2026-12-07T09:00:00Z",
                                       "lastTransitionTime": "2026-12-07T09:00:00Z"}]}}  # fmt: skip
    # Policies take effect asynchronously: probe with the other node until refused.
    deadline = time.monotonic() + 30
    while (r := _patch(agent, "/api/v1/nodes/node-b/status", ours)).status_code < 300:
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(0.5)
    assert r.status_code in (403, 422) and "the fabric watch on node-a may not change Node node-b" in r.text, r.text
    # What landed before the policy took effect, taken back (by the admin) so node-b starts clean.
    ready = [c for c in kube.ok("GET", "/api/v1/nodes/node-b")["status"]["conditions"] if c["type"] == "Ready"]
    r = kube.http.patch("/api/v1/nodes/node-b/status", headers={"content-type": "application/json-patch+json"},
                        content=json.dumps([{"op": "replace", "path": "/status/conditions", "value": ready}]))  # fmt: skip
    assert r.status_code == 200, r.text

    # The agent's own client, with the real token: its writes on node-a pass, on node-b not.
    from kubernetes import client

    from app import kube as kube_shell

    cfg = client.Configuration(host=plane.url, api_key={"authorization": f"Bearer {token}"})
    cfg.verify_ssl = False
    api = kube_shell.NodeAgentApi(client.ApiClient(cfg), RELEASE_NS, "")
    now = dt.datetime.now(dt.UTC)
    good = cond.as_node_condition(cond.Condition("False", cond.HEALTHY, "fine"), now, now)
    api.write_condition("node-a", good)
    api.write_report("node-a", REPORT)
    api.set_taint("node-a", True, cond.TAINT_KEY)
    node_a = kube.ok("GET", "/api/v1/nodes/node-a")
    assert cond.read_condition(node_a) is not None and node_a["metadata"]["annotations"][rep.ANNOTATION] == REPORT
    others = [t for t in kube.ok("GET", "/api/v1/nodes/node-b")["spec"].get("taints") or []]
    # Ours added, the others' (the API server's not-ready taint on a new Node) kept.
    assert [t["key"] for t in node_a["spec"]["taints"] if t not in others] == [cond.TAINT_KEY]
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node_a["status"]["conditions"])
    api.set_taint("node-a", False, cond.TAINT_KEY)
    assert kube.ok("GET", "/api/v1/nodes/node-a")["spec"].get("taints", []) == others
    for write in (lambda: api.write_condition("node-b", good), lambda: api.write_report("node-b", REPORT),
                  lambda: api.set_taint("node-b", True, cond.TAINT_KEY)):  # fmt: skip
        with pytest.raises(kube_shell.ApiException) as refused:
            write()
        assert refused.value.status in (403, 422) and "may not change Node node-b" in str(refused.value.body)
    node_b = kube.ok("GET", "/api/v1/nodes/node-b")
    assert cond.read_condition(node_b) is None and rep.ANNOTATION not in (node_b["metadata"].get("annotations") or {})
    assert node_b["spec"].get("taints", []) == others, "a forged report or taint on another node changed nothing"

    # On its own Node, nothing but ours.
    for path, body, why in (
        ("/api/v1/nodes/node-a", {"metadata": {"labels": {"gpu": "yes"}}}, "its report annotation"),
        ("/api/v1/nodes/node-a", {"metadata": {"annotations": {"other": "x"}}}, "its report annotation"),
        ("/api/v1/nodes/node-a", {"spec": {"unschedulable": True}}, "its report annotation"),
        ("/api/v1/nodes/node-a", {"spec": {"taints": [*others, {"key": cond.TAINT_KEY, "effect": "NoExecute"}]}},
         "NoSchedule only"),
        ("/api/v1/nodes/node-a/status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
         "only its own condition"),
    ):  # fmt: skip
        r = _patch(agent, path, body)
        assert r.status_code in (403, 422) and why in r.text, (body, r.text)

    # The fleet's table, as an operator reads it (the admin's kubeconfig).
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--cluster", "--kubeconfig", str(plane.kubeconfig),
                        "-o", "json"], capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    table = {r["node"]: r for r in json.loads(p.stdout)}
    assert (table["node-a"]["state"], table["node-a"]["reason"]) == ("HEALTHY", cond.HEALTHY), p.stdout
    assert table["node-b"]["state"] == "NO-AGENT" and p.returncode == 0, p.stdout
