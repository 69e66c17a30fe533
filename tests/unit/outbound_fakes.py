"""Servers for the outbound-call tests (escaler.signals.fetch): HTTPS with a throwaway CA, and raw
sockets that answer slowly on purpose.

* ``make_ca(tmp)`` → ``ScratchCA`` (a CA and a server certificate for ``localhost``/127.0.0.1) and
  ``client_context()``, an ``SSLContext`` that trusts only that CA.
* ``HttpsServer(ca, answer)`` — a threaded HTTPS server on 127.0.0.1; ``answer(path) -> (status,
  body)``; records every request's path and headers.
* ``RawServer(script)`` — a TCP server on ``host`` (default 127.0.0.1) running ``script(conn)`` on
  each connection in its own thread (trickling bytes, never answering ...); ``stop()`` closes all.
* ``FakeSecrets(objs)`` — the one ``get`` of a ``DynamicClient`` that ``secret_key_reader`` uses,
  over Secrets by name (404 for others).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from escaler.errors import StatusError


@dataclass
class ScratchCA:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        return ctx


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(tmp: Path) -> ScratchCA:
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False)
    ca_name = _name("escaler-test-ca")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(usage, critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                       x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(san, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = ScratchCA(tmp / "ca.crt", tmp / "tls.crt", tmp / "tls.key")
    out.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return out


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class HttpsServer:
    ca: ScratchCA
    answer: Callable[[str], tuple[int, bytes]]
    seen: list[Seen] = field(default_factory=list)
    _httpd: Any = None

    @property
    def url(self) -> str:
        return f"https://localhost:{self._httpd.server_address[1]}"

    def start(self) -> HttpsServer:
        owner = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, body = owner.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.ca.cert_file), str(self.ca.key_file))
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        httpd.daemon_threads = True
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        # a short poll: stop() waits for the serving loop's next one
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class RawServer:
    """TCP on ``host``:random port; each connection runs ``script(conn, stop)`` in a daemon thread."""

    def __init__(self, script: Callable[[socket.socket, threading.Event], None],
                 host: str = "127.0.0.1") -> None:
        self._script = script
        self.stopped = threading.Event()
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.host = host
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self._script(conn, self.stopped)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self._listener.close()
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_request(conn: socket.socket) -> bytes:
    """The request head (up to the blank line)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


class FakeSecrets:
    """Secrets by name, read through ``get`` as ``DynamicClient.get`` would (404 when missing)."""

    def __init__(self, objs: dict[str, dict[str, Any]]) -> None:
        self.objs = objs

    def get(self, gvk: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.objs:
            raise StatusError(404, "NotFound", f'secrets "{name}" not found')
        return self.objs[name]
