"""JobSet (`jobset.x-k8s.io`) and Kubeflow Trainer v2, whose TrainJobs run as JobSets.

Pods come from Indexed Jobs with generateName, so `metadata.name` is EMPTY at admission:
the identity is `spec.hostname` (`<js>-<rjob>-<j>-<i>`) under `spec.subdomain`.
Trainer v2 uses torchrun's static rendezvous (PET_MASTER_ADDR + PET_NODE_RANK): with DNS
right it needs nothing else, so its adapter sets no rendezvous defaults. A plain JobSet gets
the conventional c10d store `<js>-<rjob>-0-0.<subdomain>` when the user names none.
"""

from __future__ import annotations

from app.core.launchers.base import (
    Kind,
    LauncherInfo,
    Pod,
    containers,
    dns_name,
    hostname_and_subdomain,
    pod_annotations,
    pod_labels,
)

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


def _jobset(pod: Pod) -> tuple[str, str]:
    lab, ann = pod_labels(pod), pod_annotations(pod)
    return (
        dns_name(lab.get(JOBSET_NAME) or ann.get(JOBSET_NAME) or ""),
        lab.get(JOBSET_UID) or ann.get(JOBSET_UID) or "",
    )


def _info(launcher: str, pod: Pod, designated: str = "", endpoint: str = "") -> LauncherInfo:
    js, uid = _jobset(pod)
    hostname, subdomain = hostname_and_subdomain(pod)
    subdomain = subdomain or js
    return LauncherInfo(
        launcher=launcher,
        job=js,
        hostname=hostname,
        subdomain=subdomain,
        advertised_address=f"{hostname}.{subdomain}" if hostname else "",
        rdzv_endpoint=endpoint,
        rdzv_backend="c10d" if endpoint else "",
        rdzv_id=uid,
        designated_container=designated,
        peers=(f"{js}-*",) if js else (),
        default_port=bool(endpoint),
    )


class TrainJob:
    """Kubeflow Trainer v2: a JobSet whose `node` container carries PET_MASTER_ADDR."""

    name = "trainjob"
    kinds = (Kind("trainer.kubeflow.org", "TrainJob", "trainjobs"),)
    training_only = True
    container = "node"
    controller = "trainer"

    def detect(self, pod: Pod) -> bool:
        if not _jobset(pod)[0]:
            return False
        for c in containers(pod):
            if c.get("name") == "node":
                return any(isinstance(e, dict) and e.get("name") == "PET_MASTER_ADDR" for e in c.get("env") or [])
        return False

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        return _info(self.name, pod, designated=self.container)


class JobSet:
    name = "jobset"
    kinds = (Kind("jobset.x-k8s.io", "JobSet", "jobsets"),)
    training_only = True
    container = ""
    controller = "jobset"

    def detect(self, pod: Pod) -> bool:
        return bool(_jobset(pod)[0])

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        # The conventional store: pod 0 of job 0 of this pod's replicated job (a pod cannot see
        # the JobSet's other replicated jobs; users with several pass --rdzv-endpoint).
        js = _jobset(pod)[0]
        lab, ann = pod_labels(pod), pod_annotations(pod)
        rjob = dns_name(lab.get(REPLICATED_JOB) or ann.get(REPLICATED_JOB) or "")
        subdomain = hostname_and_subdomain(pod)[1] or js
        endpoint = f"{js}-{rjob}-0-0.{subdomain}:{rdzv_port}" if js and rjob else ""
        return _info(self.name, pod, endpoint=endpoint)
