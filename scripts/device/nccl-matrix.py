"""On the GPU machine: real NCCL (the one its torch ships) in every start-up scenario users meet,
under every debug setting, as two namespace "nodes" behind a bridge
(../shared/recipes/gpu-mtu-blackhole/: iproute2 and ethtool carried as Debian packages).

    python3 scripts/device/nccl-matrix.py KIT_DIR OUT_DIR   # KIT_DIR/debs/*.deb
    MATRIX_LAUNCHERS=torchrun MATRIX_DEBUG=info,warn python3 scripts/device/nccl-matrix.py KIT_DIR OUT_DIR

Each run is one small program per rank (init, one all-reduce of 4 MiB, end) with its own env;
both ranks share the one GPU and are two hosts to NCCL (NCCL_HOSTID, their own netns and host
name). Writes OUT_DIR/matrix.tgz: <scenario>--<debug>--rank<N>.log (stdout and stderr, or the
NCCL_DEBUG_FILE's text for that setting) and manifest.jsonl (one line per log: NCCL and torch
versions, the scenario, the env that made it, how the run ended). tests/nccl-matrix/ keeps them.
Stdlib only besides torch (nothing can be installed there).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RANK_PROGRAM = r"""
import os, sys, time
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)
if os.environ.get("MATRIX_ABSENT") == str(rank):
    # This rank joins PyTorch's rendezvous (the store) and never starts NCCL: its peer waits.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False)
    time.sleep(600)
dist.init_process_group("nccl", device_id=torch.device("cuda:0"))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"MATRIX-OK rank {rank} sum {x[0].item():.0f}", flush=True)
dist.destroy_process_group()
"""

# scenario: (ranks, extra env, fabric MTU, seconds before it is cut)
SCENARIOS: dict[str, tuple[int, dict[str, str], int, int]] = {
    "one-node": (1, {}, 9000, 90),
    "two-nodes-default": (2, {}, 9000, 90),
    "two-nodes-ib-disable": (2, {"NCCL_IB_DISABLE": "1"}, 9000, 90),
    "two-nodes-net-socket": (2, {"NCCL_NET": "Socket"}, 9000, 90),
    "two-nodes-net-ib-forced": (2, {"NCCL_NET": "IB"}, 9000, 90),
    "net-plugin-missing": (2, {"NCCL_NET_PLUGIN": "nosuchplugin"}, 9000, 90),
    "net-plugin-broken": (2, {"NCCL_NET_PLUGIN": "/tmp/matrix-broken/libnccl-net-broken.so"}, 9000, 90),
    "bootstrap-ifname-missing": (2, {"NCCL_SOCKET_IFNAME": "nosuch0"}, 9000, 90),
    "peer-never-comes": (2, {"MATRIX_ABSENT": "1"}, 9000, 35),
    "mtu-blackhole": (2, {"NCCL_IB_DISABLE": "1"}, 1500, 45),
    # Both ranks on one node and its one GPU (LOCAL_RANK wrong on every rank): NCCL refuses.
    "duplicate-gpu": (2, {"MATRIX_SAME_NODE": "1"}, 9000, 60),
    # Two nodes whose sockets NCCL_SOCKET_IFNAME pins to loopback: the root advertises 127.0.0.1.
    "two-nodes-ifname-lo": (2, {"NCCL_SOCKET_IFNAME": "lo"}, 9000, 60),
}
DEBUG: dict[str, dict[str, str]] = {
    "info": {"NCCL_DEBUG": "INFO"},
    "warn": {"NCCL_DEBUG": "WARN"},
    "info-init-net": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"},
    "info-init": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"},
    "info-env-graph": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ENV,GRAPH"},
    "info-file": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/tmp/matrix-files/{run}.%h.%p.log"},
}


# The verdict each run calls for, from its scenario and settings alone (set before verify read any
# log; tests/test_nccl_matrix.py holds verify to it). NCCL prints its WARN lines whatever the level
# and subsystems; a healthy or stalled run at WARN, or with neither INIT nor NET, names no network.
HEALTHY = {"one-node": "healthy-single-node", "two-nodes-ib-disable": "healthy-socket",
           "two-nodes-net-socket": "healthy-socket"}  # fmt: skip
FALLBACK = ("two-nodes-default", "net-plugin-missing", "net-plugin-broken")  # no RDMA device: sockets


def expected(scenario: str, debug: str, rank: int) -> str:
    if scenario == "two-nodes-net-ib-forced":
        return "plugin-load"  # WARN "Failed to initialize any NET plugin"
    if scenario == "bootstrap-ifname-missing":
        return "bootstrap-failure" if rank == 0 else "no-network"  # rank 1 waited on rank 0's unique id
    if scenario == "peer-never-comes" and rank == 1:
        return "no-network"  # the absent rank: it never started NCCL
    if scenario == "duplicate-gpu":
        return "invalid-usage"  # WARN "Duplicate GPU detected"
    if scenario == "two-nodes-ifname-lo" and rank == 1:
        # It connects to the root's 127.0.0.1, its own loopback, which refuses: NCCL says so at INFO on
        # each of its 34 retries; its WARN comes only after them (~60 s), past the run's bound.
        return "no-network" if debug in ("warn", "info-env-graph") else "bootstrap-failure"
    if debug in ("warn", "info-env-graph"):
        return "no-network"
    if scenario in HEALTHY:
        return HEALTHY[scenario]
    return "socket-fallback" if scenario in FALLBACK else "startup-stall"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


class Fabric:
    """Two nodes (netns hrn0 192.0.2.10, hrn1 192.0.2.11) on a bridge in netns hrfab."""

    def __init__(self, kit: Path) -> None:
        self.root = Path("/tmp/matrix-root")
        if not self.root.exists():
            self.root.mkdir()
            for deb in sorted((kit / "debs").glob("*.deb")):
                sh("dpkg", "-x", str(deb), str(self.root))
        r = self.root
        self.env = {**os.environ, "LD_LIBRARY_PATH": f"{r}/usr/lib/x86_64-linux-gnu:{r}/lib/x86_64-linux-gnu"}
        self.ip_bin = next(
            str(p) for p in (r / "bin/ip", r / "sbin/ip", r / "usr/sbin/ip", r / "usr/bin/ip") if p.exists()
        )
        self.ethtool = next(str(p) for p in (r / "sbin/ethtool", r / "usr/sbin/ethtool") if p.exists())

    def ip(self, *args: str, check: bool = True) -> None:
        subprocess.run(
            [self.ip_bin, *args], env=self.env, check=check, stderr=subprocess.DEVNULL if not check else None
        )

    def down(self) -> None:
        for n in ("hrn0", "hrn1", "hrfab"):
            self.ip("netns", "del", n, check=False)

    def up(self) -> None:
        self.down()
        for n in ("hrn0", "hrn1", "hrfab"):
            self.ip("netns", "add", n)
            self.ip("-n", n, "link", "set", "lo", "up")
        self.ip("-n", "hrfab", "link", "add", "br0", "type", "bridge")
        self.ip("-n", "hrfab", "link", "set", "br0", "mtu", "9000")
        for i in (0, 1):
            self.ip("link", "add", f"hre{i}", "type", "veth", "peer", "name", f"hrp{i}")
            self.ip("link", "set", f"hre{i}", "netns", f"hrn{i}")
            self.ip("link", "set", f"hrp{i}", "netns", "hrfab")
            self.ip("-n", f"hrn{i}", "link", "set", f"hre{i}", "mtu", "9000")
            self.ip("-n", f"hrn{i}", "addr", "add", f"192.0.2.1{i}/24", "dev", f"hre{i}")
            self.ip("-n", f"hrn{i}", "link", "set", f"hre{i}", "up")
            self.ip("-n", "hrfab", "link", "set", f"hrp{i}", "mtu", "9000")
            self.ip("-n", "hrfab", "link", "set", f"hrp{i}", "master", "br0")
            self.ip("-n", "hrfab", "link", "set", f"hrp{i}", "up")
            # Offloads off: otherwise TCP hands the veth 64 KB super-packets no MTU check sees.
            for ns, dev in ((f"hrn{i}", f"hre{i}"), ("hrfab", f"hrp{i}")):
                subprocess.run([self.ip_bin, "netns", "exec", ns, self.ethtool, "-K", dev, "tso", "off", "gso", "off",
                                "gro", "off"], env=self.env, check=True)  # fmt: skip
        self.ip("-n", "hrfab", "link", "set", "br0", "up")

    def mtu(self, mtu: int) -> None:
        """The bridge's port towards node 1: at 1500 it drops the nodes' 9000-byte frames silently."""
        self.ip("-n", "hrfab", "link", "set", "hrp1", "mtu", str(mtu))


def kill(pids: list[int]) -> None:
    """Each rank's whole session (its NCCL threads, a stalled one too)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, 9)


# How each rank is started: the program itself (python3 -c), or torchrun with --tee 3 (its own
# rendezvous, every worker line prefixed "[default0]:"), as users' pods run it.
LAUNCHERS = ("python", "torchrun")
PROGRAM = Path("/tmp/matrix-prog.py")


def one(
    run: str, scenario: str, debug: str, port: int, out: Path, versions: dict[str, str], launcher: str = "python"
) -> list[dict[str, object]]:
    ranks, extra, mtu, limit = SCENARIOS[scenario]
    env_common = {"PATH": os.environ["PATH"], "HOME": "/root", "MASTER_ADDR": "192.0.2.10", "MASTER_PORT": str(port),
                  "WORLD_SIZE": str(ranks), "TORCH_DIST_INIT_BARRIER": "0", "PYTHONUNBUFFERED": "1",
                  # One GPU for both "hosts": no NVLink SHARP or multicast between them.
                  "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                  **extra}  # fmt: skip
    settings = {k: v.replace("{run}", run) for k, v in DEBUG[debug].items()}
    procs, logs = [], []
    t0 = time.monotonic()
    for i in range(ranks):
        node = 0 if extra.get("MATRIX_SAME_NODE") else i
        env = {**env_common, **settings, "RANK": str(i), "LOCAL_RANK": "0", "NCCL_HOSTID": f"node-{node}"}
        script = f'hostname node-{node} && exec python3 -c "$MATRIX_PROGRAM"'
        if launcher == "torchrun":
            script = (f"hostname node-{i} && exec python3 -m torch.distributed.run --nnodes {ranks} --nproc-per-node 1 "
                      f"--node-rank {i} --master-addr 192.0.2.10 --master-port {port} --tee 3 {PROGRAM}")  # fmt: skip
        env["MATRIX_PROGRAM"] = RANK_PROGRAM
        log = out / f"{run}--rank{i}.log"
        logs.append(log)
        procs.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/hrn{node}", "unshare", "--uts", "--", "sh", "-c", script],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
    ended = ""
    while True:
        if all(p.poll() is not None for p in procs):
            ended = "exited " + ",".join(str(p.returncode) for p in procs)
            break
        if time.monotonic() - t0 > limit:
            ended = f"cut at {limit} s: " + ",".join(
                "running" if p.poll() is None else str(p.returncode) for p in procs
            )
            break
        time.sleep(0.5)
    kill([p.pid for p in procs])
    for p in procs:
        p.wait()
    rows = []
    for i, log in enumerate(logs):
        made = {k: v for k, v in {**extra, **settings}.items() if not k.startswith("MATRIX_")}
        captured = "stdout+stderr"
        if "NCCL_DEBUG_FILE" in settings:
            # NCCL writes its lines to the file (one a process); the program's own output stays on stderr.
            files = sorted(glob.glob(f"/tmp/matrix-files/{run}.node-{i}.*.log"))
            text = "".join(Path(f).read_text(errors="replace") for f in files)
            log.write_text(text)
            captured = "NCCL_DEBUG_FILE"
        rows.append({"file": log.name, "scenario": scenario, "debug": debug, "rank": i, "ranks": ranks,
                     "launcher": launcher,
                     "fabric_mtu": mtu, "env": made, "captured": captured, "ended": ended,
                     "seconds": round(time.monotonic() - t0, 1), "expected": expected(scenario, debug, i),
                     **versions})  # fmt: skip
    print(f"{run}: {ended} after {time.monotonic() - t0:.1f} s", flush=True)
    return rows


def main() -> None:
    kit, out = Path(sys.argv[1]), Path(sys.argv[2])
    # MATRIX_ONLY, MATRIX_DEBUG, MATRIX_LAUNCHERS (comma lists) narrow the matrix; all by default.
    only = [x for x in os.environ.get("MATRIX_ONLY", "").split(",") if x] or list(SCENARIOS)
    debugs = [x for x in os.environ.get("MATRIX_DEBUG", "").split(",") if x] or list(DEBUG)
    launchers = [x for x in os.environ.get("MATRIX_LAUNCHERS", "").split(",") if x] or ["python"]
    PROGRAM.write_text(RANK_PROGRAM)
    logs = Path("/tmp/matrix-logs")
    logs.mkdir(exist_ok=True)
    Path("/tmp/matrix-files").mkdir(exist_ok=True)
    Path("/tmp/matrix-broken").mkdir(exist_ok=True)
    Path("/tmp/matrix-broken/libnccl-net-broken.so").write_bytes(b"not an ELF file\n")
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, '.'.join(map(str, "
                            "torch.cuda.nccl.version())), torch.cuda.get_device_name(0))"], capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    versions = {"torch": probe[0], "nccl": probe[1], "gpu": " ".join(probe[2:])}
    print(versions, flush=True)
    fabric = Fabric(kit)
    fabric.up()
    rows: list[dict[str, object]] = []
    port = 29600
    try:
        for mtu in (9000, 1500):
            fabric.mtu(mtu)
            jobs = []
            with ThreadPoolExecutor(max_workers=8) as pool:
                for scenario, (_, _, want_mtu, _) in SCENARIOS.items():
                    if want_mtu != mtu or scenario not in only:
                        continue
                    for debug in debugs:
                        for launcher in launchers:
                            port += 1
                            run = f"{scenario}--{debug}" + ("" if launcher == "python" else f"--{launcher}")
                            jobs.append(pool.submit(one, run, scenario, debug, port, logs, versions, launcher))
                for job in jobs:
                    rows += job.result()
    finally:
        fabric.down()
        with (logs / "manifest.jsonl").open("w") as f:
            for row in sorted(rows, key=lambda r: str(r["file"])):
                f.write(json.dumps(row, sort_keys=True) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out / "matrix.tgz", "w:gz") as tar:
            tar.add(logs, arcname="nccl-matrix")
        print(f"{len(rows)} logs", flush=True)


if __name__ == "__main__":
    main()
