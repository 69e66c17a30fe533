"""Scaler annotations: keys, defaults, allowed values and their one parser
(docs/concepts.md#conditions-and-health, docs/reference/annotations.md).

Two families:

* **pause** (every scaler kind, docs/concepts.md#conditions-and-health): ``elasticscaler.io/paused``
  (``"true"``/``"false"``; freeze: no writes) and ``elasticscaler.io/paused-replicas`` (an integer >= 0; pin
  to N);
* **metrics and behavior policies** (ElasticScaler, MetricsTrigger with an algorithm,
  docs/reference/annotations.md): ``elasticscaler.io/metrics.*`` and ``elasticscaler.io/behavior.*``, see
  ``POLICY_KEYS``.

``ANNOTATIONS`` is the one table of every key: its ``ScalerAnnotations`` field, its value type
(``ValueType``: the parser and the words the reference uses), what it does and who reads it. The
parser reads it, and ``docs/reference/annotations.md`` is generated from it
(``escaler.cli.annotationdocs``), so the parser and the reference cannot drift.

``parse_annotations(annotations, policies=..., defaults=...)`` returns ``(ScalerAnnotations, problems)``:
every value that parses is used, every other one falls back to its default and yields one
``AnnotationProblem`` naming the key (as the path ``metadata.annotations[<key>]``), the rule and
the default used. The reconciler uses the values and reports each problem once as a Warning event
(never silently, docs/reference/annotations.md); the admission webhook accepts such an object with an
admission warning saying the same (``escaler.webhook.checks`` states when it denies instead). A key under
``elasticscaler.io/metrics.`` or ``elasticscaler.io/behavior.`` that is not one of ours is a
problem too (a typo such as ``metrics.windowSecond`` would otherwise be ignored silently).

``elasticscaler.io/metrics.panicWindowPercentage`` (default 10, 0 disables; a number in [0, 100])
sizes the *panic window*, a short window of ``windowSeconds * percentage / 100`` (6 s by default)
aggregated alongside the main one (``escaler.scaling.window`` states the rule and the numbers
behind the default): it takes over a scale-up the main window would only creep towards, and never
drives a scale-down. Ten percent is Knative KPA's default panic window (60 s stable, 6 s panic).

Defaults depend on the trigger. ``DEFAULTS`` are those of docs/reference/annotations.md, for a MetricsTrigger
(and a SignalTrigger). ``STATE_TRIGGER_DEFAULTS`` differ in one value: no scale-down stabilization window
(0 s, not 300 s). A state source's ``status.desiredReplicas`` (a Tidal's schedule) is a decision
already made, not a noisy signal to smooth, and seed 003 scopes the behaviour annotations to the
MetricsTrigger path: a StateTrigger follower follows a scale-down at once instead of 5 minutes late.
A window set explicitly with the annotation still applies to any trigger.

Numbers are parsed strictly (``escaler.scaling.strconv``): ``"60"``, ``"2.5"``; not ``" 60"``,
``"6_0"``, ``"nan"``. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from escaler.scaling.strconv import parse_bool, parse_int, parse_number

__all__ = [
    "AGGREGATION_TYPES",
    "ANNOTATIONS",
    "ANNOTATION_PREFIX",
    "BEHAVIOR_FAMILY",
    "DEFAULTS",
    "ENABLE_OUTLIER_FILTER",
    "GC_FACTOR",
    "MAX_STABILIZATION_WINDOW_SECONDS",
    "METRICS_AGGREGATION_TYPE",
    "METRICS_FAMILY",
    "MISSING_DATA_POLICIES",
    "MISSING_DATA_POLICY",
    "OUTLIER_THRESHOLD",
    "PANIC_WINDOW_PERCENTAGE",
    "PAUSED",
    "PAUSED_REPLICAS",
    "PAUSE_FAMILY",
    "PAUSE_KEYS",
    "PAUSE_READERS",
    "POLICY_KEYS",
    "POLICY_PREFIXES",
    "READERS",
    "SCALE_DOWN_MAX_PODS_PER_STEP",
    "SCALE_DOWN_STABILIZATION_WINDOW",
    "SCALE_UP_MAX_PODS_PER_STEP",
    "SCALE_UP_STABILIZATION_WINDOW",
    "STATE_TRIGGER_DEFAULTS",
    "WINDOW_SECONDS",
    "AnnotationProblem",
    "AnnotationSpec",
    "Readers",
    "ScalerAnnotations",
    "ValueType",
    "annotation_path",
    "defaults_for_trigger",
    "parse_annotations",
    "show_default",
]

ANNOTATION_PREFIX = "elasticscaler.io/"

WINDOW_SECONDS = "elasticscaler.io/metrics.windowSeconds"
GC_FACTOR = "elasticscaler.io/metrics.gcFactor"
METRICS_AGGREGATION_TYPE = "elasticscaler.io/metrics.aggregationType"
MISSING_DATA_POLICY = "elasticscaler.io/metrics.missingDataPolicy"
ENABLE_OUTLIER_FILTER = "elasticscaler.io/metrics.enableOutlierFilter"
OUTLIER_THRESHOLD = "elasticscaler.io/metrics.outlierThreshold"
PANIC_WINDOW_PERCENTAGE = "elasticscaler.io/metrics.panicWindowPercentage"
SCALE_UP_STABILIZATION_WINDOW = "elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds"
SCALE_DOWN_STABILIZATION_WINDOW = "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds"
SCALE_UP_MAX_PODS_PER_STEP = "elasticscaler.io/behavior.scaleUp.maxPodsPerStep"
SCALE_DOWN_MAX_PODS_PER_STEP = "elasticscaler.io/behavior.scaleDown.maxPodsPerStep"
PAUSED = "elasticscaler.io/paused"
PAUSED_REPLICAS = "elasticscaler.io/paused-replicas"

AGGREGATION_TYPES = ("Average", "Max", "Min", "P50", "P90", "P95", "P99", "Latest")
MISSING_DATA_POLICIES = ("Ignore", "TreatAsZero", "Fail")
# the stabilization windows' upper bound (HPA's behavior API uses the same one hour)
MAX_STABILIZATION_WINDOW_SECONDS = 3600
# keys under these prefixes are ours: an unknown one is a typo
POLICY_PREFIXES = ("elasticscaler.io/metrics.", "elasticscaler.io/behavior.")


@dataclass(frozen=True)
class ScalerAnnotations:
    """The parsed annotations; every field holds its documented default (docs/reference/annotations.md)
    unless a valid value was given."""

    # aggregation window over the sample buffer, seconds; >= 1
    window_seconds: int = 60
    # samples are kept for window_seconds * gc_factor; >= 1
    gc_factor: float = 2.0
    # one of AGGREGATION_TYPES
    aggregation_type: str = "Average"
    # one of MISSING_DATA_POLICIES
    missing_data_policy: str = "Ignore"
    # drop samples beyond outlier_threshold * MAD from the median
    enable_outlier_filter: bool = False
    # > 0
    outlier_threshold: float = 3.0
    # the panic window as a percentage of window_seconds; 0 (off) .. 100
    panic_window_percentage: float = 10.0
    # 0..MAX_STABILIZATION_WINDOW_SECONDS
    scale_up_stabilization_seconds: int = 0
    # 0..MAX_STABILIZATION_WINDOW_SECONDS
    scale_down_stabilization_seconds: int = 300
    # >= 1; None = unlimited
    scale_up_max_pods_per_step: int | None = None
    # >= 1; None = unlimited
    scale_down_max_pods_per_step: int | None = None
    # freeze: no writes
    paused: bool = False
    # pin to this count; None = not pinned; >= 0
    paused_replicas: int | None = None


DEFAULTS = ScalerAnnotations()
# a StateTrigger follows its source's decision at once: no scale-down window unless one is set
STATE_TRIGGER_DEFAULTS = replace(DEFAULTS, scale_down_stabilization_seconds=0)


def defaults_for_trigger(trigger_type: Any) -> ScalerAnnotations:
    """The defaults of an ElasticScaler whose ``spec.trigger.type`` is ``trigger_type`` (as written)."""
    return STATE_TRIGGER_DEFAULTS if trigger_type == "StateTrigger" else DEFAULTS


@dataclass(frozen=True)
class AnnotationProblem:
    """One annotation that could not be used; ``str()`` is the message for events and denials."""

    # the annotation key
    key: str
    # the value as written (repr'd, capped, in messages)
    value: Any
    # what the value must be
    rule: str
    # the default used instead (None when the key is unknown or has no default, e.g. unlimited)
    default: Any = None

    @property
    def path(self) -> str:
        return annotation_path(self.key)

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}, got {_show(self.value)}"

    def fallback_message(self) -> str:
        """For the reconciler's Warning event: the problem and the default used."""
        fallback = "ignored" if self.default is None else f"using the default {show_default(self.default)}"
        return f"{self}; {fallback}"


def show_default(value: Any) -> str:
    """A default as a user writes it in the annotation: ``false``, ``2``, ``2.5``, ``Average``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def annotation_path(key: str) -> str:
    """The field path of an annotation, Kubernetes-style: ``metadata.annotations[<key>]``."""
    return f"metadata.annotations[{key}]" if key else "metadata.annotations"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


# parser: str -> value, raising ValueError with the rule
Parser = Callable[[str], Any]


@dataclass(frozen=True)
class ValueType:
    """What an annotation's value must be: the parser and the same rule in the reference's words."""

    # the values accepted, as the reference shows them ("an integer >= 1")
    text: str
    # str -> value; raises ValueError with the rule
    parse: Parser


def _int_in(low: int, high: int | None) -> ValueType:
    text = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    rule = f"must be {text}"

    def parse(value_text: str) -> int:
        try:
            value = parse_int(value_text)
        except ValueError:
            raise ValueError(rule) from None
        if value < low or (high is not None and value > high):
            raise ValueError(rule)
        return value
    return ValueType(text, parse)


def _number_at_least(low: float, *, strict: bool) -> ValueType:
    text = f"a number {'>' if strict else '>='} {low:g}"

    def parse(value_text: str) -> float:
        value = parse_number(value_text)
        if value < low or (strict and value == low):
            raise ValueError(f"must be {text}")
        return value
    return ValueType(text, parse)


def _number_in(low: float, high: float) -> ValueType:
    text = f"a number in [{low:g}, {high:g}]"

    def parse(value_text: str) -> float:
        value = parse_number(value_text)
        if not low <= value <= high:
            raise ValueError(f"must be {text}")
        return value
    return ValueType(text, parse)


def _one_of(allowed: tuple[str, ...]) -> ValueType:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text
    return ValueType("one of " + ", ".join(f"`{a}`" for a in allowed), parse)


_BOOL = ValueType("`true` or `false`", parse_bool)

# the families, by who reads them
PAUSE_FAMILY = "pause"
METRICS_FAMILY = "metrics"
BEHAVIOR_FAMILY = "behavior"


@dataclass(frozen=True)
class Readers:
    """Who reads a family of annotations: the kinds whose reconciler falls back on a bad value."""

    # the kinds, in KINDS order
    kinds: tuple[str, ...]
    # which triggers or modes of those kinds, in words (Markdown)
    where: str


# family → its readers; every other kind ignores the family (the webhook refuses a bad value there)
READERS: dict[str, Readers] = {
    PAUSE_FAMILY: Readers(("ElasticScaler", "LLMScaler"),
                          "every trigger and mode (with `scalingAlgorithm: HPA`, pausing pins the companion "
                          "HPA)"),
    METRICS_FAMILY: Readers(("ElasticScaler",),
                            "`MetricsTrigger` with a scaling algorithm; with `scalingAlgorithm: HPA` the "
                            "companion HPA aggregates metrics itself, so the webhook refuses these"),
    BEHAVIOR_FAMILY: Readers(("ElasticScaler",),
                             "every trigger; with `scalingAlgorithm: HPA` they become the companion HPA's "
                             "`behavior`"),
}
# the kinds that read the pause annotations
PAUSE_READERS = READERS[PAUSE_FAMILY].kinds


@dataclass(frozen=True)
class AnnotationSpec:
    """One annotation: the parser's and the reference's one source."""

    # the annotation key
    key: str
    # the ScalerAnnotations field it sets
    field: str
    # the values accepted
    value: ValueType
    # PAUSE_FAMILY, METRICS_FAMILY or BEHAVIOR_FAMILY
    family: str
    # what it does (Markdown, one paragraph)
    help: str
    # the default in words when the field's default is None ("unlimited", "not pinned")
    unset: str = ""


ANNOTATIONS: tuple[AnnotationSpec, ...] = (
    AnnotationSpec(WINDOW_SECONDS, "window_seconds", _int_in(1, None), METRICS_FAMILY,
                   "The aggregation window, in seconds: each metric's samples of the last `windowSeconds` "
                   "are reduced to one value by `aggregationType`."),
    AnnotationSpec(GC_FACTOR, "gc_factor", _number_at_least(1, strict=False), METRICS_FAMILY,
                   "Samples are kept for `windowSeconds * gcFactor` seconds, then dropped."),
    AnnotationSpec(METRICS_AGGREGATION_TYPE, "aggregation_type", _one_of(AGGREGATION_TYPES), METRICS_FAMILY,
                   "How the samples in the window become one value: the mean, the largest, the smallest, a "
                   "nearest-rank percentile (an observed sample, never interpolated) or the newest sample."),
    AnnotationSpec(MISSING_DATA_POLICY, "missing_data_policy", _one_of(MISSING_DATA_POLICIES), METRICS_FAMILY,
                   "A metric with no sample in the window: `Ignore` leaves it out of this sync's decision, "
                   "`TreatAsZero` counts it as 0, `Fail` makes no decision this sync, naming the metric."),
    AnnotationSpec(ENABLE_OUTLIER_FILTER, "enable_outlier_filter", _BOOL, METRICS_FAMILY,
                   "Drop the samples farther than `outlierThreshold * MAD` from the window's median before "
                   "aggregating (never all of them; nothing with fewer than three samples or a zero MAD)."),
    AnnotationSpec(OUTLIER_THRESHOLD, "outlier_threshold", _number_at_least(0, strict=True), METRICS_FAMILY,
                   "The outlier filter's threshold, in MADs (median absolute deviations) from the median."),
    AnnotationSpec(PANIC_WINDOW_PERCENTAGE, "panic_window_percentage", _number_in(0, 100), METRICS_FAMILY,
                   "The panic window, as a percentage of `windowSeconds` (6 s by default), aggregated beside "
                   "the main window: it takes over a scale-up the main window would only creep towards and "
                   "never drives a scale-down; `0` turns it off (Knative KPA's default is the same 10 %)."),
    AnnotationSpec(SCALE_UP_STABILIZATION_WINDOW, "scale_up_stabilization_seconds",
                   _int_in(0, MAX_STABILIZATION_WINDOW_SECONDS), BEHAVIOR_FAMILY,
                   "Scale up only to the lowest recommendation of this many last seconds (HPA's "
                   "`behavior.scaleUp.stabilizationWindowSeconds`)."),
    AnnotationSpec(SCALE_DOWN_STABILIZATION_WINDOW, "scale_down_stabilization_seconds",
                   _int_in(0, MAX_STABILIZATION_WINDOW_SECONDS), BEHAVIOR_FAMILY,
                   "Scale down only to the highest recommendation of this many last seconds (HPA's "
                   "`behavior.scaleDown.stabilizationWindowSeconds`). A StateTrigger follows its source at "
                   "once unless this is set: its default there is 0."),
    AnnotationSpec(SCALE_UP_MAX_PODS_PER_STEP, "scale_up_max_pods_per_step", _int_in(1, None),
                   BEHAVIOR_FAMILY, "Add at most this many replicas in one step.", unset="unlimited"),
    AnnotationSpec(SCALE_DOWN_MAX_PODS_PER_STEP, "scale_down_max_pods_per_step", _int_in(1, None),
                   BEHAVIOR_FAMILY, "Remove at most this many replicas in one step.", unset="unlimited"),
    AnnotationSpec(PAUSED, "paused", _BOOL, PAUSE_FAMILY,
                   "`true` freezes the scaler: nothing is written to the target "
                   "(`AbleToScale=True/Paused`)."),
    AnnotationSpec(PAUSED_REPLICAS, "paused_replicas", _int_in(0, None), PAUSE_FAMILY,
                   "Pin the target to this many replicas, whatever the trigger says "
                   "(`AbleToScale=True/PausedReplicas`); it wins over `paused`.", unset="not pinned"),
)

# key → (ScalerAnnotations field, parser), per family
_POLICY: dict[str, tuple[str, Parser]] = {
    a.key: (a.field, a.value.parse) for a in ANNOTATIONS if a.family != PAUSE_FAMILY}
_PAUSE: dict[str, tuple[str, Parser]] = {
    a.key: (a.field, a.value.parse) for a in ANNOTATIONS if a.family == PAUSE_FAMILY}
POLICY_KEYS = tuple(_POLICY)
PAUSE_KEYS = tuple(_PAUSE)
assert {f.name for f in fields(ScalerAnnotations)} == {a.field for a in ANNOTATIONS}
assert len({a.key for a in ANNOTATIONS}) == len(ANNOTATIONS)
assert all(a.key.startswith(POLICY_PREFIXES) for a in ANNOTATIONS if a.family != PAUSE_FAMILY)


def _unknown_rule(key: str) -> str:
    close = difflib.get_close_matches(key, POLICY_KEYS, n=1)
    if close:
        return f"unknown escaler annotation (did you mean {close[0]}?)"
    return "unknown escaler annotation (known: " + ", ".join(POLICY_KEYS) + ")"


def parse_annotations(
    annotations: Mapping[str, Any] | None, *, policies: bool = True,
    defaults: ScalerAnnotations = DEFAULTS,
) -> tuple[ScalerAnnotations, list[AnnotationProblem]]:
    """Parse the pause annotations and, with ``policies``, the metric-window and behavior ones; a key absent
    or unusable takes its value from ``defaults`` (``DEFAULTS``, or ``STATE_TRIGGER_DEFAULTS``); see the
    module docstring.

    Never raises: a non-mapping ``annotations`` gives the defaults and one problem.
    """
    if annotations is None:
        return defaults, []
    if not isinstance(annotations, Mapping):
        return defaults, [AnnotationProblem("", annotations, "must be a map of strings to strings")]
    table = {**_PAUSE, **_POLICY} if policies else dict(_PAUSE)
    values: dict[str, Any] = {}
    problems: list[AnnotationProblem] = []
    for key in sorted((k for k in annotations if isinstance(k, str)), key=str):
        raw = annotations[key]
        entry = table.get(key)
        if entry is None:
            if policies and key.startswith(POLICY_PREFIXES):
                problems.append(AnnotationProblem(key, raw, _unknown_rule(key)))
            continue
        attr, parse = entry
        default = getattr(defaults, attr)
        if not isinstance(raw, str):
            problems.append(AnnotationProblem(key, raw, "must be a string", default))
            continue
        try:
            values[attr] = parse(raw)
        except ValueError as exc:
            problems.append(AnnotationProblem(key, raw, str(exc), default))
    return replace(defaults, **values), problems
