"""`python3 -m app.wrapper.install DIR`: lay the wrapper out in DIR as a pod gets it: the files
under the flat names the pod imports them by, and a `torchrun` shim that runs them with the
training container's own python (HOSTNET_RDMA_PYTHON, found by the bootstrap). The image build
runs it into /opt/hostnet-rdma/wrapper (deploy/Dockerfile), from where the init container of
wrapper.delivery: initContainer copies it into the pod's emptyDir. Stdlib only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.wrapper import FILES
from app.wrapper.rules import ENV_PYTHON

# `${0%/*}`: the directory the shim was found in, so the files may be mounted anywhere.
SHIM = '#!/bin/sh\nexec "${' + ENV_PYTHON + ':-python3}" "${0%/*}/py/hostnet_rdma_torchrun.py" "$@"\n'


def _write(path: Path, data: str, mode: int) -> None:
    # Atomic: a container that starts while another pass writes never sees half a file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def install(dest: Path) -> list[Path]:
    py = dest / "py"
    py.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in FILES.items():
        _write(py / name, source.read_text(), 0o644)
        written.append(py / name)
    _write(dest / "torchrun", SHIM, 0o755)
    written.append(dest / "torchrun")
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m app.wrapper.install DIR", file=sys.stderr)
        return 2
    try:
        written = install(Path(argv[0]))
    except OSError as e:
        print(f"hostnet-rdma: cannot install the torchrun wrapper into {argv[0]}: {e}", file=sys.stderr)
        return 1
    print(f"hostnet-rdma: installed the torchrun wrapper into {argv[0]} ({len(written)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
