"""Kubeflow MPI Operator (MPIJob v2beta1): workers `<job>-worker-<i>` with hostname and the
subdomain `<job>`, run sshd; the launcher (a Job's pod, hostname `<job>-launcher`) runs
mpirun, which starts the ranks on the workers over ssh. No torchrun and no rendezvous of ours:
what matters is that sshd gives each rank a fresh environment (inject.nccl_env says so)."""

from __future__ import annotations

from app.core.launchers.base import Kind, LauncherInfo, Pod, dns_name, hostname_and_subdomain, meta, owner, pod_labels

JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR = "training.kubeflow.org/operator-name"
ROLE = "training.kubeflow.org/job-role"


class MPIJob:
    name = "mpijob"
    kinds = (Kind("kubeflow.org", "MPIJob", "mpijobs"),)
    # Its launcher pod runs mpirun, not training: a pod of its is judged by what it runs.
    training_only = False
    container = ""
    controller = "mpi-operator"

    def detect(self, pod: Pod) -> bool:
        # The launcher's owner is the operator's Job: its labels say whose it is. Read raw: every
        # Job, StatefulSet and plain pod passes here.
        labels = meta(pod).get("labels")
        if isinstance(labels, dict) and labels.get(OPERATOR) == "mpi-operator":
            return True
        return owner(pod, self.kinds[0]) is not None

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        ref = owner(pod, self.kinds[0]) or {}
        job = dns_name(pod_labels(pod).get(JOB_NAME) or str(ref.get("name") or ""))
        hostname, subdomain = hostname_and_subdomain(pod)
        return LauncherInfo(
            launcher=self.name,
            job=job,
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname and subdomain else "",
            rdzv_id=str(ref.get("uid") or job),
            peers=(f"{job}-*",) if job else (),
        )


def role(pod: Pod) -> str:
    """`worker` or `launcher` (the operator's label), "" when it has none."""
    return pod_labels(pod).get(ROLE, "")
