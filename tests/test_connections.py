"""The connection budget on its own (app.webhook.connections.ConnectionBudget): which connection
makes room for a new one, and when a new one is refused. The whole server over real sockets:
tests/server/test_connection_budget.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.webhook.connections import ConnectionBudget


class Http:
    def __init__(self, answered: int = 0, resting: bool = True) -> None:
        self.answered = answered
        self._resting = resting

    def resting(self) -> bool:
        return self._resting

    def owes_answers(self) -> bool:
        return False


class Conn:
    """What the budget reads of a TlsConnection: its HTTP side (None in the handshake)."""

    def __init__(self, name: str, http: Http | None = None) -> None:
        self.name = name
        self.http = http
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def conn(name: str, http: Http | None = None) -> Any:
    """A Conn, typed as the TlsConnection it stands for."""
    return Conn(name, http)


def _admit(budget: ConnectionBudget, *conns: Any) -> list[bool]:
    got = []
    for c in conns:
        got.append(budget.accept(c))
        if c.http is not None:  # its handshake done
            budget.connected(c)
    return got


def test_a_new_connection_takes_the_place_of_the_oldest_without_a_request_answered() -> None:
    budget = ConnectionBudget(max_connections=3, max_handshakes=10)
    api = conn("api-server", Http(answered=5, resting=False))  # busy with a request
    silent, handshaking = conn("silent", Http()), conn("handshaking")
    assert _admit(budget, api, silent, handshaking) == [True] * 3
    newcomer = conn("new")
    assert _admit(budget, newcomer) == [True]
    assert silent.aborted and not api.aborted and not handshaking.aborted  # the oldest unproven
    assert list(budget.open) == [api, handshaking, newcomer]


def test_then_the_longest_idle_and_refused_only_when_every_connection_is_busy() -> None:
    budget = ConnectionBudget(max_connections=2, max_handshakes=10)
    busy, idle = conn("busy", Http(answered=1, resting=False)), conn("idle", Http(answered=3, resting=True))
    _admit(budget, busy, idle)
    newcomer = conn("new", Http(answered=1, resting=False))
    assert _admit(budget, newcomer) == [True] and idle.aborted
    assert _admit(budget, conn("one more")) == [False]  # busy and newcomer both have a request in flight
    assert budget.refused == 1 and list(budget.open) == [busy, newcomer]


def test_the_oldest_handshake_goes_past_the_handshake_bound() -> None:
    budget = ConnectionBudget(max_connections=100, max_handshakes=2)
    first, second, third = conn("1"), conn("2"), conn("3")
    _admit(budget, first, second, third)
    assert first.aborted and not second.aborted and list(budget.handshaking) == [second, third]
    budget.connected(second)  # its handshake done: no longer counted there
    _admit(budget, conn("4"))
    assert not third.aborted and len(budget.handshaking) == 2


def test_memory_is_given_back_once_a_burst_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.webhook import connections

    monkeypatch.setattr(connections, "TRIM_AFTER_SECONDS", 0.2)
    trims: list[int] = []

    async def go() -> None:
        budget = ConnectionBudget(max_connections=1000, max_handshakes=1000, trim=lambda: trims.append(1))
        conns = [conn(str(i), Http(answered=1)) for i in range(300)]
        _admit(budget, *conns)
        for c in conns:
            budget.lost(c)
        await asyncio.sleep(0.05)
        assert trims == []  # not in the middle of it
        await asyncio.sleep(0.3)
        assert trims == [1] and not budget.open

    asyncio.run(go())
