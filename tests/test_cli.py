"""`hostnet-rdma mutate`: the preview users run before they trust the webhook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml

from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent
POD = ROOT / "tests" / "golden" / "volcano" / "plain-c10d-worker-1.yaml"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin)


def test_the_installed_entry_point_runs_as_a_process() -> None:
    """The one call through a real process: `python -m app.cli` (what the image's entry point
    `hostnet-rdma` runs too)."""
    p = subprocess.run([sys.executable, "-m", "app.cli", "mutate", "-f", str(POD), "-o", "json"],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == json.loads(cli("mutate", "-f", str(POD), "-o", "json").stdout)


def test_yaml_output_and_summary() -> None:
    p = cli("mutate", "-f", str(POD))
    assert p.returncode == 0, p.stderr
    pod = yaml.safe_load(p.stdout)
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert p.stderr.startswith("hostnet-rdma: launcher volcano (job ddp-vc); identity ddp-vc-worker-1.ddp-vc;")
    uid = yaml.safe_load(POD.read_text())["metadata"]["ownerReferences"][0]["uid"]
    from app.core import InjectConfig
    from app.core.mutate import job_port

    assert f"rendezvous endpoint ddp-vc-worker-0.ddp-vc:{job_port(InjectConfig(), uid)}" in p.stderr
    assert "profile BM.GPU4.8 (nodeSelector node.kubernetes.io/instance-type=BM.GPU4.8)" in p.stderr


def test_patch_output_applies_to_the_input_and_equals_json_output() -> None:
    ops = json.loads(cli("mutate", "-f", str(POD), "-o", "patch").stdout)
    full = json.loads(cli("mutate", "-f", str(POD), "-o", "json").stdout)
    assert jsonpatch.apply_patch(yaml.safe_load(POD.read_text()), ops) == full


def test_stdin_and_json_input() -> None:
    pod = yaml.safe_load(POD.read_text())
    p = cli("mutate", "-f", "-", "-o", "json", stdin=json.dumps(pod))
    assert p.returncode == 0 and json.loads(p.stdout)["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_a_job_that_cannot_be_expanded_exits_2_with_one_line() -> None:
    p = cli("mutate", "-f", "-", stdin="apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["hostnet-rdma: error: Volcano Job j: no spec.tasks"]
    assert p.stdout == ""


def test_not_yaml_exits_2() -> None:
    p = cli("mutate", "-f", "-", stdin="kind: Pod\n  bad: [indent")
    assert p.returncode == 2 and p.stderr.startswith("hostnet-rdma: error: - is not YAML or JSON:")
    assert len(p.stderr.strip().splitlines()) == 1


def test_missing_file_exits_2() -> None:
    p = cli("mutate", "-f", "/nonexistent.yaml")
    assert p.returncode == 2 and "cannot read /nonexistent.yaml" in p.stderr


def test_bad_config_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profiles:\n  evil:\n    env: {LD_PRELOAD: /tmp/x.so}\n")
    p = cli("mutate", "-f", str(POD), "--config", str(cfg))
    assert p.returncode == 2
    assert "env key 'LD_PRELOAD' is not allowed; only NCCL_*" in p.stderr


def test_custom_profile_from_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profiles:\n  BM.GPU4.8:\n    env: {NCCL_IB_HCA: '=mlx5_0', NCCL_IB_GID_INDEX: 3}\n")
    pod = json.loads(cli("mutate", "-f", str(POD), "-o", "json", "--config", str(cfg)).stdout)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0" and env["NCCL_IB_GID_INDEX"] == "3"
    assert "NCCL_IB_TC" not in env  # the config's profile replaces the built-in one


def test_unknown_config_key_is_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("inject: {shmSise: 8Gi}\n")
    p = cli("mutate", "-f", str(POD), "--config", str(cfg))
    assert p.returncode == 2 and "config: inject.shmSise: Extra inputs are not permitted" in p.stderr


def test_a_pod_not_sent_to_the_webhook_exits_3_unchanged() -> None:
    p = cli("mutate", "-f", str(ROOT / "tests/golden/generic/not-hostnetwork.yaml"), "-o", "patch")
    assert p.returncode == 3 and json.loads(p.stdout) == []
    assert "unchanged: not sent to the webhook: spec.hostNetwork is not true" in p.stderr


def _plugin(*words: str) -> subprocess.CompletedProcess[str]:
    """The installed kubectl plugin executable, as kubectl runs it (the words after its name)."""
    exe = Path(sys.executable).parent / "kubectl-hostnet_rdma"
    assert exe.exists(), "the package installs kubectl-hostnet_rdma"
    return subprocess.run([str(exe), *words], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.slow
def test_the_kubectl_plugin_takes_kubectls_flags_anywhere() -> None:
    plain = cli("mutate", "-f", str(POD), "-n", "team-a", "-o", "json")
    for words in (["-n", "team-a", "mutate", "-f", str(POD), "-o", "json"],
                  ["mutate", "-f", str(POD), "-o", "json", "--namespace=team-a"]):  # fmt: skip
        p = _plugin(*words)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == json.loads(plain.stdout)
    # A flag a command has no use for is an error, not silently dropped.
    p = _plugin("-n", "ml", "e2e")
    assert p.returncode == 2 and "e2e has no use for it: -n does not apply" in p.stderr
    # Serving the webhook is not a kubectl job; no command prints the usage.
    assert _plugin("serve").returncode == 2
    p = _plugin()  # no command, or --help: what each command is for, not one line
    assert p.returncode == 0 and "explain  why a pod was, or would be, mutated or not" in p.stdout
    assert "commands here: explain, verify, mutate, doctor, e2e, help" in p.stdout
    assert _plugin("--help").stdout == p.stdout
    p = _plugin("bogus")
    assert p.returncode == 2 and "usage: kubectl hostnet-rdma {explain,verify,mutate,doctor,e2e,help}" in p.stderr
    p = _plugin("verify", "--help")
    assert p.returncode == 0 and "usage: kubectl hostnet-rdma verify" in p.stdout and "--context" in p.stdout


def test_a_refusal_says_what_the_api_server_said() -> None:
    """`403 Forbidden` alone names neither the user nor the right: the CLIs print the Status
    message too (the API-server tier checks it with a real token and real RBAC)."""
    from app import kube

    e = kube.ApiException(status=403, reason="Forbidden")
    e.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                         "message": 'pods "p" is forbidden: User "u" cannot get resource "pods"\nin the namespace "n"'})  # fmt: skip
    assert (
        kube.refusal(e)
        == '403 Forbidden: pods "p" is forbidden: User "u" cannot get resource "pods" in the namespace "n"'
    )
    assert kube.api_message(e).startswith('pods "p" is forbidden')
    e.body = e.body.encode()  # the client hands bytes on some paths
    assert kube.api_message(e).startswith('pods "p" is forbidden')
    for body in (None, "", "<html>bad gateway</html>", '{"message": ""}', '"message" but not JSON'):
        e.body = body
        assert kube.refusal(e) == "403 Forbidden", body


def test_a_kubeconfig_that_cannot_be_used_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Missing, or a context naming a cluster the file lacks (found on real kind): every
    command that reads the cluster says so in one line and exits 2, the plugin too."""
    missing = str(tmp_path / "missing")
    dangling = tmp_path / "dangling"
    dangling.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "real",
        "clusters": [{"name": "kind-e2e", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "kind-e2e", "user": {"token": "t"}}],
        "contexts": [{"name": "real", "context": {"cluster": "test", "user": "kind-e2e"}}],
    }))  # fmt: skip
    for kubeconfig, said in ((missing, "No configuration found"), (str(dangling), "Expected object with name test")):
        for words in (["explain", "some-pod"], ["verify", "some-job"], ["e2e"]):
            p = cli(*words, "--kubeconfig", kubeconfig)
            assert p.returncode == 2, (words, p.stdout + p.stderr)
            (line,) = p.stderr.splitlines()
            assert line.startswith("hostnet-rdma: error: kubeconfig: Invalid kube-config file.") and said in line, line
            assert line.endswith(
                f"(read {kubeconfig}; choose the file with --kubeconfig or KUBECONFIG, the context with --context)"
            ), line
    p = _plugin("explain", "some-pod", "--kubeconfig", str(dangling))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "hostnet-rdma: error: kubeconfig: Invalid kube-config file. Expected object with name test" in p.stderr


def test_in_cluster_credentials_that_cannot_be_used_say_so_not_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pod (KUBERNETES_SERVICE_HOST set, no --kubeconfig) no file is read: the error names
    the in-cluster credentials and the way to use a file instead, not ~/.kube/config."""
    from app import kube

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(kube.KubeconfigError) as e:
        kube.api_client()
    assert str(e.value) == (
        "in-cluster credentials: Service host/port is not set. (KUBERNETES_SERVICE_HOST is set, so no kubeconfig"
        " was read; pass --kubeconfig to use one)"
    ), e.value
    # With a file named, that file is read even in a pod.
    with pytest.raises(kube.KubeconfigError, match=r"^kubeconfig: .*\(read /nonexistent/kc; "):
        kube.api_client("/nonexistent/kc")
