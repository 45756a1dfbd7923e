#!/usr/bin/env python3
"""Instructions a review costs, counted by valgrind's callgrind: the same count for the same
build and bodies however busy the machine is, so an A/B of two builds means something here even
when `make bench` beside other work does not (BENCHMARKS.md, "What a connection may cost").

    scripts/bench/icount.py answer [--tree DIR]     # answer() of the compiled core, a review
    scripts/bench/icount.py protocol [--tree DIR]   # the HTTP protocol alone, a 2 KB review

`answer`: the bench's bodies with the chart's config (as profile_core.py), the compiled core of
this checkout (scripts/testenv/build-compiled.sh) or of DIR (another checkout's compiled tree);
only instructions inside the compiled `answer` are counted (--toggle-collect), over two runs of
different lengths, so start-up and warm-up cancel out. `protocol`: the reviews fed to the
server's protocol class through data_received and answered at once (no TLS, no core), DIR being
a source tree; whole-process counts, two lengths. Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

ANSWER = r"""
import gc, os, sys
from pathlib import Path
given = Path(os.environ["ICOUNT_BODIES"])
from app import config
from app.webhook import review
bodies = [p.read_bytes() for p in sorted((given / "bodies").glob("*.json"))]
params = review.params_for(config.load(given / "config.yaml"), "default")
templates = [b.replace(b'"uid": "bench-', b'"uid": "%d-') for b in bodies]
for i in range(len(templates) * 3):
    review.answer(templates[i % len(templates)] % (10**6 + i), params)
gc.collect()
for i in range(int(sys.argv[1])):
    review.answer(templates[i % len(templates)] % i, params)
"""

PROTOCOL = r"""
import asyncio, gc, sys
from uvicorn.config import Config
from uvicorn.server import ServerState
from app.webhook import protocol as P
BODY = b'{"x":"' + b"a" * 2000 + b'"}'
REQ = (b"POST /mutate?timeout=5s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY
ANSWER = b'{"response":{"allowed":true}}' * 60
class T(asyncio.Transport):
    def write(self, d): pass
    def close(self): pass
    def abort(self): pass
    def is_closing(self): return False
    def get_write_buffer_size(self): return 0
    def pause_reading(self): pass
    def resume_reading(self): pass
    def get_extra_info(self, name, default=None): return ("127.0.0.1", 1) if name in ("peername", "sockname") else default
class Reply:
    def __init__(self, send): self.send = send
    def cancel(self): return True
class D:
    path = b"/mutate"
    def reserve(self, headers): return next((int(v) for k, v in headers if k == b"content-length"), None)
    def reply(self, size, send): return Reply(send)
    def submit(self, body, reply): reply.send(200, ANSWER)
async def asgi(scope, receive, send): raise AssertionError
async def go():
    config = Config(asgi, http="httptools"); config.load()
    proto = P.bounded_protocol(10.0, 65536, direct=D())(config=config, server_state=ServerState(), app_state={})
    proto.connection_made(T())
    for _ in range(200): proto.data_received(REQ)
    gc.collect(); gc.freeze()
    for _ in range(int(sys.argv[1])): proto.data_received(REQ)
asyncio.run(go())
"""


def callgrind(code: str, n: int, tree: Path, env: dict[str, str], toggle: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "cg.out"
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        argv += ["--collect-atstart=no", f"--toggle-collect={toggle}"] if toggle else []
        subprocess.run([*argv, sys.executable, "-c", code, str(n)], cwd=tree, check=True, capture_output=True,
                       env={**os.environ, **env, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"})  # fmt: skip
        totals = [line for line in out.read_text().splitlines() if line.startswith(("totals:", "summary:"))]
        return max(int(line.split()[1]) for line in totals)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("answer", "protocol"))
    ap.add_argument("--tree", type=Path, help="another build: a compiled tree (answer), a source tree (protocol)")
    ap.add_argument("--n", type=int, help="reviews in the longer run (answer: 590, 10 of each body; protocol: 5000)")
    args = ap.parse_args()
    env: dict[str, str] = {}
    if args.what == "answer":
        tree = args.tree or Path(subprocess.run(["bash", str(ROOT / "scripts/testenv/build-compiled.sh")], check=True,
                                                capture_output=True, text=True,
                                                env={**os.environ, "PYTHON": sys.executable}).stdout.split()[-1])  # fmt: skip
        sys.path.insert(0, str(HERE))
        import run as bench  # this checkout's bodies and chart config, for either build

        given = Path(tempfile.mkdtemp(prefix="icount-"))
        bench.bodies(given / "bodies")
        (given / "config.yaml").write_bytes(bench.chart_config(given / "chart").read_bytes())
        env["ICOUNT_BODIES"] = str(given)
        code, toggle = ANSWER, "CPyDef_review___answer"
    else:
        tree, code, toggle = args.tree or ROOT, PROTOCOL, ""
    n = args.n or (590 if args.what == "answer" else 5000)
    short, long = callgrind(code, 0, tree, env, toggle), callgrind(code, n, tree, env, toggle)
    print(f"{args.what}: {(long - short) / n:,.0f} instructions a review ({tree})")


if __name__ == "__main__":
    main()
