"""The rendezvous rule, in one place: pure, standard library only, Python 3.8+.

Used by the webhook at admission (app.core.wrap: what to tell a torchrun that nothing can
intercept, and what to warn about) and by the in-container wrapper at run time (which argv
torchrun gets), so the two can never disagree. No I/O: argv and env in, a decision out.

Rules (backend c10d): --local-addr := this pod's DNS name; is_host := the endpoint's host is
one of this pod's own DNS names; --rdzv-id := unique job id when absent or `none`;
endpoint/backend/nnodes := launcher defaults only when the user gave none. An endpoint that is
no pod's DNS name (an IP address, the node's host name, a Service, an external name) is decided
at run time by whether it is, or resolves to, one of this node's addresses (Here): torchrun's
own test compares it with the node's host name and what that name resolves to (127.0.1.1 on
common images), so left to torchrun nobody hosts the store. What cannot be decided safely is a
refusal with a one-line cause (Plan.fatal): an endpoint that resolves nowhere, a loopback
endpoint for several nodes, no node count for a job of several pods.
etcd / etcd-v2: the same without is_host. static (--master-addr / --node-rank): untouched.
A CLI flag always wins over its PET_* variable, as in torchrun itself.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

# ---------------------------------------------------------------------------- contract
# The file an init container installs beside the `torchrun` shim; the training container's
# command becomes [BIN_DIR/BOOTSTRAP_FILE, *original argv].
BOOTSTRAP_FILE = "bootstrap"
# Env the webhook sets for the wrapper (documented in docs/wrapper.md). Everything else reads these.
ENV_PREFIX = "HOSTNET_RDMA_"
ENV_LAUNCHER = "HOSTNET_RDMA_LAUNCHER"
ENV_LOCAL_ADDR = "HOSTNET_RDMA_LOCAL_ADDR"
ENV_IDENTITIES = "HOSTNET_RDMA_IDENTITIES"
ENV_PEERS = "HOSTNET_RDMA_PEERS"
ENV_RDZV_ID = "HOSTNET_RDMA_RDZV_ID"
ENV_RDZV_BACKEND = "HOSTNET_RDMA_RDZV_BACKEND"
ENV_RDZV_ENDPOINT = "HOSTNET_RDMA_RDZV_ENDPOINT"
ENV_NNODES = "HOSTNET_RDMA_NNODES"
ENV_GLOO_IFNAME = "HOSTNET_RDMA_GLOO_SOCKET_IFNAME"
ENV_NCCL_IFNAME = "HOSTNET_RDMA_NCCL_SOCKET_IFNAME"
ENV_DNS_TIMEOUT = "HOSTNET_RDMA_DNS_TIMEOUT"
ENV_MIN_TORCH = "HOSTNET_RDMA_MIN_TORCH"
ENV_DRY_RUN = "HOSTNET_RDMA_DRY_RUN"
ENV_BIN_DIR = "HOSTNET_RDMA_BIN_DIR"
# The container's python, found by the bootstrap; the shim an init container installs runs it.
ENV_PYTHON = "HOSTNET_RDMA_PYTHON"
# warn (default) | strict (refuse to start on a fabric problem) | off
ENV_FABRIC_PREFLIGHT = "HOSTNET_RDMA_FABRIC_PREFLIGHT"
# Where /sys and /proc are read from (tests and `doctor --sysfs-root`); default "/".
ENV_SYSFS_ROOT = "HOSTNET_RDMA_SYSFS_ROOT"
# Where the wrapper writes why it refused to start (the container's terminationMessagePath,
# set by the webhook only when the container names another path than /dev/termination-log).
ENV_TERMINATION_LOG = "HOSTNET_RDMA_TERMINATION_LOG"
# "1": a --local-addr of the user's that other nodes could not reach is refused, not replaced
# (the pod annotation hostnet-rdma.io/local-addr: keep).
ENV_KEEP_LOCAL_ADDR = "HOSTNET_RDMA_KEEP_LOCAL_ADDR"
# What a refusal is about (Plan.fatal_kind): the webhook gives each its Event reason
# (app.core.reasons), so no one reads the kind back out of the text.
REFUSE_NNODES = "nnodes"
REFUSE_LOOPBACK = "loopback"
REFUSE_LOCAL_ADDR = "local-addr"
REFUSE_NO_POD = "no-pod"
REFUSE_RENDEZVOUS = "rendezvous"
# "1": a job whose NCCL chose sockets instead of RDMA is stopped (the pod annotation
# hostnet-rdma.io/require-rdma, or the cluster config's wrapper.requireRdma).
ENV_REQUIRE_RDMA = "HOSTNET_RDMA_REQUIRE_RDMA"
# Seconds after an NCCL communicator's `Init START` without `Init COMPLETE` before the wrapper
# probes the path to the job's peers and says what it found (0: never). Set in the pod's env.
ENV_NCCL_STALL = "HOSTNET_RDMA_NCCL_STALL_SECONDS"
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
# Set by the wrapper on the process it execs, so the start-up hook does not handle it twice.
ENV_HANDLED = "HOSTNET_RDMA_HANDLED"
# What the webhook decided for the pod, in one variable: `key=value` pairs joined by ";", each
# key a variable above without the prefix, lower case (`local_addr=job-0.job;peers=job-*`).
# One env entry instead of up to a dozen: every byte is in every pod, and in every watch event.
ENV_POD = "HOSTNET_RDMA_POD"
PACKED = (
    ENV_LAUNCHER, ENV_LOCAL_ADDR, ENV_IDENTITIES, ENV_PEERS, ENV_RDZV_ID, ENV_RDZV_BACKEND, ENV_RDZV_ENDPOINT,
    ENV_NNODES, ENV_GLOO_IFNAME, ENV_NCCL_IFNAME, ENV_DNS_TIMEOUT, ENV_MIN_TORCH, ENV_FABRIC_PREFLIGHT,
    ENV_TERMINATION_LOG, ENV_KEEP_LOCAL_ADDR, ENV_REQUIRE_RDMA,
)  # fmt: skip
_PACKED_KEYS = {name[len(ENV_PREFIX) :].lower(): name for name in PACKED}

# The wrapper's behaviour when the webhook does not set these: the webhook sets them only when
# the cluster config differs (fewer bytes in every pod). InjectConfig's defaults match (tested).
DEFAULTS = {
    ENV_GLOO_IFNAME: "1",
    ENV_NCCL_IFNAME: "0",
    ENV_DNS_TIMEOUT: "300",
    ENV_MIN_TORCH: "2.5",
    ENV_FABRIC_PREFLIGHT: "warn",
}
# Not the webhook's to set (DEFAULTS are): well under torch's (10 min) and NCCL's own time-outs;
# a start-up that is merely slow (a large job) gets one line, never a stop.
NCCL_STALL_DEFAULT = 60.0

ETCD_BACKENDS = ("etcd", "etcd-v2")

# HOSTNET_RDMA_NNODES when the pod is one of a job of several pods but nothing says how many:
# torchrun's default (1) would make each pod train alone, so the wrapper refuses unless the
# user gives --nnodes (or the pod annotation hostnet-rdma.io/nnodes).
NNODES_UNKNOWN = "?"
ANN_NNODES = "hostnet-rdma.io/nnodes"
ANN_LOCAL_ADDR = "hostnet-rdma.io/local-addr"
ANN_REQUIRE_RDMA = "hostnet-rdma.io/require-rdma"


def help_topic(title: str) -> str:
    """The `hostnet-rdma help` topic of a docs/troubleshooting.md section: its title's words."""
    return "-".join(re.findall(r"[a-z0-9][a-z0-9.]*", title.lower()))


# What the wrapper's lines in the pod's log begin with.
PREFIX = "hostnet-rdma"


def see(section: str) -> str:
    """Where a refusal is explained: a section of docs/troubleshooting.md, by its help topic."""
    return f'See `hostnet-rdma help {help_topic(section)}` (docs/troubleshooting.md, "{section}")'


def pack(settings: Mapping[str, str]) -> str:
    """HOSTNET_RDMA_POD's value for these settings (names from PACKED, values without ";")."""
    return ";".join(name[len(ENV_PREFIX) :].lower() + "=" + value for name, value in settings.items())


def is_packed(value: str) -> bool:
    """Whether a string is settings as pack() writes them ("" for none)."""
    return all(part.partition("=")[0] in _PACKED_KEYS and "=" in part for part in value.split(";")) if value else True


def unpack(env: Mapping[str, str], zone: str = "") -> Dict[str, str]:
    """A copy of env with HOSTNET_RDMA_POD spread into its HOSTNET_RDMA_* names. Those names
    set on their own are read too (pods from older versions, manual runs); the packed value
    wins, as the webhook's value always did. Unknown keys are ignored. A setting absent from
    both gets what implied() derives from the others (`zone`: see cluster_zone)."""
    out = dict(env)
    for part in env.get(ENV_POD, "").split(";"):
        key, sep, value = part.partition("=")
        name = _PACKED_KEYS.get(key.strip())
        if sep and name:
            out[name] = value
    for name, value in implied(out, zone).items():
        out.setdefault(name, value)
    return out


def implied(env: Mapping[str, str], zone: str = "") -> Dict[str, str]:
    """The settings that follow from others, so the webhook leaves them out when they agree
    (every byte is in every pod) and sends them, empty if need be, when they do not:
    - the backend of a default endpoint is c10d (every launcher default is a c10d store);
    - the peers of a `host.subdomain` address are `<subdomain>-*` (launchers name the headless
      Service after the job, and the job's pods `<job>-...`);
    - this pod's identity is its address in the namespace's DNS zone, `<local_addr>.<zone>`:
      the name the pod's own resolver completes the short forms to (without a zone, the address
      alone: an endpoint naming this pod as the launchers do still matches)."""
    out: Dict[str, str] = {}
    if env.get(ENV_RDZV_ENDPOINT):
        out[ENV_RDZV_BACKEND] = "c10d"
    local = env.get(ENV_LOCAL_ADDR, "")
    labels = local.split(".")
    if len(labels) == 2 and all(labels):
        out[ENV_PEERS] = labels[1] + "-*"
    if local:
        out[ENV_IDENTITIES] = local + "." + zone if zone else local
    return out


def cluster_zone(search: Sequence[str]) -> str:
    """The namespace's DNS zone, `<ns>.svc.<cluster domain>`, from a resolv.conf search list:
    the kubelet writes it first for dnsPolicy ClusterFirstWithHostNet (and the pod's short
    names resolve through it). "" when the list has none (the webhook then sends identities)."""
    for domain in search:
        labels = domain.lower().rstrip(".").split(".")
        if len(labels) >= 3 and labels[1] == "svc" and all(labels):
            return ".".join(labels)
    return ""


# ---------------------------------------------------------------------------- argv
# torchrun's options (torch/distributed/run.py): long names in their hyphen spelling; every
# multi-word option also has an underscore spelling. Flags take no value; all others take one.
_FLAGS = ("standalone", "module", "no-python", "run-path", "virtual-local-rank", "help")
_VALUED = (
    "nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "max-restarts",
    "monitor-interval", "start-method", "event-log-handler", "role", "log-dir", "redirects", "tee",
    "log-line-prefix-template", "local-ranks-filter", "duplicate-stdout-filters", "duplicate-stderr-filters",
    "node-rank", "master-addr", "master-port", "local-addr", "logs-specs", "numa-binding", "signals-to-handle",
    "shutdown-timeout", "print-completion",
)  # fmt: skip
_SHORT = {"-m": "--module", "-h": "--help", "-r": "--redirects", "-t": "--tee"}
LONG: Dict[str, str] = {}  # every accepted spelling -> canonical "--hyphen-name"
for _name in (*_FLAGS, *_VALUED):
    LONG["--" + _name] = "--" + _name
    LONG["--" + _name.replace("-", "_")] = "--" + _name
FLAGS = {"--" + n for n in _FLAGS}


class ArgvError(ValueError):
    """torchrun itself would reject this argv; the wrapper leaves it alone."""


# Every prefix of a spelling (as argparse accepts abbreviations) -> the canonical options it
# may stand for; made once, so resolving one costs a lookup, not a scan of LONG (an argv of
# 650 k abbreviations cost 2.6 s).
_PREFIXES: Dict[str, FrozenSet[str]] = {}
for _spelling, _option in LONG.items():
    for _end in range(3, len(_spelling) + 1):
        _PREFIXES[_spelling[:_end]] = _PREFIXES.get(_spelling[:_end], frozenset()) | {_option}


def canonical(option: str) -> str:
    """The canonical spelling of a long option, resolving unambiguous prefixes as argparse does."""
    found = LONG.get(option)
    if found is not None:
        return found
    matches = _PREFIXES.get(option, frozenset())
    if len(matches) == 1:
        return next(iter(matches))
    if matches:
        raise ArgvError(f"ambiguous option {option}")
    raise ArgvError(f"unrecognized option {option}")


class Argv:
    """torchrun's own options (before the training script) with their positions."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.inserted = 0
        # canonical option -> (index of the option token, inline value or None)
        self.options: Dict[str, Tuple[int, Optional[str]]] = {}
        self.script: Optional[int] = None
        i = 0
        while i < len(self.args):
            tok = self.args[i]
            if tok == "--":
                self.script = i + 1 if i + 1 < len(self.args) else None
                break
            if not tok.startswith("-") or tok == "-":
                self.script = i
                break
            if tok.startswith("--"):
                name, eq, inline = tok.partition("=")
                key = canonical(name)
                value: Optional[str] = inline if eq else None
            else:
                # Short options: -m / -h are flags; -r / -t take a value, attached (-t3) or next.
                key = _SHORT.get(tok[:2], "")
                if not key:
                    raise ArgvError(f"unrecognized option {tok}")
                attached = tok[2:]
                if key in FLAGS:
                    if attached:
                        raise ArgvError(f"combined short options are not supported: {tok}")
                    value = None
                else:
                    value = attached[1:] if attached.startswith("=") else (attached or None)
            if key in FLAGS:
                if value is not None and tok.startswith("--"):
                    raise ArgvError(f"{key} takes no value")
                self.options[key] = (i, None)
                i += 1
            elif value is not None:
                self.options[key] = (i, value)
                i += 1
            else:
                if i + 1 >= len(self.args):
                    raise ArgvError(f"{key} needs a value")
                self.options[key] = (i, None)
                i += 2

    def get(self, option: str) -> Optional[str]:
        found = self.options.get(option)
        if found is None:
            return None
        index, inline = found
        if inline is not None:
            return inline
        if option in FLAGS:
            return "1"
        return self.args[index + 1] if index + 1 < len(self.args) else None

    def has(self, option: str) -> bool:
        return option in self.options

    def replace(self, option: str, value: str) -> None:
        index = self.options[option][0]
        inline: Optional[str] = self.options[option][1]  # annotated: mypyc's inference says None
        tok = self.args[index]
        if inline is not None and not tok.startswith("--"):  # -t3 style
            self.args[index] = tok[:2] + value
        elif inline is not None:
            self.args[index] = f"{tok.partition('=')[0]}={value}"  # keep the user's --rdzv_conf spelling
        else:
            self.args[index + 1] = value
        self.options[option] = (index, inline if inline is None else value)

    def prepend(self, option: str, value: str) -> None:
        # Options go first: torchrun accepts them in any order before the script, and the
        # script's own arguments after it are never touched.
        at = self.inserted
        self.args.insert(at, f"{option}={value}")
        self.inserted += 1
        self.options = {k: (i + 1 if i >= at else i, v) for k, (i, v) in self.options.items()}
        self.options[option] = (at, value)
        if self.script is not None:
            self.script += 1


def _pet_name(option: str) -> str:
    return "PET_" + option.lstrip("-").replace("-", "_").upper()


_PET_NAMES = {canonical_name: _pet_name(canonical_name) for canonical_name in set(LONG.values())}


def pet_name(option: str) -> str:
    """torchrun's PET_* variable for an option (`--rdzv-endpoint` -> PET_RDZV_ENDPOINT)."""
    return _PET_NAMES.get(option) or _pet_name(option)


def _put(argv: Argv, source: str, option: str, value: str) -> None:
    """Set an option torchrun will use: in place where the command has it, else before the
    command's own (a flag also wins over torchrun's PET_* env)."""
    if source == "cli":
        argv.replace(option, value)
    else:
        argv.prepend(option, value)


def effective(argv: Argv, env: Mapping[str, str], option: str) -> Tuple[Optional[str], str]:
    """The value torchrun will use for an option and where it comes from: cli, env or none.

    torchrun reads PET_<DEST> for every option; a CLI flag overrides it.
    """
    value = argv.get(option)
    if value is not None:
        return value, "cli"
    pet = pet_name(option)
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


# ---------------------------------------------------------------------------- names


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


_IP_CHARS = frozenset("0123456789abcdefABCDEF.:")


def is_ip(host: str) -> bool:
    # Fast reject (every admission asks this of a DNS name): the address part of an IP literal
    # is hex digits, dots and colons only; ipaddress's failure path (an exception) is slow.
    address = host.split("%", 1)[0]
    if not address or not _IP_CHARS.issuperset(address):
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    return host in ("localhost", "localhost.localdomain", "::1") or host.startswith("127.")


def split_list(value: str) -> List[str]:
    return [x.strip().lower().rstrip(".") for x in value.split(",") if x.strip()]


def expand_identities(value: str) -> List[str]:
    """HOSTNET_RDMA_IDENTITIES: this pod's DNS names, each standing for itself and its shorter
    forms at label boundaries (`h.sub.ns.svc.cluster.local` gives `h`, `h.sub`, `h.sub.ns`, ...),
    so the pod spec carries the longest form only. The host name comes first."""
    out: List[str] = []
    names = split_list(value)
    for name in names:
        dot = name.find(".")
        while dot != -1:
            out.append(name[:dot])
            dot = name.find(".", dot + 1)
        out.append(name)
    # One name's forms differ in length: repeats come only from several (half the cost at admission).
    return out if len(names) < 2 else list(dict.fromkeys(out))


def is_own_endpoint(endpoint: str, identities: Sequence[str]) -> bool:
    """True iff the endpoint names this pod by one of its DNS names.

    Never by IP: two pods of one job can share a node, hence an address.
    """
    host = endpoint_host(endpoint)
    return bool(host) and host in {i.lower().rstrip(".") for i in identities if i}


def names_a_pod(host: str, identities: Sequence[str], peers: Sequence[str]) -> bool:
    """Whether the endpoint host can be the DNS name of a pod of this job.

    `peers` name the job's pod host names: `job-*` is every name that starts with `job-` (the
    launchers name a job's pods `<job>-...`), any other is one name. A name may be followed by
    any suffix this pod's own names have after its host name (`.sub`, `.sub.ns.svc`, ...).
    Prefixes and names, never glob patterns: a job's name is the tenant's text (a `[`, `?` or
    `,` in it is a character), and a pattern compiled from it cost seconds and hundreds of MiB.
    Without peers (a launcher that names no siblings), assume yes.
    """
    if host in identities or not peers or not identities:
        return True
    own_host = identities[0]
    suffixes = {i[len(own_host) :] for i in identities if i.startswith(own_host + ".")}
    suffixes.add("")
    for suffix in suffixes:
        if not host.endswith(suffix):
            continue
        name = host[: len(host) - len(suffix)]
        for peer in peers:
            if name.startswith(peer[:-1]) if peer.endswith("*") else name == peer:
                return True
    return False


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
        if any(len(term.strip()) > 9 for term in expanded.split("+")):
            return None
        return str(sum(int(term) for term in expanded.split("+")))
    except ValueError:
        return None


# ---------------------------------------------------------------------------- decision


class Here:
    """This node as the wrapper sees it at run time (admission has none: what depends on it is
    decided in the pod). `resolve` gives a name's addresses, [] when it does not resolve (it
    may wait, bounded: records of a headless Service appear late)."""

    def __init__(
        self,
        hostname: str,
        addresses: Iterable[str],
        resolve: Callable[[str], List[str]],
        binds: Optional[Callable[[str], bool]] = None,
        resolve_now: Optional[Callable[[str], List[str]]] = None,
    ) -> None:
        self.hostname = hostname.lower().rstrip(".")
        self.addresses: FrozenSet[str] = frozenset(_normal_ip(a) for a in addresses)
        self.resolve = resolve
        # Without waiting for records to appear: for names that are the user's, not the job's.
        self.resolve_now = resolve_now or resolve
        # Whether a socket can bind the address: the kernel's own answer, for the addresses an
        # interface listing misses (secondary ones).
        self.binds = binds

    def is_mine(self, ip: str) -> bool:
        return ip in self.addresses or (self.binds is not None and self.binds(ip))

    def carries(self, host: str) -> Tuple[Optional[bool], str]:
        """Whether `host` (an IP address or a name) is this node: (True | False, how we know),
        or (None, why not) when the name does not resolve here."""
        if is_ip(host):
            mine = self.is_mine(_normal_ip(host))
            return mine, f"{host} is {'' if mine else 'not '}an address of this node"
        if host == self.hostname or (self.hostname and host == self.hostname.split(".")[0]):
            return True, f"{host} is this node's host name"
        ips = [_normal_ip(ip) for ip in self.resolve(host)]
        if not ips:
            return None, f"{host} does not resolve on this node"
        local = [ip for ip in ips if is_loopback(ip) or self.is_mine(ip)]
        if local:
            return True, f"{host} resolves to {local[0]}, an address of this node"
        return False, f"{host} resolves to {', '.join(ips)}, not an address of this node"


def _normal_ip(address: str) -> str:
    """One spelling per address (IPv6 compressed, no zone index), so set lookups match."""
    address = address.split("%", 1)[0]
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address.lower()


def seconds(value: str, default: float) -> float:
    """A duration in seconds from the env: a finite number >= 0, else the default (a value set
    by hand is read, never a traceback)."""
    try:
        out = float(value)
    except ValueError:
        return default
    return out if 0 <= out < float("inf") else default


def dns_timeout(env: Mapping[str, str]) -> float:
    default = float(DEFAULTS[ENV_DNS_TIMEOUT])
    return seconds(env.get(ENV_DNS_TIMEOUT) or "", default)


def stall_seconds(env: Mapping[str, str]) -> float:
    return seconds(env.get(ENV_NCCL_STALL) or "", NCCL_STALL_DEFAULT)


def max_nodes(nnodes: str) -> int:
    """The upper bound of torchrun's --nnodes (`2`, `1:4`); 0 when it is not a number."""
    upper = nnodes.strip().rpartition(":")[2]
    # At most 9 digits: int() of tenant text with thousands raises (and costs its square).
    return int(upper) if upper.isascii() and upper.isdigit() and len(upper) <= 9 else 0


class Plan:
    """What the wrapper decided, for its log line and for the admission-time fallback."""

    def __init__(self) -> None:
        self.backend = "static"
        self.endpoint = ""
        self.local_addr = ""
        self.rdzv_id = ""
        self.is_host: Optional[str] = None
        self.nnodes = ""
        self.notes: List[str] = []
        # Why no pod, or every pod on one node, would host the c10d store (also in notes).
        self.endpoint_problem = ""
        # Why torchrun must not start at all (one line, what to set): the wrapper refuses,
        # the webhook warns. "" when it may start.
        self.fatal = ""
        self.fatal_kind = ""  # REFUSE_*
        # option -> value the wrapper supplied (not the user): what PET_* must carry when
        # nothing can intercept torchrun.
        self.added: Dict[str, str] = {}
        # option -> template whose ${VAR} could not be expanded from the env given.
        self.unexpanded: Dict[str, str] = {}

    def refuse(self, kind: str, text: str) -> None:
        """The first refusal stands (the cause to fix first)."""
        if not self.fatal:
            self.fatal, self.fatal_kind = text, kind


def merge(args: Sequence[str], env: Mapping[str, str], here: Optional[Here] = None) -> Tuple[List[str], Plan]:
    """torchrun's argv after the rules; pure (env in, argv out: `here` is what the wrapper sees
    of the node, None at admission). Raises ArgvError when torchrun itself would reject the argv."""
    argv = Argv(args)
    plan = Plan()
    if argv.has("--help") or argv.has("--print-completion"):
        plan.backend = "help"
        return argv.args, plan
    if argv.has("--standalone") or env.get("PET_STANDALONE"):
        plan.backend = "standalone"
        return argv.args, plan

    backend, _ = effective(argv, env, "--rdzv-backend")
    if backend is None:
        static_hint = any(effective(argv, env, o)[0] is not None for o in ("--master-addr", "--node-rank"))
        default = env.get(ENV_RDZV_BACKEND, "")
        if default and not static_hint:
            backend = default
            argv.prepend("--rdzv-backend", default)
            plan.added["--rdzv-backend"] = default
        else:
            backend = "static"
    plan.backend = backend
    if backend == "static":
        plan.endpoint = effective(argv, env, "--master-addr")[0] or ""
        if effective(argv, env, "--nnodes")[0] is None and env.get(ENV_NNODES) == NNODES_UNKNOWN:
            plan.refuse(REFUSE_NNODES, _nnodes_unknown(env))  # static or not, each pod would train alone
        _check_master_addr(argv, env, plan, here)
        return argv.args, plan

    endpoint, _ = effective(argv, env, "--rdzv-endpoint")
    if endpoint is None and env.get(ENV_RDZV_ENDPOINT):
        template = env[ENV_RDZV_ENDPOINT]
        endpoint = expand(template, env)
        if endpoint:
            argv.prepend("--rdzv-endpoint", endpoint)
            plan.added["--rdzv-endpoint"] = endpoint
        else:
            plan.unexpanded["--rdzv-endpoint"] = template
            plan.notes.append("default rendezvous endpoint needs env that is not set: " + template)
    plan.endpoint = endpoint or ""

    nnodes, _ = effective(argv, env, "--nnodes")
    several = False  # the job has several pods, whatever torchrun is told
    if nnodes is None and env.get(ENV_NNODES) == NNODES_UNKNOWN:
        several = True
        plan.refuse(REFUSE_NNODES, _nnodes_unknown(env))
    elif nnodes is None and env.get(ENV_NNODES):
        template = env[ENV_NNODES]
        nnodes = expand_sum(template, env)
        if nnodes:
            argv.prepend("--nnodes", nnodes)
            plan.added["--nnodes"] = nnodes
        else:
            plan.unexpanded["--nnodes"] = template
            several = True  # a launcher that counts its pods at run time runs several
            if here is None:  # admission: such values exist only in the running container
                plan.notes.append("default --nnodes needs env that is not set: " + template)
            else:
                plan.refuse(
                    REFUSE_NNODES,
                    f"--nnodes not given, and the launcher's count {template} needs env this container does "
                    "not have: torchrun's default (1 node) would train it alone. Pass --nnodes=N",
                )
    plan.nnodes = nnodes or ("?" if several else "1")
    several = several or max_nodes(plan.nnodes) > 1

    rdzv_id, source = effective(argv, env, "--rdzv-id")
    wanted_id = env.get(ENV_RDZV_ID, "")
    if (rdzv_id is None or rdzv_id.strip().lower() == "none") and wanted_id:
        _put(argv, source, "--rdzv-id", wanted_id)
        plan.added["--rdzv-id"] = wanted_id
        rdzv_id = wanted_id
    plan.rdzv_id = rdzv_id or "none"

    local_addr, source = effective(argv, env, "--local-addr")
    own = env.get(ENV_LOCAL_ADDR, "")
    if local_addr is None and own:
        local_addr = own
        argv.prepend("--local-addr", local_addr)
        plan.added["--local-addr"] = local_addr
    elif local_addr is not None and own and several:
        # A flag left from hand-written shell (--local-addr=$(hostname), $(hostname -i),
        # $HOSTNAME): what the other nodes would be told to reach this one at.
        why = unreachable_local_addr(local_addr, env, here)
        if why and env.get(ENV_KEEP_LOCAL_ADDR) == "1":
            plan.refuse(
                REFUSE_LOCAL_ADDR,
                f"--local-addr {local_addr} {why}: the other nodes could not reach this one, and the pod annotation "
                f"{ANN_LOCAL_ADDR}: keep says not to replace it. Remove --local-addr (the webhook supplies {own})",
            )
        elif why:
            plan.notes.append(
                f"--local-addr {local_addr} replaced by {own}: it {why}, and the other nodes could not reach this "
                f"one at it (annotate the pod {ANN_LOCAL_ADDR}: keep to refuse instead); remove it from the command"
            )
            _put(argv, source, "--local-addr", own)
            plan.added["--local-addr"] = own
            local_addr = own
    plan.local_addr = local_addr or ""

    if backend == "c10d":
        _decide_is_host(argv, env, plan, here, several)
    return argv.args, plan


NNODES_NOT_GIVEN = "--nnodes not given"


def _nnodes_unknown(env: Mapping[str, str]) -> str:
    return (
        f"{NNODES_NOT_GIVEN}: this pod is one of its job's several ({env.get(ENV_LAUNCHER) or 'multi-pod'}), and "
        f"torchrun's default (1 node) would train it alone. Pass --nnodes=N or annotate the pod template "
        f'{ANN_NNODES}: "N"'
    )


def _decide_is_host(argv: Argv, env: Mapping[str, str], plan: Plan, here: Optional[Here], several: bool) -> None:
    conf, source = effective(argv, env, "--rdzv-conf")
    pairs = parse_conf(conf or "")
    given = [v for k, v in pairs if k == "is_host"]
    host = endpoint_host(plan.endpoint) if plan.endpoint else ""
    identities = expand_identities(env.get(ENV_IDENTITIES, ""))
    if given:
        plan.is_host = given[-1]
        _check_is_host(given[-1], host, identities, env, plan, here)
        return
    if not host:
        plan.notes.append("no rendezvous endpoint: is_host not set")
        return
    if is_loopback(host):
        if several:
            # Every node would host a store of its own on its loopback and wait for the others.
            plan.refuse(
                REFUSE_LOOPBACK,
                f"rendezvous endpoint {host} is loopback, but the job runs on several nodes: each would host its "
                "own store and wait for the others. Point --rdzv-endpoint at the DNS name of one pod of the job",
            )
        else:
            plan.notes.append("loopback rendezvous endpoint: is_host left to torchrun")
        return
    if not identities:
        return  # not a pod the webhook described: nothing to match against
    if host in identities:
        is_host = "true"
    elif not is_ip(host) and names_a_pod(host, identities, split_list(env.get(ENV_PEERS, ""))):
        is_host = "false"  # another pod of the job, by its DNS name (never by address)
    else:
        # An IP address, the node's host name, a Service or another name: no pod is named, so
        # the node that carries the address hosts. torchrun's own test would compare it with the
        # node's host name, and what that resolves to (127.0.1.1 on common images): nobody.
        shared = "if two pods of this job run on one node, both would try to host the store (use a pod DNS name)"
        if here is None:
            plan.endpoint_problem = (
                f"rendezvous endpoint {host} names no pod of this job: the wrapper makes the pod on the node "
                f"that carries its address the store host; {shared}"
            )
            plan.notes.append(plan.endpoint_problem)
            return
        mine, how = here.carries(host)
        if mine is None:
            plan.refuse(
                REFUSE_NO_POD,
                f"rendezvous endpoint {how} and names no pod of this job: no pod can tell it hosts the store "
                "(another node's host name? those often resolve only on the node itself). Point "
                "--rdzv-endpoint at the DNS name of one pod of the job",
            )
            return
        is_host = "true" if mine else "false"
        plan.endpoint_problem = f"rendezvous endpoint names no pod of this job; is_host={is_host}: {how}; {shared}"
        plan.notes.append(plan.endpoint_problem)
    plan.is_host = is_host
    merged = ",".join(f"{k}={v}" for k, v in [*pairs, ("is_host", is_host)])
    plan.added["--rdzv-conf"] = merged
    if source == "cli":
        argv.replace("--rdzv-conf", merged)
    else:
        # A CLI --rdzv-conf replaces PET_RDZV_CONF wholesale, so carry its keys over.
        argv.prepend("--rdzv-conf", merged)


def unreachable_local_addr(value: str, env: Mapping[str, str], here: Optional[Here]) -> str:
    """Why other nodes could not reach this pod at a --local-addr the user gave ("" when they
    can, or when it is only known on the node and `here` is None). This pod's own DNS name is
    always fine (the DNS preflight waits for it)."""
    host = value.strip().lower().rstrip(".")
    if host in expand_identities(env.get(ENV_IDENTITIES, "")) or host == env.get(ENV_LOCAL_ADDR, "").lower():
        return ""
    if is_loopback(host):
        return "is loopback"
    if here is None or not host:
        return ""
    if host == here.hostname or (here.hostname and host == here.hostname.split(".")[0]):
        return "is this node's host name (on many nodes it resolves to 127.0.1.1 there and nowhere else)"
    if is_ip(host):
        return "" if here.is_mine(_normal_ip(host)) else "is not an address of this node"
    ips = [_normal_ip(ip) for ip in here.resolve_now(host)]
    if not ips:
        return "does not resolve on this node"
    if all(is_loopback(ip) for ip in ips):
        return f"resolves to {ips[0]}, a loopback address"
    if not any(here.is_mine(ip) for ip in ips if not is_loopback(ip)):
        return f"resolves to {', '.join(ips)}, not an address of this node"
    return ""


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _check_is_host(
    given: str, host: str, identities: Sequence[str], env: Mapping[str, str], plan: Plan, here: Optional[Here]
) -> None:
    """is_host set by the user (hand-written shell, often `is_host=true` everywhere): refuse what
    cannot work, in seconds, rather than let two stores (or none) wait for each other."""
    if not host or is_loopback(host) or not identities or "$" in given:
        return  # a value the shell makes at run time (admission reads the script): judged there
    names_me = host in identities
    if _truthy(given) and not names_me:
        other = ""
        if not is_ip(host) and names_a_pod(host, identities, split_list(env.get(ENV_PEERS, ""))):
            other = "names another pod of this job"
        elif here is not None and (is_ip(host) or host == here.hostname.split(".")[0] or host == here.hostname):
            mine, _ = here.carries(host)
            other = "is not this node" if mine is False else ""
        if other:
            plan.refuse(
                REFUSE_RENDEZVOUS,
                f"is_host=true, but the rendezvous endpoint {host} {other}: that pod hosts the store, and this one "
                "would start a second one. Leave is_host out of --rdzv-conf (the wrapper sets it on the pod the "
                "endpoint names), or set it true on that pod only",
            )
    elif not _truthy(given) and names_me:
        plan.refuse(
            REFUSE_RENDEZVOUS,
            f"is_host={given}, but the rendezvous endpoint {host} is this pod's own DNS name: no pod would host the "
            "store and every node would wait for it. Leave is_host out of --rdzv-conf (the wrapper sets it)",
        )


def _check_master_addr(argv: Argv, env: Mapping[str, str], plan: Plan, here: Optional[Here]) -> None:
    """Static rendezvous (--master-addr / PET_MASTER_ADDR): a node other than rank 0 told that the
    master is itself (its own host name, loopback) waits for a store nobody starts there."""
    master = endpoint_host(plan.endpoint) if plan.endpoint else ""
    if here is None or not master or not env.get(ENV_LOCAL_ADDR):
        return
    nnodes = effective(argv, env, "--nnodes")[0] or ""
    rank = (effective(argv, env, "--node-rank")[0] or "").strip()
    if max_nodes(nnodes) <= 1 or not rank.isdigit():
        return
    mine = is_loopback(master) or master == here.hostname or master == here.hostname.split(".")[0]
    if not mine:
        return
    if rank != "0":
        plan.refuse(
            REFUSE_RENDEZVOUS,
            f"--master-addr {master} is this node itself (its host name or loopback), but this is node rank {rank}: "
            "the store runs on node rank 0. Point --master-addr (or MASTER_ADDR in the launcher) at the DNS name of "
            "node rank 0's pod",
        )
    else:
        plan.notes.append(
            f"--master-addr {master} is this node's own name: the other nodes must reach node rank 0 at it, and a "
            "node's host name often resolves only on that node. Use the DNS name of this pod"
        )


def pet_fallback(args: Optional[Sequence[str]], env: Mapping[str, str]) -> Tuple[Dict[str, str], Plan]:
    """For a torchrun nothing can intercept: the PET_* env that makes torchrun itself reach the
    wrapper's decision. `args` is torchrun's argv when known at admission (None otherwise); `env`
    the container's env as far as it is known (values that exist only at run time are absent).
    Templates that could not be expanded are returned in plan.unexpanded."""
    try:
        _, plan = merge(list(args) if args is not None else ["<script>"], env)
    except ArgvError:
        return {}, Plan()
    return {pet_name(option): value for option, value in plan.added.items()}, plan


def summary(plan: Plan, env: Mapping[str, str], gloo_ifname: str) -> str:
    """The wrapper's log line (read by `hostnet-rdma verify`; keep the field order)."""
    return (
        f"launcher={env.get(ENV_LAUNCHER, 'unknown')} backend={plan.backend} "
        f"is_host={plan.is_host if plan.is_host is not None else '-'} "
        f"local_addr={plan.local_addr or '-'} endpoint={plan.endpoint or '-'} "
        f"rdzv_id={plan.rdzv_id or '-'} nnodes={plan.nnodes or '-'} gloo_socket_ifname={gloo_ifname}"
    )
