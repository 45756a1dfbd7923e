#!/usr/bin/env python3
"""Where the server's CPU goes around `answer()`, layer by layer (#55): CPU per request at
saturation of each, on this machine, one core each as in `make bench`:

- python-asgi-floor: uvicorn answering a fixed response through its ASGI cycle (pyfloor.py);
- python-protocol-floor: uvicorn's protocol answering it with no ASGI cycle (pyfloor.py protocol);
- fixed-answer: `hostnet-rdma serve` with answer() replaced by a fixed 2 KB answer (fixed_answer.py);
- hostnet-rdma: `hostnet-rdma serve` as `make bench` runs it;
- go-baseline: the Go webhook, for the ratio.

Then, in process, what the handler adds to each review (metrics, the log line). Usage:

    scripts/bench/layers.py [--rounds 3] [--duration 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (puts the source tree on the path)

from app.webhook import tls  # noqa: E402
from app.webhook.protocol import EVENT_LOOP  # noqa: E402


def in_process(n: int = 100_000) -> dict[str, float]:
    """µs a review of what AdmissionHandler.answered() does after answer(), part by part."""
    from app.webhook import review
    from app.webhook.server import create_app
    from app.webhook.settings import ServerSettings

    handler = create_app(ServerSettings(config=None)).admission
    with tempfile.TemporaryDirectory() as d:
        run.bodies(Path(d))
        results = [review.answer(p.read_bytes(), handler.params()) for p in sorted(Path(d).glob("*.json"))]
    logging.getLogger("hostnet_rdma.admission").setLevel(logging.INFO)
    admissions = handler.metrics.admissions
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115  (the log lines go nowhere)

    def timed(fn: Any) -> float:
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        return round((time.perf_counter() - start) / n * 1e6, 2)

    async def parts() -> dict[str, float]:
        return {
            "latency histogram observe": timed(lambda i: admissions.observe(0.001)),
            "request counter inc": timed(lambda i: admissions.count("mutated", "volcano")),
            "log line": timed(lambda i: handler.log_admission(results[i % len(results)], 0.001)),
            "answered() whole": timed(lambda i: handler.answered(results[i % len(results)], 0.0)),
        }

    try:
        return asyncio.run(parts())
    finally:
        sys.stderr.close()
        sys.stderr = stderr


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    tree, bin_dir = run.compiled_tree(), run.build_go()
    work = Path(tempfile.mkdtemp(prefix="hostnet-rdma-layers-"))
    run.bodies(work / "bodies")
    ca = tls.make_ca()
    tls.write_dir(work / "tls", tls.make_serving(ca, ["127.0.0.1"]), ca)
    crt, key = str(work / "tls" / tls.CERT_FILE), str(work / "tls" / tls.KEY_FILE)
    config = run.chart_config(work)
    serve = ["serve", "--host", "127.0.0.1", "--cert-dir", str(work / "tls"), "--config", str(config)]
    floor = [sys.executable, str(HERE / "pyfloor.py")]
    commands: dict[str, tuple[list[str], Path | None]] = {
        "python-asgi-floor": ([*floor, "{port}", crt, key, EVENT_LOOP, "asgi"], None),
        "python-protocol-floor": ([*floor, "{port}", crt, key, EVENT_LOOP, "protocol"], None),
        "fixed-answer": ([sys.executable, str(HERE / "fixed_answer.py"), *serve, "--port", "{port}"], tree),
        "hostnet-rdma": ([sys.executable, "-m", "app.cli", *serve, "--port", "{port}"], tree),
        "go-baseline": ([str(bin_dir / "gowebhook"), "-addr", "127.0.0.1:{port}", "-cert", crt, "-key", key], None),
    }
    procs: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    rps: dict[str, list[float]] = {name: [] for name in commands}
    try:
        for name, (argv, cwd) in commands.items():
            port = run.free_port()
            argv = [a.replace("{port}", str(port)) for a in argv]
            env = {**os.environ, "PYTHONPATH": str(tree)} if cwd else dict(os.environ)
            proc = subprocess.Popen(run.pin(0, argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                    stderr=(work / f"{name}.log").open("wb"))  # fmt: skip
            run.wait_tcp(port, proc, name)
            procs[name] = (f"https://127.0.0.1:{port}/mutate", proc)
        for _ in range(args.rounds):  # interleaved, as make bench does
            for name, (url, proc) in procs.items():
                r = run.loadgen(bin_dir, url, work / "tls" / tls.CA_FILE, work / "bodies", 0, args.duration, name,
                                proc.pid)  # fmt: skip
                cpu[name].append(round(r["server_cpu_us_per_admission"], 1))
                rps[name].append(round(r["achieved_rps"]))
                print(f"{name:22s} {rps[name][-1]:7d} req/s  {cpu[name][-1]:6.1f} us of CPU a request", file=sys.stderr)
    finally:
        for _, proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    out: dict[str, Any] = {
        "cpu_us_per_request": {name: statistics.median(v) for name, v in cpu.items()},
        "cpu_rounds_us": cpu,
        "saturation_rounds_rps": rps,
        "in_process_us": in_process(),
    }
    go = out["cpu_us_per_request"]["go-baseline"]
    print("\nmedian CPU a request at saturation (one core):", file=sys.stderr)
    for name, us in out["cpu_us_per_request"].items():
        print(f"  {name:22s} {us:6.1f} us  ({us / go:.2f}x Go's)", file=sys.stderr)
    print("in process, after answer():", file=sys.stderr)
    for part, us in out["in_process_us"].items():
        print(f"  {part:26s} {us:5.2f} us", file=sys.stderr)
    line = json.dumps(out)
    if args.out:
        Path(args.out).write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
