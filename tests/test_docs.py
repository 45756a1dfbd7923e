"""Every `hostnet-rdma` and `kubectl hostnet-rdma` command shown in the README and docs/ is one the
CLI accepts (its flags parse), and those that need no cluster run as shown and succeed. The
commands that need a cluster run in the apiserver and cluster tiers."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from app.cli import PLUGIN_COMMANDS, build_parser
from tests.cliutil import run_cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for page in PAGES:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split(" #", 1)[0].strip()
                try:
                    words = shlex.split(line) if line else []
                except ValueError:  # a kubectl jsonpath with quotes of its own: not ours
                    continue
                if words[:2] == ["kubectl", "hostnet-rdma"]:
                    found.append((f"{page.name}: {line}", ["kubectl", *words[2:]]))
                elif words[:1] == ["hostnet-rdma"]:
                    found.append((f"{page.name}: {line}", words[1:]))
    return found


CASES = commands()


def test_the_docs_show_commands() -> None:
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize(("where", "words"), CASES, ids=[c[0][:80] for c in CASES])
def test_every_command_in_the_docs_parses(where: str, words: list[str]) -> None:
    if words[0] == "kubectl":  # the plugin takes kubectl's flags anywhere; the rest is the command's
        words = _drop_kubectl_flags(words[1:])
        command = next(w for w in words if not w.startswith("-"))
        assert command in PLUGIN_COMMANDS, where
    try:
        build_parser().parse_args(words)
    except SystemExit as e:
        pytest.fail(f"{where}: the CLI rejects it ({e.code})")


def _drop_kubectl_flags(words: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("--kubeconfig", "--context"):
            skip = True
            continue
        out.append(w)
    return out


OFFLINE = [(w, words) for w, words in CASES if words[0] in ("explain", "mutate") and "-f" in words
           and not {"--from-cluster", "--context", "--kubeconfig"} & set(words)
           and (ROOT / words[words.index("-f") + 1]).exists()]  # fmt: skip


@pytest.mark.parametrize(("where", "words"), OFFLINE, ids=[c[0][:80] for c in OFFLINE])
def test_the_commands_that_need_no_cluster_run_as_shown(where: str, words: list[str]) -> None:
    p = run_cli(*words)
    assert p.returncode == 0, f"{where}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to `-`."""
    import re

    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    """Four relative links were broken (docs/ pages linking as if from the repository's root)."""
    import re

    pages = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken: list[str] = []
    for page in pages:
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
