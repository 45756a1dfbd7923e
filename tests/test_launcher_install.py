"""The cluster tier's launcher install (tests/cluster/launchers.py) recovering from
cert-controller's stale-Secret race, without a cluster: kubectl and `rollout status` are
stood in for, so the restart-once path runs here on every `make test` (the race itself is rare
on the real cluster)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.cluster import launchers

RACE_LOG = (
    "ERROR\tcert-rotation\t" + launchers.CERT_RACE[0] + '\t{"error": "Cert secret is not well-formed, missing ca.crt"}'
)
# Trainer v2.3.0's form of it (its log, read on the test cluster): the refresh lost to its own first write.
CONFLICT_LOG = (
    '{"level":"error","logger":"cert-rotation","msg":"could not refresh CA and server certs","error":'
    '"Operation cannot be fulfilled on secrets \\"kubeflow-trainer-webhook-cert\\": the object has been '
    'modified; please apply your changes to the latest version and try again"}'
)


class FakeCluster:
    """Records kubectl calls; `logs` answers with the given text."""

    def __init__(self, log_text: str) -> None:
        self.log_text = log_text
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, check: bool = True, **_: Any) -> str:
        self.calls.append(args)
        return self.log_text if args[0] == "logs" else ""


def _rollouts(monkeypatch: pytest.MonkeyPatch, outcomes: list[int]) -> list[int]:
    timeouts: list[int] = []

    def fake(c: Any, ctl: launchers.Controller, dep: str, timeout: int) -> subprocess.CompletedProcess[str]:
        timeouts.append(timeout)
        rc = outcomes.pop(0) if outcomes else 1
        return subprocess.CompletedProcess([], rc, "", "timed out waiting for the condition")

    monkeypatch.setattr(launchers, "rollout", fake)
    return timeouts


CTL = launchers.CONTROLLERS["jobset"]


@pytest.mark.parametrize("text", [RACE_LOG, CONFLICT_LOG], ids=["not-well-formed", "conflict"])
def test_the_stale_secret_race_is_met_by_one_restart(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    c = FakeCluster(text)
    timeouts = _rollouts(monkeypatch, [1, 0])
    launchers.wait_ready(c, CTL, "jobset-controller-manager", timeout=60, patience=0)  # type: ignore[arg-type]
    assert ("rollout", "restart", "deploy/jobset-controller-manager", "-n", "jobset-system") in c.calls
    assert timeouts == [10, 10], "restarted after a short wait, not a fixed long one"


def test_a_race_line_in_a_deployment_that_becomes_ready_by_itself_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two replicas both write the Secret at start; one logs the conflict and all is well (LWS,
    seen on the test cluster): no restart within the patience."""
    c = FakeCluster(CONFLICT_LOG)
    _rollouts(monkeypatch, [1, 1, 0])
    launchers.wait_ready(c, CTL, "jobset-controller-manager", timeout=60, patience=30)  # type: ignore[arg-type]
    assert not [a for a in c.calls if a[:2] == ("rollout", "restart")]


def test_any_other_unready_controller_fails_without_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    c = FakeCluster("ERROR\tsetup\tunable to start manager")
    _rollouts(monkeypatch, [1])
    with pytest.raises(RuntimeError, match="jobset: deployment jobset-controller-manager not ready"):
        launchers.wait_ready(c, CTL, "jobset-controller-manager", timeout=0)  # type: ignore[arg-type]
    assert not [a for a in c.calls if a[:2] == ("rollout", "restart")]


def test_a_restart_that_does_not_help_fails_and_restarts_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    c = FakeCluster(RACE_LOG)
    _rollouts(monkeypatch, [])
    with pytest.raises(RuntimeError, match="not ready"):
        launchers.wait_ready(c, CTL, "jobset-controller-manager", timeout=0.5, patience=0)  # type: ignore[arg-type]
    assert len([a for a in c.calls if a[:2] == ("rollout", "restart")]) == 1


def test_the_launchers_pins_are_one_file_both_sides_read() -> None:
    """build-launchers.sh builds, and launchers.py installs and runs, what
    scripts/testenv/launchers.pins names: no version is written in the script, each controller
    runs the binary its pin builds, and the pinned Volcano has its source snapshot in
    third_party/ (this project's module proxy refuses Volcano)."""
    root = launchers.PINS_FILE.parents[2]
    script = (root / "scripts" / "testenv" / "build-launchers.sh").read_text()
    assert "launchers.pins" in script
    for module, version in launchers.PINS.values():
        assert version not in script, (module, version)
    for name, ctl in launchers.CONTROLLERS.items():
        assert (ctl.module, ctl.version) == launchers.PINS[name]
        assert ctl.binary == f"{name}-{launchers.PINS[name][1]}"  # the name build-launchers.sh gives it
    assert (root / "third_party" / f"volcano-{launchers.VOLCANO}-src.tar.gz").is_file()
