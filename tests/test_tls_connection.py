"""The server's TLS layer on its own (app.webhook.connections.TlsConnection): real OpenSSL on both
sides of a loopback socket, an HTTP side that records what it is given. What the whole server
does with it (the budget, pipelining, half-close, rotation, a Go client): tests/server/."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.webhook import tls
from app.webhook.connections import ConnectionBudget, TlsConnection


class Side:
    """An HTTP side that records what it is given; `on_data` runs on each delivery."""

    def __init__(self, on_data: Callable[[Side, bytes], None] = lambda side, data: None) -> None:
        self.answered = 0
        self.tls: TlsConnection | None = None
        self.transport: Any = None
        self.got: list[bytes] = []
        self.paused_deliveries = 0  # data given while it had asked not to be read
        self.paused = False
        self.lost = asyncio.Event()
        self.on_data = on_data

    def resting(self) -> bool:
        return True

    def owes_answers(self) -> bool:
        return False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.paused_deliveries += self.paused
        self.got.append(data)
        self.on_data(self, data)

    def pause(self) -> None:
        self.paused = True
        self.transport.pause_reading()

    def resume(self) -> None:
        self.paused = False
        self.transport.resume_reading()

    def eof_received(self) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    ca = tls.make_ca()
    tls.write_dir(d, tls.make_serving(ca, ["127.0.0.1"]), ca)
    return d


def _client_context(certs: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs / tls.CA_FILE))


async def _serve(certs: Path, side: Side, budget: ConnectionBudget) -> tuple[asyncio.Server, int]:
    context = tls.server_context(certs / tls.CERT_FILE, certs / tls.KEY_FILE)
    server = await asyncio.get_running_loop().create_server(
        lambda: TlsConnection(budget, lambda: side, context), "127.0.0.1", 0
    )
    return server, server.sockets[0].getsockname()[1]


def _in_thread(fn: Callable[[], Any]) -> asyncio.Future[Any]:
    return asyncio.get_running_loop().run_in_executor(None, fn)


def test_records_that_arrive_while_the_http_side_does_not_read_wait_and_come_in_order(certs: Path) -> None:
    def first_pauses(side: Side, data: bytes) -> None:
        if len(side.got) == 1:
            side.pause()
            asyncio.get_running_loop().call_later(0.2, side.resume)

    async def go() -> Side:
        side, budget = Side(first_pauses), ConnectionBudget(10, 10)
        server, port = await _serve(certs, side, budget)

        def client() -> None:
            with socket.create_connection(("127.0.0.1", port)) as raw:
                s = _client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1")
                for word in (b"one|", b"two|", b"three"):  # a TLS record each, sent at once
                    s.sendall(word)
                deadline = time.monotonic() + 5
                while b"".join(side.got) != b"one|two|three" and time.monotonic() < deadline:
                    time.sleep(0.01)

        await _in_thread(client)
        await asyncio.wait_for(side.lost.wait(), 5)
        server.close()
        return side

    side = asyncio.run(go())
    assert b"".join(side.got) == b"one|two|three"
    assert side.paused_deliveries == 0


def test_a_close_sends_close_notify_and_frees_the_slot_once_the_peer_answers_it(certs: Path) -> None:
    async def go() -> tuple[bytes, float]:
        side, budget = Side(lambda s, data: s.transport.close()), ConnectionBudget(10, 10, shutdown_seconds=30)
        server, port = await _serve(certs, side, budget)

        def client() -> bytes:
            with socket.create_connection(("127.0.0.1", port)) as raw:
                s = _client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1")
                s.sendall(b"bye")
                got = s.recv(100)  # b"": the server's close_notify
                s.unwrap()  # ours
                return got

        start = time.monotonic()
        got = await _in_thread(client)
        await asyncio.wait_for(side.lost.wait(), 5)
        closed_in = time.monotonic() - start
        assert not budget.open
        server.close()
        return got, closed_in

    got, closed_in = asyncio.run(go())
    assert got == b""
    assert closed_in < 5  # at the peer's close_notify, not at the 30 s deadline


@pytest.mark.parametrize("stage", ["handshake", "close"])
def test_a_peer_that_goes_silent_is_dropped_at_the_deadline(certs: Path, stage: str) -> None:
    async def go() -> float:
        side = Side(lambda s, data: s.transport.close())
        budget = ConnectionBudget(10, 10, handshake_seconds=0.3, shutdown_seconds=0.3)
        server, port = await _serve(certs, side, budget)
        done = threading.Event()

        def client() -> None:
            with socket.create_connection(("127.0.0.1", port)) as raw:
                if stage == "close":  # a request, then neither its close_notify nor a close
                    s = _client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1")
                    s.sendall(b"x")
                done.wait(10)

        start = time.monotonic()
        future = _in_thread(client)
        while budget.open or time.monotonic() - start < 0.1:
            assert time.monotonic() - start < 5, "the connection was kept past its deadline"
            await asyncio.sleep(0.02)
        dropped_in = time.monotonic() - start
        done.set()
        await future
        server.close()
        return dropped_in

    assert 0.2 < asyncio.run(go()) < 3


def test_a_tls_1_2_client_cannot_renegotiate(certs: Path) -> None:
    """Each renegotiation would be a handshake's CPU outside the handshake bound: refused (OpenSSL
    3 refuses a client's renegotiation by default; the connection is dropped, nothing after it read)."""

    async def go() -> tuple[list[bytes], str]:
        side, budget = Side(), ConnectionBudget(10, 10)
        server, port = await _serve(certs, side, budget)
        client = await asyncio.create_subprocess_exec(
            "openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{port}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert client.stdin is not None and client.stdout is not None
        for line in (b"before\n", b"R\n", b"after\n"):  # s_client: a line "R" renegotiates
            await asyncio.sleep(0.3)
            with contextlib.suppress(ConnectionError):
                client.stdin.write(line)
                await client.stdin.drain()
        with contextlib.suppress(ConnectionError):
            client.stdin.close()
        said = (await asyncio.wait_for(client.stdout.read(), 10)).decode(errors="replace")
        await asyncio.wait_for(side.lost.wait(), 5)
        server.close()
        return side.got, said

    got, said = asyncio.run(go())
    assert "RENEGOTIATING" in said
    assert b"".join(got) == b"before\n"


def test_clients_that_do_not_trust_the_certificate_are_reported_with_what_to_check(
    certs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An API server whose caBundle is not our CA fails every handshake, and with failurePolicy
    Ignore its pods pass unplumbed: the server says so (once a minute: any client can fail one)."""

    async def go() -> ConnectionBudget:
        budget = ConnectionBudget(10, 10)
        server, port = await _serve(certs, Side(), budget)

        def client() -> None:
            with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLCertVerificationError):
                ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")  # not our CA

        for _ in range(2):
            await _in_thread(client)
        deadline = time.monotonic() + 5
        while budget.handshake_failures < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        server.close()
        return budget

    with caplog.at_level(logging.WARNING, logger="hostnet_rdma.server"):
        budget = asyncio.run(go())
    assert budget.handshake_failures == 2
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith(
        "1 TLS handshake(s) failed since the last report, the last: [SSL: TLSV1_ALERT_UNKNOWN_CA]"
    )
    assert "caBundle must be the CA that signed the serving certificate" in said[0]
