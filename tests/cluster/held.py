"""The preview's pods (app.preview.controllers) held to the pods a real controller created: for a job
object as the API server stored it, every field the webhook reads must match (names, hostname
and subdomain, labels and annotations, owner, each container's env and ports), apart from what
the webhook itself added to the real pods and values only the cluster knows (hashes, random
name suffixes)."""

from __future__ import annotations

import re
from typing import Any

from app.core.names import INIT_CONTAINER
from app.core.wrap import STORE_PORT_NAME
from app.preview.controllers import expand

Obj = dict[str, Any]
# Added to the real pods by others than the controller: our webhook, Kueue, the API server.
OURS = ("hostnet-rdma.io/",)
OTHERS = ("kueue.x-k8s.io/", "kubectl.kubernetes.io/", "scheduling.x-k8s.io/")


def _foreign(key: str) -> bool:
    return key.startswith(OURS + OTHERS)


def _env_names(c: Obj) -> list[str]:
    return [e["name"] for e in c.get("env") or []]


def _defaulted(value: Any) -> Any:
    """A pod's env value as the API server stores it: a fieldRef's apiVersion defaults to v1
    (a custom resource's embedded template is stored without it)."""
    if isinstance(value, dict) and isinstance(value.get("fieldRef"), dict):
        return {**value, "fieldRef": {"apiVersion": "v1", **value["fieldRef"]}}
    return value


def matches(expected: str, real: str) -> bool:
    """A name of the preview's against the real one: a stand-in (`<hash>`, `<uid of …>`) stands
    for what only the cluster knows (a Deployment's pod-template-hash)."""
    if "<" not in expected:
        return expected == real
    pattern = "".join(re.escape(part) if i % 2 == 0 else "[a-z0-9-]+"
                      for i, part in enumerate(re.split(r"<([^>]*)>", expected)))  # fmt: skip
    return re.fullmatch(pattern, real) is not None


def differences(expected: Obj, real: Obj) -> list[str]:
    out: list[str] = []
    em, rm = expected["metadata"], real["metadata"]
    if em.get("name"):
        if em["name"] != rm.get("name"):
            out.append(f"name {em['name']} != {rm.get('name')}")
    elif not matches(str(em.get("generateName")), str(rm.get("generateName"))):
        out.append(f"generateName {em.get('generateName')} != {rm.get('generateName')}")
    for part in ("labels", "annotations"):
        want = {k: v for k, v in (em.get(part) or {}).items() if not _foreign(k)}
        have = {k: v for k, v in (rm.get(part) or {}).items() if not _foreign(k)}
        for k in sorted(set(want) | set(have)):
            if k not in have:
                out.append(f"{part}: {k} missing on the real pod")
            elif k not in want:
                out.append(f"{part}: {k}={have[k]} not in the preview")
            elif not str(want[k]).startswith("<") and "<" not in str(want[k]) and want[k] != have[k]:
                out.append(f"{part}: {k}={want[k]!r}, the real pod has {have[k]!r}")
    owners = [(o["kind"], o["name"]) for o in em.get("ownerReferences") or []]
    real_owners = [(o["kind"], o["name"]) for o in rm.get("ownerReferences") or []]
    if len(owners) != len(real_owners) or not all(k == rk and matches(n, rn) for (k, n), (rk, rn)
                                                  in zip(owners, real_owners, strict=False)):  # fmt: skip
        out.append(f"owners {owners} != {real_owners}")
    for key in ("hostname", "subdomain"):
        if expected["spec"].get(key) != real["spec"].get(key):
            out.append(f"spec.{key} {expected['spec'].get(key)} != {real['spec'].get(key)}")
    # The controller's init containers (the Training Operator's wait for master-0), not ours.
    want_init = [c["name"] for c in expected["spec"].get("initContainers") or []]
    have_init = [c["name"] for c in real["spec"].get("initContainers") or [] if c["name"] != INIT_CONTAINER]
    if want_init != have_init:
        out.append(f"initContainers {want_init} != {have_init}")
    real_containers = {c["name"]: c for c in real["spec"].get("containers") or []}
    for c in expected["spec"].get("containers") or []:
        r = real_containers.get(c["name"])
        if r is None:
            out.append(f"container {c['name']} missing")
            continue
        # The webhook adds profile env (NCCL_*) and never removes: the real env less those.
        added = [n for n in _env_names(r) if n not in _env_names(c) and n.startswith(("NCCL_", "HOSTNET_RDMA_"))]
        have = [n for n in _env_names(r) if n not in added]
        # Volcano runs its plugins in Go map order: the order of what they add varies by pod.
        plugins = "volcano.sh/job-name" in (em.get("annotations") or {})
        if (sorted(have) if plugins else have) != (sorted(_env_names(c)) if plugins else _env_names(c)):
            out.append(f"container {c['name']} env {_env_names(c)} != {have}")
        values = {e["name"]: e.get("value", e.get("valueFrom")) for e in r.get("env") or []}
        for e in c.get("env") or []:
            want = _defaulted(e.get("value", e.get("valueFrom")))
            if "<" not in str(want) and values.get(e["name"]) != want:
                out.append(
                    f"container {c['name']} env {e['name']}={want!r}, the real pod has {values.get(e['name'])!r}"
                )
        ports = sorted(p["containerPort"] for p in c.get("ports") or [])
        # The store's port is the webhook's, on the pod that hosts it (not the controller's).
        real_ports = [p["containerPort"] for p in r.get("ports") or [] if p.get("name") != STORE_PORT_NAME]
        if ports != sorted(real_ports):
            out.append(f"container {c['name']} ports {ports} != {real_ports}")
    return out


def _key(pod: Obj) -> str:
    m = pod["metadata"]
    return str(m.get("name") or m.get("generateName"))


def held_to(objects: list[Obj], real_pods: list[Obj], runtimes: list[Obj] | None = None) -> list[str]:
    """Every difference between the preview of `objects` (as stored: with their uids) and the
    real pods, matched by name (or generateName); [] when they agree."""
    namespace = objects[0]["metadata"].get("namespace", "default")
    known = {(str(r.get("kind")), str(r["metadata"].get("namespace") or ""), str(r["metadata"]["name"])): r
             for r in runtimes or []}  # fmt: skip

    def runtime_of(kind: str, ns: str, name: str) -> Obj | None:
        # Found as `explain --from-cluster` finds them: looked up by the TrainJob's runtimeRef,
        # never previewed themselves (a runtime no TrainJob of `objects` uses would be).
        return known.get((kind, "" if kind == "ClusterTrainingRuntime" else ns, name))

    expected = [p for ex in expand(objects, namespace, runtime_of) for p in ex.pods]
    by_key: dict[str, Obj] = {}
    for p in real_pods:
        by_key.setdefault(str(p["metadata"].get("generateName") or p["metadata"]["name"]), p)
        by_key.setdefault(p["metadata"]["name"], p)
    out: list[str] = []
    for pod in expected:
        real = by_key.get(_key(pod)) or next((p for k, p in by_key.items() if matches(_key(pod), k)), None)
        if real is None:
            out.append(f"{_key(pod)}: no such real pod (have {sorted(by_key)})")
            continue
        out += [f"{_key(pod)}: {d}" for d in differences(pod, real)]
    return out
