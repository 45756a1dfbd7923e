"""The preview against the wrapper, on generated pods (issue 65): for each pod of a job of every
launcher the preview expands, whose command is drawn from the forms published job files use,
the preview's row (backend, endpoint, store host, node count, local address, refusal) equals
the decision the wrapper's rules make on the argv **real bash** hands torchrun, with the env
the kubelet gives the container (a fake `torchrun` first on PATH records argv and env), or the
row says that value is decided at run time, and why. Never a value that differs.

Deterministic (derandomize: the same examples each run, no database to keep); the examples'
count is HOSTNET_RDMA_DIFF_EXAMPLES (default: a few dozen in `make check`, 1,500 in the slow
run of `make test`). The two field reports of the issue are pinned as cases of their own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import preview
from app.core import wrap
from app.preview import shellread
from app.wrapper import rules
from tests.test_corpus import RUNTIME, _container, preview_with_configmaps

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sh") is None, reason="needs bash, sh")

RUN_TIME = preview.RUN_TIME
JOB = "dj"
# What a value known only when the pod runs is, in the run: a secret, a uid, the node's name.
SECRET = "dj-worker-0.dj"
UID = "dj-0b9f"
NODE = "node-a"

# ------------------------------------------------------------------------- a job of each launcher
_VOLCANO = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": JOB},
            "spec": {"minAvailable": 2, "schedulerName": "volcano", "plugins": {"env": [], "svc": []},
                     "tasks": [{"name": "worker", "replicas": 2, "template": None}]}}  # fmt: skip
_VOLCANO_PYTORCH = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": JOB},
                    "spec": {"minAvailable": 2, "schedulerName": "volcano", "plugins": {"pytorch": ["--port=23456"]},
                             "tasks": [{"name": "master", "replicas": 1, "template": None},
                                       {"name": "worker", "replicas": 1, "template": None}]}}  # fmt: skip
_PYTORCHJOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": JOB},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": None},
                                                "Worker": {"replicas": 1, "template": None}}}}  # fmt: skip
_JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": JOB},
           "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
               "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": None}}}]}}  # fmt: skip
_INDEXED = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": None}}  # fmt: skip
_STATEFULSET = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": JOB},
                "spec": {"serviceName": JOB, "replicas": 2, "selector": {"matchLabels": {"app": JOB}},
                         "template": None}}  # fmt: skip
_LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": JOB},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": None}}}  # fmt: skip
_TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": JOB},
             "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}  # fmt: skip
LAUNCHERS = ("volcano", "volcano-pytorch", "pytorchjob", "jobset", "indexed-job", "statefulset", "lws", "trainjob")


def _fill(x: Any, template: dict[str, Any]) -> Any:
    if isinstance(x, dict):
        return {k: (template if v is None and k in ("template", "workerTemplate") else _fill(v, template))
                for k, v in x.items()}  # fmt: skip
    if isinstance(x, list):
        return [_fill(v, template) for v in x]
    return x


def job_file(launcher: str, container: dict[str, Any]) -> list[dict[str, Any]]:
    """The job of `launcher` whose pods run `container` (host network, as the webhook's users run)."""
    labels = {"app": JOB} if launcher == "statefulset" else {}
    container = {**container, "resources": {"limits": {"nvidia.com/gpu": 8}}}
    spec: dict[str, Any] = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "containers": [container]}
    if launcher == "indexed-job":
        spec |= {"subdomain": JOB, "restartPolicy": "Never"}
    template = {"metadata": {"labels": labels}, "spec": spec}
    if launcher == "trainjob":
        trainer = {k: v for k, v in container.items() if k in ("command", "args", "env")}
        job = yaml.safe_load(yaml.safe_dump(_TRAINJOB))
        job["spec"]["trainer"] |= trainer
        runtime = yaml.safe_load(RUNTIME.read_text())
        runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] |= {
            "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}  # fmt: skip
        return [job, runtime]
    shape = {"volcano": _VOLCANO, "volcano-pytorch": _VOLCANO_PYTORCH, "pytorchjob": _PYTORCHJOB, "jobset": _JOBSET,
             "indexed-job": _INDEXED, "statefulset": _STATEFULSET, "lws": _LWS}[launcher]  # fmt: skip
    out: dict[str, Any] = _fill(shape, template)
    return [out]


# ------------------------------------------------------------------------- real bash, fake torchrun
FAKE_TORCHRUN = """#!/bin/sh
: > "$ARGV_OUT"
for a in "$@"; do printf '%s\\0' "$a" >> "$ARGV_OUT"; done
/usr/bin/env -0 > "$ARGV_OUT.env"
"""
# `python -m torch.distributed.run ARGS` is torchrun ARGS; any other python program runs nothing here.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && { [ "$2" = torch.distributed.run ] || [ "$2" = torch.distributed.launch ]; }; then
  shift 2; exec torchrun "$@"
fi
"""


# What scripts run besides torchrun: successes that do nothing (sh has no command_not_found_handle).
OTHERS = ("git", "pip", "rm", "tee", "nvidia-smi")


@dataclass
class Ran:
    argv: list[str]
    env: dict[str, str]


def run_bash(argv: list[str], env: dict[str, str], tmp: Path) -> Ran | None:
    """What torchrun gets when the container runs `argv` (as the kubelet expanded it) with `env`:
    real bash (or sh), only the fakes on PATH; None when no torchrun ran."""
    bindir = tmp / "bin"
    if not bindir.exists():
        bindir.mkdir()
        for name, text in (("torchrun", FAKE_TORCHRUN), ("python", FAKE_PYTHON), ("python3", FAKE_PYTHON),
                           ("hostname", f"#!/bin/sh\necho {NODE}\n"), *((n, "#!/bin/sh\n") for n in OTHERS)):  # fmt: skip
            (bindir / name).write_text(text)
            (bindir / name).chmod(0o755)
        (bindir / "env").symlink_to(shutil.which("env") or "/usr/bin/env")  # `env FOO=1 torchrun`
        # What else the script runs (git, pip, cd into a clone) is not there: each is a success.
        (tmp / "bash_env").write_text(
            'command_not_found_handle() { return 0; }\ncd() { builtin cd "$@" 2>/dev/null || true; }\n'
        )
    out = tmp / "argv"
    for f in (out, tmp / "argv.env"):
        f.unlink(missing_ok=True)
    run_env = {**env, "PATH": str(bindir), "ARGV_OUT": str(out), "HOME": str(tmp), "BASH_ENV": str(tmp / "bash_env")}
    if argv[:1] == ["/usr/bin/env"]:
        argv = argv[1:]
    shells = {"bash": shutil.which("bash"), "/bin/bash": shutil.which("bash"), "sh": shutil.which("sh")}
    if argv[0] in shells:
        argv = [str(shells[argv[0]]), *argv[1:]]
    else:
        argv = [str(bindir / os.path.basename(argv[0])), *argv[1:]]
    subprocess.run(argv, env=run_env, cwd=tmp, capture_output=True, timeout=30, check=False)
    if not out.exists():
        return None
    words = out.read_bytes().split(b"\0")[:-1]
    pairs = (tmp / "argv.env").read_bytes().split(b"\0")[:-1]
    got = dict(p.decode().split("=", 1) for p in pairs)
    for k in ("PATH", "ARGV_OUT", "HOME", "BASH_ENV", "PWD", "SHLVL", "_", "OLDPWD"):
        if k not in env:
            got.pop(k, None)
    return Ran([w.decode() for w in words], got)


# ------------------------------------------------------------------------- the oracle
def pod_env_at_run_time(r: preview.Row, configmaps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The env the kubelet gives the container: what the preview knows, and a value for each
    name it knows only at run time (a secret, a uid, the node's host name)."""
    assert r.result is not None
    c = _container(r)
    kubelet = preview.kubelet_env(r.result.pod, c, configmaps)
    env = dict(preview.runtime_env(r.result.pod, c, configmaps))
    for name in kubelet.unknown:
        env[name] = UID if name == "JOB_ID" else SECRET
    env.setdefault("HOSTNAME", NODE)  # the host network's: the node's
    return env


def _matches(shown: str, actual: str) -> bool:
    """A row's value with RUN_TIME standing for what only the run knows."""
    if RUN_TIME not in shown:
        return shown == actual
    return re.fullmatch(".*".join(re.escape(p) for p in shown.split(RUN_TIME)), actual, re.S) is not None


def check_row(r: preview.Row, ran: Ran | None, settings_value: str, zone: str) -> str:
    """Assert the row agrees with the wrapper's decision on what bash gave torchrun; what was compared."""
    said = (r.pod, r.backend, r.endpoint, r.store_host, r.nnodes, r.local_addr, r.refusal, r.run_time)
    if ran is None:  # no torchrun in the run (a script the file does not hold): the row must not say one
        assert r.backend.startswith(("decided at run time", "no torchrun", "env://", "the program's own")), said
        return "no torchrun"
    if RUN_TIME in r.endpoint + r.local_addr + r.nnodes or r.store_host == "decided at run time":
        assert r.run_time or r.backend.startswith("decided at run time"), said  # and why
    if r.backend.startswith("decided at run time"):  # nothing previewed, and why
        assert "(" in r.backend or ":" in r.backend, said
        return "run time"
    env = rules.unpack({**ran.env, rules.ENV_POD: settings_value}, zone)
    try:
        _, plan = rules.merge(ran.argv, env)
    except rules.ArgvError as e:
        assert str(e) in r.refusal, (said, ran.argv, e)
        return "argv refused"
    may_refuse = "may refuse" in r.run_time
    if plan.fatal:
        assert may_refuse or plan.fatal in r.refusal, (said, ran.argv, plan.fatal)
        return "refused"
    assert not r.refusal, (said, ran.argv)
    # Nor does admission's warning claim a refusal the wrapper will not make.
    assert not any("wrapper will refuse" in w for w in r.warnings), (said, ran.argv, r.warnings)
    assert r.backend == plan.backend, (said, ran.argv, plan.backend)
    if plan.backend == "static":
        argv = rules.Argv(ran.argv)
        rank = rules.effective(argv, env, "--node-rank")[0]
        host = "yes" if rank == "0" else "no" if rank else "node rank 0"
        assert r.store_host in (host, "decided at run time"), (said, ran.argv, rank)
        assert _matches(r.nnodes, rules.effective(argv, env, "--nnodes")[0] or "1"), (said, ran.argv)
        assert _matches(r.endpoint or "-", plan.endpoint or "-"), (said, ran.argv, plan.endpoint)
        return "static"
    assert _matches(r.endpoint or "-", plan.endpoint or "-"), (said, ran.argv, plan.endpoint)
    assert _matches(r.local_addr, plan.local_addr), (said, ran.argv, plan.local_addr)
    assert _matches(r.nnodes, plan.nnodes), (said, ran.argv, plan.nnodes)
    if plan.backend in rules.ETCD_BACKENDS:
        want = "- (etcd)"
    elif plan.is_host is not None:
        want = "yes" if plan.is_host.strip().lower() in ("true", "1") else "no"
    elif plan.endpoint_problem:
        want = "decided on the node by its addresses"
    else:
        want = ""
    assert r.store_host in (want, "decided at run time"), (said, ran.argv, plan.is_host, want)
    assert r.store_host != "decided at run time" or r.run_time, said
    return "partly run time" if r.run_time else "previewed"


def differential(docs: list[dict[str, Any]], tmp: Path) -> list[tuple[preview.Row, str]]:
    """Each wrapped training pod of the file, previewed and run; the rows with what was compared."""
    rows, _, configmaps = preview_with_configmaps(docs)
    out = []
    for r in rows:
        if r.result is None or r.result.info is None or not r.result.training or not wrap.is_wrapped(_container(r)):
            continue
        c = _container(r)
        env = pod_env_at_run_time(r, configmaps)
        kubelet = preview.kubelet_env(r.result.pod, c, configmaps)
        argv = shellread.kubelet_argv(wrap.original_argv(c), kubelet)
        ran = run_bash(argv, env, tmp)
        zone = f"{r.result.pod['metadata'].get('namespace') or 'default'}.svc.cluster.local"
        out.append((r, check_row(r, ran, wrap.settings_of(c) or "", zone)))
    return out


# ------------------------------------------------------------------------- the field reports
def _field_script(endpoint: str, backend: str) -> str:
    return (
        "torchrun \\\n"
        "--rdzv-id=$JOB_ID \\\n"
        f"--rdzv-backend={backend} \\\n"
        f"--rdzv-endpoint={endpoint} \\\n"
        """--local_addr=$(IFS=',' read -ra workers <<< "$VC_WORKER_HOSTS"; echo "${workers[VC_TASK_INDEX]}") \\\n"""
        "--nproc_per_node=1 \\\n"
        "--nnodes=$VC_WORKER_NUM \\\n"
        "/opt/app/train.py \\\n"
        "--epochs=10\n"
    )


JOB_ID = {
    "name": "JOB_ID",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['scheduling.k8s.io/group-name']"}},
}
ETCD = _field_script("etcd-store-headless:2379", "etcd-v2")
C10D = _field_script("""$(IFS=',' read -ra workers <<< "$VC_WORKER_HOSTS"; echo "${workers[0]}"):23456""", "c10d")


@pytest.mark.parametrize("launcher", ["volcano", "pytorchjob"])
@pytest.mark.parametrize(("script", "endpoint", "store"), [
    (ETCD, "etcd-store-headless:2379", "- (etcd)"), (C10D, f"{RUN_TIME}:23456", "decided at run time"),
], ids=["etcd", "c10d"])  # fmt: skip
def test_a_flag_of_run_time_keeps_the_commands_other_rendezvous_flags(
    launcher: str, script: str, endpoint: str, store: str, tmp_path: Path
) -> None:
    """The guide's shape: `torchrun \\` one flag a line, `--rdzv-id=$JOB_ID` (a uid the pod has
    only at run time), `--local_addr=$(... read -ra ...)`. The preview said c10d at the launcher's
    default endpoint, store host yes on worker 0 (the uid's stand-in split the words, and every
    rendezvous flag after it read as the script's); the job's own endpoint is the truth."""
    container = {"name": "worker", "image": "example.com/detector:1", "command": ["/bin/bash", "-c", script],
                 "env": [JOB_ID]}  # fmt: skip
    compared = differential(job_file(launcher, container), tmp_path)
    assert len(compared) == 2, compared
    for r, _ in compared:
        assert r.endpoint == endpoint and r.store_host == store, (r.pod, r.endpoint, r.store_host, r.backend)
        assert r.backend == ("etcd-v2" if script == ETCD else "c10d") and not r.refusal
        assert r.local_addr == RUN_TIME and "--local-addr=$(IFS=" in r.run_time
    if launcher == "volcano":
        assert {r.nnodes for r, _ in compared} == {"2"}


GIT_RUN = (
    "export NODE_RANK=$RANK && unset RANK && rm -rf /dev/shm/* && "
    "RECIPES=/workspace/recipes RUN_ID=0 GBS=128 MOCK_DATA=true "
    "bash /workspace/recipes/training/llm/run_gpt_5b.sh "
)


@pytest.mark.parametrize("command", [["/usr/bin/env", "bash", "-c"], ["/bin/bash", "-c"], ["bash"]])
def test_a_script_the_file_does_not_hold_is_named_never_no_torchrun(command: list[str], tmp_path: Path) -> None:
    """`/usr/bin/env bash -c` with the script in args, running `A=1 B=2 bash /workspace/.../run.sh`
    (torchrun inside it, from a mounted or cloned repository): the preview said "no torchrun: the
    program starts torch.distributed itself"."""
    args = ["-c", GIT_RUN] if command == ["bash"] else [GIT_RUN]
    container = {"name": "pytorch", "image": "example.com/llm:1", "command": command, "args": args}
    compared = differential(job_file("pytorchjob", container), tmp_path)
    assert len(compared) == 2
    for r, what in compared:
        assert what == "no torchrun"
        assert r.backend.startswith("decided at run time: the command runs bash /workspace/recipes/training/llm/run_gpt"), (
            r.backend)  # fmt: skip
        assert "the wrapper catches torchrun inside it" in r.backend and r.store_host == "decided at run time"
        assert not any("no torchrun" in w for w in r.warnings), r.warnings


# ------------------------------------------------------------------------- the generated pods
VC_READ = """IFS=',' read -ra HOSTS <<< "$VC_WORKER_HOSTS\""""
# (text, needs bash): values of each rendezvous option as job files write them.
VALUES: dict[str, list[str]] = {
    "nnodes": ["2", "1:2", "$VC_WORKER_NUM", "${WORLD_SIZE}", "$PET_NNODES", "$(NNODES_K)", "$NOPE", "$SECRET_N",
               '"$NNODES_E"', "${NOPE:-2}", "${NOPE2:=2}", "${#HOSTS[@]}", "$((1+1))", '"$SECRET_N"'],
    "rdzv-backend": ["c10d", "etcd-v2", "etcd", "$SECRET_B", "c10d"],
    "rdzv-endpoint": ["dj-worker-0.dj:23456", "$MASTER_ADDR:$MASTER_PORT", "etcd-store:2379", "127.0.0.1:29500",
                      "10.0.0.5:29400", "$(hostname):29400", "$SECRET_EP:29400", "${HOSTS[0]}:29500",
                      """$(IFS=',' read -ra w <<< "$VC_WORKER_HOSTS"; echo "${w[0]}"):23456""", "$(EP_K)",
                      "$POD_NAME:29500", "$HOSTNAME:29500"],
    "rdzv-id": ["$JOB_ID", "42", "$NOPE", "none", "$(JOB_ID)"],
    "rdzv-conf": ["is_host=true", 'is_host=$(if [ "$VC_TASK_INDEX" = 0 ]; then echo true; else echo false; fi)',
                  "timeout=900", "$SECRET_C"],
    "node-rank": ["$RANK", "$VC_TASK_INDEX", "0", "$NODE_RANK", "${JOB_COMPLETION_INDEX}", "$SECRET_N"],
    "master-addr": ["$MASTER_ADDR", "dj-master-0", "${HOSTS[0]}", "$(hostname)", "`hostname`", '"$MASTER_ADDR"'],
    "master-port": ["23456", "$MASTER_PORT"],
    "local-addr": ["$(hostname)", "$HOSTNAME", "$POD_NAME", "127.0.0.1", "$SECRET_EP",
                   """$(IFS=',' read -ra w <<< "$VC_WORKER_HOSTS"; echo "${w[VC_TASK_INDEX]}")"""],
    "nproc-per-node": ["8", "gpu", "$GPUS"],
    "max-restarts": ["3"],
}  # fmt: skip
PRELUDE = ["export NODE_RANK=$RANK", "unset RANK", "cd /tmp", "git clone https://example.com/acme/r.git",
           "pip install -r requirements.txt", "FOO=1", "export PET_NNODES=2", VC_READ,
           "export MASTER_ADDR=${HOSTS[0]}", "export GPUS=8", "unset PET_NNODES", "export NNODES_E=2",
           "export PET_RDZV_ENDPOINT=$MASTER_ADDR:23456", "echo starting", "set -e", "export NNODES_E=${WORLD_SIZE:-2}",
           ". /dev/null", "N=${#HOSTS[@]}", "export PET_NODE_RANK=$VC_TASK_INDEX"]  # fmt: skip
POD_ENV = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, JOB_ID,
           {"name": "SECRET_EP", "valueFrom": {"secretKeyRef": {"name": "s", "key": "ep"}}},
           {"name": "SECRET_N", "valueFrom": {"secretKeyRef": {"name": "s", "key": "n"}}},
           {"name": "SECRET_B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "b"}}},
           {"name": "SECRET_C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "c"}}},
           {"name": "NNODES_K", "value": "2"}, {"name": "EP_K", "value": "$(POD_NAME):29400"}]  # fmt: skip
_BASHISMS = ("<<<", "${HOSTS", "${w[", "read -ra", "${#HOSTS")


FORMS = ("bash -c", "bash -c args", "sh -c", "env bash -c", "bash args -c", "argv", "image script", "clone script")


@st.composite
def pods(draw: st.DrawFn) -> tuple[str, dict[str, Any], str]:
    """(launcher, container, the form's name)."""
    launcher = draw(st.sampled_from(LAUNCHERS))
    names = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=0, max_size=6, unique=True))
    flags = []
    for name in names:
        value = draw(st.sampled_from(VALUES[name]))
        if "'" not in value and '"' not in value and draw(st.integers(0, 5)) == 0:
            value = f'"{value}"'  # quoted: one field, whatever it holds
        spelled = name.replace("-", "_") if draw(st.booleans()) else name
        flags.append(f"--{spelled}={value}" if draw(st.booleans()) else f"--{spelled} {value}")
    if draw(st.integers(0, 20)) == 0:
        flags.append("--standalone")
    program = draw(st.sampled_from(["torchrun", "torchrun", "python -m torch.distributed.run",
                                    "python3 -m torch.distributed.run"]))  # fmt: skip
    script_args = draw(st.sampled_from(["", "--epochs 1", "--nnodes 3 --lr=0.1", '"$@"']))
    prefix = draw(st.sampled_from(["", "NCCL_DEBUG=INFO ", "A=1 B=2 ", "PET_NNODES=2 ", "exec ", "env FOO=1 "]))
    form = draw(st.sampled_from(FORMS))
    if form == "argv":  # no shell: the kubelet's $(VAR) only
        words = [w for f in flags if "$(" not in f or re.search(r"\$\([A-Z_]+\)", f) for w in f.split(" ", 1)]
        words = [w for w in words if "$" not in w or re.fullmatch(r"[^$]*(\$\([A-Z_]+\)[^$]*)*", w)]
        argv = [*program.split(), *words, "train.py", *script_args.split()]
        split = draw(st.integers(1, len(argv)))  # command, then args
        return (
            launcher,
            {"name": "c", "image": "x", "command": argv[:split], "args": argv[split:], "env": POD_ENV},
            form,
        )
    if form == "image script":
        return launcher, {"name": "c", "image": "x", "command": ["bash", "/workspace/launch.sh"], "env": POD_ENV}, form
    prelude = draw(st.lists(st.sampled_from(PRELUDE), max_size=4))
    multi = draw(st.booleans())
    sep = " \\\n  " if multi else " "
    run = prefix + sep.join([program, *flags, "train.py", *([script_args] if script_args else [])])
    if form == "clone script":
        run = prefix + "bash /workspace/r/examples/run_big.sh"
    joiner = draw(st.sampled_from(["\n", " && ", " ; "]))
    script = joiner.join([*prelude, run]) + draw(st.sampled_from(["", "\n", " 2>&1 | tee /tmp/log"]))
    if form == "sh -c" and any(b in script for b in _BASHISMS):
        form = "bash -c"
    command, args = {"bash -c": (["/bin/bash", "-c", script], None), "bash -c args": (["/bin/bash", "-c"], [script]),
                     "sh -c": (["sh", "-c", script], None), "env bash -c": (["/usr/bin/env", "bash", "-c"], [script]),
                     "bash args -c": (["bash"], ["-c", script]), "clone script": (["bash", "-c", script], None)}[form]  # fmt: skip
    container: dict[str, Any] = {"name": "c", "image": "x", "command": command, "env": POD_ENV}
    if args is not None:
        container["args"] = args
    return launcher, container, form


def _examples(default: int) -> int:
    return int(os.environ.get("HOSTNET_RDMA_DIFF_EXAMPLES") or default)


SEEN: dict[str, set[str]] = {"launchers": set(), "forms": set(), "compared": set(), "pods": set()}


def _one(case: tuple[str, dict[str, Any], str], tmp: Path) -> None:
    launcher, container, form = case
    compared = differential(job_file(launcher, container), tmp)
    assert compared, (launcher, container)
    SEEN["launchers"].add(launcher)
    SEEN["forms"].add(form)
    SEEN["compared"].update(what for _, what in compared)
    SEEN["pods"].add(f"{launcher} {len(SEEN['pods'])}")


def _settings(n: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return settings(max_examples=n, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip


@given(case=pods())
@_settings(_examples(40))
def test_the_preview_is_the_wrappers_decision_on_generated_pods(case: tuple[str, dict[str, Any], str],
                                                                 tmp_path: Path) -> None:  # fmt: skip
    _one(case, tmp_path)


@pytest.mark.slow
@given(case=pods())
@_settings(_examples(1500))
def test_the_preview_is_the_wrappers_decision_on_many_generated_pods(case: tuple[str, dict[str, Any], str],
                                                                      tmp_path: Path) -> None:  # fmt: skip
    _one(case, tmp_path)


def test_the_generated_pods_cover_every_launcher_and_form() -> None:
    """Run after the generated tests (file order): they reached every launcher and form, and
    compared previewed values, not only rows of run time."""
    if len(SEEN["pods"]) < 1000:
        pytest.skip("the slow generated test did not run (make check runs a few dozen pods only)")
    assert SEEN["launchers"] == set(LAUNCHERS), SEEN
    assert SEEN["forms"] == set(FORMS), SEEN["forms"]
    assert {"previewed", "partly run time", "run time", "no torchrun", "refused", "static"} <= SEEN["compared"], SEEN
