"""Whether an Event may be recorded at all: the review may be forged (anyone who reaches the
Service can post one), so the webhook acts only where the API server would have sent it.

- NamespaceGate: only in namespaces the webhook's own selectors admit (a review for
  kube-system or an unlabelled namespace records nothing there);
- ObjectGate: only about an object that exists, with that uid, in that namespace (a review
  naming another tenant's Job by name and uid records nothing unless that Job is real, and then
  the Event says only our own sentence about it).

Each answers from a cache (`known`) or needs one API read (`look_up`, which the recorder counts
in its calls per flush). Reads raise events.Unavailable when the API server does not answer.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.core import launchers
from app.events.record import Regarding

# The kinds Events are recorded on, by API group: the resource to read (the launchers' own
# declaration). A pod owned by another kind gets its admission warnings and status annotation,
# and no Event.
KINDS: dict[tuple[str, str], str] = launchers.KINDS


def resource_of(about: Regarding) -> tuple[str, str, str] | None:
    """(group, version, resource) to read the object an Event is about; None for a kind not in KINDS."""
    group, _, version = about.api_version.rpartition("/")
    resource = KINDS.get((group, about.kind))
    return None if resource is None or not group or not version else (group, version, resource)


class Gate(Protocol):
    def known(self, about: Regarding) -> bool | None:
        """The verdict from what is known, None when it takes an API read."""

    def look_up(self, about: Regarding) -> bool:
        """One API read, then the verdict."""


class _Cache:
    """Answers kept `ttl` seconds, at most `max_keys` (the least recently used forgotten)."""

    def __init__(self, ttl: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.ttl, self.max_keys, self.clock = ttl, max_keys, clock
        self.items: collections.OrderedDict[Any, tuple[Any, float]] = collections.OrderedDict()

    def get(self, key: Any) -> tuple[bool, Any]:
        found = self.items.get(key)
        if found is None or self.clock() - found[1] > self.ttl:
            return False, None
        return True, found[0]

    def put(self, key: Any, value: Any) -> None:
        self.items[key] = (value, self.clock())
        self.items.move_to_end(key)
        while len(self.items) > self.max_keys:
            self.items.popitem(last=False)


class NamespaceGate:
    """Only namespaces the webhook's own selectors admit. `labels_of` reads a namespace's labels
    (None when it does not exist)."""

    def __init__(
        self,
        config_of: Callable[[], Any],
        labels_of: Callable[[str], dict[str, str] | None],
        ttl: float = 60.0,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config_of, self.labels_of = config_of, labels_of
        self.cache = _Cache(ttl, max_keys, clock)

    def _selectors(self) -> Any:
        from app.core import selection  # pure; here, not at import: the recorder's callers need not load the core

        return selection.from_config(self.config_of())

    def _verdict(self, namespace: str, labels: dict[str, str] | None) -> bool:
        from app.core import selection

        return labels is not None and selection.matches(
            self._selectors().namespace, {**labels, selection.NAME_LABEL: namespace}
        )

    def known(self, about: Regarding) -> bool | None:
        from app.core import selection

        namespace = about.namespace
        if not namespace or namespace in selection.excluded(self._selectors()):
            return False
        hit, labels = self.cache.get(namespace)
        return self._verdict(namespace, labels) if hit else None

    def look_up(self, about: Regarding) -> bool:
        labels = self.labels_of(about.namespace)
        self.cache.put(about.namespace, labels)
        return self._verdict(about.namespace, labels)

    def admits(self, namespace: str) -> bool:
        """known(), else look_up(): for callers that do not count reads."""
        about = Regarding("", "", "", "", namespace)
        verdict = self.known(about)
        return self.look_up(about) if verdict is None else verdict


class ObjectGate:
    """Only objects that exist, with that uid, in that namespace. `uid_of(namespace, group,
    version, resource, name)` reads the object's uid (None when it does not exist). One read per
    job and `ttl`: a 1,000-pod job costs one."""

    def __init__(
        self,
        uid_of: Callable[[str, str, str, str, str], str | None],
        ttl: float = 60.0,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.uid_of = uid_of
        self.cache = _Cache(ttl, max_keys, clock)

    @staticmethod
    def _key(about: Regarding) -> tuple[str, str, str, str, str]:
        # The uid in the key: a job deleted and created again under its name has a new one, and
        # its pods must not wait out the old job's verdict.
        return about.namespace, about.api_version.rpartition("/")[0], about.kind, about.name, about.uid

    def known(self, about: Regarding) -> bool | None:
        if resource_of(about) is None or not about.name or not about.uid:
            return False
        hit, verdict = self.cache.get(self._key(about))
        return bool(verdict) if hit else None

    def look_up(self, about: Regarding) -> bool:
        found = resource_of(about)
        if found is None:
            return False
        verdict = self.uid_of(about.namespace, *found, about.name) == about.uid
        self.cache.put(self._key(about), verdict)
        return verdict
