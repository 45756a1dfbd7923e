"""`hostnet-rdma verify` held to real NCCL runs made for it (tests/nccl-matrix/: NCCL 2.28.9 as
torch 2.11 ships it, on an H100, two namespace "nodes"; scripts/device/nccl-matrix.py made them
and wrote manifest.jsonl: the scenario, the env, how each run ended, and the verdict the scenario
calls for, set from the scenario before verify read the log). Then the same logs re-emitted
through every launcher's prefix (tests/nccl_launchers.py), ranks interleaved and cut at any line:
the verdict never depends on the prefix, and a cut log never passes where the whole one fails."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.verify import verify
from app.wrapper import nccllog
from tests.nccl_launchers import PREFIXES, interleave, reemit

MATRIX = Path(__file__).parent / "nccl-matrix"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in (MATRIX / "manifest.jsonl").read_text().splitlines()]
BY_FILE = {r["file"]: r for r in ROWS}
# What a log cut before its answer may say: that it is cut or stalled, or that it names no network
# yet; or what the cut part already shows (NCCL fell back to sockets, or could not load libibverbs:
# the lines are there, whatever comes next). Never healthy, never another failure's cause.
NOT_YET = ("startup-stall", "no-network", "nccl-error")


# Answers that come after a start-up that went well (a data-path error, GPUDirect judged on the channels):
# a log cut after NCCL's Init COMPLETE and before them shows a healthy start, and reads as one. The limit of
# any reader: those lines are not there yet.
AFTER_START = ("retry-exceeded", "wc-error", "remote-error", "watchdog-timeout", "ib-async-event", "no-gdrdma")


def allowed_for_a_cut(cut: str, whole: str) -> tuple[str, ...]:
    t = nccllog.Transport(cut)
    shown: tuple[str, ...] = ()
    if not t.within_node and not t.sockets_chosen and (t.fallback or t.no_libibverbs):
        shown = ("socket-fallback", "libibverbs-missing") if t.no_libibverbs else ("socket-fallback",)
    started = (f"healthy-{t.net_class}",) if whole in AFTER_START and " - Init COMPLETE" in cut else ()
    return (whole, *NOT_YET, *shown, *started)


@cache
def text(name: str) -> str:
    return (MATRIX / name).read_text(errors="replace")


@cache
def verdict(log: str) -> str:
    return verify(log, expect_wrapper=False).verdict


def test_the_matrix_is_whole() -> None:
    assert sorted(p.name for p in MATRIX.glob("*.log")) == sorted(BY_FILE)
    scenarios = {r["scenario"] for r in ROWS}
    assert {"one-node", "two-nodes-default", "two-nodes-ib-disable", "two-nodes-net-socket", "net-plugin-missing",
            "net-plugin-broken", "bootstrap-ifname-missing", "peer-never-comes", "mtu-blackhole", "duplicate-gpu",
            "two-nodes-ifname-lo"} <= scenarios  # fmt: skip
    assert {r["debug"] for r in ROWS} >= {"info", "warn", "info-init-net", "info-init", "info-file"}
    assert {r["launcher"] for r in ROWS} == {"python", "torchrun"}  # torchrun --tee 3: its real "[default0]:" prefix
    assert all(r["nccl"] == "2.28.9" for r in ROWS) and len(ROWS) >= 183


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_each_real_run_gets_the_verdict_its_scenario_calls_for(name: str) -> None:
    row = BY_FILE[name]
    report = verify(text(name), expect_wrapper=False)
    assert report.verdict == row["expected"], f"{name}: {report.verdict}\n{report.table()}"
    assert report.ok is row["expected"].startswith("healthy-"), f"{name}\n{report.table()}"
    said = report.table()
    # The wrong leads of issue #64: never "install libibverbs" where NCCL loaded it; never nvidia-peermem
    # where no RDMA network was chosen; a run within one node never fails on the network.
    assert "libibverbs1" not in said, name
    assert "nvidia-peermem" not in said, name


def _cut_verdicts(name: str) -> list[tuple[int, str]]:
    lines = text(name).splitlines()
    return [(k, verdict("\n".join(lines[:k]))) for k in range(len(lines) + 1)]


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_a_log_cut_at_any_line_never_passes_a_failure_nor_names_another_cause(name: str) -> None:
    whole = BY_FILE[name]["expected"]
    lines = text(name).splitlines()
    for k, said in _cut_verdicts(name):
        allowed = allowed_for_a_cut("\n".join(lines[:k]), whole)
        assert said in allowed, f"{name} cut at line {k}: {said} (whole: {whole})"
        if k < len(lines) and not whole.startswith("healthy-") and whole not in AFTER_START:
            assert not said.startswith("healthy-"), f"{name} cut at line {k} passes"


def _runs() -> dict[str, list[str]]:
    """Every run's ranks' logs (rank order)."""
    runs: dict[str, list[str]] = {}
    for r in sorted(ROWS, key=lambda r: r["file"]):
        runs.setdefault(r["file"].rsplit("--rank", 1)[0], []).append(r["file"])
    return runs


RUNS = _runs()


def _run_expected(files: list[str]) -> str:
    """Several ranks' lines together: the cause any rank names (a rank's stall follows from its
    peer's error), else a stall, else what the first says."""
    said = [BY_FILE[f]["expected"] for f in files]
    return next((v for v in said if v not in NOT_YET), next((v for v in said if v == "startup-stall"), said[0]))


@st.composite
def reemitted(draw: st.DrawFn) -> tuple[str, str, str, bool]:
    run = draw(st.sampled_from(sorted(RUNS)))
    files = RUNS[run]
    together = len(files) > 1 and draw(st.booleans())
    chosen = files if together else [draw(st.sampled_from(files))]
    prefixes = [draw(st.sampled_from(sorted(PREFIXES))) for _ in chosen]
    ranks = [reemit(text(f), BY_FILE[f]["rank"], p) for f, p in zip(chosen, prefixes, strict=True)]
    order = draw(st.lists(st.integers(0, 3), min_size=1, max_size=40))
    lines = interleave(ranks, order)
    whole = _run_expected(chosen)
    cut = draw(st.integers(0, len(lines)))
    is_cut = draw(st.booleans())
    log = "\n".join(lines[:cut] if is_cut else lines)
    return f"{run} {chosen} {prefixes}", log, whole, is_cut


def _check(case: tuple[str, str, str, bool]) -> None:
    what, log, whole, is_cut = case
    said = verdict(log)
    if is_cut:
        assert said in allowed_for_a_cut(log, whole), f"{what} cut: {said} (whole: {whole})"
    else:
        assert said == whole, f"{what}: {said} != {whole}"


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(reemitted())
def test_the_verdict_never_depends_on_the_launchers_prefix(case: tuple[str, str, str, bool]) -> None:
    _check(case)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(reemitted())
def test_the_verdict_never_depends_on_the_launchers_prefix_many(case: tuple[str, str, str, bool]) -> None:
    _check(case)


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
def test_every_prefix_on_every_whole_log(prefix: str) -> None:
    """Each launcher's shape on each real log, whole: the same verdict as the raw log."""
    for name, row in BY_FILE.items():
        log = "\n".join(reemit(text(name), row["rank"], prefix))
        assert verdict(log) == row["expected"], f"{name} through {prefix}: {verdict(log)}"
