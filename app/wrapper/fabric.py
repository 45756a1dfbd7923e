"""RDMA fabric checks before torchrun starts, and for `hostnet-rdma doctor` on a node.

NCCL reports a mis-set fabric late and obscurely (a silent fallback to sockets, a hang in the
first all-reduce, `ibv_modify_qp` errors). These checks read files only (sysfs, procfs, the
process's own limits), finish in milliseconds, and name what is wrong, where, and what to do:
- every device in NCCL_IB_HCA (`mlx5_0,mlx5_2`, `=mlx5_0:1`, `^mlx5_4`, prefixes) exists, and
  each selected port is ACTIVE;
- on RoCE ports, the GID at NCCL_IB_GID_INDEX is set and of type RoCE v2;
- the memlock limit lets NCCL register memory; /dev/shm is big enough;
- GPUDirect RDMA is possible (nvidia_peermem loaded, or dma-buf with the open NVIDIA module).
Standard library only, Python 3.8+: it runs in users' images as part of the wrapper.
"""

from __future__ import annotations

import os
import resource
from typing import Dict, List, Optional, Tuple

IB = "sys/class/infiniband"
SHM_MIN_BYTES = 1 << 30  # NCCL's shared-memory transport needs far more than the 64 MiB default
MAX_DEVICES = 256  # bounds the scan on a node with an odd sysfs


class Finding:
    def __init__(self, name: str, ok: bool, detail: str, hint: str = "", problem: bool = True) -> None:
        self.name = name
        self.ok = ok
        self.detail = detail
        self.hint = hint
        # A failed check that only slows a job down still counts; info lines have problem=False.
        self.problem = problem and not ok

    def as_dict(self) -> Dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "hint": self.hint}

    def line(self) -> str:
        text = f"{self.name}: {self.detail}"
        return f"{text}. {self.hint}" if self.hint and not self.ok else text


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def devices(root: str) -> Dict[str, List[int]]:
    """RDMA devices under <root>/sys/class/infiniband and their port numbers."""
    base = os.path.join(root, IB)
    try:
        names = sorted(os.listdir(base))[:MAX_DEVICES]
    except OSError:
        return {}
    found: Dict[str, List[int]] = {}
    for dev in names:
        try:
            ports = sorted(int(p) for p in os.listdir(os.path.join(base, dev, "ports")) if p.isdigit())
        except OSError:
            ports = []
        found[dev] = ports
    return found


def parse_hca(spec: str) -> Tuple[bool, bool, List[Tuple[str, Optional[int]]]]:
    """NCCL_IB_HCA as NCCL reads it: (exclude, exact, [(name, port or None)])."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    entries: List[Tuple[str, Optional[int]]] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, port = item.partition(":")
        entries.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, entries


def _matches(dev: str, name: str, exact: bool) -> bool:
    return dev == name if exact else dev.startswith(name)


def selected_ports(hca: str, found: Dict[str, List[int]]) -> Tuple[List[Tuple[str, int]], List[str]]:
    """The (device, port) pairs NCCL would use, and the listed names that match no device."""
    if not hca.strip():
        return [(d, p) for d, ports in found.items() for p in ports], []
    exclude, exact, entries = parse_hca(hca)
    if exclude:
        kept = [(d, p) for d, ports in found.items() for p in ports]
        for name, port in entries:
            kept = [(d, p) for d, p in kept if not (_matches(d, name, exact) and port in (None, p))]
        return kept, []
    chosen: List[Tuple[str, int]] = []
    missing: List[str] = []
    for name, port in entries:
        hits = [(d, p) for d, ports in found.items() if _matches(d, name, exact) for p in ports if port in (None, p)]
        if not hits:
            missing.append(name if port is None else f"{name}:{port}")
        chosen += [h for h in hits if h not in chosen]
    return chosen, missing


def port_state(root: str, dev: str, port: int) -> Tuple[str, str]:
    """(state, link_layer) of one port, e.g. ("4: ACTIVE", "Ethernet")."""
    p = os.path.join(root, IB, dev, "ports", str(port))
    return _read(os.path.join(p, "state")) or "?", _read(os.path.join(p, "link_layer")) or "?"


def gid(root: str, dev: str, port: int, index: int) -> Tuple[str, str]:
    p = os.path.join(root, IB, dev, "ports", str(port))
    value = _read(os.path.join(p, "gids", str(index))) or ""
    kind = _read(os.path.join(p, "gid_attrs", "types", str(index))) or ""
    return value, kind


def gid_empty(value: str) -> bool:
    return not value or not value.replace(":", "").strip("0")


def memlock_limit(root: str = "/") -> int:
    """The soft memlock limit in bytes (-1: unlimited), from <root>/proc/self/limits."""
    limits = _read(os.path.join(root, "proc/self/limits")) or ""
    for line in limits.splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory") :].split()[0]
            if soft == "unlimited":
                return -1
            if soft.isdigit():
                return int(soft)
    soft_limit, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if soft_limit == resource.RLIM_INFINITY else int(soft_limit)


def shm_bytes(path: str = "/dev/shm") -> Optional[int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _human(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f}".replace(".0", "") + " " + unit
    return f"{size} B"


def gpudirect(root: str) -> Tuple[bool, str]:
    if os.path.isdir(os.path.join(root, "sys/module/nvidia_peermem")) or os.path.isdir(
        os.path.join(root, "sys/module/nv_peer_mem")
    ):
        return True, "nvidia_peermem loaded"
    version = _read(os.path.join(root, "proc/driver/nvidia/version")) or ""
    if "Open Kernel Module" in version:
        return True, "dma-buf (open NVIDIA kernel module)"
    if not os.path.isdir(os.path.join(root, "sys/module/nvidia")):
        return False, "no NVIDIA driver loaded"
    return False, "neither nvidia_peermem loaded nor the open NVIDIA kernel module (dma-buf)"


def check(
    root: str = "/",
    hca: str = "",
    gid_index: str = "",
    memlock: Optional[int] = None,
    shm: Optional[int] = None,
    expect_gpus: bool = True,
) -> List[Finding]:
    """Every check, for the NCCL env given. memlock/shm default to this process's own."""
    out: List[Finding] = []
    found = devices(root)
    ports, missing = selected_ports(hca, found)
    where = f"NCCL_IB_HCA={hca}" if hca else "all devices (NCCL_IB_HCA unset)"
    if not found:
        out.append(Finding("devices", False, f"no RDMA devices under /{IB}",
                           "mount /dev/infiniband and run with hostNetwork on an RDMA node; NCCL will use sockets"))  # fmt: skip
        return out + _host_checks(root, memlock, shm, expect_gpus=False)
    if missing:
        out.append(Finding("devices", False, f"{where} names {', '.join(missing)}, which this node does not have "
                           f"(it has {', '.join(sorted(found))})",
                           "fix NCCL_IB_HCA in the profile for this node shape (hostnet-rdma doctor suggests one)"))  # fmt: skip
    else:
        out.append(Finding("devices", bool(ports), f"{len(ports)} ports selected by {where}",
                           "" if ports else "NCCL_IB_HCA excludes every device"))  # fmt: skip
    down = []
    roce = []
    for dev, port in ports:
        state, link = port_state(root, dev, port)
        if "ACTIVE" not in state:
            down.append(f"{dev}:{port} ({state})")
        if link == "Ethernet":
            roce.append((dev, port))
    out.append(Finding("ports", not down, f"{len(ports) - len(down)} of {len(ports)} selected ports ACTIVE"
                       + (f"; not active: {', '.join(down)}" if down else ""),
                       "a down port makes NCCL hang or fail on ibv_modify_qp: fix the link or leave it out of "
                       "NCCL_IB_HCA"))  # fmt: skip
    if roce:
        if not gid_index.strip():
            out.append(Finding("gid", False, f"{len(roce)} RoCE ports but NCCL_IB_GID_INDEX is unset",
                               "set NCCL_IB_GID_INDEX to the RoCE v2 GID index (hostnet-rdma doctor finds it)"))  # fmt: skip
        elif not gid_index.strip().isdigit() or not gid_index.isascii():
            out.append(Finding("gid", False, f"NCCL_IB_GID_INDEX={gid_index!r} is not an index", "use a number"))
        else:
            index = int(gid_index)
            bad = []
            for dev, port in roce:
                value, kind = gid(root, dev, port, index)
                if gid_empty(value):
                    bad.append(f"{dev}:{port} empty")
                elif "v2" not in kind.lower():
                    bad.append(f"{dev}:{port} {kind or 'unknown type'}")
            out.append(Finding("gid", not bad, f"GID index {index} is RoCE v2 on {len(roce) - len(bad)} of "
                               f"{len(roce)} RoCE ports" + (f"; not on {', '.join(bad)}" if bad else ""),
                               "NCCL_IB_GID_INDEX must point at a RoCE v2 GID with an address on every port "
                               "(hostnet-rdma doctor finds it)"))  # fmt: skip
    return out + _host_checks(root, memlock, shm, expect_gpus)


def _host_checks(root: str, memlock: Optional[int], shm: Optional[int], expect_gpus: bool) -> List[Finding]:
    out: List[Finding] = []
    limit = memlock_limit(root) if memlock is None else memlock
    out.append(Finding("memlock", limit < 0, "memlock unlimited" if limit < 0 else f"memlock limit {_human(limit)}",
                       "RDMA memory registration will fail (ibv_reg_mr): the webhook adds IPC_LOCK; set the "
                       "container runtime's memlock ulimit to unlimited (containerd/docker default)"))  # fmt: skip
    size = shm_bytes(os.path.join(root, "dev/shm")) if shm is None else shm
    if size is not None:
        out.append(Finding("shm", size >= SHM_MIN_BYTES, f"/dev/shm {_human(size)}",
                           "NCCL's shared-memory transport needs more: the webhook mounts a memory emptyDir "
                           "(hostnet-rdma.io/shm-size), capped by the pod's memory limit"))  # fmt: skip
    ok, how = gpudirect(root)
    out.append(Finding("gpudirect", ok, f"GPUDirect RDMA: {how}",
                       "without it NCCL copies through host memory (no GDRDMA channels): load nvidia_peermem "
                       "or use the open NVIDIA kernel module", problem=expect_gpus))  # fmt: skip
    return out


def summary(findings: List[Finding]) -> str:
    problems = [f for f in findings if f.problem]
    checked = ", ".join(f.name for f in findings)
    if not problems:
        return f"fabric preflight passed ({checked})"
    return f"fabric preflight: {len(problems)} problem(s) in {', '.join(f.name for f in problems)} (checked {checked})"


def suggest(root: str) -> Tuple[str, str, List[str]]:
    """What the node has: NCCL_IB_HCA (active ports, front-end NICs left out), the RoCE v2 GID
    index common to all of them, and the devices left out with why."""
    found = devices(root)
    front = _front_end_devices(root, found)
    chosen: List[str] = []
    left_out: List[str] = []
    roce: List[Tuple[str, int]] = []
    for dev, ports in found.items():
        if dev in front:
            left_out.append(f"{dev} (carries the default route: front-end NIC)")
            continue
        active = [p for p in ports if "ACTIVE" in port_state(root, dev, p)[0]]
        if not active:
            left_out.append(f"{dev} (no ACTIVE port)")
            continue
        chosen.append(dev)
        roce += [(dev, p) for p in active if port_state(root, dev, p)[1] == "Ethernet"]
    index = ""
    for candidate in range(0, 16):
        if roce and all(
            not gid_empty(gid(root, d, p, candidate)[0]) and "v2" in gid(root, d, p, candidate)[1].lower()
            and not gid(root, d, p, candidate)[0].lower().startswith("fe80")
            for d, p in roce
        ):  # fmt: skip
            index = str(candidate)
            break
    return ("=" + ",".join(chosen)) if chosen else "", index, left_out


def _front_end_devices(root: str, found: Dict[str, List[int]]) -> List[str]:
    route = _read(os.path.join(root, "proc/net/route")) or ""
    default_ifs = {
        line.split()[0] for line in route.splitlines()[1:] if len(line.split()) > 1 and line.split()[1] == "00000000"
    }
    # A bonded front-end (bond0 over both ports of one NIC): its members are front-end too.
    for bond in list(default_ifs):
        slaves = _read(os.path.join(root, "sys/class/net", bond, "bonding/slaves")) or ""
        default_ifs.update(slaves.split())
    front = []
    for dev in found:
        try:
            nets = os.listdir(os.path.join(root, IB, dev, "device", "net"))
        except OSError:
            nets = []
        if default_ifs & set(nets):
            front.append(dev)
    return front
