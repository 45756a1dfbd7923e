"""`hostnet-rdma serve` with the review replaced by a fixed answer of a typical size (a 2 KB
patched-pod response): what the server around `answer()` costs (protocol, batching, metrics,
the log line, TLS), beside the Python floors (scripts/bench/layers.py). Run it with a compiled
tree as the working directory, with serve's arguments."""

from __future__ import annotations

import sys
from typing import Any

import orjson

import app.webhook.server as server
from app.cli import main
from app.webhook.review import ReviewResult

BODY = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "response": {"uid": "fixed", "allowed": True, "patchType": "JSONPatch", "patch": "A" * 1900}})  # fmt: skip


def fixed(body: bytes, params: Any) -> ReviewResult:
    return ReviewResult(BODY, "mutated", launcher="volcano", uid="fixed", namespace="default", name="pod-0")


server.answer = fixed  # type: ignore[attr-defined]  # the handler reads it at each review, on both paths
sys.exit(main())
