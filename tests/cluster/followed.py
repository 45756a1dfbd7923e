"""Reading the logs a launcher test follows (test_launchers.LogFollower): the DDP script's result
lines, and one pod name's logs split into its runs. Pure, so the unit tier checks it."""

from __future__ import annotations

import re

# Between two runs under one pod name (a pod recreated under that name, or a container restarted
# in place): LeaderWorkerSet restarts the containers of a group that finished and recreates it.
AGAIN = re.compile(r"^--- \S+ again \(uid [^)]*, restarts \d+\) ---\n", re.M)


def again(name: str, uid: str, restarts: int) -> str:
    """The line written before a further run's logs."""
    return f"--- {name} again (uid {uid}, restarts {restarts}) ---\n"


def ddp_ok(text: str, world: int) -> int:
    """How many ranks of `world` reported a right all_reduce (tests/rendezvous/ddp_train.py)."""
    return len(re.findall(rf"^DDP-OK rank=\d+ world={world} sum={world * (world + 1) // 2} ", text, re.M))


def runs(text: str) -> list[str]:
    """One pod name's followed logs, one entry per run."""
    return AGAIN.split(text)


def first_finished_run(text: str, world: int) -> str | None:
    """The first run of a pod name in which a rank reported world `world`."""
    return next((r for r in runs(text) if ddp_ok(r, world)), None)


def trained_alone(logs: dict[str, str], nproc: int) -> bool:
    """At least two pods each ran a whole job of their own: a run in which all `nproc` local
    ranks reported world `nproc`. Per run, not over the name's logs: those soon hold several."""
    return sum(1 for t in logs.values() if any(ddp_ok(r, nproc) == nproc for r in runs(t))) >= 2
