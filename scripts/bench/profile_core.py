#!/usr/bin/env python3
"""Where one admission's time goes, in process: `answer()` whole on the bench bodies (the
AdmissionReviews `make bench` sends, with the chart's config), then its parts. Run it from the
compiled tree to time the core as the image ships it:

    scripts/bench/profile_core.py [--compiled] [--n 20000] [--rounds 5] [--profile] [--soak SECONDS]
    scripts/bench/profile_core.py --tree DIR   # answer() of another build, on these bodies

--compiled re-runs itself from scripts/testenv/build-compiled.sh's tree. --profile adds the
cProfile top functions of answer(). --soak samples the live heap of answer() alone. --tree
times `answer()` of another build (a compiled tree of an older checkout: `git worktree add
/tmp/before REV`, then its build-compiled.sh with HOSTNET_RDMA_CACHE of its own) on this
checkout's bodies and chart config: before and after on one machine."""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(os.environ.get("HOSTNET_RDMA_SRC", Path(__file__).resolve().parents[2]))
HERE = Path(__file__).resolve().parent
# --tree: the bodies and the config written by this checkout, timed by another build's answer().
GIVEN = os.environ.get("HOSTNET_RDMA_BODIES")
if "--tree" in sys.argv and not GIVEN:
    sys.path.insert(0, str(HERE))
    import run as bench  # this checkout's bodies and chart config, before the other build is imported

    given = Path(tempfile.mkdtemp(prefix="profile-core-"))
    bench.bodies(given / "bodies")
    (given / "config.yaml").write_bytes(bench.chart_config(given / "chart").read_bytes())
    tree = sys.argv[sys.argv.index("--tree") + 1]
    env = {**os.environ, "HOSTNET_RDMA_COMPILED": tree, "PYTHONPATH": tree, "HOSTNET_RDMA_BODIES": str(given)}
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
if "--compiled" in sys.argv and not os.environ.get("HOSTNET_RDMA_COMPILED"):
    tree = subprocess.run(["bash", str(HERE.parents[1] / "scripts" / "testenv" / "build-compiled.sh")],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHON": sys.executable}).stdout.strip().splitlines()[-1]  # fmt: skip
    env = {**os.environ, "HOSTNET_RDMA_COMPILED": tree, "PYTHONPATH": tree,
           "HOSTNET_RDMA_SRC": str(HERE.parents[1])}  # fmt: skip
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
sys.path.insert(0, os.environ.get("HOSTNET_RDMA_COMPILED") or str(ROOT))
sys.path.insert(1, str(HERE))

import orjson  # noqa: E402

from app import config  # noqa: E402  (these first: run.py puts the source tree on the path)
from app.core import mutate  # noqa: E402
from app.core import patch as jp  # noqa: E402

try:
    from app.webhook import review
except ImportError:  # --tree of a build before app/webhook/ (2026-12-06)
    from app import review  # type: ignore[no-redef]


def load_bodies() -> list[bytes]:
    """The bench's bodies (scripts/bench/run.py), each as the load generator sends it."""
    if GIVEN:
        return [p.read_bytes() for p in sorted((Path(GIVEN) / "bodies").glob("*.json"))]
    import run as bench  # after app: it puts the source tree on the path

    with tempfile.TemporaryDirectory() as d:
        bench.bodies(Path(d))
        return [p.read_bytes() for p in sorted(Path(d).glob("*.json"))]


def chart_params() -> review.Params:
    if GIVEN:
        return review.params_for(config.load(Path(GIVEN) / "config.yaml"), "default")
    import run as bench

    with tempfile.TemporaryDirectory() as d:
        cfg = config.load(bench.chart_config(Path(d)))
    return review.params_for(cfg, "default")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiled", action="store_true")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--soak", type=float, default=0)
    ap.add_argument("--tree", help="time answer() of the build in this directory (see above)")
    args = ap.parse_args()
    where = sys.modules["app.core.mutate"].__file__ or ""
    print(f"core: {'compiled' if where.endswith('.so') else 'interpreted'}; {sys.version.split()[0]}; "
          f"{Path(where).parents[2]}")  # fmt: skip
    bodies = load_bodies()
    params = chart_params()
    # A fresh uid each review, as the API server sends: nothing may be answered from a cache.
    templates = [b.replace(b'"uid": "bench-', b'"uid": "%d-') for b in bodies]
    n = args.n
    feed = [templates[i % len(templates)] % i for i in range(n)]
    for b in feed[:2000]:
        review.answer(b, params)  # warm the per-namespace Params and the allocator
    gc.collect()
    rounds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for b in feed:
            review.answer(b, params)
        rounds.append((time.perf_counter() - start) / n * 1e6)
    rounds.sort()
    print(f"answer    {rounds[0]:6.1f} us a review, min of {args.rounds} rounds (median {rounds[len(rounds) // 2]:.1f}; "
          f"{len(bodies)} bodies, {n} reviews a round)")  # fmt: skip
    if args.tree:
        return  # the parts below are this checkout's functions

    requests = [orjson.loads(b)["request"] for b in bodies]
    pods = [r["object"] for r in requests]
    ns = [review._in_namespace(params, r["namespace"]) for r in requests]
    results = [mutate(p, q).pod for p, q in zip(pods, ns, strict=True)]
    ops = [jp.diff(a, b) for a, b in zip(pods, results, strict=True)]
    k = max(n // 4, 1000)

    def timed(name: str, fn: Callable[[int], object]) -> None:
        start = time.perf_counter()
        for i in range(k):
            fn(i % len(pods))
        print(f"  {name:9s} {(time.perf_counter() - start) / k * 1e6:6.1f} us")

    timed("parse", lambda i: review.parse(bodies[i]))
    timed("mutate", lambda i: mutate(pods[i], ns[i]))
    timed("diff", lambda i: jp.diff(pods[i], results[i]))
    timed("dumps", lambda i: orjson.dumps(ops[i]))
    timed("response", lambda i: review.build_response("u", ops[i], []))
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(lambda: [review.answer(b, params) for b in feed[:5000]])
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if args.soak:
        import tracemalloc

        tracemalloc.start()
        end = time.monotonic() + args.soak
        i = 0
        while time.monotonic() < end:
            for b in feed:
                review.answer(b, params)
            i += 1
            gc.collect()
            cur, _ = tracemalloc.get_traced_memory()
            print(f"  soak round {i}: {cur / 2**20:.2f} MiB traced, {len(gc.get_objects())} objects", flush=True)


if __name__ == "__main__":
    main()
