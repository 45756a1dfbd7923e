"""Run the `hostnet-rdma` CLI in-process (no interpreter start per call), with the same
result shape as a subprocess: exit code, stdout, stderr. tests/test_cli.py also runs the real
entry point once, as a process."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

from app.cli import main


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse, or a command that exits with a message
                if isinstance(e.code, str):
                    err.write(e.code + "\n")
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["hostnet-rdma", *args], code, out.getvalue(), err.getvalue())
