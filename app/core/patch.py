"""The JSON Patch from the raw object the API server sent to the mutated one."""

from __future__ import annotations

from typing import Any

import jsonpatch


def diff(original: dict[str, Any], mutated: dict[str, Any]) -> list[dict[str, Any]]:
    # Diffing raw dicts (never typed models) keeps fields we do not know untouched.
    ops: list[dict[str, Any]] = jsonpatch.make_patch(original, mutated).patch
    return ops


def apply(original: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(original, ops, in_place=False)
    return result
