"""`hostnet-rdma explain POD | -f FILE`: why a pod was, or would be, mutated or not, step by
step, from the namespace label to what the webhook decided."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from app import review
from app.cli.common import CommandError, add_cluster_args, cluster_namespace, error, load_config, read_pod_file
from app.core import selection
from app.explain import explain


def cmd_explain(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
        pod = read_pod_file(args.file) if args.file else None
    except CommandError as e:
        return error(str(e))
    ns_labels: dict[str, str] | None = None
    selectors: selection.Selectors | None = None
    if pod is not None:
        namespace = args.namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    else:
        if not args.pod:
            print("hostnet-rdma: error: give a POD name or -f FILE", file=sys.stderr)
            return 2
        from app import kube

        namespace = cluster_namespace(args)
        try:
            api = kube.api_client(args.kubeconfig, args.context)
            pod = kube.read_pod(api, namespace, args.pod)
            ns_labels = kube.namespace_labels(api, namespace)
            selectors = kube.webhook_selectors(api, args.webhook_config)
        except kube.ApiException as e:
            print(f"hostnet-rdma: error: {namespace}/{args.pod}: {kube.refusal(e)}", file=sys.stderr)
            return 2
    if args.file and args.exclude_namespaces is not None:
        cfg = dataclasses.replace(cfg, exclude_namespaces=tuple(n for n in args.exclude_namespaces.split(",") if n))
    params = review.params_for(cfg, namespace)
    if not args.file and selectors is None:
        print(f"NO  no MutatingWebhookConfiguration {args.webhook_config!r} in this cluster: is the chart installed "
              "(helm list -A), under another release name (--webhook-config)?")  # fmt: skip
        return 1
    steps = explain(pod, params, ns_labels, selectors)
    for s in steps:
        print(f"{'ok ' if s.ok else 'NO '} {s.text}")
    return 0 if all(s.ok for s in steps) else 1


def register(sub: Any) -> None:
    e = sub.add_parser("explain", help="why a pod was (or would be) mutated or not")
    e.add_argument("pod", nargs="?", help="live pod name")
    e.add_argument("-f", "--file", help="pod manifest instead of a live pod")
    add_cluster_args(e)
    e.add_argument("--config", help="cluster config file")
    e.add_argument("--webhook-config", default="hostnet-rdma",
                   help="name of the installed MutatingWebhookConfiguration (the Helm release's fullname); its "
                        "excluded namespaces are read from it")  # fmt: skip
    e.add_argument("--exclude-namespaces",
                   help="with -f: namespaces the webhook never sees, comma-separated (default: the config's "
                        "excludeNamespaces, kube-system without one)")  # fmt: skip
    e.set_defaults(func=cmd_explain)
