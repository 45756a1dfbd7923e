"""Events on the job (app/events.py): who they are about, their reasons, and the recorder's
bounds and aggregation. The API calls themselves run against the real API server in the
apiserver tier, and `kubectl describe` of a real PyTorchJob shows them in the cluster tier."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app import events
from app.core import InjectConfig, Params, Warned, mutate, reasons
from app.webhook.review import answer
from app.webhook.server import create_app
from app.webhook.settings import ServerSettings
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
        ("mpijob/nccl-tests-worker-0", "MPIJob", "nccl-tests"),
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
    """Reasons are what users filter on: each warning is made with one (app.core.reasons), never
    read back from its text; the generic one is for a command too long to read."""
    seen: dict[str, str] = {}
    for case in CASES:
        pod = yaml.safe_load(case.read_text())
        for w in mutate(pod, PARAMS).warnings:
            assert w.reason in events.REASONS and w.reason != reasons.GENERAL, w
            seen.setdefault(w.reason, w.text)
    assert {"NodeCountUnknown", "EndpointNamesNoPod", "TorchrunNotWrapped", "ShmCappedByMemoryLimit",
            "MPIEnvNotForwarded"} <= set(seen)  # fmt: skip
    # Every reason has its note, and one admission can carry a note of each.
    assert set(events.NOTES) == set(events.REASONS) and len(events.REASONS) <= events.MAX_WARNINGS


def test_a_refusal_gets_the_reason_of_what_it_refuses() -> None:
    """The rules name what they refuse (rules.Plan.fatal_kind); the webhook's reason follows it,
    whatever the words: an is_host that cannot work was a bare 'Warning' when read by regex."""
    pod = yaml.safe_load((GOLDEN / "jobset" / "v0.10.1-workers-0-1.yaml").read_text())
    (c,) = pod["spec"]["containers"]
    c["command"] = ["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=ddp-jobset-workers-0-0.ddp-jobset:29500",
                    "--rdzv-conf=is_host=true", "train.py"]  # fmt: skip
    fatal = [w for w in mutate(pod, PARAMS).warnings if w.fatal]
    assert [w.reason for w in fatal] == [reasons.RENDEZVOUS_REFUSED], fatal
    assert fatal[0].text.endswith(fatal[0].refusal) and "is_host=true" in fatal[0].refusal


class FakeSender:
    def __init__(self, fail: bool = False, away: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.tried = 0
        self.fail, self.away = fail, away

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.tried += 1
        if self.away:
            raise events.Unavailable("timed out")
        if self.fail:
            raise RuntimeError("403 Forbidden")
        self.calls.append(("create", namespace, body))

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.tried += 1
        if self.away:
            raise events.Unavailable("timed out")
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
    assert "nccl-env (profile default: the default), wrap" in injected["note"]
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
    assert rec.flush() == 0 and rec.failed == 1 and not rec.series  # one Injected call, refused
    assert rec.calls == 0 and not rec.pending  # a refused call is not retried


def big_admission(i: int, namespace: str = "ml", note: int = 600_000, every_reason: bool = False) -> events.Admission:
    """A review a tenant wrote to hurt: ~540 KB of metadata (labels and annotations), a job uid
    of its own (JobSet labels are the user's), and a warning that quotes its own long text."""
    meta = {"name": f"p-{i}", "labels": {"jobset.sigs.k8s.io/jobset-name": "js" * 100,
                                         "jobset.sigs.k8s.io/jobset-uid": f"{i:08d}" + "u" * 500},
            "annotations": {f"a{k}": "x" * 60_000 for k in range(9)}}  # fmt: skip
    kinds = reasons.REASONS if every_reason else (reasons.GENERAL,)
    said = [Warned(kinds[k % len(kinds)], "w" * note) for k in range(40)]
    a = events.admission(meta, namespace, "jobset", "test", True, ("dns", "wrap"), "default", said)
    assert a is not None
    return a


def test_a_record_is_small_whatever_the_pod_carries() -> None:
    a = big_admission(1, every_reason=True)
    assert events.size_of(a) < 16 << 10, events.size_of(a)
    # Their reasons only, once each: the tenant's text never reaches the record.
    assert a.reasons == reasons.REASONS[: events.MAX_WARNINGS]
    assert len(a.regarding.uid) == events.UID_MAX and len(a.regarding.name) <= events.FIELD_MAX


def test_the_queue_is_bounded_in_bytes() -> None:
    rec = events.Recorder(FakeSender(), "w", capacity=4096, max_bytes=256 << 10)
    for i in range(2000):  # ~1 KB a record (their reasons, not the tenant's text): ~255 fit
        rec.record(big_admission(i, every_reason=True))
    assert rec.queued_bytes <= 256 << 10 and rec.dropped > 1700, (rec.queued_bytes, rec.dropped)
    size = events.size_of(big_admission(1999, every_reason=True))  # the newest are kept: names of four digits
    assert len(rec.queue) == (256 << 10) // size  # as many as fit, the newest


def test_unique_job_uids_cannot_defeat_the_rate_limits() -> None:
    """A flood of pods, each naming a job uid of its own: the calls a flush makes are bounded, and
    a namespace's bucket bounds them over time; what was not sent waits, bounded, and is counted."""
    clock = [0.0]
    sender = FakeSender()
    rec = events.Recorder(sender, "w", max_calls=50, namespace_burst=30, namespace_per_second=1.0,
                          max_pending=500, clock=lambda: clock[0])  # fmt: skip
    for i in range(2000):
        rec.record(big_admission(i, note=10))
    assert rec.flush() == 30  # the namespace's burst
    assert len(rec.pending) == 500 - 30 and rec.limited == 2 * 2000 - 500  # bounded; the rest counted
    clock[0] += 10
    assert rec.flush() == 10  # ten seconds, ten tokens
    clock[0] += 1000
    assert rec.flush() == 30  # never more than the burst, then max_calls
    assert len(sender.calls) == 70


def test_one_job_s_events_are_rate_limited_but_its_count_is_kept() -> None:
    """client-go's spam filter per object (burst 25, then one every 10 s here): a job whose pods
    keep coming gets its series patched within the bucket, and the count that waits is sent later."""
    clock = [0.0]
    sender = FakeSender()
    rec = events.Recorder(sender, "w", object_burst=2, object_per_second=0.1, clock=lambda: clock[0])
    for _ in range(5):
        for a in admissions("volcano/plain-c10d-worker-1", 3):
            rec.record(a)
        rec.flush()
        clock[0] += 1
    assert [c[0] for c in sender.calls] == ["create", "patch"]  # the burst of 2, then waiting
    clock[0] += 10
    rec.flush()
    counts = [c[2][0]["value"]["count"] for c in sender.calls if c[0] == "patch"]
    assert counts[-1] == 15, counts  # every pod counted once it could be sent


def test_a_black_holed_api_server_costs_one_call_per_backoff() -> None:
    clock = [0.0]
    sender = FakeSender(away=True)
    rec = events.Recorder(sender, "w", clock=lambda: clock[0])
    for i in range(100):
        rec.record(big_admission(i, note=10))
    for _ in range(600):  # ten minutes of flushes, one a second
        rec.flush()
        clock[0] += 1
    assert sender.tried <= 16, sender.tried  # 1, 2, 4 ... 60 s apart: not 100 timeouts a flush
    assert rec.backoff == 60.0 and len(rec.pending) == 200  # Injected and a warning a pod: all kept
    sender.away = False
    clock[0] = rec.resume_at
    assert rec.flush() == 50  # max_calls: the API server is back


def test_events_only_in_namespaces_the_selectors_admit() -> None:
    """A review forged for kube-system, an excluded namespace or one without the opt-in label
    records nothing there; the gate reads a namespace's labels once a minute."""
    from app import config

    looked: list[str] = []
    labels = {
        "ml": {"hostnet-rdma.io/inject": "enabled"},
        "team-b": {},
        "kube-system": {"hostnet-rdma.io/inject": "enabled"},
    }

    def labels_of(ns: str) -> dict[str, str] | None:
        looked.append(ns)
        return labels.get(ns)

    clock = [0.0]
    cfg = config.from_dict({"excludeNamespaces": ["kube-system", "hostnet-rdma-system"]})
    gate = events.NamespaceGate(lambda: cfg, labels_of, ttl=60, clock=lambda: clock[0])
    sender = FakeSender()
    rec = events.Recorder(sender, "w", gates=[gate], clock=lambda: clock[0])
    for ns in ("ml", "team-b", "kube-system", "hostnet-rdma-system", "nowhere", "ml"):
        rec.record(big_admission(hash(ns) % 1000, namespace=ns, note=10))
    rec.flush()
    assert {c[1] for c in sender.calls} == {"ml"} and rec.outside == 4
    assert sorted(looked) == ["ml", "nowhere", "team-b"]  # excluded ones are not even looked up
    rec.record(big_admission(7, namespace="team-b", note=10))
    rec.flush()
    assert looked.count("team-b") == 1  # cached
    clock[0] += 61
    labels["team-b"] = {"hostnet-rdma.io/inject": "enabled"}  # opted in since
    rec.record(big_admission(8, namespace="team-b", note=10))
    rec.flush()
    assert "team-b" in {c[1] for c in sender.calls}


def test_the_gate_unreachable_backs_off_and_keeps_the_queue() -> None:
    def away(ns: str) -> dict[str, str] | None:
        raise events.Unavailable("timed out")

    from app import config

    clock = [0.0]
    gate = events.NamespaceGate(lambda: config.from_dict({}), away, clock=lambda: clock[0])
    rec = events.Recorder(FakeSender(), "w", gates=[gate], clock=lambda: clock[0])
    for a in admissions("volcano/plain-c10d-worker-1", 3):
        rec.record(a)
    assert rec.flush() == 0 and len(rec.queue) == 3 and rec.resume_at == 1.0


def test_no_event_for_dry_runs_re_admissions_or_unowned_pods() -> None:
    pod = load("volcano/plain-c10d-worker-1")
    assert answer(body(pod), PARAMS).admission is not None
    assert answer(body(pod, dry_run=True), PARAMS).admission is None
    mutated = mutate(pod, PARAMS).pod  # reinvocation: our status annotation is on the pod
    assert answer(body(mutated), PARAMS).admission is None
    # No owner: no job to tell, nothing recorded (its creator gets the warnings itself).
    assert answer(body(load("generic/plain-pod-no-identity")), PARAMS).admission is None
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


def test_the_injected_event_says_which_profile_and_why() -> None:
    pod = load("volcano/plain-c10d-worker-1")
    (injected,) = [o for o in events.occurrences(answer(body(pod), PARAMS).admission) if o.reason == "Injected"]  # type: ignore[arg-type]
    assert "nccl-env (profile BM.GPU4.8: nodeSelector node.kubernetes.io/instance-type=BM.GPU4.8)" in injected.note


# ---------------------------------------------------------------- forged reviews (issue: no tenant can make it write)


def forged(i: int, namespace: str = "ml", uid: str = "", said: Warned | None = None) -> events.Admission:
    meta = {"name": f"p-{i}", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"job-{i}",
                                                   "uid": uid or f"uid-{i}", "controller": True}]}  # fmt: skip
    a = events.admission(
        meta, namespace, "job", "test", True, ("dns",), "default", (said or Warned(reasons.GENERAL, "x"),)
    )
    assert a is not None
    return a


def test_no_event_about_a_job_that_does_not_exist_with_that_uid() -> None:
    """A review posted to the Service for an opted-in namespace named another tenant's Job by
    name and uid: Events were created about it. Now only about an object the API server has,
    with that uid; one read per job a minute, whatever number of pods."""
    real = {("ml", "batch", "v1", "jobs", "job-1"): "uid-1", ("ml", "batch", "v1", "jobs", "job-2"): "uid-2"}
    reads: list[str] = []

    def uid_of(namespace: str, group: str, version: str, resource: str, name: str) -> str | None:
        reads.append(name)
        return real.get((namespace, group, version, resource, name))

    sender = FakeSender()
    rec = events.Recorder(sender, "w", gates=[events.ObjectGate(uid_of)])
    rec.record(forged(1))  # real, right uid
    rec.record(forged(2, uid="someone-elses"))  # real job, wrong uid
    rec.record(forged(3))  # no such job
    for _ in range(100):
        rec.record(forged(1))
    rec.flush()
    about = {c[2]["regarding"]["name"] for c in sender.calls}
    assert about == {"job-1"} and rec.outside == 2
    assert sorted(reads) == ["job-1", "job-2", "job-3"]  # one read per job


def test_no_event_about_a_kind_it_does_not_know() -> None:
    meta = {"ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u",
                                 "controller": True}]}  # fmt: skip
    a = events.admission(meta, "ml", "pod", "test", True, ("dns",), "default", ())
    assert a is not None
    gate = events.ObjectGate(lambda *_: "u")
    assert gate.known(a.regarding) is False


def test_an_event_note_carries_no_text_from_the_review() -> None:
    """The profile annotation's value was echoed into the Event ("unknown NCCL profile ..."):
    a forged review could write any text about a tenant's job. A note is our sentence for its
    reason, and the pod's name when it is a DNS name."""
    text = "unknown NCCL profile 'CALL +1-555-0100 TO CLAIM' in hostnet-rdma.io/profile; known: default"
    (_injected, warning) = events.occurrences(forged(1, said=Warned(reasons.ANNOTATION_IGNORED, text)))
    assert warning.reason == "AnnotationIgnored"
    assert "CALL" not in warning.note and "p-1" in warning.note
    assert warning.note.startswith(events.NOTES["AnnotationIgnored"])
    meta = {"name": "Not A Name!", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                        "uid": "u", "controller": True}]}  # fmt: skip
    a = events.admission(meta, "ml", "job", "test", False, (), "default", (Warned(reasons.ANNOTATION_IGNORED, text),))
    assert a is not None and a.pod == "" and "Not A Name" not in events.occurrences(a)[0].note


def test_a_job_name_that_is_no_dns_name_names_no_job() -> None:
    meta = {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "../../secrets/x", "uid": "u",
                                 "controller": True}]}  # fmt: skip
    assert events.regarding_of(meta, "ml") is None
    assert events.regarding_of({"labels": {events.record.JOBSET_NAME: "a" * 300, events.record.JOBSET_UID: "u"}},
                               "ml") is None  # fmt: skip


def test_reads_count_in_the_calls_of_a_flush() -> None:
    """4,000 forged reviews for distinct namespaces made one flush issue 4,000 namespace reads
    (the docs say at most 50 API calls a flush). The rest wait in the queue, bounded."""
    from app import config

    reads: list[str] = []

    def labels_of(ns: str) -> dict[str, str] | None:
        reads.append(ns)
        return None

    gate = events.NamespaceGate(lambda: config.from_dict({}), labels_of)
    rec = events.Recorder(FakeSender(), "w", gates=[gate], max_calls=50)
    for i in range(4000):
        rec.record(forged(i, namespace=f"ns-{i}"))
    rec.flush()
    assert len(reads) == 50 and len(rec.queue) == 3950 and rec.outside == 50
    rec.flush()
    assert len(reads) == 100


def test_the_sender_survives_any_api_error() -> None:
    """One unexpected API error (a 403 during an RBAC upgrade) ended the Events thread for the
    replica's life. Now it costs that admission; the next flush runs."""
    import threading

    calls = [0]

    def forbidden(*_: Any) -> str | None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("(403) Forbidden: jobs.batch is forbidden")
        return "uid-1"

    sender = FakeSender()
    rec = events.Recorder(sender, "w", gates=[events.ObjectGate(forbidden, ttl=0)], flush_seconds=0.01)
    rec.record(forged(1))
    rec.flush()
    assert rec.failed == 1 and not sender.calls
    # And the thread outlives an error no unit expected.
    broken = [True]
    real_flush = rec.flush

    def flaky() -> int:
        if broken[0]:
            broken[0] = False
            raise ValueError("a bug")
        return real_flush()

    rec.flush = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=rec.run, args=(stop,))
    thread.start()
    rec.record(forged(1))
    deadline = time.monotonic() + 10
    while not sender.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert sender.calls and rec.failed == 2


def test_a_job_created_again_under_its_name_gets_its_events_at_once() -> None:
    """The verdict is kept per uid: the pods of a job deleted and created again under the same
    name (a new uid) are looked up, not refused for the old job's minute."""
    real = {"job-1": "uid-1"}
    sender = FakeSender()
    rec = events.Recorder(sender, "w", gates=[events.ObjectGate(lambda *a: real.get(a[-1]))])
    rec.record(forged(1))
    rec.flush()
    real["job-1"] = "uid-new"
    rec.record(forged(1, uid="uid-new"))
    rec.flush()
    created = {c[2]["regarding"]["uid"] for c in sender.calls if c[0] == "create"}
    assert created == {"uid-1", "uid-new"} and rec.outside == 0
