"""uvicorn's HTTP protocol with bounds on what a client may hold open.

uvicorn closes idle keep-alive connections only after a first response, never times out a
request that arrives slowly, and (httptools) accepts headers of any size: anyone who can reach
the webhook could hold connections and memory without limit. Here every request must arrive
whole within `request_timeout` seconds of the connection (or of its first byte, after the
first; checked every second at most), and its headers must fit in `max_header_bytes`;
otherwise the connection is closed (431 for oversized headers). The TLS handshake is bounded by
asyncio (60 s); idle keep-alive by uvicorn's timeout_keep_alive.

Graceful shutdown without lost requests: uvicorn closes an idle keep-alive connection at once,
racing a request the client may be sending on it (the API server does not retry a POST whose
connection closed unanswered; failurePolicy decides the pod). Here a draining connection
answers whatever arrives within `drain_idle` seconds, with `connection: close`, and only a
connection that stays idle that long is closed.

Admission reviews off the ASGI path: a `POST /mutate` that the server can answer at once (a
JSON body of a declared length within the bounds, HTTP/1.1, nothing else in flight on the
connection) is read and answered by the protocol itself, through the `Direct` the server gives
it: no ASGI scope, task, receive or send messages, which cost about as much CPU as a whole
fixed-response request (BENCHMARKS.md, "Where one review's time goes"). Every other request,
and a review that must wait for the held-bytes bound, takes uvicorn's ASGI path as before; the
order of responses on a connection is kept across the two.

Writes coalesced: uvicorn writes a response's head and its body separately, and over TLS each
write is a record and a send() of its own. CoalescingTransport holds a write back until the next
one (the body after the head) or the end of the loop turn, and sends them as one (BENCHMARKS.md,
"What we optimised").
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol, TypeVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("hostnet_rdma.server")

# The event loop uvicorn runs: asyncio's, not uvloop's. Under load on connections that come and
# go, the server's RSS grew without end on uvloop (~30 KB kept per connection closed, native
# memory: Python's heap stays flat) and levels off on asyncio's (BENCHMARKS.md, "Memory under
# sustained load"; uvloop issue #565).
EVENT_LOOP = "asyncio"

# The ASGI scope extension through which the app holds and resumes a request's arrival deadline.
DEADLINE_EXTENSION = "hostnet-rdma.deadline"


def _malloc_trim() -> Callable[[], object]:
    """glibc's malloc_trim: OpenSSL's per-connection buffers are freed into malloc's arenas,
    which keep the pages; without this RSS stays at its peak after a burst of connections."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return lambda: None
    return lambda: trim(0)


class CoalescingTransport:
    """A transport that holds a write back until the next write, which goes out joined with it at
    once, or until the end of the event-loop turn; the order is kept. close() and write_eof() send
    what is pending first; abort() drops it, as it drops the real transport's buffer. Everything
    else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._pending.append(bytes(data))
        if len(self._pending) > 1:
            self.flush()  # a response's body after its head: no reason to wait longer
        else:
            self._loop.call_soon(self.flush)

    def write_now(self, data: bytes) -> None:
        """Send `data` now, after what is pending: a whole response, nothing to join it with."""
        if self._pending:
            self.flush()
        if not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._pending)

    def __getattr__(self, name: str) -> Any:  # get_extra_info, pause_reading, ...
        return getattr(self._transport, name)


class Bounds:
    """What the connections of one server share: the bounds, the request deadlines and their
    sweep, and the peak connection count that decides when to give memory back."""

    def __init__(self, request_timeout: float, max_header_bytes: int, max_connections: int, drain_idle: float) -> None:
        self.request_timeout = request_timeout
        self.max_header_bytes = max_header_bytes
        self.max_connections = max_connections
        self.drain_idle = drain_idle
        self.trim = _malloc_trim()
        # Trim when the connection count falls back below a quarter of a peak of at least 256.
        self.peak = 0
        self.over = False  # the bound was met: said once per burst, not once per connection
        # The request deadlines: connection -> loop time by which its request must have arrived,
        # checked by one sweep every `interval` while any is armed: a timer per request (armed
        # at its first byte, cancelled at its end) cost measurable throughput (BENCHMARKS.md).
        self.armed: dict[BoundedHttpToolsProtocol, float] = {}
        self.interval = min(1.0, request_timeout / 4)
        # The loops with a sweep scheduled: one sweep per loop, so a class used under a later (or
        # a second) event loop never counts on the sweep of another.
        self.sweeping: set[asyncio.AbstractEventLoop] = set()
        # When each loop's sweep was due: a sweep that runs late ran after the loop was busy (a
        # review of a large pod), and time the server was not reading is not the client's.
        self.due: dict[asyncio.AbstractEventLoop, float] = {}
        # A direct answer's default headers (uvicorn's, the date's changing each second) as bytes,
        # made once for the list uvicorn holds now.
        self.headers: tuple[object, bytes] = (None, b"")
        self.direct_seen = False  # the first review taken off the ASGI path is logged, once

    def arm(self, protocol: BoundedHttpToolsProtocol, seconds: float | None = None) -> None:
        """The connection's deadline: its request's (request_timeout), or `seconds` from now."""
        loop = protocol.loop
        self.armed[protocol] = loop.time() + (self.request_timeout if seconds is None else seconds)
        if loop not in self.sweeping:
            for gone in [lp for lp in self.sweeping if lp.is_closed()]:  # their sweeps never run again
                self.sweeping.discard(gone)
            self.sweeping.add(loop)
            self.due[loop] = loop.time() + self.interval
            loop.call_later(self.interval, self.sweep, loop)

    def sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now, mine = loop.time(), 0
        late = max(0.0, now - self.due.pop(loop, now))
        for protocol, deadline in list(self.armed.items()):
            if protocol.loop is loop and late > 0:
                deadline = self.armed[protocol] = deadline + late
            if protocol.loop is not loop:  # another loop's; dropped once that loop is closed
                if protocol.loop.is_closed():
                    del self.armed[protocol]
            elif deadline <= now:
                del self.armed[protocol]
                protocol.expire()
            else:
                mine += 1
        if mine:
            self.due[loop] = now + self.interval
            loop.call_later(self.interval, self.sweep, loop)
        else:
            self.sweeping.discard(loop)

    def admit(self, open_now: int) -> bool:
        """A new connection: False when it is one over the bound (it is closed)."""
        self.peak = max(self.peak, open_now)
        if open_now > self.max_connections:
            if not self.over:
                log.warning("closing new connections: %d open, over the bound of %d", open_now, self.max_connections)
            self.over = True
            return False
        self.over = False
        return True

    def gone(self, open_now: int) -> None:
        """A connection ended: give memory back after a burst (see _malloc_trim)."""
        if self.peak >= 256 and open_now < self.peak // 4:
            self.peak = open_now
            self.trim()


class Reply(Protocol):
    """A review answered off the ASGI path, as the server holds it until it is answered."""

    def cancel(self) -> bool: ...


R = TypeVar("R", bound=Reply)


class Direct(Protocol[R]):
    """What the server answers off the ASGI path (app.webhook.server.AdmissionHandler)."""

    path: bytes

    def reserve(self, headers: list[tuple[bytes, bytes]]) -> int | None:
        """The body size held for a review it can take now, else None (the ASGI path takes it)."""

    def reply(self, size: int, send: Callable[[int, bytes], None]) -> R:
        """The review's Reply: `send(status, body)` is called once, unless it is cancelled first."""

    def submit(self, body: bytes, reply: R) -> None: ...


_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a server's Bounds (bounded_protocol makes the class),
    answering reviews through `direct` where it can."""

    bounds: Bounds
    direct: Direct[Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        self._in_headers = True
        self._draining = False
        self._drain_timer: asyncio.TimerHandle | None = None
        # The direct review being read (its body so far), and those read but not yet answered,
        # oldest first: their answers go out in this order, and ASGI requests wait behind them.
        self._direct_body: list[bytes] | None = None
        self._direct_reply: Reply | None = None
        self._direct_out: deque[Reply] = deque()
        self._read_paused_for_writes = False
        # The deadline armed is the keep-alive's, after a direct review's answer (uvicorn's
        # timeout_keep_alive, kept by the sweep: a timer a response cost a share of a review).
        self._idle_deadline = False

    def _arm(self) -> None:
        self.bounds.arm(self)

    def _disarm(self) -> None:
        self.bounds.armed.pop(self, None)
        self._idle_deadline = False

    def expire(self) -> None:
        if not self.transport.is_closing():
            if self._idle_deadline:
                log.debug("closing a connection idle for %ss", self.timeout_keep_alive)
            else:
                log.debug("closing a connection whose request did not arrive within %ss", self.bounds.request_timeout)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        if not self.bounds.admit(len(self.server_state.connections)):
            self.transport.close()
            return
        self._arm()  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for reply in (self._direct_reply, *self._direct_out):
            if reply is not None:
                reply.cancel()  # its held bytes back; it is not answered
        self._direct_reply, self._direct_body = None, None
        self._direct_out.clear()
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        super().connection_lost(exc)
        self.bounds.gone(len(self.server_state.connections))

    def _idle(self) -> bool:
        return (
            (self.cycle is None or self.cycle.response_complete) and not self._direct_out and self._direct_body is None
        )

    def shutdown(self) -> None:
        self._draining = True
        if self._direct_out or self._direct_body is not None:
            return  # answered with connection: close, then closed (_send_direct)
        if self.cycle is None or self.cycle.response_complete:
            # Idle: a request may be in flight towards us. Serve it (see on_headers_complete),
            # or close once the connection has stayed idle for drain_idle seconds.
            self._drain_timer = self.loop.call_later(self.bounds.drain_idle, self._close_if_idle)
        else:
            self.cycle.keep_alive = False  # close after this response

    def _close_if_idle(self) -> None:
        self._drain_timer = None
        if self._idle() and not self._in_request():
            self.transport.close()
        else:
            self._drain_timer = self.loop.call_later(self.bounds.drain_idle, self._close_if_idle)

    def _in_request(self) -> bool:
        # Bytes of a next request arrived (the request deadline is armed by its first byte).
        return self in self.bounds.armed and not self._idle_deadline

    def data_received(self, data: bytes) -> None:
        if (self._idle_deadline or self not in self.bounds.armed) and not self.transport.is_closing():
            self._idle_deadline = False
            self._arm()  # the first byte of a later request on a kept-alive connection
        headers_pending = self._in_headers
        super().data_received(data)
        # Count only what arrived while the headers were still incomplete after parsing
        # (a chunk that completes them may carry a large body: that is not header bytes).
        if headers_pending and self._in_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > self.bounds.max_header_bytes:
                self._disarm()
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                self.transport.close()

    def on_message_begin(self) -> None:
        self._in_headers, self._header_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        if self.direct is not None and self._take_direct(self.direct):
            return
        # The app may hold the request's deadline while it waits its turn to read the body
        # (the server's bound on bodies held at once): that wait is the server's, not the client's.
        self.scope.setdefault("extensions", {})[DEADLINE_EXTENSION] = {"hold": self._disarm, "resume": self._arm}
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered with connection: close, then closed

    def on_body(self, body: bytes) -> None:
        if self._direct_body is not None:
            self._direct_body.append(body)  # within its declared length, which is within the bound
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()  # the whole request arrived; answering it is the app's business
        if self._direct_body is None or self._direct_reply is None or self.direct is None:
            super().on_message_complete()
            return
        body, reply = b"".join(self._direct_body), self._direct_reply
        self._direct_body, self._direct_reply = None, None
        self.direct.submit(body, reply)

    def _take_direct(self, direct: Direct[Any]) -> bool:
        """Take this request off the ASGI path: a review (POST to the review path over
        HTTP/1.1, no upgrade, no 100-continue) with nothing else in flight or queued on this
        connection, that the server can hold now (direct.reserve)."""
        if (
            self.url.partition(b"?")[0] != direct.path  # the API server adds ?timeout=...
            or self.parser.get_method() != b"POST"
            or self.parser.get_http_version() != "1.1"
            or self.expect_100_continue
            or self.parser.should_upgrade()
            or not (self.cycle is None or self.cycle.response_complete)
            or self.pipeline
            # One review in flight a connection, as uvicorn's ASGI path keeps it: one pipelined
            # behind it waits there, the connection's reading paused (the API server does not
            # pipeline; a client that does must not queue a held-bytes bound of reviews at once).
            or self._direct_out
        ):
            return False
        size = direct.reserve(self.headers)
        if size is None:
            return False
        if not self.bounds.direct_seen:
            self.bounds.direct_seen = True
            log.info("reviews read and answered off the ASGI path (the first: %s bytes)", size)
        keep_alive = self.parser.should_keep_alive()
        reply = direct.reply(size, lambda status, body: self._send_direct(reply, keep_alive, status, body))
        self._direct_body, self._direct_reply = [], reply
        self._direct_out.append(reply)
        return True

    def _send_direct(self, reply: Reply, keep_alive: bool, status: int, body: bytes) -> None:
        """A direct review's answer, in the order the reviews came (the server answers them in
        that order): the response in one write; then what uvicorn does after a response."""
        if self._direct_out and self._direct_out[0] is reply:
            self._direct_out.popleft()
        else:  # the server answers in the order submitted: only a bug comes here
            log.error("a review answered out of order: closing its connection")
            self.transport.close()
            return
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        keep_alive = keep_alive and not self._draining
        defaults = self.server_state.default_headers
        cached = self.bounds.headers
        if cached[0] is not defaults:  # uvicorn makes a new list when the date changes
            lines = b"".join(b"%s: %s\r\n" % header for header in defaults)
            cached = self.bounds.headers = (defaults, lines + b"content-type: application/json\r\n")
        end = b"\r\n" if keep_alive else b"connection: close\r\n\r\n"
        length = b"content-length: %d\r\n" % len(body)
        self.transport.write_now(b"".join((_STATUS_LINES[status], cached[1], length, end, body)))  # type: ignore[attr-defined]
        if not keep_alive:
            self.transport.close()
            return
        if self.flow.write_paused:
            # A client that sends reviews and does not read the answers: stop reading it until
            # it does (uvicorn's ASGI path waits in send(); nothing waits here).
            self.flow.pause_reading()
            self._read_paused_for_writes = True
        if self._direct_out:
            return
        # What uvicorn's on_response_complete does, the keep-alive deadline in the sweep.
        if not self._read_paused_for_writes:
            self.flow.resume_reading()
        if self.pipeline:  # an ASGI request that came behind the reviews
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self.bounds.arm(self, self.timeout_keep_alive)
            self._idle_deadline = True

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._read_paused_for_writes:
            self._read_paused_for_writes = False
            self.flow.resume_reading()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self._direct_out:  # behind the review read before it: started once that is answered (_send_direct)
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
            return
        super()._start_asgi_task(cycle, app)


def bounded_protocol(
    request_timeout: float,
    max_header_bytes: int,
    max_connections: int = 1000,
    drain_idle: float = 1.0,
    direct: Direct[Any] | None = None,
) -> type[asyncio.Protocol]:
    """The protocol class uvicorn runs (its `http`), its connections sharing one Bounds and
    answering reviews through `direct` (None: every request through the ASGI app)."""
    bounds = Bounds(request_timeout, max_header_bytes, max_connections, drain_idle)
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"bounds": bounds, "direct": direct})
