"""Kubeflow Training Operator (v1.9.4) PyTorchJob: pods `<job>-<type>-<i>` (no hostname or
subdomain: one headless Service per pod, named like it), the operator's labels, and its env for
torchrun: elastic (`elasticPolicy`: PET_RDZV_* naming worker-0, PET_NNODES min:max) or static
(MASTER_ADDR/PET_MASTER_ADDR naming master-0, else worker-0)."""

from __future__ import annotations

from app.controllers.common import (
    ExpandError,
    Obj,
    add_env,
    as_dict,
    integer,
    literal,
    meta,
    name_of,
    owner,
    pod_count,
    pod_from_template,
)

K = "training.kubeflow.org/"
DEFAULT_PORT = 23456
CONTAINER = "pytorch"


def pytorchjob(obj: Obj) -> list[Obj]:
    name, ns = name_of(obj), str(meta(obj).get("namespace") or "default")
    spec = as_dict(obj.get("spec"))
    replicas = spec.get("pytorchReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        raise ExpandError(f"PyTorchJob {name}: no spec.pytorchReplicaSpecs")
    counts = {
        str(t): integer((r or {}).get("replicas"), 1, f"PyTorchJob {name}: {t}.replicas") for t, r in replicas.items()
    }
    pod_count(sum(counts.values()), f"PyTorchJob {name}")
    has_master = any(t.lower() == "master" for t in replicas)
    elastic = spec.get("elasticPolicy") if isinstance(spec.get("elasticPolicy"), dict) else None
    world = sum(counts.values())
    pods: list[Obj] = []
    for rtype in sorted(replicas, key=lambda t: (t.lower() != "master", t)):
        r = replicas[rtype] or {}
        template = r.get("template")
        if not isinstance(template, dict):
            raise ExpandError(f"PyTorchJob {name}: {rtype} has no template")
        port = _port(template)
        for i in range(counts[rtype]):
            kind = rtype.lower()
            labels = {f"{K}job-name": name, f"{K}operator-name": "pytorchjob-controller",
                      f"{K}replica-index": str(i), f"{K}replica-type": kind}  # fmt: skip
            if i == 0 and (kind == "master" or (kind == "worker" and not has_master)):
                labels[f"{K}job-role"] = "master"
            p = pod_from_template(template, ns, name=f"{name}-{kind}-{i}", labels=labels,
                                  owners=[owner(obj, "kubeflow.org/v1", "PyTorchJob")])  # fmt: skip
            rank = i + (1 if has_master and kind == "worker" else 0)
            for c in p["spec"].get("containers") or []:
                if c.get("name") != CONTAINER:
                    continue
                add_env(c, literal("PYTHONUNBUFFERED", "1"))
                if elastic is not None:
                    add_env(c, *_elastic_env(name, elastic, counts, port))
                else:
                    master = f"{name}-{'master' if has_master else 'worker'}-0"
                    add_env(c, literal("MASTER_PORT", str(port)), literal("MASTER_ADDR", master),
                            literal("WORLD_SIZE", str(world)), literal("RANK", str(rank)),
                            literal("PET_MASTER_PORT", str(port)), literal("PET_MASTER_ADDR", master),
                            literal("PET_NNODES", str(world)), literal("PET_NODE_RANK", str(rank)))  # fmt: skip
                if not any(pt.get("containerPort") == port for pt in c.get("ports") or []):
                    entry: Obj = {"name": "pytorchjob-port", "containerPort": port, "protocol": "TCP"}
                    if p["spec"].get("hostNetwork") is True:
                        entry["hostPort"] = port
                    c.setdefault("ports", []).append(entry)
            pods.append(p)
    return pods


def _port(template: Obj) -> int:
    for c in (template.get("spec") or {}).get("containers") or []:
        if c.get("name") == CONTAINER:
            for pt in c.get("ports") or []:
                if pt.get("name") == "pytorchjob-port" and isinstance(pt.get("containerPort"), int):
                    return int(pt["containerPort"])
    return DEFAULT_PORT


def _elastic_env(name: str, elastic: Obj, counts: dict[str, int], port: int) -> list[Obj]:
    workers = next((n for t, n in counts.items() if t.lower() == "worker"), 0)
    lo = integer(elastic.get("minReplicas"), workers, f"PyTorchJob {name}: elasticPolicy.minReplicas")
    hi = integer(elastic.get("maxReplicas"), workers, f"PyTorchJob {name}: elasticPolicy.maxReplicas")
    host = str(elastic.get("rdzvHost") or f"{name}-worker-0")
    rdzv_port = integer(elastic.get("rdzvPort"), port, f"PyTorchJob {name}: elasticPolicy.rdzvPort", 65535)
    env = [literal("PET_NPROC_PER_NODE", str(elastic.get("nProcPerNode") or "auto")),
           literal("PET_RDZV_ENDPOINT", f"{host}:{rdzv_port}"),
           literal("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")), literal("PET_NNODES", f"{lo}:{hi}")]  # fmt: skip
    if elastic.get("maxRestarts") is not None:
        env.append(literal("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
    return env
