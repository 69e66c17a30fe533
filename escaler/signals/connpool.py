"""Idle keep-alive connections of outbound GETs, kept for reuse under the rules of ``fetch``.

A connection is opened by ``escaler.signals.fetch`` to an address the ``AddressPolicy`` checked,
and may carry the next request only to the very same place. Contract of ``ConnectionPool``:

* ``take(key, now)`` returns an idle connection for ``key`` — (scheme, host, port, the checked
  address it is connected to; the TLS context is the client's, fixed) — or None. A connection is
  handed out only if, at that moment, nothing is readable on it (no byte the server sent after
  the last answer, no EOF, no buffered TLS data): a connection the server closed, or one carrying
  stray bytes, is closed and never reused. The most recently used connection is taken first.
* ``put(key, sock, now)`` keeps a connection after a *complete* exchange (the caller decides:
  body fully read, no ``Connection: close``, no error, nothing left over). At most
  ``max_per_host`` idle connections per key and ``max_total`` in all are kept: a connection over
  either bound is closed at once. Idle connections older than ``idle_seconds`` are closed at the
  next ``take``/``put`` (and by ``close_idle``); servers drop idle connections too.
* ``close_all()`` closes every idle connection (``HttpClient.close``).
* Only *idle* connections are pooled: connections in use belong to their request, and how many
  run at once is bounded by the callers (the manager's outbound executor).
* Thread-safe; sockets are closed and polled outside the lock. Time is passed in (``now``, the
  caller's monotonic clock), so tests step a fake clock.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from dataclasses import dataclass

__all__ = ["DEFAULT_IDLE_SECONDS", "DEFAULT_MAX_IDLE_PER_HOST", "DEFAULT_MAX_IDLE_TOTAL", "ConnKey",
           "ConnectionPool"]

# idle connections kept per (scheme, host, port, address)
DEFAULT_MAX_IDLE_PER_HOST = 4
# idle connections kept in all
DEFAULT_MAX_IDLE_TOTAL = 64
# an idle connection older than this is closed (below the common server idle timeouts of 60-90 s)
DEFAULT_IDLE_SECONDS = 30.0


@dataclass(frozen=True)
class ConnKey:
    """Where a connection goes: a connection is reused only for an equal key."""

    # "http" or "https" (https: TLS verified for ``host`` with the client's fixed context)
    scheme: str
    # the URL's host (the TLS server name and the Host header)
    host: str
    port: int
    # the address the socket is connected to, checked by the AddressPolicy when it was opened
    address: str


@dataclass
class _Idle:
    sock: socket.socket
    # monotonic time it became idle
    since: float


def _quiet(sock: socket.socket) -> bool:
    """True when nothing is readable on an idle connection (no stray bytes, no EOF)."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class ConnectionPool:
    """Idle connections by ``ConnKey``; see the module docstring."""

    def __init__(self, *, max_per_host: int = DEFAULT_MAX_IDLE_PER_HOST,
                 max_total: int = DEFAULT_MAX_IDLE_TOTAL, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
        if max_per_host < 0 or max_total < 0 or idle_seconds <= 0:
            raise ValueError(f"ConnectionPool: max_per_host {max_per_host} and max_total {max_total} must be "
                             f">= 0, idle_seconds {idle_seconds} > 0")
        # bounds; fixed
        self._per_host = max_per_host
        self._total = max_total
        self._idle_seconds = idle_seconds
        # guards _idle and _count
        self._mu = threading.Lock()
        # key → idle connections, oldest first (no empty lists are kept)
        self._idle: dict[ConnKey, list[_Idle]] = {}
        # number of idle connections in _idle
        self._count = 0
        # connections opened / reused (for tests and the requests benchmark)
        self.opened = 0
        self.reused = 0

    def idle(self) -> int:
        with self._mu:
            return self._count

    def take(self, key: ConnKey, now: float) -> socket.socket | None:
        while True:
            with self._mu:
                stale = self._expire(now)
                conns = self._idle.get(key)
                conn = conns.pop() if conns else None
                if conn is not None:
                    self._count -= 1
                    if not conns:
                        del self._idle[key]
            _close(stale)
            if conn is None:
                return None
            if _quiet(conn.sock):
                with self._mu:
                    self.reused += 1
                return conn.sock
            _close([conn.sock])

    def put(self, key: ConnKey, sock: socket.socket, now: float) -> None:
        with self._mu:
            stale = self._expire(now)
            conns = self._idle.setdefault(key, [])
            if len(conns) < self._per_host and self._count < self._total:
                conns.append(_Idle(sock, now))
                self._count += 1
            else:
                stale.append(sock)
                if not conns:
                    del self._idle[key]
        _close(stale)

    def count_open(self) -> None:
        with self._mu:
            self.opened += 1

    def close_idle(self, now: float) -> None:
        with self._mu:
            stale = self._expire(now)
        _close(stale)

    def close_all(self) -> None:
        with self._mu:
            stale = [c.sock for conns in self._idle.values() for c in conns]
            self._idle.clear()
            self._count = 0
        _close(stale)

    def _expire(self, now: float) -> list[socket.socket]:
        """Remove idle connections older than idle_seconds (under the lock); returns them."""
        out: list[socket.socket] = []
        for key in list(self._idle):
            conns = self._idle[key]
            keep = [c for c in conns if now - c.since < self._idle_seconds]
            out.extend(c.sock for c in conns if now - c.since >= self._idle_seconds)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        self._count -= len(out)
        return out


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()
