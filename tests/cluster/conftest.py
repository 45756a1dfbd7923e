"""Tier 5 fixtures: one real multi-node cluster per session, the chart installed from the
image built from deploy/Dockerfile, and the namespaces the jobs run in."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import (
    ROOT,
    Cluster,
    available,
    binaries,
    build_images,
    cleanup_stale,
    leftovers,
    log,
    new_workdir,
)

RELEASE = "hostnet-rdma"
RELEASE_NS = "hostnet-rdma-system"
ON, OFF = "hrc-on", "hrc-off"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    why = available()
    if why:
        # Never a skip: a skipped tier would hide a missing install step in CI.
        pytest.fail(f"cluster tier cannot run: {why}")
    cleanup_stale()
    t0 = time.monotonic()
    bins = binaries()
    TIMINGS["binaries (built or cached)"] = time.monotonic() - t0
    t1 = time.monotonic()
    images = build_images()
    TIMINGS["images (built or cached)"] = time.monotonic() - t1
    c = Cluster(new_workdir(), bins, images)
    try:
        c.up()
        TIMINGS.update({f"cluster: {k}": v for k, v in c.timings.items()})
        yield c
    finally:
        t2 = time.monotonic()
        c.down()
        TIMINGS["teardown"] = time.monotonic() - t2
        left = leftovers(c.state)
        assert not left, f"teardown left: {left}"


def helm(c: Cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c.bin / "helm"), *args], capture_output=True, text=True, env=c.env(), cwd=ROOT, timeout=timeout
    )


def image_ref(c: Cluster, name: str) -> str:
    return (c.images / f"{name}.ref").read_text().strip()


@pytest.fixture(scope="package")
def release(cluster: Cluster) -> dict[str, Any]:
    """`helm install` as a user does: default values except the image, its pull policy and
    the infiniband hostPath (a test folder here). Then `helm test`."""
    infiniband = cluster.workdir / "infiniband"
    infiniband.mkdir(exist_ok=True)
    repo, tag = image_ref(cluster, "webhook").rsplit(":", 1)
    t0 = time.monotonic()
    p = helm(cluster, "install", RELEASE, "charts/hostnet-rdma", "-n", RELEASE_NS, "--create-namespace",
             "--set", f"image.repository={repo}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
             "--set", f"config.inject.infinibandPath={infiniband}", "--wait", "--timeout", "4m")  # fmt: skip
    if p.returncode != 0:
        log(cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False))
        log(cluster.kubectl("describe", "pods", "-n", RELEASE_NS, check=False)[-6000:])
        log(cluster.kubectl("logs", "-n", RELEASE_NS, "-l", "app.kubernetes.io/name=hostnet-rdma", "--tail=50",
                            check=False))  # fmt: skip
    assert p.returncode == 0, p.stderr
    TIMINGS["helm install --wait"] = time.monotonic() - t0
    t1 = time.monotonic()
    test = helm(cluster, "test", RELEASE, "-n", RELEASE_NS, "--timeout", "2m")
    TIMINGS["helm test"] = time.monotonic() - t1
    for ns, labels in ((ON, {"hostnet-rdma.io/inject": "enabled"}), (OFF, {})):
        cluster.kubectl("create", "namespace", ns)
        # Host-network RDMA pods need the privileged Pod Security level (README: Opt in).
        cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged",
                        *(f"{k}={v}" for k, v in labels.items()))  # fmt: skip
    for ns in (ON, OFF):
        deadline = time.monotonic() + 60
        while cluster.kubectl("get", "sa", "default", "-n", ns, check=False) == "":
            assert time.monotonic() < deadline, f"no default ServiceAccount in {ns}"
            time.sleep(0.3)
    return {"helm_test": test, "infiniband": infiniband}


def secret_ca(c: Cluster) -> bytes:
    data = c.kubectl_json("get", "secret", "hostnet-rdma-tls", "-n", RELEASE_NS)["data"]
    return base64.b64decode(data["ca.crt"])


def torch_sites() -> list[Path]:
    """The test machine's site-packages directories holding torch and what it imports
    (mounted read-only into training pods; see images/train.Dockerfile)."""
    import importlib.util

    sites: list[Path] = []
    for module in ("torch", "numpy", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
                   "typing_extensions"):  # fmt: skip
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{module} is not installed (make test installs torch)"
        origin = Path(spec.origin)
        site = origin.parent.parent if origin.name == "__init__.py" else origin.parent
        if site not in sites:
            sites.append(site)
    return sites


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.write_line("cluster tier timings:")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"  {k}: {v:.1f}s")
