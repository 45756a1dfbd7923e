"""The preview of job files (`mutate -f`, `explain -f`): each launcher's controller's pods
(app.preview.controllers), mutated as a default install would, and what each pod's wrapper decides.
The expansions are held to the real controllers' pods in the cluster tier (tests/cluster/held.py);
here, to the pods read back from them earlier (tests/golden), and the decisions, table by table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import config, preview
from app.core import selection
from app.preview import chart, controllers
from app.webhook import review
from tests.cliutil import run_cli
from tests.cluster.held import differences
from tests.seedfiles import load, plain_torchrun

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "deploy" / "examples"
GOLDEN = ROOT / "tests" / "golden"
DEFAULT = config.from_dict(chart.from_values(None))


def rows_of(docs: list[dict[str, Any]], namespace: str = "ml") -> list[preview.Row]:
    expansions = controllers.expand(docs, namespace)
    cms = {k: v for ex in expansions for k, v in ex.configmaps.items()}
    return preview.rows(
        expansions, lambda ns: review.params_for(DEFAULT, ns), selection.from_config(DEFAULT), None, cms
    )


FIELD_REPORT = {
    "volcano-c10d": ("volcano-c10d",),
    "pytorchjob-c10d": ("pytorchjob-c10d",),
    "volcano-etcd": ("volcano-etcd",),
    "trainer-v2": ("trainer-v2-runtime", "trainer-v2-trainjob"),
    "trainer-v2-kueue": ("trainer-v2-runtime", "trainer-v2-trainjob-kueue"),
}


@pytest.mark.parametrize("name", list(FIELD_REPORT))
def test_the_field_reports_files_with_plain_torchrun_have_one_store_host_per_job(name: str) -> None:
    docs = plain_torchrun([d for f in FIELD_REPORT[name] for d in load(f)])
    rows = rows_of(docs)
    print("\n" + name + "\n" + preview_table(rows))
    assert len(rows) == 2 and all(r.sent and r.mutated and not r.refusal for r in rows), [r.reason for r in rows]
    hosts = [r.store_host for r in rows]
    if name == "volcano-etcd":
        assert hosts == ["- (etcd)", "- (etcd)"]  # etcd holds the rendezvous: no store host
    else:
        assert hosts == ["yes", "no"], hosts
    assert all(r.nnodes.split(":")[-1] == "2" for r in rows), [r.nnodes for r in rows]
    assert len({r.local_addr for r in rows}) == 2 and all(r.local_addr for r in rows)


def preview_table(rows: list[preview.Row]) -> str:
    from app.cli.explain import table

    return table(rows)


def test_an_ip_endpoint_is_decided_on_the_node() -> None:
    docs = load("volcano-c10d")
    docs = plain_torchrun(docs)
    tmpl = docs[0]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    tmpl["args"] = ["torchrun --nproc-per-node=8 --rdzv-endpoint=10.0.0.1:23456 /scripts/train.py\n"]
    rows = rows_of(docs)
    assert [r.store_host for r in rows] == ["decided on the node by its addresses"] * 2
    assert any("names no pod of this job" in w for w in rows[0].warnings), rows[0].warnings


def test_a_wrapper_that_would_refuse_is_said_and_fails_explain(tmp_path: Path) -> None:
    """A JobSet without --nnodes: pod 0 would train alone; every pod's wrapper refuses."""
    js = yaml.safe_load_all((EXAMPLES / "jobset.yaml").read_text())
    (doc,) = [d for d in js if d]
    c = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["torchrun", "--nproc-per-node=8", "/scripts/train.py"]
    f = tmp_path / "js.yaml"
    f.write_text(yaml.safe_dump(doc))
    p = run_cli("explain", "-f", str(f))
    assert p.returncode == preview.EXIT_REFUSES, p.stdout + p.stderr
    assert "wrapper will refuse to start: --nnodes not given" in p.stdout


def test_pods_not_sent_to_the_webhook_exit_3() -> None:
    """kube-system is excluded; a pod labelled disabled opts out: reported, not mutated."""
    p = run_cli("mutate", "-f", str(EXAMPLES / "volcano-job.yaml"), "-n", "kube-system", "-o", "json")
    assert p.returncode == preview.EXIT_NOT_SENT, p.stderr
    assert "not sent to the webhook: namespace kube-system is excluded from the webhook" in p.stderr
    listed = json.loads(p.stdout)
    assert listed["kind"] == "List" and all("hostnet-rdma.io/injected" not in (i["metadata"].get("annotations") or {})
                                           for i in listed["items"])  # fmt: skip


@pytest.mark.parametrize("example", ["jobset", "pytorchjob", "leaderworkerset", "volcano-job", "trainjob"])
def test_every_example_previews_with_one_store_host(example: str) -> None:
    p = run_cli("explain", "-f", str(EXAMPLES / f"{example}.yaml"), "-o", "json")
    assert p.returncode == 0, p.stdout + p.stderr
    store = [pod["storeHost"] for pod in json.loads(p.stdout)["pods"]]
    assert store.count("yes") == 1 and len(store) == 2, p.stdout
    table = run_cli("explain", "-f", str(EXAMPLES / f"{example}.yaml"))
    assert table.returncode == 0 and max(map(len, table.stdout.splitlines())) <= 100, table.stdout


def test_a_trainjob_without_its_runtime_says_so_in_lines_a_terminal_shows() -> None:
    """`explain -f deploy/examples/trainjob-kueue.yaml` (its runtime is trainjob.yaml's): one
    159-column line; now the cause, then the runtime and what to do, each under 120."""
    p = run_cli("explain", "-f", str(EXAMPLES / "trainjob-kueue.yaml"))
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.splitlines()
    assert lines[0].endswith("TrainJob ddp-trainjob-kueue: its runtime is not in the files"), lines
    assert "ClusterTrainingRuntime torch-distributed-rdma: add its file" in lines[1], lines
    assert max(map(len, lines)) <= 120, lines


def test_mutate_of_a_job_file_is_a_list_of_the_stored_pods() -> None:
    p = run_cli("mutate", "-f", str(EXAMPLES / "trainjob.yaml"), "-o", "json")
    assert p.returncode == 0, p.stderr
    listed = json.loads(p.stdout)
    assert listed["kind"] == "List" and len(listed["items"]) == 2
    for pod in listed["items"]:
        status = json.loads(pod["metadata"]["annotations"]["hostnet-rdma.io/injected"])
        assert status["launcher"] == "trainjob"
        # What a default install does: the wrapper image mounted as an image volume.
        (vol,) = [v for v in pod["spec"]["volumes"] if v["name"] == "hostnet-rdma"]
        assert vol["image"]["reference"] == f"{chart.IMAGE_REPOSITORY}-wrapper:{chart.__version__}"
    patches = json.loads(run_cli("mutate", "-f", str(EXAMPLES / "trainjob.yaml"), "-o", "patch").stdout)
    assert [x["pod"] for x in patches] == ["ddp-trainjob-node-0-0-…", "ddp-trainjob-node-0-1-…"]


def test_the_chart_config_block_is_read_as_the_chart_renders_it(tmp_path: Path) -> None:
    """`--config` with the chart's own config: block (`delivery: auto`) and a --kube-version
    before image volumes: the init container from the webhook's image, as the chart would."""
    values = yaml.safe_load((ROOT / "charts" / "hostnet-rdma" / "values.yaml").read_text())
    f = tmp_path / "config.yaml"
    f.write_text(yaml.safe_dump(values["config"]))
    p = run_cli(
        "mutate", "-f", str(EXAMPLES / "volcano-job.yaml"), "--config", str(f), "--kube-version", "1.33", "-o", "json"
    )
    assert p.returncode == 0, p.stderr
    pod = json.loads(p.stdout)["items"][0]
    (init,) = pod["spec"]["initContainers"]
    assert init["image"] == f"{chart.IMAGE_REPOSITORY}:{chart.__version__}"
    bad = run_cli("mutate", "-f", str(EXAMPLES / "volcano-job.yaml"), "--config", str(f), "--kube-version", "one")
    assert bad.returncode == 2 and "is not a Kubernetes version" in bad.stderr


# Pods read back from the real controllers (tests/golden), and the example each came from.
READ_BACK = {"jobset/v0.12.0-workers-0-0": ("jobset", ()), "trainjob/trainer-v2.3.0-node-0-0": ("trainjob", ())}


@pytest.mark.parametrize("case", list(READ_BACK))
def test_the_expansion_is_the_pod_the_controller_created(case: str) -> None:
    """Metadata, hostname and subdomain of the preview's pod 0 against the pod the controller
    created from the same example (its uids and hashes being the cluster's)."""
    golden = yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())
    golden["metadata"]["labels"].pop("hostnet-rdma.io/inject")  # the examples' old pod label
    example, _ = READ_BACK[case]
    pods = [p for ex in controllers.expand([d for d in yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()) if d],
                                           "ml") for p in ex.pods]  # fmt: skip
    diffs = [d for d in differences(pods[0], golden) if not d.startswith("container")]
    assert diffs == [], diffs


def test_config_as_the_webhooks_configmap_is_taken_as_it_is(tmp_path: Path) -> None:
    """A ConfigMap (kubectl get cm ... -o yaml) is the webhook's own file: a config without a
    wrapper image does not wrap, as that webhook would not; the same lines as a chart block do."""
    from app.cli.common import CommandError, preview_config

    body = "inject: {shmSize: 16Gi}\n"
    cm = tmp_path / "cm.yaml"
    cm.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": body}}))
    block = tmp_path / "block.yaml"
    block.write_text(body)
    own, charted = preview_config(str(cm), None), preview_config(str(block), None)
    assert own.shm_size == charted.shm_size == "16Gi"
    assert own.wrapper_image == "" and charted.wrapper_image.endswith(f"-wrapper:{chart.__version__}")
    cm.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": {}}))
    with pytest.raises(CommandError, match=r"has no data config\.yaml"):
        preview_config(str(cm), None)


VOLCANO_LAUNCHER_TRAINER = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: lt, namespace: ml}
spec:
  minAvailable: 3
  schedulerName: volcano
  plugins: {env: [], svc: []}
  tasks:
    - name: launcher
      replicas: 1
      template:
        spec:
          hostNetwork: true
          containers: [{name: c, image: pytorch, command: [torchrun, --nproc-per-node=8, t.py]}]
    - name: trainer
      replicas: 2
      template:
        spec:
          hostNetwork: true
          containers: [{name: c, image: pytorch, command: [torchrun, --nproc-per-node=8, t.py]}]
"""


def test_a_volcano_job_without_a_master_task_previews_one_store(tmp_path: Path) -> None:
    """Tasks `launcher` + `trainer`: the preview showed two `yes` in STORE HOST, silently."""
    from tests.cliutil import run_cli

    f = tmp_path / "job.yaml"
    f.write_text(VOLCANO_LAUNCHER_TRAINER)
    out = run_cli("explain", "-f", str(f))
    wide = run_cli("explain", "-f", str(f), "-o", "wide")
    rows = [line.split() for line in wide.stdout.splitlines() if line.startswith("Job/lt")]
    assert len(rows) == 3 and [r[4] for r in rows].count("yes") == 1, out.stdout
    assert out.returncode == 0 and "store hosts" not in out.stdout


def test_a_job_whose_pods_host_no_store_or_several_is_flagged() -> None:
    from app import preview

    def row(pod: str, store: str, job: str = "Job/j") -> preview.Row:
        return preview.Row(source=job, pod=pod, sent=True, mutated=True, pod_after={}, store_host=store)

    two = [row("j-0", "yes"), row("j-1", "yes")]
    none = [row("j-0", "no"), row("j-1", "no")]
    fine = [row("j-0", "yes"), row("j-1", "no")]
    unknown = [row("j-0", "decided on the node by its addresses"), row("j-1", "no")]
    assert preview.store_problems(two) == [
        "Job/j: 2 rendezvous store hosts (j-0, j-1), not exactly one: the job would hang"
    ]
    assert preview.store_problems(none)[0].startswith("Job/j: 0 rendezvous store hosts (none of its pods)")
    assert preview.store_problems(fine) == [] and preview.store_problems(unknown) == []
    assert preview.store_problems([row("p", "yes", "Pod/p")]) == []  # one pod: nothing to compare


MIXED = """
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ml}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: dep, namespace: ml}
spec:
  replicas: 2
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      hostNetwork: true
      containers: [{name: c, image: pytorch, command: [torchrun, t.py]}]
---
apiVersion: kubeflow.org/v1
kind: MPIJob
metadata: {name: mpi, namespace: ml}
spec:
  mpiReplicaSpecs:
    Launcher: {replicas: 1, template: {spec: {hostNetwork: true, containers: [{name: l, image: x}]}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec: {}
"""


@pytest.mark.parametrize("command", ["explain", "mutate"])
def test_every_object_of_a_file_is_accounted_for(command: str, tmp_path: Path) -> None:
    """A Deployment or an MPIJob (host network, torchrun) printed an empty table or `items: []`
    and exited 0; the ConfigMap and Kueue's ClusterQueue beside them were skipped without a word."""
    f = tmp_path / "mixed.yaml"
    f.write_text(MIXED)
    out = run_cli(command, "-f", str(f))
    said = out.stdout + out.stderr
    assert out.returncode == preview.EXIT_NOT_PREVIEWED == 4, said
    assert "MPIJob/mpi: holds pod templates, but the preview cannot expand kind MPIJob" in said
    assert "not workloads (no pods): ConfigMap/cfg, ClusterQueue/cq" in said
    # The Deployment is expanded now: its ReplicaSet's two pods, without a stable DNS name.
    assert "Deployment/dep" in said and "holds pod templates, but the preview cannot expand kind Deployment" not in said


def test_an_mpijob_is_its_launcher_job_and_its_workers() -> None:
    """MPIJob v2beta1 (the MPI Operator's): workers `<job>-worker-<i>` under the job's
    Service, the launcher a Job's pod, each with the operator's labels, hostname, subdomain and
    (host network) ClusterFirstWithHostNet; the launcher gets the hostfile env."""
    (path,) = [p for p in (ROOT / "tests" / "corpus" / "mpi-operator").glob("nccl-tests.yaml")]
    (job,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for t in ("Launcher", "Worker"):
        job["spec"]["mpiReplicaSpecs"][t]["template"]["spec"]["hostNetwork"] = True
    (ex,) = controllers.expand([job], "ml")
    launcher, *workers = ex.pods
    assert [w["metadata"]["name"] for w in workers] == ["nccl-tests-worker-0", "nccl-tests-worker-1"]
    for i, w in enumerate(workers):
        assert (w["spec"]["hostname"], w["spec"]["subdomain"]) == (f"nccl-tests-worker-{i}", "nccl-tests")
        assert w["spec"]["dnsConfig"]["searches"] == ["nccl-tests.ml.svc.cluster.local"]
        assert w["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet" and w["spec"]["restartPolicy"] == "Never"
        assert w["metadata"]["labels"]["training.kubeflow.org/job-role"] == "worker"
        assert w["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
        assert w["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert launcher["metadata"]["generateName"] == "nccl-tests-launcher-"
    assert launcher["metadata"]["ownerReferences"][0]["name"] == "nccl-tests-launcher"
    assert launcher["spec"]["hostname"] == "nccl-tests-launcher"
    env = {e["name"]: e.get("value") for e in launcher["spec"]["containers"][0]["env"]}
    assert (
        env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile" and env["OMPI_MCA_orte_set_default_slots"] == "8"
    )
    v1 = {**job, "apiVersion": "kubeflow.org/v1"}  # the Training Operator's MPIJob: named, not guessed
    (ex,) = controllers.expand([v1], "ml")
    assert ex.unexpanded and not ex.pods


def test_an_appwrapper_is_the_pods_of_its_components() -> None:
    """Kueue's AppWrapper sample (a PyTorchJob inside): the pods the PyTorchJob's controller
    makes once the AppWrapper controller creates it, labelled with the AppWrapper; a Service
    beside it has no pods; a component the preview cannot expand is an error naming it."""
    path = ROOT / "tests" / "corpus" / "kueue" / "appwrapper-pytorch-sample.yaml"
    (aw,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    aw["spec"]["components"].append({"template": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}})
    (ex,) = controllers.expand([aw], "ml")
    assert [p["metadata"]["name"] for p in ex.pods] == ["pytorch-simple-master-0", "pytorch-simple-worker-0"]
    for p in ex.pods:
        assert p["metadata"]["labels"]["workload.codeflare.dev/appwrapper"] == "sample-pytorch-job"
        assert p["metadata"]["namespace"] == "ml" and p["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    aw["spec"]["components"].append({"template": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
                                                  "spec": {"headGroupSpec": {"template": {"spec": {"containers": []}}}}}})  # fmt: skip
    with pytest.raises(
        controllers.ExpandError, match="AppWrapper sample-pytorch-job: cannot expand its component of kind RayCluster"
    ):
        controllers.expand([aw], "ml")


def test_a_deployment_a_replicaset_and_a_daemonset_are_previewed_as_their_pods(tmp_path: Path) -> None:
    """Their pods have no stable DNS name: the preview shows the plumbing and the warning that
    torchrun cannot be wrapped, instead of an empty table."""
    dep = yaml.safe_load(MIXED.split("---")[1])
    for kind, pods in (("Deployment", 2), ("ReplicaSet", 2), ("DaemonSet", 1)):
        obj = {**dep, "kind": kind}
        f = tmp_path / f"{kind}.yaml"
        f.write_text(yaml.safe_dump(obj))
        out = run_cli("explain", "-f", str(f), "-o", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        rows = json.loads(out.stdout)["pods"]
        assert len(rows) == pods and all(r["mutated"] for r in rows), rows
        assert all(any("no stable DNS name for this pod" in w for w in r["warnings"]) for r in rows), rows
        listed = json.loads(run_cli("mutate", "-f", str(f), "-o", "json").stdout)
        owner = {p["metadata"]["ownerReferences"][0]["kind"] for p in listed.get("items", [listed])}
        assert owner == {"ReplicaSet" if kind != "DaemonSet" else "DaemonSet"}, owner


def test_a_file_of_known_workloads_and_plain_objects_exits_as_before(tmp_path: Path) -> None:
    f = tmp_path / "job.yaml"
    f.write_text((ROOT / "deploy" / "examples" / "namespace.yaml").read_text() + "\n---\n"
                 + (ROOT / "deploy" / "examples" / "volcano-job.yaml").read_text())  # fmt: skip
    out = run_cli("explain", "-f", str(f))
    assert out.returncode == 0 and "not workloads (no pods): Namespace/ml" in out.stdout, out.stdout


HAND_WRITTEN = """
apiVersion: batch/v1
kind: Job
metadata: {name: j, namespace: ml}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      hostNetwork: true
      subdomain: j
      restartPolicy: Never
      containers:
        - name: c
          image: pytorch
          command: [bash, -c, "torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=j-0.j:29500 --rdzv-conf=is_host=true --local-addr=$(hostname) t.py"]
"""


def test_the_explain_table_agrees_with_its_notes(tmp_path: Path) -> None:
    """Hand-written rendezvous shell: a note said the wrapper would refuse while the exit code
    was 0; the refusal was said twice per pod; pod 1's notes were printed under pod 0's name."""
    f = tmp_path / "job.yaml"
    f.write_text(HAND_WRITTEN)
    out = run_cli("explain", "-f", str(f))
    assert out.returncode == preview.EXIT_REFUSES, out.stdout
    notes = out.stdout.split("\n\n", 1)[1].splitlines()
    refusals = [n for n in notes if "is_host=true, but the rendezvous endpoint j-0.j names another pod" in n]
    assert len(refusals) == 1 and refusals[0].startswith("j-1-…: wrapper will refuse to start:"), notes
    shared = [n for n in notes if "sets is_host itself" in n]
    assert shared and shared[0].startswith("j-0-…, j-1-…: "), notes
    # The row of the pod whose wrapper refuses says so, not a store host (issue 65: it said `yes`).
    wide = run_cli("explain", "-f", str(f), "-o", "wide").stdout.splitlines()
    cells = {c[1]: c[4] for c in (re.split(r"\s{2,}", line) for line in wide if line.startswith("Job/j "))}
    assert cells == {"j-0-…": "yes", "j-1-…": "refuses"}, wide


def test_a_program_without_torchrun_is_previewed_as_env_init_with_one_store(tmp_path: Path) -> None:
    """Training Operator's own Master+Worker example runs `python3 mnist.py`: the preview said
    "torchrun's arguments are in a script" and showed no store; now the endpoint is MASTER_ADDR,
    rank 0's pod hosts the store, and a note says the start-up hook pins the sockets."""
    from tests.cliutil import run_cli
    from tests.test_corpus import CORPUS, load

    f = tmp_path / "job.yaml"  # Training Operator's own examples/pytorch/simple.yaml, host network
    f.write_text(yaml.safe_dump_all(load(CORPUS / "training-operator" / "simple.yaml")))
    out = run_cli("explain", "-f", str(f), "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    pods = json.loads(out.stdout)["pods"]
    assert [p["storeHost"] for p in pods] == ["yes", "no"]
    assert {p["endpoint"] for p in pods} == {"pytorch-simple-master-0:23456"}
    assert all(p["backend"].startswith("env:// (no torchrun") for p in pods)
    assert all(any("the start-up hook pins GLOO_SOCKET_IFNAME" in w for w in p["warnings"]) for p in pods)
    assert "arguments are in a script" not in out.stdout


def test_a_count_over_the_previews_bound_is_refused_in_one_line_not_expanded(tmp_path: Path) -> None:
    """`replicas: 100000000` in a file would be expanded in the CLI's memory, pod by pod."""
    dep = yaml.safe_load(MIXED.split("---")[1])
    dep["spec"]["replicas"] = 100_000_000
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump(dep))
    out = run_cli("explain", "-f", str(f))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "spec.replicas is 100000000: over the 10000 the preview expands" in out.stderr


@pytest.mark.parametrize(
    ("kind", "what"),
    [("lws", "LeaderWorkerSet big expands to 100000000 pods"), ("jobset", "JobSet big expands to"),
     ("volcano", "Volcano Job big expands to 20000 pods"), ("pytorchjob", "PyTorchJob big expands to 20000 pods"),
     ("file", "the file expands to 10001 pods")],
)  # fmt: skip
def test_a_product_of_counts_over_the_bound_is_refused_before_its_pods_are_made(
    kind: str, what: str, tmp_path: Path
) -> None:
    """Each count within the bound, their product or sum not: LWS groups x size, a JobSet's
    replicas x parallelism, tasks or replica types added up, objects of one file added up."""
    spec = {"containers": [{"name": "c", "image": "x", "command": ["torchrun", "t.py"]}], "hostNetwork": True}
    job = {"parallelism": 10_000, "completions": 10_000, "template": {"spec": spec}}
    objs: list[dict[str, Any]] = {
        "lws": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "big"},
                 "spec": {"replicas": 10_000, "leaderWorkerTemplate": {"size": 10_000, "workerTemplate": {"spec": spec}}}}],
        "jobset": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "big"},
                    "spec": {"replicatedJobs": [{"name": "w", "replicas": 10_000, "template": {"spec": job}}]}}],
        "volcano": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "big"},
                     "spec": {"tasks": [{"name": n, "replicas": 10_000, "template": {"spec": spec}} for n in "ab"]}}],
        "pytorchjob": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "big"},
                        "spec": {"pytorchReplicaSpecs": {t: {"replicas": 10_000, "template": {"spec": spec}}
                                                         for t in ("Master", "Worker")}}}],
        "file": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec},
                 {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": job},
                 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": spec}],
    }[kind]  # fmt: skip
    with pytest.raises(controllers.ExpandError, match=what):
        controllers.expand(objs, "ml")


HOLDERS = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: finetune-}
spec:
  entrypoint: main
  templates:
    - name: main
      container: {image: pytorch, command: [torchrun, t.py]}
    - name: train
      resource:
        action: create
        manifest: |
          apiVersion: kubeflow.org/v2beta1
          kind: MPIJob
          metadata: {name: neox}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          hostNetwork: true
          containers: [{name: c, image: pytorch, command: [torchrun, --nnodes=1, t.py]}]
---
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rj}
spec: {entrypoint: python train.py}
---
pipelineInfo: {name: p}
deploymentSpec: {executors: {}}
root: {}
"""


@pytest.mark.parametrize("command", ["explain", "mutate"])
def test_kinds_that_make_workloads_are_named_with_exit_4(command: str, tmp_path: Path) -> None:
    """Issue 53: an Argo Workflow whose templates hold a `container:` and an MPIJob as a string
    was "not workloads (no pods)", exit 0; a CronJob, a RayJob and a Kubeflow Pipelines spec (no
    kind) were not named either, or stopped the preview."""
    f = tmp_path / "holders.yaml"
    f.write_text(HOLDERS)
    out = run_cli(command, "-f", str(f))
    said = out.stdout + out.stderr
    assert out.returncode == preview.EXIT_NOT_PREVIEWED == 4, said
    assert "Workflow/finetune-: its steps' pods and the workloads its resource templates create: not previewed" in said
    assert "CronJob/nightly: the Jobs it starts (preview one with `kubectl create job" in said
    assert "RayJob/rj: its Ray cluster's head and worker pods" in said
    assert "Kubeflow Pipelines pipeline spec: its components' pods are made when a run starts" in said
    assert "not workloads" not in said


def _runtime_alone() -> str:
    runtime = (ROOT / "tests" / "corpus" / "trainer" / "runtime-torch-distributed.yaml").read_text()
    docs = list(yaml.safe_load_all(runtime))
    spec = docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["containers"][0]["command"] = ["torchrun", "t.py"]
    return yaml.safe_dump_all(docs)


def test_a_runtime_alone_is_previewed_as_a_trainjob_of_its_defaults(tmp_path: Path) -> None:
    """Issue 53: a ClusterTrainingRuntime alone said "no pods to preview" and was named nowhere;
    `mutate` printed `items: []`."""
    f = tmp_path / "runtime.yaml"
    f.write_text(_runtime_alone())
    out = run_cli("explain", "-f", str(f))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ClusterTrainingRuntime/torch-distributed (no TrainJob uses it: shown as one of its defaults)" in out.stdout
    assert "torch-distributed-node-0-0-" in out.stdout, out.stdout
    listed = yaml.safe_load(run_cli("mutate", "-f", str(f)).stdout)
    assert [p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in listed["items"]] == ["torch-distributed"]


def test_a_runtime_a_trainjob_of_the_file_uses_is_named_with_it(tmp_path: Path) -> None:
    f = tmp_path / "trainjob.yaml"
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "tj"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}  # fmt: skip
    f.write_text(_runtime_alone() + "---\n" + yaml.safe_dump(job))
    out = run_cli("explain", "-f", str(f))
    assert "ClusterTrainingRuntime/torch-distributed: runtime of TrainJob tj (no pods of its own)" in out.stdout
    assert "no TrainJob uses it" not in out.stdout, out.stdout


ONE_POD_REPLICATED_JOB = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml}
spec:
  replicatedJobs:
    - name: prep
      replicas: 1
      template:
        spec:
          parallelism: 1
          completions: 1
          template:
            spec:
              hostNetwork: true
              restartPolicy: Never
              containers: [{name: c, image: pytorch, command: [torchrun, t.py]}]
    - name: init
      replicas: 1
      template:
        spec:
          template:
            spec:
              hostNetwork: true
              restartPolicy: Never
              containers: [{name: c, image: pytorch-initializer, env: [{name: TORCHELASTIC_RUN_ID, value: x}]}]
    - name: node
      replicas: 1
      template:
        spec:
          parallelism: 2
          completions: 2
          template:
            spec:
              hostNetwork: true
              restartPolicy: Never
              containers: [{name: c, image: pytorch, command: [torchrun, t.py]}]
"""


def test_node_count_warnings_follow_the_pods_the_preview_counted() -> None:
    """Issue 53: a one-pod job (a TrainJob's initializer, a JobSet's one-pod replicated job) was
    told "this pod is one of its job's several (jobset)". The preview counts each replicated job's
    pods: a pod alone in its job is told why the wrapper still refuses a torchrun without
    --nnodes (the webhook cannot count at admission); one of several is warned as before."""
    rows = rows_of(list(yaml.safe_load_all(ONE_POD_REPLICATED_JOB)))
    by_job = {r.pod.split("-")[1]: r for r in rows}
    assert "this pod is its job's only one here" in by_job["prep"].refusal, by_job["prep"].refusal
    assert "several" not in " ".join(by_job["prep"].warnings) + by_job["prep"].refusal
    assert not [w for w in by_job["init"].warnings if "--nnodes not given" in w], by_job["init"].warnings
    node = [r for r in rows if "-node-" in r.pod]
    assert len(node) == 2 and all("one of its job's several (jobset)" in r.refusal for r in node), [
        r.refusal for r in node
    ]


def test_mutate_says_the_warnings_explain_says(tmp_path: Path) -> None:
    """`mutate -f` printed the core's warnings (a one-pod job's "one of several") beside the
    preview's own, where `explain -f` prints the preview's: both print the preview row's now."""
    f = tmp_path / "one-pod.yaml"
    f.write_text(ONE_POD_REPLICATED_JOB)
    said = run_cli("mutate", "-f", str(f)).stderr
    (prep,) = [block for block in said.split("\nJobSet/") if "-prep-" in block.split(":", 1)[0]]
    assert "this pod is its job's only one here" in prep and "several" not in prep, prep
