"""Sample windows kept compact (issue 30, memory per scaler): no per-instance ``__dict__`` on the
window objects every scaler holds, and one shared window-key string per distinct metric."""

from __future__ import annotations

from typing import Any

import pytest
from es_fakes import external_metric, metrics_trigger, scaler

from escaler.api.elasticscaler import ElasticScaler
from escaler.reconcilers.elasticscaler.metricsync import window_key
from escaler.scaling.window import MetricWindows, SampleWindow


def _metric(name: str, value: str) -> Any:
    es = ElasticScaler.parse(scaler("es", metrics_trigger(external_metric(name, value))))
    mt = es.spec.trigger.metrics_trigger
    assert mt is not None
    return mt.metrics[0]


def test_window_objects_carry_no_instance_dict() -> None:
    windows = MetricWindows()
    windows.add("k", 1.0, 2.0)
    for obj in (windows, windows.window("k")):
        assert not hasattr(obj, "__dict__")
        with pytest.raises(AttributeError):
            obj.extra = 1  # type: ignore[union-attr]
    assert windows.copy().aggregate("k", 1.0) == 2.0 and isinstance(windows.window("k"), SampleWindow)


def test_equal_metrics_of_two_scalers_key_their_windows_with_one_string() -> None:
    a, b = window_key(0, _metric("queue", "10")), window_key(0, _metric("queue", "10"))
    assert a == b and a is b
    other = window_key(0, _metric("queue", "20"))
    assert other != a, "a spec edit still starts a fresh window"


def test_the_per_scaler_memory_records_carry_no_instance_dict() -> None:
    """What the reconciler keeps per scaler between polls (issue 30): the memory, the metrics memory,
    its last collection and recommendation, and the pipeline state are slotted records."""
    from escaler.reconcilers.elasticscaler.context import ScalerMemory
    from escaler.reconcilers.elasticscaler.metricsync import Collection, MetricsMemory
    from escaler.scaling.pipeline import PipelineState, RecommendResult

    rec = RecommendResult.from_metrics(3, evaluated=1, total=1)
    memory = ScalerMemory(uid="u", metrics=MetricsMemory(last=Collection(1.0, 1, (), rec, ())),
                          state=PipelineState())
    assert memory.metrics.last is not None
    for obj in (memory, memory.metrics, memory.metrics.last, rec, memory.state):
        assert not hasattr(obj, "__dict__"), type(obj).__name__
    memory.wrote_from = "7"  # the reconciler still updates its own record in place
    assert memory.wrote_from == "7"


def test_the_rows_kept_with_a_collection_share_their_type_names() -> None:
    """``str()`` of an enum member is a new string each time: the metric rows every scaler keeps with
    its last collection hold the interned type names instead (issue 30: ~120 bytes a scaler)."""
    from escaler.reconcilers.elasticscaler.metricsync import _Metric, _row
    from escaler.scaling.algorithm import MetricValue

    def row(name: str) -> Any:
        spec = _metric(name, "10")
        target_type = "".join(["Val", "ue"])  # a fresh string, as the collector's str(enum) gives
        used = MetricValue(name=name, type="External", value=1.0, target_type=target_type, target_value=10.0)
        return _row(_Metric(spec, name, used, None, None, None), used, 2)

    a, b = row("queue-a"), row("queue-b")
    assert (a.type, a.target_type) == (b.type, b.target_type) == ("External", "Value")
    assert a.type is b.type and a.target_type is b.target_type
