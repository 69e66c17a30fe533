"""What bound a decision (issue 8, items 9 and 5).

* ``Decision.bound_by`` is the ``BoundBy`` enum of the model (``status.recentDecisions[].boundBy``,
  shown by ``kubectl explain``): RateLimit, Stabilize, StepLimit, Clamp, Guard, Paused,
  PausedReplicas — never the old lowercase step names (``stabilize``, ``scaleUpLimit``,
  ``minReplicas``, ...). ``Decision.limited_by`` keeps the finer ScalingLimited reason.
* The algorithm's own rate cap (apa ``scaleUpRate``/``scaleDownRate``) is visible: given
  ``RecommendResult.uncapped``, ``decide`` adds a ``rateLimit`` step, ScalingLimited says
  ScaleUpLimit/ScaleDownLimit (unless a later step changes the count), and ``explain_lines`` shows
  the step.

The expected values are the enum's wire strings, so these tests fail on behaviour (not on an
import) against a pipeline that writes other values.
"""

from __future__ import annotations

import pytest

from escaler.api.scaler import RecentDecision
from escaler.scaling import (
    Behavior,
    PipelineInput,
    PipelineState,
    RecommendResult,
    SyncOutcome,
    TargetSnapshot,
    conditions_for,
    decide,
    explain_lines,
)
from escaler.scaling.pipeline import Decision

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WIRE_VALUES = {"RateLimit", "Stabilize", "StepLimit", "Clamp", "Guard", "Paused", "PausedReplicas"}


def run(replicas: int, current: int = 4, *, uncapped: int | None = None, lo: int = 1, hi: int = 10,
        history: tuple[tuple[float, int], ...] = (), target: TargetSnapshot | None = None,
        paused: bool = False, paused_replicas: int | None = None, **behavior: object) -> Decision:
    extra = {} if uncapped is None else {"uncapped": uncapped}
    rec = RecommendResult.from_metrics(replicas, evaluated=1, total=1, **extra)  # type: ignore[arg-type]
    return decide(PipelineInput(
        now=NOW, current_replicas=current, recommend=rec,
        behavior=Behavior(min_replicas=lo, max_replicas=hi, **behavior),  # type: ignore[arg-type]
        target=target, state=PipelineState.of(history), paused=paused, paused_replicas=paused_replicas))


def rolling() -> TargetSnapshot:
    return TargetSnapshot(spec_replicas=4, rollout_in_progress=True, rollout_message="generation 2 > 1")


# ---------------------------------------------------------------- item 9: one enum

# (id, decide kwargs, bound_by wire value, limited_by)
BOUND: list[tuple[str, dict[str, object], str | None, str | None]] = [
    ("nothing", {"replicas": 7}, None, None),
    ("stabilize", {"replicas": 2, "history": ((NOW - 60, 4),)}, "Stabilize", None),
    ("step-limit-up", {"replicas": 9, "scale_up_max_pods": 2}, "StepLimit", "ScaleUpLimit"),
    ("step-limit-down", {"replicas": 1, "current": 8, "scale_down_max_pods": 3}, "StepLimit",
     "ScaleDownLimit"),
    ("clamp-max", {"replicas": 14}, "Clamp", "TooManyReplicas"),
    ("clamp-min", {"replicas": 0, "lo": 2}, "Clamp", "TooFewReplicas"),
    ("guard", {"replicas": 7, "target": "rolling"}, "Guard", None),
    ("guard-after-clamp", {"replicas": 14, "target": "rolling"}, "Guard", "TooManyReplicas"),
    ("paused", {"replicas": 9, "paused": True}, "Paused", None),
    ("paused-replicas", {"replicas": 9, "paused_replicas": 2}, "PausedReplicas", None),
]


@pytest.mark.parametrize(("kwargs", "bound_by", "limited_by"), [b[1:] for b in BOUND],
                         ids=[b[0] for b in BOUND])
def test_bound_by_is_the_model_enum(kwargs: dict[str, object], bound_by: str | None,
                                    limited_by: str | None) -> None:
    if kwargs.get("target") == "rolling":
        kwargs = {**kwargs, "target": rolling()}
    d = run(**kwargs)  # type: ignore[arg-type]
    assert (d.bound_by, d.limited_by) == (bound_by, limited_by)
    assert bound_by is None or bound_by in WIRE_VALUES
    # the value goes into status as is, and the model (the CRD enum) accepts it
    recorded = RecentDecision.model_validate({"time": "2026-01-01T00:00:00Z", "from": 4, "to": d.desired,
                                              "reason": d.reason, "boundBy": d.bound_by})
    assert recorded.model_dump(by_alias=True, mode="json").get("boundBy") == bound_by


def test_explain_lines_show_the_bound_by_value() -> None:
    lines = explain_lines(run(9, scale_up_max_pods=2))
    assert "3. stepLimit: 9 -> 6: limited to 6 by the scale-up step limit (2 per sync) [bound: StepLimit]" \
        in lines
    assert "bound by: StepLimit; ScalingLimited: ScaleUpLimit" in lines


# ---------------------------------------------------------------- item 5: the algorithm's rate cap


# (id, decide kwargs, steps, desired, bound_by, limited_by)
RATE: list[tuple[str, dict[str, object], list[tuple[str, int | None, int | None]], int, str | None,
                 str | None]] = [
    ("up-cap-binds", {"replicas": 8, "uncapped": 12},
     [("recommend", None, 12), ("rateLimit", 12, 8), ("stabilize", 8, 8), ("stepLimit", 8, 8),
      ("clamp", 8, 8), ("write", 4, 8)], 8, "RateLimit", "ScaleUpLimit"),
    ("down-cap-binds", {"replicas": 5, "current": 10, "uncapped": 2},
     [("recommend", None, 2), ("rateLimit", 2, 5), ("stabilize", 5, 5), ("stepLimit", 5, 5),
      ("clamp", 5, 5), ("write", 10, 5)], 5, "RateLimit", "ScaleDownLimit"),
    ("uncapped-equal-no-step", {"replicas": 7, "uncapped": 7},
     [("recommend", None, 7), ("stabilize", 7, 7), ("stepLimit", 7, 7), ("clamp", 7, 7), ("write", 4, 7)],
     7, None, None),
    # a later step that changes the count wins: the step limit cuts 8 to 6
    ("step-limit-after-cap", {"replicas": 8, "uncapped": 12, "scale_up_max_pods": 2},
     [("recommend", None, 12), ("rateLimit", 12, 8), ("stabilize", 8, 8), ("stepLimit", 8, 6),
      ("clamp", 6, 6), ("write", 4, 6)], 6, "StepLimit", "ScaleUpLimit"),
    ("clamp-after-cap", {"replicas": 8, "uncapped": 12, "hi": 6},
     [("recommend", None, 12), ("rateLimit", 12, 8), ("stabilize", 8, 8), ("stepLimit", 8, 8),
      ("clamp", 8, 6), ("write", 4, 6)], 6, "Clamp", "TooManyReplicas"),
    # the scale-down window undoes the scale-down cap: the cap no longer bound the count
    ("stabilize-after-cap", {"replicas": 5, "current": 10, "uncapped": 2, "history": ((NOW - 60, 10),)},
     [("recommend", None, 2), ("rateLimit", 2, 5), ("stabilize", 5, 10), ("stepLimit", 10, 10),
      ("clamp", 10, 10), ("write", 10, 10)], 10, "Stabilize", None),
]


@pytest.mark.parametrize(("kwargs", "steps", "desired", "bound_by", "limited_by"), [r[1:] for r in RATE],
                         ids=[r[0] for r in RATE])
def test_rate_cap_is_its_own_step(kwargs: dict[str, object], steps: list[tuple[str, int | None, int | None]],
                                  desired: int, bound_by: str | None, limited_by: str | None) -> None:
    d = run(**kwargs)  # type: ignore[arg-type]
    assert [(s.name, s.before, s.after) for s in d.steps] == steps
    assert (d.desired, d.bound_by, d.limited_by) == (desired, bound_by, limited_by)


def test_rate_cap_is_reported_by_scaling_limited_and_explain() -> None:
    d = run(8, uncapped=12)
    conds, events = conditions_for(SyncOutcome(decision=d), 3, "2026-01-01T00:00:00Z", [])
    by_type = {c.type: c for c in conds}
    active, limited = by_type["ScalingActive"], by_type["ScalingLimited"]
    # ScalingActive says what the metrics recommend; ScalingLimited says the algorithm's rate bound it
    assert (active.status, active.reason, active.message) == (
        "True", "MetricsAvailable", "evaluated 1 of 1 metrics; recommends 12 replicas")
    assert (limited.status, limited.reason, limited.message) == (
        "True", "ScaleUpLimit",
        "the desired replica count is increasing faster than the algorithm's scale-up rate; capped from 12 "
        "to 8")
    assert events[0].note == ("New size: 8; reason: evaluated 1 of 1 metrics; recommends 12 replicas; capped "
                              "to 8 by the algorithm's scale-up rate (recommended 12)")
    lines = explain_lines(d)
    assert lines[1] == "1. recommend: 12: evaluated 1 of 1 metrics; recommends 12 replicas"
    assert lines[2] == ("2. rateLimit: 12 -> 8: capped to 8 by the algorithm's scale-up rate "
                        "(recommended 12) [bound: RateLimit]")
    assert "bound by: RateLimit; ScalingLimited: ScaleUpLimit" in lines


def test_rate_cap_down_message() -> None:
    d = run(5, current=10, uncapped=2)
    conds, _ = conditions_for(SyncOutcome(decision=d), 3, "2026-01-01T00:00:00Z", [])
    limited = next(c for c in conds if c.type == "ScalingLimited")
    assert (limited.reason, limited.message) == (
        "ScaleDownLimit",
        "the desired replica count is decreasing faster than the algorithm's scale-down rate; capped from 2 "
        "to 5")


def test_stabilization_history_keeps_the_capped_count() -> None:
    # the pipeline stabilizes what the algorithm returned (the capped count), not the raw one
    d = run(8, uncapped=12)
    assert [r.replicas for r in d.state.history] == [8]


@pytest.mark.parametrize(
    "kwargs",
    [{"uncapped": -1, "replicas": 2}, {"uncapped": 3, "unavailable": "down"},
     {"uncapped": True, "replicas": 2}],
    ids=["negative", "without-replicas", "bool"],
)
def test_uncapped_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="uncapped"):
        RecommendResult(**kwargs)  # type: ignore[arg-type]
