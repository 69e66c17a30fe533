"""Workqueue throughput: add -> get -> done with 1 and 4 worker threads, no-op vs Prometheus metrics.

Run: ``python bench/bench_workqueue.py``. RealClock; numbers are indicative only (GIL-bound,
they vary with machine load) and are never asserted. Two modes, ``ITEMS`` adds each:

* ``cycle``: ``KEYS`` distinct keys are queued, then each worker loops get -> done -> add(same
  key) until the workers together have done ``ITEMS`` full cycles. Nothing collapses, so
  ``items/s`` is the cost of one add+get+done round trip under contention.
* ``producer``: the main thread adds ``ITEMS`` keys cycling over ``KEYS`` while the workers
  get/done, then ``shutdown_with_drain``. Adds of a key that is already waiting collapse (the
  stingy contract), so ``processed`` depends on scheduling and is at most ``adds``.
"""


from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from escaler.workqueue import MetricsProvider, NoopMetricsProvider, PrometheusMetricsProvider, Queue, ShutDown

TITLE = "Workqueue add -> get -> done throughput (100,000 items over 10,000 keys)"
NOTES = """
`cycle`: each worker loops get -> done -> re-add (steady-state round trip, no collapsing).
`producer`: one thread adds while the workers consume, so re-adds of a key still queued collapse
and `processed` can be below `adds`. With CPython's GIL more workers add lock hand-offs, not
parallelism: 4 workers are slower than 1 on this pure-queue loop (real reconciles block on I/O,
where more workers do help). The Prometheus provider costs roughly 3-4x, one lock per metric update.
"""

ITEMS = 100_000
KEYS = 10_000
WORKER_COUNTS = (1, 4)


def _noop() -> MetricsProvider:
    return NoopMetricsProvider()


def _prometheus() -> MetricsProvider:
    return PrometheusMetricsProvider(CollectorRegistry())


PROVIDERS: dict[str, Callable[[], MetricsProvider]] = {"noop": _noop, "prometheus": _prometheus}


def _cycle(q: Queue[str], names: list[str], workers: int, items: int) -> int:
    for name in names:
        q.add(name)
    budgets = [items // workers + (1 if i < items % workers else 0) for i in range(workers)]

    def work(budget: int) -> None:
        get, done, add = q.get, q.done, q.add
        for _ in range(budget):
            item = get()
            done(item)
            add(item)

    threads = [threading.Thread(target=work, args=(b,), daemon=True) for b in budgets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return items


def _producer(q: Queue[str], names: list[str], workers: int, items: int) -> int:
    processed = [0] * workers

    def work(idx: int) -> None:
        n = 0
        get, done = q.get, q.done
        while True:
            try:
                item = get()
            except ShutDown:
                break
            done(item)
            n += 1
        processed[idx] = n

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    add = q.add
    keys = len(names)
    for i in range(items):
        add(names[i % keys])
    q.shutdown_with_drain()
    for t in threads:
        t.join()
    return sum(processed)


MODES: dict[str, Callable[[Queue[str], list[str], int, int], int]] = {"cycle": _cycle, "producer": _producer}


def run_case(mode: str, metrics: str, workers: int, items: int = ITEMS, keys: int = KEYS) -> dict[str, Any]:
    q: Queue[str] = Queue("bench", metrics_provider=PROVIDERS[metrics]())
    names = [f"default/key-{i}" for i in range(keys)]
    try:
        start = time.perf_counter()
        processed = MODES[mode](q, names, workers, items)
        wall = time.perf_counter() - start
    finally:
        q.shutdown()
    return {
        "mode": mode,
        "metrics": metrics,
        "workers": workers,
        "adds": items,
        "processed": processed,
        "wall_s": wall,
        "items_per_s": processed / wall,
    }


def run() -> list[dict[str, Any]]:
    return [
        run_case(mode, metrics, workers)
        for mode in MODES
        for metrics in PROVIDERS
        for workers in WORKER_COUNTS
    ]


def main() -> None:
    rows = run()
    header = (
        f"{'mode':<10}{'metrics':<12}{'workers':>7}{'adds':>9}{'processed':>11}{'wall s':>8}{'items/s':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['mode']:<10}{r['metrics']:<12}{r['workers']:>7}{r['adds']:>9}{r['processed']:>11}"
            f"{r['wall_s']:>8.2f}{r['items_per_s']:>11,.0f}"
        )


if __name__ == "__main__":
    main()
