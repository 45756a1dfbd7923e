"""Tier 5 fixtures: one real multi-node cluster per session, the chart installed from the
image built from deploy/Dockerfile, and the namespaces the jobs run in."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.harness import (
    Cluster,
    available,
    binaries,
    build_images,
    cleanup_stale,
    leftovers,
    new_workdir,
)
from tests.cluster.release import RELEASE, RELEASE_NS, helm, install, namespaces
from tests.cluster.timings import TIMINGS


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    attach = os.environ.get("HOSTNET_RDMA_CLUSTER", "")
    if attach:
        # A cluster kept by `python -m tests.cluster.harness up`: use it, leave it running, and
        # give it the images as they are now.
        kept = Cluster.attach(Path(attach), binaries(), build_images())
        for name in ("webhook", "wrapper", "train"):
            kept.import_image(kept.images / f"{name}.tar")
        yield kept
        return
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


@pytest.fixture(scope="package")
def release(cluster: Cluster) -> dict[str, Any]:
    """`helm install` as a user does (tests/cluster/release.py), then `helm test`."""
    t0 = time.monotonic()
    p = install(cluster)
    assert p.returncode == 0, p.stderr
    TIMINGS["helm install --wait"] = time.monotonic() - t0
    t1 = time.monotonic()
    test = helm(cluster, "test", RELEASE, "-n", RELEASE_NS, "--timeout", "2m", "--logs")
    TIMINGS["helm test"] = time.monotonic() - t1
    namespaces(cluster)
    return {"helm_test": test}


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
