"""Least privilege that holds (self-managed certificates): with the chart's RBAC the webhook's
ServiceAccount could patch any field of its webhook configuration and create any Secret; the
chart's ValidatingAdmissionPolicy, enforced by the real API server, leaves it only the caBundle
of its own configuration and its own Secret. Requests are made with a real token of that
ServiceAccount (TokenRequest)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import yaml

from tests.apiserver.conftest import RELEASE, RELEASE_NS, WEBHOOK_CONFIG, Kube, helm, local_only
from tests.apiserver.controlplane import ControlPlane

pytestmark = pytest.mark.apiserver

MWC = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_CONFIG}"
KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
         "ValidatingAdmissionPolicyBinding"}  # fmt: skip


def json_patch(client: httpx.Client, path: str, ops: list[dict[str, Any]]) -> httpx.Response:
    return client.patch(path, content=json.dumps(ops), headers={"content-type": "application/json-patch+json"})


def secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": RELEASE_NS},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "eA==", "tls.key": "eA=="}}  # fmt: skip


@local_only
def test_service_account_may_change_only_its_ca_bundle_and_its_secret(
    plane: ControlPlane, kube: Kube, webhook: Any
) -> None:
    p = helm(plane, "template", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--kube-version", "1.36.3")
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] in KINDS]
    assert {d["kind"] for d in docs} == KINDS
    for d in docs:
        r = kube.apply(d)
        assert r.status_code in (200, 201), r.text
    token = kube.token(RELEASE_NS, RELEASE)
    sa = httpx.Client(base_url=plane.url, headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=30)
    hook = kube.ok("GET", MWC)["webhooks"][0]
    bundle = hook["clientConfig"]["caBundle"]
    other_policy = "Ignore" if hook["failurePolicy"] == "Fail" else "Fail"  # a real change, not a no-op
    # Policies take effect asynchronously: probe with a Secret of another name until refused.
    deadline = time.monotonic() + 30
    while (r := sa.post(f"/api/v1/namespaces/{RELEASE_NS}/secrets", json=secret("arbitrary"))).status_code < 300:
        kube.request("DELETE", f"/api/v1/namespaces/{RELEASE_NS}/secrets/arbitrary")
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(0.5)
    assert r.status_code in (403, 422) and "may only create or update its own Secret" in r.text, r.text
    for ops in (
        [{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": {}}],
        [{"op": "replace", "path": "/webhooks/0/objectSelector", "value": {}}],
        [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": other_policy}],
        [{"op": "replace", "path": "/webhooks/0/clientConfig/url", "value": "https://attacker.example/mutate"}],
    ):
        r = json_patch(sa, MWC, ops)
        assert r.status_code in (403, 422), (ops, r.text)
        assert "may only change the caBundle of its own webhook configuration" in r.text, r.text
    # What it needs still works: the caBundle of its own configuration, its own Secret.
    r = json_patch(sa, MWC, [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}])
    assert r.status_code == 200, r.text
    tls_secret = f"{RELEASE}-tls"
    # Its own Secret's name, but another type: a service-account-token Secret would have the
    # token controller mint a token for the account it names.
    token_secret = {**secret(tls_secret), "type": "kubernetes.io/service-account-token",
                    "metadata": {"name": tls_secret, "namespace": RELEASE_NS,
                                 "annotations": {"kubernetes.io/service-account.name": "default"}}}  # fmt: skip
    r = sa.post(f"/api/v1/namespaces/{RELEASE_NS}/secrets", json=token_secret)
    assert r.status_code in (403, 422) and "as type kubernetes.io/tls" in r.text, r.text
    r = sa.post(f"/api/v1/namespaces/{RELEASE_NS}/secrets", json=secret(tls_secret))
    assert r.status_code in (201, 409), r.text
    if r.status_code == 201:
        kube.request("DELETE", f"/api/v1/namespaces/{RELEASE_NS}/secrets/{tls_secret}")
    # And RBAC alone still forbids what it never needs.
    assert sa.delete(MWC).status_code == 403
    assert sa.get(f"/api/v1/namespaces/{RELEASE_NS}/secrets").status_code == 403
    # Events: created (and patched) in any namespace, never read or deleted.
    events = "/apis/events.k8s.io/v1/namespaces/default/events"
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "lp.1", "namespace": "default"},
             "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "hostnet-rdma.io/webhook",
             "reportingInstance": "t", "action": "Mutate", "reason": "Injected", "type": "Normal", "note": "x",
             "regarding": {"apiVersion": "v1", "kind": "Namespace", "name": "default"}}  # fmt: skip
    r = sa.post(events, json=event)
    assert r.status_code == 201, r.text
    series = {"count": 2, "lastObservedTime": "2026-12-01T10:00:01.000000Z"}
    assert json_patch(sa, f"{events}/lp.1", [{"op": "add", "path": "/series", "value": series}]).status_code == 200
    assert sa.get(events).status_code == 403 and sa.delete(f"{events}/lp.1").status_code == 403
    # A namespace's labels are read (Events only where the webhook's selectors admit); namespaces
    # are not listed, watched or changed.
    assert sa.get("/api/v1/namespaces/default").status_code == 200
    assert sa.get("/api/v1/namespaces").status_code == 403
    # A job is read by name (Events only about a job that exists with the review's uid); jobs are
    # not listed, watched or changed.
    assert sa.get("/apis/batch/v1/namespaces/default/jobs/no-such-job").status_code == 404
    assert sa.get("/apis/batch/v1/namespaces/default/jobs").status_code == 403
    assert sa.get("/apis/apps/v1/namespaces/default/statefulsets/no-such-set").status_code == 404
    assert sa.delete("/apis/batch/v1/namespaces/default/jobs/no-such-job").status_code == 403
    assert json_patch(sa, "/api/v1/namespaces/default", [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]
                      ).status_code == 403  # fmt: skip
