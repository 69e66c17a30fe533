"""Bytes of two per-scaler records the scenario of ``bench/mem_by_owner.py`` does not create.

1. The Event recorder's live series (``escaler.kube.events.EventRecorder``).
   ``python bench/mem_records.py`` (``MEM_EVENTS`` series, default 2,000): one ``SuccessfulRescale``
Event for each of that many scalers, as a surge records them, on a recorder whose writer is not
started (so every series stays live, as it does for the 6-minute series window after a surge); the
tracemalloc growth divided by the count is the recorder's bytes per live series (the series, its
key, its spam bucket; the regarding dict and note the caller builds are counted too). A fleet
that scaled keeps one series per scaler, up to ``MAX_TRACKED``.
2. A per-scaler counter series (``escaler_scale_writes_total{namespace,name,result}``, one per
   scaler that wrote): the tracemalloc growth per label set of ``ScalerMetrics.scale_writes`` and,
   for comparison, of a prometheus_client ``Counter`` with the same labels (what it was before
   2026-12-07), each after one ``inc()`` for ``MEM_EVENTS`` scalers.

Not part of ``make bench``; docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from escaler.clock import FakeClock
from escaler.kube.events import EventRecorder
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics


class _Rest:
    def request(self, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return {}


def measure(n: int) -> float:
    rec = EventRecorder(_Rest(), component="escaler", instance="pod-0", clock=FakeClock(),  # type: ignore[arg-type]
                        burst=25, qps=1 / 300, queue_size=n)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        rec.event({"apiVersion": "escaler.io/v1alpha1", "kind": "ElasticScaler", "namespace": "ns-3",
                   "name": f"scaler-{i:05d}", "uid": f"0c2f5a3e-9d1b-4d2e-8f7a-{i:012d}"},
                  "Normal", "SuccessfulRescale", "Scale",
                  "New size: 4; reason: metric queue above target (value 45, target 10)")
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(rec._series) == n, len(rec._series)
    return grown / n


def counter_series(n: int, counter: Any) -> float:
    names = [f"scaler-{i:05d}" for i in range(n)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for name in names:
        counter.labels("ns-3", name, "success").inc()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return grown / n


if __name__ == "__main__":
    count = int(os.environ.get("MEM_EVENTS", "2000"))
    print(f"{measure(count):7.0f} bytes per live Event series ({count} series)")
    live = ScalerMetrics(CollectorRegistry()).scale_writes
    child = Counter("escaler_scale_writes_total", "x", ["namespace", "name", "result"],
                    registry=CollectorRegistry())
    print(f"{counter_series(count, live):7.0f} bytes per counter series, ScalerMetrics.scale_writes "
          f"({type(live).__name__})")
    print(f"{counter_series(count, child):7.0f} bytes per counter series, a prometheus_client Counter child")
