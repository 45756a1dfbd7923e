"""Build hook: the pure core is compiled with mypyc (the same typed source, as C extensions).

Admission work is the core (a pod dict in, a mutated dict out), and compiled it runs ~1.6x
faster (BENCHMARKS.md). `pip wheel .` and the image build compile it; HOSTNET_RDMA_PURE=1 builds
plain Python: the editable dev install uses it so that edits take effect without a rebuild.
The .py sources ship in the wheel either way (the wrapper's rules.py travels to training pods
as source).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

# The modules every admission runs: the core, the rules it shares with the wrapper, the review.
COMPILED = sorted([str(p) for p in Path("app/core").rglob("*.py")] + ["app/wrapper/rules.py", "app/review.py"])


def ext_modules() -> list[object]:
    if os.environ.get("HOSTNET_RDMA_PURE") == "1":
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=ext_modules())
