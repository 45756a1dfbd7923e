"""`hostnet-rdma verify` and the wrapper's reader held to NCCL logs that people posted publicly
(tests/nccl-corpus/: each file verbatim below a first line naming its source; index.yaml gives
the NCCL version, the network, what the source thread established and the verdict it supports).
NCCL 2.2 to 2.30, NCCL's own IB (InfiniBand and RoCE) and sockets, the SHARP plugin's IBext, EFA's
aws-ofi-nccl, GKE's TCPX and TCPXO (FasTrak), single-node runs; healthy runs and the failures users meet. Also the shapes of each line as NCCL's source
prints them across versions (tests of the reader's patterns, not of the verdicts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app.verify import verify
from app.wrapper import nccllog

CORPUS = Path(__file__).parent / "nccl-corpus"
INDEX: list[dict[str, Any]] = yaml.safe_load((CORPUS / "index.yaml").read_text())
ENTRIES = {e["file"]: e for e in INDEX}


def text(name: str) -> str:
    return (CORPUS / name).read_text(errors="replace")


def test_every_file_has_an_entry_and_a_source_line() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.log"))
    assert files == sorted(ENTRIES), "tests/nccl-corpus/index.yaml and the .log files differ"
    for name in files:
        first = text(name).splitlines()[0]
        assert first.startswith("# Source: https://") and "Verbatim below this line" in first, name
        assert ENTRIES[name]["source"] in first, name
    healthy = [e for e in INDEX if e["healthy"]]
    assert len(INDEX) >= 40 and len(healthy) >= 12 and len(INDEX) - len(healthy) >= 20
    assert len({e["verdict"] for e in INDEX if not e["healthy"]}) >= 8  # failures of different kinds
    # Healthy runs of every class: NCCL's IB, RoCE, the SHARP plugin, EFA, GPU-direct TCP, sockets, one node.
    kinds = {"healthy-ib", "healthy-roce", "healthy-ibext", "healthy-efa", "healthy-tcpx", "healthy-socket",
             "healthy-single-node"}  # fmt: skip
    assert kinds <= {e["kind"] for e in healthy}
    # verify passes most healthy runs; each it fails says why in `note` (no GPUDirect, a cut log...).
    assert all(e.get("note") for e in healthy if e.get("ok") is False)
    assert sum(e.get("ok", True) for e in healthy) >= 9


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_verify_gives_the_verdict_the_source_supports(name: str) -> None:
    entry = ENTRIES[name]
    report = verify(text(name), expect_wrapper=False)
    said = report.table()
    assert report.verdict == entry["verdict"], f"{name}: {report.verdict} != {entry['verdict']}\n{said}"
    assert report.ok is bool(entry.get("ok", entry["healthy"])), f"{name}\n{said}"
    failing = [c for c in report.checks if not c.ok]
    hints = " ".join(c.hint for c in failing) + " " + " ".join(c.detail for c in failing)
    t = nccllog.Transport(text(name))
    # No hint points at a fix the log rules out.
    if not t.fallback:
        assert "fell back to sockets" not in hints, f"{name}\n{said}"
    if t.net_class == nccllog.VERBS:
        assert "did not open any RDMA device" not in hints, f"{name}\n{said}"
    if t.channels == 0:  # no NET channel: GPUDirect is not judged (no peermem hint for a stall, one node, ...)
        assert not any(c.name == "gdrdma channels" and c.hint for c in failing), f"{name}\n{said}"
    if t.no_libibverbs:
        assert "/dev/infiniband" not in hints.split("libibverbs")[0], f"{name}\n{said}"
    if " NCCL INFO " in text(name):
        assert "set NCCL_DEBUG=INFO" not in hints, f"{name}\n{said}"


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e["healthy"]))
def test_the_wrapper_never_stops_a_healthy_job(name: str) -> None:
    """HOSTNET_RDMA_REQUIRE_RDMA stops a job only on a real socket fallback: a healthy log of any
    plugin (IBext, EFA, TCPX) is never one, and every network of a healthy log is one it knows."""
    t = nccllog.Transport(text(name))
    if ENTRIES[name]["kind"] == "healthy-socket" and not t.sockets_chosen:
        # Sockets meant, but the log does not say so (no NCCL_IB_DISABLE): requireRdma is the
        # user saying RDMA is expected, and stopping is what it asks for.
        return
    assert not t.socket_traffic or t.sockets_chosen, name
    assert t.net_class != nccllog.UNKNOWN, f"{name}: {t.network!r} not classed"


@pytest.mark.parametrize(
    ("log", "verdict"),
    [
        ("good.log", "healthy-verbs"), ("socket-fallback.log", "socket-fallback"), ("no-gdrdma.log", "no-gdrdma"),
        ("too-few-devices.log", "wrong-devices"), ("retry-exceeded.log", "retry-exceeded"),
        # One process (nranks 1, nNodes 1): within one node at INFO level; at WARN level the wrapper's line of
        # then (no nodes=) does not say so.
        ("info-level-h200-socket.log", "healthy-single-node"), ("warn-level-h200-socket.log", "socket-fallback"),
        ("nccl-stall-h200/seed-mtu1500-ddp-volcano-worker-0.log", "startup-stall"),
        ("nccl-stall-h200/seed-mtu9000-ddp-volcano-worker-0.log", "socket-fallback"),
    ],
)  # fmt: skip
def test_our_own_runs_keep_their_verdicts(log: str, verdict: str) -> None:
    """The H200/H100 logs and the hand-made ones under tests/logs/ read as before."""
    from app.core.params import BM_GPU4_8_HCAS
    from app.verify import expected_devices

    report = verify((Path(__file__).parent / "logs" / log).read_text(), expected_devices(BM_GPU4_8_HCAS))
    assert report.verdict == verdict, report.table()


# ------------------------------------------------------------------ each line as NCCL's source prints it
# Format strings across versions (src/transport/net_ib.cc, net.cc, bootstrap.cc, misc/socket.cc,
# misc/ibvwrap.cc; nccl-rdma-sharp-plugins, aws-ofi-nccl, nccl-plugin-gpudirecttcpx).
COMPLETIONS = [
    ("NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129", 12, "129"),  # 2.3-2.9
    ("NET/IB : Got completion from peer 10.0.0.2<36178> with error 12, opcode 32671, len 0, vendor err 129", 12, "129"),
    ("NET/IB : Got completion from peer 10.0.0.2<36178> with error 4, opcode 1, len 0, vendor err 81 (Send) localGid "
     "::ffff:10.0.0.1 remoteGid ::ffff:10.0.0.2", 4, "81"),  # 2.18-2.19
    ("NET/IB : Got completion from peer 10.0.0.2<36178> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid "
     "::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2", 12, "129"),  # 2.20-2.21
    ("NET/IB: Got completion from peer 10.0.0.2<36178> with status=5 opcode=1 len=0 vendor err 249 (Recv) hca mlx5_0",
     5, "249"),  # 2.22-2.28.3
    ("NET/IB: Got completion from peer 10.0.0.2<36178> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) "
     "reqSize=0 vendor_err=129 req_type=Send hca mlx5_0", 12, "129"),  # 2.28.7-2.28.9
    ("NET/IB: Got completion from peer 10.0.0.2<36178> with status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_RDMA_WRITE(1) "
     "vendor_err=81  hca mlx5_0", 4, "81"),  # 2.29+
    ("NET/gIB : Got completion from peer 192.168.0.9<55224> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
     12, "129"),  # GKE's gIB plugin
]  # fmt: skip


@pytest.mark.parametrize(("line", "status", "vendor"), COMPLETIONS)
def test_the_completion_error_in_every_shape(line: str, status: int, vendor: str) -> None:
    warn = f"h:1:9 [0] transport/net_ib.cc:1696 NCCL WARN {line}"
    for shown in (warn, f"[2025-05-01 10:11:12] {warn}", line):  # 2.26+ timestamps; PyTorch's "Last error:"
        (p,) = nccllog.problems(shown)
        assert p.kind == ("retry-exceeded" if status == 12 else "wc-error")
        assert f"completion status {status} ({nccllog.WC_STATUS[status]})" in p.cause
        assert f"vendor error {vendor}" in p.cause
    assert p.primary is (status != 5)  # a flushed request follows from an earlier error


def test_unrelated_status_words_are_not_a_completion_error() -> None:
    for line in ("HTTP status=12 ok", "exit status 12", "job status: 12 pods", "NCCL INFO status 12 channels"):
        assert nccllog.problems(line) == [] and not nccllog.Transport(line).retry


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("h:1:1 [0] misc/ibvwrap.cc:100 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
         "ibv-call-failed"),
        ("h:1:1 [0] misc/ibvwrap.cc:100 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev "
         "mlx5_0:1, curr state INIT, next state RTR, local GID index 3", "ibv-call-failed"),
        ("h:1:1 [0] transport/net_ib.cc:80 NCCL WARN NET/IB : Got async event : port error", "ib-async-event"),
        ("h:1:1 [0] transport/net_ib.cc:80 NCCL WARN NET/IB : mlx5_0:1 async fatal event: local catastrophic error",
         "ib-async-event"),
        ("h:1:1 [0] transport/net_ib.cc:80 NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async event: port error(10)",
         "ib-async-event"),
        ("h:1:1 [0] bootstrap.cc:150 NCCL WARN Bootstrap Root : rank 3 of 16 ranks has already checked in",
         "bootstrap-failure"),
        ("h:1:1 [0] include/socket.h:403 NCCL WARN Connect to 10.0.0.1<41234> failed : Connection refused",
         "bootstrap-failure"),
        ("h:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.1<41234> failed : Software "
         "caused connection abort", "bootstrap-failure"),
        ("h:1:1 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: connect to 10.0.0.1<41234> returned Connection "
         "timed out, exceeded error retry count after 35 attempts", "bootstrap-failure"),
        ("h:1:1 [0] bootstrap.cc:40 NCCL WARN Bootstrap : no socket interface found", "bootstrap-failure"),
        ("h:1:1 [0] int nccl_ofi_ofiutils_init_connection(...):428 NCCL WARN NET/OFI Couldn't open AV. RC: -22, "
         "ERROR: Invalid argument", "ofi-error"),
        ("h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]", "libibverbs-missing"),
        ("h:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]", "libibverbs-missing"),
        ("RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version 2.19.3",
         "remote-error"),
        ("[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=880, OpType=BROADCAST, NumelIn=1, "
         "NumelOut=1, Timeout(ms)=1800000) ran for 1800902 milliseconds before timing out.", "watchdog-timeout"),
        ("h:1:1 [0] enqueue.cc:100 NCCL WARN Cuda failure 'out of memory'", "cuda-error"),
    ],
)  # fmt: skip
def test_each_error_as_nccl_prints_it(line: str, kind: str) -> None:
    (p,) = nccllog.problems(line)
    assert p.kind == kind and p.cause and p.check


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("IB", nccllog.VERBS), ("IBext", nccllog.VERBS), ("IBext_v8", nccllog.VERBS),
        ("NCCL RDMA Plugin v8", nccllog.VERBS), ("gIB", nccllog.VERBS), ("UCX", nccllog.VERBS),
        ("AWS Libfabric", nccllog.OFI), ("Libfabric", nccllog.OFI),
        ("GPUDirectTCPX_v7", nccllog.TCPX), ("FasTrak", nccllog.TCPX),
        ("Socket", nccllog.SOCKET), ("IB (stub)", nccllog.UNKNOWN), ("MyFabric", nccllog.UNKNOWN),
    ],
)  # fmt: skip
def test_every_network_name_is_classed_and_an_unknown_one_is_never_sockets(name: str, kind: str) -> None:
    assert nccllog.network_class(name) == kind


@pytest.mark.parametrize(
    ("lines", "network", "gdrdma", "channels"),
    [
        (["h:1:2 [0] NCCL INFO Ring 00 : 3 -> 0 [receive] via NET/IB/0/GDRDMA"], "IB", 1, 1),  # 2.4
        (["h:1:2 [0] NCCL INFO Ring 00 : 1[1c000] -> 2[1a000] [send] via NET/Socket/0"], "Socket", 0, 1),  # 2.5
        (["h:1:2 [0] NCCL INFO Channel 00 : 7[b2000] -> 8[1a000] [send] via NET/IB/3/GDRDMA/Shared"], "IB", 1, 1),
        (["h:1:2 [0] NCCL INFO Channel 00/0 : 7[b2000] -> 8[1a000] [send] via NET/IB/0(8)/GDRDMA"], "IB", 1, 1),
        (["h:1:2 [0] NCCL INFO Channel 01/0 : 15[7] -> 0[0] [receive] via NET/AWS Libfabric/1/GDRDMA"],
         "AWS Libfabric", 1, 1),
        (["h:1:2 [0] NCCL INFO Channel 02/1 : 3[3] -> 11[3] [send] via NET/IBext_v8/3/GDRDMA(PCI)/Shared"],
         "IBext_v8", 1, 1),  # 2.26+
    ],
)  # fmt: skip
def test_channel_lines_name_the_network_without_a_using_network_line(
    lines: list[str], network: str, gdrdma: int, channels: int
) -> None:
    t = nccllog.Transport("\n".join(lines))
    assert (t.network, t.gdrdma, t.channels, t.named) == (network, gdrdma, channels, False)


def test_a_stall_is_tracked_per_rank_not_per_communicator() -> None:
    """Every rank of one communicator prints the same commId: one rank's COMPLETE must not hide
    another's stall."""
    start = "{h}:{p}:{p} [0] NCCL INFO ncclCommInitRank comm 0x1 rank {r} nranks 2 cudaDev 0 nvmlDev 0 busId 1 commId 0xab - Init {s}"
    log = "\n".join([start.format(h="a", p=1, r=0, s="START"), start.format(h="b", p=2, r=1, s="START"),
                     start.format(h="a", p=1, r=0, s="COMPLETE")])  # fmt: skip
    assert nccllog.unfinished(log) == ["b:2 0xab rank 1"]
    assert verify(log, expect_wrapper=False).verdict == "startup-stall"
