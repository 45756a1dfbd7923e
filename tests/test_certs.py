"""Certificates: SANs for a Service and for a webhook reached by IP, and when the
self-managed mode decides to issue a new serving certificate (no API server needed)."""

from __future__ import annotations

import datetime as dt
import time
import types
from pathlib import Path
from typing import Any

import pytest

from app import kube
from app.webhook import tls


def certs(tmp_path: Path, extra: tuple[str, ...] = ()) -> kube.SelfManagedCerts:
    # The API client is not used by the pure checks below.
    return kube.SelfManagedCerts(None, "hr", "hr-tls", "hostnet-rdma", "hostnet-rdma", tmp_path, extra_hosts=extra)  # type: ignore[arg-type]


def data(pair: tls.Pair) -> dict[str, str]:
    return {tls.CERT_FILE: kube._b64(pair.cert_pem), tls.KEY_FILE: kube._b64(pair.key_pem)}


def test_serving_cert_carries_dns_and_ip_names() -> None:
    ca = tls.make_ca()
    pair = tls.make_serving(ca, [*tls.service_names("svc", "ns"), "127.0.0.1", "::1"])
    assert kube._sans(pair.cert_pem) == {"svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local", "127.0.0.1", "::1"}


def test_fresh_matching_cert_is_kept(tmp_path: Path) -> None:
    c = certs(tmp_path, ("127.0.0.1",))
    assert c._needs_new_serving(data(tls.make_serving(tls.make_ca(), c.hosts))) is None


def test_cert_missing_an_ip_san_is_replaced(tmp_path: Path) -> None:
    c = certs(tmp_path, ("127.0.0.1",))
    without_ip = tls.make_serving(tls.make_ca(), tls.service_names("hostnet-rdma", "hr"))
    assert c._needs_new_serving(data(without_ip)) == "serving certificate names do not match the Service"


def test_cert_close_to_expiry_is_replaced(tmp_path: Path) -> None:
    c = certs(tmp_path)
    short = tls.make_serving(tls.make_ca(), c.hosts, days=10)
    assert c._needs_new_serving(data(short)) == "serving certificate expires in 9 days"


def test_unreadable_cert_is_replaced(tmp_path: Path) -> None:
    assert certs(tmp_path)._needs_new_serving({tls.CERT_FILE: "bm90IGEgY2VydA=="}) == "unreadable serving certificate"


def test_dev_certs_are_reused_while_valid(tmp_path: Path) -> None:
    tls.dev_certs(tmp_path)
    first = (tmp_path / tls.CERT_FILE).read_bytes()
    tls.dev_certs(tmp_path)
    assert (tmp_path / tls.CERT_FILE).read_bytes() == first
    assert tls.not_after(first) - dt.datetime.now(dt.UTC) > dt.timedelta(days=300)


# ---------------------------------------------------------------- reload refuses unchecked pairs


def _expired(ca: tls.Pair, hosts: list[str]) -> tls.Pair:
    """A pair signed by `ca` whose validity ended yesterday."""
    from cryptography import x509

    from tests.certutil import signed

    sans = x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts])
    return signed(ca, hosts[0], (-dt.timedelta(days=30), -dt.timedelta(days=1)), (sans,))


NAMES = ("svc", "svc.ns", "svc.ns.svc")


def _serving(tmp_path: Path) -> tuple[tls.Pair, tls.ReloadingCert]:
    ca = tls.make_ca()
    tls.write_dir(tmp_path, tls.make_serving(ca, list(NAMES)), ca)
    return ca, tls.ReloadingCert(tmp_path, names=NAMES)


def test_reload_accepts_a_rotation_by_the_same_ca(tmp_path: Path) -> None:
    ca, cert = _serving(tmp_path)
    tls.write_dir(tmp_path, tls.make_serving(ca, list(NAMES)))
    assert cert.check() and cert.reloads == 1 and cert.refused == 0


def test_reload_refuses_a_pair_from_another_ca(tmp_path: Path) -> None:
    _, cert = _serving(tmp_path)
    before = cert.expiry
    tls.write_dir(tmp_path, tls.make_serving(tls.make_ca("someone-else"), list(NAMES)))
    assert not cert.check()
    assert cert.refused == 1 and cert.reloads == 0 and cert.expiry == before


def test_reload_refuses_an_expired_pair(tmp_path: Path) -> None:
    ca, cert = _serving(tmp_path)
    tls.write_dir(tmp_path, _expired(ca, list(NAMES)))
    assert not cert.check() and cert.refused == 1


def test_reload_refuses_a_pair_for_other_names(tmp_path: Path) -> None:
    ca, cert = _serving(tmp_path)
    tls.write_dir(tmp_path, tls.make_serving(ca, ["other.example"]))
    assert not cert.check() and cert.refused == 1
    assert tls.check_pair((tmp_path / tls.CERT_FILE).read_bytes(), tmp_path / tls.CA_FILE, NAMES) == (
        "not valid for svc, svc.ns, svc.ns.svc"
    )


def test_a_pair_refused_for_a_passing_reason_is_loaded_once_it_passes(tmp_path: Path, monkeypatch: Any) -> None:
    """Clock skew beyond the 5-minute backdating: the new pair is "not valid before" for this
    replica. Refused (once in the log and the count), it is tried again at every poll and served
    as soon as it is valid; the old code recorded it as seen and never looked at it again."""
    skew = [dt.timedelta(minutes=10)]

    class Skewed(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return dt.datetime.now(tz) - skew[0]

    ca = tls.make_ca()
    tls.write_dir(tmp_path, tls.make_serving(ca, ["127.0.0.1"]), ca)
    cert = tls.ReloadingCert(tmp_path, names=("127.0.0.1",))
    new = tls.make_serving(ca, ["127.0.0.1"], days=100)  # by a replica whose clock is right
    monkeypatch.setattr(tls, "dt", types.SimpleNamespace(datetime=Skewed, UTC=dt.UTC, timedelta=dt.timedelta))
    tls.write_dir(tmp_path, new, ca)
    assert cert.check() is False and cert.refused == 1
    assert cert.check() is False and cert.refused == 1  # said once, tried each time
    skew[0] = dt.timedelta(0)  # the clock caught up
    assert cert.check() is True and cert.expiry == tls.not_after(new.cert_pem)


def test_readiness_fails_while_the_served_certificate_is_expired() -> None:
    import asyncio

    import httpx

    from app.webhook.server import create_app
    from app.webhook.settings import ServerSettings

    async def ready(expiry: float) -> httpx.Response:
        app = create_app(ServerSettings(config=None), cert_expiry=lambda: expiry)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
            return await c.get("/readyz")

    ok = asyncio.run(ready(time.time() + 3600))
    expired = asyncio.run(ready(time.time() - 60))
    assert ok.status_code == 200
    assert expired.status_code == 503 and "serving certificate expired" in expired.text


@pytest.mark.slow
def test_every_kubernetes_call_is_bounded_in_time(tmp_path: Path, monkeypatch: Any) -> None:
    """A black-holed API server (it accepts, never answers): the self-managed certificates'
    start-up and the CLI's calls give up within the client's timeout instead of hanging."""
    import json
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(listener.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{listener.getsockname()[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    monkeypatch.setattr(kube, "TIMEOUT", (0.5, 0.5))
    api = kube.api_client(str(kubeconfig))
    for call in (lambda: kube.read_pod(api, "ns", "p"),
                 lambda: kube.SelfManagedCerts(api, "hr", "hr-tls", "svc", "hook", tmp_path / "tls").ensure(),
                 lambda: kube.Objects(api).served("v1", "Pod")):  # fmt: skip
        t0 = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017  (urllib3's own: whatever the client raises)
            call()
        assert time.monotonic() - t0 < 5, "a call to a black-holed API server must give up"
    assert held, "the calls reached the black hole"


# ---------------------------------------------------------------- intermediate CAs, one read


def _intermediate(root: tls.Pair, ca: bool = True) -> tls.Pair:
    from cryptography import x509

    from tests.certutil import signed

    return signed(root, "hostnet-rdma-intermediate", (-dt.timedelta(days=1), dt.timedelta(days=90)),
                  (x509.BasicConstraints(ca=ca, path_length=None),))  # fmt: skip


def _leaf(issuer: tls.Pair) -> tls.Pair:
    from cryptography import x509

    from tests.certutil import signed

    sans = x509.SubjectAlternativeName([x509.DNSName(h) for h in NAMES])
    return signed(issuer, NAMES[0], (-dt.timedelta(days=1), dt.timedelta(days=60)), (sans,))


def _handshake_verifies(server: Any, root: tls.Pair) -> bool:
    """A TLS handshake in memory: does a client that trusts only `root` accept what `server`
    (an SSLContext) serves for NAMES[0]?"""
    import ssl
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".pem") as f:
        f.write(root.cert_pem)
        f.flush()
        client_ctx = ssl.create_default_context(cafile=f.name)
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=NAMES[0])
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for end in (client, srv):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError:
                return False
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        try:
            client.do_handshake()
            return True
        except ssl.SSLWantReadError:
            continue
        except ssl.SSLCertVerificationError:
            return False
    return False


def _serving_under_a_root(tmp_path: Path) -> tuple[tls.Pair, tls.ReloadingCert]:
    """A root that allows intermediates (cert-manager's do), serving a pair it signed."""
    root = tls.make_ca("root", path_length=None)
    tls.write_dir(tmp_path, tls.make_serving(root, list(NAMES)), root)
    return root, tls.ReloadingCert(tmp_path, names=NAMES)


def test_reload_accepts_a_chain_through_an_intermediate(tmp_path: Path) -> None:
    """cert-manager with an intermediate issuer: tls.crt = leaf + intermediate, ca.crt = root.
    The reload wanted the leaf signed directly by ca.crt and kept the old pair until it expired."""
    root, cert = _serving_under_a_root(tmp_path)
    inter = _intermediate(root)
    leaf = _leaf(inter)
    tls.write_dir(tmp_path, tls.Pair(leaf.cert_pem + inter.cert_pem, leaf.key_pem))
    assert cert.check() and cert.reloads == 1 and cert.refused == 0
    assert _handshake_verifies(cert.context, root)  # the chain is served whole


@pytest.mark.parametrize("case", ["other-root", "missing-intermediate", "intermediate-not-a-ca", "root-path-length-0"])
def test_reload_refuses_a_chain_that_does_not_lead_to_the_ca(tmp_path: Path, case: str) -> None:
    # path length 0 (this webhook's own self-managed CA): no intermediate below it.
    root, cert = _serving(tmp_path) if case == "root-path-length-0" else _serving_under_a_root(tmp_path)
    inter = _intermediate(
        tls.make_ca("someone-else") if case == "other-root" else root, ca=case != "intermediate-not-a-ca"
    )
    leaf = _leaf(inter)
    chain = leaf.cert_pem if case == "missing-intermediate" else leaf.cert_pem + inter.cert_pem
    tls.write_dir(tmp_path, tls.Pair(chain, leaf.key_pem))
    assert not cert.check() and cert.refused == 1 and cert.reloads == 0


def test_reload_loads_the_pair_it_checked(tmp_path: Path, monkeypatch: Any) -> None:
    """The files change between the check and the load (a Secret rotated twice in a row, or a
    writer that is not atomic): what is served must be what was checked, never the files read
    a second time."""
    root, cert = _serving(tmp_path)
    good = tls.make_serving(root, list(NAMES))
    tls.write_dir(tmp_path, good)
    checked = tls.check_pair

    def check_then_swap(*args: Any, **kw: Any) -> Any:
        out = checked(*args, **kw)
        tls.write_dir(tmp_path, tls.make_serving(tls.make_ca("intruder"), list(NAMES)))
        return out

    monkeypatch.setattr(tls, "check_pair", check_then_swap)
    assert cert.check()
    assert _handshake_verifies(cert.context, root)


def _served_key_type(server: Any, root: tls.Pair) -> str:
    """The key type of the certificate an in-memory handshake with `server` (an SSLContext)
    gets, for a client that offers both ECDSA and RSA signatures (as Go's and OpenSSL's do)."""
    import contextlib
    import ssl
    import tempfile

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    with tempfile.NamedTemporaryFile(suffix=".pem") as f:
        f.write(root.cert_pem)
        f.flush()
        client_ctx = ssl.create_default_context(cafile=f.name)
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=NAMES[0])
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for end in (client, srv):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    der = client.getpeercert(binary_form=True)
    assert der is not None
    return "EC" if isinstance(x509.load_der_x509_certificate(der).public_key(), ec.EllipticCurvePublicKey) else "RSA"


def test_a_rotation_that_changes_the_key_type_serves_only_the_new_pair(tmp_path: Path) -> None:
    """OpenSSL keeps one certificate per key type in a context: a new pair loaded into the live
    one left the old EC certificate beside the new RSA one (issue #63). Each reload is a fresh
    context, which the listener's context hands each handshake to."""
    ca, cert = _serving(tmp_path)
    assert _served_key_type(cert.context, ca) == "EC"
    for kind, want in (("rsa", "RSA"), ("ec", "EC"), ("rsa", "RSA")):
        tls.write_dir(tmp_path, tls.make_serving(ca, list(NAMES), key_type=kind))
        assert cert.check()
        assert _served_key_type(cert.context, ca) == want, kind
