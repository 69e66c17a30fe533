"""metricsync with ``metricsTrigger.activation`` (docs/design.md#beyond-the-seeds): at 0 replicas only the
External / ExternalServer totals are collected (as for 1 replica, so an AverageValue gives its total) and the
recommendation is 0 with the activation readings; a failed read at 0 is DecisionUnavailable that
may scale from zero (hold or fallback, never ScalingDisabled); above 0 every recommendation carries
the totals of this poll; without activation nothing is collected at 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from test_metricsync import CPU70, Run, ScriptedCollector, average, es, external

from escaler.api.elasticscaler import ElasticScaler, MetricSpec
from escaler.scaling.activation import ACTIVE, INACTIVE
from escaler.signals import Sample


def with_activation(scaler: ElasticScaler, value: str) -> ElasticScaler:
    obj: dict[str, Any] = scaler.to_object()
    obj["spec"]["minReplicas"] = 0
    obj["spec"]["trigger"]["metricsTrigger"]["activation"] = {"value": value}
    return ElasticScaler.parse(obj)


@dataclass
class Recording(ScriptedCollector):
    """A ScriptedCollector that records what each call asked for."""

    asked: list[tuple[tuple[str, ...], int]] = field(default_factory=list)

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]:
        self.asked.append((tuple(str(m.type) for m in metrics), current_replicas))
        return super().collect(namespace, metrics, target, current_replicas)


def test_at_zero_only_the_totals_are_read_and_activation_decides() -> None:
    collector = Recording(samples=[12.0])  # queue total 12 read as for 1 replica
    run = Run(collector)
    scaler = with_activation(es(CPU70, external("queue", average("4"))), "5")
    out = run.sync(scaler, 0)
    assert collector.asked == [(("External",), 1)]
    rr = out.recommend
    assert (rr.replicas, rr.can_scale_from_zero, rr.evaluated, rr.total) == (0, True, 1, 2)
    assert rr.activation is not None and rr.activation.verdict == ACTIVE
    assert [(r.name, r.value) for r in rr.activation.readings] == [("queue", 12.0)]
    assert out.statuses == ()


def test_at_zero_below_the_value_is_inactive() -> None:
    run = Run(Recording(samples=[5.0]))
    out = run.sync(with_activation(es(external("queue", average("4"))), "5"), 0)
    assert out.recommend.activation is not None and out.recommend.activation.verdict == INACTIVE


def test_a_failed_read_at_zero_holds_rather_than_disabling() -> None:
    run = Run(Recording(samples=["HTTP 503"]))
    out = run.sync(with_activation(es(external("queue", average("4"))), "5"), 0)
    rr = out.recommend
    assert (rr.replicas, rr.can_scale_from_zero, rr.activation) == (None, True, None)
    assert rr.unavailable == "metrics: queue: HTTP 503"


def test_above_zero_the_totals_ride_along_with_the_recommendation() -> None:
    collector = Recording(samples=[70.0, 6.0])  # cpu at target; queue 6 per replica at 3 replicas
    run = Run(collector)
    out = run.sync(with_activation(es(CPU70, external("queue", average("4"))), "5"), 3)
    assert collector.asked == [(("Resource", "External"), 3)]
    rr = out.recommend
    assert rr.replicas is not None and rr.replicas >= 1
    assert rr.activation is not None
    assert [(r.name, r.value) for r in rr.activation.readings] == [("queue", 18.0)]  # the total


def test_without_activation_nothing_is_collected_at_zero() -> None:
    collector = Recording(samples=[12.0])
    out = Run(collector).sync(es(external("queue", average("4"))), 0)
    assert collector.asked == []
    assert (out.recommend.replicas, out.recommend.can_scale_from_zero) == (None, False)
