"""hostnet-rdma's Python start-up hook, first on PYTHONPATH in a mutated container.

Python imports `sitecustomize` at start-up in every process, so this sees every torchrun
however it is started: by absolute path, after a venv/conda `activate`, in a login shell that
resets PATH, from a user script, or as `python -m torch.distributed.run`. In a torchrun
process it hands sys.argv to the wrapper before torchrun parses it; in the first process of a
program that starts torch.distributed itself (MASTER_ADDR set, no torchrun above it) it pins
Gloo's and NCCL's sockets as the wrapper does for torchrun; in any other process it only loads
the image's own sitecustomize (which this file shadows) and returns. Standard
library only, Python 3.8+, cheap: no import beyond os and sys unless torchrun is running.
"""

import os
import sys
from typing import List

_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _chain_load_image_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # as site.py does for a broken sitecustomize: report, go on
        sys.stderr.write(f"hostnet-rdma: the image's sitecustomize failed: {type(e).__name__}: {e}\n")


def _command_line() -> List[str]:
    orig = getattr(sys, "orig_argv", None)  # Python 3.10+
    if orig:
        return list(orig)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _is_torchrun() -> bool:
    argv = getattr(sys, "argv", None) or []
    if not argv:
        return False
    if os.path.basename(argv[0]) == "torchrun" or argv[0].endswith(os.path.join("torch", "distributed", "run.py")):
        return True
    if argv[0] != "-m":
        return False
    cmd = _command_line()
    for i, arg in enumerate(cmd):
        if arg == "-m" and i + 1 < len(cmd):
            return cmd[i + 1] in _TORCHRUN_MODULES
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:] in _TORCHRUN_MODULES
    return False


# rules.ENV_HANDLED, spelled out: this runs in every Python process of the container and must
# not import the rules to find out it has nothing to do (tests/test_contracts.py keeps them equal).
ENV_HANDLED = "HOSTNET_RDMA_HANDLED"


# Env that says a program may start torch.distributed itself: env:// (Training Operator,
# Volcano's pytorch plugin), Trainer's PET_* for a program without torchrun, LeaderWorkerSet.
_OWN_RENDEZVOUS = ("MASTER_ADDR", "PET_MASTER_ADDR", "LWS_LEADER_ADDRESS")


def _hook() -> None:
    if os.environ.get(ENV_HANDLED) == str(os.getpid()):
        return
    if _is_torchrun():
        import hostnet_rdma_torchrun  # type: ignore[import-not-found]

        hostnet_rdma_torchrun.intercept(sys.argv)
    elif ENV_HANDLED not in os.environ and any(k in os.environ for k in _OWN_RENDEZVOUS):
        # A program that may start torch.distributed itself (env://): the same socket pinning,
        # once it imports torch.distributed (not in every Python the container runs). Its
        # children inherit the result and the mark.
        sys.meta_path.insert(0, _PinOnTorchDistributed())


class _PinOnTorchDistributed:
    """An import hook that only watches: at the first import of torch.distributed, before any
    process group exists, it pins the sockets; it finds nothing itself."""

    done = False

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "torch.distributed" and not self.done:
            self.done = True
            import hostnet_rdma_torchrun

            hostnet_rdma_torchrun.pin_sockets()
        return None


_chain_load_image_sitecustomize()
_hook()
