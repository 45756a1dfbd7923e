#!/usr/bin/env python3
"""What idle connections cost the webhook: open N TLS connections that never send a request,
hold them, and read the server's RSS before, at the peak, once the server has cut them off
(request timeout, 10 s by default) and a while later. Then the same with M TCP connections that
never send a byte (no TLS handshake), and the time a review takes on a new connection while they
are held. Then check it still answers a review.

Usage: idle_connections.py [--connections 6000] [--half-open 2000] [--out scripts/bench/idle-results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import run  # noqa: E402

from app.webhook import tls  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


async def hold(port: int, ca: Path, n: int, concurrency: int) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=str(ca))
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    failed = 0
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        nonlocal failed
        async with sem:
            try:
                conns.append(await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"))
            except OSError:
                failed += 1

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(n)))
    opened = time.monotonic() - started

    async def closed_by_server(reader: asyncio.StreamReader) -> float:
        with contextlib.suppress(OSError, asyncio.TimeoutError, ssl.SSLError):
            await asyncio.wait_for(reader.read(1), timeout=60)
        return time.monotonic()

    return {"conns": conns, "failed": failed, "open_seconds": round(opened, 1), "started": started,
            "waiters": [asyncio.create_task(closed_by_server(r)) for r, _ in conns]}  # fmt: skip


async def scenario(pid: int, port: int, ca: Path, n: int) -> dict[str, Any]:
    before = rss_mb(pid)
    held = await hold(port, ca, n, concurrency=256)
    peak = rss_mb(pid)
    await asyncio.sleep(1)
    still_open = sum(1 for t in held["waiters"] if not t.done())
    ends = await asyncio.gather(*held["waiters"])
    all_closed_after = round(max(ends) - held["started"], 1) if ends else 0.0
    for _, w in held["conns"]:
        w.close()
    await asyncio.sleep(1)
    after = rss_mb(pid)
    await asyncio.sleep(10)
    later = rss_mb(pid)
    return {"connections": n, "handshakes_failed": held["failed"], "seconds_to_open_all": held["open_seconds"],
            "held_open_1s_after": still_open, "rss_mb_before": before, "rss_mb_peak": peak,
            "all_closed_by_server_within_s": all_closed_after, "rss_mb_after_close": after, "rss_mb_10s_later": later}  # fmt: skip


async def half_open(pid: int, port: int, ca: Path, n: int) -> dict[str, Any]:
    """n TCP connections that never send a byte, then one review on a new TLS connection."""
    before = rss_mb(pid)
    socks = []
    for _ in range(n):
        with contextlib.suppress(OSError):
            socks.append(await asyncio.open_connection("127.0.0.1", port))
    await asyncio.sleep(1)
    peak = rss_mb(pid)
    ctx = ssl.create_default_context(cafile=str(ca))
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    writer.write(b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
    answered = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)).startswith(b"HTTP/1.1 400")
    review_s = round(time.monotonic() - started, 3)
    writer.close()
    for _, w in socks:
        w.close()
    await asyncio.sleep(3)
    return {"half_open": n, "half_open_rss_mb_before": before, "half_open_rss_mb_peak": peak,
            "half_open_review_answered": answered, "half_open_review_s": review_s,
            "half_open_rss_mb_after_close": rss_mb(pid)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=6000)
    ap.add_argument("--half-open", type=int, default=2000)
    ap.add_argument("--out")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(args.connections, args.half_open) * 2 + 1000
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(want, hard)), hard))
    work = Path(tempfile.mkdtemp(prefix="hostnet-rdma-idle-"))
    ca = tls.make_ca()
    tls.write_dir(work / "tls", tls.make_serving(ca, ["127.0.0.1"]), ca)
    port = run.free_port()
    server = run.serve(work, port, ROOT)
    try:
        run.wait_tcp(port, server, "hostnet-rdma serve")
        time.sleep(1)
        result = asyncio.run(scenario(server.pid, port, work / "tls" / tls.CA_FILE, args.connections))
        result.update(asyncio.run(half_open(server.pid, port, work / "tls" / tls.CA_FILE, args.half_open)))
        import httpx

        # A malformed review gets its 400 with a reason: the server is alive and parsing.
        r = httpx.post(f"https://127.0.0.1:{port}/mutate", verify=str(work / "tls" / tls.CA_FILE), timeout=10,
                       content=b"{}", headers={"content-type": "application/json"})  # fmt: skip
        result["answers_afterwards"] = r.status_code == 400 and b"AdmissionReview" in r.content
        result["request_timeout_s"], result["max_connections"], result["max_handshakes"] = 10, 1000, 100
    finally:
        server.terminate()
        server.wait(timeout=30)
    run.emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
