"""Events on the job (app/events.py): who they are about, their reasons, and the recorder's
bounds and aggregation. The API calls themselves run against the real API server in the
apiserver tier, and `kubectl describe` of a real PyTorchJob shows them in the cluster tier."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app import events
from app.core import InjectConfig, Params, mutate
from app.review import answer
from app.server import create_app
from app.settings import ServerSettings
from app.wrapper import payload

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml"))
PARAMS = Params(InjectConfig(), "ml", payload(), "test")


def load(case: str) -> dict[str, Any]:
    return dict(yaml.safe_load((GOLDEN / f"{case}.yaml").read_text()))


def body(pod: dict[str, Any], dry_run: bool = False, uid: str = "u-1") -> bytes:
    request = {"uid": uid, "operation": "CREATE", "namespace": "ml", "dryRun": dry_run,
               "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}  # fmt: skip
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


@pytest.mark.parametrize(
    ("case", "kind", "name"),
    [
        ("jobset/v0.10.1-workers-0-1", "JobSet", "ddp-jobset"),  # not its Job: the JobSet the user made
        ("pytorchjob/operator-v1.8.1-worker-0", "PyTorchJob", None),
        ("volcano/plain-c10d-worker-1", "Job", "ddp-vc"),
        ("generic/indexed-job", "Job", None),
        ("generic/statefulset", "StatefulSet", None),
    ],
)
def test_an_event_is_about_the_job_the_user_created(case: str, kind: str, name: str | None) -> None:
    pod = load(case)
    about = events.regarding(pod, "ml")
    assert about is not None and about.kind == kind and about.uid and about.namespace == "ml"
    if name:
        assert about.name == name


def test_a_pod_no_job_owns_gets_no_event() -> None:
    assert events.regarding(load("generic/plain-pod-no-identity"), "ml") is None


def test_every_warning_of_the_goldens_has_a_reason_of_its_own() -> None:
    """Reasons are what users filter on; the generic fallback is for warnings added later."""
    seen: dict[str, str] = {}
    for case in CASES:
        pod = yaml.safe_load(case.read_text())
        for w in mutate(pod, PARAMS).warnings:
            reason = events.reason_of(w)
            assert reason != events.FALLBACK_REASON, w
            seen.setdefault(reason, w)
    assert {"NodeCountUnknown", "EndpointNamesNoPod", "TorchrunNotWrapped", "ShmCappedByMemoryLimit"} <= set(seen)


class FakeSender:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail = fail

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        if self.fail:
            raise RuntimeError("API server away")
        self.calls.append(("create", namespace, body))

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.calls.append(("patch", f"{namespace}/{name}", ops))


NOW = dt.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)


def admissions(case: str, n: int) -> list[events.Admission]:
    out = []
    for i in range(n):
        result = answer(body(load(case), uid=f"u-{i}"), PARAMS)
        assert result.admission is not None
        out.append(result.admission)
    return out


def test_a_thousand_pods_of_one_job_make_a_handful_of_calls() -> None:
    sender = FakeSender()
    rec = events.Recorder(sender, "webhook-0", now=lambda: NOW)
    for a in admissions("jobset/no-node-count", 1000):
        rec.record(a)
    assert rec.flush() == 2  # Injected + NodeCountUnknown, each created once with its count
    (c1, ns1, injected), (c2, _, warning) = sender.calls
    assert (c1, c2, ns1) == ("create", "create", "ml")
    assert injected["reason"] == "Injected" and injected["type"] == "Normal"
    assert injected["series"] == {"count": 1000, "lastObservedTime": "2026-12-01T10:00:00.123456Z"}
    assert injected["note"].startswith("hostnet-rdma test, launcher jobset: dns, infiniband, shm")
    assert "nccl-env (profile default), wrap" in injected["note"]
    assert injected["regarding"] == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                                     "uid": "5e5e5e5e-dddd-4a8e-9c1f-2d3e4f5a6b7c", "namespace": "ml"}  # fmt: skip
    assert injected["reportingController"] == "hostnet-rdma.io/webhook" and injected["reportingInstance"] == "webhook-0"
    assert injected["action"] == "Mutate" and injected["eventTime"] == "2026-12-01T10:00:00.123456Z"
    assert warning["reason"] == "NodeCountUnknown" and warning["type"] == "Warning"
    assert "--nnodes not given" in warning["note"] and len(warning["note"]) <= events.NOTE_MAX
    # More pods later: the same Events' counts go up, one patch each.
    for a in admissions("jobset/no-node-count", 5):
        rec.record(a)
    assert rec.flush() == 2
    (p1, where, ops), _ = sender.calls[2:]
    assert p1 == "patch" and where == f"ml/{injected['metadata']['name']}"
    assert ops == [
        {"op": "add", "path": "/series", "value": {"count": 1005, "lastObservedTime": "2026-12-01T10:00:00.123456Z"}}
    ]
    assert rec.flush() == 0  # nothing new, nothing sent
    # A lone pod's Event has no series (count 1).
    rec.record(admissions("volcano/plain-c10d-worker-1", 1)[0])
    rec.flush()
    assert "series" not in sender.calls[-1][2] and sender.calls[-1][2]["regarding"]["kind"] == "Job"


def test_the_queue_is_bounded_and_a_failing_api_is_only_counted() -> None:
    sender = FakeSender(fail=True)
    rec = events.Recorder(sender, "w", capacity=10)
    for a in admissions("volcano/plain-c10d-worker-1", 15):
        rec.record(a)
    assert rec.dropped == 5 and len(rec.queue) == 10
    assert rec.flush() == 0 and rec.failed == 1 and not rec.series  # one Injected call, failed
    assert rec.calls == 0


def test_no_event_for_dry_runs_re_admissions_or_unowned_pods() -> None:
    pod = load("volcano/plain-c10d-worker-1")
    assert answer(body(pod), PARAMS).admission is not None
    assert answer(body(pod, dry_run=True), PARAMS).admission is None
    mutated = mutate(pod, PARAMS).pod  # reinvocation: our status annotation is on the pod
    assert answer(body(mutated), PARAMS).admission is None
    # No owner: the review hands it on (a tuple), the recorder's thread finds no job to tell.
    unowned = answer(body(load("generic/plain-pod-no-identity")), PARAMS).admission
    assert unowned is not None and events.occurrences(unowned) == []
    not_hostnet = load("generic/not-hostnetwork")
    assert answer(body(not_hostnet), PARAMS).admission is None


def test_the_server_records_after_answering() -> None:
    """The handler hands the admission to the recorder (an append); nothing is sent inline."""
    sender = FakeSender()
    rec = events.Recorder(sender, "w")
    app = create_app(ServerSettings(config=None), recorder=rec)
    pod = load("volcano/plain-c10d-worker-1")

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
            return [await c.post("/mutate", content=body(pod, dry_run=d, uid=f"u{d}"),
                                 headers={"content-type": "application/json"}) for d in (False, True)]  # fmt: skip

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [200, 200]
    assert len(rec.queue) == 1 and sender.calls == []  # the dry run recorded nothing
    rec.flush()
    assert [c[0] for c in sender.calls] == ["create"]
    metrics = asyncio.run(_get(app, "/metrics")).text
    assert "hostnet_rdma_event_api_calls 1.0" in metrics and "hostnet_rdma_events_dropped 0.0" in metrics


async def _get(app: Any, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        return await c.get(path)
