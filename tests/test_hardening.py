"""Bad input that used to escape (issue: reliability, item 7 and 5): it gets a clear warning or
error and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from app import config
from app.core import ConfigError, Params, Profile, mutate
from app.webhook import review


def pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "ns", "annotations": annotations},
        "spec": {"hostNetwork": True, "hostname": "p-0", "subdomain": "p",
                 "containers": [{"name": "c", "image": "i", "command": ["torchrun", "t.py"]}]},
    }  # fmt: skip


@pytest.mark.parametrize("raw", ["²", "٣", "1e3", "-1", "65536", " 80"])
def test_rdzv_port_annotation_is_parsed_strictly(raw: str) -> None:
    result = mutate(pod({"hostnet-rdma.io/rdzv-port": raw}), Params(wrapper_payload="x"))
    assert any("is not a port" in w.text for w in result.warnings), result.warnings


def test_profile_env_key_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ConfigError, match="not allowed"):
        Profile.build("p", {"NCCL_FOO\n": "1"})


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_empty_config_file_is_refused(tmp_path: Path, text: str) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match="is empty"):
        config.load(f)


def test_internal_error_outcome_names_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(review, "mutate", boom)
    body = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": "u1", "namespace": "ns", "operation": "CREATE",
                                     "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod({})}})  # fmt: skip
    out = review.answer(body, Params())
    assert out.outcome == "error" and out.namespace == "ns" and out.name == "p-0"
    assert "internal error (RuntimeError)" in out.warnings[0].text


# ---------------------------------------------------------------- amplification (item 1)


def _many(n: int) -> dict[str, Any]:
    p = pod({})
    p["spec"]["containers"] = [{"name": f"c{i}", "image": "i", "command": ["torchrun", "t.py"]} for i in range(n)]
    return p


def _review_body(p: dict[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": "u1", "namespace": "ns", "operation": "CREATE",
                                     "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": p}})  # fmt: skip


def test_too_many_training_containers_is_admitted_unchanged_with_the_bound_named() -> None:
    from app.wrapper import payload

    body = _review_body(_many(200))
    out = review.answer(body, Params(wrapper_payload=payload()))
    assert out.outcome == "unsupported"
    assert "200 training containers, more than the bound of 8" in out.warnings[0].text
    assert b'"patch"' not in out.body and len(out.body) < 2_000  # no amplification: 200 x 14 KB before


def test_patch_over_the_byte_bound_is_admitted_unchanged() -> None:
    from dataclasses import replace

    from app.core import InjectConfig
    from app.wrapper import payload

    params = Params(config=replace(InjectConfig(), max_patch_bytes=64 << 10), wrapper_payload=payload())
    out = review.answer(_review_body(_many(6)), params)  # 6 wrapped containers: ~90 KB of patch
    assert out.outcome == "unsupported" and "over the bound of 65536" in out.warnings[0].text, out.warnings
    assert b'"patch"' not in out.body


def test_config_limits_are_read_and_bounded(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("limits: {maxTrainingContainers: 2, maxPatchBytes: 131072}\n")
    cfg = config.load(f)
    assert (cfg.max_training_containers, cfg.max_patch_bytes) == (2, 131072)
    f.write_text("limits: {maxTrainingContainers: 0}\n")
    with pytest.raises(ConfigError, match=r"limits\.maxTrainingContainers"):
        config.load(f)
