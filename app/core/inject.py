"""The RDMA plumbing steps. Each is a named function (pod, ctx) -> outcome, idempotent,
upsert-by-name, and never overrides what the user set explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core import allocators, names, quantity, reasons
from app.core.launchers import LauncherInfo, mpijob
from app.core.params import Params, Profile
from app.core.podspec import Env, add_mount, add_volume, child, child_list, mount_at
from app.core.reasons import Warned

Obj = dict[str, Any]

# What a step did: None means "in effect"; a string is why it was skipped.
StepOutcome = str | None


@dataclass
class Context:
    params: Params
    info: LauncherInfo
    annotations: dict[str, str]
    profile: Profile
    training: list[int]  # indices into spec.containers that run training
    # Each with its reason; the fatal ones (what will keep the job from training together) are
    # also the status annotation's `problems`, for whoever reads the pod.
    warnings: list[Warned] = field(default_factory=list)
    # Why the pod needs no RDMA devices of ours (own_devices): three steps ask, read once.
    own_checked: bool = False
    own_reason: str | None = None

    # Written out, as LauncherInfo's: the generated one runs interpreted in the compiled core.
    def __init__(
        self,
        params: Params,
        info: LauncherInfo,
        annotations: dict[str, str],
        profile: Profile,
        training: list[int],
        warnings: list[Warned] | None = None,
        own_checked: bool = False,
        own_reason: str | None = None,
    ) -> None:
        self.params = params
        self.info = info
        self.annotations = annotations
        self.profile = profile
        self.training = training
        self.warnings = [] if warnings is None else warnings
        self.own_checked = own_checked
        self.own_reason = own_reason

    def flag(self, annotation: str, default: bool) -> bool:
        """A boolean knob: the pod annotation if it is a clear true/false, else the default."""
        raw = self.annotations.get(annotation)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "1", "yes", "on", "enabled"):
            return True
        if value in ("false", "0", "no", "off", "disabled"):
            return False
        self.warn(
            reasons.ANNOTATION_IGNORED,
            f"annotation {annotation}={raw!r} is not true/false; using {str(default).lower()}",
        )
        return default

    def warn(self, reason: str, text: str) -> None:
        add(self.warnings, Warned(reason, text))

    def problem(self, reason: str, text: str, refusal: str = "") -> None:
        """A warning of what keeps the job from training together (`refusal`: the wrapper's own)."""
        add(self.warnings, Warned(reason, text, True, refusal))

    def problems(self) -> list[str]:
        return [w.text for w in self.warnings if w.fatal]


def add(warnings: list[Warned], warning: Warned) -> None:
    """Once each: a text said twice (two containers alike) is one warning, fatal if either was."""
    for i, w in enumerate(warnings):
        if w.text == warning.text:
            if warning.fatal and not w.fatal:
                warnings[i] = warning
            return
    warnings.append(warning)


def _spec(pod: Obj) -> Obj:
    return child(pod, "spec")


def _training(pod: Obj, ctx: Context) -> list[Obj]:
    containers = _spec(pod).get("containers") or []
    return [containers[i] for i in ctx.training]


NCCL_CONF_FIELD = 1024  # NCCL's setEnvFile: char envVar[1024], envValue[1024]
# What a profile may set (params.ALLOWED_ENV_KEY); of these, NCCL reads only its own from a file.
ENV_PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_", "GLOO_", "UCX_", "NVSHMEM_")
# GKE's GPUDirect-TCPX(O): a daemon container of the pod (a sidecar, or an init container with
# restartPolicy Always) drives the GPU NICs, and NCCL's TCPX plugin talks to it; no InfiniBand.
TCPX_DAEMONS = ("tcpx-daemon", "tcpxo-daemon")


def own_devices(pod: Obj, ctx: Context) -> str | None:
    """Why the pod needs no RDMA devices of ours (no hostPath, no privileged, no SYS_ADMIN): an
    allocator hands it its NICs (a device plugin's resource, a DRA claim: app/core/allocators.py),
    or GPUDirect-TCPX's daemon drives them. None: the devices are ours to mount."""
    if not ctx.own_checked:
        ctx.own_reason = _own_devices(pod, ctx)
        ctx.own_checked = True
    return ctx.own_reason


def _own_devices(pod: Obj, ctx: Context) -> str | None:
    spec = _spec(pod)
    config = ctx.params.config
    if ctx.flag(names.ANN_ALLOCATED_NICS, True):
        found = allocators.allocation(pod, config.rdma_resource_prefixes, config.dra_claims_carry_nics)
        if found is not None:
            if found.resource and found.assumed:
                ctx.warn(
                    reasons.ALLOCATOR_ASSUMED,
                    f"resource {found.resource} looks like a NIC pool of an allocator hostnet-rdma does not know: taken "
                    "to hand the pod its NICs, so no /dev/infiniband hostPath, privileged or SYS_ADMIN. Add its prefix "
                    f'to the config\'s rdmaResourcePrefixes to say so, or annotate {names.ANN_ALLOCATED_NICS}: "false" '
                    "if the pod's NICs do not come from it",
                )
            said = f"{found.what} ({found.resource})" if found.resource else found.what
            if not found.resource:
                said += f'; annotate {names.ANN_ALLOCATED_NICS}: "false" if it does not'
            return f"NICs from {said}"
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict) and c.get("name") in TCPX_DAEMONS:
                return (f"GPUDirect-TCPX (container {c['name']}): its daemon and NCCL's TCPX plugin drive the GPU NICs; "
                        "no InfiniBand devices")  # fmt: skip
    return None


def dns(pod: Obj, ctx: Context) -> StepOutcome:
    spec = _spec(pod)
    policy = spec.get("dnsPolicy")
    if policy == "None":
        return "dnsPolicy None with the user's own dnsConfig"
    if policy == "Default":
        ctx.warn(
            reasons.DNS_POLICY_KEPT, "dnsPolicy Default kept: pod DNS names of the job will not resolve from this pod"
        )
        return "dnsPolicy Default set by the user"
    # Absent or ClusterFirst (the API default): on hostNetwork ClusterFirst means node DNS.
    spec["dnsPolicy"] = names.CLUSTER_DNS_POLICY
    return None


def infiniband(pod: Obj, ctx: Context) -> StepOutcome:
    own = own_devices(pod, ctx)
    if own:
        return own
    path = ctx.params.config.infiniband_path
    targets = [c for c in _training(pod, ctx) if mount_at(c, path) is None]
    declared = child_list(_spec(pod), "volumes")
    ours = any(isinstance(v, dict) and v.get("name") == names.VOL_INFINIBAND for v in declared)
    if not targets:
        # Already in place: by us on an earlier pass (our volume exists), or by the user.
        return None if ours else "the pod mounts it already"
    add_volume(_spec(pod), {"name": names.VOL_INFINIBAND, "hostPath": {"path": path}})
    for c in targets:
        add_mount(c, names.VOL_INFINIBAND, path)
    return None


def shm(pod: Obj, ctx: Context) -> StepOutcome:
    size = ctx.annotations.get(names.ANN_SHM_SIZE, ctx.params.config.shm_size).strip()
    if quantity.parse(size) is None:
        ctx.warn(
            reasons.ANNOTATION_IGNORED,
            f"annotation {names.ANN_SHM_SIZE}={size!r} is not a quantity; using {ctx.params.config.shm_size}",
        )
        size = ctx.params.config.shm_size
    targets = [c for c in _training(pod, ctx) if mount_at(c, names.SHM_PATH) is None]
    volumes = child_list(_spec(pod), "volumes")
    ours = next((v for v in volumes if isinstance(v, dict) and v.get("name") == names.VOL_SHM), None)
    if not targets and ours is None:
        return "the pod mounts /dev/shm already"
    if ours is None:
        add_volume(_spec(pod), {"name": names.VOL_SHM, "emptyDir": {"medium": "Memory", "sizeLimit": size}})
    limit = _pod_memory_limit(pod)
    wanted = quantity.parse(size) or 0
    if limit is not None and limit < wanted:
        # The kubelet sizes a memory-backed emptyDir to the pod's memory limit, whatever sizeLimit says.
        ctx.warn(
            reasons.SHM_CAPPED,
            f"/dev/shm will be capped at the pod's memory limit ({_human(limit)}), not {size}: the kubelet sizes "
            f"memory-backed volumes to the limit. Raise the containers' memory limits or lower {names.ANN_SHM_SIZE}",
        )
    for c in targets:
        add_mount(c, names.VOL_SHM, names.SHM_PATH)
    return None


def _pod_memory_limit(pod: Obj) -> int | None:
    """The pod's memory limit as the kubelet sees it: pod-level, else the sum of every
    container's limit when all have one (one without a limit makes the pod unlimited)."""
    spec = _spec(pod)
    pod_level = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    if isinstance(pod_level, str) or isinstance(pod_level, int):  # noqa: SIM101  (type tests in mypyc)
        return quantity.parse(str(pod_level))
    total = 0
    for c in spec.get("containers") or []:
        value = ((c.get("resources") or {}).get("limits") or {}).get("memory") if isinstance(c, dict) else None
        parsed = quantity.parse(str(value)) if isinstance(value, str) or isinstance(value, int) else None  # noqa: SIM101
        if parsed is None:
            return None
        total += parsed
    return total


def _human(size: int) -> str:
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size >= factor:
            return f"{size / factor:g}{unit}"
    return str(size)


def capabilities(pod: Obj, ctx: Context) -> StepOutcome:
    # IPC_LOCK: NCCL pins its buffers. SYS_ADMIN only for RDMA devices by hostPath (as the tested
    # pods have them); a device plugin's devices (or TCPX's daemon) need no more than IPC_LOCK.
    wanted = ("IPC_LOCK",) if own_devices(pod, ctx) else ("IPC_LOCK", "SYS_ADMIN")
    skipped: list[str] = []
    for c in _training(pod, ctx):
        sc = child(c, "securityContext")
        caps = child(sc, "capabilities")
        add = child_list(caps, "add")
        dropped = {str(x).upper().removeprefix("CAP_") for x in caps.get("drop") or []}
        present = {str(x).upper().removeprefix("CAP_") for x in add}
        for cap in wanted:
            if cap in present:
                continue
            if cap in dropped:
                skipped.append(f"{c.get('name')}: {cap} dropped by the user")
                continue
            # The API server rejects CAP_SYS_ADMIN together with allowPrivilegeEscalation: false.
            if cap == "SYS_ADMIN" and sc.get("allowPrivilegeEscalation") is False:
                skipped.append(f"{c.get('name')}: SYS_ADMIN conflicts with allowPrivilegeEscalation: false")
                continue
            add.append(cap)
    for s in skipped:
        ctx.warn(reasons.PRIVILEGE_KEPT, f"capability not added: {s}")
    return None


def privileged(pod: Obj, ctx: Context) -> StepOutcome:
    if not ctx.flag(names.ANN_PRIVILEGED, ctx.params.config.privileged):
        return "turned off"
    own = own_devices(pod, ctx)
    if own:
        return own
    kept: list[str] = []
    for c in _training(pod, ctx):
        sc = child(c, "securityContext")
        if sc.get("privileged") is False:
            ctx.warn(
                reasons.PRIVILEGE_KEPT,
                f"{c.get('name')}: privileged: false kept; hostPath RDMA devices may be unusable (NCCL falls back to sockets)",
            )
            kept.append("privileged: false set by the user")
            continue
        if sc.get("allowPrivilegeEscalation") is False:
            ctx.warn(
                reasons.PRIVILEGE_KEPT,
                f"{c.get('name')}: not made privileged because allowPrivilegeEscalation is false",
            )
            kept.append("allowPrivilegeEscalation: false set by the user")
            continue
        sc["privileged"] = True
    # In effect if any training container is privileged; else say why none is.
    return kept[0] if len(kept) == len(ctx.training) and kept else None


def nccl_env(pod: Obj, ctx: Context) -> StepOutcome:
    for c in _training(pod, ctx):
        if c.get("envFrom"):
            ctx.warn(
                reasons.ENV_FROM_OVERRIDDEN,
                f"{c.get('name')}: envFrom values are invisible at admission, so profile env (NCCL_*) overrides them; "
                f"to keep NCCL settings from envFrom, annotate {names.ANN_SKIP}=nccl-env",
            )
        env = Env(c)
        for key, value in ctx.profile.env:
            env.set_default(key, value)
    if ctx.info.launcher == "mpijob" and mpijob.role(pod) == "worker":
        _nccl_conf(pod, ctx)
    return None


def _nccl_conf(pod: Obj, ctx: Context) -> None:
    """An MPIJob worker runs sshd, and mpirun's ranks start in ssh sessions that sshd begins
    with an empty environment: the container's env never reaches NCCL there. NCCL also reads
    /etc/nccl.conf in every process (after the env and ~/.nccl.conf, which win: checked with
    NCCL 2.28, tests/logs/nccl-conf-h200/), so the container's NCCL_* settings go there too, as
    a downward-API file of an annotation. What cannot go there is said."""
    main = _training(pod, ctx)[:1]  # the operator's container: where its sshd runs
    if not main:
        return
    c = main[0]
    lines: list[str] = []
    left: list[str] = []
    for e in c.get("env") or []:
        key = str(e.get("name") or "") if isinstance(e, dict) else ""
        if not key.startswith(ENV_PREFIXES):
            continue
        value = e.get("value")
        # NCCL reads a line's name and value into 1,024-byte buffers: a longer one would be cut.
        if (key.startswith("NCCL_") and isinstance(value, str) and "\n" not in value and "\r" not in value
                and len(key) < NCCL_CONF_FIELD and len(value.encode()) < NCCL_CONF_FIELD):  # fmt: skip
            lines.append(f"{key}={value}")
        else:  # another library's, from a ConfigMap or Secret, over several lines, or too long
            left.append(key)
    mounted = mount_at(c, names.NCCL_CONF_PATH)
    theirs = mounted is not None and mounted.get("name") != names.VOL_NCCL_CONF
    if lines and not theirs:
        child(child(pod, "metadata"), "annotations")[names.ANN_NCCL_CONF] = "\n".join(lines) + "\n"
        path = f"metadata.annotations['{names.ANN_NCCL_CONF}']"
        add_volume(_spec(pod), {"name": names.VOL_NCCL_CONF,
                                "downwardAPI": {"items": [{"path": "nccl.conf", "fieldRef": {"fieldPath": path}}]}})  # fmt: skip
        if mounted is None:
            add_mount(c, names.VOL_NCCL_CONF, names.NCCL_CONF_PATH, "nccl.conf")
            c["volumeMounts"][-1]["readOnly"] = True
    elif lines:  # the user's own /etc/nccl.conf
        left = [ln.split("=", 1)[0] for ln in lines] + left
    if left:
        # This pod alone cannot see the launcher, whose env and mpirun flags may already carry these:
        # say what does not reach the ranks from here and let the launcher's settings stand.
        transport = [k for k in left if not k.startswith(("NCCL_", "TORCH_NCCL_"))]
        ours = [k for k in left if k not in transport]
        said = []
        if ours:
            said.append(f"{', '.join(ours)} must come from the launcher, if it does not set them already (with Open "
                        "MPI, mpirun -x NAME passes one on; MPICH and Intel MPI pass the launcher's environment on)")  # fmt: skip
        if transport:
            said.append(f"{', '.join(transport)} select the MPI's own transports: leave them to the launcher's "
                        "settings and its MPI's docs (some, such as UCX_TLS, break the job when forced on every rank)")  # fmt: skip
        ctx.warn(
            reasons.MPI_ENV_NOT_FORWARDED,
            "MPIJob worker: mpirun starts the ranks on this pod over ssh, and sshd gives each a fresh environment, "
            f"so this worker's env does not reach them (nor is it in the /etc/nccl.conf NCCL reads"
            f"{': the container mounts its own' if theirs else ''}): " + "; ".join(said),
        )
