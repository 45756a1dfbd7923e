"""The sender side: what arrived is gated, aggregated per (job, reason) and sent within the
bounds; a thread flushes every second. Every bound lives in its own unit (the queue, the
gates, the token buckets, the calls per flush); this module only puts them in order."""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.events.gates import Gate
from app.events.limits import CallBudget, TokenBuckets
from app.events.queue import AdmissionQueue
from app.events.record import NOTE_MAX, Admission, Occurrence, occurrences

log = logging.getLogger("hostnet_rdma.events")

REPORTING_CONTROLLER = "hostnet-rdma.io/webhook"
ACTION = "Mutate"


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


class Recorder:
    """Bounded, aggregating, asynchronous, rate-limited (app.events).

    Memory: the queue holds at most `capacity` records and `max_bytes` of them; what waits to
    be sent (`pending`) at most `max_pending` occurrences of at most ~1.7 KB; `series` at most
    `max_series` names. API calls: at most `max_calls` a flush, reads by the gates included;
    per namespace and per job a token bucket; after the API server fails to answer, none until
    a back-off has passed. Any other error costs the one admission or call it is about."""

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
        gates: Sequence[Gate] = (),
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
        self.queue = AdmissionQueue(capacity, max_bytes)
        self.failed = 0  # API calls that failed
        self.calls = 0  # API calls made (Event creates and patches)
        self.reads = 0  # reads by the gates
        self.limited = 0  # occurrences not sent: rate limits, or waiting when `pending` overflowed
        self.outside = 0  # admissions the gates refused (a namespace not admitted, no such object)
        self.gates = tuple(gates)
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

    @property
    def dropped(self) -> int:
        return self.queue.dropped

    @property
    def queued_bytes(self) -> int:
        return self.queue.bytes

    def record(self, admission: Admission) -> None:
        """From the event loop: O(1) amortised, never waits on I/O."""
        self.queue.append(admission)

    def _admitted(self, admissions: list[Admission], budget: CallBudget) -> list[Admission]:
        """The admissions every gate lets through. Reads count in the flush's budget: those that
        would need one past it wait in the queue for the next flush. Raises Unavailable (what
        was not yet judged goes back to the queue)."""
        out: list[Admission] = []
        later: list[Admission] = []
        for i, a in enumerate(admissions):
            try:
                verdict = self._verdict(a, budget)
            except Unavailable:
                self.queue.requeue(later + admissions[i:])
                raise
            if verdict is None:
                later.append(a)
            elif verdict:
                out.append(a)
            else:
                self.outside += 1
        self.queue.requeue(later)
        return out

    def _verdict(self, a: Admission, budget: CallBudget) -> bool | None:
        """Whether every gate lets this admission through; None when telling takes a read past
        the budget."""
        for gate in self.gates:
            known = gate.known(a.regarding)
            if known is None:
                if not budget.left():
                    return None
                budget.spend()
                self.reads += 1
                try:
                    known = gate.look_up(a.regarding)
                except Unavailable:
                    raise
                except Exception as e:  # a 403 during an RBAC upgrade: this admission only
                    self.failed += 1
                    about = a.regarding
                    self._log_error(f"cannot check {about.kind} {about.namespace}/{about.name} for events", e)
                    return False
            if not known:
                return False
        return True

    def flush(self) -> int:
        """Send what arrived since the last flush, aggregated: at most one call per (job,
        reason), at most max_calls in all (reads included), within the rate limits; what is not
        sent now stays pending (a series' count keeps growing). Returns the Event calls made."""
        if self.clock() < self.resume_at:
            return 0  # backing off: the queue keeps what arrives (bounded); the API server is left alone
        budget = CallBudget(self.max_calls)
        try:
            admitted = self._admitted(self.queue.drain(), budget)
        except Unavailable as e:
            self._back_off(e, "cannot read namespaces or jobs for events")
            return 0
        for a in admitted:
            for o in occurrences(a):
                self._put((o.regarding.uid, o.reason), o, 1)
        calls = 0
        now = self.now()
        for key in list(self.pending):
            if not budget.left():
                break
            o, n = self.pending[key]
            if not (self.namespaces.take(o.regarding.namespace) and self.objects.take(o.regarding.uid)):
                continue  # stays pending: sent once the buckets refill
            del self.pending[key]
            budget.spend()
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
                self._back_off(
                    e,
                    f"cannot record event {o.reason} on {o.regarding.kind} {o.regarding.namespace}/{o.regarding.name}",
                )
                break
            except Exception as e:  # an Event is never worth more than a log line
                self.failed += 1
                if series is not None:
                    self.series.pop(key, None)  # deleted or expired: start a new one next time
                self._log_error(
                    f"cannot record event {o.reason} on {o.regarding.kind} {o.regarding.namespace}/{o.regarding.name}",
                    e,
                )
        return calls

    def _put(self, key: tuple[str, str], o: Occurrence, n: int) -> None:
        first, count = self.pending.pop(key, (o, 0))
        self.pending[key] = (first, count + n)
        while len(self.pending) > self.max_pending:
            _, (_, lost) = self.pending.popitem(last=False)
            self.limited += lost

    def _back_off(self, e: Exception, what: str) -> None:
        self.backoff = min(self.max_backoff, max(1.0, self.backoff * 2))
        self.resume_at = self.clock() + self.backoff
        self._log_error(f"{what} (backing off {self.backoff:.0f}s)", e)

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

    def _log_error(self, what: str, e: Exception) -> None:
        if self.clock() - self._last_error_log > 60:
            self._last_error_log = self.clock()
            log.warning("%s: %s (further failures for a minute are not logged)", what, e)

    def run(self, stop: threading.Event) -> None:
        """The sender thread: flush every flush_seconds until stopped, then once more. It
        outlives any error: one flush's failure is a log line, the next flush runs."""
        while not stop.wait(self.flush_seconds):
            self._flush_safely()
        self._flush_safely()

    def _flush_safely(self) -> None:
        try:
            self.flush()
        except Exception as e:  # a bug, or an error no unit expected: never the end of Events
            self.failed += 1
            self._log_error("events flush failed", e)
