"""Events (events.k8s.io/v1) for what the webhook decided, on the job the user created.

Training pods are created by controllers, so the API server hands our admission warnings to the
controller, not to the person who submitted the job; `kubectl describe <job>` shows Events. One
Event per job and reason: `Injected` (what was added, for which launcher) and one per kind of
warning, with a stable reason (REASONS). A 1,000-pod job makes a handful: the first occurrence
creates the Event, later ones raise its series count, as client-go's recorder does.

Off the admission path: record() only appends to a bounded deque (no I/O, no lock on the event
loop); a sender thread aggregates what arrived and talks to the API server. Never for dry-run
reviews (the webhook declares sideEffects: NoneOnDryRun), nor for a pod we already mutated
(reinvocation would count every pod twice). This module does no I/O itself: the sender
(app.kube.EventSender) is given.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

log = logging.getLogger("hostnet_rdma.events")

REPORTING_CONTROLLER = "hostnet-rdma.io/webhook"
ACTION = "Mutate"
NOTE_MAX = 1024  # the API server rejects longer notes

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"

# Warning text -> reason, first match wins. Reasons are a contract (users filter on them:
# `kubectl get events --field-selector reason=NodeCountUnknown`); the README lists them.
REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), reason)
    for pattern, reason in (
        (r"--nnodes not given", "NodeCountUnknown"),
        (r"is loopback, but the job runs on several nodes", "LoopbackEndpoint"),
        (r"names no pod|does not resolve on this node", "EndpointNamesNoPod"),
        (r"no command \(its image entrypoint|torchrun is not wrapped|no stable DNS name", "TorchrunNotWrapped"),
        (r"/dev/shm will be capped", "ShmCappedByMemoryLimit"),
        (r"privileged: false kept|not made privileged|capability not added", "PrivilegeKept"),
        (r"envFrom values are invisible", "EnvFromOverridden"),
        (r"dnsPolicy Default kept", "DnsPolicyKept"),
        (r"^pod left unchanged", "PodLeftUnchanged"),
        (r"annotation|unknown NCCL profile|names unknown|is not a port", "AnnotationIgnored"),
    )
)
FALLBACK_REASON = "Warning"


def reason_of(warning: str) -> str:
    for pattern, reason in REASONS:
        if pattern.search(warning):
            return reason
    return FALLBACK_REASON


@dataclass(frozen=True)
class Regarding:
    """The object an Event is about: what `kubectl describe` matches (kind, name, uid)."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    def ref(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "namespace": self.namespace}  # fmt: skip


def regarding(pod: dict[str, Any], namespace: str) -> Regarding | None:
    """The job the user created, as far as the pod shows it: a JobSet's pods name it in their
    labels (their owner is one of its Jobs); otherwise the pod's controller. None for a pod
    with no owner: its creator gets the admission warnings directly."""
    meta = pod.get("metadata")
    return regarding_of(meta if isinstance(meta, dict) else {}, namespace)


def regarding_of(meta: dict[str, Any], namespace: str) -> Regarding | None:
    """regarding() from the pod's metadata."""
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    if labels.get(JOBSET_NAME) and labels.get(JOBSET_UID):
        return Regarding("jobset.x-k8s.io/v1alpha2", "JobSet", str(labels[JOBSET_NAME]), str(labels[JOBSET_UID]),
                         namespace)  # fmt: skip
    refs = meta.get("ownerReferences")
    refs = [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None or not all(
        isinstance(ref.get(k), str) and ref.get(k) for k in ("apiVersion", "kind", "name", "uid")
    ):
        return None
    return Regarding(str(ref["apiVersion"]), str(ref["kind"]), str(ref["name"]), str(ref["uid"]), namespace)


class Admission(NamedTuple):
    """What one admission tells the recorder, as the review had it: built on the event loop for
    the cost of a tuple; the sender thread works out the rest (whose job, which reasons)."""

    metadata: dict[str, Any]  # the pod's, as the API server sent it (the review never changes it)
    namespace: str
    launcher: str
    version: str
    mutated: bool
    applied: Sequence[str]
    profile: str
    warnings: Sequence[str]


@dataclass(frozen=True)
class Occurrence:
    regarding: Regarding
    reason: str
    type: str  # Normal | Warning
    note: str


def occurrences(a: Admission) -> list[Occurrence]:
    about = regarding_of(a.metadata, a.namespace)
    if about is None:
        return []
    out: list[Occurrence] = []
    if a.mutated:
        steps = ", ".join(f"{s} (profile {a.profile})" if s == "nccl-env" else s for s in a.applied)
        out.append(Occurrence(about, "Injected", "Normal",
                              f"hostnet-rdma {a.version}, launcher {a.launcher}: {steps or 'no step'}"))  # fmt: skip
    seen: set[str] = set()
    for w in a.warnings:
        reason = reason_of(w)
        if reason not in seen:  # one per kind a pod; the note is the first such warning
            seen.add(reason)
            out.append(Occurrence(about, reason, "Warning", w))
    return out


class Sender(Protocol):
    """The API calls: create an Event; patch one (a JSON Patch)."""

    def create(self, namespace: str, body: dict[str, Any]) -> None: ...

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...


def _micro_time(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Series:
    name: str
    count: int
    sent: int  # the count the API server has


class Recorder:
    """Bounded, aggregating, asynchronous: see the module docstring."""

    def __init__(
        self,
        sender: Sender,
        instance: str,
        capacity: int = 4096,
        flush_seconds: float = 1.0,
        max_series: int = 4096,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.sender = sender
        self.instance = instance[:128]
        self.flush_seconds = flush_seconds
        self.now = now
        self.queue: collections.deque[Admission] = collections.deque(maxlen=capacity)
        self.dropped = 0  # admissions lost to a full queue (the API server was slow or away)
        self.failed = 0  # API calls that failed
        self.calls = 0  # API calls made
        # (regarding uid, reason) -> the Event made for it, oldest first, bounded.
        self.series: collections.OrderedDict[tuple[str, str], _Series] = collections.OrderedDict()
        self.max_series = max_series
        self._last_error_log = 0.0

    def record(self, admission: Admission) -> None:
        """From the event loop: O(1), never blocks. A full queue drops the oldest."""
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1
        self.queue.append(admission)

    def _drain(self) -> list[Admission]:
        out: list[Admission] = []
        while True:
            try:
                out.append(self.queue.popleft())
            except IndexError:
                return out

    def flush(self) -> int:
        """Send what arrived since the last flush, aggregated: one call per (job, reason).
        Returns the number of API calls made."""
        counts: dict[tuple[str, str], tuple[Occurrence, int]] = {}
        for admission in self._drain():
            for o in occurrences(admission):
                key = (o.regarding.uid, o.reason)
                first, n = counts.get(key, (o, 0))
                counts[key] = (first, n + 1)
        calls = 0
        now = self.now()
        for key, (o, n) in counts.items():
            series = self.series.get(key)
            try:
                if series is None:
                    self._create(key, o, n, now)
                else:
                    series.count += n
                    ops = [{"op": "add", "path": "/series",
                            "value": {"count": series.count, "lastObservedTime": _micro_time(now)}}]  # fmt: skip
                    self.sender.patch(o.regarding.namespace, series.name, ops)
                    series.sent = series.count
                    self.series.move_to_end(key)
                calls += 1
                self.calls += 1
            except Exception as e:  # an Event is never worth more than a log line
                self.failed += 1
                if series is not None:
                    self.series.pop(key, None)  # deleted or expired: start a new one next time
                self._log_error(o, e)
        return calls

    def _create(self, key: tuple[str, str], o: Occurrence, n: int, now: dt.datetime) -> None:
        name = f"{o.regarding.name[:200]}.{uuid.uuid4().hex[:16]}"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": o.regarding.namespace},
            "eventTime": _micro_time(now),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": ACTION,
            "reason": o.reason,
            "type": o.type,
            "note": o.note[:NOTE_MAX],
            "regarding": o.regarding.ref(),
        }
        if n > 1:
            body["series"] = {"count": n, "lastObservedTime": _micro_time(now)}
        self.sender.create(o.regarding.namespace, body)
        self.series[key] = _Series(name, n, n)
        while len(self.series) > self.max_series:
            self.series.popitem(last=False)

    def _log_error(self, o: Occurrence, e: Exception) -> None:
        if time.monotonic() - self._last_error_log > 60:
            self._last_error_log = time.monotonic()
            log.warning("cannot record event %s on %s %s/%s: %s (further failures for a minute are not logged)",
                        o.reason, o.regarding.kind, o.regarding.namespace, o.regarding.name, e)  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        """The sender thread: flush every flush_seconds until stopped, then once more."""
        while not stop.wait(self.flush_seconds):
            self.flush()
        self.flush()
