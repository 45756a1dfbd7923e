"""The chart's fabric watch (fabricwatch-*.yaml): off by default; on, a hardened host-network
DaemonSet with NET_RAW only, RBAC that reads only the Nodes it is told and writes only through
the policy, the policy itself, the ServiceMonitor; the post-delete hook that clears the agents'
marks on uninstall; a snapshot; bad values refused. The policy is exercised against the real API
server in tests/apiserver/test_fabricwatch_policy.py, the clear in test_fabricwatch_clear.py."""

from __future__ import annotations

import difflib
from typing import Any

import pytest
import yaml

from app.fleet import condition as cond
from app.fleet import report as rep
from tests.test_chart import REFRESH, SNAPSHOTS, template

ON = ["--set", "fabricWatch.enabled=true", "--set", "fabricWatch.taint=true", "--set", "fabricWatch.serviceMonitor.enabled=true",
      "--set-json", 'fabricWatch.nodeSelector={"node.kubernetes.io/instance-type": "BM.GPU.H100.8"}',
      "--set", "fabricWatch.netdevs={rdma0,rdma1}"]  # fmt: skip


def rendered(*args: str) -> list[dict[str, Any]]:
    p = template(*args)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def ours(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if "fabric-watch" in d["metadata"]["name"]]


def is_hook(d: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (d["metadata"].get("annotations") or {})


def agent(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent's objects: the fabric watch's, less the uninstall hook's."""
    return [d for d in ours(docs) if not is_hook(d)]


def test_off_by_default() -> None:
    assert ours(rendered()) == []


def test_snapshot() -> None:
    p = template(*ON)
    assert p.returncode == 0, p.stderr
    snap = SNAPSHOTS / "fabric-watch.yaml"
    if REFRESH:
        snap.write_text(p.stdout)
    want = snap.read_text()
    if p.stdout != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), p.stdout.splitlines(True), str(snap), "helm template")
        )
        pytest.fail(f"chart output changed (REFRESH_GOLDEN=1 to accept):\n{diff}")


def test_the_daemonset_is_host_network_with_net_raw_only_on_the_nodes_named() -> None:
    docs = rendered(*ON)
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"}
    assert {"key": cond.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}}  # fmt: skip
    assert "privileged" not in str(pod) and not pod.get("volumes")
    assert pod["serviceAccountName"] == "hostnet-rdma-fabric-watch"
    assert c["image"] == webhook["spec"]["template"]["spec"]["containers"][0]["image"]  # the webhook's image
    assert "--taint" in c["args"] and "--netdev=rdma0" in c["args"] and "--require-rdma" in c["args"]
    assert c["readinessProbe"] == {"tcpSocket": {"port": "metrics"}, "periodSeconds": 5}
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (0, False)


def test_run_as_non_root_drops_every_capability() -> None:
    """runAsNonRoot: the agent as 65532 with no capability at all (unprivileged ICMP sockets;
    tests/rendezvous/test_fabricwatch_paths.py runs the probe so, on a real silent drop)."""
    (ds,) = [d for d in rendered(*ON, "--set", "fabricWatch.runAsNonRoot=true") if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert {k: pod["securityContext"][k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup")} == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532}  # fmt: skip
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_rbac_reads_nodes_by_name_and_patches_through_the_policy_only() -> None:
    docs = agent(rendered(*ON))
    rules = {
        (d["kind"], d["metadata"].get("namespace", "")): d["rules"]
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    assert rules == {
        ("ClusterRole", ""): [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                              {"apiGroups": [""], "resources": ["nodes/status", "nodes"], "verbs": ["patch"]}],
        ("Role", "hostnet-rdma-system"): [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                                           "verbs": ["list", "watch"]}],
        ("Role", "default"): [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
    }  # fmt: skip
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:hostnet-rdma-system:hostnet-rdma-fabric-watch"'
    )
    text = str(policy)
    assert "authentication.kubernetes.io/node-name" in text
    assert cond.CONDITION in text and rep.ANNOTATION in text and cond.TAINT_KEY in text


def test_with_tainting_off_the_policy_refuses_adding_the_taint() -> None:
    (policy,) = [
        d for d in ours(rendered("--set", "fabricWatch.enabled=true")) if d["kind"] == "ValidatingAdmissionPolicy"
    ]
    last = policy["spec"]["validations"][-1]
    assert "taintsOld.exists" in last["expression"] and "tainting is off" in last["message"]
    (on,) = [d for d in ours(rendered(*ON)) if d["kind"] == "ValidatingAdmissionPolicy"]
    assert "taintsOld.exists" not in on["spec"]["validations"][-1]["expression"]


def test_the_service_is_headless_and_the_service_monitor_scrapes_it() -> None:
    docs = ours(rendered(*ON))
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    (mon,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == 9470
    assert mon["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert ours(rendered("--set", "fabricWatch.enabled=true")) and not [
        d for d in ours(rendered("--set", "fabricWatch.enabled=true")) if d["kind"] == "ServiceMonitor"]  # fmt: skip


@pytest.mark.parametrize("args, message", [
    (["--set", "fabricWatch.interval=1"], "at '/fabricWatch/interval'"),
    (["--set", "fabricWatch.peersPerRound=0"], "at '/fabricWatch/peersPerRound'"),
    (["--set", "fabricWatch.netdevs={rdma0;reboot}"], "at '/fabricWatch/netdevs/0'"),
    (["--set", "fabricWatch.metricsPort=80"], "at '/fabricWatch/metricsPort'"),
    (["--set", "fabricWatch.enabeld=true"], "fabricWatch"),
    (["--set", "fabricWatch.clearOnUninstall=yes"], "at '/fabricWatch/clearOnUninstall'"),
    (["--set", "fabricWatch.enabled=true", "--set", "fabricWatch.heartbeat=30"], "heartbeat must be at least"),
])  # fmt: skip
def test_bad_values_fail_with_a_readable_error(args: list[str], message: str) -> None:
    p = template(*args)
    assert p.returncode != 0 and message in p.stderr, p.stderr


# ------------------------------------------------------------------------------ the uninstall hook
HOOK = "hostnet-rdma-fabric-watch-clear"
HOOK_KINDS = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Job"]


def hook_objects(*args: str) -> list[dict[str, Any]]:
    return [d for d in rendered(*args) if is_hook(d) and d["metadata"]["annotations"]["helm.sh/hook"] != "test"]


def test_the_uninstall_hook_is_on_with_the_agent_and_off_with_its_value() -> None:
    assert hook_objects() == [], "no agent, nothing to clear"
    assert [d["kind"] for d in hook_objects("--set", "fabricWatch.enabled=true")] == HOOK_KINDS
    assert hook_objects("--set", "fabricWatch.enabled=true", "--set", "fabricWatch.clearOnUninstall=false") == []


def test_the_hook_runs_after_delete_rbac_first_and_is_deleted_once_it_succeeded_its_rbac_also_if_it_failed() -> None:
    docs = hook_objects(*ON)
    assert [d["kind"] for d in docs] == HOOK_KINDS
    for d in docs:
        notes = d["metadata"]["annotations"]
        assert d["metadata"]["name"] == HOOK
        assert notes["helm.sh/hook"] == "post-delete"
        # The Job stays after a failure, for its log; its RBAC (patch on every Node) never does.
        assert notes["helm.sh/hook-delete-policy"] == (
            "before-hook-creation,hook-succeeded"
            if d["kind"] == "Job"
            else "before-hook-creation,hook-succeeded,hook-failed"
        )
        assert notes["helm.sh/hook-weight"] == ("0" if d["kind"] == "Job" else "-5"), "the RBAC exists before the Job"
        assert d["metadata"].get("namespace", "hostnet-rdma-system") == "hostnet-rdma-system"


def test_the_hooks_rbac_is_least_privilege() -> None:
    docs = hook_objects(*ON)
    rules = {d["kind"]: d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert rules == {
        "ClusterRole": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}],
        "Role": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    }  # fmt: skip
    subjects = [d["subjects"] for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert subjects == [[{"kind": "ServiceAccount", "name": HOOK, "namespace": "hostnet-rdma-system"}]] * 2
    assert [d["roleRef"]["name"] for d in docs if "roleRef" in d] == [HOOK, HOOK]


def test_the_agents_policy_does_not_hold_the_hook() -> None:
    (policy,) = [d for d in agent(rendered(*ON)) if d["kind"] == "ValidatingAdmissionPolicy"]
    (match,) = policy["spec"]["matchConditions"]
    assert match["expression"].endswith(':hostnet-rdma-fabric-watch"') and HOOK not in match["expression"]
    (job,) = [d for d in hook_objects(*ON) if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == HOOK


def test_the_hooks_job_is_hardened_bounded_and_runs_on_a_tainted_fleet() -> None:
    docs = rendered(*ON, "--set-json", 'fabricWatch.tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]')
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (webhook,) = [d for d in docs if d["kind"] == "Deployment"]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert spec["backoffLimit"] <= 3 and 0 < spec["activeDeadlineSeconds"] <= 900
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["image"] == webhook["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pod["tolerations"] == [{"key": cond.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists"}]  # fmt: skip
    agents = ds["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in agents.items())
    assert c["args"] == ["fabric-watch", "--clear", f"--wait-for-agents=hostnet-rdma-system/{selector}", "--timeout=60"]
    labels = spec["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in agents.items()), "the Job's pod must not wait for itself"
