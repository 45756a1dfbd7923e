"""NCCL's log, read as NCCL and its network plugins print it.

One reader for `hostnet-rdma verify` (a pod's log, or a file a user saved) and for the wrapper
(NCCL's debug files, while the job runs): which network NCCL chose and of what kind, the
devices and channels it opened, the communicators whose start-up has not completed, and the
errors users meet, each named with its cause and what to check.

Written from NCCL's own format strings, 2.4 to 2.28 (src/init.cc, src/transport/net.cc,
src/transport/net_ib*.cc, src/transport/net_socket.cc, src/bootstrap.cc, src/misc/socket.cc,
src/misc/ibvwrap.cc, src/debug.cc), the names the network plugins give themselves
(nccl-rdma-sharp-plugins, aws-ofi-nccl, GKE's GPUDirect-TCPX/TCPXO and gIB plugins), rdma-core's
`ibv_wc_status` numbers and PyTorch's ProcessGroupNCCL watchdog. docs/troubleshooting.md's
"Reading NCCL's log" lists the sources; tests/nccl-corpus/ holds the public logs it is held to,
tests/nccl-matrix/ real runs made for it, tests/nccl-formats/ NCCL's formats at every minor release.

The model of a run (Transport): the networks NCCL named and their kind, the nodes (nNodes, or a
communicator of one rank), the hosts that printed, the channels (network or within the node, with
GDRDMA), GPUDirect as NCCL reports it (Enabled/Disabled in its words, DMA-BUF), whether IB was
tried (sockets asked for, or fallen back to), whether the start-up completed; and the errors.

A line's prefix varies with where it was captured (mpirun's `[1,0]<stdout>:`, timestamps,
`[rank0]:`), so every pattern is searched anywhere in its line. Standard library only,
Python 3.8+: it runs in users' images as part of the wrapper.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

# ------------------------------------------------------------------------------ networks
# What kind of network a name NCCL prints ("Using network %s", "via NET/%s/...") is:
VERBS = "verbs"  # RDMA over verbs: NCCL's IB (InfiniBand and RoCE), the SHARP plugin's IBext*, GKE's gIB
OFI = "ofi"  # RDMA through libfabric: aws-ofi-nccl on EFA ("AWS Libfabric", "Libfabric", "OFI")
TCPX = "tcpx"  # GPUDirect over TCP: GKE's GPUDirect-TCPX / TCPXO (FasTrak) plugins; no RDMA, no fallback
SOCKET = "socket"  # NCCL's own TCP sockets through host memory: the fallback
UNKNOWN = "unknown"  # a plugin this reader does not know: never taken for sockets

# HPC-X's SHARP plugin: "IBext", "IBext_v6".."IBext_v11", and from NCCL 2.26 the placeholder name
# "NCCL RDMA Plugin v8" its structs carry until init (NCCL copies the name before); its UCX nets.
_VERBS_NAME = re.compile(r"(?:IB|IBext(?:_v\d+)?|NCCL RDMA Plugin v\d+|gIB|UCX(?:[-_]RMA)?)$")
# aws-ofi-nccl: "AWS Libfabric" before v1.13.0-aws, "Libfabric" since.
_OFI_NAME = re.compile(r"(?:AWS )?Libfabric$")
# GKE: "GPUDirectTCPX_v7" (nccl-plugin-gpudirecttcpx), "FasTrak" (TCPXO).
_TCPX_NAME = re.compile(r"(?:GPUDirectTCPX(?:_v\d+)?|FasTrak\w*)$")


def network_class(name: str) -> str:
    """The kind of network a name stands for; UNKNOWN for a name no source here gives."""
    name = name.strip()
    if name == "Socket":
        return SOCKET
    if _VERBS_NAME.match(name):
        return VERBS
    if _OFI_NAME.match(name):
        return OFI
    if _TCPX_NAME.match(name):
        return TCPX
    return UNKNOWN


CLASS_WORDS = {
    VERBS: "RDMA over verbs",
    OFI: "RDMA through libfabric (EFA)",
    TCPX: "GPUDirect over TCP (GKE's TCPX/TCPXO plugin): not RDMA, and not a fallback",
    SOCKET: "NCCL's TCP sockets through host memory",
    UNKNOWN: "a network plugin hostnet-rdma does not know",
}

# ------------------------------------------------------------------------------ line patterns
# init.cc (2.6+): "Using network %s" with the net's name, which may hold a space ("AWS Libfabric").
# A terminal's frame ("│ ... │") or trailing blanks after the name are not part of it.
_USING_NETWORK = re.compile(r"NCCL INFO Using network ([^\r\n│┃|]*?)[ \t]*(?:[│┃|][ \t]*)?$", re.M)
# transport/net.cc: "via NET/%s/%d%s%s" (name, device; "(%d)" the proxy rank of PXN since 2.12;
# "/GDRDMA", "/Shared"), in "Ring %02d : ..." lines (2.4-2.6) and "Channel %02d[/%d] : ..." lines.
_VIA = re.compile(
    r"via (?:NET/(?P<net>[^/\r\n]+?)/\d+(?:\(\d+\))?(?P<flags>(?:/[A-Za-z]+)*)|(?P<local>P2P|SHM|NVLS|CUMEM)\b)"
)
# net_ib.cc: "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/RoCE ... ; OOB eth0:10.0.0.1<0>"; the SHARP
# plugin prints its devices the same way ("/IB/SHARP").
_IB_USING = re.compile(r"NET/IB\s*:\s*Using (.*?)(?:;|$)", re.M)
_IB_DEVICE = re.compile(r"\[\d+\] ?([\w.-]+?)(?::\d+)*/(?:RoCE|IB)")
_IB_NO_DEVICE = re.compile(r"NET/IB\s*:\s*No device found")
# ibvwrap.cc / ibvsymbols.cc: NCCL could not dlopen rdma-core's libibverbs.
_NO_LIBIBVERBS = re.compile(
    r"(?:Failed to open|Count not open) libibverbs\.so|libibverbs\.so[.\d]*: cannot open shared object file"
)
# net.cc / plugin.cc: no external net plugin loaded ("No plugin found (libnccl-net.so)", "Could not
# find: libnccl-net.so"): only news when the NICs need one.
_NO_PLUGIN = re.compile(r"NET/Plugin ?: (?:No plugin found|Could not find:? ?libnccl-net)")
# param.cc / env: "%s set by environment to %s": sockets chosen by the user.
_NNODES = re.compile(r" nRanks \d+ nNodes (\d+) ")
# init.cc's Init lines, every release: "rank %d nranks %d": a communicator of one rank is within a node.
_NRANKS = re.compile(r"\brank \d+ nranks (\d+)\b.* - Init (?:START|COMPLETE)")
_SOCKETS_CHOSEN = re.compile(r"NCCL_IB_DISABLE set by environment to 1\b|NCCL_NET set by environment to Socket\b")
# NCCL's own IB in the running: its lines ("NET/IB : Using", "No device found"), or libibverbs failing.
_IB_TRIED = re.compile(r"NET/IB\b")
# NCCL set its networks up in this log (NET subsystem): the socket transport's device line, or the
# plugin loader's (2.24+). Socket with no IB line here: IB was never tried (NCCL_IB_DISABLE=1, or
# NCCL_NET=Socket), which NCCL says in words only under NCCL_DEBUG_SUBSYS=ENV.
# net_socket.cc "NET/Socket : Using [0]lo:127.0.0.1<0> [1]...": the interfaces NCCL's sockets use.
_SOCKET_IFACES = re.compile(r"NET/Socket ?: Using((?: \[\d+\]\S+)+)")
_NET_SETUP = re.compile(r"NET/Socket ?: Using \[|Initialized NET plugin Socket")
# GPUDirect RDMA as NCCL reports it: net_ib.cc (2.4-2.13) "NET/IB : GPU Direct RDMA Disabled for HCA %d
# '%s' (no module[ or not supported by GPU])"; topo.cc (2.14+) "NET/%s : GPU Direct RDMA %s for HCA %d
# '%s'" (the NIC's support: peermem or DMA-BUF); paths.cc "GPU Direct RDMA %s for GPU ... (distance %d
# ...)" (the topology: the GPU too far from the NIC for NCCL_NET_GDR_LEVEL, not a driver matter).
_GDR_SAID = re.compile(r"(?:NET/[\w ]+? ?: )?GPU Direct RDMA (Enabled|Disabled) for [^\r\n]*")
# init.cc (2.19+) "DMA-BUF is available on GPU device %d"; aws-ofi-nccl "Support for DMA-BUF registrations".
_DMABUF = re.compile(r"DMA-BUF is available on GPU|Support for DMA-BUF registrations: true|DMA-BUF support", re.I)
# init.cc: "ncclCommInitRank comm 0x... rank %d nranks %d cudaDev %d ... commId 0x%llx - Init START",
# then "... - Init COMPLETE" (2.18+; Init COMPLETE alone in every release).
INIT_STAGE = re.compile(r"commId (0x[0-9a-f]+)\b.* - Init (START|COMPLETE)")
# The rank inside that line ("rank %d nranks %d"): ranks of one process share no prefix when a
# launcher strips NCCL's host:pid:tid (`[3] NCCL INFO ...`).
_INIT_RANK = re.compile(r"\brank (\d+) nranks \d+")
# init.cc, every release: "comm %p rank %d nranks %d ... - Init COMPLETE"; what says the run got past
# its start-up without that line (pasted excerpts): its channels connected, or nccl-tests' results.
# "Channel %02d/%d : ..." (2.12+; from 2.19 connected after Init COMPLETE, at the first collective): a run
# past its start-up. The older "Ring %02d :" / "Channel %02d :" lines come during it: not a sign of its end.
_LATE_CHANNEL = re.compile(r"Channel \d+/\d+ : [^\r\n]*via ")
_COMPLETE = re.compile(r" - Init COMPLETE|Connected all (?:rings|trees)|# Avg bus bandwidth|Avg bus bandwidth\s*:")
# debug.cc's prefix: "%s:%d:%d [%d] " (host, pid, tid, cuda device).
_WHO = re.compile(r"([^\s:\[\]|<>]+):(\d+):\d+ \[[^\]]*\]")
# The wrapper's own line when NCCL's stalled start-up was seen (ncclwatch.stall_line).
STALL = "hostnet-rdma: warning: NCCL start-up stalled: "
# The wrapper's transport line (Transport.line), for a log without NCCL's INFO lines.
_LINE = re.compile(
    r'hostnet-rdma: transport=("[^"]*"|\S+) hcas=(\S+) \(\d+[^)]*\) gdrdma=(\d+)/(\d+) channels(?: nodes=(\d+))?'
)


def _rank(line: str) -> str:
    who = _WHO.search(line)
    return f"{who.group(1)}:{who.group(2)}" if who else ""


def unfinished(text: str) -> List[str]:
    """The communicators whose start-up began and did not complete in `text`, per rank: every
    rank of one communicator shares its commId, so `host:pid commId` (commId alone when the
    lines have no prefix)."""
    started: Dict[str, None] = {}
    for line in text.splitlines():
        m = INIT_STAGE.search(line)
        if not m:
            continue
        r = _INIT_RANK.search(line)
        key = f"{_rank(line)} {m.group(1)}{' rank ' + r.group(1) if r else ''}".strip()
        if m.group(2) == "START":
            started[key] = None
        else:
            started.pop(key, None)
    return list(started)


# ------------------------------------------------------------------------------ errors
# rdma-core libibverbs/verbs.h `enum ibv_wc_status` and ibv_wc_status_str (enum_strs.c).
WC_STATUS = {
    1: "local length error", 2: "local QP operation error", 3: "local EE context operation error",
    4: "local protection error", 5: "Work Request Flushed Error", 6: "memory management operation error",
    7: "bad response error", 8: "local access error", 9: "remote invalid request error",
    10: "remote access error", 11: "remote operation error", 12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded", 14: "local RDD violation error", 15: "remote invalid RD request",
    16: "aborted error", 17: "invalid EE context number", 18: "invalid EE context state",
    19: "fatal error", 20: "response timeout error", 21: "general error",
}  # fmt: skip
RETRY_EXC = 12
WR_FLUSH = 5

# What each completion status means for a job, and what to check.
_WC_CAUSE = {
    4: ("the NIC could not access the memory of a work request (local protection error): GPUDirect RDMA "
        "registration failing, most often PCIe Access Control Services (ACS) or the IOMMU redirecting "
        "peer-to-peer traffic between NIC and GPU, or memory freed while registered",
        "disable ACS on the PCIe switches (or run with iommu=pt) on the node, as NCCL's troubleshooting guide "
        "says; check nvidia-peermem / dma-buf; NCCL_NET_GDR_LEVEL=LOC shows whether GPUDirect is the cause"),
    5: ("a work request was flushed because its queue pair had already failed: a consequence of an earlier "
        "error, or NICs of the job that cannot reach each other", "the first completion error of the job (this "
        "rank's or a peer's), and that every NIC reaches the peers' NICs (NCCL_CROSS_NIC=0 on rail-only fabrics)"),
    10: ("the peer refused an RDMA access (remote access error): its memory registration failed or was "
         "released", "check the peer's log for an earlier error; GPUDirect registration on the peer (ACS, "
         "nvidia-peermem)"),
    12: ("RDMA messages to a peer were never acknowledged (transport retry counter exceeded)",
         "a link or route down between the nodes, a peer gone, or a hop that drops large frames without a "
         "word (an MTU mismatch): hostnet-rdma doctor --between NODE_A,NODE_B shows which sizes cross"),
    13: ("the peer had no receive buffer posted for too long (RNR retry counter exceeded): the peer process is "
         "stalled or gone", "check the peer's log: it stopped first"),
}  # fmt: skip


class Problem(NamedTuple):
    """One kind of error, from its first line in the log: `kind` is stable (the corpus and the
    tests name it), `primary` false for what only follows from an earlier error."""

    kind: str
    title: str
    line: str
    cause: str
    check: str
    primary: bool
    position: int
    times: int


# Kinds, in verify's words.
TITLES = {
    "libibverbs-missing": "libibverbs", "bootstrap-failure": "bootstrap", "ofi-error": "libfabric (EFA)",
    "ib-async-event": "RDMA device event", "ibv-call-failed": "verbs call", "retry-exceeded": "data path",
    "wc-error": "RDMA completion", "remote-error": "remote rank", "watchdog-timeout": "collective timeout",
    "cuda-error": "CUDA", "plugin-load": "network plugin", "invalid-usage": "NCCL call", "nccl-error": "NCCL error",
}  # fmt: skip

# net_ib.cc's completion error, in its seven shapes (2.4: "with error %d, opcode %d, len %d, vendor err
# %d"; 2.10 "from peer %s"; 2.20 "status=%d ..."; 2.28.7 "status=IBV_WC_RETRY_EXC_ERR(12) ...
# vendor_err=%u"); plugins print it under their own name (NET/gIB); PyTorch quotes it after "Last error:".
_COMPLETION = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+?) )?with (?:error |status=(?:\w+\()?)(?P<status>\d+)"
)
_VENDOR = re.compile(r"vendor[ _]err[ =](\d+)")
_RETRY_TEXT = re.compile(r"transport retry counter exceeded", re.I)
_IBV_CALL = re.compile(r"(?:Call to )?\b(ibv_\w+?)(?:\(\))? failed(?:\s*(?:with|:)\s*(?:error\s*)?(?P<why>[^\r\n]*))?")
# "Got async event : %s" (to 2.22), "async fatal event[ on QP (%p)]: %s", "Got async error event: %s",
# "Got non-fatal async event: %s(%d)" (2.28.7+); %s is rdma-core's ibv_event_type_str.
_ASYNC = re.compile(
    r"(?:Got (?:non-fatal )?async (?:error )?event|async fatal event(?: on \w+ \([^)]*\)[^:]*)?)\s*:\s*(?P<event>[^\r\n]+)"
)
_ROOT_CHECKED_IN = re.compile(r"Bootstrap Root : rank (\d+) of (\d+) ranks has already checked in")
# "Connect to %s failed : %s" (2.4-2.9), "Net : Connect to" (2.10-2.15), "socketStartConnect: Connect to"
# (2.16-2.26), "%s: connect to %s failed : %s" / "returned %s, exceeded error retry count" (2.27+).
_CONNECT = re.compile(r"[Cc]onnect to (?P<addr>\S+?)\s+(?:failed\s*:\s*|returned\s+)(?P<why>[^\r\n]+)")
_NO_IFACE = re.compile(
    r"Bootstrap ?: no socket interface found|NET/Socket ?: no interface found|NET/IB ?: No IP interface found|"
    r"NET/Socket ?: No usable listening interface found|Net ?: No interface found in the same subnet"
)
_ADDR_FAMILY = re.compile(r"Unsupported address family|unsupported IP family|is neither AF_INET")
# aws-ofi-nccl prints "NET/OFI " before its own words ("Couldn't open AV. RC: %d, ERROR: %s", "OFI
# fi_getinfo() call failed", "Unable to find a protocol that worked", "Unexpected number of remote
# rails"); libfabric's own log says "fi_getinfo: provider efa output empty list" (no EFA device).
# Every WARN the plugin prints is one (its NCCL_OFI_WARN macro, 677 formats in v1.5-v1.21:
# tests/nccl-formats/aws-ofi-nccl.tsv); an INFO line only with the words of a failure.
_OFI = re.compile(
    r"NCCL WARN NET/OFI (?P<warn>[^\r\n]+)"
    r"|NET/OFI\b[^\r\n]*?(?P<what>(?:Couldn't|Unable|Unexpected|Failed|failed|error|Error)[^\r\n]*)"
    r"|fi_getinfo: provider efa output empty list"
)
# ncclRemoteError (2.13+), and the socket transport's "Connection closed by remote peer %s" / "Call to
# recv from %s failed : %s" (misc/socket.cc): a peer went away.
_REMOTE = re.compile(
    r"ncclRemoteError|remote process exited or there was a network error|Connection closed by remote peer|"
    r"Call to (?:recv|send) (?:from|to) \S+ failed"
)
# NCCL 2.2's bootstrap: "Call to connect failed : %s" (no address).
_CONNECT_OLD = re.compile(r"Call to connect (?:failed\s*:\s*|returned\s+)(?P<why>[^\r\n,]+)")
# The program called NCCL wrongly (argcheck.cc: "%s : invalid root %d ...", ncclInvalidArgument/Usage).
# init.cc: "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx".
_INVALID = re.compile(
    r"NCCL WARN [^\r\n]*: invalid \w+|ncclInvalid(?:Argument|Usage)|NCCL Error [45]: invalid|Duplicate GPU detected"
)
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: (?P<work>WorkNCCL\([^)]*\))?(?:[^\r\n]*?ran for (?P<ms>\d+) milliseconds)?"
)
_CUDA = re.compile(
    r"Cuda failure '?(?P<what>[^'\r\n]+)'?|unhandled cuda error|CUDA error: (?P<what2>[^\r\n]+)|CUDA out of memory"
)
_PLUGIN_MISSING = re.compile(r"(?:NCCL_NET|network) '?([\w ]+?)'? (?:not found|could not be found)")
# plugin/net.cc (2.24+): no network at all initialised, e.g. NCCL_NET=IB where no RDMA device is.
_NO_NET = re.compile(r"Failed to initialize any NET plugin")

MAX_LINE = 400  # of a quoted NCCL line
# A line that may hold any of the above (most lines of a log hold none): one scan decides.
_ANY = re.compile(
    r"NCCL|NET/|Net :|Bootstrap|WARN|ibv_|Got completion|Watchdog|CUDA|Cuda|transport retry|libibverbs|fi_getinfo|"
    r"AF_INET|remote peer|nccl"
)
_OURS = "hostnet-rdma: warning: NCCL"


def _ib_completion(m: re.Match[str]) -> Tuple[str, str, str, bool]:
    status = int(m.group("status"))
    name = WC_STATUS.get(status, "unknown status")
    cause, check = _WC_CAUSE.get(status, (f"an RDMA work request failed on this rank ({name})",
                                          "look for the first error of the job (this rank's or a peer's)"))  # fmt: skip
    v = _VENDOR.search(m.string, m.end())
    vendor = f", vendor error {v.group(1)}" if v else ""
    peer = f" from {m.group('peer')}" if m.group("peer") else ""
    kind = "retry-exceeded" if status == RETRY_EXC else "wc-error"
    return kind, f"completion status {status} ({name}){peer}{vendor}: {cause}", check, status != WR_FLUSH


_IBV_CHECKS = {
    "reg_mr": ("memory registration failed", "the memlock limit (the webhook adds IPC_LOCK; the runtime's "
               "ulimit -l must be unlimited) and GPUDirect (nvidia-peermem / dma-buf) on the node"),
    "create_cq": ("a completion queue could not be created", "the memlock limit (IPC_LOCK, ulimit -l unlimited) "
                  "and the device's resources"),
    "create_qp": ("a queue pair could not be created", "the memlock limit (IPC_LOCK, ulimit -l unlimited) and the "
                  "device's resources"),
    "modify_qp": ("a queue pair could not be connected to its peer", "on RoCE the GID index (NCCL_IB_GID_INDEX must "
                  "be a RoCE v2 GID with an address on every port), the port's state, and the route to the peer "
                  "(hostnet-rdma doctor on the node)"),
    "open_device": ("the RDMA device could not be opened", "the device files in the container: /dev/infiniband "
                    "mounted with access (privileged, or the allocator's device plugin/DRA driver)"),
    "get_device_list": ("no RDMA device list", "the device files in the container and rdma-core's providers in "
                        "the image"),
}  # fmt: skip


def _ibv(m: re.Match[str]) -> Tuple[str, str]:
    call = m.group(1)
    why = (m.group("why") or "").strip()
    what, check = next(((w, c) for key, (w, c) in _IBV_CHECKS.items() if key in call),
                       ("a verbs call failed", "the device, the memlock limit and the port's state on the node"))  # fmt: skip
    if "Cannot allocate memory" in why or "errno 12" in why:
        check = "the memlock limit first (ENOMEM): the webhook adds IPC_LOCK; the runtime's ulimit -l must be unlimited"
    return f"{call} failed{': ' + why[:120] if why else ''}: {what}", check


def _async(event: str) -> Tuple[str, str]:
    low = event.lower()
    if "catastrophic" in low:
        return (f"the RDMA device reported '{event.strip()}': the adapter failed (firmware or hardware) on this node",
                "drain the node and reset the adapter (mlxfwreset / reboot); check its firmware and `dmesg`")  # fmt: skip
    if "port" in low and ("err" in low or "down" in low):
        return (f"the RDMA device reported '{event.strip()}': a port went down", "the link: cable, switch port, "
                "`ibstat` / `rdma link` on the node")  # fmt: skip
    return f"the RDMA device reported '{event.strip()}'", "the adapter and its ports on the node (dmesg, ibstat)"


def _connect(addr: str, why: str) -> Tuple[str, str]:
    low = why.lower()
    if "refused" in low:
        how = "nothing listened there: the peer process had not started or had already ended"
    elif "timed out" in low or "110" in low or "no route" in low or "unreachable" in low:
        how = "no answer: the address is not reachable from this node (wrong interface, a route, a firewall)"
    elif "abort" in low or "reset" in low:
        how = "the connection was cut: the peer ended, or something on the path closed it"
    else:
        how = why.strip()[:120]
    return (f"NCCL's bootstrap could not connect to {addr} ({why.strip()[:80]}): {how}",
            "NCCL_SOCKET_IFNAME and the address each rank advertises (its `Bootstrap : Using` line): the interface "
            "must carry an address the other nodes reach; loopback or the node's own host name never works across "
            "nodes")  # fmt: skip


def problems(text: str) -> List[Problem]:
    """Every kind of error in `text`, each from its first line, in the order they appear."""
    found: Dict[str, Problem] = {}

    def add(kind: str, line: str, cause: str, check: str, position: int, primary: bool = True) -> None:
        key = kind if primary or kind != "wc-error" else "wc-error-flush"
        old = found.get(key)
        if old is not None:
            if not line.startswith(_OURS):  # the wrapper's own quote of a line already counted
                found[key] = old._replace(times=old.times + 1)
            return
        found[key] = Problem(kind, TITLES[kind], line.strip()[:MAX_LINE], cause, check, primary, position, 1)

    for i, line in enumerate(text.splitlines()):
        if not _ANY.search(line):
            continue
        m = _COMPLETION.search(line)
        if m:
            kind, cause, check, primary = _ib_completion(m)
            add(kind, line, cause, check, i, primary)
        elif _RETRY_TEXT.search(line):
            add(
                "retry-exceeded",
                line,
                f"completion status 12 ({WC_STATUS[12]}): {_WC_CAUSE[12][0]}",
                _WC_CAUSE[12][1],
                i,
            )
        if _NO_LIBIBVERBS.search(line):
            add("libibverbs-missing", line,
                "NCCL could not load libibverbs (rdma-core) in this image, so it cannot use any RDMA device and "
                "falls back to sockets", "install rdma-core's libibverbs and its providers in the image "
                "(Debian/Ubuntu: libibverbs1 ibverbs-providers); the node's devices are not the cause", i,
                primary=False)  # fmt: skip
            continue
        m = _IBV_CALL.search(line)
        if m and "NCCL WARN" in line:
            cause, check = _ibv(m)
            add("ibv-call-failed", line, cause, check, i)
        m = _ASYNC.search(line)
        if m:
            cause, check = _async(m.group("event"))
            add("ib-async-event", line, cause, check, i)
        m = _ROOT_CHECKED_IN.search(line)
        if m:
            add("bootstrap-failure", line,
                f"two processes registered as rank {m.group(1)} of {m.group(2)} with one communicator's root: "
                "duplicate ranks (RANK / --node-rank wrong on two pods), a restarted rank, or two jobs sharing one "
                "rendezvous", "each pod's node rank and the job's rendezvous id (hostnet-rdma explain POD)", i)  # fmt: skip
        m = _CONNECT.search(line)
        if m and ("NCCL" in line):
            cause, check = _connect(m.group("addr"), m.group("why"))
            add("bootstrap-failure", line, cause, check, i)
        if _NO_IFACE.search(line):
            add("bootstrap-failure", line, "NCCL's start-up failed before it chose a network: it found no network "
                "interface to use for its bootstrap",
                "NCCL_SOCKET_IFNAME: it must name an interface of this (host-network) pod that has an address", i)  # fmt: skip
        elif _ADDR_FAMILY.search(line):
            add("bootstrap-failure", line, "an address NCCL was handed is neither IPv4 nor IPv6: a garbled NCCL "
                "unique id or NCCL_COMM_ID, or an interface without an address", "NCCL_COMM_ID and "
                "NCCL_SOCKET_IFNAME", i)  # fmt: skip
        m = _OFI.search(line)
        if m:
            what = m.group("warn") or m.group("what") or m.group(0)
            add("ofi-error", line, f"the EFA/libfabric plugin failed: {what.strip()[:160]}",
                "the EFA devices in the container (the vpc.amazonaws.com/efa resource, /dev/infiniband/uverbs*) and "
                "that the image's libfabric and aws-ofi-nccl match (fi_info -p efa in the container)", i)  # fmt: skip
        m = _CONNECT_OLD.search(line)
        if m:
            cause, check = _connect("the peer", m.group("why"))
            add("bootstrap-failure", line, cause, check, i)
        if _INVALID.search(line):
            # PyTorch's summary of NCCL's return code ("NCCL error in: ..., invalid usage", "ncclInvalidUsage:
            # This usually reflects ...") names no cause of its own: NCCL returns that code for a missing
            # network or a failed bootstrap too, and its WARN line, which a launcher's tee may print after
            # the summary, says which. NCCL's own WARN ("%s : invalid root %d") is the cause.
            if "Duplicate GPU detected" in line:
                add("invalid-usage", line, "two ranks of one communicator on one GPU: not the network",
                    "LOCAL_RANK and CUDA_VISIBLE_DEVICES on each rank (torch.cuda.set_device(LOCAL_RANK)), and "
                    "--nproc-per-node against the GPUs the pod was given", i)  # fmt: skip
            elif "NCCL WARN" in line:
                add("invalid-usage", line, "the program called NCCL with an invalid argument or in an invalid order: "
                    "not the network", "the program's collective calls (root, counts, one communicator used by two "
                    "threads) against NCCL's WARN line", i)  # fmt: skip
            else:
                add("nccl-error", line, "NCCL returned an error code (invalid usage) that PyTorch reports without its "
                    "cause: NCCL's own WARN line names it (a missing network, a failed bootstrap, a wrong call)",
                    "NCCL's WARN lines of this rank (NCCL_DEBUG=WARN or INFO); if none, the program's collective calls",
                    i, primary=False)  # fmt: skip
        if _REMOTE.search(line):
            add("remote-error", line, "another rank failed or lost its connection first (ncclRemoteError)",
                "that rank's own log names the cause", i, primary=False)  # fmt: skip
        m = _WATCHDOG.search(line)
        if m:
            add("watchdog-timeout", line, "a collective did not finish in time (PyTorch's NCCL watchdog): a rank is "
                "stuck or gone, ranks called different collectives, or the network stalled",
                "the other ranks' logs: the first rank that stopped progressing, and any NCCL WARN before this", i,
                primary=False)  # fmt: skip
        m = _CUDA.search(line)
        if m:
            add("cuda-error", line, "a CUDA error, not the network: " + (m.group(0).strip()[:160]),
                "the GPU and the program (memory, driver/CUDA versions); the network is not the cause", i)  # fmt: skip
        if _NO_NET.search(line):
            add("plugin-load", line, "NCCL could initialise no network: the one NCCL_NET names (or every one it "
                "tried) failed, e.g. NCCL_NET=IB where the container sees no RDMA device", "NCCL_NET, the RDMA "
                "devices in the container (/dev/infiniband) and the plugin library (NCCL_NET_PLUGIN)", i)  # fmt: skip
        m = _PLUGIN_MISSING.search(line)
        if m and "NCCL WARN" in line:
            add("plugin-load", line, "the network NCCL_NET asks for was not found: no network plugin of that name "
                "loaded", "NCCL_NET and the plugin library in the image (NCCL_NET_PLUGIN, LD_LIBRARY_PATH)", i)  # fmt: skip
    return sorted(found.values(), key=lambda p: p.position)


def first_cause(found: List[Problem]) -> Optional[Problem]:
    """The error that explains the others: the first primary one, else the first."""
    return next((p for p in found if p.primary), found[0] if found else None)


# ------------------------------------------------------------------------------ transport
class Transport:
    """What NCCL chose, from its INFO lines (one rank's or several ranks'), else from the
    wrapper's transport line."""

    def __init__(self, text: str) -> None:
        named = sorted(set(n for n in _USING_NETWORK.findall(text) if n))
        net_channels: List[Tuple[str, str]] = []
        local = 0
        for m in _VIA.finditer(text):
            if m.group("local"):
                local += 1
            else:
                net_channels.append((m.group("net"), m.group("flags") or ""))
        via = sorted(set(n for n, _ in net_channels))
        # NCCL 2.4/2.5 print no "Using network" line, and pasted logs are often cut: the channels say it.
        networks = named or via
        if not networks and not net_channels:
            networks = self._older(text)
        self.networks = networks
        self.network = ",".join(networks)
        self.named = bool(named)
        found: List[str] = []
        for line in _IB_USING.findall(text):
            found += [d for d in _IB_DEVICE.findall(line) if d not in found]
        self.hcas = found
        self.no_device = bool(_IB_NO_DEVICE.search(text))
        self.no_libibverbs = bool(_NO_LIBIBVERBS.search(text))
        self.no_plugin = bool(_NO_PLUGIN.search(text))
        # NCCL 2.28 with no RDMA device still says "NET/IB : Using [RO]; OOB eth0" after
        # "NET/IB : No device found.": no device either way.
        self.ib_line = bool(found) or (bool(_IB_USING.search(text)) and not self.no_device)
        self.channels = len(net_channels)
        self.gdrdma = sum(1 for _, flags in net_channels if "/GDRDMA" in flags)
        self.local_channels = local
        # "comm … nRanks 16 nNodes 2 localRanks 8" (NCCL 2.20+, init.cc): the most nodes any
        # communicator of the log spans; 0 where no such line is there.
        self.nodes = max((int(n) for n in _NNODES.findall(text)), default=0)
        if not self.nodes and set(_NRANKS.findall(text)) == {"1"}:
            self.nodes = 1
        self.ib_tried = bool(_IB_TRIED.search(text)) or self.no_libibverbs
        self.sockets_chosen = bool(_SOCKETS_CHOSEN.search(text)) or (
            self.networks == ["Socket"] and bool(_NET_SETUP.search(text)) and not self.ib_tried
        )
        # The hosts that printed NCCL's lines (its prefix "%s:%d:%d [%d]": host, pid, tid, device).
        self.hosts = sorted(set(m.group(1) for m in _WHO.finditer(text)))
        # Every interface NCCL's sockets may use is loopback: nothing it sends can leave the host.
        ifaces = [i for m in _SOCKET_IFACES.finditer(text) for i in m.group(1).split()]
        self.loopback = bool(ifaces) and all(re.match(r"\[\d+\](?:lo\b|[^:]*:127\.|[^:]*:::1<)", i) for i in ifaces)
        gdr = [m.group(0).strip() for m in _GDR_SAID.finditer(text)]
        self.gdr_enabled = any("Enabled" in g.split(" for ")[0] for g in gdr)
        # NCCL's own words when the NIC cannot do GPUDirect (no peermem module, no DMA-BUF): not the topology's.
        self.gdr_off = next((g for g in gdr if "Disabled" in g.split(" for ")[0] and "distance" not in g), "")
        self.dmabuf = bool(_DMABUF.search(text))
        # The run got past its start-up: NCCL's Init COMPLETE, its channels, or nccl-tests' results.
        self.complete = bool(_COMPLETE.search(text)) or bool(_LATE_CHANNEL.search(text))
        retry = _RETRY_TEXT.search(text) or next(
            (m for m in _COMPLETION.finditer(text) if m.group("status") == str(RETRY_EXC)), None)  # fmt: skip
        self.retry = retry.group(0) if retry else ""
        self.ready = "Init COMPLETE" in text and bool(networks)
        self.from_wrapper = False
        if not networks:
            said = _LINE.search(text)
            if said:  # the wrapper saw NCCL's lines that this log does not have
                name = said.group(1).strip('"')
                self.networks = [] if name == "-" else name.split(",")
                self.network = ",".join(self.networks)
                self.hcas = [] if said.group(2) == "-" else said.group(2).split(",")
                self.ib_line = bool(self.hcas)
                self.gdrdma, self.channels = int(said.group(3)), int(said.group(4))
                self.nodes = int(said.group(5) or 0)  # the wrapper's line says it since NCCL printed nNodes
                self.ready = self.from_wrapper = self.complete = True

    @staticmethod
    def _older(text: str) -> List[str]:
        """NCCL 2.4/2.5 (no "Using network" line) before any channel: the net that initialised.
        NCCL initialises its socket transport only once IB (and any plugin) did not: its device
        line, with no IB device line, says Socket, IB disabled or failed alike."""
        if _IB_DEVICE.search("\n".join(_IB_USING.findall(text))):
            return ["IB"]
        if re.search(r"NET/Socket\s*:\s*Using \[", text):
            return ["Socket"]
        return []

    @property
    def classes(self) -> List[str]:
        return sorted(set(network_class(n) for n in self.networks))

    @property
    def net_class(self) -> str:
        """One class for the log: SOCKET when any rank fell back, else the one class seen."""
        classes = self.classes
        if not classes:
            return ""
        if SOCKET in classes:
            return SOCKET
        return classes[0] if len(classes) == 1 else UNKNOWN

    @property
    def rdma(self) -> bool:
        return self.net_class in (VERBS, OFI)

    @property
    def fallback(self) -> bool:
        """NCCL's network is its TCP sockets (what verify names a fallback)."""
        return self.net_class == SOCKET

    @property
    def single_node(self) -> bool:
        """Every channel within the node (P2P, SHM, NVLS): the network carried none of the data."""
        return self.channels == 0 and self.local_channels > 0 and not self.from_wrapper

    @property
    def node_count(self) -> str:
        """How many nodes NCCL says its communicators span ("nNodes", 2.20+), else the hosts that printed."""
        return str(self.nodes) if self.nodes else (f"{len(self.hosts)} host(s) seen" if self.hosts else "unknown")

    @property
    def within_node(self) -> bool:
        """Every communicator so far within the node (NCCL says nNodes 1, or every channel is):
        NCCL names a network, Socket too, that carries none of the data."""
        if self.channels or (self.from_wrapper and self.nodes != 1):
            return self.loopback and self.nodes <= 1 and self.networks == ["Socket"]
        return self.loopback or self.nodes == 1 or (self.nodes == 0 and self.local_channels > 0)

    @property
    def socket_traffic(self) -> bool:
        """NCCL moves data between nodes over its sockets: what requireRdma stops."""
        return self.fallback and not self.within_node

    def line(self, hca: str) -> str:
        """The wrapper's one line (`hostnet-rdma verify` reads it): transport, HCAs against
        NCCL_IB_HCA, GPUDirect channels."""
        wanted = [x.split(":")[0] for x in hca.lstrip("=^").split(",") if x]
        of = f" of NCCL_IB_HCA's {len(wanted)}" if wanted and hca.startswith("=") else ""
        name = self.network or "-"
        if " " in name:
            name = f'"{name}"'
        nodes = f" nodes={self.nodes}" if self.nodes else ""  # within one node: requireRdma and verify let it be
        return (f"transport={name} hcas={','.join(self.hcas) or '-'} ({len(self.hcas)}{of}) "
                f"gdrdma={self.gdrdma}/{self.channels} channels{nodes}")  # fmt: skip


# Lines the wrapper keeps from NCCL's debug files for this reader (the rest it only passes on).
def wanted(line: str) -> bool:
    return (
        " NCCL WARN " in line
        or "Using network" in line
        or "NET/" in line
        or "via " in line
        or "Init COMPLETE" in line
        or " nNodes " in line
        or "set by environment" in line
        or "libibverbs" in line
        or "NET plugin" in line
        or "GPU Direct RDMA" in line
        or "DMA-BUF" in line
        or " - Init " in line
    )
