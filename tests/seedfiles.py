"""The field report's job files (tests/cluster/seed, verbatim) as a user moving to the webhook
changes them: the rendezvous shell replaced by plain torchrun, nothing else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SEED = Path(__file__).resolve().parent / "cluster" / "seed"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SEED / f"{name}.yaml").read_text()) if d]


def plain_torchrun(docs: list[dict[str, Any]], nproc: int = 8) -> list[dict[str, Any]]:
    """`torchrun --nproc-per-node=N /scripts/train.py` in place of each container's rendezvous
    shell (a `bash -c` script in args that runs torchrun); an etcd job keeps its backend and
    endpoint flags (they name the etcd server, not a pod)."""
    docs = copy.deepcopy(docs)

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for c in x.get("containers") or []:
                script = next((a for a in c.get("args") or [] if "torchrun" in a), None)
                if script is not None:
                    keep = [w for w in script.replace("\\\n", " ").split() if w.startswith("--rdzv-") and "etcd" in script
                            and w.split("=")[0] in ("--rdzv-backend", "--rdzv-endpoint")]  # fmt: skip
                    c["args"] = [" ".join(["torchrun", f"--nproc-per-node={nproc}", *keep, "/scripts/train.py"]) + "\n"]
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(docs)
    return docs
