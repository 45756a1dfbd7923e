"""An e2e job's verdict from what the API server and the logs show. Pure: pods (raw dicts) and
logs in, a progress state or a result out; `table` renders results for people.

A job passes only when every rank of every pod joined one world of nodes x nproc ranks (a pod
that trained alone fails it: its world is too small), torchrun was wrapped in each pod (the
wrapper's line), the wrapper named the expected launcher, exactly one pod hosted the c10d store,
and, on GPUs, each pod's NCCL log passes `verify` (IB, the profile's HCAs, GDRDMA).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.verify import expected_devices, verify
from app.wrapper.nccllog import STALL

# The lines app/e2e/train.py prints (it imports nothing of ours: it runs in the user's image).
OK, FAIL, SWEEP = "HOSTNET-RDMA-E2E-OK", "HOSTNET-RDMA-E2E-FAIL", "HOSTNET-RDMA-E2E-SWEEP"
_SWEEP_LINE = re.compile(rf"^{SWEEP} from=(\S+) to=(\S+) largest_ok=(\d+) first_lost=(\S+) gbps=([\d.]+)", re.M)
_OK_LINE = re.compile(rf"^{OK} rank=(\d+) world=(\d+) node=(\S+) backend=(\S+) busbw_gbps=([\d.]+)", re.M)
_FAIL_LINE = re.compile(rf"^{FAIL} .*$", re.M)
_WRAPPER = re.compile(r"^hostnet-rdma: (launcher=.*)$", re.M)
# The wrapper's line when an NCCL communicator's start-up stalls (app/wrapper/torchrun.py).
_STALL = re.compile(rf"^hostnet-rdma: warning: ({re.escape(STALL[len('hostnet-rdma: warning: ') :])}.*)$", re.M)
_STALL_PATH = re.compile(r"Path to (\S+) on (\S+): packets of up to (\d+) B cross, (\d+) B do not")
# Waiting reasons that no amount of waiting fixes. A pull that fails (ErrImagePull,
# ImagePullBackOff) may be a registry hiccup: it is shown when the job times out instead.
_BAD_WAIT = ("ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError")


@dataclass(frozen=True)
class Progress:
    state: str  # "running" | "completed" | "failed"
    detail: str = ""


@dataclass
class Result:
    launcher: str
    outcome: str  # "passed" | "failed" | "timed out" | "not present"
    seconds: float | None = None
    store_hosts: list[str] = field(default_factory=list)
    rendezvous: str = ""
    world: int | None = None
    busbw_gbps: float | None = None
    nccl: str = ""
    detail: str = ""
    webhook: str = ""  # the version in the pods' injected annotation
    path: str = ""  # the data-path sweep: the largest message that crossed between the nodes

    @property
    def ok(self) -> bool:
        return self.outcome == "passed"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def training_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return status  # type: ignore[no-any-return]
    return None


def _terminated_badly(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for key in ("state", "lastState"):
        done = (status.get(key) or {}).get("terminated")
        if done and done.get("exitCode", 0) != 0:
            return done  # type: ignore[no-any-return]
    return None


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def pod_state(pod: Mapping[str, Any], container: str) -> str:
    """One phrase for a pod that is not done: why it waits, for the timeout message."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{name}: not scheduled: {cond.get('message') or cond.get('reason')}"
    c = training_container(pod, container)
    if c is None:
        return f"{name}: {status.get('phase', 'Pending')}"
    waiting = (c.get("state") or {}).get("waiting")
    if waiting:
        return f"{name}: waiting: {waiting.get('reason')} {waiting.get('message') or ''}".rstrip()
    return f"{name}: {status.get('phase')}"


def progress(pods: Sequence[Mapping[str, Any]], logs: Mapping[str, str], container: str, world: int) -> Progress:
    """Where one job stands: completed once ranks of every pod printed OK lines adding up to
    the world; failed at the first non-zero exit, restart, FAIL line or bad image."""
    for pod in pods:
        name = pod["metadata"]["name"]
        status = training_container(pod, container)
        text = logs.get(name, "")
        if _FAIL_LINE.search(text):
            return Progress("failed", f"{name}: {_FAIL_LINE.search(text).group(0)}")  # type: ignore[union-attr]
        stalled = _STALL.search(text)
        if stalled:  # the wrapper keeps waiting (a user's job may be slow); an e2e job is not
            node = (pod.get("spec") or {}).get("nodeName")
            said = stalled.group(1).removesuffix(" Still waiting, not stopping the job.")
            return Progress("failed", f"{name}{' on ' + node if node else ''}: {said}")
        if status is not None:
            bad = _terminated_badly(status)
            if bad is not None:
                cause = (bad.get("message") or "").strip() or _last_lines(text) or bad.get("reason", "")
                return Progress("failed", f"{name}: exit {bad.get('exitCode')}: {cause}")
            waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason")
            if waiting in _BAD_WAIT:
                return Progress("failed", pod_state(pod, container))
        if (pod.get("status") or {}).get("phase") == "Failed":
            return Progress("failed", f"{name}: pod Failed: {(pod.get('status') or {}).get('message', '')}")
    ranks = [m for text in logs.values() for m in _OK_LINE.findall(text)]
    pods_done = sum(1 for pod in pods if _OK_LINE.search(logs.get(pod["metadata"]["name"], "")))
    if pods and pods_done == len(pods) and len(ranks) >= world:
        return Progress("completed")
    exited = [training_container(p, container) for p in pods]
    if (
        pods
        and sweeps(logs)
        and all(((s or {}).get("state") or {}).get("terminated", {}).get("exitCode") == 0 for s in exited)
    ):
        return Progress("completed")  # a sweep-only job (doctor --between): its pods exit 0 after the sweep
    return Progress("running", "; ".join(pod_state(p, container) for p in pods) or "no pods yet")


def wrapper_fields(text: str) -> dict[str, str] | None:
    m = _WRAPPER.search(text)
    return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv) if m else None


def _webhook_version(pod: Mapping[str, Any]) -> str:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get("hostnet-rdma.io/injected", "")
    try:
        return str(json.loads(text).get("version", ""))
    except (ValueError, AttributeError):
        return ""


def judge(
    launcher: str,
    expected_launcher: str,
    pods: Sequence[Mapping[str, Any]],
    logs: Mapping[str, str],
    container: str,
    nodes: int,
    world: int,
    nccl: bool,
    seconds: float,
) -> Result:
    """The result of a job that completed: the checks beyond 'it finished'."""
    r = Result(launcher, "passed", seconds=round(seconds, 1))
    problems: list[str] = []
    if len(pods) != nodes:
        problems.append(f"{len(pods)} pods, expected {nodes}")
    worlds: set[int] = set()
    bandwidths: list[float] = []
    fields_by_pod: dict[str, dict[str, str]] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        text = logs.get(name, "")
        lines = _OK_LINE.findall(text)
        worlds |= {int(w) for _, w, _, _, _ in lines}
        bandwidths += [float(b) for *_, b in lines]
        fields = wrapper_fields(text)
        if fields is None:
            problems.append(f"{name}: torchrun was not wrapped (no 'hostnet-rdma: launcher=' line)")
            continue
        fields_by_pod[name] = fields
        if fields.get("launcher") != expected_launcher:
            problems.append(
                f"{name}: the webhook took it for launcher {fields.get('launcher')}, not {expected_launcher}"
            )
        if any(int(rank) == 0 for rank, *_ in lines) and fields.get("is_host") == "-":
            r.store_hosts.append(name)  # static rendezvous: rank 0's pod holds the store
        r.webhook = r.webhook or _webhook_version(pod)
    hosts = [n for n, f in fields_by_pod.items() if f.get("is_host") == "true"]
    r.store_hosts = hosts or r.store_hosts
    r.rendezvous = ",".join(sorted({f.get("backend", "?") for f in fields_by_pod.values()}))
    sweep_only = not worlds and bool(sweeps(logs))
    if worlds != {world} and not sweep_only:
        problems.append(f"world sizes {sorted(worlds)}, expected one world of {world} (a pod that trains alone)")
    r.world = max(worlds) if worlds else None
    c10d = all(f.get("is_host") != "-" for f in fields_by_pod.values())
    if fields_by_pod and c10d and len(hosts) != 1:
        problems.append(f"{len(hosts)} store hosts ({', '.join(hosts) or 'none'}), expected exactly one")
    r.busbw_gbps = round(min(bandwidths), 2) if bandwidths else None
    r.path = path_verdict(logs)
    r.nccl = nccl_verdict(pods, logs, container) if nccl else "n/a (gloo on CPU)"
    if nccl and not r.nccl.startswith("PASS"):
        problems.append(f"NCCL: {r.nccl}")
    if problems:
        r.outcome, r.detail = "failed", "; ".join(problems)
    return r


def human(size: int) -> str:
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % (factor // 4) == 0:
            return f"{size / factor:g} {unit}"
    return f"{size} B"


def sweeps(logs: Mapping[str, str]) -> list[tuple[str, str, int, str, float]]:
    """The data-path sweep lines of a job: (from, to, largest arrived, first lost or -, Gb/s)."""
    return [
        (a, b, int(ok), lost, float(g)) for text in logs.values() for a, b, ok, lost, g in _SWEEP_LINE.findall(text)
    ]


def node_of(pods: Sequence[Mapping[str, Any]], address: str) -> str:
    """The node a host-network pod's address belongs to (its host IP), else the address."""
    for pod in pods:
        status = pod.get("status") or {}
        ips = {status.get("hostIP"), *(x.get("ip") for x in status.get("hostIPs") or [])}
        if address in ips and (pod.get("spec") or {}).get("nodeName"):
            return str(pod["spec"]["nodeName"])
    return address


def stall_path(pods: Sequence[Mapping[str, Any]], logs: Mapping[str, str]) -> str:
    """The PATH cell from the wrapper's stall line: the size that no longer crosses, between
    which nodes, on which interface."""
    for pod in pods:
        stalled = _STALL_PATH.search(logs.get(pod["metadata"]["name"], ""))
        if stalled:
            peer, iface, ok, lost = stalled.groups()
            here = (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"]
            return f"{human(int(lost))} lost {here}->{node_of(pods, peer)} on {iface} ({human(int(ok))} ok)"
    return ""


def path_verdict(logs: Mapping[str, str], pods: Sequence[Mapping[str, Any]] = ()) -> str:
    found = sweeps(logs)
    if not found:
        return stall_path(pods, logs)
    lost = [x for x in found if x[3] != "-"]
    if lost:
        a, b, ok, first, _ = lost[0]
        return f"{human(int(first))} lost {a}->{b} ({human(ok)} ok)"
    return f"to {human(min(x[2] for x in found))} ok"


def nccl_verdict(pods: Sequence[Mapping[str, Any]], logs: Mapping[str, str], container: str) -> str:
    """`verify` of each pod's log against the NCCL_IB_HCA the pod was given."""
    failed: list[str] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        spec: Mapping[str, Any] = next((c for c in pod["spec"]["containers"] if c["name"] == container), {})
        hca = next((e.get("value") for e in spec.get("env", []) if e.get("name") == "NCCL_IB_HCA"), None)
        report = verify(logs.get(name, ""), expected_devices(hca))
        failed += [f"{name}: {c.name}: {c.detail}" for c in report.checks if not c.ok]
    return "FAIL: " + "; ".join(failed) if failed else "PASS: IB, expected HCAs, GDRDMA"


def table(results: Sequence[Result]) -> str:
    rows = [("LAUNCHER", "RESULT", "TIME", "STORE HOST", "WORLD", "PATH", "BUSBW", "NCCL")]
    for r in results:
        rows.append((
            r.launcher, r.outcome, f"{r.seconds:.0f}s" if r.seconds is not None else "-",
            ",".join(r.store_hosts) + (f" ({r.rendezvous})" if r.rendezvous else "") if r.store_hosts else "-",
            str(r.world) if r.world is not None else "-", r.path or "-",
            f"{r.busbw_gbps:g} GB/s" if r.busbw_gbps is not None else "-", r.nccl or "-",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    details = [f"  {r.launcher}: {r.detail}" for r in results if r.detail]
    return "\n".join(lines + (["", *details] if details else []))
