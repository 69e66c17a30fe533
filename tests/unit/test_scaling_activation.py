"""Activation with metric scaling (docs/design.md#beyond-the-seeds, ``escaler.scaling.activation`` and its
step in ``escaler.scaling.pipeline.decide``): the verdict on the readings (table-driven), the step's effect
on the recommendation, going to 0 through the scale-down window (not around it), an immediate wake
from 0 (even with a scale-up window), the algorithm's rate band dropped on the way to 0, a failed
read at 0 holding (or falling back), and the ScalingActive message saying why the target is at 0.
Time is plain epoch seconds stepped by hand; nothing reads a clock."""

from __future__ import annotations

import pytest

from escaler.api.scaler import BoundBy
from escaler.scaling import Behavior, PipelineInput, PipelineState, RecommendResult, decide, explain_lines
from escaler.scaling.activation import (
    ACTIVE,
    INACTIVE,
    UNKNOWN,
    ActivationReading,
    ActivationState,
    apply,
    describe,
)
from escaler.scaling.conditions import SCALING_ACTIVE, SyncOutcome, plan
from escaler.scaling.fallback import FallbackCount, FallbackState
from escaler.scaling.pipeline import DECISION_UNAVAILABLE, RECOMMENDED, Decision

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DOWN_WINDOW = 60.0


def _state(*values: float | None, threshold: float = 5.0) -> ActivationState:
    return ActivationState(threshold, tuple(ActivationReading(f"q{i}", v) for i, v in enumerate(values)))


# ================================================================ the verdict and the step

# (id, readings, threshold, verdict)
VERDICTS: list[tuple[str, tuple[float | None, ...], float, str]] = [
    ("above-is-active", (6.0,), 5.0, ACTIVE),
    ("at-the-value-is-not-active", (5.0,), 5.0, INACTIVE),
    ("below-is-inactive", (0.0,), 5.0, INACTIVE),
    ("any-one-above-activates", (0.0, 9.0), 5.0, ACTIVE),
    ("unreadable-beside-below-is-inactive", (None, 1.0), 5.0, INACTIVE),
    ("unreadable-beside-above-is-active", (None, 7.0), 5.0, ACTIVE),
    ("nothing-readable-is-unknown", (None, None), 5.0, UNKNOWN),
    ("nan-is-unreadable", (float("nan"),), 5.0, UNKNOWN),
    ("zero-threshold-any-load-wakes", (0.5,), 0.0, ACTIVE),
    ("negative-threshold", (-1.0,), -2.0, ACTIVE),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c[0] for c in VERDICTS])
def test_verdict(case: tuple[str, tuple[float | None, ...], float, str]) -> None:
    _, values, threshold, verdict = case
    assert _state(*values, threshold=threshold).verdict == verdict


# (id, readings, recommendation, current, result)
APPLY: list[tuple[str, tuple[float | None, ...], int, int, int]] = [
    ("inactive-goes-to-zero", (1.0,), 4, 4, 0),
    ("inactive-at-zero-stays", (1.0,), 0, 0, 0),
    ("active-wakes-to-one", (9.0,), 0, 0, 1),
    ("active-keeps-a-higher-recommendation", (9.0,), 6, 3, 6),
    ("active-never-below-one", (9.0,), 0, 3, 1),
    ("unknown-never-goes-to-zero", (None,), 0, 3, 1),
    ("unknown-keeps-the-recommendation", (None,), 4, 3, 4),
    ("unknown-at-zero-does-not-wake", (None,), 0, 0, 0),
]


@pytest.mark.parametrize("case", APPLY, ids=[c[0] for c in APPLY])
def test_apply(case: tuple[str, tuple[float | None, ...], int, int, int]) -> None:
    _, values, rec, current, result = case
    assert apply(_state(*values), rec, current) == result


def test_state_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match=r"ActivationState\.threshold"):
        _state(1.0, threshold=float("inf"))
    with pytest.raises(ValueError, match=r"ActivationState\.readings"):
        ActivationState(1.0, ())
    with pytest.raises(ValueError, match=r"activation\.apply"):
        apply(_state(1.0), -1, 0)
    with pytest.raises(ValueError, match=r"RecommendResult\.activation"):
        RecommendResult(unavailable="x", activation=_state(1.0))


def test_describe() -> None:
    assert describe(_state(0.0)) == "below activation (q0 0; activation.value 5): the target goes to 0"
    assert describe(_state(7.5)) == "above activation (q0 7.5; activation.value 5): active"
    assert describe(_state(None)).startswith("activation unknown (q0 unreadable)")


# ================================================================ the pipeline


def _rr(replicas: int, act: ActivationState, *, band: tuple[int | None, int | None] | None = None,
        uncapped: int | None = None) -> RecommendResult:
    return RecommendResult.from_metrics(replicas, evaluated=1, total=1, can_scale_from_zero=True,
                                        activation=act, rate_band=band, uncapped=uncapped)


def _decide(rr: RecommendResult, *, current: int, now: float = NOW, state: PipelineState | None = None,
            lo: int = 0, hi: int = 10, up_window: float = 0.0, down_max: int | None = None,
            fallback: FallbackState | None = None) -> Decision:
    behavior = Behavior(min_replicas=lo, max_replicas=hi, scale_down_stabilization_seconds=DOWN_WINDOW,
                        scale_up_stabilization_seconds=up_window, scale_down_max_pods=down_max)
    return decide(PipelineInput(now=now, current_replicas=current, recommend=rr, behavior=behavior,
                                state=state if state is not None else PipelineState(), fallback=fallback))


def _active_message(d: Decision) -> tuple[str, str, str]:
    writes = {w[0]: w for w in plan(SyncOutcome(decision=d)).writes}
    _, status, reason, message = writes[SCALING_ACTIVE]
    return status, reason, message


def test_wake_from_zero_is_its_own_step_and_immediate() -> None:
    d = _decide(_rr(0, _state(9.0)), current=0, up_window=120.0,
                state=PipelineState.of(((NOW - 10, 0),)))
    assert (d.activity, d.desired, d.write) == (RECOMMENDED, 1, True)
    names = [s.name for s in d.steps]
    assert names[:3] == ["recommend", "activation", "stabilize"]
    act = d.steps[1]
    assert (act.before, act.after, act.bound) == (0, 1, BoundBy.ACTIVATION)
    assert d.steps[2].note == "waking from 0: the scale-up window does not delay a wake"
    assert any(line.startswith("2. activation: 0 -> 1: above activation") for line in explain_lines(d))
    status, reason, message = _active_message(d)
    assert (status, reason) == ("True", "MetricsAvailable")
    assert message.endswith("above activation (q0 9; activation.value 5): active")


def test_below_activation_at_zero_stays_and_says_why() -> None:
    d = _decide(_rr(0, _state(2.0)), current=0)
    assert (d.desired, d.write) == (0, False)
    status, reason, message = _active_message(d)
    assert (status, reason) == ("True", "MetricsAvailable")
    assert "below activation (q0 2; activation.value 5): the target goes to 0" in message


def test_going_to_zero_respects_the_scale_down_window() -> None:
    """Load drops below activation at 3 replicas: the window (which saw 3) holds the count, then,
    once a whole window of inactive polls has passed, the count goes to 0 (bound by activation)."""
    d = _decide(_rr(3, _state(9.0)), current=3)
    assert d.desired == 3
    state = d.state
    d = _decide(_rr(2, _state(1.0)), current=3, now=NOW + 30, state=state)
    assert (d.desired, d.write, d.down_stabilized, d.bound_by) == (3, False, True, BoundBy.STABILIZE)
    assert d.requeue_after == pytest.approx(DOWN_WINDOW - 30)
    d = _decide(_rr(2, _state(1.0)), current=3, now=NOW + DOWN_WINDOW + 1, state=d.state)
    assert (d.desired, d.write, d.bound_by) == (0, True, BoundBy.ACTIVATION)
    assert "below activation" in d.reason


def test_the_rate_band_does_not_stop_the_way_to_zero() -> None:
    # apa at 4 replicas may halve at most (band 2..8): a halving cap never reaches 0, activation does
    d = _decide(_rr(2, _state(0.0), band=(2, 8), uncapped=1), current=4)
    assert (d.desired, d.write) == (0, True)
    assert not any(s.name == "rateLimit" for s in d.steps)


def test_active_load_scales_as_usual_and_the_band_still_applies() -> None:
    d = _decide(_rr(8, _state(50.0), band=(2, 8), uncapped=12), current=4)
    assert d.desired == 8
    act = next(s for s in d.steps if s.name == "activation")
    assert (act.before, act.after, act.bound) == (12, 12, None)


def test_step_limits_and_min_replicas_still_apply() -> None:
    d = _decide(_rr(1, _state(0.0)), current=5, down_max=2)
    assert (d.desired, d.bound_by) == (3, BoundBy.STEP_LIMIT)
    d = _decide(_rr(1, _state(0.0)), current=5, lo=1)
    assert (d.desired, d.bound_by) == (1, BoundBy.CLAMP)


def test_unknown_reading_never_takes_the_target_to_zero() -> None:
    d = _decide(_rr(0, _state(None)), current=2)
    assert d.desired == 1


def test_failed_read_at_zero_holds_or_falls_back() -> None:
    unavailable = RecommendResult.no_decision("metrics", "q0: HTTP 503", total=1, can_scale_from_zero=True)
    d = _decide(unavailable, current=0)
    assert (d.activity, d.desired, d.write) == (DECISION_UNAVAILABLE, 0, False)
    fb = FallbackState(2, 3, FallbackCount(2, NOW - 30))
    d = _decide(unavailable, current=0, fallback=fb)
    assert (d.fallback_engaged, d.desired, d.write) == (True, 3, True)
    assert not any(s.name == "activation" for s in d.steps)


def test_without_activation_nothing_changes() -> None:
    d = decide(PipelineInput(now=NOW, current_replicas=3,
                             recommend=RecommendResult.from_metrics(0, evaluated=1, total=1),
                             behavior=Behavior(min_replicas=0, max_replicas=10,
                                               scale_down_stabilization_seconds=0)))
    assert not any(s.name == "activation" for s in d.steps)
    assert d.desired == 0


def test_the_algorithm_at_zero_below_activation_is_bound_by_activation_when_it_lifts_the_cap() -> None:
    # apa itself recommends 0 but its band (2..8) would hold 2: activation lifted the cap
    d = _decide(_rr(2, _state(0.0), band=(2, 8), uncapped=0), current=4)
    assert (d.desired, d.bound_by) == (0, BoundBy.ACTIVATION)
    assert d.reason.count("below activation") == 1
