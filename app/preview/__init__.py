"""A job file's pods as the webhook would leave them, and what each pod's wrapper would decide:
the rows of `hostnet-rdma explain -f` and the pods of `mutate -f`. Pure: the controllers'
pods, the webhook's config and selectors in; mutated pods and decisions out.

The wrapper's decision is rules.merge on the pod's command with the env the pod will have at
run time, as far as it is known before the pod exists: literal values, the pod's own fields
(fieldRef), what the launcher's controller puts in its ConfigMaps (Volcano's host lists and
counts). What only the node knows (its addresses, for an IP or Service endpoint) is said so.

The room's other parts: controllers (the pods each launcher's controller makes of a job file),
shellread (what a script in the pod's command does to torchrun), explain (one pod, step by
step) and chart (the webhook's config and selectors as the chart renders them).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from app.core import InvalidPod, Params, UnsupportedPod, allocators, hazards, mutate, names, reasons, selection, wrap
from app.core.launchers import mpijob
from app.core.mutate import Result
from app.preview import shellread
from app.preview.controllers import Expansion
from app.preview.controllers.common import is_stand_in
from app.preview.controllers.mpi import IMPLEMENTATION_ENV
from app.wrapper import rules

Obj = dict[str, Any]

# Exit codes of `mutate -f` / `explain -f` (documented in the CLI's help and docs/checking.md).
EXIT_OK, EXIT_REFUSES, EXIT_USAGE, EXIT_NOT_SENT, EXIT_NOT_PREVIEWED = 0, 1, 2, 3, 4


@dataclass
class Row:
    source: str  # Kind/name of the object in the file
    pod: str  # name, or generateName + "…"
    sent: bool
    mutated: bool
    pod_after: Obj
    before: Obj = field(default_factory=dict)  # as the controller creates it
    launcher: str = ""
    local_addr: str = ""
    endpoint: str = ""
    backend: str = ""
    store_host: str = ""  # yes | no | "decided on the node by its addresses" | "-" (none: etcd)
    nnodes: str = ""
    reason: str = ""  # not sent, or left unchanged: why
    refusal: str = ""  # why the wrapper would refuse to start
    run_time: str = ""  # which of the row's values are decided at run time, and why (the rest are known)
    decided: bool = False  # the wrapper's rules ran on the command's argv (refusal is theirs)
    warnings: list[str] = field(default_factory=list)  # the core's texts, then the preview's own
    result: Result | None = None  # the core's, when the pod was sent


def _pod_name(pod: Obj) -> str:
    m = pod.get("metadata") or {}
    return str(m.get("name") or (str(m.get("generateName") or "") + "…"))


_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _value_from(pod: Obj, configmaps: dict[str, dict[str, str]]) -> Any:
    """An env entry's valueFrom as far as it is known before the pod runs: the pod's own fields
    (fieldRef), what the launcher's controller puts in its ConfigMaps; None otherwise."""
    meta = pod.get("metadata") or {}

    def resolve(e: Any) -> str | None:
        ref = (e.get("valueFrom") or {}).get("fieldRef") or {}
        cm = (e.get("valueFrom") or {}).get("configMapKeyRef") or {}
        found: Any = None
        path = str(ref.get("fieldPath") or "")
        if path == "metadata.name" and meta.get("name"):
            found = str(meta["name"])
        elif path == "metadata.namespace":
            found = str(meta.get("namespace") or "")
        elif m := _FIELD.match(path):
            found = (meta.get(m.group(1)) or {}).get(m.group(2))
        elif cm:
            found = configmaps.get(str(cm.get("name")), {}).get(str(cm.get("key")))
        # A value the cluster makes when the object is created (a uid): the preview's stand-in
        # is no value a command may read.
        return None if found is None or is_stand_in(str(found)) else str(found)

    return resolve


def kubelet_env(pod: Obj, container: Obj, configmaps: dict[str, dict[str, str]]) -> shellread.KubeletEnv:
    """The container's env as the kubelet builds it (each `$(VAR)` expanded from the entries
    before it), as far as it is known before the pod runs."""
    return shellread.kubelet_env(pod, container, _value_from(pod, configmaps))


def runtime_env(pod: Obj, container: Obj, configmaps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The container's env as the kubelet will give it, as far as it is known before the pod runs."""
    meta = pod.get("metadata") or {}
    out = dict(kubelet_env(pod, container, configmaps).known)
    if "HOSTNAME" not in out and (pod.get("spec") or {}).get("hostNetwork") is not True:
        out["HOSTNAME"] = str(meta.get("name") or "")
    return out


# Where a program that starts torch.distributed itself finds its peer: (address, port, rank) env.
_OWN_RENDEZVOUS = (("MASTER_ADDR", "MASTER_PORT", "RANK"), ("PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK"))


def _without_torchrun(env: dict[str, str], row: Row, wrapped: bool, has_command: bool = True) -> None:
    """A command without torchrun: the program starts torch.distributed itself, from MASTER_ADDR
    (env://, as Training Operator and Volcano's pytorch plugin set it; Trainer's PET_MASTER_ADDR)
    or LeaderWorkerSet's LWS_LEADER_ADDRESS, or not at all. The start-up hook pins its sockets
    where the bootstrap runs (a command of the pod's own); an image entrypoint gets no hook."""
    row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
    for addr, port, rank_key in _OWN_RENDEZVOUS:
        if env.get(addr):
            row.backend = f"env:// (no torchrun: the program starts torch.distributed from {addr})"
            row.endpoint = f"{env[addr]}:{env.get(port, '?')}"
            rank = env.get(rank_key, "")
            row.store_host = "yes" if rank == "0" else "no" if rank.isdigit() else f"decided at run time ({rank_key})"
            row.nnodes = env.get("WORLD_SIZE", "") if addr == "MASTER_ADDR" else env.get("PET_NNODES", "")
            break
    else:
        if row.launcher == "mpijob":
            row.backend = (
                "mpirun over ssh (MPIJob): no rendezvous of ours; the ranks read NCCL's settings from /etc/nccl.conf"
            )
            return
        if not env.get("LWS_LEADER_ADDRESS") and has_command:
            row.backend = "no torchrun and no MASTER_ADDR: no rendezvous of ours to preview"
            return
        if env.get("LWS_LEADER_ADDRESS"):
            row.backend = "the program's own rendezvous (no torchrun), at LWS_LEADER_ADDRESS"
            row.endpoint = env["LWS_LEADER_ADDRESS"]
    if not has_command:
        # The image's entrypoint: it may run torchrun, where the wrapper cannot catch it.
        row.backend = (
            "decided at run time: no command, so the image's entrypoint runs (unknown at admission); the wrapper "
            "cannot catch a torchrun there, which gets the PET_* env instead"
        )
        row.store_host = "decided at run time" if row.store_host else ""
        row.endpoint = row.endpoint or env.get("PET_RDZV_ENDPOINT", "")
        row.nnodes = row.nnodes or env.get("PET_NNODES", "")
    if wrapped:
        row.warnings.append(
            "no torchrun: the program starts torch.distributed itself; the start-up hook pins GLOO_SOCKET_IFNAME "
            "(NCCL_SOCKET_IFNAME where configured) when it imports torch.distributed"
        )
    else:
        row.warnings.append(
            "no command: the image's entrypoint runs without the wrapper, which cannot catch a torchrun there, and "
            "without its start-up hook, so nothing pins the sockets of torch.distributed; Gloo may advertise the node's host name's address "
            "(127.0.1.1 on many images): give the container a command, or set GLOO_SOCKET_IFNAME yourself"
        )


# torchrun's options that decide the rendezvous (endpoint, store host, node count, local
# address): a value of these known only at run time is said so; any other is read past.
DECIDING = ("--nnodes", "--node-rank", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-conf", "--master-addr",
            "--master-port", "--local-addr", "--standalone")  # fmt: skip
_DECIDING_ENV = {rules.pet_name(o): o for o in DECIDING}
_SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh")
RUN_TIME = "<run time>"  # what the preview puts for a value it reads past


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=", re.S)


def command_reading(
    argv: list[str], env: dict[str, str], kubelet: shellread.KubeletEnv | None = None
) -> tuple[shellread.Torchrun | None, list[str]]:
    """The torchrun a (kubelet-expanded) command runs, and the programs it runs that the file
    does not hold (a shell script of the image's, one the command fetches). `kubelet`: the
    container's env as built, for the names whose values are known only at run time."""
    if not argv:
        return None, []
    prefix: dict[str, str] = {}
    if argv[0].rsplit("/", 1)[-1] == "env":  # `/usr/bin/env [NAME=value...] bash -c ...`
        k = 1
        while k < len(argv) and _ASSIGNMENT.match(argv[k]):
            name, _, value = argv[k].partition("=")
            prefix[name] = value
            k += 1
        if k < len(argv) and not argv[k].startswith("-"):
            argv, env = argv[k:], {**env, **prefix}
        else:
            prefix = {}
    shell = argv[0].rsplit("/", 1)[-1] in _SHELLS
    if shell and len(argv) >= 3 and argv[1].startswith("-") and "c" in argv[1]:
        if len(argv[2]) > wrap.MAX_ANALYSED_SCRIPT:
            raise wrap.ScriptTooLarge(argv[2][:40])
        reading = shellread.read_script(argv[2], env, kubelet)
        return reading.torchrun, reading.programs
    if sum(len(w) + 1 for w in argv) > wrap.MAX_ANALYSED_SCRIPT:
        raise wrap.ScriptTooLarge(argv[0][:40])
    args = wrap.torchrun_args({"command": argv})
    if args is not None:
        return shellread.Torchrun(list(args), prefix, set()), []
    if shell and len(argv) >= 2 and not argv[1].startswith("-"):
        return None, [f"{argv[0]} {argv[1]}"]
    if argv[0].endswith(".sh"):
        return None, [argv[0]]
    return None, []


# What each deciding option's value decides in a row: where it is known only at run time, those
# values are said so, and the others still previewed (--rdzv-backend and --standalone decide all).
_DECIDES = {
    "--rdzv-endpoint": ("endpoint", "store_host"),
    "--rdzv-conf": ("store_host",),
    "--nnodes": ("nnodes",),
    "--node-rank": ("store_host",),
    "--master-addr": ("endpoint",),
}
# The options each refusal of the rules depends on, in the order the rules check them (the first
# refusal stands), at admission (no node to look at). --local-addr only where the pod says to keep it.
_REFUSALS = (
    (rules.REFUSE_NNODES, {"--nnodes"}),
    (rules.REFUSE_LOCAL_ADDR, {"--nnodes", "--local-addr"}),
    (rules.REFUSE_LOOPBACK, {"--nnodes", "--rdzv-endpoint", "--rdzv-conf"}),
    (rules.REFUSE_RENDEZVOUS, {"--rdzv-endpoint", "--rdzv-conf"}),
)


def _may_refuse(plan: rules.Plan, options: set[str], env: dict[str, str]) -> bool:
    """Whether a refusal (or its absence) depends on options known only at run time."""
    keep = env.get(rules.ENV_KEEP_LOCAL_ADDR) == "1"
    before: set[str] = set()
    for kind, deps in _REFUSALS:
        before |= deps if keep or kind != rules.REFUSE_LOCAL_ADDR else deps - {"--local-addr"}
        if kind == plan.fatal_kind:
            break
    return bool(before & options)


# Options whose mere presence chooses the backend (static when --master-addr or --node-rank is
# given, the launcher's c10d otherwise): a PET_* variable of run time may be empty, as if unset.
_CHOOSE_BACKEND = ("--master-addr", "--node-rank", "--standalone", "--rdzv-backend")


@dataclass
class _RunTime:
    """torchrun's args and env with what is known only at run time stood in for by RUN_TIME."""

    args: list[str]
    env: dict[str, str]
    needs: list[str]  # the deciding options (`--flag=text`) whose values are known only at run time
    options: set[str]  # those options, canonical
    whole: str = ""  # why nothing of the rendezvous can be previewed ("" when some can)


def _run_time_flags(run: shellread.Torchrun) -> _RunTime:
    """torchrun's args with each part known only at run time replaced by RUN_TIME, and the
    deciding flags (and PET_* variables) whose values are known only at run time."""
    args = [shellread.known_parts(a, RUN_TIME) for a in run.args]
    out = _RunTime(args, {}, [], set())
    for name in sorted(run.unknown_env):
        if name in _DECIDING_ENV:
            out.needs.append(f"{_DECIDING_ENV[name]} (from {name})")
            out.options.add(_DECIDING_ENV[name])
            out.env[name] = RUN_TIME
            if _DECIDING_ENV[name] in _CHOOSE_BACKEND:  # empty, it is as if not set: the backend is unknown
                out.whole = out.needs[-1]
    if out.whole:
        return out
    try:
        argv = rules.Argv(args)
        end = len(args) if argv.script is None else argv.script
    except rules.ArgvError:  # torchrun would reject it, unless a word of run time shifts the rest
        argv, end = None, len(args)
    vanishing = [w for w in run.args[:end] if shellread.may_vanish(w)]
    if argv is None and not vanishing:
        return out
    if argv is not None and argv.script is not None and shellread.is_unknown(run.args[argv.script]):
        vanishing.insert(0, run.args[argv.script])
    if vanishing:
        # A word of run time where torchrun's options are (`torchrun $ARGS train.py`, `--nnodes
        # $N`, unquoted): the fields bash makes of it, and so which word is which option's value
        # and where the script starts, are known only then.
        out.whole = f"torchrun's arguments {', '.join(shellread.shown(w) for w in vanishing)}"
        out.needs.append(out.whole)
        return out
    assert argv is not None
    for option, (index, inline) in argv.options.items():
        at = index if inline is not None else index + 1
        if at >= end or not shellread.is_unknown(run.args[at]):
            continue
        if option in DECIDING:
            shown = shellread.shown(run.args[at])
            out.needs.append(f"{option}={shown.split('=', 1)[1] if inline is not None else shown}")
            out.options.add(option)
    if out.options & {"--rdzv-backend", "--standalone"}:
        out.whole = "; ".join(out.needs)
    return out


def _not_in_file(env: dict[str, str], row: Row, programs: list[str], info_nnodes: str) -> None:
    """A command that runs a program the file does not hold: what torchrun decides there is
    known only at run time; the wrapper catches torchrun inside it (PATH and the start-up hook)."""
    row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
    row.backend = (
        f"decided at run time: the command runs {programs[0]}, which the file does not hold; the wrapper "
        "catches torchrun inside it at run time (`torchrun` on PATH; `python -m torch.distributed.run` or a path "
        "through its start-up hook), and decides and checks there what it decides for a command in the file"
    )
    for addr, port, _ in _OWN_RENDEZVOUS:
        if env.get(addr):
            row.endpoint = f"{env[addr]}:{env.get(port, '?')}"
            break
    else:
        if env.get("PET_RDZV_ENDPOINT"):
            row.endpoint = env["PET_RDZV_ENDPOINT"]
    row.nnodes = env.get("PET_NNODES") or env.get("WORLD_SIZE") or info_nnodes
    row.store_host = "decided at run time"


def decide(pod: Obj, result: Result, configmaps: dict[str, dict[str, str]], params: Params, row: Row) -> None:
    """Fill `row` with what the wrapper of the pod's (first) training container would decide."""
    containers = {c["name"]: c for c in result.pod["spec"]["containers"]}
    if not result.training:
        return
    c = containers[result.training[0]]
    settings = wrap.settings_of(c)
    env = runtime_env(result.pod, c, configmaps)
    if settings is not None:
        env[rules.ENV_POD] = settings
    zone = ""
    if result.pod["spec"].get("dnsPolicy") == names.CLUSTER_DNS_POLICY and params.namespace:
        zone = f"{params.namespace}.svc.{params.config.cluster_domain}"
    env = rules.unpack(env, zone)
    # What the kubelet hands the runtime: command and args with $(VAR) expanded.
    argv = shellread.kubelet_argv(wrap.original_argv(c), kubelet_env(result.pod, c, configmaps))
    kubelet = kubelet_env(result.pod, c, configmaps)
    if result.pod["spec"].get("hostNetwork") is True and "HOSTNAME" not in kubelet.known:
        kubelet.unknown.add("HOSTNAME")  # the node's host name
    try:
        run, programs = command_reading(argv, env, kubelet)
    except (wrap.ScriptTooLarge, shellread.TooLarge):
        row.backend = "decided at run time (the command is over the size the preview reads)"
        row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
        return
    except ValueError:  # the shell would refuse the script
        run, programs = None, []
    if run is None and programs:
        _not_in_file(env, row, programs, result.info.nnodes if result.info else "")
        return
    if run is None and not wrap.runs_torch_distributed({"command": argv}):
        _without_torchrun(env, row, wrap.is_wrapped(c), wrap.is_wrapped(c) or bool(c.get("command")))
        return
    if run is None:
        row.backend = "decided at run time (torchrun's arguments are in a script or need the shell)"
        row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
        return
    known = _run_time_flags(run)
    if known.whole:
        row.backend = f"decided at run time ({known.whole}: known only when the pod runs)"
        row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
        return
    env = {k: v for k, v in env.items() if k not in run.unset}
    env = {**env, **run.env, **known.env}
    expanded = known.args
    row.decided = True
    try:
        _, plan = rules.merge(expanded, env)
    except rules.ArgvError as e:
        row.refusal = f"torchrun would reject its arguments: {e}"
        return
    row.backend, row.local_addr, row.endpoint, row.nnodes = plan.backend, plan.local_addr, plan.endpoint, plan.nnodes
    row.refusal = plan.fatal
    if plan.backend == "static":
        # torchrun's static rendezvous: node rank 0 hosts the store at --master-addr.
        row.local_addr = env.get(rules.ENV_LOCAL_ADDR, "")
        row.nnodes = rules.effective(rules.Argv(expanded), env, "--nnodes")[0] or "1"
        rank = rules.effective(rules.Argv(expanded), env, "--node-rank")[0]
        row.store_host = "yes" if rank == "0" else "no" if rank else "node rank 0"
    elif plan.backend in rules.ETCD_BACKENDS:
        row.store_host = "- (etcd)"
    elif plan.is_host is not None:
        row.store_host = "yes" if plan.is_host.strip().lower() in ("true", "1") else "no"
    elif plan.endpoint_problem:
        row.store_host = "decided on the node by its addresses"
    if known.needs:
        _at_run_time(row, plan, known, env)


_SAID = {"local_addr": "local address", "endpoint": "endpoint", "store_host": "store host", "nnodes": "node count"}


def _at_run_time(row: Row, plan: rules.Plan, known: _RunTime, env: dict[str, str]) -> None:
    """The values of `row` that a flag known only at run time decides, said so (RUN_TIME in the
    value, or the store host `decided at run time`), the others kept; a refusal it may cause too."""
    decided = {what for option in known.options for what in _DECIDES.get(option, ())}
    # The user's --local-addr is replaced on a job of several nodes where it is loopback.
    if "--local-addr" in known.options or ("--nnodes" in known.options and rules.is_loopback(row.local_addr)):
        decided.add("local_addr")
        row.local_addr = RUN_TIME
    if "nnodes" in decided:
        row.nnodes = RUN_TIME
    if "endpoint" in decided and RUN_TIME not in row.endpoint:
        row.endpoint = RUN_TIME
    if "store_host" in decided and row.store_host != "- (etcd)":
        row.store_host = "decided at run time"
    may = ""
    if _may_refuse(plan, known.options, env):
        row.refusal = ""
        may = "; the wrapper checks them when it starts, and may refuse then"
    told = ", ".join(said for what, said in _SAID.items() if what in decided) or "nothing the rows show"
    row.run_time = f"decided at run time ({'; '.join(known.needs)}: known only when the pod runs): the {told}{may}"


def rows(
    expansions: list[Expansion],
    params_of: Any,
    selectors: selection.Selectors,
    namespace_labels: dict[str, str] | None,
    configmaps: dict[str, dict[str, str]] | None = None,
    claim_devices: dict[str, list[str]] | None = None,
) -> list[Row]:
    """One row per pod of every object. `params_of(namespace)` gives the webhook's Params there.
    `claim_devices`: what each ResourceClaimTemplate of the file asks for (claim_templates)."""
    out: list[Row] = []
    for ex in expansions:
        for pod in ex.pods:
            namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
            row = Row(ex.source, _pod_name(pod), sent=False, mutated=False, pod_after=pod, before=pod)
            why = selection.not_sent(selectors, pod, namespace, namespace_labels)
            if why:
                row.reason = "not sent to the webhook: " + "; ".join(why)
                out.append(row)
                continue
            row.sent = True
            params: Params = params_of(namespace)
            try:
                result = mutate(pod, params)
            except (InvalidPod, UnsupportedPod) as e:
                row.reason = f"left unchanged: {e}"
                out.append(row)
                continue
            row.result, row.pod_after, row.mutated = result, result.pod, result.changed
            row.warnings = [w.text for w in result.warnings]
            if result.info is None:
                row.reason = f"left unchanged: {result.reason}"
            else:
                row.launcher = result.info.launcher
                decide(pod, result, configmaps or {}, params, row)
                if not row.refusal and not row.decided:
                    row.refusal = _admission_refusal(result)
            out.append(row)
        _alone(out[len(out) - len(ex.pods) :])
        _mpi_ssh(out[len(out) - len(ex.pods) :])
        _claims(out[len(out) - len(ex.pods) :], claim_devices or {})
    return out


def _mpi_ssh(rows: list[Row]) -> None:
    """An MPIJob's workers and launcher, read together (admission sees one pod at a time): the
    port the workers' sshd listens on, against the ports mpirun's ssh is told on the launcher. A
    worker on 22 is warned by the core (SshdOnNodePort); here, a worker on another port that the
    launcher does not dial."""
    workers = [r for r in rows if mpijob.role(r.before) == "worker" and (r.before.get("spec") or {}).get("hostNetwork")]
    launchers = [r for r in rows if mpijob.role(r.before) == "launcher"]
    if not workers or not launchers:
        return
    launcher = launchers[0]
    containers = (launcher.before.get("spec") or {}).get("containers") or []
    if not containers:
        return
    # The operator's own env for the MPI implementation comes after the user's: theirs does not count.
    overridden = frozenset(k for env in IMPLEMENTATION_ENV.values() for k, _ in env)
    told = hazards.told_ports(containers[0], overridden)
    for r in workers:
        main = ((r.before.get("spec") or {}).get("containers") or [{}])[0]
        sshd = hazards.sshd_of(main) if isinstance(main, dict) else None
        if sshd is None or hazards.SSH_PORT in sshd.ports or set(sshd.ports) & told:
            continue
        ports = ", ".join(str(p) for p in sshd.ports)
        said = f"told {', '.join(str(p) for p in sorted(told))}" if told else "not told a port, so it dials 22"
        r.warnings.append(
            f"{sshd.container}: sshd listens on port {ports} ({sshd.source}), but mpirun's ssh on {launcher.pod} is "
            f"{said}: on the host network that is the node's sshd, which refuses the job's key. " + hazards.SSHD_FIX
        )


def claim_templates(objects: list[Obj]) -> dict[str, list[str]]:
    """What each ResourceClaimTemplate of a file asks for: its device requests' classes, each told
    as `class (GPU|NIC from DRIVER)` where the class's driver is known (the file's DeviceClass
    selecting `device.driver == "..."`, or a known class name)."""
    drivers: dict[str, str] = dict(allocators.DRA_CLASSES)
    for o in objects:
        if isinstance(o, dict) and o.get("kind") == "DeviceClass":
            text = str((o.get("spec") or {}).get("selectors") or "")[:4096]
            found = _DRIVER.search(text)
            if found:
                drivers[str((o.get("metadata") or {}).get("name"))] = found.group(1)
    out: dict[str, list[str]] = {}
    for o in objects:
        if not isinstance(o, dict) or o.get("kind") != "ResourceClaimTemplate":
            continue
        spec = ((o.get("spec") or {}).get("spec") or {}).get("devices") or {}
        told: list[str] = []
        for request in (spec.get("requests") or [])[:32]:
            if not isinstance(request, dict):
                continue
            exact = request.get("exactly")
            cls = str((exact if isinstance(exact, dict) else request).get("deviceClassName") or "")
            kind, who = allocators.DRA_DRIVERS.get(drivers.get(cls, ""), ("", ""))
            told.append(f"{cls} ({kind}s from {who})" if kind else f"{cls} (a device class hostnet-rdma does not know)")
        out[str((o.get("metadata") or {}).get("name"))] = told
    return out


def claim_template_names(objects: list[Obj]) -> set[str]:
    """The ResourceClaimTemplates the pods of a file name (resourceClaimTemplateName), for the
    preview to read from the cluster those the file does not hold."""
    found: set[str] = set()

    def walk(x: Any, depth: int) -> None:
        if depth > 32 or len(found) >= allocators.MAX_RESOURCES:
            return
        if isinstance(x, dict):
            name = x.get("resourceClaimTemplateName")
            if isinstance(name, str) and name:
                found.add(name)
            for v in x.values():
                walk(v, depth + 1)
        elif isinstance(x, list):
            for v in x:
                walk(v, depth + 1)

    walk(objects, 0)
    held = {str((o.get("metadata") or {}).get("name")) for o in objects
            if isinstance(o, dict) and o.get("kind") == "ResourceClaimTemplate"}  # fmt: skip
    return found - held


_DRIVER = re.compile(r"device\.driver\s*==\s*['\"]([^'\"]{1,253})['\"]")


def _claims(rows: list[Row], templates: dict[str, list[str]]) -> None:
    """Say what each DRA claim of a host-network pod holds, where the file has its template."""
    if not templates:
        return
    for r in rows:
        if not r.sent or not (r.before.get("spec") or {}).get("hostNetwork"):
            continue
        for claim in ((r.before.get("spec") or {}).get("resourceClaims") or [])[: allocators.MAX_RESOURCES]:
            template = claim.get("resourceClaimTemplateName") if isinstance(claim, dict) else None
            if not isinstance(template, str) or template not in templates:
                continue
            asks = templates[template]
            nics = [a for a in asks if "(NICs from dranet)" in a]
            line = f"DRA claim {claim.get('name')}: ResourceClaimTemplate {template} asks for {', '.join(asks) or 'no devices'}"
            if nics:
                line += (": dranet refuses the sandbox of a host-network pod (\"using host network can not claim host "
                         "devices\"), so this pod never starts: drop hostNetwork")  # fmt: skip
            r.warnings.append(line)


# A pod's job within its object: a JobSet's replicated job (a TrainJob's initializers and nodes).
_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


def _alone(rows: list[Row]) -> None:
    """The webhook cannot count a launcher's pods at admission, so a pod of a job that has only
    one is warned like one of several. The preview counted them: for a pod that is its job's
    only one, torchrun's default (1 node) is right; the wrapper still refuses a wrapped torchrun
    without --nnodes, so say why, and drop the warning about an unwrapped one."""
    jobs = Counter(((r.before.get("metadata") or {}).get("labels") or {}).get(_REPLICATED_JOB, "") for r in rows)
    for r in rows:
        if jobs[((r.before.get("metadata") or {}).get("labels") or {}).get(_REPLICATED_JOB, "")] != 1:
            continue
        said = (
            f"{rules.NNODES_NOT_GIVEN}: this pod is its job's only one here, but at admission the webhook cannot "
            f"count a {r.launcher or 'launcher'} job's pods, so the wrapper refuses rather than risk training alone. "
            f'Pass --nnodes=1 or annotate the pod template {rules.ANN_NNODES}: "1"'
        )
        if rules.NNODES_NOT_GIVEN in r.refusal:
            r.refusal = said
        core = r.result.warnings if r.result is not None else []
        kept = []
        for w in core:
            if w.reason != reasons.NODE_COUNT_UNKNOWN:
                kept.append(w.text)
            elif w.refusal:  # the wrapper's refusal, told as the preview counted
                kept.append(w.text[: len(w.text) - len(w.refusal)] + said)
        r.warnings = kept + r.warnings[len(core) :]  # then the preview's own


def _admission_refusal(result: Result) -> str:
    """What admission already knows the wrapper will refuse (its warning, and the status
    annotation's problems), for a row whose run-time decision the preview could not compute (a
    `$(...)` in the command): the table's notes and the exit code say it too."""
    return next((w.refusal for w in result.warnings if w.refusal), "")


def store_problems(rows: list[Row]) -> list[str]:
    """Jobs whose pods would not host exactly one rendezvous store between them: none (every
    node waits for a store nobody starts) or several (each waits for every node: a hang). Only
    where every pod's choice is known before the pods run (yes or no)."""
    by_job: dict[str, list[Row]] = {}
    for r in rows:
        if r.sent and r.mutated and not r.refusal:
            by_job.setdefault(r.source, []).append(r)
    out: list[str] = []
    for job, pods in by_job.items():
        if len(pods) < 2 or any(r.store_host not in ("yes", "no") for r in pods):
            continue
        hosts = [r.pod for r in pods if r.store_host == "yes"]
        if len(hosts) != 1:
            which = ", ".join(hosts) if hosts else "none of its pods"
            out.append(f"{job}: {len(hosts)} rendezvous store hosts ({which}), not exactly one: the job would hang")
    return out
