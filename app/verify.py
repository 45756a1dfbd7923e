"""Read a training pod's log and check what the seed checks by hand: NCCL used IB (not
Socket), on the expected RDMA devices, with GPUDirect RDMA channels; and the wrapper's own
line (launcher, is_host, local_addr, endpoint). Pure: text in, findings out."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app.wrapper import nccllog
from app.wrapper.rules import ENV_NCCL_STALL, NCCL_STALL_DEFAULT, help_topic

# `hostnet-rdma help TOPIC` (docs/troubleshooting.md's sections) for what a failed check means.
SOCKETS = "NCCL uses sockets, or no GDRDMA"
STALLED = "NCCL prints `Init START` and then nothing"
RETRY = "Training hangs or crawls after NCCL connected: `transport retry counter exceeded`"
WRAPPER = "The pod was admitted unchanged (`PodLeftUnchanged`)"
ERRORS = "NCCL errors in the log"

_WRAPPER = re.compile(r"hostnet-rdma: launcher=(\S+) backend=(\S+) is_host=(\S+) local_addr=(\S+) endpoint=(\S+)")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""
    section: str = ""  # of docs/troubleshooting.md: `hostnet-rdma help` prints it


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # One word for the whole log: healthy-<class>, or the kind of its first cause (nccllog.Problem).
    verdict: str = ""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict, "checks": [asdict(c) for c in self.checks], "notes": self.notes}

    def table(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [f"{'PASS' if c.ok else 'FAIL'}  {c.name.ljust(width)}  {c.detail}" for c in self.checks]
        lines += [f"NOTE  {note}" for note in self.notes]
        hints = [f"  - {c.name}: {c.hint}" for c in self.checks if not c.ok and c.hint]
        sections = list(dict.fromkeys(c.section for c in self.checks if not c.ok and c.section))
        if hints:
            lines += ["", "What to do:", *hints, *(f"  See `hostnet-rdma help {help_topic(s)}`" for s in sections)]
        return "\n".join(lines)


def expected_devices(nccl_ib_hca: str | None) -> set[str] | None:
    """The exact device set a profile's NCCL_IB_HCA pins (`=` prefix), else None."""
    if not nccl_ib_hca or not nccl_ib_hca.startswith("="):
        return None
    return {d.split(":")[0] for d in nccl_ib_hca[1:].split(",") if d}


def verify(log: str, expected: set[str] | None = None, expect_wrapper: bool = True) -> Report:
    report = Report()
    found = nccllog.problems(log)
    t = nccllog.Transport(log)  # NCCL's INFO lines, else the wrapper's transport line
    if t.within_node and t.complete:
        # A run within one node: a network plugin or NIC that failed to start carried nothing.
        for p in [p for p in found if p.kind in _NETWORK_ONLY]:
            found.remove(p)
            report.notes.append(f"within one node, harmless: {p.title} ({p.line[:160]})")
    cause = nccllog.first_cause(found)
    pending = nccllog.unfinished(log)
    cut_in_startup = False
    if pending and t.channels and not any(ln.startswith(nccllog.STALL) for ln in log.splitlines()):
        # Channels connected over the network after Init START: the start-up exchange went through,
        # and the log ends before NCCL's Init COMPLETE (a cut log), not "Init START and then nothing".
        report.notes.append(f"{len(pending)} communicator(s) logged Init START and no Init COMPLETE, after "
                            f"connecting {t.channels} network channel(s): the log ends during the start-up")  # fmt: skip
        pending, cut_in_startup = [], True
    if pending:
        # NCCL's start-up never finished: what follows (transport, channels) was never decided.
        stalled = next((ln[len(nccllog.STALL) :] for ln in log.splitlines() if ln.startswith(nccllog.STALL)), "")
        explained = cause is not None and cause.primary
        report.checks.append(Check(
            "start-up", False,
            stalled or f"{len(pending)} NCCL communicator(s) logged Init START and no Init COMPLETE",
            f"explained by the {cause.title} error below" if explained and cause else
            "NCCL's start-up exchange never finished: most often a hop that drops large frames (NCCL's first "
            "messages are larger than a handshake) or a peer that never started. The wrapper probes the path "
            f"once a start-up stalls ({ENV_NCCL_STALL}, {NCCL_STALL_DEFAULT:g} s); hostnet-rdma doctor --between "
            "NODE_A,NODE_B checks it from the cluster", STALLED,
        ))  # fmt: skip
    said = " (the wrapper's transport line)" if t.from_wrapper else ""
    if not t.network:
        _no_network(report, log, t, cause)
    elif t.within_node:
        where = (
            f"NCCL says nNodes {t.nodes}" if t.nodes else f"every channel within the node ({t.local_channels} P2P/SHM)"
        )
        report.checks.append(Check("transport", True, f"Using network {t.network}; {where}: no network traffic to "
                                   "judge"))  # fmt: skip
    elif t.fallback and t.sockets_chosen:
        _transport(report, t, said)  # sockets asked for: no RDMA device or GPUDirect to look for
    else:
        _transport(report, t, said)
        if t.net_class == nccllog.VERBS or t.fallback:
            _devices(report, t, expected)
        if cause is None or not cause.primary:  # an error stopped the channels: GPUDirect is not the lead
            _gdrdma(report, t)
    if expected is None and t.net_class == nccllog.VERBS and t.hcas:
        report.notes.append("the HCAs were not compared with a profile: give --profile or --hca (a live pod's own "
                            "NCCL_IB_HCA is used when it pins devices with '=')")  # fmt: skip
    for p in found:
        _problem(report, p, log, t)

    if expect_wrapper:
        w = _WRAPPER.search(log)
        if w is None:
            report.checks.append(Check("wrapper", False, "no 'hostnet-rdma: launcher=' line",
                                       "torchrun was not wrapped: is the pod labelled and was it mutated? "
                                       "(hostnet-rdma explain)", WRAPPER))  # fmt: skip
        else:
            launcher, backend, is_host, local_addr, endpoint = w.groups()
            report.checks.append(Check("wrapper", True, f"launcher={launcher} backend={backend} is_host={is_host} "
                                       f"local_addr={local_addr} endpoint={endpoint}"))  # fmt: skip
    report.verdict = _verdict(report, t, cause, bool(pending))
    if report.verdict.startswith("healthy-") and (
        cut_in_startup or (not t.complete and t.net_class not in (nccllog.TCPX, nccllog.UNKNOWN))
    ):
        # Healthy so far, and the log ends before any sign that NCCL's start-up completed (no Init COMPLETE,
        # no channel): before 2.18 NCCL prints no Init START, so a hang and a cut log read alike. Never a pass.
        report.checks.append(Check("start-up", False, "NCCL chose its network and this log ends before its start-up "
                                   "completed (no Init COMPLETE, no channel line)", "give the whole log; if it is "
                                   "whole, a rank hangs in NCCL's start-up: a peer that never started, or a hop that "
                                   "drops large frames (hostnet-rdma doctor --between NODE_A,NODE_B)", STALLED))  # fmt: skip
        report.verdict = "startup-stall"
    return report


_VERBS_ERRORS = ("retry-exceeded", "wc-error", "ibv-call-failed", "ib-async-event")
# Errors of a network alone: within one node (nNodes 1, start-up complete) nothing crossed it.
_NETWORK_ONLY = ("plugin-load", "libibverbs-missing", "ofi-error", "ibv-call-failed", "ib-async-event")


def _no_network(report: Report, log: str, t: nccllog.Transport, cause: nccllog.Problem | None) -> None:
    """No network named and no channel line: say why, or what to set, from what the log has."""
    if t.no_libibverbs and (cause is None or not cause.primary):
        report.checks.append(Check("transport", False, "NCCL could not load libibverbs: it can use sockets only (its "
                                   "network line is not in this log)", "install rdma-core's libibverbs and its "
                                   "providers in the image (Debian/Ubuntu: libibverbs1 ibverbs-providers)"
                                   + ("; and no network plugin was loaded (NCCL_NET_PLUGIN, LD_LIBRARY_PATH) if these "
                                      "NICs need one" if t.no_plugin else ""), SOCKETS))  # fmt: skip
        return
    if cause is not None and cause.kind in _VERBS_ERRORS:
        # An error of NCCL's RDMA transport: it was running over verbs; the log just lacks the line.
        report.notes.append(f"no 'Using network' line in this log; the {cause.title} error below is NCCL's RDMA "
                            "transport's")  # fmt: skip
        return
    if cause is not None and cause.primary:
        # NCCL stopped before it chose (a bootstrap failure, a missing library): that error is the news.
        report.checks.append(Check("transport", False, f"NCCL never chose a network: it stopped at the {cause.title} "
                                   "error below", "", ERRORS))  # fmt: skip
        return
    if nccllog.unfinished(log):
        report.checks.append(Check("transport", False, "NCCL never chose a network: its start-up did not complete",
                                   "", STALLED))  # fmt: skip
        return
    if " NCCL INFO " in log:
        report.checks.append(Check("transport", False, "NCCL's INFO lines here do not name its network (no 'Using "
                                   "network' line, no channel line): the log is cut, or NCCL_DEBUG_SUBSYS leaves "
                                   "out INIT and NET", "give the whole log, with NCCL_DEBUG_SUBSYS=INIT,NET (or unset)",
                                   SOCKETS))  # fmt: skip
        return
    # Nothing about devices or channels can be judged from a log that says nothing of NCCL.
    report.checks.append(Check("transport", False, "no 'NCCL INFO Using network' line and no transport line of "
                               "the wrapper's", "was torchrun wrapped, and did NCCL start? Without the wrapper, "
                               "set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET", SOCKETS))  # fmt: skip


def _transport(report: Report, t: nccllog.Transport, said: str) -> None:
    kind = t.net_class
    detail = f"Using network {t.network}{said}"
    if t.network != "IB" and kind != nccllog.SOCKET:
        detail += f" ({nccllog.CLASS_WORDS[kind]})"
    if kind == nccllog.SOCKET:
        if t.sockets_chosen:
            report.checks.append(Check("transport", True, detail + " (chosen in the env: NCCL_IB_DISABLE=1 or "
                                       "NCCL_NET=Socket)"))  # fmt: skip
            return
        if t.no_libibverbs:
            hint = (
                "NCCL fell back to sockets because the image has no libibverbs (rdma-core): install "
                "libibverbs1 and ibverbs-providers in the image; the node's devices were never tried"
            )
        elif t.no_device:
            hint = (
                "NCCL fell back to sockets: it saw no RDMA device in the container ('NET/IB : No device "
                "found'): /dev/infiniband not mounted or not usable (privileged off without a device plugin), "
                "the allocator gave the pod none, or the node has no RDMA NIC"
            )
        else:
            hint = (
                "NCCL fell back to sockets: /dev/infiniband missing or unusable (privileged/device plugin), "
                "or NCCL_IB_HCA names no usable device"
            )
        if t.no_plugin:
            hint += ("; and no network plugin was loaded: if these NICs need one (EFA's aws-ofi-nccl, the SHARP "
                     "plugin), NCCL did not find its library (NCCL_NET_PLUGIN, LD_LIBRARY_PATH)")  # fmt: skip
        report.checks.append(Check("transport", False, detail, hint, SOCKETS))
        if not t.nodes and not t.channels:
            # Sockets matter only between nodes, and nothing here says this run spans several.
            report.notes.append(f"this log does not say how many nodes the run spans (NCCL prints nNodes from 2.20; "
                                f"here: {t.node_count}): within one node the network carries nothing and this is "
                                "harmless")  # fmt: skip
        return
    if kind == nccllog.UNKNOWN:
        report.checks.append(Check("transport", True, detail, ""))
        report.notes.append(f"network {t.network!r} is not one hostnet-rdma knows: not judged as RDMA or as "
                            "sockets (the wrapper's requireRdma keeps such a job running)")  # fmt: skip
        return
    report.checks.append(Check("transport", True, detail))


def _gdrdma(report: Report, t: nccllog.Transport) -> None:
    if t.net_class not in (nccllog.VERBS, nccllog.OFI, nccllog.SOCKET):
        return  # TCPX's GPU-direct path and unknown plugins: no GDRDMA flag to read
    if t.gdr_off and t.rdma and not t.gdrdma:
        # NCCL's own words: the NIC cannot reach GPU memory (no peermem module, no DMA-BUF).
        report.checks.append(Check("gdrdma channels", False, f"NCCL said: {t.gdr_off}", _NO_GDR[t.net_class], SOCKETS))
        return
    if t.channels == 0 and t.net_class != nccllog.SOCKET:
        report.notes.append("no NET channel line in this log: GPUDirect RDMA not judged")
        return
    if t.rdma and not t.gdrdma and (t.dmabuf or t.gdr_enabled):
        # The NIC can reach GPU memory (DMA-BUF / GDR enabled) and NCCL chose not to: the PCI distance
        # between GPU and NIC (NCCL_NET_GDR_LEVEL), not a missing driver.
        report.notes.append(f"0 of {t.channels} NET channels use GDRDMA though NCCL reports GPUDirect RDMA available "
                            f"({'DMA-BUF' if t.dmabuf else 'GPU Direct RDMA Enabled'}): NCCL kept it off for the PCI "
                            "distance between GPU and NIC (NCCL_NET_GDR_LEVEL), not for a missing driver")  # fmt: skip
        return
    gdr = t.gdrdma
    report.checks.append(Check("gdrdma channels", gdr > 0, f"{gdr} of {t.channels} NET channels use GDRDMA",
                               "" if gdr or not t.rdma else _NO_GDR[t.net_class], SOCKETS))  # fmt: skip


_NO_GDR = {
    nccllog.VERBS: "GPUDirect RDMA is off: check nvidia-peermem / dmabuf support on the node",
    nccllog.OFI: "GPUDirect RDMA is off: EFA has it only on some instance types (p4d, p5 and later); there, check "
    "nvidia-peermem / dmabuf (aws-ofi-nccl's 'Support for DMA-BUF registrations' line)",
}


def _problem(report: Report, p: nccllog.Problem, log: str, t: nccllog.Transport) -> None:
    times = f" ({p.times} times)" if p.times > 1 else ""
    if p.kind == "retry-exceeded":
        # NCCL's own hint for this error says the timeout is too short; when the job got as far
        # as connecting (small messages crossed), a silent drop of large frames is the likelier cause.
        small_passed = bool(t.network) or "Connected all" in log or "Init COMPLETE" in log
        report.checks.append(Check(
            "data path", False, f"'{t.retry or p.line}': RDMA messages to a peer were never acknowledged{times}",
            ("small messages passed (NCCL connected) and large ones were lost: most likely a hop on the path "
             "drops large frames without a word (an MTU or receive-buffer mismatch, not the timeout NCCL's hint "
             "names), or a link went down. Check it with hostnet-rdma doctor --between NODE_A,NODE_B")
            if small_passed else
            "the peer never answered: a link or a route down between the nodes; hostnet-rdma doctor --between "
            "NODE_A,NODE_B shows which sizes cross", RETRY,
        ))  # fmt: skip
        return
    report.checks.append(Check(p.title, False, f"{p.cause}{times}. NCCL said: {p.line}", f"check {p.check}", ERRORS))


def _verdict(report: Report, t: nccllog.Transport, cause: nccllog.Problem | None, pending: bool) -> str:
    """One word for the log: the kind of its first cause, else how the transport looks."""
    if cause is not None and cause.primary:
        return cause.kind
    if pending:
        return "startup-stall"
    if cause is not None and cause.kind != "libibverbs-missing":
        return cause.kind  # what follows from an error elsewhere (a peer's, a timeout)
    checks = {c.name: c for c in report.checks}
    transport = checks.get("transport")
    if transport is None or (not t.network):
        return "libibverbs-missing" if t.no_libibverbs else "no-network"
    if t.within_node:
        return "healthy-single-node"
    if t.fallback:
        if transport.ok:
            return "healthy-socket"
        return "libibverbs-missing" if t.no_libibverbs else "socket-fallback"
    gdr = checks.get("gdrdma channels")
    if gdr is not None and not gdr.ok:
        return "no-gdrdma"
    dev = checks.get("ib devices")
    if dev is not None and not dev.ok:
        return "wrong-devices"
    return f"healthy-{t.net_class}"


def _devices(report: Report, t: nccllog.Transport, expected: set[str] | None) -> None:
    if not t.ib_line:
        if not t.fallback:
            # NCCL names its network but the log lacks its device line (cut, or another subsystem only).
            report.notes.append("NCCL's device line ('NET/IB : Using [0]mlx5_0:1/...') is not in this log: the "
                                "devices were not judged")  # fmt: skip
            return
        if t.no_libibverbs:
            why = "the image has no libibverbs, so NCCL could not open any RDMA device"
        elif t.no_device:
            why = "NCCL saw no RDMA device in the container ('NET/IB : No device found')"
        else:
            why = "NCCL did not open any RDMA device"
        report.checks.append(Check("ib devices", False, "no 'NET/IB : Using' line", why, SOCKETS))
        return
    found = t.hcas
    detail = f"{len(found)} devices: {','.join(found)}"
    ok = bool(found)
    if expected is not None:
        extra = sorted(set(found) - expected)
        missing = sorted(expected - set(found))
        ok = ok and not extra and not missing
        if extra:
            detail += f"; not in the profile (front-end?): {','.join(extra)}"
        if missing:
            detail += f"; missing: {','.join(missing)}"
    hint = "check NCCL_IB_HCA in the pod env against the node's ports (hostnet-rdma doctor on the node)"
    report.checks.append(Check("ib devices", ok, detail, "" if ok else hint, SOCKETS))
