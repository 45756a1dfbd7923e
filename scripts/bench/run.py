#!/usr/bin/env python3
"""Admission latency and throughput of `hostnet-rdma serve`, beside a compiled Go webhook
(same static injection, no launcher logic) and a fixed-response TLS floor, all on this
machine, each server pinned to one core and the load generator to the other.

Then pod-create latency through a real kube-apiserver with and without the webhook.
The last line printed is one JSON object with every figure. Usage:

    scripts/bench/run.py [--duration 10] [--rates 100,500,2000] [--rounds 3] [--pods 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from app.webhook import tls  # noqa: E402
from app.webhook.protocol import EVENT_LOOP  # noqa: E402

CACHE = Path(os.environ.get("HOSTNET_RDMA_CACHE", Path.home() / ".cache" / "hostnet-rdma")) / "bench-bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(core: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else argv


def compiled_tree() -> Path:
    """The webhook as its image ships it: the core compiled by mypyc (setup.py), in a source tree
    of its own (scripts/testenv/build-compiled.sh); `python -m app.cli` run from there uses it."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "testenv" / "build-compiled.sh")], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    return Path(out.stdout.strip().splitlines()[-1])


def build_go() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(CACHE) + "/", "./..."], cwd=ROOT / "scripts" / "bench", check=True)
    return CACHE


def bodies(directory: Path) -> int:
    """AdmissionReviews of every hostNetwork golden pod (realistic sizes and shapes)."""
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for case in sorted((ROOT / "tests" / "golden").glob("*/*.yaml")):
        if case.name.endswith(".expected.yaml"):
            continue
        pod = yaml.safe_load(case.read_text())
        if not pod["spec"].get("hostNetwork"):
            continue
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": f"bench-{n}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "namespace": pod["metadata"].get("namespace", "default"), "operation": "CREATE",
                              "object": pod}}  # fmt: skip
        (directory / f"{n:03d}.json").write_text(json.dumps(review))
        n += 1
    return n


def wait_tcp(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


def loadgen(
    bin_dir: Path, url: str, ca: Path, body_dir: Path, rate: float, seconds: float, target: str, pid: int = 0
) -> dict[str, Any]:
    """One point; with `pid`, also the server's CPU time per admission over the measured run."""
    conns = "64" if rate == 0 else "128"
    out = subprocess.run(
        pin(1, [str(bin_dir / "loadgen"), "-url", url, "-ca", str(ca), "-bodies", str(body_dir), "-rate", str(rate),
                "-duration", f"{seconds}s", "-warmup", "2s", "-conns", conns, "-target", target,
                "-pid", str(pid), "-hz", str(os.sysconf("SC_CLK_TCK"))]),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    for line in out.stderr.splitlines():  # the generator's own warnings (its pacer, not root): once each
        if line.strip() and line not in _SAID:
            _SAID.add(line)
            print(line, file=sys.stderr, flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_SAID: set[str] = set()


def stall_probe(bin_dir: Path, seconds: float) -> dict[str, Any]:
    """How much of each core the machine took away while nothing else ran (stallprobe, one per
    core at once): p99 at a low load cannot be shown below the stalls' length when they cover
    more than ~1% of the time a request is in flight."""
    procs = [subprocess.Popen(pin(c, [str(bin_dir / "stallprobe"), "-duration", f"{seconds}s", "-label", f"core{c}"]),
                              stdout=subprocess.PIPE, text=True) for c in (0, 1)]  # fmt: skip
    out = {}
    for proc in procs:
        r = json.loads((proc.communicate()[0] or "{}").strip().splitlines()[-1])
        out[r.pop("label")] = r
    return out


HELM = (
    Path(os.environ.get("HOSTNET_RDMA_CACHE", Path.home() / ".cache" / "hostnet-rdma")) / "bin" / "k8s-1.36.3" / "helm"
)


def chart_config(work: Path, *sets: str) -> Path:
    """The config file the chart's ConfigMap gives the webhook (its defaults, plus `sets`): the
    webhook is benchmarked as a user runs it, e.g. with the init-container wrapper delivery.
    In a directory of config files alone, as the ConfigMap's mount is: the webhook watches that
    directory, and a log written there would wake its watcher at every admission."""
    out = subprocess.run([str(HELM), "template", "b", "charts/hostnet-rdma", "--kube-version", "1.36.3",
                          "--show-only", "templates/configmap.yaml", *[a for s in sets for a in ("--set", s)]],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    directory = work / "config"
    path = directory / f"config-{len(list(directory.glob('config-*.yaml')))}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_load(out)["data"]["config.yaml"])
    return path


def serve(work: Path, port: int, tree: Path) -> subprocess.Popen[bytes]:
    """`hostnet-rdma serve` from `tree` on core 0 with the chart's config and the certs in
    work/tls, at the default log level (one JSON line per admission, as in production) into
    work/server.log."""
    return subprocess.Popen(
        pin(0, [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                "--cert-dir", str(work / "tls"), "--config", str(chart_config(work))]),
        cwd=tree, stdout=subprocess.DEVNULL, stderr=(work / "server.log").open("wb"), env=dict(os.environ),
    )  # fmt: skip


def start_targets(work: Path, bin_dir: Path, tree: Path) -> dict[str, tuple[str, subprocess.Popen[bytes]]]:
    ca = tls.make_ca()
    tls.write_dir(work / "tls", tls.make_serving(ca, ["127.0.0.1"]), ca)
    crt, key = str(work / "tls" / tls.CERT_FILE), str(work / "tls" / tls.KEY_FILE)
    targets: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    port = free_port()
    ours = serve(work, port, tree)
    wait_tcp(port, ours, "hostnet-rdma serve")
    if "core compiled" not in (work / "server.log").read_text():
        raise RuntimeError("hostnet-rdma serve is not running the compiled core: " + (work / "server.log").read_text())
    targets["hostnet-rdma"] = (f"https://127.0.0.1:{port}/mutate", ours)
    for name, extra in (("go-baseline", []), ("tls-floor", ["-floor"])):
        p = free_port()
        proc = subprocess.Popen(
            pin(0, [str(bin_dir / "gowebhook"), "-addr", f"127.0.0.1:{p}", "-cert", crt, "-key", key, *extra])
        )
        wait_tcp(p, proc, name)
        targets[name] = (f"https://127.0.0.1:{p}/mutate", proc)
    p = free_port()
    proc = subprocess.Popen(
        pin(0, [sys.executable, str(Path(__file__).with_name("pyfloor.py")), str(p), crt, key, EVENT_LOOP])
    )
    wait_tcp(p, proc, "python floor")
    targets["python-tls-floor"] = (f"https://127.0.0.1:{p}/mutate", proc)
    return targets


# Our webhook once per wrapper delivery, each behind its own registration and namespace; the
# chart's default is whichever of these the chart's ConfigMap names (it is also "bench-on").
DELIVERIES = {"bench-image": "imageVolume", "bench-init": "initContainer", "bench-inline": "inline"}


def pod_create_overhead(work: Path, pods: int, bin_dir: Path, tree: Path) -> dict[str, Any]:
    """Pod-create latency through a real API server: with our webhook (chart default, and each
    wrapper delivery), with the Go baseline webhook, and with none; interleaved in one run
    against one API server."""
    from tests.apiserver.conftest import Kube, start_webhook
    from tests.apiserver.controlplane import ControlPlane

    plane = ControlPlane.start(work / "cp")
    default_config = chart_config(work)
    default_delivery = yaml.safe_load(default_config.read_text())["wrapper"]["delivery"]
    hook = start_webhook(work / "hook", extra=["--config", str(default_config)], root=tree)
    hooks = {ns: start_webhook(work / f"hook-{ns}", extra=["--config", str(chart_config(work, f"config.wrapper.delivery={d}"))],
                               root=tree)
             for ns, d in DELIVERIES.items()}  # fmt: skip
    procs = [hook.proc, *(h.proc for h in hooks.values())]
    privileged = {"pod-security.kubernetes.io/enforce": "privileged"}
    try:
        kube = Kube(plane)
        kube.namespace("bench-on", {"hostnet-rdma.io/inject": "enabled", **privileged})
        kube.namespace("bench-nowrap", {"hostnet-rdma.io/inject": "enabled", **privileged})
        kube.namespace("bench-off", privileged)
        mwc = yaml.safe_load(subprocess.run(
            [str(plane.bin_dir / "helm"), "template", "b", "charts/hostnet-rdma", "-n", "hostnet-rdma-system",
             "--kube-version", "1.36.3", "--show-only", "templates/mutatingwebhookconfiguration.yaml",
             "--set", f"webhook.url={hook.url}", "--set", "certs.mode=provided",
             "--set", "certs.provided.secretName=x", "--set", f"certs.provided.caBundle={hook.ca_bundle}"],
            cwd=ROOT, capture_output=True, text=True, check=True).stdout)  # fmt: skip
        kube.ok("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mwc)

        def register(ns: str, url: str, ca_pem: bytes) -> None:
            """The same registration as the chart's, for namespace `ns` only."""
            other = json.loads(json.dumps(mwc))
            other["metadata"] = {"name": ns}
            cfg = other["webhooks"][0]
            cfg["name"] = f"{ns}.bench.example.com"
            cfg["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
            cfg["namespaceSelector"] = {"matchLabels": {"bench": ns}}
            kube.namespace(ns, {"bench": ns, **privileged})
            kube.ok("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", other)

        # The Go baseline, and our webhook once per delivery.
        go_ca = tls.make_ca()
        tls.write_dir(work / "go-tls", tls.make_serving(go_ca, ["127.0.0.1"]), go_ca)
        go_port = free_port()
        go = subprocess.Popen([str(bin_dir / "gowebhook"), "-addr", f"127.0.0.1:{go_port}",
                               "-cert", str(work / "go-tls" / tls.CERT_FILE), "-key", str(work / "go-tls" / tls.KEY_FILE)])  # fmt: skip
        procs.append(go)
        wait_tcp(go_port, go, "go baseline")
        register("bench-go", f"https://127.0.0.1:{go_port}/mutate", go_ca.cert_pem)
        for ns, h in hooks.items():
            register(ns, h.url, h.ca.cert_pem)
        pod = yaml.safe_load((ROOT / "tests/golden/volcano/plain-c10d-worker-1.yaml").read_text())
        pod["metadata"].pop("name")
        pod["metadata"]["generateName"] = "bench-"
        # Warm up until the API server has loaded every webhook configuration.
        deadline = time.monotonic() + 30
        for ns in ["bench-on", *hooks]:
            while "hostnet-rdma.io/injected" not in (
                kube.create_pod(ns, pod).json()["metadata"].get("annotations") or {}
            ):
                assert time.monotonic() < deadline
                time.sleep(0.2)
        while kube.create_pod("bench-go", pod).json()["spec"].get("dnsPolicy") != "ClusterFirstWithHostNet":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # Our webhook with the wrapper off isolates what the wrapper costs the API server.
        nowrap = json.loads(json.dumps(pod))
        nowrap["metadata"].setdefault("annotations", {})["hostnet-rdma.io/wrap"] = "false"
        variants = {
            "bench-on": pod,
            **dict.fromkeys(hooks, pod),
            "bench-nowrap": nowrap,
            "bench-go": pod,
            "bench-off": pod,
        }
        for ns, body in variants.items():
            for _ in range(20):
                kube.create_pod(ns, body)
        times: dict[str, list[float]] = {ns: [] for ns in variants}
        stored_bytes: dict[str, int] = {}
        for _ in range(pods):
            for ns, body in variants.items():  # interleaved: all see the same API server state
                t = time.perf_counter()
                r = kube.create_pod(ns, body)
                times[ns].append((time.perf_counter() - t) * 1000)
                assert r.status_code == 201, r.text
                stored_bytes[ns] = len(r.content)

        def stats(ns: str) -> dict[str, float]:
            xs = sorted(times[ns])
            return {"mean_ms": round(statistics.fmean(xs), 3), "p50_ms": round(xs[len(xs) // 2], 3),
                    "p99_ms": round(xs[int(0.99 * (len(xs) - 1))], 3), "stored_pod_bytes": stored_bytes[ns]}  # fmt: skip

        s = {ns: stats(ns) for ns in variants}
        go_s, on = s["bench-go"], s["bench-on"]
        out: dict[str, Any] = {
            "pods_each": pods, "default_delivery": default_delivery,
            "with_webhook": on, "with_webhook_wrap_off": s["bench-nowrap"],
            "with_go_baseline_webhook": go_s, "without_webhook": s["bench-off"],
            "overhead_ratio_mean": round(on["mean_ms"] / s["bench-off"]["mean_ms"], 3),
            "go_baseline_overhead_ratio_mean": round(go_s["mean_ms"] / s["bench-off"]["mean_ms"], 3),
            "ours_vs_go_baseline_mean": round(on["mean_ms"] / go_s["mean_ms"], 3),
            "ours_vs_go_baseline_stored_bytes": round(on["stored_pod_bytes"] / go_s["stored_pod_bytes"], 3),
        }  # fmt: skip
        for ns, delivery in DELIVERIES.items():
            out[f"with_webhook_delivery_{delivery}"] = s[ns]
            out[f"delivery_{delivery}_vs_go_baseline"] = {
                "mean": round(s[ns]["mean_ms"] / go_s["mean_ms"], 3),
                "stored_bytes": round(s[ns]["stored_pod_bytes"] / go_s["stored_pod_bytes"], 3),
            }
        return out
    finally:
        for proc in procs:
            proc.terminate()
        plane.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per point")
    ap.add_argument("--rates", default="100,500,2000", help="offered loads (req/s); saturation is always added")
    ap.add_argument("--pods", type=int, default=200, help="pods per side for the API-server comparison (0 skips)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of every point, interleaved across the targets; the median round counts")  # fmt: skip
    ap.add_argument("--stall-probe", type=float, default=5.0,
                    help="seconds of the machine-stall probe before each round")  # fmt: skip
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    bin_dir = build_go()
    work = Path(tempfile.mkdtemp(prefix="hostnet-rdma-bench-"))
    n = bodies(work / "bodies")
    print(f"{n} AdmissionReviews from the golden pods; servers on core 0, load on core 1; {args.duration:.0f}s per point",
          file=sys.stderr)  # fmt: skip
    tree = compiled_tree()
    targets = start_targets(work, bin_dir, tree)
    results: dict[str, list[dict[str, Any]]] = {}

    def point(name: str, url: str, rate: float) -> dict[str, Any]:
        pid = targets[name][1].pid
        r = loadgen(bin_dir, url, work / "tls" / tls.CA_FILE, work / "bodies", rate, args.duration, name, pid)
        label = "saturation" if rate == 0 else f"{rate:.0f} req/s"
        late = (
            f"  send delay p99 {r['send_delay_p99_ms']:6.3f} ms"
            if rate
            else f"  CPU {r['server_cpu_us_per_admission']:6.1f} us/adm"
        )
        print(f"{name:13s} {label:>11s}: achieved {r['achieved_rps']:8.0f} req/s  p50 {r['p50_ms']:7.3f} ms  "
              f"p99 {r['p99_ms']:7.3f} ms  max {r['max_ms']:8.3f} ms  errors {r['errors']}{late}", file=sys.stderr)  # fmt: skip
        return r

    # Every point is run `rounds` times, the rounds interleaved across the targets, and the median
    # round counts (by p99 at a fixed load, by throughput at saturation): a burst of noise from the
    # host, or start-up, lands on one round of one target, not on its only figure.
    runs: dict[str, dict[float, list[dict[str, Any]]]] = {name: {r: [] for r in [*rates, 0.0]} for name in targets}
    stalls: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            stalls.append(stall_probe(bin_dir, args.stall_probe))
            print("machine stalls (ms per s, longest ms): " + ", ".join(
                f"{core} {s['stalled_ms_per_s']:.1f} / {s['longest_ms']:.1f}" for core, s in stalls[-1].items()),
                file=sys.stderr)  # fmt: skip
            for rate in [*rates, 0.0]:
                for name, (url, _) in targets.items():
                    runs[name][rate].append(point(name, url, rate))
        for name, by_rate in runs.items():
            results[name] = [
                sorted(rs, key=lambda r: r["achieved_rps"] if rate == 0 else r["p99_ms"])[len(rs) // 2]
                for rate, rs in by_rate.items()
            ]
    finally:
        for _, proc in targets.values():
            proc.terminate()
    sat = {name: rs[-1]["achieved_rps"] for name, rs in results.items()}
    summary: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "duration_s": args.duration,
        "hostnet_rdma_core": "compiled (mypyc), as the image ships it",
        "results": results,
        "saturation_rps_per_core": sat,
        "rounds": args.rounds,
        "saturation_rounds_rps": {
            name: [round(r["achieved_rps"]) for r in by_rate[0.0]] for name, by_rate in runs.items()
        },
        "p99_rounds_ms": {
            name: {f"{rate:.0f}": [r["p99_ms"] for r in rs] for rate, rs in by_rate.items() if rate}
            for name, by_rate in runs.items()
        },
        "send_delay_p99_rounds_ms": {
            name: {f"{rate:.0f}": [r["send_delay_p99_ms"] for r in rs] for rate, rs in by_rate.items() if rate}
            for name, by_rate in runs.items()
        },
        "machine_stalls_rounds": stalls,
        "ratio_to_go_baseline": round(sat["hostnet-rdma"] / sat["go-baseline"], 3),
        # The server's own CPU time per admission at saturation (median round), from /proc: what
        # one review costs, whatever the machine's stalls did to req/s in that round.
        "cpu_us_per_admission": {name: round(rs[-1]["server_cpu_us_per_admission"], 1) for name, rs in results.items()},
        "cpu_per_admission_rounds_us": {
            name: [round(r["server_cpu_us_per_admission"], 1) for r in by_rate[0.0]] for name, by_rate in runs.items()
        },
        "cpu_per_admission_ratio_to_go_baseline": round(
            results["hostnet-rdma"][-1]["server_cpu_us_per_admission"]
            / results["go-baseline"][-1]["server_cpu_us_per_admission"],
            3,
        ),
        "ratio_to_tls_floor": round(sat["hostnet-rdma"] / sat["tls-floor"], 3),
        "ratio_to_python_tls_floor": round(sat["hostnet-rdma"] / sat["python-tls-floor"], 3),
        "python_floor_ratio_to_go_baseline": round(sat["python-tls-floor"] / sat["go-baseline"], 3),
    }
    at500 = next((r for r in results["hostnet-rdma"] if r["offered_rps"] == 500), None)
    if at500:
        summary["hostnet_rdma_p99_ms_at_500"] = at500["p99_ms"]
    if args.pods:
        summary["apiserver_pod_create"] = pod_create_overhead(work, args.pods, bin_dir, tree)
        print(f"pod create through kube-apiserver: {json.dumps(summary['apiserver_pod_create'])}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    emit(summary, args.out)
    return 0


def emit(result: dict[str, Any], out: str | None) -> None:
    """The results: indented JSON to `out`, and one JSON line last on stdout."""
    if out:
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
