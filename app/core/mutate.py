"""The pure core: a pod dict in, the mutated pod dict and warnings out. No I/O."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from app.core import allocators, budget, hazards, inject, launchers, names, profiles, reasons, wrap
from app.core.launchers import LauncherInfo
from app.core.launchers.base import pod_labels
from app.core.params import STEP_NAMES, InjectConfig, Params
from app.core.reasons import Warned

Obj = dict[str, Any]
Step = Callable[[Obj, inject.Context], inject.StepOutcome]

STEPS: tuple[tuple[str, str, Step], ...] = (
    # (step name, InjectConfig switch, function)
    ("dns", "dns", inject.dns),
    ("infiniband", "infiniband", inject.infiniband),
    ("shm", "shm", inject.shm),
    ("capabilities", "capabilities", inject.capabilities),
    ("privileged", "privileged", inject.privileged),
    ("nccl-env", "nccl_env", inject.nccl_env),
    ("wrap", "wrap", wrap.wrap),
)
assert tuple(s[0] for s in STEPS) == STEP_NAMES


class InvalidPod(ValueError):
    """The object is not a Pod at all (the CLI exits 2; the server allows it unchanged with a warning)."""


class UnsupportedPod(ValueError):
    """A Pod we cannot mutate safely: it is allowed unchanged, with this as a warning."""


@dataclass
class Result:
    pod: Obj
    changed: bool
    warnings: list[Warned] = field(default_factory=list)
    info: LauncherInfo | None = None  # what the launcher implies; None when nothing was done
    profile: str = ""
    profile_reason: str = ""
    training: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # why nothing was done, when nothing was

    # Written out, as LauncherInfo's: the generated one runs interpreted in the compiled core.
    def __init__(
        self,
        pod: Obj,
        changed: bool,
        warnings: list[Warned] | None = None,
        info: LauncherInfo | None = None,
        profile: str = "",
        profile_reason: str = "",
        training: list[str] | None = None,
        applied: list[str] | None = None,
        skipped: dict[str, str] | None = None,
        reason: str = "",
    ) -> None:
        self.pod = pod
        self.changed = changed
        self.warnings = [] if warnings is None else warnings
        self.info = info
        self.profile = profile
        self.profile_reason = profile_reason
        self.training = [] if training is None else training
        self.applied = [] if applied is None else applied
        self.skipped = {} if skipped is None else skipped
        self.reason = reason


# The keys the loops below visit, as constants: a tuple literal in a loop is built at every
# call in the compiled core, and iterated generically.
_META_STRINGS: Final[tuple[str, str, str]] = ("name", "generateName", "namespace")
_OWNER_STRINGS: Final[tuple[str, str, str, str]] = ("apiVersion", "kind", "name", "uid")
_SPEC_LISTS: Final[tuple[str, str, str, str]] = ("volumes", "initContainers", "ephemeralContainers", "resourceClaims")
_OBJECT_LISTS: Final[tuple[str, str, str]] = ("env", "volumeMounts", "envFrom")
_ARGV: Final[tuple[str, str]] = ("command", "args")
_CONTAINER_STRINGS: Final[tuple[str, str]] = ("image", "workingDir")
_AMOUNTS: Final[tuple[str, str]] = ("limits", "requests")
_NAMED_CONTAINERS: Final[tuple[str, str]] = ("containers", "ephemeralContainers")
_RUN_CONTAINERS: Final[tuple[str, str]] = ("containers", "initContainers")
_COPIED_LISTS: Final[tuple[str, str]] = ("volumes", "initContainers")

# What an absent list or object reads as in the shape checks (read only, never written): a
# literal default, `c.get(key, [])`, is a new object at every call.
_NONE: list[Any] = []
_EMPTY: Obj = {}


def _check_shape(pod: Obj) -> None:
    """The one check of the JSON types of what the core reads, at its entry: a pod the API
    server sends always passes; a forged review with a field of the wrong type (any pod can
    reach the Service) is refused here by name, allowed unchanged with the reason, rather than
    breaking a step further on."""
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        kind = pod.get("kind") if isinstance(pod, dict) else pod
        raise InvalidPod(f"expected a Pod, got {kind if isinstance(kind, str) else json_type_name(kind)}")
    if pod.get("apiVersion", "v1") != "v1":
        version = pod.get("apiVersion")
        raise InvalidPod(
            f"expected apiVersion v1, got {version if isinstance(version, str) else json_type_name(version)}"
        )
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise InvalidPod("the Pod has no spec")
    meta = pod.get("metadata", _EMPTY)
    if not isinstance(meta, dict):
        raise UnsupportedPod("metadata is not an object")
    _strings(meta.get("labels"), "metadata.labels")
    _strings(meta.get("annotations"), "metadata.annotations")
    for key in _META_STRINGS:
        if not isinstance(meta.get(key, ""), str):
            raise UnsupportedPod(f"metadata.{key} is not a string")
    refs = meta.get("ownerReferences", _NONE)
    if not isinstance(refs, list):
        raise UnsupportedPod("metadata.ownerReferences is not a list")
    for ref in refs:
        if not isinstance(ref, dict):
            raise UnsupportedPod("metadata.ownerReferences is not a list of objects")
        for key in _OWNER_STRINGS:
            if not isinstance(ref.get(key, ""), str):
                raise UnsupportedPod(f"metadata.ownerReferences: {key} is not a string")
    _strings(spec.get("nodeSelector"), "spec.nodeSelector")
    _resources(spec, None)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise UnsupportedPod("spec.containers is missing or empty")
    for key in _SPEC_LISTS:
        if not isinstance(spec.get(key, _NONE), list):
            raise UnsupportedPod(f"spec.{key} is not a list")
    for v in spec.get("volumes") or ():
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise UnsupportedPod("a volume has no name")
        for source, value in v.items():  # every volume source is an object (hostPath, emptyDir...)
            if source != "name" and not isinstance(value, dict):
                raise UnsupportedPod(f"volume {v['name']}: {source} is not an object")
    for c in spec.get("resourceClaims") or ():
        if not isinstance(c, dict) or not isinstance(c.get("name", ""), str):
            raise UnsupportedPod("spec.resourceClaims is not a list of named objects")
    for c in spec.get("ephemeralContainers") or ():
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise UnsupportedPod("an ephemeral container has no name")
    seen: set[str] = set()
    for c in containers:
        _check_container(c, "a container", seen)
    for c in spec.get("initContainers") or ():
        _check_container(c, "an init container", set())


def _check_container(c: Any, which: str, seen: set[str]) -> None:
    if not isinstance(c, dict) or not isinstance(c.get("name"), str):
        raise UnsupportedPod(f"{which} has no name")
    name = c["name"]
    if name in seen:
        raise UnsupportedPod(f"container name {name!r} appears twice")
    seen.add(name)
    # Defaults _NONE and _EMPTY, not `[]` and `{}`: those are new objects at every call.
    for key in _OBJECT_LISTS:
        items = c.get(key, _NONE)
        if not isinstance(items, list):
            raise UnsupportedPod(f"container {name}: {key} is not a list of objects")
        for x in items:  # a loop, not all(genexpr): this runs for every container of every pod
            if not isinstance(x, dict):
                raise UnsupportedPod(f"container {name}: {key} is not a list of objects")
    for key in _ARGV:
        words = c.get(key, _NONE)
        if not isinstance(words, list):
            raise UnsupportedPod(f"container {name}: {key} is not a list")
        for word in words:
            if not isinstance(word, str):
                raise UnsupportedPod(f"container {name}: {key} is not a list of strings")
    for key in _CONTAINER_STRINGS:
        if not isinstance(c.get(key, ""), str):
            raise UnsupportedPod(f"container {name}: {key} is not a string")
    sc = c.get("securityContext", _EMPTY)
    if not isinstance(sc, dict) or not isinstance(sc.get("capabilities", _EMPTY), dict):
        raise UnsupportedPod(f"container {name}: securityContext is not an object")
    caps = sc.get("capabilities", _EMPTY)
    if not isinstance(caps.get("add", _NONE), list) or not isinstance(caps.get("drop", _NONE), list):
        raise UnsupportedPod(f"container {name}: capabilities add/drop are not lists")
    _resources(c, name)


def _resources(owner: Obj, container: str | None) -> None:
    """`resources` (a container's, or the pod's) and its limits and requests are
    objects. The message's prefix is made only for a refusal: this runs for every container.
    container: its name, None for the pod's."""
    resources = owner.get("resources")
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise UnsupportedPod(f"{_owner(container)} resources is not an object")
    for kind in _AMOUNTS:
        amounts = resources.get(kind)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            raise UnsupportedPod(f"{_owner(container)} resources.{kind} is not an object")
        for amount in amounts.values():
            if not _quantity_typed(amount):
                raise UnsupportedPod(f"{_owner(container)} resources.{kind} is not an object of quantities")


def _quantity_typed(value: Any) -> bool:
    # Type tests, as mypyc compiles them: `isinstance(x, str | int | float)` builds a union each time.
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or isinstance(value, int) or isinstance(value, float)  # noqa: SIM101


def _owner(container: str | None) -> str:
    return "spec" if container is None else f"container {container}:"


def _strings(value: Any, field: str) -> None:
    """A map of strings (labels, annotations, a nodeSelector), or absent."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise UnsupportedPod(f"{field} is not an object")
    for v in value.values():
        if not isinstance(v, str):
            raise UnsupportedPod(f"{field} is not an object of strings")


def json_type_name(value: Any) -> str:
    """A value's JSON type, for a message about a forged one: never its repr (a list nested a
    thousand deep has none: repr() raises RecursionError)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else type(value).__name__


# The volume names the steps add, and the source each has when it is ours (from an earlier pass).
_OUR_VOLUMES = {names.VOL_INFINIBAND: ("hostPath",), names.VOL_SHM: ("emptyDir",), names.VOL_BIN: ("emptyDir", "image")}


def _check_names(pod: Obj) -> None:
    """The names the webhook adds must be free, or its own from an earlier pass: a user's volume
    of that name would be adopted (the wrapper copied into the user's PVC), a user's container
    of that name duplicated (the API server refuses the pod, whatever failurePolicy says)."""
    spec = pod["spec"]
    for key in _NAMED_CONTAINERS:
        for c in spec.get(key) or []:
            if isinstance(c, dict) and c.get("name") == names.INIT_CONTAINER:
                raise UnsupportedPod(
                    f"container name {names.INIT_CONTAINER!r} is hostnet-rdma's (its init container); rename the container"
                )
    for c in spec.get("initContainers") or []:
        if isinstance(c, dict) and c.get("name") == names.INIT_CONTAINER and c.get("command") != wrap.INIT_COMMAND:
            raise UnsupportedPod(
                f"init container name {names.INIT_CONTAINER!r} is hostnet-rdma's and this one is not; rename it"
            )
    for key in _RUN_CONTAINERS:
        for c in spec.get(key) or []:
            for m in (c.get("volumeMounts") or []) if isinstance(c, dict) else []:
                path = m.get("mountPath") if isinstance(m, dict) else None
                if not isinstance(path, str) or m.get("name") == names.VOL_BIN:
                    continue
                path = path.rstrip("/")
                if path == names.BIN_DIR or path.startswith(names.BIN_DIR + "/"):
                    raise UnsupportedPod(
                        f"container {c.get('name')} mounts volume {m.get('name')} at {m['mountPath']}, where "
                        f"hostnet-rdma puts its torchrun wrapper ({names.BIN_DIR}); mount it elsewhere"
                    )
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict) or v.get("name") not in _OUR_VOLUMES:
            continue
        name = str(v["name"])
        sources = [k for k in v if k != "name"]
        ours = len(sources) == 1 and sources[0] in _OUR_VOLUMES[name]
        if ours and name == names.VOL_SHM:
            ours = (v.get("emptyDir") or {}).get("medium") == "Memory"
        if ours and name == names.VOL_BIN and sources == ["emptyDir"]:
            ours = v.get("emptyDir") == wrap.BIN_EMPTY_DIR
        if not ours:
            raise UnsupportedPod(f"volume name {name!r} is hostnet-rdma's, and the pod has a {'/'.join(sources) or 'volume'} "
                                 "of its own by that name; rename the volume")  # fmt: skip


GPU_RESOURCE_SUFFIXES = ("/gpu",)  # nvidia.com/gpu, amd.com/gpu, ...


def _requests_devices(container: Obj, rdma_prefixes: tuple[str, ...]) -> bool:
    """GPUs or RDMA NICs: an extended resource, or a DRA claim (their twin: GPUs and NICs come
    from resourceClaimTemplateName where the cluster hands them out by DRA)."""
    if allocators.claims_devices(container):
        return True
    resources = container.get("resources") or {}
    for kind in _AMOUNTS:
        for key in resources.get(kind) or {}:
            key = str(key)
            if key.endswith(GPU_RESOURCE_SUFFIXES) or allocators.is_nic_resource(key, rdma_prefixes):
                return True
    return False


def _training_containers(
    pod: Obj, info: LauncherInfo, ann: dict[str, str], warnings: list[Warned], rdma_prefixes: tuple[str, ...]
) -> list[int]:
    """Which regular containers run training (init containers and sidecars never do)."""
    containers = pod["spec"]["containers"]
    by_name = {c["name"]: i for i, c in enumerate(containers)}
    listed = ann.get(names.ANN_CONTAINERS)
    if listed:
        wanted = [n.strip() for n in listed.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            inject.add(
                warnings,
                Warned(
                    reasons.ANNOTATION_IGNORED, f"{names.ANN_CONTAINERS} names unknown containers: {', '.join(unknown)}"
                ),
            )
        chosen = [by_name[n] for n in wanted if n in by_name]
        if chosen:
            return sorted(set(chosen))
    # Containers that ask for accelerators or RDMA devices train; a sidecar listed first does not.
    chosen = [i for i, c in enumerate(containers) if _requests_devices(c, rdma_prefixes)]
    if chosen:
        return chosen
    chosen = [i for i, c in enumerate(containers) if wrap.runs_torch_distributed(c)]
    if chosen:
        return chosen
    if info.designated_container in by_name:
        return [by_name[info.designated_container]]
    if len(containers) == 1:
        return [0]
    if names.STATUS_ANNOTATION in ann:
        # Reinvocation: the container an earlier pass chose as the only one carries what it
        # added (the wrapper, our mounts), whatever another webhook added since (a sidecar).
        chosen = [i for i, c in enumerate(containers) if _ours(c)]
        if chosen:
            return chosen
    # Never a container by its position: the first is often a sidecar (a proxy, a log shipper).
    raise UnsupportedPod(
        f"cannot tell which of the containers {', '.join(by_name)} runs training (none runs torchrun in its command "
        f"or asks for a GPU or RDMA resource); name it in the annotation {names.ANN_CONTAINERS}"
    )


_OUR_MOUNTS = frozenset((names.VOL_BIN, names.VOL_SHM, names.VOL_INFINIBAND))


def _ours(container: Obj) -> bool:
    """A training container of an earlier pass: wrapped, or with one of our volumes mounted."""
    if wrap.is_wrapped(container):
        return True
    return any(isinstance(m, dict) and m.get("name") in _OUR_MOUNTS for m in container.get("volumeMounts") or [])


def training_containers(pod: Obj, config: InjectConfig) -> list[str]:
    """Names of the containers the webhook treats as training ones: the rule mutate() applies,
    for tools that look at a pod (`hostnet-rdma verify`). The pod must be well formed."""
    ann = {str(k): str(v) for k, v in ((pod.get("metadata") or {}).get("annotations") or {}).items()}
    info = launchers.describe(pod, config.rdzv_port)
    chosen = _training_containers(pod, info, ann, [], config.rdma_resource_prefixes)
    return [pod["spec"]["containers"][i]["name"] for i in chosen]


def _status(params: Params, info: LauncherInfo, profile: str, skipped: dict[str, str], problems: list[str]) -> str:
    # Describes the resulting state, not this pass's actions, so a second pass writes the
    # same value (idempotency) and reinvocation does not churn. Every step not in `skipped` is
    # in effect; `skipped` appears only when a step is (the common pod carries ~100 B less).
    status: dict[str, Any] = {"version": params.version, "launcher": info.launcher, "profile": profile}
    if skipped:
        status["skipped"] = skipped
    if problems:
        # Bounded (budget.STATUS_BYTES): a problem quotes the pod's own text (an endpoint of
        # 200 KB made a 270 KB annotation, over the API server's limit for all of them).
        kept = [_cut(p, budget.PROBLEM_BYTES) for p in problems[: budget.MAX_PROBLEMS]]
        if len(problems) > budget.MAX_PROBLEMS:
            kept.append(f"... and {len(problems) - budget.MAX_PROBLEMS} more (the admission warnings)")
        status["problems"] = kept
    text = orjson.dumps(status, option=orjson.OPT_SORT_KEYS).decode()
    if len(text) > budget.STATUS_BYTES:  # long names from a review the API server did not check
        status = {k: _cut(str(v), 64) if isinstance(v, str) else v for k, v in status.items()}
        status["problems"] = [_cut(p, 128) for p in status.get("problems", [])[: budget.MAX_PROBLEMS]]
        text = orjson.dumps(status, option=orjson.OPT_SORT_KEYS).decode()
    return text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _annotation_bytes(annotations: dict[str, Any]) -> int:
    """What the API server counts against its limit on all of a pod's annotations."""
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())


def _writable(pod: Obj) -> Obj:
    """A copy of the pod for the steps to write: fresh where they write (metadata and its
    annotations, spec and its volume and init-container lists, each container and, deep, its
    WRITTEN fields), shared where they only read (labels, owner references, every other spec
    and container field: resources, probes, ports...). The diff then skips the shared parts by
    identity. Steps write nowhere else (test_input_is_never_modified)."""
    out = dict(pod)
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = meta = dict(meta)
        if isinstance(meta.get("annotations"), dict):
            meta["annotations"] = dict(meta["annotations"])
    spec = out["spec"] = dict(pod["spec"])
    for key in _COPIED_LISTS:
        if isinstance(spec.get(key), list):
            spec[key] = list(spec[key])
    spec["containers"] = [_container_copy(c) for c in spec["containers"]]
    return out


# The container fields the steps write into (lists appended to, entries and dicts changed);
# they assign others (`command`) whole, which a shallow copy allows.
WRITTEN: Final[tuple[str, str, str]] = ("env", "volumeMounts", "securityContext")


def _container_copy(container: Any) -> Any:
    if not isinstance(container, dict):
        return container
    out = dict(container)
    for key in WRITTEN:
        value = out.get(key)
        if isinstance(value, dict) or isinstance(value, list):  # noqa: SIM101  (type tests in mypyc)
            try:
                out[key] = _json_copy(value, MAX_NESTING)
            except UnsupportedPod as e:
                raise UnsupportedPod(f"container {out.get('name')}: {key} is {e}") from None
    return out


# How deep the copied fields may nest: a real env or securityContext is 3 or 4 levels deep; a
# forged one nested a thousand deep would exhaust the interpreter's recursion (a traceback).
MAX_NESTING = 32


def _json_copy(value: Any, levels: int) -> Any:
    """A deep copy of plain JSON: new dicts and lists, the same (immutable) strings and numbers.
    Compiled, ~2x faster than an orjson round trip (which makes every string anew), and the
    diff's compares of the shared strings are then identity checks. UnsupportedPod when nested
    deeper than `levels`."""
    if isinstance(value, dict):
        if not levels:
            raise UnsupportedPod(f"nested more than {MAX_NESTING} levels deep")
        return {k: _json_copy(v, levels - 1) for k, v in value.items()}
    if isinstance(value, list):
        if not levels:
            raise UnsupportedPod(f"nested more than {MAX_NESTING} levels deep")
        return [_json_copy(v, levels - 1) for v in value]
    return value


def _not_training(pod: Obj, info: LauncherInfo, ann: dict[str, str], rdma_prefixes: tuple[str, ...]) -> str:
    """Why a pod the namespace opt-in sent us is no training pod ("" when it is one). In a
    labelled namespace every host-network pod is sent (a node exporter, a CNI agent...); only
    training gets privileged containers and device mounts."""
    if names.STATUS_ANNOTATION in ann or names.ANN_CONTAINERS in ann:
        return ""  # mutated by us already (reinvocation), or the user named its training containers
    if info.launcher in launchers.TRAINING_LAUNCHERS:
        return ""
    for c in pod["spec"]["containers"]:
        if _requests_devices(c, rdma_prefixes) or wrap.runs_torch_distributed(c) or _torchrun_env(c):
            return ""
    return (
        "not a training pod: no container runs torchrun or torch.distributed.run, sets torchrun's PET_* env, "
        f"requests a GPU or RDMA resource or uses a DRA claim, and no training launcher owns it (label the pod {names.INJECT_LABEL}={names.INJECT_LABEL_VALUE} "
        "to plumb it anyway)"
    )


def job_port(config: InjectConfig, job: str) -> int:
    """The c10d store port of a launcher-default endpoint for this job: rdzvPort plus a hash of
    the job's id within rdzvPortSpan, the same for every pod of the job and every pass."""
    if config.rdzv_port_span <= 1 or not job:
        return config.rdzv_port
    return config.rdzv_port + zlib.crc32(job.encode()) % config.rdzv_port_span


def _torchrun_env(container: Obj) -> bool:
    """The container sets torchrun's own env (PET_*): its image's entrypoint runs torchrun."""
    return any(isinstance(e, dict) and str(e.get("name", "")).startswith("PET_") for e in container.get("env") or [])


def mutate(pod: Obj, params: Params) -> Result:
    """Mutate a copy of `pod`. Raises InvalidPod / UnsupportedPod; never mutates the input."""
    _check_shape(pod)
    if pod["spec"].get("hostNetwork") is not True:
        return Result(pod=pod, changed=False, reason="not a hostNetwork pod")
    label = pod_labels(pod).get(names.INJECT_LABEL)
    if label == names.INJECT_DISABLED:
        # The webhook's objectSelector keeps such pods away; a request that names one anyway
        # changes nothing either (and says nothing: the pod asked for that).
        return Result(pod=pod, changed=False, reason=f"the pod opts out: label {names.INJECT_LABEL}={label}")
    os_spec = pod["spec"].get("os")
    if isinstance(os_spec, dict) and os_spec.get("name") == "windows":
        # The API server refuses privileged, capabilities, allowPrivilegeEscalation and
        # readOnlyRootFilesystem on Windows pods: what we add would fail the pod's creation.
        why = "a Windows pod (spec.os.name: windows): RDMA plumbing is for Linux pods; left unchanged"
        return Result(pod=pod, changed=False, warnings=[Warned(reasons.POD_LEFT_UNCHANGED, why)], reason=why)
    out = _writable(pod)
    warnings: list[Warned] = []
    meta = out.setdefault("metadata", {})
    ann: dict[str, str] = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    port = params.config.rdzv_port
    pinned = False
    if names.ANN_RDZV_PORT in ann:
        raw = ann[names.ANN_RDZV_PORT]
        # ASCII digits only: "²".isdigit() is true and int("²") raises.
        if raw.isascii() and raw.isdigit() and len(raw) <= 5 and 0 < int(raw) < 65536:
            port, pinned = int(raw), True
        else:
            warnings.append(
                Warned(reasons.ANNOTATION_IGNORED, f"{names.ANN_RDZV_PORT}={raw!r} is not a port; using {port}")
            )
    info = launchers.describe(out, port)
    if not pinned and info.default_port:
        derived = job_port(params.config, info.rdzv_id)
        if derived != port:
            # A launcher-default endpoint: its store binds this port on the host network, so
            # each job gets a port of its own (two jobs sharing nodes would collide on one).
            info.rdzv_endpoint = info.rdzv_endpoint[: -len(str(port))] + str(derived)
    if label != names.INJECT_LABEL_VALUE:
        why = _not_training(pod, info, ann, params.config.rdma_resource_prefixes)
        if why:
            return Result(pod=pod, changed=False, reason=why)
    _check_names(pod)
    profile, profile_reason = profiles.select(out, params.config, warnings)
    training = _training_containers(out, info, ann, warnings, params.config.rdma_resource_prefixes)
    if len(training) > params.config.max_training_containers:
        raise UnsupportedPod(
            f"{len(training)} training containers, more than the bound of {params.config.max_training_containers} "
            "(config limits.maxTrainingContainers); name the ones that train in the hostnet-rdma.io/containers annotation"
        )
    skip = frozenset(s.strip() for s in ann.get(names.ANN_SKIP, "").split(",") if s.strip())
    unknown = sorted(skip - set(STEP_NAMES))
    if unknown:
        why = f"{names.ANN_SKIP} names unknown steps: {', '.join(unknown)} (known: {', '.join(STEP_NAMES)})"
        inject.add(warnings, Warned(reasons.ANNOTATION_IGNORED, why))
    ctx = inject.Context(params, info, ann, profile, training, warnings)
    applied: list[str] = []
    skipped: dict[str, str] = {}
    for step, switch, fn in STEPS:
        if step in skip:
            skipped[step] = f"annotation {names.ANN_SKIP}"
            continue
        if not getattr(params.config, switch):
            skipped[step] = "turned off in the cluster config"
            continue
        outcome = fn(out, ctx)
        if outcome is None:
            applied.append(step)
        else:
            skipped[step] = outcome
    # What else breaks on the host network (sshd on 22, Multus, DRA NICs): said, never changed.
    carry = params.config.dra_claims_carry_nics and ctx.flag(names.ANN_ALLOCATED_NICS, True)
    hazards.check(out, ctx.warn, carry)
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    annotations[names.STATUS_ANNOTATION] = _status(params, info, profile.name, skipped, ctx.problems())
    size = _annotation_bytes(annotations)
    if size > budget.ANNOTATIONS_BYTES:
        raise UnsupportedPod(
            f"the pod's annotations would be {size} bytes with hostnet-rdma's status, over the API server's limit of "
            f"{budget.ANNOTATIONS_BYTES} for all of them; make the pod's own annotations smaller"
        )
    return Result(
        pod=out,
        changed=out != pod,
        warnings=ctx.warnings,
        info=info,
        profile=profile.name,
        profile_reason=profile_reason,
        training=[out["spec"]["containers"][i]["name"] for i in training],
        applied=applied,
        skipped=skipped,
    )
