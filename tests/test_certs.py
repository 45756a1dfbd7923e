"""Certificates: SANs for a Service and for a webhook reached by IP, and when the
self-managed mode decides to issue a new serving certificate (no API server needed)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from app import kube, tls


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
