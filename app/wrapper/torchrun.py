"""hostnet-rdma's torchrun wrapper: installed as `torchrun` first on PATH inside the pod.

It runs inside users' training images, so: standard library only, Python 3.8+. Beside it in
the pod: the rules (rules.py), the fabric checks (fabric.py) and the NCCL watch (ncclwatch.py,
with its log reader and path probe).
It sees the final, shell-expanded argv, merges in what a host-network pod needs for
torchrun's rendezvous, checks what would otherwise hang for ten minutes, and execs the
real torchrun. User-given values always win.

The decision is made in rules.py (shared with the webhook); this module does the I/O around it:
DNS waits, interface lookup, version checks, logging, exec. Two entries: main() behind the PATH
shim, intercept() from the Python start-up hook (sitecustomize.py) for a torchrun started any
other way. Inputs come from HOSTNET_RDMA_* env set by the admission webhook (see docs/wrapper.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

try:
    import hostnet_rdma_fabric as fabric  # type: ignore[import-not-found,unused-ignore]  # in a pod
except ImportError:
    from app.wrapper import fabric  # type: ignore[no-redef,unused-ignore]
try:
    import hostnet_rdma_ncclwatch as ncclwatch  # type: ignore[import-not-found,unused-ignore]  # in a pod
except ImportError:
    from app.wrapper import ncclwatch  # type: ignore[no-redef,unused-ignore]
try:
    import hostnet_rdma_rules as rules  # type: ignore[import-not-found,unused-ignore]  # in a pod: beside this file
except ImportError:  # in the repository and the webhook image
    from app.wrapper import rules  # type: ignore[no-redef,unused-ignore]

# Re-exported: the rendezvous rule itself lives in rules.py (shared with the webhook core).
ArgvError = rules.ArgvError
Plan = rules.Plan
merge = rules.merge
endpoint_host = rules.endpoint_host
is_own_endpoint = rules.is_own_endpoint
expand = rules.expand
expand_sum = rules.expand_sum

PREFIX = rules.PREFIX
_see = rules.see


ETCD_BACKENDS = rules.ETCD_BACKENDS


class PreflightError(Exception):
    """A condition that would make torchrun fail slowly; the message says what to do."""


# ---------------------------------------------------------------------------- network


def interface_addresses() -> Dict[str, List[str]]:
    """Addresses on this machine's interfaces, by interface name (IPv4 and IPv6)."""
    found: Dict[str, List[str]] = {}
    try:
        import fcntl

        siocgifconf = 0x8912
        size = 32 * 1024
        buf = bytearray(size)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # struct ifconf { int ifc_len; char *ifc_buf; }
            import array

            arr = array.array("B", buf)
            addr, _ = arr.buffer_info()
            ifconf = struct.pack("iL", size, addr)
            out = fcntl.ioctl(s.fileno(), siocgifconf, ifconf)
            length = struct.unpack("iL", out)[0]
            data = arr.tobytes()[:length]
            step = 40  # sizeof(struct ifreq) on 64-bit Linux
            for off in range(0, length, step):
                name = data[off : off + 16].split(b"\0", 1)[0].decode()
                ip = socket.inet_ntoa(data[off + 20 : off + 24])
                found.setdefault(name.split(":")[0], []).append(ip)
    except (OSError, ImportError, struct.error):
        pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    raw = parts[0]
                    ip = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(raw))
                    found.setdefault(parts[5], []).append(ip)
    except OSError:
        pass
    return found


def resolve(name: str) -> List[str]:
    infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    return sorted({str(i[4][0]) for i in infos})


def interface_for(name: str, addresses: Optional[Dict[str, List[str]]] = None) -> Tuple[Optional[str], str]:
    """The interface carrying the address `name` resolves to, or (None, why not)."""
    try:
        ips = resolve(name)
    except OSError as e:
        return None, f"{name} does not resolve ({e})"
    if addresses is None:
        addresses = interface_addresses()
    for ip in ips:
        for ifname, addrs in sorted(addresses.items()):
            if ip in addrs:
                if ip.startswith("127.") or ip == "::1":
                    return None, f"{name} resolves to loopback {ip}: other nodes cannot reach it"
                return ifname, ip
    return None, f"no interface carries {', '.join(ips)} (the address of {name})"


def resolve_interruptibly(name: str) -> List[str]:
    """resolve() in a helper thread: a lookup can block in the C resolver for its whole timeout
    (seconds per server), and no Python signal handler runs until it returns. The main thread
    waits on a join, which a signal interrupts, so SIGTERM is handled within a second."""
    found: List[List[str]] = []
    failed: List[OSError] = []

    def lookup() -> None:
        try:
            found.append(resolve(name))
        except OSError as e:
            failed.append(e)

    t = threading.Thread(target=lookup, name="hostnet-rdma-resolve", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.2)
    if failed:
        raise failed[0]
    return found[0] if found else []


def wait_resolvable(name: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.5
    last = ""
    while True:
        try:
            resolve_interruptibly(name)
            return
        except OSError as e:
            last = str(e)
        if time.monotonic() >= deadline:
            raise PreflightError(
                f"{what} {name!r} did not resolve within {int(timeout)}s ({last}). "
                "Usual causes: the pod lacks dnsPolicy: ClusterFirstWithHostNet (the webhook sets it; "
                "check the pod's hostnet-rdma.io/injected annotation), or the job's headless Service "
                "does not publish not-ready addresses (Volcano: svc plugin "
                "--publish-not-ready-addresses=true). " + _see("DNS names do not resolve")
            )
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


# ---------------------------------------------------------------------------- torch


def is_shim(path: str) -> bool:
    """Our PATH shim (it execs this file), wherever the bootstrap put it."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return False
    return b"hostnet_rdma_torchrun.py" in head


def find_real_torchrun(env: Mapping[str, str]) -> Optional[str]:
    """The first `torchrun` on PATH that is not this wrapper's shim."""
    own_dir = os.path.dirname(os.path.realpath(__file__))
    for d in env.get("PATH", os.defpath).split(os.pathsep):
        if not d or os.path.realpath(d) == own_dir:
            continue
        candidate = os.path.join(d, "torchrun")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not is_shim(candidate):
            return candidate
    return None


def interpreter_of(script: str) -> Optional[str]:
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return parts[1]
    return parts[0]


def run_in(interpreter: Optional[str], code: str) -> Tuple[int, str]:
    """Run a snippet in torch's interpreter (not ours: they may differ), bounded in time."""
    exe = interpreter or sys.executable
    try:
        # Marked handled: the start-up hook must not treat this probe as a training program.
        env = dict(os.environ, **{rules.ENV_HANDLED: "probe"})
        p = subprocess.run([exe, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 1, str(e)
    return p.returncode, (p.stdout or p.stderr).strip()


def version_tuple(version: str) -> Tuple[int, ...]:
    nums = re.match(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?", version.strip())
    if not nums:
        return ()
    return tuple(int(x) for x in nums.groups() if x is not None)


def check_torch_version(version: str, minimum: str) -> None:
    have, need = version_tuple(version), version_tuple(minimum)
    if have and need and have < need:
        raise PreflightError(
            f"torch {version} is older than {minimum}: torch 2.4.x ignores --local-addr, so "
            "other nodes would be told this node's host name and hang. Use torch >= 2.5. " + _see("torch 2.4.x")
        )


def preflight(plan: rules.Plan, env: Mapping[str, str], interpreter: Optional[str]) -> None:
    code, out = run_in(interpreter, "import importlib.metadata as m; print(m.version('torch'))")
    if code == 0 and out:
        check_torch_version(out.splitlines()[-1], env.get(rules.ENV_MIN_TORCH) or rules.DEFAULTS[rules.ENV_MIN_TORCH])
    if plan.backend in ETCD_BACKENDS:
        code, out = run_in(interpreter, "import etcd")
        if code != 0:
            raise PreflightError(
                f"rendezvous backend {plan.backend} needs the `etcd` module (python-etcd), which "
                "this image lacks. Install it first: `pip install python-etcd==0.4.5`. "
                + _see("EtcdStubError: The 'etcd' module is required")
            )
    timeout = rules.dns_timeout(env)
    if plan.local_addr:
        wait_resolvable(plan.local_addr, timeout, "this pod's DNS name (--local-addr)")
    host = endpoint_host(plan.endpoint) if plan.endpoint else ""
    if host:
        wait_resolvable(host, timeout, "the rendezvous endpoint host")


def truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def socket_ifnames(plan: rules.Plan, env: Mapping[str, str]) -> Tuple[Dict[str, str], List[str]]:
    """GLOO_SOCKET_IFNAME (and optionally NCCL_SOCKET_IFNAME) for the pod's own address.

    Gloo binds to the address of the node's host name otherwise, 127.0.1.1 on common
    images, and every cross-node connect is refused.
    """
    wanted = []
    if truthy(env.get(rules.ENV_GLOO_IFNAME, rules.DEFAULTS[rules.ENV_GLOO_IFNAME])) and not env.get(
        "GLOO_SOCKET_IFNAME"
    ):
        wanted.append("GLOO_SOCKET_IFNAME")
    if truthy(env.get(rules.ENV_NCCL_IFNAME, rules.DEFAULTS[rules.ENV_NCCL_IFNAME])) and not env.get(
        "NCCL_SOCKET_IFNAME"
    ):
        wanted.append("NCCL_SOCKET_IFNAME")
    name = plan.local_addr or env.get(rules.ENV_LOCAL_ADDR, "")
    if not wanted or not name:
        return {}, []
    ifname, detail = interface_for(name)
    if ifname is None:
        return {}, [f"{'/'.join(wanted)} left unset: {detail}"]
    return {k: ifname for k in wanted}, []


# A program that starts torch.distributed itself (env:// from MASTER_ADDR: Training Operator's
# `python3 train.py`, vLLM or SGLang under LeaderWorkerSet) has no torchrun for the wrapper to
# stand in front of; the start-up hook calls this in its first Python process instead.
PIN_WAIT = 30.0  # seconds for this pod's DNS record, less than torchrun's wait: any Python pays it


def pin_sockets(env: Optional[Dict[str, str]] = None, wait: float = PIN_WAIT) -> None:
    """The socket pinning torchrun gets, into this process's env (its children inherit it and
    skip this), with one line saying what was set or, where it could not be, the risk."""
    target = os.environ if env is None else env
    target[rules.ENV_HANDLED] = "env"
    spread = settings(target)
    plan = rules.Plan()
    deadline = time.monotonic() + wait
    while True:
        extra, notes = socket_ifnames(plan, spread)
        if extra or not notes or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    master = next(
        (f"{k}={target[k]}" for k in ("MASTER_ADDR", "PET_MASTER_ADDR", "LWS_LEADER_ADDRESS") if target.get(k)), ""
    )
    if extra:
        target.update(extra)
        pinned = ", ".join(f"{k}={v}" for k, v in sorted(extra.items()))
        log(f"torch.distributed without torchrun ({master}): {pinned}, the interface of "
            f"{spread.get(rules.ENV_LOCAL_ADDR)}")  # fmt: skip
    elif notes:
        log(f"warning: torch.distributed without torchrun ({master}): {'; '.join(notes)}. Gloo may "
            "advertise the node's host name's address (127.0.1.1 on many images) and the other nodes' connects "
            "fail. " + _see("Gloo: `Gloo connectFullMesh failed … remote=[127.0.1.1]`"))  # fmt: skip


# ---------------------------------------------------------------------------- main


def search_domains(root: str) -> List[str]:
    """The resolver's search list from ROOT/etc/resolv.conf (the last search/domain line wins,
    as in glibc); [] when there is none."""
    try:
        with open(os.path.join(root, "etc", "resolv.conf")) as f:
            text = f.read()
    except OSError:
        return []
    found: List[str] = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("search", "domain"):
            found = words[1:]
    return found


def settings(env: Mapping[str, str]) -> Dict[str, str]:
    """The env with the webhook's settings spread out, and what follows from them: this pod's
    DNS identity in the namespace's zone, read from its resolv.conf (see rules.implied)."""
    root = env.get(rules.ENV_SYSFS_ROOT) or "/"
    unpacked: Dict[str, str] = rules.unpack(env, rules.cluster_zone(search_domains(root)))
    return unpacked


def log(message: str) -> None:
    sys.stderr.write(f"{PREFIX}: {message}\n")
    sys.stderr.flush()


def here(env: Mapping[str, str], wait: bool = True) -> rules.Here:
    """This node for the rules: its host name, its interfaces' addresses, and a resolver that
    waits (up to the DNS timeout) for a name to appear, as the DNS preflight does."""
    timeout = rules.dns_timeout(env) if wait else 0.0

    def resolve_waiting(name: str) -> List[str]:
        try:
            wait_resolvable(name, timeout, "the rendezvous endpoint host")
            return resolve(name)
        except (PreflightError, OSError):
            return []

    def resolve_now(name: str) -> List[str]:
        try:
            return resolve_interruptibly(name)
        except OSError:
            return []

    addresses = [ip for ips in interface_addresses().values() for ip in ips]
    return rules.Here(socket.gethostname(), addresses, resolve_waiting, can_bind, resolve_now)


def can_bind(ip: str) -> bool:
    """Whether this node carries the address: only a local address can be bound (port 0: any
    free port, released at once)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
    except OSError:
        return False
    return True


def plan_for(
    args: Sequence[str], env: Mapping[str, str], node: Optional[rules.Here] = None
) -> Tuple[List[str], rules.Plan]:
    """The final argv and the decision (its notes are logged with the summary)."""
    try:
        new_args, plan = merge(args, env, node)
        return list(new_args), plan
    except ArgvError as e:
        plan = rules.Plan()
        plan.backend = "unparsed"
        plan.notes.append(f"torchrun arguments not understood ({e}); passed through unchanged")
        return list(args), plan


def checked(plan: rules.Plan, env: Mapping[str, str], interpreter: Optional[str]) -> Tuple[Dict[str, str], List[str]]:
    """Preflight (which waits for this pod's DNS name), then GLOO_SOCKET_IFNAME from the
    interface that name resolves to. In this order: looked up before its DNS record exists, the
    name does not resolve, gloo is left to bind 127.0.1.1, and every peer's connect is refused."""
    if plan.fatal:
        raise PreflightError(plan.fatal + ". " + _see("The wrapper refuses to start"))
    if plan.backend not in ("help", "standalone", "unparsed"):
        fabric_preflight(plan, env)
        preflight(plan, env, interpreter)
        if plan.backend == "c10d" and truthy(plan.is_host):
            claim_store_port(plan)
    extra_env, notes = socket_ifnames(plan, env)
    return extra_env, plan.notes + notes


# The store's port on the host network is the node's: a second job's store on it fails inside
# torch. The store host claims the port first with an abstract unix socket (per network
# namespace, so per node under hostNetwork) that torchrun inherits and holds while it runs, and
# a second one naming its job, which a later claimant reads in /proc/net/unix.
_CLAIM = "hostnet-rdma/store-port/"
_HELD: List[socket.socket] = []  # open for the life of this process, and of the torchrun it execs


def store_port(endpoint: str) -> int:
    tail = endpoint.rsplit("]", 1)[-1]
    port = tail.rsplit(":", 1)[1] if ":" in tail else ""
    return int(port) if port.isdigit() else 29400  # torchrun's default


def claim_store_port(plan: rules.Plan, proc_net_unix: str = "/proc/net/unix") -> None:
    port = store_port(plan.endpoint)
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind("\0" + _CLAIM + str(port))
    except OSError:
        lock.close()
        holder = _holder(port, proc_net_unix)
        raise PreflightError(
            f"port {port} of this node is already the rendezvous store of {holder}: two jobs on one node's host "
            "network cannot share a store port. Give one of them another (pod annotation hostnet-rdma.io/rdzv-port, "
            "or --rdzv-endpoint with a port of its own). " + _see("Port conflicts (29500, 23456) under hostNetwork")
        ) from None
    tag = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):  # the name only says whose it is
        tag.bind(f"\0{_CLAIM}{port}/job/{plan.rdzv_id or '-'}/pod/{plan.local_addr or '-'}")
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store does: TIME_WAIT is no owner
    try:
        probe.bind(("", port))
    except OSError as e:
        lock.close()
        tag.close()
        raise PreflightError(
            f"port {port} of this node is taken ({e.strerror}) by a process that is not a rendezvous store the "
            "hostnet-rdma wrapper started: torchrun could not start its store there. Give this job another port "
            "(pod annotation hostnet-rdma.io/rdzv-port). " + _see("Port conflicts (29500, 23456) under hostNetwork")
        ) from None
    finally:
        probe.close()
    for s in (lock, tag):
        s.set_inheritable(True)
        _HELD.append(s)


def _holder(port: int, proc_net_unix: str) -> str:
    """The job holding a store port, from the claim names in /proc/net/unix."""
    prefix = f"@{_CLAIM}{port}/job/"
    try:
        with open(proc_net_unix) as f:
            for line in f:
                name = line.split()[-1] if line.split() else ""
                if name.startswith(prefix):
                    job, _, pod = name[len(prefix) :].partition("/pod/")
                    return f"job {job} (pod {pod})"
    except OSError:
        pass
    return "another job"


def _report(plan: rules.Plan, env: Mapping[str, str], extra_env: Dict[str, str], notes: List[str]) -> None:
    log(rules.summary(plan, env, extra_env.get("GLOO_SOCKET_IFNAME", env.get("GLOO_SOCKET_IFNAME", "-"))))
    for note in notes:
        log(f"warning: {note}")


def refuse(plan: rules.Plan, env: Mapping[str, str], error: PreflightError) -> None:
    """The log line of a torchrun that will not start: the decision so far (a refusal by the
    rules has one), its notes, then the cause."""
    if plan.fatal:
        _report(plan, env, {}, plan.notes)
    log(f"error: {error}")
    termination_message(f"{PREFIX}: {error}", env)


# The kubelet reads the termination message file (rules.TERMINATION_LOG unless the container
# names another) into the container's status when it ends (`kubectl describe pod`: Message).
TERMINATION_MAX = 4096  # the kubelet keeps at most this much of it


def termination_message(message: str, env: Mapping[str, str]) -> None:
    """The cause of a refusal where `kubectl describe pod` shows it, besides the log. Only into
    the file the kubelet mounted (never created: outside a pod there is none)."""
    path = env.get(rules.ENV_TERMINATION_LOG) or rules.TERMINATION_LOG
    if not os.path.isfile(path):
        return
    data = message.encode("utf-8", "replace")[:TERMINATION_MAX]
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        pass  # the log line is there; a read-only or vanished file must not hide it


def fabric_preflight(plan: rules.Plan, env: Mapping[str, str]) -> None:
    """The RDMA checks for the NCCL env this torchrun runs with: one line per problem and a
    summary; warnings by default, a refusal to start in strict mode."""
    mode = (env.get(rules.ENV_FABRIC_PREFLIGHT) or rules.DEFAULTS[rules.ENV_FABRIC_PREFLIGHT]).strip().lower()
    if mode == "off" or plan.backend in ("help", "unparsed"):
        return
    findings = fabric.check(
        root=env.get(rules.ENV_SYSFS_ROOT) or "/",
        hca=env.get("NCCL_IB_HCA", ""),
        gid_index=env.get("NCCL_IB_GID_INDEX", ""),
    )
    problems = [f for f in findings if f.problem]
    for f in problems:
        log(f"{'error' if mode == 'strict' else 'warning'}: fabric {f.line()}")
    log(fabric.summary(findings))
    if problems and mode == "strict":
        raise PreflightError(
            f"fabric preflight found {len(problems)} problem(s) and {rules.ENV_FABRIC_PREFLIGHT}=strict: not starting "
            "torchrun (annotate hostnet-rdma.io/fabric-preflight: warn to start anyway)"
        )


# ---------------------------------------------------------------------------- transport watch
def _dry_run(new_args: List[str], plan: rules.Plan, env: Mapping[str, str]) -> None:
    """HOSTNET_RDMA_DRY_RUN: the log lines and the fabric checks, then the final argv as JSON
    (no DNS wait: the interface is looked up with whatever resolves now)."""
    extra_env, notes = socket_ifnames(plan, env)
    _report(plan, env, extra_env, plan.notes + notes)
    if plan.fatal:
        log(f"error: {plan.fatal}")
    try:
        fabric_preflight(plan, env)
    except PreflightError as e:
        log(f"error: {e}")
    sys.stdout.write(json.dumps(["torchrun", *new_args]) + "\n")
    sys.stdout.flush()


def stop_on_sigterm(env: Mapping[str, str]) -> object:
    """Until torchrun starts, SIGTERM ends the wrapper at once (exit 143), saying so in the log
    and the termination message. As PID 1 of the container (command: [torchrun, ...] is exec'd
    all the way down) a process without a handler never receives SIGTERM (the kernel drops it
    for a PID namespace's init), and the pod would sit out its grace period in the DNS wait.
    Returns the handler it replaced (the start-up hook gives it back to torchrun)."""

    def stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        message = f"stopped by {name} before torchrun started (the pod was deleted or restarted)"
        log(message)
        termination_message(f"{PREFIX}: {message}", env)
        os._exit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def main(args: Sequence[str], env: Optional[Dict[str, str]] = None) -> int:
    """The PATH shim's entry: decide, check, then exec the real torchrun."""
    stop_on_sigterm(os.environ if env is None else env)
    env = settings(os.environ if env is None else env)
    dry = truthy(env.get(rules.ENV_DRY_RUN))
    new_args, plan = plan_for(args, env, here(env, wait=not dry))
    if dry:
        _dry_run(new_args, plan, env)
        return 0
    real = find_real_torchrun(env)
    if real is None:
        log("the real torchrun is not on PATH after the wrapper; is torch installed in this image?")
        return 127
    try:
        extra_env, notes = checked(plan, env, interpreter_of(real))
    except PreflightError as e:
        refuse(plan, env, e)
        return 1
    _report(plan, env, extra_env, notes)
    env.update(extra_env)
    ncclwatch.start(env, termination_message, interface_addresses)
    # execve keeps the pid: the start-up hook in the real torchrun sees it is already handled.
    env[rules.ENV_HANDLED] = str(os.getpid())
    os.execve(real, [real, *new_args], env)
    return 0  # pragma: no cover  (execve does not return)


def intercept(argv: List[str]) -> None:
    """The start-up hook's entry, inside a torchrun process however it was started (absolute
    path, another PATH, a login shell, `python -m torch.distributed.run`): rewrite its argv in
    place before torchrun parses it. Exits the process on a preflight failure or a dry run."""
    previous = stop_on_sigterm(os.environ)
    env = settings(os.environ)
    dry = truthy(env.get(rules.ENV_DRY_RUN))
    new_args, plan = plan_for(argv[1:], env, here(env, wait=not dry))
    if dry:
        _dry_run(new_args, plan, env)
        os._exit(0)
    try:
        extra_env, notes = checked(plan, env, sys.executable)
    except PreflightError as e:
        refuse(plan, env, e)
        sys.stderr.flush()
        os._exit(1)
    _report(plan, env, extra_env, notes)
    os.environ.update(extra_env)
    watched = dict(env, **extra_env)
    ncclwatch.start(watched, termination_message, interface_addresses)
    os.environ.update({k: watched[k] for k in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE") if k in watched})
    os.environ[rules.ENV_HANDLED] = str(os.getpid())
    argv[1:] = new_args
    if previous is not None:  # None: set outside Python, and cannot be given back
        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]  # torchrun's own from here


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
