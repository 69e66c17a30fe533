"""Sample windows (docs/reference/annotations.md): add/gc, the window's bounds, every aggregation type, every
missing-data policy, the MAD outlier filter, MetricWindows keyed by identity, the panic window
(newest sample, stable peak) and ``choose``. Time is stepped as plain numbers."""

from __future__ import annotations

import math

import pytest

from escaler.scaling import MetricWindows, NoDecision, SampleWindow, WindowPolicy
from escaler.scaling.algorithm import AlgorithmResult
from escaler.scaling.annotations import parse_annotations
from escaler.scaling.window import (
    MAX_SAMPLES,
    PANIC,
    SETTLING,
    STABLE,
    WindowChoice,
    choose,
    filter_outliers,
    percentile,
)

T0 = 1000.0


def window_of(*values: float, start: float = T0, step: float = 1.0) -> SampleWindow:
    w = SampleWindow()
    for i, v in enumerate(values):
        w.add(start + i * step, v)
    return w


# ---------------------------------------------------------------- add


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, True, "3", None],
    ids=["nan", "inf", "-inf", "bool", "str", "none"],
)
def test_add_rejects_unusable_samples(value: object) -> None:
    w = window_of(1.0)
    with pytest.raises(ValueError):
        w.add(T0 + 1, value)  # type: ignore[arg-type]
    assert w.samples() == ((T0, 1.0),)


def test_add_rejects_non_finite_time() -> None:
    with pytest.raises(ValueError, match="now"):
        SampleWindow().add(math.nan, 1.0)


def test_add_keeps_samples_ordered_by_time() -> None:
    w = SampleWindow()
    w.add(10.0, 1.0)
    w.add(30.0, 3.0)
    w.add(20.0, 2.0)
    w.add(20.0, 2.5)  # same time: after the earlier one
    assert w.samples() == ((10.0, 1.0), (20.0, 2.0), (20.0, 2.5), (30.0, 3.0))


def test_add_caps_the_window_length() -> None:
    w = SampleWindow()
    for i in range(MAX_SAMPLES + 5):
        w.add(float(i), float(i))
    assert len(w) == MAX_SAMPLES
    assert w.samples()[0] == (5.0, 5.0)


def test_negative_and_integer_samples_are_accepted() -> None:
    w = SampleWindow()
    w.add(T0, -2)
    w.add(T0, 4)
    assert w.aggregate(T0, 60, "Average") == 1.0


# ---------------------------------------------------------------- aggregation

# times T0..T0+9, values in this (time) order; the newest is 4
SERIES = (3.0, 9.0, 1.0, 10.0, 7.0, 2.0, 8.0, 5.0, 6.0, 4.0)
NOW = T0 + 9


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("Average", 5.5),
        ("Max", 10.0),
        ("Min", 1.0),
        ("P50", 5.0),   # nearest rank: ceil(0.50 * 10) = 5th smallest
        ("P90", 9.0),   # ceil(0.90 * 10) = 9th
        ("P95", 10.0),  # ceil(0.95 * 10) = 10th
        ("P99", 10.0),
        ("Latest", 4.0),
    ],
    ids=lambda x: str(x),
)
def test_aggregation_types(aggregation: str, expected: float) -> None:
    assert window_of(*SERIES).aggregate(NOW, 60, aggregation) == expected


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0], 50, 1.0),            # lower middle of an even count
        ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 76, 4.0),
        (list(map(float, range(1, 101))), 99, 99.0),
        (list(map(float, range(1, 101))), 100, 100.0),
    ],
    ids=["single", "even-p50-lower-middle", "p75-exact-rank", "p76-next-rank", "p99-of-100", "p100-max"],
)
def test_percentile_nearest_rank(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == expected


@pytest.mark.parametrize("p", [0, -1, 101], ids=["zero", "negative", "over-100"])
def test_percentile_rejects_bad_p(p: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0], p)


def test_window_bounds_are_half_open() -> None:
    w = SampleWindow()
    w.add(T0 - 60, 100.0)  # exactly window_seconds old: out
    w.add(T0 - 59.5, 1.0)  # in
    w.add(T0, 3.0)         # at now: in
    w.add(T0 + 1, 500.0)   # after now: not counted
    assert w.aggregate(T0, 60, "Average") == 2.0
    assert w.aggregate(T0, 60, "Latest") == 3.0
    assert [v for _, v in w.in_window(T0, 60)] == [1.0, 3.0]


def test_aggregate_stepping_time_moves_the_window() -> None:
    w = window_of(10.0, 20.0, 30.0, start=T0, step=30.0)  # T0, T0+30, T0+60
    assert w.aggregate(T0 + 60, 60, "Average") == 25.0    # (T0, T0+60]: 20, 30
    assert w.aggregate(T0 + 89, 60, "Average") == 25.0
    assert w.aggregate(T0 + 90, 60, "Average") == 30.0
    assert w.aggregate(T0 + 120, 60, "Average") is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window_seconds": 0}, "window_seconds"),
        ({"window_seconds": math.inf}, "window_seconds"),
        ({"aggregation": "Mean"}, "aggregation"),
        ({"missing_policy": "Skip"}, "missing_policy"),
        ({"outlier_threshold": 0}, "outlier_threshold"),
    ],
    ids=["window-0", "window-inf", "unknown-aggregation", "unknown-policy", "threshold-0"],
)
def test_aggregate_rejects_bad_policy(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"window_seconds": 60, "aggregation": "Average", "missing_policy": "Ignore",
                               "outlier_threshold": 3.0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        window_of(1.0).aggregate(T0, **args)  # type: ignore[arg-type]


# ---------------------------------------------------------------- missing data


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("Ignore", None), ("TreatAsZero", 0.0)],
    ids=["ignore-gives-none", "treat-as-zero"],
)
@pytest.mark.parametrize("stale", [False, True], ids=["empty", "only-stale-samples"])
def test_missing_data_policies(policy: str, expected: float | None, stale: bool) -> None:
    w = window_of(7.0, start=T0 - 600) if stale else SampleWindow()
    assert w.aggregate(T0, 60, "Max", policy) == expected


@pytest.mark.parametrize("stale", [False, True], ids=["empty", "only-stale-samples"])
def test_missing_data_fail_raises_naming_the_metric(stale: bool) -> None:
    w = window_of(7.0, start=T0 - 600) if stale else SampleWindow()
    expected = r"metric 'queue_depth': no sample in the last 60s \(missingDataPolicy Fail\)"
    with pytest.raises(NoDecision, match=expected):
        w.aggregate(T0, 60, "Average", "Fail", metric="queue_depth")


@pytest.mark.parametrize("policy", ["Ignore", "TreatAsZero", "Fail"])
def test_missing_data_policy_does_not_apply_when_samples_exist(policy: str) -> None:
    assert window_of(4.0, 6.0).aggregate(T0 + 1, 60, "Average", policy) == 5.0


def test_ignore_leads_the_algorithm_to_no_decision() -> None:
    from escaler.scaling import AlgorithmContext, MetricValue, apa

    value = SampleWindow().aggregate(T0, 60, "Average", "Ignore")
    ctx = AlgorithmContext(current_replicas=2, metrics=(MetricValue("q", "External", value, "Value", 10),))
    with pytest.raises(NoDecision, match="'q'"):
        apa(ctx)


# ---------------------------------------------------------------- outlier filter


@pytest.mark.parametrize(
    ("values", "threshold", "kept"),
    [
        ([10, 10, 11, 9, 10, 100], 3.0, [10, 10, 11, 9, 10]),          # MAD 0.5: 100 is 90 away
        ([10, 10, 11, 9, 10, 11.5], 3.0, [10, 10, 11, 9, 10, 11.5]),   # exactly 3 * MAD away: kept
        ([10, 10, 11, 9, 10, 12], 3.0, [10, 10, 11, 9, 10]),           # 2 > 3 * 0.5: dropped
        ([5, 5, 5, 50], 3.0, [5, 5, 5, 50]),                           # MAD 0: keep all
        ([1, 100], 3.0, [1, 100]),                                     # fewer than three samples
        ([1, 1, 2, 2], 0.5, [1, 1, 2, 2]),                             # would drop all: keep all
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 1000, -1000], 3.0, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ],
    ids=["drops-spike", "at-threshold-kept", "beyond-threshold-dropped", "mad-zero-keeps-all",
         "two-samples-kept", "never-empty", "drops-both-tails"],
)
def test_filter_outliers(values: list[float], threshold: float, kept: list[float]) -> None:
    assert filter_outliers([float(v) for v in values], threshold) == [float(v) for v in kept]


def test_outlier_filter_changes_the_aggregate_only_when_enabled() -> None:
    w = window_of(10, 10, 11, 9, 10, 100)
    now = T0 + 5
    assert w.aggregate(now, 60, "Average") == 25.0
    assert w.aggregate(now, 60, "Average", outlier_filter=True, outlier_threshold=3.0) == 10.0
    assert w.aggregate(now, 60, "Max", outlier_filter=True) == 11.0
    # the newest sample was the outlier: Latest is the newest survivor
    assert w.aggregate(now, 60, "Latest", outlier_filter=True) == 10.0
    # a huge threshold keeps the spike
    assert w.aggregate(now, 60, "Max", outlier_filter=True, outlier_threshold=1000) == 100.0


# ---------------------------------------------------------------- gc


def test_gc_keeps_window_times_gc_factor() -> None:
    w = window_of(*range(10), start=T0, step=10.0)  # T0 .. T0+90
    dropped = w.gc(T0 + 90, 20, 2)                    # keep time > T0+50
    assert dropped == 6
    assert [t for t, _ in w.samples()] == [T0 + 60, T0 + 70, T0 + 80, T0 + 90]
    assert w.gc(T0 + 90, 20, 2) == 0


@pytest.mark.parametrize(("window", "factor"), [(0, 2), (60, 0.5), (60, math.nan)],
                         ids=["window-0", "factor-below-1", "factor-nan"])
def test_gc_rejects_bad_arguments(window: float, factor: float) -> None:
    with pytest.raises(ValueError):
        SampleWindow().gc(T0, window, factor)


# ---------------------------------------------------------------- MetricWindows and WindowPolicy


def test_metric_windows_per_metric() -> None:
    mw = MetricWindows(WindowPolicy(window_seconds=60, aggregation="Max"))
    mw.add("cpu", T0, 50)
    mw.add("cpu", T0 + 10, 70)
    mw.add("queue", T0 + 10, 3)
    assert mw.names() == ["cpu", "queue"]
    assert mw.aggregate("cpu", T0 + 10) == 70
    assert mw.aggregate("queue", T0 + 10) == 3
    assert mw.aggregate("never-seen", T0 + 10) is None
    assert "cpu" in mw and len(mw) == 2


def test_metric_windows_fail_policy_names_the_metric() -> None:
    mw = MetricWindows(WindowPolicy(missing_policy="Fail"))
    with pytest.raises(NoDecision, match="'vllm_num_requests_waiting'"):
        mw.aggregate("vllm_num_requests_waiting", T0)


def test_metric_windows_gc_forgets_empty_windows_and_retain_drops_removed_metrics() -> None:
    mw = MetricWindows(WindowPolicy(window_seconds=10, gc_factor=2))
    mw.add("old", T0, 1)
    mw.add("new", T0 + 25, 2)
    assert mw.gc(T0 + 25) == 1            # keep time > T0+5
    assert mw.names() == ["new"]
    mw.add("other", T0 + 25, 3)
    mw.retain(["other"])
    assert mw.names() == ["other"]


def test_metric_windows_reject_nan() -> None:
    mw = MetricWindows()
    with pytest.raises(ValueError, match="finite"):
        mw.add("cpu", T0, math.nan)
    assert "cpu" not in mw


def test_window_policy_from_annotations() -> None:
    ann, problems = parse_annotations({
        "elasticscaler.io/metrics.windowSeconds": "120",
        "elasticscaler.io/metrics.gcFactor": "3",
        "elasticscaler.io/metrics.aggregationType": "P95",
        "elasticscaler.io/metrics.missingDataPolicy": "TreatAsZero",
        "elasticscaler.io/metrics.enableOutlierFilter": "true",
        "elasticscaler.io/metrics.outlierThreshold": "2.5",
        "elasticscaler.io/metrics.panicWindowPercentage": "5",
    })
    assert problems == []
    assert WindowPolicy.from_annotations(ann) == WindowPolicy(120, 3.0, "P95", "TreatAsZero", True, 2.5, 6.0)
    assert WindowPolicy.from_annotations(parse_annotations({})[0]) == WindowPolicy()
    # the defaults: a 60 s window and a 6 s panic window (10 %)
    assert WindowPolicy() == WindowPolicy(60, 2.0, "Average", "Ignore", False, 3.0, 6.0)
    assert WindowPolicy(window_seconds=10).panic_window_seconds == 1.0  # 10 % of the window by default
    off, _ = parse_annotations({"elasticscaler.io/metrics.panicWindowPercentage": "0"})
    assert WindowPolicy.from_annotations(off).panic_window_seconds == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"window_seconds": 0}, {"window_seconds": True}, {"gc_factor": 0.9}, {"aggregation": "avg"},
     {"missing_policy": "Zero"}, {"outlier_threshold": -1}, {"panic_window_seconds": -1},
     {"panic_window_seconds": 61}, {"panic_window_seconds": math.nan}],
    ids=["window", "window-bool", "gc-factor", "aggregation", "missing-policy", "threshold", "panic-negative",
         "panic-longer-than-window", "panic-nan"],
)
def test_window_policy_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WindowPolicy(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- identity keys, copy


def test_windows_are_keyed_by_identity_not_display_name() -> None:
    # two metrics named queue_depth (different selectors) have two keys and two series
    mw = MetricWindows(WindowPolicy(window_seconds=60))
    mw.add("0/aaaa", T0, 10)
    mw.add("1/bbbb", T0, 1000)
    assert mw.aggregate("0/aaaa", T0, metric="queue_depth") == 10
    assert mw.aggregate("1/bbbb", T0, metric="queue_depth") == 1000


def test_fail_policy_names_the_display_name_not_the_key() -> None:
    mw = MetricWindows(WindowPolicy(missing_policy="Fail"))
    with pytest.raises(NoDecision, match="metric 'queue_depth'"):
        mw.aggregate("0/aaaa", T0, metric="queue_depth")


def test_copy_is_independent() -> None:
    mw = MetricWindows(WindowPolicy(window_seconds=60))
    mw.add("a", T0, 1)
    other = mw.copy(WindowPolicy(window_seconds=30))
    other.add("a", T0 + 1, 3)
    other.add("b", T0 + 1, 5)
    assert mw.window("a").samples() == ((T0, 1.0),) and "b" not in mw
    assert other.window("a").samples() == ((T0, 1.0), (T0 + 1, 3.0))
    assert (mw.policy.window_seconds, other.policy.window_seconds) == (60, 30)


# ---------------------------------------------------------------- panic window: newest sample, stable peak


def test_panic_is_the_newest_sample_of_the_panic_window() -> None:
    mw = MetricWindows(WindowPolicy(window_seconds=60, panic_window_seconds=6))
    for t, v in [(0, 40), (2, 40), (4, 120)]:
        mw.add("q", T0 + t, v)
    assert mw.panic("q", T0 + 4) == 120          # an Average over the 6 s would read 66.7
    assert mw.aggregate("q", T0 + 4) == pytest.approx(200 / 3)
    assert mw.peak("q", T0 + 4) == 120
    # the newest sample is older than the panic window: no panic value (a failed read never panics)
    assert mw.panic("q", T0 + 10) is None
    assert mw.peak("q", T0 + 10) == 120
    assert mw.panic("never", T0) is None and mw.peak("never", T0) is None


def test_panic_off_gives_neither_panic_nor_peak() -> None:
    mw = MetricWindows(WindowPolicy(window_seconds=60, panic_window_seconds=0))
    mw.add("q", T0, 40)
    assert mw.panic("q", T0) is None and mw.peak("q", T0) is None


def test_panic_ignores_the_missing_data_policy() -> None:
    mw = MetricWindows(WindowPolicy(missing_policy="TreatAsZero"))
    assert mw.aggregate("q", T0) == 0.0
    assert mw.panic("q", T0) is None and mw.peak("q", T0) is None


def test_panic_and_peak_apply_the_outlier_filter_to_their_own_samples() -> None:
    w = window_of(40.0, 41.0, 39.0, 40.0, 400.0, step=2.0)
    # within the 6 s panic window: [39, 40, 400]; median 40, MAD 1 → 400 dropped, the newest survivor is 40
    assert w.newest(T0 + 8, 6, outlier_filter=True, outlier_threshold=3.0) == 40.0
    assert w.newest(T0 + 8, 6) == 400.0
    assert w.peak(T0 + 8, 60, outlier_filter=True, outlier_threshold=3.0) == 41.0
    assert w.peak(T0 + 8, 60) == 400.0
    with pytest.raises(ValueError, match="seconds"):
        w.peak(T0, 0)


def r(replicas: int, uncapped: int | None = None) -> AlgorithmResult:
    return AlgorithmResult(replicas, replicas if uncapped is None else uncapped)


# (id, current, stable, panic, peak, expected result, expected source)
CHOICES: list[tuple[str, int, AlgorithmResult, AlgorithmResult | None, AlgorithmResult | None,
                    AlgorithmResult, str]] = [
    ("panic-takes-over-a-surge", 4, r(5), r(8, 12), r(8, 12), r(8, 12), PANIC),
    ("panic-needs-to-beat-the-stable-count", 4, r(8, 12), r(8, 12), r(8), r(8, 12), STABLE),
    ("panic-in-band-does-nothing", 4, r(4), r(4), r(4), r(4), STABLE),
    ("stable-scale-up-stands", 4, r(6), r(5), r(7), r(6), STABLE),
    ("panic-never-scales-down", 12, r(12), r(6), r(13), r(12), STABLE),
    ("scale-down-waits-while-the-peak-needs-the-count", 12, r(7), r(6), r(12), r(12), SETTLING),
    ("scale-down-waits-after-a-surge", 12, r(8), r(12), r(13), r(12), SETTLING),
    ("scale-down-once-the-whole-window-asks", 12, r(6), r(6), r(7), r(6), STABLE),
    ("scale-down-to-the-stable-count-not-the-panic-one", 12, r(7), r(5), r(8), r(7), STABLE),
    ("no-panic-value", 4, r(5), None, r(5), r(5), STABLE),
    ("no-peak-no-settling", 12, r(7), None, None, r(7), STABLE),
]


@pytest.mark.parametrize(("current", "stable", "panic", "peak", "result", "source"), [c[1:] for c in CHOICES],
                         ids=[c[0] for c in CHOICES])
def test_choose(current: int, stable: AlgorithmResult, panic: AlgorithmResult | None,
                peak: AlgorithmResult | None, result: AlgorithmResult, source: str) -> None:
    assert choose(current, stable, panic, peak) == WindowChoice(result, source)


def test_choose_refuses_a_bad_current() -> None:
    with pytest.raises(ValueError, match="current"):
        choose(-1, r(1))
