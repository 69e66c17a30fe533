"""The decision pipeline (docs/concepts.md#the-decision-pipeline): each step on its own (stabilize,
limit_step, clamp, defer; the guards have their own file), then decide(): the algorithm's rate cap as its own
step, BoundBy and the ScalingLimited reason, clamp-last, deferral hold → timeout → forced write → pacing,
requeue_after, paused, paused-replicas, Advisory, DecisionUnavailable, ScalingDisabled, LLMScaler
without ScaleUpLimit. Time is stepped as plain numbers (epoch seconds); nothing reads a clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from escaler.api.scaler import BoundBy
from escaler.clock import FakeClock
from escaler.scaling import (
    Behavior,
    Decision,
    GuardHold,
    PipelineInput,
    PipelineState,
    Recommendation,
    RecommendResult,
    TargetSnapshot,
    clamp,
    decide,
    defer,
    explain_lines,
    limit_step,
    stabilize,
)
from escaler.scaling.annotations import parse_annotations
from escaler.scaling.guards import ROLLOUT_IN_PROGRESS, SCALE_DOWN_SETTLING
from escaler.scaling.pipeline import (
    DECISION_UNAVAILABLE,
    INVALID_SPEC,
    RECOMMENDED,
    SCALE_DOWN_LIMIT,
    SCALE_UP_LIMIT,
    SCALING_DISABLED,
    TOO_FEW_REPLICAS,
    TOO_MANY_REPLICAS,
)
from escaler.scaling.stabilizer import stabilization_changes_at
from escaler.scaling.text import TRUNCATED, cap_text, format_time

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
H = tuple[tuple[float, int], ...]


# ================================================================ stabilize


# (id, history as (seconds ago, replicas), recommendation, current, up window, down window, count)
STABILIZE_CASES: list[tuple[str, list[tuple[float, int]], int, int, float, float, int]] = [
    ("no-history-follows-rec", [], 3, 5, 0, 300, 3),
    ("down-keeps-highest-in-window", [(100, 8), (50, 6)], 3, 8, 0, 300, 8),
    ("down-highest-capped-at-current", [(100, 10)], 3, 7, 0, 300, 7),
    ("down-intermediate", [(100, 6), (50, 5)], 3, 8, 0, 300, 6),
    ("down-expired-entries-ignored", [(300, 9), (400, 9)], 3, 9, 0, 300, 3),
    ("down-just-inside-window", [(299.5, 9)], 3, 9, 0, 300, 9),
    ("down-window-0", [(1, 9)], 3, 9, 0, 0, 3),
    ("stale-high-never-raises", [(60, 10)], 4, 4, 0, 300, 4),
    ("up-default-0-follows", [(10, 2)], 9, 2, 0, 300, 9),
    ("up-keeps-lowest-in-window", [(30, 3), (20, 5)], 9, 3, 60, 300, 3),
    ("up-lowest-above-current", [(30, 5), (20, 6)], 9, 3, 60, 300, 5),
    ("up-expired", [(61, 3)], 9, 3, 60, 0, 9),
    # a window covers now - window < t: an entry exactly one window old is out of it. Each window is
    # checked with the other one longer, so that the pruning to the longer window does not hide it
    ("down-boundary-excluded-up-longer", [(60, 9)], 3, 9, 300, 60, 3),
    ("up-boundary-excluded-down-longer", [(60, 3)], 9, 3, 60, 300, 9),
    ("unchanged-rec", [(10, 9)], 5, 5, 60, 300, 5),
]


@pytest.mark.parametrize(("history", "rec", "current", "up", "down", "expected"),
                         [c[1:] for c in STABILIZE_CASES], ids=[c[0] for c in STABILIZE_CASES])
def test_stabilize(history: list[tuple[float, int]], rec: int, current: int, up: float, down: float,
                   expected: int) -> None:
    entries = [(NOW - ago, r) for ago, r in history]
    count, new_history, stabilized = stabilize(entries, rec, NOW, up, down, current=current)
    assert count == expected
    assert stabilized == (count != rec)
    assert new_history[-1] == Recommendation(NOW, rec)


def test_stabilize_prunes_to_the_longer_window_and_compacts() -> None:
    history = [(NOW - 400, 9), (NOW - 200, 4), (NOW - 150, 7), (NOW - 100, 4), (NOW - 50, 6)]
    _, new_history, _ = stabilize(history, 5, NOW, 60, 300, current=5)
    # 400 s old: out of the longer window; the first 4 has a newer 4 (<= and >=): it can never decide
    assert new_history == (Recommendation(NOW - 150, 7), Recommendation(NOW - 100, 4),
                           Recommendation(NOW - 50, 6), Recommendation(NOW, 5))
    # exactly one longer window old: out of it (now - window < t), so not kept
    _, kept, _ = stabilize([(NOW - 300, 9)], 5, NOW, 60, 300, current=5)
    assert kept == (Recommendation(NOW, 5),)


def test_stabilize_compaction_keeps_results_identical() -> None:
    clock_history: list[Recommendation] = []
    compact: tuple[Recommendation, ...] = ()
    recs = [5, 9, 3, 3, 8, 2, 7, 7, 1, 6, 4, 9, 2, 5]
    for i, rec in enumerate(recs):
        now = NOW + 40 * i
        full, _, _ = stabilize(clock_history, rec, now, 90, 200, current=5)
        short, compact, _ = stabilize(compact, rec, now, 90, 200, current=5)
        assert full == short
        clock_history.append(Recommendation(now, rec))
    assert len(compact) < len(recs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"up_window": -1}, "up_window"), ({"down_window": float("nan")}, "down_window"),
     ({"recommendation": -1}, "recommendation"), ({"current": -2}, "current")],
    ids=["negative-window", "nan-window", "negative-rec", "negative-current"],
)
def test_stabilize_validates(kwargs: dict[str, float], match: str) -> None:
    args: dict[str, object] = {"history": (), "recommendation": 1, "now": NOW, "up_window": 0,
                               "down_window": 300, "current": 1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        stabilize(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("history", "count", "rec", "expected_in"),
    [
        ([(100, 8), (50, 8), (20, 6)], 8, 3, 250.0),     # newest 8 is 50 s old: 300 - 50
        ([(100, 8), (20, 6)], 6, 3, 280.0),              # count 6 (current): newest >= 6 is 20 s old
        ([(30, 3), (10, 4)], 4, 9, 50.0),                # up window 60: newest <= 4 is 10 s old
        ([(10, 5)], 5, 5, None),                         # not stabilized
        ([(300, 8)], 8, 3, None),                        # exactly one down window old: out of it
        ([(60, 4)], 4, 9, None),                         # exactly one up window old: out of it
    ],
    ids=["down-newest-max", "down-held-at-current", "up-newest-min", "not-stabilized",
         "down-boundary-excluded", "up-boundary-excluded"],
)
def test_stabilization_changes_at(history: list[tuple[float, int]], count: int, rec: int,
                                  expected_in: float | None) -> None:
    entries = [(NOW - ago, r) for ago, r in history]
    at = stabilization_changes_at(entries, count, rec, NOW, 60, 300)
    assert (None if at is None else at - NOW) == expected_in


# ================================================================ limit_step and clamp


@pytest.mark.parametrize(
    ("current", "desired", "up", "down", "allow_up", "expected"),
    [
        (4, 10, 2, None, True, 6),
        (4, 5, 2, None, True, 5),
        (4, 10, None, None, True, 10),
        (10, 2, None, 3, True, 7),
        (10, 8, None, 3, True, 8),
        (10, 2, 1, None, True, 2),
        (4, 10, 2, 1, False, 10),    # LLMScaler: never caps scale-up
        (10, 2, 2, 3, False, 7),     # … but still limits scale-down
        (0, 5, 2, None, True, 2),    # from zero too
        (5, 5, 1, 1, True, 5),
    ],
    ids=["up-limited", "up-not-binding", "up-unlimited", "down-limited", "down-not-binding",
         "down-unlimited", "llm-no-up-limit", "llm-down-limit", "from-zero", "no-change"],
)
def test_limit_step(current: int, desired: int, up: int | None, down: int | None, allow_up: bool,
                    expected: int) -> None:
    assert limit_step(current, desired, up, down, allow_up) == expected


@pytest.mark.parametrize(("up", "down"), [(0, None), (None, 0), (True, None), (-1, None)],
                         ids=["up-0", "down-0", "bool", "negative"])
def test_limit_step_rejects_bad_limits(up: int | None, down: int | None) -> None:
    with pytest.raises(ValueError):
        limit_step(3, 5, up, down)


@pytest.mark.parametrize(
    ("count", "lo", "hi", "expected"),
    [(5, 1, 10, 5), (0, 1, 10, 1), (12, 1, 10, 10), (0, 0, 3, 0), (4, 4, 4, 4)],
    ids=["inside", "raised-to-min", "capped-at-max", "zero-allowed", "min-equals-max"],
)
def test_clamp(count: int, lo: int, hi: int, expected: int) -> None:
    assert clamp(count, lo, hi) == expected


def test_clamp_rejects_min_above_max() -> None:
    with pytest.raises(ValueError, match="min_replicas"):
        clamp(3, 5, 4)


# ================================================================ guard inputs


def snap(spec: int = 4, **kw: object) -> TargetSnapshot:
    return TargetSnapshot(spec_replicas=spec, **kw)  # type: ignore[arg-type]


def rolling(spec: int = 4) -> TargetSnapshot:
    """A target whose handler reports a template rollout in progress."""
    return snap(spec, rollout_in_progress=True,
                rollout_message="status.observedGeneration 1 < metadata.generation 2")


# ================================================================ defer


ROLLOUT = GuardHold(ROLLOUT_IN_PROGRESS, "target rollout in progress")


def test_defer_hold_timeout_force_and_pacing() -> None:
    # t=0: first hold starts the deferral
    o = defer(ROLLOUT, None, None, 0.0, 600)
    assert (o.write_allowed, o.forced, o.started, o.deferred_since, o.force_at) == (
        False, False, True, 0.0, 600.0)
    assert o.held
    # t=300: still held, deferral kept, not started again
    o = defer(ROLLOUT, o.deferred_since, o.last_forced_write, 300.0, 600)
    assert (o.write_allowed, o.started, o.deferred_since, o.force_at) == (False, False, 0.0, 600.0)
    # t=600: forced; the write clears deferred_since and stamps the forced write
    o = defer(ROLLOUT, o.deferred_since, o.last_forced_write, 600.0, 600)
    assert (o.write_allowed, o.forced, o.deferred_since, o.last_forced_write) == (True, True, None, 600.0)
    assert not o.held and o.hold == ROLLOUT
    # t=610: the guard still holds: a new deferral starts, paced to one forced write per 600 s
    o = defer(ROLLOUT, o.deferred_since, o.last_forced_write, 610.0, 600)
    assert (o.write_allowed, o.started, o.deferred_since, o.force_at) == (False, True, 610.0, 1210.0)
    o = defer(ROLLOUT, o.deferred_since, o.last_forced_write, 1209.0, 600)
    assert not o.write_allowed
    o = defer(ROLLOUT, o.deferred_since, o.last_forced_write, 1210.0, 600)
    assert o.forced and o.last_forced_write == 1210.0


def test_defer_pacing_wins_over_an_older_deferral() -> None:
    # a deferral that began before the last forced write (state restored from status): pacing decides
    o = defer(ROLLOUT, 0.0, 500.0, 700.0, 600)
    assert not o.write_allowed and o.force_at == 1100.0
    assert defer(ROLLOUT, 0.0, 500.0, 1100.0, 600).forced


def test_defer_no_hold_clears_and_keeps_pacing_stamp() -> None:
    o = defer(None, 100.0, 50.0, 200.0, 600)
    assert (o.write_allowed, o.forced, o.started, o.deferred_since, o.last_forced_write, o.force_at) == (
        True, False, False, None, 50.0, None)


def test_defer_timeout_zero_never_forces() -> None:
    o = defer(ROLLOUT, None, None, 0.0, 0)
    assert not o.write_allowed and o.started and o.force_at is None
    o = defer(ROLLOUT, o.deferred_since, None, 10**9, 0)
    assert not o.write_allowed and not o.started and o.deferred_since == 0.0


def test_defer_steps_a_fake_clock() -> None:
    clock = FakeClock()
    since: float | None = None
    forced_at: list[float] = []
    last: float | None = None
    for _ in range(40):  # 40 syncs, 60 s apart, guard always holding
        o = defer(ROLLOUT, since, last, clock.now().timestamp(), 600)
        since, last = o.deferred_since, o.last_forced_write
        if o.forced:
            forced_at.append(clock.now().timestamp())
        clock.step(60)
    start = FakeClock().now().timestamp()
    # first forced at 600 s; the next deferral starts at 660 s and is forced at 1260 s; and so on
    assert [t - start for t in forced_at] == [600.0, 1260.0, 1920.0]


@pytest.mark.parametrize("timeout", [-1, float("inf")], ids=["negative", "inf"])
def test_defer_rejects_bad_timeout(timeout: float) -> None:
    with pytest.raises(ValueError, match="defer_timeout"):
        defer(None, None, None, 0.0, timeout)


# ================================================================ decide


def metrics(n: int, k: int = 1, m: int = 1) -> RecommendResult:
    return RecommendResult.from_metrics(n, evaluated=k, total=m)


def inp(rec: RecommendResult | int, current: int = 4, *, lo: int = 1, hi: int = 10, now: float = NOW,
        history: H = (), deferred_since: float | None = None, last_forced: float | None = None,
        target: TargetSnapshot | None = None, **kw: object) -> PipelineInput:
    pause: dict[str, object] = {k: kw.pop(k) for k in ("paused", "paused_replicas", "advisory") if k in kw}
    behavior = kw.pop("behavior", None) or Behavior(min_replicas=lo, max_replicas=hi, **kw)  # type: ignore[arg-type]
    return PipelineInput(
        now=now, current_replicas=current, recommend=metrics(rec) if isinstance(rec, int) else rec,
        behavior=behavior,  # type: ignore[arg-type]
        target=target, state=PipelineState.of(history, deferred_since, last_forced), **pause)  # type: ignore[arg-type]


def ago(*pairs: tuple[float, int]) -> H:
    return tuple((NOW - a, r) for a, r in pairs)


# (id, input, desired, write, bound_by, limited_by)
DECIDE_CASES: list[tuple[str, PipelineInput, int, bool, BoundBy | None, str | None]] = [
    ("plain-scale-up", inp(7), 7, True, None, None),
    ("plain-scale-down-no-history", inp(2), 2, True, None, None),
    ("no-op", inp(4), 4, False, None, None),
    ("down-stabilized", inp(2, history=ago((60, 4))), 4, False, BoundBy.STABILIZE, None),
    ("down-partly-stabilized", inp(2, current=6, history=ago((60, 4))), 4, True, BoundBy.STABILIZE, None),
    ("up-stabilized", inp(8, history=ago((30, 4)), scale_up_stabilization_seconds=60), 4, False,
     BoundBy.STABILIZE, None),
    ("scale-up-limit", inp(9, scale_up_max_pods=2), 6, True, BoundBy.STEP_LIMIT, SCALE_UP_LIMIT),
    ("scale-down-limit", inp(1, current=8, scale_down_max_pods=3), 5, True, BoundBy.STEP_LIMIT,
     SCALE_DOWN_LIMIT),
    ("max-clamp", inp(14), 10, True, BoundBy.CLAMP, TOO_MANY_REPLICAS),
    ("min-clamp", inp(0, lo=2), 2, True, BoundBy.CLAMP, TOO_FEW_REPLICAS),
    # the limit binds (4+2=6) and the clamp (max 8) does not undo it: the limit is reported
    ("limit-reported-over-clamp", inp(20, hi=8, scale_up_max_pods=2), 6, True, BoundBy.STEP_LIMIT,
     SCALE_UP_LIMIT),
    # the limit binds (4+4=8) and the clamp (max 5) changes it again: the clamp is the last step
    ("clamp-after-limit", inp(20, hi=5, scale_up_max_pods=4), 5, True, BoundBy.CLAMP, TOO_MANY_REPLICAS),
    ("down-limit-then-min", inp(1, current=10, lo=8, scale_down_max_pods=3), 8, True, BoundBy.CLAMP,
     TOO_FEW_REPLICAS),
]


@pytest.mark.parametrize(("pinput", "desired", "write", "bound_by", "limited_by"),
                         [c[1:] for c in DECIDE_CASES], ids=[c[0] for c in DECIDE_CASES])
def test_decide_table(pinput: PipelineInput, desired: int, write: bool, bound_by: BoundBy | None,
                      limited_by: str | None) -> None:
    d = decide(pinput)
    assert (d.desired, d.write, d.bound_by, d.limited_by) == (desired, write, bound_by, limited_by)
    assert d.activity == RECOMMENDED
    assert d.would_write == write


def test_decide_records_every_step() -> None:
    d = decide(inp(20, hi=5, scale_up_max_pods=4, history=ago((10, 3))))
    assert (d.recommendation, d.stabilized, d.limited, d.clamped, d.desired) == (20, 20, 8, 5, 5)
    assert [s.name for s in d.steps] == ["recommend", "stabilize", "stepLimit", "clamp", "write"]
    assert [(s.before, s.after) for s in d.steps] == [(None, 20), (20, 20), (20, 8), (8, 5), (4, 5)]
    assert d.state.history == (Recommendation(NOW - 10, 3), Recommendation(NOW, 20))


def test_clamp_last_lowering_max_applies_while_scale_down_is_stabilized() -> None:
    # 10 replicas, a recent recommendation of 10 holds them; the recommendation is now 4 and the user
    # lowers maxReplicas to 6: the pipeline writes 6 at once instead of waiting out the window
    d = decide(inp(4, current=10, hi=6, history=ago((60, 10))))
    assert (d.stabilized, d.clamped, d.desired, d.write) == (10, 6, 6, True)
    assert d.bound_by == BoundBy.CLAMP and d.limited_by == TOO_MANY_REPLICAS
    assert d.down_stabilized  # still above what the recommendation alone gives (4)
    assert d.requeue_after == 240.0  # the window ends 300 s after the 10, 60 s ago


def test_stabilization_masked_by_clamp_needs_no_requeue() -> None:
    d = decide(inp(8, current=10, hi=6, history=ago((60, 10))))
    assert d.desired == 6 and not d.down_stabilized and d.requeue_after is None


# ---------------------------------------------------------------- requeue_after


@pytest.mark.parametrize(
    ("pinput", "expected"),
    [
        (inp(7), None),
        (inp(2, history=ago((60, 4))), 240.0),
        (inp(2, history=ago((200, 4), (60, 3))), 100.0),           # 4 expires first; 3 still holds after
        (inp(8, history=ago((30, 4)), scale_up_stabilization_seconds=60), 30.0),
        (inp(7, target=rolling()), 600.0),
        (inp(7, target=rolling(), deferred_since=NOW - 100), 500.0),
        (inp(7, target=rolling(), deferred_since=NOW - 100,
             defer_timeout_seconds=0), None),
        # pacing: the deferral is 595 s old but the last forced write was 10 s ago
        (inp(7, target=rolling(), deferred_since=NOW - 595,
             last_forced=NOW - 10), 590.0),
        (inp(2, history=ago((60, 4)), target=rolling()), 240.0),
        (inp(2, history=ago((60, 4)), paused=True), None),
    ],
    ids=["write-no-wait", "down-window-end", "down-window-stepwise", "up-window-end", "deferral-timeout",
         "deferral-remaining", "never-forced", "pacing-end", "earliest-of-both", "paused"],
)
def test_requeue_after(pinput: PipelineInput, expected: float | None) -> None:
    assert decide(pinput).requeue_after == expected


# ---------------------------------------------------------------- deferral through decide


def test_decide_deferral_hold_timeout_forced_write_pacing() -> None:
    target = rolling()
    state = PipelineState()
    seen: list[tuple[float, bool, bool, bool, float | None]] = []
    for t in (0, 60, 599, 600, 660, 1259, 1260):
        d = decide(replace(inp(7, target=target), now=NOW + t, state=state))
        seen.append((t, d.held, d.forced, d.deferral_started, d.requeue_after))
        state = d.state
        if d.write:
            assert d.state.deferred_since is None and d.state.last_forced_write == NOW + t
        else:
            assert d.state.deferred_since is not None
    assert seen == [
        (0, True, False, True, 600.0),
        (60, True, False, False, 540.0),
        (599, True, False, False, 1.0),
        (600, False, True, False, None),
        (660, True, False, True, 600.0),
        (1259, True, False, False, 1.0),
        (1260, False, True, False, None),
    ]


def test_decide_held_write_keeps_desired_and_bound_by_guard() -> None:
    d = decide(inp(7, target=rolling()))
    assert (d.desired, d.write, d.would_write, d.held, d.bound_by) == (7, False, False, True, BoundBy.GUARD)
    assert d.guard is not None and d.guard.reason == ROLLOUT_IN_PROGRESS
    assert d.state.deferred_since == NOW and d.force_at == NOW + 600


def test_decide_nothing_to_write_keeps_a_running_deferral_while_the_guard_stands() -> None:
    """Seed 000: the guard's reason stays "also on a no-op while a deferral runs"; the force time is
    the first hold's, and no second ScalingDeferred starts."""
    d = decide(inp(4, target=rolling(), deferred_since=NOW - 30))
    assert d.held and not d.write and not d.deferral_started and not d.forced
    assert d.guard is not None and d.guard.reason == ROLLOUT_IN_PROGRESS
    assert d.state.deferred_since == NOW - 30 and d.force_at == NOW - 30 + 600
    assert d.requeue_after == 570
    assert d.steps[-1].note == "no write: the count does not change"
    # past the force time there is still nothing to force: the next held write is forced at once
    late = decide(inp(4, target=rolling(), deferred_since=NOW - 700))
    assert late.held and not late.forced and late.state.deferred_since == NOW - 700
    assert decide(inp(7, target=rolling(), deferred_since=NOW - 700)).forced


@pytest.mark.parametrize(
    ("target", "deferred_since"),
    [(snap(), NOW - 30), (rolling(), None)],
    ids=["guard-gone-ends-the-deferral", "no-deferral-none-starts"],
)
def test_decide_nothing_to_write_without_a_running_deferral_or_guard(
        target: TargetSnapshot, deferred_since: float | None) -> None:
    d = decide(inp(4, target=target, deferred_since=deferred_since))
    assert not d.held and d.guard is None and d.state.deferred_since is None and not d.deferral_started


def test_decide_settling_holds_only_scale_down() -> None:
    settling = snap(status_replicas=6, settling_scale_down=True)
    down = decide(inp(2, target=settling))
    assert down.held and down.guard is not None and down.guard.reason == SCALE_DOWN_SETTLING
    assert decide(inp(7, target=settling)).write


def test_state_after_failed_write_keeps_previous_deferral() -> None:
    d = decide(inp(7, target=rolling(), deferred_since=NOW - 600))
    assert d.forced and d.state.deferred_since is None and d.state.last_forced_write == NOW
    kept = d.state_after_failed_write
    assert kept.deferred_since == NOW - 600 and kept.last_forced_write is None
    assert kept.history == d.state.history


# ---------------------------------------------------------------- no decision, disabled


@pytest.mark.parametrize(
    ("rec", "current", "lo", "activity", "desired", "bound_by"),
    [
        (RecommendResult.no_decision("prometheus http://p:9090", "connection refused"), 4, 1,
         DECISION_UNAVAILABLE, 4, None),
        (RecommendResult.no_decision("prometheus", "timeout"), 1, 3, DECISION_UNAVAILABLE, 3,
         BoundBy.CLAMP),
        (RecommendResult.no_decision("prometheus", "timeout"), 12, 1, DECISION_UNAVAILABLE, 10,
         BoundBy.CLAMP),
        (RecommendResult.invalid("spec.customProvider: required when metricProvider is Custom"), 4, 1,
         INVALID_SPEC, 4, None),
        (RecommendResult.invalid("bad"), 0, 2, INVALID_SPEC, 2, BoundBy.CLAMP),
    ],
    ids=["unavailable-holds", "unavailable-raised-to-min", "unavailable-capped-at-max", "invalid-holds",
         "invalid-raised-to-min"],
)
def test_no_decision_holds_current_apart_from_bounds(
        rec: RecommendResult, current: int, lo: int, activity: str, desired: int, bound_by: BoundBy | None,
) -> None:
    d = decide(inp(rec, current=current, lo=lo, history=ago((10, 9))))
    assert (d.activity, d.desired, d.write, d.bound_by) == (activity, desired, desired != current, bound_by)
    assert d.recommendation is None
    assert d.state.history == PipelineState.of(ago((10, 9))).history  # untouched


def test_no_decision_write_still_passes_the_guards() -> None:
    d = decide(inp(RecommendResult.no_decision("p", "down"), current=1, lo=3,
                   target=rolling(1)))
    assert d.desired == 3 and d.held and not d.write


def test_scaling_disabled_at_zero() -> None:
    rec = RecommendResult.from_metrics(3, evaluated=1, total=1, can_scale_from_zero=False)
    d = decide(inp(rec, current=0, lo=1))
    assert (d.activity, d.desired, d.write, d.requeue_after) == (SCALING_DISABLED, 0, False, None)
    # a trigger that can scale from zero proceeds
    d = decide(inp(RecommendResult.from_metrics(3, evaluated=1, total=1), current=0, lo=1))
    assert (d.activity, d.desired, d.write) == (RECOMMENDED, 3, True)
    # not at zero: the flag does not matter
    assert decide(inp(rec, current=2)).activity == RECOMMENDED


# ---------------------------------------------------------------- paused, pinned, advisory


def test_paused_freezes() -> None:
    d = decide(inp(9, paused=True, deferred_since=NOW - 5, history=ago((10, 4)),
                   target=rolling()))
    assert (d.desired, d.write, d.would_write, d.clamped, d.bound_by) == (4, False, False, 9, BoundBy.PAUSED)
    assert d.frozen and not d.pinned
    assert d.state.history == PipelineState.of(ago((10, 4))).history
    assert d.state.deferred_since is None and not d.held
    assert any("paused" in line for line in explain_lines(d))


def test_paused_replicas_pins_and_bypasses_the_pipeline() -> None:
    # the pin is outside [min, max], a guard would hold, a window would stabilize: all bypassed
    d = decide(inp(2, current=4, hi=3, paused_replicas=12, history=ago((10, 8)),
                   target=rolling()))
    assert (d.desired, d.write, d.held, d.bound_by, d.requeue_after) == (
        12, True, False, BoundBy.PAUSED_REPLICAS, None)
    assert d.pinned and not d.frozen


@pytest.mark.parametrize(("current", "write"), [(5, False), (3, True)], ids=["already-pinned", "pin-writes"])
def test_paused_replicas_writes_only_on_change_and_wins_over_paused(current: int, write: bool) -> None:
    d = decide(inp(9, current=current, paused=True, paused_replicas=5))
    assert (d.desired, d.write) == (5, write)


def test_advisory_computes_everything_but_never_writes() -> None:
    active = decide(inp(9, scale_up_max_pods=2))
    advisory = decide(inp(9, scale_up_max_pods=2, advisory=True))
    assert (advisory.desired, advisory.would_write, advisory.write) == (6, True, False)
    assert replace(advisory, write=True, advisory=False, steps=active.steps) == active
    assert advisory.steps[-1].note == "no write: Advisory mode (Active would write 6)"
    held = decide(inp(9, advisory=True, target=rolling()))
    assert held.held and held.deferral_started and not held.write
    pinned = decide(inp(9, advisory=True, paused_replicas=2))
    assert pinned.would_write and not pinned.write


# ---------------------------------------------------------------- LLMScaler


def test_llmscaler_never_limits_scale_up() -> None:
    behavior = Behavior.for_llmscaler(min_replicas=1, max_replicas=16, scale_down_max_step_replicas=2)
    up = decide(inp(15, current=2, behavior=behavior))
    assert (up.desired, up.limited_by) == (15, None)
    down = decide(inp(1, current=10, behavior=behavior))
    assert (down.desired, down.limited_by) == (8, SCALE_DOWN_LIMIT)
    # even a scale-up limit smuggled in is ignored
    smuggled = replace(behavior, scale_up_max_pods=1)
    assert decide(inp(15, current=2, behavior=smuggled)).desired == 15


def test_behavior_from_annotations() -> None:
    ann, _ = parse_annotations({
        "elasticscaler.io/behavior.scaleUp.stabilizationWindowSeconds": "30",
        "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "120",
        "elasticscaler.io/behavior.scaleUp.maxPodsPerStep": "4",
        "elasticscaler.io/behavior.scaleDown.maxPodsPerStep": "1",
    })
    b = Behavior.from_annotations(ann, min_replicas=2, max_replicas=20, defer_timeout_seconds=60)
    assert b == Behavior(2, 20, 30, 120, 4, 1, True, 60)
    assert Behavior.from_annotations(parse_annotations({})[0], min_replicas=1, max_replicas=10) == Behavior(
        1, 10, 0, 300, None, None, True, 600)


@pytest.mark.parametrize(
    "kwargs",
    [{"min_replicas": 5, "max_replicas": 4}, {"min_replicas": -1, "max_replicas": 4},
     {"min_replicas": 1, "max_replicas": 4, "scale_up_max_pods": 0},
     {"min_replicas": 1, "max_replicas": 4, "defer_timeout_seconds": -1},
     {"min_replicas": 1, "max_replicas": 4, "scale_down_stabilization_seconds": float("nan")}],
    ids=["min-above-max", "negative-min", "zero-step", "negative-timeout", "nan-window"],
)
def test_behavior_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Behavior(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"replicas": 1, "unavailable": "x"}, {"replicas": -1}, {"replicas": 1, "kind": "Other"},
     {"replicas": 1, "evaluated": 0, "total": 1}, {"replicas": 1, "evaluated": 3, "total": 2}],
    ids=["nothing", "two-outcomes", "negative", "unknown-kind", "metrics-none-evaluated", "k-above-m"],
)
def test_recommend_result_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RecommendResult(**kwargs)  # type: ignore[arg-type]


def test_no_decision_caps_the_error_at_1kib() -> None:
    rr = RecommendResult.no_decision("prometheus http://p:9090", "<html>" + "x" * 5000)
    assert rr.unavailable is not None
    assert rr.unavailable.startswith("prometheus http://p:9090: <html>xx")
    assert rr.unavailable.endswith(TRUNCATED)
    assert len(rr.unavailable.encode()) <= 1024 + len("prometheus http://p:9090: ")


def test_unavailable_message_built_by_hand_is_capped_too() -> None:
    rr = RecommendResult(unavailable="x" * 10_000)
    assert rr.unavailable is not None and len(rr.unavailable.encode()) <= 2048
    assert rr.unavailable.endswith(TRUNCATED)


def test_cap_text_cuts_on_a_character_boundary() -> None:
    text = "é" * 1000  # 2000 bytes
    capped = cap_text(text, 101)
    assert len(capped.encode()) <= 101 and capped.endswith(TRUNCATED)
    assert cap_text("short") == "short"


def test_pipeline_input_validates() -> None:
    with pytest.raises(ValueError, match="current_replicas"):
        inp(3, current=-1)
    with pytest.raises(ValueError, match="now"):
        inp(3, now=float("nan"))
    with pytest.raises(ValueError, match="paused_replicas"):
        inp(3, paused_replicas=-1)


# ---------------------------------------------------------------- reason and explain


def test_reason_names_the_binding_steps() -> None:
    d = decide(inp(RecommendResult.from_metrics(20, evaluated=2, total=2, detail="queue 80 of 4"), hi=5,
                   scale_up_max_pods=4))
    assert d.reason == ("evaluated 2 of 2 metrics; recommends 20 replicas (queue 80 of 4); limited to 8 by "
                        "the scale-up step limit (4 per sync); capped at maxReplicas 5")
    forced = decide(inp(7, target=rolling(), deferred_since=NOW - 600))
    assert "forced after deferTimeoutSeconds 600" in forced.reason
    unavailable = decide(inp(RecommendResult.no_decision("prometheus", "down"), current=1, lo=2))
    assert unavailable.reason == "no decision (prometheus: down); holding 1; raised to minReplicas 2"
    long = decide(inp(RecommendResult.from_metrics(5, evaluated=1, total=1, detail="d" * 3000)))
    assert len(long.reason.encode()) <= 1024


def test_explain_lines_print_each_step() -> None:
    d = decide(inp(2, current=10, hi=6, history=ago((60, 10)), target=rolling(10)))
    lines = explain_lines(d)
    assert lines[0] == f"at {format_time(NOW)}: current 10 replicas, bounds [1, 6], mode Active"
    assert lines[1] == "1. recommend: 2: evaluated 1 of 1 metrics; recommends 2 replicas"
    assert lines[2] == ("2. stabilize: 2 -> 10: held at 10 by the scale-down stabilization window (300s) "
                        "[bound: Stabilize]")
    assert lines[3] == "3. stepLimit: 10 -> 10: limits: scale-up unlimited, scale-down unlimited"
    assert lines[4] == "4. clamp: 10 -> 6: capped at maxReplicas 6 [bound: Clamp]"
    assert lines[5] == ("5. guard: 6 -> 10: held by RolloutInProgress since 2026-01-01T00:00:00Z: "
                        "target rollout in progress: status.observedGeneration 1 < metadata.generation 2; "
                        "forced at 2026-01-01T00:10:00Z [bound: Guard]")
    assert lines[6] == "6. write: 10 -> 10: no write: held by a guard"
    assert lines[7:] == ["desired 6; no write", "bound by: Guard; ScalingLimited: TooManyReplicas",
                         "deferred since 2026-01-01T00:00:00Z",
                         "requeue after 240s (at 2026-01-01T00:04:00Z)"]


def test_explain_lines_for_a_write_and_no_requeue() -> None:
    lines = explain_lines(decide(inp(7)))
    assert lines[-3:] == ["desired 7; write 4 -> 7", "bound by: nothing; ScalingLimited: nothing",
                          "requeue: on the next event or poll"]


def test_decision_is_a_frozen_value() -> None:
    d = decide(inp(7))
    assert isinstance(d, Decision)
    with pytest.raises(AttributeError):
        d.desired = 3  # type: ignore[misc]
    assert decide(inp(7)) == d
