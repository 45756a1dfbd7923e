"""`hostnet-rdma` command line: serve | mutate | verify | explain | doctor."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from app import __version__, config, ops_cli, review, server_cli
from app.core import ConfigError, InvalidPod, Params, Result, UnsupportedPod, mutate, patch


def params_for(cfg_path: str | None, namespace: str) -> Params:
    return review.params_for(config.load(cfg_path), namespace)


def _read_pod(source: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as e:
        raise InvalidPod(f"cannot read {source}: {e.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise InvalidPod(f"{source} is not YAML or JSON: {str(e).splitlines()[0]}") from None
    if len(docs) != 1:
        raise InvalidPod(f"{source} must hold exactly one object, found {len(docs)}")
    doc = docs[0]
    if not isinstance(doc, dict):
        raise InvalidPod(f"{source} does not hold an object")
    if doc.get("kind") != "Pod":
        raise InvalidPod(
            f"{source} holds a {doc.get('kind') or 'object without kind'}, not a Pod "
            "(preview the pod its controller creates)"
        )
    return doc


def summary(result: Result) -> str:
    if not result.launcher:
        return f"hostnet-rdma: unchanged: {result.reason}."
    info = result.launcher
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
        pod = _read_pod(args.file)
        namespace = args.namespace or str((pod.get("metadata") or {}).get("namespace") or "default")
        result = mutate(pod, params_for(args.config, namespace))
    except (InvalidPod, ConfigError) as e:
        print(f"hostnet-rdma: error: {e}", file=sys.stderr)
        return 2
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hostnet-rdma", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hostnet-rdma {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    m = sub.add_parser("mutate", help="print the pod (or JSON Patch) exactly as the webhook would produce it")
    m.add_argument("-f", "--file", required=True, help="Pod manifest (YAML or JSON); - for stdin")
    m.add_argument("-o", "--output", choices=("yaml", "json", "patch"), default="yaml")
    m.add_argument("-n", "--namespace", default="", help="namespace (default: the pod's, else 'default')")
    m.add_argument("--config", help="cluster config file (the chart's ConfigMap content)")
    m.set_defaults(func=cmd_mutate)

    server_cli.register(sub)
    ops_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
