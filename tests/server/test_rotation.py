"""A rotation that changes the key type (EC -> RSA, RSA -> EC) serves only the new certificate,
to Go's TLS client (the API server's) as well as to OpenSSL's, without a restart.

Loading a new pair into the live SSLContext kept the old one beside it (OpenSSL holds one
certificate per key type and picks by what the client offers): after EC -> RSA a Go client
still got the old EC certificate while the log said the new one was loaded (issue #63).
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.webhook import tls
from tests.server.conftest import ROOT, Server, start_server

pytestmark = pytest.mark.server

# Built once, as make bench builds its Go tools (scripts/bench/run.py, build_go).
CACHE = Path(os.environ.get("HOSTNET_RDMA_CACHE", Path.home() / ".cache" / "hostnet-rdma")) / "bench-bin"
HOSTS = ["localhost", "127.0.0.1"]


@pytest.fixture(scope="module")
def go_peer() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(CACHE / "tlspeer"), "./tlspeer"], cwd=ROOT / "scripts" / "bench",
                   check=True, timeout=600)  # fmt: skip
    return CACHE / "tlspeer"


@pytest.fixture
def ec_server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path)  # an EC pair, as tls.make_serving makes by default
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=10)


def go_sees(peer: Path, server: Server, server_name: str) -> tuple[str, int]:
    """(key type, serial) of the certificate Go's crypto/tls gets; "127.0.0.1" sends no SNI."""
    out = subprocess.run([str(peer), "-addr", f"127.0.0.1:{server.port}", "-ca", str(server.cert_dir / tls.CA_FILE),
                          "-server-name", server_name], capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    return seen["key_type"], int(seen["serial"], 16)


def openssl_sees(server: Server, server_name: str) -> tuple[str, int]:
    ctx = ssl.create_default_context(cafile=str(server.cert_dir / tls.CA_FILE))
    with (
        socket.create_connection(("127.0.0.1", server.port)) as raw,
        ctx.wrap_socket(raw, server_hostname=server_name) as s,
    ):
        der = s.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return key_type(cert), cert.serial_number


def key_type(cert: x509.Certificate) -> str:
    key = cert.public_key()
    return (
        "ECDSA" if isinstance(key, ec.EllipticCurvePublicKey) else "RSA" if isinstance(key, rsa.RSAPublicKey) else "?"
    )


def rotate(server: Server, kind: str) -> tuple[str, int]:
    pair = tls.make_serving(server.ca, HOSTS, key_type=kind)
    tls.write_dir(server.cert_dir, pair)  # atomic renames, like a Secret update
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    return key_type(cert), cert.serial_number


def wait_reloaded(server: Server, times: int) -> None:
    """Until the log says the pair was reloaded `times` times (the poll is 1 s)."""
    deadline = time.monotonic() + 20
    while server.log.read_text().count("serving certificate reloaded") < times:
        assert time.monotonic() < deadline, "the server did not reload the certificate within 20 s"
        time.sleep(0.1)


def test_key_type_change_is_served_to_go_and_openssl_clients(ec_server: Server, go_peer: Path) -> None:
    server = ec_server
    assert go_sees(go_peer, server, "127.0.0.1")[0] == "ECDSA"
    for n, kind in enumerate(("rsa", "ec", "rsa"), 1):
        want = rotate(server, kind)
        wait_reloaded(server, n)  # then every client must get the new pair, at once
        for name in ("127.0.0.1", "localhost"):  # without SNI (a webhook URL by IP) and with it (a Service)
            assert go_sees(go_peer, server, name) == want, f"Go client, {kind}, server name {name}"
            assert openssl_sees(server, name) == want, f"OpenSSL client, {kind}, server name {name}"
