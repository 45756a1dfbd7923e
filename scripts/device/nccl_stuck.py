"""app/e2e/train.py's main() where, on rank 1, every message of STUCK bytes or more (default
8 KiB) is lost: its receive and its send are waits that run out after their bound, as across a
hop that drops large frames. Rank 0 then waits on NCCL for messages that never come. Used by
scripts/device/nccl-sweep.sh on a GPU machine (no iptables there to drop frames for real)."""

from __future__ import annotations

import datetime
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app" / "e2e"))
import torch.distributed as real
import train

STUCK = int(os.environ.get("STUCK", "8192"))


class Lost:
    """A message that never arrives: its wait runs out, as NCCL's would."""

    def wait(self, timeout: datetime.timedelta | None = None) -> None:
        time.sleep(timeout.total_seconds() if timeout else 0)
        raise RuntimeError("timed out (a lost message)")


def lossy(op: Any) -> Any:
    def call(tensor: Any, peer: int, group: Any = None) -> Any:
        return Lost() if tensor.numel() * tensor.element_size() >= STUCK else op(tensor, peer, group=group)

    return call


if os.environ["RANK"] == "1":
    shim = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    shim.isend, shim.irecv = lossy(real.isend), lossy(real.irecv)
    train.dist = shim  # type: ignore[assignment]
train.main()
