"""Build hook: the pure core is compiled with mypyc (the same typed source, as C extensions).

Admission work is the core (a pod dict in, a mutated dict out), and compiled it runs ~1.6x
faster (BENCHMARKS.md). `pip wheel .`, `pip install .` and the image build compile it; HOSTNET_RDMA_PURE=1 builds
plain Python. An editable install (`pip install -e .`) is always plain Python: compiled, its
extension modules would land beside the sources and Python would import them instead, so edits
to the core would silently have no effect.
The .py sources ship in the wheel either way (the wrapper's rules.py travels to training pods
as source).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The modules every admission runs: the core, the rules it shares with the wrapper, the review,
# and the record of it an Event is made from.
COMPILED = sorted(
    [str(p) for p in Path("app/core").rglob("*.py")]
    + ["app/wrapper/rules.py", "app/webhook/review.py", "app/events/record.py"]
)


def compiling() -> bool:
    """Whether this run builds what gets installed: a wheel or extensions (`bdist_wheel`,
    `build_ext`, ...), and not in place for an editable install (PEP 660's `editable_wheel`,
    the legacy `develop`). mypycify() generates the C sources as soon as it is called, so it is
    not called for metadata (`dist_info`, `egg_info`) either."""
    commands = set(sys.argv[1:])
    if commands & {"editable_wheel", "develop"}:
        return False
    return bool(commands & {"build", "build_ext", "bdist_wheel", "bdist", "install"})


def ext_modules() -> list[object]:
    if os.environ.get("HOSTNET_RDMA_PURE") == "1" or not compiling():
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3"))


class BuildPy(build_py):
    """Put docs/troubleshooting.md into the package: `hostnet-rdma help TOPIC` prints its
    sections where no docs/ directory is (a wheel, the image)."""

    def run(self) -> None:
        super().run()
        source, package = Path("docs/troubleshooting.md"), Path(self.build_lib) / "app"
        # An editable install builds no package here (it reads docs/ in place): nothing to copy.
        if source.is_file() and package.is_dir():
            shutil.copy(source, package / source.name)


setup(ext_modules=ext_modules(), cmdclass={"build_py": BuildPy})
