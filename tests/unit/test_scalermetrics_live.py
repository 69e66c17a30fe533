"""``ScalerMetrics``' per-sync gauges, kept as one tuple per scaler and exposed by ``LiveGauge``:
the same families, labels and values as prometheus_client ``Gauge`` children gave (issue 10, memory)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from escaler.api.scaler import MetricStatus
from escaler.cli import metricsdoc
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics


def _m(name: str, value: float | None) -> MetricStatus:
    return MetricStatus(name=name, type="External", value=value, target=10.0)


def _lines(registry: CollectorRegistry, prefix: str) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines() if line.startswith(prefix))


def test_the_exposition_is_what_gauge_children_gave() -> None:
    live_registry, gauge_registry = CollectorRegistry(), CollectorRegistry()
    metrics = ScalerMetrics(live_registry)
    desired = Gauge("escaler_desired_replicas", "Replica count decided at the last sync of a scaler",
                    ["namespace", "name"], registry=gauge_registry)
    value = Gauge("escaler_scaler_metric_value", "x", ["namespace", "name", "index", "metric"],
                  registry=gauge_registry)
    metrics.record_sync("ns", "a", 2, 4, [_m("q", 20.0), _m("gone", None), _m("r", 1.5)])
    desired.labels("ns", "a").set(4)
    value.labels("ns", "a", "0", "q").set(20.0)
    value.labels("ns", "a", "2", "r").set(1.5)
    for prefix in ("escaler_desired_replicas", "escaler_scaler_metric_value{"):
        assert _lines(live_registry, prefix) == _lines(gauge_registry, prefix)
    assert live_registry.get_sample_value("escaler_current_replicas", {"namespace": "ns", "name": "a"}) == 2.0


def test_a_metric_without_a_value_or_removed_loses_its_series_and_forget_drops_all() -> None:
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    metrics.record_sync("ns", "a", 1, 1, [_m("q", 3.0), _m("r", 4.0)])
    metrics.record_sync("ns", "b", 5, 6, [_m("q", 7.0)])
    metrics.record_sync("ns", "a", 1, 2, [_m("q", None)])
    assert _lines(registry, "escaler_scaler_metric_value{") == [
        'escaler_scaler_metric_value{index="0",metric="q",name="b",namespace="ns"} 7.0']
    assert registry.get_sample_value("escaler_desired_replicas", {"namespace": "ns", "name": "a"}) == 2.0
    metrics.forget("ns", "b")
    assert _lines(registry, "escaler_scaler_metric_value{") == []
    assert _lines(registry, "escaler_desired_replicas{") == [
        'escaler_desired_replicas{name="a",namespace="ns"} 2.0']


def test_metricsdoc_reads_the_label_names() -> None:
    families = {f.name: f for f in metricsdoc.metric_families(
        (lambda r: (ScalerMetrics(r), r)[1])(CollectorRegistry()))}
    assert families["escaler_scaler_metric_value"].labels == ("namespace", "name", "index", "metric")
    assert families["escaler_current_replicas"].type == "gauge"
