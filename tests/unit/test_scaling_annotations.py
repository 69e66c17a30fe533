"""Scaler annotations (docs/concepts.md#conditions-and-health, docs/reference/annotations.md): defaults, every
key's rule, fallback with a problem naming
the key, unknown keys under our prefixes, and strict number parsing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from escaler.scaling import annotations as ann
from escaler.scaling.annotations import DEFAULTS, ScalerAnnotations, parse_annotations
from escaler.scaling.strconv import parse_bool, parse_int, parse_number


def test_no_annotations_give_spec_defaults() -> None:
    values, problems = parse_annotations(None)
    assert problems == []
    assert (
        values
        == DEFAULTS
        == ScalerAnnotations(
            window_seconds=60,
            gc_factor=2.0,
            aggregation_type="Average",
            missing_data_policy="Ignore",
            enable_outlier_filter=False,
            outlier_threshold=3.0,
            panic_window_percentage=10.0,
            scale_up_stabilization_seconds=0,
            scale_down_stabilization_seconds=300,
            scale_up_max_pods_per_step=None,
            scale_down_max_pods_per_step=None,
            paused=False,
            paused_replicas=None,
        )
    )


VALID: list[tuple[str, str, str, Any]] = [
    ("window", ann.WINDOW_SECONDS, "120", ("window_seconds", 120)),
    ("gc-factor-int", ann.GC_FACTOR, "1", ("gc_factor", 1.0)),
    ("gc-factor-fraction", ann.GC_FACTOR, "2.5", ("gc_factor", 2.5)),
    ("aggregation-p99", ann.METRICS_AGGREGATION_TYPE, "P99", ("aggregation_type", "P99")),
    ("aggregation-latest", ann.METRICS_AGGREGATION_TYPE, "Latest", ("aggregation_type", "Latest")),
    ("missing-fail", ann.MISSING_DATA_POLICY, "Fail", ("missing_data_policy", "Fail")),
    ("outlier-on", ann.ENABLE_OUTLIER_FILTER, "true", ("enable_outlier_filter", True)),
    ("outlier-threshold", ann.OUTLIER_THRESHOLD, "0.5", ("outlier_threshold", 0.5)),
    ("panic-window-off", ann.PANIC_WINDOW_PERCENTAGE, "0", ("panic_window_percentage", 0.0)),
    ("panic-window-fraction", ann.PANIC_WINDOW_PERCENTAGE, "12.5", ("panic_window_percentage", 12.5)),
    ("panic-window-whole", ann.PANIC_WINDOW_PERCENTAGE, "100", ("panic_window_percentage", 100.0)),
    ("up-window-max", ann.SCALE_UP_STABILIZATION_WINDOW, "3600", ("scale_up_stabilization_seconds", 3600)),
    ("down-window-zero", ann.SCALE_DOWN_STABILIZATION_WINDOW, "0", ("scale_down_stabilization_seconds", 0)),
    ("up-step", ann.SCALE_UP_MAX_PODS_PER_STEP, "4", ("scale_up_max_pods_per_step", 4)),
    ("down-step", ann.SCALE_DOWN_MAX_PODS_PER_STEP, "1", ("scale_down_max_pods_per_step", 1)),
    ("paused", ann.PAUSED, "true", ("paused", True)),
    ("paused-replicas-zero", ann.PAUSED_REPLICAS, "0", ("paused_replicas", 0)),
]


@pytest.mark.parametrize(("key", "value", "expected"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_value_used(key: str, value: str, expected: tuple[str, Any]) -> None:
    values, problems = parse_annotations({key: value})
    assert problems == []
    assert getattr(values, expected[0]) == expected[1]


INVALID: list[tuple[str, str, Any, str]] = [
    ("window-zero", ann.WINDOW_SECONDS, "0", "must be an integer >= 1"),
    ("window-float", ann.WINDOW_SECONDS, "1.5", "must be an integer >= 1"),
    ("window-spaces", ann.WINDOW_SECONDS, " 60", "must be an integer >= 1"),
    ("window-underscore", ann.WINDOW_SECONDS, "6_0", "must be an integer >= 1"),
    ("gc-below-1", ann.GC_FACTOR, "0.9", "must be a number >= 1"),
    ("gc-nan", ann.GC_FACTOR, "nan", "must be a decimal number"),
    ("aggregation-lowercase", ann.METRICS_AGGREGATION_TYPE, "average", "must be one of Average, Max, Min"),
    ("missing-unknown", ann.MISSING_DATA_POLICY, "Skip", "must be one of Ignore, TreatAsZero, Fail"),
    ("outlier-yes", ann.ENABLE_OUTLIER_FILTER, "yes", 'must be "true" or "false"'),
    ("outlier-capitalised", ann.ENABLE_OUTLIER_FILTER, "True", 'must be "true" or "false"'),
    ("threshold-zero", ann.OUTLIER_THRESHOLD, "0", "must be a number > 0"),
    ("threshold-inf", ann.OUTLIER_THRESHOLD, "inf", "must be a decimal number"),
    ("panic-window-over-100", ann.PANIC_WINDOW_PERCENTAGE, "101", "must be a number in [0, 100]"),
    ("panic-window-negative", ann.PANIC_WINDOW_PERCENTAGE, "-5", "must be a number in [0, 100]"),
    ("panic-window-percent-sign", ann.PANIC_WINDOW_PERCENTAGE, "10%", "must be a decimal number"),
    ("up-window-over-hour", ann.SCALE_UP_STABILIZATION_WINDOW, "3601", "must be an integer in [0, 3600]"),
    ("down-window-negative", ann.SCALE_DOWN_STABILIZATION_WINDOW, "-1", "must be an integer in [0, 3600]"),
    ("up-step-zero", ann.SCALE_UP_MAX_PODS_PER_STEP, "0", "must be an integer >= 1"),
    ("down-step-word", ann.SCALE_DOWN_MAX_PODS_PER_STEP, "unlimited", "must be an integer >= 1"),
    ("paused-yes", ann.PAUSED, "yes", 'must be "true" or "false"'),
    ("paused-replicas-negative", ann.PAUSED_REPLICAS, "-1", "must be an integer >= 0"),
    ("not-a-string", ann.WINDOW_SECONDS, 60, "must be a string"),
]


@pytest.mark.parametrize(("key", "value", "rule"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_value_falls_back_with_a_problem(key: str, value: Any, rule: str) -> None:
    values, problems = parse_annotations({key: value})
    assert values == DEFAULTS
    assert len(problems) == 1
    p = problems[0]
    assert p.key == key and rule in p.rule
    assert p.path == f"metadata.annotations[{key}]"
    assert str(p).startswith(f"metadata.annotations[{key}]: {rule}")
    assert str(p).endswith(f"got {value!r}")


def test_fallback_message_names_the_default() -> None:
    _, problems = parse_annotations({ann.SCALE_DOWN_STABILIZATION_WINDOW: "forever"})
    assert problems[0].fallback_message() == (
        "metadata.annotations[elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds]: "
        "must be an integer in [0, 3600], got 'forever'; using the default 300"
    )
    _, problems = parse_annotations({ann.SCALE_UP_MAX_PODS_PER_STEP: "0"})
    assert problems[0].fallback_message().endswith("got '0'; ignored")


def test_a_state_trigger_has_no_scale_down_window_unless_one_is_set() -> None:
    """A StateTrigger's defaults differ from a MetricsTrigger's in one value: no scale-down window (a schedule
    is
    a decision already made); a value set explicitly is used, a bad one falls back to 0 and says so."""
    assert replace(DEFAULTS, scale_down_stabilization_seconds=0) == ann.STATE_TRIGGER_DEFAULTS
    assert parse_annotations(None, defaults=ann.STATE_TRIGGER_DEFAULTS) == (ann.STATE_TRIGGER_DEFAULTS, [])
    assert parse_annotations({}, defaults=ann.STATE_TRIGGER_DEFAULTS)[0] == ann.STATE_TRIGGER_DEFAULTS
    values, problems = parse_annotations({ann.SCALE_DOWN_STABILIZATION_WINDOW: "120"},
                                         defaults=ann.STATE_TRIGGER_DEFAULTS)
    assert (values.scale_down_stabilization_seconds, problems) == (120, [])
    values, problems = parse_annotations({ann.SCALE_DOWN_STABILIZATION_WINDOW: "forever"},
                                         defaults=ann.STATE_TRIGGER_DEFAULTS)
    assert values.scale_down_stabilization_seconds == 0
    assert problems[0].fallback_message().endswith("got 'forever'; using the default 0")


def test_good_values_kept_when_others_are_bad() -> None:
    values, problems = parse_annotations({ann.WINDOW_SECONDS: "30", ann.GC_FACTOR: "zero"})
    assert values.window_seconds == 30 and values.gc_factor == 2.0
    assert [p.key for p in problems] == [ann.GC_FACTOR]


def test_unknown_key_under_our_prefix_is_a_problem() -> None:
    _, problems = parse_annotations(
        {
            "elasticscaler.io/metrics.windowSecond": "30",
            "elasticscaler.io/behavior.scaleUp.whatever": "1",
            "elasticscaler.io/name": "not-a-policy",
            "example.com/metrics.windowSeconds": "x",
        }
    )
    rules = {p.key: p.rule for p in problems}
    assert rules["elasticscaler.io/metrics.windowSecond"] == (
        "unknown escaler annotation (did you mean elasticscaler.io/metrics.windowSeconds?)"
    )
    assert rules["elasticscaler.io/behavior.scaleUp.whatever"].startswith("unknown escaler annotation")
    assert set(rules) == {
        "elasticscaler.io/metrics.windowSecond",
        "elasticscaler.io/behavior.scaleUp.whatever",
    }


def test_policies_off_reads_only_pause_annotations() -> None:
    values, problems = parse_annotations({ann.WINDOW_SECONDS: "0", ann.PAUSED: "true"}, policies=False)
    assert problems == [] and values.paused is True and values.window_seconds == 60


def test_not_a_map() -> None:
    values, problems = parse_annotations(["a"])  # type: ignore[arg-type]
    assert values == DEFAULTS and problems[0].path == "metadata.annotations"


def test_keys_are_the_spec_table() -> None:
    assert set(ann.POLICY_KEYS) == {
        "elasticscaler.io/metrics.windowSeconds",
        "elasticscaler.io/metrics.gcFactor",
        "elasticscaler.io/metrics.aggregationType",
        "elasticscaler.io/metrics.missingDataPolicy",
        "elasticscaler.io/metrics.enableOutlierFilter",
        "elasticscaler.io/metrics.outlierThreshold",
        "elasticscaler.io/metrics.panicWindowPercentage",
        "elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds",
        "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds",
        "elasticscaler.io/behavior.scaleUp.maxPodsPerStep",
        "elasticscaler.io/behavior.scaleDown.maxPodsPerStep",
    }
    assert ann.PAUSE_KEYS == ("elasticscaler.io/paused", "elasticscaler.io/paused-replicas")


@pytest.mark.parametrize(
    ("text", "value"), [("0", 0), ("60", 60), ("+3", 3)], ids=["zero", "plain", "plus-sign"]
)
def test_parse_int(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "-1", "1.0", "1_000", "0x10", "\u0661", "9" * 19],
    ids=[
        "empty",
        "lead-space",
        "trail-space",
        "negative",
        "decimal",
        "underscore",
        "hex",
        "arabic-digit",
        "huge",
    ],
)
def test_parse_int_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_int(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", 2.0), ("0.1", 0.1), (".5", 0.5), ("1e3", 1000.0), ("-1.5", -1.5)],
    ids=["int", "fraction", "leading-dot", "exponent", "negative"],
)
def test_parse_number(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "nan", "inf", "1e999", "1,5", "2x", " 2"],
    ids=["empty", "nan", "inf", "overflow", "comma", "suffix", "space"],
)
def test_parse_number_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_number(text)


def test_parse_bool() -> None:
    assert parse_bool("true") is True and parse_bool("false") is False
    for text in ("True", "1", "yes", ""):
        with pytest.raises(ValueError):
            parse_bool(text)
