"""The JSON Patch (RFC 6902) from the raw object the API server sent to the mutated one.

We diff raw dicts (never typed models), so fields we do not know stay untouched. The
diff is our own and deliberately plain, so its output is easy to reason about: a patch the
API server cannot apply fails pod creation even with failurePolicy: Ignore (the property
tests check that every patch reproduces the mutated pod exactly). Rules:
dicts recurse key by key; a list that only grew gets `add /-` ops; a list of the same
length recurses per index; any other list change replaces the whole list.
"""

from __future__ import annotations

from typing import Any

Op = dict[str, Any]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


_ABSENT: Any = object()


def _sized(value: Any) -> bool:
    # Two checks, not isinstance(value, list | dict): mypyc compiles these to type tests.
    return isinstance(value, list) or isinstance(value, dict)  # noqa: SIM101


def _diff(old: Any, new: Any, path: str, ops: list[Op]) -> None:
    # Callers guarantee old != new; equal children are skipped with one C-level compare.
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            was = old.get(key, _ABSENT)
            if was is _ABSENT:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": value})
            elif was is value:  # shared by mutate's copy: equal
                continue
            elif (_sized(was) and _sized(value) and len(was) != len(value)) or was != value:
                # Of another length (a list the steps appended to): unequal without a compare.
                _diff(was, value, f"{path}/{_escape(key)}", ops)
        return
    if isinstance(old, list) and isinstance(new, list):
        if len(new) > len(old) and new[: len(old)] == old:
            ops.extend({"op": "add", "path": f"{path}/-", "value": v} for v in new[len(old) :])
            return
        if len(new) == len(old):
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if a != b:
                    _diff(a, b, f"{path}/{i}", ops)
            return
    ops.append({"op": "replace", "path": path, "value": new})


def diff(original: dict[str, Any], mutated: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    # Two dicts: _diff compares key by key, so no whole-object compare up front (the hot
    # path already paid for one in mutate()).
    if (isinstance(original, dict) and isinstance(mutated, dict)) or original != mutated:
        _diff(original, mutated, "", ops)
    return ops
