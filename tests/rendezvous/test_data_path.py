"""The e2e training script's data-path sweep (app/e2e/train.py) with real torch and gloo: two
ranks, each its node's first, in a network namespace of their own whose loopback is either
clean or drops every packet over 1500 bytes without a word (the field report's silent
large-frame drop, seed 001). The cluster tier runs the same through a switch between nodes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.e2e import outcome

ROOT = Path(__file__).resolve().parents[2]
# Network namespaces of its own (root), as the rest of the tier.
pytestmark = pytest.mark.rendezvous
SCRIPT = """
set -e
ip link set lo up
if [ "$DROP" = 1 ]; then iptables -A OUTPUT -o lo -m length --length 1501:65535 -j DROP; fi
for r in $(seq 0 $((WORLD_SIZE - 1))); do RANK=$r "$PY" "$TRAIN" >"$OUT/rank$r.log" 2>&1 & done
wait
"""


def sweep(tmp_path: Path, drop: bool, world: int = 2) -> str:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("iptables"):
        pytest.skip("needs root, unshare and iptables (a network namespace of its own)")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
           "E2E_SWEEP_BOUND": "3", "E2E_SWEEP_ONLY": "1", "DROP": "1" if drop else "0", "OUT": str(tmp_path),
           "PY": sys.executable, "TRAIN": str(ROOT / "app" / "e2e" / "train.py")}  # fmt: skip
    p = subprocess.run(["unshare", "-n", "bash", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return "".join((tmp_path / f"rank{r}.log").read_text() for r in range(world))


def test_the_sweep_passes_on_a_clean_path(tmp_path: Path) -> None:
    log = sweep(tmp_path, drop=False)
    assert f"{outcome.SWEEP} " in log and "largest_ok=67108864 first_lost=-" in log, log
    assert outcome.path_verdict({"rank0": log}) == "to 64 MiB ok"


def test_the_sweep_names_the_size_that_no_longer_arrives(tmp_path: Path) -> None:
    log = sweep(tmp_path, drop=True)
    # One message each way: a 2048-byte message is one 2,100-byte packet, dropped; 512 crosses.
    assert "largest_ok=512 first_lost=2048" in log, log
    assert (
        f"{outcome.FAIL} rank=0 world=2 messages of 2048 bytes and more do not arrive between" in log
        and "smaller ones (512 bytes) do: an MTU or receive-buffer mismatch" in log
    ), log
    assert outcome.path_verdict({"rank0": log}) == "2 KiB lost vm->vm (512 B ok)".replace("vm", os.uname().nodename)


@pytest.mark.parametrize("drop", [False, True])
def test_eight_nodes_are_swept_in_rounds_of_pairs_at_once(tmp_path: Path, drop: bool) -> None:
    """Eight nodes: the ring's eight pairs in two rounds of four pairs at once (train.rounds),
    each pair's line printed, and with the drop every pair names the size; the time a run takes
    is printed (a bad fabric costs two bounds here, not one per pair)."""
    import time

    t0 = time.monotonic()
    log = sweep(tmp_path, drop=drop, world=8)
    print(f"8 nodes, {'large frames dropped' if drop else 'healthy'}: {time.monotonic() - t0:.1f} s")
    lines = [ln for ln in log.splitlines() if ln.startswith(f"{outcome.SWEEP} ")]
    assert len(lines) == 8, log
    if drop:
        assert all("largest_ok=512 first_lost=2048" in ln for ln in lines), lines
        # Once per rank that led a pair that lost them: ranks 0-6 (7 leads no pair of the ring).
        assert log.count(f"{outcome.FAIL} ") == 7, log
    else:
        assert all("largest_ok=67108864 first_lost=-" in ln for ln in lines) and outcome.FAIL not in log, lines
