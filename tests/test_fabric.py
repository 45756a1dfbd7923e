"""RDMA fabric checks on sysfs trees built in temporary folders: the seed's BM.GPU4.8 shape
(16 RoCE ports + 2 front-end ports) healthy and broken one way at a time. Each failure must be
named the same by the wrapper's preflight (before torchrun) and by `hostnet-rdma doctor`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.core.params import BM_GPU4_8_HCAS
from app.wrapper import fabric

ROOT = Path(__file__).resolve().parent.parent
FRONT_END = {"mlx5_4": "ens300f0", "mlx5_5": "ens300f1"}
GID3 = "0000:0000:0000:0000:0000:ffff:0a00:{:04x}"


def bm_gpu4_8(root: Path, *, down: tuple[str, ...] = (), v1: tuple[str, ...] = (), empty: tuple[str, ...] = (),
              missing: tuple[str, ...] = (), peermem: bool = True, memlock: str = "unlimited") -> Path:  # fmt: skip
    """18 ConnectX ports: mlx5_0..17, RoCE; mlx5_4/5 are the front-end (default route)."""
    for i in range(18):
        dev = f"mlx5_{i}"
        if dev in missing:
            continue
        port = root / "sys/class/infiniband" / dev / "ports/1"
        (port / "gids").mkdir(parents=True)
        (port / "gid_attrs/types").mkdir(parents=True)
        (port / "state").write_text("1: DOWN\n" if dev in down else "4: ACTIVE\n")
        (port / "link_layer").write_text("Ethernet\n")
        for index, value, kind in (
            (0, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1"),
            (1, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "RoCE v2"),
            (2, GID3.format(i + 1), "IB/RoCE v1"),
            (3, "0000:0000:0000:0000:0000:0000:0000:0000" if dev in empty else GID3.format(i + 1),
             "IB/RoCE v1" if dev in v1 else "RoCE v2"),
        ):  # fmt: skip
            (port / "gids" / str(index)).write_text(value + "\n")
            (port / "gid_attrs/types" / str(index)).write_text(kind + "\n")
        net = root / "sys/class/infiniband" / dev / "device/net" / FRONT_END.get(dev, f"rdma{i}")
        net.mkdir(parents=True)
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units\n"
        f"Max locked memory         {memlock:<20} {memlock:<20} bytes\n"
    )
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway\tFlags\nbond0\t00000000\t0100000A\t0003\nrdma0\t0000000A\t00000000\t0001\n"
    )
    (root / "sys/class/net/bond0/bonding").mkdir(parents=True)
    (root / "sys/class/net/bond0/bonding/slaves").write_text("ens300f0 ens300f1\n")
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    (root / "sys/module/nvidia").mkdir(parents=True, exist_ok=True)
    return root


def problems(findings: list[fabric.Finding]) -> dict[str, str]:
    return {f.name: f.detail for f in findings if f.problem}


HEALTHY = {"memlock": -1, "shm": 32 << 30}


def test_healthy_bm_gpu4_8_passes(tmp_path: Path) -> None:
    root = bm_gpu4_8(tmp_path)
    found = fabric.check(str(root), BM_GPU4_8_HCAS, "3", **HEALTHY)
    assert problems(found) == {}, problems(found)
    assert {f.name for f in found} == {"devices", "ports", "gid", "memlock", "shm", "gpudirect"}
    assert "16 ports selected" in found[0].detail
    assert fabric.summary(found).startswith("fabric preflight passed")


def test_exclusion_list_selects_the_sixteen(tmp_path: Path) -> None:
    root = bm_gpu4_8(tmp_path)
    found = fabric.check(str(root), "^mlx5_4,mlx5_5", "3", **HEALTHY)
    assert problems(found) == {}
    assert "16 ports selected by NCCL_IB_HCA=^mlx5_4,mlx5_5" in found[0].detail


CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # (id, tree options, check options, failing check, text it must name)
    ("down-port", {"down": ("mlx5_2",)}, {}, "ports", "mlx5_2:1 (1: DOWN)"),
    ("gid-roce-v1", {"v1": ("mlx5_6",)}, {}, "gid", "mlx5_6:1 IB/RoCE v1"),
    ("gid-empty", {"empty": ("mlx5_8",)}, {}, "gid", "mlx5_8:1 empty"),
    ("gid-index-not-v2", {}, {"gid_index": "2"}, "gid", "GID index 2 is RoCE v2 on 0 of 16"),
    ("missing-device", {"missing": ("mlx5_17",)}, {}, "devices", "names mlx5_17, which this node does not have"),
    ("memlock-too-small", {}, {"memlock": 65536}, "memlock", "memlock limit 64 KiB"),
    ("shm-too-small", {}, {"shm": 64 << 20}, "shm", "/dev/shm 64 MiB"),
    ("no-gpudirect", {"peermem": False}, {}, "gpudirect", "neither nvidia_peermem loaded"),
]


@pytest.mark.parametrize(("tree", "opts", "check", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_failure_is_named(
    tmp_path: Path, tree: dict[str, Any], opts: dict[str, Any], check: str, text: str
) -> None:
    root = bm_gpu4_8(tmp_path, **tree)
    kw: dict[str, Any] = {"hca": BM_GPU4_8_HCAS, "gid_index": "3", **HEALTHY, **opts}
    found = problems(fabric.check(str(root), **kw))
    assert list(found) == [check], found
    assert text in found[check], found[check]


def test_no_rdma_devices_is_one_clear_problem(tmp_path: Path) -> None:
    found = fabric.check(str(tmp_path), "", "", **HEALTHY)
    assert list(problems(found)) == ["devices"]
    assert "NCCL will use sockets" in next(f for f in found if f.name == "devices").hint


def test_suggest_reads_the_node(tmp_path: Path) -> None:
    hca, gid, left_out = fabric.suggest(str(bm_gpu4_8(tmp_path, down=("mlx5_9",))))
    assert gid == "3"
    assert set(hca[1:].split(",")) == set(BM_GPU4_8_HCAS[1:].split(",")) - {"mlx5_9"}
    assert any(x.startswith("mlx5_4 (carries the default route") for x in left_out)
    assert "mlx5_9 (no ACTIVE port)" in left_out


# ---------------------------------------------------------------- doctor


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = cli.main(["doctor", *args])
    return rc, capsys.readouterr().out


def test_doctor_healthy_node_matches_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bm_gpu4_8(tmp_path)
    rc, out = doctor(capsys, "--sysfs-root", str(root), "--profile", "BM.GPU4.8", "-o", "json")
    data = json.loads(out)
    checks = {c["name"]: c for c in data["checks"]}
    for name in ("devices", "ports", "gid", "gpudirect"):
        assert checks[name]["ok"], checks[name]
    assert data["suggested"]["NCCL_IB_GID_INDEX"] == "3"
    assert data["matching_profiles"] == ["BM.GPU4.8"]
    # memlock and /dev/shm are this process's own: not asserted here.
    assert rc == (0 if data["ok"] else 1)


@pytest.mark.parametrize(("tree", "opts", "check", "text"), [c[1:] for c in CASES if c[3] not in ("memlock", "shm")],
                         ids=[c[0] for c in CASES if c[3] not in ("memlock", "shm")])  # fmt: skip
def test_doctor_names_each_failure(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tree: dict[str, Any],
    opts: dict[str, Any],
    check: str,
    text: str,
) -> None:
    root = bm_gpu4_8(tmp_path, **tree)
    args = ["--sysfs-root", str(root), "--profile", "BM.GPU4.8"]
    if "gid_index" in opts:
        args += ["--gid-index", opts["gid_index"]]
    rc, out = doctor(capsys, *args)
    assert rc == 1
    line = next(line for line in out.splitlines() if line.startswith("FAIL") and f" {check} " in f" {line} ")
    assert text in line, out
    assert "What to do:" in out


def test_doctor_table_suggests_a_profile_when_none_matches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = bm_gpu4_8(tmp_path, missing=("mlx5_16", "mlx5_17"))
    _, out = doctor(capsys, "--sysfs-root", str(root), "--profile", "default")
    assert "This node has: NCCL_IB_HCA==mlx5_0," in out and "NCCL_IB_GID_INDEX=3" in out
    assert "No configured profile matches" in out


# ---------------------------------------------------------------- the wrapper's preflight


def wrapper(
    root: Path, *, extra: dict[str, str] | None = None, dry_run: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
        "HOSTNET_RDMA_SYSFS_ROOT": str(root), "NCCL_IB_HCA": BM_GPU4_8_HCAS, "NCCL_IB_GID_INDEX": "3",
        "HOSTNET_RDMA_LOCAL_ADDR": "localhost", "HOSTNET_RDMA_DRY_RUN": "1" if dry_run else "",
        **(extra or {}),
    }  # fmt: skip

    return subprocess.run(
        [sys.executable, "-m", "app.wrapper", "torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:1", "t.py"],
        env=env, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def shm_dir(tmp_path: Path) -> Any:
    """<root>/dev/shm as a real 2 GiB tmpfs (statvfs is what the wrapper reads); needs root."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mounted: list[Path] = []

    def make(root: Path, size: str = "2g") -> None:
        path = root / "dev/shm"
        path.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
        mounted.append(path)

    yield make
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


@pytest.mark.parametrize(("tree", "opts", "check", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_wrapper_preflight_names_each_failure(
    tmp_path: Path, shm_dir: Any, tree: dict[str, Any], opts: dict[str, Any], check: str, text: str
) -> None:
    root = bm_gpu4_8(tmp_path, **tree, memlock=str(opts.get("memlock", "unlimited")))
    shm_dir(root, "64m" if check == "shm" else "2g")
    extra = {"NCCL_IB_GID_INDEX": opts["gid_index"]} if "gid_index" in opts else {}
    p = wrapper(root, extra=extra)
    assert p.returncode == 0, p.stderr  # warn mode (the default) still starts torchrun
    lines = [line for line in p.stderr.splitlines() if line.startswith("hostnet-rdma: warning: fabric ")]
    assert len(lines) == 1 and lines[0].startswith(f"hostnet-rdma: warning: fabric {check}: "), p.stderr
    assert text in lines[0]
    assert f"fabric preflight: 1 problem(s) in {check}" in p.stderr


def test_wrapper_preflight_healthy_prints_one_summary_line(tmp_path: Path, shm_dir: Any) -> None:
    root = bm_gpu4_8(tmp_path)
    shm_dir(root)
    p = wrapper(root)
    assert "hostnet-rdma: fabric preflight passed (devices, ports, gid, memlock, shm, gpudirect)" in p.stderr, p.stderr
    assert "warning: fabric" not in p.stderr


def test_strict_mode_refuses_to_start(tmp_path: Path, shm_dir: Any) -> None:
    root = bm_gpu4_8(tmp_path, down=("mlx5_2",))
    shm_dir(root)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text("#!/bin/sh\necho REAL-TORCHRUN\n")
    (fake / "torchrun").chmod(0o755)
    p = wrapper(root, dry_run=False,
                extra={"HOSTNET_RDMA_FABRIC_PREFLIGHT": "strict", "PATH": f"{fake}:{os.environ['PATH']}"})  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    assert "REAL-TORCHRUN" not in p.stdout
    assert "hostnet-rdma: error: fabric ports:" in p.stderr and "not starting torchrun" in p.stderr


def test_off_mode_skips_the_checks(tmp_path: Path) -> None:
    p = wrapper(bm_gpu4_8(tmp_path, down=("mlx5_2",)), extra={"HOSTNET_RDMA_FABRIC_PREFLIGHT": "off"})
    assert "fabric" not in p.stderr


# ---------------------------------------------------------------- the transport, at any NCCL_DEBUG level


def _nccl_lines(log: str) -> str:
    """A rank's NCCL debug file as NCCL writes it (NCCL_DEBUG_FILE): its NCCL lines only."""
    text = (Path(__file__).parent / "logs" / log).read_text()
    lines = [ln for ln in text.splitlines() if " NCCL " in ln]
    if not any("Init COMPLETE" in ln for ln in lines):
        lines.append("node-0:1201:1201 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 - Init COMPLETE")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("level", ["", "WARN", "VERSION"])
def test_a_quiet_nccl_debug_is_redirected_and_the_user_keeps_their_level(level: str) -> None:
    from app.wrapper import ncclwatch

    extra, d = ncclwatch.nccl_debug_redirect({"NCCL_DEBUG": level} if level else {})
    assert d is not None and extra["NCCL_DEBUG"] == "INFO" and extra["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert extra["NCCL_DEBUG_FILE"].startswith(d) and "%p" in extra["NCCL_DEBUG_FILE"]
    assert ncclwatch.nccl_debug_redirect({"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x/%p"}) == ({}, None)
    shutil.rmtree(d)


def _watch(tmp_path: Path, log: str, env: dict[str, str], lines: str | None = None) -> tuple[str, str, int]:
    import io
    import signal
    import subprocess
    import threading

    from app.wrapper import ncclwatch
    from app.wrapper import torchrun as w

    d = tmp_path / "nccl"
    d.mkdir(parents=True)
    term = tmp_path / "termination-log"
    term.write_text("")
    parent = subprocess.Popen(["sleep", "30"])
    out = io.StringIO()
    env = {**env, "HOSTNET_RDMA_TERMINATION_LOG": str(term)}
    t = threading.Thread(
        target=ncclwatch.watch_transport,
        kwargs={"terminate": w.termination_message, "addresses": w.interface_addresses},
        args=(str(d), env, parent.pid, lambda: parent.poll() is None, 0.05, out),
        daemon=True,
    )
    t.start()
    (d / "nccl.node-0.1201.log").write_text(_nccl_lines(log) if lines is None else lines)
    try:
        parent.wait(timeout=2)
    except subprocess.TimeoutExpired:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    t.join(timeout=5)
    return out.getvalue(), term.read_text(), parent.returncode


def test_the_watcher_says_the_transport_and_puts_it_in_the_termination_message(tmp_path: Path) -> None:
    hca = "=mlx5_0,mlx5_2,mlx5_6,mlx5_8,mlx5_10,mlx5_12,mlx5_14,mlx5_16,mlx5_1,mlx5_3,mlx5_7,mlx5_9,mlx5_11,mlx5_13,mlx5_15,mlx5_17"
    said, term, rc = _watch(tmp_path, "good.log", {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": hca})
    line = "hostnet-rdma: transport=IB hcas=mlx5_0,mlx5_2,mlx5_6"
    assert line in said and "(16 of NCCL_IB_HCA's 16)" in said and "gdrdma=" in said, said
    assert term.startswith(line)
    assert rc == -9  # not stopped: IB


def test_socket_transport_with_require_rdma_stops_the_job(tmp_path: Path) -> None:
    said, term, rc = _watch(tmp_path, "socket-fallback.log", {"NCCL_DEBUG": "WARN", "HOSTNET_RDMA_REQUIRE_RDMA": "1"})
    assert "hostnet-rdma: transport=Socket" in said and "error: NCCL uses Socket, not RDMA" in said, said
    assert term.startswith("hostnet-rdma: error: NCCL uses Socket, not RDMA")
    assert rc == -15  # SIGTERM to torchrun: the job stops instead of training at socket speed
    said, _, rc = _watch(tmp_path / "again", "socket-fallback.log", {"NCCL_DEBUG": "WARN"})
    assert "hostnet-rdma: transport=Socket" in said and "error" not in said and rc == -9


@pytest.mark.parametrize(("log", "ok"), [("good.log", True), ("socket-fallback.log", False), ("no-gdrdma.log", False)])
def test_verify_reads_the_watchers_line_in_a_log_without_nccl_info_lines(tmp_path: Path, log: str, ok: bool) -> None:
    """A pod whose image sets NCCL_DEBUG=WARN: its log has the wrapper's lines and NCCL's
    warnings, none of NCCL's INFO lines; verify gives the verdict it gives on the INFO log."""
    from app.core.params import BM_GPU4_8_HCAS
    from app.verify import expected_devices, verify

    said, _, _ = _watch(tmp_path, log, {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": BM_GPU4_8_HCAS})
    text = (Path(__file__).parent / "logs" / log).read_text()
    quiet = "\n".join(ln for ln in text.splitlines() if " NCCL INFO " not in ln) + "\n" + said
    want = verify(text, expected_devices(BM_GPU4_8_HCAS))
    got = verify(quiet, expected_devices(BM_GPU4_8_HCAS))
    assert got.ok is ok and want.ok is ok
    assert {c.name: c.ok for c in got.checks} == {c.name: c.ok for c in want.checks}
    assert [c.detail for c in got.checks if c.name == "ib devices"] == [
        c.detail for c in want.checks if c.name == "ib devices"
    ]
    assert "(the wrapper's transport line)" in next(c.detail for c in got.checks if c.name == "transport") or not ok


def test_the_wrappers_process_ends_with_torchrun(tmp_path: Path) -> None:
    """The watcher is a child of torchrun's process: it must not keep the pod's output open
    after torchrun ends (a reader of the output would wait for it), and it cleans up."""
    import subprocess
    import sys
    import time

    fake = tmp_path / "torchrun"
    fake.write_text(f"#!{sys.executable}\nimport sys; print('trained'); sys.exit(3)\n")
    fake.chmod(0o755)
    script = (
        "import os, sys; from app.wrapper import torchrun as w; env = dict(os.environ, NCCL_DEBUG='WARN'); "
        "from app.wrapper import ncclwatch; ncclwatch.start(env, w.termination_message, w.interface_addresses); print(env['NCCL_DEBUG_FILE']); sys.stdout.flush(); "
        f"os.execve({str(fake)!r}, [{str(fake)!r}], env)"
    )
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20,
                       cwd=Path(__file__).parent.parent)  # fmt: skip
    took = time.monotonic() - start
    assert p.returncode == 3 and "trained" in p.stdout, p.stderr
    assert took < 5, took  # not the watcher's lifetime: it holds neither stdout nor stdin
    d = Path(p.stdout.splitlines()[0]).parent
    for _ in range(50):  # it sees torchrun gone within a poll, then removes its directory
        if not d.exists():
            break
        time.sleep(0.1)
    assert not d.exists()


@pytest.mark.slow
def test_require_rdma_never_stops_a_plugin_network_and_errors_get_their_cause(tmp_path: Path) -> None:
    """Held to public logs (tests/nccl-corpus/): the SHARP plugin's IBext with requireRdma is not
    stopped; an error gets one line with its cause, and the first cause is the termination
    message."""
    corpus = Path(__file__).parent / "nccl-corpus"

    def watch(name: str, env: dict[str, str]) -> tuple[str, str, int]:
        lines = [ln for ln in (corpus / name).read_text().splitlines()[1:] if "NCCL" in ln]
        done = "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE"
        return _watch(tmp_path / name, name, env, "\n".join([*lines, done]) + "\n")

    said, term, rc = watch(
        "nccl-1357-ibext-healthy-2node-h100.log", {"NCCL_DEBUG": "WARN", "HOSTNET_RDMA_REQUIRE_RDMA": "1"}
    )
    assert "hostnet-rdma: transport=IBext" in said and "error" not in said and rc == -9, said
    said, term, rc = watch("nccl-tests-252-ib-wc-error4.log", {"NCCL_DEBUG": "WARN"})
    assert "NCCL RDMA completion error: completion status 4 (local protection error)" in said, said
    assert "ACS" in said and term.startswith("hostnet-rdma: warning: NCCL RDMA completion error") and rc == -9


def test_require_rdma_never_stops_a_job_within_one_node(tmp_path: Path) -> None:
    """NCCL names a network, Socket too, even where every communicator stays within the node
    (tests/nccl-corpus/: a GKE a3-high 8-GPU run, NCCL 2.22.3, `Using network Socket`, every
    channel P2P): requireRdma must not stop it. A job whose first communicator is within the node
    and a later one spans nodes over sockets is stopped once that one is up."""
    corpus = Path(__file__).parent / "nccl-corpus"
    name = "gke-a3high-single-node-8gpu-healthy-nccl2-22.log"
    lines = [ln for ln in (corpus / name).read_text().splitlines()[1:] if " NCCL " in ln]
    require = {"NCCL_DEBUG": "WARN", "HOSTNET_RDMA_REQUIRE_RDMA": "1"}
    said, _, rc = _watch(tmp_path / "one", name, require, "\n".join(lines) + "\n")
    assert "hostnet-rdma: transport=Socket" in said and "error" not in said and rc == -9, said
    # A tensor-parallel group within the node first, then the data-parallel one across nodes.
    local = (
        "n0:1:1 [0] NCCL INFO Using network Socket\n"
        "n0:1:1 [0] NCCL INFO comm 0xa rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
        "n0:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa rank 0 nranks 8 cudaDev 0 busId 1000 commId 0x1 - Init COMPLETE\n"
    )
    across = (
        "n0:1:1 [0] NCCL INFO comm 0xb rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
        "n0:1:1 [0] NCCL INFO ncclCommInitRank comm 0xb rank 0 nranks 16 cudaDev 0 busId 1000 commId 0x2 - Init COMPLETE\n"
    )
    import threading
    import time

    from app.wrapper import ncclwatch
    from app.wrapper import torchrun as w

    d = tmp_path / "two" / "nccl"
    d.mkdir(parents=True)
    import io
    import subprocess

    parent = subprocess.Popen(["sleep", "30"])
    out = io.StringIO()
    t = threading.Thread(target=ncclwatch.watch_transport, kwargs={"terminate": w.termination_message, "addresses": w.interface_addresses}, args=(str(d), require, parent.pid, lambda: parent.poll() is None,
                                                          0.05, out), daemon=True)  # fmt: skip
    t.start()
    (d / "nccl.n0.1.log").write_text(local)
    time.sleep(0.5)
    assert parent.poll() is None and "transport=Socket" in out.getvalue(), out.getvalue()  # within the node: kept
    with open(d / "nccl.n0.1.log", "a") as f:
        f.write(across)
    assert parent.wait(timeout=5) == -15, out.getvalue()  # the job's nodes talk over sockets: stopped
    t.join(timeout=5)
    assert "error: NCCL uses Socket, not RDMA" in out.getvalue()
