"""`hostnet-rdma verify` on NCCL's lines as every minor release 2.4 to the newest prints them:
the lines rendered from NCCL's own printf formats at each release tag (tests/nccl-formats/,
made by scripts/nccl_formats.py from NCCL's source; tests/nccl_render.py) for each start-up
scenario, whole, cut at every line and through every launcher's prefix; and the renderer held to
the real runs of tests/nccl-matrix/ on the release they share (2.28.9)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.verify import verify
from app.wrapper import nccllog
from tests.nccl_launchers import PREFIXES, reemit
from tests.nccl_render import _CONV, FORMATS, RCCL, RCCL_RELEASES, RELEASES, SCENARIOS, printf, render, rendered
from tests.test_nccl_matrix import AFTER_START, allowed_for_a_cut

MATRIX = Path(__file__).parent / "nccl-matrix"
SHARED = "v2.28.9-1"  # the NCCL torch 2.11 ships: the matrix's


def expected(tag: str, scenario: str) -> str:
    if scenario == "roce-dmabuf-no-gdr-channel" and "dmabuf" not in FORMATS[tag]:
        return "no-gdrdma"  # before 2.19 NCCL printed no DMA-BUF line: nothing says GPUDirect was possible
    return SCENARIOS[scenario][2]


def test_the_table_covers_every_minor_release_from_its_source() -> None:
    minors = [int(re.match(r"v2\.(\d+)\.", t).group(1)) for t in RELEASES]  # type: ignore[union-attr]
    assert minors == list(range(4, max(minors) + 1)) and max(minors) >= 30
    rows = sum(len(r) for keys in FORMATS.values() for r in keys.values())
    assert rows >= 800
    for tag in RELEASES:
        keys = FORMATS[tag]
        for key in ("bootstrap-using", "bootstrap-no-iface", "socket-using", "ib-no-device", "ib-using",
                    "init-complete", "channel-net", "connect-failed", "ib-completion"):  # fmt: skip
            assert key in keys, (tag, key)
        for rows_ in keys.values():
            for row in rows_:
                assert re.fullmatch(r"src/\S+\.(?:cc|h|cu|c):\d+", row["source"]), row
    # What changed, as the table says it: Init START from 2.18, nNodes from 2.20, "Using network" from 2.6.
    first = {k: next(t for t in RELEASES if k in FORMATS[t]) for k in ("init-start", "nnodes", "using-network")}
    assert first == {"init-start": "v2.18.6-1", "nnodes": "v2.20.5-1", "using-network": "v2.6.4-1"}


CASES = [(tag, sc) for tag in RELEASES for sc in SCENARIOS]


@pytest.mark.parametrize(("tag", "scenario"), CASES)
def test_every_release_every_scenario(tag: str, scenario: str) -> None:
    log = rendered(tag, scenario)
    report = verify(log, expect_wrapper=False)
    want = expected(tag, scenario)
    assert report.verdict == want, f"{tag} {scenario}: {report.verdict}\n{log}\n{report.table()}"
    assert report.ok is want.startswith("healthy-"), f"{tag} {scenario}\n{report.table()}"
    said = report.table()
    if scenario == "roce-dmabuf-no-gdr-channel" and want.startswith("healthy"):
        assert "nvidia-peermem" not in said
    if scenario.startswith(("one-node", "ib-disabled", "net-socket")):
        assert "libibverbs1" not in said and "fell back" not in said


@pytest.mark.parametrize(("tag", "scenario"), CASES)
def test_every_rendered_log_cut_at_every_line(tag: str, scenario: str) -> None:
    lines = rendered(tag, scenario).splitlines()
    whole = expected(tag, scenario)
    for k in range(len(lines)):
        cut = "\n".join(lines[:k])
        said = verify(cut, expect_wrapper=False).verdict
        assert said in allowed_for_a_cut(cut, whole), f"{tag} {scenario} cut at {k}: {said} (whole: {whole})"
        if not whole.startswith("healthy-") and whole not in AFTER_START:
            assert not said.startswith("healthy-"), f"{tag} {scenario} cut at {k} passes"


def _regex(fmt: str) -> re.Pattern[str]:
    """A printf format as a pattern for the lines it prints."""
    out, pos = [], 0
    fmt = re.sub(r"\{[^}]*\}", "", fmt)
    for m in _CONV.finditer(fmt):
        out.append(re.escape(fmt[pos : m.start()]))
        conv = m.group(5)
        out.append(
            "%" if conv == "%" else r"-?\d+" if conv in "diu" else r"(?:0x)?[0-9a-fA-F]+" if conv in "xXp" else ".*?"
        )
        pos = m.end()
    out.append(re.escape(fmt[pos:]))
    return re.compile("".join(out) + r"\s*$")


# The renderer's scenario and the real run of the same scenario (rank 0, NCCL_DEBUG=INFO).
TWINS = {
    "one-node-1gpu": "one-node--info--rank0.log",
    "two-nodes-sockets": "two-nodes-default--info--rank0.log",
    "ib-disabled": "two-nodes-ib-disable--info--rank0.log",
    "net-socket": "two-nodes-net-socket--info--rank0.log",
    "net-plugin-missing": "net-plugin-missing--info--rank0.log",
    "bootstrap-no-iface": "bootstrap-ifname-missing--info--rank0.log",
    "peer-never-comes": "mtu-blackhole--info--rank0.log",  # IB disabled, Init START, then nothing
    "mtu-blackhole-sockets": "mtu-blackhole--info--rank0.log",
}


@pytest.mark.parametrize("scenario", sorted(TWINS))
def test_the_renderer_prints_what_the_real_run_printed(scenario: str) -> None:
    """On the release the GPU machine runs, every line the renderer makes for a scenario has its
    twin in the real run's log: the same format, the same key words; and both read alike."""
    run, steps, _ = SCENARIOS[scenario]
    real = (MATRIX / TWINS[scenario]).read_text(errors="replace").splitlines()
    for line in render(SHARED, steps, run):
        msg = re.split(r" NCCL (?:INFO|WARN) ", line, maxsplit=1)[1]
        rows = [r for keys in FORMATS[SHARED].values() for r in keys if _regex(r["format"]).fullmatch(msg)]
        assert rows, msg
        assert any(_regex(r["format"]).search(x) for r in rows for x in real), f"{scenario}: no real twin of {msg!r}"
    row = json.loads(next(x for x in (MATRIX / "manifest.jsonl").read_text().splitlines() if TWINS[scenario] in x))
    assert verify("\n".join(real), expect_wrapper=False).verdict == row["expected"]
    assert verify(rendered(SHARED, scenario), expect_wrapper=False).verdict == expected(SHARED, scenario)


@st.composite
def rendered_and_reemitted(draw: st.DrawFn) -> tuple[str, str, str, bool]:
    tag, scenario = draw(st.sampled_from(CASES))
    prefix = draw(st.sampled_from(sorted(PREFIXES)))
    lines = reemit(rendered(tag, scenario), 0, prefix)
    is_cut = draw(st.booleans())
    k = draw(st.integers(0, len(lines)))
    return f"{tag} {scenario} {prefix}", "\n".join(lines[:k] if is_cut else lines), expected(tag, scenario), is_cut


def _check(case: tuple[str, str, str, bool]) -> None:
    what, log, whole, is_cut = case
    said = verify(log, expect_wrapper=False).verdict
    if is_cut:
        assert said in allowed_for_a_cut(log, whole), f"{what} cut: {said} (whole: {whole})"
    else:
        assert said == whole, f"{what}: {said} != {whole}"


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(rendered_and_reemitted())
def test_every_release_through_every_prefix(case: tuple[str, str, str, bool]) -> None:
    _check(case)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(rendered_and_reemitted())
def test_every_release_through_every_prefix_many(case: tuple[str, str, str, bool]) -> None:
    _check(case)


OFI_TABLE = Path(__file__).parent / "nccl-formats" / "aws-ofi-nccl.tsv"


def test_every_warning_aws_ofi_nccl_prints_is_named_at_every_release() -> None:
    """aws-ofi-nccl's NCCL_OFI_WARN formats, v1.5 to v1.21 (its source at each minor's newest tag):
    each one, rendered as NCCL's logger prints it, is named as the EFA/libfabric plugin's error;
    within one node it is a note, never the run's failure."""
    with OFI_TABLE.open() as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if r["key"] == "ofi-warn"]
    tags = {r["tag"] for r in rows}
    assert len(tags) >= 17 and "v1.5.0-aws" in tags and len({r["format"] for r in rows}) >= 600
    run = {"rank": 0, "nranks": 2, "nodes": 2, "addr": "10.0.0.1", "ifname": "eth0", "net": "Libfabric", "comm_id": 1}
    one_node = "\n".join(rendered(SHARED, "one-node-2gpu-p2p").splitlines())
    for r in rows:
        msg = printf(r["format"], r["args"].split(" | ") if r["args"] else [], run)
        line = f"h:1:1 [0] {r['source'].rsplit('/', 1)[-1]} NCCL WARN {msg}"
        assert "ofi-error" in {p.kind for p in nccllog.problems(line)}, (r["tag"], r["source"], msg)
    report = verify(one_node + "\n" + line, expect_wrapper=False)
    assert report.verdict == "healthy-single-node" and report.ok, report.table()


RCCL_CASES = [(tag, sc) for tag in RCCL_RELEASES for sc in SCENARIOS]


@pytest.mark.parametrize(("tag", "scenario"), RCCL_CASES)
def test_rccl_reads_as_nccl_at_every_rocm_release(tag: str, scenario: str) -> None:
    """RCCL (ROCm's NCCL, tests/nccl-formats/rccl.tsv: its source at the newest tag of each ROCm
    minor 4.0 to 6.2) prints these lines through the same macros: the same scenarios read the same."""
    want = SCENARIOS[scenario][2]
    if scenario == "roce-dmabuf-no-gdr-channel" and "dmabuf" not in RCCL[tag]:
        want = "no-gdrdma"
    log = rendered(tag, scenario)
    report = verify(log, expect_wrapper=False)
    assert report.verdict == want, f"{tag} {scenario}: {report.verdict}\n{log}\n{report.table()}"
    if scenario.startswith("one-node"):
        assert report.ok and "libibverbs1" not in report.table()
