"""``apa``, the built-in default scaling algorithm (docs/guide/elasticscaler.md#the-triggers).

For each metric (see ``algorithm.py`` for what a value means per target type):

* ``ratio`` = observed load per replica / target per replica, i.e. ``value / target`` for
  ``Utilization`` and ``AverageValue``, and ``value / (target * current)`` for ``Value`` (a
  total spread over the current replicas);
* inside the tolerance band, ``|ratio - 1| <= tolerance`` (inclusive), the metric recommends
  the current count — small wobbles never move the workload;
* outside it, ``ceil(current * ratio)`` for ``Utilization``/``AverageValue`` and
  ``ceil(value / target)`` for ``Value`` (the same number, computed without the division by
  ``current``).

**Pod readiness (Resource metrics, the HPA's replica calculator).** A metric that carries
``MetricValue.pods`` (see ``algorithm.py``) is computed over the groups, not over ``current``
(``pod_replicas``): with ``ratio = value / target`` over the ready pods that report,

* no missing pod and no scale-up with unready pods → the tolerance band, else
  ``ceil(ratio * ready)``;
* otherwise the ratio is computed again with the missing pods at 0 % on a scale-up
  (``ratio > 1``) and at ``max(100 %, target)`` of their request on a scale-down (``AverageValue``:
  at the target), and, on a scale-up, the unready pods at 0 % (on a scale-down they stay out);
  the current count is kept when that new ratio is inside the tolerance band or points the other
  way, and when ``ceil(new ratio * pods counted)`` would move against the ratio's direction.

So 2 ready pods at 140 % of a 70 % target with 2 Pending ones ask for 4 (the Pending pods are the
capacity on its way), where ``ceil(4 * 2)`` would ask for 8.

The recommendation is the **max** over the metrics, then one step is limited:

* upwards to ``ceil(current * scaleUpRate)`` — ceil, so that a rate such as 1.5 still lets one
  replica become two (``floor`` would pin small workloads forever);
* downwards to ``floor(current / scaleDownRate)`` — floor, so that every rate > 1 lets the count
  shrink by at least one (``ceil(3 / 1.1)`` would be 3 again).

Both rates must be > 1 (a rate of 1 would forbid that direction altogether: use minReplicas or
maxReplicas for that). ``apa`` returns ``AlgorithmResult(replicas=<limited>, uncapped=<max over
the metrics>)`` so that the cap is visible: the pipeline shows it as its own step (``RateLimit``)
and ``ScalingLimited`` says ``ScaleUpLimit``/``ScaleDownLimit`` when it binds.

**From zero** (``current == 0``) there is no per-replica load and nothing to multiply the rate
by: a metric with any load recommends at least 1 (``Value``: ``ceil(value / target)``;
``Utilization``/``AverageValue``: 1, the most that can be inferred with no pods), a metric with no
load recommends 0, and the upward rate limit does not apply. (``minReplicas`` is >= 1 for
MetricsTrigger scalers; this only matters for a target that someone else scaled to zero.)

**No decision**: an empty metric list, or any metric whose value is missing, NaN, infinite or
negative, raises ``NoDecision`` naming the metric — never a count. Deciding which metrics are
usable (``missingDataPolicy``, partial metrics) is the caller's job, before this function runs.

**Config** (``algorithmConfig``, strings): ``tolerance`` (default 0.1, a number in [0, 1)),
``scaleUpRate`` and ``scaleDownRate`` (default 2.0, numbers > 1). A bad or unknown key is a
``ValueError`` naming the key (``parse_config``; the admission webhook refuses it too).

Products are rounded with a 1e-9 relative slack before ``ceil``/``floor`` so that float noise
(``3 * (0.3 / 0.1) = 9.000000000000002``) never adds or removes a replica.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from escaler.scaling.algorithm import (
    TARGET_AVERAGE_VALUE,
    TARGET_TYPES,
    TARGET_UTILIZATION,
    TARGET_VALUE,
    AlgorithmContext,
    AlgorithmResult,
    MetricValue,
    NoDecision,
    is_usable,
)
from escaler.scaling.strconv import parse_number

__all__ = [
    "APA",
    "CONFIG_KEYS",
    "DEFAULT_SCALE_DOWN_RATE",
    "DEFAULT_SCALE_UP_RATE",
    "DEFAULT_TOLERANCE",
    "KEY_SCALE_DOWN_RATE",
    "KEY_SCALE_UP_RATE",
    "KEY_TOLERANCE",
    "ApaConfig",
    "ApaConfigError",
    "apa",
    "config_errors",
    "limit_step",
    "metric_ratio",
    "parse_config",
    "pod_replicas",
    "recommend_metric",
    "tolerance_of",
]

APA = "apa"
KEY_TOLERANCE = "tolerance"
KEY_SCALE_UP_RATE = "scaleUpRate"
KEY_SCALE_DOWN_RATE = "scaleDownRate"
CONFIG_KEYS = (KEY_TOLERANCE, KEY_SCALE_UP_RATE, KEY_SCALE_DOWN_RATE)
DEFAULT_TOLERANCE = 0.1
DEFAULT_SCALE_UP_RATE = 2.0
DEFAULT_SCALE_DOWN_RATE = 2.0

# algorithmConfig key → ApaConfig field
_FIELDS = {
    KEY_TOLERANCE: "tolerance", KEY_SCALE_UP_RATE: "scale_up_rate", KEY_SCALE_DOWN_RATE: "scale_down_rate",
}
# relative slack absorbing float noise before ceil/floor and at the tolerance boundary
_EPS = 1e-9


class ApaConfigError(ValueError):
    """A bad ``algorithmConfig`` entry: ``key`` and ``rule``; ``str()`` is ``"<key>: <rule>"``."""

    def __init__(self, key: str, rule: str) -> None:
        super().__init__(f"{key}: {rule}")
        # the algorithmConfig key
        self.key = key
        # what its value must be (with the value found)
        self.rule = rule


def _tolerance_ok(v: float) -> bool:
    return math.isfinite(v) and 0 <= v < 1


def _rate_ok(v: float) -> bool:
    return math.isfinite(v) and v > 1


# key → (range check, what the value must be)
_RANGES = {
    KEY_TOLERANCE: (_tolerance_ok, "must be a number >= 0 and < 1"),
    KEY_SCALE_UP_RATE: (_rate_ok, "must be a number > 1"),
    KEY_SCALE_DOWN_RATE: (_rate_ok, "must be a number > 1"),
}


@dataclass(frozen=True)
class ApaConfig:
    """The parsed ``algorithmConfig`` of ``apa``; validated on construction."""

    # half-width of the no-change band around ratio 1; 0 <= tolerance < 1
    tolerance: float = DEFAULT_TOLERANCE
    # one step may multiply the count by at most this; finite, > 1
    scale_up_rate: float = DEFAULT_SCALE_UP_RATE
    # one step may divide the count by at most this; finite, > 1
    scale_down_rate: float = DEFAULT_SCALE_DOWN_RATE

    def __post_init__(self) -> None:
        for key, attr in _FIELDS.items():
            ok, rule = _RANGES[key]
            value = getattr(self, attr)
            if not ok(value):
                raise ApaConfigError(key, f"{rule}, got {value!r}")


def _parse_entry(key: str, text: object) -> float:
    if key not in CONFIG_KEYS:
        raise ApaConfigError(key, f"unknown apa setting; the settings are {', '.join(CONFIG_KEYS)}")
    if not isinstance(text, str):
        raise ApaConfigError(key, f"must be a string holding a number, got {text!r}")
    try:
        value = parse_number(text)
    except ValueError as exc:
        raise ApaConfigError(key, f"{exc}, got {text!r}") from None
    ok, rule = _RANGES[key]
    if not ok(value):
        raise ApaConfigError(key, f"{rule}, got {text!r}")
    return value


def config_errors(config: Mapping[str, object]) -> list[ApaConfigError]:
    """Every bad or unknown ``algorithmConfig`` entry, sorted by key (the webhook reports all)."""
    errors = []
    for key in sorted(config, key=str):
        try:
            _parse_entry(str(key), config[key])
        except ApaConfigError as exc:
            errors.append(exc)
    return errors


def parse_config(config: Mapping[str, str]) -> ApaConfig:
    """``algorithmConfig`` → ``ApaConfig``; ``ApaConfigError`` naming the first bad or unknown key."""
    values = {key: _parse_entry(key, config[key]) for key in sorted(config)}
    return ApaConfig(**{_FIELDS[key]: value for key, value in values.items()})


@functools.lru_cache(maxsize=256)
def _parsed_config(items: tuple[tuple[str, str], ...]) -> ApaConfig:
    """``parse_config`` once per distinct ``algorithmConfig`` (an ``ApaConfig`` is frozen, so one is
    shared), not on each of the up to four runs of every poll; a bad one raises each time (errors
    are not cached)."""
    return parse_config(dict(items))


def tolerance_of(config: Mapping[str, str]) -> float:
    """The ``tolerance`` an ``algorithmConfig`` gives, or the default when it gives none or a bad one
    (for callers that only need the band, e.g. to report; the algorithm itself refuses a bad one)."""
    text = config.get(KEY_TOLERANCE)
    if text is None:
        return DEFAULT_TOLERANCE
    try:
        return _parse_entry(KEY_TOLERANCE, text)
    except ApaConfigError:
        return DEFAULT_TOLERANCE


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS * max(1.0, abs(x)))


def _floor(x: float) -> int:
    return math.floor(x + _EPS * max(1.0, abs(x)))


def _check(metric: MetricValue) -> tuple[float, float]:
    """(value, target) of a metric fit for a decision; NoDecision / ValueError otherwise."""
    if metric.target_type not in TARGET_TYPES:
        raise ValueError(f"metric {metric.name!r}: target type {metric.target_type!r} is not one of "
                         f"{', '.join(TARGET_TYPES)}")
    target = metric.target_value
    if isinstance(target, bool) or not isinstance(target, int | float) or not math.isfinite(target) \
            or target <= 0:
        raise ValueError(f"metric {metric.name!r}: target must be a finite number > 0, got {target!r}")
    value = metric.value
    if value is None:
        raise NoDecision(f"metric {metric.name!r}: no sample")
    if not is_usable(value):
        raise NoDecision(f"metric {metric.name!r}: unusable sample {value!r}")
    return float(value), float(target)


def metric_ratio(current_replicas: int, metric: MetricValue) -> float:
    """Observed load per replica / target per replica (``inf`` from zero replicas with load)."""
    value, target = _check(metric)
    if metric.target_type == TARGET_VALUE:
        if current_replicas == 0:
            return math.inf if value > 0 else 1.0
        return value / (target * current_replicas)
    return value / target


def _within(ratio: float, tolerance: float) -> bool:
    return abs(ratio - 1.0) <= tolerance + _EPS


def _missing_fill(metric: MetricValue) -> float:
    """The ratio a pod without a metric counts for on a scale-down (the conservative guess: busy):
    all of its request for Utilization, or the target when that is above 100 % (so the guess never
    reads as "below target"); exactly the target for AverageValue."""
    if metric.target_type == TARGET_UTILIZATION:
        return max(100.0, metric.target_value) / metric.target_value
    return 1.0


def pod_replicas(current_replicas: int, metric: MetricValue, tolerance: float) -> int:
    """The HPA replica calculator's count for a metric with ``pods`` (see the module docstring)."""
    value, target = _check(metric)
    pods = metric.pods
    if pods is None or metric.target_type not in (TARGET_UTILIZATION, TARGET_AVERAGE_VALUE):
        raise ValueError(f"metric {metric.name!r}: pod groups need a Utilization or AverageValue target "
                         "and MetricValue.pods")
    ratio = value / target
    up_with_unready = pods.unready > 0 and ratio > 1.0
    if not up_with_unready and pods.missing == 0:
        return current_replicas if _within(ratio, tolerance) else _ceil(ratio * pods.ready)
    # usage in units of "target x weight", over the pods the new ratio counts
    usage, weight, counted = ratio * pods.ready_weight, pods.ready_weight, pods.ready
    if pods.missing and ratio != 1.0:
        usage += (_missing_fill(metric) if ratio < 1.0 else 0.0) * pods.missing_weight
        weight += pods.missing_weight
        counted += pods.missing
    if up_with_unready:
        weight += pods.unready_weight
        counted += pods.unready
    new_ratio = usage / weight
    if _within(new_ratio, tolerance) or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current_replicas
    desired = _ceil(new_ratio * counted)
    if (new_ratio < 1.0 and desired > current_replicas) or (new_ratio > 1.0 and desired < current_replicas):
        return current_replicas
    return desired


def recommend_metric(current_replicas: int, metric: MetricValue, tolerance: float) -> int:
    """The count one metric recommends (see the module docstring)."""
    value, target = _check(metric)
    if current_replicas == 0:
        if value <= 0:
            return 0
        return max(1, _ceil(value / target)) if metric.target_type == TARGET_VALUE else 1
    if metric.pods is not None and metric.target_type != TARGET_VALUE:
        return pod_replicas(current_replicas, metric, tolerance)
    ratio = metric_ratio(current_replicas, metric)
    if _within(ratio, tolerance):
        return current_replicas
    if metric.target_type == TARGET_VALUE:
        return _ceil(value / target)
    assert metric.target_type in (TARGET_UTILIZATION, TARGET_AVERAGE_VALUE)
    return _ceil(current_replicas * ratio)


def limit_step(current_replicas: int, desired: int, cfg: ApaConfig) -> int:
    """Bound one step by the scale-up and scale-down rates."""
    if desired > current_replicas and current_replicas > 0:
        return min(desired, _ceil(current_replicas * cfg.scale_up_rate))
    if desired < current_replicas:
        return max(desired, _floor(current_replicas / cfg.scale_down_rate))
    return desired


def apa(ctx: AlgorithmContext, /) -> AlgorithmResult:
    """The ``apa`` recommendation for ``ctx``, capped and uncapped (see the module docstring)."""
    cfg = _parsed_config(tuple(sorted(ctx.config.items())))
    if not ctx.metrics:
        raise NoDecision("no metrics to evaluate")
    desired = max(recommend_metric(ctx.current_replicas, m, cfg.tolerance) for m in ctx.metrics)
    lowest, highest = rate_band(ctx.current_replicas, cfg)
    return AlgorithmResult(replicas=limit_step(ctx.current_replicas, desired, cfg), uncapped=desired,
                           lowest=lowest, highest=highest)


def rate_band(current_replicas: int, cfg: ApaConfig) -> tuple[int, int | None]:
    """The counts one step may reach from ``current_replicas``: ``limit_step`` as a band (no upward
    cap from zero)."""
    if current_replicas == 0:
        return 0, None
    return _floor(current_replicas / cfg.scale_down_rate), _ceil(current_replicas * cfg.scale_up_rate)
