"""The SLO API's connection bounds on a real uvicorn server (escaler/sloapi/connections.py; issue 27
item 1): half-sent requests from one client no longer take every connection nor starve the probes,
and a request's head that never completes is cut."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from fakeapi import wait_until
from fastapi import FastAPI

from escaler.sloapi.connections import bounded_protocol


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


@contextlib.contextmanager
def serving(per_client: int, head_deadline: float, limit: int = 16) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(_app(), log_config=None, lifespan="off", limit_concurrency=limit,
                            http=bounded_protocol(per_client, head_deadline))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, what="uvicorn started")
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _get(port: int, source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as c:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        with contextlib.suppress(OSError):
            while chunk := c.recv(4096):
                data += chunk
        return data


def _closed(c: socket.socket, timeout: float) -> bool:
    c.settimeout(timeout)
    try:
        return c.recv(1) == b""
    except (TimeoutError, OSError):
        return False


def test_half_sent_requests_from_one_client_leave_room_for_the_others() -> None:
    with serving(per_client=8, head_deadline=30.0) as port:
        hog = []
        try:
            for _ in range(8):
                c = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=("127.0.0.2", 0))
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost:")  # never finished
                hog.append(c)
            time.sleep(0.2)
            # the hog's ninth connection is closed at once; another client (the kubelet) is served
            with socket.create_connection(("127.0.0.1", port), timeout=5,
                                          source_address=("127.0.0.2", 0)) as c:
                assert _closed(c, 5)
            assert _get(port, "127.0.0.1").startswith(b"HTTP/1.1 200")
        finally:
            for c in hog:
                c.close()


def test_a_request_head_that_never_completes_is_cut_at_the_deadline() -> None:
    with serving(per_client=8, head_deadline=0.3) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: the head never ends
        assert _closed(c, 5), "a half-sent head kept its connection"
        # a whole request is still served
        assert _get(port).startswith(b"HTTP/1.1 200")


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="per_client"):
        bounded_protocol(0, 1.0)
    with pytest.raises(ValueError, match="head_deadline"):
        bounded_protocol(1, 0.0)
