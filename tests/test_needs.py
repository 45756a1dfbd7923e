"""scripts/testenv/needs.py: what `scripts/test.sh ARGS` builds before the tests ARGS select.
Collection only, in a process of its own (a pytest session inside this one would share its
plugins)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def needs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "scripts/testenv/needs.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["tests/test_docs.py"], []),
        (["tests/cluster/test_launchers.py"], ["binaries", "images", "launchers"]),
        (["tests/cluster/test_cluster.py"], ["binaries", "images"]),
    ],
)
def test_it_names_the_builds_the_selected_tests_need(args: list[str], words: list[str]) -> None:
    out = needs(*args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == words


def test_a_selection_that_does_not_collect_fails_with_pytests_output() -> None:
    out = needs("tests/no_such_file.py")
    assert out.returncode != 0
    assert "no_such_file" in out.stderr
