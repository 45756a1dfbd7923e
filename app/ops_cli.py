"""`hostnet-rdma verify` and `hostnet-rdma explain`: for operators, on live pods or files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from app import __version__, config
from app.core import ConfigError, Params
from app.explain import explain
from app.verify import expected_devices, verify
from app.wrapper import payload


def _training_container(pod: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    containers = pod["spec"]["containers"]
    if wanted:
        for c in containers:
            if c["name"] == wanted:
                return c  # type: ignore[no-any-return]
        raise SystemExit(f"hostnet-rdma: error: pod has no container {wanted!r}")
    for c in containers:
        if any(e.get("name") == "HOSTNET_RDMA_LAUNCHER" for e in c.get("env", [])):
            return c  # type: ignore[no-any-return]
    return containers[0]  # type: ignore[no-any-return]


def cmd_verify(args: argparse.Namespace) -> int:
    expected = expected_devices(args.hca) if args.hca else None
    if args.log:
        try:
            text = Path(args.log).read_text(errors="replace")
        except OSError as e:
            print(f"hostnet-rdma: error: cannot read {args.log}: {e.strerror}", file=sys.stderr)
            return 2
    else:
        if not args.pod:
            print("hostnet-rdma: error: give a POD name or --log FILE", file=sys.stderr)
            return 2
        from kubernetes.client.exceptions import ApiException

        from app import kube

        try:
            api = kube.api_client(args.kubeconfig)
            pod = kube.read_pod(api, args.namespace, args.pod)
            container = _training_container(pod, args.container)
            if expected is None:
                hca = next((e.get("value") for e in container.get("env", []) if e.get("name") == "NCCL_IB_HCA"), None)
                expected = expected_devices(hca)
            text = kube.pod_log(api, args.namespace, args.pod, container["name"])
        except ApiException as e:
            print(f"hostnet-rdma: error: {args.namespace}/{args.pod}: {e.status} {e.reason}", file=sys.stderr)
            return 2
    report = verify(text, expected, expect_wrapper=not args.no_wrapper)
    if args.output == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.table())
    return 0 if report.ok else 1


def cmd_explain(args: argparse.Namespace) -> int:
    try:
        cfg = config.load(args.config)
    except ConfigError as e:
        print(f"hostnet-rdma: error: {e}", file=sys.stderr)
        return 2
    ns_labels: dict[str, str] | None = None
    if args.file:
        try:
            pod = yaml.safe_load(Path(args.file).read_text() if args.file != "-" else sys.stdin.read())
        except (OSError, yaml.YAMLError) as e:
            print(f"hostnet-rdma: error: cannot read {args.file}: {e}", file=sys.stderr)
            return 2
        if not isinstance(pod, dict) or pod.get("kind") != "Pod":
            print(f"hostnet-rdma: error: {args.file} does not hold a Pod", file=sys.stderr)
            return 2
        namespace = args.namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    else:
        if not args.pod:
            print("hostnet-rdma: error: give a POD name or -f FILE", file=sys.stderr)
            return 2
        from kubernetes.client.exceptions import ApiException

        from app import kube

        namespace = args.namespace or "default"
        try:
            api = kube.api_client(args.kubeconfig)
            pod = kube.read_pod(api, namespace, args.pod)
            ns_labels = kube.namespace_labels(api, namespace)
        except ApiException as e:
            print(f"hostnet-rdma: error: {namespace}/{args.pod}: {e.status} {e.reason}", file=sys.stderr)
            return 2
    params = Params(config=cfg, namespace=namespace, wrapper_payload=payload(), version=__version__)
    steps = explain(pod, params, ns_labels)
    for s in steps:
        print(f"{'ok ' if s.ok else 'NO '} {s.text}")
    return 0 if all(s.ok for s in steps) else 1


def register(sub: Any) -> None:
    v = sub.add_parser("verify", help="check a training pod's log: NCCL over IB with GDRDMA, wrapper settings")
    v.add_argument("pod", nargs="?", help="pod name (reads its log with your kubeconfig)")
    v.add_argument("-n", "--namespace", default="default")
    v.add_argument("-c", "--container", help="container (default: the one the webhook wrapped)")
    v.add_argument("--log", help="check a saved log file instead of a live pod")
    v.add_argument("--hca", help="expected NCCL_IB_HCA (default: the pod's own env)")
    v.add_argument("--no-wrapper", action="store_true", help="do not require the wrapper's log line")
    v.add_argument("-o", "--output", choices=("table", "json"), default="table")
    v.add_argument("--kubeconfig")
    v.set_defaults(func=cmd_verify)

    e = sub.add_parser("explain", help="why a pod was (or would be) mutated or not")
    e.add_argument("pod", nargs="?", help="live pod name")
    e.add_argument("-f", "--file", help="pod manifest instead of a live pod")
    e.add_argument("-n", "--namespace", default="")
    e.add_argument("--config", help="cluster config file")
    e.add_argument("--kubeconfig")
    e.set_defaults(func=cmd_explain)
