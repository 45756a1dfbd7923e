"""Kubeflow Training Operator v1 PyTorchJob.

Pods are named `<job>-<type>-<i>` and each gets a headless Service of the same name (no
hostname/subdomain). With elasticPolicy the operator sets PET_RDZV_ENDPOINT to
`<job>-worker-0:<port>` even when a Master exists; Master-0 and Worker-0 both carry
replica-index 0, so is_host must follow the endpoint, never the index. It sets no
rendezvous id (torchrun then uses `none`), so we use the job's UID.
Without elasticPolicy it sets MASTER_ADDR (static rendezvous): nothing to fix but DNS.
"""

from __future__ import annotations

from app.core.launchers.base import Kind, LauncherInfo, Pod, dns_name, name, owner, pod_labels

JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR = "training.kubeflow.org/operator-name"


class PyTorchJob:
    name = "pytorchjob"
    kinds = (Kind("kubeflow.org", "PyTorchJob", "pytorchjobs"),)
    training_only = True
    container = "pytorch"
    controller = "training-operator"

    def detect(self, pod: Pod) -> bool:
        if owner(pod, self.kinds[0]) is not None:
            return True
        lab = pod_labels(pod)
        return JOB_NAME in lab and lab.get(OPERATOR, "pytorchjob-controller") == "pytorchjob-controller"

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        ref = owner(pod, self.kinds[0]) or {}
        job = dns_name(pod_labels(pod).get(JOB_NAME) or str(ref.get("name") or ""))
        pod_name = name(pod)
        return LauncherInfo(
            launcher=self.name,
            job=job,
            hostname=pod_name,
            advertised_address=pod_name,
            service_per_pod=True,
            # Endpoint, backend and nnodes arrive as PET_* env from the operator.
            rdzv_id=str(ref.get("uid") or job),
            designated_container=self.container,
            peers=(f"{job}-*",) if job else (),
        )
