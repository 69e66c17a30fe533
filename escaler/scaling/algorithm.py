"""The scaling-algorithm contract of SPEC §5.2: what an algorithm sees and what it may return.

An algorithm is a *pure function* ``(AlgorithmContext) -> int``: the desired replica count
recommended from the current count, the aggregated metrics, the scaler's ``algorithmConfig``
and its past recommendations. It gets no client, no clock and no mutable state, so it cannot
reach the API server, and the same inputs always give the same count — which is what lets the
simulator and ``escaler explain`` replay it.

Outcomes an algorithm may produce:

* an ``int >= 0`` — the recommendation (the pipeline then stabilizes, limits and clamps it);
* ``NoDecision`` — the inputs cannot support a decision (a NaN/Inf/negative/missing sample, no
  metrics at all). The reconciler reports ``ScalingActive=False/DecisionUnavailable`` and holds
  the current count;
* ``ValueError`` — the *spec* cannot produce a decision (an unparsable ``algorithmConfig``
  value, a target of 0); the message names the key or the metric. The reconciler reports
  ``ScalingActive=False/InvalidSpec``.

Metric values (``MetricValue.value``) follow the target type, as the collectors produce them:

* ``Utilization`` — the average utilization across the target's pods, in percent of the
  request (``70`` means 70 %); ``target_value`` is the target percentage;
* ``AverageValue`` — the per-replica average of the metric; ``target_value`` is the per-replica
  target;
* ``Value`` — the metric as one total for the whole workload (a queue depth, a ``sum(...)``);
  ``target_value`` is what one replica should carry, so the workload needs
  ``value / target_value`` replicas.

The context is read-only: frozen dataclasses, tuples, and a ``MappingProxyType`` for the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

__all__ = [
    "METRIC_TYPES",
    "TARGET_AVERAGE_VALUE",
    "TARGET_TYPES",
    "TARGET_UTILIZATION",
    "TARGET_VALUE",
    "Algorithm",
    "AlgorithmContext",
    "MetricValue",
    "NoDecision",
    "Recommendation",
    "is_usable",
]

TARGET_UTILIZATION = "Utilization"
TARGET_VALUE = "Value"
TARGET_AVERAGE_VALUE = "AverageValue"
TARGET_TYPES = (TARGET_UTILIZATION, TARGET_VALUE, TARGET_AVERAGE_VALUE)
# the metric sources of an ElasticScaler MetricsTrigger (SPEC §5)
METRIC_TYPES = ("Resource", "Custom", "External", "ExternalServer")


class NoDecision(Exception):
    """The inputs cannot support a decision; the message names the metric and the reason."""


@dataclass(frozen=True)
class MetricValue:
    """One metric, aggregated over the window (SPEC §5.4), with its target."""

    # the metric's display name (resource name, metric name, or the ExternalServer query)
    name: str
    # the metric source: Resource | Custom | External | ExternalServer
    type: str
    # the aggregated sample; None = no usable sample in the window
    value: float | None
    # Utilization | Value | AverageValue (see the module docstring for what value means)
    target_type: str
    # the target; must be a finite number > 0 for a decision
    target_value: float


@dataclass(frozen=True)
class Recommendation:
    """A past recommendation of this scaler (newest last in ``AlgorithmContext.history``)."""

    # seconds since the epoch, as the caller's clock gave it
    time: float
    # the recommended count, >= 0
    replicas: int


def _readonly(config: Mapping[str, str]) -> Mapping[str, str]:
    items = dict(config)
    for key, value in items.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"AlgorithmContext.config: keys and values must be strings, got {key!r}: {value!r}")
    return MappingProxyType(items)


@dataclass(frozen=True)
class AlgorithmContext:
    """Everything an algorithm may read; immutable."""

    # the target's current replica count (spec), >= 0
    current_replicas: int
    # the aggregated metrics, in spec order
    metrics: tuple[MetricValue, ...] = ()
    # spec.trigger.metricsTrigger.algorithmConfig, read-only
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # past recommendations, oldest first
    history: tuple[Recommendation, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.current_replicas, bool) or not isinstance(self.current_replicas, int) \
                or self.current_replicas < 0:
            raise ValueError(f"AlgorithmContext.current_replicas: must be an integer >= 0, "
                             f"got {self.current_replicas!r}")
        # normalise to immutable containers even when the caller passed lists or a dict
        object.__setattr__(self, "metrics", tuple(self.metrics))
        object.__setattr__(self, "history", tuple(self.history))
        object.__setattr__(self, "config", _readonly(self.config))


class Algorithm(Protocol):
    """A pure function of the context to a desired replica count (see the module docstring)."""

    def __call__(self, ctx: AlgorithmContext, /) -> int: ...


def is_usable(value: float | None) -> bool:
    """True for a finite, non-negative sample."""
    return value is not None and not isinstance(value, bool) and math.isfinite(value) and value >= 0
