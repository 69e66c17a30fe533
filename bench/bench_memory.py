"""Memory per ElasticScaler inside one manager process, by the module that allocated it.

Runs the reconciler on the fake API harness (``tests/unit/es_fakes.py``): N Deployments, then N
MetricsTrigger scalers (one External metric each) created, cached, and reconciled once (a
scale-up: status, Event, window, pipeline state), then ``BENCH_MEMORY_POLLS`` - 1 more times
(default 2 polls in all: the next poll starts from a cache that shows the scale-up's write, as
every scaler of a steady fleet does between two writes), and ``tracemalloc`` compares the heap before
the scalers with the heap after (``gc.collect()`` both times). Rows: the total per scaler, then the
manager's part of it (the total less what the in-process fake API server stores: every allocation
with ``tests/unit/fakeapi.py`` among its ``FRAMES`` innermost frames, i.e. the server's copies of
the objects and its watch history, which a real manager does not hold), then the modules holding
the most of the manager's part, per scaler. It measures what the manager keeps per scaler, not the
process's RSS (``bench_capacity`` reports that on the real control plane, where objects also carry
``managedFields`` and the API server's defaults, so they are larger).
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from es_fakes import NS, deployment, external_metric, harness, metrics_trigger, scaler  # noqa: E402

from escaler.runtime import Request  # noqa: E402

TITLE = "Memory per ElasticScaler in the manager (tracemalloc, fake API, by module)"
NOTES = """
`BENCH_MEMORY_N` scalers (default 1000) on the fake API harness, each reconciled
`BENCH_MEMORY_POLLS` times (default 2: a scale-up, then the next poll on caches that show its
write; the rows before 2026-12-07 are of one reconcile, the scale-up alone). `KiB/scaler` is the
heap growth from creating, caching and reconciling the scalers, divided by N. `total` is all of
it; `manager` leaves out the in-process fake API server's own copies of the objects and its watch
history (allocations with `tests/unit/fakeapi.py` among their 16 innermost frames; the rows before
2026-12-02 counted them in `total` and in `frozen.py`, as the server copies objects with `thaw`).
The module rows split the manager's part by the file that allocated it (tracemalloc; a dict reused
from CPython's free list keeps the file of its first allocation, so a row is approximate;
`python bench/mem_by_owner.py` splits the same scenario by the structure that holds the memory
instead). `frozen.py` is the informer caches' frozen copies of the scalers and their targets;
`pydantic/main.py` the parsed models the reconciler keeps (ParseCache, whose spec parts equal
across scalers are shared since issue 30) and the metric rows of each scaler's last collection;
`json/encoder.py` the status each scaler's last write sent, kept as JSON text by the StatusWriter
only until a poll finds the cache caught up with that write (so it leaves the top rows at 2
polls). The first reconcile waits for the targets' informer to list; the others run on caches
that hold every object (as a manager's do). The issue's goal is 10 KB per scaler of RSS growth on
a real API server.
"""

TOP = 8
# frames kept per allocation: deep enough to see the fake API server under freeze/thaw recursion
FRAMES = 16
_STDLIB = f"python{sys.version_info[0]}.{sys.version_info[1]}/"
_FAKE_API = tracemalloc.Filter(False, "*/tests/unit/fakeapi.py", all_frames=True)


def _caught_up(h: Any) -> None:
    # tracemalloc with FRAMES frames slows the informers down: wait longer than wait_synced's 5 s
    for resource in ("elasticscalers", "deployments"):
        for _ in range(60):
            try:
                h.wait_synced(resource)
                break
            except TimeoutError:
                continue
        else:
            h.wait_synced(resource)


def _measure(n: int, polls: int) -> list[tuple[str, float]]:
    with harness(poll_interval=30.0) as h:
        for i in range(n):
            h.api("deployments").create(deployment(f"w{i}", 2))
        h.start()
        h.collector.values["queue"] = 20.0
        gc.collect()
        tracemalloc.start(FRAMES)
        before = tracemalloc.take_snapshot()
        for i in range(n):
            obj = scaler(f"es{i}", metrics_trigger(external_metric("queue", "10")))
            obj["spec"]["targetRef"]["name"] = f"w{i}"
            h.api("elasticscalers").create(obj)
        _caught_up(h)
        # the first reconcile starts the targets' informer: wait for it to list, then reconcile the
        # rest on caches that already hold them (reconcile_once would wait for six caches before every
        # reconcile, thawing every object of the fake API each time: O(N^2), hours under FRAMES)
        h.reconcile_once("es0")
        h.wait_listed()
        _caught_up(h)
        for i in range(1, n):
            h.reconciler.reconcile(Request(NS, f"es{i}"))
        _caught_up(h)
        # the next polls, on caches that show each scaler's write (a steady fleet between two writes)
        for _ in range(polls - 1):
            for i in range(n):
                h.reconciler.reconcile(Request(NS, f"es{i}"))
            _caught_up(h)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    total = sum(s.size_diff for s in after.compare_to(before, "filename"))
    stats = after.filter_traces([_FAKE_API]).compare_to(before.filter_traces([_FAKE_API]), "filename")
    out = [("total (with the fake API server)", total / n / 1024),
           ("manager (total less the fake API server)", sum(s.size_diff for s in stats) / n / 1024)]
    for s in stats[:TOP]:
        name = s.traceback[0].filename
        for marker in ("site-packages/", str(ROOT) + "/", _STDLIB):
            if marker in name:
                name = name.split(marker, 1)[1]
        out.append((name, s.size_diff / n / 1024))
    return out


def run() -> list[dict[str, Any]]:
    n = int(os.environ.get("BENCH_MEMORY_N", "1000"))
    polls = int(os.environ.get("BENCH_MEMORY_POLLS", "2"))
    if polls < 1:
        raise ValueError(f"BENCH_MEMORY_POLLS: must be >= 1, got {polls}")
    return [{"scalers": n, "polls": polls, "allocated by": where, "KiB/scaler": round(kib, 2)}
            for where, kib in _measure(n, polls)]


if __name__ == "__main__":
    for row in run():
        print(row)
