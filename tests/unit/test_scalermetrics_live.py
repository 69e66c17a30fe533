"""``ScalerMetrics``' per-sync gauges, kept as one tuple per scaler and exposed by ``LiveGauge``:
the same families, labels and values as prometheus_client ``Gauge`` children gave (issue 10, memory)."""

from __future__ import annotations

import gc
import sys
import time
import types

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

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


# ---- the per-scaler counters (issue 30, third memory pass) ---------------------------------------


def _deep_bytes(obj: object) -> int:
    """``sys.getsizeof`` of what ``obj`` reaches (classes, modules and functions left out)."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type | types.ModuleType | types.FunctionType | types.MethodType):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def test_the_counters_expose_what_counter_children_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)
    live_registry, counter_registry = CollectorRegistry(), CollectorRegistry()
    metrics = ScalerMetrics(live_registry)
    writes = Counter("escaler_scale_writes_total", "Replica writes to scale targets, by result",
                     ["namespace", "name", "result"], registry=counter_registry)
    errors = Counter("escaler_metric_errors_total", "Metric reads that produced no usable sample",
                     ["namespace", "name"], registry=counter_registry)
    for counters in ((metrics.scale_writes, metrics.metric_errors), (writes, errors)):
        w, e = counters
        w.labels("ns", "a", "success").inc()
        w.labels("ns", "a", "success").inc()
        w.labels("ns", "a", "conflict").inc()
        w.labels("ns", "b", "error").inc(3)
        w.labels("ns", "c", "success").inc()
        w.remove("ns", "c", "success")
        w.remove("ns", "never", "error")  # nothing to remove: no error
        e.labels("ns", "a").inc(0)
    for prefix in ("escaler_scale_writes", "escaler_metric_errors",
                   "# HELP escaler_scale_writes", "# TYPE escaler_scale_writes",
                   "# HELP escaler_metric_errors", "# TYPE escaler_metric_errors"):
        assert _lines(live_registry, prefix) == _lines(counter_registry, prefix), prefix
    assert live_registry.get_sample_value(
        "escaler_scale_writes_total", {"namespace": "ns", "name": "a", "result": "success"}) == 2.0
    metrics.forget("ns", "a")
    assert _lines(live_registry, "escaler_scale_writes_total{") == [
        'escaler_scale_writes_total{name="b",namespace="ns",result="error"} 3.0']
    assert _lines(live_registry, "escaler_metric_errors_total{") == []


def test_a_counter_refuses_what_counter_refused() -> None:
    metrics = ScalerMetrics(CollectorRegistry())
    needed = r"escaler_scale_writes: 3 label values needed \(namespace, name, result\), got 2"
    with pytest.raises(ValueError, match=needed):
        metrics.scale_writes.labels("ns", "a")
    with pytest.raises(ValueError, match="counters can only be incremented by non-negative amounts, got -1"):
        metrics.metric_errors.labels("ns", "a").inc(-1)
    families = {f.name: f for f in metricsdoc.metric_families(
        (lambda r: (ScalerMetrics(r), r)[1])(CollectorRegistry()))}
    assert families["escaler_scale_writes_total"].type == "counter"
    assert families["escaler_scale_writes_total"].labels == ("namespace", "name", "result")


def test_a_scaler_that_wrote_costs_its_counter_no_object() -> None:
    metrics = ScalerMetrics(CollectorRegistry())
    empty = _deep_bytes(metrics.scale_writes)
    names = [f"scaler-{i}" for i in range(200)]
    for name in names:
        metrics.scale_writes.labels("ns", name, "success").inc()
    per_scaler = (_deep_bytes(metrics.scale_writes) - empty - sum(map(sys.getsizeof, names))) / len(names)
    # a prometheus_client child (object, dict, lock, value): ~650 bytes; a pair in one dict: ~250
    assert per_scaler <= 320, f"{per_scaler:.0f} bytes per label set"
