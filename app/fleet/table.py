"""`hostnet-rdma doctor --cluster`: the fleet's fabric from the Nodes' conditions, one row a node.

A condition whose agent stopped writing is shown STALE, never as healthy; a node without our
condition shows NO-AGENT. A node that many peers name in their messages is most likely the one
at fault (its own agent may be down): the NAMED-BY column counts them.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from app.fleet import condition as cond
from app.fleet import report as rep

DEFAULT_HEARTBEAT = 300


@dataclass(frozen=True)
class Row:
    node: str
    state: str  # HEALTHY | DEGRADED | UNKNOWN | STALE | NO-AGENT
    reason: str
    age_seconds: int | None  # since the last write of the condition
    tainted: bool
    named_by: int
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "state": self.state, "reason": self.reason, "ageSeconds": self.age_seconds,
                "tainted": self.tainted, "namedBy": self.named_by, "message": self.message}  # fmt: skip


def _heartbeat_of(node: dict[str, Any]) -> int:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(rep.ANNOTATION)
    if isinstance(text, str):
        try:
            return rep.parse(text).heartbeat_seconds
        except rep.ReportError:
            pass
    return DEFAULT_HEARTBEAT


def rows(nodes: list[dict[str, Any]], now: dt.datetime) -> list[Row]:
    names = sorted(str((n.get("metadata") or {}).get("name", "")) for n in nodes)
    patterns = {n: re.compile(rf"(?<![\w.-]){re.escape(n)}(?![\w.-])") for n in names if n}
    found: list[tuple[str, tuple[cond.Condition, dt.datetime | None, dt.datetime | None] | None, dict[str, Any]]] = []
    for n in nodes:
        found.append((str((n.get("metadata") or {}).get("name", "")), cond.read_condition(n), n))
    named: dict[str, int] = dict.fromkeys(names, 0)
    for name, c, _ in found:
        if c is not None and c[0].status == "True":
            for other, pattern in patterns.items():
                if other != name and pattern.search(c[0].message):
                    named[other] += 1
    out: list[Row] = []
    for name, c, node in sorted(found, key=lambda f: f[0]):
        tainted = any(
            isinstance(t, dict) and t.get("key") == cond.TAINT_KEY for t in (node.get("spec") or {}).get("taints") or []
        )
        if c is None:
            out.append(
                Row(name, "NO-AGENT", "", None, tainted, named.get(name, 0), "no fabric-watch condition on this node")
            )
            continue
        condition, heartbeat, _ = c
        age = int((now - heartbeat).total_seconds()) if heartbeat else None
        if cond.stale(heartbeat, _heartbeat_of(node), now):
            state = "STALE"
        else:
            state = {"True": "DEGRADED", "False": "HEALTHY"}.get(condition.status, "UNKNOWN")
        out.append(Row(name, state, condition.reason, age, tainted, named.get(name, 0), condition.message))
    return out


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render(table: list[Row]) -> str:
    head = ("NODE", "STATE", "REASON", "AGE", "TAINT", "NAMED-BY", "MESSAGE")
    lines = [(r.node, r.state, r.reason or "-", _age(r.age_seconds), "yes" if r.tainted else "-", str(r.named_by),
              r.message) for r in table]  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=False)][:-1]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + "  " + row[-1]
                     for row in [head, *lines])  # fmt: skip


def healthy(table: list[Row]) -> bool:
    return all(r.state == "HEALTHY" for r in table if r.state != "NO-AGENT")
