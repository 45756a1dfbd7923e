"""The HTTPS admission server: a FastAPI app built by create_app(), no module singletons.

POST /mutate takes an AdmissionReview; /healthz, /readyz, /metrics. The HTTP layer only
checks size and content type, calls app.webhook.review, and writes; all policy lives in the core.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import datetime as dt
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import Receive, Scope, Send

from app import __version__, config
from app.core import ConfigError, InjectConfig, Params
from app.events import Recorder
from app.webhook import filewatch
from app.webhook.review import BadReview, ReviewResult, answer, params_for
from app.webhook.settings import ServerSettings

log = logging.getLogger("hostnet_rdma.admission")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line; admission records carry their fields as `extra`."""

    FIELDS = ("uid", "namespace", "pod", "launcher", "outcome", "ms", "warnings")

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {"level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        for key in self.FIELDS:
            if hasattr(record, key):
                data[key] = getattr(record, key)
        return orjson.dumps(data).decode()


class ConfigHolder:
    """The live InjectConfig; reloaded when its file changes, kept when the new one is bad."""

    def __init__(self, path: Path | None, poll_seconds: float) -> None:
        self.path = path
        self.poll_seconds = poll_seconds
        self.config: InjectConfig = config.load(path)
        self._stamp = self._read_stamp()
        self._stop = threading.Event()
        self.reloads = 0

    def _read_stamp(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def check(self) -> bool:
        stamp = self._read_stamp()
        if stamp is None or stamp == self._stamp:
            return False
        try:
            self.config = config.load(self.path)
        except ConfigError as e:
            logging.getLogger("hostnet_rdma.config").warning("config not reloaded, keeping the old one: %s", e)
            self._stamp = stamp
            return False
        self._stamp = stamp
        self.reloads += 1
        logging.getLogger("hostnet_rdma.config").info("config reloaded from %s", self.path)
        return True

    def start(self) -> None:
        if self.path is not None:
            filewatch.watch_and_poll(self.path.parent, self._stop, self.poll_seconds, self.check, "config-reload")

    def stop(self) -> None:
        self._stop.set()


def core_build() -> str:
    """How the core runs: "compiled" as mypyc extension modules (as the image ships it,
    setup.py), "interpreted" as plain Python (an editable dev install, or an image built with
    PURE=1)."""
    path = getattr(sys.modules.get("app.core.mutate"), "__file__", "") or ""
    return "compiled" if path.endswith((".so", ".pyd")) else "interpreted"


class Admissions(Collector):
    """The admissions handled, by outcome and launcher, and the time each took: counted on the
    event loop's thread, where /metrics is also served, so with no lock (prometheus_client's
    Counter and Histogram take one an increment: ~1.1 µs a review, BENCHMARKS.md), and
    exposed at scrape as a Counter and a Histogram of these names are."""

    BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.buckets = [0] * (len(self.BUCKETS) + 1)  # the last: over every bound (+Inf)
        self.sum = 0.0

    def count(self, outcome: str, launcher: str) -> None:
        key = (outcome, launcher)
        self.counts[key] = self.counts.get(key, 0) + 1

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.buckets[bisect.bisect_left(self.BUCKETS, seconds)] += 1  # le: the first bound >= seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "hostnet_rdma_admission_requests", "Admission reviews handled", labels=["outcome", "launcher"]
        )
        for (outcome, launcher), n in list(self.counts.items()):
            requests.add_metric([outcome, launcher], n)
        yield requests
        cumulative, total = [], 0
        for bound, n in zip((*self.BUCKETS, float("inf")), self.buckets, strict=True):
            total += n
            cumulative.append((repr(bound) if bound < float("inf") else "+Inf", total))  # as Histogram's le
        yield HistogramMetricFamily(
            "hostnet_rdma_admission_duration_seconds", "Time to answer one admission review",
            buckets=cumulative, sum_value=self.sum,
        )  # fmt: skip


class Metrics:
    def __init__(self, recorder: Recorder | None = None) -> None:
        self.registry = CollectorRegistry()
        self.build = Gauge(
            "hostnet_rdma_build_info", "This server's version and how its core runs", ["version", "core"],
            registry=self.registry,
        )  # fmt: skip
        self.build.labels(__version__, core_build()).set(1)
        self.admissions = Admissions()
        self.registry.register(self.admissions)
        self.cert_expiry = Gauge(
            "hostnet_rdma_certificate_expiry_timestamp_seconds", "Serving certificate notAfter", registry=self.registry
        )
        self.config_reloads = Gauge("hostnet_rdma_config_reloads", "Config reloads since start", registry=self.registry)
        self.cert_refused = Gauge(
            "hostnet_rdma_certificate_reloads_refused",
            "New serving certificates refused since start (unsigned by the CA, expired, wrong names, broken)",
            registry=self.registry,
        )
        if recorder is not None:
            for name, text, read in (
                ("hostnet_rdma_event_api_calls", "Event creates and patches sent since start", lambda: recorder.calls),
                ("hostnet_rdma_event_api_failures", "Event API calls that failed since start", lambda: recorder.failed),
                ("hostnet_rdma_events_dropped", "Admissions not turned into Events (queue full) since start",
                 lambda: recorder.dropped),
                ("hostnet_rdma_events_rate_limited", "Occurrences not sent (rate limits, pending bound) since start",
                 lambda: recorder.limited),
                ("hostnet_rdma_events_outside_selectors",
                 "Admissions for namespaces the webhook's selectors do not admit, or about no job that exists with "
                 "that uid: no Event (forged reviews)",
                 lambda: recorder.outside),
            ):  # fmt: skip
                Gauge(name, text, registry=self.registry).set_function(read)


class DirectReply:
    """A review the protocol reads and answers itself (protocol.Direct): in the handler's batch
    it stands where an ASGI request's future does, with the same done/set_result/set_exception;
    cancelled when its connection is lost (the protocol gives its body's bytes back)."""

    def __init__(self, handler: AdmissionHandler, send: Callable[[int, bytes], None]) -> None:
        self.handler = handler
        self.send = send
        self.started = time.perf_counter()
        self._done = False

    def done(self) -> bool:
        return self._done

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True
        return True

    def set_result(self, result: ReviewResult) -> None:
        if not self.cancel():
            return
        try:
            self.handler.answered(result, self.started)
        except Exception:  # counting or logging it broke: the pod's answer goes out all the same,
            log.exception("review answered, but not counted or logged")  # and the batch's others too
        self.send(200, result.body)

    def set_exception(self, error: BaseException) -> None:
        if not self.cancel():
            return
        if isinstance(error, BadReview):
            self.send(*self.handler.reject(400, str(error)))
        else:  # as uvicorn answers an exception out of the ASGI app
            log.error("review failed", exc_info=error)
            self.send(500, orjson.dumps({"error": "internal server error"}))


# An ASGI request's future, or a DirectReply: what a review in the batch is answered through.
Waiter = asyncio.Future[ReviewResult] | DirectReply


class AdmissionHandler:
    """POST /mutate, read and answered by the protocol itself where it can be (reserve, reply,
    submit: protocol.Direct), else as plain ASGI (FastAPI's routing and request objects cost more
    than the mutation itself: BENCHMARKS.md). Reads a bounded JSON body, hands it to
    app.webhook.review.answer, counts the outcome, writes one log line, answers.

    Under load, reviews run in batches: the bodies completed in one event-loop turn are reviewed
    back to back in the next (up to MAX_BATCH at a time), then answered. A review run right after
    another finds the core's code and data in cache; run between two requests' TLS and socket work
    it took several times as long (BENCHMARKS.md, "What we optimised"). 64 a batch against 16:
    ~10% less CPU an admission at saturation (A/B, BENCHMARKS.md); a batch is ~3 ms of reviews.
    A request that finds the server idle (no review within BUSY_SECONDS) is reviewed at once: each
    loop turn a batched request waits is a turn in which newly arrived requests are read first."""

    MAX_BATCH = 64
    BATCH_SECONDS = 0.01
    BUSY_SECONDS = 0.001
    # How long a review slower than settings.ready_max_review_seconds keeps the server not ready:
    # two of the chart's readiness periods, so that the Service takes it out and the API server's
    # next reviews go to a replica that answers in time.
    SLOW_HOLD_SECONDS = 10.0

    def __init__(
        self, settings: ServerSettings, holder: ConfigHolder, metrics: Metrics, recorder: Recorder | None = None
    ) -> None:
        self.settings = settings
        self.holder = holder
        self.metrics = metrics
        # Events on the pods' jobs (app.events): record() is a deque append; a thread sends.
        self.recorder = recorder
        self._params: Params | None = None
        self._pending_log: list[bytes] = []
        self._batch: list[tuple[bytes, Waiter]] = []
        self._last_review = float("-inf")  # perf_counter() when the last review ended
        self.slow = (float("-inf"), 0.0)  # until when not ready, and the slow review's seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            status, body = 405, orjson.dumps({"error": "use POST"})
        else:
            status, body = await self.handle(dict(scope["headers"]), receive)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def handle(self, headers: dict[bytes, bytes], receive: Receive) -> tuple[int, bytes]:
        started = time.perf_counter()
        ctype = headers.get(b"content-type", b"").decode("latin-1")
        if ctype.split(";")[0].strip().lower() != "application/json":
            return self.reject(415, f"content type must be application/json, got {ctype or 'none'!r}")
        limit = self.settings.max_body_bytes
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return self.reject(413, f"body over {limit} bytes")
        # The bodies held at once are bounded as their bytes arrive (protocol.HeldBodies).
        chunks: list[bytes] = []
        got = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return 400, b""
            chunk = message.get("body", b"")
            got += len(chunk)
            if got > limit:
                return self.reject(413, f"body over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        del chunks
        try:
            if self._busy():
                result = await self.batched(body)
            else:
                result = answer(body, self.params())
                self._last_review = time.perf_counter()
        except BadReview as e:
            return self.reject(400, str(e))
        return 200, self.answered(result, started)

    def answered(self, result: ReviewResult, started: float) -> bytes:
        """Count, record and log a review's result; its response body."""
        elapsed = time.perf_counter() - started
        if elapsed > self.settings.ready_max_review_seconds:
            self.slow = (time.perf_counter() + self.SLOW_HOLD_SECONDS, elapsed)
        admissions = self.metrics.admissions
        admissions.count(result.outcome, result.launcher)
        admissions.observe(elapsed)
        if result.admission is not None and self.recorder is not None:
            self.recorder.record(result.admission)
        if log.isEnabledFor(logging.INFO):
            self.log_admission(result, elapsed)
        return result.body

    # The protocol's side (protocol.Direct): a review read and answered off the ASGI path.
    path = b"/mutate"

    def reserve(self, headers: list[tuple[bytes, bytes]]) -> int | None:
        """The declared length of a JSON body within the body bound; else None (the ASGI path
        answers 413 and 415, and reads a body without a length)."""
        ctype = declared = b""
        for name, value in headers:
            if name == b"content-type":
                ctype = value
            elif name == b"content-length":
                declared = value
        if not declared.isdigit() or ctype.split(b";")[0].strip().lower() != b"application/json":
            return None
        size = int(declared)
        if size > self.settings.max_body_bytes:
            return None
        return size

    def reply(self, size: int, send: Callable[[int, bytes], None]) -> DirectReply:
        return DirectReply(self, send)

    def submit(self, body: bytes, reply: DirectReply) -> None:
        if self._busy():
            self._enqueue(body, reply)
            return
        try:
            result = answer(body, self.params())
        except Exception as e:  # BadReview (400), or a bug: for this request alone
            reply.set_exception(e)
        else:
            reply.set_result(result)
        self._last_review = time.perf_counter()

    def _busy(self) -> bool:
        return bool(self._batch) or time.perf_counter() - self._last_review < self.BUSY_SECONDS

    def batched(self, body: bytes) -> asyncio.Future[ReviewResult]:
        waiter: asyncio.Future[ReviewResult] = asyncio.get_running_loop().create_future()
        self._enqueue(body, waiter)
        return waiter

    def _enqueue(self, body: bytes, waiter: Waiter) -> None:
        if not self._batch:
            asyncio.get_running_loop().call_soon(self.review_batch)
        self._batch.append((body, waiter))

    def review_batch(self) -> None:
        batch, self._batch = self._batch[: self.MAX_BATCH], self._batch[self.MAX_BATCH :]
        # All the batch's reviews first, then their answers: a direct review's answer is written
        # (TLS, send) as it is given, and between two reviews that work took their caches. At
        # most BATCH_SECONDS of reviews before the answers go out: a review that waits for its
        # batch waits for that, not for 64 of the most expensive pods (security.md's budget each).
        params = self.params()
        answers: list[tuple[Waiter, ReviewResult | Exception]] = []
        deadline = time.perf_counter() + self.BATCH_SECONDS
        for i, (body, waiter) in enumerate(batch):
            if waiter.done():  # cancelled: its client went away
                continue
            try:
                answers.append((waiter, answer(body, params)))
            except Exception as e:  # BadReview, or a bug: for that request alone; none is left waiting
                answers.append((waiter, e))
            if time.perf_counter() > deadline:
                self._batch[:0] = batch[i + 1 :]
                break
        self._last_review = time.perf_counter()
        if self._batch:  # the rest in the next turn: requests already answered get sent first
            asyncio.get_running_loop().call_soon(self.review_batch)
        for waiter, got in answers:
            if waiter.done():
                continue
            if isinstance(got, Exception):
                waiter.set_exception(got)
            else:
                waiter.set_result(got)

    def too_slow(self) -> str | None:
        """Why the server is not ready to review, if a review lately took longer than the API
        server would wait (settings.ready_max_review_seconds): the reviews it sends here would
        time out, and with failurePolicy Ignore their pods pass unplumbed."""
        until, seconds = self.slow
        if time.perf_counter() >= until:
            return None
        limit = self.settings.ready_max_review_seconds
        return f"a review took {seconds:.2f}s, over {limit:g}s (half the webhook's timeout): not ready"

    def params(self) -> Params:
        """Params for the live config, rebuilt only when the config is reloaded."""
        cfg = self.holder.config
        if self._params is None or self._params.config is not cfg:
            self._params = params_for(cfg, self.settings.default_namespace)
        return self._params

    def reject(self, status: int, reason: str) -> tuple[int, bytes]:
        self.metrics.admissions.count("bad_request", "")
        return status, orjson.dumps({"error": reason})

    def log_admission(self, result: ReviewResult, elapsed: float) -> None:
        # Same JSON shape as JsonLogFormatter, written directly: the logging machinery cost a
        # share of throughput on this path. Lines are gathered and written once per event-loop
        # turn: under load one write() carries many lines (measured against a write and flush
        # per line: BENCHMARKS.md); alone, a line goes out on the next turn.
        line = {
            "level": "info",
            "logger": log.name,
            "msg": "admission",
            "uid": result.uid,
            "namespace": result.namespace,
            "pod": result.name,
            "launcher": result.launcher,
            "outcome": result.outcome,
            "ms": round(elapsed * 1000, 3),
            "warnings": len(result.warnings),
        }
        if not self._pending_log:
            asyncio.get_running_loop().call_soon(self.flush_log)
        self._pending_log.append(orjson.dumps(line) + b"\n")

    def flush_log(self) -> None:
        lines, self._pending_log = self._pending_log, []
        if lines:
            stream = sys.stderr.buffer
            stream.write(b"".join(lines))
            stream.flush()


def create_app(
    settings: ServerSettings,
    config_holder: ConfigHolder | None = None,
    cert_expiry: Callable[[], float] | None = None,
    cert_refused: Callable[[], int] | None = None,
    on_startup: Callable[[], None] | None = None,
    recorder: Recorder | None = None,
) -> WebhookApp:
    """/mutate (AdmissionHandler) in front of a FastAPI app for the probes and /metrics.
    `on_startup` runs once the event loop does (the file watchers need it); `recorder` sends
    Events (none: no Events, as outside a cluster)."""
    holder = config_holder or ConfigHolder(settings.config, settings.poll_seconds)
    metrics = Metrics(recorder)
    admission = AdmissionHandler(settings, holder, metrics, recorder)
    # Now, not in the first admission: minifying the wrapper's files takes tens of milliseconds.
    admission.params()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            on_startup()
        yield
        # uvicorn runs this after its graceful drain: every received request was answered.
        admission.flush_log()
        logging.getLogger("hostnet_rdma.server").info("stopped: connections drained")

    app = FastAPI(title="hostnet-rdma", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.config = holder
    app.state.metrics = metrics

    @app.get("/healthz")
    async def healthz() -> Response:
        return PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> Response:
        # Ready once certs and config are loaded (both before the app is built), and while the
        # certificate served is valid: the API server refuses an expired one, and with
        # failurePolicy Ignore pods would pass unplumbed without a word.
        if cert_expiry is not None and cert_expiry() < time.time():
            expired = dt.datetime.fromtimestamp(cert_expiry(), dt.UTC).isoformat()
            return PlainTextResponse(f"serving certificate expired {expired}: not ready", status_code=503)
        slow = admission.too_slow()
        if slow is not None:
            return PlainTextResponse(slow, status_code=503)
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        if cert_expiry is not None:
            metrics.cert_expiry.set(cert_expiry())
        metrics.config_reloads.set(holder.reloads)
        if cert_refused is not None:
            metrics.cert_refused.set(cert_refused())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return WebhookApp(admission, app)


class WebhookApp:
    """The ASGI app uvicorn runs: /mutate handled directly, the rest by FastAPI."""

    def __init__(self, admission: AdmissionHandler, fastapi: FastAPI) -> None:
        self.admission = admission
        self.fastapi = fastapi
        self.state = fastapi.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mutate":
            await self.admission(scope, receive, send)
        else:
            await self.fastapi(scope, receive, send)
