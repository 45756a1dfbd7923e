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
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.webhook import filewatch

log = logging.getLogger("hostnet_rdma.tls")

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"


@dataclass(frozen=True)
class Pair:
    cert_pem: bytes
    key_pem: bytes


def _key(kind: str = "ec") -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    """An EC P-256 key (ours), or RSA 2048 (what other issuers, cert-manager's default among them, make)."""
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str = "hostnet-rdma-ca", days: int = 3650, path_length: int | None = 0) -> Pair:
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
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
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


def make_serving(ca: Pair, hosts: list[str], days: int = 365, key_type: str = "ec") -> Pair:
    """A serving pair for `hosts` signed by `ca`; `key_type` "ec" or "rsa"."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("CA key must be an EC key")
    key = _key(key_type)
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


def load_pair(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a pair into `ctx` from these bytes, not from the files again (which may have
    changed since they were read and checked). ssl loads only from paths: the bytes go to
    anonymous in-memory files (the webhook's root filesystem is read-only)."""
    if not hasattr(os, "memfd_create"):  # not Linux: the files, as read (a dev machine)
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / CERT_FILE).write_bytes(cert_pem)
            (Path(d) / KEY_FILE).write_bytes(key_pem)
            ctx.load_cert_chain(str(Path(d) / CERT_FILE), str(Path(d) / KEY_FILE))
        return
    fds = [os.memfd_create("hostnet-rdma-tls", os.MFD_CLOEXEC) for _ in range(2)]
    try:
        for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
            os.write(fd, data)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)


def context_from(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_pair(ctx, cert_pem, key_pem)
    return ctx


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _chain_problem(chain: list[x509.Certificate], roots: list[x509.Certificate], ca_file: Path) -> str | None:
    """Why the leaf (chain[0]) does not lead to one of the roots through the intermediates the
    file carries after it (cert-manager with an intermediate issuer writes leaf + intermediate
    to tls.crt and the root to ca.crt), or None. Each intermediate must be a CA valid now."""
    now = dt.datetime.now(dt.UTC)
    current, rest = chain[0], list(chain[1:])
    below = 0  # intermediates between the leaf and `current`
    for _ in range(len(chain)):
        root = next((r for r in roots if _issued_by(current, r)), None)
        if root is not None:
            return _path_length_problem(root, below + (current is not chain[0]))
        step = next((c for c in rest if _issued_by(current, c)), None)
        if step is None:
            break
        rest.remove(step)
        if current is not chain[0]:
            below += 1
        constraints = _constraints(step)
        if constraints is None or not constraints.ca:
            return f"intermediate {step.subject.rfc4514_string()} is not a CA"
        if not step.not_valid_before_utc <= now <= step.not_valid_after_utc:
            return f"intermediate {step.subject.rfc4514_string()} is not valid now"
        why = _path_length_problem(step, below)
        if why is not None:
            return why
        current = step
    names = ", ".join(r.subject.rfc4514_string() for r in roots)
    return f"not signed by the CA in {ca_file} ({names}), directly or through the intermediates in the file"


def _constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None


def _path_length_problem(ca: x509.Certificate, intermediates_below: int) -> str | None:
    """A CA's pathLenConstraint counts the intermediates below it; the API server's TLS client
    (Go's crypto/x509) refuses a chain that exceeds it."""
    constraints = _constraints(ca)
    limit = constraints.path_length if constraints is not None else None
    if limit is not None and intermediates_below > limit:
        return (f"{ca.subject.rfc4514_string()} allows {limit} intermediate(s) below it (pathLenConstraint), "
                f"the chain has {intermediates_below}")  # fmt: skip
    return None


def check_pair(cert_pem: bytes, ca_file: Path, names: tuple[str, ...] = (), ca_pem: bytes | None = None) -> str | None:
    """Why this serving certificate (a leaf, then any intermediates) must not be served, or
    None: it leads to the CA in the same directory (when there is one), is valid now, and is
    valid for every expected name. `ca_pem`: the CA file's bytes, as already read."""
    chain = x509.load_pem_x509_certificates(cert_pem)
    cert = chain[0]
    now = dt.datetime.now(dt.UTC)
    if now < cert.not_valid_before_utc:
        return f"not valid before {cert.not_valid_before_utc.isoformat()}"
    if now > cert.not_valid_after_utc:
        return f"expired {cert.not_valid_after_utc.isoformat()}"
    if ca_pem is None:
        try:
            ca_pem = ca_file.read_bytes()
        except OSError:
            ca_pem = b""
    if ca_pem:
        why = _chain_problem(chain, x509.load_pem_x509_certificates(ca_pem), ca_file)
        if why is not None:
            return why
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
    """Owns the SSLContext the listening socket was given (`context`); serves the newest good
    pair when the files change.

    Each reload builds a fresh SSLContext from the new pair; `context`'s SNI callback, which
    OpenSSL runs at every ClientHello (with or without a server name), moves the handshake onto
    the newest one. Loading the new pair into the live context instead would keep the old one
    beside it when the key type changes: OpenSSL holds one certificate per key type and picks by
    what the client offers, so after EC -> RSA a Go client (the API server) still got the old EC
    certificate. The listener keeps its context for life (asyncio captures it at
    create_server), hence the callback rather than a swap of the listener's context.

    New handshakes use the new pair; a pair that does not load, is not signed by the CA in the
    same directory, is not valid now, or does not name every expected host is refused (logged,
    counted) and the old one stays. Watched and polled by app.webhook.filewatch.
    """

    def __init__(self, directory: Path, poll_seconds: float = 10.0, names: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.cert_file = directory / CERT_FILE
        self.key_file = directory / KEY_FILE
        self.poll_seconds = poll_seconds
        self.context = server_context(self.cert_file, self.key_file)
        self.context.sni_callback = self._serve_newest
        self.current = self.context  # the newest good pair's context
        self._fingerprint = self._read_fingerprint()
        self.expiry = not_after(self.cert_file.read_bytes())
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.reloads = 0
        self.refused = 0
        self.names = names
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refused: tuple[tuple[bytes, bytes], str] | None = None

    def _serve_newest(self, conn: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None, ctx: ssl.SSLContext) -> None:
        current = self.current
        if current is not ctx:
            conn.context = current

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
                ca_pem = (self.directory / CA_FILE).read_bytes()
            except OSError:
                ca_pem = b""
            try:
                # One read of the files, loaded into a fresh context and checked; served only
                # once both pass (a bad pair must not break serving).
                fresh = context_from(*current)
                why = check_pair(current[0], self.directory / CA_FILE, self.names, ca_pem)
                if why is not None:
                    raise ValueError(why)
            except (ssl.SSLError, OSError, ValueError) as e:
                # Tried again at every poll: a reason can pass (a certificate not valid yet, from
                # a clock ahead of ours; a CA file written after the pair). Said once per pair and reason.
                if self._refused != (current, str(e)):
                    self._refused = (current, str(e))
                    log.warning("new certificate in %s not loaded, serving the old one: %s", self.directory, e)
                    self.refused += 1
                return False
            self._refused = None
            self.current = fresh
            self._fingerprint = current
            self.expiry = not_after(current[0])
            self.reloads += 1
            log.info("serving certificate reloaded from %s (expires %s)", self.directory, self.expiry.isoformat())
        return True

    def start(self) -> None:
        filewatch.watch_and_poll(self.directory, self._stop, self.poll_seconds, self._check_on_loop, "cert-reload")

    def stop(self) -> None:
        self._stop.set()
