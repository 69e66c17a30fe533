"""escaler's own Prometheus metrics (docs/operations.md), shared by every scaler kind of one manager.

On the manager's registry (``mgr.metrics.registry``), made once by whoever owns the manager (the
CLI) and passed to every scaler kind's setup, so ElasticScaler and LLMScaler reconcilers record into
the same series:

* ``escaler_desired_replicas{namespace,name}`` (gauge) — the count decided at the last sync;
* ``escaler_current_replicas{namespace,name}`` (gauge) — the target's replica count at the last sync;
* ``escaler_scaler_metric_value{namespace,name,index,metric}`` (gauge) — each metric's value at the
  last sync, exactly as the algorithm used it (``status.currentMetrics[index].value`` is only
  rewritten when it moves beyond the significance, see
  ``escaler.reconcilers.kit.drift``: this gauge is the live value). ``index`` is the
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

The three per-sync gauges are not prometheus_client ``Gauge`` children (an object, a lock and a
label tuple per series: ~2.4 KiB per scaler, issue 10's memory per scaler): ``record_sync`` keeps
one tuple per scaler and three ``LiveGauge`` collectors expose it at scrape time, with the same
names, help, labels and values. Likewise the two per-scaler counters are ``LiveCounter``s (one
``(count, created)`` pair per label set in one dict; the same exposition as ``Counter`` children).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample as PromSample

from escaler.api.scaler import MetricStatus

__all__ = ["DECISION_LATENCY_BUCKETS", "MAX_METRIC_LABEL", "LiveCounter", "LiveGauge", "ScalerMetrics"]

DECISION_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# the longest ``metric`` label value (an ExternalServer query can be 1 KiB long)
MAX_METRIC_LABEL = 128


# (label values, value) of one sample
Sample = tuple[tuple[str, ...], float]


class LiveGauge(Collector):
    """A gauge family whose samples are read at scrape time from ``samples()`` (no child objects).

    ``_labelnames`` is named as prometheus_client's own collectors name it, so
    ``escaler.cli.metricsdoc`` reads the label names the same way."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 samples: Callable[[], Iterable[Sample]], registry: CollectorRegistry) -> None:
        # fixed
        self._name, self._documentation = name, documentation
        # fixed; the label names, in the order of each sample's label values
        self._labelnames = tuple(labelnames)
        # called on every scrape (and must be thread-safe)
        self._samples = samples
        registry.register(self)

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labelnames)
        name, labelnames = self._name, self._labelnames
        # streamed (see _streamed): each sample made as the exposition reads it, then dropped
        _streamed(family, (PromSample(name, dict(zip(labelnames, labels, strict=True)), value, None)
                           for labels, value in self._samples()))
        yield family


class _CounterChild:
    """What ``LiveCounter.labels`` returns: ``inc`` on one label set (made per call, not kept)."""

    __slots__ = ("_counter", "_values")

    def __init__(self, counter: LiveCounter, values: tuple[str, ...]) -> None:
        self._counter = counter
        self._values = values

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (>= 0) to this label set's count (created at 0 on first use)."""
        self._counter.inc(self._values, amount)


class LiveCounter(Collector):
    """A labelled counter family kept as one ``(count, created)`` pair per label set in one dict,
    with prometheus_client ``Counter``'s API for what escaler uses (``labels(...).inc(n)``,
    ``remove(...)``) and its exposition (``<name>_total`` and ``<name>_created`` per label set; the
    created sample follows prometheus_client's ``PROMETHEUS_DISABLE_CREATED_SERIES`` setting). A
    ``Counter`` child is an object with its own dict, lock and value per label set; escaler has one
    per scaler that wrote or failed a read (issue 30, memory per scaler)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry, clock: Callable[[], float] | None = None) -> None:
        # fixed; as prometheus_client names a counter's family: without the _total suffix
        self._name = name.removesuffix("_total")
        self._documentation = documentation
        # fixed; named as prometheus_client's collectors name them (escaler.cli.metricsdoc reads it)
        self._labelnames = tuple(labelnames)
        # the created timestamp of a new label set (None: time.time, as prometheus_client's)
        self._clock = clock
        # guards _counts
        self._mu = threading.Lock()
        # label values → (count, created)
        self._counts: dict[tuple[str, ...], tuple[float, float]] = {}
        registry.register(self)

    def _key(self, values: Sequence[object]) -> tuple[str, ...]:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: {len(self._labelnames)} label values needed "
                             f"({', '.join(self._labelnames)}), got {len(values)}")
        return tuple(str(v) for v in values)

    def labels(self, *values: object) -> _CounterChild:
        return _CounterChild(self, self._key(values))

    def inc(self, values: tuple[str, ...], amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"{self._name}: counters can only be incremented by non-negative amounts, "
                             f"got {amount}")
        with self._mu:
            had = self._counts.get(values)
            self._counts[values] = (had[0] + amount, had[1]) if had is not None \
                else (float(amount), self._clock() if self._clock is not None else time.time())

    def remove(self, *values: object) -> None:
        """Drop one label set's series (nothing when it has none)."""
        key = self._key(values)
        with self._mu:
            self._counts.pop(key, None)

    def describe(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        created = prometheus_metrics._use_created
        with self._mu:
            items = list(self._counts.items())
        _streamed(family, _counter_samples(self._name, self._labelnames, items, created))
        yield family


def _counter_samples(name: str, labelnames: tuple[str, ...],
                     items: list[tuple[tuple[str, ...], tuple[float, float]]],
                     created: bool) -> Iterator[PromSample]:
    """What ``CounterMetricFamily.add_metric`` appends for each label set, in its order."""
    for values, (count, since) in items:
        labels = dict(zip(labelnames, values, strict=True))
        yield PromSample(f"{name}_total", labels, count, None)
        if created:
            yield PromSample(f"{name}_created", labels, since, None)


def _streamed(family: GaugeMetricFamily | CounterMetricFamily, samples: Iterator[PromSample]) -> None:
    """Give ``family`` its samples as an iterator instead of a list: the exposition
    (``generate_latest``) reads each once, formats its line and drops it, so a scrape holds the
    lines, not every sample and its labels dict as well (at 10,000 scalers a scrape's peak was
    ~17 MB, the lines ~5 MB; issue 30: a manager scraped every 15 s keeps that peak as RSS).
    A family from ``collect()`` is read once; ``collect()`` makes a new one each time."""
    family.samples = samples  # type: ignore[assignment]


class ScalerMetrics:
    """The collectors; see the module docstring. Thread-safe."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.desired_replicas = LiveGauge(
            "escaler_desired_replicas", "Replica count decided at the last sync of a scaler",
            ["namespace", "name"], lambda: self._counts(current=False), registry)
        self.current_replicas = LiveGauge(
            "escaler_current_replicas", "Replica count of the scaler's target at its last sync",
            ["namespace", "name"], lambda: self._counts(current=True), registry)
        self.metric_value = LiveGauge(
            "escaler_scaler_metric_value",
            "Each metric's value at the scaler's last sync, as the algorithm used it (live; the status "
            "is only rewritten on a significant move)",
            ["namespace", "name", "index", "metric"], self._metric_values, registry)
        self.scale_writes = LiveCounter(
            "escaler_scale_writes_total", "Replica writes to scale targets, by result",
            ["namespace", "name", "result"], registry)
        self.metric_errors = LiveCounter(
            "escaler_metric_errors_total", "Metric reads that produced no usable sample",
            ["namespace", "name"], registry)
        self.decision_latency = Histogram(
            "escaler_decision_latency_seconds", "Time from the start of metric collection to the decision",
            buckets=DECISION_LATENCY_BUCKETS, registry=registry)
        # guards _live
        self._mu = threading.Lock()
        # (namespace, name) → its last sync: (current, desired, ((index, metric, value), ...) of the
        # metrics that had a value); the three LiveGauges read it
        self._live: dict[tuple[str, str], tuple[float, float, tuple[tuple[str, str, float], ...]]] = {}

    def record_sync(self, namespace: str, name: str, current: int, desired: int,
                    metrics: Sequence[MetricStatus] = ()) -> None:
        """One sync's live values: the counts and each metric's value (see the module docstring)."""
        values = tuple((str(i), m.name[:MAX_METRIC_LABEL], float(m.value))
                       for i, m in enumerate(metrics) if m.value is not None)
        with self._mu:
            self._live[(namespace, name)] = (float(current), float(desired), values)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-scaler series of a deleted scaler (counters too: the scaler is gone)."""
        for collector, extra in ((self.metric_errors, ()),
                                 (self.scale_writes, ("success",)), (self.scale_writes, ("conflict",)),
                                 (self.scale_writes, ("error",))):
            with contextlib.suppress(KeyError):
                collector.remove(namespace, name, *extra)
        with self._mu:
            self._live.pop((namespace, name), None)

    def _counts(self, *, current: bool) -> Iterator[Sample]:
        with self._mu:
            items = list(self._live.items())
        return ((key, live[0] if current else live[1]) for key, live in items)

    def _metric_values(self) -> Iterator[Sample]:
        with self._mu:
            items = list(self._live.items())
        return (((*key, index, metric), value) for key, live in items for index, metric, value in live[2])
