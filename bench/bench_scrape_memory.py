"""Memory of one ``/metrics`` scrape with a series per scaler: the peak a scrape adds, by exposition.

Run: ``python bench/bench_scrape_memory.py`` (or ``python bench/run.py bench_scrape_memory``).
``N`` scalers' per-scaler series (``ScalerMetrics``: desired and current replicas, one metric value
with the capacity bench's PromQL as its label, one successful scale write — the five lines a
scaler has after a surge) on a manager's ``MetricsRegistry``; each row is the peak tracemalloc
counts while one page is made, in a fresh child process. A manager is scraped every 15-30 s, so
this peak is memory it keeps resident (the capacity bench at 10,000 scalers saw VmHWM rise by 21 MB
at its one scrape after the surge; issue 30).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TITLE = "One /metrics scrape: the peak it adds, by scaler count and exposition (tracemalloc)"
NOTES = """
`page MB`: the exposition's size. `whole page, sample lists` is how `/metrics` was made before
2026-12-07 (prometheus_client's `generate_latest` over the registry, each family's samples a list
with a labels dict per sample); `per family, streamed samples` is `MetricsRegistry.exposition()`
now (the same bytes: `tests/unit/test_runtime_metrics_exposition.py`). `peak MB` is tracemalloc's
peak while one page is made, `B/scaler` that over `N`.
"""

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SCRAPE_N", "1000,3000,10000").split(","))
VARIANTS = ("whole page, sample lists", "per family, streamed samples")

CHILD = """
import json, sys, tracemalloc
from prometheus_client import generate_latest
from escaler.api.scaler import MetricStatus
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.runtime.metrics import MetricsRegistry

n, variant = int(sys.argv[1]), sys.argv[2]
registry = MetricsRegistry()
metrics = ScalerMetrics(registry.registry)
for i in range(n):
    ns, name = f"es-{i % 10}", f"s-{i:05d}"
    query = f'sum(rate(http_requests_total{{namespace="{ns}",service="{name}"}}[1m]))'
    metrics.record_sync(ns, name, 3, 6, [MetricStatus(name=query, type="External", value=19.7 + i / n,
                                                       target=10.0)])
    metrics.scale_writes.labels(ns, name, "success").inc()


class Listed:
    # each family with its samples as a list, as the collectors made them before
    def collect(self):
        for family in registry.registry.collect():
            family.samples = list(family.samples)
            yield family


tracemalloc.start()
page = generate_latest(Listed()) if variant == "whole page, sample lists" else registry.exposition()
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"page": len(page), "peak": peak}))
"""


def measure(n: int, variant: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), variant], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    got = json.loads(out.stdout)
    return {"N": n, "exposition": variant, "page MB": round(got["page"] / 1e6, 2),
            "peak MB": round(got["peak"] / 1e6, 1), "B/scaler": round(got["peak"] / n)}


def run() -> list[dict[str, Any]]:
    rows = [measure(n, variant) for n in SIZES for variant in VARIANTS]
    for row in rows:
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    from run import table

    print(table(run()))
