"""The condition model (docs/concepts.md#conditions-and-health): every row of the condition table produced by
some sync and asserted (type, status, reason, message, observedGeneration); AbleToScale precedence;
ScalingLimited update rules; target-error paths; lastTransitionTime; DecisionAvailable mirror; events; health.
(MetricsPipeline on failing reads and target errors vs Validated: test_scaling_condition_rules.py;
one condition at a time: test_scaling_condition_engine.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from escaler.api.conditions import Condition
from escaler.scaling import (
    Behavior,
    ConditionValue,
    Decision,
    EventValue,
    PipelineInput,
    PipelineState,
    RecommendResult,
    SyncOutcome,
    TargetError,
    TargetSnapshot,
    Validation,
    conditions_for,
    decide,
    health,
)
from escaler.scaling.conditions import (
    ABLE_TO_SCALE,
    DECISION_AVAILABLE,
    METRICS_PIPELINE,
    SCALING_ACTIVE,
    SCALING_DEFERRED,
    SCALING_LIMITED,
    VALIDATED,
)
from escaler.scaling.text import TRUNCATED

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GEN = 7
T_OLD = "2025-12-31T00:00:00Z"
T_NOW = "2026-01-01T00:00:00Z"


def metrics(n: int, k: int = 1, m: int = 1, **kw: object) -> RecommendResult:
    return RecommendResult.from_metrics(n, evaluated=k, total=m, **kw)  # type: ignore[arg-type]


def dec(rec: RecommendResult | int, current: int = 4, *, lo: int = 1, hi: int = 10,
        history: tuple[tuple[float, int], ...] = (), deferred_since: float | None = None,
        target: TargetSnapshot | None = None, paused: bool = False, paused_replicas: int | None = None,
        advisory: bool = False, **behavior: object) -> Decision:
    return decide(PipelineInput(
        now=NOW, current_replicas=current, recommend=metrics(rec) if isinstance(rec, int) else rec,
        behavior=Behavior(min_replicas=lo, max_replicas=hi, **behavior),  # type: ignore[arg-type]
        target=target, state=PipelineState.of(history, deferred_since), paused=paused,
        paused_replicas=paused_replicas, advisory=advisory))


def rolling(spec: int = 4) -> TargetSnapshot:
    return TargetSnapshot(spec_replicas=spec, rollout_in_progress=True,
                          rollout_message="status.observedGeneration 1 < metadata.generation 2")


def settling(spec: int = 4, status_replicas: int = 6) -> TargetSnapshot:
    return TargetSnapshot(spec_replicas=spec, status_replicas=status_replicas, settling_scale_down=True)


def pending(spec: int = 4) -> TargetSnapshot:
    return TargetSnapshot(spec_replicas=spec, unschedulable_pods=1,
                          unschedulable_message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")


def out(d: Decision | None = None, **kw: object) -> SyncOutcome:
    return SyncOutcome(decision=d, **kw)  # type: ignore[arg-type]


def run(outcome: SyncOutcome, previous: list[ConditionValue] | None = None,
        ) -> tuple[dict[str, ConditionValue], list[EventValue]]:
    conds, events = conditions_for(outcome, GEN, T_NOW, previous or [])
    return {c.type: c for c in conds}, events


def cond(ctype: str, status: str, reason: str, gen: int = 1, at: str = T_OLD,
         message: str = "old") -> ConditionValue:
    return ConditionValue(ctype, status, reason, message, gen, at)


HISTORY_HIGH = ((NOW - 60, 10),)

# ---------------------------------------------------------------- the table, row by row

# (id, outcome, type, status, reason, message fragment)
ROWS: list[tuple[str, SyncOutcome, str, str, str, str]] = [
    # ScalingActive
    ("active-metrics-available", out(dec(metrics(7, 2, 3))), SCALING_ACTIVE, "True", "MetricsAvailable",
     "evaluated 2 of 3 metrics; recommends 7 replicas"),
    ("active-decision-received", out(dec(RecommendResult.from_decision(5, source="Tidal default/night"))),
     SCALING_ACTIVE, "True", "DecisionReceived", "received a decision from Tidal default/night: 5 replicas"),
    ("active-decision-unavailable",
     out(dec(RecommendResult.no_decision("prometheus http://p:9090", "connection refused", total=2))),
     SCALING_ACTIVE, "False", "DecisionUnavailable", "prometheus http://p:9090: connection refused"),
    ("active-custom-no-decision",
     out(dec(RecommendResult.no_decision("custom provider returned no decision", "HTTP 503",
                                         kind="Decision"))),
     SCALING_ACTIVE, "False", "DecisionUnavailable", "custom provider returned no decision: HTTP 503"),
    ("active-invalid-spec",
     out(dec(RecommendResult.invalid("spec.customProvider: required when metricProvider is Custom"))),
     SCALING_ACTIVE, "False", "InvalidSpec", "spec.customProvider: required"),
    ("active-invalid-spec-from-validation",
     out(validation=Validation("AlgorithmNotRegistered", "scaling algorithm 'x' is not registered")),
     SCALING_ACTIVE, "False", "InvalidSpec", "scaling algorithm 'x' is not registered"),
    ("active-scaling-disabled",
     out(dec(metrics(3, can_scale_from_zero=False), current=0)), SCALING_ACTIVE, "False", "ScalingDisabled",
     "replica count of the target is zero"),
    # AbleToScale
    ("able-synced-write", out(dec(7)), ABLE_TO_SCALE, "True", "Synced", "at the desired count (7)"),
    ("able-synced-no-op", out(dec(4)), ABLE_TO_SCALE, "True", "Synced", "at the desired count (4)"),
    ("able-rollout-in-progress", out(dec(7, target=rolling())), ABLE_TO_SCALE, "True", "RolloutInProgress",
     "holding the write 4 -> 7 since 2026-01-01T00:00:00Z; forced at 2026-01-01T00:10:00Z"),
    ("able-scale-down-settling", out(dec(2, target=settling())), ABLE_TO_SCALE,
     "True", "ScaleDownSettling", "status.replicas 6 > spec.replicas 4"),
    ("able-insufficient-capacity-hold", out(dec(7, target=pending())), ABLE_TO_SCALE, "True",
     "InsufficientCapacity",
     "nvidia.com/gpu.; a scale-up waits for them, a scale-down does not; holding the write 4 -> 7"),
    ("able-insufficient-capacity-report", out(dec(4, target=pending())), ABLE_TO_SCALE, "True",
     "InsufficientCapacity", "1 pod of the target Pending as Unschedulable: 0/3 nodes are available"),
    ("able-deferral-timed-out", out(dec(7, target=rolling(), deferred_since=NOW - 600)), ABLE_TO_SCALE,
     "True", "DeferralTimedOut", "the held write 4 -> 7 was forced after deferTimeoutSeconds 600"),
    ("able-scale-down-stabilized", out(dec(2, current=10, history=HISTORY_HIGH)), ABLE_TO_SCALE, "True",
     "ScaleDownStabilized", "applying the highest recent recommendation (10 over 2, window 300s)"),
    ("able-paused", out(dec(9, paused=True)), ABLE_TO_SCALE, "True", "Paused",
     "paused by elasticscaler.io/paused"),
    ("able-paused-replicas", out(dec(9, paused_replicas=3)), ABLE_TO_SCALE, "True", "Paused",
     "pinned to 3 replicas by elasticscaler.io/paused-replicas"),
    ("able-invalid-spec",
     out(target_error=TargetError("InvalidSpec", "targetRef.apiVersion 'a/b/c': unparsable")),
     ABLE_TO_SCALE, "False", "InvalidSpec", "unparsable"),
    ("able-target-not-found", out(target_error=TargetError("TargetNotFound", "deployments/llama not found")),
     ABLE_TO_SCALE, "False", "TargetNotFound", "not found"),
    ("able-target-unreadable", out(target_error=TargetError("TargetUnreadable", "GET scale: 500")),
     ABLE_TO_SCALE, "False", "TargetUnreadable", "GET scale: 500"),
    ("able-target-write-failed", out(dec(7), target_error=TargetError("TargetWriteFailed", "409 conflict")),
     ABLE_TO_SCALE, "False", "TargetWriteFailed", "409 conflict"),
    # ScalingLimited
    ("limited-too-few", out(dec(0, lo=2)), SCALING_LIMITED, "True", "TooFewReplicas", "minReplicas 2"),
    ("limited-too-many", out(dec(14)), SCALING_LIMITED, "True", "TooManyReplicas", "maxReplicas 10"),
    ("limited-scale-up", out(dec(9, scale_up_max_pods=2)), SCALING_LIMITED, "True", "ScaleUpLimit",
     "(2 per sync); limited to 6"),
    ("limited-scale-down", out(dec(1, current=8, scale_down_max_pods=3)), SCALING_LIMITED, "True",
     "ScaleDownLimit", "(3 per sync); limited to 5"),
    ("limited-within-range", out(dec(7)), SCALING_LIMITED, "False", "DesiredWithinRange", "[1, 10]"),
    # Validated
    ("validated-valid", out(dec(7), validation=Validation()), VALIDATED, "True", "Valid", "valid"),
    ("validated-invalid-spec", out(validation=Validation("InvalidSpec", "spec.trigger: exactly one")),
     VALIDATED, "False", "InvalidSpec", "spec.trigger: exactly one"),
    ("validated-target-conflict",
     out(validation=Validation("TargetConflict", "Deployment llama is managed by ElasticScaler default/a")),
     VALIDATED, "False", "TargetConflict", "managed by ElasticScaler default/a"),
    ("validated-algorithm-not-registered",
     out(validation=Validation("AlgorithmNotRegistered", "scaling algorithm 'x' is not registered")),
     VALIDATED, "False", "AlgorithmNotRegistered", "'x'"),
    ("validated-unsupported-metric",
     out(validation=Validation("UnsupportedMetric", "ExternalServer is not supported with HPA")),
     VALIDATED, "False", "UnsupportedMetric", "ExternalServer"),
    ("validated-target-chain-invalid",
     out(validation=Validation("TargetChainInvalid", "spec.targetRef: cycle a -> b -> a")),
     VALIDATED, "False", "TargetChainInvalid", "cycle"),
    # MetricsPipeline
    ("pipeline-all-metrics", out(dec(metrics(7, 3, 3))), METRICS_PIPELINE, "True", "AllMetricsAvailable",
     "all 3 metrics available"),
    ("pipeline-partial", out(dec(metrics(7, 2, 3, metric_errors=("mem: connection refused",)))),
     METRICS_PIPELINE, "False", "PartialMetrics",
     "1 of 3 metric reads failed this sync; failing: mem: connection refused"),
    ("pipeline-partial-not-evaluated", out(dec(metrics(7, 2, 3))), METRICS_PIPELINE, "False",
     "PartialMetrics", "2 of 3 metrics available"),
    ("pipeline-no-metrics",
     out(dec(RecommendResult.no_decision("metrics", "no usable metric", total=2))), METRICS_PIPELINE,
     "False", "NoMetrics", "none of 2 metrics available"),
]


@pytest.mark.parametrize(("outcome", "ctype", "status", "reason", "fragment"), [r[1:] for r in ROWS],
                         ids=[r[0] for r in ROWS])
def test_condition_table_row(outcome: SyncOutcome, ctype: str, status: str, reason: str,
                             fragment: str) -> None:
    conds, _ = run(outcome)
    c = conds[ctype]
    assert (c.status, c.reason, c.observed_generation) == (status, reason, GEN)
    assert fragment in c.message, c.message
    assert c.last_transition_time == T_NOW


def test_every_table_reason_is_covered() -> None:
    covered = {(r[2], r[3], r[4]) for r in ROWS}
    table = {
        (SCALING_ACTIVE, "True", "MetricsAvailable"), (SCALING_ACTIVE, "True", "DecisionReceived"),
        (SCALING_ACTIVE, "False", "DecisionUnavailable"), (SCALING_ACTIVE, "False", "InvalidSpec"),
        (SCALING_ACTIVE, "False", "ScalingDisabled"),
        (ABLE_TO_SCALE, "True", "Synced"), (ABLE_TO_SCALE, "True", "RolloutInProgress"),
        (ABLE_TO_SCALE, "True", "ScaleDownSettling"), (ABLE_TO_SCALE, "True", "DeferralTimedOut"),
        (ABLE_TO_SCALE, "True", "InsufficientCapacity"),
        (ABLE_TO_SCALE, "True", "ScaleDownStabilized"), (ABLE_TO_SCALE, "True", "Paused"),
        (ABLE_TO_SCALE, "False", "InvalidSpec"), (ABLE_TO_SCALE, "False", "TargetNotFound"),
        (ABLE_TO_SCALE, "False", "TargetUnreadable"), (ABLE_TO_SCALE, "False", "TargetWriteFailed"),
        (SCALING_LIMITED, "True", "TooFewReplicas"), (SCALING_LIMITED, "True", "TooManyReplicas"),
        (SCALING_LIMITED, "True", "ScaleUpLimit"), (SCALING_LIMITED, "True", "ScaleDownLimit"),
        (SCALING_LIMITED, "False", "DesiredWithinRange"),
        (VALIDATED, "True", "Valid"), (VALIDATED, "False", "InvalidSpec"),
        (VALIDATED, "False", "TargetConflict"),
        (VALIDATED, "False", "AlgorithmNotRegistered"), (VALIDATED, "False", "UnsupportedMetric"),
        (VALIDATED, "False", "TargetChainInvalid"),
        (METRICS_PIPELINE, "True", "AllMetricsAvailable"), (METRICS_PIPELINE, "False", "PartialMetrics"),
        (METRICS_PIPELINE, "False", "NoMetrics"),
    }
    assert table <= covered


def test_decision_unavailable_message_caps_the_error_body() -> None:
    body = "<html>" + "x" * 40_000 + "</html>"
    conds, events = run(out(dec(RecommendResult.no_decision("prometheus http://p:9090", body))))
    msg = conds[SCALING_ACTIVE].message
    assert msg.startswith("prometheus http://p:9090: <html>") and msg.endswith(TRUNCATED)
    assert len(msg.encode()) <= 1024 + len("prometheus http://p:9090: ")
    assert events[0].note == msg


# ---------------------------------------------------------------- AbleToScale precedence


@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        # a settle guard wins over the stabilization window (the window kept 4 over 2; the write is held)
        (dec(2, current=6, history=((NOW - 60, 4),), target=settling(6, 8)), "ScaleDownSettling"),
        (dec(2, current=6, history=((NOW - 60, 4),), target=rolling(6)), "RolloutInProgress"),
        # a forced write wins over the stabilization window
        (dec(2, current=6, history=((NOW - 60, 4),), target=rolling(6), deferred_since=NOW - 600),
         "DeferralTimedOut"),
        # the window wins over Synced even when it lets part of the scale-down through (6 → 4, not 2)
        (dec(2, current=6, history=((NOW - 60, 4),)), "ScaleDownStabilized"),
        (dec(2, current=6), "Synced"),
        # scale-up stabilization is not a hold reason
        (dec(8, history=((NOW - 30, 4),), scale_up_stabilization_seconds=60), "Synced"),
        # paused bypasses guards and windows
        (dec(2, current=6, history=((NOW - 60, 4),), target=rolling(6), paused=True), "Paused"),
        # Unschedulable pods: a held scale-up is a guard; the window wins over the report; a write is Synced
        (dec(7, target=pending()), "InsufficientCapacity"),
        (dec(2, current=6, history=((NOW - 60, 6),), target=pending(6)), "ScaleDownStabilized"),
        (dec(2, current=6, target=pending(6)), "Synced"),
        (dec(9, target=pending(), paused=True), "Paused"),
    ],
    ids=["settling-over-stabilized", "rollout-over-stabilized", "timed-out-over-stabilized",
         "stabilized-over-synced", "synced", "up-window-is-synced", "paused-over-all",
         "capacity-hold", "stabilized-over-capacity-report", "write-is-synced", "paused-over-capacity"],
)
def test_able_to_scale_precedence(decision: Decision, reason: str) -> None:
    conds, _ = run(out(decision))
    assert conds[ABLE_TO_SCALE].reason == reason and conds[ABLE_TO_SCALE].status == "True"


# ---------------------------------------------------------------- ScalingLimited update rules


PREVIOUS_FULL = [
    cond(SCALING_ACTIVE, "True", "MetricsAvailable"),
    cond(ABLE_TO_SCALE, "True", "Synced"),
    cond(SCALING_LIMITED, "True", "TooManyReplicas"),
    cond(VALIDATED, "True", "Valid"),
    cond(METRICS_PIPELINE, "True", "AllMetricsAvailable"),
]


@pytest.mark.parametrize(
    "decision",
    [dec(RecommendResult.no_decision("prometheus", "down")), dec(RecommendResult.invalid("bad")),
     dec(metrics(3, can_scale_from_zero=False), current=0), dec(14, paused=True), dec(14, paused_replicas=2)],
    ids=["unavailable", "invalid-spec", "scaling-disabled", "paused", "pinned"],
)
def test_scaling_limited_left_alone_unless_scaling_active_decides(decision: Decision) -> None:
    conds, _ = run(out(decision), PREVIOUS_FULL)
    assert conds[SCALING_LIMITED] == PREVIOUS_FULL[2]  # untouched, old generation included


def test_scaling_limited_updates_when_active() -> None:
    conds, _ = run(out(dec(7)), PREVIOUS_FULL)
    c = conds[SCALING_LIMITED]
    assert (c.status, c.reason, c.observed_generation, c.last_transition_time) == (
        "False", "DesiredWithinRange", GEN, T_NOW)


# ---------------------------------------------------------------- target errors


@pytest.mark.parametrize("reason", ["InvalidSpec", "TargetNotFound", "TargetUnreadable"])
def test_target_read_error_only_touches_able_to_scale(reason: str) -> None:
    # a validation passed along is ignored: a target error never touches Validated
    conds, events = run(out(target_error=TargetError(reason, "boom"), validation=Validation()), PREVIOUS_FULL)
    for prev in PREVIOUS_FULL:
        if prev.type != ABLE_TO_SCALE:
            assert conds[prev.type] == prev
    able = conds[ABLE_TO_SCALE]
    assert (able.status, able.reason, able.message, able.observed_generation, able.last_transition_time) == (
        "False", reason, "boom", GEN, T_NOW)
    assert events == [EventValue("Warning", "FailedGetScale", "boom")]


def test_target_read_error_on_first_sync_writes_only_able_to_scale() -> None:
    conds, _ = run(out(target_error=TargetError("TargetNotFound", "gone")))
    assert list(conds) == [ABLE_TO_SCALE]


def test_target_write_failure_persists_what_was_computed() -> None:
    d = dec(14)
    conds, events = run(out(d, target_error=TargetError("TargetWriteFailed", "409 conflict")), PREVIOUS_FULL)
    assert conds[SCALING_ACTIVE].observed_generation == GEN
    limited = conds[SCALING_LIMITED]
    assert (limited.reason, limited.observed_generation) == ("TooManyReplicas", GEN)
    assert conds[METRICS_PIPELINE].observed_generation == GEN
    assert conds[ABLE_TO_SCALE].reason == "TargetWriteFailed"
    assert conds[VALIDATED] == PREVIOUS_FULL[3]
    assert [e.reason for e in events] == ["FailedRescale"]
    assert events[0].note.startswith("New size: 10; reason: evaluated 1 of 1 metrics") and \
        events[0].note.endswith("error: 409 conflict")


def test_target_error_messages_are_capped() -> None:
    assert TargetError("TargetUnreadable", "e" * 5000).message.endswith(TRUNCATED)


def test_sync_outcome_rejects_inconsistent_errors() -> None:
    with pytest.raises(ValueError, match="read error"):
        SyncOutcome(decision=dec(7), target_error=TargetError("TargetNotFound", "x"))
    with pytest.raises(ValueError, match="TargetWriteFailed"):
        SyncOutcome(target_error=TargetError("TargetWriteFailed", "x"))
    with pytest.raises(ValueError, match="reason"):
        TargetError("Boom", "x")
    with pytest.raises(ValueError, match="reason"):
        Validation("Broken", "x")
    with pytest.raises(ValueError, match="generation"):
        conditions_for(out(dec(7)), -1, T_NOW, [])


# ---------------------------------------------------------------- transitions, ordering, mirrors


def test_last_transition_time_kept_while_status_is_unchanged() -> None:
    previous = [cond(ABLE_TO_SCALE, "True", "Synced", at=T_OLD),
                cond(SCALING_ACTIVE, "True", "MetricsAvailable")]
    conds, _ = run(out(dec(7, target=rolling())), previous)  # Synced → RolloutInProgress: still True
    able = conds[ABLE_TO_SCALE]
    assert (able.reason, able.last_transition_time) == ("RolloutInProgress", T_OLD)
    assert conds[ABLE_TO_SCALE].observed_generation == GEN
    assert conds[SCALING_ACTIVE].last_transition_time == T_OLD
    conds, _ = run(out(dec(RecommendResult.no_decision("p", "down"))), previous)  # True → False
    assert conds[SCALING_ACTIVE].last_transition_time == T_NOW


def test_an_unchanged_sync_gives_an_equal_list() -> None:
    outcome = out(dec(14), validation=Validation())
    first, _ = conditions_for(outcome, GEN, T_NOW, [])
    second, _ = conditions_for(outcome, GEN, "2026-01-01T00:05:00Z", first)
    assert second == first
    assert [c.type for c in first] == [SCALING_ACTIVE, ABLE_TO_SCALE, SCALING_LIMITED, VALIDATED,
                                       METRICS_PIPELINE]


def test_stale_scaling_deferred_removed_and_foreign_types_kept() -> None:
    foreign = cond("example.com/Custom", "True", "Whatever")
    previous = [foreign, cond(SCALING_DEFERRED, "True", "Deferred")]
    conds, _ = conditions_for(out(dec(7)), GEN, T_NOW, previous)
    assert SCALING_DEFERRED not in {c.type for c in conds}
    assert conds[-1] == foreign
    # even a sync that writes only AbleToScale drops it
    conds, _ = conditions_for(out(target_error=TargetError("TargetNotFound", "x")), GEN, T_NOW, previous)
    assert [c.type for c in conds] == [ABLE_TO_SCALE, "example.com/Custom"]


def test_decision_available_mirrors_scaling_active_exactly() -> None:
    previous = [cond(SCALING_ACTIVE, "False", "DecisionUnavailable", at=T_OLD),
                cond(DECISION_AVAILABLE, "False", "DecisionUnavailable", at="2020-01-01T00:00:00Z")]
    for decision in (dec(7), dec(RecommendResult.no_decision("custom provider returned no decision", "x",
                                                             kind="Decision"))):
        conds, _ = run(out(decision, decision_available=True), previous)
        active, mirror = conds[SCALING_ACTIVE], conds[DECISION_AVAILABLE]
        assert (mirror.status, mirror.reason, mirror.message, mirror.observed_generation,
                mirror.last_transition_time) == (active.status, active.reason, active.message,
                                                 active.observed_generation, active.last_transition_time)
    # ElasticScaler: no mirror
    conds, _ = run(out(dec(7)))
    assert DECISION_AVAILABLE not in conds
    # a read error leaves both untouched
    conds, _ = run(out(target_error=TargetError("TargetNotFound", "x"), decision_available=True), previous)
    assert conds[DECISION_AVAILABLE] == previous[1]


def test_switching_to_a_decision_provider_removes_metrics_pipeline() -> None:
    decision = dec(RecommendResult.from_decision(3, source="custom provider http://slo"))
    conds, _ = run(out(decision), PREVIOUS_FULL)
    assert METRICS_PIPELINE not in conds
    assert conds[SCALING_ACTIVE].reason == "DecisionReceived"


def test_target_conflict_does_not_touch_scaling_active() -> None:
    conds, events = run(out(validation=Validation("TargetConflict", "owned by ElasticScaler default/a")),
                        PREVIOUS_FULL)
    assert conds[SCALING_ACTIVE] == PREVIOUS_FULL[0] and conds[ABLE_TO_SCALE] == PREVIOUS_FULL[1]
    assert events == [EventValue("Warning", "TargetConflict", "owned by ElasticScaler default/a")]
    assert health(list(conds.values())) == "failing"


# ---------------------------------------------------------------- events


# (id, outcome, [(type, reason, note fragment)])
EVENTS: list[tuple[str, SyncOutcome, list[tuple[str, str, str]]]] = [
    ("successful-rescale", out(dec(14)),
     [("Normal", "SuccessfulRescale",
       "New size: 10; reason: evaluated 1 of 1 metrics; recommends 14 replicas; capped at maxReplicas 10")]),
    ("no-op-no-event", out(dec(4)), []),
    ("scaling-deferred-first-hold", out(dec(7, target=rolling())),
     [("Normal", "ScalingDeferred", "holding the write 4 -> 7: RolloutInProgress")]),
    ("scaling-deferred-once", out(dec(7, target=rolling(), deferred_since=NOW - 60)), []),
    ("deferral-timed-out", out(dec(7, target=rolling(), deferred_since=NOW - 600)),
     [("Warning", "DeferralTimedOut", "New size: 7; reason: the write held by RolloutInProgress since "
                                      "2025-12-31T23:50:00Z was forced after deferTimeoutSeconds 600")]),
    ("failed-get-scale", out(target_error=TargetError("TargetUnreadable", "GET scale: 500")),
     [("Warning", "FailedGetScale", "GET scale: 500")]),
    ("failed-rescale", out(dec(7), target_error=TargetError("TargetWriteFailed", "409")),
     [("Warning", "FailedRescale", "New size: 7; reason: ")]),
    ("failed-compute-unavailable", out(dec(RecommendResult.no_decision("prometheus", "timeout"))),
     [("Warning", "FailedComputeMetricsReplicas", "prometheus: timeout")]),
    ("failed-compute-invalid", out(dec(RecommendResult.invalid("spec.x: bad"))),
     [("Warning", "FailedComputeMetricsReplicas", "spec.x: bad")]),
    ("failed-compute-and-rescale-to-min",
     out(dec(RecommendResult.no_decision("prometheus", "timeout"), current=1, lo=2)),
     [("Warning", "FailedComputeMetricsReplicas", "timeout"),
      ("Normal", "SuccessfulRescale", "New size: 2; reason: no decision (prometheus: timeout); holding 1; "
                                      "raised to minReplicas 2")]),
    ("target-conflict", out(validation=Validation("TargetConflict", "owned elsewhere")),
     [("Warning", "TargetConflict", "owned elsewhere")]),
    ("pinned-rescale", out(dec(9, paused_replicas=2)),
     [("Normal", "SuccessfulRescale", "New size: 2; reason: evaluated 1 of 1 metrics; recommends 9 replicas; "
                                      "pinned to 2 by elasticscaler.io/paused-replicas")]),
    ("paused-no-event", out(dec(9, paused=True)), []),
    ("advisory-no-write-events", out(dec(14, advisory=True)), []),
    ("advisory-deferral-reported", out(dec(7, target=rolling(), advisory=True)),
     [("Normal", "ScalingDeferred",
       "Advisory mode (the target is never written): holding the write 4 -> 7")]),
    ("advisory-forced-not-reported",
     out(dec(7, target=rolling(), deferred_since=NOW - 600, advisory=True)), []),
]


@pytest.mark.parametrize(("outcome", "expected"), [e[1:] for e in EVENTS], ids=[e[0] for e in EVENTS])
def test_events(outcome: SyncOutcome, expected: list[tuple[str, str, str]]) -> None:
    _, events = run(outcome)
    assert [(e.type, e.reason) for e in events] == [(t, r) for t, r, _ in expected]
    for event, (_, _, fragment) in zip(events, expected, strict=True):
        assert fragment in event.note, event.note


def test_advisory_conditions_say_so() -> None:
    conds, _ = run(out(dec(7, advisory=True)))
    assert conds[ABLE_TO_SCALE].message == ("Advisory mode (the target is never written): would scale the "
                                            "target from 4 to 7")


# ---------------------------------------------------------------- health


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], "ok"),
        ([cond(ABLE_TO_SCALE, "True", "Synced"), cond(SCALING_ACTIVE, "True", "MetricsAvailable")], "ok"),
        ([cond(ABLE_TO_SCALE, "False", "TargetNotFound"), cond(SCALING_ACTIVE, "True", "MetricsAvailable")],
         "failing"),
        ([cond(ABLE_TO_SCALE, "True", "Synced"), cond(SCALING_ACTIVE, "False", "DecisionUnavailable")],
         "failing"),
        ([cond(ABLE_TO_SCALE, "True", "RolloutInProgress")], "waiting"),
        ([cond(ABLE_TO_SCALE, "True", "ScaleDownSettling")], "waiting"),
        ([cond(ABLE_TO_SCALE, "True", "InsufficientCapacity")], "waiting"),
        ([cond(ABLE_TO_SCALE, "True", "ScaleDownStabilized")], "waiting"),
        ([cond(ABLE_TO_SCALE, "True", "DeferralTimedOut")], "ok"),
        ([cond(ABLE_TO_SCALE, "True", "Paused")], "ok"),
        ([cond(ABLE_TO_SCALE, "True", "RolloutInProgress"), cond(SCALING_ACTIVE, "False", "InvalidSpec")],
         "failing"),
        ([cond(ABLE_TO_SCALE, "True", "Synced"), cond(SCALING_LIMITED, "True", "TooManyReplicas")], "ok"),
        ([cond(ABLE_TO_SCALE, "True", "Synced"), cond(VALIDATED, "False", "TargetConflict")], "failing"),
    ],
    ids=["no-conditions", "synced", "able-false", "active-false", "rollout-waiting", "settling-waiting",
         "capacity-waiting",
         "stabilized-waiting", "timed-out-ok", "paused-ok", "failing-beats-waiting", "limited-informational",
         "validated-false"],
)
def test_health(conditions: list[ConditionValue], expected: str) -> None:
    assert health(conditions) == expected


def test_health_reads_api_condition_models() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    api = [Condition(type=ABLE_TO_SCALE, status="True", reason="ScaleDownStabilized", message="",  # type: ignore[arg-type]
                     last_transition_time=at, observed_generation=1)]
    assert health(api) == "waiting"
