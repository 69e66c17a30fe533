"""escaler's own Prometheus metrics (SPEC §11), shared by every scaler kind of one manager.

On the manager's registry (``mgr.metrics.registry``), made once by whoever owns the manager (the
CLI) and passed to every scaler kind's setup, so ElasticScaler and LLMScaler reconcilers record into
the same series:

* ``escaler_desired_replicas{namespace,name}`` (gauge) — the count decided at the last sync;
  removed when the scaler is deleted;
* ``escaler_scale_writes_total{namespace,name,result}`` (counter) — replica writes to a target,
  ``result`` = ``success`` | ``conflict`` | ``error``;
* ``escaler_metric_errors_total{namespace,name}`` (counter) — metric reads that produced no
  usable sample;
* ``escaler_decision_latency_seconds`` (histogram) — one sync's time from the start of
  collection to the decision (collection included: that is what delays a scale-up).
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["DECISION_LATENCY_BUCKETS", "ScalerMetrics"]

DECISION_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ScalerMetrics:
    """The collectors; see the module docstring."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.desired_replicas = Gauge(
            "escaler_desired_replicas", "Replica count decided at the last sync of a scaler",
            ["namespace", "name"], registry=registry)
        self.scale_writes = Counter(
            "escaler_scale_writes_total", "Replica writes to scale targets, by result",
            ["namespace", "name", "result"], registry=registry)
        self.metric_errors = Counter(
            "escaler_metric_errors_total", "Metric reads that produced no usable sample",
            ["namespace", "name"], registry=registry)
        self.decision_latency = Histogram(
            "escaler_decision_latency_seconds", "Time from the start of metric collection to the decision",
            buckets=DECISION_LATENCY_BUCKETS, registry=registry)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-scaler series of a deleted scaler (counters too: the scaler is gone)."""
        for collector, extra in ((self.desired_replicas, ()), (self.metric_errors, ()),
                                 (self.scale_writes, ("success",)), (self.scale_writes, ("conflict",)),
                                 (self.scale_writes, ("error",))):
            with contextlib.suppress(KeyError):
                collector.remove(namespace, name, *extra)
