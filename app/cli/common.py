"""What the commands share: one way to fail, to load the cluster config, to read a pod file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from app import config
from app.core import ConfigError, InjectConfig


class CommandError(Exception):
    """A user error: printed as `hostnet-rdma: error: ...`, exit code 2."""


def error(message: str) -> int:
    print(f"hostnet-rdma: error: {message}", file=sys.stderr)
    return 2


def add_cluster_args(parser: Any) -> None:
    """How a command that reads the cluster finds it: as kubectl does."""
    parser.add_argument("-n", "--namespace", default="", help="namespace (default: the context's, else 'default')")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in a pod its credentials, else $KUBECONFIG / ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")


def cluster_namespace(args: Any) -> str:
    """-n, else the kubeconfig context's namespace, else `default`: kubectl's rule."""
    if args.namespace:
        return str(args.namespace)
    from app import kube

    return kube.context_namespace(args.kubeconfig, args.context) or "default"


def load_config(path: str | Path | None) -> InjectConfig:
    try:
        return config.load(path)
    except ConfigError as e:
        raise CommandError(str(e)) from None


def read_pod_file(source: str) -> dict[str, Any]:
    """Exactly one Pod from a YAML or JSON file (`-`: stdin)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as e:
        raise CommandError(f"cannot read {source}: {e.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise CommandError(f"{source} is not YAML or JSON: {str(e).splitlines()[0]}") from None
    if len(docs) != 1:
        raise CommandError(f"{source} must hold exactly one object, found {len(docs)}")
    doc = docs[0]
    if not isinstance(doc, dict):
        raise CommandError(f"{source} does not hold an object")
    if doc.get("kind") != "Pod":
        raise CommandError(
            f"{source} holds a {doc.get('kind') or 'object without kind'}, not a Pod "
            "(preview the pod its controller creates)"
        )
    return doc
