#!/usr/bin/env python3
"""Where one admission's time goes, in-process: parse, copy, mutate, diff, response.
Add --profile for the cProfile top functions of mutate(). Usage: profile_core.py [--profile]"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import yaml  # noqa: E402

from app.core import Params, mutate  # noqa: E402
from app.core import patch as jp  # noqa: E402
from app.review import build_response  # noqa: E402
from app.wrapper import payload  # noqa: E402


def main() -> None:
    pods = []
    for f in sorted((ROOT / "tests" / "golden").glob("*/*.yaml")):
        if not f.name.endswith(".expected.yaml"):
            pod = yaml.safe_load(f.read_text())
            if pod["spec"].get("hostNetwork"):
                pods.append(pod)
    bodies = [orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": {"uid": "u", "operation": "CREATE", "object": p}}) for p in pods]  # fmt: skip
    from app import config

    cfg = config.from_dict({"wrapper": {"image": "registry.example/hostnet-rdma:bench"}})
    params = Params(config=cfg, namespace="default", wrapper_payload=payload(), version="bench")
    results = [mutate(p, params).pod for p in pods]
    ops = [jp.diff(a, b) for a, b in zip(pods, results, strict=True)]
    n = 5000

    def timed(name: str, fn: Callable[[int], object]) -> None:
        start = time.perf_counter()
        for i in range(n):
            fn(i % len(pods))
        print(f"{name:9s} {(time.perf_counter() - start) / n * 1e6:6.1f} us")

    timed("parse", lambda i: orjson.loads(bodies[i]))
    timed("copy", lambda i: orjson.loads(orjson.dumps(pods[i])))
    timed("mutate", lambda i: mutate(pods[i], params))
    timed("diff", lambda i: jp.diff(pods[i], results[i]))
    timed("response", lambda i: build_response("u", ops[i], []))
    print(f"mean response bytes {sum(len(build_response('u', o, [])) for o in ops) // len(ops)}")
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(lambda: [mutate(pods[i % len(pods)], params) for i in range(3000)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
