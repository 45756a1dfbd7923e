"""JobSet (v0.12.0): one Indexed Job per replicated job and replica, `<js>-<rjob>-<j>`, its pods
`<js>-<rjob>-<j>-<i>` under the subdomain `network.subdomain` or the JobSet's name, with the
JobSet's labels and annotations. Kubeflow Trainer (v2.3.0): a TrainJob is its runtime's JobSet
(runtimePatches merged in), named like the TrainJob, the `node` job given the trainer's
numNodes, image, command, resources and torchrun's PET_* env (static rendezvous on node 0)."""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from typing import Any

from app.preview.controllers import batch
from app.preview.controllers.common import (
    ExpandError,
    Obj,
    add_env,
    as_dict,
    field_ref,
    integer,
    literal,
    meta,
    name_of,
    pod_count,
    strategic_merge,
    uid_of,
)

J = "jobset.sigs.k8s.io/"
TRAINER_PORT = 29500  # Trainer's MASTER_PORT, added as a container port (a host port under hostNetwork)
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def jobset(obj: Obj) -> list[Obj]:
    name, ns, uid = name_of(obj), str(meta(obj).get("namespace") or "default"), uid_of(obj)
    spec = as_dict(obj.get("spec"))
    rjobs = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    if not rjobs:
        raise ExpandError(f"JobSet {name}: no spec.replicatedJobs")
    network = as_dict(spec.get("network"))
    dns = network.get("enableDNSHostnames") is not False
    subdomain = str(network.get("subdomain") or name)
    counts = [integer(r.get("replicas"), 1, f"JobSet {name}: replicatedJobs {r.get('name')}.replicas") for r in rjobs]
    total = sum(counts)
    pods: list[Obj] = []
    for r, replicas in zip(rjobs, counts, strict=True):
        before = sum(counts[: rjobs.index(r)])
        template = as_dict(r.get("template"))
        for j in range(replicas):
            job_name = f"{name}-{r.get('name')}-{j}"
            shared = {
                f"{J}jobset-name": name, f"{J}replicatedjob-name": str(r.get("name")),
                f"{J}replicatedjob-replicas": str(replicas), f"{J}job-index": str(j), f"{J}jobset-uid": uid,
                f"{J}job-key": hashlib.sha1(f"{ns}/{job_name}".encode()).hexdigest(), f"{J}restart-attempt": "0",
                f"{J}global-replicas": str(total), f"{J}group-name": "default", f"{J}group-replicas": str(total),
                f"{J}job-global-index": str(before + j), f"{J}job-group-index": str(before + j),
            }  # fmt: skip
            job_spec = copy.deepcopy(template.get("spec") or {})
            job_spec.setdefault("completionMode", "Indexed")  # JobSet's webhook default
            pod_template = job_spec.setdefault("template", {})
            if dns:
                pod_template.setdefault("spec", {}).setdefault("subdomain", subdomain)
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": job_name, "namespace": ns, "uid": f"<uid of Job {job_name}>"}, "spec": job_spec}  # fmt: skip
            pods += batch.job(job, {**shared, f"{J}priority": "0"}, shared)
            pod_count(len(pods), f"JobSet {name}")  # replicas x parallelism: checked as it grows
    return pods


def runtime_for(
    trainjob: Obj, runtimes: dict[tuple[str, str], Obj], runtime_of: Callable[[str, str, str], Obj | None] | None
) -> Obj:
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    name = str(ref.get("name") or "")
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    if not name:
        raise ExpandError(f"TrainJob {name_of(trainjob)}: no spec.runtimeRef.name")
    found = runtimes.get((kind, name))
    if found is None and runtime_of is not None:
        found = runtime_of(kind, str(meta(trainjob).get("namespace") or "default"), name)
    if found is None:
        # Two lines: the names are the user's, and long (an error line stays readable in a terminal).
        where = "in the files or the cluster" if runtime_of is not None else "in the files"
        fix = "" if runtime_of is not None else ": add its file (-f runtime.yaml -f job.yaml) or use --from-cluster"
        raise ExpandError(f"TrainJob {name_of(trainjob)}: its runtime is not {where}\n  {kind} {name}{fix}")
    return found


def _cores(value: Any) -> int:
    """A CPU quantity as Kubernetes' Quantity.Value() gives it: whole cores, rounded up."""
    text = str(value or "0").strip()
    try:
        return math.ceil(int(text[:-1]) / 1000) if text.endswith("m") else math.ceil(float(text))
    except (ValueError, OverflowError):
        return 0


def _nproc(trainer: Obj, js_spec: Obj) -> str:
    """PET_NPROC_PER_NODE as the torch plugin of Trainer v2.3 sets it: the TrainJob's
    numProcPerNode, else `auto` when a node asks for GPUs (any resource named *gpu*), else its
    CPU request (or limit) in whole cores, at least 1. A runtime's torch policy has no say."""
    if trainer.get("numProcPerNode") is not None:
        return str(trainer["numProcPerNode"])
    res = trainer.get("resourcesPerNode")
    if not isinstance(res, dict):
        res = {}
        for r in js_spec.get("replicatedJobs") or []:
            ancestor = ((r.get("template") or {}).get("metadata") or {}).get("labels", {}).get(ANCESTOR)
            if r.get("name") == "node" or ancestor == "trainer":
                pod = (((r.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
                res = next(
                    (c.get("resources") or {} for c in pod.get("containers") or [] if c.get("name") == "node"), res
                )
    requests, limits = as_dict(res.get("requests")), as_dict(res.get("limits"))
    for group in (requests, limits):
        for key, value in group.items():
            if "gpu" in str(key).lower():
                if _cores(value) > 0:
                    return "auto"
                break
    return str(max(1, _cores(requests.get("cpu")) or _cores(limits.get("cpu"))))


def trainjob(
    obj: Obj, runtimes: dict[tuple[str, str], Obj], runtime_of: Callable[[str, str, str], Obj | None] | None
) -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    spec = as_dict(obj.get("spec"))
    runtime_spec: Any = copy.deepcopy(runtime_for(obj, runtimes, runtime_of).get("spec") or {})
    for patch in spec.get("runtimePatches") or []:
        if isinstance(patch, dict) and isinstance(patch.get("trainingRuntimeSpec"), dict):
            runtime_spec = strategic_merge(runtime_spec, patch["trainingRuntimeSpec"])
    trainer = as_dict(spec.get("trainer"))
    policy = runtime_spec.get("mlPolicy") or {}
    nodes = integer(trainer.get("numNodes", policy.get("numNodes")), 1, f"TrainJob {name}: numNodes")
    js_spec = copy.deepcopy((runtime_spec.get("template") or {}).get("spec") or {})
    nproc = _nproc(trainer, js_spec)
    subdomain = str((js_spec.get("network") or {}).get("subdomain") or name)
    for r in js_spec.get("replicatedJobs") or []:
        ancestor = ((r.get("template") or {}).get("metadata") or {}).get("labels", {}).get(ANCESTOR)
        if r.get("name") != "node" and ancestor != "trainer":
            continue
        job_spec = r.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = nodes
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        for c in pod_spec.get("containers") or []:
            if c.get("name") != "node":
                continue
            for key in ("image", "command", "args"):
                if trainer.get(key):
                    c[key] = copy.deepcopy(trainer[key])
            if trainer.get("resourcesPerNode"):
                c["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
            add_env(c, *copy.deepcopy(trainer.get("env") or []))
            add_env(c, literal("PET_NNODES", str(nodes)), literal("PET_NPROC_PER_NODE", nproc),
                    field_ref("PET_NODE_RANK", f"metadata.annotations['{batch.COMPLETION_INDEX}']"),
                    literal("PET_MASTER_ADDR", f"{name}-{r.get('name')}-0-0.{subdomain}"),
                    literal("PET_MASTER_PORT", str(TRAINER_PORT)))  # fmt: skip
            port: Obj = {"containerPort": TRAINER_PORT, "protocol": "TCP"}
            if pod_spec.get("hostNetwork") is True:
                port["hostPort"] = TRAINER_PORT  # the API server's default for host-network pods
            if not any(p.get("containerPort") == TRAINER_PORT for p in c.get("ports") or []):
                c.setdefault("ports", []).append(port)
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": name, "namespace": ns, "uid": f"<uid of JobSet {name}>"},  # not the TrainJob's
          "spec": js_spec}  # fmt: skip
    return jobset(js)
