"""``flow``, a registered scaling algorithm (docs/guide/elasticscaler.md#the-triggers,
docs/design.md#the-llm-sizing-policy): flow sizing for an ElasticScaler MetricsTrigger (``scalingAlgorithm:
flow``), **stateless**.

It is the first steps of ``escaler.scaling.flow.decide_flow`` — called, not copied — on one reading:

* **Metrics**, by name (``MetricValue.name``: the metric name of a Custom or External metric;
  an ExternalServer metric is named by its query, so it cannot feed ``flow`` — expose the rates as
  External metrics, or use an LLMScaler with ``metricProvider: Flow``): ``promptTokensRate`` and
  ``generationTokensRate`` (the fleet's tokens per second; required), ``waiting`` and
  ``requestsRate`` (optional: the waiting requests, and the completed requests per second that give
  the work per request — the backlog needs both, ``waiting`` alone is not acted on). A ``Value``
  target reads the value as the fleet's total, an ``AverageValue`` one as a per-replica average
  (times the current count); a ``Utilization`` target is refused (``ValueError`` naming the
  metric). A required metric missing from the context, or a missing, NaN, infinite or negative
  sample, is ``NoDecision`` naming the metric.
* **Config** (``algorithmConfig``, strings): ``prefillTokensPerSecond`` and
  ``decodeTokensPerSecond`` (one replica's capacity; required, > 0), ``utilization`` (default 0.85,
  in (0, 1]) and ``drainSeconds`` (default 60, > 0: the backlog is drained over it). A missing,
  bad or unknown key is a ``ValueError`` naming the key.
* **Result**: ``ceil(work / utilization + backlog)`` with ``work = prompt/s / prefill + generated/s
  / decode`` and ``backlog = waiting x (work / requests/s) / drainSeconds``; the pipeline then
  stabilizes, limits and clamps it (its scale-down stabilization window is the down delay).

What needs state is left out, by design of a pure ``(AlgorithmContext) -> int`` algorithm: the
forecast (a trend over past readings), the utilisation trim (it moves slowly from decision to
decision), the burst headroom (learned from misses, forgotten slowly) and flow sizing's own down
delay. The LLMScaler's Flow provider keeps that state and has them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from escaler.scaling.algorithm import (
    TARGET_AVERAGE_VALUE,
    TARGET_VALUE,
    AlgorithmContext,
    MetricValue,
    NoDecision,
    is_usable,
)
from escaler.scaling.flow import FlowCapacity, FlowConfig, FlowReading, FlowState, decide_flow
from escaler.scaling.strconv import parse_number

__all__ = [
    "CONFIG_KEYS",
    "FLOW",
    "KEY_DECODE",
    "KEY_DRAIN",
    "KEY_PREFILL",
    "KEY_UTILIZATION",
    "flow",
    "parse_flow_config",
]

FLOW = "flow"
KEY_PREFILL = "prefillTokensPerSecond"
KEY_DECODE = "decodeTokensPerSecond"
KEY_UTILIZATION = "utilization"
KEY_DRAIN = "drainSeconds"
CONFIG_KEYS = (KEY_PREFILL, KEY_DECODE, KEY_UTILIZATION, KEY_DRAIN)
DEFAULT_UTILIZATION = 0.85
DEFAULT_DRAIN_SECONDS = 60.0
# the metrics read, by name
PROMPT, GENERATION, WAITING, REQUESTS = "promptTokensRate", "generationTokensRate", "waiting", "requestsRate"
# no bound of its own: the pipeline clamps to [minReplicas, maxReplicas]
_UNBOUNDED = 1_000_000

# key → (range check, what the value must be)
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    KEY_PREFILL: (lambda v: v > 0, "must be a number > 0 (one replica's prompt tokens prefilled per second)"),
    KEY_DECODE: (lambda v: v > 0, "must be a number > 0 (one replica's tokens decoded per second)"),
    KEY_UTILIZATION: (lambda v: 0 < v <= 1, "must be a number > 0 and <= 1"),
    KEY_DRAIN: (lambda v: v > 0, "must be a number > 0 (seconds)"),
}


def _number(config: Mapping[str, str], key: str, default: float | None) -> float:
    text = config.get(key)
    if text is None:
        if default is None:
            raise ValueError(f"algorithmConfig[{key}]: required by the flow algorithm")
        return default
    try:
        value = parse_number(text)
    except ValueError as err:
        raise ValueError(f"algorithmConfig[{key}]: {err}, got {text!r}") from None
    ok, rule = _RANGES[key]
    if not ok(value):
        raise ValueError(f"algorithmConfig[{key}]: {rule}, got {text!r}")
    return value


def parse_flow_config(config: Mapping[str, str]) -> FlowConfig:
    """``algorithmConfig`` → the stateless ``FlowConfig``; ``ValueError`` naming the first bad key."""
    for key in sorted(config):
        if key not in CONFIG_KEYS:
            raise ValueError(f"algorithmConfig[{key}]: unknown flow setting; the settings are "
                             f"{', '.join(CONFIG_KEYS)}")
    u = _number(config, KEY_UTILIZATION, DEFAULT_UTILIZATION)
    # no trim range, no seeded headroom, no down delay: nothing that needs a past decision
    return FlowConfig(FlowCapacity(_number(config, KEY_PREFILL, None), _number(config, KEY_DECODE, None)),
                      min_replicas=0, max_replicas=_UNBOUNDED, utilization=u, min_utilization=u,
                      max_utilization=u, drain_s=_number(config, KEY_DRAIN, DEFAULT_DRAIN_SECONDS),
                      down_delay_s=0.0, seed_headroom=False, down_margin=0.0)


def _total(metric: MetricValue, current: int) -> float:
    """The fleet's total of ``metric`` (see the module docstring)."""
    if metric.target_type not in (TARGET_VALUE, TARGET_AVERAGE_VALUE):
        raise ValueError(f"metric {metric.name!r}: the flow algorithm reads totals: its target type must be "
                         f"{TARGET_VALUE} or {TARGET_AVERAGE_VALUE}, got {metric.target_type!r}")
    if metric.value is None:
        raise NoDecision(f"metric {metric.name!r}: no sample")
    if not is_usable(metric.value):
        raise NoDecision(f"metric {metric.name!r}: unusable sample {metric.value!r}")
    value = float(metric.value)
    return value * current if metric.target_type == TARGET_AVERAGE_VALUE else value


def _reading(ctx: AlgorithmContext) -> FlowReading:
    by_name = {m.name: m for m in ctx.metrics}
    cur = ctx.current_replicas
    values: dict[str, float] = {}
    for name in (PROMPT, GENERATION, WAITING, REQUESTS):
        metric = by_name.get(name)
        if metric is None:
            if name in (PROMPT, GENERATION):
                raise NoDecision(f"metric {name!r}: the flow algorithm needs it (a metric named {name})")
            continue
        values[name] = _total(metric, cur)
    return FlowReading(0.0, cur, values[PROMPT], values[GENERATION], requests_per_s=values.get(REQUESTS),
                       waiting=values.get(WAITING))


def flow(ctx: AlgorithmContext, /) -> int:
    """The ``flow`` recommendation for ``ctx`` (see the module docstring)."""
    config = parse_flow_config(ctx.config)
    return decide_flow(_reading(ctx), config, FlowState()).replicas
