"""The preview's pods held to pods the real controllers created (read back from the cluster
tier: each launcher's e2e job as the API server stored it, and its pods less what none of the
webhook's decisions read). The cluster tier checks the same against the live controllers; this
keeps the preview honest between its runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.held import held_to

READBACK = Path(__file__).parent / "readback"


@pytest.mark.parametrize("launcher", sorted(p.stem for p in READBACK.glob("*.json")))
def test_the_preview_matches_the_pods_the_controller_made(launcher: str) -> None:
    saved = json.loads((READBACK / f"{launcher}.json").read_text())
    assert len(saved["pods"]) == 2
    assert held_to(saved["objects"], saved["pods"], saved["runtimes"]) == []


def test_a_difference_is_named() -> None:
    saved = json.loads((READBACK / "volcano.json").read_text())
    pod = saved["pods"][0]
    pod["metadata"]["annotations"]["volcano.sh/job-retry-count"] = "1"
    pod["spec"]["containers"][0]["env"] = [
        e for e in pod["spec"]["containers"][0]["env"] if e["name"] != "VC_TASK_INDEX"
    ]
    found = held_to(saved["objects"], saved["pods"])
    assert any("volcano.sh/job-retry-count='0', the real pod has '1'" in d for d in found), found
    assert any("env" in d and "VC_TASK_INDEX" in d for d in found), found


def test_the_webhooks_store_port_is_not_the_controllers() -> None:
    """The store host's pod carries the store's port the webhook declared (wrap.STORE_PORT_NAME):
    not a difference from the controller's pod; any other port is."""
    from app.core.wrap import STORE_PORT_NAME

    saved = json.loads((READBACK / "jobset.json").read_text())
    c = saved["pods"][0]["spec"]["containers"][0]
    c["ports"] = [*(c.get("ports") or []), {"containerPort": 24188, "hostPort": 24188, "name": STORE_PORT_NAME}]
    assert held_to(saved["objects"], saved["pods"], saved["runtimes"]) == []
    c["ports"].append({"containerPort": 8080})
    assert any("ports" in d and "8080" in d for d in held_to(saved["objects"], saved["pods"], saved["runtimes"]))


def test_a_runtime_the_job_does_not_use_is_not_previewed() -> None:
    """The cluster holds other runtimes (another test's ClusterTrainingRuntime): they are looked
    up by the TrainJob's runtimeRef, never previewed as TrainJobs of their own defaults (CI's
    failure: `torch-distributed-rdma-node-0-0-: no such real pod`)."""
    saved = json.loads((READBACK / "trainjob.json").read_text())
    (runtime,) = saved["runtimes"]
    other = {**runtime, "kind": "ClusterTrainingRuntime",
             "metadata": {"name": "torch-distributed-rdma"}}  # fmt: skip
    assert held_to(saved["objects"], saved["pods"], [other, runtime]) == []
