"""`hostnet-rdma mutate -f POD`: the pod (or the JSON Patch) exactly as the webhook would
produce it, with a one-paragraph summary of what was decided on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from app import review
from app.cli.common import CommandError, error, load_config, read_pod_file
from app.core import InvalidPod, Result, UnsupportedPod, mutate, patch


def summary(result: Result) -> str:
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
    for w in result.warnings:
        text += f"\nwarning: {w}"
    return text


def cmd_mutate(args: argparse.Namespace) -> int:
    try:
        pod = read_pod_file(args.file)
        namespace = args.namespace or str((pod.get("metadata") or {}).get("namespace") or "default")
        result = mutate(pod, review.params_for(load_config(args.config), namespace))
    except CommandError as e:
        return error(str(e))
    except InvalidPod as e:
        return error(str(e))
    except UnsupportedPod as e:
        print(f"hostnet-rdma: unchanged: the pod cannot be mutated safely: {e}", file=sys.stderr)
        result = Result(pod=pod, changed=False, reason=str(e))
    print(summary(result), file=sys.stderr)
    if args.output == "patch":
        print(json.dumps(patch.diff(pod, result.pod), indent=2))
    elif args.output == "json":
        print(json.dumps(result.pod, indent=2))
    else:
        print(yaml.safe_dump(result.pod, sort_keys=False, width=1 << 20), end="")
    return 0


def register(sub: Any) -> None:
    m = sub.add_parser("mutate", help="print the pod (or JSON Patch) exactly as the webhook would produce it")
    m.add_argument("-f", "--file", required=True, help="Pod manifest (YAML or JSON); - for stdin")
    m.add_argument("-o", "--output", choices=("yaml", "json", "patch"), default="yaml")
    m.add_argument("-n", "--namespace", default="", help="namespace (default: the pod's, else 'default')")
    m.add_argument("--config", help="cluster config file (the chart's ConfigMap content)")
    m.set_defaults(func=cmd_mutate)
