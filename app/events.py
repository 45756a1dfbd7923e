"""Events (events.k8s.io/v1) for what the webhook decided, on the job the user created.

Training pods are created by controllers, so the API server hands our admission warnings to the
controller, not to the person who submitted the job; `kubectl describe <job>` shows Events. One
Event per job and reason: `Injected` (what was added, for which launcher) and one per kind of
warning, with a stable reason (REASONS). A 1,000-pod job makes a handful: the first occurrence
creates the Event, later ones raise its series count, as client-go's recorder does.

Off the admission path: the review makes a small record of bounded size (admission(): who the
job is, the reasons' notes cut to what an Event holds; never the pod's metadata), record()
appends it to a queue bounded in records and bytes; a sender thread aggregates what arrived and
talks to the API server. Never for dry-run reviews (the webhook declares sideEffects:
NoneOnDryRun), nor for a pod we already mutated (reinvocation would count every pod twice).

A tenant controls what the reviews say (the pod's metadata, the job uid in JobSet labels), and
anyone who reaches /mutate can send reviews, so the sender is built not to be an amplifier:
Events only in namespaces the webhook's own selectors admit (NamespaceGate), token buckets per
namespace and per job (client-go's spam filter), at most `max_calls` API calls a flush, and
after the API server fails to answer, a back-off (1 s doubling to 60 s) instead of a timeout per
call. This module does no I/O itself: the sender and the namespace lookup (app.kube) are given.
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
# Bounds on what one admission hands the recorder (the review builds it): a tenant controls the
# pod's metadata and the text of some warnings, so nothing of unbounded size is kept.
MAX_WARNINGS = 12  # more than there are reasons: one note per reason is all an Event shows
FIELD_MAX = 253  # names, kinds, API versions (DNS subdomain length)
UID_MAX = 128

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"

# Warning text -> reason, first match wins. Reasons are a contract (users filter on them:
# `kubectl get events --field-selector reason=NodeCountUnknown`); docs/configuration.md lists them.
REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), reason)
    for pattern, reason in (
        (r"the command sets (--local-addr|is_host)|--local-addr .* replaced", "LeftoverFlag"),
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
        return Regarding("jobset.x-k8s.io/v1alpha2", "JobSet", str(labels[JOBSET_NAME])[:FIELD_MAX],
                         str(labels[JOBSET_UID])[:UID_MAX], namespace[:FIELD_MAX])  # fmt: skip
    refs = meta.get("ownerReferences")
    refs = [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None or not all(
        isinstance(ref.get(k), str) and ref.get(k) for k in ("apiVersion", "kind", "name", "uid")
    ):
        return None
    return Regarding(str(ref["apiVersion"])[:FIELD_MAX], str(ref["kind"])[:FIELD_MAX], str(ref["name"])[:FIELD_MAX],
                     str(ref["uid"])[:UID_MAX], namespace[:FIELD_MAX])  # fmt: skip


class Admission(NamedTuple):
    """What one admission tells the recorder: a small record of bounded size (never the pod's
    metadata), made on the event loop by admission()."""

    regarding: Regarding
    launcher: str
    version: str
    mutated: bool
    applied: tuple[str, ...]
    profile: str
    warnings: tuple[str, ...]


def admission(
    metadata: dict[str, Any],
    namespace: str,
    launcher: str,
    version: str,
    mutated: bool,
    applied: Sequence[str],
    profile: str,
    warnings: Sequence[str],
) -> Admission | None:
    """The record of one admission, None when no job owns the pod (its creator gets the
    admission warnings directly: nothing to record)."""
    about = regarding_of(metadata, namespace)
    if about is None:
        return None
    return Admission(about, launcher[:64], version[:64], mutated, tuple(a[:64] for a in applied[:16]),
                     profile[:FIELD_MAX], tuple(w[:NOTE_MAX] for w in warnings[:MAX_WARNINGS]))  # fmt: skip


def size_of(a: Admission) -> int:
    """What a record holds, in bytes as far as it matters (its strings), plus its objects."""
    r = a.regarding
    strings = (r.api_version, r.kind, r.name, r.uid, r.namespace, a.launcher, a.version, a.profile, *a.applied,
               *a.warnings)  # fmt: skip
    return 400 + sum(len(x) for x in strings)


@dataclass(frozen=True)
class Occurrence:
    regarding: Regarding
    reason: str
    type: str  # Normal | Warning
    note: str


def occurrences(a: Admission) -> list[Occurrence]:
    about = a.regarding
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


class Unavailable(Exception):
    """The API server did not answer (timeout, refused connection, 5xx, 429): the sender backs
    off instead of trying the next call (a black-holed API server costs one timeout a period)."""


class Sender(Protocol):
    """The API calls: create an Event; patch one (a JSON Patch). Raise Unavailable when the API
    server did not answer; any other exception is about that one call."""

    def create(self, namespace: str, body: dict[str, Any]) -> None: ...

    def patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...


def _micro_time(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Series:
    name: str
    count: int
    sent: int  # the count the API server has


class TokenBuckets:
    """One token bucket per key (client-go's spam filter: a burst, then one token per period),
    bounded in keys (the least recently used bucket is forgotten: at worst it starts full)."""

    def __init__(self, burst: int, per_second: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.burst, self.rate, self.max_keys, self.clock = float(burst), per_second, max_keys, clock
        self.buckets: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()

    def take(self, key: str) -> bool:
        now = self.clock()
        tokens, last = self.buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        allowed = tokens >= 1.0
        self.buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self.buckets) > self.max_keys:
            self.buckets.popitem(last=False)
        return allowed


class NamespaceGate:
    """Whether Events may be recorded in a namespace: only those the webhook's own selectors
    admit (a review for any other namespace was not sent by the API server: it is forged, and
    the webhook must not act there). `labels_of` reads a namespace's labels from the API
    (None when it does not exist; raises Unavailable); answers are kept for `ttl` seconds."""

    def __init__(
        self,
        config_of: Callable[[], Any],
        labels_of: Callable[[str], dict[str, str] | None],
        ttl: float = 60.0,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config_of, self.labels_of, self.ttl, self.max_keys, self.clock = config_of, labels_of, ttl, max_keys, clock
        self.known: collections.OrderedDict[str, tuple[dict[str, str] | None, float]] = collections.OrderedDict()

    def admits(self, namespace: str) -> bool:
        from app.core import selection  # pure; here, not at import: the recorder's callers need not load the core

        selectors = selection.from_config(self.config_of())
        if not namespace or namespace in selection.excluded(selectors):
            return False
        now = self.clock()
        found = self.known.get(namespace)
        if found is None or now - found[1] > self.ttl:
            found = (self.labels_of(namespace), now)
            self.known[namespace] = found
            self.known.move_to_end(namespace)
            while len(self.known) > self.max_keys:
                self.known.popitem(last=False)
        labels = found[0]
        return labels is not None and selection.matches(
            selectors.namespace, {**labels, selection.NAME_LABEL: namespace}
        )


class Recorder:
    """Bounded, aggregating, asynchronous, rate-limited: see the module docstring.

    Memory: the queue holds at most `capacity` records and `max_bytes` of them; what waits to
    be sent (`pending`) at most `max_pending` occurrences of at most ~1.7 KB; `series` at most
    `max_series` names. API calls: at most `max_calls` a flush, per namespace and per job a
    token bucket, and after the API server fails to answer none until a back-off has passed."""

    def __init__(
        self,
        sender: Sender,
        instance: str,
        capacity: int = 4096,
        flush_seconds: float = 1.0,
        max_series: int = 4096,
        max_bytes: int = 2 << 20,
        max_pending: int = 1024,
        max_calls: int = 50,
        gate: Callable[[str], bool] | None = None,
        namespace_burst: int = 50,
        namespace_per_second: float = 1.0,
        object_burst: int = 25,
        object_per_second: float = 0.1,
        max_backoff: float = 60.0,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sender = sender
        self.instance = instance[:128]
        self.flush_seconds = flush_seconds
        self.now, self.clock = now, clock
        self.capacity, self.max_bytes = capacity, max_bytes
        self.queue: collections.deque[tuple[Admission, int]] = collections.deque()
        self.queued_bytes = 0
        self._lock = threading.Lock()  # queue and queued_bytes: the event loop appends, the sender drains
        self.dropped = 0  # admissions lost to a full queue (the API server was slow or away)
        self.failed = 0  # API calls that failed
        self.calls = 0  # API calls made
        self.limited = 0  # occurrences not sent: rate limits, or waiting when `pending` overflowed
        self.outside = 0  # admissions for namespaces the webhook's selectors do not admit
        self.gate = gate
        # (regarding uid, reason) -> the occurrence and how many times it happened, unsent.
        self.pending: collections.OrderedDict[tuple[str, str], tuple[Occurrence, int]] = collections.OrderedDict()
        self.max_pending = max_pending
        self.max_calls = max_calls
        # (regarding uid, reason) -> the Event made for it, oldest first, bounded.
        self.series: collections.OrderedDict[tuple[str, str], _Series] = collections.OrderedDict()
        self.max_series = max_series
        self.namespaces = TokenBuckets(namespace_burst, namespace_per_second, 4096, clock)
        self.objects = TokenBuckets(object_burst, object_per_second, 4096, clock)
        self.max_backoff = max_backoff
        self.backoff = 0.0
        self.resume_at = 0.0
        self._last_error_log = 0.0

    def record(self, admission: Admission) -> None:
        """From the event loop: O(1) amortised, never waits on I/O. A full queue (in records or
        bytes) drops the oldest."""
        size = size_of(admission)
        with self._lock:
            while self.queue and (len(self.queue) >= self.capacity or self.queued_bytes + size > self.max_bytes):
                _, gone = self.queue.popleft()
                self.queued_bytes -= gone
                self.dropped += 1
            self.queue.append((admission, size))
            self.queued_bytes += size

    def _drain(self) -> list[Admission]:
        with self._lock:
            out = [a for a, _ in self.queue]
            self.queue.clear()
            self.queued_bytes = 0
        return out

    def _admitted(self, admissions: list[Admission]) -> list[Admission]:
        if self.gate is None:
            return admissions
        verdicts: dict[str, bool] = {}
        out: list[Admission] = []
        for a in admissions:
            ns = a.regarding.namespace
            if ns not in verdicts:
                verdicts[ns] = self.gate(ns)  # may raise Unavailable: flush() backs off
            if verdicts[ns]:
                out.append(a)
            else:
                self.outside += 1
        return out

    def flush(self) -> int:
        """Send what arrived since the last flush, aggregated: at most one call per (job,
        reason), at most max_calls in all, within the rate limits; what is not sent now stays
        pending (a series' count keeps growing). Returns the number of API calls made."""
        if self.clock() < self.resume_at:
            return 0  # backing off: the queue keeps what arrives (bounded); the API server is left alone
        admissions = self._drain()
        try:
            admitted = self._admitted(admissions)
        except Unavailable as e:
            self._requeue(admissions)
            self._back_off(None, e)
            return 0
        for a in admitted:
            for o in occurrences(a):
                self._put((o.regarding.uid, o.reason), o, 1)
        calls = 0
        now = self.now()
        for key in list(self.pending):
            if calls >= self.max_calls:
                break
            o, n = self.pending[key]
            if not (self.namespaces.take(o.regarding.namespace) and self.objects.take(o.regarding.uid)):
                continue  # stays pending: sent once the buckets refill
            del self.pending[key]
            series = self.series.get(key)
            try:
                if series is None:
                    self._create(key, o, n, now)
                else:
                    ops = [{"op": "add", "path": "/series",
                            "value": {"count": series.count + n, "lastObservedTime": _micro_time(now)}}]  # fmt: skip
                    self.sender.patch(o.regarding.namespace, series.name, ops)
                    series.count += n
                    series.sent = series.count
                    self.series.move_to_end(key)
                calls += 1
                self.calls += 1
                self.backoff = 0.0
            except Unavailable as e:
                self.failed += 1
                self._put(key, o, n)  # not sent: sent when the API server answers again
                self._back_off(o, e)
                break
            except Exception as e:  # an Event is never worth more than a log line
                self.failed += 1
                if series is not None:
                    self.series.pop(key, None)  # deleted or expired: start a new one next time
                self._log_error(o, e)
        return calls

    def _requeue(self, admissions: list[Admission]) -> None:
        """Put drained admissions back in front of what arrived since, within the queue's bounds."""
        with self._lock:
            for a in reversed(admissions):
                size = size_of(a)
                if len(self.queue) >= self.capacity or self.queued_bytes + size > self.max_bytes:
                    self.dropped += 1
                    continue
                self.queue.appendleft((a, size))
                self.queued_bytes += size

    def _put(self, key: tuple[str, str], o: Occurrence, n: int) -> None:
        first, count = self.pending.pop(key, (o, 0))
        self.pending[key] = (first, count + n)
        while len(self.pending) > self.max_pending:
            _, (_, lost) = self.pending.popitem(last=False)
            self.limited += lost

    def _back_off(self, o: Occurrence | None, e: Exception) -> None:
        self.backoff = min(self.max_backoff, max(1.0, self.backoff * 2))
        self.resume_at = self.clock() + self.backoff
        if o is None:
            if self.clock() - self._last_error_log > 60:
                self._last_error_log = self.clock()
                log.warning("cannot read namespaces for events: %s (backing off %.0fs)", e, self.backoff)
        else:
            self._log_error(o, e)

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
        if self.clock() - self._last_error_log > 60:
            self._last_error_log = self.clock()
            log.warning("cannot record event %s on %s %s/%s: %s (further failures for a minute are not logged)",
                        o.reason, o.regarding.kind, o.regarding.namespace, o.regarding.name, e)  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        """The sender thread: flush every flush_seconds until stopped, then once more."""
        while not stop.wait(self.flush_seconds):
            self.flush()
        self.flush()
