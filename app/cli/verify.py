"""`hostnet-rdma verify POD | --log FILE`: a training pod's log checked for NCCL over IB with
GDRDMA on the devices its profile names, a start-up that completed, and the wrapper's settings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli.common import CommandError, add_cluster_args, cluster_namespace, error, load_config
from app.core import InjectConfig, UnsupportedPod
from app.core.mutate import training_containers
from app.verify import expected_devices, verify


def _training_container(pod: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    """The container to read: the one asked for, else the first the webhook treats as training
    (the core's own rule: annotation, GPU/RDMA requests, a torchrun command, the launcher's)."""
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    if wanted:
        if wanted not in containers:
            raise SystemExit(f"hostnet-rdma: error: pod has no container {wanted!r}")
        return containers[wanted]  # type: ignore[no-any-return]
    try:
        return containers[training_containers(pod, InjectConfig())[0]]  # type: ignore[no-any-return]
    except UnsupportedPod as e:
        raise SystemExit(f"hostnet-rdma: error: {e}; or pick it with -c") from None


def _profile_hca(args: argparse.Namespace) -> str | None:
    """NCCL_IB_HCA of --profile (from --config's profiles, else the built-in ones)."""
    cfg = load_config(args.config)
    if args.profile not in cfg.profiles:
        raise CommandError(f"unknown profile {args.profile!r}; known: {', '.join(sorted(cfg.profiles))}")
    return dict(cfg.profiles[args.profile].env).get("NCCL_IB_HCA")


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        hca = args.hca or (_profile_hca(args) if args.profile else None)
    except CommandError as e:
        return error(str(e))
    expected = expected_devices(hca) if hca else None
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
        from app import kube

        args.namespace = cluster_namespace(args)
        try:
            api = kube.api_client(args.kubeconfig, args.context)
            pod = kube.read_pod(api, args.namespace, args.pod)
            container = _training_container(pod, args.container)
            if expected is None:
                hca = next((e.get("value") for e in container.get("env", []) if e.get("name") == "NCCL_IB_HCA"), None)
                expected = expected_devices(hca)
            text = kube.pod_log(api, args.namespace, args.pod, container["name"])
        except kube.ApiException as e:
            print(f"hostnet-rdma: error: {args.namespace}/{args.pod}: {kube.refusal(e)}", file=sys.stderr)
            return 2
    report = verify(text, expected, expect_wrapper=not args.no_wrapper)
    if args.output == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.table())
    return 0 if report.ok else 1


def register(sub: Any) -> None:
    v = sub.add_parser("verify", help="check a training pod's log: NCCL over IB with GDRDMA, wrapper settings")
    v.add_argument("pod", nargs="?", help="pod name (reads its log with your kubeconfig)")
    add_cluster_args(v)
    v.add_argument("-c", "--container", help="container (default: the one the webhook wrapped)")
    v.add_argument("--log", help="check a saved log file instead of a live pod")
    v.add_argument("--hca", help="expected NCCL_IB_HCA (default: --profile's, else the pod's own env)")
    v.add_argument("--profile", help="the NCCL profile whose NCCL_IB_HCA the log's devices must match")
    v.add_argument("--config", help="cluster config file (for its profiles; default: the built-in ones)")
    v.add_argument("--no-wrapper", action="store_true", help="do not require the wrapper's log line")
    v.add_argument("-o", "--output", choices=("table", "json"), default="table")
    v.set_defaults(func=cmd_verify)
