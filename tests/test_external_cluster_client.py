"""The API-server tier's client for a cluster reached through a kubeconfig (kind): it must
present the kubeconfig's client certificate. httpx 0.28+ ignores `cert=` when `verify` is a CA
path, and on real kind every request then went out as system:anonymous."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ssl
import threading
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from app.webhook import tls
from tests.apiserver.conftest import ExternalCluster
from tests.certutil import signed


def _client_cert(ca: tls.Pair, user: str) -> tls.Pair:
    usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    return signed(ca, user, (-dt.timedelta(minutes=5), dt.timedelta(days=1)), (usage,))


def test_the_kubeconfigs_client_certificate_is_presented(tmp_path: Path) -> None:
    ca = tls.make_ca()
    serving = tls.make_serving(ca, ["127.0.0.1"])
    client = _client_cert(ca, "kind-admin")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    (tmp_path / "srv.crt").write_bytes(serving.cert_pem)
    (tmp_path / "srv.key").write_bytes(serving.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    ctx.load_verify_locations(tmp_path / "ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED  # as kube-apiserver with --client-ca-file for this user
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            seen.append(dict(x[0] for x in peer["subject"])["commonName"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
        kubeconfig = tmp_path / "kind.yaml"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kind",
            "clusters": [{"name": "kind", "cluster": {"server": f"https://127.0.0.1:{server.server_port}",
                                                       "certificate-authority-data": b64(ca.cert_pem)}}],
            "users": [{"name": "kind", "user": {"client-certificate-data": b64(client.cert_pem),
                                                "client-key-data": b64(client.key_pem)}}],
            "contexts": [{"name": "kind", "context": {"cluster": "kind", "user": "kind"}}],
        }))  # fmt: skip
        with ExternalCluster(str(kubeconfig)).http_client() as api:
            assert api.get("/api").status_code == 200
        assert seen == ["kind-admin"]
    finally:
        server.shutdown()
        server.server_close()
