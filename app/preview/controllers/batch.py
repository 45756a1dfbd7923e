"""Kubernetes' own controllers: a Pod as it is, a Job's pods (Indexed: `<job>-<i>-` with the
hostname `<job>-<i>` and the completion index), a StatefulSet's (`<sts>-<i>`, hostname the pod's
name, subdomain its serviceName), a Deployment's (through its ReplicaSet `<deploy>-<hash>`,
pods `<deploy>-<hash>-<random>`), a ReplicaSet's and a DaemonSet's (one pod per node: one shown).
The last three give their pods no stable DNS name: the preview shows what the webhook then
does (the plumbing, and a warning that torchrun cannot be wrapped)."""

from __future__ import annotations

import copy

from app.preview.controllers.common import (
    ExpandError,
    Obj,
    add_env,
    as_dict,
    containers,
    field_ref,
    integer,
    meta,
    name_of,
    owner,
    pod_from_template,
    template_of,
    uid_of,
)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def pod(obj: Obj) -> list[Obj]:
    if obj.get("apiVersion", "v1") != "v1":
        raise ExpandError(f"a Pod of apiVersion {obj.get('apiVersion')}: expected v1")
    return [copy.deepcopy(obj)]


def job(obj: Obj, extra_labels: Obj | None = None, extra_annotations: Obj | None = None) -> list[Obj]:
    """The pods a Job has at once: min(parallelism, completions), default 1. The API server adds
    the controller's labels to the template when the Job is created (no manualSelector)."""
    name, ns, uid = name_of(obj), str(meta(obj).get("namespace") or "default"), uid_of(obj)
    spec = as_dict(obj.get("spec"))
    template = spec.get("template")
    if not isinstance(template, dict):
        raise ExpandError(f"Job {name}: no spec.template")
    parallelism = integer(spec.get("parallelism"), 1, f"Job {name}: spec.parallelism")
    completions = integer(spec.get("completions"), parallelism, f"Job {name}: spec.completions")
    indexed = spec.get("completionMode") == "Indexed"
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name, **(extra_labels or {})}  # fmt: skip
    pods: list[Obj] = []
    for i in range(min(parallelism, completions)):
        index = {COMPLETION_INDEX: str(i)} if indexed else {}
        p = pod_from_template(template, ns, generate_name=f"{name}-{i}-" if indexed else f"{name}-",
                              labels={**labels, **index}, annotations={**(extra_annotations or {}), **index},
                              owners=[owner(obj, "batch/v1", "Job")])  # fmt: skip
        if indexed:
            # The Job controller names the pod's host after its index (with a subdomain of the
            # user's it gets a DNS name), and hands every container its index.
            p["spec"]["hostname"] = f"{name}-{i}"
            for c in containers(p, "initContainers", "containers"):
                add_env(c, field_ref("JOB_COMPLETION_INDEX", f"metadata.labels['{COMPLETION_INDEX}']"))
        pods.append(p)
    return pods


def statefulset(obj: Obj, extra_labels: Obj | None = None, start: int = 0) -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    spec = as_dict(obj.get("spec"))
    template = template_of(obj, f"StatefulSet {name}")
    replicas = integer(spec.get("replicas"), 1, f"StatefulSet {name}: spec.replicas")
    pods: list[Obj] = []
    for i in range(start, start + replicas):
        pod_name = f"{name}-{i}"
        labels = {**(extra_labels or {}), "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(i),
                  "controller-revision-hash": f"{name}-<revision>"}  # fmt: skip
        p = pod_from_template(template, ns, name=pod_name, labels=labels, owners=[owner(obj, "apps/v1", "StatefulSet")])
        p["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            p["spec"]["subdomain"] = str(spec["serviceName"])
        pods.append(p)
    return pods


# The pod-template-hash the Deployment controller computes from the template (FNV of its
# serialisation): not reproduced, a stand-in that reads as one.
TEMPLATE_HASH = "<hash>"


def replicaset(obj: Obj, owner_ref: Obj | None = None, prefix: str = "") -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    spec = as_dict(obj.get("spec"))
    template = template_of(obj, f"{obj.get('kind')} {name}")
    replicas = integer(spec.get("replicas"), 1, f"{obj.get('kind')} {name}: spec.replicas")
    labels = {"pod-template-hash": TEMPLATE_HASH} if owner_ref else {}
    made = owner_ref or owner(obj, "apps/v1", "ReplicaSet")
    return [pod_from_template(template, ns, generate_name=f"{prefix or name}-", labels=labels, owners=[made])
            for _ in range(replicas)]  # fmt: skip


def deployment(obj: Obj) -> list[Obj]:
    rs = f"{name_of(obj)}-{TEMPLATE_HASH}"
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": f"<uid of ReplicaSet {rs}>",
           "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    return replicaset(obj, ref, rs)


def daemonset(obj: Obj) -> list[Obj]:
    """One of its pods (it makes one per node it selects, each pinned there by node affinity)."""
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    template = template_of(obj, f"DaemonSet {name}")
    labels = {
        "controller-revision-hash": "<revision>",
        "pod-template-generation": str(meta(obj).get("generation") or 1),
    }
    return [pod_from_template(template, ns, generate_name=f"{name}-", labels=labels,
                              owners=[owner(obj, "apps/v1", "DaemonSet")])]  # fmt: skip
