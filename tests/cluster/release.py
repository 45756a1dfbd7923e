"""The chart installed on the test cluster as a user installs it, and the namespaces jobs run
in. Shared by the cluster tier's fixtures and scripts/bench/cluster_pods.py."""

from __future__ import annotations

import subprocess
import time

from tests.cluster.harness import ROOT, Cluster, log

RELEASE = "hostnet-rdma"
RELEASE_NS = "hostnet-rdma-system"
ON, OFF = "hrc-on", "hrc-off"


def helm(c: Cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c.bin / "helm"), *args], capture_output=True, text=True, env=c.env(), cwd=ROOT, timeout=timeout
    )


def image_ref(c: Cluster, name: str) -> str:
    return (c.images / f"{name}.ref").read_text().strip()


def install(c: Cluster, *sets: str) -> subprocess.CompletedProcess[str]:
    """`helm install` with default values except the images (the webhook's and the wrapper's),
    their pull policy and the infiniband hostPath (a directory of the run's under /dev), plus `sets` (KEY=VALUE); waits for the
    Deployment. When the release exists (a kept cluster, HOSTNET_RDMA_CLUSTER, or a second
    call), an upgrade."""
    infiniband = c.infiniband
    infiniband.mkdir(exist_ok=True)
    repo, tag = image_ref(c, "webhook").rsplit(":", 1)
    wrepo, wtag = image_ref(c, "wrapper").rsplit(":", 1)
    verb = "upgrade" if helm(c, "status", RELEASE, "-n", RELEASE_NS).returncode == 0 else "install"
    p = helm(c, verb, RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--create-namespace",
             "--set", f"image.repository={repo}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
             "--set", f"wrapperImage.repository={wrepo}", "--set", f"wrapperImage.tag={wtag}",
             "--set", f"config.inject.infinibandPath={infiniband}", *[a for kv in sets for a in ("--set", kv)],
             "--wait", "--timeout", "4m")  # fmt: skip
    if p.returncode != 0:
        log(c.kubectl("get", "pods", "-A", "-o", "wide", check=False))
        log(c.kubectl("describe", "pods", "-n", RELEASE_NS, check=False)[-6000:])
        log(
            c.kubectl(
                "logs",
                "-n",
                RELEASE_NS,
                "-l",
                "app.kubernetes.io/name=hostnet-rdma,app.kubernetes.io/component=webhook",
                "--tail=50",
                check=False,
            )
        )
    return p


def namespaces(c: Cluster) -> None:
    """ON is opted in, OFF is not; both allow privileged pods (README: Opt in)."""
    for ns, labels in ((ON, ["hostnet-rdma.io/inject=enabled"]), (OFF, [])):
        if c.kubectl("get", "namespace", ns, check=False) == "":
            c.kubectl("create", "namespace", ns)
        c.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged", *labels, "--overwrite")
    for ns in (ON, OFF):
        deadline = time.monotonic() + 60
        while c.kubectl("get", "sa", "default", "-n", ns, check=False) == "":
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {ns}")
            time.sleep(0.3)
