"""Pods built to be expensive, up to the API server's request size: every review stays within
the stated budget (app/core/budget.py, docs/security.md "Review cost") and its patch is valid.

Hypothesis draws the knobs (how many containers, how the env refers to itself, how long and
strange the names, what the command repeats); the pod is built from them, so a small draw makes
a large pod. Each review runs in a forked child (tests/costutil.py: its CPU time and the rise of
its resident memory). tests/test_compiled.py runs this file again against the compiled core, as
the image ships it: the budget is stated for that build; the interpreted core (an editable dev
install) is given INTERPRETED_FACTOR times the CPU."""

from __future__ import annotations

import base64
import os
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.core import Params, names
from app.core import budget as cost
from app.webhook.server import core_build
from app.wrapper import payload
from tests import costutil
from tests.test_tenant_cost import answered

PARAMS = Params(wrapper_payload=payload())
# The API server refuses requests over 3 MiB (its MaxRequestBodyBytes): no real review is larger.
API_SERVER_REQUEST_BYTES = 3 << 20
INTERPRETED_FACTOR = 4.0

CHARS = "abz09-.,*?[]!$(){}\\'\" \n"


@st.composite
def knobs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "containers": draw(st.integers(1, 48)),
        "env": draw(st.sampled_from(["none", "doubling", "many", "chain", "dangling"])),
        "env_n": draw(st.integers(0, 4000)),
        "name": draw(st.sampled_from(["jobset", "volcano", "owner", "lws", "none"])),
        "name_len": draw(st.integers(1, 250_000)),
        "name_chars": draw(st.text(alphabet=CHARS, min_size=1, max_size=6)),
        "command": draw(
            st.sampled_from(["plain", "rdzv-conf", "abbreviated", "script", "nested", "long-word", "none"])
        ),
        "command_n": draw(st.integers(1, 60_000)),
        "annotations": draw(st.sampled_from(["none", "near-limit", "knobs"])),
        "gpu": draw(st.booleans()),
    }


def build(k: dict[str, Any]) -> dict[str, Any]:
    name = (k["name_chars"] * (k["name_len"] // len(k["name_chars"]) + 1))[: k["name_len"]]
    n = k["env_n"]
    env: list[dict[str, str]] = []
    if k["env"] == "doubling":
        env = [{"name": "E0", "value": "x"}] + [
            {"name": f"E{i}", "value": f"$(E{i - 1})$(E{i - 1})"} for i in range(1, min(n, 64))
        ]
    elif k["env"] == "many":
        env = [{"name": f"V{i}", "value": "v" * 8} for i in range(n * 4)]
    elif k["env"] == "chain":
        env = [{"name": "C0", "value": "y" * 1000}] + [
            {"name": f"C{i}", "value": f"$(C{i - 1})-$(C0)"} for i in range(1, n)
        ]
    elif k["env"] == "dangling":
        env = [{"name": f"D{i}", "value": "$(NOPE)" * 20} for i in range(n)]
    m = k["command_n"]
    command: list[str] | None = {
        "plain": ["torchrun", "--nnodes=2", "--rdzv-endpoint=" + name[:300] + ":1", "t.py"],
        "rdzv-conf": ["torchrun", "--nnodes=2", "--rdzv-conf=" * min(m, 5000), "t.py"],
        "abbreviated": ["torchrun", *(["--nn=2", "--rdzv_c=is_host=1"] * min(m, 60_000)), "t.py"],
        "script": ["bash", "-c", "torchrun \\\n" + "  --nnodes=2 \\\n" * min(m, 5000) + "  t.py"],
        "nested": ["sh", "-c", "torchrun --local-addr=" + "$(" * min(m, 20_000) + "x" + ")" * min(m, 20_000) + " t.py"],
        "long-word": ["torchrun", "--local-addr=" + "a" * min(m * 40, 2_000_000), "t.py"],
        "none": None,
    }[k["command"]]
    meta: dict[str, Any] = {"name": "p-0", "namespace": "ns", "labels": {}, "annotations": {}}
    if k["name"] == "jobset":
        meta["labels"] = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": name,
                          "jobset.sigs.k8s.io/jobset-uid": "u"}  # fmt: skip
    elif k["name"] == "volcano":
        meta["annotations"]["volcano.sh/job-name"] = name
        meta["labels"]["volcano.sh/task-spec"] = name[:63]
    elif k["name"] == "owner":
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "u", "controller": True}
        ]
    elif k["name"] == "lws":
        meta["labels"] = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": "0"}
    if k["annotations"] == "near-limit":
        meta["annotations"]["user.example/blob"] = "z" * (cost.ANNOTATIONS_BYTES - 300)
    elif k["annotations"] == "knobs":
        meta["annotations"].update({names.ANN_NNODES: "9" * 5000, names.ANN_CONTAINERS: "a," * 5000,
                                    names.ANN_SKIP: "x," * 5000, names.ANN_PROFILE: name[:5000],
                                    names.ANN_RDZV_PORT: name[:100]})  # fmt: skip
    containers = []
    for i in range(k["containers"]):
        c: dict[str, Any] = {"name": f"c{i}", "image": "pytorch", "env": env}
        if command is not None:
            c["command"] = command
        if k["gpu"]:
            c["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
        containers.append(c)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"hostNetwork": True, "hostname": name[:63], "subdomain": name[:63], "containers": containers}}  # fmt: skip


def body_of(pod: dict[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": "u1", "namespace": "ns", "operation": "CREATE",
                                     "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}})  # fmt: skip


def cpu_budget(body: bytes) -> float:
    seconds = cost.REVIEW_CPU_SECONDS + cost.REVIEW_CPU_PER_MIB * len(body) / (1 << 20)
    return seconds if core_build() == "compiled" else seconds * INTERPRETED_FACTOR


WORST: dict[str, float] = {"cpu": 0.0, "memory": 0.0}
PRINT = os.environ.get("HOSTNET_RDMA_PRINT_COST") == "1"


def worst(**changes: Any) -> dict[str, Any]:
    """Each attack at its largest, beside what Hypothesis draws."""
    base = {"containers": 8, "env": "none", "env_n": 0, "name": "none", "name_len": 1, "name_chars": "a",
            "command": "plain", "command_n": 1, "annotations": "none", "gpu": True}  # fmt: skip
    return {**base, **changes}


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(knobs())
@example(worst(env="doubling", env_n=64))
@example(worst(env="many", env_n=4000, containers=1, command="abbreviated", command_n=10_000))
@example(worst(env="chain", env_n=400, containers=1))
@example(worst(env="dangling", env_n=4000, containers=2))
@example(worst(name="jobset", name_len=250_000, name_chars="a*,[", containers=1))
@example(worst(name="volcano", name_len=250_000, name_chars="b?*", containers=1))
@example(worst(name="owner", name_len=250_000, name_chars="-.", containers=1))
@example(worst(command="rdzv-conf", command_n=5000))
@example(worst(command="abbreviated", command_n=60_000, containers=1))
@example(worst(command="script", command_n=5000))
@example(worst(command="nested", command_n=20_000))
@example(worst(command="long-word", command_n=60_000, containers=1))
@example(worst(containers=48, annotations="knobs", name="lws", name_len=5000))
@example(worst(annotations="near-limit", containers=1))
def test_every_review_is_within_budget_and_its_patch_is_valid(k: dict[str, Any]) -> None:
    pod = build(k)
    body = body_of(pod)
    if len(body) > API_SERVER_REQUEST_BYTES:
        k = {**k, "containers": 1, "command_n": min(k["command_n"], 2000), "name_len": min(k["name_len"], 20_000)}
        pod = build(k)
        body = body_of(pod)
    cpu, peak, out = costutil.cost_in_child(lambda: answered(body))
    if PRINT:
        print(f"{len(body) >> 10:6d} KiB {cpu * 1000:7.1f} ms {peak >> 20:4d} MiB {out.outcome:11s} {k}")
    WORST["cpu"] = max(WORST["cpu"], cpu / cpu_budget(body))
    WORST["memory"] = max(
        WORST["memory"], peak / (cost.REVIEW_MEMORY_BYTES + cost.REVIEW_MEMORY_PER_BODY_BYTE * len(body))
    )
    assert cpu < cpu_budget(body), f"{cpu:.2f} s of CPU for {len(body)} bytes ({core_build()}): {k}"
    assert peak < cost.REVIEW_MEMORY_BYTES + cost.REVIEW_MEMORY_PER_BODY_BYTE * len(body), f"{peak >> 20} MiB: {k}"
    assert out.outcome != "error", f"an internal error: {out.warnings}: {k}"  # a bug, found by this test
    response = orjson.loads(out.body)["response"]
    assert response["allowed"] is True and response["uid"] == "u1"
    if "patch" not in response:
        return
    ops = orjson.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(pod, ops)
    annotations = patched["metadata"]["annotations"]
    assert sum(len(a.encode()) + len(v.encode()) for a, v in annotations.items()) <= cost.ANNOTATIONS_BYTES
    assert len(annotations[names.STATUS_ANNOTATION]) <= cost.STATUS_BYTES
    assert len(out.body) <= PARAMS.config.max_patch_bytes * 4 // 3 + 64 * 1024


def test_report_the_worst_ratio_to_the_budget() -> None:
    """Printed for the closing notes (pytest -s): how close the drawn pods came to the budget."""
    print(f"\nadversarial reviews ({core_build()} core): worst CPU {WORST['cpu']:.2f} of its budget, "
          f"worst memory {WORST['memory']:.2f}")  # fmt: skip
