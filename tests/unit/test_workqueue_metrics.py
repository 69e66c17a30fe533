"""Workqueue metrics: the Prometheus provider's workqueue_* series, the no-op default, the updater."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_type_hints

import pytest
from prometheus_client import CollectorRegistry

from escaler.clock import FakeClock
from escaler.workqueue import (
    ItemExponentialFailureRateLimiter,
    NoopMetricsProvider,
    PrometheusMetricsProvider,
    Queue,
    RateLimitingQueue,
)
from escaler.workqueue.metrics import (
    DURATION_BUCKETS_SECONDS,
    UNFINISHED_WORK_UPDATE_PERIOD_SECONDS,
    MetricsProvider,
)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(registry: CollectorRegistry, clock: FakeClock) -> Iterator[Queue[str]]:
    q: Queue[str] = Queue("x", clock=clock, metrics_provider=PrometheusMetricsProvider(registry))
    yield q
    q.shutdown()


def sample(registry: CollectorRegistry, name: str, queue: str = "x", **labels: str) -> float | None:
    return registry.get_sample_value(name, {"name": queue, **labels})


def test_add_get_done_are_recorded(queue: Queue[str], registry: CollectorRegistry, clock: FakeClock) -> None:
    for item in ("a", "b", "a"):  # the second "a" collapses: not an add
        queue.add(item)
    assert sample(registry, "workqueue_adds_total") == 2.0
    assert sample(registry, "workqueue_depth") == 2.0

    clock.step(1.0)
    assert queue.get() == "a"
    assert sample(registry, "workqueue_depth") == 1.0
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1.0
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(1.0)
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="0.1") == 0.0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 1.0

    clock.step(2.0)
    queue.update_unfinished_work()
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(2.0)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == pytest.approx(2.0)

    queue.done("a")
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1.0
    assert sample(registry, "workqueue_work_duration_seconds_sum") == pytest.approx(2.0)
    queue.update_unfinished_work()
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0.0
    assert sample(registry, "workqueue_retries_total") == 0.0


def test_unfinished_work_sums_in_flight_ages(
    queue: Queue[str], registry: CollectorRegistry, clock: FakeClock
) -> None:
    queue.add("a")
    queue.add("b")
    queue.get()
    clock.step(3.0)
    queue.get()
    clock.step(1.0)
    queue.update_unfinished_work()
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(4.0 + 1.0)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == pytest.approx(4.0)


def test_unfinished_work_is_updated_periodically(
    queue: Queue[str], registry: CollectorRegistry, clock: FakeClock
) -> None:
    queue.add("a")
    queue.get()
    clock.block_until_waiters(1)  # the metrics thread, asleep on the clock
    clock.step(UNFINISHED_WORK_UPDATE_PERIOD_SECONDS)
    clock.block_until_waiters(1)  # asleep again: it updated in between
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(
        UNFINISHED_WORK_UPDATE_PERIOD_SECONDS
    )


def test_depth_counts_dirty_items_being_processed(queue: Queue[str], registry: CollectorRegistry) -> None:
    queue.add("a")
    queue.get()
    queue.add("a")  # dirty while processing: waiting, though not in the ready list
    assert len(queue) == 0
    assert sample(registry, "workqueue_depth") == 1.0
    queue.done("a")
    queue.get()
    assert sample(registry, "workqueue_depth") == 0.0
    assert sample(registry, "workqueue_adds_total") == 2.0


def test_retries_are_counted_by_add_rate_limited(registry: CollectorRegistry, clock: FakeClock) -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue(
        ItemExponentialFailureRateLimiter(1.0, 10.0),
        "y",
        clock=clock,
        metrics_provider=PrometheusMetricsProvider(registry),
    )
    try:
        q.add_rate_limited("a")
        q.add_rate_limited("b")
        q.add_after("c", 1.0)  # a plain delayed add is not a retry
        assert sample(registry, "workqueue_retries_total", queue="y") == 2.0
    finally:
        q.shutdown()
    q.add_rate_limited("a")
    assert sample(registry, "workqueue_retries_total", queue="y") == 2.0


def test_histogram_buckets_match_controller_runtime(queue: Queue[str], registry: CollectorRegistry) -> None:
    queue.add("a")
    queue.get()
    les = [
        s.labels["le"]
        for metric in registry.collect()
        if metric.name == "workqueue_queue_duration_seconds"
        for s in metric.samples
        if s.name.endswith("_bucket")
    ]
    assert les == [*(repr(float(b)) for b in DURATION_BUCKETS_SECONDS), "+Inf"]
    assert list(DURATION_BUCKETS_SECONDS) == pytest.approx([1e-8 * 10**k for k in range(10)])


@pytest.mark.parametrize(
    ("name", "provider_kind"),
    [("", "prometheus"), ("z", "noop")],
    ids=["unnamed-queue", "noop-provider"],
)
def test_metrics_off_records_nothing_and_starts_no_thread(
    registry: CollectorRegistry, clock: FakeClock, name: str, provider_kind: str
) -> None:
    provider = PrometheusMetricsProvider(registry) if provider_kind == "prometheus" else NoopMetricsProvider()
    q: Queue[str] = Queue(name, clock=clock, metrics_provider=provider)
    try:
        q.add("a")
        q.done(q.get())
        q.update_unfinished_work()
        assert q._metrics is None
        assert clock.waiters() == 0
        assert registry.get_sample_value("workqueue_adds_total", {"name": name}) is None
    finally:
        q.shutdown()


def _protocol_methods(proto: type) -> list[str]:
    return sorted(n for n, v in vars(proto).items() if callable(v) and not n.startswith("_"))


# every (factory, metric method) pair of the MetricsProvider protocol, read from the protocol itself
# so that a metric kind added to it without a no-op counterpart fails here
NOOP_CALLS = [
    (factory, method)
    for factory in _protocol_methods(MetricsProvider)
    for method in _protocol_methods(get_type_hints(getattr(MetricsProvider, factory))["return"])
]


@pytest.mark.parametrize(("factory", "method"), NOOP_CALLS, ids=[f"{f}.{m}" for f, m in NOOP_CALLS])
def test_noop_provider_metrics_accept_every_call(factory: str, method: str) -> None:
    metric = getattr(NoopMetricsProvider(), factory)("n")
    args = (1.0,) if method in ("set", "observe") else ()
    before = dict(vars(metric))
    assert getattr(metric, method)(*args) is None
    assert vars(metric) == before == {}  # accepted, and nothing kept: the no-op holds no state


def test_noop_calls_cover_every_metric_kind() -> None:
    assert {f for f, _ in NOOP_CALLS} == {
        "new_depth_metric", "new_adds_metric", "new_latency_metric", "new_work_duration_metric",
        "new_unfinished_work_seconds_metric", "new_longest_running_processor_seconds_metric",
        "new_retries_metric",
    }
    assert ("new_depth_metric", "dec") in NOOP_CALLS and ("new_latency_metric", "observe") in NOOP_CALLS
    assert len(NOOP_CALLS) == 8  # depth: inc+dec; every other kind: one method


def test_provider_needs_a_registry() -> None:
    with pytest.raises(TypeError, match=r"PrometheusMetricsProvider\.registry"):
        PrometheusMetricsProvider(None)  # type: ignore[arg-type]
