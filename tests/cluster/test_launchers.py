"""The real launchers in the cluster tier: their own controllers create the pods.

LeaderWorkerSet (with its own pod webhook, so our reinvocation runs against the real one),
JobSet, Kubeflow Trainer v2 (TrainJob on JobSet), Training Operator v1 (PyTorchJob) and the
MPI Operator (MPIJob, held to the preview only) are
built from the Go module proxy at pinned releases and installed from their own manifests
(tests/cluster/launchers.py). Each runs the file in deploy/examples/ with only these changes:
the CPU training image, the GPU request swapped for a one-per-node test resource (as 8 GPUs
would place them), --nproc-per-node 8 -> 2, and torch mounted read-only from the test machine.
The same jobs in a namespace that is not opted in show the seed's symptoms. Volcano (its
controller-manager, scheduler and admission webhook-manager) is built from the module proxy or,
where the proxy refuses it, the source snapshot in third_party/.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core import InjectConfig, names
from app.core.mutate import job_port
from tests.cluster import launchers
from tests.cluster.conftest import torch_sites
from tests.cluster.followed import again, ddp_ok, first_finished_run, trained_alone
from tests.cluster.harness import ROOT, Cluster, log
from tests.cluster.held import held_to
from tests.cluster.release import OFF, RELEASE_NS, image_ref
from tests.cluster.timings import TIMINGS
from tests.seedfiles import plain_torchrun
from tests.test_corpus import host_network, pod_specs, preview_of

pytestmark = pytest.mark.cluster

EXAMPLES = ROOT / "deploy" / "examples"
SCRIPT = ROOT / "tests" / "rendezvous" / "ddp_train.py"
ML = "ml"  # the examples' namespace (deploy/examples/namespace.yaml, opted in)
GPU = "test.hostnet-rdma.io/gpu"  # one per node, standing in for nvidia.com/gpu: 8
NPROC = 2
WRAPPER_LINE = re.compile(r"^hostnet-rdma: (launcher=.*)$", re.M)
# All of them; a developer iterating on one may narrow it (never CI: a missing one fails).
WANTED = os.environ.get(
    "HOSTNET_RDMA_TEST_LAUNCHERS", "jobset,lws,trainer,training-operator,mpi-operator,volcano,kueue"
).split(",")
SEED = ROOT / "tests" / "cluster" / "seed"


# ------------------------------------------------------------------------------ set-up


@pytest.fixture(scope="module")
def installed(cluster: Cluster, release: dict[str, Any]) -> dict[str, float]:
    times = launchers.install_all(cluster, WANTED)
    TIMINGS.update({f"install {name}" if name != "all" else "install all launchers (side by side)": t
                    for name, t in times.items()})  # fmt: skip
    # The examples select BM.GPU4.8 nodes and ask for GPUs: give the CPU nodes that shape.
    cluster.kubectl("label", "node", "--all", "node.kubernetes.io/instance-type=BM.GPU4.8", "--overwrite")
    for node in cluster.nodes:
        cluster.kubectl("patch", "node", node, "--subresource=status", "--type=json",
                        "-p", json.dumps([{"op": "add", "path": f"/status/capacity/{GPU.replace('/', '~1')}",
                                           "value": "1"}]))  # fmt: skip
    namespace = yaml.safe_load((EXAMPLES / "namespace.yaml").read_text())
    launchers.apply_with_retry(cluster, [namespace])
    for ns in (ML, OFF):
        deadline = time.monotonic() + 60
        while cluster.kubectl("get", "sa", "default", "-n", ns, check=False) == "":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ddp-script", "namespace": ns},
              "data": {"train.py": SCRIPT.read_text()}}  # fmt: skip
        launchers.apply_with_retry(cluster, [cm])
    return times


def example(name: str, namespace: str, image: str, sites: list[Path], source: Path = EXAMPLES) -> list[dict[str, Any]]:
    """deploy/examples/<name>.yaml (or <source>/<name>.yaml) with the test-machine changes
    listed in the module docstring."""
    docs = [d for d in yaml.safe_load_all((source / f"{name}.yaml").read_text()) if d]
    mounts = [{"name": f"torch-{i}", "mountPath": f"/opt/torch/{i}", "readOnly": True} for i in range(len(sites))]
    volumes = [{"name": f"torch-{i}", "hostPath": {"path": str(s), "type": "Directory"}} for i, s in enumerate(sites)]
    pythonpath = {"name": "PYTHONPATH", "value": ":".join(f"/opt/torch/{i}" for i in range(len(sites)))}

    def gpu(resources: dict[str, Any]) -> None:
        for kind in ("limits", "requests"):
            if "nvidia.com/gpu" in (resources.get(kind) or {}):
                resources[kind].pop("nvidia.com/gpu")
                resources[kind][GPU] = 1

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("containers"), list) and any("image" in c for c in x["containers"]):
                x.setdefault("volumes", []).extend(copy.deepcopy(volumes))
                for c in x["containers"]:
                    c["image"], c["imagePullPolicy"] = image, "Never"
                    gpu(c.setdefault("resources", {}))
                    c.setdefault("volumeMounts", []).extend(copy.deepcopy(mounts))
                    c.setdefault("env", []).append(dict(pythonpath))
                    for key in ("command", "args"):
                        if key in c:
                            c[key] = [a.replace("--nproc-per-node=8", f"--nproc-per-node={NPROC}") for a in c[key]]
            if "resourcesPerNode" in x:
                gpu(x["resourcesPerNode"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for d in docs:
        if d.get("metadata", {}).get("namespace") or d.get("kind") == "Job":  # the seed's files name none
            d["metadata"]["namespace"] = namespace
        walk(d)
    return docs


# ------------------------------------------------------------------------------ helpers


class LogFollower:
    """`kubectl logs -f` for every pod of a selector as it appears: pods that a controller
    deletes right after they finish (LeaderWorkerSet recreates a group) keep their logs here.
    Followed per pod UID and container restart, so a pod recreated under the same name, or a
    container restarted in place, is read again; `logs` joins them under the pod's name."""

    def __init__(self, c: Cluster, ns: str, selector: str) -> None:
        self.c, self.ns, self.selector = c, ns, selector
        self._logs: dict[str, str] = {}  # written by the follow threads: read it through `logs`
        self.followed: set[tuple[str, int]] = set()
        self.procs: list[subprocess.Popen[str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @property
    def logs(self) -> dict[str, str]:
        """A copy: the follow threads add pods and lines while a test reads it."""
        with self.lock:
            return dict(self._logs)

    def run(self) -> None:
        while not self.stop.is_set():
            items = self.c.kubectl_json("get", "pods", "-n", self.ns, "-l", self.selector)["items"]
            for p in items:
                name, uid = p["metadata"]["name"], p["metadata"]["uid"]
                statuses = p["status"].get("containerStatuses", [])
                running = any("running" in s.get("state", {}) or "terminated" in s.get("state", {}) for s in statuses)
                key = (uid, sum(int(s.get("restartCount", 0)) for s in statuses))
                if key not in self.followed and running:
                    self.followed.add(key)
                    with self.lock:
                        if name in self._logs:  # the same name again: a new pod or a restarted container
                            self._logs[name] += again(name, uid, key[1])
                        else:
                            self._logs[name] = ""
                    threading.Thread(target=self.follow, args=(name,), daemon=True).start()
            self.stop.wait(0.5)

    def follow(self, name: str) -> None:
        p = subprocess.Popen([str(self.c.bin / "kubectl"), "logs", "-f", "-n", self.ns, name], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.c.env())  # fmt: skip
        self.procs.append(p)
        assert p.stdout is not None
        for line in p.stdout:
            with self.lock:
                self._logs[name] += line

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.kill()


def wrapper_fields(text: str) -> dict[str, str]:
    m = WRAPPER_LINE.search(text)
    assert m, f"no wrapper line:\n{text[-3000:]}"
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def condition(c: Cluster, kind: str, ns: str, name: str, wanted: tuple[str, ...], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = c.kubectl_json("get", kind, name, "-n", ns)
        for cond in obj.get("status", {}).get("conditions", []):
            if cond.get("status") == "True" and cond["type"] in wanted:
                return str(cond["type"])
        time.sleep(1)
    return "timeout"


def pods(c: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return items


def logs_of(c: Cluster, ns: str, selector: str) -> dict[str, str]:
    return {p["metadata"]["name"]: c.kubectl("logs", "-n", ns, p["metadata"]["name"], check=False)
            for p in pods(c, ns, selector)}  # fmt: skip


def _ends(text: str, n: int = 1500) -> str:
    return text if len(text) <= 2 * n else f"{text[:n]}\n[... {len(text) - 2 * n} chars ...]\n{text[-n:]}"


def failure_report(c: Cluster, ns: str, selector: str) -> str:
    """Every pod of a failed job: status, restarts, the start and end of its log and of the
    previous container's (restartPolicy OnFailure hides the first failure otherwise)."""
    out = []
    for p in pods(c, ns, selector):
        name = p["metadata"]["name"]
        statuses = p.get("status", {}).get("containerStatuses") or []
        restarts = [s.get("restartCount", 0) for s in statuses]
        out.append(f"=== {name}: phase {p.get('status', {}).get('phase')}, restarts {restarts}")
        out.append(_ends(c.kubectl("logs", "-n", ns, name, check=False)))
        if any(restarts):
            out.append(f"--- {name}, previous container:")
            out.append(_ends(c.kubectl("logs", "-n", ns, name, "--previous", check=False)))
    return "\n".join(out)


def check_one_store_host(found: dict[str, str], launcher: str, world: int) -> list[dict[str, str]]:
    fields = [wrapper_fields(text) for text in found.values()]
    assert all(f["launcher"] == launcher for f in fields), fields
    hosts = [f["is_host"] for f in fields]
    assert hosts.count("true") == 1, f"exactly one store host per job, got {hosts}"
    assert sum(ddp_ok(t, world) for t in found.values()) == world, "\n---\n".join(found.values())[-4000:]
    return fields


def injected_events(c: Cluster, kind: str, name: str, launcher: str, pods: int) -> list[str]:
    """`kubectl describe` of the job until its Injected Events count every pod (the sender
    flushes each second). Each webhook replica keeps its own count, as each instance of a
    controller does with client-go's recorder: one line per replica that admitted a pod."""
    deadline = time.monotonic() + 20
    while True:
        described = c.kubectl("describe", kind, name, "-n", ML)
        lines = [ln for ln in described.splitlines() if re.search(r"\bInjected\b", ln)]
        counted = sum(int(m.group(1)) if (m := re.search(r"\(x(\d+) over", ln)) else 1 for ln in lines)
        if counted >= pods:
            break
        assert time.monotonic() < deadline, described[-3000:]
        time.sleep(1)
    assert counted == pods and 1 <= len(lines) <= 2, lines  # the chart runs two replicas
    assert all("hostnet-rdma.io/webhook" in ln and f"launcher {launcher}" in ln for ln in lines), lines
    return lines


def read_back(c: Cluster, ns: str, selector: str, case: str, source: tuple[str, str] | None = None) -> None:
    """Keep one real pod per launcher as the API server stored it, in the run's logs, to
    compare with the golden inputs (tests/golden) when an adapter is in doubt. With `source`
    (kind, name): the preview's pods of that object as stored (`hostnet-rdma mutate -f`'s
    expansion) must be the real controller's (tests/cluster/held.py)."""
    items = pods(c, ns, selector)
    if items:
        (c.logs / f"pod-{case}.json").write_text(json.dumps(items[0], indent=1, sort_keys=True))
    if source is not None:
        obj = c.kubectl_json("get", source[0], source[1], "-n", ns)
        runtimes = c.kubectl_json("get", "clustertrainingruntimes")["items"] if source[0] == "trainjob" else []
        assert items, f"no pods of {source} to hold the preview to"
        assert held_to([obj], items, runtimes) == [], held_to([obj], items, runtimes)


def run_job(
    cluster: Cluster, docs: list[dict[str, Any]], kind: str, name: str, selector: str, done: str, timing: str
) -> dict[str, str]:
    """Apply a launcher's job, wait until it reaches `done` (or fails), record the time, and
    return its pods' logs; a failure shows every pod's status and logs."""
    t0 = time.monotonic()
    launchers.apply_with_retry(cluster, docs)
    outcome = condition(cluster, kind, ML, name, (done, "Failed"), 300)
    TIMINGS[timing] = time.monotonic() - t0
    found = logs_of(cluster, ML, selector)
    assert outcome == done, failure_report(cluster, ML, selector)
    return found


# ------------------------------------------------------------------------------ jobs


def test_pytorchjob_elastic_completes(cluster: Cluster, installed: dict[str, float]) -> None:
    """Training Operator v1, elastic c10d: the operator's endpoint names worker-0; exactly that pod hosts."""
    found = run_job(cluster, example("pytorchjob", ML, image_ref(cluster, "train"), torch_sites()), "pytorchjob",
                    "ddp-pytorchjob", "training.kubeflow.org/job-name=ddp-pytorchjob", "Succeeded",
                    "PyTorchJob (elastic c10d) to Succeeded")  # fmt: skip
    fields = check_one_store_host(found, "pytorchjob", world=2 * NPROC)
    host = next(f for f in fields if f["is_host"] == "true")
    assert host["local_addr"] == "ddp-pytorchjob-worker-0" and host["endpoint"].startswith("ddp-pytorchjob-worker-0:")
    uid = cluster.kubectl_json("get", "pytorchjob", "ddp-pytorchjob", "-n", ML)["metadata"]["uid"]
    assert all(f["rdzv_id"] == uid for f in fields), fields
    read_back(
        cluster,
        ML,
        "training.kubeflow.org/job-name=ddp-pytorchjob",
        "pytorchjob-worker",
        ("pytorchjob", "ddp-pytorchjob"),
    )
    # What the webhook did, where the job's submitter looks: an Event on the PyTorchJob, one
    # for both pods (the sender flushes each second).
    t0 = time.monotonic()
    injected_events(cluster, "pytorchjob", "ddp-pytorchjob", "pytorchjob", pods=2)
    TIMINGS["PyTorchJob: wait after Succeeded until kubectl describe counts Injected for both pods"] = (
        time.monotonic() - t0
    )


def test_leaderworkerset_completes_with_the_real_lws_webhook(cluster: Cluster, installed: dict[str, float]) -> None:
    """LWS's own pod webhook adds LWS_* env after ours; reinvocation makes the defaults hold."""
    t0 = time.monotonic()
    follower = LogFollower(cluster, ML, "leaderworkerset.sigs.k8s.io/name=ddp-lws")
    try:
        launchers.apply_with_retry(cluster, example("leaderworkerset", ML, image_ref(cluster, "train"), torch_sites()))
        deadline, done = time.monotonic() + 300, {}
        while time.monotonic() < deadline:
            # The first finished run of each pod, taken now: the group's containers exit 0, so
            # LWS restarts them and recreates the group, and later runs add to the logs.
            done = {n: r for n, t in follower.logs.items() if (r := first_finished_run(t, 2 * NPROC))}
            if len(done) >= 2:
                break
            time.sleep(1)
        TIMINGS["LeaderWorkerSet group to both DDP-OK"] = time.monotonic() - t0
        read_back(
            cluster,
            ML,
            "leaderworkerset.sigs.k8s.io/name=ddp-lws",
            "lws-leader-or-worker",
            ("leaderworkerset", "ddp-lws"),
        )
        found = dict(sorted(done.items())[:2])
    finally:
        follower.close()
        cluster.kubectl("delete", "leaderworkerset", "ddp-lws", "-n", ML, "--wait=false", check=False)
    assert len(found) == 2, json.dumps(follower.logs, indent=1)[-4000:]
    fields = check_one_store_host(found, "lws", world=2 * NPROC)
    host = next(f for f in fields if f["is_host"] == "true")
    assert host["local_addr"] == "ddp-lws-0.ddp-lws", fields
    assert all(f["nnodes"] == "2" for f in fields), fields


def test_trainjob_completes(cluster: Cluster, installed: dict[str, float]) -> None:
    """Kubeflow Trainer v2 on JobSet: static rendezvous (PET_MASTER_ADDR) once DNS is right."""
    found = run_job(cluster, example("trainjob", ML, image_ref(cluster, "train"), torch_sites()), "trainjob",
                    "ddp-trainjob", "jobset.sigs.k8s.io/jobset-name=ddp-trainjob", "Complete", "TrainJob to Complete")  # fmt: skip
    fields = [wrapper_fields(t) for t in found.values()]
    assert all(f["launcher"] == "trainjob" and f["backend"] == "static" for f in fields), fields
    # Trainer sets --nproc-per-node itself ("auto": the CPUs here): every rank must see one
    # world spanning both pods.
    worlds = {int(w) for t in found.values() for w in re.findall(r"^DDP-OK rank=\d+ world=(\d+)", t, re.M)}
    assert len(worlds) == 1, worlds
    world = worlds.pop()
    assert len(found) == 2 and sum(ddp_ok(t, world) for t in found.values()) == world
    assert all(ddp_ok(t, world) < world for t in found.values()), "each pod must hold only part of the world"
    read_back(cluster, ML, "jobset.sigs.k8s.io/jobset-name=ddp-trainjob", "trainjob-node", ("trainjob", "ddp-trainjob"))
    cluster.kubectl("delete", "trainjob", "ddp-trainjob", "-n", ML, "--wait=false")


def test_plain_jobset_completes_with_the_default_endpoint(cluster: Cluster, installed: dict[str, float]) -> None:
    found = run_job(cluster, example("jobset", ML, image_ref(cluster, "train"), torch_sites()), "jobset",
                    "ddp-jobset", "jobset.sigs.k8s.io/jobset-name=ddp-jobset", "Completed", "JobSet to Completed")  # fmt: skip
    fields = check_one_store_host(found, "jobset", world=2 * NPROC)
    uid = cluster.kubectl_json("get", "jobset", "ddp-jobset", "-n", ML)["metadata"]["uid"]
    port = job_port(InjectConfig(), uid)  # each job's store its own port on the host network
    assert all(f["endpoint"] == f"ddp-jobset-workers-0-0.ddp-jobset:{port}" for f in fields), fields
    read_back(cluster, ML, "jobset.sigs.k8s.io/jobset-name=ddp-jobset", "jobset-worker", ("jobset", "ddp-jobset"))
    cluster.kubectl("delete", "jobset", "ddp-jobset", "-n", ML, "--wait=false")


def test_two_jobs_on_the_same_nodes_at_once_each_get_a_store_port(
    cluster: Cluster, installed: dict[str, float]
) -> None:
    """Two JobSets of one rank per node, on the same two nodes at the same time (no GPU request,
    so nothing keeps them apart), each with the webhook's default endpoint: on the host network
    their stores would bind one node port. Each job's store gets its own port; both complete."""
    docs: list[dict[str, Any]] = []
    for name in ("ddp-js-a", "ddp-js-b"):
        (js,) = example("jobset", ML, image_ref(cluster, "train"), torch_sites())
        js["metadata"]["name"] = name
        pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        for c in pod["containers"]:
            c.get("resources", {}).get("limits", {}).pop(GPU, None)
            c.get("resources", {}).get("requests", {}).pop(GPU, None)
            c["command"] = [a.replace(f"--nproc-per-node={NPROC}", "--nproc-per-node=1") for a in c["command"]]
        docs.append(js)
    t0 = time.monotonic()
    launchers.apply_with_retry(cluster, docs)
    try:
        ports = []
        for name in ("ddp-js-a", "ddp-js-b"):
            outcome = condition(cluster, "jobset", ML, name, ("Completed", "Failed"), 300)
            selector = f"jobset.sigs.k8s.io/jobset-name={name}"
            assert outcome == "Completed", failure_report(cluster, ML, selector)
            fields = check_one_store_host(logs_of(cluster, ML, selector), "jobset", world=2)
            ports.append({f["endpoint"].rsplit(":", 1)[1] for f in fields})
        TIMINGS["two JobSets on the same nodes at once, both Completed"] = time.monotonic() - t0
        assert all(len(p) == 1 for p in ports) and ports[0] != ports[1], ports
        started = [p["status"].get("startTime") for n in ("ddp-js-a", "ddp-js-b")
                   for p in pods(cluster, ML, f"jobset.sigs.k8s.io/jobset-name={n}")]  # fmt: skip
        log(f"two jobs at once: store ports {ports}, pods started {sorted(started)}")
    finally:
        for name in ("ddp-js-a", "ddp-js-b"):
            cluster.kubectl("delete", "jobset", name, "-n", ML, "--wait=false", check=False)


def test_two_stores_forced_onto_one_port_on_one_node_wait_for_each_other(
    cluster: Cluster, installed: dict[str, float]
) -> None:
    """Two JobSets pinned to one store port (hostnet-rdma.io/rdzv-port) and to one node: without
    the port declared, the second store would fail to bind while the first job runs. The webhook
    declares it on each store host, so the scheduler holds the second one Pending (free ports)
    until the first job is done; then it runs, and both complete."""
    port = "24999"
    node = cluster.nodes[0]
    docs: list[dict[str, Any]] = []
    for name in ("ddp-port-a", "ddp-port-b"):
        (js,) = example("jobset", ML, image_ref(cluster, "train"), torch_sites())
        js["metadata"]["name"] = name
        tmpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        tmpl.setdefault("metadata", {}).setdefault("annotations", {})["hostnet-rdma.io/rdzv-port"] = port
        pod = tmpl["spec"]
        pod["nodeSelector"] = {**pod.get("nodeSelector", {}), "kubernetes.io/hostname": node}
        for c in pod["containers"]:
            c.get("resources", {}).get("limits", {}).pop(GPU, None)
            c.get("resources", {}).get("requests", {}).pop(GPU, None)
            # One rank a pod; the waiting job's other pod keeps trying the store for 5 minutes.
            c["command"] = [
                x
                for a in c["command"]
                for x in (
                    ["--nproc-per-node=1", "--rdzv-conf=read_timeout=300"] if a == f"--nproc-per-node={NPROC}" else [a]
                )
            ]
        docs.append(js)
    t0 = time.monotonic()
    launchers.apply_with_retry(cluster, docs[:1])
    wait_for(lambda: any(p["status"].get("phase") == "Running"
                         for p in pods(cluster, ML, "jobset.sigs.k8s.io/jobset-name=ddp-port-a")), 120, "job a running")  # fmt: skip
    launchers.apply_with_retry(cluster, docs[1:])
    try:
        held = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not held:
            for p in pods(cluster, ML, "jobset.sigs.k8s.io/jobset-name=ddp-port-b"):
                for cond in p["status"].get("conditions") or []:
                    if cond.get("type") == "PodScheduled" and "free ports" in (cond.get("message") or ""):
                        held = f"{p['metadata']['name']}: {cond['message']}"
            time.sleep(1)
        assert held, "job b's store host was never held back by the port"
        log(f"held by the scheduler: {held}")
        for name in ("ddp-port-a", "ddp-port-b"):
            outcome = condition(cluster, "jobset", ML, name, ("Completed", "Failed"), 400)
            selector = f"jobset.sigs.k8s.io/jobset-name={name}"
            assert outcome == "Completed", failure_report(cluster, ML, selector)
            fields = check_one_store_host(logs_of(cluster, ML, selector), "jobset", world=2)
            assert {f["endpoint"].rsplit(":", 1)[1] for f in fields} == {port}, fields
        TIMINGS["two stores pinned to one port on one node: the second Pending, then both Completed"] = (
            time.monotonic() - t0
        )
    finally:
        for name in ("ddp-port-a", "ddp-port-b"):
            cluster.kubectl("delete", "jobset", name, "-n", ML, "--wait=false", check=False)


def wait_for(ready: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(1)


def seed_trainjob(cluster: Cluster, job_file: str) -> list[dict[str, Any]]:
    """The field report's Trainer v2.3.0 runtime and a TrainJob of its, as written, with the
    test-machine changes; the namespace's label is the opt-in (no pod label)."""
    image, sites = image_ref(cluster, "train"), torch_sites()
    (runtime,) = example("trainer-v2-runtime", ML, image, sites, SEED)
    (job,) = example(job_file, ML, image, sites, SEED)
    job["metadata"]["namespace"] = ML
    return [runtime, job]


def check_trainjob(found: dict[str, str]) -> list[dict[str, str]]:
    fields = [wrapper_fields(t) for t in found.values()]
    assert all(f["launcher"] == "trainjob" and f["backend"] == "static" for f in fields), fields
    worlds = {int(w) for t in found.values() for w in re.findall(r"^DDP-OK rank=\d+ world=(\d+)", t, re.M)}
    assert len(worlds) == 1, worlds
    world = worlds.pop()
    assert len(found) == 2 and sum(ddp_ok(t, world) for t in found.values()) == world, found
    assert all(ddp_ok(t, world) < world for t in found.values()), "each pod must hold only part of the world"
    return fields


def users_env_kept(c: Cluster, selector: str, runtime: dict[str, Any]) -> None:
    """Every env value the user's runtime set is in the stored pod unchanged (never overwritten)."""
    (container,) = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"]  # fmt: skip
    wanted = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for p in pods(c, ML, selector):
        (node,) = [x for x in p["spec"]["containers"] if x["name"] == "node"]
        got = {e["name"]: e.get("value") for e in node.get("env", [])}
        assert {k: got.get(k) for k in wanted} == wanted, (p["metadata"]["name"], got)
        assert p["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_seed_trainjob_v2_3_as_written(cluster: Cluster, installed: dict[str, float]) -> None:
    """The field report's trainer-v2-runtime.yaml and trainer-v2-trainjob.yaml on Trainer v2.3.0
    (runtimePatches: the script's ConfigMap): its own dnsPolicy, NCCL env, RDMA volumes and
    capabilities kept as written; static rendezvous on PET_MASTER_ADDR, node 0 the store."""
    docs = seed_trainjob(cluster, "trainer-v2-trainjob")
    selector = "jobset.sigs.k8s.io/jobset-name=ddp-rdma"
    try:
        found = run_job(cluster, docs, "trainjob", "ddp-rdma", selector, "Complete",
                        "TrainJob (the seed's, Trainer v2.3.0) to Complete")  # fmt: skip
        check_trainjob(found)
        users_env_kept(cluster, selector, docs[0])
        read_back(cluster, ML, selector, "trainjob-seed-node", ("trainjob", "ddp-rdma"))
    finally:
        cluster.kubectl("delete", "trainjob", "ddp-rdma", "-n", ML, "--wait=true", "--timeout=60s", check=False)


# ------------------------------------------------------------------------------ Kueue

TOPOLOGY = ("oci.oraclecloud.com/rdma.hpc_island_id", "oci.oraclecloud.com/rdma.network_block_id",
            "oci.oraclecloud.com/rdma.local_block_id")  # fmt: skip


def islands(c: Cluster, *ids: str) -> None:
    """The OCI RDMA topology labels, one island id per node (its blocks its own)."""
    for node, island in zip(c.nodes, ids, strict=True):
        c.kubectl("label", "node", node, f"{TOPOLOGY[0]}={island}", f"{TOPOLOGY[1]}=block-{node}",
                  f"{TOPOLOGY[2]}=local-{node}", "--overwrite")  # fmt: skip


def kueue_queues(source: Path, name: str, nodes: int) -> list[dict[str, Any]]:
    """Topology, ResourceFlavor, ClusterQueue and LocalQueue as written, the GPU quota scaled to
    the test nodes (one test GPU each) and the LocalQueue in the examples' namespace."""
    docs = [d for d in yaml.safe_load_all((source / f"{name}.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "LocalQueue":
            d["metadata"]["namespace"] = ML
        if d["kind"] == "ClusterQueue":
            for group in d["spec"]["resourceGroups"]:
                group["coveredResources"] = [GPU if r == "nvidia.com/gpu" else r for r in group["coveredResources"]]
                for flavor in group["flavors"]:
                    for r in flavor["resources"]:
                        if r["name"] == "nvidia.com/gpu":
                            r["name"], r["nominalQuota"] = GPU, nodes
    return [d for d in docs if d["kind"] != "TrainJob"]


def workload_of(c: Cluster, trainjob: str) -> dict[str, Any]:
    items = c.kubectl_json("get", "workloads", "-n", ML)["items"]
    mine = [w for w in items if any(o.get("name") == trainjob for o in w["metadata"].get("ownerReferences", []))]
    return mine[0] if mine else {}


def admitted(w: dict[str, Any]) -> bool:
    return any(x["type"] == "Admitted" and x["status"] == "True" for x in w.get("status", {}).get("conditions", []))


def admissions(c: Cluster, since: str, prefix: str) -> dict[str, list[str]]:
    """The webhook's own admission log lines (both replicas) since a time, per pod name (at
    CREATE a controller's pod has only its generateName): the outcome of each call, sorted (the
    two calls of one pod may reach different replicas)."""
    text = c.kubectl("logs", "-n", RELEASE_NS, "-l", "app.kubernetes.io/component=webhook", f"--since-time={since}",
                     "--prefix=false", "--tail=-1")  # fmt: skip
    lines = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{") and '"msg":"admission"' in ln]
    out: dict[str, list[str]] = {}
    for x in lines:
        if x.get("pod", "").startswith(prefix):
            out.setdefault(x["pod"], []).append(x["outcome"])
    return {k: sorted(v) for k, v in out.items()}


def test_kueue_topology_aware_trainjob(cluster: Cluster, installed: dict[str, float]) -> None:
    """Kueue topology-aware scheduling with the field report's Topology / ResourceFlavor /
    ClusterQueue / LocalQueue and its trainer-v2-trainjob-kueue.yaml. Nodes in two islands: the
    Workload stays pending (the job needs one island) and no pod exists. Both nodes put in one
    island: Kueue admits it, its pods carry Kueue's topology gate and our mutation both (ours
    re-run after Kueue's pod webhook), Kueue ungates them onto the nodes it chose, and the job
    completes with node 0 the store. Then deploy/examples/trainjob-kueue.yaml the same way."""
    # Kueue's visibility API is an aggregated APIService: available only because the test API
    # server has the aggregation layer (front-proxy), as kubeadm sets it up.
    for version in ("v1beta1", "v1beta2"):
        svc = cluster.kubectl_json("get", "apiservice", f"{version}.visibility.kueue.x-k8s.io")
        conditions = {x["type"]: x["status"] for x in svc.get("status", {}).get("conditions", [])}
        assert conditions.get("Available") == "True", svc.get("status")
    islands(cluster, "island-a", "island-b")
    launchers.apply_with_retry(cluster, kueue_queues(SEED, "kueue-rdma-topology", len(cluster.nodes)))
    docs = seed_trainjob(cluster, "trainer-v2-trainjob-kueue")
    selector = "jobset.sigs.k8s.io/jobset-name=ddp-rdma-kueue"
    try:
        t0 = time.monotonic()
        launchers.apply_with_retry(cluster, docs)
        # Pending, bounded: Kueue has seen it (a Workload with its reason) and nothing runs.
        while True:
            w = workload_of(cluster, "ddp-rdma-kueue")
            pending = [x for x in w.get("status", {}).get("conditions", []) if x["type"] == "QuotaReserved"]
            if pending and pending[0]["status"] == "False" and time.monotonic() - t0 > 20:
                break
            assert time.monotonic() - t0 < 90, w
            time.sleep(1)
        assert not admitted(w) and pods(cluster, ML, selector) == [], (w, pods(cluster, ML, selector))
        log(f"kueue, two islands: pending: {pending[0].get('message')}")
        TIMINGS["Kueue TrainJob, nodes in two islands: pending (checked for)"] = time.monotonic() - t0
        t1 = time.monotonic()
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        islands(cluster, "island-a", "island-a")
        outcome = condition(cluster, "trainjob", ML, "ddp-rdma-kueue", ("Complete", "Failed"), 300)
        TIMINGS["Kueue TrainJob (the seed's), one island: relabel to Complete"] = time.monotonic() - t1
        found = logs_of(cluster, ML, selector)
        assert outcome == "Complete", failure_report(cluster, ML, selector)
        check_trainjob(found)
        w = workload_of(cluster, "ddp-rdma-kueue")
        assert admitted(w), w
        topology = w["status"]["admission"]["podSetAssignments"][0].get("topologyAssignment")
        assert topology, w["status"]["admission"]
        stored = cluster.kubectl_json("get", "pods", "-n", ML, "-l", selector, "--show-managed-fields")["items"]
        for p in stored:
            meta = p["metadata"]
            assert meta["annotations"].get("kueue.x-k8s.io/podset-required-topology") == TOPOLOGY[0], meta
            assert "hostnet-rdma.io/injected" in meta["annotations"] and "kueue.x-k8s.io/podset" in meta["labels"]
            assert not p["spec"].get("schedulingGates"), p["spec"].get("schedulingGates")  # ungated
            assert p["spec"]["nodeName"] in cluster.nodes
        read_back(cluster, ML, selector, "trainjob-kueue-node")
        managers = [(m.get("manager"), m.get("operation"), m.get("subresource")) for p in stored
                    for m in p["metadata"].get("managedFields", [])]  # fmt: skip
        # Kueue's gate was on the pod we admitted: the API server records who removed it and
        # set the node it chose (an Update after our CREATE).
        ungated = [f for p in stored for f in p["metadata"]["managedFields"]
                   if f["operation"] == "Update" and "f:nodeSelector" in f["fieldsV1"].get("f:spec", {})]  # fmt: skip
        assert [f["manager"] for f in ungated] == ["kueue"] * len(stored), managers
        assert all(p["spec"]["nodeSelector"].get("kubernetes.io/hostname") == p["spec"]["nodeName"] for p in stored)
        # Each pod was admitted by us twice: mutated, then re-invoked after the webhooks that
        # came after ours (JobSet's and Kueue's pod webhooks) and left as it was.
        outcomes = admissions(cluster, since, "ddp-rdma-kueue-node-")
        assert len(outcomes) == 2 and all(o == ["mutated", "unchanged"] for o in outcomes.values()), outcomes
        users_env_kept(cluster, selector, docs[0])
        cluster.kubectl("delete", "trainjob", "ddp-rdma-kueue", "-n", ML, "--wait=true", "--timeout=60s")
        # The project's own example (on deploy/examples/trainjob.yaml's runtime), on the queues
        # as applied from it.
        image, sites = image_ref(cluster, "train"), torch_sites()
        runtime = [d for d in example("trainjob", ML, image, sites) if d["kind"] == "ClusterTrainingRuntime"]
        launchers.apply_with_retry(cluster, runtime + kueue_queues(EXAMPLES, "trainjob-kueue", len(cluster.nodes)))
        job = [d for d in example("trainjob-kueue", ML, image, sites) if d["kind"] == "TrainJob"]
        found = run_job(cluster, job, "trainjob", "ddp-trainjob-kueue",
                        "jobset.sigs.k8s.io/jobset-name=ddp-trainjob-kueue", "Complete",
                        "Kueue TrainJob (deploy/examples/trainjob-kueue.yaml) to Complete")  # fmt: skip
        check_trainjob(found)
        assert admitted(workload_of(cluster, "ddp-trainjob-kueue"))
    finally:
        for name in ("ddp-rdma-kueue", "ddp-trainjob-kueue"):
            cluster.kubectl("delete", "trainjob", name, "-n", ML, "--wait=true", "--timeout=60s", check=False)


@pytest.fixture(autouse=True)
def free_nodes(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    """Every test here starts on nodes no earlier test's pods still hold (their GPUs, their
    host ports): a job deleted without waiting (LeaderWorkerSet's idle pods) keeps its pods for
    their grace period, and Kueue's topology-aware admission counts their GPUs (a Kueue job run
    right after the LeaderWorkerSet one was never admitted: one node's GPU still taken)."""
    waited = wait_for_free_nodes(cluster)
    if waited > 1:
        TIMINGS[f"{request.node.name}: wait for free nodes"] = waited


@pytest.fixture
def etcd_v2(cluster: Cluster) -> Iterator[str]:
    """An etcd with the v2 API on the cluster bridge, as the seed's etcd-v2 runs used."""
    port = 2379  # etcd's own: the seed's Volcano job names it; the control plane's is on loopback
    url = f"http://{cluster.net.host_ip}:{port}"
    data = cluster.workdir / "rdzv-etcd"
    proc = subprocess.Popen(
        [str(cluster.bin / "etcd"), "--name=rdzv", f"--data-dir={data}", "--enable-v2",
         f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
         "--listen-peer-urls=http://127.0.0.1:23801", "--initial-advertise-peer-urls=http://127.0.0.1:23801",
         "--initial-cluster=rdzv=http://127.0.0.1:23801", "--unsafe-no-fsync"],
        stdout=(cluster.logs / "rdzv-etcd.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        time.sleep(2)
        yield f"{cluster.net.host_ip}:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_pytorchjob_etcd_v2_same_name_twice(cluster: Cluster, installed: dict[str, float], etcd_v2: str) -> None:
    """The seed's etcd-v2 variant: the operator sets no rendezvous id, so the second job of the
    same name met RendezvousClosedError. With the webhook's unique id both complete."""
    host, port = etcd_v2.split(":")
    for attempt in (1, 2):
        docs = example("pytorchjob", ML, image_ref(cluster, "train"), torch_sites())
        job = docs[0]
        job["metadata"]["name"] = "ddp-etcd"
        job["spec"]["elasticPolicy"].update({"rdzvBackend": "etcd-v2", "rdzvHost": host, "rdzvPort": int(port)})
        found = run_job(cluster, docs, "pytorchjob", "ddp-etcd", "training.kubeflow.org/job-name=ddp-etcd",
                        "Succeeded", f"PyTorchJob etcd-v2 run {attempt}")  # fmt: skip
        fields = [wrapper_fields(t) for t in found.values()]
        assert all(f["backend"] == "etcd-v2" and f["is_host"] == "-" for f in fields), fields
        cluster.kubectl("delete", "pytorchjob", "ddp-etcd", "-n", ML, "--wait=true", "--timeout=60s")


def volcano_phase(c: Cluster, ns: str, name: str, timeout: float) -> str:
    """A Volcano Job's end: its status.state.phase (its conditions carry no type)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = (c.kubectl_json("get", "vcjob", name, "-n", ns).get("status", {}).get("state") or {}).get("phase")
        if phase in ("Completed", "Failed", "Aborted", "Terminated"):
            return str(phase)
        time.sleep(1)
    return "timeout"


def run_volcano(cluster: Cluster, docs: list[dict[str, Any]], name: str, timing: str) -> dict[str, str]:
    t0 = time.monotonic()
    launchers.apply_with_retry(cluster, docs)
    phase = volcano_phase(cluster, ML, name, 300)
    TIMINGS[timing] = time.monotonic() - t0
    selector = f"volcano.sh/job-name={name}"
    found = logs_of(cluster, ML, selector)
    assert phase == "Completed", f"phase {phase}\n" + failure_report(cluster, ML, selector)
    return found


def test_volcano_example_completes(cluster: Cluster, installed: dict[str, float]) -> None:
    """deploy/examples/volcano-job.yaml on the real Volcano (scheduler, controller-manager, its
    own admission webhooks): plain torchrun; the webhook derives endpoint, node count and id
    from the svc/env plugins' pods; worker-0 hosts. What the webhook did shows on the vcjob."""
    found = run_volcano(cluster, example("volcano-job", ML, image_ref(cluster, "train"), torch_sites()),
                        "ddp-volcano", "Volcano Job (example) to Completed")  # fmt: skip
    fields = check_one_store_host(found, "volcano", world=2 * NPROC)
    host = next(f for f in fields if f["is_host"] == "true")
    assert host["local_addr"] == "ddp-volcano-worker-0.ddp-volcano", fields
    uid = cluster.kubectl_json("get", "vcjob", "ddp-volcano", "-n", ML)["metadata"]["uid"]
    endpoint = f"ddp-volcano-worker-0.ddp-volcano:{job_port(InjectConfig(), uid)}"
    assert all(f["endpoint"] == endpoint and f["nnodes"] == "2" for f in fields), fields
    assert all(f["rdzv_id"] == uid for f in fields), fields
    read_back(cluster, ML, "volcano.sh/job-name=ddp-volcano", "volcano-worker", ("vcjob", "ddp-volcano"))
    injected_events(cluster, "vcjob", "ddp-volcano", "volcano", pods=2)
    cluster.kubectl("delete", "vcjob", "ddp-volcano", "-n", ML, "--wait=true", "--timeout=60s")


def test_the_shipped_train_script_runs_in_the_volcano_example(cluster: Cluster, installed: dict[str, float]) -> None:
    """The quick start as a newcomer runs it: deploy/examples/train-script.yaml applied as
    shipped (`kubectl apply -f`, unchanged) beside the Volcano example above; every rank of both
    nodes says its all_reduce summed right (gloo here; NCCL where there are GPUs)."""
    # A Volcano Job's pods cannot be changed in place: none of an earlier run may be left.
    cluster.kubectl("delete", "vcjob", "ddp-volcano", "-n", ML, "--ignore-not-found", "--wait=true", "--timeout=60s")
    cluster.kubectl("apply", "-f", str(EXAMPLES / "train-script.yaml"))
    try:
        found = run_volcano(cluster, example("volcano-job", ML, image_ref(cluster, "train"), torch_sites()),
                            "ddp-volcano", "Volcano Job (example, its shipped script) to Completed")  # fmt: skip
        world = 2 * NPROC
        # The ranks of a pod print at once through torchrun: their lines may share one line.
        ranks = re.findall(rf"rank (\d+)/{world} on [^:]*: all_reduce ok over gloo", "\n".join(found.values()))
        assert sorted(ranks) == [str(r) for r in range(world)], "\n---\n".join(found.values())[-4000:]
    finally:
        cluster.kubectl("delete", "vcjob", "ddp-volcano", "-n", ML, "--wait=true", "--timeout=60s", check=False)
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ddp-script", "namespace": ML},
              "data": {"train.py": SCRIPT.read_text()}}  # fmt: skip
        cluster.kubectl("delete", "configmap", "ddp-script", "-n", ML, check=False)
        launchers.apply_with_retry(cluster, [cm])


def seed_volcano_c10d(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The seed's file as written: opted in or not by its namespace's label alone."""
    return example("volcano-c10d", namespace, image_ref(cluster, "train"), torch_sites(), SEED)


def test_seed_job_files_with_plain_torchrun_complete_in_a_labelled_namespace(
    cluster: Cluster, installed: dict[str, float]
) -> None:
    """The field report's volcano-c10d.yaml and pytorchjob-c10d.yaml with their rendezvous shell
    replaced by plain torchrun and no pod label: the namespace's label is enough (opt-in mode
    namespace, the default). The webhook derives endpoint, node count, id and the store host."""
    image, sites = image_ref(cluster, "train"), torch_sites()
    volcano = plain_torchrun(example("volcano-c10d", ML, image, sites, SEED), NPROC)
    assert "labels" not in volcano[0]["spec"]["tasks"][0]["template"].get("metadata", {})
    try:  # deleted whatever fails: the next test applies the seed's file under the same name
        found = run_volcano(cluster, volcano, "ddp-volcano-c10d",
                            "Volcano Job (the seed's volcano-c10d.yaml, plain torchrun, no pod label) to Completed")  # fmt: skip
        fields = check_one_store_host(found, "volcano", world=2 * NPROC)
        uid = cluster.kubectl_json("get", "vcjob", "ddp-volcano-c10d", "-n", ML)["metadata"]["uid"]
        port = job_port(InjectConfig(), uid)
        assert all(f["endpoint"] == f"ddp-volcano-c10d-worker-0.ddp-volcano-c10d:{port}" and f["nnodes"] == "2"
                   and f["rdzv_id"] == uid for f in fields), fields  # fmt: skip
        read_back(cluster, ML, "volcano.sh/job-name=ddp-volcano-c10d", "volcano-seed-plain",
                  ("vcjob", "ddp-volcano-c10d"))  # fmt: skip
    finally:
        cluster.kubectl("delete", "vcjob", "ddp-volcano-c10d", "-n", ML, "--wait=true", "--timeout=60s", check=False)
    pytorchjob = plain_torchrun(example("pytorchjob-c10d", ML, image, sites, SEED), NPROC)
    pytorchjob[0]["metadata"]["namespace"] = ML
    assert "metadata" not in pytorchjob[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    selector = "training.kubeflow.org/job-name=ddp-pytorchjob-c10d"
    try:
        found = run_job(cluster, pytorchjob, "pytorchjob", "ddp-pytorchjob-c10d", selector, "Succeeded",
                        "PyTorchJob (the seed's pytorchjob-c10d.yaml, plain torchrun, no pod label) to Succeeded")  # fmt: skip
        fields = check_one_store_host(found, "pytorchjob", world=2 * NPROC)
        host = next(f for f in fields if f["is_host"] == "true")
        assert host["local_addr"] == "ddp-pytorchjob-c10d-worker-0", fields
        read_back(cluster, ML, selector, "pytorchjob-seed-plain", ("pytorchjob", "ddp-pytorchjob-c10d"))
    finally:
        cluster.kubectl("delete", "pytorchjob", "ddp-pytorchjob-c10d", "-n", ML, "--wait=true", "--timeout=60s",
                        check=False)  # fmt: skip


def test_volcano_seed_job_with_its_own_shell(cluster: Cluster, installed: dict[str, float]) -> None:
    """The field report's volcano-c10d.yaml as written (its hand-written is_host / --local-addr
    shell in `bash -c` args, its own /dev/infiniband and /dev/shm, its NCCL env). Not opted in
    it fails here, bounded: its ranks' gloo pairs connect to 127.0.1.1 (the node name's address;
    on GPUs NCCL's own interface choice hides this). In the labelled namespace (nothing else
    changed) the webhook adds what is missing (GLOO_SOCKET_IFNAME among it), leaves every flag the
    user set, and it completes; worker-0 hosts, by the user's own rule."""
    t0 = time.monotonic()
    follower = LogFollower(cluster, OFF, "volcano.sh/job-name=ddp-volcano-c10d")
    try:
        launchers.apply_with_retry(cluster, seed_volcano_c10d(cluster, OFF))
        symptom = re.compile(r"Gloo connectFullMesh failed .*remote=\[127\.0\.1\.1\]")
        while time.monotonic() - t0 < 180 and not any(symptom.search(t) for t in follower.logs.values()):
            time.sleep(2)
    finally:
        follower.close()
        cluster.kubectl("delete", "vcjob", "ddp-volcano-c10d", "-n", OFF, "--wait=true", "--timeout=60s", check=False)
    TIMINGS["Volcano seed job not opted in: symptom after"] = time.monotonic() - t0
    assert any(symptom.search(t) for t in follower.logs.values()), follower.logs
    assert not any(WRAPPER_LINE.search(t) for t in follower.logs.values()), "an unmutated pod was wrapped"
    found = run_volcano(cluster, seed_volcano_c10d(cluster, ML), "ddp-volcano-c10d",
                        "Volcano Job (the seed's volcano-c10d.yaml, opted in) to Completed")  # fmt: skip
    fields = check_one_store_host(found, "volcano", world=2 * NPROC)
    host = next(f for f in fields if f["is_host"] == "true")
    assert host["local_addr"] == "ddp-volcano-c10d-worker-0.ddp-volcano-c10d", fields
    read_back(
        cluster, ML, "volcano.sh/job-name=ddp-volcano-c10d", "volcano-seed-c10d-worker", ("vcjob", "ddp-volcano-c10d")
    )
    cluster.kubectl("delete", "vcjob", "ddp-volcano-c10d", "-n", ML, "--wait=true", "--timeout=60s")


def volcano_variant(
    cluster: Cluster,
    name: str,
    plugins: dict[str, list[str]],
    tasks: list[tuple[str, int]],
    extra_task: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """deploy/examples/volcano-job.yaml (with the test changes) renamed, with these plugins and
    training tasks (name, replicas), each a copy of its worker task; plus one more task as given."""
    docs = example("volcano-job", ML, image_ref(cluster, "train"), torch_sites())
    job = docs[0]
    worker = job["spec"]["tasks"][0]
    job["metadata"]["name"] = name
    job["spec"]["plugins"] = plugins
    job["spec"]["tasks"] = [{**copy.deepcopy(worker), "name": t, "replicas": n} for t, n in tasks]
    if extra_task:
        job["spec"]["tasks"].append(extra_task)
    job["spec"]["minAvailable"] = sum(t["replicas"] for t in job["spec"]["tasks"])
    return docs


def test_volcano_plugin_shapes_read_from_source_only_until_now(cluster: Cluster, installed: dict[str, float]) -> None:
    """The three Volcano shapes the adapter handled from reading Volcano's source: the pytorch
    plugin with master and worker tasks (its MASTER_ADDR names the store host), the plugin's
    store task under another name (--master=chief), and a non-training task beside the workers
    (not counted in --nnodes). All three run side by side, each on its own c10d port."""
    image = image_ref(cluster, "train")
    tensorboard = {"name": "tensorboard", "replicas": 1, "template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "tensorboard", "image": image, "imagePullPolicy": "Never",
                                   "command": ["sleep", "20"]}]}}}  # fmt: skip
    svc = {"env": [], "svc": ["--publish-not-ready-addresses=true"]}
    cases = {
        "vc-pt": (volcano_variant(cluster, "vc-pt", {"pytorch": ["--master=master", "--worker=worker", "--port=29441"]},
                                  [("master", 1), ("worker", 1)]), "vc-pt-master-0.vc-pt"),
        "vc-chief": (volcano_variant(cluster, "vc-chief", {"pytorch": ["--master=chief", "--worker=worker",
                                                                       "--port=29442"]},
                                     [("chief", 1), ("worker", 1)]), "vc-chief-chief-0.vc-chief"),
        "vc-tb": (volcano_variant(cluster, "vc-tb", svc, [("worker", 2)], tensorboard), "vc-tb-worker-0.vc-tb"),
    }  # fmt: skip
    # Each job its own port: they share the two nodes' host network.
    cases["vc-tb"][0][0]["spec"]["tasks"][0]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
        "hostnet-rdma.io/rdzv-port"] = "29443"  # fmt: skip
    for docs, _ in cases.values():
        launchers.apply_with_retry(cluster, docs)
    t0 = time.monotonic()
    phases = {name: volcano_phase(cluster, ML, name, 300) for name in cases}
    TIMINGS["Volcano pytorch-plugin / --master=chief / sidecar-task jobs to Completed"] = time.monotonic() - t0
    for name, (_, store) in cases.items():
        selector = f"volcano.sh/job-name={name}"
        assert phases[name] == "Completed", f"{name}: {phases[name]}\n" + failure_report(cluster, ML, selector)
        found = {n: t for n, t in logs_of(cluster, ML, selector).items() if "tensorboard" not in n}
        fields = check_one_store_host(found, "volcano", world=2 * NPROC)
        host = next(f for f in fields if f["is_host"] == "true")
        assert host["local_addr"] == store and all(f["nnodes"] == "2" for f in fields), (name, fields)
        read_back(cluster, ML, selector, f"volcano-{name}", ("vcjob", name))
        cluster.kubectl("delete", "vcjob", name, "-n", ML, "--wait=false")


def test_volcano_seed_etcd_job_twice_under_one_name(
    cluster: Cluster, installed: dict[str, float], etcd_v2: str
) -> None:
    """The field report's volcano-etcd.yaml, in the labelled namespace, against a real etcd with the v2 API
    (python-etcd comes with the torch mount: its `pip install` line is the one more test-machine
    change, as the pods reach no package index). Twice under one name: each run its own
    rendezvous id (the user's $JOB_ID, the PodGroup's name), no RendezvousClosedError."""
    host, port = etcd_v2.split(":")
    service = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-server-headless", "namespace": ML},
         "spec": {"clusterIP": "None", "ports": [{"name": "client", "port": int(port)}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "etcd-server-headless", "namespace": ML},
         "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "client", "port": int(port)}]}]},
    ]  # fmt: skip
    launchers.apply_with_retry(cluster, service)
    ids = []
    for attempt in (1, 2):
        docs = example("volcano-etcd", ML, image_ref(cluster, "train"), torch_sites(), SEED)
        template = docs[0]["spec"]["tasks"][0]["template"]
        (c,) = template["spec"]["containers"]
        c["args"] = [re.sub(r"^pip install .*\n", "", c["args"][0], flags=re.M)]
        found = run_volcano(
            cluster, docs, "ddp-volcano-etcd", f"Volcano Job (the seed's volcano-etcd.yaml) run {attempt}"
        )
        fields = [wrapper_fields(t) for t in found.values()]
        assert all(f["backend"] == "etcd-v2" and f["is_host"] == "-" for f in fields), fields
        assert sum(ddp_ok(t, 2 * NPROC) for t in found.values()) == 2 * NPROC, found
        ids.append(cluster.kubectl_json("get", "vcjob", "ddp-volcano-etcd", "-n", ML)["metadata"]["uid"])
        cluster.kubectl("delete", "vcjob", "ddp-volcano-etcd", "-n", ML, "--wait=true", "--timeout=60s")
    assert ids[0] != ids[1]


# ------------------------------------------------------------------------------ the e2e suite


# What a user of this cluster passes: the CPU training image (imported, never pulled) and torch
# from the test machine (images/train.Dockerfile). Everything else is the command's default.
def e2e_args(cluster: Cluster) -> list[str]:
    args = ["--image", image_ref(cluster, "train"), "--image-pull-policy", "Never", "--timeout", "300"]
    for site in torch_sites():
        args += ["--torch-host-path", str(site)]
    return args


STORE_HOST = {"job": r"e2e-job-0-\w+", "statefulset": "e2e-statefulset-0", "jobset": r"e2e-jobset-workers-0-0-\w+",
              "lws": "e2e-lws-0", "pytorchjob": "e2e-pytorchjob-worker-0", "trainjob": r"e2e-trainjob-node-0-0-\w+",
              "volcano": "e2e-volcano-worker-0"}  # fmt: skip


def test_e2e_suite_on_the_namespace_cluster(cluster: Cluster, installed: dict[str, float]) -> None:
    """The suite's default target, in-process, as on a GPU cluster: each pod asks for the nodes'
    one GPU stand-in (test.hostnet-rdma.io/gpu: 1 per node, as 8 GPUs on 8-GPU nodes), so only
    one job fits at a time. The run checks the nodes first, then runs the seven one after
    another, each with its own timeout; every launcher passes (one world across both nodes,
    torchrun wrapped, one store host: the pod each launcher's rule names) and none waits on
    another. (Launchers a cluster lacks: tests/apiserver, where none is installed.)"""
    from app import kube
    from app.e2e import jobs as e2e_jobs
    from app.e2e import run as e2e_run
    from app.e2e.outcome import table

    sites = tuple(str(s) for s in torch_sites())
    params = e2e_jobs.Params(namespace="", image=image_ref(cluster, "train"), image_pull_policy="Never",
                             host_paths=sites, gpus_per_node=1, gpu_resource=GPU, backend="gloo")  # fmt: skip
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        log(line)

    t0 = time.monotonic()
    results = e2e_run.run(kube.api_client(str(cluster.kubeconfig)), e2e_run.Options(params, timeout=300), say=say)
    TIMINGS["e2e suite, in-process, GPU stand-in (7 launchers one after another)"] = time.monotonic() - t0
    log(table(results))
    assert any(line.startswith(f"capacity: 2 node(s) fit a pod with 1 {GPU}: ") for line in said), said
    assert any("one after another" in line for line in said), said
    by = {r.launcher: r for r in results}
    assert sorted(by) == sorted(STORE_HOST), by
    for name, r in by.items():
        assert r.ok, f"{name}: {r.detail}"
        assert r.world == 2 and len(r.store_hosts) == 1 and re.fullmatch(STORE_HOST[name], r.store_hosts[0]), r
        assert r.rendezvous == ("static" if name == "trainjob" else "c10d"), r
        assert r.nccl == "n/a (gloo on CPU)" and r.webhook, r
        assert r.seconds < 300, r  # its own timeout, not the others'
        assert r.path == "to 64 MiB ok", r  # the data path, swept through the job's own backend


def test_e2e_command_through_a_users_kubeconfig(cluster: Cluster, installed: dict[str, float]) -> None:
    """The same suite as a user runs it: `kubectl hostnet-rdma e2e` found on PATH by the real
    kubectl, a kubeconfig whose current context points nowhere and `--context` naming the
    cluster, the chart used as installed. Its own output is what is checked."""
    kc = yaml.safe_load(cluster.kubeconfig.read_text())
    real = kc["contexts"][0]
    kc["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    kc["contexts"] = [{"name": "my-gpu-cluster", "context": real["context"]},
                      {"name": "elsewhere", "context": {**real["context"], "cluster": "elsewhere"}}]  # fmt: skip
    kc["current-context"] = "elsewhere"
    path = cluster.workdir / "kc-user.yaml"
    path.write_text(yaml.safe_dump(kc))
    env = {**cluster.env(), "PATH": f"{ROOT / '.venv' / 'bin'}:{cluster.bin}:{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    p = subprocess.run(
        [str(cluster.bin / "kubectl"), "hostnet-rdma", "e2e", "--kubeconfig", str(path), "--context", "my-gpu-cluster",
         *e2e_args(cluster)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    TIMINGS["kubectl hostnet-rdma e2e (7 launchers side by side)"] = time.monotonic() - t0
    (cluster.logs / "e2e-output.txt").write_text(p.stdout + p.stderr)
    log(p.stdout + p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {ln.split()[0]: ln.split() for ln in p.stdout.splitlines() if ln.split() and ln.split()[0] in STORE_HOST}
    assert sorted(rows) == sorted(STORE_HOST), p.stdout
    for name, cells in rows.items():
        assert cells[1] == "passed" and re.fullmatch(STORE_HOST[name], cells[3]), cells
        assert cells[5] == "2" and p.stdout.count("n/a (gloo on CPU)") == len(STORE_HOST), p.stdout
    assert "7 passed, 0 failed" in p.stdout and "not present" not in p.stdout, p.stdout
    namespace = re.search(r"namespace (hostnet-rdma-e2e-\w+) deleted", p.stdout)
    assert namespace and cluster.kubectl("get", "namespace", namespace.group(1), check=False) == "", p.stdout


KUEUE_E2E_QUEUE = "hostnet-rdma-e2e-cq"


def test_e2e_suite_through_kueue(cluster: Cluster, installed: dict[str, float]) -> None:
    """`e2e --cluster-queue` against the real Kueue: the run creates its LocalQueue, every job
    Kueue manages carries its queue label and is admitted by Kueue (its Workload Admitted) before
    its pods run, and each passes as without Kueue. Volcano's, which Kueue does not manage, is
    left out here (it runs beside them unqueued in the suites above)."""
    from app import kube
    from app.e2e import jobs as e2e_jobs
    from app.e2e import run as e2e_run
    from app.e2e.outcome import table

    version = "kueue.x-k8s.io/v1beta2"
    launchers.apply_with_retry(cluster, [
        {"apiVersion": version, "kind": "ResourceFlavor", "metadata": {"name": "hostnet-rdma-e2e"}},
        {"apiVersion": version, "kind": "ClusterQueue", "metadata": {"name": KUEUE_E2E_QUEUE},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory", GPU],
             "flavors": [{"name": "hostnet-rdma-e2e", "resources": [
                 {"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "64Gi"},
                 {"name": GPU, "nominalQuota": len(cluster.nodes)}]}]}]}},
    ])  # fmt: skip
    queued = [n for n in STORE_HOST if n not in e2e_run.NOT_KUEUES]
    namespace = "hostnet-rdma-e2e-kueue"
    params = e2e_jobs.Params(namespace=namespace, image=image_ref(cluster, "train"), image_pull_policy="Never",
                             host_paths=tuple(str(s) for s in torch_sites()))  # fmt: skip
    said: list[str] = []
    t0 = time.monotonic()
    try:
        results = e2e_run.run(kube.api_client(str(cluster.kubeconfig)), e2e_run.Options(
            params, launchers=queued, timeout=300, keep=True, cluster_queue=KUEUE_E2E_QUEUE),
            say=lambda line: (said.append(line), log(line)))  # fmt: skip
        TIMINGS[f"e2e suite through Kueue ({len(queued)} launchers side by side)"] = time.monotonic() - t0
        log(table(results))
        assert any(f"LocalQueue {e2e_run.LOCAL_QUEUE} for ClusterQueue {KUEUE_E2E_QUEUE}" in x for x in said), said
        by = {r.launcher: r for r in results}
        for name in queued:
            r = by[name]
            assert r.ok, f"{name}: {r.detail}"
            assert r.world == 2 and len(r.store_hosts) == 1 and re.fullmatch(STORE_HOST[name], r.store_hosts[0]), r
        local = cluster.kubectl_json("get", "localqueue", e2e_run.LOCAL_QUEUE, "-n", namespace)
        assert local["spec"]["clusterQueue"] == KUEUE_E2E_QUEUE, local
        for name in queued:
            ln = e2e_jobs.LAUNCHERS[name]
            kind = f"{ln.plural}.{ln.api_version.split('/')[0]}"  # jobs.batch, not Volcano's jobs
            job = cluster.kubectl_json("get", kind, e2e_jobs.job_name(name), "-n", namespace)
            assert job["metadata"]["labels"].get(e2e_jobs.QUEUE_LABEL) == e2e_run.LOCAL_QUEUE, (name, job["metadata"])
        workloads = cluster.kubectl_json("get", "workloads", "-n", namespace)["items"]
        admitted_for = {o["name"] for w in workloads if admitted(w) for o in w["metadata"].get("ownerReferences", [])}
        log(f"Kueue workloads: {sorted((w['metadata']['name'], admitted(w)) for w in workloads)}")
        for name in queued:  # by the job itself, or (StatefulSet, LeaderWorkerSet: pod groups) by its pods
            job = e2e_jobs.job_name(name)
            assert any(o == job or o.startswith(job + "-") for o in admitted_for), (name, sorted(admitted_for))
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s", check=False)
        cluster.kubectl("delete", "clusterqueue", KUEUE_E2E_QUEUE, "--wait=false", check=False)


def wait_for_free_nodes(cluster: Cluster, timeout: float = 180) -> float:
    """Wait until no unfinished pod outside kube-system holds a test GPU or the host's network
    (an earlier test's job, or pods still terminating after their job was deleted): the
    hostNetwork jobs that follow need the nodes' GPUs and ports. Returns the seconds waited."""
    t0 = time.monotonic()
    while True:
        busy = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']} ({p['status'].get('phase')})"
            for p in cluster.kubectl_json("get", "pods", "-A")["items"]
            if p["metadata"]["namespace"] != "kube-system"
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            and (p["spec"].get("hostNetwork") or any(GPU in (c.get("resources", {}).get("limits") or {})
                                                     for c in p["spec"]["containers"]))
        ]  # fmt: skip
        if not busy:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"pods still hold the nodes after {timeout:.0f}s: {busy}")
        time.sleep(2)


CORPUS = ROOT / "tests" / "corpus"
CLUSTER_SCOPED = ("ClusterTrainingRuntime",)


def corpus_job(
    rel: str, image: str, sites: list[Path], program: str = "", workdir: bool = False
) -> list[dict[str, Any]]:
    """tests/corpus/<rel>.yaml as the cluster tier can run it: `hostNetwork: true` (the corpus's
    one edit), the test-machine changes of example() (image, GPU, torch mounted), the ML
    namespace, and, where the file runs a program its own image holds, the tier's DDP check
    (tests/rendezvous/ddp_train.py) mounted at that path (`workdir`: a relative path, so the
    container starts in that folder). Commands, env and flags stay as written."""
    path = CORPUS / f"{rel}.yaml"
    docs = example(path.stem, ML, image, sites, source=path.parent)
    if path.parent.name == "trainer":  # the runtime the pinned Trainer ships (the corpus's is newer)
        runtimes = launchers.module_dir(*launchers.PINS["trainer"]) / "manifests" / "base" / "runtimes"
        docs = [*example("torch_distributed", ML, image, sites, source=runtimes), *docs]  # before its TrainJob
    host_network(docs)
    folder, _, filename = program.rpartition("/")
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            d["metadata"]["namespace"] = ML

    for spec in pod_specs(docs) if program else ():
        spec.setdefault("volumes", []).append({"name": "stand-in", "configMap": {
            "name": "ddp-script", "items": [{"key": "train.py", "path": filename}]}})  # fmt: skip
        for c in spec["containers"]:
            c.setdefault("volumeMounts", []).append({"name": "stand-in", "mountPath": folder, "readOnly": True})
            if workdir:
                c["workingDir"] = folder
    return docs


def corpus_rows(c: Cluster, kind: str, name: str) -> dict[str, Any]:
    """The preview's rows (tests/test_corpus.py: `explain -f` with the chart's defaults) of the
    job as the API server stored it, by pod name (a generated name: its prefix)."""
    obj = c.kubectl_json("get", kind, name, "-n", ML)
    runtimes = c.kubectl_json("get", "clustertrainingruntimes")["items"] if kind == "trainjob" else []
    rows, _ = preview_of([obj, *runtimes])
    return {r.pod.rstrip("…").rstrip("-"): r for r in rows}


def row_of(rows: dict[str, Any], pod: str) -> Any:
    return rows.get(pod) or next(r for k, r in rows.items() if pod.startswith(k))


@pytest.mark.timeout(900)
def test_corpus_files_through_the_real_controllers(cluster: Cluster, installed: dict[str, float]) -> None:
    """A subset of the corpus (tests/corpus/: files from the launchers' own repositories) applied
    as written, `hostNetwork: true` added: the real controllers make the pods, the webhook
    admits them, and what runs is what `explain -f` previewed for the stored job.
    - Training Operator's simple.yaml (`python3 mnist.py`, env:// from MASTER_ADDR, no torchrun):
      the start-up hook pins Gloo's socket on the interface of the preview's local address, and
      the two ranks meet.
    - Training Operator's elastic echo.yaml (`python -m torch.distributed.run`, c10d): the
      wrapper's store host and local address are the preview's, and the ranks meet.
    - JobSet's resnet.yaml (static, no --nnodes): each pod's termination message is the
      preview's refusal.
    - Trainer's multi-node example with the runtime the pinned Trainer ships: completes.
    - The MPI Operator's nccl-tests MPIJob (the tier's image has sshd, not mpirun): a real ssh
      session from the launcher into a worker, as mpirun starts a rank there, has none of the
      pod's env but reads the worker's NCCL settings in /etc/nccl.conf; the launcher is left alone.
    Each job's pods are the preview's (tests/cluster/held.py), as are a host-network Deployment's
    and DaemonSet's.
    The two PyTorchJobs ask for one host port (23456): the second runs after the first."""
    image, sites = image_ref(cluster, "train"), torch_sites()
    simple = corpus_job("training-operator/simple", image, sites, program="/opt/mnist/src/mnist.py")
    echo = corpus_job("training-operator/elastic-echo", image, sites, program="/opt/echo/echo.py", workdir=True)
    resnet = corpus_job("jobset/pytorch-resnet", image, sites)
    multi = corpus_job("trainer/multi-node", image, sites)
    nccl = corpus_job("mpi-operator/nccl-tests", image, sites)  # the image has sshd, not mpirun
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ddp-deploy", "namespace": ML},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ddp-deploy"}},
                       "template": {"metadata": {"labels": {"app": "ddp-deploy"}},
                                    "spec": {"hostNetwork": True, "containers": [{
                                        "name": "trainer", "image": image, "imagePullPolicy": "Never",
                                        "command": ["torchrun", "--nnodes=2", "train.py"]}],
                                             "nodeSelector": {"hostnet-rdma.io/none": "held-only"}}}}}  # fmt: skip
    # A DaemonSet's pods are made for the nodes it selects: one per node, each `<ds>-<random>`.
    daemons = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "hostnet-ds", "namespace": ML},
               "spec": {"selector": {"matchLabels": {"app": "hostnet-ds"}},
                        "template": {"metadata": {"labels": {"app": "hostnet-ds"}},
                                     "spec": {"hostNetwork": True, "containers": [{
                                         "name": "agent", "image": image, "imagePullPolicy": "Never",
                                         "command": ["sleep", "600"]}]}}}}  # fmt: skip
    jobs_ = {"pytorchjob/pytorch-simple": "training.kubeflow.org/job-name=pytorch-simple",
             "jobset/pytorch": "jobset.sigs.k8s.io/jobset-name=pytorch",
             "trainjob/multi-node-example": "jobset.sigs.k8s.io/jobset-name=multi-node-example",
             "pytorchjob/elastic-example-echo": "training.kubeflow.org/job-name=elastic-example-echo",
             "mpijob/nccl-tests": "training.kubeflow.org/job-name=nccl-tests"}  # fmt: skip
    t0 = time.monotonic()
    try:
        launchers.apply_with_retry(cluster, [*simple, *resnet, *multi, *nccl, deploy, daemons])
        want = {"pytorchjob/pytorch-simple": "Succeeded", "jobset/pytorch": "Failed",
                "trainjob/multi-node-example": "Complete", "pytorchjob/elastic-example-echo": "Succeeded"}  # fmt: skip

        def finish(job: str, timeout: float) -> None:
            kind, name = job.split("/")
            outcome = condition(cluster, kind, ML, name, ("Succeeded", "Completed", "Complete", "Failed"), timeout)
            assert outcome == want[job], f"{job}: {outcome}\n" + failure_report(cluster, ML, jobs_[job])

        # The refused JobSet's pods, caught with their termination messages: a failed JobSet
        # deletes its Jobs, and their pods with them.
        refused: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 90
        while not refused and time.monotonic() < deadline:
            for p in pods(cluster, ML, jobs_["jobset/pytorch"]):
                for s in p["status"].get("containerStatuses") or []:
                    if (s["state"].get("terminated") or s["lastState"].get("terminated") or {}).get("message"):
                        refused[p["metadata"]["name"]] = p
            time.sleep(0.5)
        finish("pytorchjob/pytorch-simple", 240)
        launchers.apply_with_retry(cluster, echo)
        finish("jobset/pytorch", 60)
        finish("trainjob/multi-node-example", 120)
        finish("pytorchjob/elastic-example-echo", 180)
        TIMINGS["corpus subset (4 files, the PyTorchJobs one after the other) to done"] = time.monotonic() - t0
        found = {job: logs_of(cluster, ML, sel) for job, sel in jobs_.items()}

        # env:// without torchrun: the hook's line names the preview's local address; DDP ran.
        rows = corpus_rows(cluster, "pytorchjob", "pytorch-simple")
        for pod, text in found["pytorchjob/pytorch-simple"].items():
            row = row_of(rows, pod)
            assert row.backend.startswith("env://") and row.local_addr, row
            line = "torch.distributed without torchrun (MASTER_ADDR=pytorch-simple-master-0): GLOO_SOCKET_IFNAME="
            assert line in text and f"the interface of {row.local_addr}" in text, (pod, text[-3000:])
        assert sum(ddp_ok(t, 2) for t in found["pytorchjob/pytorch-simple"].values()) == 2, found

        # c10d through `python -m torch.distributed.run`: one store host, the preview's.
        rows = corpus_rows(cluster, "pytorchjob", "elastic-example-echo")
        texts = found["pytorchjob/elastic-example-echo"]
        worlds = {int(w) for t in texts.values() for w in re.findall(r"^DDP-OK rank=\d+ world=(\d+)", t, re.M)}
        assert len(worlds) == 1, worlds
        fields = check_one_store_host(texts, "pytorchjob", world=worlds.pop())
        for pod, f in zip(texts, fields, strict=True):
            row = row_of(rows, pod)
            assert (f["local_addr"], f["is_host"] == "true") == (row.local_addr, row.store_host == "yes"), (pod, f, row)
            assert f["endpoint"] == row.endpoint, (pod, f, row)

        # No --nnodes in a static JobSet: refused where the user looks, in the preview's words.
        rows = corpus_rows(cluster, "jobset", "pytorch")
        assert refused, "no pod of the JobSet ended with a termination message within 90 s"
        for name, p in refused.items():
            (s,) = p["status"]["containerStatuses"]
            message = (s["state"].get("terminated") or s["lastState"].get("terminated"))["message"]
            reason = row_of(rows, name).refusal
            assert reason and "--nnodes not given" in reason and reason[:80] in message, (message, reason)

        for kind, name, selector in (("pytorchjob", "pytorch-simple", jobs_["pytorchjob/pytorch-simple"]),
                                     ("pytorchjob", "elastic-example-echo", jobs_["pytorchjob/elastic-example-echo"]),
                                     ("trainjob", "multi-node-example", jobs_["trainjob/multi-node-example"]),
                                     ("mpijob", "nccl-tests", jobs_["mpijob/nccl-tests"]),
                                     ("deployment", "ddp-deploy", "app=ddp-deploy"),
                                     ("daemonset", "hostnet-ds", "app=hostnet-ds")):  # fmt: skip
            read_back(cluster, ML, selector, f"corpus-{kind}-{name}", (kind, name))
        # The MPIJob: its workers plumbed, its launcher (mpirun only) left alone. From the
        # launcher, over the operator's ssh key, into a worker's real sshd, as mpirun starts a
        # rank: the session has none of the pod's env, and /etc/nccl.conf has its NCCL settings.
        mpi = {p["metadata"]["labels"]["training.kubeflow.org/job-role"] + p["metadata"]["name"][-1]: p
               for p in pods(cluster, ML, jobs_["mpijob/nccl-tests"])}  # fmt: skip
        worker, launcher = mpi["worker0"], next(p for k, p in mpi.items() if k.startswith("launcher"))
        assert names.STATUS_ANNOTATION not in (launcher["metadata"].get("annotations") or {}), launcher["metadata"]
        conf = worker["metadata"]["annotations"][names.ANN_NCCL_CONF]
        env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
        assert conf.splitlines() == [f"{k}={v}" for k, v in env.items() if k.startswith("NCCL_")], (conf, env)
        t0, session = time.monotonic(), ""
        while "---" not in session and time.monotonic() < t0 + 90:
            session = cluster.kubectl("exec", "-n", ML, launcher["metadata"]["name"], "--", "ssh", "-o",
                                      "ConnectTimeout=5", "nccl-tests-worker-0.nccl-tests",
                                      "env; echo ---; cat /etc/nccl.conf", check=False)  # fmt: skip
            time.sleep(1 if "---" not in session else 0)
        TIMINGS["MPIJob: launcher to worker over ssh, the worker's /etc/nccl.conf read"] = time.monotonic() - t0
        seen_env, _, seen_conf = session.partition("---\n")
        assert seen_conf == conf, session[-3000:]
        assert "K_MPI_JOB_ROLE" not in seen_env and "NCCL_" not in seen_env, seen_env  # sshd's fresh environment
        # The failed JobSet deleted its pods: those caught above (4 pods, one host port, 2 nodes).
        diffs = held_to([cluster.kubectl_json("get", "jobset", "pytorch", "-n", ML)], list(refused.values()))
        assert [d for d in diffs if "no such real pod" not in d] == [], diffs
    finally:
        for job in [*jobs_, "deployment/ddp-deploy", "daemonset/hostnet-ds"]:
            cluster.kubectl("delete", job, "-n", ML, "--wait=false", check=False)
        # The MPI workers hold each node's test GPU: gone before the next test asks for it.
        deadline = time.monotonic() + 90
        while pods(cluster, ML, jobs_["mpijob/nccl-tests"]) and time.monotonic() < deadline:
            time.sleep(1)


def test_not_opted_in_jobs_show_the_seed_symptoms(cluster: Cluster, installed: dict[str, float]) -> None:
    """The same examples where the webhook is not enabled: LWS pods, with no rendezvous settings,
    each train alone (the worst outcome, silent); JobSet pods hang on torchrun's default static
    rendezvous; TrainJob's PET_MASTER_ADDR does not resolve with the node's DNS; the PyTorchJob's
    pods wait for a store nobody hosts (RendezvousConnectionError). Run last and one at a time:
    under hostNetwork they need the same nodes and ports as the jobs above."""
    image, sites = image_ref(cluster, "train"), torch_sites()

    def alone(logs: dict[str, str], _: float) -> bool:
        return trained_alone(logs, NPROC)

    def no_store_host(logs: dict[str, str], _: float) -> bool:
        return bool(re.search(r"RendezvousConnectionError|C10d store has failed", "\n".join(logs.values())))

    def unresolvable(logs: dict[str, str], _: float) -> bool:
        return bool(
            re.search(r"Name or service not known|gai error|failure in name resolution", "\n".join(logs.values()))
        )

    def hangs(logs: dict[str, str], elapsed: float) -> bool:
        # Both pods run torchrun's default static rendezvous on their own 127.0.0.1, each
        # waiting for a second node that can never join: no progress, no error.
        return len(logs) >= 2 and elapsed > 75 and "DDP-OK" not in "".join(logs.values())

    controls = (
        ("leaderworkerset", "ddp-lws", "leaderworkerset.sigs.k8s.io/name=ddp-lws", "lws", alone,
         f"each pod trained alone (world={NPROC}, not {2 * NPROC})"),
        ("jobset", "ddp-jobset", "jobset.sigs.k8s.io/jobset-name=ddp-jobset", "jobset", hangs,
         "each pod waits alone on 127.0.0.1 for a second node (hang, no error)"),
        ("trainjob", "ddp-trainjob", "jobset.sigs.k8s.io/jobset-name=ddp-trainjob", "trainer", unresolvable,
         "PET_MASTER_ADDR does not resolve with the node's DNS (no ClusterFirstWithHostNet)"),
        ("pytorchjob", "ddp-pytorchjob", "training.kubeflow.org/job-name=ddp-pytorchjob", "training-operator",
         no_store_host, "no store host (RendezvousConnectionError)"),
    )  # fmt: skip
    seen: dict[str, str] = {}
    for kind, name, selector, controller, symptom, what in controls:
        if controller not in WANTED:
            continue
        TIMINGS[f"{kind} not opted in: wait for free nodes"] = wait_for_free_nodes(cluster)
        t0 = time.monotonic()
        follower = LogFollower(cluster, OFF, selector)
        try:
            launchers.apply_with_retry(cluster, example(kind, OFF, image, sites))
            while time.monotonic() - t0 < 240 and kind not in seen:
                if symptom(follower.logs, time.monotonic() - t0):
                    seen[kind] = what
                time.sleep(2)
            state = ""
            if kind not in seen:  # what the pods and the controllers did, for the assertion below
                state = "\n".join(
                    cluster.kubectl(*a, check=False)
                    for a in (("get", "pods", "-A", "-o", "wide"), ("get", "events", "-n", OFF, "--sort-by=.lastTimestamp"))
                )  # fmt: skip
        finally:
            follower.close()
            # Foreground: the command returns once the pods are gone too, not only the job object.
            cluster.kubectl("delete", kind, name, "-n", OFF, "--cascade=foreground", "--wait=true", "--timeout=90s",
                            check=False)  # fmt: skip
        TIMINGS[f"{kind} not opted in: symptom after"] = time.monotonic() - t0
        log(f"not opted in: {kind}: {seen.get(kind, 'no symptom')} after {time.monotonic() - t0:.0f}s")
        assert not any(WRAPPER_LINE.search(t) for t in follower.logs.values()), "an unmutated pod was wrapped"
        assert kind in seen, f"{kind}: no symptom in 240 s\n{state}\nlogs: {follower.logs}"
        assert ddp_ok("".join(follower.logs.values()), 2 * NPROC) == 0, "trained across nodes without the webhook?"


@pytest.mark.timeout(600)
def test_an_mpijob_beside_the_node_s_own_sshd_on_port_22(cluster: Cluster, installed: dict[str, float]) -> None:
    """Issue 67: an MPIJob on the host network whose nodes run an sshd of their own on port 22 (a
    real sshd in each node's network namespace, with none of the job's keys: a host-network pod
    pinned to the node, in a namespace the webhook does not see). The tier's image configures
    sshd and ssh on 2222, as the MPI Operator's images do, so each worker names its port.
    - Without the fix (`sshd -e -p 22; sleep infinity`: a stock image's default port, and mpirun's
      ssh dialling 22):
      the admission warning and the job's Event say SshdOnNodePort, and what they name happens:
      the worker's sshd cannot bind (`Bind to port 22 ... Address already in use`), and the
      launcher's ssh reaches the node's sshd, which refuses the job's key.
    - With the warning's fix (`sshd -De -p 2222`, mpirun told `-mca plm_rsh_args "-p 2222"`,
      what the launcher's ssh then runs: `ssh -p 2222`): no warning, and the session runs."""
    image, sites = image_ref(cluster, "train"), torch_sites()
    held = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"node-sshd-{node}", "namespace": OFF},
             "spec": {"nodeName": node, "hostNetwork": True, "tolerations": [{"operator": "Exists"}],
                      "containers": [{"name": "sshd", "image": image, "imagePullPolicy": "Never",
                                      "command": ["/usr/sbin/sshd", "-De", "-p", "22", "-o", "AuthorizedKeysFile=none"]}]}}
            for node in cluster.nodes]  # fmt: skip

    def job(name: str, command: list[str], told: str) -> dict[str, Any]:
        (mpi,) = corpus_job("mpi-operator/nccl-tests", image, sites)
        mpi["metadata"]["name"] = name
        worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]
        worker["replicas"] = 1
        worker["template"]["spec"]["containers"][0]["command"] = command
        launcher = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        launcher["args"] = [f"until mpirun {told}-np 1 hostname; do sleep 5; done"]  # no mpirun here: it waits
        return dict(mpi)

    # The broken worker as many NCCL tests start it (sshd, then wait): the pod stays Ready, so its
    # name resolves and the launcher's ssh reaches the node.
    broken = job(
        "sshd-22", ["/bin/bash", "-c", '/usr/sbin/sshd -De -p 22; echo "sshd exited $?"; exec sleep infinity'], ""
    )
    fixed = job("sshd-2222", ["/usr/sbin/sshd", "-De", "-p", "2222"], '-mca plm_rsh_args "-p 2222" ')
    t0 = time.monotonic()
    try:
        launchers.apply_with_retry(cluster, held)
        for p in held:
            cluster.kubectl("wait", "--for=condition=Ready", "pod", p["metadata"]["name"], "-n", OFF, "--timeout=60s")
        launchers.apply_with_retry(cluster, [broken, fixed])

        def launcher_ssh(name: str, port: int, timeout: float) -> str:
            deadline, said = time.monotonic() + timeout, ""
            while time.monotonic() < deadline:
                found = [p for p in pods(cluster, ML, f"training.kubeflow.org/job-name={name}")
                         if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "launcher"
                         and p["status"].get("phase") == "Running"]  # fmt: skip
                if found:  # ssh says why it failed on its stderr: kept (kubectl gives back stdout)
                    ssh = (f"ssh -p {port} -o ConnectTimeout=5 -o BatchMode=yes {name}-worker-0.{name} "
                           "'echo session-on-$(hostname)' 2>&1")  # fmt: skip
                    said = cluster.kubectl("exec", "-n", ML, found[0]["metadata"]["name"], "--", "sh", "-c", ssh,
                                           check=False)  # fmt: skip
                    if "session-on-" in said or "Permission denied" in said:
                        return said
                time.sleep(2)
            return said

        # The fix: the worker's sshd on 2222, the launcher's ssh told 2222: a session, no warning.
        session = launcher_ssh("sshd-2222", 2222, 120)
        TIMINGS["MPIJob beside the node's sshd: the fixed job's first ssh session"] = time.monotonic() - t0
        assert "session-on-" in session, (session[-2000:], cluster.kubectl("get", "pods", "-A", "-o", "wide"))
        # Without it: the node's sshd answers on 22 and refuses the job's key ...
        refused = launcher_ssh("sshd-22", 22, 90)
        where = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False)
        assert "Permission denied (publickey" in refused, (refused[-2000:], where)
        # ... and the worker's own sshd never listened: the bind the warning names failed.
        deadline, worker_log = time.monotonic() + 60, ""
        while "Address already in use" not in worker_log and time.monotonic() < deadline:
            worker_log = cluster.kubectl("logs", "-n", ML, "sshd-22-worker-0", check=False)
            time.sleep(2)
        assert "Bind to port 22" in worker_log and "Address already in use" in worker_log, (
            worker_log[-2000:],
            cluster.kubectl("describe", "pod", "sshd-22-worker-0", "-n", ML, check=False)[-3000:],
        )
        # Said before it ran: the admission warning's reason, as the job's Event.
        deadline, described = time.monotonic() + 30, ""
        while "SshdOnNodePort" not in described and time.monotonic() < deadline:
            described = cluster.kubectl("describe", "mpijob", "sshd-22", "-n", ML)
            time.sleep(1)
        assert "SshdOnNodePort" in described, described[-3000:]
        assert "SshdOnNodePort" not in cluster.kubectl("describe", "mpijob", "sshd-2222", "-n", ML)
        worker = cluster.kubectl_json("get", "pod", "sshd-22-worker-0", "-n", ML)
        status = json.loads(worker["metadata"]["annotations"][names.STATUS_ANNOTATION])
        assert status["launcher"] == "mpijob", status
        TIMINGS["MPIJob beside the node's sshd: both outcomes"] = time.monotonic() - t0
    finally:
        for name in ("sshd-22", "sshd-2222"):
            cluster.kubectl("delete", "mpijob", name, "-n", ML, "--wait=false", check=False)
        for p in held:
            cluster.kubectl("delete", "pod", p["metadata"]["name"], "-n", OFF, "--wait=false", check=False)
        deadline = time.monotonic() + 90  # the workers hold each node's test GPU
        while (
            pods(cluster, ML, "training.kubeflow.org/job-name in (sshd-22,sshd-2222)") and time.monotonic() < deadline
        ):
            time.sleep(1)
