"""`hostnet-rdma mutate -f FILE`: the pods of what you apply (a Pod, or a job of any launcher:
its controller's pods) exactly as the webhook would store them, with a summary of what was
decided on stderr. Exit codes: 0 done; 2 bad input or a cluster that cannot be read; 3 a pod
would not be sent to the webhook at all; 4 the file holds a workload the preview cannot expand
into pods (named on stderr); 141 the reader closed the pipe."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from app import preview
from app.cli.common import CommandError, add_cluster_args, add_preview_args, error, run_preview, without_pods
from app.core import Result, patch


def summary(result: Result, warnings: list[str]) -> str:
    """The webhook's decision for one pod; `warnings`: the preview's row's (the core's and its own)."""
    if not result.info:
        return f"hostnet-rdma: unchanged: {result.reason}."
    info = result.info
    parts = [
        f"hostnet-rdma: launcher {info.launcher}" + (f" (job {info.job})" if info.job else ""),
        f"identity {info.advertised_address or '(none)'}",
        f"rendezvous endpoint {info.rdzv_endpoint or '(from the pod env or the user)'}",
        f"backend {info.rdzv_backend or '(user/launcher)'}, id {info.rdzv_id or '(none)'}",
        f"profile {result.profile} ({result.profile_reason})",
        f"training containers {', '.join(result.training)}",
        f"injected {', '.join(result.applied) or 'nothing'}",
    ]
    if result.skipped:
        parts.append("skipped " + "; ".join(f"{k}: {v}" for k, v in result.skipped.items()))
    text = "; ".join(parts) + "."
    for w in warnings:
        text += f"\nwarning: {w}"
    return text


def _said(row: preview.Row) -> str:
    if row.result is not None:
        return summary(row.result, row.warnings)
    return f"hostnet-rdma: unchanged: {row.reason}."


def cmd_mutate(args: argparse.Namespace) -> int:
    if not args.file:
        return error("give the file to preview: -f FILE (- for stdin)")
    try:
        rows, single_pod, others = run_preview(args)
    except CommandError as e:
        return error(str(e))
    lines, unexpanded = without_pods(others)
    for line in lines:
        print(line, file=sys.stderr)
    for row in rows:
        prefix = "" if single_pod else f"{row.source} pod {row.pod}: "
        print(prefix + _said(row), file=sys.stderr)
    pods = [r.pod_after for r in rows]
    if args.output == "patch":
        ops: Any = [patch.diff(r.before, r.pod_after) for r in rows]
        out: Any = ops[0] if single_pod else [{"pod": r.pod, "patch": o} for r, o in zip(rows, ops, strict=True)]
        print(json.dumps(out, indent=2))
    else:
        doc: Any = pods[0] if single_pod else {"apiVersion": "v1", "kind": "List", "items": pods}
        if args.output == "json":
            print(json.dumps(doc, indent=2))
        else:
            print(yaml.safe_dump(doc, sort_keys=False, width=1 << 20), end="")
    if unexpanded:
        return unexpanded
    return preview.EXIT_NOT_SENT if any(not r.sent for r in rows) else preview.EXIT_OK


def register(sub: Any) -> None:
    m = sub.add_parser(
        "mutate",
        help="print the pods of a file (a Pod, or a job of any launcher) exactly as the webhook would store them",
        description=__doc__,
    )
    add_preview_args(m)
    m.add_argument("-o", "--output", choices=("yaml", "json", "patch"), default="yaml",
                   help="the pod (a List for several), or the JSON Patch(es) the webhook would answer")  # fmt: skip
    add_cluster_args(m)
    m.set_defaults(func=cmd_mutate)
