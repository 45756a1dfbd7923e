#!/usr/bin/env python3
"""Pod create -> Running on the real two-node cluster of the test tier (tests/cluster), with
and without the webhook. Needs root; builds or reuses the cached binaries and images.

For each round, N host-network pods (the training image, `sleep`) are created at once in the
namespace that is not opted in, then in the opted-in one (mutated: plumbing, NCCL env, the
wrapper bootstrap). One phase per wrapper delivery (`helm upgrade --set
config.wrapper.delivery=...`: an image volume of the wrapper image, an image volume of the
webhook's image with subPath, an init container, inline), each with its own rounds without the
webhook, so the deliveries are compared against the same baseline. The images are imported
into the nodes beforehand (no registry here), so a pull's cost is not in these figures: the
images' sizes are reported beside them. Each
pod's latency runs from just before its POST to the first poll that shows it Running. Pods
are deleted between batches. Prints a table and one JSON line.

    sudo .venv/bin/python scripts/bench/cluster_pods.py [--pods 20] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.cluster import harness, release  # noqa: E402


def pod(name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "1", "hostnet-rdma.io/inject": "enabled"}},
        "spec": {
            "hostNetwork": True,
            # A stable DNS name (as a StatefulSet or Indexed Job pod has): the webhook wraps
            # only pods it can name, and the wrapper is what the two deliveries differ in.
            "hostname": name,
            "subdomain": "bench",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "trainer", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "600"]}
            ],
        },
    }


def batch(
    c: harness.Cluster, api: httpx.Client, ns: str, n: int, image: str, tag: str, delivery: str = ""
) -> list[float]:
    names = [f"bench-{tag}-{i}" for i in range(n)]
    sent: dict[str, float] = {}
    running: dict[str, float] = {}
    done = threading.Event()

    def poll() -> None:
        # A list every 50 ms: a watch opened on a fresh API server can fail with
        # "Too large resource version", and 50 ms is far below what is measured.
        while not done.is_set():
            items = api.get(f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": "bench=1"}).json()["items"]
            now = time.perf_counter()
            for obj in items:
                name = obj["metadata"]["name"]
                if obj.get("status", {}).get("phase") == "Running" and name not in running:
                    running[name] = now
            if all(x in running for x in names):
                return
            time.sleep(0.05)

    w = threading.Thread(target=poll, daemon=True)
    w.start()

    def create(name: str) -> None:
        sent[name] = time.perf_counter()
        r = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod(name, image))
        assert r.status_code == 201, r.text

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))
    w.join(180)
    done.set()
    if len(running) < n:
        print(c.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False), file=sys.stderr)
    missing = [x for x in names if x not in running]
    assert not missing, f"not Running within 180s: {missing}"
    if ns == release.ON:
        got = api.get(f"/api/v1/namespaces/{ns}/pods/{names[0]}").json()
        assert "hostnet-rdma.io/injected" in got["metadata"].get("annotations", {}), "opted-in pod was not mutated"
        inits = [i["name"] for i in got["spec"].get("initContainers") or []]
        assert ("hostnet-rdma-wrapper" in inits) == (delivery == "initContainer"), (delivery, inits)
        image_volumes = [v["name"] for v in got["spec"]["volumes"] if "image" in v]
        assert (image_volumes == ["hostnet-rdma"]) == (delivery == "imageVolume"), (delivery, image_volumes)
    c.kubectl("delete", "pods", "-n", ns, "-l", "bench=1", "--wait=true", "--timeout=120s")
    return [running[x] - sent[x] for x in names]


# phase -> (delivery, extra chart values)
PHASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "imageVolume": ("imageVolume", ()),
    "imageVolume, webhook image": ("imageVolume", ("wrapperImage.useWebhookImage=true",)),
    "initContainer": ("initContainer", ()),
    "inline": ("inline", ()),
}
ROWS = tuple(row for d in PHASES for row in (f"without webhook ({d} phase)", f"with webhook, {d}"))


def image_sizes(c: harness.Cluster) -> dict[str, int]:
    """Bytes of each image's layers, uncompressed (the docker-archive the nodes imported)."""
    import tarfile

    out: dict[str, int] = {}
    for name in ("webhook", "wrapper"):
        with tarfile.open(c.images / f"{name}.tar") as t:
            out[f"{name}_image_layer_bytes"] = sum(m.size for m in t.getmembers() if m.name.endswith(".tar"))
    return out


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(values),
        "mean_s": round(statistics.mean(values), 3),
        "p50_s": round(ordered[len(ordered) // 2], 3),
        "p95_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
        "max_s": round(ordered[-1], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    why = harness.available()
    if why:
        print(f"cluster_pods: {why}", file=sys.stderr)
        return 2
    harness.cleanup_stale()
    c = harness.Cluster(harness.new_workdir(), harness.binaries(), harness.build_images())
    try:
        c.up()
        p = release.install(c)
        assert p.returncode == 0, p.stderr
        release.namespaces(c)
        image = release.image_ref(c, "train")
        api = httpx.Client(base_url=c.api_url, headers={"Authorization": f"Bearer {c.token}"},
                           verify=str(c.pki / "ca.crt"), timeout=30)  # fmt: skip
        batch(c, api, release.OFF, 4, image, "warmup")  # first container starts pay one-off costs
        results: dict[str, list[float]] = {k: [] for k in ROWS}
        for phase, (delivery, values) in PHASES.items():
            p = release.install(c, f"config.wrapper.delivery={delivery}", *values)
            assert p.returncode == 0, p.stderr
            time.sleep(5)  # the old replicas' endpoints leave; the new config is loaded
            for r in range(args.rounds):
                results[f"without webhook ({phase} phase)"] += batch(c, api, release.OFF, args.pods, image, f"off{r}")
                results[f"with webhook, {phase}"] += batch(c, api, release.ON, args.pods, image, f"on{r}",
                                                           delivery)  # fmt: skip
        out = {
            "pods_per_batch": args.pods,
            "rounds": args.rounds,
            "nodes": len(c.nodes),
            "cluster_up_s": c.timings.get("cluster up"),
            **image_sizes(c),
            **{k: summary(v) for k, v in results.items()},
        }
    finally:
        c.down()
    print(f"pod create -> Running, {args.pods} pods at once x {args.rounds} rounds, {len(c.nodes)} nodes:")
    print(f"{'':48} {'mean':>7} {'p50':>7} {'p95':>7} {'max':>7}")
    for k in ROWS:
        s = out[k]
        print(f"{k:48} {s['mean_s']:>6.2f}s {s['p50_s']:>6.2f}s {s['p95_s']:>6.2f}s {s['max_s']:>6.2f}s")
    line = json.dumps(out)
    if args.out:
        args.out.write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
