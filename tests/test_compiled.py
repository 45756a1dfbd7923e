"""The core as the image ships it, compiled by mypyc (setup.py), gives the same outputs as the
source: the golden files, the property tests and the rules, run again against the compiled
modules (built by scripts/testenv/build-compiled.sh, cached by content).

mypyc checks declared types at run time where Python does not, so a type the source only
claims would surface here as a TypeError (an "internal error" warning in the server), not as
a silently different pod."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# It compiles the core with mypyc first (~40 s).
pytestmark = pytest.mark.slow
# The suites that exercise the pure core and its callers without monkeypatching module
# attributes (a compiled module's callers do not see a patched attribute).
SUITES = ["test_golden.py", "test_properties.py", "test_rules.py", "test_app.py", "test_verify_explain.py",
          "test_wrapper.py", "test_cli.py", "test_tenant_cost.py", "test_adversarial.py", "test_forged_types.py"]  # fmt: skip


@pytest.fixture(scope="module")
def compiled_tree() -> Path:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.fail("no C compiler: scripts/testenv/install-system-deps.sh installs gcc")
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "testenv" / "build-compiled.sh")],
        capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def test_the_compiled_core_gives_the_same_outputs(compiled_tree: Path, tmp_path: Path) -> None:
    # A tree whose `app` is the compiled one, with this checkout's tests and goldens.
    work = tmp_path / "tree"
    work.mkdir()
    for entry in compiled_tree.iterdir():
        if entry.name == "app" or entry.suffix == ".so":
            (work / entry.name).symlink_to(entry)
    shutil.copy(ROOT / "pyproject.toml", work)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REFRESH_GOLDEN")}
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, app.core.mutate, app.wrapper.rules, app.webhook.review; "
                               "from app.webhook.server import core_build; "
                               "print(core_build(), *(sys.modules[m].__file__ for m in ('app.core.mutate', "
                               "'app.wrapper.rules', 'app.webhook.review')))"],
        cwd=work, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    core, *files = probe.stdout.split()
    assert files and all(f.endswith(".so") for f in files), f"not the compiled modules: {files}"
    assert core == "compiled"  # what the server logs and exports as hostnet_rdma_build_info
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[f"tests/{s}" for s in SUITES]],
        cwd=work, capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    tail = "\n".join(run.stdout.splitlines()[-30:])
    assert run.returncode == 0, f"compiled core: suites failed\n{tail}\n{run.stderr[-2000:]}"
    assert " passed" in tail and "failed" not in tail, tail
