"""The public NCCL logs of issue #64's split (tests/nccl-holdout/README.md): the split obeys its
rule, every log has its label and source line, and the score script runs. The score itself is a
benchmark (BENCHMARKS.md), not asserted here: the hold-out is never edited to make verify pass."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "bench" / "nccl_holdout.py"
SOURCES: list[dict[str, Any]] = yaml.safe_load((ROOT / "tests" / "nccl-holdout" / "sources.yaml").read_text())


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nccl_holdout", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_source_sits_in_the_half_its_url_hash_gives() -> None:
    nccl_holdout = bench()
    urls = [s["url"] for s in SOURCES]
    assert len(urls) == len(set(urls)) >= 44
    for s in SOURCES:
        assert s["half"] == nccl_holdout.half(s["url"]), s["url"]
        # Logs, or why it gave none, or (between the commit listing a batch and the one cutting it) pending.
        assert [k in s for k in ("logs", "dropped", "pending")].count(True) == 1, s["url"]


@pytest.mark.parametrize("name", ["holdout", "corpus"])
def test_every_log_has_a_label_a_source_line_and_the_right_half(name: str) -> None:
    nccl_holdout = bench()
    labels = nccl_holdout.load(name)
    folder = nccl_holdout.SETS[name].parent
    assert sorted(p.name for p in folder.glob("*.log")) == sorted(lb["file"] for lb in labels)
    by_url = {s["url"]: s for s in SOURCES}
    for lb in labels:
        first = lb["path"].read_text().splitlines()[0]
        assert first.startswith(f"# Source: {lb['source']} (") and "Verbatim below this line" in first, lb["file"]
        assert by_url[lb["source"]]["half"] == name and lb["file"] in by_url[lb["source"]]["logs"], lb["file"]
        expect = lb["expect"]
        assert isinstance(expect["ok"], bool) and expect["verdict"], lb["file"]
        assert expect["verdict"] == "any-failure" or isinstance(expect["verdict"], list), lb["file"]
        assert not (expect["ok"] and expect["verdict"] == "any-failure"), lb["file"]


def test_judge_holds_verify_to_ok_verdict_and_ruled_out_leads() -> None:
    judge = bench().judge

    def report(ok: bool, verdict: str, hint: str = "") -> dict[str, Any]:
        return {"ok": ok, "verdict": verdict, "checks": [{"ok": ok, "hint": hint, "detail": ""}]}

    stall = {"ok": False, "verdict": ["startup-stall", "no-network"], "hint_must_not": ["fell back to sockets"]}
    assert judge(stall, report(False, "no-network")) == (True, "")
    assert not judge(stall, report(True, "healthy-verbs"))[0]  # a cut log that passes
    assert not judge(stall, report(False, "socket-fallback"))[0]  # a verdict the label does not accept
    assert not judge(stall, report(False, "startup-stall", "NCCL fell back to sockets"))[0]  # a ruled-out lead
    hang = {"ok": False, "verdict": "any-failure", "not_verdict": ["libibverbs-missing"]}
    assert judge(hang, report(False, "startup-stall"))[0]
    assert not judge(hang, report(False, "libibverbs-missing"))[0]
    assert not judge(hang, report(True, "healthy-verbs"))[0]
    assert not judge(hang, report(False, "healthy-socket"))[0]  # ok false on a side check is no failing verdict


def test_the_score_script_runs_and_prints_a_score() -> None:
    """A smoke test of the benchmark (make check): it runs on today's reader and says a score."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--set", "both"], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout  # fmt: skip
    for name, title in (("holdout", "hold-out"), ("corpus", "corpus half")):
        score = re.search(rf"^{title}: (\d+)/(\d+)$", out, re.M)
        assert score, out
        assert int(score[2]) == len(bench().load(name)) >= int(score[1]), out
