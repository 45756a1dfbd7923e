"""Which nodes can take one pod of an e2e job, before any job is submitted: schedulable, Ready,
matching the node selector, every NoSchedule/NoExecute taint tolerated, and (with GPUs) the GPU
resource allocatable and free (what running pods request subtracted). Pure: nodes and pods in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.e2e.jobs import Params

TERMINAL = ("Succeeded", "Failed")


@dataclass
class Fit:
    fits: list[str] = field(default_factory=list)
    why_not: dict[str, str] = field(default_factory=dict)  # node -> reason

    def jobs_at_once(self, nodes_per_job: int) -> int:
        return len(self.fits) // max(1, nodes_per_job)


def _count(value: Any) -> int:
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    if text.endswith("k") and text[:-1].isdigit():
        return int(text[:-1]) * 1000
    return 0


def requested(pod: dict[str, Any], resource: str) -> int:
    """What a pod holds of an extended resource: the larger of its containers' sum and any one
    init container (the scheduler's rule); requests, else limits (extended ones are equal)."""
    spec = pod.get("spec") or {}

    def one(c: dict[str, Any]) -> int:
        res = c.get("resources") or {}
        return _count((res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource, 0)))

    regular = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0)
    return max(regular, init)


def check(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], params: Params) -> Fit:
    fit = Fit()
    used: dict[str, int] = {}
    if params.gpus_per_node:
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in TERMINAL:
                used[node] = used.get(node, 0) + requested(p, params.gpu_resource)
    tolerated = set(params.tolerations)
    for n in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        name = str(n["metadata"]["name"])
        spec, status = n.get("spec") or {}, n.get("status") or {}
        labels = n["metadata"].get("labels") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")
                  and t.get("key") not in tolerated]  # fmt: skip
        wrong = {k: v for k, v in params.node_selector.items() if labels.get(k) != v}
        if spec.get("unschedulable"):
            fit.why_not[name] = "cordoned (unschedulable)"
        elif not ready:
            fit.why_not[name] = "not Ready"
        elif wrong:
            fit.why_not[name] = "not selected: " + ", ".join(f"{k}={labels.get(k, '(none)')}" for k in wrong)
        elif taints:
            fit.why_not[name] = (
                "taint " + ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in taints) + " not tolerated"
            )
        elif params.gpus_per_node:
            allocatable = _count((status.get("allocatable") or {}).get(params.gpu_resource, 0))
            free = allocatable - used.get(name, 0)
            if free < params.gpus_per_node:
                fit.why_not[name] = (
                    f"{params.gpu_resource}: {free} free of {allocatable} allocatable, {params.gpus_per_node} needed"
                )
            else:
                fit.fits.append(name)
        else:
            fit.fits.append(name)
    return fit
