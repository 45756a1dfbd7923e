"""`hostnet-rdma explain POD | -f FILE`: why a pod was, or would be, mutated or not, and what its
wrapper will decide. A live pod or a single Pod file: step by step, from the namespace label to
what the webhook decided. A job file (any launcher): one row per pod its controller creates
(local address, endpoint, store host, node count) and every warning. What the file runs but does
not hold (a script in the image, an image entrypoint) is named as decided at run time; a
(Cluster)TrainingRuntime alone is shown as a TrainJob of its defaults; kinds that make workloads
the preview does not expand (Argo, CronJob, Ray, Kubeflow Pipelines) are named, exit 4.

Exit codes: 0 every pod is mutated and its wrapper would start; 1 a pod's wrapper would refuse
to start, a pod would be left unchanged as one the webhook cannot handle safely (not: a pod that
is no training pod, or opted out), a live pod was created without the webhook (no plumbing),
or a job's pods would not host exactly one rendezvous store; 2 bad input or a cluster that
cannot be read; 3 a pod would not be sent to the webhook; 4 the file holds a workload the preview cannot expand into pods (named); 141 the reader closed the pipe."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app import preview
from app.cli.common import (
    CommandError,
    add_cluster_args,
    add_preview_args,
    cluster_namespace,
    error,
    load_config,
    preview_config,
    read_objects,
    run_preview,
    without_pods,
)
from app.core import selection
from app.preview.explain import explain
from app.webhook import review


def cmd_explain(args: argparse.Namespace) -> int:
    if args.file:
        try:
            objects = read_objects(args.file)
            rows, _, others = run_preview(args, objects)
            if len(objects) == 1 and objects[0].get("kind") == "Pod" and not args.from_cluster:
                # The steps, and the exit code a job's pod would give (one table of codes).
                _steps_of_a_file(args, objects[0])
                return _exit_code(rows, 0)
        except CommandError as e:
            return error(str(e))
        lines, unexpanded = without_pods(others)
        if args.output in ("json", "yaml"):
            _dump(data(rows, lines, unexpanded), args.output)
            return _exit_code(rows, unexpanded)
        print(table(rows, wide=args.output == "wide") if rows else "no pods to preview")
        if lines:
            print("\n" + "\n".join(lines))
        return _exit_code(rows, unexpanded)
    if not args.pod:
        return error("give a POD name or -f FILE")
    return _steps_of_a_live_pod(args)


def _steps_of_a_file(args: argparse.Namespace, pod: dict[str, Any]) -> int:
    import dataclasses

    cfg = preview_config(args.config, args.kube_version)
    if args.exclude_namespaces is not None:
        cfg = dataclasses.replace(cfg, exclude_namespaces=tuple(n for n in args.exclude_namespaces.split(",") if n))
    namespace = args.namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    return _steps(explain(pod, review.params_for(cfg, namespace), None, None), args.output)


def _steps_of_a_live_pod(args: argparse.Namespace) -> int:
    from app import kube

    try:
        cfg = load_config(args.config)
    except CommandError as e:
        return error(str(e))
    namespace = cluster_namespace(args)
    try:
        api = kube.api_client(args.kubeconfig, args.context)
        pod = kube.read_pod(api, namespace, args.pod)
        ns_labels = kube.namespace_labels(api, namespace)
        selectors: selection.Selectors | None = kube.webhook_selectors(api, args.webhook_config)
    except kube.ApiException as e:
        print(f"hostnet-rdma: error: {namespace}/{args.pod}: {kube.refusal(e)}", file=sys.stderr)
        return 2
    if selectors is None:
        print(f"NO  no MutatingWebhookConfiguration {args.webhook_config!r} in this cluster: is the chart installed "
              "(helm list -A), under another release name (--webhook-config)?")  # fmt: skip
        return 1
    return _steps(explain(pod, review.params_for(cfg, namespace), ns_labels, selectors, live=True), args.output)


WIDTH = 100  # the default table's columns; `-o wide` prints every column whatever its width


def _fit(cells: list[tuple[str, ...]], column: int) -> list[tuple[str, ...]]:
    """Rows whose joined width exceeds WIDTH get `column` cut in its middle (…)."""
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    over = sum(widths) + 2 * (len(widths) - 1) + 2 - WIDTH
    if over <= 0:
        return cells
    keep = max(8, widths[column] - over - 1)
    out = []
    for c in cells:
        cell = c[column]
        if len(cell) > keep:
            cell = cell[: keep // 2] + "…" + cell[len(cell) - (keep - keep // 2) :]
        out.append((*c[:column], cell, *c[column + 1 :]))
    return out


def _columns(lines: list[tuple[str, ...]], indent: str = "") -> list[str]:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]


def _cells(r: preview.Row) -> tuple[str, str, str, str, str, str]:
    if not r.sent or not r.mutated:
        return (r.source, r.pod, "-", "-", "-", "-")
    # Where the wrapper will refuse to start, no store is hosted: the row says so, not yes / no.
    store = "refuses" if r.refusal else r.store_host or "-"
    return (r.source, r.pod, r.local_addr or "-", r.endpoint or "-", store, r.nnodes or "-")


def table(rows: list[preview.Row], wide: bool = False) -> str:
    """One row per pod, then what the pods' admission and wrappers say: each text once, with the
    pods it is about. By default grouped per job (its endpoint and node count once, when its pods
    agree), within WIDTH columns; `wide`: every column on every row."""
    if wide:
        out = _columns([("JOB", "POD", "LOCAL ADDRESS", "ENDPOINT", "STORE HOST", "NODES"), *map(_cells, rows)])
    else:
        out = []
        for source in dict.fromkeys(r.source for r in rows):
            mine = [_cells(r) for r in rows if r.source == source]
            lines: list[tuple[str, ...]]
            shared = {(c[3], c[5]) for c in mine if c[3] != "-"}
            if len(shared) == 1:
                endpoint, nodes = next(iter(shared))
                out.append(f"{source}: endpoint {endpoint}, nodes {nodes}")
                lines = [("POD", "LOCAL ADDRESS", "STORE HOST"), *((c[1], c[2], c[4]) for c in mine)]
            else:  # the pods disagree (or none was mutated): each row says its own
                out.append(f"{source}:")
                lines = [("POD", "LOCAL ADDRESS", "ENDPOINT", "STORE HOST", "NODES"), *(c[1:] for c in mine)]
            out += _columns(_fit(lines, 1), "  ")
    # Each text once, with every pod it is about (a 1,000-pod job's warning is one line).
    pods_of: dict[str, list[str]] = {}
    for r in rows:
        # The refusal once: the admission warning that says the same is left out.
        warned = [f"warning: {w}" for w in r.warnings if not (r.refusal and r.refusal in w)]
        for text in ([r.reason] if r.reason else []) + ([f"wrapper will refuse to start: {r.refusal}"] if r.refusal else []) + (
            [r.backend] if r.backend.startswith("decided at run time") else []
        ) + ([r.run_time] if r.run_time else []) + warned:  # fmt: skip
            pods = pods_of.setdefault(text, [])
            if r.pod not in pods:
                pods.append(r.pod)
    notes: list[str] = list(preview.store_problems(rows))
    for text, pods in pods_of.items():
        who = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
        notes.append(f"{who}: {text}")
    return "\n".join(out + (["", *notes] if notes else []))


def data(rows: list[preview.Row], others: list[str], unexpanded: int) -> dict[str, Any]:
    """What `-o json|yaml` prints: each pod's row (without the pod objects: `mutate -f` prints
    those), the jobs' store problems, what the file holds besides."""
    pods = [
        {"job": r.source, "pod": r.pod, "sent": r.sent, "mutated": r.mutated, "launcher": r.launcher,
         "localAddress": r.local_addr, "endpoint": r.endpoint, "backend": r.backend, "storeHost": r.store_host,
         "nodes": r.nnodes, "reason": r.reason, "refusal": r.refusal, "runTime": r.run_time,
         "warnings": list(r.warnings)}
        for r in rows
    ]  # fmt: skip
    return {"pods": pods, "problems": list(preview.store_problems(rows)), "notPreviewed": others,
            "exitCode": _exit_code(rows, unexpanded)}  # fmt: skip


def _exit_code(rows: list[preview.Row], unexpanded: int) -> int:
    # Left unchanged because the webhook could not handle it safely (not: no training pod, opted out).
    if preview.store_problems(rows) or any(r.refusal or (r.sent and not r.mutated and r.result is None) for r in rows):
        return preview.EXIT_REFUSES
    if unexpanded:
        return unexpanded
    return preview.EXIT_NOT_SENT if any(not r.sent for r in rows) else preview.EXIT_OK


def _steps(steps: list[Any], output: str) -> int:
    code = 0 if all(s.ok for s in steps) else 1
    if output in ("json", "yaml"):
        _dump({"steps": [{"ok": s.ok, "text": s.text} for s in steps], "exitCode": code}, output)
    else:
        for s in steps:
            print(f"{'ok ' if s.ok else 'NO '} {s.text}")
    return code


def _dump(obj: Any, output: str) -> None:
    import json

    import yaml

    print(json.dumps(obj, indent=2) if output == "json" else yaml.safe_dump(obj, sort_keys=False).rstrip())


def register(sub: Any) -> None:
    e = sub.add_parser("explain", help="why a pod was (or would be) mutated or not, and what its wrapper decides",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    e.add_argument("pod", nargs="?", help="live pod name")
    add_preview_args(e)
    add_cluster_args(e)
    e.add_argument("--exclude-namespaces",
                   help="with -f: namespaces the webhook never sees, comma-separated (default: the config's "
                        "excludeNamespaces: kube-system and the webhook's namespace)")  # fmt: skip
    e.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                   help="table (default: grouped per job, at most 100 columns), wide (every column on every "
                        "row), json or yaml (each pod's row and the problems, for scripts)")  # fmt: skip
    e.set_defaults(func=cmd_explain)
