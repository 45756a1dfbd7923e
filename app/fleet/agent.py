"""One round of the fabric watch, with its I/O given: which peers to probe, what the node's
condition becomes, and what to write. The decisions are here (and unit-tested); the probes,
the sysfs reads and the Kubernetes calls are passed in (app.cli.fabricwatch wires the real ones).

- The fleet is the Nodes whose agents publish a report (app.fleet.report), Ready, with a
  condition that is not stale; each round probes the schedule's peers plus, again, the peers
  found bad (so a healed path clears within one interval), at most `max_paths` sweeps.
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

    def nodes(self) -> list[dict[str, Any]]: ...
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
        self.last_nodes: list[dict[str, Any]] = []
        self.started = False

    def _start(self, nodes: list[dict[str, Any]]) -> None:
        """Pick up what a previous run of the agent left on our Node."""
        me = next((n for n in nodes if (n.get("metadata") or {}).get("name") == self.s.node), None)
        if me is None:
            return
        found = cond.read_condition(me)
        if found is not None:
            self.written.condition, self.written.heartbeat, self.written.transition = found
        self.written.report = str(((me.get("metadata") or {}).get("annotations") or {}).get(rep.ANNOTATION, ""))
        taints = (me.get("spec") or {}).get("taints") or []
        self.written.tainted = any(isinstance(t, dict) and t.get("key") == cond.TAINT_KEY for t in taints)
        self.started = True

    def round(self, now: dt.datetime) -> RoundOutcome:
        errors: list[str] = []
        try:
            nodes = self.api.nodes()
            self.last_nodes = nodes
        except Exception as e:  # the API server's outage: go on with the fleet last seen
            errors.append(f"list nodes: {e}")
            nodes = self.last_nodes
        if not self.started and nodes:
            self._start(nodes)
        local = self.read_local()
        own = frozenset(d.address for d in local.netdevs)
        peers, left_out = fleet(nodes, self.s.node, own, now)
        for why in left_out:
            log.debug("peer left out: %s", why)
        schedule = Schedule(tuple([self.s.node, *(p.name for p in peers)]), self.s.peers_per_round)
        number = round_of(now.timestamp(), self.s.interval_seconds)
        chosen = schedule.peers(self.s.node, number)
        by_name = {p.name: p for p in peers}
        again = [p for p in self.memory.bad() if p in by_name and p not in chosen][: self.s.peers_per_round]
        todo = targets([by_name[p] for p in chosen + again if p in by_name], local.netdevs, self.s.max_paths)
        results = self.probe(todo) if todo else []
        self.memory.record(number, results)
        self.memory.prune(set(by_name), number, schedule.rounds_to_cover + 1)
        paths = self.memory.current()
        mtu = min((d.mtu for d in local.netdevs), default=0)
        peer_mtus = [d.mtu for p in peers for d in p.report.netdevs[:1]]
        new = cond.judge(list(local.findings), paths, rdma=local.rdma, mtu=mtu,
                         fleet_mtu=cond.fleet_mtu(peer_mtus) if len(peer_mtus) >= 2 else 0,
                         netdev=local.netdevs[0].name if local.netdevs else "")  # fmt: skip
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
