"""The troubleshooting guide (docs/troubleshooting.md) by topic, for `hostnet-rdma help`: every
message of ours that names a cause points at a topic, and a user who installed the package has
no docs/ directory. The wheel carries the file (setup.py copies it in); a source checkout reads
docs/ itself. Pure apart from finding the file."""

from __future__ import annotations

import re
from pathlib import Path

from app.wrapper.rules import help_topic

NAME = "troubleshooting.md"
_HEADING = re.compile(r"^## (.+)$", re.M)


def document() -> str:
    here = Path(__file__).resolve().parent
    for path in (here / NAME, here.parent / "docs" / NAME):
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"{NAME} is not installed with this package")


def sections(text: str) -> dict[str, tuple[str, str]]:
    """topic -> (title, body) of each `## ` section."""
    found: dict[str, tuple[str, str]] = {}
    marks = list(_HEADING.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        title = m.group(1).strip()
        found[help_topic(title.strip("`"))] = (title, text[m.end() : end].strip())
    return found


def find(text: str, query: str) -> list[str]:
    """The topics a query names: the topic itself, else every topic holding all its words."""
    topics = sections(text)
    wanted = help_topic(query)
    if wanted in topics:
        return [wanted]
    words = wanted.split("-")
    if words == [""]:
        return []
    return [t for t in topics if all(any(part.startswith(w) for part in t.split("-")) for w in words)]
