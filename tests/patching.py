"""Apply a JSON Patch as the API server does (RFC 6902, by the `jsonpatch` library): the tests'
independent check of the core's own diff."""

from __future__ import annotations

from typing import Any

import jsonpatch


def apply_patch(original: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(original, ops, in_place=False)
    return result
