"""One client flooding a manager's probe port does not fail the kubelet's probes (issue 27 item 1).

A real ``python -m escaler manager`` against the local control plane. One client address
(127.0.0.2, a tenant's pod) opens as many keep-alive connections to the probe port as the server
takes at once (16) and sends a cheap request on each every 2 s, so no connection ever sits idle
for a whole request deadline; the kubelet (127.0.0.1) probes ``/healthz`` once a second meanwhile.
Before, the flood held every slot and the probes got 503 or a closed connection (the kubelet would
restart the manager); now one client holds at most half the slots and every probe answers 200.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import pytest

from .conftest import Cluster, eventually, free_port
from .es_helpers import Manager, start_manager

pytestmark = pytest.mark.e2e

FLOOD = 16  # the probe server's connections at once
HOG, KUBELET = "127.0.0.2", "127.0.0.1"


def _get(port: int, source: str, conn: socket.socket | None = None) -> bytes:
    """One ``GET /healthz`` (on ``conn`` when given, kept alive; else a new connection, closed)."""
    own = conn is None
    c = conn or socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    try:
        c.settimeout(5)
        close = "Connection: close\r\n" if own else ""
        c.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{close}\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        if own:
            c.close()


class Hog:
    """``FLOOD`` keep-alive connections from ``HOG``, each sending a request every 2 s."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        self.refused = 0
        self.thread = threading.Thread(target=self._run, name="hog", daemon=True)

    def _run(self) -> None:
        for _ in range(FLOOD):
            with contextlib.suppress(OSError):
                self.held.append(socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                          source_address=(HOG, 0)))
        while not self.stop.is_set():
            for c in list(self.held):
                try:
                    answer = _get(self.port, HOG, c)
                except OSError:
                    answer = b""
                if not answer.startswith(b"HTTP/1.1 200"):
                    self.refused += 1
                    self.held.remove(c)
                    c.close()
                    with contextlib.suppress(OSError):  # reconnect at once, as a hostile client would
                        self.held.append(socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                                  source_address=(HOG, 0)))
            self.stop.wait(2.0)

    def __enter__(self) -> Hog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for c in self.held:
            c.close()


def test_a_client_holding_probe_connections_does_not_fail_the_kubelets_probes(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager],
) -> None:
    port = free_port()
    mgr = start_manager(cluster, tmp_path, user="escaler-flood", namespace=namespace, api=False,
                        extra_args=[f"--health-probe-bind-address=127.0.0.1:{port}"])
    managers.append(mgr)
    def healthy() -> bool:
        try:
            return _get(port, KUBELET).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    eventually(healthy, timeout=60, what=f"the manager's /healthz; log:\n{mgr.output()}")
    with Hog(port) as hog:
        time.sleep(3)  # the hog's connections are open and busy
        answers = []
        for _ in range(15):  # the kubelet probes once a second
            try:
                answers.append(_get(port, KUBELET)[:12])
            except OSError as err:
                answers.append(f"connection failed: {err}".encode())
            time.sleep(1)
        refused = hog.refused
    assert answers == [b"HTTP/1.1 200"] * len(answers), answers
    # the hog itself was held to its share (half the slots), not the whole server
    assert refused > 0, "the flooding client was never refused a connection"
    assert mgr.alive(), mgr.output()
