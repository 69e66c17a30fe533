"""The built-in ``apa`` algorithm (docs/guide/elasticscaler.md#the-triggers): tolerance band, per-target
maths, max across metrics, step rates (visible: capped and uncapped), scale from zero, config parsing, no
decision
from bad samples, and the HPA's pod rules for metrics with pod groups."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escaler.scaling import AlgorithmContext, MetricValue, NoDecision, apa
from escaler.scaling.algorithm import AlgorithmResult, PodCounts, as_result
from escaler.scaling.apa import (
    ApaConfig,
    limit_step,
    metric_ratio,
    parse_config,
    pod_replicas,
    rate_band,
    recommend_metric,
    tolerance_of,
)


def m(
    value: float | None,
    target: float,
    target_type: str = "AverageValue",
    *,
    name: str = "m",
    type: str = "Custom",
) -> MetricValue:
    return MetricValue(name=name, type=type, value=value, target_type=target_type, target_value=target)


def ctx(current: int, *metrics: MetricValue, **config: str) -> AlgorithmContext:
    return AlgorithmContext(current_replicas=current, metrics=metrics, config=config)


# (id, current, metrics, config, expected)
DECISIONS: list[tuple[str, int, list[MetricValue], dict[str, str], int]] = [
    # tolerance band (default 0.1, inclusive at both edges)
    ("band-upper-edge-keeps", 4, [m(4.4, 4)], {}, 4),
    ("band-lower-edge-keeps", 4, [m(3.6, 4)], {}, 4),
    ("band-inside-keeps", 7, [m(71, 70, "Utilization", type="Resource")], {}, 7),
    ("just-above-band-scales", 4, [m(4.5, 4)], {}, 5),
    ("just-below-band-scales", 10, [m(8.5, 10)], {}, 9),
    ("tolerance-0-scales-on-any-change", 4, [m(4.4, 4)], {"tolerance": "0"}, 5),
    ("tolerance-0.5-keeps-25pc", 4, [m(5, 4)], {"tolerance": "0.5"}, 4),
    ("exact-target-keeps", 3, [m(8, 8)], {}, 3),
    # AverageValue / Utilization: ceil(current * ratio)
    ("average-value-doubles", 3, [m(16, 8)], {}, 6),
    ("utilization-doubles", 3, [m(140, 70, "Utilization", type="Resource")], {}, 6),
    ("utilization-ceil", 3, [m(80, 70, "Utilization", type="Resource")], {}, 4),
    ("average-value-halves", 8, [m(2, 4)], {}, 4),
    # Value: the metric is a total; ceil(value / target)
    ("value-total-scales-up", 2, [m(70, 10, "Value", type="External")], {"scaleUpRate": "10"}, 7),
    ("value-total-in-band", 10, [m(105, 10, "Value", type="External")], {}, 10),
    ("value-total-scales-down", 10, [m(60, 10, "Value", type="External")], {}, 6),
    ("value-total-ceil", 4, [m(41, 8, "Value", type="ExternalServer")], {}, 6),
    # max across metrics
    ("max-of-up-and-down", 4, [m(1, 4, name="idle"), m(6, 4, name="busy")], {}, 6),
    ("max-of-two-ups", 4, [m(5, 4, name="a"), m(7, 4, name="b")], {}, 7),
    ("max-band-and-down-keeps", 4, [m(4, 4, name="a"), m(1, 4, name="b")], {}, 4),
    (
        "max-across-target-types",
        2,
        [
            m(100, 50, "Utilization", type="Resource", name="cpu"),
            m(30, 10, "Value", type="External", name="q"),
        ],
        {"scaleUpRate": "3"},
        4,
    ),
    # step limits: ceil(current * up) upwards, floor(current / down) downwards
    ("up-limited-by-default-rate", 2, [m(40, 4)], {}, 4),
    ("up-limited-by-custom-rate", 2, [m(40, 4)], {"scaleUpRate": "3"}, 6),
    ("up-rate-1.5-still-grows-from-1", 1, [m(40, 4)], {"scaleUpRate": "1.5"}, 2),
    ("up-rate-not-binding", 4, [m(6, 4)], {}, 6),
    ("down-limited-by-default-rate", 10, [m(1, 10)], {}, 5),
    ("down-limited-by-custom-rate", 10, [m(1, 10)], {"scaleDownRate": "4"}, 2),
    ("down-rate-1.1-still-shrinks", 3, [m(0.1, 10)], {"scaleDownRate": "1.1"}, 2),
    ("down-rate-not-binding", 10, [m(8, 10)], {}, 8),
    ("down-to-zero-from-one", 1, [m(0, 10)], {}, 0),
    # from zero replicas: any load → at least 1, no upward rate limit
    ("zero-value-total", 0, [m(35, 10, "Value", type="External")], {}, 4),
    ("zero-value-small-load", 0, [m(0.5, 10, "Value", type="External")], {}, 1),
    ("zero-average-with-load", 0, [m(3, 4)], {}, 1),
    ("zero-no-load-stays", 0, [m(0, 4), m(0, 10, "Value")], {}, 0),
    # float noise never adds a replica: 3 * (0.3 / 0.1) is 9, not 10
    ("float-noise", 3, [m(0.3, 0.1)], {"scaleUpRate": "10"}, 9),
    ("float-noise-band-edge", 10, [m(1.1, 1.0)], {}, 10),
]


@pytest.mark.parametrize(
    ("current", "metrics", "config", "expected"), [c[1:] for c in DECISIONS], ids=[c[0] for c in DECISIONS]
)
def test_apa_decides(current: int, metrics: list[MetricValue], config: dict[str, str], expected: int) -> None:
    assert apa(ctx(current, *metrics, **config)).replicas == expected


# the rate cap is reported, not hidden: (id, current, metrics, config, capped, uncapped)
CAPS: list[tuple[str, int, list[MetricValue], dict[str, str], int, int]] = [
    ("up-cap-binds", 2, [m(40, 4)], {}, 4, 20),
    ("up-cap-custom-rate", 2, [m(40, 4)], {"scaleUpRate": "3"}, 6, 20),
    ("down-cap-binds", 10, [m(1, 10)], {}, 5, 1),
    ("no-cap-binds-up", 4, [m(6, 4)], {}, 6, 6),
    ("no-cap-binds-down", 10, [m(8, 10)], {}, 8, 8),
    ("in-band", 4, [m(4.2, 4)], {}, 4, 4),
    ("uncapped-is-the-max-over-metrics", 2, [m(10, 4, name="a"), m(40, 4, name="b")], {}, 4, 20),
    ("from-zero-never-capped", 0, [m(35, 10, "Value", type="External")], {}, 4, 4),
]


@pytest.mark.parametrize(("current", "metrics", "config", "capped", "uncapped"), [c[1:] for c in CAPS],
                         ids=[c[0] for c in CAPS])
def test_apa_reports_the_rate_cap(current: int, metrics: list[MetricValue], config: dict[str, str],
                                  capped: int, uncapped: int) -> None:
    result = apa(ctx(current, *metrics, **config))
    assert (result.replicas, result.uncapped) == (capped, uncapped)
    assert result.capped == (capped != uncapped)
    # the band the cap allows from the current count: what the pipeline applies after stabilizing
    assert result.band == rate_band(current, parse_config(config))


@pytest.mark.parametrize(("current", "config", "band"), [
    (4, {}, (2, 8)), (5, {}, (2, 10)), (3, {"scaleUpRate": "1.5", "scaleDownRate": "3"}, (1, 5)),
    (0, {}, (0, None)),
], ids=["default-rates", "odd-count", "custom-rates", "from-zero-no-upward-cap"])
def test_rate_band(current: int, config: dict[str, str], band: tuple[int, int | None]) -> None:
    assert rate_band(current, parse_config(config)) == band


def test_as_result_accepts_plain_counts_from_plug_ins() -> None:
    assert as_result(3) == AlgorithmResult(3, 3)
    assert as_result(AlgorithmResult(2, 5)) == AlgorithmResult(2, 5)
    for bad in (-1, True, 2.0, "3", None):
        with pytest.raises(ValueError, match="algorithm 'mine' returned"):
            as_result(bad, "mine")
    with pytest.raises(ValueError, match="AlgorithmResult"):
        AlgorithmResult(replicas=-1, uncapped=0)


def test_tolerance_of_reads_the_config_or_the_default() -> None:
    assert tolerance_of({"tolerance": "0.25"}) == 0.25
    assert tolerance_of({}) == 0.1
    assert tolerance_of({"tolerance": "lots"}) == 0.1


NO_DECISION: list[tuple[str, list[MetricValue], str]] = [
    ("nan", [m(math.nan, 4)], "unusable sample nan"),
    ("inf", [m(math.inf, 4)], "unusable sample inf"),
    ("minus-inf", [m(-math.inf, 4)], "unusable sample -inf"),
    ("negative", [m(-1, 4)], "unusable sample -1"),
    ("missing", [m(None, 4)], "no sample"),
    ("no-metrics", [], "no metrics"),
    ("one-bad-among-good", [m(100, 4, name="good"), m(math.nan, 4, name="bad")], "'bad'"),
]


@pytest.mark.parametrize(("metrics", "match"), [c[1:] for c in NO_DECISION], ids=[c[0] for c in NO_DECISION])
def test_apa_no_decision(metrics: list[MetricValue], match: str) -> None:
    with pytest.raises(NoDecision, match=match):
        apa(ctx(4, *metrics))


INVALID_SPEC: list[tuple[str, list[MetricValue], dict[str, str], str]] = [
    (
        "tolerance-not-a-number",
        [m(4, 4)],
        {"tolerance": "ten percent"},
        "^tolerance: must be a decimal number",
    ),
    ("tolerance-too-big", [m(4, 4)], {"tolerance": "1"}, "^tolerance: must be a number >= 0 and < 1"),
    ("tolerance-negative", [m(4, 4)], {"tolerance": "-0.1"}, "^tolerance:"),
    ("tolerance-nan", [m(4, 4)], {"tolerance": "nan"}, "^tolerance: must be a decimal number"),
    ("up-rate-1", [m(4, 4)], {"scaleUpRate": "1"}, "^scaleUpRate: must be a number > 1"),
    ("down-rate-below-1", [m(4, 4)], {"scaleDownRate": "0.5"}, "^scaleDownRate: must be a number > 1"),
    ("rate-with-spaces", [m(4, 4)], {"scaleUpRate": " 2"}, "^scaleUpRate: must be a decimal number"),
    ("unknown-key", [m(4, 4)], {"scaleUpRatio": "2"}, "^scaleUpRatio: unknown apa setting"),
    ("target-zero", [m(4, 0)], {}, "target must be a finite number > 0"),
    ("target-nan", [m(4, math.nan)], {}, "target must be a finite number > 0"),
    ("unknown-target-type", [m(4, 4, "Average")], {}, "target type 'Average' is not one of"),
]


@pytest.mark.parametrize(
    ("metrics", "config", "match"), [c[1:] for c in INVALID_SPEC], ids=[c[0] for c in INVALID_SPEC]
)
def test_apa_invalid_spec(metrics: list[MetricValue], config: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apa(ctx(4, *metrics, **config))


def test_parse_config_defaults_and_values() -> None:
    assert parse_config({}) == ApaConfig(0.1, 2.0, 2.0)
    assert parse_config({"tolerance": "0.05", "scaleUpRate": "4", "scaleDownRate": "1.5"}) == ApaConfig(
        0.05, 4.0, 1.5
    )


def test_metric_ratio_per_target_type() -> None:
    assert metric_ratio(4, m(6, 4)) == 1.5
    assert metric_ratio(4, m(105, 70, "Utilization")) == 1.5
    assert metric_ratio(4, m(60, 10, "Value")) == 1.5
    assert metric_ratio(0, m(1, 10, "Value")) == math.inf


def test_recommend_metric_is_per_metric() -> None:
    # status.currentMetrics shows each metric's own recommendation, before max and rate limits
    assert recommend_metric(2, m(40, 4), tolerance=0.1) == 20
    assert limit_step(2, 20, ApaConfig()) == 4


def test_context_is_read_only() -> None:
    c = AlgorithmContext(current_replicas=1, metrics=[m(1, 1)], config={"tolerance": "0.2"})  # type: ignore[arg-type]
    assert isinstance(c.metrics, tuple)
    with pytest.raises(TypeError):
        c.config["tolerance"] = "0.3"  # type: ignore[index]
    with pytest.raises(AttributeError):
        c.current_replicas = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="current_replicas"):
        AlgorithmContext(current_replicas=-1)


# ---- pod groups (the HPA's replica calculator over MetricValue.pods) ------------------------------------


def pm_(value: float, target: float, pods: PodCounts, target_type: str = "Utilization") -> MetricValue:
    return MetricValue(name="cpu", type="Resource", value=value, target_type=target_type, target_value=target,
                       pods=pods)


def pods(ready: int, unready: int = 0, missing: int = 0, weight: float = 1.0) -> PodCounts:
    return PodCounts(ready=ready, ready_weight=ready * weight, unready=unready,
                     unready_weight=unready * weight, missing=missing, missing_weight=missing * weight)


# (id, current, metric, expected); every case of the HPA algorithm docs
POD_RULES: list[tuple[str, int, MetricValue, int]] = [
    ("no-pending-no-missing-is-ceil-ratio-times-ready", 3, pm_(140, 70, pods(3)), 6),
    ("ready-count-not-spec-replicas", 5, pm_(140, 70, pods(3)), 6),
    ("in-band-keeps", 4, pm_(75, 70, pods(4)), 4),
    ("two-ready-two-pending", 4, pm_(140, 70, pods(2, unready=2)), 4),
    ("unready-dampen-scale-up", 5, pm_(200, 50, pods(2, unready=3)), 8),
    ("unready-out-of-scale-down", 4, pm_(35, 70, pods(2, unready=2)), 1),
    ("missing-100pc-on-scale-down", 4, pm_(10, 50, pods(3, missing=1)), 3),
    ("missing-at-target-above-100pc", 4, pm_(20, 200, pods(3, missing=1)), 2),
    ("missing-0pc-on-scale-up", 4, pm_(150, 50, pods(2, missing=2)), 6),
    ("missing-flips-scale-down", 4, pm_(20, 50, pods(2, missing=2)), 4),
    ("missing-flips-scale-up", 3, pm_(120, 100, pods(2, missing=1)), 3),
    ("recomputed-in-band-keeps", 4, pm_(100, 50, pods(2, unready=2)), 4),
    ("never-up-on-a-low-ratio", 2, pm_(30, 100, pods(1, missing=3)), 2),
    ("never-down-on-a-high-ratio", 10, pm_(300, 100, pods(1, unready=1)), 10),
    ("missing-at-exactly-target-left-out", 4, pm_(50, 50, pods(2, missing=2)), 4),
    # one ready pod requesting 2 at 100 % of 50 % (ratio 2), one missing requesting 1 at 0 %:
    # (2 * 2 + 0) / 3 = 1.33 → ceil(1.33 * 2 pods) = 3 (with equal requests: 2 / 2 = 1, in band)
    ("weights-are-requests", 2,
     pm_(100, 50, PodCounts(ready=1, ready_weight=2.0, missing=1, missing_weight=1.0)), 3),
    ("equal-weights", 2, pm_(100, 50, pods(1, missing=1)), 2),
    ("average-value-missing-at-target", 4, pm_(0.1, 0.2, pods(3, missing=1), "AverageValue"), 3),
]


@pytest.mark.parametrize(("current", "metric", "expected"), [c[1:] for c in POD_RULES],
                         ids=[c[0] for c in POD_RULES])
def test_pod_rules(current: int, metric: MetricValue, expected: int) -> None:
    assert pod_replicas(current, metric, 0.1) == expected
    # apa applies them to every metric with pod groups
    assert apa(ctx(current, metric, scaleUpRate="10", scaleDownRate="10")).uncapped == expected


def test_pod_rules_need_pod_groups_and_a_per_pod_target() -> None:
    with pytest.raises(ValueError, match="pod groups"):
        pod_replicas(2, m(1, 1), 0.1)
    with pytest.raises(ValueError, match="pod groups"):
        pod_replicas(2, pm_(1, 1, pods(1), "Value"), 0.1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"ready": 0, "ready_weight": 0.0}, "at least one ready pod"),
     ({"ready": 1, "ready_weight": 1.0, "missing": 1, "missing_weight": -1.0}, "missing"),
     ({"ready": 1, "ready_weight": 1.0, "unready": 0, "unready_weight": 2.0}, "0 with no pods"),
     ({"ready": 1, "ready_weight": math.nan}, "ready_weight")],
    ids=["no-ready-pod", "negative-weight", "weight-without-pods", "nan-weight"],
)
def test_pod_counts_are_validated(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PodCounts(**kwargs)  # type: ignore[arg-type]


values = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
targets = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
metric_strategy = st.builds(m, values, targets, st.sampled_from(["AverageValue", "Utilization", "Value"]))


@given(
    current=st.integers(min_value=1, max_value=10_000),
    metrics=st.lists(metric_strategy, min_size=1, max_size=4),
    up=st.floats(min_value=1.01, max_value=10),
    down=st.floats(min_value=1.01, max_value=10),
)
def test_apa_stays_within_rate_limits(
    current: int, metrics: list[MetricValue], up: float, down: float
) -> None:
    result = apa(ctx(current, *metrics, scaleUpRate=repr(up), scaleDownRate=repr(down)))
    assert math.floor(current / down) - 1 <= result.replicas <= math.ceil(current * up) + 1
    assert result.replicas >= 0
    # the cap only ever moves the count towards the current one
    assert min(current, result.uncapped) <= result.replicas <= max(current, result.uncapped)


@given(
    current=st.integers(min_value=1, max_value=10_000),
    target=targets,
    tolerance=st.floats(min_value=0, max_value=0.9),
    position=st.lists(st.floats(min_value=-1, max_value=1), min_size=1, max_size=4),
    target_type=st.sampled_from(["AverageValue", "Utilization", "Value"]),
)
def test_apa_keeps_the_count_inside_the_tolerance_band(
    current: int, target: float, tolerance: float, position: list[float], target_type: str
) -> None:
    # every metric is built inside the band: ratio = 1 + position * tolerance (a hair inside, so
    # float rounding of value / target cannot step out of it); every example checks the band
    per_replica = [target * (1 + p * tolerance * (1 - 1e-6)) for p in position]
    metrics = [m(v * current if target_type == "Value" else v, target, target_type) for v in per_replica]
    assert all(abs(metric_ratio(current, x) - 1) <= tolerance + 1e-9 for x in metrics)
    result = apa(ctx(current, *metrics, tolerance=repr(tolerance)))
    assert (result.replicas, result.uncapped) == (current, current)
