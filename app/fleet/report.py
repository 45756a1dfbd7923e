"""What an agent publishes about its own node, in an annotation on its Node, for its peers: the
addresses and MTUs of the node's RDMA netdevs (where the peers send their probes), whether the
node has RDMA devices, and the agent's intervals (how a reader tells a stale condition).

Only the agent on that node can write it (the chart's ValidatingAdmissionPolicy holds each
agent's ServiceAccount to the Node it runs on), never a tenant. A peer still reads it as
untrusted input: anything malformed, too long, or an address that cannot be a peer's (loopback,
link-local, multicast, unspecified, one of the reader's own) leaves that peer's entry out, and
the reason is said; nothing in it is ever run or sent anywhere but to that address.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field

ANNOTATION = "fabric.hostnet-rdma.io/report"
VERSION = 1
MAX_BYTES = 4096  # 16 rails at ~60 bytes each, with room; a bigger value is not ours
MAX_NETDEVS = 32
NETDEV = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")  # IFNAMSIZ - 1


@dataclass(frozen=True)
class Netdev:
    name: str
    address: str  # IPv4
    mtu: int


@dataclass(frozen=True)
class Report:
    netdevs: tuple[Netdev, ...]
    rdma: bool  # the node has RDMA devices (else the netdevs are its default-route interface)
    interval_seconds: int
    heartbeat_seconds: int
    dropped: tuple[str, ...] = field(default=())  # entries left out when read, and why

    def to_annotation(self) -> str:
        return json.dumps(
            {"v": VERSION, "rdma": self.rdma, "interval": self.interval_seconds, "heartbeat": self.heartbeat_seconds,
             "netdevs": [{"name": d.name, "ip": d.address, "mtu": d.mtu} for d in self.netdevs[:MAX_NETDEVS]]},
            separators=(",", ":"), sort_keys=True,
        )  # fmt: skip


class ReportError(ValueError):
    """A report that cannot be read at all."""


def usable_address(text: str, own: frozenset[str] = frozenset()) -> str | None:
    """Why an address cannot be a peer's, or None when it can."""
    try:
        ip = ipaddress.IPv4Address(text)
    except (ipaddress.AddressValueError, ValueError):
        return f"{text[:40]!r} is not an IPv4 address"
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return f"{ip} cannot be a peer's address"
    if str(ip) in own:
        return f"{ip} is this node's own address"
    return None


def parse(text: str, own: frozenset[str] = frozenset()) -> Report:
    """A peer's report; raises ReportError when it is unreadable. Netdevs that cannot be used
    are left out with the reason in `dropped`."""
    if len(text) > MAX_BYTES:
        raise ReportError(f"report of {len(text)} bytes, over {MAX_BYTES}")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ReportError(f"not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ReportError(f"not a version {VERSION} report")
    interval, heartbeat, rdma = data.get("interval"), data.get("heartbeat"), data.get("rdma")
    if not isinstance(interval, int) or not isinstance(heartbeat, int) or not isinstance(rdma, bool):
        raise ReportError("interval, heartbeat (seconds) and rdma (true/false) are required")
    if not (1 <= interval <= 86400 and 1 <= heartbeat <= 86400):
        raise ReportError("interval and heartbeat must be 1 to 86400 seconds")
    entries = data.get("netdevs")
    if not isinstance(entries, list):
        raise ReportError("netdevs must be a list")
    netdevs: list[Netdev] = []
    dropped: list[str] = []
    for entry in entries[:MAX_NETDEVS]:
        if not isinstance(entry, dict):
            dropped.append("a netdev entry that is not an object")
            continue
        name, address, mtu = entry.get("name"), entry.get("ip"), entry.get("mtu")
        if not isinstance(name, str) or not NETDEV.match(name):
            dropped.append(f"netdev name {str(name)[:20]!r} is not an interface name")
        elif not isinstance(mtu, int) or not 68 <= mtu <= 65535:
            dropped.append(f"{name}: MTU {str(mtu)[:10]!r} out of range")
        elif not isinstance(address, str) or (why := usable_address(address, own)):
            dropped.append(f"{name}: {why if isinstance(address, str) else 'no address'}")
        else:
            netdevs.append(Netdev(name, address, mtu))
    if len(entries) > MAX_NETDEVS:
        dropped.append(f"{len(entries) - MAX_NETDEVS} netdevs over {MAX_NETDEVS} left out")
    return Report(tuple(netdevs), rdma, interval, heartbeat, tuple(dropped))


@dataclass(frozen=True)
class Peer:
    """A node whose agent has published a readable report."""

    name: str
    report: Report


def peers_of(
    nodes: list[dict[str, object]], me: str, own: frozenset[str] = frozenset()
) -> tuple[list[Peer], list[str]]:
    """The peers among the cluster's Nodes (raw dicts): those that carry a report, less this
    node; and a line for each report that could not be read."""
    found: list[Peer] = []
    unread: list[str] = []
    for node in nodes:
        meta = node.get("metadata")
        if not isinstance(meta, dict):
            continue
        name = meta.get("name")
        annotations = meta.get("annotations") or {}
        if not isinstance(name, str) or name == me or not isinstance(annotations, dict):
            continue
        text = annotations.get(ANNOTATION)
        if not isinstance(text, str):
            continue
        try:
            found.append(Peer(name, parse(text, own)))
        except ReportError as e:
            unread.append(f"{name}: {e}")
    return sorted(found, key=lambda p: p.name), unread
