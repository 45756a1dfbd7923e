"""Volcano (v1.15.1) `batch.volcano.sh/v1alpha1` Job: pods `<job>-<task>-<i>` with Volcano's
labels and annotations (the PodGroup `<job>-<uid>`), and what its plugins add: svc (hostname,
subdomain `<job>`, VC_<TASK>_HOSTS/_NUM from the ConfigMap `<job>-svc`), env (VK_/VC_TASK_INDEX),
pytorch (MASTER_ADDR of the `--master` task's pod 0, MASTER_PORT, WORLD_SIZE, RANK; with
`--wait-master-enabled` each worker's `wait-for-master` init container)."""

from __future__ import annotations

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
    pod_count,
    pod_from_template,
    uid_of,
)

V = "volcano.sh/"


def _env_name(task: str) -> str:
    return task.upper().replace("-", "_")


def _plugin_args(args: list[str]) -> dict[str, str]:
    """A plugin's arguments as Go's flag package reads them: `--name=value`, `-name=value`, a bare
    boolean `--name` (true), and `--name value` for the plugin's flags that take a value."""
    out: dict[str, str] = {}
    words = [str(a) for a in args]
    i = 0
    while i < len(words):
        a = words[i]
        if not a.startswith("-") or a in ("-", "--"):
            break  # Go's flag package stops at the first argument that is not a flag
        key, eq, value = a.lstrip("-").partition("=")
        if not eq and key in _VALUED and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif not eq:
            value = "true"
        out[key] = value
        i += 1
    return out


# The pytorch plugin's flags that take a value (the others are booleans).
_VALUED = ("master", "worker", "port", "wait-master-timeout", "wait-master-image")
# Its defaults (v1.15.1, pkg/controllers/job/plugins/distributed-framework/pytorch/pytorch.go).
WAIT_MASTER_IMAGE, WAIT_MASTER_TIMEOUT = "busybox:1.36.1", 300


def _go_bool(value: str) -> bool:
    """strconv.ParseBool's true spellings (anything else is false or a parse error: off)."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


def _go_int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def job(obj: Obj) -> list[Obj]:
    name, ns, uid = name_of(obj), str(meta(obj).get("namespace") or "default"), uid_of(obj)
    spec = as_dict(obj.get("spec"))
    tasks = [t for t in spec.get("tasks") or [] if isinstance(t, dict)]
    if not tasks:
        raise ExpandError(f"Volcano Job {name}: no spec.tasks")
    plugins = as_dict(spec.get("plugins"))
    queue = str(spec.get("queue") or "default")
    counts = {str(t.get("name")): integer(t.get("replicas"), 1, f"Volcano Job {name}: task {t.get('name')}.replicas")
              for t in tasks}  # fmt: skip
    pod_count(sum(counts.values()), f"Volcano Job {name}")
    pytorch = _plugin_args(plugins["pytorch"]) if isinstance(plugins.get("pytorch"), list) else None
    # Volcano's admission adds svc for the plugins that need it (pytorch, tensorflow, mpi, ray).
    svc = "svc" in plugins or any(k in plugins for k in ("pytorch", "tensorflow", "mpi", "ray"))
    retries = str(as_dict(obj.get("status")).get("retryCount") or 0)
    # Volcano runs a pod's plugins in Go map order, which varies from pod to pod: the order of
    # the env they add does too (here: env, svc, pytorch). Nothing reads env by position.
    pods: list[Obj] = []
    for t in tasks:
        task = str(t.get("name"))
        template = t.get("template")
        if not isinstance(template, dict):
            raise ExpandError(f"Volcano Job {name}: task {task} has no template")
        for i in range(counts[task]):
            pod_name = f"{name}-{task}-{i}"
            labels = {f"{V}job-name": name, f"{V}job-namespace": ns, f"{V}queue-name": queue,
                      f"{V}task-spec": task, f"{V}task-index": str(i)}  # fmt: skip
            annotations = {"scheduling.k8s.io/group-name": f"{name}-{uid}", f"{V}job-name": name, f"{V}job-version": "0",
                           f"{V}queue-name": queue, f"{V}task-spec": task, f"{V}template-uid": f"{name}-{task}",
                           f"{V}task-index": str(i), f"{V}job-retry-count": retries}  # fmt: skip
            p = pod_from_template(template, ns, name=pod_name, labels=labels, annotations=annotations,
                                  owners=[owner(obj, "batch.volcano.sh/v1alpha1", "Job")])  # fmt: skip
            if spec.get("schedulerName"):
                p["spec"]["schedulerName"] = str(spec["schedulerName"])
            if svc:
                p["spec"]["hostname"], p["spec"]["subdomain"] = pod_name, name
                p["spec"].setdefault("volumes", []).append(
                    {"name": f"{name}-svc", "configMap": {"name": f"{name}-svc"}}
                )
            for c in p["spec"].get("containers") or []:
                if "env" in plugins:
                    add_env(c, literal("VK_TASK_INDEX", str(i)), literal("VC_TASK_INDEX", str(i)))
                if svc:
                    for other in counts:
                        for key in ("HOSTS", "NUM"):
                            env = f"VC_{_env_name(other)}_{key}"
                            add_env(
                                c, {"name": env, "valueFrom": {"configMapKeyRef": {"name": f"{name}-svc", "key": env}}}
                            )
                    c.setdefault("volumeMounts", []).append({"name": f"{name}-svc", "mountPath": "/etc/volcano"})
                if pytorch is not None:
                    add_env(c, *_pytorch_env(name, task, i, pytorch, counts, tasks))
                    port = _go_int(pytorch.get("port"), 23456)
                    if not any(isinstance(x, dict) and x.get("containerPort") == port for x in c.get("ports") or []):
                        c.setdefault("ports", []).append({"name": "pytorchjob-port", "containerPort": port})
            if pytorch is not None and task == (pytorch.get("worker") or "worker"):
                _wait_for_master(p, name, pytorch, tasks)
            pods.append(p)
    return pods


def _master_addr(job: str, master: str, tasks: list[Obj]) -> str:
    spec = next((as_dict(as_dict(t.get("template")).get("spec")) for t in tasks if t.get("name") == master), {})
    return f"{spec.get('hostname') or f'{job}-{master}-0'}.{spec.get('subdomain') or job}"


def _wait_for_master(pod: Obj, job: str, args: dict[str, str], tasks: list[Obj]) -> None:
    """The pytorch plugin's `wait-for-master` init container on a worker (`--wait-master-enabled`):
    appended after the template's own, unless one of that name is there; only where the job has
    the master task (without it the plugin adds nothing)."""
    master = args.get("master") or "master"
    if not _go_bool(args.get("wait-master-enabled", "false")) or not any(t.get("name") == master for t in tasks):
        return
    inits = pod["spec"].setdefault("initContainers", [])
    if any(isinstance(c, dict) and c.get("name") == "wait-for-master" for c in inits):
        return
    addr, port = _master_addr(job, master, tasks), _go_int(args.get("port"), 23456)
    timeout = _go_int(args.get("wait-master-timeout"), WAIT_MASTER_TIMEOUT)
    script = (
        f'echo "Waiting for master node {addr}:{port} to be ready..."\n'
        f"TIMEOUT={timeout}\n"
        "ELAPSED=0\n"
        f"until {{ nc -z {addr} {port} || echo > /dev/tcp/{addr}/{port}; }} 2>/dev/null; do\n"
        "  if [ $ELAPSED -ge $TIMEOUT ]; then\n"
        '    echo "Timeout waiting for master after ${TIMEOUT} seconds"\n'
        "    exit 1\n"
        "  fi\n"
        '  echo "Master not ready yet, retrying in 2 seconds... (elapsed: ${ELAPSED}s)"\n'
        "  sleep 2\n"
        "  ELAPSED=$((ELAPSED + 2))\n"
        "done\n"
        'echo "Master node is ready!"'
    )
    inits.append({"name": "wait-for-master", "image": args.get("wait-master-image", WAIT_MASTER_IMAGE),
                  "command": ["sh", "-c", script]})  # fmt: skip


def _pytorch_env(job: str, task: str, index: int, args: dict[str, str], counts: dict[str, int],
                 tasks: list[Obj]) -> list[Obj]:  # fmt: skip
    """Volcano's pytorch plugin: every pod gets the master's address, port and the world size;
    the master's pods rank 0, a worker's its index + 1 (whatever the master's replicas)."""
    master, worker = args.get("master") or "master", args.get("worker") or "worker"
    port = args.get("port") or "23456"
    world = counts.get(master, 0) + counts.get(worker, 0)
    host = _master_addr(job, master, tasks)
    env = [literal("MASTER_ADDR", host), literal("MASTER_PORT", port), literal("WORLD_SIZE", str(world))]
    if task == worker:
        env.append(literal("RANK", str(index + 1)))
    elif task == master:
        env.append(literal("RANK", "0"))
    return env


def configmaps(obj: Obj) -> dict[str, dict[str, str]]:
    """The svc plugin's ConfigMap `<job>-svc`: each task's host list and count (the env of its pods)."""
    spec = as_dict(obj.get("spec"))
    if "svc" not in as_dict(spec.get("plugins")):
        return {}
    name = name_of(obj)
    data: dict[str, str] = {}
    for t in spec.get("tasks") or []:
        task, n = str(t.get("name")), integer(t.get("replicas"), 1, f"Volcano Job {name}: replicas")
        data[f"VC_{_env_name(task)}_HOSTS"] = ",".join(f"{name}-{task}-{i}.{name}" for i in range(n))
        data[f"VC_{_env_name(task)}_NUM"] = str(n)
    return {f"{name}-svc": data}
