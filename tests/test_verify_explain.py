"""`hostnet-rdma verify` on real-looking NCCL logs and `explain` on the golden pods."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from app.core import Params
from app.core.params import BM_GPU4_8_HCAS
from app.preview.explain import explain
from app.verify import expected_devices, verify
from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "logs"
GOLDEN = ROOT / "tests" / "golden"
EXPECTED = expected_devices(BM_GPU4_8_HCAS)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


def results(log: str) -> dict[str, bool]:
    report = verify((LOGS / log).read_text(), EXPECTED)
    return {c.name: c.ok for c in report.checks}


def test_good_log_passes() -> None:
    report = verify((LOGS / "good.log").read_text(), EXPECTED)
    assert report.ok
    details = {c.name: c.detail for c in report.checks}
    assert details["transport"] == "Using network IB"
    assert details["ib devices"].startswith("16 devices: mlx5_0,mlx5_2,")
    assert details["gdrdma channels"] == "32 of 32 NET channels use GDRDMA"
    assert "is_host=true local_addr=ddp-vc-worker-0.ddp-vc" in details["wrapper"]


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("socket-fallback.log", {"transport": False, "ib devices": False, "gdrdma channels": False, "wrapper": True}),
        ("no-gdrdma.log", {"transport": True, "ib devices": True, "gdrdma channels": False, "wrapper": True}),
    ],
    ids=["socket-fallback-fails-transport-devices-gdrdma", "missing-gdrdma-fails-only-that"],
)
def test_failing_logs_fail_exactly_the_right_checks(log: str, expected: dict[str, bool]) -> None:
    assert results(log) == expected


def test_front_end_ports_and_missing_devices_are_named() -> None:
    report = verify((LOGS / "too-few-devices.log").read_text(), EXPECTED)
    dev = next(c for c in report.checks if c.name == "ib devices")
    assert not dev.ok
    assert "not in the profile (front-end?): mlx5_4,mlx5_5" in dev.detail
    assert "missing: mlx5_11,mlx5_13,mlx5_15,mlx5_17" in dev.detail


def test_unwrapped_log_fails_the_wrapper_check() -> None:
    assert results("unwrapped.log")["wrapper"] is False


def test_verify_cli_table_and_exit_codes() -> None:
    good = cli("verify", "--log", str(LOGS / "good.log"), "--hca", BM_GPU4_8_HCAS)
    assert good.returncode == 0, good.stdout
    assert good.stdout.splitlines()[0].startswith("PASS  transport")
    bad = cli("verify", "--log", str(LOGS / "socket-fallback.log"))
    assert bad.returncode == 1
    assert "FAIL  transport        Using network Socket" in bad.stdout
    assert "What to do:" in bad.stdout and "See `hostnet-rdma help nccl-uses-sockets-or-no-gdrdma`" in bad.stdout
    # The section a hint names is one `help` prints.
    shown = cli("help", "nccl-uses-sockets-or-no-gdrdma")
    assert shown.returncode == 0 and shown.stdout.startswith("NCCL uses sockets, or no GDRDMA\n\n")


def test_verify_judges_the_devices_against_a_profile_and_says_when_it_did_not(tmp_path: Path) -> None:
    """A log whose NCCL used the front-end NICs passes a check that knows no profile; with the
    node shape's profile (or a live pod's own NCCL_IB_HCA) it fails, and without either the
    table says the devices were not compared."""
    front = (LOGS / "good.log").read_text().replace("[0]mlx5_0:1/RoCE", "[0]mlx5_4:1/RoCE")
    path = tmp_path / "front-end.log"
    path.write_text(front)
    plain = cli("verify", "--log", str(path))
    assert plain.returncode == 0 and "NOTE  the HCAs were not compared with a profile" in plain.stdout
    shaped = cli("verify", "--log", str(path), "--profile", "BM.GPU4.8")
    assert shaped.returncode == 1 and "not in the profile (front-end?): mlx5_4" in shaped.stdout, shaped.stdout
    unknown = cli("verify", "--log", str(path), "--profile", "BM.GPU9.8")
    assert unknown.returncode == 2 and "unknown profile 'BM.GPU9.8'; known: " in unknown.stderr


def test_a_log_that_says_nothing_of_nccl_gets_one_transport_failure_not_four() -> None:
    quiet = "\n".join(ln for ln in (LOGS / "good.log").read_text().splitlines() if " NCCL " not in ln)
    report = verify(quiet, expect_wrapper=False)
    assert [c.name for c in report.checks] == ["transport"] and "GPUDirect" not in report.table()


def test_every_hint_names_a_help_topic_that_exists() -> None:
    from app import help as guide
    from app import verify as v
    from app.wrapper import torchrun as w

    topics = guide.sections(guide.document())
    for section in (v.SOCKETS, v.STALLED, v.RETRY, v.WRAPPER, v.ERRORS):
        assert rules_topic(section) in topics, section
    said = w._see("torch 2.4.x")
    assert said == 'See `hostnet-rdma help torch-2.4.x` (docs/troubleshooting.md, "torch 2.4.x")'
    shown = cli("help", "torch", "2.4")
    assert shown.returncode == 0 and shown.stdout.startswith("torch 2.4.x\n")
    listing = cli("help")
    assert listing.returncode == 0 and all(t in listing.stdout for t in topics)
    several = cli("help", "nccl")
    assert several.returncode == 2 and "Several topics match" in several.stdout
    none = cli("help", "no-such-thing")
    assert none.returncode == 2 and none.stderr.startswith("hostnet-rdma: error: no topic 'no-such-thing'")


def rules_topic(section: str) -> str:
    from app.wrapper.rules import help_topic

    return help_topic(section)


def test_verify_cli_json() -> None:
    p = cli("verify", "--log", str(LOGS / "no-gdrdma.log"), "-o", "json")
    data = json.loads(p.stdout)
    assert p.returncode == 1 and data["ok"] is False
    assert [c["name"] for c in data["checks"]] == ["transport", "ib devices", "gdrdma channels", "wrapper"]


def test_verify_missing_file_exits_2() -> None:
    assert cli("verify", "--log", "/nope.log").returncode == 2


@pytest.mark.parametrize("case", sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")  # fmt: skip
def test_explain_golden_pods(case: Path) -> None:
    pod = yaml.safe_load(case.read_text())
    steps = explain(pod, Params(namespace="default", wrapper_payload="x"))
    text = "\n".join(s.text for s in steps)
    expected = yaml.safe_load(case.with_name(case.stem + ".expected.yaml").read_text())
    if not pod["spec"].get("hostNetwork"):
        assert "spec.hostNetwork is not true" in text and not steps[-1].ok
    elif expected.get("reason"):  # not sent, or sent and left unchanged: a NO line says why
        assert any(not s.ok and expected["reason"] in s.text for s in steps), text
    else:
        assert "launcher detected:" in text and "NCCL profile:" in text and "would inject:" in text


def test_explain_namespace_reasons() -> None:
    pod = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())
    steps = explain(pod, Params(namespace="team-a", wrapper_payload="x"),
                    {"pod-security.kubernetes.io/enforce": "baseline"})  # fmt: skip
    texts = [s.text for s in steps if not s.ok]
    assert (
        texts[0]
        == "namespace team-a lacks the label hostnet-rdma.io/inject=enabled (kubectl label namespace team-a hostnet-rdma.io/inject=enabled)"
    )
    assert "enforces Pod Security 'baseline'" in texts[1]


def test_explain_says_the_opt_in_mode_and_the_pod_label() -> None:
    from app import config

    pod = yaml.safe_load((GOLDEN / "opt-in" / "volcano-seed-no-pod-label.yaml").read_text())
    steps = explain(pod, Params(namespace="ml", wrapper_payload="x"), {"hostnet-rdma.io/inject": "enabled"})
    assert steps[0].text.startswith("opt-in mode namespace:")
    assert all(s.ok for s in steps if not s.text.startswith("warning:")), steps
    assert "no pod label needed (opt-in mode namespace)" in [s.text for s in steps]
    cautious = Params(config=config.from_dict({"optIn": "pod"}), namespace="ml", wrapper_payload="x")
    steps = explain(pod, cautious, {"hostnet-rdma.io/inject": "enabled"})
    assert steps[0].text.startswith("opt-in mode pod:")
    assert [s.text for s in steps if not s.ok and not s.text.startswith("warning:")] == [
        "the pod lacks the label hostnet-rdma.io/inject=enabled, which the webhook's opt-in mode `pod` requires "
        "(set it in the job's pod template, not on the job)"
    ]
    pod["metadata"]["labels"]["hostnet-rdma.io/inject"] = "true"  # a wrong value is not "lacks"
    (no,) = [s.text for s in explain(pod, cautious) if not s.ok and not s.text.startswith("warning:")]
    assert no.startswith("the pod has hostnet-rdma.io/inject='true', not hostnet-rdma.io/inject=enabled")
    texts = [s.text for s in explain(pod, Params(namespace="ml", wrapper_payload="x"))]
    assert (
        "pod label hostnet-rdma.io/inject='true' is neither 'enabled' (a training pod) nor 'disabled' (opt out): read as no label"
        in texts
    )
    pod["metadata"]["labels"]["hostnet-rdma.io/inject"] = "disabled"
    steps = explain(pod, Params(namespace="ml", wrapper_payload="x"))
    assert [s.text for s in steps if not s.ok and not s.text.startswith("warning:")] == [
        "the pod opts out: label hostnet-rdma.io/inject=disabled"
    ]


def test_explain_says_a_live_pod_without_the_status_was_created_without_the_webhook() -> None:
    """A live pod the webhook would plumb that carries no status annotation: the API server
    created it without the webhook (down or timed out, failurePolicy Ignore)."""
    pod = yaml.safe_load((GOLDEN / "opt-in" / "volcano-seed-no-pod-label.yaml").read_text())
    params, labels = Params(namespace="ml", wrapper_payload="x"), {"hostnet-rdma.io/inject": "enabled"}
    bypassed = "created without the webhook (it was unreachable or timed out): this pod has no plumbing"
    steps = explain(pod, params, labels, live=True)
    assert [s.text.startswith(bypassed) for s in steps if not s.ok and not s.text.startswith("warning:")] == [True]
    # The same pod previewed from a file is not said to be bypassed; nor a live pod that is no
    # training pod (the webhook saw it and left it alone).
    assert not any(s.text.startswith(bypassed) for s in explain(pod, params, labels))
    exporter = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "node-exporter"},
                "spec": {"hostNetwork": True, "containers": [{"name": "e", "image": "node-exporter"}]}}  # fmt: skip
    assert not any(s.text.startswith(bypassed) for s in explain(exporter, params, labels, live=True))


def test_explain_cli_on_a_file() -> None:
    p = cli("explain", "-f", str(GOLDEN / "pytorchjob" / "master-worker-elastic-master-0.yaml"))
    assert p.returncode == 0, p.stdout
    assert "ok  launcher detected: pytorchjob (job pje)" in p.stdout
    assert "ok  this pod's DNS name: pje-master-0" in p.stdout
    p = cli("explain", "-f", str(GOLDEN / "generic" / "plain-pod-no-identity.yaml"))
    # Warnings only: 0, as for a job's pod with the same warnings (one table of exit codes).
    assert p.returncode == 0 and "NO  this pod's DNS name: (none" in p.stdout
    steps = json.loads(
        cli("explain", "-f", str(GOLDEN / "generic" / "plain-pod-no-identity.yaml"), "-o", "json").stdout
    )
    assert {"ok": False, "text": "this pod's DNS name: (none: no hostname+subdomain)"} in steps["steps"]


def test_verify_reads_the_container_the_webhook_trains_in() -> None:
    """A sidecar listed first does not hide the trainer: verify applies the core's own rule."""
    from app.cli.verify import _training_container

    pod = yaml.safe_load((GOLDEN / "generic" / "sidecar-first-entrypoint-trainer.yaml").read_text())
    from app.core import InjectConfig
    from app.core.mutate import training_containers

    (want,) = training_containers(pod, InjectConfig())
    assert pod["spec"]["containers"][0]["name"] != want
    assert _training_container(pod, None)["name"] == want
    assert _training_container(pod, pod["spec"]["containers"][0]["name"]) is pod["spec"]["containers"][0]


def test_a_retry_counter_exceeded_after_small_messages_passed_is_named_a_silent_drop() -> None:
    """The field report's large-frame drop as NCCL shows it: connected (small messages crossed),
    then completion status 12 / "transport retry counter exceeded", whose hint blames the timeout."""
    report = verify((LOGS / "retry-exceeded.log").read_text())
    (path,) = [c for c in report.checks if c.name == "data path"]
    assert not path.ok and "never acknowledged" in path.detail
    assert "drops large frames" in path.hint and "doctor --between" in path.hint
    assert not any(c.name == "data path" for c in verify((LOGS / "good.log").read_text()).checks)


def test_real_nccl_logs_at_warn_and_info_level_get_the_same_verdict() -> None:
    """Both from NCCL 2.28.9 (torch 2.11) on an H200 without RDMA NICs, through the wrapper, one
    process (nranks 1): at INFO level NCCL's own lines say nNodes 1, a run within one node; at WARN
    level only the wrapper's transport line speaks, and the wrapper's line of then did not give the
    node count (it does now: nodes=1), so it reads as sockets."""
    warn_text = (LOGS / "warn-level-h200-socket.log").read_text()
    warn = verify(warn_text)
    info = verify((LOGS / "info-level-h200-socket.log").read_text())
    assert [(c.name, c.ok) for c in warn.checks] == [
        ("transport", False), ("ib devices", False), ("gdrdma channels", False), ("wrapper", True)
    ]  # fmt: skip
    assert warn.checks[0].detail == "Using network Socket (the wrapper's transport line)"
    assert [(c.name, c.ok) for c in info.checks] == [("transport", True), ("wrapper", True)]
    assert info.checks[0].detail == "Using network Socket; NCCL says nNodes 1: no network traffic to judge"
    assert info.verdict == "healthy-single-node"
    # The wrapper's line now carries the node count, and reads the same as NCCL's own lines.
    now = warn_text.replace("gdrdma=0/0 channels", "gdrdma=0/0 channels nodes=1")
    assert verify(now).verdict == "healthy-single-node" and verify(now).ok
    assert " NCCL INFO Using network" not in (LOGS / "warn-level-h200-socket.log").read_text()


def test_one_exit_code_for_a_pod_that_is_not_sent_alone_or_in_a_job(tmp_path: Path) -> None:
    """A Pod without hostNetwork exited 1 and the same pod in a Volcano Job 3: both are 3 (not
    sent to the webhook), as the exit-code table says."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"containers": [{"name": "c", "image": "i", "command": ["torchrun", "t.py"]}]}}  # fmt: skip
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"minAvailable": 2, "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": pod["spec"]}}]}}  # fmt: skip
    for obj in (pod, job):
        f = tmp_path / f"{obj['kind']}.yaml"
        f.write_text(yaml.safe_dump(obj))
        p = cli("explain", "-f", str(f))
        assert p.returncode == 3, (obj["kind"], p.stdout)
