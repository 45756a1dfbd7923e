"""Tier 3 fixtures: a real kube-apiserver + etcd, our webhook as a local process, and the
chart's own MutatingWebhookConfiguration installed with helm, pointed at it by URL."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.core import InjectConfig
from app.webhook import tls
from tests.apiserver.controlplane import ROOT, ControlPlane, free_port

# Set by scripts/kind-e2e.sh: run this tier against a real cluster where the chart is
# installed (webhook in-cluster) instead of a local API server + local webhook process.
E2E_KUBECONFIG = os.environ.get("HOSTNET_RDMA_E2E_KUBECONFIG", "")
local_only = pytest.mark.skipif(bool(E2E_KUBECONFIG), reason="needs the local webhook process / loopback fakes")

RELEASE = "hostnet-rdma"
RELEASE_NS = "hostnet-rdma-system"
WEBHOOK_CONFIG = "hostnet-rdma"  # fullname of release "hostnet-rdma"
ON, OFF, BASELINE = "hr-on", "hr-off", "hr-baseline"
TIMINGS: dict[str, float] = {}


class ExternalCluster:
    """A cluster reached through a kubeconfig (kind): what tests need of a ControlPlane."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        self.kubeconfig = Path(kubeconfig)
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.url = cfg.host
        self.cfg = cfg
        self.startup_seconds = 0.0
        helm_bin = Path(
            os.environ.get("HELM", "")
            or (subprocess.run(["which", "helm"], capture_output=True, text=True).stdout.strip())
        )
        self.bin_dir = helm_bin.parent

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def http_client(self) -> httpx.Client:
        c = self.cfg
        headers = {"Authorization": c.api_key["authorization"]} if c.api_key.get("authorization") else {}
        # One SSLContext with the CA and the client certificate: httpx 0.28+ drops `cert=` when
        # `verify` is a CA path, and kind's kubeconfig authenticates by client certificate only
        # (every request went out as system:anonymous on real kind).
        ctx = ssl.create_default_context(cafile=c.ssl_ca_cert) if c.ssl_ca_cert else ssl.create_default_context()
        if not c.verify_ssl:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        if c.cert_file:
            ctx.load_cert_chain(c.cert_file, c.key_file)
        return httpx.Client(base_url=c.host, headers=headers, verify=ctx, timeout=30)

    def stop(self) -> None:
        pass


class Kube:
    """Raw JSON over the API server (no typed models that drop fields)."""

    def __init__(self, plane: ControlPlane | ExternalCluster) -> None:
        self.plane = plane
        if isinstance(plane, ExternalCluster):
            self.http = plane.http_client()
        else:
            self.http = httpx.Client(base_url=plane.url, headers=plane.headers, verify=False, timeout=30)

    def request(self, method: str, path: str, body: Any = None, **params: str) -> httpx.Response:
        kw: dict[str, Any] = {"params": params}
        if body is not None:
            kw["json"] = body
        return self.http.request(method, path, **kw)

    def ok(self, method: str, path: str, body: Any = None, **params: str) -> dict[str, Any]:
        r = self.request(method, path, body, **params)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()  # type: ignore[no-any-return]

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        r = self.request("POST", "/api/v1/namespaces", body)
        if r.status_code == 409:  # exists: relabel
            self.http.patch(f"/api/v1/namespaces/{name}", content=json.dumps({"metadata": {"labels": labels}}),
                            headers={"content-type": "application/merge-patch+json"})  # fmt: skip
        else:
            assert r.status_code < 300, r.text

    def delete_namespaces(self, *names: str, timeout: float = 180) -> None:
        """Delete these namespaces and wait until they are gone (their pods too)."""
        for name in names:
            r = self.request("DELETE", f"/api/v1/namespaces/{name}")
            assert r.status_code in (200, 202, 404), r.text
        deadline = time.monotonic() + timeout
        for name in names:
            while self.request("GET", f"/api/v1/namespaces/{name}").status_code != 404:
                assert time.monotonic() < deadline, f"namespace {name} still there after {timeout:.0f}s"
                time.sleep(1)

    def create_pod(self, ns: str, pod: dict[str, Any], **params: str) -> httpx.Response:
        pod = json.loads(json.dumps(pod))
        pod.setdefault("metadata", {})["namespace"] = ns
        if E2E_KUBECONFIG:
            # A real cluster would schedule these and pull 20 GB images: keep them gated.
            pod["spec"].setdefault("schedulingGates", []).append({"name": "hostnet-rdma.io/e2e"})
        return self.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, **params)

    def token(self, ns: str, service_account: str, bound_to: dict[str, str] | None = None) -> str:
        """A real token of the ServiceAccount (TokenRequest, 10 minutes), bound to an object
        (`boundObjectRef`: a Pod puts its node's name into the token) when given."""
        spec: dict[str, Any] = {"expirationSeconds": 600}
        if bound_to:
            spec["boundObjectRef"] = bound_to
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        return str(
            self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{service_account}/token", body)["status"]["token"]
        )

    def apply(self, manifest: dict[str, Any]) -> httpx.Response:
        """Server-side apply, as `kubectl apply --server-side` does."""
        kind = manifest["kind"]
        api = manifest["apiVersion"]
        name = manifest["metadata"]["name"]
        ns = manifest["metadata"].get("namespace")
        plural = {"ServiceAccount": "serviceaccounts", "ConfigMap": "configmaps", "Service": "services",
                  "Deployment": "deployments", "PodDisruptionBudget": "poddisruptionbudgets", "Role": "roles",
                  "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
                  "ClusterRoleBinding": "clusterrolebindings", "Pod": "pods",
                  "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
                  "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                  "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[kind]  # fmt: skip
        base = "/api/v1" if api == "v1" else f"/apis/{api}"
        path = f"{base}/namespaces/{ns}/{plural}/{name}" if ns else f"{base}/{plural}/{name}"
        return self.http.patch(
            path, content=json.dumps(manifest), params={"fieldManager": "hostnet-rdma-tests", "force": "true"},
            headers={"content-type": "application/apply-patch+yaml"},
        )  # fmt: skip


@dataclass
class Webhook:
    url: str
    ca: tls.Pair
    proc: subprocess.Popen[bytes] | None
    log: Path | None

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()


def start_webhook(
    workdir: Path, port: int | None = None, extra: list[str] | None = None, certs: bool = True, root: Path = ROOT
) -> Webhook:
    """`hostnet-rdma serve` from the source tree `root` (the benchmarks pass the compiled one)."""
    port = port or free_port()
    cert_dir = workdir / "tls"
    ca = tls.make_ca()
    if certs:
        tls.write_dir(cert_dir, tls.make_serving(ca, ["127.0.0.1"]), ca)
    log = workdir / "webhook.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--cert-dir", str(cert_dir), *(extra or [])],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            if (cert_dir / tls.CERT_FILE).exists() and httpx.get(
                f"https://127.0.0.1:{port}/readyz", verify=False, timeout=2
            ).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("webhook did not start:\n" + log.read_text())
        time.sleep(0.1)
    return Webhook(f"https://127.0.0.1:{port}/mutate", ca, proc, log)


def helm(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(plane.bin_dir / "helm"), *args], capture_output=True, text=True, env=plane.env(),
                          cwd=ROOT, timeout=300)  # fmt: skip


def wait_for_webhook(kube: Kube, ns: str, mutated: bool = True) -> None:
    """The API server picks up webhook configurations asynchronously: probe with dry-run pods."""
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"generateName": "probe-", "labels": {"hostnet-rdma.io/inject": "enabled"}},
             "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        r = kube.create_pod(ns, probe, dryRun="All")
        if r.status_code < 300:
            got = "hostnet-rdma.io/injected" in (r.json()["metadata"].get("annotations") or {})
            if got == mutated:
                return
        assert time.monotonic() < deadline, f"webhook state not reached: {r.status_code} {r.text[:300]}"
        time.sleep(0.3)


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if E2E_KUBECONFIG:
        yield ExternalCluster(E2E_KUBECONFIG)  # type: ignore[misc]
        return
    started = time.monotonic()
    cp = ControlPlane.start(tmp_path_factory.mktemp("controlplane"))
    TIMINGS["control plane start (incl. binaries check)"] = time.monotonic() - started
    TIMINGS["control plane start (processes only)"] = cp.startup_seconds
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def inject_config(plane: ControlPlane) -> InjectConfig:
    """The configuration the webhook under test mutates with: the tier's own webhook process runs
    the defaults; on a cluster with the chart installed (kind), the release's ConfigMap, where
    helm resolved the wrapper's delivery (an image volume of the wrapper image on kind)."""
    if not E2E_KUBECONFIG:
        return InjectConfig()
    from app import config, kube

    installed = kube.installed_config(kube.api_client(E2E_KUBECONFIG), WEBHOOK_CONFIG)
    assert installed is not None, f"no MutatingWebhookConfiguration {WEBHOOK_CONFIG} on the cluster"
    return config.from_dict(installed[0])


def kubeconfig_names(plane: ControlPlane) -> tuple[str, str]:
    """The cluster and user names the kubeconfig's current context uses ("test"/"admin" for
    the tier's own control plane, kind's own names on kind)."""
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
    return ctx["cluster"], ctx["user"]


def without_service_account(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Volumes or mounts less the token volume a real cluster's ServiceAccount admission adds
    (the tier's own API server runs without a ServiceAccount signing key)."""
    return [i for i in items if not str(i.get("name", "")).startswith("kube-api-access-")]


@pytest.fixture(scope="session")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    k = Kube(plane)
    if E2E_KUBECONFIG:
        # A cluster that outlives the run (kind with KEEP=1): start from empty test namespaces,
        # and leave none behind. The release's namespace is the installed chart's: never deleted.
        k.delete_namespaces(ON, OFF, BASELINE)
    k.namespace(ON, {"hostnet-rdma.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
    k.namespace(OFF, {})
    k.namespace(BASELINE, {"hostnet-rdma.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "baseline"})
    k.namespace(RELEASE_NS, {"hostnet-rdma.io/inject": "enabled"})
    yield k
    if E2E_KUBECONFIG:
        k.delete_namespaces(ON, OFF, BASELINE)


@pytest.fixture(scope="session")
def webhook(plane: ControlPlane, kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """Our webhook process, registered through `helm install` of the chart (URL + caBundle).
    Against kind, the chart is installed in-cluster by scripts/kind-e2e.sh already."""
    if E2E_KUBECONFIG:
        wait_for_webhook(kube, ON)
        yield Webhook("", tls.Pair(b"", b""), None, None)
        return
    hook = start_webhook(tmp_path_factory.mktemp("webhook"))
    p = helm(plane, "install", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS,
             "--set", f"webhook.url={hook.url}", "--set", "certs.mode=provided",
             "--set", "certs.provided.secretName=hostnet-rdma-tls", "--set", f"certs.provided.caBundle={hook.ca_bundle}",
             "--set", "webhook.failurePolicy=Fail", "--set", "webhook.timeoutSeconds=2")  # fmt: skip
    assert p.returncode == 0, p.stderr
    # delivery "auto", resolved from this API server's version (1.36): said in the NOTES too.
    assert "The torchrun wrapper reaches training pods by: imageVolume (an image volume of" in p.stdout, p.stdout
    wait_for_webhook(kube, ON)
    yield hook
    hook.proc.terminate()
    hook.proc.wait(timeout=10)


def set_failure_policy(kube: Kube, policy: str, url: str | None = None, ca_bundle: str | None = None,
                       timeout: int | None = None) -> None:  # fmt: skip
    mwc = kube.ok("GET", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_CONFIG}")
    hook = mwc["webhooks"][0]
    hook["failurePolicy"] = policy
    if url:
        hook["clientConfig"]["url"] = url
    if ca_bundle:
        hook["clientConfig"]["caBundle"] = ca_bundle
    if timeout:
        hook["timeoutSeconds"] = timeout
    kube.ok("PUT", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_CONFIG}", mwc)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.write_line("apiserver tier timings:")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"  {k}: {v:.1f}s")
