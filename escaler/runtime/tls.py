"""Serving TLS for the manager's HTTPS servers (admission webhook, API server).

Contract:

* ``CertificateReloader`` holds an ``SSLContext`` (TLS 1.2 or later) for a PEM cert/key pair,
  e.g. a mounted ``kubernetes.io/tls`` Secret's ``tls.crt``/``tls.key``. ``load()`` loads it now
  and raises (``OSError``, ``ssl.SSLError``) when it cannot. ``current()`` re-reads the pair when
  either file changed (size, mtime or inode — a Secret volume update swaps a symlink); a changed
  pair that fails to load keeps the previous context (logged once per change), so a half-written
  rotation never takes the server down.
* ``reload_on_handshake(ctx, certs)`` makes a server context built elsewhere (uvicorn's, for the
  SLO API) serve ``certs.current()`` on every new handshake (an SNI callback switches the
  connection to it), so a renewed pair on disk — a mounted Secret the manager renewed — is served
  without a restart; a pair that cannot be loaded leaves the connection on ``ctx``.
* ``self_signed(directory, hosts)`` writes a fresh self-signed pair (EC P-256, valid
  ``SELF_SIGNED_DAYS`` days, SANs ``localhost``, the given hosts and IPs, ``127.0.0.1``, ``::1``)
  as ``tls.crt``/``tls.key`` (the key mode 0600) and returns ``(cert_file, key_file,
  sha256 fingerprint)``: the signal API serves TLS by default with it when no certificate is
  given, and logs the fingerprint so a client can pin it.

The connection handling (TLS handshake in the connection's thread, caps, deadlines) is
``escaler.runtime.httpbase``.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import threading
from collections.abc import Sequence
from typing import Any

__all__ = [
    "SELF_SIGNED_DAYS",
    "CertificateReloader",
    "reload_on_handshake",
    "self_signed",
]

# lifetime of a generated self-signed certificate (a restart makes a new one)
SELF_SIGNED_DAYS = 365

_log = logging.getLogger(__name__)


class CertificateReloader:
    """An ``SSLContext`` for a cert/key pair, rebuilt when the files change."""

    def __init__(self, cert_file: str, key_file: str, *, name: str = "serving") -> None:
        # the PEM paths; fixed
        self.cert_file = cert_file
        self.key_file = key_file
        # names the server in log lines ("webhook", "api"); fixed
        self.name = name
        # guards the fields below
        self._mu = threading.Lock()
        # the signature (stat of both files) of the pair in _context, and the last one tried
        self._loaded: tuple[Any, ...] | None = None
        self._tried: tuple[Any, ...] | None = None
        # the serving context; None until the first successful load
        self._context: ssl.SSLContext | None = None

    def _signature(self) -> tuple[Any, ...]:
        sig: list[Any] = []
        for path in (self.cert_file, self.key_file):
            st = os.stat(path)
            sig.extend((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def load(self) -> ssl.SSLContext:
        """Load the pair now; raises (``OSError``, ``ssl.SSLError``) when it cannot be loaded."""
        with self._mu:
            sig = self._signature()
            ctx = self._build()
            self._context, self._loaded, self._tried = ctx, sig, sig
            return ctx

    def current(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first if the files changed."""
        with self._mu:
            ctx = self._context
            try:
                sig = self._signature()
            except OSError:
                sig = None
            if ctx is not None and (sig is None or sig == self._loaded or sig == self._tried):
                return ctx
            self._tried = sig
            try:
                self._context, self._loaded = self._build(), sig
                if ctx is not None:
                    _log.info("%s serving certificate reloaded from %s", self.name, self.cert_file)
            except (OSError, ssl.SSLError) as exc:
                if ctx is None:
                    raise
                _log.warning("%s certificate %s changed but cannot be loaded (%s); "
                             "still serving the previous one", self.name, self.cert_file, exc)
            assert self._context is not None
            return self._context


def reload_on_handshake(ctx: ssl.SSLContext, certs: CertificateReloader) -> None:
    """Serve ``certs.current()`` on every new connection of ``ctx`` (see the module docstring)."""

    def pick(conn: Any, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        try:
            conn.context = certs.current()
        except (OSError, ssl.SSLError) as exc:
            _log.warning("%s certificate cannot be loaded (%s); serving the one loaded at start",
                         certs.name, exc)

    ctx.sni_callback = pick


def _names(hosts: Sequence[str]) -> list[Any]:
    from cryptography import x509

    names: list[Any] = []
    for host in ("localhost", socket.gethostname(), *hosts, "127.0.0.1", "::1"):
        if not host:
            continue
        try:
            entry: Any = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            entry = x509.DNSName(host)
        if entry not in names:
            names.append(entry)
    return names


def self_signed(directory: str, hosts: Sequence[str] = ()) -> tuple[str, str, str]:
    """Write a self-signed ``tls.crt``/``tls.key`` into ``directory``; ``(cert, key, sha256)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "escaler-api (self-signed)")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(cert_file, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    fingerprint = cert.fingerprint(hashes.SHA256()).hex(":").upper()
    return cert_file, key_file, fingerprint
