"""The launchers' own controllers in the test cluster, installed from their own manifests.

Each controller is built from the Go module proxy at a pinned release
(scripts/testenv/build-launchers.sh), packed into an image (scripts/testenv/build-images.sh),
and deployed with the CRDs, RBAC and webhooks of the same module version, rendered by
`kubectl kustomize` from the module's own config. Only the image is swapped for the local one
(and pulled never). Their webhooks get their certificates the way each project does it
(cert-controller in the pod), through the real API server.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.harness import Cluster, log


@dataclass(frozen=True)
class Controller:
    name: str
    module: str
    version: str
    # Directories of the module to render (kustomizations), relative to the module root.
    sources: tuple[str, ...]
    namespace: str
    container: str  # the manager container in the rendered Deployment
    # Extra kustomization text (namespace, generators) when `sources` are bases, not overlays.
    kustomization: str = ""

    @property
    def binary(self) -> str:
        return f"{self.name}-{self.version}"


PINS_FILE = Path(__file__).resolve().parents[2] / "scripts" / "testenv" / "launchers.pins"


def read_pins(path: Path = PINS_FILE) -> dict[str, tuple[str, str]]:
    """name -> (module, version): the pins build-launchers.sh builds from, in one file."""
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, module, _, version = line.split()
            pins[name] = (module, version)
    return pins


PINS = read_pins()
TRAINER = PINS["trainer"][1]
CONTROLLERS = {
    c.name: c
    for c in (
        Controller("jobset", *PINS["jobset"], ("config/default",), "jobset-system", "manager"),
        Controller("lws", *PINS["lws"], ("config/default",), "lws-system", "manager"),
        # The manager overlay adds a remote JobSet release (not reachable here): render its bases
        # and generate the webhook Secret as that overlay does; JobSet comes from its own module.
        Controller(
            "trainer", *PINS["trainer"],
            ("manifests/base/crds", "manifests/base/manager", "manifests/base/rbac", "manifests/base/webhook"),
            "kubeflow-system", "manager",
            kustomization="namespace: kubeflow-system\n"
            "secretGenerator:\n- name: kubeflow-trainer-webhook-cert\n  namespace: kubeflow-system\n"
            "  options: {disableNameSuffixHash: true}\n"
            f"configMapGenerator:\n- name: kubeflow-trainer-public\n  literals: [kubeflow_trainer_version={TRAINER}]\n"
            "  options: {disableNameSuffixHash: true}\n",
        ),
        Controller(
            "training-operator", *PINS["training-operator"],
            ("manifests/overlays/standalone",), "kubeflow", "training-operator",
        ),
        # Its default configuration (the pod webhook on all namespaces but kube-system and
        # kueue-system, TopologyAwareScheduling on by default since v0.14), with the PyTorchJob
        # integration turned on (enable_frameworks): off by default since v0.19.
        Controller("kueue", *PINS["kueue"], ("config/default",), "kueue-system", "manager"),
        # No webhooks of its own: the CRD, RBAC and the Deployment (with leader election).
        Controller("mpi-operator", *PINS["mpi-operator"], ("manifests/overlays/standalone",), "mpi-operator",
                   "mpi-operator"),
    )
}  # fmt: skip


def module_dir(module: str, version: str) -> Path:
    """The module's files, from the Go module cache (downloaded by build-launchers.sh)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, check=True
    )
    return Path(json.loads(out.stdout)["Dir"])


def render(c: Cluster, ctl: Controller) -> list[dict[str, Any]]:
    root = module_dir(ctl.module, ctl.version)
    with tempfile.TemporaryDirectory() as tmp:
        rel = [os.path.relpath(root / s, tmp) for s in ctl.sources]
        resources = "resources:\n" + "".join(f"- {r}\n" for r in rel)
        extra = ctl.kustomization
        if ctl.kustomization.startswith("namespace:"):
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctl.namespace}}
            Path(tmp, "namespace.yaml").write_text(yaml.safe_dump(ns))
            resources += "- namespace.yaml\n"
        Path(tmp, "kustomization.yaml").write_text(resources + extra)
        text = c.kubectl("kustomize", "--load-restrictor=LoadRestrictionsNone", tmp, timeout=120)
    return [d for d in yaml.safe_load_all(text) if d]


def localize(docs: list[dict[str, Any]], ctl: Controller, image: str) -> list[dict[str, Any]]:
    """Swap the manager's image for the locally built one; nothing else changes."""
    swapped = 0
    for d in docs:
        if d.get("kind") != "Deployment":
            continue
        for container in d["spec"]["template"]["spec"]["containers"]:
            if container["name"] == ctl.container:
                container["image"] = image
                container["imagePullPolicy"] = "Never"
                if container.get("command"):
                    container["command"] = ["/manager", *container["command"][1:]]
                swapped += 1
    assert swapped == 1, f"{ctl.name}: expected one {ctl.container!r} container, found {swapped}"
    return docs


# Kueue integrations its default configuration leaves off that the tests' jobs need: the
# Training Operator v1's PyTorchJob (commented out in config/default since v0.19, where
# Trainer v2 is the default). A user of both turns it on the same way (docs/launchers.md).
KUEUE_FRAMEWORKS = ("kubeflow.org/pytorchjob",)


def enable_frameworks(docs: list[dict[str, Any]], frameworks: tuple[str, ...]) -> None:
    """Add `frameworks` to `integrations.frameworks` of Kueue's manager ConfigMap, as is."""
    key = "controller_manager_config.yaml"
    maps = [d for d in docs if d.get("kind") == "ConfigMap" and key in d.get("data", {})]
    assert len(maps) == 1, f"kueue: expected one ConfigMap with {key}, found {len(maps)}"
    config = yaml.safe_load(maps[0]["data"][key])
    have = config.setdefault("integrations", {}).setdefault("frameworks", [])
    have += [f for f in frameworks if f not in have]
    maps[0]["data"][key] = yaml.safe_dump(config, sort_keys=False)


def training_operator(docs: list[dict[str, Any]], ctl: Controller, init_image: str) -> list[dict[str, Any]]:
    """The Training Operator beside the MPI Operator, as the two must be set up to run side by
    side: its own MPIJob (kubeflow.org/v1) would take the CRD the MPI Operator's v2beta1 needs,
    so that CRD is left out and the operator runs only its PyTorchJob controller. Its init
    container for the workers of a job with a Master (`nslookup` of master-0 until it resolves)
    runs the tier's training image (it has nslookup) instead of alpine:3.10 from Docker Hub."""
    kept = [d for d in docs if not (d.get("kind") == "CustomResourceDefinition"
                                    and d["metadata"]["name"] == "mpijobs.kubeflow.org")]  # fmt: skip
    for d in kept:
        if d.get("kind") == "Deployment":
            for container in d["spec"]["template"]["spec"]["containers"]:
                if container["name"] == ctl.container:
                    container["command"] = [
                        *container["command"],
                        "--enable-scheme=pytorchjob",
                        f"--pytorch-init-container-image={init_image}",
                    ]
    assert len(kept) == len(docs) - 1, "training-operator: expected its mpijobs.kubeflow.org CRD"
    return kept


def install(c: Cluster, name: str) -> float:
    """Deploy one controller and wait until its webhooks answer. Returns the seconds it took."""
    t0 = time.monotonic()
    ctl = CONTROLLERS[name]
    tar = c.images / f"launcher-{ctl.binary}.tar"
    image = (c.images / f"launcher-{ctl.binary}.ref").read_text().strip()
    c.import_image(tar)
    docs = localize(render(c, ctl), ctl, image)
    if name == "kueue":
        enable_frameworks(docs, KUEUE_FRAMEWORKS)
    if name == "training-operator":
        docs = training_operator(docs, ctl, (c.images / "train.ref").read_text().strip())
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
              stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), timeout=180)  # fmt: skip
    deployments = [d["metadata"]["name"] for d in docs if d.get("kind") == "Deployment"]
    for dep in deployments:
        wait_ready(c, ctl, dep)
    wait_for_ca_bundles(c, name, docs)
    elapsed = time.monotonic() - t0
    log(f"launcher {name} {ctl.version} installed in {elapsed:.1f}s")
    return elapsed


def wait_for_ca_bundles(c: Cluster, name: str, docs: list[dict[str, Any]], timeout: float = 120) -> None:
    """Until every webhook of the controller's webhook configurations has a caBundle (the
    controller writes it itself once its certificate is ready)."""
    hooks = {(d["kind"], d["metadata"]["name"]) for d in docs if d.get("kind", "").endswith("WebhookConfiguration")}
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for kind, hook in sorted(hooks):
            cfg = c.kubectl_json("get", kind.lower(), hook)
            missing += [f"{hook}/{w['name']}" for w in cfg.get("webhooks", []) if not w["clientConfig"].get("caBundle")]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: webhooks without a caBundle: {missing}")
        time.sleep(1)


# cert-controller (which these controllers embed) can lose its own first Secret write and then
# never look again, so readiness stays "certificates are not ready" for good: its webhook
# reconciler reads the Secret from a second cache that may still hold the empty one ("not
# well-formed"), or its refresh collides with the first write ("the object has been modified",
# seen with Trainer v2.3.0). Upstream: open-policy-agent/cert-controller, e.g. kueue#622,
# metallb#1814. A restarted pod finds the written Secret at start; that is what users are told
# to do, so the tests do it once, when the Deployment is still not ready well after start and
# the log shows either.
CERT_RACE = ("secret is not well-formed, cannot update webhook configurations",
             "could not refresh CA and server certs")  # fmt: skip


def rollout(c: Cluster, ctl: Controller, dep: str, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c.bin / "kubectl"), "rollout", "status", f"deploy/{dep}", "-n", ctl.namespace, f"--timeout={timeout}s"],
        capture_output=True, text=True, env=c.env(), timeout=timeout + 20,
    )  # fmt: skip


def wait_ready(c: Cluster, ctl: Controller, dep: str, timeout: float = 240, patience: float = 40) -> None:
    """Until the Deployment is rolled out; restarted once if it is still not ready after
    `patience` seconds and its log shows the cert-controller race. Not sooner: with two
    replicas both write the Secret at start and one logs the conflict harmlessly (LWS); a
    restart then only adds a surge pod that may not fit (seen: Pending, the rollout stuck)."""
    start = time.monotonic()
    deadline = start + timeout
    restarted = False
    while True:
        p = rollout(c, ctl, dep, 10)
        if p.returncode == 0:
            return
        logs = c.kubectl("logs", "-n", ctl.namespace, f"deploy/{dep}", "--tail=200", check=False)
        if not restarted and time.monotonic() - start >= patience and any(r in logs for r in CERT_RACE):
            log(f"{ctl.name}: {dep} not ready, its log shows cert-controller's stale-Secret race; restarting it once")
            c.kubectl("rollout", "restart", f"deploy/{dep}", "-n", ctl.namespace)
            restarted = True
        if time.monotonic() > deadline:
            log(c.kubectl("get", "pods", "-n", ctl.namespace, "-o", "wide", check=False))
            log("\n".join(logs.splitlines()[-60:]))
            raise RuntimeError(f"{ctl.name}: deployment {dep} not ready: {p.stderr}")


def apply_with_retry(c: Cluster, docs: list[dict[str, Any]], timeout: float = 90) -> None:
    """A controller's webhook Service can take a moment to have ready endpoints after its
    caBundle is set: retry creation while the API server says the webhook is unreachable."""
    deadline = time.monotonic() + timeout
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    while True:
        p = subprocess.run([str(c.bin / "kubectl"), "apply", "-f", "-"], input=body, capture_output=True, text=True,
                           env=c.env(), timeout=120)  # fmt: skip
        if p.returncode == 0:
            return
        if "failed calling webhook" not in p.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"kubectl apply: {p.stderr}")
        time.sleep(2)


# ------------------------------------------------------------------------------ Volcano

VOLCANO = PINS["volcano"][1]
VOLCANO_NS = "volcano-system"
# Deployment container -> the binary it runs (upstream images: vc-<binary> with it as entrypoint).
VOLCANO_CONTAINERS = {"admission": "webhook-manager", "volcano-controllers": "controller-manager",
                      "volcano-scheduler": "scheduler"}  # fmt: skip


def volcano_source() -> Path:
    """Volcano's source tree, as scripts/testenv/build-launchers.sh left it (module proxy or
    the third_party/ snapshot)."""
    cache = Path(os.environ.get("HOSTNET_RDMA_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                               Path.home() / ".cache") / "hostnet-rdma")  # fmt: skip
    src = cache / "src" / f"volcano-{VOLCANO}"
    assert (src / ".ready").exists(), f"no Volcano source at {src}: run scripts/testenv/build-launchers.sh"
    return src


def _is_admission_init(d: dict[str, Any]) -> bool:
    return d.get("metadata", {}).get("name") in ("volcano-admission-init", "volcano-admission-init-role")


def install_volcano(c: Cluster) -> float:
    """What Volcano's users apply (installer/volcano-development.yaml: CRDs, RBAC, the
    controller-manager, the scheduler with the configuration the chart ships, the admission
    webhook-manager and its webhook configurations), with the local images. One difference:
    the chart's `volcano-admission-init` Job runs Volcano's own gen-admission-secret.sh in an
    image with openssl and kubectl; here that same script runs on the test machine against the
    cluster (no such image without a registry), making the same Secret. The webhook-manager
    then writes the CA into its webhook configurations itself."""
    t0 = time.monotonic()
    src = volcano_source()
    docs = [d for d in yaml.safe_load_all((src / "installer" / "volcano-development.yaml").read_text()) if d]
    docs = [d for d in docs if not _is_admission_init(d)]
    swapped = 0
    for d in docs:
        if d.get("kind") != "Deployment":
            continue
        for container in d["spec"]["template"]["spec"]["containers"]:
            binary = VOLCANO_CONTAINERS.get(container["name"])
            if binary:
                name = f"volcano-{binary}-{VOLCANO}"
                c.import_image(c.images / f"launcher-{name}.tar")
                container["image"] = (c.images / f"launcher-{name}.ref").read_text().strip()
                container["imagePullPolicy"] = "Never"
                swapped += 1
    assert swapped == 3, f"volcano: expected 3 manager containers, found {swapped}"
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
              stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), timeout=180)  # fmt: skip
    with tempfile.TemporaryDirectory() as certs:
        script = Path(certs) / "gen-admission-secret.sh"
        text = (src / "installer" / "dockerfile" / "webhook-manager" / "gen-admission-secret.sh").read_text()
        # Its key material goes to /tmp; keep it in a directory of ours instead.
        script.write_text(text.replace("CERTDIR=/tmp", f"CERTDIR={certs}"))
        p = subprocess.run(["bash", str(script), "--service", "volcano-admission-service", "--namespace", VOLCANO_NS,
                            "--secret", "volcano-admission-secret"],
                           capture_output=True, text=True, env=c.env(), timeout=120)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
    ctl = Controller("volcano", *PINS["volcano"], (), VOLCANO_NS, "")
    for dep in [d["metadata"]["name"] for d in docs if d.get("kind") == "Deployment"]:
        wait_ready(c, ctl, dep)
    wait_for_ca_bundles(c, "volcano", docs)
    # The scheduler creates the default queue at start; jobs name it.
    deadline = time.monotonic() + 60
    while c.kubectl("get", "queue", "default", check=False) == "":
        if time.monotonic() > deadline:
            raise RuntimeError("volcano: no default queue")
        time.sleep(1)
    elapsed = time.monotonic() - t0
    log(f"launcher volcano {VOLCANO} installed in {elapsed:.1f}s")
    return elapsed


# ------------------------------------------------------------------------------ all of them


def install_all(c: Cluster, wanted: list[str]) -> dict[str, float]:
    """Every wanted controller, side by side where they are independent: Trainer after JobSet
    (it watches JobSets), Kueue after all of them are ready. Kueue's webhooks (failurePolicy
    Fail) take every Deployment, StatefulSet, Job and Pod outside kube-system and kueue-system:
    until its own pod serves them, creating or restarting another controller's Deployment is
    refused ("no endpoints available for service kueue-webhook-service", seen when they were
    installed side by side). Returns each install's seconds and the whole (`all`)."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    times: dict[str, float] = {}

    def one(name: str) -> None:
        if name in wanted:
            times[name] = install_volcano(c) if name == "volcano" else install(c, name)

    chains = [("jobset", "trainer"), ("lws",), ("training-operator", "mpi-operator"), ("volcano",)]
    with ThreadPoolExecutor(len(chains)) as pool:
        for f in [pool.submit(lambda ch=ch: [one(n) for n in ch]) for ch in chains]:
            f.result()
    one("kueue")
    times["all"] = time.monotonic() - t0
    return times
