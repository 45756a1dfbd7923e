"""Tier 3: pods of every launcher created through a real kube-apiserver, with the chart's
webhook configuration (installed by helm) pointing at our webhook process."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core import InjectConfig, Params, mutate
from app.core.wrap import settings_of
from app.wrapper import payload, rules
from tests.apiserver.conftest import (
    BASELINE,
    E2E_KUBECONFIG,
    OFF,
    ON,
    RELEASE_NS,
    TIMINGS,
    WEBHOOK_CONFIG,
    Kube,
    Webhook,
    helm,
    kubeconfig_names,
    local_only,
    set_failure_policy,
    start_webhook,
    wait_for_webhook,
    without_service_account,
)  # fmt: skip
from tests.apiserver.controlplane import ROOT, ControlPlane
from tests.apiserver.fakes import FakeWebhook

pytestmark = pytest.mark.apiserver

GOLDEN = ROOT / "tests" / "golden"
CASES = sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml"))
MWC_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_CONFIG}"


def load(case: Path) -> dict[str, Any]:
    return yaml.safe_load(case.read_text())  # type: ignore[no-any-return]


def injected(pod: dict[str, Any]) -> dict[str, Any] | None:
    raw = (pod["metadata"].get("annotations") or {}).get("hostnet-rdma.io/injected")
    return json.loads(raw) if raw else None


def ours(items: list[dict[str, Any]]) -> list[str]:
    """Names, without what a real cluster's ServiceAccount admission adds (kube-api-access-*)."""
    return [i.get("name") or i.get("mountPath") for i in without_service_account(items)]


def env_of(pod: dict[str, Any], container: int = -1) -> dict[str, str]:
    c = pod["spec"]["containers"][container]
    return {e["name"]: e.get("value", "<from>") for e in c.get("env", [])}


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_launcher_pod_is_stored_with_the_full_injection(kube: Kube, webhook: Webhook, inject_config: InjectConfig,
                                                             case: Path) -> None:  # fmt: skip
    pod = load(case)
    r = kube.create_pod(ON, pod)
    assert r.status_code == 201, r.text
    stored = kube.ok("GET", f"/api/v1/namespaces/{ON}/pods/{r.json()['metadata']['name']}")
    want = mutate({**pod, "metadata": {**pod["metadata"], "namespace": ON}},
                  Params(config=inject_config, namespace=ON, wrapper_payload=payload(), version="0.1.0")).pod  # fmt: skip
    if not pod["spec"].get("hostNetwork") or injected(want) is None:  # not sent, or left as it is
        assert injected(stored) is None
        return
    status = injected(stored)
    assert status is not None and status == injected(want)
    # What the core decided is what the API server stored (after its own defaulting).
    assert stored["spec"].get("dnsPolicy") == want["spec"].get("dnsPolicy", "ClusterFirst")
    assert ours(stored["spec"]["volumes"]) == ours(want["spec"]["volumes"])
    for got_c, want_c in zip(stored["spec"]["containers"], want["spec"]["containers"], strict=True):
        assert got_c.get("command") == want_c.get("command")
        assert [e["name"] for e in got_c.get("env", [])] == [e["name"] for e in want_c.get("env", [])]
        assert got_c.get("securityContext", {}).get("privileged") == want_c.get("securityContext", {}).get("privileged")
        assert [m["mountPath"] for m in without_service_account(got_c.get("volumeMounts", []))] == [
            m["mountPath"] for m in without_service_account(want_c.get("volumeMounts", []))
        ]


def test_namespace_without_label_is_untouched(kube: Kube, webhook: Webhook) -> None:
    r = kube.create_pod(OFF, load(GOLDEN / "volcano" / "plain-c10d-worker-1.yaml"))
    assert r.status_code == 201 and injected(r.json()) is None
    assert r.json()["spec"]["dnsPolicy"] == "ClusterFirst"


def test_namespace_opt_in_sends_unlabelled_pods_but_not_opted_out_ones(kube: Kube, webhook: Webhook) -> None:
    """The default opt-in mode: in a labelled namespace a training pod without the pod label is
    mutated as with it; one labelled hostnet-rdma.io/inject=disabled is never sent."""
    pod = load(GOLDEN / "volcano" / "plain-c10d-worker-1.yaml")
    pod["metadata"]["labels"].pop("hostnet-rdma.io/inject")
    pod["metadata"]["name"] = "unlabelled"
    r = kube.create_pod(ON, pod)
    assert r.status_code == 201 and (injected(r.json()) or {}).get("launcher") == "volcano", r.text
    before = settled_count(webhook.log, '"msg":"admission"') if webhook.log else 0
    pod["metadata"]["name"] = "opted-out"
    pod["metadata"]["labels"]["hostnet-rdma.io/inject"] = "disabled"
    r = kube.create_pod(ON, pod)
    assert r.status_code == 201 and injected(r.json()) is None
    if webhook.log:
        assert settled_count(webhook.log, '"msg":"admission"') == before  # never called


def test_only_host_network_pods_are_sent_and_only_training_ones_change(kube: Kube, webhook: Webhook) -> None:
    """The webhook's matchConditions: the API server does not call it for a pod without
    hostNetwork. A host-network pod that trains nothing (a node exporter) is sent and left as it is."""
    before = settled_count(webhook.log, '"msg":"admission"') if webhook.log else 0
    pod = load(GOLDEN / "generic" / "not-hostnetwork.yaml")
    pod["metadata"]["name"] = "no-host-network"
    r = kube.create_pod(ON, pod)
    assert r.status_code == 201 and injected(r.json()) is None
    if webhook.log:
        assert settled_count(webhook.log, '"msg":"admission"') == before  # never called
    exporter = load(GOLDEN / "opt-in" / "node-exporter-daemonset.yaml")
    exporter["metadata"].pop("ownerReferences")  # no DaemonSet of that uid here
    r = kube.create_pod(ON, exporter)
    assert r.status_code == 201 and injected(r.json()) is None
    stored = r.json()["spec"]
    assert stored["dnsPolicy"] == "ClusterFirst" and "securityContext" not in stored["containers"][0]
    assert [v["name"] for v in stored["volumes"] if not v["name"].startswith("kube-api-access-")] == ["root"]
    if webhook.log:
        assert settled_count(webhook.log, '"msg":"admission"') == before + 1  # sent, and unchanged
        last = [json.loads(ln) for ln in webhook.log.read_text().splitlines() if '"msg":"admission"' in ln][-1]
        assert last["outcome"] == "unchanged" and last["pod"].startswith("node-exporter-"), last


def test_the_cautious_opt_in_mode_ignores_unlabelled_pods(plane: ControlPlane, kube: Kube, webhook: Webhook) -> None:
    """config.optIn=pod (helm upgrade): the pod label is required again; back to the default after."""
    if not webhook.log:
        pytest.skip("changes the installed release: only against the tier's own control plane")
    torchrun = load(GOLDEN / "generic" / "indexed-job.yaml")
    torchrun["metadata"]["labels"].pop("hostnet-rdma.io/inject")
    torchrun["metadata"].pop("ownerReferences")

    def mode_in_effect(mutated: bool) -> None:  # the API server reloads webhook configurations asynchronously
        deadline = time.monotonic() + 30
        while True:
            r = kube.create_pod(ON, torchrun, dryRun="All")
            if r.status_code == 201 and (injected(r.json()) is not None) == mutated:
                return
            assert time.monotonic() < deadline, r.text[:300]
            time.sleep(0.3)

    p = helm(plane, "upgrade", "hostnet-rdma", "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
             "--set", "config.optIn=pod")  # fmt: skip
    assert p.returncode == 0, p.stderr
    try:
        hook = kube.ok("GET", MWC_PATH)["webhooks"][0]
        assert hook["objectSelector"] == {"matchLabels": {"hostnet-rdma.io/inject": "enabled"}}
        mode_in_effect(mutated=False)
        before = settled_count(webhook.log, '"msg":"admission"')
        r = kube.create_pod(ON, {**torchrun, "metadata": {**torchrun["metadata"], "generateName": "cautious-"}})
        assert r.status_code == 201 and injected(r.json()) is None
        assert settled_count(webhook.log, '"msg":"admission"') == before  # never called
        labelled = {**torchrun, "metadata": {**torchrun["metadata"], "generateName": "cautious-labelled-",
                                              "labels": {**torchrun["metadata"]["labels"], "hostnet-rdma.io/inject": "enabled"}}}  # fmt: skip
        r = kube.create_pod(ON, labelled)
        assert r.status_code == 201 and injected(r.json()) is not None
    finally:
        p = helm(plane, "upgrade", "hostnet-rdma", "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                 "--set", "config.optIn=namespace")  # fmt: skip
        assert p.returncode == 0, p.stderr
        mode_in_effect(mutated=True)


def settled_count(log: Path, needle: str, quiet: float = 0.5, wait: float = 30) -> int:
    """How many of the webhook's log lines carry `needle`, once no line has come for `quiet`
    seconds (at most `wait`: then the count as it is, for the caller's assertion to judge): the
    server writes its admission lines at the end of an event-loop turn, which can come after the
    response (seen under load: a dry run's line counted with the next create's)."""
    count = log.read_text().count(needle)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = log.read_text().count(needle)
        if now == count:
            break
        count = now
    return count


@pytest.mark.parametrize("namespace", ["kube-system", RELEASE_NS])
def test_excluded_namespaces_are_never_sent_even_if_labelled(kube: Kube, webhook: Webhook, namespace: str) -> None:
    kube.http.patch(f"/api/v1/namespaces/{namespace}", content=json.dumps({"metadata": {"labels": {"hostnet-rdma.io/inject": "enabled"}}}),
                    headers={"content-type": "application/merge-patch+json"})  # fmt: skip
    before = settled_count(webhook.log, '"msg":"admission"') if webhook.log else 0
    pod = load(GOLDEN / "generic" / "statefulset.yaml")
    pod["metadata"]["name"] = f"excluded-{namespace}"
    r = kube.create_pod(namespace, pod)
    assert r.status_code == 201 and injected(r.json()) is None
    if webhook.log:
        assert settled_count(webhook.log, '"msg":"admission"') == before  # never called


def test_dry_run_server_is_mutated_and_stores_nothing(kube: Kube, webhook: Webhook) -> None:
    pod = load(GOLDEN / "lws" / "leader.yaml")
    pod["metadata"]["name"] = "dry-run-leader"
    r = kube.create_pod(ON, pod, dryRun="All")
    assert r.status_code == 201 and injected(r.json()) is not None
    assert kube.request("GET", f"/api/v1/namespaces/{ON}/pods/dry-run-leader").status_code == 404


def test_baseline_namespace_rejects_with_the_reason(kube: Kube, webhook: Webhook) -> None:
    pod = load(GOLDEN / "volcano" / "plain-c10d-worker-1.yaml")
    r = kube.create_pod(BASELINE, pod)
    assert r.status_code == 403
    msg = r.json()["message"]
    assert 'violates PodSecurity "baseline:latest"' in msg and "hostNetwork=true" in msg
    assert "privileged" in msg  # what the webhook added is named too


@local_only
def test_reinvocation_after_a_later_webhook(kube: Kube, webhook: Webhook, tmp_path: Path) -> None:
    """A webhook that runs after ours (sorted later) adds env + a label, as LWS does.
    Ours is re-invoked (IfNeeded): the final pod is right and nothing is applied twice."""

    def late(request: dict[str, Any]) -> list[dict[str, Any]]:
        obj = request["object"]
        if "leaderworkerset.sigs.k8s.io/group-key" in obj["metadata"].get("labels", {}):
            return []
        return [
            {"op": "add", "path": "/metadata/labels/leaderworkerset.sigs.k8s.io~1group-key", "value": "g-key-1"},
            {
                "op": "add",
                "path": "/spec/containers/0/env/-",
                "value": {"name": "LWS_LEADER_ADDRESS", "value": "llm-0.llm.hr-on"},
            },
            {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "LWS_GROUP_SIZE", "value": "2"}},
        ]

    fake = FakeWebhook(tmp_path, late)
    mwc = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-late-mutator"},
        "webhooks": [{
            "name": "late.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "reinvocationPolicy": "Never", "timeoutSeconds": 5,
            "clientConfig": {"url": fake.url, "caBundle": fake.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "objectSelector": {"matchLabels": {"late": "yes"}},
        }],
    }  # fmt: skip
    kube.ok("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mwc)
    try:
        pod = load(GOLDEN / "lws" / "worker-before-lws-webhook.yaml")
        pod["metadata"]["labels"]["late"] = "yes"
        pod["metadata"]["name"] = "reinvoked-0-1"
        deadline = time.monotonic() + 30
        while True:  # until the API server has loaded the new configuration
            r = kube.create_pod(ON, pod, dryRun="All")
            if r.status_code == 201 and "LWS_GROUP_SIZE" in env_of(r.json(), 0):
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.3)
        before = settled_count(webhook.log, '"pod":"reinvoked-0-1"')
        r = kube.create_pod(ON, pod)
        assert r.status_code == 201, r.text
        final = r.json()
        calls = settled_count(webhook.log, '"pod":"reinvoked-0-1"') - before
        assert calls == 2, "ours should run, then be re-invoked after the later webhook"
        c = final["spec"]["containers"][0]
        names = [e["name"] for e in c["env"]]
        assert len(names) == len(set(names)), names
        assert [v["name"] for v in final["spec"]["volumes"]].count("hostnet-rdma-shm") == 1
        assert c["command"].count("hostnet-rdma-bootstrap") == 1
        settings = [a for a in c["command"] if a.startswith("launcher=")]
        assert len(settings) == 1 and settings == [settings_of(c)], c["command"]  # replaced, not stacked
        env = rules.unpack({**env_of(final, 0), rules.ENV_POD: settings[0]})
        # The re-invocation saw the later webhook's label: the rdzv id follows it.
        assert env["HOSTNET_RDMA_RDZV_ID"] == "g-key-1" and env["LWS_LEADER_ADDRESS"] == "llm-0.llm.hr-on"
    finally:
        kube.request("DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/zz-late-mutator")
        fake.close()


@local_only
def test_webhook_down_and_slow(kube: Kube, webhook: Webhook, tmp_path: Path) -> None:
    """failurePolicy Fail refuses with a message naming the webhook; Ignore creates the pod
    unmutated. The same when the webhook answers after timeoutSeconds."""
    original = kube.ok("GET", MWC_PATH)
    slow = FakeWebhook(tmp_path / "slow", delay=4.0)
    dead_url = "https://127.0.0.1:9/mutate"  # nothing listens on port 9
    pod = load(GOLDEN / "generic" / "statefulset.yaml")
    try:
        for label, url, bundle in (("down", dead_url, None), ("slow", slow.url, slow.ca_bundle)):
            set_failure_policy(kube, "Fail", url=url, ca_bundle=bundle, timeout=2)
            deadline = time.monotonic() + 30
            while True:
                pod["metadata"]["name"] = f"{label}-fail"
                r = kube.create_pod(ON, pod)
                if r.status_code >= 400:
                    break
                kube.request("DELETE", f"/api/v1/namespaces/{ON}/pods/{label}-fail")
                assert time.monotonic() < deadline, "configuration change not picked up"
                time.sleep(0.3)
            assert r.status_code == 500, r.text
            assert 'failed calling webhook "pods.hostnet-rdma.io"' in r.json()["message"]
            set_failure_policy(kube, "Ignore", url=url, ca_bundle=bundle, timeout=2)
            deadline = time.monotonic() + 30
            while True:
                pod["metadata"]["name"] = f"{label}-ignore-{int(time.monotonic() * 1000)}"
                r = kube.create_pod(ON, pod)
                if r.status_code == 201:
                    break
                assert time.monotonic() < deadline, r.text
                time.sleep(0.3)
            assert injected(r.json()) is None
    finally:
        restore_mwc(kube, original)
        slow.close()
        wait_for_webhook(kube, ON)


def test_chart_manifests_apply_server_side(plane: ControlPlane, kube: Kube, webhook: Webhook) -> None:
    for mode in ("self-managed", "provided"):
        extra = (
            ["--set", "certs.provided.secretName=s", "--set", "certs.provided.caBundle=Zm9v"]
            if mode == "provided"
            else []
        )
        p = helm(plane, "template", "apply-test", "charts/hostnet-rdma", "-n", "hr-apply", "--kube-version", "1.36.3",
                 "--set", f"certs.mode={mode}", *extra)  # fmt: skip
        assert p.returncode == 0, p.stderr
        kube.namespace("hr-apply", {})
        docs = [d for d in yaml.safe_load_all(p.stdout) if d]
        assert {d["kind"] for d in docs} >= {"Deployment", "Service", "ConfigMap", "MutatingWebhookConfiguration"}
        for doc in docs:
            r = kube.apply(doc)
            assert r.status_code in (200, 201), f"{doc['kind']} {doc['metadata']['name']}: {r.text}"
    kube.request(
        "DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/apply-test-hostnet-rdma"
    )


def test_helm_installed_the_configuration_under_test(kube: Kube, webhook: Webhook) -> None:
    mwc = kube.ok("GET", MWC_PATH)
    assert mwc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    hook = mwc["webhooks"][0]
    if E2E_KUBECONFIG:
        assert hook["clientConfig"]["service"]["name"] == WEBHOOK_CONFIG
    else:
        assert hook["clientConfig"]["url"] == webhook.url
    assert hook["sideEffects"] == "NoneOnDryRun" and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["matchPolicy"] == "Equivalent" and hook["rules"][0]["operations"] == ["CREATE"]


def self_managed_args(plane: ControlPlane, ns: str, check_seconds: int) -> list[str]:
    return ["--self-managed-certs", "--kubeconfig", str(plane.kubeconfig), "--namespace", ns, "--secret", "hr-tls",
            "--service", "hostnet-rdma", "--webhook-config", WEBHOOK_CONFIG, "--extra-san", "127.0.0.1",
            "--cert-check-seconds", str(check_seconds)]  # fmt: skip


def restore_mwc(kube: Kube, original: dict[str, Any]) -> None:
    """Put our webhook configuration back as helm installed it."""
    current = kube.ok("GET", MWC_PATH)
    original["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.ok("PUT", MWC_PATH, original)


@local_only
def test_self_managed_certificates_with_two_replicas(
    plane: ControlPlane, kube: Kube, webhook: Webhook, tmp_path: Path
) -> None:
    """Two replicas start at once against an empty namespace: one Secret, one CA, the caBundle
    patched, both serving the same pair, pods admitted through the API server."""
    ns = "hr-selfmanaged"
    kube.namespace(ns, {})
    original = kube.ok("GET", MWC_PATH)
    common = self_managed_args(plane, ns, check_seconds=2)
    replicas: list[Webhook] = []
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            (tmp_path / f"r{i}").mkdir()
            replicas.append(start_webhook(tmp_path / f"r{i}", extra=common, certs=False))
        except BaseException as e:
            errors.append(e)

    try:
        threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        secret = kube.ok("GET", f"/api/v1/namespaces/{ns}/secrets/hr-tls")
        ca = base64.b64decode(secret["data"]["ca.crt"])
        mwc = kube.ok("GET", MWC_PATH)
        assert base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]) == ca
        served = [(r.log.parent / "tls" / "tls.crt").read_bytes() for r in replicas]
        assert served[0] == served[1] == base64.b64decode(secret["data"]["tls.crt"])
        # Point the webhook at replica 0 (the caBundle is the self-managed CA now).
        set_failure_policy(kube, "Fail", url=replicas[0].url)
        pod = load(GOLDEN / "trainjob" / "seed-node-0-1.yaml")
        deadline = time.monotonic() + 30
        while True:
            r = kube.create_pod(ON, pod, dryRun="All")
            if r.status_code == 201 and injected(r.json()):
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.3)
    finally:
        for rep in replicas:
            rep.proc.terminate()
            rep.proc.wait(timeout=10)
        restore_mwc(kube, original)
        wait_for_webhook(kube, ON)


@local_only
def test_self_managed_rotation_reaches_every_replica(
    plane: ControlPlane, kube: Kube, webhook: Webhook, tmp_path: Path
) -> None:
    ns = "hr-rotate"
    kube.namespace(ns, {})
    original = kube.ok("GET", MWC_PATH)
    args = self_managed_args(plane, ns, check_seconds=1)
    rep = start_webhook(tmp_path, extra=args, certs=False)
    try:
        first = kube.ok("GET", f"/api/v1/namespaces/{ns}/secrets/hr-tls")
        # Another replica (simulated) sees the cert as due: a rotate-before longer than its life.
        p = subprocess.run(
            [sys.executable, "-c", (
                "import datetime as dt, sys; from pathlib import Path; from app import kube; "
                f"c = kube.SelfManagedCerts(kube.api_client({str(plane.kubeconfig)!r}), {ns!r}, 'hr-tls', 'hostnet-rdma', "
                f"{WEBHOOK_CONFIG!r}, Path({str(tmp_path / 'other')!r}), rotate_before=dt.timedelta(days=400), "
                "extra_hosts=('127.0.0.1',)); c.ensure()")],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        second = kube.ok("GET", f"/api/v1/namespaces/{ns}/secrets/hr-tls")
        assert second["data"]["tls.crt"] != first["data"]["tls.crt"]
        assert second["data"]["ca.crt"] == first["data"]["ca.crt"]  # CA kept: caBundle stays valid
        deadline = time.monotonic() + 20
        while (tmp_path / "tls" / "tls.crt").read_bytes() != base64.b64decode(second["data"]["tls.crt"]):
            assert time.monotonic() < deadline, "rotation did not reach the running replica"
            time.sleep(0.2)
        # A caBundle reset by re-applying the configuration is repaired by the running replica.
        broken = kube.ok("GET", MWC_PATH)
        broken["webhooks"][0]["clientConfig"]["caBundle"] = webhook.ca_bundle
        kube.ok("PUT", MWC_PATH, broken)
        deadline = time.monotonic() + 20
        while kube.ok("GET", MWC_PATH)["webhooks"][0]["clientConfig"]["caBundle"] != second["data"]["ca.crt"]:
            assert time.monotonic() < deadline, "caBundle not repaired"
            time.sleep(0.2)
    finally:
        rep.proc.terminate()
        rep.proc.wait(timeout=10)
        restore_mwc(kube, original)


def test_record_tier_timings(plane: ControlPlane) -> None:
    TIMINGS.setdefault("control plane start (processes only)", plane.startup_seconds)
    assert plane.startup_seconds < 60


def test_explain_a_live_pod(plane: ControlPlane, kube: Kube, webhook: Webhook) -> None:
    pod = load(GOLDEN / "pytorchjob" / "seed-c10d-worker-0.yaml")
    pod["metadata"]["name"] = "explain-me"
    assert kube.create_pod(ON, pod).status_code == 201
    p = subprocess.run([sys.executable, "-m", "app.cli", "explain", "explain-me", "-n", ON, "--kubeconfig", str(plane.kubeconfig)],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"ok  namespace {ON} has the label hostnet-rdma.io/inject=enabled" in p.stdout
    assert "ok  already mutated by hostnet-rdma 0.1.0: launcher pytorchjob, profile BM.GPU4.8" in p.stdout
    off = kube.create_pod(OFF, {**pod, "metadata": {**pod["metadata"], "name": "explain-off"}})
    assert off.status_code == 201
    p = subprocess.run([sys.executable, "-m", "app.cli", "explain", "explain-off", "-n", OFF, "--kubeconfig", str(plane.kubeconfig)],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 1 and f"NO  namespace {OFF} lacks the label" in p.stdout


def test_a_refused_request_names_the_right_it_lacked(plane: ControlPlane, kube: Kube, webhook: Webhook,
                                                   tmp_path: Path) -> None:  # fmt: skip
    """With a real token that RBAC grants nothing, the CLIs say whom the API server refused and
    what it refused (its Status message), not only `403 Forbidden`."""
    sa = "nobody"
    r = kube.request("POST", f"/api/v1/namespaces/{ON}/serviceaccounts",
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})  # fmt: skip
    assert r.status_code in (201, 409), r.text
    token = kube.token(ON, sa)
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["users"] = [{"name": kubeconfig_names(plane)[1], "user": {"token": token}}]
    kubeconfig = tmp_path / "nobody"
    kubeconfig.write_text(yaml.safe_dump(config))
    who = f'User "system:serviceaccount:{ON}:{sa}"'
    for words, said in (
        (["explain", "anything", "-n", ON], f'{ON}/anything: 403 Forbidden: pods "anything" is forbidden: {who} cannot get resource "pods"'),
        (["e2e"], f"the API server refused: 403 Forbidden: mutatingwebhookconfigurations.admissionregistration.k8s.io is forbidden: {who} cannot list"),
    ):  # fmt: skip
        p = subprocess.run([sys.executable, "-m", "app.cli", *words, "--kubeconfig", str(kubeconfig)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
        assert p.returncode == 2, p.stdout + p.stderr
        assert said in p.stderr, p.stderr


def test_the_kubectl_plugin_honours_kubectls_context_kubeconfig_and_namespace(
    plane: ControlPlane, kube: Kube, webhook: Webhook, tmp_path: Path
) -> None:
    """`kubectl hostnet-rdma ...` through the real kubectl, which finds the installed
    `kubectl-hostnet_rdma` on PATH: the plugin reads the kubeconfig and context kubectl's
    flags name, and takes the namespace from the context when -n is not given."""
    import shutil

    kubectl = plane.bin_dir / "kubectl"
    kubectl = kubectl if kubectl.exists() else Path(shutil.which("kubectl") or "kubectl")
    plugin = Path(sys.executable).parent / "kubectl-hostnet_rdma"
    assert plugin.exists(), "the package installs kubectl-hostnet_rdma beside hostnet-rdma"
    pod = load(GOLDEN / "pytorchjob" / "seed-c10d-worker-0.yaml")
    pod["metadata"]["name"] = "plugin-me"
    assert kube.create_pod(ON, pod).status_code == 201
    real = yaml.safe_load(plane.kubeconfig.read_text())
    cluster, user = kubeconfig_names(plane)
    # Two contexts: the current one points nowhere; "real" is the test cluster, namespace ON.
    two = {**real, "current-context": "nowhere",
           "clusters": [*real["clusters"], {"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}],
           "contexts": [{"name": "real", "context": {"cluster": cluster, "user": user, "namespace": ON}},
                        {"name": "nowhere", "context": {"cluster": "nowhere", "user": user}}]}  # fmt: skip
    config_file = tmp_path / "two-contexts"
    config_file.write_text(yaml.safe_dump(two))
    env = {**plane.env(), "PATH": f"{plugin.parent}:{plane.env().get('PATH', '')}", "KUBECONFIG": str(config_file)}
    listed = subprocess.run([str(kubectl), "plugin", "list"], capture_output=True, text=True, env=env)
    assert str(plugin) in listed.stdout, listed.stdout + listed.stderr

    def plugin_run(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), "hostnet-rdma", *words], capture_output=True, text=True, env=env, timeout=60
        )

    ok = plugin_run("explain", "plugin-me", "--context", "real")  # namespace: the context's
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"ok  namespace {ON} has the label hostnet-rdma.io/inject=enabled" in ok.stdout
    flags_first = plugin_run("--context=real", "-n", ON, "--kubeconfig", str(config_file), "explain", "plugin-me")
    assert flags_first.returncode == 0, flags_first.stdout + flags_first.stderr
    nowhere = plugin_run("explain", "plugin-me", "-n", ON)  # the current context: unreachable
    assert nowhere.returncode != 0
    wrong_ns = plugin_run("explain", "plugin-me", "--context", "real", "-n", OFF)
    assert wrong_ns.returncode == 2 and f"{OFF}/plugin-me: 404" in wrong_ns.stderr


@local_only
def test_events_reach_the_job_through_the_real_api_server(plane: ControlPlane, kube: Kube, tmp_path: Path) -> None:
    """A webhook with cluster credentials records Events on the pods' Job: the API server
    accepts their bodies (create, then a series patch), and `kubectl describe job` shows them
    aggregated, as the job's submitter would look. A dry run records nothing."""
    import httpx

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ev-job", "namespace": ON},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                           "containers": [{"name": "c", "image": "busybox"}]}}}}  # fmt: skip
    uid = kube.ok("POST", f"/apis/batch/v1/namespaces/{ON}/jobs", job)["metadata"]["uid"]
    pod = load(GOLDEN / "generic" / "indexed-job.yaml")
    pod["metadata"].update(namespace=ON, ownerReferences=[
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ev-job", "uid": uid, "controller": True}])  # fmt: skip
    pod["spec"]["containers"][0]["command"] = ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=ij-0.ij:1", "t.py"]
    hook = start_webhook(tmp_path, extra=["--kubeconfig", str(plane.kubeconfig)])
    ca = tmp_path / "ca.pem"
    ca.write_bytes(hook.ca.cert_pem)
    try:
        # Forged reviews (posted to the webhook, not sent by the API server): the real Job's name
        # with another uid, and a Job that does not exist. Neither gets an Event.
        stranger = copy.deepcopy(pod)
        stranger["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-4000-8000-00000000dead"
        ghost = copy.deepcopy(pod)
        ghost["metadata"]["ownerReferences"][0].update(name="no-such-job", uid="00000000-0000-4000-8000-00000000beef")
        for i, (dry, obj) in enumerate(((False, pod), (False, pod), (False, pod), (True, pod), (False, stranger),
                                        (False, ghost))):  # fmt: skip
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": f"ev-{i}", "operation": "CREATE", "namespace": ON, "dryRun": dry,
                                  "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": obj}}  # fmt: skip
            r = httpx.post(hook.url, json=review, verify=str(ca), timeout=10)
            assert r.status_code == 200 and r.json()["response"]["allowed"], r.text
            if i == 0:
                time.sleep(2.5)  # past a flush: the next two raise the created Events' count
        kubectl = plane.bin_dir / "kubectl"
        deadline = time.monotonic() + 20
        while True:
            described = subprocess.run([str(kubectl), "describe", "job", "ev-job", "-n", ON], capture_output=True,
                                       text=True, env=plane.env()).stdout  # fmt: skip
            if "(x3 over" in described or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        events = kube.ok("GET", f"/apis/events.k8s.io/v1/namespaces/{ON}/events")["items"]
        ours = [e for e in events if e.get("regarding", {}).get("uid") == uid]
        forgeries = [e for e in events if e.get("regarding", {}).get("uid", "").startswith("00000000-0000-4000-8000")]
        assert not forgeries, forgeries
        assert {e["reason"] for e in ours} == {"Injected", "NodeCountUnknown"}, (
            ours,
            hook.log and hook.log.read_text(),
        )
        assert all(e["series"]["count"] == 3 for e in ours), ours  # the dry run is not counted
        assert all(e["reportingController"] == "hostnet-rdma.io/webhook" for e in ours)
        assert "Injected" in described and "(x3 over" in described and "hostnet-rdma.io/webhook" in described, described
        assert "NodeCountUnknown" in described and "--nnodes not given" in described, described
    finally:
        assert hook.proc is not None
        hook.proc.terminate()
        hook.proc.wait(timeout=30)


def test_explain_reads_the_excluded_namespaces_from_the_installed_configuration(
    plane: ControlPlane, kube: Kube, webhook: Webhook
) -> None:
    """The chart excludes its own namespace (and webhook.excludeNamespaces): explain says so,
    from the MutatingWebhookConfiguration the API server has, not from a built-in list."""
    pod = load(GOLDEN / "pytorchjob" / "seed-c10d-worker-0.yaml")
    pod["metadata"]["name"] = "explain-excluded"
    # The release's namespace outlives the run on a kept cluster: a pod of an earlier run goes first.
    kube.request("DELETE", f"/api/v1/namespaces/{RELEASE_NS}/pods/explain-excluded", gracePeriodSeconds="0")
    deadline = time.monotonic() + 60
    while (r := kube.create_pod(RELEASE_NS, pod)).status_code == 409 and time.monotonic() < deadline:
        time.sleep(1)
    assert r.status_code == 201, r.text
    p = subprocess.run([sys.executable, "-m", "app.cli", "explain", "explain-excluded", "-n", RELEASE_NS,
                        "--kubeconfig", str(plane.kubeconfig)], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 1 and f"NO  namespace {RELEASE_NS} is excluded from the webhook" in p.stdout, p.stdout
    p = subprocess.run([sys.executable, "-m", "app.cli", "explain", "explain-excluded", "-n", RELEASE_NS,
                        "--kubeconfig", str(plane.kubeconfig), "--webhook-config", "no-such-release"],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 1 and "no MutatingWebhookConfiguration 'no-such-release'" in p.stdout, p.stdout


@pytest.mark.parametrize("case", sorted(p for d in ("golden-init", "golden-image") for p in (ROOT / "tests" / d).glob("*.yaml")
                                        if not p.name.endswith(".expected.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")  # fmt: skip
def test_image_deliveries_are_pods_the_api_server_accepts(kube: Kube, case: Path) -> None:
    """The wrapper from the webhook's image, copied by an init container or mounted as an image
    volume: the API server validates and stores the pod as the core made it (created where no
    webhook runs)."""
    from tests.test_golden import DELIVERY_CONFIGS

    pod = load(case)
    pod["metadata"]["name"] = f"{case.parent.name}-{case.stem}"
    want = mutate({**pod, "metadata": {**pod["metadata"], "namespace": OFF}},
                  Params(config=DELIVERY_CONFIGS[case.parent], namespace=OFF, wrapper_payload=payload(), version="0.1.0")).pod  # fmt: skip
    r = kube.create_pod(OFF, want)
    assert r.status_code == 201, r.text
    stored = r.json()["spec"]
    want_inits = want["spec"].get("initContainers") or []
    assert [c["name"] for c in stored.get("initContainers") or []] == [c["name"] for c in want_inits]
    for got_c, want_c in zip(stored.get("initContainers") or [], want_inits, strict=True):
        if want_c["name"] != "hostnet-rdma-wrapper":
            continue
        for key in ("image", "command", "securityContext"):
            assert got_c.get(key) == want_c.get(key), (case.stem, key)
        assert without_service_account(got_c.get("volumeMounts") or []) == want_c.get("volumeMounts"), case.stem
        # No resources (a trainer with none to mirror): the API server stores an empty object.
        assert (got_c.get("resources") or {}) == (want_c.get("resources") or {}), case.stem
    for got_c, want_c in zip(stored["containers"], want["spec"]["containers"], strict=True):
        assert got_c.get("command") == want_c.get("command")
        assert without_service_account(got_c.get("volumeMounts") or []) == (want_c.get("volumeMounts") or [])
    # The API server keeps the image volume as written (a server without the feature drops it).
    assert [v for v in stored["volumes"] if v["name"] == "hostnet-rdma"] == [
        v for v in want["spec"]["volumes"] if v["name"] == "hostnet-rdma"
    ]


def test_e2e_reports_absent_launchers_and_a_missing_webhook(plane: ControlPlane, kube: Kube, webhook: Webhook) -> None:
    """`hostnet-rdma e2e` against a cluster that serves none of the launchers' kinds (no
    controllers here): named ones are reported as not present and fail the run before any
    namespace is made; the opt-in labels come from the installed configuration."""
    from app import kube as kube_api
    from app.e2e.run import E2EError, opt_in_labels

    api = kube_api.api_client(str(plane.kubeconfig))
    assert opt_in_labels(api) == ({"hostnet-rdma.io/inject": "enabled"}, {}, "namespace")
    before = {n["metadata"]["name"] for n in kube.ok("GET", "/api/v1/namespaces")["items"]}
    p = subprocess.run([sys.executable, "-m", "app.cli", "e2e", "--kubeconfig", str(plane.kubeconfig),
                        "--launcher", "volcano,jobset", "-o", "json"], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert not report["ok"] and [(j["launcher"], j["outcome"]) for j in report["jobs"]] == [
        ("volcano", "not present"), ("jobset", "not present")]  # fmt: skip
    assert "JobSet is not installed here (the API server serves no JobSet of jobset.x-k8s.io/v1alpha2)" in p.stdout
    assert {n["metadata"]["name"] for n in kube.ok("GET", "/api/v1/namespaces")["items"]} == before
    # A Kueue queue asked for where Kueue is not installed: the run stops before it creates anything.
    p = subprocess.run([sys.executable, "-m", "app.cli", "e2e", "--kubeconfig", str(plane.kubeconfig),
                        "--cluster-queue", "gpu"], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 2 and "--cluster-queue: Kueue is not installed here" in p.stderr, p.stdout + p.stderr
    assert {n["metadata"]["name"] for n in kube.ok("GET", "/api/v1/namespaces")["items"]} == before
    # Without the webhook (another name than the chart's): the run cannot start, and says why.
    with pytest.raises(E2EError, match="webhook is not installed on this cluster"):
        opt_in_labels(api, "pods.not-installed.example")


@local_only
def test_a_namespace_with_a_resource_quota_and_a_limit_range_accepts_every_delivery(
    kube: Kube, webhook: Webhook, tmp_path: Path
) -> None:
    """ResourceQuota on requests and limits of cpu and memory (every container must state
    limits), LimitRange with min, max and defaults: what the webhook adds must pass both, or
    pod creation fails whatever failurePolicy says. Each wrapper delivery, a trainer with the
    LimitRange's defaults and a Guaranteed one; the init container mirrors the trainer's cpu
    and memory (the fixed 10m/32Mi init container was refused: below min, no limits.cpu)."""
    ns = "hr-quota"
    kube.namespace(ns, {"hostnet-rdma.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
    hard = {"requests.cpu": "1000", "requests.memory": "10Ti", "limits.cpu": "1000", "limits.memory": "10Ti"}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": ns},
             "spec": {"hard": hard}}  # fmt: skip
    r = kube.request("POST", f"/api/v1/namespaces/{ns}/resourcequotas", quota)
    assert r.status_code in (201, 409), r.text
    # No controller-manager here: the quota's status, which the quota admission needs, set by hand.
    stored = kube.ok("GET", f"/api/v1/namespaces/{ns}/resourcequotas/compute")
    stored["status"] = {"hard": hard, "used": {k: "0" for k in hard}}
    kube.ok("PUT", f"/api/v1/namespaces/{ns}/resourcequotas/compute/status", stored)
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds", "namespace": ns},
              "spec": {"limits": [{"type": "Container", "min": {"cpu": "100m", "memory": "128Mi"},
                                   "max": {"cpu": "64", "memory": "1Ti"}, "default": {"cpu": "2", "memory": "4Gi"},
                                   "defaultRequest": {"cpu": "1", "memory": "2Gi"}}]}}  # fmt: skip
    r = kube.request("POST", f"/api/v1/namespaces/{ns}/limitranges", limits)
    assert r.status_code in (201, 409), r.text
    original = kube.ok("GET", MWC_PATH)
    base = load(GOLDEN / "generic" / "indexed-job.yaml")
    trainers = {
        "defaults": {},  # the LimitRange's defaults, set before our webhook runs
        "guaranteed": {
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"cpu": "8", "memory": "64Gi"}}
        },
    }
    config = tmp_path / "config.yaml"
    config.write_text("wrapper: {delivery: initContainer, image: registry.example/hostnet-rdma-wrapper:1}\n")
    hook = start_webhook(tmp_path / "hook", extra=["--config", str(config)])
    try:
        set_failure_policy(kube, "Fail", url=hook.url, ca_bundle=hook.ca_bundle)
        for delivery in ("initContainer", "imageVolume", "inline"):
            # The webhook reloads its config file on change, as from the chart's ConfigMap.
            config.write_text(f"wrapper: {{delivery: {delivery}, image: registry.example/hostnet-rdma-wrapper:1}}\n")
            for variant, extra in trainers.items():
                pod = copy.deepcopy(base)
                pod["metadata"].pop("ownerReferences")
                pod["metadata"]["generateName"] = f"q-{delivery.lower()}-{variant}-"
                pod["spec"]["containers"][0].update(extra)
                deadline = time.monotonic() + 30
                while True:  # until the API server calls the webhook, and the webhook has the new config
                    r = kube.create_pod(ns, pod)
                    assert r.status_code == 201, f"{delivery}/{variant}: {r.text}"
                    got = r.json()
                    inits = [c for c in got["spec"].get("initContainers", []) if c["name"] == "hostnet-rdma-wrapper"]
                    (shape,) = [v for v in got["spec"]["volumes"] if v["name"] == "hostnet-rdma"] or [{}]
                    seen = ("initContainer" if inits else "imageVolume" if "image" in shape
                            else "inline" if injected(got) else "none")  # fmt: skip
                    if seen == delivery:
                        break
                    assert time.monotonic() < deadline, got["spec"]
                    time.sleep(0.3)
                if inits:
                    trainer = got["spec"]["containers"][0]["resources"]
                    assert inits[0]["resources"] == {k: {r: v for r, v in trainer[k].items() if r in ("cpu", "memory")}
                                                     for k in ("requests", "limits")}, (inits, trainer)  # fmt: skip
    finally:
        restore_mwc(kube, original)
        assert hook.proc is not None
        hook.proc.terminate()
        hook.proc.wait(timeout=10)
        wait_for_webhook(kube, ON)
