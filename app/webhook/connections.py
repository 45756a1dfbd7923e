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
import contextlib
import logging
import ssl
import time
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
    """What the budget and the TLS layer ask of a connection's HTTP protocol
    (protocol.BoundedHttpToolsProtocol)."""

    answered: int
    tls: TlsConnection | None

    def resting(self) -> bool:
        """No request in flight or partly received: closing it loses nothing."""

    def owes_answers(self) -> bool:
        """A request arrived whole and is not answered yet."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


# Where a connection is: in its TLS handshake; open; closing (our close_notify sent, the peer's
# awaited for SHUTDOWN_SECONDS); closed (the socket is closed or being closed).
_HANDSHAKE, _OPEN, _CLOSING, _CLOSED = range(4)


class TlsConnection(asyncio.BufferedProtocol):
    """The server side of TLS for one accepted socket, under the server's ConnectionBudget: the
    socket's protocol, and (through `transport`, a TlsTransport) the transport of its HTTP
    protocol (`http`, made by `make_http` once the handshake is done).

    OpenSSL through the ssl module's memory BIOs, as asyncio's TLS protocol does, without its
    general machinery: a read decrypts what arrived and hands it to the HTTP protocol in the
    same call, a write encrypts and sends in the same call. asyncio's protocol took ~12 µs of
    CPU a request more on the floor of a fixed answer (BENCHMARKS.md), and gives no bound of its
    own on the handshake's count or the buffers (above). Reading is paused by the socket (the
    encrypted bytes of one read, at most READ_BUFFER, wait in the BIO); writing's flow control
    is the socket transport's, its high-water mark WRITE_BUFFER."""

    def __init__(self, budget: ConnectionBudget, make_http: Callable[[], Any], context: ssl.SSLContext) -> None:
        self.budget = budget
        self.make_http = make_http
        self.http: HttpSide | None = None
        self.raw: asyncio.Transport | None = None
        self.deferred_eof = False
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._state = _HANDSHAKE
        self._paused = False  # the HTTP protocol asked not to be read (TlsTransport.pause_reading)
        self._timer: asyncio.TimerHandle | None = None  # the handshake's deadline, then the close's
        self.transport = TlsTransport(self)

    @property
    def connected(self) -> bool:
        """The handshake is done and the HTTP protocol has the connection."""
        return self.http is not None

    # -- the socket's protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw: asyncio.Transport = transport  # type: ignore[assignment]
        self.raw = raw
        if not self.budget.accept(self):
            self._state = _CLOSED
            raw.abort()
            return
        raw.set_write_buffer_limits(high=WRITE_BUFFER)
        self._timer = asyncio.get_running_loop().call_later(self.budget.handshake_seconds, self._timed_out)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._state = _CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.budget.lost(self)
        if self.http is not None:
            self.http.connection_lost(exc)  # type: ignore[arg-type]

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_INTO

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(_READ_INTO[:nbytes])
        state = self._state
        if state == _OPEN:
            self._read()
        elif state == _HANDSHAKE:
            self._handshake()
        elif state == _CLOSING:
            self._shutdown()
        else:
            self._incoming.read()  # closed: nothing more is read

    def eof_received(self) -> bool | None:
        # The client has sent all it will (a TCP half-close). What arrived whole is answered
        # first: the socket is kept for writing until the HTTP protocol owes nothing (answers_sent).
        if self._state == _OPEN and self.http is not None and self.http.owes_answers():
            self.deferred_eof = True
            return True
        self._peer_done()
        return None

    def pause_writing(self) -> None:
        if self.http is not None:
            self.http.pause_writing()

    def resume_writing(self) -> None:
        if self.http is not None:
            self.http.resume_writing()

    # -- TLS

    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, OSError) as e:  # not TLS, a client that refuses us, or one we refuse
            self.budget.handshake_failed(e)
            self.abort()
            return
        self._flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._state = _OPEN
        http: HttpSide = self.make_http()
        http.tls = self
        self.http = http
        self.budget.connected(self)
        http.connection_made(self.transport)
        if self._incoming.pending and self._state == _OPEN:  # the first request came with the handshake's end
            self._read()

    def _read(self) -> None:
        """Decrypt what arrived and hand it to the HTTP protocol, record by record, while it reads."""
        tls, incoming, http = self._ssl, self._incoming, self.http
        while not self._paused and self._state == _OPEN:
            try:
                data = tls.read(READ_BUFFER)
            except ssl.SSLWantReadError:  # a record not whole yet
                break
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                data = b""
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS read failed: %s", e)
                self.abort()
                return
            if not data:  # the peer's close_notify: as a half-close
                self._incoming.read()
                if not self.eof_received():
                    return
                break
            http.data_received(data)  # type: ignore[union-attr]
            if not incoming.pending and not tls.pending():
                break
        if self._outgoing.pending:  # what reading made OpenSSL say (a key update, tickets)
            self._flush()

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data and self.raw is not None:
            self.raw.write(data)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._state != _OPEN or not data:
            return  # closing or closed: as asyncio's transports, what comes after is dropped
        view = memoryview(data)
        try:
            while view:
                view = view[self._ssl.write(view) :]
        except (ssl.SSLError, OSError) as e:
            log.debug("TLS write failed: %s", e)
            self.abort()
            return
        self._flush()

    def pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            if self.raw is not None and not self.raw.is_closing():
                self.raw.pause_reading()

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            if self.raw is not None and not self.raw.is_closing():
                self.raw.resume_reading()
            if self._incoming.pending or self._ssl.pending():  # what came in the read it paused in
                asyncio.get_running_loop().call_soon(self._read_held)

    def _read_held(self) -> None:
        if self._state == _OPEN:
            self._read()

    # -- closing

    def close(self) -> None:
        """A polite close: our close_notify, then the peer's awaited for SHUTDOWN_SECONDS (the
        socket is read meanwhile, so nothing it sends makes the close a reset)."""
        if self._state != _OPEN:
            if self._state == _HANDSHAKE:
                self.abort()
            return
        self._state = _CLOSING
        self._timer = asyncio.get_running_loop().call_later(self.budget.shutdown_seconds, self._timed_out)
        if self._paused and self.raw is not None and not self.raw.is_closing():
            self.raw.resume_reading()  # to see the peer's close_notify
        self._shutdown()

    def _shutdown(self) -> None:
        while True:  # each call reads one record of the peer's (what it sent before its close_notify is dropped)
            before = self._incoming.pending
            try:
                self._ssl.unwrap()
            except ssl.SSLWantReadError:  # ours is sent; the peer's has not come yet
                if 0 < self._incoming.pending < before:
                    continue
                self._flush()
                return
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS close failed: %s", e)
                self.abort()
                return
            self._flush()
            self._close_raw()
            return

    def _peer_done(self) -> None:
        """The peer sent all it will (its close_notify, or a TCP EOF): ours, and the socket closed."""
        if self._state in (_OPEN, _CLOSING):
            if self._state == _OPEN and self.http is not None:
                self.http.eof_received()
            self._state = _CLOSING
            with contextlib.suppress(ssl.SSLError, OSError):  # the peer's close_notify may never come
                self._ssl.unwrap()
            self._flush()
        self._close_raw()

    def _close_raw(self) -> None:
        self._state = _CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.raw is not None and not self.raw.is_closing():
            self.raw.close()  # sends what is buffered, then closes

    def _timed_out(self) -> None:
        self._timer = None
        if self._state == _HANDSHAKE:
            log.debug("closing a connection whose TLS handshake did not finish in %ss", self.budget.handshake_seconds)
        self.abort()

    def abort(self) -> None:
        """Drop the connection now: no close_notify to wait for, its slot and memory free at once."""
        self._state = _CLOSED
        if self.raw is not None:
            self.raw.abort()

    def answers_sent(self) -> None:
        """The HTTP protocol owes no more answers: a half-close that waited for them
        (deferred_eof) goes on."""
        if self.deferred_eof:
            self.deferred_eof = False
            asyncio.get_running_loop().call_soon(self._eof_now)  # after the answer's coalesced write (protocol.py)

    def _eof_now(self) -> None:
        if self.raw is not None and not self.raw.is_closing():
            self._peer_done()

    def extra(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":
            return self._ssl.context
        if name == "ssl_object":
            return self._ssl
        if name == "peercert":
            return self._ssl.getpeercert()
        if name == "cipher":
            return self._ssl.cipher()
        if name == "compression":
            return self._ssl.compression()
        return self.raw.get_extra_info(name, default) if self.raw is not None else default


class TlsTransport(asyncio.Transport):
    """The transport the HTTP protocol writes to: its connection's TLS (TlsConnection)."""

    def __init__(self, conn: TlsConnection) -> None:
        super().__init__()
        self._conn = conn

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._conn.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._conn.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False  # TLS has no half-close of its own

    def is_closing(self) -> bool:
        return self._conn._state != _OPEN

    def close(self) -> None:
        self._conn.close()

    def abort(self) -> None:
        self._conn.abort()

    def pause_reading(self) -> None:
        self._conn.pause_reading()

    def resume_reading(self) -> None:
        self._conn.resume_reading()

    def is_reading(self) -> bool:
        return not self._conn._paused and self._conn._state == _OPEN

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._conn.extra(name, default)

    def get_write_buffer_size(self) -> int:
        raw = self._conn.raw
        return raw.get_write_buffer_size() if raw is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        raw = self._conn.raw
        return raw.get_write_buffer_limits() if raw is not None else (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._conn.raw is not None:
            self._conn.raw.set_write_buffer_limits(high, low)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._conn.http  # type: ignore[return-value]

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        raise NotImplementedError("the HTTP protocol of a TLS connection is fixed")


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
        # Failed TLS handshakes: said at most once every FAILURES_SAID_EVERY seconds (any client
        # can fail one), with how many and the last reason.
        self.handshake_failures = 0
        self._failures_unsaid = 0
        self._failures_said_at = float("-inf")
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

    FAILURES_SAID_EVERY = 60.0

    def handshake_failed(self, error: BaseException) -> None:
        """A TLS handshake failed. A client that does not trust the serving certificate fails
        every one (the API server among them, with a caBundle not of this CA: with failurePolicy
        Ignore its pods then pass unplumbed), so this is said, at most once a minute."""
        self.handshake_failures += 1
        self._failures_unsaid += 1
        now = time.monotonic()
        if now - self._failures_said_at < self.FAILURES_SAID_EVERY:
            log.debug("TLS handshake failed: %s", error)
            return
        reason = str(error)
        hint = ""
        if "UNKNOWN_CA" in reason or "CERTIFICATE" in reason:
            hint = (": the client does not trust this server's certificate. If the API server is one of them, the "
                    "webhook configuration's caBundle must be the CA that signed the serving certificate "
                    "(docs/troubleshooting.md, \"TLS handshakes failed\")")  # fmt: skip
        log.warning("%d TLS handshake(s) failed since the last report, the last: %s%s",
                    self._failures_unsaid, reason, hint)  # fmt: skip
        self._failures_unsaid = 0
        self._failures_said_at = now

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
