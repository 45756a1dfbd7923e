"""The fabric watch's own probes and verdict (`hostnet-rdma fabric-watch --once --peer`) on a real
silent drop: two namespace nodes at MTU 9000 whose far end drops every packet over 1500 bytes
without a word (seed 001; ../shared/recipes/mtu-blackhole), and a peer that answers nothing.
The agent's condition names the peer and the sizes; an absent peer is unreachable, not a drop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rendezvous.test_path_probe import _jumbo, _link_of
from tests.rendezvous.testbed import Testbed

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.rendezvous


def _round(bed: Testbed, tmp_path: Path, *peers: str, prefix: tuple[str, ...] = ()) -> tuple[int, dict[str, object]]:
    (tmp_path / "sys").mkdir(exist_ok=True)  # a node without RDMA devices: probes go out of --netdev
    (tmp_path / "proc").mkdir(exist_ok=True)
    argv = [*prefix, sys.executable, "-m", "app.cli", "fabric-watch", "--once", "--node", "node-0", "--interval", "10",
            "--netdev", _link_of(bed, bed.nodes[0].netns), "--sysfs-root", str(tmp_path),
            *[f"--peer={p}" for p in peers]]  # fmt: skip
    p = subprocess.run(bed.command(bed.nodes[0], argv), capture_output=True, text=True, cwd=ROOT, timeout=90)
    assert p.returncode in (0, 1), p.stderr
    out: dict[str, object] = json.loads(p.stdout)
    return p.returncode, out


def test_the_condition_names_the_peer_and_the_sizes_of_a_silent_drop(bed: Testbed, tmp_path: Path) -> None:
    _jumbo(bed, drop=True)
    rc, out = _round(bed, tmp_path, f"node-1={bed.nodes[1].address}")
    c = out["condition"]
    assert rc == 1 and isinstance(c, dict) and (c["status"], c["reason"]) == ("True", "LargeFramesDropped"), out
    dev = _link_of(bed, bed.nodes[0].netns)
    head = f"packets of up to 1500 B cross to node-1 ({bed.nodes[1].address} on {dev}), "
    assert str(c["message"]).startswith(head) and str(c["message"]).endswith(" B do not"), c
    first_lost = int(str(c["message"])[len(head) :].split()[0])
    assert 1500 < first_lost <= 1517


def test_a_healthy_jumbo_path_and_a_peer_that_answers_nothing(bed: Testbed, tmp_path: Path) -> None:
    _jumbo(bed, drop=False)
    rc, out = _round(bed, tmp_path, f"node-1={bed.nodes[1].address}")
    c = out["condition"]
    assert rc == 0 and isinstance(c, dict) and (c["status"], c["reason"]) == ("False", "NoRdmaDevices"), out
    assert "up to 9000 B" in str(c["message"])
    absent = bed.nodes[1].address.rsplit(".", 1)[0] + ".99"
    rc, out = _round(bed, tmp_path, f"node-1={bed.nodes[1].address}", f"ghost={absent}")
    c = out["condition"]
    assert rc == 1 and isinstance(c, dict) and c["reason"] == "PeerUnreachable", out
    assert "ghost" in str(c["message"]) and "large" not in str(c["message"]).lower()


# No capability at all (root with an empty bounding set: the kernel checks capabilities, not the
# user, for raw sockets, and the group for unprivileged ICMP ones): the agent as a non-root pod
# with no NET_RAW runs it. setpriv comes after the node's unshare, which needs CAP_SYS_ADMIN.
NO_CAPS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--")


def test_without_net_raw_the_probe_uses_an_unprivileged_icmp_socket_where_the_node_allows(
    bed: Testbed, tmp_path: Path
) -> None:
    _jumbo(bed, drop=True)
    ns = bed.nodes[0].netns
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ping_group_range=1 0"], check=True)
    rc, out = _round(bed, tmp_path, f"node-1={bed.nodes[1].address}", prefix=NO_CAPS)
    c = out["condition"]
    assert isinstance(c, dict) and (c["status"], c["reason"]) == ("Unknown", "ProbeFailed"), out
    assert "needs CAP_NET_RAW" in str(c["message"]) and "ping_group_range does not include group 0" in str(
        c["message"]
    ), c
    # The node lets every group open one (systemd's default): the same round, no capability.
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"], check=True)
    rc, out = _round(bed, tmp_path, f"node-1={bed.nodes[1].address}", prefix=NO_CAPS)
    c = out["condition"]
    assert rc == 1 and isinstance(c, dict) and (c["status"], c["reason"]) == ("True", "LargeFramesDropped"), out
    dev = _link_of(bed, ns)
    assert str(c["message"]).startswith(f"packets of up to 1500 B cross to node-1 ({bed.nodes[1].address} on {dev}), ")
