"""Volcano `batch.volcano.sh/v1alpha1` Job.

At CREATE the svc plugin has set hostname=<pod>, subdomain=<job>, and added
VC_<TASK>_HOSTS / VC_<TASK>_NUM as configMapKeyRef env (values exist only at run time).
The rendezvous id is the Job's UID (its PodGroup name `<job>-<uid>` when the pod names no owner).
The store (without the pytorch plugin) is on index 0 of the `master` task, else of the job's
first task by name: one store per job whatever its tasks are called.
"""

from __future__ import annotations

import re

from app.core.launchers.base import (
    Kind,
    LauncherInfo,
    Pod,
    dns_name,
    env_literal,
    env_names,
    hostname_and_subdomain,
    name,
    owner,
    pod_annotations,
    pod_labels,
)

JOB_NAME = "volcano.sh/job-name"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
GROUP_NAME = "scheduling.k8s.io/group-name"
_NUM_ENV = re.compile(r"^VC_(.+)_NUM$")


class Volcano:
    name = "volcano"
    kinds = (Kind("batch.volcano.sh", "Job", "jobs"),)
    training_only = True
    container = ""
    controller = "volcano"

    def detect(self, pod: Pod) -> bool:
        return owner(pod, self.kinds[0]) is not None or JOB_NAME in pod_labels(pod)

    def describe(self, pod: Pod, rdzv_port: int) -> LauncherInfo:
        lab, ann = pod_labels(pod), pod_annotations(pod)
        ref = owner(pod, self.kinds[0]) or {}
        job = dns_name(lab.get(JOB_NAME) or ann.get(JOB_NAME) or str(ref.get("name") or ""))
        task = dns_name(lab.get(TASK_SPEC) or ann.get(TASK_SPEC) or "")
        hostname, subdomain = hostname_and_subdomain(pod)
        hostname = hostname or name(pod)
        subdomain = subdomain or job
        envs = env_names(pod)
        # Tasks are the VC_<TASK>_NUM/_HOSTS pairs the svc plugin declared.
        tasks = sorted(m.group(1) for e in envs if (m := _NUM_ENV.match(e)) and f"VC_{m.group(1)}_HOSTS" in envs)
        master_addr = env_literal(pod, "MASTER_ADDR")
        world_size = env_literal(pod, "WORLD_SIZE")
        if master_addr and world_size:
            # The pytorch plugin: it names the store's task (--master=<task>), its port, and
            # counts only its master and worker tasks (not a tensorboard task, say).
            own_port = env_literal(pod, "MASTER_PORT")
            endpoint, nnodes = f"{master_addr}:{own_port or rdzv_port}", world_size
            default_port = not own_port
        else:
            # Every training task counts (master and worker when there are, so a sidecar task such
            # as tensorboard does not). The store lives on index 0 of the first counted task by
            # name (master before worker): a choice every pod of the job makes alike, as the svc
            # plugin gives each pod every task's VC_<TASK>_NUM. Index 0 of each pod's own task made
            # one store per task for `launcher` + `trainer`, each waiting for every node: a hang.
            # Task names are DNS labels, so VC_<TASK> gives the name back (upper case, `-` as `_`).
            counted = [t for t in tasks if t in ("MASTER", "WORKER")] or tasks
            store_task = dns_name(counted[0].lower().replace("_", "-")) if counted else task
            endpoint = f"{job}-{store_task}-0.{job}:{rdzv_port}" if job and store_task else ""
            default_port = bool(endpoint)
            nnodes = "+".join(f"${{VC_{t}_NUM}}" for t in counted)
        return LauncherInfo(
            launcher=self.name,
            job=job,
            hostname=hostname,
            subdomain=subdomain,
            advertised_address=f"{hostname}.{subdomain}" if hostname and subdomain else hostname,
            rdzv_endpoint=endpoint,
            default_port=default_port,
            rdzv_backend="c10d",
            # The job UID (as for every other launcher); its PodGroup name `<job>-<uid>` without one.
            rdzv_id=str(ref.get("uid") or "") or ann.get(GROUP_NAME, ""),
            nnodes=nnodes,
            peers=(f"{job}-*",) if job else (),
        )
