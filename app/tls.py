"""Certificates with `cryptography`: a CA and a serving cert, the server's SSLContext, and
hot reload when the files change (a mounted Secret swaps its `..data` symlink)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app import filewatch

log = logging.getLogger("hostnet_rdma.tls")

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"


@dataclass(frozen=True)
class Pair:
    cert_pem: bytes
    key_pem: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str = "hostnet-rdma-ca", days: int = 3650) -> Pair:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def service_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The SANs the API server may use to reach our Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def make_serving(ca: Pair, hosts: list[str], days: int = 365) -> Pair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("CA key must be an EC key")
    key = _key()
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def not_after(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` in one rename; unchanged content is not rewritten (no spurious reloads)."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_dir(directory: Path, serving: Pair, ca: Pair | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if ca is not None:
        write_atomic(directory / CA_FILE, ca.cert_pem, 0o644)
    write_atomic(directory / KEY_FILE, serving.key_pem)
    write_atomic(directory / CERT_FILE, serving.cert_pem, 0o644)


def dev_certs(directory: Path, hosts: list[str] | None = None) -> Path:
    """A CA and a 127.0.0.1/localhost serving pair for `serve --dev`; kept if still valid."""
    hosts = hosts or ["localhost", "127.0.0.1", "::1"]
    crt = directory / CERT_FILE
    if crt.exists() and (directory / CA_FILE).exists():
        remaining = not_after(crt.read_bytes()) - dt.datetime.now(dt.UTC)
        if remaining > dt.timedelta(days=7):
            return directory
    ca = make_ca("hostnet-rdma-dev-ca")
    write_dir(directory, make_serving(ca, hosts), ca)
    return directory


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    return ctx


def check_pair(cert_pem: bytes, ca_file: Path, names: tuple[str, ...] = ()) -> str | None:
    """Why this serving certificate must not be served, or None: signed by the CA in the same
    directory (when there is one), valid now, and valid for every expected name."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    now = dt.datetime.now(dt.UTC)
    if now < cert.not_valid_before_utc:
        return f"not valid before {cert.not_valid_before_utc.isoformat()}"
    if now > cert.not_valid_after_utc:
        return f"expired {cert.not_valid_after_utc.isoformat()}"
    try:
        ca_pem = ca_file.read_bytes()
    except OSError:
        ca_pem = b""
    if ca_pem:
        ca = x509.load_pem_x509_certificate(ca_pem)
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return f"not signed by the CA in {ca_file} ({ca.subject.rfc4514_string()})"
    if names:
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have = set(san.get_values_for_type(x509.DNSName)) | {
                str(i) for i in san.get_values_for_type(x509.IPAddress)
            }
        except x509.ExtensionNotFound:
            have = set()
        missing = [n for n in names if n not in have]
        if missing:
            return f"not valid for {', '.join(missing)}"
    return None


class ReloadingCert:
    """Owns the live SSLContext; swaps its certificate when the files change.

    New handshakes use the new pair; a pair that does not load, is not signed by the CA in the
    same directory, is not valid now, or does not name every expected host is refused (logged,
    counted) and the old one stays. Watched and polled by app.filewatch.
    """

    def __init__(self, directory: Path, poll_seconds: float = 10.0, names: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.cert_file = directory / CERT_FILE
        self.key_file = directory / KEY_FILE
        self.poll_seconds = poll_seconds
        self.context = server_context(self.cert_file, self.key_file)
        self._fingerprint = self._read_fingerprint()
        self.expiry = not_after(self.cert_file.read_bytes())
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.reloads = 0
        self.refused = 0
        self.names = names
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refused: tuple[tuple[bytes, bytes], str] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Swap certificates on the serving loop's thread, never beside a handshake."""
        self._loop = loop

    def _check_on_loop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self.check)
        else:
            self.check()

    def _read_fingerprint(self) -> tuple[bytes, bytes]:
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    def check(self) -> bool:
        """Reload if the files changed; True when a new pair was loaded."""
        with self._lock:
            try:
                current = self._read_fingerprint()
            except OSError:
                return False
            if current == self._fingerprint:
                return False
            try:
                # Validate on a throwaway context first: a bad pair must not break serving.
                server_context(self.cert_file, self.key_file)
                why = check_pair(current[0], self.directory / CA_FILE, self.names)
                if why is not None:
                    raise ValueError(why)
                self.context.load_cert_chain(str(self.cert_file), str(self.key_file))
            except (ssl.SSLError, OSError, ValueError) as e:
                # Tried again at every poll: a reason can pass (a certificate not valid yet, from
                # a clock ahead of ours; a CA file written after the pair). Said once per pair and reason.
                if self._refused != (current, str(e)):
                    self._refused = (current, str(e))
                    log.warning("new certificate in %s not loaded, serving the old one: %s", self.directory, e)
                    self.refused += 1
                return False
            self._refused = None
            self._fingerprint = current
            self.expiry = not_after(current[0])
            self.reloads += 1
            log.info("serving certificate reloaded from %s (expires %s)", self.directory, self.expiry.isoformat())
        return True

    def start(self) -> None:
        filewatch.watch_and_poll(self.directory, self._stop, self.poll_seconds, self._check_on_loop, "cert-reload")

    def stop(self) -> None:
        self._stop.set()
