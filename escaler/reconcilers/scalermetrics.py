"""escaler's own Prometheus metrics (SPEC §11), shared by every scaler kind of one manager.

On the manager's registry (``mgr.metrics.registry``), made once by whoever owns the manager (the
CLI) and passed to every scaler kind's setup, so ElasticScaler and LLMScaler reconcilers record into
the same series:

* ``escaler_desired_replicas{namespace,name}`` (gauge) — the count decided at the last sync;
* ``escaler_current_replicas{namespace,name}`` (gauge) — the target's replica count at the last sync;
* ``escaler_scaler_metric_value{namespace,name,index,metric}`` (gauge) — each metric's value at the
  last sync, exactly as the algorithm used it (``status.currentMetrics[index].value`` is only
  rewritten when it moves beyond the significance, see
  ``escaler.reconcilers.elasticscaler.drift``: this gauge is the live value). ``index`` is the
  metric's position in the spec, ``metric`` its display name (capped at ``MAX_METRIC_LABEL``
  characters). One series per scaler and metric: a metric without a value this sync has none, a
  metric removed from the spec loses its series at the next sync;
* ``escaler_scale_writes_total{namespace,name,result}`` (counter) — replica writes to a target,
  ``result`` = ``success`` | ``conflict`` | ``error``;
* ``escaler_metric_errors_total{namespace,name}`` (counter) — metric reads that produced no
  usable sample;
* ``escaler_decision_latency_seconds`` (histogram) — one sync's time from the start of
  collection to the decision (collection included: that is what delays a scale-up).

Every per-scaler series is removed when the scaler is deleted (``forget``), so the cardinality is
bounded by the live scalers and their metrics.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from escaler.api.scaler import MetricStatus

__all__ = ["DECISION_LATENCY_BUCKETS", "MAX_METRIC_LABEL", "ScalerMetrics"]

DECISION_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# the longest ``metric`` label value (an ExternalServer query can be 1 KiB long)
MAX_METRIC_LABEL = 128


class ScalerMetrics:
    """The collectors; see the module docstring. Thread-safe."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.desired_replicas = Gauge(
            "escaler_desired_replicas", "Replica count decided at the last sync of a scaler",
            ["namespace", "name"], registry=registry)
        self.current_replicas = Gauge(
            "escaler_current_replicas", "Replica count of the scaler's target at its last sync",
            ["namespace", "name"], registry=registry)
        self.metric_value = Gauge(
            "escaler_scaler_metric_value",
            "Each metric's value at the scaler's last sync, as the algorithm used it (live; the status "
            "is only rewritten on a significant move)",
            ["namespace", "name", "index", "metric"], registry=registry)
        self.scale_writes = Counter(
            "escaler_scale_writes_total", "Replica writes to scale targets, by result",
            ["namespace", "name", "result"], registry=registry)
        self.metric_errors = Counter(
            "escaler_metric_errors_total", "Metric reads that produced no usable sample",
            ["namespace", "name"], registry=registry)
        self.decision_latency = Histogram(
            "escaler_decision_latency_seconds", "Time from the start of metric collection to the decision",
            buckets=DECISION_LATENCY_BUCKETS, registry=registry)
        # guards _series
        self._mu = threading.Lock()
        # (namespace, name) → the (index, metric) labels of its escaler_scaler_metric_value series
        self._series: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}

    def record_sync(self, namespace: str, name: str, current: int, desired: int,
                    metrics: Sequence[MetricStatus] = ()) -> None:
        """One sync's live values: the counts and each metric's value (see the module docstring)."""
        self.current_replicas.labels(namespace, name).set(current)
        self.desired_replicas.labels(namespace, name).set(desired)
        labels: dict[tuple[str, str], float] = {}
        for i, m in enumerate(metrics):
            if m.value is not None:
                labels[(str(i), m.name[:MAX_METRIC_LABEL])] = m.value
        with self._mu:
            stale = self._series.get((namespace, name), frozenset()) - labels.keys()
            if labels:
                self._series[(namespace, name)] = frozenset(labels)
            else:
                self._series.pop((namespace, name), None)
            for (index, metric), value in labels.items():
                self.metric_value.labels(namespace, name, index, metric).set(value)
            for index, metric in stale:
                with contextlib.suppress(KeyError):
                    self.metric_value.remove(namespace, name, index, metric)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-scaler series of a deleted scaler (counters too: the scaler is gone)."""
        for collector, extra in ((self.desired_replicas, ()), (self.current_replicas, ()),
                                 (self.metric_errors, ()),
                                 (self.scale_writes, ("success",)), (self.scale_writes, ("conflict",)),
                                 (self.scale_writes, ("error",))):
            with contextlib.suppress(KeyError):
                collector.remove(namespace, name, *extra)
        with self._mu:
            series = self._series.pop((namespace, name), frozenset())
            for index, metric in series:
                with contextlib.suppress(KeyError):
                    self.metric_value.remove(namespace, name, index, metric)
