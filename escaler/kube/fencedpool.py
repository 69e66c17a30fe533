"""A write guard at the socket: the last check before a write's bytes leave the process.

``RestClient``'s write guard runs before the request is handed to the HTTP stack. Between that
check and the bytes reaching the socket lie the generated client, urllib3's pool (perhaps a new
TCP/TLS connection) and http.client — and, with many threads, waits for the GIL of several
milliseconds. A process frozen (SIGSTOP, a VM pause) inside that gap and thawed after its lease
lapsed would still send the write; measured on the e2e fencing test, that happened in one run of
three. So ``install`` also puts the guard into the pool's connections:

* for a POST/PUT/PATCH/DELETE, the request line and headers are **held back** (not sent) until
  the body is ready, then the guard runs and the whole request goes out in **one** ``sendall``.
  A body-less write is checked right before its header block is sent. Reads are untouched.
* a refusal raises the guard's exception (``FencedWrite``) out of the request; the connection is
  closed by urllib3 and nothing was written to it.

What remains is the few bytecodes between the check and the ``sendall`` system call, and a
request already on the wire — see ``escaler.runtime.fence``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

__all__ = ["install"]

# Called with (method, path); raises to refuse the write.
Guard = Callable[[str, str], None]
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Fenced:
    """Mixin over a urllib3 connection; ``_guard`` is set on the per-install subclass."""

    _guard: Guard | None = None

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any) -> None:
        # (method, path, body expected) of the write being sent; None for reads
        self._fence_pending: tuple[str, str, bool] | None = None
        # the header block held back until the body is ready (writes with a body only)
        self._fence_held = b""
        if self._guard is not None and method.upper() in _WRITE_METHODS:
            if getattr(self, "sock", None) is None:
                # connect (and any proxy tunnel) now, so no connect happens between check and send
                self.connect()  # type: ignore[attr-defined]
            self._fence_pending = (method.upper(), urlsplit(url).path, body is not None)
        try:
            super().request(method, url, body=body, headers=headers, **kw)  # type: ignore[misc]
        finally:
            self._fence_pending = None
            self._fence_held = b""

    def send(self, data: Any) -> None:
        pending = getattr(self, "_fence_pending", None)
        if pending is None or self._guard is None:
            super().send(data)  # type: ignore[misc]
            return
        method, path, has_body = pending
        if has_body and not self._fence_held:
            self._fence_held = bytes(data)  # the header block: wait for the body
            return
        whole = self._fence_held + bytes(data)
        self._fence_pending = None
        self._fence_held = b""
        self._guard(method, path)  # the last check; then one sendall of the whole request
        super().send(whole)  # type: ignore[misc]


def install(pool_manager: urllib3.PoolManager, guard: Guard | None) -> None:
    """Make ``pool_manager``'s connections run ``guard`` as described above (None: plain ones).
    Existing pooled connections are dropped so that every later request uses the new classes."""
    if guard is None:
        classes: dict[str, type[HTTPConnectionPool]] = {"http": HTTPConnectionPool,
                                                       "https": HTTPSConnectionPool}
    else:
        fenced_http = type("FencedHTTPConnection", (_Fenced, HTTPConnection), {"_guard": staticmethod(guard)})
        fenced_https = type("FencedHTTPSConnection", (_Fenced, HTTPSConnection),
                            {"_guard": staticmethod(guard)})
        classes = {
            "http": type("FencedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": fenced_http}),
            "https": type("FencedHTTPSConnectionPool", (HTTPSConnectionPool,),
                          {"ConnectionCls": fenced_https}),
        }
    # an instance attribute: the module-level default dict is shared by every PoolManager
    pool_manager.pool_classes_by_scheme = classes
    pool_manager.clear()
