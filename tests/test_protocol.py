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


def test_a_review_pipelined_behind_a_direct_one_waits_on_the_asgi_path_with_reading_paused() -> None:
    """One review in flight a connection, as uvicorn's ASGI path keeps it: a second request
    pipelined behind an unanswered direct review is queued for the ASGI app, the connection's
    reading paused, and started once the first is answered."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from app.webhook.protocol import bounded_protocol

    started: list[str] = []

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        started.append(scope["path"])
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    class Deferring(Answering):
        def __init__(self) -> None:
            super().__init__()
            self.waiting: list[tuple[bytes, Any]] = []

        def submit(self, body: bytes, reply: Any) -> None:
            self.waiting.append((body, reply))  # answered later, as under load

    config = Config(asgi, http="httptools")
    config.load()
    request = b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

    class Pausable(Recording):
        paused = False

        def pause_reading(self) -> None:
            self.paused = True

        def resume_reading(self) -> None:
            self.paused = False

    async def go() -> Pausable:
        direct = Deferring()
        state = ServerState()
        state.default_headers = []
        protocol = bounded_protocol(10.0, 8192, direct=direct)(config=config, server_state=state, app_state={})
        real = Pausable()
        protocol.connection_made(real)
        protocol.data_received(request + request)
        assert len(direct.waiting) == 1 and started == []  # the second waits, unstarted
        assert real.paused
        direct.waiting[0][1].answer(direct.waiting[0][0])
        for _ in range(5):
            await asyncio.sleep(0)
        assert started == ["/mutate"] and not real.paused
        protocol.connection_lost(None)
        return real

    real = asyncio.run(go())
    writes = [data for kind, data in real.events if kind == "write"]
    assert writes[0].endswith(b'{"got":2}') and writes[1].endswith(b"ok")
