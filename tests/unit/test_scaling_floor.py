"""Schedule floors (docs/design.md#beyond-the-seeds), pure: ``floor_of`` (a Tidal spec at an instant → the
floor, with excluded dates and a DST zone), and the pipeline's ``floor`` step — before stabilization (so a
rule's end comes down through the scale-down window), after activation, the clamp still last, the rate band
widened, the hold path lifted, the requeue at the next rule boundary, ``BoundBy.FLOOR``, the reason,
``escaler explain`` and the ScheduleFloor condition. Time is always an argument."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from escaler.api.scaler import BoundBy
from escaler.api.tidal import TidalSpec
from escaler.scaling.activation import ActivationReading, ActivationState
from escaler.scaling.conditions import SCHEDULE_FLOOR, SyncOutcome, conditions_for
from escaler.scaling.floor import (
    FLOOR_ACTIVE,
    NO_FLOOR,
    TIDAL_INVALID,
    TIDAL_NOT_FOUND,
    FloorState,
    apply_floor,
    floor_of,
)
from escaler.scaling.pipeline import (
    Behavior,
    PipelineInput,
    PipelineState,
    RecommendResult,
    decide,
    explain_lines,
)

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday
NOW = T0.timestamp()


def _spec(*rules: dict[str, Any], default: int | None = None) -> TidalSpec:
    body: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                            "rules": list(rules)}
    if default is not None:
        body["defaultReplicas"] = default
    return TidalSpec.model_validate(body)


def _rule(name: str, start: str, end: str, replicas: int, exclude: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "start": start, "end": end, "replicas": replicas}
    if exclude:
        out["excludeDates"] = exclude
    return out


OFFICE = _rule("office", "CRON_TZ=Europe/Berlin 0 9 * * 1-5", "CRON_TZ=Europe/Berlin 0 18 * * 1-5", 4)
LAUNCH = _rule("launch", "CRON_TZ=UTC 0 11 10 3 *", "CRON_TZ=UTC 0 14 10 3 *", 6)


# ------------------------------------------------------------------ floor_of


def test_a_missing_tidal_gives_no_floor_and_names_it() -> None:
    f = floor_of("office-hours", None, T0)
    assert (f.replicas, f.reason) == (None, TIDAL_NOT_FOUND)
    assert f.problem is not None and "'office-hours'" in f.problem and "spec.floorFrom.name" in f.problem


def test_the_highest_active_rule_is_the_floor_and_the_next_change_is_the_next_fire() -> None:
    f = floor_of("t", _spec(OFFICE, LAUNCH), T0)
    assert (f.replicas, f.reason, f.active_rules) == (6, FLOOR_ACTIVE, ("office", "launch"))
    assert f.next_change == datetime(2026, 3, 10, 14, 0, tzinfo=UTC).timestamp()  # the launch ends


@pytest.mark.parametrize(("spec", "replicas", "reason"), [
    (_spec(OFFICE, default=2), 4, FLOOR_ACTIVE),
    (_spec(_rule("night", "CRON_TZ=UTC 0 22 * * *", "CRON_TZ=UTC 0 6 * * *", 3), default=2), 2, FLOOR_ACTIVE),
    (_spec(_rule("night", "CRON_TZ=UTC 0 22 * * *", "CRON_TZ=UTC 0 6 * * *", 3)), None, NO_FLOOR),
    # a default of 0 is a floor of 0 in force (nothing to raise), not the absence of one
    (_spec(_rule("night", "CRON_TZ=UTC 0 22 * * *", "CRON_TZ=UTC 0 6 * * *", 3), default=0), 0, FLOOR_ACTIVE),
    (_spec(_rule("office", OFFICE["start"], OFFICE["end"], 4, ["2026-03-10"])), None, NO_FLOOR),
], ids=["rule", "default", "nothing", "zero-default", "excluded-today"])
def test_floor_of(spec: TidalSpec, replicas: int | None, reason: str) -> None:
    f = floor_of("t", spec, T0)
    assert (f.replicas, f.reason) == (replicas, reason)


def test_an_excluded_date_in_the_rule_zone_across_dst() -> None:
    # Berlin springs forward on 2026-03-29 (a Sunday): a Sunday 09:00-18:00 rule, that date excluded
    sunday = _rule("sunday", "CRON_TZ=Europe/Berlin 0 9 * * 0", "CRON_TZ=Europe/Berlin 0 18 * * 0", 3,
                   ["2026-03-29"])
    spec = _spec(sunday)
    on_change_day = datetime(2026, 3, 29, 8, 0, tzinfo=UTC)  # 10:00 CEST
    assert floor_of("t", spec, on_change_day).replicas is None
    week_after = datetime(2026, 4, 5, 8, 0, tzinfo=UTC)
    assert floor_of("t", spec, week_after).replicas == 3
    # the next start after the excluded day is the next Sunday's 09:00 CEST (07:00 UTC)
    assert floor_of("t", spec, on_change_day).next_change == datetime(2026, 3, 29, 16, 0,
                                                                      tzinfo=UTC).timestamp()  # its end
    after_end = datetime(2026, 3, 29, 17, 0, tzinfo=UTC)
    assert floor_of("t", spec, after_end).next_change == datetime(2026, 4, 5, 7, 0, tzinfo=UTC).timestamp()


def test_an_invalid_tidal_gives_no_floor() -> None:
    bad = _rule("bad", "CRON_TZ=Mars/Olympus 0 9 * * *", "CRON_TZ=UTC 0 17 * * *", 3)
    f = floor_of("t", _spec(bad), T0)
    assert (f.replicas, f.reason) == (None, TIDAL_INVALID)
    assert f.problem is not None and "spec.rules[0] (bad).start" in f.problem


def test_a_tidal_whose_excluded_fires_exceed_the_budget_gives_no_floor_and_names_it() -> None:
    # issue 27 item 2: every Monday of seven years excluded and an end on Feb 29 (a walk of 105 weeks)
    mondays = [(date(2026, 3, 9) - timedelta(weeks=k)).isoformat() for k in range(366)]
    weekly = _rule("weekly", "CRON_TZ=UTC 0 9 * * 1", "CRON_TZ=UTC 0 0 29 2 *", 3, mondays)
    f = floor_of("t", _spec(weekly), T0)
    assert (f.replicas, f.reason) == (None, TIDAL_INVALID)
    assert f.problem is not None and "spec.rules[0] (weekly).excludeDates: more than" in f.problem


def test_floor_state_invariants() -> None:
    with pytest.raises(ValueError, match="replicas is set exactly when"):
        FloorState("t", 3, reason=NO_FLOOR)
    with pytest.raises(ValueError, match="reason must be one of"):
        FloorState("t", None, reason="Sometimes")
    assert apply_floor(2, None) == 2
    assert apply_floor(2, FloorState("t", None)) == 2
    assert apply_floor(2, FloorState("t", 5, reason=FLOOR_ACTIVE)) == 5
    assert apply_floor(7, FloorState("t", 5, reason=FLOOR_ACTIVE)) == 7


# ------------------------------------------------------------------ the pipeline step


def _floor(replicas: int | None, next_change: float | None = NOW + 600) -> FloorState:
    if replicas is None:
        return FloorState("office-hours", None, (), next_change, reason=NO_FLOOR)
    return FloorState("office-hours", replicas, ("office",), next_change, reason=FLOOR_ACTIVE)


B = Behavior(min_replicas=1, max_replicas=10, scale_down_stabilization_seconds=60)


def _decide(rec: RecommendResult, floor: FloorState | None, *, now: float = NOW, current: int = 1,
            behavior: Behavior = B, state: PipelineState | None = None) -> Any:
    return decide(PipelineInput(now=now, current_replicas=current, recommend=rec, behavior=behavior,
                                state=state or PipelineState(), floor=floor))


def _metrics(replicas: int, **kw: Any) -> RecommendResult:
    return RecommendResult.from_metrics(replicas, evaluated=1, total=1, **kw)


def test_the_floor_lifts_a_low_recommendation_and_says_so() -> None:
    d = _decide(_metrics(1), _floor(4))
    assert (d.recommendation, d.stabilized, d.desired, d.write) == (1, 4, 4, True)
    assert d.bound_by is BoundBy.FLOOR
    step = next(s for s in d.steps if s.name == "floor")
    assert (step.before, step.after, step.bound) == (1, 4, BoundBy.FLOOR)
    note = "raised to 4 by the schedule floor (Tidal office-hours: floor 4 replicas (rules office))"
    assert note in d.reason
    lines = explain_lines(d)
    assert any(ln.startswith("2. floor: 1 -> 4: raised to 4") and "[bound: Floor]" in ln for ln in lines)


def test_a_recommendation_above_the_floor_is_untouched() -> None:
    d = _decide(_metrics(7), _floor(4))
    assert (d.desired, d.bound_by) == (7, None)
    step = next(s for s in d.steps if s.name == "floor")
    assert step.bound is None and "at or above it" in step.note


def test_the_clamp_stays_last() -> None:
    d = _decide(_metrics(1), _floor(12))
    assert (d.stabilized, d.clamped, d.desired, d.bound_by) == (12, 10, 10, BoundBy.CLAMP)
    names = [s.name for s in d.steps]
    assert names.index("floor") < names.index("stabilize") < names.index("clamp")


def test_the_rule_end_comes_down_through_the_scale_down_window() -> None:
    up = _decide(_metrics(1), _floor(4))
    assert up.desired == 4
    # 30 s later the rule has ended (no floor); the window (60 s) still holds the floor's 4
    held = _decide(_metrics(1), _floor(None), now=NOW + 30, current=4, state=up.state)
    assert (held.desired, held.bound_by, held.down_stabilized) == (4, BoundBy.STABILIZE, True)
    assert held.requeue_after == pytest.approx(30)  # the window's end, before the floor's next change
    released = _decide(_metrics(1), _floor(None), now=NOW + 61, current=4, state=held.state)
    assert (released.desired, released.write) == (1, True)


def test_the_requeue_is_the_floors_next_change() -> None:
    d = _decide(_metrics(4), _floor(4, next_change=NOW + 90))
    assert d.requeue_after == pytest.approx(90)
    assert _decide(_metrics(4), None).requeue_after is None


def test_the_rate_band_lets_the_floor_through_at_once() -> None:
    # apa at 1 replica with scaleUpRate 2: the band allows at most 2 this step
    rec = _metrics(2, uncapped=2, rate_band=(1, 2))
    d = _decide(rec, _floor(5))
    assert d.desired == 5
    assert d.bound_by is BoundBy.FLOOR


def test_the_floor_keeps_an_idle_activation_scaler_warm() -> None:
    behavior = Behavior(min_replicas=0, max_replicas=10, scale_down_stabilization_seconds=0)
    idle = ActivationState(threshold=5.0, readings=(ActivationReading("q", 0.0),))
    d = _decide(_metrics(0, activation=idle), _floor(2), current=2, behavior=behavior)
    assert d.desired == 2
    names = [s.name for s in d.steps]
    assert names.index("activation") < names.index("floor")
    assert _decide(_metrics(0, activation=idle), _floor(None), current=2, behavior=behavior).desired == 0


def test_without_a_decision_the_held_count_is_lifted_to_the_floor() -> None:
    d = _decide(RecommendResult.no_decision("metrics", "HTTP 503"), _floor(4), current=2)
    assert (d.desired, d.write, d.bound_by) == (4, True, BoundBy.FLOOR)
    assert d.state.history == ()  # the history is not touched without a decision


def test_the_schedule_floor_condition() -> None:
    now_iso = "2026-03-10T12:00:00Z"
    conds, _ = conditions_for(SyncOutcome(decision=_decide(_metrics(1), _floor(4))), 1, now_iso, [])
    floor = next(c for c in conds if c.type == SCHEDULE_FLOOR)
    assert (floor.status, floor.reason) == ("True", FLOOR_ACTIVE)
    assert floor.message == "Tidal office-hours: floor 4 replicas (rules office)"
    missing = FloorState("gone", None, problem="Tidal 'gone' (spec.floorFrom.name) not found in the scaler's "
                                               "namespace: no floor", reason=TIDAL_NOT_FOUND)
    conds, _ = conditions_for(SyncOutcome(decision=_decide(_metrics(3), missing)), 1, now_iso, conds)
    floor = next(c for c in conds if c.type == SCHEDULE_FLOOR)
    assert (floor.status, floor.reason) == ("False", TIDAL_NOT_FOUND)
    conds, _ = conditions_for(SyncOutcome(decision=_decide(_metrics(3), None)), 1, now_iso, conds)
    assert SCHEDULE_FLOOR not in [c.type for c in conds]
