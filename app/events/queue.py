"""The admissions waiting for the sender thread: bounded in records and in bytes. The event loop
appends (O(1) amortised, never waits on I/O); the sender drains; a full queue drops the oldest."""

from __future__ import annotations

import collections
import threading

from app.events.record import Admission, size_of


class AdmissionQueue:
    def __init__(self, capacity: int, max_bytes: int) -> None:
        self.capacity, self.max_bytes = capacity, max_bytes
        self.items: collections.deque[tuple[Admission, int]] = collections.deque()
        self.bytes = 0
        self.dropped = 0  # admissions lost to a full queue (the API server was slow or away)
        self._lock = threading.Lock()  # the event loop appends, the sender drains

    def __len__(self) -> int:
        return len(self.items)

    def _full(self, size: int) -> bool:
        return len(self.items) >= self.capacity or self.bytes + size > self.max_bytes

    def append(self, admission: Admission) -> None:
        size = size_of(admission)
        with self._lock:
            while self.items and self._full(size):
                _, gone = self.items.popleft()
                self.bytes -= gone
                self.dropped += 1
            self.items.append((admission, size))
            self.bytes += size

    def drain(self) -> list[Admission]:
        with self._lock:
            out = [a for a, _ in self.items]
            self.items.clear()
            self.bytes = 0
        return out

    def requeue(self, admissions: list[Admission]) -> None:
        """Put drained admissions back in front of what arrived since, within the bounds."""
        with self._lock:
            for a in reversed(admissions):
                size = size_of(a)
                if self._full(size):
                    self.dropped += 1
                    continue
                self.items.appendleft((a, size))
                self.bytes += size
