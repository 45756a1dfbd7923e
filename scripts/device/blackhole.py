"""On the GPU machine: the webhook's pods (.device/pods.json, from blackhole-kit.py) run as two
namespace "nodes" behind a bridge (../shared/recipes/gpu-mtu-blackhole/), on a healthy fabric
(every port at MTU 9000) and on a silent large-frame drop (the port towards node 1 at 1500).
Each pod's own command (the wrapper's bootstrap, then torchrun), its env, its DNS names in the
node's /etc/hosts, its host name; both ranks share the one GPU (two hosts to NCCL).

    python3 scripts/device/blackhole.py OUT_DIR [9000|1500 ...]

Writes OUT_DIR/<job>-mtu<N>-<pod>.log and OUT_DIR/summary.txt: when each rank logged NCCL's
Init START and COMPLETE, the wrapper's stall line, the e2e verdict, and how the run ended.
Stdlib only (the GPU machine has python3 and torch, nothing to install from)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / ".device"
MARKS = {
    "init-start": " - Init START",
    "init-complete": " - Init COMPLETE",
    "stall-line": "hostnet-rdma: warning: NCCL start-up stalled",
    "e2e-ok": "HOSTNET-RDMA-E2E-OK",
    "e2e-fail": "HOSTNET-RDMA-E2E-FAIL",
    "seed-finished": "training finished",
}
# How long a run may take: a healthy e2e job passes in ~15 s; the field report's job moves 8 GiB
# buffers (only its start-up matters here); a stalled one is cut once the wrapper has spoken.
LIMIT = {"e2e": 90.0, "seed": 100.0}
HEALTHY_LIMIT = {"e2e": 60.0, "seed": 40.0}


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def fabric(mtu: str) -> None:
    sh("bash", str(KIT / "fabric.sh"), str(KIT / "debs"), "up", mtu)


def install() -> None:
    shutil.rmtree("/hostnet-rdma", ignore_errors=True)
    sh(sys.executable, "-m", "app.wrapper.install", "/hostnet-rdma")
    for d, src in (("/hostnet-rdma-e2e", ROOT / "app/e2e/train.py"), ("/scripts", KIT / "seed_train.py")):
        os.makedirs(d, exist_ok=True)
        shutil.copy(src, f"{d}/train.py")


def kill_netns(name: str) -> None:
    """Every process in that network namespace: torchrun's workers and the wrapper's watcher
    run in sessions of their own, out of reach of a process-group kill."""
    ino = os.stat(f"/run/netns/{name}").st_ino
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == ino:
                os.kill(int(pid), 9)
        except OSError:
            pass
    time.sleep(1)


def run(job: str, mtu: str, out: Path, summary: list[str]) -> None:
    import json

    pods = json.loads((KIT / "pods.json").read_text())[job]
    procs, logs = [], []
    t0 = time.monotonic()
    for i, pod in enumerate(pods):
        hosts = Path(f"/tmp/hosts-{job}-{i}")
        hosts.write_text("127.0.0.1 localhost\n" + "".join(f"192.0.2.1{j} {p['dns']}\n" for j, p in enumerate(pods)))
        env = {"PATH": os.environ["PATH"], "HOME": "/root", **pod["env"],
               "CUDA_VISIBLE_DEVICES": "0", "NCCL_HOSTID": f"node-{i}",
               # One GPU for both "hosts": no NVLink SHARP or multicast between them.
               "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
               "HOSTNET_RDMA_TERMINATION_LOG": str(out / f"{job}-mtu{mtu}-{pod['name']}.termination")}  # fmt: skip
        Path(env["HOSTNET_RDMA_TERMINATION_LOG"]).write_text("")
        argv = [a.replace(f"<uid of Job {pod['name'].rsplit('-', 2)[0]}>", "6f1c2a3e-0d4b-4e8a-9c1f-2b7e5d9a0c11")
                for a in pod["argv"]]  # fmt: skip
        script = f'hostname node-{i} && mount --bind {hosts} /etc/hosts && exec "$@"'
        log = out / f"{job}-mtu{mtu}-{pod['name']}.log"
        logs.append(log)
        procs.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/hrn{i}", "unshare", "--uts", "--mount", "--", "sh", "-c", script, "sh", *argv],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
    seen: dict[str, float] = {}
    ended = ""
    while True:
        now = time.monotonic() - t0
        for i, log in enumerate(logs):
            text = log.read_text(errors="replace")
            for key, mark in MARKS.items():
                if mark in text and f"{key}@{i}" not in seen:
                    seen[f"{key}@{i}"] = now
        if all(p.poll() is not None for p in procs):
            ended = "exited " + ",".join(str(p.returncode) for p in procs)
            break
        stalled = [k for k in seen if k.startswith("stall-line")]
        if stalled and now - min(seen[k] for k in stalled) > 15:
            ended = "cut 15 s after the wrapper's stall line"
            break
        limit = (HEALTHY_LIMIT if mtu == "9000" else LIMIT)[job]
        if now > limit:
            ended = f"cut at {limit:.0f} s"
            break
        time.sleep(0.5)
    for i in range(len(pods)):
        kill_netns(f"hrn{i}")
    for p in procs:
        p.wait()
    marks = " ".join(f"{k}={v:.1f}s" for k, v in sorted(seen.items(), key=lambda kv: kv[1]))
    summary.append(f"{job} mtu={mtu}: {ended} after {time.monotonic() - t0:.1f} s; {marks}")
    print(summary[-1], flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    install()
    summary: list[str] = []
    try:
        for mtu in sys.argv[2:] or ["9000", "1500"]:
            fabric(mtu)
            for job in ("e2e", "seed"):
                run(job, mtu, out, summary)
    finally:
        sh("bash", str(KIT / "fabric.sh"), str(KIT / "debs"), "down")
        (out / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
