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
SCRIPT = """
set -e
ip link set lo up
if [ "$DROP" = 1 ]; then iptables -A OUTPUT -o lo -m length --length 1501:65535 -j DROP; fi
for r in 0 1; do RANK=$r "$PY" "$TRAIN" >"$OUT/rank$r.log" 2>&1 & done
wait
"""


def sweep(tmp_path: Path, drop: bool) -> str:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("iptables"):
        pytest.skip("needs root, unshare and iptables (a network namespace of its own)")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "E2E_SWEEP_BOUND": "3", "E2E_SWEEP_ONLY": "1", "DROP": "1" if drop else "0", "OUT": str(tmp_path),
           "PY": sys.executable, "TRAIN": str(ROOT / "app" / "e2e" / "train.py")}  # fmt: skip
    p = subprocess.run(["unshare", "-n", "bash", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return (tmp_path / "rank0.log").read_text()


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
