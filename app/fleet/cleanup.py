"""What `fabric-watch --clear` takes off the Nodes once the agents are gone: our condition, our
report annotation and our taint, nothing else. `helm uninstall` deletes the DaemonSet and, in the
same pass, the agents' ServiceAccount and RBAC, so no agent can take its own marks back; a
NoSchedule taint left with no agent to lift it would keep its node unschedulable for ever.

The decisions are here, with the calls given (app.kube.NodeCleanupApi wires the real ones):
- which of ours a Node carries (`leftovers`);
- the writes that remove them, others' kept: a strategic merge that deletes our condition by its
  type (`STATUS_PATCH`: every other condition as it is, no read needed), and a JSON patch of the
  Node that removes our annotation and replaces the taints by the others', with the
  resourceVersion read (`node_patch`: a compare-and-swap, as the agent's own taint write is);
- the order (`clear`): one Node at a time, read again and retried on a conflict, a failure on one
  Node never stopping the others; a second run changes nothing;
- the bounded wait for the agents' pods to be gone first (`wait_for_agents`): an agent still
  terminating could otherwise write its condition again after the clear.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.fleet import condition as cond
from app.fleet import report as rep

# A strategic merge on nodes/status: Node.status.conditions merges by `type`, and `$patch: delete`
# removes the element of that type only (verified against the real API server:
# tests/apiserver/test_fabricwatch_clear.py).
STATUS_PATCH: dict[str, Any] = {"status": {"conditions": [{"type": cond.CONDITION, "$patch": "delete"}]}}
CONFLICT_ATTEMPTS = 3


def _json_pointer(token: str) -> str:
    """One JSON Pointer token (RFC 6901): `~` and `/` escaped, as an annotation key needs."""
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Leftovers:
    """What of the fabric watch one Node carries."""

    node: str
    resource_version: str
    condition: bool
    annotation: bool
    taint: bool
    other_taints: tuple[dict[str, Any], ...] = field(default=(), hash=False)

    def __bool__(self) -> bool:
        return self.condition or self.annotation or self.taint

    def removed(self) -> list[str]:
        """What clearing this Node removes, one phrase each (the command's line per Node)."""
        return ([f"condition {cond.CONDITION}"] if self.condition else []) + (
            [f"annotation {rep.ANNOTATION}"] if self.annotation else []) + (
            [f"taint {cond.TAINT_KEY}"] if self.taint else [])  # fmt: skip


def leftovers(node: dict[str, Any]) -> Leftovers:
    """Which of our condition, annotation and taint a Node (raw JSON) carries; the others' taints
    as they are, in their order."""
    meta = node.get("metadata") or {}
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
    others = tuple(cond.others_taints(node))
    return Leftovers(
        node=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        condition=cond.read_condition(node) is not None,
        annotation=rep.ANNOTATION in (meta.get("annotations") or {}),
        taint=len(others) != len(taints),
        other_taints=others,
    )


def node_patch(left: Leftovers) -> list[dict[str, Any]] | None:
    """The JSON patch that takes our annotation and taint off the Node read, others' kept; None
    when it carries neither. The resourceVersion read goes with it: the API server answers 409
    when the Node changed in between (a compare-and-swap), and the caller reads it again."""
    if not (left.annotation or left.taint):
        return None
    ops: list[dict[str, Any]] = []
    if left.annotation:
        ops.append({"op": "remove", "path": "/metadata/annotations/" + _json_pointer(rep.ANNOTATION)})
    if left.taint:
        ops.append(cond.taints_op(list(left.other_taints), present=True))
    return cond.guarded_patch(left.resource_version, ops)


class CleanupApi(Protocol):
    """The calls `clear` makes (app.kube.NodeCleanupApi). Failures raise, with a readable message."""

    def nodes(self) -> Iterable[dict[str, Any]]:
        """Every Node, as raw JSON (the real one pages through them)."""
        ...

    def node(self, name: str) -> dict[str, Any] | None:
        """One Node, None when it is gone."""
        ...

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> bool:
        """Apply a JSON patch; False when the Node changed since it was read (409)."""
        ...

    def patch_node_status(self, name: str, body: dict[str, Any]) -> None:
        """Apply a strategic-merge patch to nodes/status."""
        ...


@dataclass
class Outcome:
    """What a clear did: the Nodes changed (and what came off each), the Nodes it could not clear
    (and why), how many Nodes it looked at, and why the list of Nodes broke off (empty: it did not)."""

    changed: list[tuple[str, list[str]]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    seen: int = 0
    list_error: str = ""


def clear_one(api: CleanupApi, node: dict[str, Any]) -> list[str]:
    """Take ours off one Node: the annotation and taint (compare-and-swap, read again on a
    conflict), then the condition. What came off; raises when it could not."""
    left = leftovers(node)
    removed: list[str] = []
    for _ in range(CONFLICT_ATTEMPTS):
        ops = node_patch(left)
        if ops is None or api.patch_node(left.node, ops):
            removed = [r for r in left.removed() if not r.startswith("condition ")]
            break
        current = api.node(left.node)  # someone wrote in between: read it again
        if current is None:
            return []
        left = leftovers(current)
    else:
        raise RuntimeError(f"the Node changed under every one of {CONFLICT_ATTEMPTS} writes (conflicts)")
    if left.condition:
        api.patch_node_status(left.node, STATUS_PATCH)
        removed.insert(0, f"condition {cond.CONDITION}")
    return removed


def clear(api: CleanupApi) -> Outcome:
    """Take our condition, annotation and taint off every Node, everything else left as it is.
    A Node that fails is recorded and the others are still cleared; a Node with nothing of ours
    is not written (a second run writes nothing). A list that breaks off is recorded too, with what
    was cleared until then."""
    out = Outcome()
    try:
        for node in api.nodes():
            out.seen += 1
            _clear_into(api, node, out)
    except Exception as e:  # the list itself (a page refused): the Nodes not reached stay as they are
        out.list_error = str(e) or type(e).__name__
    return out


def _clear_into(api: CleanupApi, node: dict[str, Any], out: Outcome) -> None:
    name = str((node.get("metadata") or {}).get("name", ""))
    if not leftovers(node):
        return
    try:
        removed = clear_one(api, node)
    except Exception as e:  # this Node only: the others are still cleared
        out.failed.append((name, str(e) or type(e).__name__))
        return
    if removed:
        out.changed.append((name, removed))


# ------------------------------------------------------------------ the agents first
def describe_pod(pod: dict[str, Any]) -> str:
    """`name on node (terminating)`: which agent is still there, and where."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    where = f" on {spec['nodeName']}" if spec.get("nodeName") else ""
    return f"{meta.get('name', '?')}{where}" + (" (terminating)" if meta.get("deletionTimestamp") else "")


def wait_for_agents(
    list_pods: Callable[[], list[dict[str, Any]]],
    timeout_seconds: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll_seconds: float = 2.0,
) -> list[str]:
    """Wait, at most `timeout_seconds`, until no agent pod is left; the ones still there when the
    time ran out (empty: all gone). A failed list counts as not gone yet (tried again)."""
    deadline = clock() + timeout_seconds
    left: list[str] = []
    while True:
        try:
            left = [describe_pod(p) for p in list_pods()]
        except Exception as e:  # the API server's hiccup: look again
            left = left or [f"(the agents' pods could not be listed: {e})"]
        else:
            if not left:
                return []
        if clock() >= deadline:
            return left
        sleep(min(poll_seconds, max(0.0, deadline - clock())))
