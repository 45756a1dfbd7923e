"""`fabric-watch --clear`'s pure part (app.fleet.cleanup): what of ours a Node carries, the patches
that take it off and leave everything else, the conflict retries, a failure on one Node not
stopping the others, idempotency, the bounded wait for the agents; and the command's arguments.
Against the real API server: tests/apiserver/test_fabricwatch_clear.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from app.cli import main
from app.fleet import cleanup
from app.fleet import condition as cond
from app.fleet import report as rep

OURS_CONDITION = {"type": cond.CONDITION, "status": "True", "reason": cond.LARGE_FRAMES_DROPPED, "message": "m"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
NPD = {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock"}
OUR_TAINT = {"key": cond.TAINT_KEY, "value": "true", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DRAIN = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def node(name: str, *, condition: bool = True, annotation: bool = True, taint: bool = True,
         rv: str = "7") -> dict[str, Any]:  # fmt: skip
    annotations = {"other.example.com/x": "y", **({rep.ANNOTATION: "{}"} if annotation else {})}
    return {
        "metadata": {"name": name, "resourceVersion": rv, "labels": {"gpu": "h100"}, "annotations": annotations},
        "spec": {"taints": [GPU_TAINT, *([OUR_TAINT] if taint else []), DRAIN], "podCIDR": "10.244.1.0/24"},
        "status": {"conditions": [READY, *([OURS_CONDITION] if condition else []), NPD], "capacity": {"cpu": "8"}},
    }


def without_ours(n: dict[str, Any]) -> dict[str, Any]:
    """The Node as it must be after a clear: ours gone, the rest as it was."""
    want = copy.deepcopy(n)
    want["metadata"]["annotations"].pop(rep.ANNOTATION, None)
    want["spec"]["taints"] = [t for t in want["spec"]["taints"] if t["key"] != cond.TAINT_KEY]
    want["status"]["conditions"] = [c for c in want["status"]["conditions"] if c["type"] != cond.CONDITION]
    want["metadata"].pop("resourceVersion")
    return want


class FakeApi:
    """Nodes kept as JSON: a JSON patch is applied as the API server does (409 when the
    resourceVersion it carries is not the current one), the strategic merge's `$patch: delete` on
    conditions by type."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.store = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.writes: list[tuple[str, str]] = []
        self.refuse: set[str] = set()
        self.writes_between: dict[str, int] = {}  # a node someone else writes before each of our patches, n times

    def nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(n) for n in self.store.values()]

    def node(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.store[name]) if name in self.store else None

    def _bump(self, name: str) -> None:
        meta = self.store[name]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> bool:
        self.writes.append((name, "node"))
        if name in self.refuse:
            raise RuntimeError("403 Forbidden: nodes is forbidden")
        if self.writes_between.get(name, 0) > 0:
            self.writes_between[name] -= 1
            self._bump(name)
        current = self.store[name]
        (rv,) = [o["value"] for o in ops if o["path"] == "/metadata/resourceVersion"]
        if rv != current["metadata"]["resourceVersion"]:
            return False
        self.store[name] = jsonpatch.apply_patch(current, ops)
        self._bump(name)
        return True

    def patch_node_status(self, name: str, body: dict[str, Any]) -> None:
        self.writes.append((name, "status"))
        if name in self.refuse:
            raise RuntimeError("403 Forbidden: nodes/status is forbidden")
        (item,) = body["status"]["conditions"]
        assert item == {"type": cond.CONDITION, "$patch": "delete"} and set(body) == {"status"}
        status = self.store[name]["status"]
        status["conditions"] = [c for c in status["conditions"] if c["type"] != item["type"]]
        self._bump(name)


def stored(api: FakeApi, name: str) -> dict[str, Any]:
    n = copy.deepcopy(api.store[name])
    n["metadata"].pop("resourceVersion")
    return n


# ------------------------------------------------------------------------------ the decision
@pytest.mark.parametrize("condition, annotation, taint", [
    (True, True, True), (True, False, False), (False, True, False), (False, False, True), (False, False, False),
])  # fmt: skip
def test_leftovers_name_only_ours(condition: bool, annotation: bool, taint: bool) -> None:
    left = cleanup.leftovers(node("a", condition=condition, annotation=annotation, taint=taint))
    assert (left.condition, left.annotation, left.taint) == (condition, annotation, taint)
    assert bool(left) == any((condition, annotation, taint))
    assert left.other_taints == (GPU_TAINT, DRAIN), "the others' taints, in their order"
    assert left.resource_version == "7" and left.node == "a"


def test_a_bare_node_has_no_leftovers() -> None:
    assert not cleanup.leftovers({"metadata": {"name": "bare"}})
    assert not cleanup.leftovers({"metadata": {"name": "n", "annotations": None}, "spec": {"taints": None},
                                  "status": {"conditions": None}})  # fmt: skip


def test_the_node_patch_is_a_compare_and_swap_that_keeps_the_others() -> None:
    ops = cleanup.node_patch(cleanup.leftovers(node("a")))
    assert ops == [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/metadata/annotations/fabric.hostnet-rdma.io~1report"},
        {"op": "replace", "path": "/spec/taints", "value": [GPU_TAINT, DRAIN]},
    ]
    assert cleanup.node_patch(cleanup.leftovers(node("a", annotation=False, taint=False))) is None
    only_taint = cleanup.node_patch(cleanup.leftovers(node("a", annotation=False)))
    assert only_taint is not None and [o["path"] for o in only_taint] == ["/metadata/resourceVersion", "/spec/taints"]


def test_the_status_patch_deletes_our_condition_by_type_only() -> None:
    assert cleanup.STATUS_PATCH == {
        "status": {"conditions": [{"type": "HostnetRdmaFabricDegraded", "$patch": "delete"}]}
    }


# ------------------------------------------------------------------------------ the clear
def test_clear_takes_off_ours_and_leaves_everything_else() -> None:
    nodes = [node("a"), node("b", condition=False, taint=False), node("c", annotation=False, taint=False),
             node("untouched", condition=False, annotation=False, taint=False)]  # fmt: skip
    api = FakeApi(*nodes)
    out = cleanup.clear(api)
    assert out.changed == [
        ("a", [f"condition {cond.CONDITION}", f"annotation {rep.ANNOTATION}", f"taint {cond.TAINT_KEY}"]),
        ("b", [f"annotation {rep.ANNOTATION}"]),
        ("c", [f"condition {cond.CONDITION}"]),
    ]
    assert out.failed == [] and out.seen == 4
    for n in nodes:
        assert stored(api, n["metadata"]["name"]) == without_ours(n)
    assert ("untouched", "node") not in api.writes and ("untouched", "status") not in api.writes
    assert ("c", "node") not in api.writes, "a Node with only our condition gets no Node patch"


def test_a_second_clear_writes_nothing() -> None:
    api = FakeApi(node("a"), node("b"))
    cleanup.clear(api)
    api.writes.clear()
    out = cleanup.clear(api)
    assert out.changed == [] and out.failed == [] and out.seen == 2 and api.writes == []


def test_a_conflict_reads_the_node_again_and_keeps_what_was_written_in_between() -> None:
    api = FakeApi(node("a"))
    api.writes_between["a"] = 2
    out = cleanup.clear(api)
    assert out.changed and out.failed == []
    assert api.writes.count(("a", "node")) == 3
    assert stored(api, "a") == without_ours(node("a"))


def test_conflicts_every_time_fail_that_node_only() -> None:
    api = FakeApi(node("a"), node("b"))
    api.writes_between["a"] = cleanup.CONFLICT_ATTEMPTS
    out = cleanup.clear(api)
    assert [n for n, _ in out.failed] == ["a"] and "conflicts" in out.failed[0][1]
    assert [n for n, _ in out.changed] == ["b"]
    assert cleanup.leftovers(api.store["a"]).taint, "not cleared, and said so"


def test_a_refused_node_is_named_and_the_others_are_still_cleared() -> None:
    api = FakeApi(node("a"), node("b"), node("c"))
    api.refuse.add("b")
    out = cleanup.clear(api)
    assert out.failed == [("b", "403 Forbidden: nodes is forbidden")]
    assert [n for n, _ in out.changed] == ["a", "c"]


def test_a_list_that_breaks_off_keeps_what_was_cleared_and_says_so() -> None:
    api = FakeApi(node("a"), node("b"))

    def pages() -> Any:
        yield api.node("a")
        raise RuntimeError("410 Gone: the continue token expired")

    api.nodes = pages  # type: ignore[method-assign]
    out = cleanup.clear(api)
    assert [n for n, _ in out.changed] == ["a"] and out.seen == 1
    assert out.list_error == "410 Gone: the continue token expired"


def test_a_node_deleted_meanwhile_is_skipped() -> None:
    api = FakeApi(node("a"))
    api.writes_between["a"] = 1
    api.node = lambda name: None  # type: ignore[method-assign]
    out = cleanup.clear(api)
    assert out.changed == [] and out.failed == []


# ------------------------------------------------------------------------------ the wait
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


AGENT = {"metadata": {"name": "hostnet-rdma-fabric-watch-x", "deletionTimestamp": "2026-12-07T09:00:00Z"},
         "spec": {"nodeName": "gpu-node-1"}}  # fmt: skip


def test_the_wait_ends_when_the_agents_are_gone() -> None:
    clock = Clock()
    answers = [[AGENT], [AGENT], []]
    assert cleanup.wait_for_agents(lambda: answers.pop(0), 60, clock, clock.sleep) == []
    assert clock.now == 4.0


def test_the_wait_is_bounded_and_names_who_is_left() -> None:
    clock = Clock()
    left = cleanup.wait_for_agents(lambda: [AGENT], 7, clock, clock.sleep)
    assert left == ["hostnet-rdma-fabric-watch-x on gpu-node-1 (terminating)"]
    assert clock.now == 7.0


def test_a_failed_list_is_not_gone() -> None:
    clock = Clock()

    def refused() -> list[dict[str, Any]]:
        raise RuntimeError("503 Service Unavailable")

    left = cleanup.wait_for_agents(refused, 3, clock, clock.sleep)
    assert left == ["(the agents' pods could not be listed: 503 Service Unavailable)"]


# ------------------------------------------------------------------------------ the command
@pytest.mark.parametrize("argv, message", [
    (["--clear", "--wait-for-agents", "hostnet-rdma-system"], "give NAMESPACE/SELECTOR"),
    (["--clear", "--wait-for-agents", "/app=x"], "give NAMESPACE/SELECTOR"),
    (["--clear", "--once"], "does not go with --once"),
    (["--clear", "--timeout", "0"], "--timeout 0"),
    (["--wait-for-agents", "ns/app=x", "--node", "n"], "--wait-for-agents goes with --clear"),
    (["--timeout", "30", "--node", "n"], "--timeout goes with --clear"),  # not silently ignored
])  # fmt: skip
def test_bad_arguments_say_what_to_do(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric-watch", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_selector_keeps_its_slashes() -> None:
    from app.cli.fabricwatch import parse_agents

    assert parse_agents("hostnet-rdma-system/app.kubernetes.io/component=fabric-watch,app.kubernetes.io/instance=r") == (
        "hostnet-rdma-system", "app.kubernetes.io/component=fabric-watch,app.kubernetes.io/instance=r")  # fmt: skip


def test_json_patch_paths_escape_the_annotation_key() -> None:
    doc = {"metadata": {"resourceVersion": "1", "annotations": {rep.ANNOTATION: "x", "a/b": "c"}}, "spec": {}}
    left = cleanup.leftovers(doc)
    ops = cleanup.node_patch(left)
    assert ops is not None
    assert jsonpatch.apply_patch(doc, ops)["metadata"]["annotations"] == {"a/b": "c"}
    assert json.dumps(ops)  # plain JSON, as it goes on the wire


def test_the_command_prints_a_line_per_node_changed_and_exits_1_naming_the_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app import kube

    api = FakeApi(node("a"), node("b"), node("clean", condition=False, annotation=False, taint=False))
    api.refuse.add("b")
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig, context: None)
    monkeypatch.setattr(kube, "NodeCleanupApi", lambda client: api)
    assert main(["fabric-watch", "--clear"]) == 1
    got = capsys.readouterr()
    assert got.out == (f"a: removed condition {cond.CONDITION}, annotation {rep.ANNOTATION}, taint {cond.TAINT_KEY}\n")
    assert "1 of 3 Node(s) changed, 1 failed" in got.err
    assert (
        "could not clear Node b: 403 Forbidden" in got.err
        and "run `hostnet-rdma fabric-watch --clear` again" in got.err
    )
    api.refuse.clear()
    assert main(["fabric-watch", "--clear"]) == 0
    assert (
        capsys.readouterr().out
        == f"b: removed condition {cond.CONDITION}, annotation {rep.ANNOTATION}, taint {cond.TAINT_KEY}\n"
    )
    assert main(["fabric-watch", "--clear"]) == 0
    assert capsys.readouterr().out == "", "idempotent"
