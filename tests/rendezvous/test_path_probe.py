"""The wrapper's path probe (app/wrapper/pathprobe.py) against a real silent drop: two namespace
nodes on a link at MTU 9000 whose far end drops every packet over 1500 bytes in its own
firewall, no ICMP sent back (seed 001's OVS-DOCA case; ../shared/recipes/mtu-blackhole). The
kernel's own ICMP echo answers and its TCP state are what the probe reads."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rendezvous.testbed import Testbed

ROOT = Path(__file__).resolve().parents[2]
# Network namespaces of its own (root), as the rest of the tier.
pytestmark = pytest.mark.rendezvous
PROBE = "import json, sys; from app.wrapper import pathprobe as p; r = p.probe(sys.argv[1], sys.argv[2]); " \
        "print(json.dumps([r.crossed, r.first_lost, r.error, r.text()]))"  # fmt: skip


def _jumbo(bed: Testbed, drop: bool) -> None:
    for n in bed.nodes:
        dev = _link_of(bed, n.netns)
        subprocess.run(["ip", "-n", n.netns, "link", "set", dev, "mtu", "9000"], check=True)
    if drop:
        subprocess.run(["ip", "netns", "exec", bed.nodes[1].netns, "iptables", "-A", "INPUT", "-m", "length",
                        "--length", "1501:65535", "-j", "DROP"], check=True)  # fmt: skip


def _link_of(bed: Testbed, netns: str) -> str:
    out = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True, text=True).stdout
    return next(line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if "@" in line)


def _probe(bed: Testbed) -> tuple[list[int], int, str, str, float]:
    dev = _link_of(bed, bed.nodes[0].netns)
    t0 = time.monotonic()
    p = subprocess.run(bed.command(bed.nodes[0], [sys.executable, "-c", PROBE, bed.nodes[1].address, dev]),
                       capture_output=True, text=True, cwd=ROOT, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    crossed, first_lost, error, text = json.loads(p.stdout)
    return crossed, first_lost, error, text, time.monotonic() - t0


def test_every_size_crosses_a_healthy_jumbo_link(bed: Testbed) -> None:
    _jumbo(bed, drop=False)
    crossed, first_lost, error, text, seconds = _probe(bed)
    assert not error and first_lost == 0 and crossed[-1] == 9000, text
    assert text.endswith("every size up to 9000 B crosses") and seconds < 5, (text, seconds)


def test_the_probe_names_the_largest_packet_that_crosses_a_silent_drop(bed: Testbed) -> None:
    _jumbo(bed, drop=True)
    crossed, first_lost, error, text, seconds = _probe(bed)
    # 1500 crosses, 2048 does not; five halvings of the gap put the first lost size within 17 B.
    assert not error and max(crossed) == 1500 and 1500 < first_lost <= 1517, text
    assert f"packets of up to 1500 B cross, {first_lost} B do not" in text
    assert seconds < 10, seconds  # 2 tries of 2048 and 5 halvings lost, 1 s each


STUCK = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 29571), timeout=5)
c.sendall(b"x" * 8000)  # one segment at MSS 8948: larger than what crosses
time.sleep(30)
"""
SERVER = "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29571)); s.listen(1); c, _ = s.accept(); time.sleep(30)"


def test_tcp_names_the_bytes_stuck_towards_a_peer(bed: Testbed) -> None:
    """What the kernel already knows: a socket of the job's processes with bytes sent and never
    acknowledged, retransmitted. The wrapper finds the peers this way (no port of its own)."""
    from app.wrapper import pathprobe

    _jumbo(bed, drop=True)
    server = subprocess.Popen(bed.command(bed.nodes[1], [sys.executable, "-c", SERVER]))
    time.sleep(1)
    client = subprocess.Popen(bed.command(bed.nodes[0], [sys.executable, "-c", STUCK, bed.nodes[1].address]))
    try:
        deadline = time.monotonic() + 15
        view: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            # Read from node-0's network namespace: /proc/net/tcp is per namespace.
            code = f"import json; from app.wrapper import pathprobe as p; print(json.dumps(p.tcp_view({client.pid})))"
            out = subprocess.run(["ip", "netns", "exec", bed.nodes[0].netns, sys.executable, "-c", code],
                                 capture_output=True, text=True, cwd=ROOT, check=True).stdout  # fmt: skip
            view = {k: tuple(v) for k, v in json.loads(out).items()}  # type: ignore[misc]
            if view.get(bed.nodes[1].address, ("", ""))[1]:
                break
            time.sleep(1)
        local, stuck = view[bed.nodes[1].address]
        assert local == bed.nodes[0].address
        assert stuck.startswith("8000 bytes sent and never acknowledged,") and "retransmissions" in stuck, stuck
        assert pathprobe.descendants(client.pid) >= {client.pid}
    finally:
        for p in (client, server):
            p.kill()
            p.wait()
