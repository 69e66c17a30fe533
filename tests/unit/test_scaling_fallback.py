"""Fallback (docs/design.md#beyond-the-seeds, ``escaler.scaling.fallback`` and its step in
``escaler.scaling.pipeline.decide``): the count of consecutive polls without a usable signal (table-driven),
the pipeline below and at the threshold, the fallback count through stabilization / step limits / clamp /
guards, recovery through the scale-down window (no cliff), and the ScalingActive message. Time is plain epoch
seconds stepped by hand; nothing reads a clock."""

from __future__ import annotations

import pytest

from escaler.api.scaler import BoundBy
from escaler.scaling import Behavior, PipelineInput, PipelineState, RecommendResult, decide, explain_lines
from escaler.scaling.conditions import SCALING_ACTIVE, SyncOutcome, plan
from escaler.scaling.fallback import FallbackCount, FallbackState, count
from escaler.scaling.guards import TargetSnapshot
from escaler.scaling.pipeline import DECISION_UNAVAILABLE, RECOMMENDED, Decision
from escaler.scaling.text import format_time

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DOWN_WINDOW = 300.0
UNAVAILABLE = RecommendResult.no_decision("metrics", "queue: HTTP 503", total=1,
                                          metric_errors=("queue: HTTP 503",), can_scale_from_zero=False)


def _ok(replicas: int) -> RecommendResult:
    return RecommendResult.from_metrics(replicas, evaluated=1, total=1)


# ================================================================ count

_C1 = FallbackCount(1, NOW - 30)
_C2 = FallbackCount(2, NOW - 60)
_C3 = FallbackCount(3, NOW - 90)

# (id, previous, fresh, unavailable, usable, threshold, expected)
COUNT_CASES: list[tuple[str, FallbackCount | None, bool, bool, bool, int, FallbackCount | None]] = [
    ("first-failure-starts-the-streak-now", None, True, True, False, 3, FallbackCount(1, NOW)),
    ("next-failure-adds-one-keeps-since", _C1, True, True, False, 3, FallbackCount(2, NOW - 30)),
    ("capped-at-threshold", _C3, True, True, False, 3, _C3),
    ("lowered-threshold-caps-at-once", FallbackCount(5, NOW - 90), True, True, False, 3,
     FallbackCount(3, NOW - 90)),
    ("usable-poll-clears", _C2, True, False, True, 3, None),
    ("usable-poll-clears-an-engaged-count", _C3, True, False, True, 3, None),
    ("reused-outcome-counts-nothing", _C2, False, True, False, 3, _C2),
    ("reused-usable-outcome-clears-nothing", _C2, False, False, True, 3, _C2),
    ("invalid-spec-or-disabled-leaves-it", _C2, True, False, False, 3, _C2),
    ("nothing-to-clear", None, True, False, True, 3, None),
]


@pytest.mark.parametrize("case", COUNT_CASES, ids=[c[0] for c in COUNT_CASES])
def test_count(case: tuple[str, FallbackCount | None, bool, bool, bool, int, FallbackCount | None]) -> None:
    _, previous, fresh, unavailable, usable, threshold, expected = case
    assert count(previous, fresh=fresh, unavailable=unavailable, usable=usable, now=NOW,
                 failure_threshold=threshold) == expected


def test_three_failed_polls_engage_a_threshold_of_three() -> None:
    c: FallbackCount | None = None
    engaged = []
    for i in range(4):
        c = count(c, fresh=True, unavailable=True, usable=False, now=NOW + 30 * i, failure_threshold=3)
        engaged.append(FallbackState(3, 2, c).engaged)
    assert engaged == [False, False, True, True]
    assert c == FallbackCount(3, NOW)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"failures": 0, "since": NOW}, "failures"),
    ({"failures": True, "since": NOW}, "failures"),
    ({"failures": 1, "since": float("nan")}, "since"),
])
def test_count_rejects_bad_values(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=f"FallbackCount.{field}"):
        FallbackCount(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("threshold", "replicas", "field"),
                         [(0, 2, "failure_threshold"), (3, -1, "replicas")])
def test_state_rejects_bad_policy(threshold: int, replicas: int, field: str) -> None:
    with pytest.raises(ValueError, match=f"FallbackState.{field}"):
        FallbackState(threshold, replicas)


# ================================================================ the pipeline


def _decide(rr: RecommendResult, fb: FallbackState | None, *, current: int = 6, now: float = NOW,
            state: PipelineState | None = None, lo: int = 1, hi: int = 10, down_max: int | None = None,
            target: TargetSnapshot | None = None) -> Decision:
    behavior = Behavior(min_replicas=lo, max_replicas=hi, scale_down_stabilization_seconds=DOWN_WINDOW,
                        scale_down_max_pods=down_max)
    return decide(PipelineInput(now=now, current_replicas=current, recommend=rr, behavior=behavior,
                                state=state if state is not None else PipelineState(), target=target,
                                fallback=fb))


def _message(d: Decision) -> str:
    writes = {w[0]: w for w in plan(SyncOutcome(decision=d)).writes}
    ctype, status, reason, message = writes[SCALING_ACTIVE]
    assert (ctype, status, reason) == (SCALING_ACTIVE, "False", DECISION_UNAVAILABLE)
    return message


def test_below_threshold_holds_and_says_how_many_remain() -> None:
    fb = FallbackState(3, 2, FallbackCount(2, NOW - 30))
    d = _decide(UNAVAILABLE, fb)
    assert (d.activity, d.desired, d.write, d.fallback_engaged) == (DECISION_UNAVAILABLE, 6, False, False)
    step = next(s for s in d.steps if s.name == "fallback")
    assert (step.before, step.after) == (6, 6)
    assert step.note == (f"fallback not engaged: 2 of 3 consecutive metric polls without a usable signal "
                         f"since {format_time(NOW - 30)}; at 3, fallback to 2 replicas")
    assert _message(d).startswith("fallback not engaged: 2 of 3 consecutive metric polls")
    assert d.state.history == ()  # a hold does not touch the history


def test_at_threshold_goes_to_fallback_replicas_as_a_recommendation() -> None:
    fb = FallbackState(3, 9, FallbackCount(3, NOW - 60))
    d = _decide(UNAVAILABLE, fb, current=4)
    assert (d.activity, d.fallback_engaged, d.recommendation, d.desired, d.write) == (
        DECISION_UNAVAILABLE, True, 9, 9, True)
    names = [s.name for s in d.steps]
    assert names[:3] == ["recommend", "fallback", "stabilize"]
    fallback = d.steps[1]
    assert (fallback.before, fallback.after) == (None, 9)
    assert "recommending fallback.replicas 9" in fallback.note
    assert [(e.time, e.replicas) for e in d.state.history] == [(NOW, 9)]  # recorded: no cliff later
    assert d.reason.startswith("no decision (metrics: queue: HTTP 503); fallback to 9 replicas after 3 "
                               "consecutive metric polls without a usable signal (failureThreshold 3)")
    message = _message(d)
    assert message.startswith(f"fallback engaged: 3 consecutive metric polls without a usable signal "
                              f"since {format_time(NOW - 60)} (failureThreshold 3): recommending "
                              f"fallback.replicas 9")
    assert message.endswith("metrics: queue: HTTP 503")
    assert any(line.startswith("2. fallback: 9: fallback engaged") for line in explain_lines(d))


# (id, fallback replicas, current, bounds, scale-down step limit, history, desired, bound by)
BOUND_CASES: list[tuple[str, int, int, tuple[int, int], int | None, tuple[tuple[float, int], ...], int,
                        BoundBy | None]] = [
    ("scale-up-now", 8, 3, (1, 10), None, (), 8, None),
    ("clamped-to-max", 20, 3, (1, 10), None, (), 10, BoundBy.CLAMP),
    ("raised-to-min", 0, 3, (2, 10), None, (), 2, BoundBy.CLAMP),
    ("scale-down-waits-for-the-window", 2, 6, (1, 10), None, ((NOW - 60, 6),), 6, BoundBy.STABILIZE),
    ("scale-down-after-the-window", 2, 6, (1, 10), None, ((NOW - 400, 6),), 2, None),
    ("scale-down-step-limit", 2, 6, (1, 10), 1, (), 5, BoundBy.STEP_LIMIT),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
def test_the_fallback_count_goes_through_the_pipeline(case: tuple[str, int, int, tuple[int, int], int | None,
                                                                  tuple[tuple[float, int], ...], int,
                                                                  BoundBy | None]) -> None:
    _, replicas, current, (lo, hi), down_max, history, desired, bound = case
    fb = FallbackState(2, replicas, FallbackCount(2, NOW - 30))
    d = _decide(UNAVAILABLE, fb, current=current, lo=lo, hi=hi, down_max=down_max,
                state=PipelineState.of(history))
    assert (d.desired, d.bound_by) == (desired, bound)


def test_a_guard_holds_the_fallback_write_too() -> None:
    fb = FallbackState(1, 8, FallbackCount(1, NOW))
    rolling = TargetSnapshot(spec_replicas=3, rollout_in_progress=True, rollout_message="rolling")
    d = _decide(UNAVAILABLE, fb, current=3, target=rolling)
    assert (d.fallback_engaged, d.held, d.write, d.bound_by) == (True, True, False, BoundBy.GUARD)


def test_recovery_goes_back_through_the_scale_down_window() -> None:
    """Fallback to 8 for a while, then the metrics heal and recommend 2: the window keeps 8 until it
    has elapsed since the last fallback sync, then the count follows the metrics (no cliff)."""
    fb = FallbackState(1, 8, FallbackCount(1, NOW))
    d = _decide(UNAVAILABLE, fb, current=3)
    assert (d.desired, d.write) == (8, True)
    state, current = d.state, d.desired
    d = _decide(UNAVAILABLE, fb, current=current, now=NOW + 30, state=state)
    state = d.state
    healed = FallbackState(1, 8, None)
    d = _decide(_ok(2), healed, current=current, now=NOW + 60, state=state)
    assert (d.activity, d.desired, d.write, d.down_stabilized) == (RECOMMENDED, 8, False, True)
    assert not any(s.name == "fallback" for s in d.steps)  # a healthy sync has no fallback step
    d = _decide(_ok(2), healed, current=current, now=NOW + 30 + DOWN_WINDOW + 1, state=d.state)
    assert (d.desired, d.write) == (2, True)


def test_without_fallback_nothing_changes() -> None:
    d = _decide(UNAVAILABLE, None)
    assert (d.desired, d.write, d.fallback_engaged) == (6, False, False)
    assert [s.name for s in d.steps] == ["recommend", "hold", "clamp", "write"]
    assert not _message(d).startswith("fallback")


def test_invalid_spec_never_engages() -> None:
    fb = FallbackState(1, 8, FallbackCount(1, NOW))
    d = _decide(RecommendResult.invalid("spec.x: broken", total=1), fb, current=3)
    assert (d.desired, d.fallback_engaged) == (3, False)
    assert not any(s.name == "fallback" for s in d.steps)
