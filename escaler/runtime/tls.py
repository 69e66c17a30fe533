"""Serving TLS for the manager's HTTPS servers (admission webhook, API server).

Contract:

* ``CertificateReloader`` holds an ``SSLContext`` (TLS 1.2 or later) for a PEM cert/key pair,
  e.g. a mounted ``kubernetes.io/tls`` Secret's ``tls.crt``/``tls.key``. ``load()`` loads it now
  and raises (``OSError``, ``ssl.SSLError``) when it cannot. ``current()`` re-reads the pair when
  either file changed (size, mtime or inode — a Secret volume update swaps a symlink); a changed
  pair that fails to load keeps the previous context (logged once per change), so a half-written
  rotation never takes the server down.
* ``ConnectionServer`` is a ``ThreadingHTTPServer`` that runs everything of one connection in
  that connection's own daemon thread: the socket timeout is set first, then — when ``certs`` is
  set — the TLS handshake, with the context ``certs.current()`` returns at that moment. A client
  that stalls mid-handshake therefore delays only itself, never the accept loop, and a rotated
  certificate applies to the next connection. With ``certs = None`` it serves plain HTTP with
  the same per-connection timeout. ``server_class(ipv6)`` picks the address family.

This module moved down from ``escaler.webhook.server`` so ``escaler.runtime.apiserver`` can share
it (the webhook layer sits above the runtime and imports it from here).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Any

__all__ = [
    "DEFAULT_CONNECTION_TIMEOUT_SECONDS",
    "CertificateReloader",
    "ConnectionServer",
    "ConnectionServer6",
    "server_class",
]

# handshake, request read and keep-alive idle bound per connection
DEFAULT_CONNECTION_TIMEOUT_SECONDS = 10.0

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


class ConnectionServer(ThreadingHTTPServer):
    """A threading HTTP(S) server whose TLS handshake runs in the connection's thread."""

    daemon_threads = True
    # allow a quick restart on the same port (TIME_WAIT)
    allow_reuse_address = True
    # the certificate source (TLS), or None (plain HTTP); set before serving
    certs: CertificateReloader | None = None
    # per-socket timeout (handshake, reads, keep-alive idle); set before serving
    connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT_SECONDS
    # names the server in log lines; set before serving
    log_name: str = "https"

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(self.connection_timeout)
            conn = request if self.certs is None else self.certs.current().wrap_socket(
                request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            _log.debug("%s TLS handshake with %s failed: %s", self.log_name, client_address, exc)
            self.shutdown_request(request)
            return
        try:
            self.finish_request(conn, client_address)
        except Exception:
            self.handle_error(conn, client_address)
        finally:
            self.shutdown_request(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.debug("%s connection from %s failed", self.log_name, client_address, exc_info=True)


class ConnectionServer6(ConnectionServer):
    address_family = socket.AF_INET6


def server_class(ipv6: bool) -> type[ConnectionServer]:
    return ConnectionServer6 if ipv6 else ConnectionServer


# How long shutdown() waits for the serving thread to end.
SHUTDOWN_JOIN_SECONDS = 5.0


class ServingLifecycle:
    """``shutdown()`` and the ``Runnable`` ``start(stop)`` shared by the webhook and API servers.

    A subclass's ``serve()`` binds a ``ConnectionServer``, stores it in ``_server`` and its thread in
    ``_thread`` under ``_mu``, then sets ``serving``; this class stops them again.
    """

    # guards _server and _thread
    _mu: threading.Lock
    # the bound server while serving; None before serve() and after shutdown()
    _server: ConnectionServer | None
    # the thread running serve_forever while serving
    _thread: threading.Thread | None
    # set while accepting connections
    serving: threading.Event

    def serve(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop serving and close the socket; idempotent."""
        self.serving.clear()
        with self._mu:
            server, thread = self._server, self._thread
            self._server = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(SHUTDOWN_JOIN_SECONDS)

    def start(self, stop: threading.Event) -> None:
        """The ``Runnable`` entry point: serve until ``stop`` is set."""
        self.serve()
        try:
            stop.wait()
        finally:
            self.shutdown()
