"""The in-container torchrun wrapper (stdlib only) and how the webhook ships it.

Seven files travel in every mutated pod and are installed by the bootstrap into the injected
emptyDir: the rules (rules.py), the fabric checks (fabric.py), the NCCL watch (ncclwatch.py)
with its log reader (nccllog.py) and path probe (pathprobe.py), the wrapper (torchrun.py) and
the start-up hook (sitecustomize.py), under the flat names the pod imports them by.
"""

from __future__ import annotations

import ast
import base64
import functools
import json
import zlib
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE / "torchrun.py"
# name in the pod -> source file here
FILES = {
    "hostnet_rdma_rules.py": HERE / "rules.py",
    "hostnet_rdma_fabric.py": HERE / "fabric.py",
    "hostnet_rdma_nccllog.py": HERE / "nccllog.py",
    "hostnet_rdma_pathprobe.py": HERE / "pathprobe.py",
    "hostnet_rdma_ncclwatch.py": HERE / "ncclwatch.py",
    "hostnet_rdma_torchrun.py": SOURCE,
    "sitecustomize.py": HERE / "sitecustomize.py",
}


def minify(source: str) -> str:
    """Source without comments and docstrings: it travels inside every mutated pod spec (and
    every patch), so bytes cost API-server time and etcd space. Same code, same AST."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def minified_source() -> str:
    """The wrapper module, minified (kept for tests and tools that look at one file)."""
    return minify(SOURCE.read_text())


@functools.lru_cache(maxsize=1)
def payload() -> str:
    """The files, minified, as JSON, zlib-compressed and base64-encoded: what the
    bootstrap expects."""
    files = {name: minify(path.read_text()) for name, path in FILES.items()}
    return base64.b64encode(zlib.compress(json.dumps(files, sort_keys=True).encode(), 9)).decode("ascii")
