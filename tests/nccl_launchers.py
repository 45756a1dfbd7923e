"""How launchers and log collectors re-emit a process's lines (the shapes of their prefixes), for
the property tests of `hostnet-rdma verify`: a log's verdict must not depend on how it reached the
user. Each shape is the one the tool documents (its own docs or source):

- torchrun: `[rank3]:` before each line of a worker's traceback/print, and `--tee 3`'s
  `[default3]:` (torch.distributed.elastic's tail log);
- Slurm `srun -l`: `3: `;
- Ray: `(RayWorkerWrapper pid=1234, ip=10.0.0.2) `, nested in a driver's own prefix and coloured
  with ANSI escapes when the driver's stdout is a terminal;
- Open MPI `mpirun --tag-output`: `[1,3]<stdout>:` / `<stderr>:`;
- `kubectl logs --prefix`: `[pod/NAME/CONTAINER] `; `--timestamps`: an RFC 3339 time first;
- a log shipper's `[2026-12-07 08:31:36] ` stamp;
- NCCL's own `host:pid:tid ` removed (a launcher that sets NCCL_DEBUG_FILE per rank, or a paste
  that keeps `[3] NCCL INFO` only).
"""

from __future__ import annotations

import re
from collections.abc import Callable

Prefix = Callable[[str, int, int], str]  # (line, rank, line number) -> the line as the user sees it

_HOST_PID_TID = re.compile(r"^([^\s:\[\]]+):\d+:\d+ (?=\[)")


def _strip_who(line: str, rank: int, i: int) -> str:
    return _HOST_PID_TID.sub("", line)


def _ray(line: str, rank: int, i: int) -> str:
    return f"(RayWorkerWrapper pid={4100 + rank}, ip=10.0.0.{2 + rank}) {line}"


def _ray_nested_ansi(line: str, rank: int, i: int) -> str:
    return f"\x1b[36m(pid=77)\x1b[0m \x1b[33m(RayWorkerWrapper pid={4100 + rank})\x1b[0m {line}"


PREFIXES: dict[str, Prefix] = {
    "none": lambda line, rank, i: line,
    "torchrun-rank": lambda line, rank, i: f"[rank{rank}]:{line}",
    "torchrun-tee": lambda line, rank, i: f"[default{rank}]:{line}",
    "srun-l": lambda line, rank, i: f"{rank}: {line}",
    "ray": _ray,
    "ray-nested-ansi": _ray_nested_ansi,
    "mpirun-tag-output": lambda line, rank, i: f"[1,{rank}]<{'stderr' if 'NCCL' in line else 'stdout'}>:{line}",
    "kubectl-prefix": lambda line, rank, i: f"[pod/train-worker-{rank}/pytorch] {line}",
    "kubectl-timestamps": lambda line, rank, i: f"2026-12-07T08:{31 + i // 60:02d}:{i % 60:02d}.{i:09d}Z {line}",
    "stamp": lambda line, rank, i: f"[2026-12-07 08:31:{i % 60:02d}] {line}",
    "who-removed": _strip_who,
    "who-removed-srun": lambda line, rank, i: f"{rank}: {_strip_who(line, rank, i)}",
}


def reemit(text: str, rank: int, prefix: str) -> list[str]:
    shape = PREFIXES[prefix]
    return [shape(line, rank, i) for i, line in enumerate(text.splitlines())]


def interleave(ranks: list[list[str]], order: list[int]) -> list[str]:
    """The ranks' lines merged as one stream would (each rank's own order kept): `order` says
    whose line comes next, taken modulo the ranks that still have lines."""
    queues = [list(lines) for lines in ranks]
    out: list[str] = []
    k = 0
    while any(queues):
        live = [q for q in queues if q]
        q = live[order[k % len(order)] % len(live)] if order else live[0]
        out.append(q.pop(0))
        k += 1
    return out
