"""How fast one Controller drains a burst of keys, by worker count (the ``--max-concurrent-reconciles``
default). Each reconcile does a fixed amount of Python work (CPU, so GIL contention cannot shrink it)
and, in the surge rows, a blocking 5 ms API round trip (``time.sleep`` releases the GIL as a socket
read does)."""

from __future__ import annotations

import resource
import threading
import time
from typing import Any

from escaler.runtime.controller import Controller
from escaler.runtime.types import Request, Result

TITLE = "Controller burst drain by worker count (--max-concurrent-reconciles)"
NOTES = """
Keys enqueued at once, drained by one Controller. With no blocking I/O the worker count does not
change throughput (one core, the GIL): CPU per reconcile is the limit. Workers only overlap the
blocking writes (the `/scale` write and the status patch) — which is exactly what a fleet-wide
surge is made of. Throughput levels off near (cpu + io) / cpu workers; the manager's default, 8
workers, reaches that plateau for these numbers and costs nothing when idle (it sizes the API
connection pool: 6 controllers x 8 + 16 informers). Raise it only when
`controller_runtime_active_workers` stays at the maximum while the manager uses less than a core.
"""

KEYS = 2000
WORKERS = (1, 2, 4, 8, 16)
# (name, cpu seconds per reconcile, blocking seconds, 1 in N reconciles blocks)
SCENARIOS = (
    ("cpu 1 ms, no I/O", 0.001, 0.0, 1),
    ("cpu 1 ms + 5 ms write on every reconcile (surge)", 0.001, 0.005, 1),
    ("cpu 1 ms + 5 ms write on 1 in 10", 0.001, 0.005, 10),
)


def _spin(k: int) -> int:
    x = 0
    for i in range(k):
        x += i
    return x


def _calibrate() -> int:
    k = 200_000
    t = time.process_time()
    _spin(k)
    return int(k / max(1e-9, (time.process_time() - t) * 1000))


class _Rec:
    def __init__(self, n: int, iters: int, io: float, every: int) -> None:
        self.left, self.iters, self.io, self.every = n, iters, io, every
        self.mu = threading.Lock()
        self.done = threading.Event()
        self.i = 0

    def reconcile(self, req: Request) -> Result:
        _spin(self.iters)
        with self.mu:
            self.i += 1
            i = self.i
        if self.io and i % self.every == 0:
            time.sleep(self.io)
        with self.mu:
            self.left -= 1
            if self.left == 0:
                self.done.set()
        return Result()


def _drain(n: int, workers: int, iters: int, io: float, every: int) -> tuple[float, float]:
    rec = _Rec(n, iters, io, every)
    ctl = Controller(f"bench-{workers}", rec, max_concurrent_reconciles=workers)
    stop = threading.Event()
    t = threading.Thread(target=ctl.start, args=(stop,), daemon=True)
    t.start()
    time.sleep(0.1)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for i in range(n):
        ctl.enqueue(Request("ns", f"s{i}"))
    assert rec.done.wait(600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    t.join(30)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def run() -> list[dict[str, Any]]:
    per_ms = _calibrate()
    rows = []
    for name, cpu, io, every in SCENARIOS:
        for w in WORKERS:
            wall, cpu_s = _drain(KEYS, w, int(per_ms * cpu * 1000), io, every)
            rows.append({"scenario": name, "workers": w, "keys": KEYS, "drain s": round(wall, 2),
                         "keys/s": round(KEYS / wall), "cpu ms/key": round(1000 * cpu_s / KEYS, 2)})
    return rows
