"""Kubeflow MPI Operator (MPIJob v2beta1, v0.6.0 as the cluster tier pins it): workers are pods
`<job>-worker-<i>` (hostname their name, subdomain `<job>`: the job's headless Service, and
`<job>.<namespace>.svc.cluster.local` added to their DNS search), the launcher a batch Job
`<job>-launcher` whose pod has the hostname `<job>-launcher` and the same subdomain. The
operator adds its labels, the MPI implementation's env (the hostfile it mounts from
`<job>-config`), the ssh key volume, and on a host-network pod ClusterFirstWithHostNet. No
torchrun: mpirun starts the ranks over ssh."""

from __future__ import annotations

from app.preview.controllers import batch
from app.preview.controllers.common import (
    ExpandError,
    Obj,
    add_env,
    as_dict,
    integer,
    literal,
    meta,
    name_of,
    owner,
    pod_from_template,
)

K = "training.kubeflow.org/"
API_VERSION = "kubeflow.org/v2beta1"
CONFIG_MOUNT = "/etc/mpi"
# The MPI implementation's env on the launcher (its hostfile and ssh retries), and the slots.
IMPLEMENTATION_ENV = {
    "OpenMPI": [("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", f"{CONFIG_MOUNT}/hostfile"),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10")],
    "Intel": [("I_MPI_HYDRA_HOST_FILE", f"{CONFIG_MOUNT}/hostfile"),
              ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10")],
    "MPICH": [("HYDRA_HOST_FILE", f"{CONFIG_MOUNT}/hostfile"), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")],
}  # fmt: skip
SLOTS_ENV = {"OpenMPI": "OMPI_MCA_orte_set_default_slots", "Intel": "I_MPI_PERHOST"}


def mpijob(obj: Obj) -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    if obj.get("apiVersion") != API_VERSION:
        raise ExpandError(f"MPIJob {name}: apiVersion {obj.get('apiVersion')}: the preview expands {API_VERSION}")
    spec = as_dict(obj.get("spec"))
    replicas = as_dict(spec.get("mpiReplicaSpecs"))
    launcher_spec, worker_spec = as_dict(replicas.get("Launcher")), as_dict(replicas.get("Worker"))
    if not isinstance(launcher_spec.get("template"), dict):
        raise ExpandError(f"MPIJob {name}: no spec.mpiReplicaSpecs.Launcher.template")
    impl = str(spec.get("mpiImplementation") or "OpenMPI")
    if impl not in IMPLEMENTATION_ENV:
        raise ExpandError(f"MPIJob {name}: mpiImplementation {impl!r} is not OpenMPI, Intel or MPICH")
    slots = integer(spec.get("slotsPerWorker"), 1, f"MPIJob {name}: spec.slotsPerWorker")
    workers = integer(worker_spec.get("replicas"), 0, f"MPIJob {name}: Worker.replicas")
    ssh_path = str(spec.get("sshAuthMountPath") or "/root/.ssh")
    mine = owner(obj, "kubeflow.org/v2beta1", "MPIJob")
    pods: list[Obj] = []
    for i in range(workers):
        if not isinstance(worker_spec.get("template"), dict):
            raise ExpandError(f"MPIJob {name}: no spec.mpiReplicaSpecs.Worker.template")
        p = pod_from_template(worker_spec["template"], ns, name=f"{name}-worker-{i}",
                              labels={**_labels(name, "worker"), f"{K}replica-index": str(i)}, owners=[mine])  # fmt: skip
        main = _shape(p, f"{name}-worker-{i}", name, worker_spec, "Never", ssh_path)
        # Intel MPI and MPICH reach the launcher by its bare host name (the operator's domain).
        dns = p["spec"].setdefault("dnsConfig", {})
        dns["searches"] = [*(dns.get("searches") or []), f"{name}.{ns}.svc.cluster.local"]
        if not main.get("command") and not main.get("args"):
            main["command"] = ["/usr/sbin/sshd", "-De"]
        add_env(main, literal("K_MPI_JOB_ROLE", "worker"))
        pods.append(p)
    # The launcher: a batch Job of the operator's, its template shaped as the operator does.
    template = pod_from_template(launcher_spec["template"], ns, name="-", labels=_labels(name, "launcher"))
    main = _shape(template, f"{name}-launcher", name, launcher_spec, "OnFailure", ssh_path)
    add_env(main, literal("K_MPI_JOB_ROLE", "launcher"), *(literal(k, v) for k, v in IMPLEMENTATION_ENV[impl]))
    if impl in SLOTS_ENV:
        add_env(main, literal(SLOTS_ENV[impl], str(slots)))
    if spec.get("runLauncherAsWorker") is not True:  # so the launcher does not take a GPU's devices
        main.setdefault("env", []).extend([{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}])
    template["spec"].setdefault("volumes", []).append({"name": "mpi-job-config", "configMap": {
        "name": f"{name}-config", "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444},
                                            {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}})  # fmt: skip
    main.setdefault("volumeMounts", []).append({"name": "mpi-job-config", "mountPath": CONFIG_MOUNT})
    pod_meta = {k: v for k, v in template["metadata"].items() if k not in ("name", "namespace")}
    job: Obj = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"{name}-launcher", "namespace": ns, "labels": {"app": name},
                             "uid": f"<uid of Job {name}-launcher>", "ownerReferences": [mine]},
                "spec": {"template": {"metadata": pod_meta, "spec": template["spec"]}}}  # fmt: skip
    return [*batch.job(job), *pods]


def _labels(name: str, role: str) -> Obj:
    return {f"{K}operator-name": "mpi-operator", f"{K}job-name": name, f"{K}job-role": role}


def _shape(p: Obj, hostname: str, job: str, replica: Obj, default_restart: str, ssh_path: str) -> Obj:
    """What the operator does to both kinds of pod; returns the first container (the one it
    adds to)."""
    spec = p["spec"]
    spec["hostname"], spec["subdomain"] = hostname, job
    if spec.get("hostNetwork") is True:  # so the workers' names resolve without the namespace
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    restart = str(replica.get("restartPolicy") or default_restart)
    spec["restartPolicy"] = "Never" if restart == "ExitCode" else restart
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise ExpandError(f"MPIJob {job}: a pod template without containers")
    main: Obj = containers[0]
    spec.setdefault("volumes", []).append({"name": "ssh-auth", "secret": {
        "secretName": f"{job}-ssh", **({"defaultMode": 0o600} if ssh_path == "/root/.ssh" else {}),
        "items": [{"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
                  {"key": "ssh-publickey", "path": "authorized_keys"}]}})  # fmt: skip
    main.setdefault("volumeMounts", []).append({"name": "ssh-auth", "mountPath": ssh_path})
    return main
