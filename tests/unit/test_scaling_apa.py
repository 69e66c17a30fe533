"""The built-in ``apa`` algorithm (SPEC §5.2): tolerance band, per-target maths, max across
metrics, step rates, scale from zero, config parsing, and no decision from bad samples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escaler.scaling import AlgorithmContext, MetricValue, NoDecision, apa
from escaler.scaling.apa import ApaConfig, limit_step, metric_ratio, parse_config, recommend_metric


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
    assert apa(ctx(current, *metrics, **config)) == expected


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
    desired = apa(ctx(current, *metrics, scaleUpRate=repr(up), scaleDownRate=repr(down)))
    assert math.floor(current / down) - 1 <= desired <= math.ceil(current * up) + 1
    assert desired >= 0
    if all(abs(metric_ratio(current, x) - 1) <= 0.1 - 1e-6 for x in metrics):
        assert desired == current
