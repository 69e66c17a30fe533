"""What a policy reads from the scrapes: a named per-replica metric, averaged over a span.

Contract:

* ``METRICS``: the per-replica metrics a real LLM server exports and a policy may scale on —
  ``running`` (``num_requests_running``), ``waiting`` (``num_requests_waiting``), ``inflight``
  (their sum: the concurrency a Knative queue-proxy counts), ``kv`` (KV-cache utilization, 0-1).
* ``per_replica(scrapes, now, seconds, metric)`` is what ``avg_over_time(metric[seconds])`` gives
  for each replica serving at the newest scrape (a replica that is not serving exports nothing: it
  is *missing*, as a pod without metrics is to the HPA): ``{replica id: mean}``. Requests no replica
  holds yet (the fleet's own queue, while nothing serves) are not any replica's.
* ``fleet_concurrency(scrapes, now, seconds)`` is the mean over the span of every request in the
  system (running, waiting, and the fleet's own queue) — Knative's observed concurrency, which
  counts requests the activator buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

from escaler.sim.engine import Scrape, window
from escaler.sim.serving import Gauge

__all__ = ["METRICS", "fleet_concurrency", "per_replica", "value_of"]

METRICS = ("running", "waiting", "inflight", "kv")


def value_of(g: Gauge, metric: str) -> float:
    if metric == "running":
        return float(g.running)
    if metric == "waiting":
        return float(g.waiting)
    if metric == "inflight":
        return float(g.running + g.waiting)
    if metric == "kv":
        return g.kv_utilization
    raise ValueError(f"metric: must be one of {', '.join(METRICS)}, got {metric!r}")


def per_replica(scrapes: Sequence[Scrape], now: float, seconds: float, metric: str) -> dict[int, float]:
    span = window(scrapes, now, seconds)
    if not span:
        return {}
    serving = {g.replica for g in span[-1].gauges}
    sums: dict[int, float] = dict.fromkeys(serving, 0.0)
    counts: dict[int, int] = dict.fromkeys(serving, 0)
    for s in span:
        for g in s.gauges:
            if g.replica in sums:
                sums[g.replica] += value_of(g, metric)
                counts[g.replica] += 1
    return {r: sums[r] / counts[r] for r in sorted(serving)}


def fleet_concurrency(scrapes: Sequence[Scrape], now: float, seconds: float) -> float | None:
    span = window(scrapes, now, seconds)
    if not span:
        return None
    return sum(s.running + s.waiting for s in span) / len(span)
