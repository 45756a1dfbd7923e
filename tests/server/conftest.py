"""A real `hostnet-rdma serve` process over TLS on 127.0.0.1, with certs from app.webhook.tls."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.webhook import tls

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    port: int
    cert_dir: Path
    ca: tls.Pair
    config: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def trust(self) -> ssl.SSLContext:
        """Verify the server against our CA only (as the API server does with caBundle)."""
        return ssl.create_default_context(cafile=str(self.cert_dir / tls.CA_FILE))

    def client(self, **kw: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.trust(), timeout=30, **kw)  # type: ignore[arg-type]

    def async_client(self, **kw: object) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, verify=self.trust(), timeout=30, **kw)  # type: ignore[arg-type]


def start_server(
    tmp: Path,
    poll_seconds: str | None = "1",
    config_text: str = "inject: {shmSize: 16Gi}\n",
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Server:
    """`hostnet-rdma serve` over TLS with a CA of its own, once /readyz answers. `env` and
    `args` add to its environment and command line; no `poll_seconds`: the server's default."""
    cert_dir = tmp / "tls"
    ca = tls.make_ca()
    tls.write_dir(cert_dir, tls.make_serving(ca, ["localhost", "127.0.0.1"]), ca)
    config = tmp / "config.yaml"
    config.write_text(config_text)
    port = free_port()
    log = tmp / "server.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if poll_seconds is not None:
        env["HOSTNET_RDMA_POLL_SECONDS"] = poll_seconds
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--cert-dir", str(cert_dir), "--config", str(config), *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=ROOT,
    )  # fmt: skip
    server = Server(f"https://127.0.0.1:{port}", port, cert_dir, ca, config, proc, log)
    deadline = time.monotonic() + 30
    while True:
        try:
            with server.client() as c:
                if c.get("/readyz").status_code == 200:
                    return server
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start:\n{log.read_text()}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("server"))
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=10)


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path)
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=10)
