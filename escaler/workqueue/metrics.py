"""Workqueue metrics: a provider interface in client-go's shape, a no-op default, and Prometheus.

Contract (client-go ``util/workqueue/metrics.go``):

* A ``MetricsProvider`` hands out one tiny metric object per queue name and kind: depth (a gauge
  with ``inc``/``dec``), adds and retries (counters), queue latency and work duration
  (histograms, seconds), unfinished work and longest-running processor (settable gauges, seconds).
* A queue records metrics only when it has a non-empty name *and* a provider that is not a
  ``NoopMetricsProvider`` (as client-go does), so an unnamed queue or the default pays nothing.
* What is recorded, all under the queue's lock and with the queue's injected clock:

  - ``add`` of an item that was not already waiting: adds +1, depth +1 (depth therefore counts
    items waiting to be processed, including ones re-added while being processed);
  - ``get``: depth -1, queue latency observed (time since the item was first added);
  - ``done``: work duration observed (time since ``get``);
  - retries: +1 per ``RateLimitingQueue.add_rate_limited`` (client-go counts every ``AddAfter``;
    escaler counts only rate-limited requeues, so a reconciler's ``requeue_after`` is not a retry);
  - unfinished work seconds (sum of the ages of in-flight items) and longest-running processor
    seconds (the oldest age) are *periodic*: like client-go's 500 ms ticker, a queue with metrics
    enabled runs a daemon thread that calls ``Queue.update_unfinished_work()`` every
    ``UNFINISHED_WORK_UPDATE_PERIOD_SECONDS`` of its clock until shutdown. Between updates the
    gauges are up to one period stale; after shutdown they keep their last values.

``PrometheusMetricsProvider`` registers controller-runtime's ``workqueue_*`` collectors (label
``name``) on the registry it is given. Limitation: a registry can hold those names only once, so
create one provider per registry and share it between queues.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from escaler.clock import Clock

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "DURATION_BUCKETS_SECONDS",
    "UNFINISHED_WORK_UPDATE_PERIOD_SECONDS",
    "CounterMetric",
    "GaugeMetric",
    "HistogramMetric",
    "MetricsProvider",
    "NoopMetricsProvider",
    "PrometheusMetricsProvider",
    "QueueMetrics",
    "SettableGaugeMetric",
]

T = TypeVar("T", bound=Hashable)

# controller-runtime's prometheus.ExponentialBuckets(10e-9, 10, 10): 10 ns .. 10 s.
DURATION_BUCKETS_SECONDS: tuple[float, ...] = (
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0,
)  # fmt: skip

# client-go's unfinishedWorkUpdatePeriod.
UNFINISHED_WORK_UPDATE_PERIOD_SECONDS = 0.5


class CounterMetric(Protocol):
    """A monotonically increasing count."""

    def inc(self) -> None: ...


class GaugeMetric(Protocol):
    """A value that moves up and down by one."""

    def inc(self) -> None: ...

    def dec(self) -> None: ...


class SettableGaugeMetric(Protocol):
    """A value that is set outright."""

    def set(self, value: float) -> None: ...


class HistogramMetric(Protocol):
    """A distribution of observations (seconds, for the workqueue)."""

    def observe(self, value: float) -> None: ...


class MetricsProvider(Protocol):
    """Creates the metrics of one named queue; see the module docstring."""

    def new_depth_metric(self, name: str) -> GaugeMetric: ...

    def new_adds_metric(self, name: str) -> CounterMetric: ...

    def new_latency_metric(self, name: str) -> HistogramMetric: ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric: ...

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric: ...

    def new_retries_metric(self, name: str) -> CounterMetric: ...


class _NoopMetric:
    """Every metric kind, doing nothing."""

    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NOOP_METRIC = _NoopMetric()


class NoopMetricsProvider:
    """The default provider: records nothing (a queue given it skips metrics entirely)."""

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return _NOOP_METRIC

    def new_adds_metric(self, name: str) -> CounterMetric:
        return _NOOP_METRIC

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return _NOOP_METRIC

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return _NOOP_METRIC

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP_METRIC

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return _NOOP_METRIC

    def new_retries_metric(self, name: str) -> CounterMetric:
        return _NOOP_METRIC


class PrometheusMetricsProvider:
    """controller-runtime's ``workqueue_*`` metrics, labelled by queue ``name``, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        if not isinstance(registry, CollectorRegistry):
            raise TypeError(
                "PrometheusMetricsProvider.registry: must be a prometheus_client.CollectorRegistry, "
                f"got {type(registry).__name__}"
            )
        labels = ["name"]
        # The collectors below are registered once, here; each queue gets its labelled children.
        self._depth = Gauge("workqueue_depth", "Current depth of workqueue", labels, registry=registry)
        self._adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", labels, registry=registry
        )
        self._latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels,
            buckets=DURATION_BUCKETS_SECONDS,
            registry=registry,
        )
        self._work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels,
            buckets=DURATION_BUCKETS_SECONDS,
            registry=registry,
        )
        self._unfinished = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
            "threads by observing the rate at which this increases.",
            labels,
            registry=registry,
        )
        self._longest = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels,
            registry=registry,
        )
        self._retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels,
            registry=registry,
        )

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return self._depth.labels(name=name)

    def new_adds_metric(self, name: str) -> CounterMetric:
        return self._adds.labels(name=name)

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return self._latency.labels(name=name)

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return self._work_duration.labels(name=name)

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return self._unfinished.labels(name=name)

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        return self._longest.labels(name=name)

    def new_retries_metric(self, name: str) -> CounterMetric:
        return self._retries.labels(name=name)


class QueueMetrics(Generic[T]):
    """The recorder a queue drives (client-go's ``defaultQueueMetrics``).

    Not thread-safe on its own: every method is called with the owning queue's lock held.
    """

    def __init__(self, name: str, provider: MetricsProvider, clock: Clock) -> None:
        # the queue's clock; every timestamp below is its monotonic()
        self._clock = clock
        # number of items waiting to be processed (queued, or dirty while processing)
        self._depth = provider.new_depth_metric(name)
        # adds that were not collapsed into an item already waiting
        self._adds = provider.new_adds_metric(name)
        # first add -> get, seconds
        self._latency = provider.new_latency_metric(name)
        # get -> done, seconds
        self._work_duration = provider.new_work_duration_metric(name)
        # sum of in-flight ages at the last update_unfinished_work()
        self._unfinished = provider.new_unfinished_work_seconds_metric(name)
        # oldest in-flight age at the last update_unfinished_work()
        self._longest = provider.new_longest_running_processor_seconds_metric(name)
        # rate-limited requeues
        self._retries = provider.new_retries_metric(name)
        # item -> time of its first add since it was last handed out; keys are the waiting items
        self._add_times: dict[T, float] = {}
        # item -> time get() handed it out; keys are exactly the items being processed
        self._processing_start_times: dict[T, float] = {}

    def add(self, item: T) -> None:
        self._adds.inc()
        self._depth.inc()
        if item not in self._add_times:
            self._add_times[item] = self._clock.monotonic()

    def get(self, item: T) -> None:
        self._depth.dec()
        now = self._clock.monotonic()
        self._processing_start_times[item] = now
        start = self._add_times.pop(item, None)
        if start is not None:
            self._latency.observe(now - start)

    def done(self, item: T) -> None:
        start = self._processing_start_times.pop(item, None)
        if start is not None:
            self._work_duration.observe(self._clock.monotonic() - start)

    def retry(self) -> None:
        self._retries.inc()

    def update_unfinished_work(self) -> None:
        now = self._clock.monotonic()
        total = 0.0
        oldest = 0.0
        for start in self._processing_start_times.values():
            age = now - start
            total += age
            oldest = max(oldest, age)
        self._unfinished.set(total)
        self._longest.set(oldest)
