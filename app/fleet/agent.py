"""One round of the fabric watch, with its I/O given: which peers to probe, what the node's
condition becomes, and what to write. The decisions are here (and unit-tested); the probes,
the sysfs reads and the Kubernetes calls are passed in (app.cli.fabricwatch wires the real ones).

- The fleet is the nodes whose agents are up (the endpoints of the agents' Service: one watch,
  deltas only, as kube-proxy reads Services); each round reads only the Nodes it probes (the
  schedule's peers plus, again, the peers found bad, so a healed path clears within one
  interval), and probes those that publish a report (app.fleet.report), are Ready and whose
  condition is not stale: at most `max_paths` sweeps.
- The condition reflects the freshest sweep of every peer still in the fleet (kept for one
  coverage cycle and a margin), so it does not flip back to healthy when the rotation moves on.
- Writes: the condition only when it changes, else a heartbeat every `heartbeat_seconds`; an
  Event when it changes; the report when it changes; the taint (when on) when it must change.
  A restarted agent starts from the condition already on its Node: no spurious Event, the
  transition time kept.
- An API server that does not answer: the round's probes go on against the last fleet known,
  and what was not written is tried again next round (the memory stays bounded: one entry per peer).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.fleet import condition as cond
from app.fleet import report as rep
from app.fleet.schedule import Schedule, round_of

log = logging.getLogger("hostnet_rdma.fabricwatch")

MAX_PATHS = 32  # sweeps a round: 8 at once, each at most ~8 s (pathprobe)


class NodeApi(Protocol):
    """What the agent asks of the API server (app.kube.NodeAgentApi)."""

    def members(self) -> list[str]:
        """The nodes whose agents are running and ready (the agents' Service endpoints)."""
        ...

    def node(self, name: str) -> dict[str, Any] | None: ...
    def write_condition(self, node: str, condition: dict[str, str]) -> None: ...
    def write_report(self, node: str, annotation: str) -> None: ...
    def set_taint(self, node: str, on: bool, key: str) -> None: ...
    def event(self, node: str, kind: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class Target:
    """One sweep to make: to a peer's address, out of a local netdev, sizes up to `limit`."""

    peer: str
    address: str
    netdev: str
    limit: int


@dataclass(frozen=True)
class Local:
    """This node, as read this round: doctor's findings and the netdevs to probe from."""

    findings: tuple[cond.LocalFinding, ...]
    netdevs: tuple[rep.Netdev, ...]
    rdma: bool


Prober = Callable[[list[Target]], list[cond.PathResult]]


@dataclass(frozen=True)
class Settings:
    node: str
    interval_seconds: int = 60
    heartbeat_seconds: int = 300
    peers_per_round: int = 2
    taint: bool = False
    max_paths: int = MAX_PATHS

    def __post_init__(self) -> None:
        if not 5 <= self.interval_seconds <= 86400:
            raise ValueError(f"interval must be 5 to 86400 seconds, not {self.interval_seconds}")
        if not self.interval_seconds <= self.heartbeat_seconds <= 86400:
            raise ValueError(f"heartbeat must be from the interval ({self.interval_seconds} s) to 86400 seconds, "
                             f"not {self.heartbeat_seconds}")  # fmt: skip
        if not 1 <= self.peers_per_round <= 64:
            raise ValueError(f"peers per round must be 1 to 64, not {self.peers_per_round}")


def fleet(
    nodes: list[dict[str, Any]], me: str, own: frozenset[str], now: dt.datetime
) -> tuple[list[rep.Peer], list[str]]:
    """The peers to probe: Nodes with a readable report, Ready, whose agent is not stale (a node
    that is down or lost its agent is not a path problem of ours); and why others are left out."""
    peers, unread = rep.peers_of(nodes, me, own)
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    kept: list[rep.Peer] = []
    for p in peers:
        node = by_name.get(p.name) or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict))  # fmt: skip
        found = cond.read_condition(node)
        if not ready:
            unread.append(f"{p.name}: not Ready")
        elif found is not None and cond.stale(found[1], p.report.heartbeat_seconds, now):
            unread.append(f"{p.name}: its agent stopped reporting")
        else:
            kept.append(p)
    return kept, unread


def targets(peers: list[rep.Peer], local: tuple[rep.Netdev, ...], limit: int) -> list[Target]:
    """Per peer, a sweep out of each local netdev to the peer's netdev of the same name (rails:
    rdma0 to rdma0), else of the same position; sizes up to the smaller MTU of the two."""
    out: list[Target] = []
    for p in peers:
        theirs = {d.name: d for d in p.report.netdevs}
        for i, mine in enumerate(local):
            if not p.report.netdevs:
                break
            other = theirs.get(mine.name) or p.report.netdevs[i % len(p.report.netdevs)]
            out.append(Target(p.name, other.address, mine.name, min(mine.mtu, other.mtu)))
            if len(out) >= limit:
                return out
    return out


@dataclass
class PathMemory:
    """The last sweeps of each peer and the round they were made in; one entry per peer."""

    by_peer: dict[str, tuple[int, tuple[cond.PathResult, ...]]] = field(default_factory=dict)

    def record(self, round_number: int, results: list[cond.PathResult]) -> None:
        grouped: dict[str, list[cond.PathResult]] = {}
        for r in results:
            grouped.setdefault(r.peer, []).append(r)
        for peer, rs in grouped.items():
            self.by_peer[peer] = (round_number, tuple(rs))

    def prune(self, fleet_names: set[str], round_number: int, keep_rounds: int) -> None:
        for peer in list(self.by_peer):
            made, _ = self.by_peer[peer]
            if peer not in fleet_names or round_number - made > keep_rounds:
                del self.by_peer[peer]

    def current(self) -> list[cond.PathResult]:
        return [r for _, rs in self.by_peer.values() for r in rs]

    def bad(self) -> list[str]:
        return sorted(p for p, (_, rs) in self.by_peer.items() if any(r.verdict != "ok" for r in rs))


@dataclass
class Written:
    """What is on our Node now, as far as this agent knows."""

    condition: cond.Condition | None = None
    heartbeat: dt.datetime | None = None
    transition: dt.datetime | None = None
    report: str = ""
    tainted: bool | None = None  # None: not known (read at start)


@dataclass(frozen=True)
class Plan:
    write_condition: bool
    event: bool
    write_report: bool
    taint: bool | None  # None: leave it


def plan(written: Written, new: cond.Condition, report: str, now: dt.datetime, s: Settings) -> Plan:
    """What this round writes: the condition when it changed or its heartbeat is due, an Event
    when it changed, the report when it changed, the taint when tainting is on and it must move
    (and off when tainting was turned off but ours is still there)."""
    changed = written.condition != new
    due = written.heartbeat is None or (now - written.heartbeat).total_seconds() >= s.heartbeat_seconds
    want_taint = s.taint and new.taints
    # Not known whether ours is there (our Node not read yet): only ever add it, never remove blind.
    leave = written.tainted is want_taint or (written.tainted is None and not want_taint)
    return Plan(changed or due, changed, report != written.report, None if leave else want_taint)


@dataclass
class RoundOutcome:
    round_number: int
    condition: cond.Condition
    paths: list[cond.PathResult]
    local: Local
    peers: int
    api_errors: list[str]


class Agent:
    def __init__(self, api: NodeApi, settings: Settings, read_local: Callable[[], Local], probe: Prober) -> None:
        self.api, self.s, self.read_local, self.probe = api, settings, read_local, probe
        self.memory = PathMemory()
        self.written = Written()
        self.members: list[str] = []  # the last fleet known, for an API server outage
        self.seen: dict[str, dict[str, Any]] = {}  # this round's peers' Nodes, for an outage
        self.peer_mtus: dict[str, int] = {}  # the MTU each peer publishes, for the fleet's
        self.started = False

    def _start(self) -> None:
        """Pick up what a previous run of the agent left on our Node."""
        me = self.api.node(self.s.node)
        self.started = True
        if me is None:
            return
        found = cond.read_condition(me)
        if found is not None:
            self.written.condition, self.written.heartbeat, self.written.transition = found
        self.written.report = str(((me.get("metadata") or {}).get("annotations") or {}).get(rep.ANNOTATION, ""))
        taints = (me.get("spec") or {}).get("taints") or []
        self.written.tainted = any(isinstance(t, dict) and t.get("key") == cond.TAINT_KEY for t in taints)

    def _read(self, name: str, errors: list[str]) -> dict[str, Any] | None:
        try:
            node = self.api.node(name)
        except Exception as e:  # the API server's outage: the peer as last read
            errors.append(f"read node {name}: {e}")
            return self.seen.get(name)
        if node is None:
            self.seen.pop(name, None)
        else:
            self.seen[name] = node
        return node

    def round(self, now: dt.datetime) -> RoundOutcome:
        errors: list[str] = []
        try:
            self.members = sorted(set(self.api.members()))
        except Exception as e:  # the API server's outage: go on with the fleet last seen
            errors.append(f"list the agents: {e}")
        if not self.started:
            try:
                self._start()
            except Exception as e:
                errors.append(f"read our node: {e}")
        local = self.read_local()
        own = frozenset(d.address for d in local.netdevs)
        schedule = Schedule(tuple({self.s.node, *self.members}), self.s.peers_per_round)
        number = round_of(now.timestamp(), self.s.interval_seconds)
        chosen = schedule.peers(self.s.node, number)
        in_fleet = set(schedule.nodes)
        again = [p for p in self.memory.bad() if p in in_fleet and p not in chosen][: self.s.peers_per_round]
        nodes = [n for n in (self._read(p, errors) for p in chosen + again) if n is not None]
        peers, left_out = fleet(nodes, self.s.node, own, now)
        for why in left_out:
            log.info("peer left out this round: %s", why)
        todo = targets(peers, local.netdevs, self.s.max_paths)
        results = self.probe(todo) if todo else []
        self.memory.record(number, results)
        for name in [p for p in chosen + again if p not in {q.name for q in peers}]:
            self.memory.by_peer.pop(name, None)  # left out (down, NotReady, no report): not a path of ours
        self.memory.prune(in_fleet, number, schedule.rounds_to_cover + 1)
        for name in list(self.seen):  # only this round's peers: a Node is kilobytes, a fleet thousands
            if name not in chosen and name not in again:
                del self.seen[name]
        paths = self.memory.current()
        mtu = min((d.mtu for d in local.netdevs), default=0)
        for p in peers:
            if p.report.netdevs:
                self.peer_mtus[p.name] = p.report.netdevs[0].mtu
        for name in [n for n in self.peer_mtus if n not in in_fleet]:
            del self.peer_mtus[name]
        # Two peers at least: one odd peer is that peer's mismatch (its own agent says so), not ours.
        fleet_mtu = cond.fleet_mtu(list(self.peer_mtus.values())) if len(self.peer_mtus) >= 2 else 0
        new = cond.judge(list(local.findings), paths, rdma=local.rdma, mtu=mtu, fleet_mtu=fleet_mtu,
                         netdev=local.netdevs[0].name if local.netdevs else "", can_probe=bool(local.netdevs))  # fmt: skip
        report = rep.Report(
            local.netdevs, local.rdma, self.s.interval_seconds, self.s.heartbeat_seconds
        ).to_annotation()
        errors += self._write(new, report, now)
        return RoundOutcome(number, new, results, local, len(peers), errors)

    def _write(self, new: cond.Condition, report: str, now: dt.datetime) -> list[str]:
        errors: list[str] = []
        p = plan(self.written, new, report, now, self.s)
        node = self.s.node
        if p.write_report:
            try:
                self.api.write_report(node, report)
                self.written.report = report
            except Exception as e:
                errors.append(f"write report: {e}")
        if p.write_condition:
            changed = self.written.condition is None or self.written.condition.status != new.status
            transition = now if changed or self.written.transition is None else self.written.transition
            try:
                self.api.write_condition(node, cond.as_node_condition(new, now, transition))
                previous = self.written.condition
                self.written.condition, self.written.heartbeat, self.written.transition = new, now, transition
                if p.event:
                    kind = "Warning" if new.status == "True" else "Normal"
                    was = f" (was {previous.reason})" if previous is not None else ""
                    try:
                        self.api.event(node, kind, new.reason, f"{new.message}{was}")
                    except Exception as e:
                        errors.append(f"event: {e}")
            except Exception as e:
                errors.append(f"write condition: {e}")
        if p.taint is not None:
            try:
                self.api.set_taint(node, p.taint, cond.TAINT_KEY)
                self.written.tainted = p.taint
            except Exception as e:
                errors.append(f"taint: {e}")
        return errors
