"""`hostnet-rdma verify`, `explain` and `doctor`: for operators, on live pods, files or nodes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from app import config, review
from app.core import ConfigError, names
from app.explain import explain
from app.verify import expected_devices, verify
from app.wrapper import fabric


def _training_container(pod: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    containers = pod["spec"]["containers"]
    if wanted:
        for c in containers:
            if c["name"] == wanted:
                return c  # type: ignore[no-any-return]
        raise SystemExit(f"hostnet-rdma: error: pod has no container {wanted!r}")
    for c in containers:
        if any(e.get("name") == names.ENV_LAUNCHER for e in c.get("env", [])):
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
        from app import kube

        try:
            api = kube.api_client(args.kubeconfig)
            pod = kube.read_pod(api, args.namespace, args.pod)
            container = _training_container(pod, args.container)
            if expected is None:
                hca = next((e.get("value") for e in container.get("env", []) if e.get("name") == "NCCL_IB_HCA"), None)
                expected = expected_devices(hca)
            text = kube.pod_log(api, args.namespace, args.pod, container["name"])
        except kube.ApiException as e:
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
    found: tuple[str, ...] | None = None
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
        from app import kube

        namespace = args.namespace or "default"
        try:
            api = kube.api_client(args.kubeconfig)
            pod = kube.read_pod(api, namespace, args.pod)
            ns_labels = kube.namespace_labels(api, namespace)
            found = kube.excluded_namespaces(api, args.webhook_config)
        except kube.ApiException as e:
            print(f"hostnet-rdma: error: {namespace}/{args.pod}: {e.status} {e.reason}", file=sys.stderr)
            return 2
    params = review.params_for(cfg, namespace)
    if args.file:
        excluded = tuple(n for n in args.exclude_namespaces.split(",") if n)
    elif found is None:
        print(f"NO  no MutatingWebhookConfiguration {args.webhook_config!r} in this cluster: is the chart installed "
              "(helm list -A), under another release name (--webhook-config)?")  # fmt: skip
        return 1
    else:
        excluded = found
    steps = explain(pod, params, ns_labels, excluded)
    for s in steps:
        print(f"{'ok ' if s.ok else 'NO '} {s.text}")
    return 0 if all(s.ok for s in steps) else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """The fabric checks the wrapper runs before torchrun, against this node (or a sysfs tree)."""
    try:
        cfg = config.load(args.config)
    except ConfigError as e:
        print(f"hostnet-rdma: error: {e}", file=sys.stderr)
        return 2
    env: dict[str, str] = {}
    if args.profile:
        if args.profile not in cfg.profiles:
            print(f"hostnet-rdma: error: unknown profile {args.profile!r}; known: {', '.join(sorted(cfg.profiles))}",
                  file=sys.stderr)  # fmt: skip
            return 2
        env = dict(cfg.profiles[args.profile].env)
    hca = args.hca if args.hca is not None else env.get("NCCL_IB_HCA", "")
    gid_index = args.gid_index if args.gid_index is not None else env.get("NCCL_IB_GID_INDEX", "")
    findings = fabric.check(root=args.sysfs_root, hca=hca, gid_index=gid_index)
    suggested_hca, suggested_gid, left_out = fabric.suggest(args.sysfs_root)
    wanted = expected_devices(suggested_hca)
    matching = sorted(
        name for name, p in cfg.profiles.items()
        if wanted and expected_devices(dict(p.env).get("NCCL_IB_HCA")) == wanted
        and dict(p.env).get("NCCL_IB_GID_INDEX", "") == suggested_gid
    )  # fmt: skip
    ok = not any(f.problem for f in findings)
    if args.output == "json":
        print(json.dumps({
            "ok": ok, "checks": [f.as_dict() for f in findings],
            "suggested": {"NCCL_IB_HCA": suggested_hca, "NCCL_IB_GID_INDEX": suggested_gid, "left_out": left_out},
            "matching_profiles": matching,
        }, indent=2))  # fmt: skip
        return 0 if ok else 1
    width = max(len(f.name) for f in findings)
    given = " ".join(f"{k}={v}" for k, v in (("NCCL_IB_HCA", hca), ("NCCL_IB_GID_INDEX", gid_index)) if v)
    print(f"checked {given or 'the node defaults'} under {args.sysfs_root}")
    for f in findings:
        print(f"{'PASS' if f.ok else ('FAIL' if f.problem else 'INFO')}  {f.name.ljust(width)}  {f.detail}")
    hints = [f"  - {f.name}: {f.hint}" for f in findings if f.problem and f.hint]
    if hints:
        print("\nWhat to do:", *hints, sep="\n")
    if suggested_hca:
        print(
            f"\nThis node has: NCCL_IB_HCA={suggested_hca}"
            + (f" NCCL_IB_GID_INDEX={suggested_gid}" if suggested_gid else "")
        )
        for why in left_out:
            print(f"  left out: {why}")
        print(f"Matching profile: {', '.join(matching)}" if matching else
              "No configured profile matches: add one under config.profiles (values.yaml) with these values.")  # fmt: skip
    return 0 if ok else 1


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

    d = sub.add_parser("doctor", help="check a node's RDMA fabric against an NCCL profile (run on the node)")
    d.add_argument("--sysfs-root", default="/", help="read sys/ and proc/ under this directory (default /)")
    d.add_argument("--profile", help="NCCL profile whose NCCL_IB_HCA / NCCL_IB_GID_INDEX to check")
    d.add_argument("--hca", help="NCCL_IB_HCA to check (overrides the profile's)")
    d.add_argument("--gid-index", help="NCCL_IB_GID_INDEX to check (overrides the profile's)")
    d.add_argument("--config", help="cluster config file (for its profiles)")
    d.add_argument("-o", "--output", choices=("table", "json"), default="table")
    d.set_defaults(func=cmd_doctor)

    e = sub.add_parser("explain", help="why a pod was (or would be) mutated or not")
    e.add_argument("pod", nargs="?", help="live pod name")
    e.add_argument("-f", "--file", help="pod manifest instead of a live pod")
    e.add_argument("-n", "--namespace", default="")
    e.add_argument("--config", help="cluster config file")
    e.add_argument("--kubeconfig")
    e.add_argument("--webhook-config", default="hostnet-rdma",
                   help="name of the installed MutatingWebhookConfiguration (the Helm release's fullname); its "
                        "excluded namespaces are read from it")  # fmt: skip
    e.add_argument("--exclude-namespaces", default="kube-system",
                   help="with -f: namespaces the webhook never sees, comma-separated (the chart's "
                        "webhook.excludeNamespaces plus its own namespace)")  # fmt: skip
    e.set_defaults(func=cmd_explain)
