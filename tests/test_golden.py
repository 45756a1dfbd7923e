"""Golden files: tests/golden/<launcher>/<case>.yaml -> <case>.expected.yaml, with the built-in
config (no wrapper image, so the wrapper is inlined); tests/golden-init/<case>.yaml with the
wrapper copied by an init container from the webhook's image, tests/golden-image/<case>.yaml
with the wrapper image (its files at the root) mounted as a volume (DELIVERY_CONFIGS).

REFRESH_GOLDEN=1 rewrites the expected files. Each case also applies the JSON Patch to the
input (what the API server does) and checks that a second pass changes nothing.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import config
from app.core import Params, mutate
from app.core import patch as jp
from tests.patching import apply_patch

GOLDEN = Path(__file__).parent / "golden"
DELIVERY_CONFIGS = {
    Path(__file__).parent / f"golden-{suffix}": config.from_dict({"wrapper": {"delivery": delivery, "image": image}})
    for suffix, delivery, image in (
        ("init", "initContainer", "registry.example/hostnet-rdma:0.1.0"),
        ("image", "imageVolume", "registry.example/hostnet-rdma-wrapper:0.1.0"),
    )
}
INPUTS = sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml"))
DELIVERY_INPUTS = sorted(p for d in DELIVERY_CONFIGS for p in d.glob("*.yaml") if not p.name.endswith(".expected.yaml"))
REFRESH = os.environ.get("REFRESH_GOLDEN", "") not in ("", "0", "false")
# A fixed stand-in keeps golden files readable and stable when the wrapper source changes.
PAYLOAD = "<wrapper-payload>"


def params_for(pod: dict[str, Any], case: Path | None = None) -> Params:
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    if case is not None and case.parent in DELIVERY_CONFIGS:
        return Params(config=DELIVERY_CONFIGS[case.parent], namespace=ns, wrapper_payload=PAYLOAD, version="test")
    return Params(namespace=ns, wrapper_payload=PAYLOAD, version="test")


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=1 << 20)


def expected_path(case: Path) -> Path:
    return case.with_name(case.name[: -len(".yaml")] + ".expected.yaml")


@pytest.mark.parametrize("case", INPUTS + DELIVERY_INPUTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden(case: Path) -> None:
    pod = yaml.safe_load(case.read_text())
    result = mutate(pod, params_for(pod, case))
    # Why nothing was done, for the cases where nothing was.
    got = dump(
        {
            "warnings": [w.text for w in result.warnings],
            **({"reason": result.reason} if result.reason else {}),
            "pod": result.pod,
        }
    )
    exp_file = expected_path(case)
    if REFRESH or not exp_file.exists():
        if not REFRESH:
            pytest.fail(f"{exp_file} is missing; run with REFRESH_GOLDEN=1 to create it")
        exp_file.write_text(got)
    want = exp_file.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(exp_file), "got"))
        pytest.fail(f"golden mismatch for {case.name} (REFRESH_GOLDEN=1 to accept):\n{diff}")

    # The API server applies our patch to what it sent us: the result must be the same pod.
    ops = jp.diff(pod, result.pod)
    assert apply_patch(pod, ops) == result.pod
    # Idempotency: reinvocation and re-submission happen for real.
    again = mutate(result.pod, params_for(result.pod, case))
    assert again.pod == result.pod, "second pass changed the pod"
    assert jp.diff(result.pod, again.pod) == []


def test_no_stale_goldens() -> None:
    inputs = {expected_path(p) for p in INPUTS + DELIVERY_INPUTS}
    expected = [*GOLDEN.glob("*/*.expected.yaml"), *(p for d in DELIVERY_CONFIGS for p in d.glob("*.expected.yaml"))]
    stale = [str(p) for p in expected if p not in inputs]
    assert not stale, f"expected files without an input case: {stale}"


def test_golden_pods_are_named_apart() -> None:
    """The API-server tier creates every golden pod in one namespace (tests/apiserver): two of the
    same name make the second a 409 there, far from here."""
    names: dict[str, str] = {}
    for case in INPUTS:
        meta = yaml.safe_load(case.read_text()).get("metadata") or {}
        name = meta.get("name") or ""
        if name:
            assert name not in names, f"{case} and {names[name]} both name a pod {name}"
            names[name] = str(case)


def test_every_launcher_has_cases() -> None:
    dirs = {p.parent.name for p in INPUTS}
    assert {"volcano", "pytorchjob", "trainjob", "jobset", "lws", "generic"} <= dirs
