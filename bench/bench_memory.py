"""Memory per ElasticScaler inside one manager process, by the module that allocated it.

Runs the reconciler on the fake API harness (``tests/unit/es_fakes.py``): N Deployments, then N
MetricsTrigger scalers (one External metric each) created, cached, and reconciled once (a
scale-up: status, Event, window, pipeline state), and ``tracemalloc`` compares the heap before
the scalers with the heap after (``gc.collect()`` both times). Rows: the total per scaler, then the
modules holding the most, per scaler. It measures what the manager keeps per scaler, not the
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

from es_fakes import deployment, external_metric, harness, metrics_trigger, scaler  # noqa: E402

TITLE = "Memory per ElasticScaler in the manager (tracemalloc, fake API, by module)"
NOTES = """
`BENCH_MEMORY_N` scalers (default 1000) on the fake API harness, each reconciled once (a
scale-up). `KiB/scaler` is the heap growth from creating, caching and reconciling the scalers,
divided by N, grouped by the file that allocated it (tracemalloc). `frozen.py` is the informer
cache's frozen copy of each object; `pydantic/main.py` the parsed models the reconciler keeps
(ParseCache); `prometheus_client` the per-scaler series. The issue's goal is 10 KB per scaler of
RSS growth on a real API server.
"""

TOP = 8


def _measure(n: int) -> list[tuple[str, float]]:
    with harness(poll_interval=30.0) as h:
        for i in range(n):
            h.api("deployments").create(deployment(f"w{i}", 2))
        h.start()
        h.collector.values["queue"] = 20.0
        gc.collect()
        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()
        for i in range(n):
            obj = scaler(f"es{i}", metrics_trigger(external_metric("queue", "10")))
            obj["spec"]["targetRef"]["name"] = f"w{i}"
            h.api("elasticscalers").create(obj)
        h.wait_synced()
        for i in range(n):
            h.reconcile_once(f"es{i}")
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    stats = after.compare_to(before, "filename")
    out = [("total", sum(s.size_diff for s in stats) / n / 1024)]
    for s in stats[:TOP]:
        name = s.traceback[0].filename
        for marker in ("site-packages/", str(ROOT) + "/"):
            if marker in name:
                name = name.split(marker, 1)[1]
        out.append((name, s.size_diff / n / 1024))
    return out


def run() -> list[dict[str, Any]]:
    n = int(os.environ.get("BENCH_MEMORY_N", "1000"))
    return [{"scalers": n, "allocated by": where, "KiB/scaler": round(kib, 2)} for where, kib in _measure(n)]


if __name__ == "__main__":
    for row in run():
        print(row)
