#!/usr/bin/env python3
"""What the tests a pytest command line selects need built first, one word a line:
`binaries` (kube-apiserver, etcd, containerd, kubelet: the API-server and cluster tiers),
`images` (the cluster tier's images; built as root only), `launchers` (the launchers'
controllers: tests/cluster/test_launchers.py). scripts/test.sh ARGS builds just these, so
`scripts/test.sh tests/test_golden.py` starts at once and `-m apiserver` skips the launchers.

Usage: needs.py PYTEST_ARGS...  (collects only: nothing runs, nothing is built)
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

import pytest

LAUNCHERS_FILE = "tests/cluster/test_launchers.py"


class Needs:
    def __init__(self) -> None:
        self.words: set[str] = set()

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            marks = {m.name for m in item.iter_markers()}
            if marks & {"apiserver", "cluster"}:
                self.words.add("binaries")
            if "cluster" in marks:
                self.words.add("images")
            if item.nodeid.startswith(LAUNCHERS_FILE):
                self.words |= {"binaries", "images", "launchers"}


def main(args: list[str]) -> int:
    needs = Needs()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *args], plugins=[needs])
    if rc not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        sys.stderr.write(out.getvalue())
        return int(rc)
    for word in ("binaries", "images", "launchers"):
        if word in needs.words:
            print(word)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
