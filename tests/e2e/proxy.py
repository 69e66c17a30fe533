"""A loopback TCP proxy a test can cut: the client keeps its connection details, the network goes.

``pause()`` severs every open connection and makes new ones fail at once (accepted, then
closed), as a broken network or a dead API server would look to a client; ``resume()`` lets
traffic through again. TLS passes through untouched (the proxy never decrypts), so a
kubeconfig pointing at ``https://127.0.0.1:<proxy port>`` still verifies the API server's
certificate (its SANs include 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        # open (client, upstream) socket pairs; severed by pause()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        # set while traffic may flow
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def pause(self) -> None:
        self._open.clear()
        with self._lock:
            conns, self._conns = self._conns, []
        for a, b in conns:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def resume(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self.pause()
        self._listener.close()
