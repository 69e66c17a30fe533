"""The drift rule (``escaler.reconcilers.kit.drift``) and the StatusWriter's refresh."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.reconcilers.kit.drift import (
    DEFAULT_SIGNIFICANCE,
    DEFAULT_STATUS_REFRESH_SECONDS,
    MIN_SIGNIFICANCE,
    mask_numbers,
    significance_of,
    significant,
    value_moved,
)
from escaler.reconcilers.kit.status import StatusWriter, WriteOutcome


def _cond(ctype: str = "ScalingActive", status: str = "True", reason: str = "MetricsAvailable",
          message: str = "evaluated 1 of 1 metrics; recommends 4 replicas", gen: int = 1,
          at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "observedGeneration": gen, "lastTransitionTime": at}


def _row(value: float | None = 40.0, recommended: int | None = 4, error: str | None = None,
         target: float = 10.0) -> dict[str, Any]:
    row: dict[str, Any] = {"name": "queue", "type": "External", "target": target, "targetType": "Value"}
    if value is not None:
        row["value"] = value
    if recommended is not None:
        row["recommendedReplicas"] = recommended
    if error is not None:
        row["error"] = error
    return row


def _status(**changes: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"observedGeneration": 1, "currentReplicas": 4, "desiredReplicas": 4,
                          "conditions": [_cond()], "currentMetrics": [_row()]}
    st.update(changes)
    return st


CASES = [
    ("equal", _status(), False),
    ("value inside the significance", _status(currentMetrics=[_row(43.9)]), False),
    ("value beyond the significance", _status(currentMetrics=[_row(44.1)]), True),
    ("value disappears", _status(currentMetrics=[_row(None)]), True),
    ("per-metric recommendation", _status(currentMetrics=[_row(40.5, recommended=5)]), True),
    ("error appears", _status(currentMetrics=[_row(error="HTTP 503")]), True),
    ("a row appears", _status(currentMetrics=[_row(), _row()]), True),
    ("replica count", _status(currentReplicas=5), True),
    ("desired count", _status(desiredReplicas=5), True),
    ("observedGeneration", _status(observedGeneration=2), True),
    ("a decision", _status(recentDecisions=[{"time": "2026-01-01T00:00:00Z", "from": 4, "to": 5,
                                             "reason": "x"}]), True),
    ("condition status", _status(conditions=[_cond(status="False")]), True),
    ("condition reason", _status(conditions=[_cond(reason="DecisionReceived")]), True),
    ("condition observedGeneration", _status(conditions=[_cond(gen=2)]), True),
    ("condition transition time", _status(conditions=[_cond(at="2026-01-01T00:01:00Z")]), True),
    ("condition appears", _status(conditions=[_cond(), _cond("AbleToScale", reason="Synced")]), True),
    ("True condition: a count in its message", _status(conditions=[_cond(
        message="evaluated 1 of 1 metrics; recommends 5 replicas")]), True),
    ("True condition: words", _status(conditions=[_cond(
        message="evaluated 1 of 1 metrics; recommends 4 pods")]), True),
]

FAILING = _cond(status="False", reason="DecisionUnavailable", message="prom: HTTP 503 after 1.2s")
FAILING_CASES = [
    ("numbers only", _cond(status="False", reason="DecisionUnavailable", message="prom: HTTP 503 after 1.3s"),
     False),
    ("words", _cond(status="False", reason="DecisionUnavailable", message="prom: connection refused"), True),
]


@pytest.mark.parametrize(("new", "expected"), [(c[1], c[2]) for c in FAILING_CASES],
                         ids=[c[0] for c in FAILING_CASES])
def test_a_failing_conditions_message_is_compared_without_its_numbers(new: dict[str, Any],
                                                                      expected: bool) -> None:
    assert significant(_status(conditions=[FAILING]), _status(conditions=[new]), 0.1) is expected


@pytest.mark.parametrize(("new", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_significant(new: dict[str, Any], expected: bool) -> None:
    assert significant(_status(), new, DEFAULT_SIGNIFICANCE) is expected


@pytest.mark.parametrize(("held", "new", "target", "moved"), [
    (40.0, 43.9, 10.0, False),
    (40.0, 44.1, 10.0, True),
    (0.0, 0.5, 10.0, False),   # near zero: the target is the scale (an idle queue)
    (0.0, 1.5, 10.0, True),
    (0.0, 0.0, None, False),
    (0.0, 0.1, None, True),    # no scale at all: any change
    (None, None, 10.0, False),
    (None, 1.0, 10.0, True),
], ids=["inside", "beyond", "zero-inside", "zero-beyond", "zero-equal", "zero-no-target", "both-none",
        "appears"])
def test_value_moved(held: float | None, new: float | None, target: float | None, moved: bool) -> None:
    assert value_moved(held, new, target, 0.1) is moved


@pytest.mark.parametrize(("algorithm", "config", "expected"), [
    ("apa", None, 0.1),
    ("apa", {"tolerance": "0.2"}, 0.2),
    ("apa", {"tolerance": "0"}, MIN_SIGNIFICANCE),
    ("apa", {"tolerance": "nonsense"}, 0.1),
    ("my-plugin", {"tolerance": "0.3"}, DEFAULT_SIGNIFICANCE),
], ids=["apa-default", "apa-tolerance", "apa-zero-floored", "apa-bad", "plugin"])
def test_significance_of(algorithm: str, config: dict[str, str] | None, expected: float) -> None:
    assert significance_of(algorithm, config) == expected


def test_mask_numbers() -> None:
    assert mask_numbers("HTTP 503 after 1.25s at 2026-01-01T00:00:00Z, -3e-2") == \
        "HTTP # after #s at ###T#Z, #"


class _Client:
    def __init__(self) -> None:
        self.patches: list[Any] = []

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]:
        self.patches.append(patch)
        return {}


def _obj(status: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": "es", "namespace": "ns", "uid": "u1", "resourceVersion": rv},
            "status": status}


STATUS_REFRESH_SECONDS = 300.0


def test_writer_never_writes_drift_by_default() -> None:
    client = _Client()
    writer = StatusWriter(client)
    assert DEFAULT_STATUS_REFRESH_SECONDS == 0
    drift = _status(currentMetrics=[_row(41.0)])
    for now in (0.0, 3600.0, 86400.0):
        assert writer.write(None, _obj(_status()), drift, now=now, significance=0.1) == WriteOutcome.DEFERRED
    assert client.patches == []


def test_writer_defers_drift_until_the_refresh() -> None:
    client = _Client()
    writer = StatusWriter(client, refresh_seconds=STATUS_REFRESH_SECONDS)
    obj = _obj(_status())
    drift = _status(currentMetrics=[_row(41.0)])
    assert writer.write(None, obj, drift, now=0.0, significance=0.1) == WriteOutcome.DEFERRED
    assert writer.write(None, obj, drift, now=STATUS_REFRESH_SECONDS - 1, significance=0.1) == \
        WriteOutcome.DEFERRED
    assert writer.write(None, obj, drift, now=STATUS_REFRESH_SECONDS, significance=0.1) == \
        WriteOutcome.WRITTEN
    assert client.patches == [{"status": drift}]
    # the refresh interval restarts at the write
    obj2 = _obj(drift, rv="2")
    drift2 = _status(currentMetrics=[_row(42.0)])
    assert writer.write(None, obj2, drift2, now=STATUS_REFRESH_SECONDS + 1, significance=0.1) == \
        WriteOutcome.DEFERRED
    assert writer.deferred == 3 and writer.writes == 1


def test_writer_writes_significant_changes_at_once_and_everything_without_a_time() -> None:
    client = _Client()
    writer = StatusWriter(client)
    assert writer.write(None, _obj(_status()), _status(desiredReplicas=5), now=0.0, significance=0.1) == \
        WriteOutcome.WRITTEN
    assert writer.write(None, _obj(_status(), rv="2"), _status(currentMetrics=[_row(41.0)])) == \
        WriteOutcome.WRITTEN, "no time given: every change is written (the old contract)"
    assert writer.write(None, _obj(_status(), rv="3"), _status()) == WriteOutcome.UNCHANGED


def test_scaler_metrics_keep_one_series_per_scaler_and_metric() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from escaler.api.scaler import MetricStatus
    from escaler.reconcilers.kit.scalermetrics import MAX_METRIC_LABEL, ScalerMetrics

    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)

    def series() -> list[str]:
        return [line for line in generate_latest(registry).decode().splitlines()
                if line.startswith("escaler_scaler_metric_value{")]

    long_query = "sum(rate(x[1m]))" * 20
    metrics.record_sync("ns", "es", 4, 5, [MetricStatus(name="queue", value=41.0),
                                           MetricStatus(name=long_query, value=2.0)])
    assert len(series()) == 2
    assert any(f'metric="{long_query[:MAX_METRIC_LABEL]}"' in s for s in series())
    metrics.record_sync("ns", "es", 5, 5, [MetricStatus(name="queue", value=42.0),
                                           MetricStatus(name=long_query, error="down")])
    assert series() == ['escaler_scaler_metric_value{index="0",metric="queue",name="es",namespace="ns"} 42.0']
    metrics.forget("ns", "es")
    assert series() == []
