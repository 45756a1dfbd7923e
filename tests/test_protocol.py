"""CoalescingTransport on its own: a write waits for the next (they leave as one) or for the end
of the event-loop turn, in order, and nothing pending is lost or reordered by close(). The whole server over real TLS with it is
tests/server (200 concurrent reviews, draining under load, 431 before close)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.webhook.protocol import CoalescingTransport


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.events.append(("write", bytes(data)))

    def close(self) -> None:
        self.closing = True
        self.events.append(("close", None))

    def abort(self) -> None:
        self.closing = True
        self.events.append(("abort", None))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def run(body: Any) -> list[tuple[str, Any]]:
    async def go() -> list[tuple[str, Any]]:
        real = Recording()
        await body(CoalescingTransport(real, asyncio.get_running_loop()), real)
        return real.events

    return asyncio.run(go())


def test_a_head_waits_for_its_body_and_a_lone_write_for_the_end_of_the_turn() -> None:
    async def body(t: CoalescingTransport, real: Recording) -> None:
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert real.events == [] and t.get_write_buffer_size() == 19
        t.write(memoryview(b"{}"))
        assert real.events == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}")]  # at once, joined
        t.write(b"next")
        assert len(real.events) == 1
        await asyncio.sleep(0)
        assert real.events[-1] == ("write", b"next")
        await asyncio.sleep(0)

    assert run(body) == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}"), ("write", b"next")]


def test_close_sends_what_is_pending_first_and_abort_drops_it() -> None:
    async def closing(t: CoalescingTransport, real: Recording) -> None:
        t.write(b"HTTP/1.1 431 Too Large\r\n\r\n")
        t.close()
        await asyncio.sleep(0)  # the scheduled flush finds nothing more to send

    assert run(closing) == [("write", b"HTTP/1.1 431 Too Large\r\n\r\n"), ("close", None)]

    async def aborting(t: CoalescingTransport, real: Recording) -> None:
        t.write(b"partial")
        t.abort()
        await asyncio.sleep(0)

    assert run(aborting) == [("abort", None)]


def test_nothing_is_written_to_a_transport_already_closing_and_the_rest_is_the_real_ones() -> None:
    async def body(t: CoalescingTransport, real: Recording) -> None:
        t.write(b"late")
        real.closing = True
        await asyncio.sleep(0)
        assert t.is_closing() and t.get_extra_info("peername") == ("127.0.0.1", 1)

    assert run(body) == []


def test_the_servers_protocol_writes_through_a_coalescing_transport() -> None:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from app.webhook.protocol import bounded_protocol

    async def asgi(scope: Any, receive: Any, send: Any) -> None:  # never called here
        raise AssertionError

    async def go() -> None:
        config = Config(asgi, http="httptools")
        config.load()
        protocol = bounded_protocol(10.0, 8192)(config=config, server_state=ServerState(), app_state={})
        real = Recording()
        protocol.connection_made(real)
        assert isinstance(protocol.transport, CoalescingTransport)
        protocol.transport.write(b"head")
        protocol.transport.write(b"body")
        assert real.events == [("write", b"headbody")]
        protocol.connection_lost(None)

    asyncio.run(go())


def test_request_deadlines_are_swept_under_a_second_event_loop() -> None:
    """One sweep checks every connection's request deadline; it is scheduled on the loop that
    armed the first deadline. The same protocol class under a later loop (a server started again
    in one process) gets a sweep of its own: a connection that sends nothing is still closed."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from app.webhook.protocol import bounded_protocol

    async def asgi(scope: Any, receive: Any, send: Any) -> None:  # never called here
        raise AssertionError

    config = Config(asgi, http="httptools")
    config.load()
    cls = bounded_protocol(0.2, 8192)

    async def connect(wait: float) -> Recording:
        protocol = cls(config=config, server_state=ServerState(), app_state={})
        real = Recording()
        protocol.connection_made(real)
        await asyncio.sleep(wait)
        return real

    first = asyncio.run(connect(0))  # its loop ends before any sweep ran
    assert not first.closing
    second = asyncio.run(connect(0.5))  # sends nothing for over its 0.2 s
    assert second.closing


class Answering:
    """A protocol.Direct that answers each review at once with the length of its body."""

    path = b"/mutate"

    def __init__(self) -> None:
        self.cancelled = 0

    def reserve(self, headers: list[tuple[bytes, bytes]]) -> int | None:
        return int(dict(headers)[b"content-length"])

    def reply(self, size: int, send: Any) -> Any:
        direct = self

        class Reply:
            def cancel(self) -> bool:
                direct.cancelled += 1
                return True

            def answer(self, body: bytes) -> None:
                send(200, b'{"got":%d}' % len(body))

        return Reply()

    def submit(self, body: bytes, reply: Any) -> None:
        reply.answer(body)


def test_a_direct_review_is_answered_in_one_write_and_its_kept_alive_connection_closed_when_idle() -> None:
    """A review read by the protocol itself (protocol.Direct): its answer leaves in one write with
    uvicorn's default headers; the connection is then kept alive for timeout_keep_alive, a
    deadline the request sweep keeps (no timer per response): a next request within it is served
    under the request deadline, and a connection idle past it is closed."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from app.webhook.protocol import bounded_protocol

    async def asgi(scope: Any, receive: Any, send: Any) -> None:  # never called here
        raise AssertionError

    config = Config(asgi, http="httptools", timeout_keep_alive=1)
    config.load()
    request = (
        b"POST /mutate?timeout=10s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )

    async def go() -> tuple[Recording, Answering, list[float]]:
        direct = Answering()
        state = ServerState()
        state.default_headers = [(b"date", b"Mon, 07 Dec 2026 01:00:00 GMT")]
        protocol = bounded_protocol(0.2, 8192, direct=direct)(config=config, server_state=state, app_state={})
        real = Recording()
        protocol.connection_made(real)
        protocol.data_received(request)
        protocol.data_received(request[:20])  # a next request, its first bytes only...
        await asyncio.sleep(0.1)
        assert not real.closing  # ...within its request deadline (0.2 s), not the keep-alive's
        protocol.data_received(request[20:])
        closed_after: list[float] = []
        start = asyncio.get_running_loop().time()
        while not real.closing and asyncio.get_running_loop().time() - start < 3:
            await asyncio.sleep(0.05)
        closed_after.append(asyncio.get_running_loop().time() - start)
        protocol.connection_lost(None)
        return real, direct, closed_after

    real, direct, closed_after = asyncio.run(go())
    answer = b'HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 01:00:00 GMT\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{"got":2}'
    assert real.events[:2] == [("write", answer), ("write", answer)]
    assert real.events[2] == ("close", None)
    assert 0.9 <= closed_after[0] < 2.0  # idle for timeout_keep_alive (1 s), then closed by the sweep
    assert direct.cancelled == 0


class Deferring(Answering):
    """Answers reviews only when told (as under load, where they wait for their batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[tuple[bytes, Any]] = []

    def submit(self, body: bytes, reply: Any) -> None:
        self.waiting.append((body, reply))

    def answer_next(self) -> None:
        body, reply = self.waiting.pop(0)
        reply.answer(body)


class Pausable(Recording):
    paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


REVIEW = b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def _connected(direct: Any, asgi: Any = None, held: int = 16 << 20, **config_args: Any) -> tuple[Any, Pausable]:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from app.webhook.protocol import bounded_protocol

    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not an ASGI request")

    config = Config(asgi or refuse, http="httptools", **config_args)
    config.load()
    state = ServerState()
    state.default_headers = []
    protocol = bounded_protocol(10.0, 8192, held, direct=direct)(config=config, server_state=state, app_state={})
    real = Pausable()
    protocol.connection_made(real)
    return protocol, real


def _ok_app(started: list[str]) -> Any:
    """An ASGI app that reads the body, answers 200 "ok", and notes each path it started."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        started.append(scope["path"])
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return asgi


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_what_follows_an_unanswered_request_stays_unparsed_until_it_is_answered() -> None:
    """A request at a time (#63): bytes pipelined behind a request that arrived whole are not
    parsed until it is answered, reading paused meanwhile (uvicorn parsed and queued every
    request it read, and resumed reading on every receive() and response)."""
    started: list[str] = []
    asgi = _ok_app(started)

    async def go() -> Pausable:
        direct = Deferring()
        protocol, real = _connected(direct, asgi)
        probe = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
        protocol.data_received(REVIEW + REVIEW + probe)
        assert len(direct.waiting) == 1 and started == [] and real.paused
        assert protocol.unparsed == REVIEW + probe  # not parsed: nothing queued for them
        direct.answer_next()
        await _turns()
        assert len(direct.waiting) == 1 and started == [] and real.paused  # the second, now
        direct.answer_next()
        await _turns()
        assert started == ["/healthz"]
        await _turns()
        assert not real.paused and not protocol.unparsed
        protocol.connection_lost(None)
        return real

    real = asyncio.run(go())
    writes = [data for kind, data in real.events if kind == "write"]
    assert writes[0].endswith(b'{"got":2}') and writes[1].endswith(b'{"got":2}') and writes[2].endswith(b"ok")


def test_bodies_are_held_as_they_arrive_and_given_back_when_answered_or_gone() -> None:
    """The bound on bodies held at once counts bytes as they arrive (#63): a request that
    declares a large body and sends none holds nothing. Past the bound, connections receiving a
    body are read no more, their request deadline held, but for one, the first to wait, read on
    with its deadline running; all are read again once bodies fall back under the bound."""
    announced = b"POST /mutate HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: 7000000\r\n\r\n"

    async def go() -> None:
        direct = Deferring()
        first, first_real = _connected(direct, held=100)
        held = first.bounds.held
        first.data_received(announced)
        assert held.held == 0 and not first_real.paused

        def joined() -> tuple[Any, Pausable]:
            protocol, real = _connected(direct, held=100)
            protocol.bounds = first.bounds  # one server: its connections share the bound
            return protocol, real

        small, _ = joined()
        small.data_received(REVIEW)
        assert held.held == 2 and len(direct.waiting) == 1
        first.data_received(b"x" * 150)  # past the bound: the first to wait, read on
        assert held.held == 152 and held.reader is first and not first_real.paused
        second, second_real = joined()
        second.data_received(announced + b"y" * 10)  # waits: not read, its deadline held
        assert second_real.paused and second in held.waiting and second not in second.bounds.armed
        direct.answer_next()  # the small review answered: its 2 bytes back, still over the bound
        await _turns()
        assert held.held == 160 and second_real.paused
        first.connection_lost(None)  # the large one gone: its bytes back, everyone read again
        assert held.held == 10 and not held.waiting and held.reader is second
        assert not second_real.paused and second in second.bounds.armed
        second.connection_lost(None)
        small.connection_lost(None)
        assert held.held == 0

    asyncio.run(go())


def test_a_client_that_does_not_read_its_answers_is_read_no_more_and_closed_after_the_deadline() -> None:
    async def go() -> Pausable:
        protocol, real = _connected(Answering())
        protocol.bounds.request_timeout = 0.2
        protocol.data_received(REVIEW)
        protocol.pause_writing()  # the transport's buffer is over its mark: the client is not reading
        assert real.paused
        protocol.data_received(REVIEW)  # what was already read is answered...
        assert real.paused  # ...but nothing more is read
        for _ in range(20):
            await asyncio.sleep(0.05)
            if real.closing:
                break
        return real

    real = asyncio.run(go())
    assert real.events[-1] == ("abort", None)


def test_a_client_pipelining_chunked_requests_past_the_bound_is_closed_once_those_kept_are_answered() -> None:
    """Where a request's end is not known before parsing (chunked bodies), one read may hold many
    requests: past MAX_AHEAD the rest are not run, and the connection closes once the ones kept
    are answered (RFC 9112 9.3.2: the client retries what was not answered)."""
    from app.webhook.protocol import MAX_AHEAD

    started: list[str] = []
    asgi = _ok_app(started)

    chunked = b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"

    async def go() -> Pausable:
        protocol, real = _connected(None, asgi)
        protocol.data_received(chunked * (MAX_AHEAD + 10))
        for _ in range(200):
            await asyncio.sleep(0)
            if real.closing:
                break
        return real

    real = asyncio.run(go())
    writes = [data for kind, data in real.events if kind == "write"]
    assert len(started) == MAX_AHEAD and sum(w.count(b"HTTP/1.1 200") for w in writes) == MAX_AHEAD
    assert ("close", None) in real.events


# Requests whose one read takes the whole-request fast path of data_received, or looks as if it
# could: framing a parser must decide (both lengths, two lengths, chunked, none, a GET).
FRAMINGS = [
    REVIEW,
    b"POST /mutate HTTP/1.1\r\nhost: x\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length:  2 \r\n\r\n{}",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-length: 12\r\n\r\n{}GET / HTTP/1.1\r\n\r\n",
    REVIEW + REVIEW,
]


def test_a_read_parsed_whole_answers_as_the_same_bytes_cut_up() -> None:
    """A read that holds one whole request is parsed at once (the API server's case); any other
    read is cut at request ends. Fed in one read or a byte at a time, every framing gets the same
    answers, the same close and the same requests run: the fast path decides nothing itself."""
    started: list[str] = []

    async def feed(data: bytes, at_once: bool) -> tuple[list[tuple[str, Any]], list[str]]:
        started.clear()
        protocol, real = _connected(Answering(), _ok_app(started))
        parts = [data] if at_once else [data[i : i + 1] for i in range(len(data))]
        for part in parts:
            if real.closing:
                break
            if protocol.unparsed or real.paused:
                await _turns()
            protocol.data_received(part)
        await _turns(10)
        protocol.connection_lost(None)
        events = [e for i, e in enumerate(real.events) if e[0] != "close" or ("close", None) not in real.events[:i]]
        return events, list(started)  # (closing twice is closing)

    for data in FRAMINGS:
        whole, cut = asyncio.run(feed(data, True)), asyncio.run(feed(data, False))
        assert whole == cut, data
