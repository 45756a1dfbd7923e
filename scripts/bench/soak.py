#!/usr/bin/env python3
"""Memory under sustained load: `hostnet-rdma serve` (the compiled core, the chart's config, the
admission log on, as `make bench` runs it) at saturation for `--minutes`, in windows of
`--window` seconds, each on 64 new connections (the load generator's, after its 2 s warm-up:
~15,000 connections opened and closed in 30 minutes of 5 s windows). The server's RSS is read
every `--sample` seconds; the verdict: its range after the first `--settle` minutes, against
`--flat` MiB.

Usage: soak.py [--minutes 30] [--window 5] [--sample 60] [--settle 5] [--flat 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import run  # puts the source tree on the path

from app.webhook import tls

CONNS_PER_WINDOW = 64  # run.loadgen's at saturation


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--window", type=float, default=5.0, help="seconds of load on one set of connections")
    ap.add_argument("--sample", type=float, default=60.0, help="seconds between RSS samples")
    ap.add_argument("--settle", type=float, default=5.0, help="minutes left out of the verdict")
    ap.add_argument("--flat", type=float, default=10.0, help="MiB the RSS may range over after settling")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    bin_dir = run.build_go()
    work = Path(tempfile.mkdtemp(prefix="hostnet-rdma-soak-"))
    run.bodies(work / "bodies")
    ca = tls.make_ca()
    tls.write_dir(work / "tls", tls.make_serving(ca, ["127.0.0.1"]), ca)
    port = run.free_port()
    server = run.serve(work, port, run.compiled_tree())
    samples: list[dict[str, float]] = []
    windows: list[dict[str, Any]] = []
    start = time.monotonic()
    done = threading.Event()

    def sampler() -> None:
        while True:
            at = time.monotonic() - start
            samples.append({"minute": round(at / 60, 2), "rss_mib": round(rss_mib(server.pid), 1),
                            "connections": len(windows) * CONNS_PER_WINDOW})  # fmt: skip
            print(f"  {at / 60:5.1f} min  RSS {samples[-1]['rss_mib']:6.1f} MiB  "
                  f"{len(windows) * CONNS_PER_WINDOW:6d} connections so far", file=sys.stderr, flush=True)  # fmt: skip
            if done.wait(args.sample):
                return

    try:
        run.wait_tcp(port, server, "hostnet-rdma serve")
        url = f"https://127.0.0.1:{port}/mutate"
        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        while time.monotonic() - start < args.minutes * 60:
            r = run.loadgen(bin_dir, url, work / "tls" / tls.CA_FILE, work / "bodies", 0, args.window, "soak")
            windows.append({"rps": r["achieved_rps"], "errors": r["errors"]})
        done.set()
        thread.join()
        samples.append({"minute": round((time.monotonic() - start) / 60, 2), "rss_mib": round(rss_mib(server.pid), 1),
                        "connections": len(windows) * CONNS_PER_WINDOW})  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    settled = [s["rss_mib"] for s in samples if s["minute"] >= args.settle]
    spread = max(settled) - min(settled) if settled else float("nan")
    result = {
        "minutes": args.minutes,
        "window_seconds": args.window,
        "connections_opened": len(windows) * CONNS_PER_WINDOW,
        "reviews": round(sum(w["rps"] for w in windows) * args.window),
        "errors": sum(w["errors"] for w in windows),
        "rps_first_last_window": [windows[0]["rps"], windows[-1]["rps"]] if windows else [],
        "rss_mib": samples,
        "settled_after_minutes": args.settle,
        "rss_range_after_settling_mib": round(spread, 1),
        "flat": spread <= args.flat,
    }
    print(f"RSS {samples[0]['rss_mib']:.1f} -> {samples[-1]['rss_mib']:.1f} MiB; after {args.settle:g} min it ranged "
          f"over {spread:.1f} MiB ({'flat' if result['flat'] else 'NOT flat'} within {args.flat:g}); "
          f"{result['connections_opened']} connections, {result['reviews']} reviews, {result['errors']} errors",
          file=sys.stderr)  # fmt: skip
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
