"""A sweep's verdict, the node condition made of a round's findings, and how a reader tells a
stale one. Node Problem Detector's convention: a condition type of our own, status `True` when
there is a problem, a CamelCase reason, a one-line message.

The reasons are a contract (operators filter and alert on them; docs/fabric-watch.md lists them),
and this module is their one home.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

CONDITION = "HostnetRdmaFabricDegraded"
TAINT_KEY = "hostnet-rdma.io/fabric-degraded"
MESSAGE_MAX = 1024  # one line in `kubectl describe node`, never a wall

# Reasons, most urgent first: a node shows the first that applies.
RDMA_PORT_DOWN = "RdmaPortDown"
ROCE_GID_INVALID = "RoceGidInvalid"
RDMA_DEVICES_MISSING = "RdmaDevicesMissing"  # the agent was told this node must have them
GPUDIRECT_UNAVAILABLE = "GpuDirectRdmaUnavailable"
LARGE_FRAMES_DROPPED = "LargeFramesDropped"
MTU_MISMATCH = "MtuMismatch"
PEER_UNREACHABLE = "PeerUnreachable"
PROBE_FAILED = "ProbeFailed"  # status Unknown: the agent could not look (no raw socket)
NO_RDMA_DEVICES = "NoRdmaDevices"  # status False: none expected; paths probed over the node's own interface
HEALTHY = "FabricHealthy"
REASONS = (RDMA_PORT_DOWN, ROCE_GID_INVALID, RDMA_DEVICES_MISSING, GPUDIRECT_UNAVAILABLE, LARGE_FRAMES_DROPPED,
           MTU_MISMATCH, PEER_UNREACHABLE, PROBE_FAILED, NO_RDMA_DEVICES, HEALTHY)  # fmt: skip
# Which reasons put the NoSchedule taint on (when the chart turns tainting on): a problem of this
# node or of its paths. A peer that answers nothing at all is more often a peer that is down than a
# path of ours, and one dead node must not taint the fleet; an agent that cannot look taints nothing.
TAINTING = frozenset({RDMA_PORT_DOWN, ROCE_GID_INVALID, RDMA_DEVICES_MISSING, GPUDIRECT_UNAVAILABLE,
                      LARGE_FRAMES_DROPPED, MTU_MISMATCH})  # fmt: skip
# doctor's findings that are the node's (memlock and /dev/shm are the agent's own pod's: left out).
LOCAL_REASONS = {"ports": RDMA_PORT_DOWN, "gid": ROCE_GID_INVALID, "devices": RDMA_DEVICES_MISSING,
                 "gpudirect": GPUDIRECT_UNAVAILABLE}  # fmt: skip


@dataclass(frozen=True)
class PathResult:
    """One sweep from a local netdev to a peer's address: the sizes (IP packet bytes) that
    crossed, the first that did not (0: none lost), the largest probed, or why it was not probed."""

    peer: str
    address: str
    netdev: str
    crossed: tuple[int, ...] = ()
    first_lost: int = 0
    limit: int = 0
    error: str = ""

    @property
    def largest(self) -> int:
        return max(self.crossed, default=0)

    @property
    def verdict(self) -> str:
        """ok | dropped (small sizes cross, large do not) | unreachable (nothing answered) |
        not-probed."""
        if self.error:
            return "not-probed"
        if self.first_lost and not self.crossed:
            return "unreachable"  # not "large frames dropped": nothing crossed at all
        return "dropped" if self.first_lost else "ok"

    def where(self) -> str:
        return f"{self.peer} ({self.address} on {self.netdev})"

    def text(self) -> str:
        if self.verdict == "not-probed":
            return f"{self.where()} not probed: {self.error}"
        if self.verdict == "unreachable":
            return f"no ICMP echo of any size answered by {self.where()}"
        if self.verdict == "dropped":
            return f"packets of up to {self.largest} B cross to {self.where()}, {self.first_lost} B do not"
        return f"packets of up to {self.largest} B cross to {self.where()}"


@dataclass(frozen=True)
class LocalFinding:
    """One of doctor's checks of this node (app.wrapper.fabric.Finding, as plain data)."""

    name: str
    problem: bool
    detail: str


@dataclass(frozen=True)
class Condition:
    status: str  # "True" (a problem), "False", "Unknown"
    reason: str
    message: str

    @property
    def taints(self) -> bool:
        return self.status == "True" and self.reason in TAINTING


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "…"


def _with_others(first: str, others: list[str]) -> str:
    if not others:
        return first
    return f"{first}; also {len(others)} more: {', '.join(others[:5])}" + (", …" if len(others) > 5 else "")


def judge(
    local: list[LocalFinding],
    paths: list[PathResult],
    *,
    rdma: bool,
    mtu: int = 0,
    fleet_mtu: int = 0,
    netdev: str = "",
    can_probe: bool = True,
) -> Condition:
    """The node's condition from this round's local checks and the freshest sweep of each peer.
    `mtu` is this node's RDMA netdev MTU, `fleet_mtu` the one most of its peers publish (0: not known)."""
    for name, reason in LOCAL_REASONS.items():
        bad = [f for f in local if f.name == name and f.problem]
        if bad:
            return Condition("True", reason, _one_line(bad[0].detail))
    by_verdict: dict[str, list[PathResult]] = {}
    for p in sorted(paths, key=lambda p: (p.peer, p.netdev, p.address)):
        by_verdict.setdefault(p.verdict, []).append(p)
    dropped = by_verdict.get("dropped", [])
    if dropped:
        return Condition("True", LARGE_FRAMES_DROPPED,
                         _one_line(_with_others(dropped[0].text(), sorted({p.peer for p in dropped[1:]}))))  # fmt: skip
    if mtu and fleet_mtu and mtu != fleet_mtu:
        return Condition("True", MTU_MISMATCH, _one_line(
            f"{netdev or 'the RDMA netdev'} has MTU {mtu}, most of the fleet {fleet_mtu}: frames over the smaller "
            "one are dropped between them"))  # fmt: skip
    unreachable = by_verdict.get("unreachable", [])
    if unreachable:
        return Condition("True", PEER_UNREACHABLE,
                         _one_line(_with_others(unreachable[0].text(), sorted({p.peer for p in unreachable[1:]}))))  # fmt: skip
    failed = by_verdict.get("not-probed", [])
    if failed:
        return Condition("Unknown", PROBE_FAILED, _one_line(failed[0].text()))
    if not can_probe:
        return Condition("Unknown", PROBE_FAILED, "no interface of this node with an IPv4 address to probe from "
                         "(the RDMA netdevs', else the default route's, else --netdev)")  # fmt: skip
    # Stable from round to round (a count of the peers probed so far would rewrite it every round).
    if not paths:
        probed = "no peer to probe yet"
    else:
        probed = (
            f"every peer probed answers every size up to {mtu} B" if mtu else "every peer probed answers every size"
        )
    if not rdma:
        return Condition("False", NO_RDMA_DEVICES, _one_line(
            f"no RDMA devices on this node: paths probed over its own interface; {probed}"))  # fmt: skip
    return Condition("False", HEALTHY, _one_line(f"RDMA devices, ports and GIDs fine; {probed}"))


def fleet_mtu(mtus: list[int]) -> int:
    """The MTU most nodes have (ties: the larger), 0 for none."""
    if not mtus:
        return 0
    counts: dict[int, int] = {}
    for m in mtus:
        counts[m] = counts.get(m, 0) + 1
    return max(counts, key=lambda m: (counts[m], m))


# ------------------------------------------------------------------ the condition on the Node
def timestamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_node_condition(c: Condition, heartbeat: dt.datetime, transition: dt.datetime) -> dict[str, str]:
    """The condition as it goes into Node.status.conditions (a strategic merge by type)."""
    return {"type": CONDITION, "status": c.status, "reason": c.reason, "message": c.message,
            "lastHeartbeatTime": timestamp(heartbeat), "lastTransitionTime": timestamp(transition)}  # fmt: skip


def _parse_time(text: object) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def read_condition(node: dict[str, Any]) -> tuple[Condition, dt.datetime | None, dt.datetime | None] | None:
    """Our condition on a Node (raw dict): (condition, last heartbeat, last transition); None
    when the node has none."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == CONDITION:
            cond = Condition(str(c.get("status", "Unknown")), str(c.get("reason", "")), str(c.get("message", "")))
            return cond, _parse_time(c.get("lastHeartbeatTime")), _parse_time(c.get("lastTransitionTime"))
    return None


# Our taint, and the JSON patches that set a Node's taints: the agent's (its own node, on or
# off) and the uninstall clear's (every node, off) are built here alike. Guarded by the
# resourceVersion read: the API server answers 409 when the Node changed in between (a
# compare-and-swap), and the writer reads it again; others' taints are kept, in their order.
OUR_TAINT: dict[str, str] = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def others_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The Node's (raw JSON) taints but ours, in their order."""
    taints = (node.get("spec") or {}).get("taints") or []
    return [t for t in taints if isinstance(t, dict) and t.get("key") != TAINT_KEY]


def guarded_patch(resource_version: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}, *ops]


def taints_op(taints: list[dict[str, Any]], present: bool) -> dict[str, Any]:
    """Set spec.taints whole (`present`: the Node has the field now)."""
    return {"op": "replace" if present else "add", "path": "/spec/taints", "value": taints}


def taint_patch(node: dict[str, Any], on: bool) -> list[dict[str, Any]]:
    """Our taint on (or off) the Node as read, others' kept, guarded by its resourceVersion."""
    taints = others_taints(node) + ([dict(OUR_TAINT)] if on else [])
    present = "taints" in (node.get("spec") or {})
    return guarded_patch(str(node["metadata"]["resourceVersion"]), [taints_op(taints, present)])


STALE_AFTER_HEARTBEATS = 3


def stale(heartbeat: dt.datetime | None, heartbeat_seconds: int, now: dt.datetime) -> bool:
    """A condition whose agent stopped reporting: its last heartbeat is older than three heartbeat
    periods (one missed write is an API server's hiccup, three an agent that is gone). A reader
    says so; it never reads an old `False` as healthy."""
    if heartbeat is None:
        return True
    return (now - heartbeat).total_seconds() > STALE_AFTER_HEARTBEATS * heartbeat_seconds
