"""Every rendezvous decision against torch itself: for each launcher shape and each form of
endpoint a user writes, the real torchrun runs through the wrapper on two seed-like nodes (each
node's name resolves to 127.0.1.1 on itself and not at all on the other). Every case must end
one of two ways: the job completes with exactly one store host, or the wrapper refuses in
seconds with its named cause. Never a timeout, never a pod training alone.

The pods are mutated by the webhook's core and their final command runs as the container would
run it (bootstrap -> wrapper -> real torchrun), as in test_rendezvous.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.core import InjectConfig, Params, mutate
from app.wrapper import payload
from tests.rendezvous.test_rendezvous import (
    PORT,
    SCRIPT,
    Run,
    assert_completed,
    base_env,
    indexed_pod,
    report,
    wait_all,
    wrapper_line,
)
from tests.rendezvous.testbed import NAMESPACE, ZONE, Node, Testbed, stop

pytestmark = pytest.mark.rendezvous

# Short waits where the test controls them: every name the job needs is in the nodes' hosts
# files from the start, so a DNS wait only ever runs out for a name that never resolves.
PARAMS = Params(InjectConfig(dns_timeout_seconds=4), NAMESPACE, payload(), "test")
REFUSAL_BOUND = 30.0  # "in seconds": the slowest refusal is the DNS wait (4 s) plus start-up
SERVICE = "trainer-svc"  # a Service in front of pod 0 (over hostNetwork: node 0's address)


def _meta(name: str, labels: dict[str, str], owner: dict[str, str], generate: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": NAMESPACE, "labels": labels, "ownerReferences": [owner]}
    meta["generateName" if generate else "name"] = name + ("-" if generate else "")
    return meta


def _pod(meta: dict[str, Any], spec: dict[str, Any], command: list[str], env: dict[str, str]) -> dict[str, Any]:
    container = {"name": "trainer", "image": "pytorch", "command": command,
                 "env": [{"name": k, "value": v} for k, v in env.items()]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {**spec, "hostNetwork": True, "containers": [container]}}  # fmt: skip


def volcano(job: str, i: int, command: list[str]) -> dict[str, Any]:
    name = f"{job}-worker-{i}"
    labels = {"volcano.sh/job-name": job, "volcano.sh/task-spec": "worker", "volcano.sh/task-index": str(i)}
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job, "uid": f"{job}-uid"}
    pod = _pod(_meta(name, labels, owner), {"hostname": name, "subdomain": job}, command, {"VC_TASK_INDEX": str(i)})
    for key in ("HOSTS", "NUM"):
        ref = {"configMapKeyRef": {"name": f"{job}-svc", "key": f"worker.{key.lower()}"}}
        pod["spec"]["containers"][0]["env"].append({"name": f"VC_WORKER_{key}", "valueFrom": ref})
    return pod


def pytorchjob(job: str, i: int, command: list[str]) -> dict[str, Any]:
    """As the Training Operator creates it: no hostname/subdomain, a Service per pod named like
    it, the operator's endpoint env (the command line overrides it)."""
    labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(i)}  # fmt: skip
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job, "uid": f"{job}-uid"}
    env = {"PET_RDZV_ENDPOINT": f"{job}-worker-0:{PORT}", "PET_RDZV_BACKEND": "c10d", "PET_NNODES": "2:2"}
    return _pod(_meta(f"{job}-worker-{i}", labels, owner), {}, command, env)


def jobset(js: str, i: int, command: list[str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """As JobSet v0.10.1 creates it (tests/golden/jobset/v0.10.1-workers-0-1.yaml): generateName,
    hostname <js>-<rjob>-<job>-<index> under the JobSet's headless Service."""
    labels = {"jobset.sigs.k8s.io/jobset-name": js, "jobset.sigs.k8s.io/jobset-uid": f"{js}-uid",
              "jobset.sigs.k8s.io/replicatedjob-name": "workers", "jobset.sigs.k8s.io/job-index": "0",
              "jobset.sigs.k8s.io/replicatedjob-replicas": "1", "batch.kubernetes.io/job-completion-index": str(i)}  # fmt: skip
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": f"{js}-workers-0", "uid": f"{js}-job-uid"}
    meta = _meta(f"{js}-workers-0-{i}", labels, owner, generate=True)
    if annotations:
        meta["annotations"] = annotations
    return _pod(meta, {"hostname": f"{js}-workers-0-{i}", "subdomain": js}, command, {})


def job(name: str, i: int, command: list[str]) -> dict[str, Any]:
    pod = indexed_pod(name, i, command)
    pod["metadata"]["namespace"] = NAMESPACE
    return pod


LAUNCHERS = {"volcano": volcano, "pytorchjob": pytorchjob, "jobset": jobset, "job": job}


def pod_names(launcher: str, job_name: str, i: int) -> tuple[str, str]:
    """The pod's DNS name as the launcher makes it, short and fully qualified."""
    short = {
        "volcano": f"{job_name}-worker-{i}.{job_name}",
        "pytorchjob": f"{job_name}-worker-{i}",
        "jobset": f"{job_name}-workers-0-{i}.{job_name}",
        "job": f"{job_name}-{i}.{job_name}",
    }[launcher]
    return short, f"{short}.{ZONE}"


# form -> (endpoint host, given node addresses; the outcome: the index of the node whose pod
# hosts the store, or the cause each refusing node logs).
def endpoint_for(form: str, launcher: str, job_name: str, bed: Testbed) -> str:
    short, fqdn = pod_names(launcher, job_name, 0)
    return {
        "pod DNS short": short,
        "pod DNS FQDN": fqdn,
        "node 0's IP": bed.nodes[0].address,
        "another node's IP": bed.nodes[1].address,
        "node name": bed.nodes[0].name,
        "Service name": SERVICE,
        "loopback": "localhost",
    }[form]


FORMS: dict[str, tuple[int | None, dict[int, str]]] = {
    "pod DNS short": (0, {}),
    "pod DNS FQDN": (0, {}),
    "node 0's IP": (0, {}),
    "another node's IP": (1, {}),
    "Service name": (0, {}),
    # Node 0 hosts (its own host name); node 1 cannot resolve node 0's name: it refuses.
    "node name": (None, {1: "rendezvous endpoint node-0 does not resolve on this node and names no pod of this job"}),
    "loopback": (None, {i: "rendezvous endpoint localhost is loopback, but the job runs on several nodes" for i in (0, 1)}),
}  # fmt: skip


def launch(bed: Testbed, node: Node, pod: dict[str, Any], tmp: Path, runtime_env: dict[str, str]) -> Run:
    mutated = mutate(pod, PARAMS).pod
    c = mutated["spec"]["containers"][0]
    name = mutated["metadata"].get("name") or mutated["spec"]["hostname"]
    env = {**base_env(), **{e["name"]: e["value"] for e in c.get("env", []) if "value" in e}, **runtime_env}
    bin_dir = tmp / f"{name}-bin"
    bin_dir.mkdir()
    env["HOSTNET_RDMA_BIN_DIR"] = str(bin_dir)
    log = tmp / f"{name}.log"
    return Run(name, node, bed.popen(node, [*c["command"], *c.get("args", [])], env, log), log)


def place(bed: Testbed, launcher: str, job_name: str) -> None:
    for i, node in enumerate(bed.nodes):
        bed.add_pod(node, *pod_names(launcher, job_name, i))
    bed.extra_hosts[SERVICE] = bed.nodes[0].address
    bed.write_hosts()


def wait_refused(runs: list[Run], refusers: dict[int, str]) -> float:
    """Wait (bounded) for the nodes expected to refuse, then stop every run."""
    start = time.monotonic()
    for i in refusers:
        try:
            runs[i].proc.wait(timeout=max(0.1, REFUSAL_BOUND - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            break
    elapsed = time.monotonic() - start
    for r in runs:
        stop(r.proc)
    return elapsed


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_every_endpoint_form_completes_with_one_store_host_or_refuses_in_seconds(
    bed: Testbed, tmp_path: Path, launcher: str, form: str
) -> None:
    job_name = "ef"
    place(bed, launcher, job_name)
    endpoint = endpoint_for(form, launcher, job_name, bed)
    command = ["torchrun", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={endpoint}:{PORT}", SCRIPT]  # fmt: skip
    runtime = {"VC_WORKER_NUM": "2"}  # what Volcano's ConfigMap gives at run time
    runs = [
        launch(bed, n, LAUNCHERS[launcher](job_name, i, command), tmp_path, runtime) for i, n in enumerate(bed.nodes)
    ]
    host, refusers = FORMS[form]
    if host is not None:
        report(f"{launcher} x {form}: completed", wait_all(runs))
        assert_completed(runs, world=2)
        lines = [wrapper_line(r) for r in runs]
        assert [("is_host=true" in line) for line in lines] == [i == host for i in range(2)], lines
        return
    elapsed = wait_refused(runs, refusers)
    report(f"{launcher} x {form}: refused", elapsed)
    assert elapsed < REFUSAL_BOUND, [r.output[-2000:] for r in runs]
    for i, cause in refusers.items():
        out = runs[i].output
        assert runs[i].proc.returncode == 1, out[-3000:]
        assert f"hostnet-rdma: error: {cause}" in out, out[-3000:]
        assert "DDP-OK" not in out
    if form == "node name":  # the node the name is: its pod recognised itself
        assert "is_host=true" in wrapper_line(runs[0])


def test_a_jobset_with_no_node_count_refuses_instead_of_training_alone(bed: Testbed, tmp_path: Path) -> None:
    """Plain `torchrun train.py` in a JobSet: the webhook's default endpoint makes it c10d, and
    torchrun's default of one node would let pod 0 complete a rendezvous by itself. Both pods
    refuse at once, saying what to set; with the annotation the same job trains together."""
    place(bed, "jobset", "nn")
    command = ["torchrun", "--nproc-per-node=1", SCRIPT]
    runs = [launch(bed, n, jobset("nn", i, command), tmp_path, {}) for i, n in enumerate(bed.nodes)]
    elapsed = wait_refused(runs, {0: "", 1: ""})
    report("jobset without --nnodes: refused", elapsed)
    for r in runs:
        assert r.proc.returncode == 1, r.output[-3000:]
        assert "hostnet-rdma: error: --nnodes not given: this pod is one of its job's several (jobset)" in r.output
        assert "nnodes=?" in wrapper_line(r) and "DDP-OK" not in r.output
    assert elapsed < REFUSAL_BOUND
    annotated = tmp_path / "annotated"
    annotated.mkdir()
    ann = {"hostnet-rdma.io/nnodes": "2"}
    runs = [launch(bed, n, jobset("nn", i, command, ann), annotated, {}) for i, n in enumerate(bed.nodes)]
    report("jobset with hostnet-rdma.io/nnodes: 2: completed", wait_all(runs))
    assert_completed(runs, world=2)
    assert ["is_host=true" in wrapper_line(r) for r in runs] == [True, False]


def test_torch_itself_does_not_recognise_an_ip_endpoint_on_these_nodes(bed: Testbed) -> None:
    """What the wrapper corrects, checked by running torch's own test on the node: torchrun's
    is_host default compares the endpoint with gethostname() and the addresses that name
    resolves to (127.0.1.1 on the seed's nodes), so node 0's own address is not "this machine"."""
    code = (
        "import sys; from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname as m; "
        "print([m(h) for h in sys.argv[1:]])"
    )
    n0 = bed.nodes[0]
    argv = [sys.executable, "-c", code, n0.address, n0.name, "localhost"]
    out = subprocess.run(bed.command(n0, argv), capture_output=True, text=True, timeout=120, env=base_env())
    assert out.returncode == 0, out.stderr
    # node 0's IP: not recognised; its host name and loopback: recognised.
    assert out.stdout.strip().splitlines()[-1] == "[False, True, True]", out.stdout
