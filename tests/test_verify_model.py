"""The reader's model of a run (issue #64), one case for each way public logs were misread: a
run within one node is one node whatever NCCL lists; a hang that prints nothing never passes;
GPUDirect as NCCL reports it; no wrong leads; a bootstrap without an interface is a start-up
failure; and the wrapper (its transport line, requireRdma) reads runs as verify does. The logs
are NCCL's (and RCCL's) line shapes with made-up hosts and values."""

from __future__ import annotations

import json
from pathlib import Path

from app.verify import verify
from app.wrapper import nccllog
from tests.nccl_render import SCENARIOS, render

MATRIX = Path(__file__).parent / "nccl-matrix"
V228 = "v2.28.9-1"


def test_rank_prefixed_lines_of_one_node_with_every_rank_complete_is_complete() -> None:
    """`[3] NCCL INFO ...` (host:pid:tid gone, as some launchers print), nNodes 1, every rank's
    Init COMPLETE: healthy within one node, not "cut"."""
    lines = []
    for r in range(4):
        lines.append(f"[{r}] NCCL INFO ncclCommInitRank comm 0x{r + 1:x} rank {r} nranks 4 cudaDev {r} nvmlDev {r} "
                     f"busId {r}000 commId 0xabc - Init START")  # fmt: skip
    for r in range(4):
        lines.append(f"[{r}] NCCL INFO comm 0x{r + 1:x} rank {r} nRanks 4 nNodes 1 localRanks 4 localRank {r} MNNVL 0")
        lines.append(f"[{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {(r + 1) % 4}[{(r + 1) % 4}] via P2P/CUMEM")
    for r in (2, 0, 3, 1):
        lines.append(f"[{r}] NCCL INFO ncclCommInitRank comm 0x{r + 1:x} rank {r} nranks 4 cudaDev {r} nvmlDev {r} "
                     f"busId {r}000 commId 0xabc - Init COMPLETE")  # fmt: skip
    log = "\n".join(["[0] NCCL INFO Using network Socket", *lines])
    assert nccllog.unfinished(log) == []
    report = verify(log, expect_wrapper=False)
    assert report.verdict == "healthy-single-node" and report.ok, report.table()
    # One rank's COMPLETE missing: that rank is pending, whatever the prefix.
    pending = "\n".join(x for x in log.splitlines() if not (x.startswith("[1]") and "COMPLETE" in x))
    assert verify(pending, expect_wrapper=False).verdict == "startup-stall"


def test_a_failed_net_plugin_then_sockets_with_p2p_channels_only_is_harmless() -> None:
    log = "\n".join([
        "gpu-0:10:10 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file",
        "gpu-0:10:10 [0] NCCL INFO NET/IB : No device found.",
        "gpu-0:10:10 [0] NCCL WARN NET/OFI Couldn't open a fabric provider",
        "gpu-0:10:10 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.5<0>",
        "gpu-0:10:10 [0] NCCL INFO Using network Socket",
        "gpu-0:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        "gpu-0:11:11 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC",
        "gpu-0:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
        "gpu-0:11:11 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 2000 - Init COMPLETE",
    ])  # fmt: skip
    report = verify(log, expect_wrapper=False)
    assert report.verdict == "healthy-single-node" and report.ok, report.table()
    assert any("harmless" in n and "libfabric" in n for n in report.notes)


def test_rccl_single_node_without_libibverbs_is_not_told_to_install_it() -> None:
    """RCCL prints NCCL's lines (its "NCCL INFO" prefix, its ibvwrap's "Failed to open
    libibverbs.so"); within one node nothing crosses a network."""
    log = "\n".join([
        "mi300-0:50:50 [0] NCCL INFO RCCL version 2.18.3+hip6.1 HEAD:8fd1ee8",
        "mi300-0:50:50 [0] NCCL INFO Failed to open libibverbs.so[.1]",
        "mi300-0:50:50 [0] NCCL INFO NET/Socket : Using [0]eth0:10.2.0.7<0>",
        "mi300-0:50:50 [0] NCCL INFO Using network Socket",
        "mi300-0:50:50 [0] NCCL INFO comm 0x5 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
        "mi300-0:50:50 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
        "mi300-0:50:50 [0] NCCL INFO comm 0x5 rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE",
    ])  # fmt: skip
    report = verify(log, expect_wrapper=False)
    assert report.verdict == "healthy-single-node" and report.ok, report.table()
    assert "libibverbs1" not in report.table()


def test_an_old_nccl_that_hangs_silently_under_mpirun_tag_output_never_passes() -> None:
    """NCCL 2.7 prints no Init START: a rank that chose IB and stopped shows no error, only no
    Init COMPLETE and no channel."""
    said = ("Bootstrap : Using [0]ib0:10.3.0.{r}<0>", "NET/Plugin : No plugin found (libnccl-net.so), using internal "
            "implementation", "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.3.0.{r}<0>", "Using network IB")  # fmt: skip
    log = "\n".join(
        f"[1,{r}]<stdout>:node{r}:{100 + r}:{100 + r} [0] NCCL INFO {x.format(r=r)}" for r in (0, 1) for x in said
    )
    report = verify(log, expect_wrapper=False)
    assert report.verdict == "startup-stall" and not report.ok, report.table()


def test_gpudirect_off_in_nccls_own_words_is_judged() -> None:
    run, steps, _ = SCENARIOS["roce-healthy"]
    lines = [x.replace("GPU Direct RDMA Enabled", "GPU Direct RDMA Disabled").replace("/GDRDMA", "")
             for x in render(V228, steps, run)]  # fmt: skip
    report = verify("\n".join(lines), expect_wrapper=False)
    assert report.verdict == "no-gdrdma", report.table()
    assert "NCCL said: NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" in report.table()
    # 2.4-2.13's words, with no channel line at all: still judged.
    old = "\n".join([
        "n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "n1:1:1 [0] NCCL INFO Using network IB",
        "n1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
        "n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 busId 1000 - Init COMPLETE",
    ])  # fmt: skip
    assert verify(old, expect_wrapper=False).verdict == "no-gdrdma"


def test_a_healthy_roce_run_with_dmabuf_and_no_gdrdma_channel_is_not_sent_to_nvidia_peermem() -> None:
    run, steps, _ = SCENARIOS["roce-dmabuf-no-gdr-channel"]
    report = verify("\n".join(render(V228, steps, run)), expect_wrapper=False)
    assert report.verdict == "healthy-verbs" and report.ok, report.table()
    assert "nvidia-peermem" not in report.table() and any("DMA-BUF" in n for n in report.notes)


def test_an_ibv_modify_qp_failure_is_not_sent_to_nvidia_peermem() -> None:
    log = "\n".join([
        "n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>",
        "n1:1:1 [0] NCCL INFO Using network IB",
        "n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
        "n1:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0",
        "n1:1:1 [0] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
    ])  # fmt: skip
    report = verify(log, expect_wrapper=False)
    assert report.verdict == "ibv-call-failed", report.table()
    assert "nvidia-peermem" not in report.table() and "GID" in report.table()


def test_a_bootstrap_without_an_interface_is_a_start_up_failure() -> None:
    text = (MATRIX / "bootstrap-ifname-missing--warn--rank0.log").read_text()
    report = verify(text, expect_wrapper=False)
    assert report.verdict == "bootstrap-failure"
    assert "start-up failed" in report.table() and "NCCL_SOCKET_IFNAME" in report.table()
    for line in ("NET/Socket : No usable listening interface found",
                 "Net : No interface found in the same subnet as remote address 10.0.0.2<1234>"):  # fmt: skip
        assert (
            verify(f"h:1:1 [0] misc/socket.cc:1 NCCL WARN {line}", expect_wrapper=False).verdict == "bootstrap-failure"
        )


def _wrapper_view(text: str) -> nccllog.Transport:
    """What the wrapper reads: the lines it keeps from NCCL's debug files (nccllog.wanted)."""
    return nccllog.Transport("\n".join(x for x in text.splitlines() if nccllog.wanted(x)))


def test_the_wrapper_reads_every_real_run_as_verify_does() -> None:
    """requireRdma never stops a run within one node, and stops sockets between nodes only; the
    wrapper's transport line says nodes=N, and verify reads that line as it reads NCCL's."""
    for row in map(json.loads, (MATRIX / "manifest.jsonl").read_text().splitlines()):
        text = (MATRIX / row["file"]).read_text(errors="replace")
        t = _wrapper_view(text)
        if not t.ready:
            continue
        if row["scenario"] == "one-node":
            assert t.within_node and not t.socket_traffic, row["file"]
            assert t.line("").endswith("nodes=1"), t.line("")
        elif row["expected"] == "socket-fallback":
            assert t.socket_traffic and not t.sockets_chosen, row["file"]
        elif row["expected"] == "healthy-socket":
            assert t.sockets_chosen, row["file"]
        said = f"hostnet-rdma: {t.line('')}"
        assert (
            verify(said, expect_wrapper=False).verdict.startswith(
                "healthy-single-node" if row["scenario"] == "one-node" else ("healthy", "socket")
            )
            or row["expected"] == "socket-fallback"
        ), (row["file"], said)


def test_require_rdma_keeps_a_network_it_does_not_know() -> None:
    log = (
        "h:1:1 [0] NCCL INFO Using network FancyNet\nh:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/FancyNet/0"
    )
    t = nccllog.Transport(log + "\nh:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1 - Init COMPLETE")
    assert t.net_class == nccllog.UNKNOWN and not t.socket_traffic


def test_a_terminal_frame_around_the_lines_is_not_part_of_the_networks_name() -> None:
    log = "│ h-0:1:1 [0] NCCL INFO Using network IB                      │\n│ h-0:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1  │"
    t = nccllog.Transport(log)
    assert t.network == "IB" and t.net_class == nccllog.VERBS
    assert verify(log, expect_wrapper=False).verdict == "startup-stall"  # chosen, never completed


def test_old_channel_lines_come_during_the_start_up_not_after_it() -> None:
    """Before 2.12 NCCL printed its ring/channel connections inside the start-up ("Channel %02d :"
    without "/%d"): a log that ends there has not shown Init COMPLETE. From 2.12 "Channel %02d/%d"
    lines, and channels connected after an Init START, say the exchange went through."""
    old = "\n".join([
        "n:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "n:1:2 [0] NCCL INFO Using network IB",
        "n:1:2 [0] NCCL INFO Channel 00 : 1[c7000] -> 0[87000] [receive] via NET/IB/0/GDRDMA",
    ])  # fmt: skip
    assert verify(old, expect_wrapper=False).verdict == "startup-stall"
    assert verify(old + "\nn:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1 - Init COMPLETE",
                  expect_wrapper=False).verdict == "healthy-verbs"  # fmt: skip
    new = "\n".join([
        "n:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        "n:1:2 [0] NCCL INFO Using network IB",
        "n:1:2 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0x9 - Init START",
        "n:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "n:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    ])  # fmt: skip
    report = verify(new, expect_wrapper=False)  # not a stall, and not a pass: the log ends before its answer
    assert report.verdict == "startup-stall" and any("ends during the start-up" in n for n in report.notes)
    assert verify(new.replace("/GDRDMA", ""), expect_wrapper=False).verdict == "no-gdrdma"  # what it shows


def test_a_fallback_in_a_log_that_does_not_say_its_nodes_says_so() -> None:
    """Before 2.20 NCCL prints no nNodes: a fallback in a start-up excerpt may be a run within one
    node, where it is harmless; verify says what the log shows and that it cannot tell."""
    text = (MATRIX / "two-nodes-default--info--rank0.log").read_text()
    lines = [x for x in text.splitlines() if " nNodes " not in x and " - Init " not in x and " via " not in x]
    report = verify("\n".join(lines), expect_wrapper=False)
    assert report.verdict == "socket-fallback"
    assert any("does not say how many nodes" in n and "1 host(s) seen" in n for n in report.notes), report.notes
    assert not any("how many nodes" in n for n in verify(text, expect_wrapper=False).notes)  # nNodes 2: it says


def test_sockets_on_loopback_only_never_leave_the_host() -> None:
    """NCCL_SOCKET_IFNAME=lo: every interface NCCL's sockets use is loopback, so nothing crosses a
    network and no fallback is blamed (a run across nodes that way fails at its bootstrap instead)."""
    log = "\n".join([
        "h:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
        "h:1:2 [0] NCCL INFO NET/IB : No device found.",
        "h:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
        "h:1:2 [0] NCCL INFO Using network Socket",
        "h:1:3 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer localhost<56086>",
    ])  # fmt: skip
    report = verify(log, expect_wrapper=False)
    assert nccllog.Transport(log).within_node and "fell back" not in report.table(), report.table()
    assert report.verdict == "remote-error"
    assert not nccllog.Transport(log.replace("[0]lo:127.0.0.1", "[0]eth0:10.0.0.1")).within_node
