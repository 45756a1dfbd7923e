"""Read a training pod's log and check what the seed checks by hand: NCCL used IB (not
Socket), on the expected RDMA devices, with GPUDirect RDMA channels; and the wrapper's own
line (launcher, is_host, local_addr, endpoint). Pure: text in, findings out."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app.wrapper.fabric import STALL, Transport, unfinished
from app.wrapper.rules import ENV_NCCL_STALL, NCCL_STALL_DEFAULT, help_topic

# `hostnet-rdma help TOPIC` (docs/troubleshooting.md's sections) for what a failed check means.
SOCKETS = "NCCL uses sockets, or no GDRDMA"
STALLED = "NCCL prints `Init START` and then nothing"
RETRY = "Training hangs or crawls after NCCL connected: `transport retry counter exceeded`"
WRAPPER = "The pod was admitted unchanged (`PodLeftUnchanged`)"

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

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks], "notes": self.notes}

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
    pending = unfinished(log)
    if pending:
        # NCCL's start-up never finished: what follows (transport, channels) was never decided.
        stalled = next((ln[len(STALL) :] for ln in log.splitlines() if ln.startswith(STALL)), "")
        report.checks.append(Check(
            "start-up", False, stalled or f"{len(pending)} NCCL communicator(s) logged Init START and no Init COMPLETE",
            "NCCL's start-up exchange never finished: most often a hop that drops large frames (NCCL's first "
            "messages are larger than a handshake) or a peer that never started. The wrapper probes the path "
            f"once a start-up stalls ({ENV_NCCL_STALL}, {NCCL_STALL_DEFAULT:g} s); hostnet-rdma doctor --between "
            "NODE_A,NODE_B checks it from the cluster", STALLED,
        ))  # fmt: skip
    t = Transport(log)  # NCCL's INFO lines, else the wrapper's transport line
    said = " (the wrapper's transport line)" if t.from_wrapper else ""
    if not t.network:
        # Nothing about devices or channels can be judged from a log that says nothing of NCCL.
        report.checks.append(Check("transport", False, "no 'NCCL INFO Using network' line and no transport line of "
                                   "the wrapper's", "was torchrun wrapped, and did NCCL start? Without the wrapper, "
                                   "set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET", SOCKETS))  # fmt: skip
    else:
        report.checks.append(Check("transport", t.rdma, f"Using network {t.network}{said}",
                                   "" if t.rdma else "NCCL fell back to sockets: /dev/infiniband missing or unusable "
                                   "(privileged/device plugin), or NCCL_IB_HCA names no usable device", SOCKETS))  # fmt: skip
        _devices(report, t, expected)
        gdr = t.gdrdma
        report.checks.append(Check("gdrdma channels", gdr > 0, f"{gdr} of {t.channels} NET channels use GDRDMA",
                                   "" if gdr or not t.rdma else "GPUDirect RDMA is off: check nvidia-peermem / dmabuf "
                                   "support on the node", SOCKETS))  # fmt: skip
    if expected is None and t.rdma:
        report.notes.append("the HCAs were not compared with a profile: give --profile or --hca (a live pod's own "
                            "NCCL_IB_HCA is used when it pins devices with '=')")  # fmt: skip

    if t.retry:
        # NCCL's own hint for this error says the timeout is too short; when the job got as far
        # as connecting (small messages crossed), a silent drop of large frames is the likelier cause.
        small_passed = bool(t.network) or "Connected all" in log or "Init COMPLETE" in log
        report.checks.append(Check(
            "data path", False, f"'{t.retry}': RDMA messages to a peer were never acknowledged",
            ("small messages passed (NCCL connected) and large ones were lost: most likely a hop on the path "
             "drops large frames without a word (an MTU or receive-buffer mismatch, not the timeout NCCL's hint "
             "names). Check it with hostnet-rdma doctor --between NODE_A,NODE_B")
            if small_passed else
            "the peer never answered: a link or a route down between the nodes; hostnet-rdma doctor --between "
            "NODE_A,NODE_B shows which sizes cross", RETRY,
        ))  # fmt: skip

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
    return report


def _devices(report: Report, t: Transport, expected: set[str] | None) -> None:
    if not t.ib_line:
        report.checks.append(Check("ib devices", False, "no 'NET/IB : Using' line", "NCCL did not open any RDMA device",
                                   SOCKETS))  # fmt: skip
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
