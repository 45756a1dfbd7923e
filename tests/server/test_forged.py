"""Forged reviews against the real server over TLS (issue #63, finding 7): nested a thousand
levels deep, or with a field of the wrong JSON type, never a 500 or a traceback: HTTP 400 with a
reason for a malformed envelope, the pod allowed unchanged with a warning that names the field."""

from __future__ import annotations

import json

import pytest

from tests.server.conftest import Server
from tests.server.test_server import POD, post, review

pytestmark = pytest.mark.server


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_an_envelope_nested_a_thousand_deep_is_a_400_with_a_reason(server: Server) -> None:
    body = json.dumps(review()).replace('"admission.k8s.io/v1"', deep(1000), 1).encode()
    with server.client() as c:
        r = post(c, body)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got a list "
                                 "'AdmissionReview'"}  # fmt: skip
    assert "Traceback" not in server.log.read_text()


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("metadata", "name"), deep(990), "metadata.name is not a string"),
        (("spec", "nodeSelector"), '{"node.kubernetes.io/instance-type": ["x"]}', "spec.nodeSelector is not an object of strings"),
        (("spec", "containers", 0, "resources"), "[]", "container worker: resources is not an object"),
        (("spec", "containers", 0, "env"), '[{"name": "A", "value": ' + deep(990) + "}]",
         "container worker: env is nested more than 32 levels deep"),
    ],
)  # fmt: skip
def test_a_mistyped_pod_is_allowed_unchanged_with_the_field_named(
    server: Server, path: tuple[object, ...], value: str, reason: str
) -> None:
    pod = json.loads(json.dumps(POD))
    where = pod
    for key in path[:-1]:
        where = where[key]  # type: ignore[index]
    where[path[-1]] = "@FORGED@"  # type: ignore[index]
    body = json.dumps(review(pod, uid="forged")).replace('"@FORGED@"', value).encode()
    with server.client() as c:
        r = post(c, body)
    assert r.status_code == 200, r.text
    response = r.json()["response"]
    assert response["uid"] == "forged" and response["allowed"] is True and "patch" not in response
    assert response["warnings"] == [f"hostnet-rdma: pod left unchanged: {reason}"]
