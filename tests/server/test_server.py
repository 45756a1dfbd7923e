"""Tier 2: the real server over TLS. Hostile input, UID echo, patch == CLI preview,
concurrency, TLS version floor, cert rotation under load, config reload, fuzz."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
import yaml
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.wrap import settings_of
from app.webhook import tls
from app.wrapper import rules
from tests.server.conftest import ROOT, Server

pytestmark = pytest.mark.server

GOLDEN = ROOT / "tests" / "golden"
POD = yaml.safe_load((GOLDEN / "volcano" / "plain-c10d-worker-1.yaml").read_text())


def review(
    pod: dict[str, Any] | None = None, uid: str = "6a1b9c3e-0000-4000-8000-000000000001", **req: Any
) -> dict[str, Any]:
    pod = POD if pod is None else pod
    request = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": (pod.get("metadata") or {}).get("namespace", "default"),
        "operation": "CREATE",
        "object": pod,
        **req,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def post(client: httpx.Client, body: Any, content_type: str = "application/json") -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/mutate", content=data, headers={"content-type": content_type})


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(pod, ops)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ health, metrics


def test_health_ready_metrics(server: Server) -> None:
    with server.client() as c:
        assert c.get("/healthz").text == "ok"
        assert c.get("/readyz").status_code == 200
        post(c, review())
        m = c.get("/metrics").text
    assert 'hostnet_rdma_admission_requests_total{launcher="volcano",outcome="mutated"}' in m
    assert "hostnet_rdma_admission_duration_seconds_bucket" in m
    expiry = float(
        next(line.split()[1] for line in m.splitlines() if line.startswith("hostnet_rdma_certificate_expiry"))
    )
    assert expiry > time.time() + 300 * 86400


# ------------------------------------------------------------------ hostile input


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"", 400, "empty body: expected an admission.k8s.io/v1 AdmissionReview"),
        (b"{not json", 400, "body is not JSON: expected an admission.k8s.io/v1 AdmissionReview"),
        (b"[1, 2]", 400, "body is not a JSON object"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
            400,
            "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got 'admission.k8s.io/v1beta1' 'AdmissionReview'",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            400,
            "AdmissionReview has no request",
        ),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"object": {}}}
            ).encode(),
            400,
            "AdmissionReview request has no uid",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "u", "operation": "CREATE"},
                }
            ).encode(),
            400,
            "AdmissionReview request has no object",
        ),
    ],
    ids=["empty", "not-json", "not-object", "wrong-version", "no-request", "no-uid", "no-object"],
)
def test_malformed_reviews_are_400_with_a_reason(server: Server, body: bytes, status: int, reason: str) -> None:
    with server.client() as c:
        r = post(c, body)
    assert r.status_code == status
    assert r.json() == {"error": reason}


def test_wrong_content_type_is_415(server: Server) -> None:
    with server.client() as c:
        r = post(c, review(), content_type="text/plain")
    assert r.status_code == 415
    assert r.json() == {"error": "content type must be application/json, got 'text/plain'"}


def test_oversized_body_is_413(server: Server) -> None:
    big = b'{"pad": "' + b"x" * (7 * 1024 * 1024) + b'"}'
    with server.client() as c:
        r = post(c, big)
    assert r.status_code == 413
    assert r.json() == {"error": "body over 7340032 bytes"}


def test_unsupported_pod_is_allowed_unchanged_with_a_warning(server: Server) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"hostNetwork": True, "containers": "oops"},
    }
    with server.client() as c:
        r = post(c, review(pod, uid="u-unsupported"))
    assert r.status_code == 200
    resp = r.json()["response"]
    assert resp["uid"] == "u-unsupported" and resp["allowed"] is True and "patch" not in resp
    assert resp["warnings"] == ["hostnet-rdma: pod left unchanged: spec.containers is missing or empty"]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_other_operations_are_allowed_unchanged(server: Server, operation: str) -> None:
    with server.client() as c:
        resp = post(c, review(uid=f"u-{operation}", operation=operation)).json()["response"]
    assert resp == {"uid": f"u-{operation}", "allowed": True}


def test_not_hostnetwork_is_allowed_without_patch(server: Server) -> None:
    pod = yaml.safe_load((GOLDEN / "generic" / "not-hostnetwork.yaml").read_text())
    with server.client() as c:
        resp = post(c, review(pod, uid="u-plain")).json()["response"]
    assert resp == {"uid": "u-plain", "allowed": True}


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_below_1_2_is_refused(server: Server) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(server.cert_dir / tls.CA_FILE))
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with contextlib.suppress(ssl.SSLError):
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", server.port)) as raw, pytest.raises(ssl.SSLError):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1")


# ------------------------------------------------------------------ correct answers


def test_uid_echo_and_patch_equals_cli_preview(server: Server, tmp_path: Path) -> None:
    with server.client() as c:
        r = post(c, review(uid="d2c1b0a9-1234-4000-8000-00000000abcd"))
    body = r.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    resp = body["response"]
    assert resp["uid"] == "d2c1b0a9-1234-4000-8000-00000000abcd" and resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    got = patched(POD, resp)
    # The CLI preview with the same cluster config gives the very same pod.
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(POD))
    # The server's file as its ConfigMap (a file without a wrapper image would be read as the
    # chart's config block, which always has one).
    cm = tmp_path / "cm.yaml"
    cm.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hostnet-rdma-config"},
                                  "data": {"config.yaml": server.config.read_text()}}))  # fmt: skip
    cli = subprocess.run(
        [sys.executable, "-m", "app.cli", "mutate", "-f", str(pod_file), "-o", "json", "--config", str(cm)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    assert got == json.loads(cli.stdout)
    assert got["spec"]["volumes"][-2]["emptyDir"]["sizeLimit"] == "16Gi"  # from the server's config file


def test_every_golden_pod_round_trips(server: Server) -> None:
    with server.client() as c:
        for case in sorted(p for p in GOLDEN.glob("*/*.yaml") if not p.name.endswith(".expected.yaml")):
            pod = yaml.safe_load(case.read_text())
            resp = post(c, review(pod, uid=case.stem)).json()["response"]
            assert resp["uid"] == case.stem and resp["allowed"] is True
            if "patch" in resp:
                once = patched(pod, resp)
                again = post(c, review(once, uid="again")).json()["response"]
                assert "patch" not in again, f"{case}: second pass produced a patch"


def test_200_concurrent_reviews_all_correct(server: Server) -> None:
    async def go() -> list[tuple[str, dict[str, Any]]]:
        limits = httpx.Limits(max_connections=50)
        async with server.async_client(limits=limits) as c:

            async def one(i: int) -> tuple[str, dict[str, Any]]:
                uid = f"c-{i:04d}"
                pod = json.loads(json.dumps(POD))
                pod["metadata"]["name"] = f"ddp-vc-worker-{i}"
                pod["spec"]["hostname"] = f"ddp-vc-worker-{i}"
                r = await c.post(
                    "/mutate", content=json.dumps(review(pod, uid=uid)), headers={"content-type": "application/json"}
                )
                assert r.status_code == 200
                return uid, r.json()["response"]

            return await asyncio.gather(*(one(i) for i in range(200)))

    results = asyncio.run(go())
    assert len(results) == 200
    for uid, resp in results:
        assert resp["uid"] == uid
        i = int(uid.split("-")[1])
        settings = settings_of(patched(POD, resp)["spec"]["containers"][0])
        assert settings is not None
        assert rules.unpack({rules.ENV_POD: settings})["HOSTNET_RDMA_LOCAL_ADDR"] == f"ddp-vc-worker-{i}.ddp-vc"


# ------------------------------------------------------------------ rotation and reload


def _served_cert(port: int, ca_file: Path) -> x509.Certificate:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_cert_rotation_under_load(fresh_server: Server) -> None:
    server = fresh_server
    ca_file = server.cert_dir / tls.CA_FILE
    before = _served_cert(server.port, ca_file).serial_number
    failures: list[str] = []
    done = threading.Event()
    sent = [0]

    def load(worker: int) -> None:
        # New connections keep being opened (and kept alive) while the cert changes.
        n = 0
        while not done.is_set():
            try:
                with server.client() as c:
                    for _ in range(5):
                        uid = f"rot-{worker}-{n}"
                        n += 1
                        r = post(c, review(uid=uid))
                        if r.status_code != 200 or r.json()["response"]["uid"] != uid:
                            failures.append(r.text[:200])
            except Exception as e:
                failures.append(repr(e))
        with lock:
            sent[0] += n

    lock = threading.Lock()
    threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    new = tls.make_serving(server.ca, ["localhost", "127.0.0.1"])
    tls.write_dir(server.cert_dir, new)  # atomic renames, like a Secret update
    deadline = time.monotonic() + 20
    while _served_cert(server.port, ca_file).serial_number == before:
        assert time.monotonic() < deadline, "new certificate not served within 20s"
        time.sleep(0.2)
    time.sleep(1.0)
    # A broken pair is refused; the good one keeps being served.
    (server.cert_dir / tls.CERT_FILE).write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    time.sleep(2.5)
    done.set()
    for t in threads:
        t.join()
    assert sent[0] > 50
    assert failures == []
    after = _served_cert(server.port, ca_file)
    assert after.serial_number == x509.load_pem_x509_certificate(new.cert_pem).serial_number
    assert "not loaded, serving the old one" in server.log.read_text()


def test_config_reload_without_restart(fresh_server: Server) -> None:
    server = fresh_server
    server.config.write_text("inject: {shmSize: 48Gi}\n")
    deadline = time.monotonic() + 20
    with server.client() as c:
        while True:
            vols = patched(POD, post(c, review()).json()["response"])["spec"]["volumes"]
            if any(v.get("emptyDir", {}).get("sizeLimit") == "48Gi" for v in vols):
                break
            assert time.monotonic() < deadline, "config not reloaded"
            time.sleep(0.2)
        # A broken config is refused and the last good one stays in force.
        server.config.write_text("inject: {shmSize: [not, a, size]}\n")
        time.sleep(2.5)
        vols = patched(POD, post(c, review()).json()["response"])["spec"]["volumes"]
        assert any(v.get("emptyDir", {}).get("sizeLimit") == "48Gi" for v in vols)
    assert "config not reloaded, keeping the old one" in server.log.read_text()


def test_one_json_log_line_per_admission(server: Server) -> None:
    with server.client() as c:
        post(c, review(uid="log-me"))
    time.sleep(0.2)
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if '"log-me"' in line]
    assert len(lines) == 1
    entry = lines[0]
    assert entry["msg"] == "admission" and entry["outcome"] == "mutated" and entry["launcher"] == "volcano"
    assert entry["namespace"] == "team-a" and entry["pod"] == "ddp-vc-worker-1" and entry["ms"] > 0


def test_it_runs_on_asyncios_event_loop_not_uvloops(server: Server) -> None:
    """uvloop (uvicorn's default where installed) kept ~30 KB of native memory per TLS connection
    closed under load, without end (BENCHMARKS.md, "Memory under sustained load"): the server
    says which loop it runs, and it is asyncio's."""
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if "event loop" in line]
    assert len(lines) == 1, server.log.read_text()
    assert lines[0]["msg"].startswith("event loop asyncio."), lines[0]
    assert "uvloop" not in lines[0]["msg"]


def test_reviews_take_the_direct_path_in_the_real_server(server: Server) -> None:
    """`serve` hands its protocol the admission handler (protocol.Direct): a review the API
    server sends is answered off the ASGI path, which the server says once."""
    with server.client() as c:
        assert post(c, review()).status_code == 200
    deadline = time.monotonic() + 10
    while "off the ASGI path" not in server.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if "off the ASGI path" in line]
    assert len(lines) == 1, server.log.read_text()[-2000:]


# ------------------------------------------------------------------ fuzz

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _mangle(draw: st.DrawFn) -> bytes:
    base = review()
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return json.dumps(draw(json_values)).encode()
    if choice == 1:
        base["request"]["object"] = draw(json_values)
    elif choice == 2:
        pod = json.loads(json.dumps(POD))
        key = draw(st.sampled_from(["metadata", "spec", "containers", "env", "volumes", "hostNetwork"]))
        target = pod["spec"]["containers"][0] if key in ("env",) else pod["spec"] if key != "metadata" else pod
        target[key] = draw(json_values)
        base["request"]["object"] = pod
    else:
        base["request"][draw(st.sampled_from(["uid", "operation", "kind", "namespace"]))] = draw(json_values)
    return json.dumps(base).encode()


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    return _mangle(draw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_fuzz_no_5xx_no_missing_uid(server: Server, body: bytes) -> None:
    with server.client() as c:
        r = post(c, body)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        sent = json.loads(body)
        resp = r.json()["response"]
        assert resp["uid"] == sent["request"]["uid"] and resp["allowed"] is True
        if "patch" in resp:
            patched(sent["request"]["object"], resp)  # applies cleanly
    else:
        assert set(r.json()) == {"error"}


def test_make_run_dev_mode_serves_healthz_with_its_own_ca(tmp_path: Path) -> None:
    """What `make run` starts (`serve --dev`): a self-signed CA + 127.0.0.1 cert, then healthz."""
    from tests.server.conftest import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--dev", "--port", str(port), "--cert-dir", str(tmp_path / "dev")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ctx = ssl.create_default_context(cafile=str(tmp_path / "dev" / tls.CA_FILE))
                r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ctx, timeout=2)
                break
            except (httpx.TransportError, OSError):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        assert r.status_code == 200 and r.text == "ok"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert f"curl --cacert {tmp_path / 'dev' / tls.CA_FILE} https://127.0.0.1:{port}/healthz" in err.decode()


def test_mutate_only_accepts_post(server: Server) -> None:
    with server.client() as c:
        r = c.get("/mutate")
    assert r.status_code == 405 and r.json() == {"error": "use POST"}


def _read_responses(conn: ssl.SSLSocket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` HTTP/1.1 responses read off one connection, in the order they came."""
    buf, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed after {len(out)} of {count} responses"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        length = int(headers["content-length"])
        while len(buf) < length:
            chunk = conn.recv(65536)
            assert chunk, "connection closed mid-body"
            buf += chunk
        out.append((int(status_line.split()[1]), headers, buf[:length]))
        buf = buf[length:]
    return out


def test_pipelined_requests_are_answered_in_order_across_both_paths(server: Server) -> None:
    """Reviews are answered off the ASGI path (protocol.Direct), every other request on it; one
    connection's answers still come in the order its requests did: here reviews (one with the
    API server's `?timeout=`), a probe, a 415, an oversized one and a malformed one, sent in one
    write."""

    def request(path: str, body: bytes = b"", ctype: str = "application/json", method: str = "POST") -> bytes:
        head = f"{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: {ctype}\r\n"
        return head.encode() + (f"content-length: {len(body)}\r\n\r\n".encode() + body if method == "POST" else b"\r\n")

    uids = [f"6a1b9c3e-0000-4000-8000-00000000010{i}" for i in range(3)]
    # Declared over the server's 7 MiB body bound: answered 413 from its length, its body unsent.
    oversized = b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
    oversized += b"content-length: %d\r\n\r\n" % (8 << 20)
    sent = [
        request("/mutate?timeout=10s", json.dumps(review(uid=uids[0])).encode()),
        request("/healthz", method="GET"),
        request("/mutate", json.dumps(review(uid=uids[1])).encode()),
        request("/mutate", b"{}", ctype="text/plain"),
        request("/mutate", b"not json"),
        request("/mutate", json.dumps(review(uid=uids[2])).encode()),
        oversized,
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw:
        conn = server.trust().wrap_socket(raw, server_hostname="localhost")
        conn.sendall(b"".join(sent))
        got = _read_responses(conn, len(sent))
    statuses = [status for status, _, _ in got]
    assert statuses == [200, 200, 200, 415, 400, 200, 413]
    assert got[1][2] == b"ok"
    answered = [json.loads(body)["response"]["uid"] for status, _, body in got if status == 200 and body != b"ok"]
    assert answered == uids
    assert all(h["content-type"] == "application/json" for _, h, body in got if body != b"ok")
    for _, headers, body in got:
        assert int(headers["content-length"]) == len(body)
