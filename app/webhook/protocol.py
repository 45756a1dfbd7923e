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
import re
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from app.webhook.connections import TlsConnection

log = logging.getLogger("hostnet_rdma.server")

# The event loop uvicorn runs: asyncio's, not uvloop's. Under load on connections that come and
# go, the server's RSS grew without end on uvloop (~30 KB kept per connection closed, native
# memory: Python's heap stays flat) and levels off on asyncio's (BENCHMARKS.md, "Memory under
# sustained load"; uvloop issue #565).
EVENT_LOOP = "asyncio"


def malloc_trim() -> Callable[[], object]:
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


class HeldBodies:
    """A bound on the request bodies held at once, across connections (settings
    max_held_body_bytes): a body's bytes are counted as they arrive and given back once its
    request is answered or its connection is gone. Nothing is reserved from a declared length,
    so a request that announces a large body and sends none holds nothing, and nobody waits
    behind it. Past the bound, a connection that receives body bytes is read no more, its request
    deadline held (the wait is the server's); one of them at a time, the first to wait, is read
    on with its deadline running, so bodies keep completing and a client that stalls is cut off;
    all are read again once bodies held fall back under the bound. What is held stays under the
    bound plus one body (the one read on) and one read (READ_BUFFER) a connection."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.waiting: dict[BoundedHttpToolsProtocol, None] = {}
        self.reader: BoundedHttpToolsProtocol | None = None

    def over(self, protocol: BoundedHttpToolsProtocol) -> None:
        """Body bytes arrived on `protocol` (counted in `held`), and bodies held are over the bound."""
        if protocol is not self.reader and protocol not in self.waiting:
            self.waiting[protocol] = None
            protocol.hold_reading()
            self._next_reader()

    def release(self, size: int) -> None:
        self.held -= size
        if self.waiting and self.held < self.limit:
            waiting, self.waiting = self.waiting, {}
            for protocol in waiting:
                protocol.read_again()

    def body_done(self, protocol: BoundedHttpToolsProtocol) -> None:
        """`protocol`'s body arrived whole, or its connection is gone."""
        self.waiting.pop(protocol, None)
        if self.reader is protocol:
            self.reader = None
            self._next_reader()

    def _next_reader(self) -> None:
        if self.reader is None and self.waiting:
            self.reader = next(iter(self.waiting))
            del self.waiting[self.reader]
            self.reader.read_again()


class Bounds:
    """What the connections of one server share: the bounds, the request deadlines and their
    sweep, and the bodies held."""

    def __init__(
        self, request_timeout: float, max_header_bytes: int, drain_idle: float, max_held_body_bytes: int
    ) -> None:
        self.request_timeout = request_timeout
        self.max_header_bytes = max_header_bytes
        self.drain_idle = drain_idle
        self.held = HeldBodies(max_held_body_bytes)
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


class Reply(Protocol):
    """A review answered off the ASGI path, as the server holds it until it is answered."""

    def cancel(self) -> bool: ...


R = TypeVar("R", bound=Reply)


class Direct(Protocol[R]):
    """What the server answers off the ASGI path (app.webhook.server.AdmissionHandler)."""

    path: bytes

    def reserve(self, headers: list[tuple[bytes, bytes]]) -> int | None:
        """The declared body size of a review it takes, else None (the ASGI path takes it)."""

    def reply(self, size: int, send: Callable[[int, bytes], None]) -> R:
        """The review's Reply: `send(status, body)` is called once, unless it is cancelled first."""

    def submit(self, body: bytes, reply: R) -> None: ...


_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}


class GatedFlow(FlowControl):
    """uvicorn's flow control, with one authority on when a connection may be read again:
    uvicorn resumes reading on every ASGI receive() and every response, which let a client
    pipeline requests far ahead of their answers (BoundedHttpToolsProtocol.may_read)."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedHttpToolsProtocol) -> None:
        super().__init__(transport)
        self._protocol = protocol

    def resume_reading(self) -> None:
        protocol = self._protocol
        if self.read_paused and protocol.may_read():
            if protocol.unparsed:  # first what was left unparsed, in a turn of its own: never
                protocol.loop.call_soon(protocol.parse_unparsed)  # inside the parser's callbacks
            else:
                super().resume_reading()


# Only to cut what a read holds at a request's end (_next_request_part); the parser decides.
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([0-9]{1,10})[ \t]*\r", re.IGNORECASE)


def _content_length(data: bytes, start: int, end: int) -> int:
    """The Content-Length declared in data[start:end] (a request's head), 0 if none."""
    found = _CONTENT_LENGTH.search(data, start, end)
    return int(found[1]) if found else 0


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """A request's Content-Length, when it declares one and no other framing (the parser has
    already refused the ambiguous ones)."""
    length = None
    for name, value in headers:
        if name == b"content-length" and value.isdigit():
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


class _Request:
    """One request on a connection, from its headers to its answer: its body bytes held."""

    __slots__ = ("body", "complete")

    def __init__(self) -> None:
        self.body = 0
        self.complete = False


# Requests a connection may have parsed ahead of their answers, the one being answered included.
# The server stops reading a connection while a request that arrived whole is unanswered, so more
# than one comes only from one read holding several; past this many the rest of that read is
# dropped and the connection closed once the ones kept are answered (RFC 9112 9.3.2: a client
# that pipelines retries what was not answered). The API server does not pipeline.
MAX_AHEAD = 16


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a server's Bounds (bounded_protocol makes the class),
    answering reviews through `direct` where it can, behind a TLS connection of the server's
    ConnectionBudget (`tls`, set by connections.tls_factory; None in unit tests)."""

    bounds: Bounds
    direct: Direct[Any] | None = None
    tls: TlsConnection | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        self._in_headers = True
        self._began = False  # a request began in the part being parsed
        self._between = True  # the parser is between requests
        self._draining = False
        self._drain_timer: asyncio.TimerHandle | None = None
        # The direct review being read (its body so far), and those read but not yet answered,
        # oldest first: their answers go out in this order, and ASGI requests wait behind them.
        self._direct_body: list[bytes] | None = None
        self._direct_reply: Reply | None = None
        self._direct_out: deque[Reply] = deque()
        # Every request from its headers to its answer, oldest first, and the one being received.
        self._requests: deque[_Request] = deque()
        self._receiving: _Request | None = None
        self._excess = False  # over MAX_AHEAD: closed once the requests kept are answered
        self._dropping = False
        # Where the parser is: a request's body, and how much of it is still to come if declared.
        self._in_body = False
        self._body_left: int | None = None
        self.unparsed = b""  # what followed a request that arrived whole, parsed once it is answered
        self._not_reading = False  # answers wait unread: the deadline armed is the client's to read
        self.answered = 0
        # The deadline armed is the keep-alive's, after a direct review's answer (uvicorn's
        # timeout_keep_alive, kept by the sweep: a timer a response cost a share of a review).
        self._idle_deadline = False

    def _arm(self) -> None:
        self.bounds.arm(self)

    def _disarm(self) -> None:
        self.bounds.armed.pop(self, None)
        self._idle_deadline = False

    def expire(self) -> None:
        if self.transport.is_closing():
            return
        if self._idle_deadline:
            log.debug("closing a connection idle for %ss", self.timeout_keep_alive)
            self.transport.close()
            return
        if self._not_reading:
            log.info("closing a connection whose client did not read its answers for %ss", self.bounds.request_timeout)
        else:
            log.debug("closing a connection whose request did not arrive within %ss", self.bounds.request_timeout)
        self.transport.abort()  # nothing to say to it: its slot and memory free now, not after a TLS close

    # -- when the connection may be read

    def _answer_owed(self) -> bool:
        """A request arrived whole and is not answered yet."""
        return bool(self._requests) and self._requests[0].complete

    def owes_answers(self) -> bool:
        """Answers still to write for what the client sent: a request owed one, or requests
        left unparsed behind it."""
        return self._answer_owed() or bool(self.unparsed)

    def resting(self) -> bool:
        return self._idle() and not self._in_request()

    def _blocked(self) -> bool:
        """Not to be read, whatever it sent: a request queued for the ASGI app, over MAX_AHEAD,
        answers waiting unread, or over the bound on bodies held."""
        return bool(self.pipeline) or self._excess or self.flow.write_paused or self in self.bounds.held.waiting

    def may_read(self) -> bool:
        return not (self._answer_owed() or self._blocked())

    def hold_reading(self) -> None:
        """Over the bound on bodies held (HeldBodies): read no more, the request deadline held."""
        self.flow.pause_reading()
        if not self._not_reading:
            self._disarm()

    def read_again(self) -> None:
        if not self.transport.is_closing():
            if not self._not_reading:
                self._arm()
            self.flow.resume_reading()

    def _answered(self) -> None:
        """The oldest request is answered: its body's bytes back, and what follows from it."""
        self.answered += 1
        if self._requests:
            request = self._requests.popleft()
            if request.body:
                self.bounds.held.release(request.body)
            request.body = 0
        if self._excess and not self._requests:
            self.transport.close()
        elif self.tls is not None and self.tls.deferred_eof and not self.owes_answers():
            self.tls.answers_sent()

    # -- uvicorn's protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self.flow = GatedFlow(self.transport, self)
        self._arm()  # a connection that never sends a request is closed too

    def _receiving_held(self) -> bool:
        held = self.bounds.held
        return held.reader is self or (bool(held.waiting) and self in held.waiting)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._receiving_held():
            self.bounds.held.body_done(self)
        held = sum(request.body for request in self._requests)
        for request in self._requests:
            request.body = 0
        self._requests.clear()
        if held:
            self.bounds.held.release(held)
        for reply in (self._direct_reply, *self._direct_out):
            if reply is not None:
                reply.cancel()  # it is not answered
        self._direct_reply, self._direct_body = None, None
        self._direct_out.clear()
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The client does not read its answers: read it no more, and close it if it still has not
        # read them by the request deadline (uvicorn waits for ever, in the ASGI send()).
        super().pause_writing()
        self.flow.pause_reading()
        if not self._not_reading:
            self._not_reading = True
            self._idle_deadline = False
            self.bounds.arm(self)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._not_reading:
            self._not_reading = False
            if self.resting():
                self.bounds.arm(self, self.timeout_keep_alive)
                self._idle_deadline = True
            else:
                self._arm()
        self.flow.resume_reading()

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
        return self in self.bounds.armed and not self._idle_deadline and not self._not_reading

    def data_received(self, data: bytes) -> None:
        owed = self._answer_owed()
        if not owed and self._between and self._body_left is None and not self._in_body:
            # The common read: one whole request, its head within the bound, nothing after it
            # (what the API server sends). Parsed at once, and no request deadline to arm: it
            # has arrived (on_message_complete disarms the keep-alive's). Other reads go below.
            end = data.find(b"\r\n\r\n")
            if 0 <= end < self.bounds.max_header_bytes and end + 4 + _content_length(data, 0, end + 2) == len(data):
                HttpToolsProtocol.data_received(self, data)
                if self._blocked():
                    self.flow.pause_reading()
                return
        # (While answers wait unread, the deadline armed is the client's to read them: kept.)
        if (self._idle_deadline or self not in self.bounds.armed) and not self._not_reading:
            self._idle_deadline = False
            self._arm()  # the first byte of a later request on a kept-alive connection
        # A request at a time: what follows a request that arrived whole stays unparsed until it
        # is answered, and the connection is read no more meanwhile (a client that pipelines
        # holds what one read brought in). One that sends nothing more is never paused: the API
        # server's connections cost no pause and resume a review.
        if owed:
            self.unparsed += data
            self.flow.pause_reading()
            return
        view, pos = memoryview(data), 0
        while pos < len(data):
            end = pos + self._next_request_part(data, pos)
            self._parse(view[pos:end] if pos or end < len(data) else data)
            pos = end
            if pos < len(data) and not self.may_read():
                if not self.transport.is_closing():
                    self.unparsed = data[pos:]
                break
        if self.unparsed or self._blocked():
            self.flow.pause_reading()

    def _next_request_part(self, data: bytes, pos: int) -> int:
        """How much of data[pos:] to parse at once: up to the end of the request being read,
        where that is known (its headers' end and declared length, then what is left of its
        body), else all. A guess that is off costs nothing but parsing ahead: the parser is fed
        the same bytes either way, and decides."""
        if self._body_left is not None:
            return min(self._body_left, len(data) - pos) or len(data) - pos
        if self._in_body:  # a body of no declared length (chunked)
            return len(data) - pos
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            return len(data) - pos
        end += 4 + _content_length(data, pos, end + 2)  # one part for a whole request: one parse
        return min(end, len(data)) - pos

    def _parse(self, data: bytes | memoryview) -> None:
        at_boundary, self._began = self._between, False
        super().data_received(data)  # type: ignore[arg-type]
        if not self._in_headers or self.transport.is_closing():
            return
        # The header bound, a request at a time. A part that begins between requests ends at the
        # first end of headers (_next_request_part): if its request is still in its headers, all
        # of it is theirs. Where a request began in a part that did not begin between requests
        # (after a body of no declared length), its count starts with the next part.
        if at_boundary or not self._began:
            self._header_bytes += len(data)
            if self._header_bytes > self.bounds.max_header_bytes:
                self._disarm()
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                self.transport.close()

    def parse_unparsed(self) -> None:
        """Reading may go on: first what was left unparsed (GatedFlow.resume_reading)."""
        data, self.unparsed = self.unparsed, b""
        if data and not self.transport.is_closing():
            self.data_received(data)
        if not self.unparsed:
            self.flow.resume_reading()

    def on_message_begin(self) -> None:
        self._in_headers, self._header_bytes, self._began, self._between = True, 0, True, False
        self._in_body, self._body_left = False, None
        # uvicorn's, less the ASGI scope: a review read off the ASGI path needs none (_asgi_scope).
        self.url, self.expect_100_continue, self.headers = b"", False, []

    def _asgi_scope(self) -> None:
        """The request's ASGI scope, made by uvicorn's on_message_begin, with what was parsed since."""
        url, expect, headers = self.url, self.expect_100_continue, self.headers
        super().on_message_begin()
        self.url, self.expect_100_continue, self.headers = url, expect, headers
        self.scope["headers"] = headers

    def on_headers_complete(self) -> None:
        self._in_headers, self._in_body = False, True
        if self._excess or len(self._requests) >= MAX_AHEAD:
            self._drop_pipelined()
            return
        self._receiving = request = _Request()
        self._requests.append(request)
        if self.direct is not None and self._take_direct(self.direct):
            return
        self._body_left = _declared_length(self.headers)
        self._asgi_scope()
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered with connection: close, then closed

    def _drop_pipelined(self) -> None:
        """A request past MAX_AHEAD: parsed (the parser must go on), never run."""
        if not self._excess:
            log.info("closing a connection that pipelined over %d requests, once those are answered", MAX_AHEAD)
        self._excess = True
        self._receiving = None
        self.flow.pause_reading()
        queued = len(self.pipeline)
        # Its cycle, made (the body the parser goes on with must not reach another request's),
        # never started, taken out of the queue.
        self._dropping = True
        try:
            self._asgi_scope()
            super().on_headers_complete()
        finally:
            self._dropping = False
        if len(self.pipeline) > queued:
            self.pipeline.popleft()

    def on_body(self, body: bytes) -> None:
        if self._body_left is not None:
            self._body_left -= len(body)
        request = self._receiving
        if request is not None and (self._direct_body is not None or not self.cycle.response_complete):
            request.body += len(body)
            held = self.bounds.held
            held.held += len(body)
            if held.held >= held.limit:
                held.over(self)
        if self._direct_body is not None:
            self._direct_body.append(body)  # within its declared length, which is within the bound
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._not_reading:
            self._disarm()  # the whole request arrived; answering it is the app's business
        self._in_body, self._body_left, self._between = False, None, True
        if self._receiving is not None:
            self._receiving.complete = True
            self._receiving = None
            held = self.bounds.held
            if held.reader is self or (held.waiting and self in held.waiting):  # _receiving_held, inline
                held.body_done(self)
        if self._direct_body is None or self._direct_reply is None or self.direct is None:
            super().on_message_complete()
            return
        body, reply = b"".join(self._direct_body), self._direct_reply
        self._direct_body, self._direct_reply = None, None
        self.direct.submit(body, reply)

    def on_response_complete(self) -> None:
        self._answered()
        super().on_response_complete()

    def _take_direct(self, direct: Direct[Any]) -> bool:
        """Take this request off the ASGI path: a review (POST to the review path over
        HTTP/1.1, no upgrade, no 100-continue) with nothing else in flight or queued on this
        connection, that the server takes (direct.reserve)."""
        if (
            self.url.partition(b"?")[0] != direct.path  # the API server adds ?timeout=...
            or self.parser.get_method() != b"POST"
            or self.parser.get_http_version() != "1.1"
            or self.expect_100_continue
            or self.parser.should_upgrade()
            or not (self.cycle is None or self.cycle.response_complete)
            or self.pipeline
            # One review in flight a connection, as uvicorn's ASGI path keeps it: one pipelined
            # behind it waits there (the API server does not pipeline).
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
        self._body_left = size
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
        self._answered()
        if self._direct_out or self.transport.is_closing():
            return
        # What uvicorn's on_response_complete does, the keep-alive deadline in the sweep.
        self.flow.resume_reading()
        if self.pipeline:  # an ASGI request that came behind the reviews
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif not self._not_reading:
            self.bounds.arm(self, self.timeout_keep_alive)
            self._idle_deadline = True

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self._dropping:
            return
        if self._direct_out:  # behind the review read before it: started once that is answered (_send_direct)
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
            return
        super()._start_asgi_task(cycle, app)


def bounded_protocol(
    request_timeout: float,
    max_header_bytes: int,
    max_held_body_bytes: int = 16 * 1024 * 1024,
    drain_idle: float = 1.0,
    direct: Direct[Any] | None = None,
) -> type[BoundedHttpToolsProtocol]:
    """The HTTP protocol class behind each TLS connection (connections.tls_factory), its
    connections sharing one Bounds and answering reviews through `direct` (None: every request
    through the ASGI app)."""
    bounds = Bounds(request_timeout, max_header_bytes, drain_idle, max_held_body_bytes)
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"bounds": bounds, "direct": direct})
