"""On the GPU machine: does real NCCL take its settings from /etc/nccl.conf in a process that
starts with an empty environment (what sshd gives the ranks mpirun starts on an MPIJob's
workers), and do the process's env and ~/.nccl.conf still win over the file? One rank on the
one GPU: torch's NCCL process group, an all_reduce, NCCL's INFO lines read back.

    python3 scripts/device/nccl-conf.py OUT_DIR

Writes OUT_DIR/nccl-conf.json (each case: what was set where, what NCCL printed) and restores
any /etc/nccl.conf and ~/.nccl.conf the machine had."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

SYSTEM = Path("/etc/nccl.conf")
USER = Path.home() / ".nccl.conf"
PROGRAM = (
    "import torch, torch.distributed as d\n"
    "d.init_process_group('nccl', init_method='tcp://127.0.0.1:29517', rank=0, world_size=1)\n"
    "t = torch.ones(1, device='cuda'); d.all_reduce(t); torch.cuda.synchronize()\n"
    "print('ALLREDUCE', t.item(), flush=True); d.destroy_process_group()\n"
)


def ipv4_interfaces() -> list[str]:
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                out.append(name)
            except OSError:
                continue
    return out


def fresh_env(extra: dict[str, str]) -> dict[str, str]:
    """What an ssh session starts with (PATH, HOME, USER, SHELL), plus LD_LIBRARY_PATH so that
    the CUDA libraries load here (a real session loses it too: mpirun -x LD_LIBRARY_PATH)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(Path.home()),
        "USER": "root",
        "SHELL": "/bin/sh",
    }
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return {**env, **extra}


def run(case: str, system: str | None, user: str | None, env: dict[str, str]) -> dict[str, object]:
    for path, text in ((SYSTEM, system), (USER, user)):
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=fresh_env(env), capture_output=True, text=True, timeout=180)
    lines = (p.stdout + p.stderr).splitlines()
    nccl = [ln for ln in lines if "NCCL INFO" in ln or "NCCL WARN" in ln]
    return {
        "case": case, "etc_nccl_conf": system, "home_nccl_conf": user, "env": env, "rc": p.returncode,
        "allreduce": next((ln for ln in lines if ln.startswith("ALLREDUCE")), ""),
        "nccl_lines": len(nccl),
        "said": [ln.split("NCCL INFO ", 1)[-1] for ln in nccl
                 if any(k in ln for k in ("set by environment", "Bootstrap", "NET/Socket", "NCCL version", "Using network"))],
        "tail": lines[-5:] if p.returncode else [],
    }  # fmt: skip


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    saved = {p: p.read_text() if p.exists() else None for p in (SYSTEM, USER)}
    others = [i for i in ipv4_interfaces() if i != "lo"]
    conf = "NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=INIT,ENV,NET\nNCCL_SOCKET_IFNAME=lo\nNCCL_BUFFSIZE=8388608\n"
    results = []
    try:
        results.append(run("no file, empty env: NCCL is silent", None, None, {}))
        results.append(run("/etc/nccl.conf, empty env: the file's settings", conf, None, {}))
        if others:
            results.append(run(f"the file and NCCL_SOCKET_IFNAME={others[0]} in the env: the env wins", conf, None,
                               {"NCCL_SOCKET_IFNAME": others[0]}))  # fmt: skip
        results.append(run("the file and ~/.nccl.conf: the user's file wins", conf, "NCCL_BUFFSIZE=4194304\n", {}))
    finally:
        for path, text in saved.items():
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(text)
    summary = {"interfaces": ipv4_interfaces(), "had_etc_nccl_conf": saved[SYSTEM] is not None, "cases": results}
    (out / "nccl-conf.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
