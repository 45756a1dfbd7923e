"""The recorder's rate bounds, each in one place: token buckets per namespace and per job
(client-go's spam filter), and the API calls one flush may make (reads and writes alike)."""

from __future__ import annotations

import collections
from collections.abc import Callable


class TokenBuckets:
    """One token bucket per key (a burst, then one token per period), bounded in keys (the least
    recently used bucket is forgotten: at worst it starts full)."""

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


class CallBudget:
    """The API calls one flush may make: namespace and object reads, Event creates and patches."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def left(self) -> bool:
        return self.used < self.limit

    def spend(self) -> None:
        self.used += 1
