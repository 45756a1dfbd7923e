"""hostnet-rdma's torchrun wrapper: installed as `torchrun` first on PATH inside the pod.

It runs inside users' training images, so: standard library only, Python 3.8+, one file.
It sees the final, shell-expanded argv, merges in what a host-network pod needs for
torchrun's rendezvous, checks what would otherwise hang for ten minutes, and execs the
real torchrun. User-given values always win.

Rules (backend c10d): --local-addr := this pod's DNS name; is_host := the endpoint's host
is one of this pod's own DNS names (never the node's name); --rdzv-id := unique job id when
absent or `none`; endpoint/backend/nnodes := launcher defaults only when the user gave none.
etcd / etcd-v2: the same without is_host. static: argv untouched.
Inputs come from HOSTNET_RDMA_* env set by the admission webhook (see README).
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

PREFIX = "hostnet-rdma"
README_TROUBLESHOOTING = "https://github.com/hostnet-rdma/hostnet-rdma#troubleshooting"

# torchrun options that take no value (torch/distributed/run.py); every other option does.
FLAG_OPTIONS = {"--standalone", "-m", "--module", "--no-python", "--run-path", "--virtual-local-rank", "-h", "--help"}

ETCD_BACKENDS = ("etcd", "etcd-v2")


class PreflightError(Exception):
    """A condition that would make torchrun fail slowly; the message says what to do."""


# ---------------------------------------------------------------------------- argv


def canonical(option: str) -> str:
    """`--rdzv_conf` and `--rdzv-conf` are the same torchrun option."""
    if option.startswith("--"):
        return "--" + option[2:].replace("_", "-")
    return option


class Argv:
    """torchrun's own options (before the training script) with their positions."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.inserted = 0
        # canonical option -> (index of the option token, inline value or None)
        self.options: Dict[str, Tuple[int, Optional[str]]] = {}
        i = 0
        while i < len(self.args):
            tok = self.args[i]
            if tok == "--" or not tok.startswith("-") or tok == "-":
                break
            key, eq, inline = tok.partition("=")
            key = canonical(key)
            if eq:
                self.options[key] = (i, inline)
                i += 1
            elif key in FLAG_OPTIONS:
                self.options[key] = (i, None)
                i += 1
            else:
                self.options[key] = (i, None)
                i += 2

    def get(self, option: str) -> Optional[str]:
        found = self.options.get(option)
        if found is None:
            return None
        index, inline = found
        if inline is not None:
            return inline
        if option in FLAG_OPTIONS:
            return "1"
        return self.args[index + 1] if index + 1 < len(self.args) else None

    def has(self, option: str) -> bool:
        return option in self.options

    def replace(self, option: str, value: str) -> None:
        index, inline = self.options[option]
        if inline is not None or index + 1 >= len(self.args):
            spelled = self.args[index].partition("=")[0]  # keep the user's --rdzv_conf spelling
            self.args[index] = f"{spelled}={value}"
        else:
            self.args[index + 1] = value

    def prepend(self, option: str, value: str) -> None:
        # Options go first: torchrun accepts them in any order before the script, and the
        # script's own arguments after it are never touched.
        at = self.inserted
        self.args.insert(at, f"{option}={value}")
        self.inserted += 1
        self.options = {k: (i + 1 if i >= at else i, v) for k, (i, v) in self.options.items()}
        self.options[option] = (at, value)


def effective(argv: Argv, env: Mapping[str, str], option: str) -> Tuple[Optional[str], str]:
    """The value torchrun will use for an option and where it comes from: cli, env or none.

    torchrun reads PET_<DEST> for every option; a CLI flag overrides it.
    """
    value = argv.get(option)
    if value is not None:
        return value, "cli"
    pet = "PET_" + option.lstrip("-").replace("-", "_").upper()
    if env.get(pet):
        return env[pet], "env"
    return None, "none"


def parse_conf(conf: str) -> List[Tuple[str, str]]:
    pairs: List[Tuple[str, str]] = []
    for part in conf.split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        pairs.append((key.strip(), value.strip()))
    return pairs


def endpoint_host(endpoint: str) -> str:
    """The host part of HOST[:PORT], with [v6] brackets removed, lower-cased, no final dot."""
    endpoint = endpoint.strip()
    if endpoint.startswith("["):
        host = endpoint[1:].split("]", 1)[0]
    elif endpoint.count(":") == 1:
        host = endpoint.split(":", 1)[0]
    else:
        host = endpoint
    return host.lower().rstrip(".")


def is_own_endpoint(endpoint: str, identities: Sequence[str]) -> bool:
    """True iff the endpoint names this pod by one of its DNS names.

    Never by IP: two pods of one job can share a node, hence an address.
    """
    host = endpoint_host(endpoint)
    return bool(host) and host in {i.lower().rstrip(".") for i in identities if i}


def is_loopback(host: str) -> bool:
    return host in ("localhost", "localhost.localdomain", "::1") or host.startswith("127.")


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(template: str, env: Mapping[str, str]) -> Optional[str]:
    """Expand ${VAR} from env; None when a referenced variable is unset or empty."""
    missing = [m for m in _VAR.findall(template) if not env.get(m)]
    if missing:
        return None
    return _VAR.sub(lambda m: env[m.group(1)], template)


def expand_sum(template: str, env: Mapping[str, str]) -> Optional[str]:
    """`${VC_MASTER_NUM}+${VC_WORKER_NUM}` -> "3"; a plain value passes through."""
    expanded = expand(template, env)
    if expanded is None or "+" not in expanded:
        return expanded
    try:
        return str(sum(int(term) for term in expanded.split("+")))
    except ValueError:
        return None


class Plan:
    def __init__(self) -> None:
        self.backend = "static"
        self.endpoint = ""
        self.local_addr = ""
        self.rdzv_id = ""
        self.is_host: Optional[str] = None
        self.nnodes = ""
        self.notes: List[str] = []


def merge(args: Sequence[str], env: Mapping[str, str]) -> Tuple[List[str], Plan]:
    """torchrun's argv after the wrapper's rules; pure (env in, argv out)."""
    argv = Argv(args)
    plan = Plan()
    if argv.has("--help") or argv.has("-h") or argv.has("--standalone") or env.get("PET_STANDALONE"):
        plan.backend = "standalone" if not argv.has("--help") else "help"
        return argv.args, plan

    backend, source = effective(argv, env, "--rdzv-backend")
    if backend is None:
        static_hint = any(effective(argv, env, o)[0] is not None for o in ("--master-addr", "--node-rank"))
        default = env.get("HOSTNET_RDMA_RDZV_BACKEND", "")
        if default and not static_hint:
            backend = default
            argv.prepend("--rdzv-backend", default)
        else:
            backend = "static"
    plan.backend = backend
    if backend == "static":
        plan.endpoint = effective(argv, env, "--master-addr")[0] or ""
        return argv.args, plan

    endpoint, source = effective(argv, env, "--rdzv-endpoint")
    if endpoint is None and env.get("HOSTNET_RDMA_RDZV_ENDPOINT"):
        endpoint = expand(env["HOSTNET_RDMA_RDZV_ENDPOINT"], env)
        if endpoint:
            argv.prepend("--rdzv-endpoint", endpoint)
        else:
            plan.notes.append(
                "default rendezvous endpoint needs env that is not set: " + env["HOSTNET_RDMA_RDZV_ENDPOINT"]
            )
    plan.endpoint = endpoint or ""

    nnodes, _ = effective(argv, env, "--nnodes")
    if nnodes is None and env.get("HOSTNET_RDMA_NNODES"):
        nnodes = expand_sum(env["HOSTNET_RDMA_NNODES"], env)
        if nnodes:
            argv.prepend("--nnodes", nnodes)
        else:
            plan.notes.append("default --nnodes needs env that is not set: " + env["HOSTNET_RDMA_NNODES"])
    plan.nnodes = nnodes or "1"

    rdzv_id, source = effective(argv, env, "--rdzv-id")
    wanted_id = env.get("HOSTNET_RDMA_RDZV_ID", "")
    if (rdzv_id is None or rdzv_id.strip().lower() == "none") and wanted_id:
        if source == "cli":
            argv.replace("--rdzv-id", wanted_id)
        else:
            argv.prepend("--rdzv-id", wanted_id)
        rdzv_id = wanted_id
    plan.rdzv_id = rdzv_id or "none"

    local_addr, _ = effective(argv, env, "--local-addr")
    if local_addr is None and env.get("HOSTNET_RDMA_LOCAL_ADDR"):
        local_addr = env["HOSTNET_RDMA_LOCAL_ADDR"]
        argv.prepend("--local-addr", local_addr)
    plan.local_addr = local_addr or ""

    if backend == "c10d":
        conf, source = effective(argv, env, "--rdzv-conf")
        pairs = parse_conf(conf or "")
        given = [v for k, v in pairs if k == "is_host"]
        if given:
            plan.is_host = given[-1]
        elif plan.endpoint and is_loopback(endpoint_host(plan.endpoint)):
            # A single-node job on localhost: torchrun already hosts the store itself.
            plan.notes.append("loopback rendezvous endpoint: is_host left to torchrun")
        elif plan.endpoint:
            identities = [i for i in env.get("HOSTNET_RDMA_IDENTITIES", "").split(",") if i]
            plan.is_host = "true" if is_own_endpoint(plan.endpoint, identities) else "false"
            merged = ",".join(f"{k}={v}" for k, v in [*pairs, ("is_host", plan.is_host)])
            if source == "cli":
                argv.replace("--rdzv-conf", merged)
            else:
                # A CLI --rdzv-conf replaces PET_RDZV_CONF wholesale, so carry its keys over.
                argv.prepend("--rdzv-conf", merged)
        else:
            plan.notes.append("no rendezvous endpoint: is_host not set")
    return argv.args, plan


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


def wait_resolvable(name: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.5
    last = ""
    while True:
        try:
            resolve(name)
            return
        except OSError as e:
            last = str(e)
        if time.monotonic() >= deadline:
            raise PreflightError(
                f"{what} {name!r} did not resolve within {int(timeout)}s ({last}). "
                "Usual causes: the pod lacks dnsPolicy: ClusterFirstWithHostNet (the webhook sets it; "
                "check the pod's hostnet-rdma.io/injected annotation), or the job's headless Service "
                "does not publish not-ready addresses (Volcano: svc plugin "
                "--publish-not-ready-addresses=true). See " + README_TROUBLESHOOTING
            )
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


# ---------------------------------------------------------------------------- torch


def find_real_torchrun(env: Mapping[str, str]) -> Optional[str]:
    """The first `torchrun` on PATH that is not this wrapper's shim."""
    own_dir = os.path.dirname(os.path.realpath(__file__))
    for d in env.get("PATH", os.defpath).split(os.pathsep):
        if not d:
            continue
        candidate = os.path.join(d, "torchrun")
        if os.path.realpath(d) == own_dir:
            continue
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
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
        p = subprocess.run([exe, "-c", code], capture_output=True, text=True, timeout=60)
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
            "other nodes would be told this node's host name and hang. Use torch >= 2.5. See " + README_TROUBLESHOOTING
        )


def preflight(plan: Plan, env: Mapping[str, str], interpreter: Optional[str]) -> None:
    code, out = run_in(interpreter, "import importlib.metadata as m; print(m.version('torch'))")
    if code == 0 and out:
        check_torch_version(out.splitlines()[-1], env.get("HOSTNET_RDMA_MIN_TORCH", "2.5"))
    if plan.backend in ETCD_BACKENDS:
        code, out = run_in(interpreter, "import etcd")
        if code != 0:
            raise PreflightError(
                f"rendezvous backend {plan.backend} needs the `etcd` module (python-etcd), which "
                "this image lacks. Install it first: `pip install python-etcd==0.4.5`. See " + README_TROUBLESHOOTING
            )
    timeout = float(env.get("HOSTNET_RDMA_DNS_TIMEOUT", "300") or 300)
    if plan.local_addr:
        wait_resolvable(plan.local_addr, timeout, "this pod's DNS name (--local-addr)")
    host = endpoint_host(plan.endpoint) if plan.endpoint else ""
    if host:
        wait_resolvable(host, timeout, "the rendezvous endpoint host")


def truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def socket_ifnames(plan: Plan, env: Mapping[str, str]) -> Tuple[Dict[str, str], List[str]]:
    """GLOO_SOCKET_IFNAME (and optionally NCCL_SOCKET_IFNAME) for the pod's own address.

    Gloo binds to the address of the node's host name otherwise, 127.0.1.1 on common
    images, and every cross-node connect is refused.
    """
    wanted = []
    if truthy(env.get("HOSTNET_RDMA_GLOO_SOCKET_IFNAME", "1")) and not env.get("GLOO_SOCKET_IFNAME"):
        wanted.append("GLOO_SOCKET_IFNAME")
    if truthy(env.get("HOSTNET_RDMA_NCCL_SOCKET_IFNAME", "0")) and not env.get("NCCL_SOCKET_IFNAME"):
        wanted.append("NCCL_SOCKET_IFNAME")
    name = plan.local_addr or env.get("HOSTNET_RDMA_LOCAL_ADDR", "")
    if not wanted or not name:
        return {}, []
    ifname, detail = interface_for(name)
    if ifname is None:
        return {}, [f"{'/'.join(wanted)} left unset: {detail}"]
    return {k: ifname for k in wanted}, []


# ---------------------------------------------------------------------------- main


def log(message: str) -> None:
    sys.stderr.write(f"{PREFIX}: {message}\n")
    sys.stderr.flush()


def main(args: Sequence[str], env: Optional[Dict[str, str]] = None) -> int:
    env = dict(os.environ if env is None else env)
    new_args, plan = merge(args, env)
    extra_env, notes = socket_ifnames(plan, env)
    notes = plan.notes + notes
    summary = (
        f"launcher={env.get('HOSTNET_RDMA_LAUNCHER', 'unknown')} backend={plan.backend} "
        f"is_host={plan.is_host if plan.is_host is not None else '-'} "
        f"local_addr={plan.local_addr or '-'} endpoint={plan.endpoint or '-'} "
        f"rdzv_id={plan.rdzv_id or '-'} nnodes={plan.nnodes or '-'} "
        f"gloo_socket_ifname={extra_env.get('GLOO_SOCKET_IFNAME', env.get('GLOO_SOCKET_IFNAME', '-'))}"
    )
    if truthy(env.get("HOSTNET_RDMA_DRY_RUN")):
        log(summary)
        for note in notes:
            log(note)
        sys.stdout.write(json.dumps(["torchrun", *new_args]) + "\n")
        sys.stdout.flush()
        return 0
    real = find_real_torchrun(env)
    if real is None:
        log("the real torchrun is not on PATH after the wrapper; is torch installed in this image?")
        return 127
    try:
        if plan.backend not in ("help", "standalone"):
            preflight(plan, env, interpreter_of(real))
    except PreflightError as e:
        log(f"error: {e}")
        return 1
    log(summary)
    for note in notes:
        log(note)
    env.update(extra_env)
    os.execve(real, [real, *new_args], env)
    return 0  # pragma: no cover  (execve does not return)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
