#!/usr/bin/env python3
"""The hold-out score of `hostnet-rdma verify` (#64): public NCCL logs nobody tuned the reader on,
labelled from their source threads before verify read them (tests/nccl-holdout/README.md).

Runs `hostnet-rdma verify --log FILE --no-wrapper -o json` on each log (in process through the
CLI's own entry point, or the installed command with --subprocess) and compares `ok` and
`verdict` with the label. A benchmark, not a test: it prints the score and exits 0 whatever it
is (2 on a label that names no file). Usage:

    scripts/bench/nccl_holdout.py [--set holdout|corpus|both] [--subprocess] [--json OUT]

`--set corpus` scores the corpus half of the same split (tests/nccl-corpus/added/), which the
reader may be tuned on.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SETS = {
    "holdout": ROOT / "tests" / "nccl-holdout" / "labels.yaml",
    "corpus": ROOT / "tests" / "nccl-corpus" / "added" / "index.yaml",
}
# The classes issue #64 names, reported one by one.
ISSUE_KINDS = ("single-node", "hang", "gdr-off", "wrong-lead", "bootstrap")


def half(url: str) -> str:
    """The split rule of tests/nccl-holdout/README.md: the URL's SHA-256 odd -> hold-out."""
    return "holdout" if int(hashlib.sha256(url.encode()).hexdigest(), 16) % 2 == 1 else "corpus"


def load(name: str) -> list[dict[str, Any]]:
    labels: list[dict[str, Any]] = yaml.safe_load(SETS[name].read_text())
    for label in labels:
        label["path"] = SETS[name].parent / label["file"]
        label["set"] = name
    return labels


def run_verify(path: Path, use_subprocess: bool) -> dict[str, Any]:
    argv = ["verify", "--log", str(path), "--no-wrapper", "-o", "json"]
    if use_subprocess:
        out = subprocess.run(["hostnet-rdma", *argv], capture_output=True, text=True, check=False).stdout
    else:
        from app.cli import main

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(argv)
        out = buf.getvalue()
    report: dict[str, Any] = json.loads(out)
    return report


def judge(expect: dict[str, Any], report: dict[str, Any]) -> tuple[bool, str]:
    """Right when verify's ok is the label's, its verdict one the label accepts, and no failing
    check's hint or detail names a lead the label rules out. Returns (right, why not)."""
    if report["ok"] is not expect["ok"]:
        return False, f"ok={report['ok']}, label says ok={expect['ok']}"
    verdict = report["verdict"]
    accepted = expect["verdict"]
    if accepted == "any-failure":  # a failing verdict, not a healthy one failed on a side check
        if verdict.startswith("healthy-"):
            return False, f"verdict {verdict}, the label asks for a failing one"
        if verdict in expect.get("not_verdict", []):
            return False, f"verdict {verdict} is a lead the thread rules out"
    elif verdict not in accepted:
        return False, f"verdict {verdict}, label accepts {'/'.join(accepted)}"
    said = " ".join(f"{c['hint']} {c['detail']}" for c in report["checks"] if not c["ok"]).lower()
    for word in expect.get("hint_must_not", []):
        if word.lower() in said:
            return False, f"a failing check says {word!r}, a lead the thread rules out"
    return True, ""


def expected_words(expect: dict[str, Any]) -> str:
    verdicts = expect["verdict"] if isinstance(expect["verdict"], str) else "/".join(expect["verdict"])
    return f"{'ok' if expect['ok'] else 'FAIL'} {verdicts}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("holdout", "corpus", "both"), default="holdout")
    ap.add_argument("--subprocess", action="store_true", help="run the installed hostnet-rdma command")
    ap.add_argument("--json", type=Path, help="write the per-log results here")
    args = ap.parse_args()
    names = ["holdout", "corpus"] if args.set == "both" else [args.set]
    results: list[dict[str, Any]] = []
    for name in names:
        for label in load(name):
            if not label["path"].is_file():
                print(f"nccl_holdout: error: {label['path']} (labelled) does not exist", file=sys.stderr)
                return 2
            report = run_verify(label["path"], args.subprocess)
            right, why = judge(label["expect"], report)
            results.append({"set": name, "file": label["file"], "kinds": label["kinds"],
                            "expected": expected_words(label["expect"]),
                            "got": f"{'ok' if report['ok'] else 'FAIL'} {report['verdict']}",
                            "right": right, "why": why})  # fmt: skip
    width = max(len(r["file"]) for r in results)
    for name in names:
        rows = [r for r in results if r["set"] == name]
        print(f"\n{name}: {len(rows)} logs")
        print(f"  {'log'.ljust(width)}  {'label':34}  {'verify':26}  result")
        for r in rows:
            mark = "right" if r["right"] else f"WRONG: {r['why']}"
            print(f"  {r['file'].ljust(width)}  {r['expected'][:34]:34}  {r['got'][:26]:26}  {mark}")
    print()
    for name in names:
        rows = [r for r in results if r["set"] == name]
        score = sum(r["right"] for r in rows)
        print(f"{'hold-out' if name == 'holdout' else 'corpus half'}: {score}/{len(rows)}")
        total: Counter[str] = Counter()
        right: Counter[str] = Counter()
        for r in rows:
            for kind in r["kinds"]:
                total[kind] += 1
                right[kind] += r["right"]
        for kind in [*ISSUE_KINDS, *sorted(set(total) - set(ISSUE_KINDS))]:
            if total[kind]:
                print(f"  {kind}: {right[kind]}/{total[kind]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
