"""The wrapper stops when it is told (issue: hardening). For `command: [torchrun, ...]` the chain
bootstrap -> shim -> python is all exec: the wrapper's python is PID 1 of the container, and the
kernel drops a signal for a PID namespace's init that has no handler for it. So a pod deleted
during the DNS wait (up to 300 s) used to sit out its whole grace period until SIGKILL.

Here the mutated command runs exactly as the pod runs it (the core's command for the pod, the
inline bootstrap) as PID 1 of a PID namespace of its own (`unshare --pid --fork`), waiting for a
DNS name that never resolves; SIGTERM ends it at once with 143 and says so."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.core import Params, mutate
from app.wrapper import payload, rules

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root and unshare"
)


def mutated_command(command: list[str]) -> tuple[list[str], dict[str, str]]:
    """The training container's command and env after the webhook (inline delivery)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ij-0", "namespace": "ns", "labels": {"hostnet-rdma.io/inject": "enabled"}},
        "spec": {"hostNetwork": True, "hostname": "ij-0", "subdomain": "never-resolves-ij",
                 "containers": [{"name": "trainer", "image": "pytorch", "command": command}]},
    }  # fmt: skip
    c = mutate(pod, Params(namespace="ns", wrapper_payload=payload(), version="t")).pod["spec"]["containers"][0]
    return c["command"], {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def caught(pid: int) -> set[int]:
    """The signals a process has handlers for (/proc: SigCgt)."""
    (mask,) = [ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigCgt:")]
    bits = int(mask, 16)
    return {n for n in range(1, 65) if bits & (1 << (n - 1))}


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(x) for x in text]
    return out


RDZV = ["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=ij-0.never-resolves-ij:29400", "t.py"]


@pytest.mark.parametrize("command", [["torchrun", *RDZV], ["python", "-m", "torch.distributed.run", *RDZV]])
def test_sigterm_during_the_dns_wait_ends_the_wrapper_as_pid_1(tmp_path: Path, command: list[str]) -> None:
    argv, env = mutated_command(command)
    termination = tmp_path / "termination-log"
    termination.write_text("")
    env = {
        **env,
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": "/root",
        rules.ENV_BIN_DIR: str(tmp_path / "bin"),
        rules.ENV_TERMINATION_LOG: str(termination),
        rules.ENV_FABRIC_PREFLIGHT: "off",
    }
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *argv], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        # Until the wrapper's python is PID 1 there and waiting for the name to resolve.
        deadline = time.monotonic() + 30
        while True:
            kids = children(proc.pid)
            if kids and signal.SIGTERM in caught(kids[0]):  # the wrapper's handler is in place
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.1)
        (init,) = kids
        (nspid,) = [
            ln.split()[1:] for ln in Path(f"/proc/{init}/status").read_text().splitlines() if ln.startswith("NSpid:")
        ]
        assert nspid[-1] == "1", f"not PID 1 of its namespace: {nspid}"
        time.sleep(2)  # past the start-up checks (torch's version): in the DNS wait for its own name
        assert proc.poll() is None, proc.communicate()[0]
        t0 = time.monotonic()
        os.kill(init, signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"\n{command[0]}: exit {proc.returncode} {stopped_in:.2f}s after SIGTERM")
    assert proc.returncode == 143, out
    assert stopped_in < 1.0, stopped_in
    assert "hostnet-rdma: stopped by SIGTERM before torchrun started" in out, out
    assert termination.read_text().startswith("hostnet-rdma: stopped by SIGTERM before torchrun started")
