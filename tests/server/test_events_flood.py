"""Events cannot make the webhook an amplifier or an OOM target (issue: hardening).

A real `hostnet-rdma serve` process, its Events sent to a stand-in API server on loopback that
first black-holes every request (accepts, never answers), then answers. A tenant floods the
webhook with large reviews (~540 KB of metadata each, a job uid of its own per pod, as JobSet
labels allow): the server's memory stays bounded and admissions keep their latency. Reviews
forged for namespaces the webhook's selectors do not admit record nothing there; the ones for an
opted-in namespace are sent within the rate limits once the API server answers.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import Server, start_server
from tests.server.test_server import post, review

pytestmark = pytest.mark.server

LABELLED = {
    "ml": {"hostnet-rdma.io/inject": "enabled"},
    "team-b": {},
    "kube-system": {"hostnet-rdma.io/inject": "enabled"},
}
FLOOD = 400  # reviews of ~540 KB: ~216 MB in all; before the bounds, 100 of them held 131 MB
RSS_BOUND_MIB = 64  # what the server may grow by while flooded (its recorder holds < 5 MiB)


class StandIn(ThreadingHTTPServer):
    """The API server, as far as Events need it: namespaces and one JobSet (GET), events (POST,
    PATCH). While
    `black_hole` is set, a request is accepted and never answered."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.black_hole = threading.Event()
        self.black_hole.set()
        self.opened = threading.Event()
        self.held = 0
        self.events: list[tuple[str, str, dict[str, Any]]] = []  # (verb, namespace, body)
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hold(self) -> bool:
        if self.server.black_hole.is_set():
            with self.server.lock:
                self.server.held += 1
            self.server.opened.wait(120)  # the client gives up first (its 5 s timeout)
            return True
        return False

    def do_GET(self) -> None:
        if self._hold():
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)", self.path.split("?")[0])
        job = re.fullmatch(r"/apis/jobset.x-k8s.io/v1alpha2/namespaces/([^/]+)/jobsets/js", self.path.split("?")[0])
        if job:  # the one JobSet there is: the flood's other uids name no real object
            self._answer(200, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                               "metadata": {"name": "js", "namespace": job.group(1), "uid": "uid-000000"}})  # fmt: skip
        elif m and m.group(1) in LABELLED:
            self._answer(200, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": m.group(1), "labels": LABELLED[m.group(1)]}})  # fmt: skip
        else:
            self._answer(
                404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            )

    def _event(self, verb: str) -> None:
        if self._hold():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        ns = self.path.split("/namespaces/")[1].split("/")[0]
        with self.server.lock:
            self.server.events.append((verb, ns, body))
        self._answer(201 if verb == "create" else 200, body if isinstance(body, dict) else {})

    def do_POST(self) -> None:
        self._event("create")

    def do_PATCH(self) -> None:
        self._event("patch")


@pytest.fixture
def flooded(tmp_path: Path) -> Iterator[tuple[Server, StandIn]]:
    api = StandIn()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    server = start_server(
        tmp_path, poll_seconds=None, config_text="excludeNamespaces: [kube-system, hostnet-rdma-system]\n",
        env={"HOSTNET_RDMA_EVENTS_MAX_BACKOFF_SECONDS": "4"}, args=("--kubeconfig", str(kubeconfig)),
    )  # fmt: skip
    try:
        yield server, api
    finally:
        api.opened.set()
        server.proc.terminate()
        server.proc.wait(timeout=30)
        api.shutdown()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def training_pod(namespace: str, i: int, big: bool) -> dict[str, Any]:
    """A JobSet pod (as its controller makes it) whose job uid is its own; `big`: ~540 KB of
    labels and annotations, as a tenant can write into a pod template."""
    meta: dict[str, Any] = {
        "generateName": f"js-{i}-", "namespace": namespace,
        "labels": {"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/jobset-uid": f"uid-{i:06d}",
                   "jobset.sigs.k8s.io/replicatedjob-name": "w", "jobset.sigs.k8s.io/job-index": "0"},
        "annotations": {"jobset.sigs.k8s.io/jobset-name": "js"},
    }  # fmt: skip
    if big:
        meta["annotations"].update({f"tenant.example/blob-{k}": "x" * 60_000 for k in range(9)})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"hostname": f"js-w-0-{i}", "subdomain": "js", "hostNetwork": True,
                     "containers": [{"name": "trainer", "image": "pytorch", "command": ["torchrun", "t.py"]}]}}  # fmt: skip


def latencies(server: Server, n: int, stop: threading.Event | None = None) -> list[float]:
    out: list[float] = []
    with server.client() as c:
        i = 0
        while (stop is None and i < n) or (stop is not None and not stop.is_set()):
            t0 = time.perf_counter()
            r = post(c, review(training_pod("ml", 900_000 + i, big=False), uid=f"lat-{i}"))
            out.append(time.perf_counter() - t0)
            assert r.status_code == 200 and r.json()["response"]["allowed"]
            i += 1
    return out


def p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def test_a_flood_of_large_unique_reviews_with_the_api_server_black_holed(flooded: tuple[Server, StandIn]) -> None:
    server, api = flooded
    latencies(server, 50)  # warm
    rss0 = rss_mib(server.proc.pid)
    before = latencies(server, 200)
    stop = threading.Event()
    during: list[float] = []
    probe = threading.Thread(target=lambda: during.extend(latencies(server, 0, stop)))
    probe.start()
    peak = rss0
    t0 = time.monotonic()
    with server.client() as c:
        for i in range(FLOOD):
            namespace = ("ml", "team-b", "kube-system")[i % 3]
            body = json.dumps(review(training_pod(namespace, i, big=True), uid=f"flood-{i}")).encode()
            assert len(body) > 500_000
            r = post(c, body)
            assert r.status_code == 200
            if i % 20 == 0:
                peak = max(peak, rss_mib(server.proc.pid))
    flood_seconds = time.monotonic() - t0
    stop.set()
    probe.join()
    peak = max(peak, rss_mib(server.proc.pid))
    metrics = httpx.get(f"{server.url}/metrics", verify=server.trust()).text
    print(f"\nflood: {FLOOD} reviews of ~540 KB in {flood_seconds:.1f}s; RSS {rss0:.1f} MiB before, peak {peak:.1f} MiB "
          f"(+{peak - rss0:.1f}); admission latency p50/p99 {p(before, .5):.2f}/{p(before, .99):.2f} ms before, "
          f"{p(during, .5):.2f}/{p(during, .99):.2f} ms during ({len(during)} reviews); API requests held by the "
          f"black hole: {api.held}")  # fmt: skip
    assert peak - rss0 < RSS_BOUND_MIB, (rss0, peak)
    # The same latency while flooded, give or take the machine (the flood's own parsing shares the core).
    assert statistics.median(during) < max(5 * statistics.median(before), 0.05), (p(before, 0.5), p(during, 0.5))
    # One request at a time reaches the black hole, then a back-off: not one timeout per Event.
    assert api.held <= 2 + int(flood_seconds), api.held
    assert api.events == []
    # The API server answers again: only the opted-in namespace gets Events, within the rate limits.
    api.black_hole.clear()
    api.opened.set()
    deadline = time.monotonic() + 30
    while not any(ns == "ml" for _, ns, _ in api.events):
        assert time.monotonic() < deadline, server.log.read_text()[-3000:]
        time.sleep(0.5)
    time.sleep(3)
    namespaces = {ns for _, ns, _ in api.events}
    assert namespaces == {"ml"}, namespaces  # nothing for kube-system (excluded) or team-b (not labelled)
    assert len(api.events) <= 50 + 10, len(api.events)  # the namespace's burst, then one a second
    metrics = httpx.get(f"{server.url}/metrics", verify=server.trust()).text
    outside = float(re.search(r"^hostnet_rdma_events_outside_selectors (\S+)", metrics, re.M).group(1))  # type: ignore[union-attr]
    print(f"events recorded: {len(api.events)}, all in ml; admissions outside the selectors: {outside:.0f}")
    assert outside > 0
