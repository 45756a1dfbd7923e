"""The e2e suite's pure parts: the job shapes, the verdict from pods and logs, the report, the
command line. The jobs themselves run on the cluster tier (tests/cluster/test_e2e.py)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli import build_parser, kubectl_main, main
from app.core.mutate import mutate
from app.core.params import Params as CoreParams
from app.e2e import jobs, outcome
from app.e2e.jobs import JOB_LABEL, LAUNCHERS, Params

LOGS = Path(__file__).parent / "logs"
P = Params(namespace="e2e", image="train:1", host_paths=("/site/a", "/site/b"))


def templates(x: Any) -> list[dict[str, Any]]:
    """Every pod template in a manifest tree."""
    found: list[dict[str, Any]] = []
    if isinstance(x, dict):
        spec = x.get("spec")
        if isinstance(spec, dict) and "containers" in spec and "metadata" in x and "apiVersion" not in x:
            found.append(x)
        for v in x.values():
            found += templates(v)
    elif isinstance(x, list):
        for v in x:
            found += templates(v)
    return found


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_every_job_is_written_as_users_write_it(launcher: str) -> None:
    docs = jobs.manifests(launcher, P)
    assert [d["metadata"]["namespace"] for d in docs] == ["e2e"] * len(docs)
    (tmpl,) = templates(docs)
    spec = tmpl["spec"]
    assert tmpl["metadata"]["labels"] == {JOB_LABEL: jobs.job_name(launcher)}  # opt-in mode namespace: no pod label
    assert spec["hostNetwork"] is True
    # What the webhook is there to add is not written by the job.
    assert "dnsPolicy" not in spec
    (c,) = spec["containers"]
    command = " ".join(c["command"])
    assert "torchrun" in command and jobs.SCRIPT in command
    assert not re.search(r"is_host|--local-addr|--rdzv-id", command)
    assert {e["name"]: e["value"] for e in c["env"]}["PYTHONPATH"] == (
        "/opt/hostnet-rdma-e2e/site-0:/opt/hostnet-rdma-e2e/site-1"
    )
    assert "resources" not in c  # CPU run
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["labelSelector"]["matchLabels"] == {JOB_LABEL: jobs.job_name(launcher)}


def test_with_a_kueue_queue_every_job_kueue_manages_names_it() -> None:
    # On the job object, where Kueue reads it; not on pod templates, Services or the runtime.
    queued = Params(namespace="e2e", image="train:1", kueue_queue="hostnet-rdma-e2e")
    for launcher in LAUNCHERS:
        docs = jobs.manifests(launcher, queued)
        job = next(d for d in docs if d["kind"] == LAUNCHERS[launcher].kind)
        labels = job["metadata"]["labels"]
        if launcher == "volcano":  # Volcano queues its own Jobs; Kueue does not manage them
            assert jobs.QUEUE_LABEL not in labels
        else:
            assert labels[jobs.QUEUE_LABEL] == "hostnet-rdma-e2e", launcher
        others = [d for d in docs if d is not job]
        assert all(jobs.QUEUE_LABEL not in d["metadata"].get("labels", {}) for d in others), launcher
        assert all(jobs.QUEUE_LABEL not in t["metadata"]["labels"] for t in templates(docs)), launcher
        assert jobs.QUEUE_LABEL not in json.dumps(jobs.manifests(launcher, P))  # no queue: no label


def test_each_job_binds_its_own_store_port() -> None:
    """All jobs run side by side on the same host-network nodes."""
    ports = [ln.port for ln in LAUNCHERS.values()]
    assert len(set(ports)) == len(ports)


def test_gpus_give_a_resource_limit_and_nccl_debug() -> None:
    p = Params(namespace="e2e", image="i", gpus_per_node=8, nproc_per_node=8, backend="nccl")
    for launcher in LAUNCHERS:
        docs = jobs.manifests(launcher, p)
        (c,) = templates(docs)[0]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["NCCL_DEBUG"] == "INFO" and env["E2E_BACKEND"] == "nccl"
        if launcher == "trainjob":  # Trainer takes resources from the TrainJob
            assert docs[1]["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}}
        else:
            assert c["resources"] == {"limits": {"nvidia.com/gpu": 8}}
            assert "--nproc-per-node=8" in " ".join(c["command"])


def test_the_core_wraps_the_indexed_job_pod() -> None:
    """The Job's pod, as the Job controller makes it, is one the webhook mutates."""
    _, job = jobs.manifests("job", P)
    tmpl = job["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "e2e-job-0-abcde", "namespace": "e2e", "labels": {
               **tmpl["metadata"]["labels"], "batch.kubernetes.io/job-completion-index": "0",
               "job-name": "e2e-job"},
               "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
               "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "e2e-job", "uid": "u-1",
                                    "controller": True}]},
           "spec": {**tmpl["spec"], "hostname": "e2e-job-0"}}  # fmt: skip
    out = mutate(pod, CoreParams(namespace="e2e", version="test", wrapper_payload="<wrapper-payload>"))
    assert out.pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet" and out.warnings == []
    status = json.loads(out.pod["metadata"]["annotations"]["hostnet-rdma.io/injected"])
    assert status["launcher"] == "job" and "skipped" not in status, status


def test_the_script_prints_the_lines_the_verdict_reads() -> None:
    text = (Path(jobs.__file__).parent / "train.py").read_text()
    assert f'OK, FAIL, SWEEP = "{outcome.OK}", "{outcome.FAIL}", "{outcome.SWEEP}"' in text
    assert "from app" not in text and "import app" not in text  # it runs in the user's image


# ------------------------------------------------------------------------------ verdict


def pod(name: str, exit_code: int | None = None, message: str = "", restarts: int = 0, **status: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {}}
    if exit_code is not None:
        state = {
            "terminated": {"exitCode": exit_code, "message": message, "reason": "Error" if exit_code else "Completed"}
        }
    return {"metadata": {"name": name, "annotations": {"hostnet-rdma.io/injected": '{"launcher":"job","version":"0.1.0"}'}},
            "spec": {"containers": [{"name": "trainer", "env": []}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "trainer", "state": state, "restartCount": restarts}], **status}}  # fmt: skip


def wrapper(launcher: str = "job", is_host: str = "false", backend: str = "c10d") -> str:
    return (f"hostnet-rdma: launcher={launcher} backend={backend} is_host={is_host} local_addr=a endpoint=e:1 "
            "rdzv_id=x nnodes=2 gloo_socket_ifname=eth0\n")  # fmt: skip


def ok(rank: int, world: int) -> str:
    return f"{outcome.OK} rank={rank} world={world} node=n backend=gloo busbw_gbps=0.{rank + 1}\n"


def test_completed_only_when_every_pod_joined_the_world() -> None:
    pods = [pod("p-0"), pod("p-1")]
    half = {"p-0": wrapper(is_host="true") + ok(0, 2)}
    assert outcome.progress(pods, half, "trainer", 2).state == "running"
    both = {**half, "p-1": wrapper() + ok(1, 2)}
    assert outcome.progress(pods, both, "trainer", 2) == outcome.Progress("completed")
    r = outcome.judge("job", "job", pods, both, "trainer", 2, 2, False, 12.34)
    assert r.ok and r.store_hosts == ["p-0"] and r.world == 2 and r.rendezvous == "c10d", r
    assert r.busbw_gbps == 0.1 and r.seconds == 12.3 and r.nccl.startswith("n/a") and r.webhook == "0.1.0"


def test_pods_that_trained_alone_fail() -> None:
    """The worst outcome: each node its own world. It completes, and is reported as failed."""
    pods = [pod("p-0"), pod("p-1")]
    logs = {"p-0": wrapper(is_host="true") + ok(0, 1), "p-1": wrapper(is_host="true") + ok(0, 1)}
    assert outcome.progress(pods, logs, "trainer", 2).state == "completed"
    r = outcome.judge("job", "job", pods, logs, "trainer", 2, 2, False, 1)
    assert not r.ok
    assert "trains alone" in r.detail and "2 store hosts" in r.detail


def test_an_unwrapped_torchrun_or_the_wrong_launcher_fails() -> None:
    pods = [pod("p-0"), pod("p-1")]
    logs = {"p-0": ok(0, 2), "p-1": wrapper("pod") + ok(1, 2)}
    r = outcome.judge("job", "job", pods, logs, "trainer", 2, 2, False, 1)
    assert "p-0: torchrun was not wrapped" in r.detail and "launcher pod, not job" in r.detail


def test_static_rendezvous_names_rank_zeros_pod() -> None:
    pods = [pod("n-0"), pod("n-1")]
    logs = {"n-0": wrapper("trainjob", "-", "static") + ok(0, 2), "n-1": wrapper("trainjob", "-", "static") + ok(1, 2)}
    r = outcome.judge("trainjob", "trainjob", pods, logs, "trainer", 2, 2, False, 1)
    assert r.ok and r.store_hosts == ["n-0"] and r.rendezvous == "static"


def test_a_refusal_fails_at_once_with_its_termination_message() -> None:
    cause = "hostnet-rdma: the rendezvous endpoint host 'x' did not resolve within 5s"
    pods = [pod("p-0", exit_code=1, message=cause), pod("p-1")]
    got = outcome.progress(pods, {}, "trainer", 2)
    assert got == outcome.Progress("failed", f"p-0: exit 1: {cause}")


def test_a_restart_or_fail_line_is_a_failure() -> None:
    p = pod("p-0", restarts=1)
    p["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    assert outcome.progress([p], {"p-0": "x\n"}, "trainer", 2).detail == "p-0: exit 137: x"
    fail = f"{outcome.FAIL} rank=1 world=2 all_reduce gave 1.0, expected 3.0"
    assert outcome.progress([pod("p-1")], {"p-1": fail}, "trainer", 2).detail == f"p-1: {fail}"


def test_a_waiting_pod_says_why() -> None:
    unscheduled = pod("p-0", conditions=[{"type": "PodScheduled", "status": "False",
                                          "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}])  # fmt: skip
    del unscheduled["status"]["containerStatuses"]
    got = outcome.progress([unscheduled], {}, "trainer", 2)
    assert got.state == "running" and "Insufficient nvidia.com/gpu" in got.detail
    bad = pod("p-1")
    bad["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "InvalidImageName", "message": "bad"}}
    assert outcome.progress([bad], {}, "trainer", 2) == outcome.Progress("failed", "p-1: waiting: InvalidImageName bad")


def test_nccl_verdict_is_verify_of_each_pods_log() -> None:
    pods = [pod("p-0"), pod("p-1")]
    good = (LOGS / "good.log").read_text()
    assert outcome.nccl_verdict(pods, {"p-0": good, "p-1": good}, "trainer").startswith("PASS")
    sockets = (LOGS / "socket-fallback.log").read_text()
    got = outcome.nccl_verdict(pods, {"p-0": good, "p-1": sockets}, "trainer")
    assert got.startswith("FAIL: p-1: transport") and "p-0" not in got


def test_the_table_reports_absent_launchers_apart() -> None:
    rows = [
        outcome.Result("job", "passed", 21.0, ["e2e-job-0"], "c10d", 2, 0.5, "n/a (gloo on CPU)"),
        outcome.Result("volcano", "not present", detail="Volcano is not installed here"),
    ]
    text = outcome.table(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["LAUNCHER", "RESULT", "TIME", "STORE", "HOST", "WORLD", "PATH", "BUSBW", "NCCL"]
    assert lines[1].split()[:5] == ["job", "passed", "21s", "e2e-job-0", "(c10d)"]
    assert lines[2].split()[:3] == ["volcano", "not", "present"]
    assert "  volcano: Volcano is not installed here" in lines


# ------------------------------------------------------------------------------ command line


def test_e2e_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["e2e", "--launcher", "job,slurm"]) == 2
    assert "unknown launcher slurm; known: job, statefulset" in capsys.readouterr().err
    assert main(["e2e", "--nodes", "1"]) == 2
    assert main(["e2e", "--node-selector", "novalue"]) == 2


def test_e2e_without_a_cluster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.yaml"
    assert main(["e2e", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "hostnet-rdma: error: kubeconfig: Invalid kube-config file. No configuration found."
        f" (read {missing}; choose the file with --kubeconfig or KUBECONFIG, the context with --context)\n"
    ), err


def test_the_plugin_forwards_kubeconfig_and_context_to_e2e(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "a",
                              "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                              "users": [{"name": "u", "user": {"token": "t"}}],
                              "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))  # fmt: skip
    assert kubectl_main(["e2e", "--context", "nope", "--kubeconfig", str(kc)]) == 2
    assert "nope" in capsys.readouterr().err
    assert kubectl_main(["-n", "ml", "e2e"]) == 2
    assert "e2e has no use for it: -n does not apply" in capsys.readouterr().err
    args = build_parser().parse_args(["e2e", "--gpus-per-node", "8", "--launcher", "job", "--launcher", "lws"])
    assert args.gpus_per_node == 8 and args.launcher == ["job", "lws"]


def test_cluster_queue_reaches_the_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from app import kube
    from app.e2e import run

    seen: list[run.Options] = []

    def fake_run(api: Any, opts: run.Options, say: Any) -> list[outcome.Result]:
        seen.append(opts)
        raise run.E2EError("--cluster-queue gpu: no such ClusterQueue (kubectl get clusterqueues)")

    monkeypatch.setattr(run, "run", fake_run)
    monkeypatch.setattr(kube, "api_client", lambda *a: object())
    assert main(["e2e", "--cluster-queue", "gpu"]) == 2
    assert seen[0].cluster_queue == "gpu"
    assert "no such ClusterQueue" in capsys.readouterr().err
    assert main(["e2e"]) == 2 and seen[1].cluster_queue == ""


class _Served:
    """kube.Objects as a cluster with or without Kueue serves it (no API server needed)."""

    def __init__(self, kueue: bool, cluster_queues: tuple[str, ...] = ()) -> None:
        self.kueue, self.cluster_queues = kueue, cluster_queues
        self.workloads: list[dict[str, Any]] = []

    def served(self, api_version: str, kind: str) -> bool:
        return self.kueue and api_version == "kueue.x-k8s.io/v1beta2"

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if kind == "ClusterQueue" and name in self.cluster_queues else None

    def list_objects(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        return self.workloads


def test_cluster_queue_without_kueue_or_its_queue_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from app import kube
    from app.e2e import run

    monkeypatch.setattr(run, "opt_in_labels", lambda api: ({}, {}, "namespace"))
    monkeypatch.setattr(run, "present", lambda objects: dict.fromkeys(LAUNCHERS, True))
    for served, said in ((_Served(False), "Kueue is not installed here"),
                         (_Served(True, ("other",)), "--cluster-queue gpu: no such ClusterQueue")):  # fmt: skip
        monkeypatch.setattr(kube, "Objects", lambda api, s=served: s)
        with pytest.raises(run.E2EError, match=said):
            run.run(object(), run.Options(P, cluster_queue="gpu"), say=lambda line: None)


def test_a_queued_job_that_times_out_says_what_kueue_said() -> None:
    from app.e2e import run

    objects = _Served(True)
    queued = Params(namespace="e2e", image="train:1", kueue_queue=run.LOCAL_QUEUE)
    follow = run.Follow(object(), objects, "job", queued, 1, 1)  # type: ignore[arg-type]
    assert follow.queue_status() == "; Kueue made no Workload for it (LocalQueue hostnet-rdma-e2e)"
    message = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default"
    objects.workloads = [
        {"metadata": {"name": "job-e2e-job-1a2b3", "ownerReferences": [{"kind": "Job", "name": "e2e-job"}]},
         "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                    "message": message}]}},
        {"metadata": {"name": "job-e2e-jobset", "ownerReferences": [{"kind": "Job", "name": "e2e-jobset"}]}},
    ]  # fmt: skip
    assert follow.queue_status() == f"; Kueue Workload job-e2e-job-1a2b3 not admitted: {message}"
    assert run.Follow(object(), objects, "volcano", queued, 1, 1).queue_status() == ""  # type: ignore[arg-type]


def test_a_queued_job_that_trained_without_a_workload_fails_the_run() -> None:
    """Kueue ignores the queue-name label of a kind whose integration is off (PyTorchJob on
    Kueue v0.19+): the job trains unqueued, past the quota. That is not a pass of a run through
    Kueue."""
    from app import kube
    from app.e2e import outcome, run

    objects = _Served(True)
    queued = Params(namespace="e2e", image="train:1", kueue_queue=run.LOCAL_QUEUE)
    trained = outcome.Result("pytorchjob", "passed", seconds=12.0, world=2, detail="1 warning")
    follow = run.Follow(object(), objects, "pytorchjob", queued, 1, 1)  # type: ignore[arg-type]
    judged = follow.unqueued(trained)
    assert not judged.ok and judged.seconds == 12.0 and judged.world == 2
    assert judged.detail == (
        "trained, but Kueue made no Workload for it, so it ran unqueued, past ClusterQueue quota: Kueue does "
        "not manage PyTorchJob here (its integration is off in Kueue's config; docs/launchers.md); 1 warning"
    )
    # With its Workload, or not sent through Kueue, or Volcano (its own queues), or failed anyway:
    # the result stands as judged.
    objects.workloads = [{"metadata": {"name": "pytorchjob-e2e-pytorchjob-1a2b3",
                                       "ownerReferences": [{"kind": "PyTorchJob", "name": "e2e-pytorchjob"}]}}]  # fmt: skip
    assert follow.unqueued(trained) is trained
    objects.workloads = []
    unqueued_params = Params(namespace="e2e", image="train:1")
    assert run.Follow(object(), objects, "pytorchjob", unqueued_params, 1, 1).unqueued(trained) is trained  # type: ignore[arg-type]
    assert run.Follow(object(), objects, "volcano", queued, 1, 1).unqueued(trained) is trained  # type: ignore[arg-type]
    lost = outcome.Result("pytorchjob", "failed", detail="rank 1 exited 1")
    assert follow.unqueued(lost) is lost

    class _Forbidden(_Served):
        def list_objects(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
            raise kube.ApiException(status=403, reason="Forbidden")

    blind = run.Follow(object(), _Forbidden(True), "pytorchjob", queued, 1, 1).unqueued(trained)  # type: ignore[arg-type]
    assert not blind.ok and blind.detail.startswith("trained, but its Kueue Workloads were not readable (")


# ------------------------------------------------------------------------------ kind


def test_the_kind_script_with_stand_in_tools(tmp_path: Path) -> None:
    """scripts/kind-e2e.sh as far as it runs without Docker: docker, kind, kubectl and helm are
    stand-ins that record their calls; the e2e command then meets a cluster that is not there
    and the script stops with its one-line error, deleting the kind cluster on the way out."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    kubeconfig = json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "kind",
                             "clusters": [{"name": "kind", "cluster": {"server": "https://127.0.0.1:9"}}],
                             "users": [{"name": "kind", "user": {"token": "t"}}],
                             "contexts": [{"name": "kind", "context": {"cluster": "kind", "user": "kind"}}]})  # fmt: skip
    for tool in ("docker", "kind", "kubectl", "helm"):
        (bin_dir / tool).write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> {calls}\n'
            f'case "$*" in *"config=-"*|"build -t "*" -") sed "s/^/  stdin: /" >> {calls};; esac\n'
            f'case "$*" in "get kubeconfig"*) echo \'{kubeconfig}\';;'
            ' "get nodes"*) echo e2e-worker; echo e2e-worker2;; esac\n'
        )
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    p = subprocess.run([str(root / "scripts" / "kind-e2e.sh")], capture_output=True, text=True, env=env, timeout=300)
    log = calls.read_text()
    assert p.returncode == 2 and "hostnet-rdma: error: cannot reach the cluster" in p.stderr, p.stdout + p.stderr
    assert "== API-server tier" not in p.stdout
    lines = log.splitlines()
    assert lines[0].startswith("kind create cluster --name hostnet-rdma-e2e --wait 180s --config=-")
    assert [ln.split()[-1] for ln in lines if "role:" in ln] == ["control-plane", "worker", "worker"]
    assert "docker exec e2e-worker mkdir -p /dev/infiniband" in lines
    assert "docker exec e2e-worker2 mkdir -p /dev/infiniband" in lines
    assert "docker build -t hostnet-rdma:e2e -f deploy/Dockerfile ." in lines
    assert "docker build -t hostnet-rdma-wrapper:e2e -f deploy/Dockerfile --target wrapper ." in lines
    (pip,) = [ln for ln in lines if "stdin:" in ln and "pip install" in ln]
    assert pip.endswith("torch numpy --index-url https://download.pytorch.org/whl/cpu"), pip
    loads = [ln for ln in lines if ln.startswith("kind load docker-image")]
    assert [ln.split()[3] for ln in loads] == [
        "hostnet-rdma:e2e",
        "hostnet-rdma-wrapper:e2e",
        "hostnet-rdma-e2e-train:cpu",
    ]
    # The training image (the largest) goes to the workers, where the jobs run, only.
    assert loads[-1].endswith("--name hostnet-rdma-e2e --nodes e2e-worker,e2e-worker2"), loads
    (install,) = [ln for ln in lines if ln.startswith("helm install")]
    for value in ("image.repository=hostnet-rdma", "image.tag=e2e", "wrapperImage.repository=hostnet-rdma-wrapper",
                  "wrapperImage.tag=e2e", "image.pullPolicy=Never"):  # fmt: skip
        assert f"--set {value} " in install + " ", install
    assert lines[-1] == "kind delete cluster --name hostnet-rdma-e2e"


def test_a_failed_pull_waits_for_the_timeout_and_is_shown() -> None:
    """ErrImagePull may be a registry hiccup: the job keeps waiting, and the reason is in the
    detail a timeout prints."""
    p = pod("p-0")
    p["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ErrImagePull", "message": "429"}}
    assert outcome.progress([p], {}, "trainer", 2) == outcome.Progress("running", "p-0: waiting: ErrImagePull 429")


def test_an_error_inside_one_job_is_that_jobs_result() -> None:
    from app.e2e import run

    class Broken:
        def create(self, obj: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("boom")

    f = run.Follow(None, Broken(), "job", P, timeout=1, poll=0.01)  # type: ignore[arg-type]
    f.run()
    assert f.result is not None and f.result.outcome == "failed"
    assert f.result.detail == "the e2e run itself failed: RuntimeError('boom')"


def test_the_namespace_is_said_deleted_only_once_it_is_gone() -> None:
    """A namespace whose pods outlive the wait is not reported deleted: a next run on the same
    nodes may find their GPUs and ports still held."""
    from app.e2e import run

    class Objects:
        def __init__(self, checks_until_gone: int | None) -> None:
            self.left, self.deleted = checks_until_gone, []

        def delete_namespace(self, name: str) -> None:
            self.deleted.append(name)

        def namespace_exists(self, name: str) -> bool:
            if self.left is None:
                return True
            self.left -= 1
            return self.left > 0

    said: list[str] = []
    assert run.delete_namespace(Objects(3), "e2e-x", said.append, wait=5, poll=0.01)
    assert said == ["namespace e2e-x deleted"]
    said.clear()
    stuck = Objects(None)
    assert not run.delete_namespace(stuck, "e2e-y", said.append, wait=0.05, poll=0.01)
    assert stuck.deleted == ["e2e-y"]
    assert said == ["namespace e2e-y still terminating after 0.05s: kubectl get pods -n e2e-y"]


# ------------------------------------------------------------------------------ GPU clusters


def _node(name: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "BM.GPU4.8"}}, "spec": spec,
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def _pod_on(node: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    return {"spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}  # fmt: skip


def test_the_capacity_check_names_the_nodes_that_fit() -> None:
    from app.e2e import capacity

    gpu = Params(
        namespace="e2e", image="i", gpus_per_node=8, node_selector={"node.kubernetes.io/instance-type": "BM.GPU4.8"}
    )
    nodes = [_node("a"), _node("b"), _node("c"), _node("d", unschedulable=True), _node("e", taints=[
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), _node("f", gpus=4)]  # fmt: skip
    fit = capacity.check(nodes, [_pod_on("c", 2), _pod_on("b", 8, "Succeeded")], gpu)
    assert fit.fits == ["a", "b"]
    assert fit.why_not == {"c": "nvidia.com/gpu: 6 free of 8 allocatable, 8 needed", "d": "cordoned (unschedulable)",
                           "e": "taint nvidia.com/gpu:NoSchedule not tolerated",
                           "f": "nvidia.com/gpu: 4 free of 4 allocatable, 8 needed"}  # fmt: skip
    tolerant = Params(namespace="e2e", image="i", gpus_per_node=8, tolerations=("nvidia.com/gpu",))
    assert "e" in capacity.check(nodes, [], tolerant).fits


def test_gpu_jobs_run_one_after_another_after_the_capacity_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """On two 8-GPU nodes only one job fits at a time: the run checks the nodes first, then runs
    the jobs one by one, each with its own timeout, deleting each once decided (pods that idle
    after training hold their GPUs); too few nodes stop the run before anything is created."""
    from app import kube
    from app.e2e import outcome, run

    gpu = Params(namespace="", image="i", gpus_per_node=8)
    monkeypatch.setattr(run, "opt_in_labels", lambda api: ({}, {}, "namespace"))
    monkeypatch.setattr(run, "present", lambda objects: dict.fromkeys(LAUNCHERS, True))
    monkeypatch.setattr(kube, "list_nodes", lambda api: [_node("a"), _node("b")])
    monkeypatch.setattr(kube, "list_all_pods", lambda api: [])
    created: list[str] = []

    class Objects:
        def __init__(self, api: Any) -> None: ...
        def create_namespace(self, name: str, labels: dict[str, str]) -> None: ...
        def create(self, obj: dict[str, Any]) -> None: ...
        def delete(self, obj: dict[str, Any]) -> None: ...
        def delete_namespace(self, name: str) -> None: ...
        def namespace_exists(self, name: str) -> bool:
            return False

        def service_account_exists(self, namespace: str) -> bool:
            return True

    running: list[str] = []
    overlap: list[int] = []

    def follow(self: run.Follow) -> None:
        running.append(self.launcher)
        overlap.append(len(running))
        created.append(self.launcher)
        time.sleep(0.02)
        running.remove(self.launcher)
        self.result = outcome.Result(self.launcher, "passed")

    monkeypatch.setattr(kube, "Objects", Objects)
    monkeypatch.setattr(run.Follow, "follow", follow)
    monkeypatch.setattr(run.Follow, "remove", lambda self, wait=120: created.append(f"-{self.launcher}"))
    said: list[str] = []
    results = run.run(object(), run.Options(gpu), say=said.append)
    assert [r.outcome for r in results] == ["passed"] * len(LAUNCHERS)
    assert max(overlap) == 1 and len(created) == 2 * len(LAUNCHERS)
    assert any(line.startswith("capacity: 2 node(s) fit a pod with 8 nvidia.com/gpu: a, b") for line in said), said
    assert any("one after another" in line for line in said), said
    # Side by side when asked (--parallel), and without GPUs.
    overlap.clear()
    run.run(object(), run.Options(gpu, parallel=7), say=said.append)
    assert max(overlap) > 1
    # One node free: a 2-node job cannot run; nothing is created.
    monkeypatch.setattr(kube, "list_all_pods", lambda api: [_pod_on("b", 8)])
    created.clear()
    with pytest.raises(run.E2EError, match=r"1 node\(s\) can take a pod with 8 nvidia.com/gpu \(a\), a job needs 2: "
                                           r"b: nvidia.com/gpu: 0 free of 8 allocatable"):  # fmt: skip
        run.run(object(), run.Options(gpu), say=said.append)
    assert created == []


def test_the_sweep_lines_make_the_path_verdict() -> None:
    healthy = {"p0": f"{outcome.SWEEP} from=n1 to=n2 largest_ok=67108864 first_lost=- gbps=9.80\n"}
    assert outcome.path_verdict(healthy) == "to 64 MiB ok"
    dropped = {"p0": f"{outcome.SWEEP} from=n1 to=n2 largest_ok=512 first_lost=2048 gbps=0.01\n"}
    assert outcome.path_verdict(dropped) == "2 KiB lost n1->n2 (512 B ok)"
    assert outcome.path_verdict({"p0": "no sweep here"}) == ""


def test_the_sweep_through_nccl_is_judged_from_its_real_logs() -> None:
    """Rank 0's log of app/e2e/train.py under NCCL 2.28.9 / torch 2.11 on an H200: two ranks
    given different NCCL_HOSTIDs (two "nodes" to NCCL, its Socket transport between them).
    Clean: 512 B to 64 MiB arrive and the job goes on to its all_reduce. Lost: the peer's
    messages of 8 KiB and more never came (the device machine has no iptables, so the peer's
    side was a wait that runs out): NCCL's watchdog reports the timed-out RECV and says it takes
    the process down, and the SWEEP line, printed first, and the verdict still come out."""
    clean = (LOGS / "sweep-nccl-h200-clean.log").read_text()
    assert outcome.path_verdict({"rank0": clean}) == "to 64 MiB ok"
    assert "HOSTNET-RDMA-E2E-OK rank=0 world=2" in clean and "backend=nccl" in clean
    lost = (LOGS / "sweep-nccl-h200-8k-lost.log").read_text()
    assert "Watchdog caught collective operation timeout" in lost and "OpType=RECV" in lost
    assert outcome.path_verdict({"rank0": lost}) == "8 KiB lost vm->vm (2 KiB ok)"
    assert f"{outcome.FAIL} rank=0 world=2 messages of 8192 bytes and more do not arrive" in lost


def test_a_sweep_only_job_completes_when_its_pods_exit_0() -> None:
    done = {"metadata": {"name": "p0"}, "status": {"containerStatuses": [
        {"name": "trainer", "state": {"terminated": {"exitCode": 0}}}]}}  # fmt: skip
    logs = {"p0": f"{outcome.SWEEP} from=n1 to=n2 largest_ok=67108864 first_lost=- gbps=9.80\n"}
    assert outcome.progress([done], logs, "trainer", 2).state == "completed"
    assert outcome.progress([done], {"p0": ""}, "trainer", 2).state == "running"


def test_a_running_job_says_what_it_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """On GPUs the jobs run one after another, up to 600 s each, and e2e printed a line only
    when a job ended. Now a job says, at least every 30 s, what it is waiting for."""
    from app import kube
    from app.e2e import run

    unscheduled = pod("e2e-job-0", conditions=[{"type": "PodScheduled", "status": "False",
                                                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}])  # fmt: skip
    del unscheduled["status"]["containerStatuses"]
    monkeypatch.setattr(kube, "list_pods", lambda api, ns, selector: [unscheduled])

    class Objects(_Served):
        def create(self, obj: dict[str, Any]) -> None:
            pass

    said: list[str] = []
    follow = run.Follow(object(), Objects(False), "job", Params(namespace="e2e", image="train:1"), timeout=0.5,  # type: ignore[arg-type]
                        poll=0.01, say=said.append, every=0.1)  # fmt: skip
    follow.follow()
    assert follow.result is not None and follow.result.outcome == "timed out"
    assert 2 <= len(said) <= 6, said  # every 0.1 s of the 0.5 s, not every poll
    assert all(line.startswith("job: still running after ") and "Insufficient nvidia.com/gpu" in line for line in said)
    assert run.PROGRESS_SECONDS <= 30


def test_on_a_terminal_a_waiting_job_is_one_line_rewritten_and_in_ci_plain_lines(capsys: Any) -> None:
    import io

    from app.cli.e2e import Status

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    status = Status(tty)
    assert status.live
    status.say("e2e: volcano: still running after 4s: e2e-volcano-worker-0: waiting: ContainerCreating")
    status.say("e2e: volcano: still running after 6s: e2e-volcano-worker-0: Running")
    status.say("e2e: volcano: passed in 41s")
    assert tty.getvalue().count("\r\x1b[K") == 3  # two updates in place, then the line cleared
    assert "Running" in tty.getvalue() and capsys.readouterr().out == "e2e: volcano: passed in 41s\n"
    plain = io.StringIO()
    status = Status(plain)
    assert not status.live
    status.say("e2e: volcano: still running after 30s: e2e-volcano-worker-0: Running")
    assert plain.getvalue() == "" and "still running after 30s" in capsys.readouterr().out
