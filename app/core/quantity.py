"""Kubernetes resource quantities (`32Gi`, `500M`, `1.5G`) as bytes. The one parser the core
uses, for the shm size annotation and the memory limits it is compared with."""

from __future__ import annotations

import re

PATTERN = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTOR = {
    None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


_SEEN: dict[str, int | None] = {}  # a cluster uses a handful of sizes; each admission parses ~3


def parse(text: str) -> int | None:
    """Bytes, or None when `text` is not a quantity this parser accepts."""
    if text in _SEEN:
        return _SEEN[text]
    m = PATTERN.fullmatch(text.strip()) if text.isascii() else None
    value = None if m is None else int(float(m.group(1)) * _FACTOR[m.group(2)])
    if len(_SEEN) < 1024:  # bounded: pod specs are user input
        _SEEN[text] = value
    return value
