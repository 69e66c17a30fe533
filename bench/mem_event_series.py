"""Bytes the Event recorder holds per live series (``escaler.kube.events.EventRecorder``).

``python bench/mem_event_series.py`` (``MEM_EVENTS`` series, default 2,000): one ``SuccessfulRescale``
Event for each of that many scalers, as a surge records them, on a recorder whose writer is not
started (so every series stays live, as it does for the 6-minute series window after a surge); the
tracemalloc growth divided by the count is the recorder's bytes per live series (the series, its
key, its spam bucket; the regarding dict and note the caller builds are counted too). A fleet
that scaled keeps one series per scaler, up to ``MAX_TRACKED``. Not part of ``make bench``;
docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import tracemalloc
from typing import Any

from escaler.clock import FakeClock
from escaler.kube.events import EventRecorder


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


if __name__ == "__main__":
    count = int(os.environ.get("MEM_EVENTS", "2000"))
    print(f"{measure(count):7.0f} bytes per live Event series ({count} series)")
