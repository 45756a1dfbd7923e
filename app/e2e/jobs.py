"""The e2e job shapes: one 2-node training job per launcher, written as its users write it
(plain `torchrun`, `hostNetwork: true`, no rendezvous shell, and the pod label only where the
installed webhook's opt-in mode asks for it), so what is checked is what the webhook adds. Pure: parameters in, manifests out.

What differs between clusters (image, GPUs, node selection, how torch gets into the pod) is in
`Params`; nothing else is cluster-specific. Each job has its own c10d port so that all of them
can run side by side on the same host-network nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core import launchers
from app.wrapper import rules

DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:26.09-py3"  # the examples' image: torch, NCCL, rdma-core
JOB_LABEL = "hostnet-rdma.io/e2e-job"  # on every pod of one e2e job: how the runner finds them
SCRIPT_DIR = "/hostnet-rdma-e2e"
SCRIPT = f"{SCRIPT_DIR}/train.py"
CONFIGMAP = "hostnet-rdma-e2e"
RDZV_PORT_ANNOTATION = "hostnet-rdma.io/rdzv-port"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue reads a job's LocalQueue from its object's labels
TRAINER_PORT = 29500  # Kubeflow Trainer's static MASTER_PORT; it adds it as a (host) port itself

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Params:
    namespace: str
    image: str
    # The labels the installed webhook's objectSelector asks pods for: none in the default
    # opt-in mode (namespace), hostnet-rdma.io/inject=enabled in the cautious one (pod).
    inject_labels: Mapping[str, str] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    nodes: int = 2
    gpus_per_node: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    nproc_per_node: int = 1
    backend: str = "gloo"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Taint keys the pods tolerate (operator Exists), e.g. nvidia.com/gpu on GPU pools.
    tolerations: tuple[str, ...] = ()
    # Node directories put on the pod's PYTHONPATH, read-only: torch for images without it
    # (the test cluster mounts the test machine's torch this way).
    host_paths: tuple[str, ...] = ()
    size_mb: float = 4.0
    collective_timeout: int = 120
    volcano_queue: str = "default"
    # A Kueue LocalQueue in the namespace: every job Kueue manages (all but Volcano's) is
    # submitted through it, as its users' jobs are where Kueue manages every job.
    kueue_queue: str = ""
    # The data-path sweep (train.py): each message size's bound, and whether the job stops after
    # it (`doctor --between`: the path only). With NCCL the transport's own retries are made
    # short for the job, so a message that never arrives fails in seconds, not 7 x 17 s.
    sweep_bound: int = 10
    sweep_only: bool = False
    # With NCCL: seconds after a communicator's `Init START` without `Init COMPLETE` before the
    # wrapper probes the path and says what stalled (its line ends the job's row, not a time-out).
    stall_seconds: int = 20
    # Run on exactly these nodes (one pod each): `doctor --between A,B`.
    on_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launcher:
    """One launcher's e2e job shape. Its kind is the core's (app.core.launchers.BY_NAME)."""

    name: str  # the core launcher's name: the one the wrapper reports
    version: str  # the API version of the job object the user creates
    installs: str  # what a cluster needs for it (the report names it when it is missing)
    port: int  # the c10d store port its store host binds on the node
    build: Callable[[Params, str, int], list[Manifest]]
    # The container its job shape trains in: the one the launcher names, else "trainer".
    container: str = ""
    # (apiVersion, kind) it needs served besides its job kind.
    also_needs: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return launchers.BY_NAME[self.name].kinds[0].kind

    @property
    def plural(self) -> str:
        return launchers.BY_NAME[self.name].kinds[0].plural

    @property
    def api_version(self) -> str:
        group = launchers.BY_NAME[self.name].kinds[0].group
        return f"{group}/{self.version}" if group else self.version

    @property
    def training_container(self) -> str:
        return self.container or launchers.BY_NAME[self.name].container or "trainer"


def job_name(launcher: str) -> str:
    return f"e2e-{launcher}"


# ------------------------------------------------------------------------------ the pod


def _env(p: Params) -> list[dict[str, str]]:
    env = [
        {"name": "E2E_BACKEND", "value": p.backend},
        {"name": "E2E_SIZE_MB", "value": f"{p.size_mb:g}"},
        {"name": "E2E_TIMEOUT", "value": str(p.collective_timeout)},
        {"name": "E2E_SWEEP_BOUND", "value": str(p.sweep_bound)},
    ]
    if p.sweep_only:
        env.append({"name": "E2E_SWEEP_ONLY", "value": "1"})
    if p.backend == "nccl":
        # What `verify` reads; set here so the check holds whatever profile the node gets.
        env += [
            {"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"},
            # A lost message fails in ~0.1 s x 3 tries, not the profile's 17 s x 7.
            {"name": "NCCL_IB_TIMEOUT", "value": "14"},
            {"name": "NCCL_IB_RETRY_CNT", "value": "2"},
            {"name": rules.ENV_NCCL_STALL, "value": str(p.stall_seconds)},
        ]
    if p.host_paths:
        env.append({"name": "PYTHONPATH", "value": ":".join(_host_mount(i) for i in range(len(p.host_paths)))})
    return env


def _host_mount(i: int) -> str:
    return f"/opt/hostnet-rdma-e2e/site-{i}"


def container(p: Params, name: str, command: list[str]) -> Manifest:
    c: Manifest = {
        "name": name,
        "image": p.image,
        "imagePullPolicy": p.image_pull_policy,
        "command": command,
        "env": _env(p),
        "volumeMounts": [
            {"name": "e2e-script", "mountPath": SCRIPT_DIR, "readOnly": True},
            *({"name": f"e2e-site-{i}", "mountPath": _host_mount(i), "readOnly": True}
              for i in range(len(p.host_paths))),
        ],
    }  # fmt: skip
    if p.gpus_per_node:
        c["resources"] = {"limits": {p.gpu_resource: p.gpus_per_node}}
    return c


def pod_spec(p: Params, name: str, containers: list[Manifest], restart: str | None) -> Manifest:
    spec: Manifest = {
        "hostNetwork": True,
        "terminationGracePeriodSeconds": 10,
        # One pod per node, as GPU jobs are: the rendezvous must cross nodes.
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {JOB_LABEL: name}}, "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": containers,
        "volumes": [
            {"name": "e2e-script", "configMap": {"name": CONFIGMAP}},
            *({"name": f"e2e-site-{i}", "hostPath": {"path": path, "type": "Directory"}}
              for i, path in enumerate(p.host_paths)),
        ],
    }  # fmt: skip
    if restart:
        spec["restartPolicy"] = restart
    if p.node_selector:
        spec["nodeSelector"] = dict(p.node_selector)
    if p.on_nodes:
        spec["affinity"]["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(p.on_nodes)}]}]}}  # fmt: skip
    if p.tolerations:
        spec["tolerations"] = [{"key": k, "operator": "Exists"} for k in p.tolerations]
    return spec


def template(p: Params, name: str, spec: Manifest, annotations: Mapping[str, str] | None = None) -> Manifest:
    meta: Manifest = {"labels": {**p.inject_labels, JOB_LABEL: name}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}


def torchrun(p: Params, *options: str) -> list[str]:
    return ["torchrun", f"--nproc-per-node={p.nproc_per_node}", *options, SCRIPT]


def idle_after(command: list[str]) -> list[str]:
    """For pods that always restart (StatefulSet, LeaderWorkerSet): idle once training is
    done, as their users do, so a finished run is not run again."""
    return ["sh", "-c", " ".join(command) + " && exec sleep infinity"]


def _meta(p: Params, name: str) -> Manifest:
    return {"name": name, "namespace": p.namespace, "labels": {JOB_LABEL: name}}


def _job_meta(p: Params, name: str) -> Manifest:
    """The metadata of a job object Kueue manages: with the queue label when there is a queue."""
    meta = _meta(p, name)
    if p.kueue_queue:
        meta["labels"][QUEUE_LABEL] = p.kueue_queue
    return meta


def headless_service(p: Params, name: str, port: int) -> Manifest:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(p, name),
            "spec": {"clusterIP": "None", "selector": {JOB_LABEL: name}, "publishNotReadyAddresses": True,
                     "ports": [{"name": "c10d", "port": port}]}}  # fmt: skip


def script_configmap(p: Params, script: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": p.namespace},
            "data": {"train.py": script}}  # fmt: skip


# ------------------------------------------------------------------------------ per launcher


def indexed_job(p: Params, name: str, port: int) -> list[Manifest]:
    """An Indexed Job under a headless Service: pod i is `<name>-<i>.<name>`; the endpoint
    names pod 0 and the node count is given, as the webhook requires for a Job."""
    command = torchrun(p, f"--nnodes={p.nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={name}-0.{name}:{port}")
    spec = pod_spec(p, name, [container(p, "trainer", command)], "Never")
    spec["subdomain"] = name
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _job_meta(p, name),
           "spec": {"completionMode": "Indexed", "completions": p.nodes, "parallelism": p.nodes, "backoffLimit": 0,
                    "template": template(p, name, spec)}}  # fmt: skip
    return [headless_service(p, name, port), job]


def statefulset(p: Params, name: str, port: int) -> list[Manifest]:
    command = torchrun(p, f"--nnodes={p.nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={name}-0.{name}:{port}")
    spec = pod_spec(p, name, [container(p, "trainer", idle_after(command))], "Always")
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _job_meta(p, name),
           "spec": {"serviceName": name, "replicas": p.nodes, "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {JOB_LABEL: name}}, "template": template(p, name, spec)}}  # fmt: skip
    return [headless_service(p, name, port), sts]


def jobset(p: Params, name: str, port: int) -> list[Manifest]:
    """No endpoint: the webhook points torchrun at pod 0 of job 0 (on this job's own port)."""
    spec = pod_spec(p, name, [container(p, "trainer", torchrun(p, f"--nnodes={p.nodes}"))], "Never")
    tmpl = template(p, name, spec, {RDZV_PORT_ANNOTATION: str(port)})
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": _job_meta(p, name),
          "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
              "parallelism": p.nodes, "completions": p.nodes, "backoffLimit": 0, "template": tmpl}}}]}}  # fmt: skip
    return [js]


def leaderworkerset(p: Params, name: str, port: int) -> list[Manifest]:
    """No endpoint, no node count: the webhook takes both from LWS's own env."""
    spec = pod_spec(p, name, [container(p, "trainer", idle_after(torchrun(p)))], None)
    tmpl = template(p, name, spec, {RDZV_PORT_ANNOTATION: str(port)})
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": _job_meta(p, name),
           "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": p.nodes, "workerTemplate": tmpl}}}  # fmt: skip
    return [lws]


def pytorchjob(p: Params, name: str, port: int) -> list[Manifest]:
    """Training Operator v1, elastic c10d: the operator writes the endpoint (worker-0 on the
    `pytorchjob-port` port) and the node count."""
    c = container(p, "pytorch", torchrun(p))
    c["ports"] = [{"name": "pytorchjob-port", "containerPort": port}]
    spec = pod_spec(p, name, [c], None)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _job_meta(p, name),
           "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": p.nodes, "maxReplicas": p.nodes,
                                      "maxRestarts": 0},
                    "pytorchReplicaSpecs": {"Worker": {"replicas": p.nodes, "restartPolicy": "Never",
                                                       "template": template(p, name, spec)}}}}  # fmt: skip
    return [job]


def trainjob(p: Params, name: str, port: int) -> list[Manifest]:
    """Kubeflow Trainer v2: a namespaced runtime of the run's own (hostNetwork and the label go
    there; TrainJob has no field for them) and a TrainJob naming it. Static rendezvous: port
    is Trainer's own."""
    del port
    spec = pod_spec(p, name, [container(p, "node", ["torchrun", SCRIPT])], None)
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {**_meta(p, f"{name}-runtime"), "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": p.nodes, "torch": {}},
                 "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                     "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": template(p, name, spec)}}}]}}},
    }  # fmt: skip
    # Trainer v2.3 takes the process count from the TrainJob only; left out it is `auto` when
    # the node asks for GPUs, which torchrun reads as the visible GPUs, else as the CPU cores.
    trainer: Manifest = {"numNodes": p.nodes, "numProcPerNode": p.nproc_per_node, "command": ["torchrun", SCRIPT]}
    if p.gpus_per_node:
        trainer["resourcesPerNode"] = {"limits": {p.gpu_resource: p.gpus_per_node}}
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": _job_meta(p, name),
           "spec": {"runtimeRef": {"name": f"{name}-runtime", "kind": "TrainingRuntime",
                                   "apiGroup": "trainer.kubeflow.org"},
                    "trainer": trainer}}  # fmt: skip
    return [runtime, job]


def volcano(p: Params, name: str, port: int) -> list[Manifest]:
    """One worker task, the `svc` and `env` plugins: the webhook derives endpoint and node count.
    Volcano queues it itself (`queue`): Kueue does not manage Volcano Jobs, so no Kueue label."""
    spec = pod_spec(p, name, [container(p, "worker", torchrun(p))], "Never")
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": _meta(p, name),
           "spec": {"minAvailable": p.nodes, "schedulerName": "volcano", "queue": p.volcano_queue,
                    "plugins": {"env": [], "svc": ["--publish-not-ready-addresses=true"]},
                    "tasks": [{"name": "worker", "replicas": p.nodes,
                               "template": template(p, name, spec, {RDZV_PORT_ANNOTATION: str(port)})}]}}  # fmt: skip
    return [job]


LAUNCHERS: dict[str, Launcher] = {
    ln.name: ln
    for ln in (
        Launcher("job", "v1", "Kubernetes", 29411, indexed_job),
        Launcher("statefulset", "v1", "Kubernetes", 29412, statefulset),
        Launcher("jobset", "v1alpha2", "JobSet", 29413, jobset),
        Launcher("lws", "v1", "LeaderWorkerSet", 29414, leaderworkerset),
        Launcher("pytorchjob", "v1", "Kubeflow Training Operator v1", 29415, pytorchjob),
        Launcher("trainjob", "v1alpha1", "Kubeflow Trainer v2 (with JobSet)", TRAINER_PORT, trainjob,
                 also_needs=(("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"), ("jobset.x-k8s.io/v1alpha2", "JobSet"))),
        Launcher("volcano", "v1alpha1", "Volcano", 29416, volcano, container="worker"),
    )
}  # fmt: skip


def manifests(launcher: str, p: Params) -> list[Manifest]:
    """The objects of one e2e job (the shared script ConfigMap not included)."""
    ln = LAUNCHERS[launcher]
    return ln.build(p, job_name(launcher), ln.port)
