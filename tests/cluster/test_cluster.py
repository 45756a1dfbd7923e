"""Tier 5: the path a user takes, end to end, on a real two-node cluster (see harness.py).

Image built from deploy/Dockerfile -> `helm install` -> namespace label -> a job from the real
Job / StatefulSet controller -> plain `torchrun`, run by real kubelets in containers. The same
job in a namespace that is not opted in shows the seed's failure. Wall times are printed.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from app.core.wrap import BOOTSTRAP_PATH
from tests.cluster import jobs
from tests.cluster.conftest import secret_ca, torch_sites
from tests.cluster.harness import ROOT, Cluster, log, sh
from tests.cluster.held import held_to
from tests.cluster.release import OFF, ON, RELEASE, RELEASE_NS, helm, image_ref
from tests.cluster.timings import TIMINGS

# Ports of the c10d store: jobs that overlap in time on the host network need their own.
PORT, UNMUTATED_PORT = 29400, 29401

pytestmark = pytest.mark.cluster

WRAPPER_LINE = re.compile(r"^hostnet-rdma: (launcher=.*)$", re.M)
# The seed's symptoms, as torchrun prints them.
SYMPTOMS = {
    "no store host (RendezvousConnectionError)": re.compile(
        r"RendezvousConnectionError|The connection to the C10d store has failed"
    ),
    "advertised host name unresolvable (gai error)": re.compile(r"cannot be retrieved \(gai error"),
    "gloo bound to the node name's 127.0.1.1": re.compile(r"connectFullMesh failed|127\.0\.1\.1"),
    "rendezvous timed out": re.compile(r"RendezvousTimeoutError"),
}


def wrapper_fields(text: str) -> dict[str, str]:
    m = WRAPPER_LINE.search(text)
    assert m, f"no wrapper line in the log:\n{text[-3000:]}"
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def pods(c: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def logs(c: Cluster, ns: str, pod: str, previous: bool = False) -> str:
    return c.kubectl("logs", "-n", ns, pod, *(["--previous"] if previous else []), check=False)


def wait_job(c: Cluster, ns: str, name: str, timeout: float) -> str:
    """Complete | Failed | timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = c.kubectl_json("get", "job", name, "-n", ns).get("status", {})
        for cond in status.get("conditions", []):
            if cond["status"] == "True" and cond["type"] in ("Complete", "Failed"):
                return str(cond["type"])
        time.sleep(1)
    return "timeout"


def dump(c: Cluster, ns: str, selector: str) -> str:
    out = [c.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "wide", check=False)]
    for p in pods(c, ns, selector):
        out.append(f"--- {p['metadata']['name']}\n" + logs(c, ns, p["metadata"]["name"])[-4000:])
    return "\n".join(out)


@pytest.fixture(scope="module")
def unmutated_job(cluster: Cluster, release: dict[str, Any]) -> float:
    """The negative control's Indexed Job, started first: it only waits, so it overlaps the rest."""
    jobs.apply(cluster, jobs.indexed_job(OFF, "ddp", image_ref(cluster, "train"), torch_sites(), UNMUTATED_PORT))
    return time.monotonic()


def test_chart_installed_from_the_built_image(cluster: Cluster, release: dict[str, Any], unmutated_job: float) -> None:
    """The Deployment runs the image users build; self-managed certs went through the real
    API server; the caBundle is the Secret's CA; `helm test` passed through the Service."""
    deploy = cluster.kubectl_json("get", "deploy", RELEASE, "-n", RELEASE_NS)
    assert deploy["status"].get("readyReplicas") == 2
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image_ref(cluster, "webhook")
    webhook_pods = pods(cluster, RELEASE_NS, "app.kubernetes.io/name=hostnet-rdma,app.kubernetes.io/component=webhook")
    assert len(webhook_pods) == 2 and all(p["status"]["phase"] == "Running" for p in webhook_pods)
    # Non-root, read-only root filesystem: as the chart says.
    assert all(p["spec"]["securityContext"]["runAsUser"] == 65532 for p in webhook_pods)
    mwc = cluster.kubectl_json("get", "mutatingwebhookconfiguration", RELEASE)
    bundle = base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"])
    assert bundle == secret_ca(cluster), "caBundle is not the CA in the self-managed Secret"
    test = release["helm_test"]
    assert test.returncode == 0, test.stdout + test.stderr
    assert "Phase:          Succeeded" in test.stdout or "Succeeded" in test.stdout, test.stdout
    # The test pod trusted only the configuration's caBundle and checked the Service's name.
    assert f"over TLS verified against the caBundle for {RELEASE}.{RELEASE_NS}.svc" in test.stdout, test.stdout


NAMES = """import socket, sys
me, other = socket.gethostname(), sys.argv[1]
try:
    theirs = socket.gethostbyname(other)
except OSError:
    theirs = "unresolvable"
print("NAMES", me, socket.gethostbyname(me), other, theirs)
"""


def test_node_names_resolve_like_the_seeds_nodes(cluster: Cluster, release: dict[str, Any]) -> None:
    """In a host-network pod, the node's own name is 127.0.1.1 and the other node's name does
    not resolve (the seed's Ubuntu nodes): the trap torchrun falls into is real here."""
    for node, other in (("node1", "node2"), ("node2", "node1")):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"names-{node}", "namespace": OFF},
               "spec": {"nodeName": node, "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": image_ref(cluster, "train"), "imagePullPolicy": "Never",
                                        "command": ["python3", "-c", NAMES, other]}]}}  # fmt: skip
        jobs.apply(cluster, [pod])
    for node, other in (("node1", "node2"), ("node2", "node1")):
        cluster.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/names-{node}", "-n", OFF,
                        "--timeout=60s")  # fmt: skip
        line = logs(cluster, OFF, f"names-{node}").strip()
        assert line == f"NAMES {node} 127.0.1.1 {other} unresolvable", line


def test_indexed_job_completes(cluster: Cluster, release: dict[str, Any]) -> None:
    """The seed-style Indexed Job with plain torchrun, opted in: completes on two nodes."""
    t0 = time.monotonic()
    jobs.apply(cluster, jobs.indexed_job(ON, "ddp", image_ref(cluster, "train"), torch_sites()))
    outcome = wait_job(cluster, ON, "ddp", 300)
    TIMINGS["Indexed Job (opted in) to Complete"] = time.monotonic() - t0
    assert outcome == "Complete", dump(cluster, ON, "app=ddp")
    found = pods(cluster, ON, "app=ddp")
    assert len(found) == 2
    assert len({p["spec"]["nodeName"] for p in found}) == 2, "the two pods must run on different nodes"
    hosts = []
    for p in found:
        ann = json.loads(p["metadata"]["annotations"]["hostnet-rdma.io/injected"])
        assert ann["launcher"] == "job" and "wrap" not in ann.get("skipped", {}), ann
        assert p["spec"]["containers"][0]["command"][0] == BOOTSTRAP_PATH  # the chart delivers from its image
        text = logs(cluster, ON, p["metadata"]["name"])
        fields = wrapper_fields(text)
        hosts.append(fields["is_host"])
        index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert fields["local_addr"] == f"ddp-{index}.ddp", fields
        assert fields["endpoint"] == f"ddp-0.ddp:{PORT}"
        assert fields["rdzv_id"] == p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
        assert fields["gloo_socket_ifname"] == "eth0", fields
        assert len(re.findall(r"^DDP-OK rank=\d+ world=4 sum=10 ", text, re.M)) == jobs.NPROC, text[-3000:]
    assert sorted(hosts) == ["false", "true"], f"exactly one store host per job, got {hosts}"
    # The preview (`hostnet-rdma mutate -f`) of this Job as stored: the Job controller's pods.
    assert held_to([cluster.kubectl_json("get", "job", "ddp", "-n", ON)], found) == []


def test_verify_runs_against_the_live_pod(cluster: Cluster, release: dict[str, Any]) -> None:
    """`hostnet-rdma verify POD` reads the live pod's log through the API server. On CPU
    there is no NCCL, so only the wrapper check can pass; the NCCL checks must say why not."""
    pod = pods(cluster, ON, "app=ddp")[0]["metadata"]["name"]
    p = subprocess.run(
        [sys.executable, "-m", "app.cli", "verify", pod, "-n", ON, "-o", "json", "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr  # NCCL checks fail on CPU: exit 1, not 2
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert checks["wrapper"]["ok"] and "launcher=job" in checks["wrapper"]["detail"]
    assert not checks["transport"]["ok"] and "Using network" in checks["transport"]["detail"]


def test_statefulset_completes(cluster: Cluster, release: dict[str, Any]) -> None:
    """A StatefulSet with a headless Service: each pod's torchrun trains and exits 0. Its
    endpoint is pod 0's full DNS name: the pod spec carries only the short `host.sub` address,
    so pod 0 knows itself by that name from its own resolv.conf (the namespace's zone)."""
    t0 = time.monotonic()
    fqdn = f"ddp-sts-0.ddp-sts.{ON}.svc.cluster.local"
    jobs.apply(cluster, jobs.statefulset(ON, "ddp-sts", image_ref(cluster, "train"), torch_sites(), endpoint_host=fqdn))
    deadline = time.monotonic() + 300
    texts: dict[str, str] = {}
    while time.monotonic() < deadline and len(texts) < 2:
        for p in pods(cluster, ON, "app=ddp-sts"):
            statuses = p["status"].get("containerStatuses", [])
            assert all(s.get("restartCount", 0) == 0 for s in statuses), dump(cluster, ON, "app=ddp-sts")
            text = logs(cluster, ON, p["metadata"]["name"])
            if "TORCHRUN-EXIT-0" in text:
                texts[p["metadata"]["name"]] = text
        time.sleep(1)
    TIMINGS["StatefulSet (opted in) to both torchrun exit 0"] = time.monotonic() - t0
    assert len(texts) == 2, dump(cluster, ON, "app=ddp-sts")
    hosts = []
    assert (
        held_to([cluster.kubectl_json("get", "statefulset", "ddp-sts", "-n", ON)], pods(cluster, ON, "app=ddp-sts"))
        == []
    )
    for name, text in sorted(texts.items()):
        fields = wrapper_fields(text)
        assert fields["launcher"] == "statefulset" and fields["local_addr"] == f"{name}.ddp-sts", fields
        assert fields["endpoint"] == f"{fqdn}:{PORT}", fields
        hosts.append(fields["is_host"])
        assert len(re.findall(r"^DDP-OK rank=\d+ world=4 sum=10 ", text, re.M)) == jobs.NPROC, text[-3000:]
    assert sorted(hosts) == ["false", "true"], hosts
    for p in pods(cluster, ON, "app=ddp-sts"):  # derived in the pod, not carried in its spec
        assert "identities=" not in p["spec"]["containers"][0]["command"][1], p["spec"]["containers"][0]["command"]
    cluster.kubectl("delete", "statefulset", "ddp-sts", "-n", ON, "--wait=false")


def _delivery_shape(pod: dict[str, Any]) -> str:
    """Which wrapper delivery made this pod, read from its spec."""
    spec = pod["spec"]
    found = [v for v in spec.get("volumes") or [] if v["name"] == "hostnet-rdma"]
    if len(found) != 1:
        return f"unknown: {len(found)} hostnet-rdma volumes (not wrapped?)"
    volume = found[0]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    command = spec["containers"][0]["command"]
    if "image" in volume and command[0] == BOOTSTRAP_PATH and not inits:
        return "imageVolume"
    if "emptyDir" in volume and command[0] == BOOTSTRAP_PATH and inits == ["hostnet-rdma-wrapper"]:
        return "initContainer"
    if "emptyDir" in volume and command[:2] == ["/bin/sh", "-c"] and not inits:
        return "inline"
    return f"unknown: volume {volume}, init containers {inits}, command {command[:2]}"


@pytest.mark.parametrize("delivery", ["imageVolume", "initContainer", "inline"])
def test_indexed_job_completes_with_each_wrapper_delivery(
    cluster: Cluster, release: dict[str, Any], delivery: str
) -> None:
    """`config.wrapper.delivery`, switched by `helm upgrade` as a user does: the pods have the
    shape of that delivery, and the job trains on two nodes with one store host."""
    values = json.loads(helm(cluster, "get", "values", RELEASE, "-n", RELEASE_NS, "-o", "json").stdout or "{}")
    before = ((values.get("config") or {}).get("wrapper") or {}).get("delivery")
    name, port = f"ddp-{delivery.lower()}", PORT + 10 + ["imageVolume", "initContainer", "inline"].index(delivery)
    try:
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", f"config.wrapper.delivery={delivery}", "--wait", "--timeout", "3m")  # fmt: skip
        assert up.returncode == 0, up.stderr
        deadline = time.monotonic() + 30
        while delivery not in (live := _dry_run_delivery(cluster)):
            assert time.monotonic() < deadline, f"the webhook still answers with {live} after the upgrade"
            time.sleep(0.5)
        t0 = time.monotonic()
        jobs.apply(cluster, jobs.indexed_job(ON, name, image_ref(cluster, "train"), torch_sites(), port))
        outcome = wait_job(cluster, ON, name, 300)
        TIMINGS[f"Indexed Job, wrapper delivery {delivery}, to Complete"] = time.monotonic() - t0
        assert outcome == "Complete", dump(cluster, ON, f"app={name}")
        found = pods(cluster, ON, f"app={name}")
        assert [_delivery_shape(p) for p in found] == [delivery, delivery]
        if delivery == "imageVolume":  # the wrapper-only image, its files at the root: no subPath
            for p in found:
                (volume,) = [v for v in p["spec"]["volumes"] if v["name"] == "hostnet-rdma"]
                assert volume["image"]["reference"] == image_ref(cluster, "wrapper"), volume
                (mount,) = [m for m in p["spec"]["containers"][0]["volumeMounts"] if m["name"] == "hostnet-rdma"]
                assert "subPath" not in mount, mount
        hosts = [wrapper_fields(logs(cluster, ON, p["metadata"]["name"]))["is_host"] for p in found]
        assert sorted(hosts) == ["false", "true"], hosts
    finally:
        # Back to what the release had: its own value, else the chart's default.
        chart = yaml.safe_load((ROOT / "charts/hostnet-rdma/values.yaml").read_text())
        restore = before or chart["config"]["wrapper"]["delivery"]
        helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
             "--set", f"config.wrapper.delivery={restore}", "--wait", "--timeout", "3m")  # fmt: skip
        cluster.kubectl("delete", "job", name, "-n", ON, "--wait=false", check=False)


def test_a_refusal_is_the_pods_termination_message(cluster: Cluster, release: dict[str, Any]) -> None:
    """When the wrapper will not start torchrun (here: the endpoint's DNS record never appears,
    within a 5 s wait the user set), `kubectl describe pod` and the container's status carry
    the one-line cause, not only the log."""
    name = "ddp-refused"
    objs = jobs.indexed_job(ON, name, image_ref(cluster, "train"), torch_sites())
    job = objs[-1]
    job["spec"].update(completions=1, parallelism=1)
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["command"][-1] = c["command"][-1].replace(f"{name}-0.{name}:", f"{name}-7.{name}:")  # a pod that never exists
    c["env"].append({"name": "HOSTNET_RDMA_DNS_TIMEOUT", "value": "5"})
    t0 = time.monotonic()
    jobs.apply(cluster, objs)
    try:
        outcome = wait_job(cluster, ON, name, 120)
        TIMINGS["Indexed Job refused by the wrapper (DNS wait 5 s), to Failed"] = time.monotonic() - t0
        assert outcome == "Failed", dump(cluster, ON, f"app={name}")
        (pod,) = pods(cluster, ON, f"app={name}")
        (status,) = pod["status"]["containerStatuses"]
        terminated = status["state"].get("terminated") or status["lastState"].get("terminated") or {}
        cause = f"hostnet-rdma: the rendezvous endpoint host '{name}-7.{name}' did not resolve within 5s"
        assert terminated.get("exitCode") == 1 and terminated.get("message", "").startswith(cause), status
        described = cluster.kubectl("describe", "pod", pod["metadata"]["name"], "-n", ON)
        assert "Message:" in described and cause in described, described[-3000:]
    finally:
        cluster.kubectl("delete", "job", name, "-n", ON, "--wait=false", check=False)


def _dry_run_delivery(c: Cluster) -> str:
    """The delivery the webhook applies now, from a server-side dry-run pod it wraps."""
    p = _dry_run_probe(c, hostname="probe-0", subdomain="probe")
    if p.returncode != 0:
        return f"error: {p.stderr.strip()}"
    return _delivery_shape(json.loads(p.stdout))


def test_same_job_not_opted_in_shows_the_seed_failure(cluster: Cluster, unmutated_job: float) -> None:
    """Negative control: the identical Indexed Job where the webhook is not enabled fails
    (bounded) with one of the seed's symptoms, and its pods were not mutated. It was started
    with the cluster (it spends its time waiting for a store nobody hosts)."""
    outcome = wait_job(cluster, OFF, "ddp", 240)
    elapsed = time.monotonic() - unmutated_job
    TIMINGS["Indexed Job (not opted in) to Failed"] = elapsed
    text = dump(cluster, OFF, "app=ddp")
    for p in pods(cluster, OFF, "app=ddp"):
        assert "hostnet-rdma.io/injected" not in (p["metadata"].get("annotations") or {})
    assert "DDP-OK" not in text, "an unmutated job must not train across nodes here"
    seen = [name for name, pattern in SYMPTOMS.items() if pattern.search(text)]
    print(f"\nnot opted in: job {outcome} after {elapsed:.0f}s; symptoms: {seen}")
    assert outcome in ("Failed", "timeout"), text
    assert seen, f"none of the seed's symptoms in:\n{text}"
    cluster.kubectl("delete", "job", "ddp", "-n", OFF, "--wait=false")


def _dry_run_probe(c: Cluster, labels: dict[str, str] | None = None, **spec: Any) -> subprocess.CompletedProcess[str]:
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"generateName": "probe-", "namespace": ON,
                          "labels": {"hostnet-rdma.io/inject": "enabled"} if labels is None else labels},
             "spec": {"hostNetwork": True, "containers": [{"name": "c", "image": "localhost/pause:1", "command": ["torchrun", "t.py"]}],
                      **spec}}  # fmt: skip
    return subprocess.run(
        [str(c.bin / "kubectl"), "create", "--dry-run=server", "-o", "json", "-f", "-"],
        input=json.dumps(probe), capture_output=True, text=True, env=c.env(), timeout=60,
    )  # fmt: skip


def _mutated(p: subprocess.CompletedProcess[str]) -> bool:
    assert p.returncode == 0, p.stderr
    return "hostnet-rdma.io/injected" in (json.loads(p.stdout)["metadata"].get("annotations") or {})


def _scale_to_zero(c: Cluster) -> None:
    c.kubectl("scale", "deploy", RELEASE, "-n", RELEASE_NS, "--replicas=0")
    c.kubectl("wait", "--for=delete", "pod", "-n", RELEASE_NS, "-l", "app.kubernetes.io/name=hostnet-rdma,app.kubernetes.io/component=webhook",
              "--timeout=60s")  # fmt: skip


def test_webhook_down_failure_policy(cluster: Cluster, release: dict[str, Any]) -> None:
    """README: with the default failurePolicy Ignore, pods are created without the plumbing
    while the webhook is down, never silently: the chart's policy on unplumbed pods warns (or,
    webhook.unplumbedPods=Deny, refuses them); with Fail, pod creation in opted-in namespaces is
    refused."""
    assert _mutated(_dry_run_probe(cluster))
    try:
        _scale_to_zero(cluster)
        p = _dry_run_probe(cluster)
        assert not _mutated(p), "Ignore: the pod is created, unmutated"
        assert "created without the webhook's plumbing" in p.stderr, p.stderr  # kubectl prints the warning
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", "webhook.unplumbedPods=Deny")  # fmt: skip
        assert up.returncode == 0, up.stderr
        _scale_to_zero(cluster)
        deadline = time.monotonic() + 30
        while (p := _dry_run_probe(cluster)).returncode == 0:
            assert time.monotonic() < deadline, "webhook.unplumbedPods=Deny never took effect"
            time.sleep(0.5)
        assert "created without the webhook's plumbing" in p.stderr, p.stderr
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", "webhook.failurePolicy=Fail")  # fmt: skip
        assert up.returncode == 0, up.stderr
        _scale_to_zero(cluster)  # the upgrade brought the replicas back
        deadline = time.monotonic() + 30
        while (p := _dry_run_probe(cluster)).returncode == 0:
            assert time.monotonic() < deadline, "failurePolicy Fail never took effect"
            time.sleep(0.5)
        assert "pods.hostnet-rdma.io" in p.stderr, p.stderr
    finally:
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", "webhook.failurePolicy=Ignore", "--set", "webhook.unplumbedPods=Warn", "--wait",
                  "--timeout", "3m")  # fmt: skip
        assert up.returncode == 0, up.stderr
    deadline = time.monotonic() + 30
    while not _mutated(_dry_run_probe(cluster)):
        assert time.monotonic() < deadline, "the webhook did not come back"
        time.sleep(0.5)


def test_opt_in_modes(cluster: Cluster, release: dict[str, Any]) -> None:
    """Opt-in mode namespace (the default): a host-network DaemonSet that trains nothing (a node
    exporter's shape) in the labelled namespace runs unchanged on both nodes (no privileged
    container, no devices); a training pod labelled hostnet-rdma.io/inject=disabled is left
    alone. Mode pod (config.optIn=pod, helm upgrade): unlabelled pods are ignored again."""
    exporter = {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-exporter", "namespace": ON},
        "spec": {"selector": {"matchLabels": {"app": "node-exporter"}},
                 "template": {"metadata": {"labels": {"app": "node-exporter"}},
                              "spec": {"hostNetwork": True, "terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "node-exporter", "image": "localhost/pause:1",
                                                       "imagePullPolicy": "Never",
                                                       "resources": {"requests": {"cpu": "10m"}}}]}}},
    }  # fmt: skip
    t0 = time.monotonic()
    jobs.apply(cluster, [exporter])
    try:
        deadline = time.monotonic() + 120
        while True:
            found = pods(cluster, ON, "app=node-exporter")
            if len(found) == len(cluster.nodes) and all(p["status"].get("phase") == "Running" for p in found):
                break
            assert time.monotonic() < deadline, dump(cluster, ON, "app=node-exporter")
            time.sleep(1)
        TIMINGS["host-network DaemonSet (not training) in the labelled namespace to Running"] = time.monotonic() - t0
        for p in found:
            assert "hostnet-rdma.io/injected" not in (p["metadata"].get("annotations") or {}), p["metadata"]
            assert p["spec"]["dnsPolicy"] == "ClusterFirst"
            assert not p["spec"]["containers"][0].get("securityContext"), p["spec"]["containers"][0]
            assert not [v for v in p["spec"].get("volumes", []) if v["name"].startswith("hostnet-rdma")]
    finally:
        cluster.kubectl("delete", "daemonset", "node-exporter", "-n", ON, "--wait=false", check=False)
    assert _mutated(_dry_run_probe(cluster, labels={})), "an unlabelled training pod is mutated"
    assert not _mutated(_dry_run_probe(cluster, labels={"hostnet-rdma.io/inject": "disabled"}))
    try:
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", "config.optIn=pod", "--wait", "--timeout", "3m")  # fmt: skip
        assert up.returncode == 0, up.stderr
        deadline = time.monotonic() + 30
        while _mutated(_dry_run_probe(cluster, labels={})):
            assert time.monotonic() < deadline, "opt-in mode pod never took effect"
            time.sleep(0.5)
        assert _mutated(_dry_run_probe(cluster)), "a labelled pod is still mutated"
    finally:
        up = helm(cluster, "upgrade", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--reuse-values",
                  "--set", "config.optIn=namespace", "--wait", "--timeout", "3m")  # fmt: skip
        assert up.returncode == 0, up.stderr
    deadline = time.monotonic() + 30
    while not _mutated(_dry_run_probe(cluster, labels={})):
        assert time.monotonic() < deadline, "back to opt-in mode namespace: never took effect"
        time.sleep(0.5)


def _drops(c: Cluster) -> list[str]:
    """What the nodes' own interfaces count as dropped or in error."""
    keys = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
    return [sh("ip", "netns", "exec", ns, "sh", "-c", " ".join(f"cat /sys/class/net/eth0/statistics/{k};" for k in keys)).stdout
            for ns in c.state.netns]  # fmt: skip


def _doctor_between(c: Cluster, sites: tuple[str, ...]) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "app.cli", "doctor", "--between", ",".join(c.nodes), "--kubeconfig", str(c.kubeconfig),
         "--image", image_ref(c, "train"), "--image-pull-policy", "Never", "--bound", "5", "--timeout", "180",
         *[a for s in sites for a in ("--torch-host-path", s)]],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return p, time.monotonic() - t0


def test_a_silent_large_frame_drop_between_the_nodes_is_named(cluster: Cluster, release: dict[str, Any]) -> None:
    """The field report's second failure (seed 001), built in: links at MTU 9000 end to end as
    the nodes see them, and the switch between them dropping every frame over 1500 bytes, with
    no ICMP and no counter on the nodes' interfaces. `doctor --between` and the e2e job both send
    messages of increasing size and name it in seconds; on the healthy cluster both pass."""
    from app import kube
    from app.e2e import jobs as e2e_jobs
    from app.e2e import run as e2e_run

    sites = tuple(str(s) for s in torch_sites())
    healthy, seconds = _doctor_between(cluster, sites)
    TIMINGS["doctor --between, healthy path: PASS"] = seconds
    print(f"\nhealthy ({seconds:.0f}s):\n{healthy.stdout}")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "PASS  path" in healthy.stdout and "to 64 MiB ok" in healthy.stdout
    params = e2e_jobs.Params(namespace="", image=image_ref(cluster, "train"), image_pull_policy="Never",
                             host_paths=sites, sweep_bound=5)  # fmt: skip
    counters = _drops(cluster)
    with cluster.silent_large_frame_drop():
        broken, seconds = _doctor_between(cluster, sites)
        TIMINGS["doctor --between, large frames dropped: FAIL with the verdict"] = seconds
        print(f"large frames dropped ({seconds:.0f}s):\n{broken.stdout}")
        verdict = re.compile(rf"messages of 2048 bytes and more do not arrive between ({'|'.join(cluster.nodes)}) and "
                             rf"({'|'.join(cluster.nodes)}); smaller ones \(512 bytes\) do: an MTU or receive-buffer mismatch")  # fmt: skip
        assert broken.returncode == 1 and "FAIL  path" in broken.stdout, broken.stdout + broken.stderr
        assert verdict.search(broken.stdout) and "2 KiB lost" in broken.stdout, broken.stdout
        t0 = time.monotonic()
        (job,) = e2e_run.run(kube.api_client(str(cluster.kubeconfig)),
                             e2e_run.Options(params, launchers=["job"], timeout=180), say=log)  # fmt: skip
        TIMINGS["e2e job, large frames dropped: failed with the verdict"] = time.monotonic() - t0
        assert job.outcome == "failed" and verdict.search(job.detail), job
        assert job.path.startswith("2 KiB lost"), job
        assert _drops(cluster) == counters, "the nodes' own interfaces must count nothing"
    healed, seconds = _doctor_between(cluster, sites)
    assert healed.returncode == 0, healed.stdout + healed.stderr
