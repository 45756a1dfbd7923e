"""`python3 -m app.wrapper.install DIR`: lay the wrapper out in DIR as a pod gets it: the files
under the flat names the pod imports them by, a `torchrun` shim that runs them with the
training container's own python (HOSTNET_RDMA_PYTHON), and the `bootstrap` the training
container's command starts with. The image build runs it into /wrapper
(deploy/Dockerfile); a training pod gets that directory at /hostnet-rdma, mounted from the image
(wrapper.delivery: imageVolume) or copied into an emptyDir by an init container
(initContainer). Stdlib only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.wrapper import FILES
from app.wrapper.rules import BOOTSTRAP_FILE, ENV_POD, ENV_PYTHON

# `${0%/*}`: the directory the shim was found in, so the files may be mounted anywhere.
SHIM = '#!/bin/sh\nexec "${' + ENV_PYTHON + ':-python3}" "${0%/*}/py/hostnet_rdma_torchrun.py" "$@"\n'

# Runs the container's own command (its arguments after the first, the webhook's settings for
# the wrapper) with the shim first on PATH and the start-up hook first on PYTHONPATH, so
# torchrun is caught however the command starts it. A file in the pod's
# emptyDir rather than a script in the pod spec: the spec carries 25 bytes instead of 500.
# Without a python the wrapper cannot run: the command runs unwrapped, and says so.
BOOTSTRAP = (
    "#!/bin/sh\n"
    'd="${0%/*}"\n'
    # The settings (key=value;…, or empty); a pod spec from a version that passed none starts
    # with the command itself, which is run whole.
    'case "$1" in *=* | "") ' + ENV_POD + '="$1"; export ' + ENV_POD + "; shift ;; esac\n"
    'p="$(command -v python3 || command -v python)"\n'
    'if [ -n "$p" ]; then\n'
    "  " + ENV_PYTHON + '="$p"; PATH="$d:$PATH"; PYTHONPATH="$d/py${PYTHONPATH:+:$PYTHONPATH}"\n'
    "  export " + ENV_PYTHON + " PATH PYTHONPATH\n"
    "else\n"
    '  echo "hostnet-rdma: no python3 in this image; torchrun runs without the wrapper" >&2\n'
    "fi\n"
    'exec "$@"\n'
)


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
    for name, text in (("torchrun", SHIM), (BOOTSTRAP_FILE, BOOTSTRAP)):
        _write(dest / name, text, 0o755)
        written.append(dest / name)
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
