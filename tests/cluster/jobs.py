"""The training jobs the cluster tier submits, written as a user would: plain seed-style
`torchrun`, `hostNetwork: true`, no pod label (the namespace's label is the opt-in). Two things differ from a
GPU cluster and are added here, not in the webhook: the CPU training image, and torch mounted
read-only from the test machine (see images/train.Dockerfile)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cluster.harness import Cluster

SCRIPT = Path(__file__).resolve().parents[1] / "rendezvous" / "ddp_train.py"
NPROC = 2


def torchrun(endpoint: str, nnodes: int = 2) -> str:
    # The seed's command minus the hand-written is_host/--local-addr shell (the webhook's job).
    return (
        f"torchrun --nnodes={nnodes} --nproc-per-node={NPROC} --rdzv-backend=c10d "
        f"--rdzv-endpoint={endpoint} /scripts/ddp_train.py"
    )


def scripts_configmap(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ddp-scripts", "namespace": ns},
            "data": {"ddp_train.py": SCRIPT.read_text()}}  # fmt: skip


def headless_service(ns: str, name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True,
                     "ports": [{"name": "c10d", "port": 29400}]}}  # fmt: skip


def trainer(image: str, command: str, sites: list[Path]) -> dict[str, Any]:
    return {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["bash", "-c", command],
        "env": [
            {"name": "DDP_TIMEOUT", "value": "60"},
            {"name": "PYTHONPATH", "value": ":".join(f"/opt/torch/{i}" for i in range(len(sites)))},
        ],
        "volumeMounts": [
            {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
            *({"name": f"torch-{i}", "mountPath": f"/opt/torch/{i}", "readOnly": True} for i in range(len(sites))),
        ],
    }


def pod_spec(app: str, image: str, command: str, sites: list[Path], restart: str) -> dict[str, Any]:
    return {
        "hostNetwork": True,
        # The seed's manifests set it themselves; the webhook would add it otherwise.
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 5,
        # One pod per node, as GPU jobs are: the seed's failures need two different nodes.
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [trainer(image, command, sites)],
        "volumes": [
            {"name": "scripts", "configMap": {"name": "ddp-scripts"}},
            *({"name": f"torch-{i}", "hostPath": {"path": str(site), "type": "Directory"}}
              for i, site in enumerate(sites)),
        ],
    }  # fmt: skip


def indexed_job(
    ns: str, name: str, image: str, sites: list[Path], port: int = 29400, labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """An Indexed Job: pods `<name>-<i>` under the headless Service `<name>`, with `labels` on
    its pod template besides `app`."""
    spec = pod_spec(name, image, torchrun(f"{name}-0.{name}:{port}"), sites, "Never")
    spec["subdomain"] = name
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
        "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                 "activeDeadlineSeconds": 300,
                 "template": {"metadata": {"labels": {"app": name, **(labels or {})}}, "spec": spec}},
    }  # fmt: skip
    return [scripts_configmap(ns), headless_service(ns, name, {"app": name}), job]


def statefulset(
    ns: str, name: str, image: str, sites: list[Path], port: int = 29400, endpoint_host: str = ""
) -> list[dict[str, Any]]:
    """A StatefulSet with a headless Service: pods `<name>-<i>`, DNS `<name>-<i>.<name>`; the
    endpoint is pod 0 under that name unless `endpoint_host` names it otherwise.
    StatefulSet pods always restart, so, as users do, the container idles after training."""
    host = endpoint_host or f"{name}-0.{name}"
    command = torchrun(f"{host}:{port}") + " && echo TORCHRUN-EXIT-0 && exec sleep infinity"
    spec = pod_spec(name, image, command, sites, "Always")
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": ns},
        "spec": {"serviceName": name, "replicas": 2, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }  # fmt: skip
    return [scripts_configmap(ns), headless_service(ns, name, {"app": name}), sts]


def apply(c: Cluster, objs: list[dict[str, Any]]) -> None:
    c.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
