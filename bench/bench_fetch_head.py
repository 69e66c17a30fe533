"""CPU of reading a metric endpoint's answer: ``http.client``'s response head parser (the ``email``
package's) against ``escaler.signals.httphead`` (issue 30).

Run: ``python bench/bench_fetch_head.py`` (or ``python bench/run.py bench_fetch_head``).

Two measurements, each alternated before/after in one process, ``ROUNDS`` rounds each:

* ``parse``: ``begin()`` and ``read()`` of one Prometheus answer (status line, 4 headers as a Python
  ``http.server`` sends them, a 69-byte JSON body) from memory — ``http.client.HTTPResponse``
  (before) against ``httphead.BoundedResponse`` (after);
* ``fetch``: one whole ``escaler.signals.fetch.fetch`` over a keep-alive loopback connection to a
  server thread answering the same bytes (resolve, policy check, pooled connection, send, receive,
  parse, body), with ``fetch``'s response class set to one or the other. CPU is
  ``time.thread_time()`` of the calling thread only (the server thread is not counted).

Numbers are µs of CPU per operation: each round's figure is the mean of ``N`` operations; the table
gives every round and the median of the rounds.
"""

from __future__ import annotations

import http.client
import importlib
import io
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from escaler.signals.httphead import BoundedResponse
from escaler.signals.netpolicy import AddressPolicy, parse_networks

fetch_module = importlib.import_module("escaler.signals.fetch")

TITLE = "Metric answer head parsing: http.client (email parser) vs escaler.signals.httphead"
NOTES = """
`parse`: `begin()` + `read()` of one Prometheus answer from memory (status line, `Server`, `Date`,
`Content-Type`, `Content-Length`, 69-byte body). `fetch`: one `escaler.signals.fetch.fetch` over a
keep-alive loopback connection (the client thread's CPU only). Before = `http.client.HTTPResponse`,
after = `escaler.signals.httphead.BoundedResponse`, alternated in one process; µs of CPU per
operation, the median of the rounds. `calls before`/`calls after` (parse row): function calls,
Python and builtin, of one `begin()` + `read()` (`sys.setprofile`), what a profiler that counts every
call charges for. Numbers vary with the machine and its load.
"""

ROUNDS = 3
PARSE_N = 20000
FETCH_N = 2000

BODY = b'{"status":"success","data":{"resultType":"scalar","result":[1765069200,"42.5"]}}'[:69]
ANSWER = (b"HTTP/1.1 200 OK\r\nServer: BaseHTTP/0.6 Python/3.11.7\r\nDate: Mon, 07 Dec 2026 01:00:00 GMT\r\n"
          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)

CLASSES: dict[str, type[http.client.HTTPResponse]] = {"before": http.client.HTTPResponse,
                                                       "after": BoundedResponse}


class _Mem:
    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(ANSWER))


def _parse(cls: type[http.client.HTTPResponse]) -> float:
    sock: Any = _Mem()
    start = time.thread_time()
    for _ in range(PARSE_N):
        r = cls(sock, method="GET")
        r.begin()
        r.read()
    return (time.thread_time() - start) / PARSE_N * 1e6


def _calls(cls: type[http.client.HTTPResponse]) -> int:
    """Function calls (Python and builtin) of one ``begin()`` + ``read()``: what a profiler that
    counts every call charges for."""
    sock: Any = _Mem()
    n = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    r = cls(sock, method="GET")
    sys.setprofile(count)
    try:
        r.begin()
        r.read()
    finally:
        sys.setprofile(None)
    return n


def _server(parts: tuple[bytes, ...] = (ANSWER,)) -> tuple[socket.socket, int]:
    """A keep-alive loopback server answering every request with ``parts``, one ``sendall`` each
    (Nagle on: ``bench_fetch_split`` sends head and body apart)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\r\n\r\n" in buf:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    for part in parts:
                        conn.sendall(part)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


def _fetch(cls: type[http.client.HTTPResponse], client: Any, url: str) -> float:
    fetch_module.BoundedResponse = cls
    try:
        start = time.thread_time()
        for _ in range(FETCH_N):
            assert fetch_module.fetch(client, url, timeout=5).body == BODY
        return (time.thread_time() - start) / FETCH_N * 1e6
    finally:
        fetch_module.BoundedResponse = BoundedResponse


def run() -> list[dict[str, Any]]:
    listener, port = _server()
    client = fetch_module.HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))
    url = f"http://127.0.0.1:{port}/api/v1/query"
    got: dict[tuple[str, str], list[float]] = {}
    try:
        for name in CLASSES.values():  # warm up both paths (imports, the first connection)
            _parse(name)
            _fetch(name, client, url)
        for _ in range(ROUNDS):
            for which, cls in CLASSES.items():
                got.setdefault(("parse", which), []).append(_parse(cls))
                got.setdefault(("fetch", which), []).append(_fetch(cls, client, url))
    finally:
        client.close()
        listener.close()
    rows = []
    for what in ("parse", "fetch"):
        before = statistics.median(got[(what, "before")])
        after = statistics.median(got[(what, "after")])
        rows.append({"operation": what, "ops/round": PARSE_N if what == "parse" else FETCH_N,
                     "before µs (rounds)": " / ".join(f"{v:.1f}" for v in got[(what, "before")]),
                     "after µs (rounds)": " / ".join(f"{v:.1f}" for v in got[(what, "after")]),
                     "before µs median": round(before, 1), "after µs median": round(after, 1),
                     "saved": f"{(before - after) / before:.0%}"})
    rows[0]["calls before"] = _calls(http.client.HTTPResponse)
    rows[0]["calls after"] = _calls(BoundedResponse)
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import table  # type: ignore[import-not-found]

    print(table(run()))
