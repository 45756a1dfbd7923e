"""Never silent when the webhook is bypassed (issue #63): with the webhook unreachable and
failurePolicy Ignore, the chart's ValidatingAdmissionPolicy (run by the real API server, no
webhook call) warns the creator of a training pod that has no plumbing and writes an audit
annotation; with webhook.unplumbedPods=Deny it refuses the pod. Every golden pod is created
so: the policy flags exactly the pods that show a training signal the core reads (its CEL
against app/core: a differential test), never one the webhook would leave alone."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from app.core import launchers, names
from app.core.mutate import _not_training
from app.core.params import InjectConfig
from tests.apiserver.conftest import ON, RELEASE, Kube, Webhook, local_only, set_failure_policy
from tests.apiserver.controlplane import ROOT, ControlPlane
from tests.apiserver.test_apiserver import MWC_PATH, restore_mwc

pytestmark = pytest.mark.apiserver

POLICY = f"{RELEASE}-unplumbed-pods"  # the chart's fullname for release "hostnet-rdma"
BINDING_PATH = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{POLICY}"
DEAD_URL = "https://127.0.0.1:9/mutate"  # nothing listens on port 9
CASES = sorted(p for p in (ROOT / "tests" / "golden").glob("*/*.yaml") if not p.name.endswith(".expected.yaml"))


def training_signal(pod: dict[str, Any]) -> bool:
    """What the policy's CEL reads: the core's own answer (mutate._not_training: the pod's
    opt-in label, the containers annotation, a training launcher, a GPU or RDMA resource or a
    DRA claim, torchrun in the command, torchrun's env)."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(names.INJECT_LABEL) == names.INJECT_LABEL_VALUE:
        return True
    info = launchers.describe(pod, InjectConfig().rdzv_port)
    return _not_training(pod, info, meta.get("annotations") or {}, InjectConfig().rdma_resource_prefixes) == ""


def flagged_by_policy(pod: dict[str, Any]) -> bool:
    """Whether the policy must flag this pod created without the webhook in ON."""
    meta = pod.get("metadata") or {}
    return (
        pod["spec"].get("hostNetwork") is True
        and (meta.get("labels") or {}).get(names.INJECT_LABEL) != names.INJECT_DISABLED
        and (pod["spec"].get("os") or {}).get("name") != "windows"
        and names.STATUS_ANNOTATION not in (meta.get("annotations") or {})
        and training_signal(pod)
    )


def warnings_of(r: Any) -> list[str]:
    return [w for w in r.headers.get_list("warning") if "without the webhook's plumbing" in w]


def create(kube: Kube, pod: dict[str, Any], name: str) -> Any:
    pod = copy.deepcopy(pod)
    pod["metadata"].pop("generateName", None)
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = ON
    return kube.create_pod(ON, pod)


def audit_annotations(plane: ControlPlane, name: str) -> dict[str, str]:
    for line in (plane.workdir / "audit.log").read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("name") == name and ref.get("namespace") == ON and event.get("stage") == "ResponseComplete":
            return dict(event.get("annotations") or {})
    return {}


@local_only
def test_a_pod_created_without_the_webhook_is_warned_audited_and_refused_with_deny(
    plane: ControlPlane, kube: Kube, webhook: Webhook
) -> None:
    original = kube.ok("GET", MWC_PATH)
    binding = kube.ok("GET", BINDING_PATH)
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]  # the chart's default
    trainer = yaml.safe_load((ROOT / "tests" / "golden" / "generic" / "statefulset.yaml").read_text())
    assert flagged_by_policy(trainer)
    try:
        set_failure_policy(kube, "Ignore", url=DEAD_URL, timeout=2)
        deadline = time.monotonic() + 30
        n = 0
        while True:  # until the API server uses the new configuration and has the policy loaded
            n += 1
            r = create(kube, trainer, f"bypassed-{n}")
            assert r.status_code == 201, r.text
            if warnings_of(r) and (r.json()["metadata"].get("annotations") or {}).get(names.STATUS_ANNOTATION) is None:
                break
            assert time.monotonic() < deadline, (r.headers.get_list("warning"), r.json()["metadata"])
            time.sleep(0.3)
        name = f"bypassed-{n}"
        # The audit annotation: the API server's record of the failed validation.
        deadline = time.monotonic() + 10
        while not (annotations := audit_annotations(plane, name)):
            assert time.monotonic() < deadline, "no audit event for the pod"
            time.sleep(0.2)
        assert POLICY in annotations.get("validation.policy.admission.k8s.io/validation_failure", ""), annotations
        # explain, the cluster form, says the same of the live pod.
        p = subprocess.run([sys.executable, "-m", "app.cli", "explain", name, "-n", ON, "--kubeconfig",
                            str(plane.kubeconfig)], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        assert p.returncode == 1, p.stdout + p.stderr
        assert "NO  created without the webhook (it was unreachable or timed out): this pod has no plumbing" in p.stdout

        # Every golden pod, created without the webhook: flagged exactly when the core's own
        # predicates see a training signal.
        wrong: list[str] = []
        flagged = created = 0
        for i, case in enumerate(CASES):
            pod = yaml.safe_load(case.read_text())
            r = create(kube, pod, f"golden-{i}")
            if r.status_code != 201:
                wrong.append(f"{case.parent.name}/{case.name}: {r.status_code} {r.text[:200]}")
                continue
            created += 1
            warned = bool(warnings_of(r))
            flagged += warned
            if warned != flagged_by_policy(pod):
                wrong.append(
                    f"{case.parent.name}/{case.name}: policy warned {warned}, the core's signals say {not warned}"
                )
        print(f"\n{created} golden pods created without the webhook; {flagged} flagged by the policy")
        assert wrong == [], "\n".join(wrong)
        assert flagged >= 20

        # Deny: the same pod is refused with the policy's message; a pod that is no training pod is not.
        binding = kube.ok("GET", BINDING_PATH)
        binding["spec"]["validationActions"] = ["Deny", "Audit"]
        kube.ok("PUT", BINDING_PATH, binding)
        deadline = time.monotonic() + 30
        while True:
            n += 1
            r = create(kube, trainer, f"bypassed-{n}")
            if r.status_code != 201:
                break
            assert time.monotonic() < deadline, "Deny not picked up"
            time.sleep(0.3)
        assert r.status_code == 422, r.text
        assert "without the webhook's plumbing" in r.json()["message"] and POLICY in r.json()["message"]
        exporter = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                    "spec": {"hostNetwork": True, "containers": [{"name": "e", "image": "node-exporter"}]}}  # fmt: skip
        assert not flagged_by_policy(exporter)
        r = create(kube, exporter, "not-training")
        assert r.status_code == 201 and not warnings_of(r), r.text
    finally:
        binding = kube.ok("GET", BINDING_PATH)
        binding["spec"]["validationActions"] = ["Warn", "Audit"]
        kube.ok("PUT", BINDING_PATH, binding)
        restore_mwc(kube, original)
    # The webhook answers again: its pods carry the status annotation, and no warning.
    deadline = time.monotonic() + 30
    while True:
        n += 1
        r = create(kube, trainer, f"plumbed-{n}")
        assert r.status_code == 201, r.text
        if (r.json()["metadata"].get("annotations") or {}).get(names.STATUS_ANNOTATION):
            break
        assert time.monotonic() < deadline, "the webhook configuration was not restored"
        time.sleep(0.3)
    assert warnings_of(r) == []
