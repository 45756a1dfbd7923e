"""Every connection's budget from accept to close: counted when the socket is accepted, before
the TLS handshake, with TLS buffers sized to what a review needs, and a place for new ones.

Any pod can reach the webhook's Service (docs/security.md), so what one connection may cost is
fixed here, not left to asyncio's defaults:
- asyncio's TLS protocol allocates a zeroed 256 KiB read buffer for every accepted socket before
  the handshake, and lets 256 KiB of undelivered input and 512 KiB of unsent output pile up per
  connection. Here every connection reads into one shared buffer of READ_BUFFER, the input held
  while the server is not reading a connection is READ_BUFFER too, and output pauses the
  server's writing past WRITE_BUFFER.
- The handshake has HANDSHAKE_SECONDS (asyncio: 60 s), and the TLS close SHUTDOWN_SECONDS
  for the peer's close_notify (asyncio: 30 s); a connection the server gives up on is aborted,
  not closed politely, so its slot is free at once.
- At most `max_connections` are open, handshakes included, and at most `max_handshakes` of them
  in the handshake. A new connection over either bound takes the place of the oldest one that
  has not had a request answered yet (in its handshake, silent, or still sending its first
  request), else of the longest idle one; only when every connection is busy with a request is
  the new one refused. Silent connections therefore never lock the API server out: it sends its
  first request within milliseconds of connecting, so it is never the oldest of them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("hostnet_rdma.server")

# Once the handshake is done, how long after the last connection of a burst has gone memory is
# given back to the system (protocol.malloc_trim).
TRIM_AFTER_SECONDS = 1.0

# Two TLS records of 16 KiB: what one read may bring in, and what may wait undelivered while the
# server is not reading a connection (asyncio: a 256 KiB buffer each, and 256 KiB held).
READ_BUFFER = 32 * 1024
# The buffer every connection reads into: the event loop fills it (recv_into) and hands it to
# the connection (buffer_updated), which copies it out, in one callback, one connection at a
# time, so one buffer serves them all.
_READ_INTO = memoryview(bytearray(READ_BUFFER))
# Output held per connection before the server stops writing to it (asyncio: 512 KiB); a review's
# answer is a few KiB to a few hundred, and it is written whole all the same.
WRITE_BUFFER = 64 * 1024
HANDSHAKE_SECONDS = 5.0
SHUTDOWN_SECONDS = 2.0


class HttpSide(Protocol):
    """What the budget asks of a connection's HTTP protocol (protocol.BoundedHttpToolsProtocol)."""

    answered: int

    def resting(self) -> bool:
        """No request in flight or partly received: closing it loses nothing."""

    def owes_answers(self) -> bool:
        """A request arrived whole and is not answered yet."""


class _Handshaking(asyncio.Protocol):
    """The application protocol a TLS connection has until its handshake is done: the HTTP
    protocol is made then, so a socket that never completes a handshake costs no parser and no
    HTTP state (and leaves no reference cycle through a parser that was never connected)."""

    def __init__(self, tls: TlsConnection) -> None:
        self.tls = tls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tls.handshake_done(transport)


class TlsConnection(sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol for one accepted socket, under the server's
    ConnectionBudget, with small buffers. Its HTTP protocol (`http`, made by `make_http`) is
    made and connected once the handshake is done."""

    max_size = READ_BUFFER

    def __init__(self, budget: ConnectionBudget, make_http: Callable[[], Any], context: ssl.SSLContext) -> None:
        # (typeshed's stub of this class is narrower than the class: no waiter, int timeouts.)
        super().__init__(
            asyncio.get_running_loop(), _Handshaking(self), context, None,  # type: ignore[arg-type]
            server_side=True, ssl_handshake_timeout=budget.handshake_seconds,  # type: ignore[arg-type]
            ssl_shutdown_timeout=budget.shutdown_seconds,
        )  # fmt: skip
        self._ssl_buffer_view = _READ_INTO  # (the one the class made is freed now)
        self._ssl_buffer = _READ_INTO.obj
        # What may wait undelivered, and unsent, on this connection (the class's own setters).
        self._set_read_buffer_limits(high=READ_BUFFER)  # type: ignore[attr-defined]
        self._set_write_buffer_limits(high=WRITE_BUFFER)  # type: ignore[attr-defined]
        self.budget = budget
        self.make_http = make_http
        self.http: HttpSide | None = None
        self.raw: asyncio.Transport | None = None
        self.deferred_eof = False

    @property
    def connected(self) -> bool:
        """The handshake is done and the HTTP protocol has the connection."""
        return self.http is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        if not self.budget.accept(self):
            transport.abort()  # type: ignore[attr-defined]
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.budget.lost(self)
        super().connection_lost(exc)

    def handshake_done(self, transport: asyncio.BaseTransport) -> None:
        http = self.make_http()
        http.tls = self
        self.http = http
        self._set_app_protocol(http)
        self.budget.connected(self)
        http.connection_made(transport)

    def abort(self) -> None:
        """Drop the connection now: no close_notify to wait for, its slot and memory free at once."""
        if self.raw is not None:
            self.raw.abort()

    def eof_received(self) -> bool | None:  # type: ignore[override]
        # The client has sent all it will (a half-close). asyncio's TLS protocol then starts its
        # shutdown, and an answer written after that is dropped: wait until the requests that
        # arrived whole are answered (eof_now), reading the socket no more meanwhile.
        if self.http is not None and self.http.owes_answers():
            self.deferred_eof = True
            return True
        return super().eof_received()

    def answers_sent(self) -> None:
        """The HTTP protocol owes no more answers: a half-close that waited for them
        (deferred_eof) goes on."""
        if self.deferred_eof:
            self.deferred_eof = False
            self._loop.call_soon(self._eof_now)  # after the answer's coalesced write (protocol.py)

    def _eof_now(self) -> None:
        if self.raw is not None and not self.raw.is_closing():
            super().eof_received()


class ConnectionBudget:
    """The server's open connections, counted from accept (TlsConnection.connection_made)."""

    def __init__(
        self,
        max_connections: int,
        max_handshakes: int,
        handshake_seconds: float = HANDSHAKE_SECONDS,
        shutdown_seconds: float = SHUTDOWN_SECONDS,
        trim: Callable[[], object] = lambda: None,
    ) -> None:
        self.max_connections = max_connections
        self.max_handshakes = max_handshakes
        self.handshake_seconds = handshake_seconds
        self.shutdown_seconds = shutdown_seconds
        # Accept order (dicts keep it): where the oldest is found.
        self.open: dict[TlsConnection, None] = {}
        self.handshaking: dict[TlsConnection, None] = {}
        self.evicted = 0
        self.refused = 0
        self._over = False  # the bound was met: said once per burst, not once per connection
        # Memory back to the system after a burst of at least 256 connections (protocol.malloc_trim),
        # once it has passed: TRIM_AFTER_SECONDS after its last connection has gone.
        self._trim = trim
        self._peak = 0
        self._trim_at: asyncio.TimerHandle | None = None

    def accept(self, conn: TlsConnection) -> bool:
        """A new connection: False when every open one is busy with a request (it is refused)."""
        if len(self.handshaking) >= self.max_handshakes:
            self._evict(next(iter(self.handshaking)), "in the TLS handshake")
        if len(self.open) >= self.max_connections:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                self._say(f"refusing a new connection: all {len(self.open)} open ones are busy with a request")
                return False
            self._evict(
                victim, "idle" if victim.http is not None and victim.http.answered else "without a request answered"
            )
        self.open[conn] = None
        self.handshaking[conn] = None
        self._peak = max(self._peak, len(self.open))
        return True

    def connected(self, conn: TlsConnection) -> None:
        self.handshaking.pop(conn, None)

    def lost(self, conn: TlsConnection) -> None:
        self.handshaking.pop(conn, None)
        if conn in self.open:  # not evicted: _evict took it out already
            del self.open[conn]
            if len(self.open) < self.max_connections:
                self._over = False
        if self._peak >= 256:
            if self._trim_at is not None:
                self._trim_at.cancel()
            self._trim_at = asyncio.get_running_loop().call_later(TRIM_AFTER_SECONDS, self._burst_over)

    def _burst_over(self) -> None:
        self._trim_at = None
        self._peak = len(self.open)
        self._trim()

    def _victim(self) -> TlsConnection | None:
        """The oldest connection with no request answered yet, else the longest idle one (the
        oldest in accept order whose HTTP side rests: an approximation that needs no bookkeeping
        on the request path), else None."""
        idle = None
        for conn in self.open:
            if conn.http is None or not conn.http.answered:
                return conn
            if idle is None and conn.http.resting():
                idle = conn
        return idle

    def _evict(self, conn: TlsConnection, why: str) -> None:
        self.evicted += 1
        self._say(f"over the bound of {self.max_connections} connections ({self.max_handshakes} in the handshake): "
                  f"closing the oldest {why} for a new one")  # fmt: skip
        self.handshaking.pop(conn, None)
        self.open.pop(conn, None)
        conn.abort()

    def _say(self, message: str) -> None:
        if not self._over:
            log.warning(message)
        self._over = True


def tls_factory(
    budget: ConnectionBudget, http_class: Callable[..., Any], context: Callable[[], ssl.SSLContext]
) -> Callable[..., TlsConnection]:
    """The protocol factory uvicorn runs (its `http`, the server started without TLS of its own):
    each accepted socket gets a TlsConnection with the serving context as it is now (`context()`,
    swapped whole on rotation), and an HTTP protocol of `http_class` once its handshake is done."""

    def make(**uvicorn_args: Any) -> TlsConnection:
        return TlsConnection(budget, lambda: http_class(**uvicorn_args), context())

    return make
