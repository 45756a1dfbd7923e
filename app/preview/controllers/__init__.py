"""The pods each launcher's controller creates for a job file, at the versions the cluster tier
pins (scripts/testenv/launchers.pins): what `hostnet-rdma mutate -f` and `explain -f` show, so
a user can preview the files they apply, not pods they would have to write by hand.

One home for a controller's pod shape (names, hostname and subdomain, labels, annotations, owner,
the env it adds): the cluster tier holds each expansion to the pods the real controller created.
Pure: objects in, pods out. Fields the webhook never reads (tolerations, the service-account
token volume, defaults the API server fills in) are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.preview.controllers import appwrapper, batch, kubeflow, lws, mpi, trainer, volcano
from app.preview.controllers.common import ExpandError, Obj, as_dict, pod_count

# (apiVersion group, kind) -> the controller's expansion. A TrainJob's needs its runtime.
EXPANDERS: dict[tuple[str, str], Callable[[Obj], list[Obj]]] = {
    ("", "Pod"): batch.pod,
    ("batch", "Job"): batch.job,
    ("apps", "StatefulSet"): batch.statefulset,
    ("apps", "Deployment"): batch.deployment,
    ("apps", "ReplicaSet"): batch.replicaset,
    ("apps", "DaemonSet"): batch.daemonset,
    ("jobset.x-k8s.io", "JobSet"): trainer.jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): lws.leaderworkerset,
    ("kubeflow.org", "PyTorchJob"): kubeflow.pytorchjob,
    ("kubeflow.org", "MPIJob"): mpi.mpijob,
    ("batch.volcano.sh", "Job"): volcano.job,
}
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
TRAINJOB = ("trainer.kubeflow.org", "TrainJob")  # expanded with its runtime (trainer.trainjob)
# Kinds whose controllers make workloads or pods that the preview does not expand, with what a
# user can do instead. Named by kind, not by shape: an Argo template's `container:` is no pod
# spec, and a `resource:` template holds its workload as a string.
HOLDERS: dict[tuple[str, str], str] = {
    ("argoproj.io", "Workflow"): "its steps' pods and the workloads its resource templates create",
    ("argoproj.io", "WorkflowTemplate"): "the pods and workloads of the Workflows that use it",
    ("argoproj.io", "ClusterWorkflowTemplate"): "the pods and workloads of the Workflows that use it",
    ("argoproj.io", "CronWorkflow"): "the pods and workloads of the Workflows it starts",
    ("batch", "CronJob"): (
        "the Jobs it starts (preview one with `kubectl create job NAME --from=cronjob/CRONJOB --dry-run=server -o yaml`)"
    ),
    ("ray.io", "RayJob"): "its Ray cluster's head and worker pods and its submitter",
    ("ray.io", "RayCluster"): "its head and worker pods",
    ("ray.io", "RayService"): "its Ray cluster's head and worker pods",
    ("pipelines.kubeflow.org", "Pipeline"): "the pods of its runs",
    ("pipelines.kubeflow.org", "PipelineVersion"): "the pods of its runs",
    ("kubeflow.org", "ScheduledWorkflow"): "the pods of the pipeline runs it starts",
}
SUPPORTED = (
    "Pod, Job, StatefulSet, Deployment, ReplicaSet, DaemonSet (one pod shown), JobSet, LeaderWorkerSet, PyTorchJob, "
    "MPIJob (v2beta1), TrainJob, Volcano Job, AppWrapper (of these)"
)


@dataclass
class Expansion:
    """One object of the file and the pods its controller creates (empty for a runtime)."""

    source: str  # `Kind/name`
    pods: list[Obj] = field(default_factory=list)
    note: str = ""  # why it has no pods
    # A workload (it holds a pod template) that the preview cannot expand: the user's file is
    # not previewed whole, and the commands say so with their own exit code.
    unexpanded: bool = False
    # ConfigMaps the controller makes for the pods (name -> data): what their env reads at run time.
    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)


def group_of(obj: Obj) -> str:
    api = str(obj.get("apiVersion") or "")
    return api.split("/")[0] if "/" in api else ""


def expand(
    objects: Sequence[Obj],
    namespace: str,
    runtime_of: Callable[[str, str, str], Obj | None] | None = None,
) -> list[Expansion]:
    """Every object of a file, expanded. `namespace`: for objects that name none. `runtime_of(kind,
    namespace, name)` finds a TrainJob's runtime that the file does not hold (from the cluster);
    None: only the file. Raises ExpandError with a one-line reason for what cannot be expanded."""
    runtimes = {(str(o.get("kind")), str((o.get("metadata") or {}).get("name"))): o for o in objects
                if isinstance(o, dict) and o.get("kind") in RUNTIME_KINDS}  # fmt: skip
    out: list[Expansion] = []
    for obj in objects:
        pod_count(sum(len(ex.pods) for ex in out), "the file")  # all its objects together
        if not isinstance(obj, dict):
            raise ExpandError("the file holds something that is not an object")
        kind = str(obj.get("kind") or "")
        meta = as_dict(obj.get("metadata"))
        name = str(meta.get("name") or meta.get("generateName") or "")
        obj = {**obj, "metadata": {**meta, "namespace": meta.get("namespace") or namespace}}
        if kind in RUNTIME_KINDS:
            out.append(_runtime(obj, kind, name, objects, runtimes))
            continue
        if not kind and "pipelineInfo" in obj and "deploymentSpec" in obj:
            out.append(Expansion("Kubeflow Pipelines pipeline spec", unexpanded=True,
                                 note="its components' pods are made when a run starts: not previewed"))  # fmt: skip
            continue
        if not kind:
            raise ExpandError("an object without kind")
        if (group_of(obj), kind) in HOLDERS:
            what = HOLDERS[(group_of(obj), kind)]
            out.append(Expansion(f"{kind}/{name}", unexpanded=True,
                                 note=f"{what}: not previewed (the preview expands {SUPPORTED})"))  # fmt: skip
            continue

        def one(o: Obj) -> list[Obj] | None:
            """o's pods; [] for an object that is no workload, None for one we cannot expand."""
            if (group_of(o), str(o.get("kind"))) == TRAINJOB:
                return trainer.trainjob(o, runtimes, runtime_of)
            expander = EXPANDERS.get((group_of(o), str(o.get("kind"))))
            if expander is mpi.mpijob and o.get("apiVersion") != mpi.API_VERSION:  # the Training Operator's v1
                return None
            if expander is not None:
                return expander(o)
            return None if _holds_pod_template(o) else []

        if (group_of(obj), kind) == (appwrapper.GROUP, "AppWrapper"):
            made_cms = {k: v for c in appwrapper.components(obj) if c.get("kind") == "Job" and group_of(c) == "batch.volcano.sh"
                        for k, v in volcano.configmaps(c).items()}  # fmt: skip
            out.append(Expansion(f"{kind}/{name}", appwrapper.pods(obj, one), configmaps=made_cms))
            continue
        pods = one(obj)
        if pods is None:  # an MPIJob v1, a Ray cluster...: a workload whose pods we cannot show
            out.append(Expansion(f"{kind}/{name}", unexpanded=True,
                                 note=f"holds pod templates, but the preview cannot expand kind {kind} yet (it can: {SUPPORTED})"))  # fmt: skip
        elif not pods and not _holds_pod_template(obj):  # a Namespace, ConfigMap, Service, queue: no pods
            out.append(Expansion(f"{kind}/{name}", note="not a workload: no pods"))
        else:
            made = volcano.configmaps(obj) if (group_of(obj), kind) == ("batch.volcano.sh", "Job") else {}
            out.append(Expansion(f"{kind}/{name}", pods, configmaps=made))
    pod_count(sum(len(ex.pods) for ex in out), "the file")
    return out


def _runtime(obj: Obj, kind: str, name: str, objects: Sequence[Obj], runtimes: dict[tuple[str, str], Obj]) -> Expansion:
    """A (Cluster)TrainingRuntime has no pods of its own. One that no TrainJob of the file names
    is previewed as a TrainJob named after it, of the runtime's own defaults, would be."""
    users = [
        str((o.get("metadata") or {}).get("name"))
        for o in objects
        if isinstance(o, dict) and (group_of(o), o.get("kind")) == ("trainer.kubeflow.org", "TrainJob")
        and ((o.get("spec") or {}).get("runtimeRef") or {}).get("name") == name
        and ((o.get("spec") or {}).get("runtimeRef") or {}).get("kind", "ClusterTrainingRuntime") == kind
    ]  # fmt: skip
    if users:
        return Expansion(f"{kind}/{name}", note=f"runtime of TrainJob {', '.join(users)} (no pods of its own)")
    ref = {"apiGroup": "trainer.kubeflow.org", "kind": kind, "name": name}
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": name, "namespace": obj["metadata"]["namespace"]}, "spec": {"runtimeRef": ref}}  # fmt: skip
    # The source says it: rows carry it to every output (table, JSON, mutate's comments).
    return Expansion(f"{kind}/{name} (no TrainJob uses it: shown as one of its defaults)",
                     trainer.trainjob(job, runtimes, None))  # fmt: skip


def _holds_pod_template(value: object, depth: int = 0) -> bool:
    """Whether an object holds a pod spec (a dict with a list of containers) anywhere, to 12
    levels: a Deployment's spec.template, an MPIJob's replica specs, an AppWrapper's components."""
    if depth > 12:
        return False
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            return True
        return any(_holds_pod_template(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_holds_pod_template(v, depth + 1) for v in value)
    return False


__all__ = ["EXPANDERS", "ExpandError", "Expansion", "expand"]
