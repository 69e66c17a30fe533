"""``MetricsRegistry.exposition()``: made one family at a time, with the per-scaler collectors'
samples streamed (issue 30: a scrape's peak memory), it is byte for byte the page
prometheus_client's ``generate_latest`` makes of the whole registry with every family's samples
as a list — what ``/metrics`` served before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import Counter, Gauge, Histogram, Info, Summary, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import Metric

from escaler.api.scaler import MetricStatus
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.runtime.metrics import MetricsRegistry


class _Listed:
    """The registry's families with their samples made into lists first (the collectors before)."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.registry.collect():
            family.samples = list(family.samples)
            yield family


def _registry() -> MetricsRegistry:
    reg = MetricsRegistry()
    reg.controller("elasticscaler").reconcile_finished("success", 0.04)
    reg.set_leader("escaler-manager", True)
    scalers = ScalerMetrics(reg.registry)
    odd = 'q{a="x\\\\y"}\nnext'  # a label value with quotes, a backslash and a newline to escape
    for i in range(40):
        ns, name = f"team-{i % 3}", f"s-{i}"
        scalers.record_sync(ns, name, i, i + 1, [
            MetricStatus(name=odd if i == 7 else f"sum(rate(x{{service=\"{name}\"}}[1m]))", type="External",
                         value=i / 7, target=10.0),
            MetricStatus(name="none", type="External", value=None, target=1.0)])
        scalers.scale_writes.labels(ns, name, ("success", "conflict", "error")[i % 3]).inc(i % 4 + 1)
        if i % 5 == 0:
            scalers.metric_errors.labels(ns, name).inc()
    scalers.decision_latency.observe(0.02)
    scalers.decision_latency.observe(3.0)
    Counter("plain_total", "a plain counter", ["k"], registry=reg.registry).labels("v").inc()
    Gauge("plain_gauge", "a plain gauge", registry=reg.registry).set(float("inf"))
    Histogram("plain_seconds", "a plain histogram", registry=reg.registry).observe(0.3)
    Summary("plain_summary", "a summary", registry=reg.registry).observe(2.0)
    Info("plain_build", "an info", registry=reg.registry).info({"version": "1"})
    return reg


@pytest.mark.parametrize("created", [True, False])
def test_the_page_is_generate_latests_byte_for_byte(created: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus_metrics, "_use_created", created)
    reg = _registry()
    page = reg.exposition()
    assert page == generate_latest(_Listed(reg))
    text = page.decode()
    assert ("escaler_scale_writes_created{" in text) is created
    assert 'metric="q{a=\\"x\\\\\\\\y\\"}\\nnext"' in text  # escaped as generate_latest escapes it
    assert text.count("escaler_desired_replicas{") == 40


def test_a_scrape_reads_the_live_values_of_its_own_moment() -> None:
    """Streamed samples are read when the page is made, from a snapshot taken as each family is
    collected: a second scrape sees a sync recorded between the two, the first did not."""
    reg = MetricsRegistry()
    scalers = ScalerMetrics(reg.registry)
    scalers.record_sync("ns", "a", 1, 2)
    first = reg.exposition().decode()
    scalers.record_sync("ns", "a", 1, 5)
    scalers.record_sync("ns", "b", 0, 1)
    second = reg.exposition().decode()
    assert 'escaler_desired_replicas{name="a",namespace="ns"} 2.0' in first and 'name="b"' not in first
    assert 'escaler_desired_replicas{name="a",namespace="ns"} 5.0' in second
    assert 'escaler_desired_replicas{name="b",namespace="ns"} 1.0' in second
    assert reg.registry.get_sample_value("escaler_desired_replicas", {"namespace": "ns", "name": "b"}) == 1.0
