"""Certificates signed by a test CA with what app.webhook.tls does not make: an expired serving pair,
a client certificate."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.webhook import tls


def signed(ca: tls.Pair, common_name: str, valid: tuple[dt.timedelta, dt.timedelta],
           extensions: tuple[x509.ExtensionType, ...] = ()) -> tls.Pair:  # fmt: skip
    """A new EC key and a certificate for it signed by `ca`, valid from now + valid[0] to now + valid[1]."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + valid[0])
        .not_valid_after(now + valid[1])
    )
    for ext in extensions:
        builder = builder.add_extension(ext, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return tls.Pair(cert.public_bytes(serialization.Encoding.PEM), pem)
