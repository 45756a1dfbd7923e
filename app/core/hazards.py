"""What else breaks on the host network, said at admission: things of the pod's own that work in
a pod network namespace and not in the node's. Pure and bounded: read from the pod's fields, the
commands only where they name sshd (a substring test first, then the bounded word split of
wrap.Command: budget.ANALYSED_COMMAND_BYTES).

- sshd on port 22: MPI workers (the MPI Operator's default worker command is `/usr/sbin/sshd -De`)
  and several NCCL tests start sshd with its default port. On the host network the port is the
  node's, where the node's own sshd listens: the pod's sshd cannot bind, and mpirun's ssh reaches
  the node's sshd (which refuses the job's key) or nothing. The fix is the user's (another port,
  and mpirun told it); the webhook never rewrites the command, which would only move the problem.
- Multus attachments (`k8s.v1.cni.cncf.io/networks`): the container runtime sets up a network
  namespace, and calls CNI (Multus among the plugins), only for a pod that is not on the host
  network (containerd's RunPodSandbox, internal/cri/server/sandbox_run.go: "Setup the network
  namespace if host networking wasn't requested"), so the attachments are never made: SR-IOV VFs
  get no address, and RoCE needs one for its GID.
- DRA claims: a NIC that a DRA driver moves into the pod's network namespace has none to go to.
  dranet refuses the pod's sandbox (google/dranet pkg/driver/nri_hooks.go, runPodSandbox: "using
  host network can not claim host devices", at 7b7661a): the pod never starts. A GPU claim (NVIDIA's
  DRA driver hands out CDI devices: cmd/gpu-kubelet-plugin, DeviceState.Prepare) is not about the
  network namespace and works there.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import orjson

from app.core import allocators, budget, names, reasons
from app.core.wrap import Command

Obj = dict[str, Any]

SSH_PORT = 22
_ARGV: Final[tuple[str, str]] = ("command", "args")  # a constant: a literal is built at every call
# The most containers (regular and init) whose commands are read for sshd, and attachments named.
MAX_CONTAINERS = 16
MAX_NAMED = 8

# sshd(8)'s options (OpenBSD getopt string "46C:E:Dc:def:g:h:iqrtQRTo:p:u:"): those that take a value.
_SSHD_VALUED = frozenset("CEcfghopu")
# A port in an sshd_config line or an `-o` option: `Port 2222`, `Port=2222`.
_PORT_LINE = re.compile(r"(?i)\bport[ \t]*[= \t][ \t]*(\d{1,5})\b")
# A Port line a script writes into sshd_config (`echo "Port 2222" >>`, `sed 's/#Port 22/Port 2222/'`):
# at a word's start or after a sed delimiter or comment mark, as the file spells it.
_WRITTEN_PORT = re.compile(r"(?:^|[\n/#|])Port[ \t]+(\d{1,5})\b")
_LISTEN_PORT = re.compile(r"(?i)\blistenaddress[ \t]*[= \t][ \t]*\S*:(\d{1,5})\b")
_SHELL_OPERATORS = frozenset((";", "&&", "||", "|", "&", "(", ")", ";;", "\n"))

MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
MULTUS_DEFAULT = "v1.multus-cni.io/default-network"


class Sshd(NamedTuple):
    """One sshd a container starts: the ports it listens on, and where they come from."""

    container: str
    ports: tuple[int, ...]
    source: str  # "-p", "-o Port", "the script's sshd_config edit", "default"
    config: str  # its -f FILE, "" when none


def _port(text: str) -> int | None:
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _sshd_options(words: list[str]) -> tuple[list[int], list[int], str, bool]:
    """-p ports, -o Port ports, -f FILE of one sshd's arguments (getopt: `-De`, `-p2222`), and
    whether a -p names a port known only at run time (`-p "$PORT"`)."""
    unknown = False
    ports: list[int] = []
    option_ports: list[int] = []
    config = ""
    i = 0
    while i < len(words):
        word = words[i]
        if word in _SHELL_OPERATORS or not word.startswith("-") or word == "-":
            break
        j = 1
        while j < len(word):
            flag = word[j]
            if flag in _SSHD_VALUED:
                value = word[j + 1 :]
                if not value and i + 1 < len(words):
                    i += 1
                    value = words[i]
                if flag == "p":
                    port = _port(value)
                    if port is None:
                        unknown = True
                    else:
                        ports.append(port)
                elif flag == "o":
                    for pattern in (_PORT_LINE, _LISTEN_PORT):
                        found = pattern.search(value)
                        if found and (port := _port(found.group(1))) is not None:
                            option_ports.append(port)
                elif flag == "f":
                    config = value
                break
            j += 1
        i += 1
    return ports, option_ports, config, unknown


# Images whose sshd_config (and ssh_config, for the launcher's ssh) say Port 2222: the MPI
# Operator's base image and those built on it (kubeflow/mpi-operator build/base/Dockerfile,
# `ARG port=2222`; examples/v2beta1/pi), and Trainer's runtimes that copy its ssh configs
# (kubeflow/trainer cmd/runtimes/{deepspeed,mlx}/Dockerfile), by repository, any tag.
IMAGE_SSH_PORTS = {
    "mpioperator/base": 2222, "mpioperator/openmpi": 2222, "mpioperator/intel": 2222, "mpioperator/mpich": 2222,
    "mpioperator/mpi-pi": 2222, "ghcr.io/kubeflow/trainer/deepspeed-runtime": 2222,
    "ghcr.io/kubeflow/trainer/mlx-runtime": 2222,
}  # fmt: skip
# Words after which the next word is a command: a shell operator, a keyword, a prefix command.
_BEFORE_COMMAND = frozenset(("exec", "nohup", "sudo", "setsid", "command", "env", "time", "then", "do", "else",
                             "{", "!"))  # fmt: skip
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _in_command_position(words: list[str], at: int) -> bool:
    """words[at] is what a simple command runs (not an argument: `mkdir -p /var/run/sshd`)."""
    i = at - 1
    while i >= 0 and _ASSIGNMENT.match(words[i]):
        i -= 1
    return i < 0 or words[i] in _SHELL_OPERATORS or words[i].rsplit("/", 1)[-1] in _BEFORE_COMMAND


def image_ssh_port(container: Obj) -> int | None:
    """The Port of the image's own ssh configuration, where the image is a known one."""
    image = container.get("image")
    if not isinstance(image, str):
        return None
    repository = image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    repository = repository.removeprefix("docker.io/").removeprefix("index.docker.io/")
    return IMAGE_SSH_PORTS.get(repository)


def sshd_of(container: Obj) -> Sshd | None:
    """The sshd the container's command starts (the first), None when it names none or is too
    large to read at admission. Ports, in sshd's order: -p wins over -o Port, which wins over the
    config file; a `Port N` the command writes (echo, sed into sshd_config) stands for the file."""
    if not _argv(container)[1]:
        return None
    return _sshd_in(container)


def _argv(container: Obj) -> tuple[int, bool]:
    """The size of the container's command and args, and whether a word names sshd: one pass,
    no list built (this runs for every container of every pod)."""
    size, named = 0, False
    for key in _ARGV:
        words = container.get(key)
        if not isinstance(words, list):
            continue
        for w in words:
            if isinstance(w, str):
                size += len(w) + 1
                named = named or "sshd" in w
    return size, named


def _sshd_in(container: Obj) -> Sshd | None:
    command = Command(container)
    words = command.words
    if words is None:
        return None
    for at, word in enumerate(words):
        if word.rsplit("/", 1)[-1] != "sshd" or not _in_command_position(words, at):
            continue
        ports, option_ports, config, unknown = _sshd_options(words[at + 1 :])
        name = str(container.get("name") or "")
        if ports or unknown:
            return Sshd(name, tuple(ports), "-p" if not unknown else "-p, some known only at run time", config)
        if option_ports:
            return Sshd(name, tuple(option_ports), "-o Port", config)
        edits = any("sshd_config" in w for w in words[:at])
        written = [p for w in words[:at] for m in _WRITTEN_PORT.finditer(w) if (p := _port(m.group(1))) is not None]
        written = written if edits else []
        if written:
            return Sshd(name, (written[-1],), "the script's sshd_config edit", config)
        known = image_ssh_port(container)
        if known is not None:
            return Sshd(name, (known,), "the image's sshd_config", config)
        return Sshd(name, (SSH_PORT,), "default", config)
    return None


# Where mpirun's ssh takes extra arguments, so `-p N` reaches it. Open MPI 4 (ORTE): the MCA
# parameter plm_rsh_args (`-mca plm_rsh_args`, OMPI_MCA_plm_rsh_args). Open MPI 5 starts PRRTE,
# whose launcher component is `ssh` (`rsh` is its alias): PRTE_MCA_plm_ssh_args; PRRTE's ompi
# schizo passes OMPI_MCA_plm_rsh_* on as PRTE_MCA_plm_ssh_* only from v3.0.3 (openpmix/prrte
# src/mca/schizo/ompi/schizo_ompi.c, check_prte_overlap). Intel MPI and MPICH (Hydra): the
# bootstrap's extra arguments, the variables the MPI Operator sets its ssh retries in.
RSH_MCA_PARAMS = ("plm_rsh_args", "plm_ssh_args")
RSH_ENV = ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args", "PRTE_MCA_plm_rsh_args",
           "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "HYDRA_LAUNCH_EXTRA_ARGS")  # fmt: skip
_SSH_PORT_ARG = re.compile(r"(?:^|\s)-p\s*(\d{1,5})\b|(?i:\bport\s*=\s*(\d{1,5})\b)")
_MCA_FLAGS = ("-mca", "--mca", "-prtemca", "--prtemca", "-gmca", "--gmca")


def _ssh_port_in(value: str) -> int | None:
    found = _SSH_PORT_ARG.search(value)
    return None if found is None else _port(found.group(1) or found.group(2))


def told_ports(container: Obj, overridden: frozenset[str] = frozenset()) -> set[int]:
    """The ssh ports mpirun's launcher is told in this container (its env, its command's MCA
    options and exported variables, a known image's ssh_config): empty when none (ssh dials 22).
    `overridden`: env names whose value in the container's env does not count (the MPI Operator
    appends its own OMPI_MCA_plm_rsh_args, I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS or
    HYDRA_LAUNCH_EXTRA_ARGS after the user's, and the kubelet takes the last of a name)."""
    out: set[int] = set()
    known = image_ssh_port(container)
    if known is not None:
        out.add(known)
    for e in container.get("env") or []:
        if not isinstance(e, dict) or e.get("name") not in RSH_ENV or e.get("name") in overridden:
            continue
        if isinstance(e.get("value"), str) and (port := _ssh_port_in(e["value"])) is not None:
            out.add(port)
    argv = [w for w in [*(container.get("command") or []), *(container.get("args") or [])] if isinstance(w, str)]
    if not any(p in w for w in argv for p in (*RSH_MCA_PARAMS, *RSH_ENV)):
        return out
    words = Command(container).words or []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if eq and name in RSH_ENV:
            if (port := _ssh_port_in(value)) is not None:
                out.add(port)
        elif word in _MCA_FLAGS and i + 2 < len(words) and words[i + 1] in RSH_MCA_PARAMS:
            port = _ssh_port_in(words[i + 2])
            if port is not None:
                out.add(port)
    return out


SSHD_FIX = (
    "Start sshd on another port (sshd -D -p 2222) and tell mpirun's ssh that port on the launcher, on its command "
    "line or in its script, not in its env (the MPI Operator appends its own OMPI_MCA_plm_rsh_args, "
    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS and HYDRA_LAUNCH_EXTRA_ARGS after yours, and the last of a name wins): "
    'Open MPI 4 `mpirun -mca plm_rsh_args "-p 2222"`; Open MPI 5 (PRRTE) PRTE_MCA_plm_ssh_args="-p 2222" '
    "(`plm_rsh_args` is the alias of PRRTE's ssh launcher; PRRTE before 3.0.3 ignores OMPI_MCA_plm_rsh_args); Intel "
    'MPI `export I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS="-p 2222 -o ConnectionAttempts=10"` before mpirun; MPICH '
    '`export HYDRA_LAUNCH_EXTRA_ARGS="-p 2222 -o ConnectionAttempts=10"`; or Port 2222 in the launcher image\'s '
    "ssh_config, as the MPI Operator's own images have"
)


def _sshd(pod: Obj, warn: Any) -> None:
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])][:MAX_CONTAINERS]
    room = budget.SSHD_READ_BYTES
    for c in containers:
        if not isinstance(c, dict):
            continue
        size, named = _argv(c)
        if size > room:
            continue  # over what one review reads for sshd: said nothing of, as a script too large to read
        room -= size
        sshd = _sshd_in(c) if named else None
        if sshd is None or SSH_PORT not in sshd.ports:
            continue
        how = {
            "-p": "its -p 22",
            "-o Port": "its -o Port=22",
            "default": "no -p or Port given: sshd's default, unless "
            + (f"{sshd.config} (its -f)" if sshd.config else "the image's sshd_config")
            + " sets another Port",
        }.get(sshd.source, sshd.source)
        warn(
            reasons.SSHD_ON_NODE_PORT,
            f"{sshd.container}: sshd listens on port 22 ({how}), and on the host network that is the node's port, "
            "where the node's own sshd listens: this sshd cannot bind (\"Bind to port 22 ... failed: Address already "
            "in use\"), and mpirun's ssh reaches the node's sshd, which refuses the job's key, or nothing. " + SSHD_FIX,
        )


def networks(annotations: dict[str, Any]) -> list[str]:
    """The Multus attachments the pod asks for (`[ns/]name[@iface]`, or its JSON list form), and
    a default network of Multus's own."""
    out: list[str] = []
    raw = annotations.get(MULTUS_NETWORKS)
    if isinstance(raw, str) and raw.strip():
        text = raw.strip()
        if text.startswith("["):
            try:
                items = orjson.loads(text)
            except orjson.JSONDecodeError:
                items = []
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    ns = item.get("namespace")
                    out.append(f"{ns}/{item['name']}" if isinstance(ns, str) and ns else item["name"])
        else:
            out += [n.strip() for n in text.split(",") if n.strip()]
    default = annotations.get(MULTUS_DEFAULT)
    if isinstance(default, str) and default.strip():
        out.append(f"{default.strip()} (default network)")
    return out


def _multus(pod: Obj, warn: Any) -> None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    attached = networks(annotations) if isinstance(annotations, dict) else []
    if not attached:
        return
    shown = ", ".join(attached[:MAX_NAMED]) + (
        f" and {len(attached) - MAX_NAMED} more" if len(attached) > MAX_NAMED else ""
    )
    warn(
        reasons.MULTUS_ON_HOST_NETWORK,
        f"{len(attached)} Multus network attachment{'s' if len(attached) > 1 else ''} ({shown}) will not be made: "
        "on the host network the container runtime creates no network namespace for the pod and runs no CNI "
        "(Multus among them), so the interfaces they name never appear and VFs handed out by a device plugin get no "
        "address (RoCE needs one for its GID): NCCL finds no usable RoCE device, or falls back to the node's "
        "NICs. Drop hostNetwork where the NICs come from the attachments (they give the pod its own addresses), "
        f"or drop the attachments ({MULTUS_NETWORKS}) and use the node's NICs",
    )


def _claims(pod: Obj, warn: Any, carry_nics: bool) -> None:
    claims = allocators.pod_claims(pod)
    if not claims or not carry_nics:
        return
    shown = ", ".join(claims[:MAX_NAMED])
    warn(
        reasons.DRA_CLAIM_ON_HOST_NETWORK,
        f"DRA resource claim{'s' if len(claims) > 1 else ''} {shown} on a host-network pod: where a claim's devices "
        "are NICs that a DRA driver moves into the pod's network namespace, there is none (the pod's is the node's). "
        'dranet refuses such a pod\'s sandbox ("using host network can not claim host devices": google/dranet '
        "pkg/driver/nri_hooks.go, runPodSandbox), so the pod never starts (FailedCreatePodSandBox). Drop hostNetwork "
        "for pods whose NICs come from DRA; GPU claims (NVIDIA's DRA driver) work on the host network. If the "
        f'claims carry no NICs, annotate {names.ANN_ALLOCATED_NICS}: "false"',
    )


def check(pod: Obj, warn: Any, claims_carry_nics: bool) -> None:
    """Warn, through `warn(reason, text)`, of what breaks this host-network pod besides the
    rendezvous. Changes nothing."""
    _sshd(pod, warn)
    _multus(pod, warn)
    _claims(pod, warn, claims_carry_nics)
