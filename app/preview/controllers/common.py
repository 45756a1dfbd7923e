"""What the controllers' expansions share: reading a job object, building a pod, owner
references, placeholder uids, the strategic merge that runtime patches use."""

from __future__ import annotations

import copy
import re
from typing import Any

Obj = dict[str, Any]


class ExpandError(ValueError):
    """The object cannot be expanded (a missing field, an unknown runtime): a one-line reason."""


def as_dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def meta(obj: Obj) -> Obj:
    return as_dict(obj.get("metadata"))


def name_of(obj: Obj) -> str:
    m = meta(obj)
    name = str(m.get("name") or "")
    if not name and m.get("generateName"):
        # The API server completes it with 5 random characters; the preview needs one name.
        name = str(m["generateName"]) + "xxxxx"
    if not name:
        raise ExpandError(f"{obj.get('kind')} has no metadata.name")
    return name


# What the preview writes for a value the cluster makes when the object is created (a uid, a
# group key): `<uid of Job x>`. Shown in `mutate -f`, but known only at run time to a command.
_STAND_IN = re.compile(r"<[a-z][a-z ]* of [^<>]*>")


def is_stand_in(value: str) -> bool:
    """Whether a value holds one of the preview's stand-ins (see _STAND_IN)."""
    return "<" in value and _STAND_IN.search(value) is not None


def uid_of(obj: Obj) -> str:
    """The object's uid: from the cluster when it has one, else a stand-in the preview shows."""
    return str(meta(obj).get("uid") or f"<uid of {obj.get('kind')} {name_of(obj)}>")


def owner(obj: Obj, api_version: str | None = None, kind: str | None = None) -> Obj:
    return {"apiVersion": api_version or str(obj.get("apiVersion")), "kind": kind or str(obj.get("kind")),
            "name": name_of(obj), "uid": uid_of(obj), "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def path(obj: Obj, *keys: str, kind: str = "") -> Obj:
    """obj[k1][k2]... as a dict, or ExpandError naming the missing field."""
    cur: Any = obj
    for i, k in enumerate(keys):
        cur = cur.get(k) if isinstance(cur, dict) else None
        if not isinstance(cur, dict):
            raise ExpandError(f"{kind or obj.get('kind')} {name_of(obj)}: no {'.'.join(keys[: i + 1])}")
    return dict(cur)


# The most of anything the preview counts out (pods of a task, replicas): a file is expanded in
# memory, and `replicas: 100000000` would take the CLI's; no job a preview helps has more.
MAX_COUNT = 10_000


_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_]|__[A-Z0-9_]+__|\{\{|PLACEHOLDER")


def integer(value: Any, default: int, what: str, limit: int = MAX_COUNT) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        hint = ""
        if isinstance(value, str) and _PLACEHOLDER.search(value):  # `$N`, `${N}`, `__N__`, `{{ n }}`, `PLACEHOLDER_N`
            hint = (
                ": a template's placeholder? Fill the template in (envsubst, sed, helm template) and preview the result"
            )
        raise ExpandError(f"{what} is not a count: {value!r}{hint}")
    if value > limit:
        raise ExpandError(f"{what} is {value}: over the {limit} the preview expands")
    return value


def pod_count(n: int, what: str) -> int:
    """The pods an object (or a file) expands to, a product or sum of counts: bounded like each
    count, checked before the pods are made (LWS groups x size would be 10^8 otherwise)."""
    if n > MAX_COUNT:
        raise ExpandError(f"{what} expands to {n} pods: over the {MAX_COUNT} the preview expands")
    return n


def template_of(obj: Obj, what: str) -> Obj:
    """spec.template of a workload, or a one-line reason why there is none."""
    template = as_dict(obj.get("spec")).get("template")
    if not isinstance(template, dict):
        raise ExpandError(f"{what}: no spec.template")
    return template


def pod_from_template(
    template: Obj,
    namespace: str,
    *,
    name: str = "",
    generate_name: str = "",
    labels: Obj | None = None,
    annotations: Obj | None = None,
    owners: list[Obj] | None = None,
) -> Obj:
    """A pod of a PodTemplateSpec: its metadata merged under the controller's, its spec copied."""
    tmeta = as_dict(template.get("metadata"))
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise ExpandError(f"pod template of {name or generate_name} has no spec")
    m: Obj = {"name": name} if name else {"generateName": generate_name}
    m["namespace"] = namespace
    merged_labels = {**(tmeta.get("labels") or {}), **(labels or {})}
    merged_annotations = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    if merged_labels:
        m["labels"] = {str(k): str(v) for k, v in merged_labels.items()}
    if merged_annotations:
        m["annotations"] = {str(k): str(v) for k, v in merged_annotations.items()}
    if owners:
        m["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": copy.deepcopy(spec)}


def containers(pod: Obj, *keys: str) -> list[Obj]:
    spec = pod["spec"]
    out: list[Obj] = []
    for key in keys or ("containers",):
        out += [c for c in spec.get(key) or [] if isinstance(c, dict)]
    return out


def add_env(container: Obj, *entries: Obj) -> None:
    """Append env entries the container does not declare yet (controllers never override)."""
    env = container.setdefault("env", [])
    have = {e.get("name") for e in env if isinstance(e, dict)}
    for e in entries:
        if e["name"] not in have:
            env.append(e)
            have.add(e["name"])


def literal(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def field_ref(name: str, path_: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path_}}}


# Strategic merge keys of the lists runtime patches touch (Kubernetes' own for these types).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "replicatedJobs": "name", "volumeMounts": "mountPath", "ports": "containerPort"}  # fmt: skip


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """A strategic merge patch as the API machinery applies it to these types: maps merged,
    lists of objects merged by their merge key, everything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base.get(k), v, k) if k in base else copy.deepcopy(v)
        return out
    merge_key = MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(x) for x in base]
        for item in patch:
            at = next((i for i, x in enumerate(out_list) if isinstance(x, dict) and isinstance(item, dict)
                       and x.get(merge_key) == item.get(merge_key)), None)  # fmt: skip
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)
