"""The admission app in-process (ASGI transport, no TLS, no subprocess): the HTTP handling of
/mutate and the other endpoints, fast. The same behaviour over real TLS, in a real `serve`
process, is tests/server; through a real API server, tests/apiserver."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app import __version__, config
from app.core import Params, mutate
from app.webhook.review import ReviewResult, answer
from app.webhook.server import AdmissionHandler, create_app
from app.webhook.settings import ServerSettings
from app.wrapper import payload
from tests.patching import apply_patch

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml"))


def review(pod: dict[str, Any], uid: str = "u-1", namespace: str = "team-a") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": uid, "operation": "CREATE", "namespace": namespace,
                                   "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}}).encode()  # fmt: skip


def call(method: str, path: str, body: bytes = b"", ctype: str = "application/json",
         settings: ServerSettings | None = None) -> httpx.Response:  # fmt: skip
    app = create_app(settings or ServerSettings(config=None))

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
            return await c.request(method, path, content=body, headers={"content-type": ctype})

    return asyncio.run(go())


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_golden_pod_is_answered_with_the_cores_patch(case: Path) -> None:
    pod = yaml.safe_load(case.read_text())
    ns = pod["metadata"].get("namespace") or "default"
    r = call("POST", "/mutate", review(pod, uid=case.stem, namespace=ns))
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["uid"] == case.stem and resp["allowed"] is True
    want = mutate(pod, Params(namespace=ns, wrapper_payload=payload(), version=__version__))
    # Warnings: the core's, prefixed, whitespace folded, cut to what the API server keeps.
    got_warnings = resp.get("warnings", [])
    assert len(got_warnings) == len(want.warnings)
    for got, w in zip(got_warnings, want.warnings, strict=True):
        assert got.startswith("hostnet-rdma: ") and len(got) <= 240
        assert " ".join(w.text.split()).startswith(got.removeprefix("hostnet-rdma: ").removesuffix("..."))
    if "patch" not in resp:
        assert not want.changed
        return
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert apply_patch(pod, ops) == want.pod


@pytest.mark.parametrize(
    ("body", "ctype", "status", "reason"),
    [
        (b"", "application/json", 400, "empty body"),
        (b"{not json", "application/json", 400, "body is not JSON"),
        (b"[]", "application/json", 400, "body is not a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "application/json", 400,
         "expected apiVersion admission.k8s.io/v1"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "application/json", 400,
         "has no uid"),
        (b"{}", "text/plain", 415, "content type must be application/json"),
    ],
    ids=["empty", "not-json", "not-object", "v1beta1", "no-uid", "content-type"],
)  # fmt: skip
def test_malformed_requests_get_a_reason_and_nothing_else(body: bytes, ctype: str, status: int, reason: str) -> None:
    r = call("POST", "/mutate", body, ctype)
    assert r.status_code == status
    assert reason in r.json()["error"]


def test_body_over_the_bound_is_413() -> None:
    r = call("POST", "/mutate", b"x" * 2048, settings=ServerSettings(config=None, max_body_bytes=1024))
    assert r.status_code == 413 and "body over 1024 bytes" in r.json()["error"]


def test_get_on_mutate_is_405_and_probes_answer() -> None:
    assert call("GET", "/mutate").status_code == 405
    assert call("GET", "/healthz").text == "ok"
    assert call("GET", "/readyz").text == "ok"


def test_the_server_is_not_ready_for_a_while_after_a_review_slower_than_the_api_server_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#63: a review that took longer than half the webhook's timeout makes /readyz 503 with the
    reason, so the Service sends reviews to a replica that answers in time; ready again once
    SLOW_HOLD_SECONDS have passed without another."""
    from app.webhook import server

    app = create_app(ServerSettings(config=None, ready_max_review_seconds=0.0))
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())
    now = [1000.0]
    monkeypatch.setattr(server.time, "perf_counter", lambda: now[0])

    async def go() -> list[tuple[int, str]]:
        got = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
            got.append(((r := await c.get("/readyz")).status_code, r.text))
            now[0] += 0.5  # the review below takes half a second
            app.admission.answered(answer(review(pod), app.admission.params()), 999.5)
            got.append(((r := await c.get("/readyz")).status_code, r.text))
            now[0] += server.AdmissionHandler.SLOW_HOLD_SECONDS
            got.append(((r := await c.get("/readyz")).status_code, r.text))
        return got

    ready, slow, again = asyncio.run(go())
    assert ready == (200, "ok") and again == (200, "ok")
    assert slow == (503, "a review took 1.00s, over 0s (half the webhook's timeout): not ready")


def test_metrics_count_outcomes_by_launcher(tmp_path: Path) -> None:
    app = create_app(ServerSettings(config=None))
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())

    async def go() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
            for i in range(3):
                await c.post("/mutate", content=review(pod, uid=f"m{i}"), headers={"content-type": "application/json"})
            await c.post("/mutate", content=b"nope", headers={"content-type": "application/json"})
            return (await c.get("/metrics")).text

    text = asyncio.run(go())
    assert 'hostnet_rdma_admission_requests_total{launcher="volcano",outcome="mutated"} 3.0' in text
    assert 'hostnet_rdma_admission_requests_total{launcher="",outcome="bad_request"} 1.0' in text


def test_admission_log_lines_are_written_once_per_loop_turn_and_none_is_lost(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="hostnet_rdma.admission")  # as `serve` configures it
    app = create_app(ServerSettings(config=None))
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())

    async def go() -> None:
        # Two lines in one turn stay pending; the next turn writes both.
        result = ReviewResult(b"", "mutated", launcher="volcano", uid="batched", namespace="team-a", name="p")
        app.admission.log_admission(result, 0.001)
        app.admission.log_admission(result, 0.002)
        assert capsys.readouterr().err == ""
        await asyncio.sleep(0)
        assert capsys.readouterr().err.count('"uid":"batched"') == 2
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
            await asyncio.gather(*(c.post("/mutate", content=review(pod, uid=f"c{i}"),
                                          headers={"content-type": "application/json"}) for i in range(40)))  # fmt: skip
        await asyncio.sleep(0)

    asyncio.run(go())
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert sorted(e["uid"] for e in lines) == sorted(f"c{i}" for i in range(40))
    assert all(e["msg"] == "admission" and e["outcome"] == "mutated" for e in lines)


def test_metrics_say_how_the_core_runs() -> None:
    # Interpreted from the source tree; compiled when tests/test_compiled.py runs this file.
    path = sys.modules["app.core.mutate"].__file__ or ""
    core = "compiled" if path.endswith(".so") else "interpreted"
    text = call("GET", "/metrics").text
    assert f'hostnet_rdma_build_info{{core="{core}",version="{__version__}"}} 1.0' in text


def test_config_file_decides_the_delivery(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("wrapper: {image: registry.example/hostnet-rdma:1.0}\n")
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())
    r = call("POST", "/mutate", review(pod), settings=ServerSettings(config=cfg))
    ops = json.loads(base64.b64decode(r.json()["response"]["patch"]))
    out = apply_patch(pod, ops)
    (init,) = out["spec"]["initContainers"]
    assert init["image"] == "registry.example/hostnet-rdma:1.0"
    assert config.load(cfg).wrapper_delivery == "initContainer"


def whole_body(body: bytes) -> Any:
    """An ASGI receive() whose request body has arrived whole."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


@pytest.mark.parametrize("busy_seconds", [60.0, 0.0], ids=["busy", "idle"])
def test_reviews_of_one_loop_turn_are_answered_in_batches_each_its_own(
    monkeypatch: pytest.MonkeyPatch, busy_seconds: float
) -> None:
    app = create_app(ServerSettings(config=None))
    handler = app.admission
    # Busy: every review within BUSY_SECONDS of the last one waits for its batch. Idle: each is
    # answered at once.
    monkeypatch.setattr(handler, "BUSY_SECONDS", busy_seconds)
    monkeypatch.setattr(handler, "MAX_BATCH", 16)
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())
    sizes: list[int] = []
    real_batch = handler.review_batch

    def recording_batch() -> None:
        sizes.append(min(len(handler._batch), handler.MAX_BATCH))
        real_batch()

    monkeypatch.setattr(handler, "review_batch", recording_batch)
    # 40 requests in one turn, every fifth malformed, one whose client goes away.
    bodies = [b"not json" if i % 5 == 4 else review(pod, uid=f"b{i}") for i in range(40)]

    async def go() -> list[Any]:
        # With their length, as the API server sends them (a body without one reserves the
        # most a body may be in the bound on bodies held at once: two such at a time).
        tasks = [
            asyncio.ensure_future(
                handler.handle({b"content-type": b"application/json", b"content-length": b"%d" % len(b)}, whole_body(b))
            )
            for b in bodies
        ]
        await asyncio.sleep(0)  # every task reads its body and waits for its batch
        tasks[7].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(go())
    if busy_seconds:
        # The first found the server idle; the rest MAX_BATCH at a time, then in the next turns.
        assert sizes == [16, 16, 7]
        assert isinstance(results[7], asyncio.CancelledError)
    else:
        assert sizes == []
        assert not isinstance(results[7], BaseException)  # answered before it could be cancelled
    for i, result in enumerate(results):
        if isinstance(result, BaseException):
            continue
        status, body = result
        if i % 5 == 4:
            assert status == 400 and b"not JSON" in body
        else:
            response = json.loads(body)["response"]
            assert status == 200 and response["uid"] == f"b{i}" and response["patchType"] == "JSONPatch"


def _handler_with_a_bug(
    monkeypatch: pytest.MonkeyPatch, busy_seconds: float
) -> tuple[AdmissionHandler, dict[str, Any]]:
    """A handler whose review of a pod with uid "boom" raises (a bug), and the pod to send."""
    import app.webhook.server

    handler = create_app(ServerSettings(config=None)).admission
    monkeypatch.setattr(handler, "BUSY_SECONDS", busy_seconds)
    real = app.webhook.server.answer

    def answer(body: bytes, params: Params) -> ReviewResult:
        if b'"boom"' in body:
            raise RuntimeError("a bug")
        return real(body, params)

    monkeypatch.setattr(app.webhook.server, "answer", answer)
    return handler, yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())


def test_a_bug_in_one_review_of_a_batch_fails_that_request_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    handler, pod = _handler_with_a_bug(monkeypatch, 60.0)

    async def go() -> list[Any]:
        headers = {b"content-type": b"application/json"}
        calls = [handler.handle(headers, whole_body(review(pod, uid=u))) for u in ("a", "b", "boom", "c")]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(go())
    assert isinstance(results[2], RuntimeError)
    assert [json.loads(r[1])["response"]["uid"] for i, r in enumerate(results) if i != 2] == ["a", "b", "c"]


@pytest.mark.parametrize("busy_seconds", [60.0, 0.0], ids=["busy", "idle"])
def test_direct_reviews_are_answered_in_order_and_once(monkeypatch: pytest.MonkeyPatch, busy_seconds: float) -> None:
    """The protocol's side of a review read off the ASGI path (protocol.Direct): answered once in
    the order submitted (200, 400 for a malformed review, 500 for a bug, as uvicorn answers an
    exception), and a review whose connection went away is not answered. (Its body's bytes are
    the protocol's to count and give back: tests/test_protocol.py.)"""
    handler, pod = _handler_with_a_bug(monkeypatch, busy_seconds)
    bodies = [review(pod, uid="a"), b"not json", review(pod, uid="boom"), review(pod, uid="gone"), review(pod, uid="b")]
    sent: list[tuple[str, int, bytes]] = []

    async def go() -> None:
        replies = []
        for i, body in enumerate(bodies):
            headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", b"%d" % len(body))]
            size = handler.reserve(headers)
            assert size == len(body)
            replies.append(handler.reply(size, lambda status, out, i=i: sent.append((f"r{i}", status, out))))
        for body, reply in zip(bodies, replies, strict=True):
            handler.submit(body, reply)
        replies[3].cancel()  # its connection was lost before its answer
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(go())
    if busy_seconds:
        assert [who for who, _, _ in sent] == ["r0", "r1", "r2", "r4"]
    else:  # each answered as it was submitted, before the cancel
        assert [who for who, _, _ in sent] == ["r0", "r1", "r2", "r3", "r4"]
    by = {who: (status, out) for who, status, out in sent}
    assert by["r0"][0] == 200 and json.loads(by["r0"][1])["response"]["uid"] == "a"
    assert by["r1"][0] == 400 and b"not JSON" in by["r1"][1]
    assert by["r2"] == (500, b'{"error":"internal server error"}')
    assert by["r4"][0] == 200 and json.loads(by["r4"][1])["response"]["uid"] == "b"


def test_a_batch_stops_after_its_time_and_the_rest_are_reviewed_in_the_next_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch reviews for at most BATCH_SECONDS before its answers go out (a cheap review must
    not wait behind 64 expensive ones): with no time at all, one review a turn, all answered in order."""
    app_ = create_app(ServerSettings(config=None))
    handler = app_.admission
    monkeypatch.setattr(handler, "BUSY_SECONDS", 60.0)
    monkeypatch.setattr(handler, "BATCH_SECONDS", 0.0)
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())
    turns: list[int] = []
    real_batch = handler.review_batch

    def recording_batch() -> None:
        turns.append(len(handler._batch))
        real_batch()

    monkeypatch.setattr(handler, "review_batch", recording_batch)
    sent: list[str] = []

    async def go() -> None:
        handler._last_review = time.perf_counter()  # busy: every review waits for a batch
        for uid in ("a", "b", "c", "d"):
            body = review(pod, uid=uid)
            size = handler.reserve([(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))])
            assert size is not None
            reply = handler.reply(size, lambda status, out: sent.append(json.loads(out)["response"]["uid"]))
            handler.submit(body, reply)
        for _ in range(6):
            await asyncio.sleep(0)

    asyncio.run(go())
    assert turns == [4, 3, 2, 1]
    assert sent == ["a", "b", "c", "d"]


def test_a_direct_review_whose_accounting_breaks_is_still_answered_and_so_are_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting or logging a review (answered()) breaking must not leave that review, or the
    others of its batch, unanswered."""
    handler, pod = _handler_with_a_bug(monkeypatch, 60.0)
    real = handler.answered
    calls: list[str] = []

    def answered(result: ReviewResult, started: float) -> bytes:
        calls.append(result.uid)
        if result.uid == "b":
            raise RuntimeError("a bug in the metrics")
        return real(result, started)

    monkeypatch.setattr(handler, "answered", answered)
    sent: list[tuple[int, str]] = []

    async def go() -> None:
        for uid in ("a", "b", "c"):
            body = review(pod, uid=uid)
            size = handler.reserve([(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))])
            assert size is not None
            reply = handler.reply(size, lambda status, out: sent.append((status, json.loads(out)["response"]["uid"])))
            handler.submit(body, reply)
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(go())
    assert calls == ["a", "b", "c"]
    assert sent == [(200, "a"), (200, "b"), (200, "c")]


def test_direct_path_leaves_to_the_asgi_path_what_it_must_answer() -> None:
    """reserve() takes a JSON body of a declared length within the body bound: the rest (415,
    413, no length) is the ASGI path's. Nothing is held from a declared length (#63: the bodies
    held are counted as their bytes arrive, protocol.HeldBodies)."""
    app_ = create_app(ServerSettings(config=None, max_body_bytes=1000, max_held_body_bytes=1500))
    handler = app_.admission

    def headers(ctype: bytes = b"application/json", length: bytes | None = b"600") -> list[tuple[bytes, bytes]]:
        return [(b"content-type", ctype)] + ([(b"content-length", length)] if length is not None else [])

    assert handler.reserve(headers(ctype=b"text/plain")) is None
    assert handler.reserve(headers(length=b"1001")) is None
    assert handler.reserve(headers(length=None)) is None
    assert handler.reserve(headers(length=b"-1")) is None
    assert [handler.reserve(headers()) for _ in range(3)] == [600] * 3  # 1,800 declared: none held


def test_each_namespace_gets_its_own_params_and_a_new_config_drops_the_old_ones() -> None:
    """review._in_namespace keeps one Params per request namespace for the live Params: the
    namespace must be the request's, and a config reload (a new Params) must not see stale ones."""
    from app.webhook import review

    live = Params(config=config.from_dict({}), namespace="default", wrapper_payload="p", version="v")
    a, b = review._in_namespace(live, "team-a"), review._in_namespace(live, "team-b")
    assert (a.namespace, b.namespace) == ("team-a", "team-b") and a.config is live.config
    assert review._in_namespace(live, "team-a") is a  # made once
    reloaded = Params(
        config=config.from_dict({"inject": {"shm": False}}), namespace="default", wrapper_payload="p", version="v"
    )
    again = review._in_namespace(reloaded, "team-a")
    assert again is not a and again.config is reloaded.config and again.namespace == "team-a"


def test_the_admission_metrics_read_as_prometheus_clients_counter_and_histogram_would() -> None:
    """server.Admissions counts without prometheus_client's locks; what a scrape reads is the same
    as its Counter and Histogram of these names and buckets (less their _created samples),
    observations on a bucket's bound and past the last included."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from app.webhook.server import Admissions

    theirs = CollectorRegistry()
    counter = Counter("hostnet_rdma_admission_requests", "Admission reviews handled", ["outcome", "launcher"],
                      registry=theirs)  # fmt: skip
    histogram = Histogram("hostnet_rdma_admission_duration_seconds", "Time to answer one admission review",
                          buckets=Admissions.BUCKETS, registry=theirs)  # fmt: skip
    ours, admissions = CollectorRegistry(), Admissions()
    ours.register(admissions)
    for seconds in (0.0, 0.0004, *Admissions.BUCKETS, 0.0011, 0.3, 1.0000001, 7.0):
        histogram.observe(seconds)
        admissions.observe(seconds)
    for key in [("mutated", "volcano")] * 3 + [("bad_request", ""), ("unchanged", "jobset")]:
        counter.labels(*key).inc()
        admissions.count(*key)
    expected = [line for line in generate_latest(theirs).decode().splitlines() if "_created" not in line]
    assert generate_latest(ours).decode().splitlines() == expected
