"""Kubeflow Training Operator (v1.9.4) PyTorchJob: pods `<job>-<type>-<i>` (no hostname or
subdomain: one headless Service per pod, named like it), the operator's labels, and its env for
torchrun: elastic (`elasticPolicy`: PET_RDZV_* naming worker-0, PET_NNODES min:max) or static
(MASTER_ADDR/PET_MASTER_ADDR naming master-0, else worker-0). With a Master, each worker also
gets the operator's init container, which waits until master-0's name resolves (its image and
tries are the operator's flags: the defaults are shown)."""

from __future__ import annotations

import copy

from app.preview.controllers.common import (
    ExpandError,
    Obj,
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
# --pytorch-init-container-image and --pytorch-init-container-max-tries, at their defaults.
INIT_IMAGE, INIT_TRIES = "alpine:3.10", 100


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
    total = sum(counts.values())
    # The operator's defaulting: nprocPerNode "auto" unless the elastic policy names its own.
    nproc = spec.get("nprocPerNode")
    if nproc is None and (elastic is None or elastic.get("nProcPerNode") is None):
        nproc = "auto"
    world = total * (int(nproc) if isinstance(nproc, str) and nproc.isdigit() else 1)
    templates = {t.lower(): (r or {}).get("template") for t, r in replicas.items()}
    pods: list[Obj] = []
    for rtype in sorted(replicas, key=lambda t: (t.lower() != "master", t)):
        template = templates[rtype.lower()]
        if not isinstance(template, dict):
            raise ExpandError(f"PyTorchJob {name}: {rtype} has no template")
        for i in range(counts[rtype]):
            kind = rtype.lower()
            labels = {f"{K}job-name": name, f"{K}operator-name": "pytorchjob-controller",
                      f"{K}replica-index": str(i), f"{K}replica-type": kind}  # fmt: skip
            if i == 0 and (kind == "master" or (kind == "worker" and not has_master)):
                labels[f"{K}job-role"] = "master"
            p = pod_from_template(template, ns, name=f"{name}-{kind}-{i}", labels=labels,
                                  owners=[owner(obj, "kubeflow.org/v1", "PyTorchJob")])  # fmt: skip
            rank = i + (1 if has_master and kind == "worker" else 0)
            if has_master and kind == "worker":
                p["spec"].setdefault("initContainers", []).append(_wait_for_master(f"{name}-master-0"))
            # Every container gets the env (appended, as the operator does); the port, only the
            # `pytorch` one (else the first).
            env: list[Obj] = [literal("PYTHONUNBUFFERED", "1")]
            if has_master:
                master_port = str(_port(templates["master"] or {}))
                env += [literal("MASTER_PORT", master_port), literal("PET_MASTER_PORT", master_port),
                        literal("MASTER_ADDR", f"{name}-master-0"), literal("PET_MASTER_ADDR", f"{name}-master-0"),
                        literal("WORLD_SIZE", str(world)), literal("RANK", str(rank)),
                        literal("PET_NODE_RANK", str(rank))]  # fmt: skip
            if nproc is not None:
                env.append(literal("PET_NPROC_PER_NODE", str(nproc)))
            if elastic is not None:
                env += _elastic_env(name, elastic, counts, _port(templates.get("worker") or {}))
            else:
                env.append(literal("PET_NNODES", str(total)))
            containers = [c for c in p["spec"].get("containers") or [] if isinstance(c, dict)]
            for c in containers:
                c.setdefault("env", []).extend(copy.deepcopy(env))
            main = next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else None)
            if main is not None and not any(pt.get("name") == "pytorchjob-port" for pt in main.get("ports") or []):
                entry: Obj = {"name": "pytorchjob-port", "containerPort": DEFAULT_PORT, "protocol": "TCP"}
                if p["spec"].get("hostNetwork") is True:
                    entry["hostPort"] = DEFAULT_PORT  # the API server's default for host-network pods
                main.setdefault("ports", []).append(entry)
            pods.append(p)
    return pods


def _wait_for_master(master: str) -> Obj:
    wait = (f"err=1;for i in $(seq {INIT_TRIES}); do if nslookup {master}; then err=0 && break; fi;"
            "echo waiting for master; sleep 2; done; exit $err")  # fmt: skip
    return {"name": "init-pytorch", "image": INIT_IMAGE, "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
            "command": ["sh", "-c", wait]}  # fmt: skip


def _port(template: Obj) -> int:
    for c in (template.get("spec") or {}).get("containers") or []:
        if c.get("name") == CONTAINER:
            for pt in c.get("ports") or []:
                if pt.get("name") == "pytorchjob-port" and isinstance(pt.get("containerPort"), int):
                    return int(pt["containerPort"])
    return DEFAULT_PORT


def _elastic_env(name: str, elastic: Obj, counts: dict[str, int], worker_port: int) -> list[Obj]:
    workers = next((n for t, n in counts.items() if t.lower() == "worker"), 0)
    lo = integer(elastic.get("minReplicas"), -1, f"PyTorchJob {name}: elasticPolicy.minReplicas")
    hi = integer(elastic.get("maxReplicas"), -1, f"PyTorchJob {name}: elasticPolicy.maxReplicas")
    # The operator's defaulting: one bound given stands for both; neither, the worker count.
    if lo < 0 and hi < 0:
        lo = hi = workers
    lo, hi = (lo if lo >= 0 else hi), (hi if hi >= 0 else lo)
    host = str(elastic.get("rdzvHost") or f"{name}-worker-0")
    rdzv_port = integer(elastic.get("rdzvPort"), worker_port, f"PyTorchJob {name}: elasticPolicy.rdzvPort", 65535)
    env = [literal("PET_RDZV_ENDPOINT", f"{host}:{rdzv_port}"),
           literal("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")), literal("PET_NNODES", f"{lo}:{hi}")]  # fmt: skip
    if elastic.get("maxRestarts") is not None:
        env.append(literal("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
    if elastic.get("nProcPerNode") is not None:
        env.append(literal("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
    if elastic.get("rdzvId") is not None:
        env.append(literal("PET_RDZV_ID", str(elastic["rdzvId"])))
    conf = [c for c in elastic.get("rdzvConf") or [] if isinstance(c, dict)]
    if conf:
        env.append(literal("PET_RDZV_CONF", ",".join(f"{c.get('key')}={c.get('value')}" for c in conf)))
    if elastic.get("standalone") is True:
        env.append(literal("PET_STANDALONE", ""))
    return env
