"""A real kube-apiserver + etcd on loopback (ephemeral ports, temp dirs), as envtest does.

No kubelet, scheduler or controller-manager: pods stay Pending, which is all admission
needs. The ServiceAccount admission plugin is off (no controller creates `default` SAs)
and privileged pods are allowed, as on a GPU cluster.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binaries() -> Path:
    """Where kube-apiserver, etcd (and helm) are; builds them once if needed."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "testenv" / "build-binaries.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create]
    resources: [{group: "", resources: [pods]}]
  - level: None
"""


@dataclass
class ControlPlane:
    url: str
    token: str
    ca_file: Path
    workdir: Path
    procs: list[subprocess.Popen[bytes]]
    startup_seconds: float
    bin_dir: Path

    @classmethod
    def start(cls, workdir: Path) -> ControlPlane:
        bin_dir = binaries()
        started = time.monotonic()
        workdir.mkdir(parents=True, exist_ok=True)
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd = subprocess.Popen(
            [
                str(bin_dir / "etcd"),
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
            ],
            stdout=(workdir / "etcd.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_file = workdir / "sa.key"
        key_file.write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        token = secrets.token_hex(16)
        (workdir / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
        cert_dir = workdir / "pki"
        # Pod creations' metadata only: what the policy on unplumbed pods writes (its audit annotations).
        (workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        api = subprocess.Popen(
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={cert_dir}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={key_file}",
                f"--service-account-signing-key-file={key_file}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,PodSecurity",
                "--advertise-address=127.0.0.1",
                f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
                f"--audit-log-path={workdir / 'audit.log'}",
            ],
            stdout=(workdir / "apiserver.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        plane = cls(
            f"https://127.0.0.1:{api_port}", token, cert_dir / "apiserver.crt", workdir, [api, etcd], 0.0, bin_dir
        )
        deadline = time.monotonic() + 90
        while True:
            if api.poll() is not None or etcd.poll() is not None:
                plane.stop()
                raise RuntimeError("control plane exited:\n" + (workdir / "apiserver.log").read_text()[-4000:])
            try:
                if plane.ca_file.exists():
                    r = httpx.get(f"{plane.url}/readyz", headers=plane.headers, verify=False, timeout=2)
                    if r.status_code == 200:
                        break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                plane.stop()
                raise RuntimeError(
                    "kube-apiserver not ready in 90s:\n" + (workdir / "apiserver.log").read_text()[-4000:]
                )
            time.sleep(0.25)
        plane.startup_seconds = time.monotonic() - started
        plane.write_kubeconfig()
        return plane

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
            f"clusters: [{{name: test, cluster: {{server: '{self.url}', insecure-skip-tls-verify: true}}}}]\n"
            f"users: [{{name: admin, user: {{token: '{self.token}'}}}}]\n"
            "contexts: [{name: test, context: {cluster: test, user: admin}}]\n"
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
