"""The wrapper's watch of NCCL, beside torchrun for the whole job: what transport NCCL chose
(said once, in the log and the termination message), its errors with their causes, the
requireRdma stop, and a stalled start-up's path to the peers. Standard library only, Python
3.8+, as the wrapper (torchrun.py starts it; docs/wrapper.md).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

try:
    import hostnet_rdma_rules as rules  # type: ignore[import-not-found,unused-ignore]  # in a pod: beside this file
except ImportError:  # in the repository and the webhook image
    from app.wrapper import rules  # type: ignore[no-redef,unused-ignore]
try:
    import hostnet_rdma_nccllog as nccllog  # type: ignore[import-not-found,unused-ignore]  # in a pod
except ImportError:
    from app.wrapper import nccllog  # type: ignore[no-redef,unused-ignore]
try:
    import hostnet_rdma_pathprobe as pathprobe  # type: ignore[import-not-found,unused-ignore]  # in a pod
except ImportError:
    from app.wrapper import pathprobe  # type: ignore[no-redef,unused-ignore]

PREFIX = rules.PREFIX


# NCCL says which transport it chose (IB or Socket, which HCAs, GPUDirect) and when each
# communicator's start-up begins and ends only at INFO level, and images commonly set
# NCCL_DEBUG=WARN. So NCCL writes its lines to files of the wrapper's (unless the user chose a
# file), and a small watcher passes on what the user's level shows, prints one line once the
# communicators are up and puts it in the termination message (`kubectl describe pod` shows the
# transport), and says what it finds on the path to the peers when a start-up stalls.
def nccl_debug_redirect(env: Mapping[str, str]) -> Tuple[Dict[str, str], Optional[str]]:
    """The env that sends NCCL's lines to files in a directory of ours, and that directory;
    ({}, None) when the user chose a file of their own. A user at INFO keeps their subsystems
    (the watcher passes every line on); a quieter one gets INIT,NET, which it keeps to itself."""
    if env.get("NCCL_DEBUG_FILE"):
        return {}, None
    for base in ("/dev/shm", os.environ.get("TMPDIR") or "/tmp"):
        d = os.path.join(base, "hostnet-rdma-nccl-" + str(os.getpid()))
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, ".w"), "w"):
                pass
        except OSError:
            continue
        extra = {"NCCL_DEBUG_FILE": os.path.join(d, "nccl.%h.%p.log")}
        if not _verbose(env):
            extra.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET")
        return extra, d
    return {}, None


def _verbose(env: Mapping[str, str]) -> bool:
    return env.get("NCCL_DEBUG", "").strip().upper() in ("INFO", "TRACE")


_NCCL_IFACE = re.compile(r"(?:Bootstrap\s*:|NET/Socket\s*:) Using (?:\[\d+\])?([\w.-]+):")


class Stall:
    """NCCL communicators whose start-up began (`Init START`) and has not completed."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.started: Dict[Tuple[str, str], float] = {}
        self.iface = ""
        self.said = False

    def read(self, source: str, line: str, now: float) -> None:
        m = nccllog.INIT_STAGE.search(line)
        if m and m.group(2) == "START":
            self.started.setdefault((source, m.group(1)), now)
        elif m:
            self.started.pop((source, m.group(1)), None)
        iface = _NCCL_IFACE.search(line)
        if iface and not self.iface:
            self.iface = iface.group(1)

    def due(self, now: float) -> float:
        """Seconds since the oldest pending start, once past the bound and not said yet; else 0."""
        if self.said or not self.bound or not self.started:
            return 0.0
        ago = now - min(self.started.values())
        return ago if ago >= self.bound else 0.0


def stall_line(ago: float, pending: int, network: str, iface: str, paths: List[Any]) -> str:
    """The one line for a stalled start-up: what stalled, and the path to each peer."""
    comms = f"{pending} NCCL communicator{'s' if pending != 1 else ''}"
    head = (f"{nccllog.STALL}{comms} logged Init START {ago:.0f}s ago and no Init "
            f"COMPLETE (network {network or 'not chosen yet'}{', interface ' + iface if iface else ''})")  # fmt: skip
    if not paths:
        return head + "; no connection to a peer found yet to probe. Still waiting."
    dropped = [p for p in paths if p.first_lost and p.crossed]
    stuck = [p for p in paths if p.stuck]
    said = "; ".join("Path to " + p.text() for p in (dropped or stuck or paths)[:3])
    if len(paths) > 3:
        said += f" ({len(paths)} peers probed)"
    if dropped:
        p = dropped[0]
        why = (f"a hop between this node and {p.peer} drops packets over {p.largest} B without a word (an MTU "
               "mismatch on a switch port): NCCL's start-up exchange is larger; check every port's MTU on the "
               "path, or hostnet-rdma doctor --between THIS_NODE,PEER_NODE")  # fmt: skip
    elif stuck:
        why = f"TCP to {stuck[0].peer} is not getting through: check the path"
    elif any(p.error for p in paths):
        why = "the path could not be probed"
    else:
        why = "the path carries every size probed: not a large-frame drop (a slow or missing peer?)"
    return f"{head}. {said}: {why}. Still waiting, not stopping the job."


def stall_report(
    stall: Stall, parent: int, network: str, addresses: Callable[[], Dict[str, List[str]]] = dict, timeout: float = 1.0
) -> List[Any]:
    """Probe the path to each peer of the job's processes (the TCP sockets below torchrun)."""
    view = pathprobe.tcp_view(parent)
    found = addresses()
    peers = []
    for peer, (local, _) in view.items():
        iface = stall.iface or next((n for n, a in found.items() if local in a), "")
        peers.append((peer, iface))
    paths: List[Any] = pathprobe.probe_all(peers, timeout)
    for p in paths:
        p.stuck = view.get(p.peer, ("", ""))[1]
    return paths


def error_line(problem: Any) -> str:
    """The wrapper's line for an NCCL error (nccllog.Problem): its cause, what to check, NCCL's own
    line (which `hostnet-rdma verify` reads again in a log without NCCL's)."""
    if problem.kind == "retry-exceeded":
        return (f"{PREFIX}: warning: NCCL's RDMA messages to a peer were never acknowledged (transport retry "
                "counter exceeded) after its communicators were up: most likely a hop drops large frames (an MTU "
                "or receive-buffer mismatch); hostnet-rdma doctor --between NODE_A,NODE_B")  # fmt: skip
    return f"{PREFIX}: warning: NCCL {problem.title} error: {problem.cause}; check {problem.check}. NCCL said: {problem.line}"


def watch_transport(
    d: str,
    env: Mapping[str, str],
    parent: int,
    alive: Callable[[], bool],
    poll: float = 0.5,
    out: Any = None,
    terminate: Callable[[str, Mapping[str, str]], None] = lambda message, env: None,
    addresses: Callable[[], Dict[str, List[str]]] = dict,
) -> None:
    """Follow NCCL's debug files in `d` while `alive()` (torchrun, pid `parent`, runs): pass on
    what the user's NCCL_DEBUG would have shown, say the transport once NCCL's communicators are
    up, with HOSTNET_RDMA_REQUIRE_RDMA stop the job when it is not RDMA, and when a start-up
    stalls past HOSTNET_RDMA_NCCL_STALL_SECONDS say what the path to the peers carries."""
    out = out or sys.stderr
    level = env.get("NCCL_DEBUG", "").strip().upper()
    offsets: Dict[str, int] = {}
    kept: List[str] = []
    said = False
    told: Dict[str, None] = {}  # the kinds of NCCL error already said
    cause_said = False
    require = env.get(rules.ENV_REQUIRE_RDMA) == "1"
    # requireRdma decides once a communicator spans nodes: one within a node names a network
    # (Socket too) that carries nothing, and a job's first communicator may be such a one.
    judged = not require
    stall = Stall(rules.stall_seconds(env))
    while True:
        running = alive()
        now = time.monotonic()
        fresh: List[str] = []
        for name in sorted(os.listdir(d)):
            if not name.startswith("nccl."):
                continue
            path = os.path.join(d, name)
            try:
                with open(path, errors="replace") as f:
                    f.seek(offsets.get(path, 0))
                    chunk = f.read(1 << 20)
                    offsets[path] = f.tell()
            except OSError:
                continue
            for line in chunk.splitlines():
                if level in ("INFO", "TRACE") or (" NCCL WARN " in line and level in ("WARN", "ABORT")) or (
                        "NCCL version" in line and level in ("VERSION", "WARN")):  # fmt: skip
                    out.write(line + "\n")
                if nccllog.wanted(line) and len(kept) < 20000:
                    kept.append(line)
                    fresh.append(line)
                if "Init " in line or " Using " in line:
                    stall.read(name, line, now)
        t = nccllog.Transport("\n".join(kept)) if not said or (not judged and fresh) else None
        if t is not None and t.ready:
            if not said:
                said = True
                said_line = t.line(env.get("NCCL_IB_HCA", ""))
                out.write(f"{PREFIX}: {said_line}\n")
                terminate(f"{PREFIX}: {said_line}", env)
            if not judged and (t.socket_traffic or not t.within_node):
                judged = True
                if t.socket_traffic:
                    message = (f"{PREFIX}: error: NCCL uses {t.network or 'no network'}, not RDMA, and "
                               f"{rules.ENV_REQUIRE_RDMA} says to stop rather than train at socket speed "
                               f"({t.line(env.get('NCCL_IB_HCA', ''))}). " + rules.see("NCCL uses sockets, or no GDRDMA"))  # fmt: skip
                    out.write(message + "\n")
                    terminate(message, env)
                    os.kill(parent, signal.SIGTERM)
                elif t.net_class == nccllog.UNKNOWN:
                    out.write(f"{PREFIX}: warning: NCCL uses network {t.network}, which hostnet-rdma does not know: "
                              f"{rules.ENV_REQUIRE_RDMA} does not stop the job\n")  # fmt: skip
        for problem in nccllog.problems("\n".join(fresh)) if fresh and len(told) < len(nccllog.TITLES) else []:
            if problem.kind in told:
                continue
            told[problem.kind] = None
            message = error_line(problem)
            out.write(message + "\n")
            if problem.primary and not cause_said:
                cause_said = True  # the first cause stays in the termination message; what follows from it does not
                terminate(message, env)
        ago = stall.due(now) if running else 0.0
        if ago:
            stall.said = True
            out.flush()
            network = nccllog.Transport("\n".join(kept)).network
            message = stall_line(
                ago, len(stall.started), network, stall.iface, stall_report(stall, parent, network, addresses)
            )
            out.write(message + "\n")
            terminate(message, env)
        out.flush()
        if not running:
            shutil.rmtree(d, ignore_errors=True)
            return
        time.sleep(poll)


def start(
    env: Dict[str, str],
    terminate: Callable[[str, Mapping[str, str]], None],
    addresses: Callable[[], Dict[str, List[str]]],
) -> None:
    """Before torchrun starts: the redirect into `env`, and the watcher in a child process of
    this one (which becomes torchrun: the watcher follows it until it ends). `terminate` writes
    the termination message, `addresses` lists this machine's interfaces (the wrapper's own)."""
    extra, d = nccl_debug_redirect(env)
    if d is None:
        return
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        return  # no watcher: the user's NCCL_DEBUG stays as it was
    if pid:
        env.update(extra)
        return
    try:
        # Its own session (a terminal's ^C goes to torchrun, which ends the job) and no hold on
        # stdin/stdout: whoever reads the pod's output sees EOF when torchrun ends. torchrun's
        # end is seen as this process being re-parented, which happens at exit, zombie or not.
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        watch_transport(d, env, parent, lambda: os.getppid() == parent, terminate=terminate, addresses=addresses)
    finally:
        os._exit(0)
