"""AppWrapper (workload.codeflare.dev/v1beta2, read from the AppWrapper controller's
createComponent): each component's template is created as it is, in the AppWrapper's
namespace, owned by the AppWrapper and labelled `workload.codeflare.dev/appwrapper: <name>`
(the object and each of its pod templates); its own controller then makes the pods. So its
pods are the component's expansion, with that label."""

from __future__ import annotations

import copy
from collections.abc import Callable

from app.preview.controllers.common import ExpandError, Obj, as_dict, meta, name_of, owner, pod_count

GROUP = "workload.codeflare.dev"
LABEL = f"{GROUP}/appwrapper"


def components(obj: Obj) -> list[Obj]:
    """The objects the AppWrapper controller creates, ready for their own expansion."""
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    items = as_dict(obj.get("spec")).get("components")
    if not isinstance(items, list) or not items:
        raise ExpandError(f"AppWrapper {name}: no spec.components")
    out: list[Obj] = []
    for i, c in enumerate(items):
        template = as_dict(c).get("template") if isinstance(c, dict) else None
        if not isinstance(template, dict) or not template.get("kind"):
            raise ExpandError(f"AppWrapper {name}: components[{i}] has no template with a kind")
        child = copy.deepcopy(template)
        m = child.setdefault("metadata", {})
        if not isinstance(m, dict):
            raise ExpandError(f"AppWrapper {name}: components[{i}].template.metadata is not an object")
        if m.get("namespace") not in (None, "", ns):
            raise ExpandError(f"AppWrapper {name}: components[{i}] names namespace {m['namespace']}, not {ns}")
        m["namespace"] = ns
        m["labels"] = {LABEL: name, **as_dict(m.get("labels"))}
        m["ownerReferences"] = [owner(obj, "workload.codeflare.dev/v1beta2", "AppWrapper")]
        _label_pod_templates(child, name)
        out.append(child)
    return out


def _label_pod_templates(value: object, name: str, depth: int = 0) -> None:
    """The label on every pod template of the component (the podSets' paths, which the
    AppWrapper's own webhook infers for the kinds it knows when a file gives none)."""
    if depth > 12:
        return
    if isinstance(value, dict):
        spec = value.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            md = value.setdefault("metadata", {})
            if isinstance(md, dict):
                md["labels"] = {LABEL: name, **as_dict(md.get("labels"))}
            return
        for v in value.values():
            _label_pod_templates(v, name, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _label_pod_templates(v, name, depth + 1)


def pods(obj: Obj, expand_one: Callable[[Obj], list[Obj] | None]) -> list[Obj]:
    """Every pod of every component; ExpandError naming a component `expand_one` cannot expand
    (it returns None for a kind it does not know)."""
    out: list[Obj] = []
    for child in components(obj):
        made = expand_one(child)
        if made is None:
            raise ExpandError(f"AppWrapper {name_of(obj)}: cannot expand its component of kind {child.get('kind')}")
        out += made
        pod_count(len(out), f"AppWrapper {name_of(obj)}")
    return out
