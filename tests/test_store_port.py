"""The c10d store's port declared on the pod that hosts it (#45): on the host network a
container port is a host port, and the scheduler never puts two pods asking for one host port on
one node, so two jobs whose store ports collide wait for each other instead of one store failing
to bind. The cluster tier shows the second job Pending with the scheduler's reason, then running."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from app.core import InjectConfig, Params, mutate
from app.core.mutate import job_port
from app.core.wrap import STORE_PORT_NAME

GOLDEN = Path(__file__).parent / "golden" / "volcano"


def worker(index: int) -> dict[str, Any]:
    """Worker `index` of the 2-worker Volcano job of the golden files (plain torchrun)."""
    pod: dict[str, Any] = yaml.safe_load((GOLDEN / "plain-c10d-worker-1.yaml").read_text())
    text = yaml.safe_dump(pod).replace("ddp-vc-worker-1", f"ddp-vc-worker-{index}")
    pod = yaml.safe_load(text)
    pod["metadata"]["labels"]["volcano.sh/task-index"] = str(index)
    return pod


def ports(pod: dict[str, Any], config: InjectConfig | None = None) -> list[dict[str, Any]]:
    params = Params(config=config or InjectConfig(), namespace="team-a", wrapper_payload="x", version="test")
    result = mutate(pod, params)
    again = mutate(copy.deepcopy(result.pod), params)
    assert again.pod == result.pod  # idempotent: a second pass adds nothing
    return [p for c in result.pod["spec"]["containers"] for p in c.get("ports") or []]


def test_only_the_store_host_declares_the_jobs_store_port() -> None:
    port = job_port(InjectConfig(), "0b8e1f4c-1111-4a8e-9c1f-2d3e4f5a6b7c")
    assert ports(worker(0)) == [{"containerPort": port, "hostPort": port, "protocol": "TCP", "name": STORE_PORT_NAME}]
    assert ports(worker(1)) == []


def test_a_port_already_declared_a_command_with_its_own_endpoint_or_the_config_leave_it_out() -> None:
    port = job_port(InjectConfig(), "0b8e1f4c-1111-4a8e-9c1f-2d3e4f5a6b7c")
    declared = worker(0)
    declared["spec"]["containers"][0]["ports"] = [{"containerPort": port, "name": "c10d"}]
    assert ports(declared) == [{"containerPort": port, "name": "c10d"}]
    own = worker(0)
    c = own["spec"]["containers"][0]
    c["command"] = [*c["command"][:1], "--rdzv-endpoint=ddp-vc-worker-0.ddp-vc:29400", *c["command"][1:]]
    assert ports(own) == []
    off = dataclasses.replace(InjectConfig(), store_host_port=False)
    assert ports(worker(0), off) == []
