"""A stalled NCCL start-up, judged on real logs: tests/logs/nccl-stall-h200/ holds the ranks of
two Volcano jobs as the webhook mutates them (the e2e job, and the field report's own job with
its own train.py), run by scripts/device/blackhole.py on an H200 (torch 2.11, NCCL 2.28.9) as
two namespace nodes behind a bridge (../shared/recipes/gpu-mtu-blackhole/): at MTU 9000 end to
end, and with the bridge port towards node 1 at 1500 (a silent large-frame drop). The wrapper's
stall line, the e2e row, `verify` and the path probe's pure parts are checked here."""

from __future__ import annotations

import importlib.util
import io
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.e2e import outcome
from app.verify import verify
from app.wrapper import nccllog, ncclwatch, pathprobe
from app.wrapper import torchrun as w

# The wrapper hands the watch its termination message and interface list.
WATCH = {"terminate": w.termination_message, "addresses": w.interface_addresses}

LOGS = Path(__file__).parent / "logs" / "nccl-stall-h200"
NODES = {"e2e": "e2e-volcano-worker-{}", "seed": "ddp-volcano-worker-{}"}


def log(job: str, mtu: int, i: int) -> str:
    return (LOGS / f"{job}-mtu{mtu}-{NODES[job].format(i)}.log").read_text()


def pods(job: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": NODES[job].format(i)}, "spec": {"nodeName": f"node-{i}"},
             "status": {"hostIP": f"192.0.2.1{i}"}} for i in (0, 1)]  # fmt: skip


# ------------------------------------------------------------------------------ the real runs
@pytest.mark.parametrize("job", ["e2e", "seed"])
def test_the_healthy_twin_completes_its_start_up_and_the_wrapper_adds_nothing(job: str) -> None:
    for i in (0, 1):
        text = log(job, 9000, i)
        assert " - Init START" in text and " - Init COMPLETE" in text
        assert nccllog.unfinished(text) == [] and nccllog.STALL not in text
        assert not any(c.name == "start-up" for c in verify(text).checks)
    if job == "e2e":
        logs = {NODES[job].format(i): log(job, 9000, i) for i in (0, 1)}
        done = [{**p, "status": {**p["status"], "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 0}}}]}}
                for p in pods(job)]  # fmt: skip
        assert outcome.progress(done, logs, "worker", 2).state == "completed"
        assert outcome.path_verdict(logs, done) == "to 64 MiB ok"


@pytest.mark.parametrize(("job", "bound"), [("e2e", 20), ("seed", 60)])
def test_on_the_black_hole_every_rank_names_the_stall_and_the_size(job: str, bound: int) -> None:
    """Both ranks print Init START, then nothing from NCCL; the wrapper's line comes `bound`
    seconds later (the e2e job sets 20, the field report's job has the default 60), names the
    interface NCCL chose and the largest packet that crosses to the peer, and goes on waiting."""
    for i, peer, iface in ((0, "192.0.2.11", "hre0"), (1, "192.0.2.10", "hre1")):
        text = log(job, 1500, i)
        assert len(nccllog.unfinished(text)) == 1
        (line,) = [ln for ln in text.splitlines() if ln.startswith(nccllog.STALL)]
        assert f"logged Init START {bound}s ago and no Init COMPLETE (network Socket, interface {iface})" in line
        assert f"Path to {peer} on {iface}: packets of up to 1500 B cross, 1517 B do not" in line
        assert f"a hop between this node and {peer} drops packets over 1500 B without a word" in line
        assert line.endswith("Still waiting, not stopping the job.")
        term = (LOGS / f"{job}-mtu1500-{NODES[job].format(i)}.termination").read_text()
        assert term == line
    # The side that sent NCCL's first large message also has TCP's word for it.
    assert "TCP: 2292 bytes sent and never acknowledged" in log(job, 1500, 0)


def test_the_e2e_row_names_the_stall_the_size_the_nodes_and_the_interface() -> None:
    logs = {NODES["e2e"].format(i): log("e2e", 1500, i) for i in (0, 1)}
    state = outcome.progress(pods("e2e"), logs, "worker", 2)
    assert state.state == "failed"
    assert state.detail.startswith("e2e-volcano-worker-0 on node-0: NCCL start-up stalled: 1 NCCL communicator")
    assert "packets of up to 1500 B cross, 1517 B do not" in state.detail
    assert outcome.path_verdict(logs, pods("e2e")) == "1517 B lost node-0->node-1 on hre0 (1500 B ok)"


def test_verify_names_a_start_up_that_never_completed() -> None:
    checks = {c.name: c for c in verify(log("seed", 1500, 0)).checks}
    start = checks["start-up"]
    assert not start.ok and "drops packets over 1500 B" in start.detail
    assert "Init START" in start.detail and "doctor --between" in start.hint
    # Without the wrapper's line (a log cut before it): still named, from NCCL's own lines.
    cut = log("seed", 1500, 0).split(nccllog.STALL)[0]
    start = next(c for c in verify(cut).checks if c.name == "start-up")
    assert not start.ok and start.detail == "1 NCCL communicator(s) logged Init START and no Init COMPLETE"


def test_the_stall_bound_is_read_from_the_pod_env() -> None:
    from app.wrapper import rules

    assert rules.stall_seconds({}) == 60.0
    assert rules.stall_seconds({rules.ENV_NCCL_STALL: "15"}) == 15.0
    assert rules.stall_seconds({rules.ENV_NCCL_STALL: "0"}) == 0.0  # never
    assert rules.stall_seconds({rules.ENV_NCCL_STALL: "soon"}) == 60.0


# ------------------------------------------------------------------------------ the watcher
def _replay(tmp_path: Path, text: str, env: dict[str, str], seconds: float) -> tuple[str, str]:
    """The watcher over one rank's NCCL lines (as NCCL writes them to its file), `seconds` long."""
    import threading

    d = tmp_path / "nccl"
    d.mkdir()
    term = tmp_path / "termination-log"
    term.write_text("")
    parent = subprocess.Popen(["sleep", "30"])
    out = io.StringIO()
    env = {"NCCL_DEBUG": "WARN", **env, "HOSTNET_RDMA_TERMINATION_LOG": str(term)}
    t = threading.Thread(target=ncclwatch.watch_transport, kwargs=WATCH, args=(str(d), env, parent.pid, lambda: parent.poll() is None,
                                                         0.05, out), daemon=True)  # fmt: skip
    (d / "nccl.node-0.1000.log").write_text("\n".join(ln for ln in text.splitlines() if " NCCL " in ln) + "\n")
    t.start()
    try:
        parent.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        parent.kill()
        parent.wait()
    t.join(timeout=30)
    return out.getvalue(), term.read_text()


def test_the_watcher_says_once_that_a_start_up_stalled_and_keeps_the_job(tmp_path: Path) -> None:
    """NCCL's lines of the black hole's rank 0 replayed: one line after the bound, into the
    termination message; torchrun is not stopped (it ran to its end, killed by the test)."""
    text = log("seed", 1500, 0).split(nccllog.STALL)[0]
    said, term = _replay(tmp_path, text, {"HOSTNET_RDMA_NCCL_STALL_SECONDS": "0.3"}, 2.0)
    lines = [ln for ln in said.splitlines() if ln.startswith(nccllog.STALL)]
    assert len(lines) == 1 and term == lines[0]
    assert "(network Socket, interface hre0)" in lines[0]
    # This test's torchrun (a sleep) holds no connection: nothing to probe, and it says so.
    assert "no connection to a peer found yet to probe. Still waiting." in lines[0]


@pytest.mark.parametrize("job", ["e2e", "seed"])
def test_the_watcher_is_silent_for_a_healthy_start_up(tmp_path: Path, job: str) -> None:
    said, term = _replay(tmp_path, log(job, 9000, 0), {"HOSTNET_RDMA_NCCL_STALL_SECONDS": "0.3"}, 1.5)
    assert nccllog.STALL not in said and nccllog.STALL not in term


def test_a_user_at_info_keeps_every_nccl_line_and_gets_the_watcher() -> None:
    """NCCL at INFO (the field report's jobs): NCCL writes to the wrapper's file, the watcher
    passes every line on; the level and subsystems stay the user's."""
    extra, d = ncclwatch.nccl_debug_redirect({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    assert d is not None and set(extra) == {"NCCL_DEBUG_FILE"}
    import shutil

    shutil.rmtree(d)


def test_the_watcher_passes_every_line_on_at_info(tmp_path: Path) -> None:
    text = log("e2e", 9000, 0)
    said, _ = _replay(tmp_path, text, {"NCCL_DEBUG": "INFO"}, 1.0)
    nccl = [ln for ln in text.splitlines() if " NCCL " in ln]
    assert [ln for ln in said.splitlines() if " NCCL " in ln] == nccl


# ------------------------------------------------------------------------------ the line
def _path(peer: str, crossed: list[int], lost: int, stuck: str = "", error: str = "") -> pathprobe.Path:
    p = pathprobe.Path(peer, "eth0")
    p.crossed, p.first_lost, p.stuck, p.error = crossed, lost, stuck, error
    return p


def test_the_stall_line_says_what_the_path_carries() -> None:
    every = ncclwatch.stall_line(61, 2, "IB", "bond0", [_path("10.0.0.2", [512, 1500, 9000], 0)])
    assert "2 NCCL communicators logged Init START 61s ago and no Init COMPLETE (network IB, interface bond0)" in every
    assert "Path to 10.0.0.2 on eth0: every size up to 9000 B crosses: the path carries every size probed" in every
    none = ncclwatch.stall_line(61, 1, "", "", [_path("10.0.0.2", [], 512)])
    assert "(network not chosen yet)" in none and "no ICMP echo answered at any size" in none
    stuck = ncclwatch.stall_line(61, 1, "Socket", "", [_path("10.0.0.2", [], 0, error="no raw socket for ICMP: denied",
                                                         stuck="3000 bytes sent and never acknowledged, 4 retransmissions")])  # fmt: skip
    assert "not probed (no raw socket for ICMP: denied); TCP: 3000 bytes" in stuck
    assert "TCP to 10.0.0.2 is not getting through" in stuck
    many = ncclwatch.stall_line(61, 1, "Socket", "", [_path(f"10.0.0.{i}", [512, 1500, 9000], 0) for i in range(2, 8)])
    assert many.count("Path to ") == 3 and "(6 peers probed)" in many
    dropped = ncclwatch.stall_line(
        61, 1, "Socket", "", [_path("10.0.0.2", [512, 9000], 0), _path("10.0.0.3", [512, 1500], 2048)]
    )
    assert dropped.count("Path to ") == 1 and "between this node and 10.0.0.3 drops packets over 1500 B" in dropped


# ------------------------------------------------------------------------------ the probe's parts
def test_the_walk_stops_at_the_first_lost_size_and_bisects_towards_the_boundary() -> None:
    sent: list[tuple[int, int]] = []

    def crosses(size: int, tries: int) -> bool:
        sent.append((size, tries))
        return size <= 4200

    crossed, lost = pathprobe.walk(crosses, [512, 1500, 4096, 8192, 9000])
    assert lost - max(crossed) <= 8 or len([s for s in sent if s[1] == 1]) == pathprobe.BISECT_STEPS
    assert max(crossed) <= 4200 < lost <= 4096 + (8192 - 4096) // 2**pathprobe.BISECT_STEPS + 4200 - 4096
    assert (8192, 2) in sent and (9000, 2) not in sent  # a loss in the walk is tried twice, then it stops
    assert pathprobe.walk(lambda s, t: False, [512, 1500]) == ([], 512)
    assert pathprobe.walk(lambda s, t: True, [512, 1500]) == ([512, 1500], 0)


def test_an_echo_request_is_a_valid_icmp_packet_of_the_size_asked() -> None:
    packet = pathprobe.echo_request(0x1234, 7, 1500)
    assert len(packet) + 20 == 1500 and packet[0] == 8
    assert pathprobe.checksum(packet) == 0  # a valid checksum sums to zero
    reply = bytes([0x45]) + bytes(19) + bytes([0, 0]) + packet[2:]
    assert pathprobe.echo_reply(reply) == (0x1234, 7)
    assert pathprobe.echo_reply(bytes([0x45]) + bytes(19) + packet) is None  # a request, not a reply
    assert pathprobe.echo_reply(b"\x45") is None


def test_tcp_sockets_of_the_job_are_read_from_proc(tmp_path: Path) -> None:
    """/proc as the kernel writes it: the job's processes, their socket inodes, /proc/net/tcp."""
    proc = tmp_path
    for pid, ppid, inode in ((100, 1, "5001"), (101, 100, "5002"), (200, 1, "5003")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0")
        (proc / str(pid) / "fd" / "3").symlink_to(f"socket:[{inode}]")

    def hexaddr(ip: str, port: int) -> str:
        return "{:08X}:{:04X}".format(struct.unpack("<I", socket.inet_aton(ip))[0], port)

    rows = [  # local, remote, state, tx_queue, retransmits, inode
        (hexaddr("10.0.0.1", 40000), hexaddr("10.0.0.2", 29500), "01", 2292, 6, "5002"),  # stuck, the job's
        (hexaddr("10.0.0.1", 40001), hexaddr("10.0.0.3", 29500), "01", 0, 0, "5001"),  # fine, the job's
        (hexaddr("10.0.0.1", 40002), hexaddr("10.0.0.9", 22), "01", 100, 3, "5003"),  # another process's
        (hexaddr("127.0.0.1", 40003), hexaddr("127.0.0.1", 29500), "01", 0, 0, "5001"),  # loopback
        (hexaddr("10.0.0.1", 29500), hexaddr("0.0.0.0", 0), "0A", 0, 0, "5001"),  # listening
    ]
    (proc / "net").mkdir()
    (proc / "net" / "tcp").write_text("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" + "".join(
        f"   {i}: {lo} {re} {st} {tx:08X}:00000000 01:00000010 {rt:08X}     0        0 {ino} 1 0000000000000000 20 4 30 10 -1\n"
        for i, (lo, re, st, tx, rt, ino) in enumerate(rows)))  # fmt: skip
    assert pathprobe.descendants(100, str(proc)) == {100, 101}
    view = pathprobe.tcp_view(100, str(proc))
    assert list(view) == ["10.0.0.2", "10.0.0.3"]
    assert view["10.0.0.2"] == ("10.0.0.1", "2292 bytes sent and never acknowledged, 6 retransmissions")
    assert view["10.0.0.3"] == ("10.0.0.1", "")


# ------------------------------------------------------------------------------ big jobs
def _train() -> Any:
    spec = importlib.util.spec_from_file_location("e2e_train", Path(outcome.__file__).parent / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [*range(0, 20), 511, 512, 1000])
def test_the_sweep_schedule_stays_a_few_rounds_whatever_the_nodes(n: int) -> None:
    """Each round's pairs run at once, so a sweep takes (rounds x one pair's time) however many
    nodes: 2 rounds for an even count (512 nodes: 2 x (bound + transfers), ~25 s with the
    default 10 s bound where walking node 0's 511 pairs one by one took up to 511 x 10 s)."""
    schedule = _train().rounds(n)
    pairs = [p for r in schedule for p in r]
    if n < 2:
        assert schedule == []
        return
    assert len(schedule) == (1 if n == 2 else 2 if n % 2 == 0 else 3)
    for r in schedule:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes)), r  # no node in two pairs of a round
    assert len(set(pairs)) == len(pairs) == (1 if n == 2 else n)  # the ring's edges, once each
    for node in range(n):
        assert sum(node in p for p in pairs) == (1 if n == 2 else 2)  # every node meets two others


def test_an_unprivileged_socket_refused_a_netdev_says_which_kernel_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before Linux 5.7 binding an unprivileged ICMP socket to a netdev needs CAP_NET_RAW: the
    probe's reason says so (the message only: this machine's kernel allows the bind, which
    tests/rendezvous/test_fabricwatch_paths.py runs for real)."""
    import errno

    class Refusing:
        def __enter__(self) -> Refusing:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def setsockopt(self, level: int, option: int, value: Any) -> None:
            if option == 25:  # SO_BINDTODEVICE
                raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(pathprobe, "icmp_socket", lambda: (Refusing(), False, ""))
    path = pathprobe.probe("192.0.2.7", "rdma0")
    assert path.error == (
        "cannot send from rdma0: Operation not permitted (an unprivileged ICMP socket is bound to a netdev from "
        "Linux 5.7 on; before, CAP_NET_RAW)"
    )
