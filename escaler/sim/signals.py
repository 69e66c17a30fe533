"""What a policy reads from the scrapes: a named per-replica metric, averaged over a span.

Contract:

* ``METRICS``: the per-replica metrics a real LLM server exports and a policy may scale on —
  ``running`` (``num_requests_running``), ``waiting`` (``num_requests_waiting``), ``inflight``
  (their sum: the concurrency a Knative queue-proxy counts), ``kv`` (KV-cache utilization, 0-1).
* ``per_replica(scrapes, now, seconds, metric, cadence)`` is what ``avg_over_time(metric[seconds])``
  gives for each replica serving at the newest scrape (with ``cadence``: over Prometheus' samples,
  at least the newest one; a replica that is not serving exports nothing: it is *missing*, as a
  pod without metrics is to the HPA): ``{replica id: mean}``. Requests no replica holds yet (the
  fleet's own queue, while nothing serves) are not any replica's.
* ``fleet_concurrency(scrapes, now, seconds)`` is the mean over the span of every request in the
  system (running, waiting, and the fleet's own queue) — Knative's observed concurrency, which
  counts requests the activator buffers (Knative's autoscaler scrapes its queue-proxies itself,
  every second: this is its own pipeline, not Prometheus').

**The Prometheus pipeline** every policy that reads Prometheus goes through (apa, slo, hpa), so
none of them sees fresher data than another: Prometheus scrapes the servers every ``cadence``
seconds (``PROMETHEUS_SCRAPE_S``, 15 s by default, ``--prometheus-scrape``):

* ``prometheus_view(scrapes, now, cadence)`` — the newest sample Prometheus holds at ``now`` (an
  instant query, what a metrics adapter hands the HPA).
* ``prometheus_window(scrapes, now, seconds, cadence)`` — what a range ``[seconds]`` at ``now``
  covers: the server-side observations up to the newest scrape Prometheus holds.
* ``histogram_quantile(q, values, buckets)`` — Prometheus' ``histogram_quantile`` over the
  observations counted into ``buckets`` (upper bounds, ``+Inf`` implied): the rank ``q x count``
  found in its bucket and interpolated linearly inside it (from 0 in the first bucket; the
  highest finite bound when it falls in ``+Inf``); None with no observation.
  ``VLLM_TTFT_BUCKETS_S`` are vLLM's ``time_to_first_token_seconds`` buckets (also TensorRT-LLM's):
  around a 2 s objective the buckets are 1.0 and 2.5 s, so a p90 of 1.6 s reads as anything
  between.
* ``VLLM_TPOT_BUCKETS_S`` are vLLM's ``time_per_output_token_seconds`` buckets, over which the
  simulator observes each finished request's mean TPOT.
* ``histogram_share_above(threshold, values, buckets)`` — the share of observations certainly
  above ``threshold`` from the same buckets: above the smallest bucket bound at or above it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from escaler.sim.engine import Scrape, window
from escaler.sim.serving import Gauge

__all__ = ["METRICS", "PROMETHEUS_SCRAPE_S", "VLLM_TPOT_BUCKETS_S", "VLLM_TTFT_BUCKETS_S",
           "fleet_concurrency", "histogram_quantile",
           "histogram_share_above",
           "per_replica", "prometheus_view", "prometheus_window", "value_of"]

METRICS = ("running", "waiting", "inflight", "kv")
PROMETHEUS_SCRAPE_S = 15.0
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                       10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)

VLLM_TPOT_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                       10.0, 20.0, 40.0, 80.0)


def _due(now: float, cadence: float) -> float:
    """The time of the newest scrape Prometheus has taken at ``now``."""
    return (now // cadence) * cadence


def prometheus_view(scrapes: Sequence[Scrape], now: float, cadence: float) -> Scrape | None:
    """The newest sample Prometheus holds at ``now`` when it scrapes every ``cadence`` seconds."""
    due = _due(now, cadence)
    for s in reversed(scrapes):
        if s.t <= due + 1e-9:
            return s
    return None


def prometheus_window(scrapes: Sequence[Scrape], now: float, seconds: float,
                      cadence: float) -> Sequence[Scrape]:
    """The observations a range ``[seconds]`` at ``now`` covers (module docstring)."""
    due = _due(now, cadence)
    span = window(scrapes, due + 1e-9, seconds)
    return [s for s in span if s.t <= due + 1e-9]


# how far back an instant query looks for a sample (Prometheus' default lookback delta)
LOOKBACK_S = 300.0


def _samples(scrapes: Sequence[Scrape], now: float, seconds: float, cadence: float) -> list[Scrape]:
    """The samples Prometheus took (one per ``cadence``) in ``(due - seconds, due]``, oldest first;
    when none is (the range is shorter than the cadence, or the sample due now is not taken yet),
    the newest one within ``LOOKBACK_S``, as an instant query answers."""
    due = _due(now, cadence)
    found: list[Scrape] = []
    newest: Scrape | None = None
    for s in reversed(scrapes):
        if s.t <= due - max(seconds, LOOKBACK_S):
            break
        if s.t > due + 1e-9 or abs(s.t - round(s.t / cadence) * cadence) > 1e-6:
            continue
        if newest is None:
            newest = s
        if s.t > due - seconds + 1e-9:
            found.append(s)
    if not found and newest is not None:
        found.append(newest)
    return found[::-1]


def histogram_quantile(q: float, values: Sequence[float], buckets: Sequence[float]) -> float | None:
    """Prometheus' ``histogram_quantile(q, ...)`` over ``values`` in ``buckets`` (module docstring)."""
    if not 0 <= q <= 1:
        raise ValueError(f"histogram_quantile: q must be in [0, 1], got {q}")
    if not values:
        return None
    counts = [0] * (len(buckets) + 1)
    for v in values:
        counts[bisect.bisect_left(buckets, v)] += 1
    rank = q * len(values)
    cum = 0
    for i, c in enumerate(counts):
        if cum + c >= rank and c > 0:
            if i == len(buckets):
                return float(buckets[-1])
            lower = 0.0 if i == 0 else float(buckets[i - 1])
            return lower + (float(buckets[i]) - lower) * (rank - cum) / c
        cum += c
    return float(buckets[-1])


def histogram_share_above(threshold: float, values: Sequence[float],
                          buckets: Sequence[float]) -> float | None:
    """The share of ``values`` certainly above ``threshold`` as the histogram's buckets tell it:
    ``1 - bucket(le=b) / count`` with ``b`` the smallest bucket bound at or above ``threshold``
    (no interpolation: an objective between two bounds would count a share of every observation
    in that bucket as a miss); the largest bound when ``threshold`` is above them all. None if
    empty."""
    if not values:
        return None
    i = bisect.bisect_left(buckets, threshold)
    bound = float(buckets[min(i, len(buckets) - 1)])
    return sum(1 for v in values if v > bound) / len(values)


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


def per_replica(scrapes: Sequence[Scrape], now: float, seconds: float, metric: str,
                cadence: float | None = None) -> dict[int, float]:
    """``avg_over_time(metric[seconds])`` per serving replica (module docstring); with ``cadence``
    over the samples Prometheus took every ``cadence`` seconds, as a metrics adapter reads them."""
    span = window(scrapes, now, seconds) if cadence is None else _samples(scrapes, now, seconds, cadence)
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
