"""Which peers a node probes in round r: the circle method of round-robin tournaments.

The fleet's nodes, sorted by name, are seated around a circle (one more empty seat when their
number is odd); in each "slot" every node has exactly one partner, and n-1 slots (n even) pair
every node with every other once. A round takes k slots, so every pair is probed, from both ends
at once, within ceil((n-1)/k) rounds. Each node computes only its own partners (O(k) per round,
no list of pairs is ever built), and every node agrees on the round from the wall clock
(round = time // interval), so there is no coordination and no leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Schedule:
    """The pairing of a fleet of `nodes` (any order; sorted here), `per_round` slots a round."""

    nodes: tuple[str, ...]
    per_round: int = 1
    _seat: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.per_round < 1:
            raise ValueError(f"peers per round must be at least 1, not {self.per_round}")
        object.__setattr__(self, "nodes", tuple(sorted(set(self.nodes))))
        self._seat.update({n: i for i, n in enumerate(self.nodes)})  # a node's seat in O(1)

    @property
    def seats(self) -> int:
        """Seats at the circle: the nodes, plus one empty seat (a bye) when they are odd."""
        n = len(self.nodes)
        return n + (n % 2)

    @property
    def slots(self) -> int:
        """Slots in which every pair meets once (none for a fleet of one)."""
        return self.seats - 1 if len(self.nodes) > 1 else 0

    @property
    def rounds_to_cover(self) -> int:
        """Rounds within which every pair is probed (from both of its ends)."""
        return -(-self.slots // self.per_round) if self.slots else 0

    def partner_in_slot(self, node: str, slot: int) -> str | None:
        """The node's partner in one slot; None for a bye (odd fleets) or a node not in it."""
        seat = self._seat.get(node)
        if seat is None:
            return None
        other = _partner(seat, slot % self.slots, self.seats) if self.slots else seat
        return self.nodes[other] if other < len(self.nodes) and other != seat else None

    def peers(self, node: str, round_number: int) -> list[str]:
        """The peers `node` probes in round `round_number`: the partners of its k slots (fewer in
        a small fleet, where slots repeat, and none for a bye)."""
        if not self.slots:
            return []
        first = round_number * self.per_round
        found: list[str] = []
        for slot in range(first, first + min(self.per_round, self.slots)):
            peer = self.partner_in_slot(node, slot)
            if peer is not None and peer not in found:
                found.append(peer)
        return found


def _partner(seat: int, slot: int, seats: int) -> int:
    """The circle method: seats 0..m-2 turn around the fixed seat m-1 (m even). In slot t, seat i
    meets (2t - i) mod (m-1), or the fixed seat when that is itself; the fixed seat meets seat t."""
    ring = seats - 1
    if seat == ring:
        return slot
    other = (2 * slot - seat) % ring
    return ring if other == seat else other


def round_of(now_seconds: float, interval_seconds: float) -> int:
    """The round every agent agrees on, from the wall clock."""
    return int(now_seconds // interval_seconds)
