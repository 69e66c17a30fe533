"""One condition engine (issue 8): what ``reconcilers/elasticscaler/condset.py`` offered, as pure
functions over ``ConditionValue`` in ``escaler.scaling.conditions`` — set one condition (transition
time kept unless the status flips, observedGeneration, capped message, order, dropped
ScalingDeferred), remove one, which types changed, the JSON form — and the ``Advisory`` reason of an
HPA-mode scaler in Advisory mode."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.scaling import (
    Behavior,
    ConditionValue,
    PipelineInput,
    RecommendResult,
    SyncOutcome,
    conditions_for,
    decide,
    health,
)
from escaler.scaling.conditions import (
    ADVISORY,
    ADVISORY_HPA_MESSAGE,
    CONDITION_ORDER,
    DROPPED_TYPES,
    MAX_CONDITION_MESSAGE_BYTES,
    changed_types,
    ordered,
    remove_condition,
    set_condition,
)
from escaler.scaling.text import TRUNCATED

T_OLD = "2025-12-31T00:00:00Z"
T_NOW = "2026-01-01T00:00:00Z"


def cond(ctype: str, status: str = "True", reason: str = "Valid", message: str = "m", gen: int = 1,
         at: str = T_OLD) -> ConditionValue:
    return ConditionValue(ctype, status, reason, message, gen, at)


PREVIOUS = [
    cond("example.com/Custom", reason="Whatever"),
    cond("Validated"),
    cond("ScalingDeferred", reason="Deferred"),
    cond("ScalingActive", reason="MetricsAvailable"),
]


# (id, status given, reason, expected status, expected lastTransitionTime)
SET_CASES: list[tuple[str, bool | str, str, str, str]] = [
    ("same-status-keeps-time", True, "Valid", "True", T_OLD),
    ("same-status-new-reason-keeps-time", "True", "StillValid", "True", T_OLD),
    ("flip-stamps-now", False, "InvalidSpec", "False", T_NOW),
    ("unknown-stamps-now", "Unknown", "Unknown", "Unknown", T_NOW),
]


@pytest.mark.parametrize(("status", "reason", "expected_status", "expected_time"),
                         [c[1:] for c in SET_CASES], ids=[c[0] for c in SET_CASES])
def test_set_condition_transition_time(status: bool | str, reason: str, expected_status: str,
                                       expected_time: str) -> None:
    out = set_condition(PREVIOUS, "Validated", status, reason, "why", generation=7, now_iso=T_NOW)
    validated = next(c for c in out if c.type == "Validated")
    assert validated == ConditionValue("Validated", expected_status, reason, "why", 7, expected_time)


def test_set_condition_orders_and_drops_stale_types() -> None:
    out = set_condition(PREVIOUS, "AbleToScale", False, "TargetNotFound", "gone", generation=7, now_iso=T_NOW)
    assert [c.type for c in out] == ["ScalingActive", "AbleToScale", "Validated", "example.com/Custom"]
    assert next(c for c in out if c.type == "AbleToScale") == ConditionValue(
        "AbleToScale", "False", "TargetNotFound", "gone", 7, T_NOW)
    # the others are untouched (their own generation and time)
    assert out[0] == PREVIOUS[3] and out[2] == PREVIOUS[1] and out[3] == PREVIOUS[0]
    assert "ScalingDeferred" in DROPPED_TYPES


def test_set_condition_caps_the_message() -> None:
    out = set_condition([], "ScalingActive", False, "DecisionUnavailable", "é" * 40_000, generation=1,
                        now_iso=T_NOW)
    assert len(out[0].message.encode()) <= MAX_CONDITION_MESSAGE_BYTES and out[0].message.endswith(TRUNCATED)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"status": "Maybe"}, "status"), ({"generation": -1}, "generation"), ({"reason": ""}, "reason")],
    ids=["bad-status", "negative-generation", "empty-reason"],
)
def test_set_condition_validates(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"status": True, "reason": "Valid", "generation": 1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        set_condition([], "Validated", args["status"], args["reason"], "m", generation=args["generation"],
                      now_iso=T_NOW)


def test_remove_condition_and_ordered() -> None:
    out = remove_condition(PREVIOUS, "ScalingActive")
    assert [c.type for c in out] == ["Validated", "example.com/Custom"]
    assert [c.type for c in ordered(reversed(PREVIOUS))] == ["ScalingActive", "Validated",
                                                             "example.com/Custom"]
    assert CONDITION_ORDER[:2] == ("ScalingActive", "AbleToScale")


def test_changed_types_lists_status_or_reason_changes_only() -> None:
    previous = [cond("ScalingActive", reason="MetricsAvailable"), cond("Validated"),
                cond("AbleToScale", reason="Synced")]
    current = [cond("ScalingActive", reason="MetricsAvailable", message="new words", gen=9, at=T_NOW),
               cond("Validated", "False", "InvalidSpec"),
               cond("AbleToScale", reason="RolloutInProgress"),
               cond("MetricsPipeline", reason="AllMetricsAvailable")]
    assert changed_types(previous, current) == ["Validated", "AbleToScale", "MetricsPipeline"]
    assert changed_types(current, current) == []


def test_one_engine_for_the_pipeline_and_single_conditions() -> None:
    d = decide(PipelineInput(now=1_767_225_600.0, current_replicas=4,
                             recommend=RecommendResult.from_metrics(7, evaluated=1, total=1),
                             behavior=Behavior(min_replicas=1, max_replicas=10)))
    from_pipeline, _ = conditions_for(SyncOutcome(decision=d), 7, T_NOW, PREVIOUS)
    # setting, one at a time, what the pipeline wrote (generation 7) gives the same list
    by_hand = list(PREVIOUS)
    for c in (c for c in from_pipeline if c.observed_generation == 7):
        by_hand = set_condition(by_hand, c.type, c.status, c.reason, c.message, generation=7,
                                now_iso=T_NOW)
    assert by_hand == from_pipeline
    assert [c.type for c in from_pipeline] == ["ScalingActive", "AbleToScale", "ScalingLimited", "Validated",
                                               "MetricsPipeline", "example.com/Custom"]


def test_wire_form_round_trip() -> None:
    c = cond("AbleToScale", reason="Synced", message="scaled", gen=3)
    wire = c.to_wire()
    assert wire == {"type": "AbleToScale", "status": "True", "reason": "Synced", "message": "scaled",
                    "observedGeneration": 3, "lastTransitionTime": T_OLD}
    assert ConditionValue.from_wire(wire) == c
    assert ConditionValue.from_wire({**wire, "observedGeneration": None, "message": None}) == \
        cond("AbleToScale", reason="Synced", message="", gen=0)


@pytest.mark.parametrize(
    "broken",
    [{"status": "Maybe"}, {"type": ""}, {"reason": 3}, {"lastTransitionTime": None},
     {"observedGeneration": -1}, {"observedGeneration": True}],
    ids=["bad-status", "empty-type", "non-string-reason", "no-time", "negative-generation",
         "bool-generation"],
)
def test_wire_form_rejects_malformed(broken: dict[str, Any]) -> None:
    wire = {**cond("Validated").to_wire(), **broken}
    assert ConditionValue.from_wire(wire) is None


# ---------------------------------------------------------------- Advisory in HPA mode


def test_advisory_reason_is_not_scaling_disabled() -> None:
    out = set_condition([], "ScalingActive", False, ADVISORY, ADVISORY_HPA_MESSAGE, generation=2,
                        now_iso=T_NOW)
    assert (out[0].reason, out[0].status) == ("Advisory", "False")
    assert out[0].reason != "ScalingDisabled"  # reserved for a target at zero replicas
    assert out[0].message.startswith("Advisory mode: the companion HPA is not created")
    # the docs/concepts.md#conditions-and-health health rule: ScalingActive=False is failing, whatever the
    # reason
    assert health(out) == "failing"
