"""The training script the examples ship (deploy/examples/train-script.yaml) runs under real
torchrun: two ranks, gloo on CPU, every rank's line, exit 0. The examples' GPUs make it NCCL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.rendezvous
ROOT = Path(__file__).resolve().parents[2]


def test_the_examples_train_script_runs_under_torchrun(tmp_path: Path) -> None:
    (cm,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "examples" / "train-script.yaml").read_text()) if d]
    script = tmp_path / "train.py"
    script.write_text(cm["data"]["train.py"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "HOSTNET_RDMA_"))}
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)],
        capture_output=True, text=True, timeout=300, env={**env, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    # The two ranks print at once through torchrun: their lines may share one line of its output.
    ranks = re.findall(r"rank (\d)/2 on [^:]*: all_reduce ok over gloo", out.stdout)
    assert sorted(ranks) == ["0", "1"], out.stdout
