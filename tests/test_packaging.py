"""How contributors install the project: `pip install -e .` (no HOSTNET_RDMA_PURE) stays plain
Python, and leaves nothing in `git status`. Compiled in place, the core's extension modules
would sit beside the sources and be imported instead of them: edits would have no effect. And
what `make test` runs keeps a green run's exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_editable_install_is_plain_python_and_leaves_git_status_clean(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in _git(ROOT, "ls-files").splitlines():
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "tree")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env_py = venv / "bin" / "python"
    # No build isolation: the build requirements (setuptools, mypy for mypyc) are those of this
    # test environment, so nothing is downloaded; HOSTNET_RDMA_PURE is not set.
    env = {k: v for k, v in os.environ.items() if k != "HOSTNET_RDMA_PURE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p.endswith("site-packages"))
    p = subprocess.run(
        [str(env_py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(tree)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    built = sorted(str(x.relative_to(tree)) for x in tree.rglob("*") if x.suffix in (".so", ".pyd"))
    assert built == [], built
    assert not (tree / "build").exists()  # mypyc's generated C sources go there
    assert _git(tree, "status", "--porcelain") == ""
    # And Python imports the sources of that tree. The dependencies come from this test
    # environment, appended after start-up: on PYTHONPATH, this repository's own editable
    # finder module (same name) would shadow the tree's.
    code = (
        "import importlib, sys; sys.path.extend(sys.argv[1:]); "
        "print(importlib.import_module('app.core.mutate').__file__)"
    )
    deps = [p for p in sys.path if p.endswith("site-packages")]
    clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(env_py), "-c", code, *deps], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert where.stdout.strip() == str(tree / "app" / "core" / "mutate.py"), where.stderr[-2000:]


def test_the_disk_warnings_fire_below_their_thresholds_only(tmp_path: Path) -> None:
    """`make setup` (10 GiB) and scripts/test.sh (25 GiB) say the disk is short before pip or a
    Go build fails on it far from the cause (stop 31's CI). Their df | awk lines run against a
    df that reports a given free space."""
    make_line = next(
        line for line in (ROOT / "Makefile").read_text().splitlines() if "warning:" in line and "df " in line
    )
    test_line = next(line for line in (ROOT / "scripts" / "test.sh").read_text().splitlines() if "warning:" in line)
    # Make's recipe line: no leading "@", and "$$" is the shell's "$".
    cases = {"setup": (make_line.strip().lstrip("@").replace("$$", "$"), 10), "test": (test_line, 25)}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, (line, threshold_gib) in cases.items():
        for free_gib, warns in ((threshold_gib - 0.5, True), (threshold_gib + 0.5, False)):
            df = bin_dir / "df"
            df.write_text(
                "#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                f"echo '/dev/x 300000000 1 {int(free_gib * 1024 * 1024)} 1% /'\n"
            )
            df.chmod(0o755)
            env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "cache": str(tmp_path)}
            done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=30)
            assert done.returncode == 0, (name, done.stderr)
            if warns:
                assert f"[{name}] warning: {free_gib:.1f} GiB free" in done.stderr, (name, free_gib, done.stderr)
            else:
                assert done.stderr == "", (name, free_gib, done.stderr)


def test_the_test_scripts_cleanup_keeps_a_green_runs_exit_status(tmp_path: Path) -> None:
    """scripts/test.sh's EXIT trap runs under `set -e`: once the background builds have ended,
    its pkill finds no child and fails, and a failing trap command becomes the script's exit
    status. A fresh-clone `.ci/run` of 2026-12-01 passed all 728 tests and exited 1 this way."""
    script = (Path(__file__).resolve().parents[1] / "scripts" / "test.sh").read_text()
    trap = next(line for line in script.splitlines() if line.startswith("trap ") and "EXIT" in line)
    setup = tmp_path / "setup"
    setup.mkdir()
    for status in (0, 3):
        probe = (
            f'set -euo pipefail\nSETUP={setup}\n( true ) &\nBUILDS=$!\n{trap}\nwait "$BUILDS"\nsleep 0.2\n'
            f"exit {status}\n"
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
        assert done.returncode == status, done.stderr
    assert not setup.exists()  # and it still cleans up


@pytest.mark.timeout(300)
def test_the_wheel_carries_the_troubleshooting_guide_that_help_prints(tmp_path: Path) -> None:
    """`hostnet-rdma help TOPIC` where no docs/ directory is: the wheel (and so the image) has
    docs/troubleshooting.md inside the package, copied in by setup.py."""
    import zipfile

    tree = tmp_path / "tree"
    for name in _git(ROOT, "ls-files").splitlines():
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    env = {**os.environ, "HOSTNET_RDMA_PURE": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", ".", "-w",
                    str(tmp_path / "wheels")], cwd=tree, env=env, check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("app/troubleshooting.md").decode() == (ROOT / "docs" / "troubleshooting.md").read_text()
