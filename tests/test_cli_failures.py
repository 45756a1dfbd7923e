"""Everyday failures are one line (issue #47): each subcommand that reads a cluster, against an
API server nobody answers on and a kubeconfig that is not YAML; a file that is not UTF-8; a
Kubernetes version that is none; stdin as the job file; a reader that closes the pipe early.
Each printed ~80 lines of traceback (urllib3's MaxRetryError, yaml's ParserError,
UnicodeDecodeError, ValueError, BrokenPipeError), or read stdin twice."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "deploy" / "examples" / "volcano-job.yaml")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is: nobody answers there


@pytest.fixture
def nowhere(tmp_path: Path) -> Path:
    """A kubeconfig whose API server does not answer (a refused connection)."""
    f = tmp_path / "kubeconfig"
    f.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{closed_port()}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u, namespace: ml}}]\n"
    )
    return f


@pytest.fixture
def not_yaml(tmp_path: Path) -> Path:
    f = tmp_path / "kubeconfig"
    f.write_text("apiVersion: v1\nclusters: [unclosed\n")
    return f


CLUSTER_COMMANDS = [
    ("explain", "some-pod"),
    ("verify", "some-pod"),
    ("explain", "-f", EXAMPLE, "--from-cluster"),
    ("mutate", "-f", EXAMPLE, "--from-cluster"),
]


def one_line(result: subprocess.CompletedProcess[str], *wanted: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hostnet-rdma: error: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for w in wanted:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_an_api_server_nobody_answers_is_one_line(command: tuple[str, ...], nowhere: Path) -> None:
    one_line(run_cli(*command, "--kubeconfig", str(nowhere)), "cannot reach the cluster's API server", "--kubeconfig")


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_a_kubeconfig_that_is_not_yaml_is_one_line(command: tuple[str, ...], not_yaml: Path) -> None:
    one_line(run_cli(*command, "--kubeconfig", str(not_yaml)), "kubeconfig: not YAML", str(not_yaml))


def test_doctor_between_with_an_api_server_nobody_answers_is_one_line(nowhere: Path) -> None:
    one_line(run_cli("doctor", "--between", "a,b", "--kubeconfig", str(nowhere)))


@pytest.mark.parametrize("command", ["explain", "mutate"])
def test_a_file_that_is_not_utf8_is_one_line(command: str, tmp_path: Path) -> None:
    f = tmp_path / "job.yaml"
    f.write_bytes(b"kind: Pod\nname: \xff\xfe\n")
    one_line(run_cli(command, "-f", str(f)), "is not UTF-8")


@pytest.mark.parametrize("command", ["explain", "mutate"])
def test_a_kubernetes_version_that_is_none_is_a_usage_error(command: str) -> None:
    result = run_cli(command, "-f", EXAMPLE, "--kube-version", "banana")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'banana' is not a Kubernetes version" in result.stderr and "usage:" in result.stderr


def test_explain_reads_a_job_file_from_stdin() -> None:
    """`helm template ... | hostnet-rdma explain -f -`, as docs/checking.md shows: stdin was read
    twice, and the second read found nothing (`- holds no object`, exit 2)."""
    from_file = run_cli("explain", "-f", EXAMPLE)
    from_stdin = run_cli("explain", "-f", "-", stdin=Path(EXAMPLE).read_text())
    assert from_stdin.stdout == from_file.stdout and "ddp-volcano" in from_stdin.stdout, from_stdin.stderr
    assert from_stdin.returncode == from_file.returncode


@pytest.mark.parametrize(
    "command", [["mutate", "-f", EXAMPLE, "-o", "yaml"], ["doctor", "-o", "json", "--sysfs-root", "/"]]
)
def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(command: list[str]) -> None:
    entry = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
    out = subprocess.run(
        # `true` reads nothing and is gone before Python has started: the first write meets a closed pipe.
        ["bash", "-c", 'set -o pipefail; "$@" | true', "_", *entry, *command],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr[-2000:]
    assert out.returncode in (0, 1, 141), out  # 141: as a program SIGPIPE ends; 1: doctor finds no RDMA here


def test_doctor_refuses_a_sysfs_root_that_is_not_one(tmp_path: Path) -> None:
    # It read /nonexist as a node without RDMA devices and failed its checks for that.
    one_line(run_cli("doctor", "--sysfs-root", str(tmp_path / "nonexist")), "--sysfs-root", "no sys/ and proc/")


def test_doctor_says_the_same_in_its_table_and_its_json() -> None:
    """The table said INFO where the JSON said only "ok": false; /dev/shm was 23.5403 GiB."""
    import json

    table = run_cli("doctor", "--sysfs-root", "/").stdout
    checks = json.loads(run_cli("doctor", "--sysfs-root", "/", "-o", "json").stdout)["checks"]
    for check in checks:
        assert f"{check['status']}  {check['name']}" in table, (check, table)
        assert check["status"] == ("PASS" if check["ok"] else check["status"]) and check["status"] in (
            "PASS",
            "FAIL",
            "INFO",
        )
    shm = next(c for c in checks if c["name"] == "shm")["detail"]
    number = shm.split()[1]
    assert len(number.partition(".")[2]) <= 1, shm  # at most one decimal


@pytest.mark.parametrize("command", ["explain", "mutate", "verify", "doctor", "e2e"])
def test_an_unknown_option_is_refused_with_the_commands_own_usage(command: str) -> None:
    result = run_cli(command, "--bogus")
    assert result.returncode == 2 and "unrecognized arguments: --bogus" in result.stderr
    assert f"usage: hostnet-rdma {command} " in result.stderr, result.stderr  # not the top level's
