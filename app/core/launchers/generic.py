"""Indexed Jobs, StatefulSets and plain pods: identity is `hostname.subdomain` when both set."""

from __future__ import annotations

from app.core.launchers.base import Kind, LauncherInfo, Pod, dns_name, hostname_and_subdomain, name, owner, pod_labels

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
STS_POD_NAME = "statefulset.kubernetes.io/pod-name"


def _peers(job: str) -> tuple[str, ...]:
    """Indexed Job pods are `<job>-<index>`, StatefulSet pods `<sts>-<ordinal>`."""
    job = dns_name(job)
    return (f"{job}-*",) if job else ()


class IndexedJob:
    name = "job"
    kinds = (Kind("batch", "Job", "jobs"),)
    training_only = False
    container = ""
    controller = ""

    def detect(self, pod: Pod) -> bool:
        return COMPLETION_INDEX in pod_labels(pod) or owner(pod, self.kinds[0]) is not None

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        lab = pod_labels(pod)
        ref = owner(pod, self.kinds[0]) or {}
        hostname, subdomain = hostname_and_subdomain(pod)
        job = str(ref.get("name") or lab.get("batch.kubernetes.io/job-name") or "")
        return LauncherInfo(
            launcher=self.name,
            job=job,
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname and subdomain else "",
            rdzv_id=lab.get(CONTROLLER_UID) or str(ref.get("uid") or ""),
            peers=_peers(job),
        )


class StatefulSet:
    name = "statefulset"
    kinds = (Kind("apps", "StatefulSet", "statefulsets"),)
    training_only = False
    container = ""
    controller = ""

    def detect(self, pod: Pod) -> bool:
        return STS_POD_NAME in pod_labels(pod) or owner(pod, self.kinds[0]) is not None

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        ref = owner(pod, self.kinds[0]) or {}
        hostname, subdomain = hostname_and_subdomain(pod)
        hostname = hostname or name(pod) or pod_labels(pod).get(STS_POD_NAME, "")
        return LauncherInfo(
            launcher=self.name,
            job=str(ref.get("name") or ""),
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname and subdomain else "",
            rdzv_id=str(ref.get("uid") or ""),
            peers=_peers(str(ref.get("name") or "")),
        )


class PlainPod:
    name = "pod"
    # A pod of its own, or of a Deployment's ReplicaSet or a DaemonSet: its owner, if any, is
    # what an Event is recorded on.
    kinds = (Kind("apps", "ReplicaSet", "replicasets"), Kind("apps", "DaemonSet", "daemonsets"))
    training_only = False
    container = ""
    controller = ""

    def detect(self, pod: Pod) -> bool:
        return True

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        hostname, subdomain = hostname_and_subdomain(pod)
        hostname = hostname or (name(pod) if subdomain else "")
        return LauncherInfo(
            launcher=self.name,
            job=name(pod),
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname and subdomain else "",
        )
