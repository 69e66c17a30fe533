"""The SLO API's connection bounds: uvicorn's HTTP/1.1 protocol with a per-client share and a
deadline for each request's head.

uvicorn bounds connections only as a whole (``limit_concurrency``: 503 beyond) and waits for a
request's head for ever, so 64 half-sent requests from one client made it answer 503 to everyone,
its own probes included (issue 27 item 1). ``bounded_protocol(per_client, head_deadline)`` returns
a subclass of uvicorn's ``H11Protocol`` (``uvicorn.Config(http=...)``) that:

* closes, at once, a connection from a client address that already holds ``per_client``
  connections (the others are still served; the global ``limit_concurrency`` still applies);
* closes a connection whose request line and headers have not all arrived ``head_deadline``
  seconds after it opened, or after the first byte of its next request on a kept-alive
  connection (uvicorn's ``timeout_keep_alive`` bounds the idle wait before that byte).

Each call returns a new class with its own table of connections per client: one per server.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["bounded_protocol"]


def bounded_protocol(per_client: int, head_deadline: float) -> type[H11Protocol]:
    """See the module docstring."""
    if per_client < 1:
        raise ValueError(f"bounded_protocol.per_client: must be >= 1, got {per_client!r}")
    if not head_deadline > 0:
        raise ValueError(f"bounded_protocol.head_deadline: must be > 0, got {head_deadline!r}")
    held: dict[str, int] = {}

    class BoundedH11Protocol(H11Protocol):
        _host: str | None = None
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            host = str(self.client[0]) if self.client else "?"
            if held.get(host, 0) >= per_client:
                transport.close()
                return
            held[host] = held.get(host, 0) + 1
            self._host = host
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._host is not None:
                left = held.get(self._host, 0) - 1
                if left > 0:
                    held[self._host] = left
                else:
                    held.pop(self._host, None)
                self._host = None
            super().connection_lost(exc)

        def _waiting_for_head(self) -> bool:
            return bool(self.conn.their_state is h11.IDLE)

        def data_received(self, data: bytes) -> None:
            if self._waiting_for_head() and self._head_timer is None:
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if not self._waiting_for_head():
                self._disarm()  # the head arrived

        def _arm(self) -> None:
            self._head_timer = self.loop.call_later(head_deadline, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self._waiting_for_head() and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
