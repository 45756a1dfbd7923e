"""Which packet sizes cross to a peer, for the wrapper's line when NCCL's start-up stalls.

A hop that drops large frames without a word (an MTU mismatch on a switch port, seed 001) lets
NCCL's small handshakes through and swallows its first large exchange: `Init START`, then
silence. This module asks the kernel what it already knows and the peer what it answers,
without a port of its own (another job may hold any port):
- the TCP sockets of the job's processes (/proc/PID/fd, /proc/net/tcp): their peers, and bytes
  sent but never acknowledged after retransmissions;
- ICMP echo with don't-fragment set (a raw socket: host-network pods have CAP_NET_RAW; without
  it, an unprivileged ICMP socket where the node's net.ipv4.ping_group_range lets the process's
  group open one, as `ping` does), sizes from 512 B up to the interface's MTU, then a bisection between the last size answered and the
  first one lost. A peer's kernel answers echo itself, so nothing needs to listen.
Each lost size costs its timeout, so a whole probe of one peer takes at most ~8 s; peers are
probed at once (one thread each, MAX_PEERS of them).
Standard library only, Python 3.8+: it runs in users' images as part of the wrapper.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

# IP packet sizes (what an MTU limits): below any MTU, IPv6's minimum, Ethernet's, jumbo ones.
SIZES = (512, 1280, 1500, 2048, 4096, 8192, 9000)
BISECT_STEPS = 5
MAX_PEERS = 8
IP_MTU_DISCOVER, IP_PMTUDISC_PROBE = 10, 3  # <linux/in.h>: set DF, ignore the cached path MTU
HEADERS = 28  # IPv4 + ICMP echo headers


class Path:
    """What is known of the path to one peer."""

    def __init__(self, peer: str, iface: str = "") -> None:
        self.peer = peer
        self.iface = iface
        self.crossed: List[int] = []
        self.first_lost = 0
        self.error = ""
        self.stuck = ""  # TCP's own evidence: bytes unacknowledged after retransmissions

    @property
    def largest(self) -> int:
        return max(self.crossed, default=0)

    def text(self) -> str:
        where = f"{self.peer} on {self.iface}" if self.iface else self.peer
        if self.error:
            said = f"{where}: not probed ({self.error})"
        elif self.first_lost and not self.crossed:
            said = f"{where}: no ICMP echo answered at any size (a firewall, or the peer is unreachable)"
        elif self.first_lost:
            said = f"{where}: packets of up to {self.largest} B cross, {self.first_lost} B do not"
        else:
            said = f"{where}: every size up to {self.largest} B crosses"
        return said + (f"; TCP: {self.stuck}" if self.stuck else "")


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, size: int) -> bytes:
    """An ICMP echo request that makes an IPv4 packet of `size` bytes."""
    payload = bytes(max(0, size - HEADERS))
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload


def echo_reply(packet: bytes, raw: bool = True) -> Optional[Tuple[int, int]]:
    """(ident, seq) of an echo reply as the socket receives it: a raw socket with the IPv4
    header first, an unprivileged ICMP socket from the ICMP header (its ident is the kernel's)."""
    start = 0
    if raw:
        if len(packet) < 20:
            return None
        start = (packet[0] & 0x0F) * 4
    if len(packet) < start + 8 or packet[start] != 0:
        return None
    _, _, _, ident, seq = struct.unpack("!BBHHH", packet[start : start + 8])
    return ident, seq


def icmp_socket() -> Tuple[Optional[socket.socket], bool, str]:
    """(socket, raw, why not): a raw ICMP socket (CAP_NET_RAW), else an unprivileged one (Linux
    "ping socket": the kernel owns its ident and checksum, and hands it only its own replies),
    where net.ipv4.ping_group_range includes the process's group; else None and why."""
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), True, ""
    except OSError as e:
        raw_error = e.strerror or str(e)
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), False, ""
    except OSError as e:
        return (
            None,
            False,
            (
                f"no raw socket for ICMP ({raw_error}: needs CAP_NET_RAW) and no unprivileged one "
                f"({e.strerror or e}: net.ipv4.ping_group_range does not include group {os.getgid()})"
            ),
        )


def walk(crosses: Callable[[int, int], bool], sizes: List[int], steps: int = BISECT_STEPS) -> Tuple[List[int], int]:
    """The sizes that cross and the first that does not (0: all crossed). `crosses(size, tries)`
    sends one size; a loss in the walk is tried twice (one lost packet is not a verdict), a
    bisection step once."""
    crossed: List[int] = []
    first_lost = 0
    for size in sizes:
        if crosses(size, 2):
            crossed.append(size)
            continue
        first_lost = size
        break
    if first_lost and crossed:
        low, high = crossed[-1], first_lost
        for _ in range(steps):
            if high - low <= 8:
                break
            mid = (low + high) // 2
            if crosses(mid, 1):
                low = mid
                crossed.append(mid)
            else:
                high = mid
        first_lost = high
    return sorted(crossed), first_lost


def mtu(iface: str) -> int:
    """The interface's MTU, asked of the kernel (SIOCGIFMTU): /sys may show another network
    namespace's interfaces than the process's own."""
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifreq = fcntl.ioctl(s.fileno(), 0x8921, struct.pack("16si12x", iface.encode()[:15], 0))
        return int(struct.unpack("16si12x", ifreq)[1])
    except (OSError, ImportError, struct.error):
        return 1500


def probe(peer: str, iface: str = "", timeout: float = 1.0, limit: int = 0) -> Path:
    """ICMP echo of each size to `peer` (IPv4) out of `iface` (empty: the route's), up to the
    interface's MTU, or `limit` when smaller (the peer's MTU, which the fabric watch knows)."""
    path = Path(peer, iface)
    if ":" in peer:
        path.error = "IPv6 peers are not probed"
        return path
    s, raw, why = icmp_socket()
    if s is None:
        path.error = why
        return path
    ident = random.randrange(1, 0xFFFF)
    seq = [0]
    with s:
        try:
            s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)
            if iface:
                s.setsockopt(socket.SOL_SOCKET, 25, iface.encode() + b"\0")  # SO_BINDTODEVICE
        except OSError as e:
            path.error = f"cannot send from {iface or 'the route'}: {e.strerror or e}" + (
                " (an unprivileged ICMP socket is bound to a netdev from Linux 5.7 on; before, CAP_NET_RAW)"
                if not raw and iface and e.errno == errno.EPERM
                else ""
            )
            return path

        def crosses(size: int, tries: int) -> bool:
            for _ in range(tries):
                seq[0] = (seq[0] + 1) & 0xFFFF
                try:
                    s.sendto(echo_request(ident, seq[0], size), (peer, 0))
                except OSError:
                    return False  # over the local MTU (EMSGSIZE) or no route
                deadline = time.monotonic() + timeout
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    s.settimeout(left)
                    try:
                        data, (src, _) = s.recvfrom(65535)
                    except OSError:
                        break
                    reply = echo_reply(data, raw)
                    if src == peer and reply is not None and reply[1] == seq[0] and (not raw or reply[0] == ident):
                        return True
            return False

        top = min(mtu(iface), SIZES[-1]) if iface else SIZES[-1]
        top = min(top, limit) if limit > 0 else top
        sizes = sorted({x for x in SIZES if x <= top} | {top})
        path.crossed, path.first_lost = walk(crosses, sizes)
    return path


def probe_all(peers: List[Tuple[str, str]], timeout: float = 1.0) -> List[Path]:
    """probe() of each (peer, iface), at once."""
    found: Dict[int, Path] = {}

    def one(i: int, peer: str, iface: str) -> None:
        found[i] = probe(peer, iface, timeout)

    threads = [threading.Thread(target=one, args=(i, p, f), daemon=True) for i, (p, f) in enumerate(peers[:MAX_PEERS])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [found[i] for i in sorted(found)]


# ---------------------------------------------------------------------------- TCP's own view
def descendants(root: int, proc: str = "/proc") -> Set[int]:
    """`root` and every process below it."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def socket_inodes(pids: Set[int], proc: str = "/proc") -> Set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{proc}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _address(hex_addr: str) -> Tuple[str, int]:
    ip, port = hex_addr.split(":")
    if len(ip) == 8:
        return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)
    raw = b"".join(struct.pack("<I", int(ip[i : i + 8], 16)) for i in range(0, 32, 8))
    text = socket.inet_ntop(socket.AF_INET6, raw)
    return (text[7:] if text.startswith("::ffff:") else text), int(port, 16)


class Conn:
    """One TCP socket of /proc/net/tcp: local and remote address, unacknowledged bytes, RTO
    retransmissions so far."""

    def __init__(self, local: str, remote: str, unacked: int, retransmits: int) -> None:
        self.local, self.remote, self.unacked, self.retransmits = local, remote, unacked, retransmits


def connections(inodes: Set[str], proc: str = "/proc") -> List[Conn]:
    """The established or connecting TCP sockets among `inodes`, loopback left out."""
    found = []
    for table in ("net/tcp", "net/tcp6"):
        try:
            with open(f"{proc}/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[9] not in inodes or fields[3] not in ("01", "02"):
                continue
            (local, _), (remote, _) = _address(fields[1]), _address(fields[2])
            if remote.startswith("127.") or remote == "::1" or remote == local:
                continue
            found.append(Conn(local, remote, int(fields[4].split(":")[0], 16), int(fields[6], 16)))
    return found


def tcp_view(root: int, proc: str = "/proc") -> Dict[str, Tuple[str, str]]:
    """Per peer of the job's processes (below `root`): (local address, what TCP says is stuck),
    peers with stuck bytes first."""
    by_peer: Dict[str, Tuple[str, int, int]] = {}
    for c in connections(socket_inodes(descendants(root, proc), proc), proc):
        _, unacked, retransmits = by_peer.get(c.remote, ("", 0, 0))
        if c.retransmits and c.unacked:
            unacked, retransmits = unacked + c.unacked, max(retransmits, c.retransmits)
        by_peer[c.remote] = (c.local, unacked, retransmits)
    order = sorted(by_peer, key=lambda p: (-by_peer[p][1], p))
    return {
        p: (by_peer[p][0], f"{by_peer[p][1]} bytes sent and never acknowledged, {by_peer[p][2]} retransmissions"
            if by_peer[p][1] else "")
        for p in order
    }  # fmt: skip
