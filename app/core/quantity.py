"""Kubernetes resource quantities (`32Gi`, `500M`, `1.5G`) as bytes. The one parser the core
uses, for the shm size annotation and the memory limits it is compared with."""

from __future__ import annotations

import re

PATTERN = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTOR = {
    None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


# A cluster uses a handful of sizes; each admission parses ~3. Bounded in entries and in key
# length: these strings are user input (an annotation may be megabytes).
_SEEN: dict[str, int | None] = {}
_SEEN_MAX_ENTRIES = 1024
_SEEN_MAX_LENGTH = 32


def parse(text: str) -> int | None:
    """Bytes, or None when `text` is not a quantity this parser accepts."""
    if text in _SEEN:
        return _SEEN[text]
    m = PATTERN.fullmatch(text.strip()) if text.isascii() else None
    try:
        value = None if m is None else int(float(m.group(1)) * _FACTOR[m.group(2)])
    except OverflowError:  # more digits than a float holds: no size anyone means
        value = None
    if len(_SEEN) < _SEEN_MAX_ENTRIES and len(text) <= _SEEN_MAX_LENGTH:
        _SEEN[text] = value
    return value
