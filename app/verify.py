"""Read a training pod's log and check what the seed checks by hand: NCCL used IB (not
Socket), on the expected RDMA devices, with GPUDirect RDMA channels; and the wrapper's own
line (launcher, is_host, local_addr, endpoint). Pure: text in, findings out."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

TROUBLESHOOTING = 'hostnet-rdma\'s docs/troubleshooting.md, "NCCL uses sockets, or no GDRDMA"'

_USING_NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
_IB_DEVICES = re.compile(r"NCCL INFO NET/IB\s*:\s*Using (.*?)(?:;|$)")
_DEVICE = re.compile(r"\[\d+\]([\w.-]+?)(?::\d+)?/(RoCE|IB)")
_CHANNEL = re.compile(r"via NET/(IB|Socket)/\d+(/GDRDMA)?")
# An RDMA send never acknowledged (IBV_WC_RETRY_EXC_ERR): NCCL's "transport retry counter exceeded",
# completion status 12.
_RETRY_EXCEEDED = re.compile(r"transport retry counter exceeded|(?:completion )?status[ =:]+12\b", re.I)
_WRAPPER = re.compile(r"hostnet-rdma: launcher=(\S+) backend=(\S+) is_host=(\S+) local_addr=(\S+) endpoint=(\S+)")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    def table(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [f"{'PASS' if c.ok else 'FAIL'}  {c.name.ljust(width)}  {c.detail}" for c in self.checks]
        hints = [f"  - {c.name}: {c.hint}" for c in self.checks if not c.ok and c.hint]
        if hints:
            lines += ["", "What to do:", *hints, f"  See {TROUBLESHOOTING}"]
        return "\n".join(lines)


def expected_devices(nccl_ib_hca: str | None) -> set[str] | None:
    """The exact device set a profile's NCCL_IB_HCA pins (`=` prefix), else None."""
    if not nccl_ib_hca or not nccl_ib_hca.startswith("="):
        return None
    return {d.split(":")[0] for d in nccl_ib_hca[1:].split(",") if d}


def verify(log: str, expected: set[str] | None = None, expect_wrapper: bool = True) -> Report:
    report = Report()
    network = _USING_NETWORK.search(log)
    if network is None:
        report.checks.append(Check("transport", False, "no 'NCCL INFO Using network' line",
                                   "set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET (the default profile does)"))  # fmt: skip
    else:
        ib = network.group(1) == "IB"
        report.checks.append(Check("transport", ib, f"Using network {network.group(1)}",
                                   "" if ib else "NCCL fell back to sockets: /dev/infiniband missing or unusable "
                                   "(privileged/device plugin), or NCCL_IB_HCA names no usable device"))  # fmt: skip

    devices_line = _IB_DEVICES.search(log)
    if devices_line is None:
        report.checks.append(
            Check("ib devices", False, "no 'NET/IB : Using' line", "NCCL did not open any RDMA device")
        )
    else:
        found = [m.group(1) for m in _DEVICE.finditer(devices_line.group(1))]
        detail = f"{len(found)} devices: {','.join(found)}"
        ok = bool(found)
        hint = ""
        if expected is not None:
            extra = sorted(set(found) - expected)
            missing = sorted(expected - set(found))
            ok = ok and not extra and not missing
            if extra:
                detail += f"; not in the profile (front-end?): {','.join(extra)}"
            if missing:
                detail += f"; missing: {','.join(missing)}"
            hint = "check NCCL_IB_HCA in the pod env against the node's ports (ibv_devices)"
        report.checks.append(Check("ib devices", ok, detail, hint if not ok else ""))

    channels = [m for m in _CHANNEL.finditer(log)]
    gdr = sum(1 for m in channels if m.group(1) == "IB" and m.group(2))
    report.checks.append(Check("gdrdma channels", gdr > 0, f"{gdr} of {len(channels)} NET channels use GDRDMA",
                               "" if gdr else "GPUDirect RDMA is off: check nvidia-peermem / dmabuf support on the node"))  # fmt: skip

    retry = _RETRY_EXCEEDED.search(log)
    if retry is not None:
        # NCCL's own hint for this error says the timeout is too short; when the job got as far
        # as connecting (small messages crossed), a silent drop of large frames is the likelier cause.
        small_passed = network is not None or "Connected all" in log or "Init COMPLETE" in log
        report.checks.append(Check(
            "data path", False, f"'{retry.group(0)}': RDMA messages to a peer were never acknowledged",
            ("small messages passed (NCCL connected) and large ones were lost: most likely a hop on the path "
             "drops large frames without a word (an MTU or receive-buffer mismatch, not the timeout NCCL's hint "
             "names). Check it with hostnet-rdma doctor --between NODE_A,NODE_B")
            if small_passed else
            "the peer never answered: a link or a route down between the nodes; hostnet-rdma doctor --between "
            "NODE_A,NODE_B shows which sizes cross",
        ))  # fmt: skip

    if expect_wrapper:
        w = _WRAPPER.search(log)
        if w is None:
            report.checks.append(Check("wrapper", False, "no 'hostnet-rdma: launcher=' line",
                                       "torchrun was not wrapped: is the pod labelled and was it mutated? "
                                       "(hostnet-rdma explain)"))  # fmt: skip
        else:
            launcher, backend, is_host, local_addr, endpoint = w.groups()
            report.checks.append(Check("wrapper", True, f"launcher={launcher} backend={backend} is_host={is_host} "
                                       f"local_addr={local_addr} endpoint={endpoint}"))  # fmt: skip
    return report
