"""A metric endpoint that answers in two writes: ``fetch`` with and without the quick ACK (issue 30).

Run: ``python bench/bench_fetch_split.py`` (or ``python bench/run.py bench_fetch_split``).

A server that writes an answer's head and its body in two ``send`` calls with Nagle's algorithm on
(Python's ``http.server`` does, so does the fake Prometheus of the capacity bench) holds the body
until the client acknowledges the head; a Linux client delays that ACK by ~40 ms unless it asks for
a quick one. ``escaler.signals.fetch`` asks before every receive (``TCP_QUICKACK``); "off" rows set
the module's ``_TCP_QUICKACK`` to None, the code before the change.

Rows, each over a keep-alive loopback connection to a server thread in this process:

* ``one write``: head and body in one ``sendall`` (what Go's net/http does for a small answer);
* ``two writes``: head, then body, Nagle on (no ``TCP_NODELAY`` on the server socket);
* ``gap ms``: an idle pause before each fetch (not counted): the same work on a core that went idle
  in between, as in a manager whose polls are spread over the interval.

``wall ms`` is the median wall clock of one fetch, ``client CPU µs`` the median ``time.thread_time()``
of the calling thread per fetch (the server thread is not counted), over ``ROUNDS`` rounds of ``N``.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from escaler.signals.netpolicy import AddressPolicy, parse_networks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fetch_head import _server

fetch_module = importlib.import_module("escaler.signals.fetch")

TITLE = "Metric fetch against a server answering in two writes: with and without the quick ACK"
NOTES = """
One `escaler.signals.fetch.fetch` over a keep-alive loopback connection to a server thread. `one write`:
head and body in one `sendall`; `two writes`: head then body, Nagle on (as Python's `http.server`).
`quick ACK off` is the code before the change (no `TCP_QUICKACK` before a receive). `gap ms`: an idle
pause before each fetch, not counted. Medians over the rounds of the per-fetch wall clock and of the
calling thread's CPU. Numbers vary with the machine and its load.
"""

ROUNDS = 3
N = 60
BODY = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"30.5"]}]}}'
HEAD = (b"HTTP/1.1 200 OK\r\nServer: BaseHTTP/0.6 Python/3.11.7\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY))


def _round(client: Any, url: str, gap: float) -> tuple[float, float]:
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(N):
        if gap:
            time.sleep(gap)
        w0, c0 = time.perf_counter(), time.thread_time()
        assert fetch_module.fetch(client, url, timeout=5, params={"query": "up"}).body == BODY
        cpus.append(time.thread_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus)


def _case(split: bool, quick: bool, gap: float) -> dict[str, Any]:
    listener, port = _server((HEAD, BODY) if split else (HEAD + BODY,))
    client = fetch_module.HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")))
    url = f"http://127.0.0.1:{port}/api/v1/query"
    saved = fetch_module._TCP_QUICKACK
    fetch_module._TCP_QUICKACK = saved if quick else None
    try:
        _round(client, url, 0.0)  # warm up: imports, the connection
        rounds = [_round(client, url, gap) for _ in range(ROUNDS)]
    finally:
        fetch_module._TCP_QUICKACK = saved
        client.close()
        listener.close()
    return {"server": "two writes" if split else "one write", "quick ACK": "on" if quick else "off",
            "gap ms": round(gap * 1000), "fetches": N * ROUNDS,
            "wall ms": round(statistics.median(r[0] for r in rounds) * 1000, 2),
            "client CPU µs": round(statistics.median(r[1] for r in rounds) * 1e6)}


def run() -> list[dict[str, Any]]:
    return [_case(split, quick, gap) for split, quick, gap in (
        (False, True, 0.0), (True, False, 0.0), (True, True, 0.0),
        (False, True, 0.03), (True, False, 0.03), (True, True, 0.03))]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import table  # type: ignore[import-not-found]

    print(table(run()))
