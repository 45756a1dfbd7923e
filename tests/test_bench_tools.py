"""The benchmark's own instruments (scripts/bench), run for a second each: the load generator's
open-loop pacer reports each point's send delay, and the stall probe reports what the machine
took from a core. Not timings (those are make bench's job): that the figures are there and
consistent, so a results.json is never written without them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from app.webhook import tls

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"
# It builds the Go load generator and stall probe first.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench-bin")
    subprocess.run(["go", "build", "-o", f"{out}/", "./..."], cwd=BENCH, check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_stall_probe_reports_each_gap_it_saw(bins: Path) -> None:
    out = subprocess.run([str(bins / "stallprobe"), "-duration", "300ms", "-label", "core0"], capture_output=True,
                         text=True, check=True, timeout=30).stdout  # fmt: skip
    r = json.loads(out)
    assert r["label"] == "core0" and 0.29 <= r["seconds"] <= 1 and r["min_gap_us"] == 200
    assert r["gaps"] >= r["gaps_over_1ms"] >= 0 and r["stalled_ms"] >= r["longest_ms"] >= 0
    assert (r["gaps"] == 0) == (r["stalled_ms"] == 0)


def test_the_load_generator_reports_its_send_delay_at_a_fixed_rate_only(bins: Path, tmp_path: Path) -> None:
    ca = tls.make_ca()
    tls.write_dir(tmp_path / "tls", tls.make_serving(ca, ["127.0.0.1"]), ca)
    bodies = tmp_path / "bodies"
    bodies.mkdir()
    (bodies / "0.json").write_text('{"request": {"uid": "x"}}')
    port = free_port()
    server = subprocess.Popen([str(bins / "gowebhook"), "-addr", f"127.0.0.1:{port}", "-floor",
                               "-cert", str(tmp_path / "tls" / tls.CERT_FILE), "-key", str(tmp_path / "tls" / tls.KEY_FILE)])  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the Go floor did not start"
                time.sleep(0.1)

        def load(rate: int, as_user: list[str] | None = None, loadgen: Path = bins / "loadgen",
                 files: Path = tmp_path, pid: int = 0) -> tuple[dict[str, float], str]:  # fmt: skip
            out = subprocess.run(
                [*(as_user or []), str(loadgen), "-url", f"https://127.0.0.1:{port}/mutate",
                 "-ca", str(files / "tls" / tls.CA_FILE), "-bodies", str(files / "bodies"), "-rate", str(rate),
                 "-duration", "1s", "-warmup", "200ms", "-conns", "8", "-pid", str(pid),
                 "-hz", str(os.sysconf("SC_CLK_TCK"))],
                capture_output=True, text=True, check=True, timeout=60,
            )  # fmt: skip
            return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

        fixed, said = load(200)
        if os.geteuid() == 0:  # the pacer's timer slack and priority were granted: nothing to say
            assert "warning" not in said, said
        assert fixed["errors"] == 0 and 150 <= fixed["ok"] <= 250
        # The delay before a request is sent is part of its latency from the scheduled time.
        assert 0 <= fixed["send_delay_p50_ms"] <= fixed["p50_ms"]
        assert fixed["send_delay_p99_ms"] <= fixed["send_delay_max_ms"] <= fixed["max_ms"]
        saturation, _ = load(0, pid=server.pid)
        assert saturation["ok"] > 0 and "send_delay_p99_ms" not in saturation  # no schedule, no delay
        # The server's CPU time over the measured second, from /proc, and per admission answered.
        assert 0 < saturation["server_cpu_s"] <= 1.5 * saturation["seconds"] * (os.cpu_count() or 1)
        assert saturation["server_cpu_us_per_admission"] == pytest.approx(
            saturation["server_cpu_s"] / saturation["ok"] * 1e6
        )
        assert "server_cpu_s" not in fixed  # only when asked
        # Without root the pacer cannot raise its priority: it says so, once, and still measures.
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            shared = Path(tempfile.mkdtemp(prefix="loadgen-"))  # readable by the unprivileged user
            try:
                shutil.copy(bins / "loadgen", shared / "loadgen")
                shutil.copytree(tmp_path / "tls", shared / "tls")
                shutil.copytree(bodies, shared / "bodies")
                for path in [shared, *shared.rglob("*")]:
                    path.chmod(0o755)
                user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
                unprivileged, said = load(200, user, shared / "loadgen", shared)
                warnings = [line for line in said.splitlines() if "warning" in line]
                assert len(warnings) == 1, said
                assert "priority not raised" in warnings[0] and "CAP_SYS_NICE" in warnings[0], said
                assert unprivileged["errors"] == 0 and "send_delay_p99_ms" in unprivileged
            finally:
                shutil.rmtree(shared)
    finally:
        server.terminate()
        server.wait(timeout=10)
