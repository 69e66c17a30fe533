"""Two condition rules of docs/concepts.md#conditions-and-health (issue 8, items 8 and 10).

* MetricsPipeline reports a failing source as soon as a read fails, while the decision still comes
  from the window's earlier samples: any read error this sync → False/PartialMetrics (some metric
  read fine) or False/NoMetrics (none did), naming each failing source with its capped error and
  saying when the decision used the window. AllMetricsAvailable only when every read succeeded.
* Target errors touch only AbleToScale (and observedGeneration): never Validated, even when the
  caller passes a validation result.

Only APIs that predate these rules are used, so the tests fail on behaviour against the old rules.
"""

from __future__ import annotations

import pytest

from escaler.scaling import (
    Behavior,
    ConditionValue,
    Decision,
    EventValue,
    PipelineInput,
    RecommendResult,
    SyncOutcome,
    TargetError,
    Validation,
    conditions_for,
    decide,
)
from escaler.scaling.text import TRUNCATED

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
GEN = 5
T_OLD = "2025-12-31T00:00:00Z"
T_NOW = "2026-01-01T00:00:00Z"


def dec(rec: RecommendResult, current: int = 4) -> Decision:
    return decide(PipelineInput(now=NOW, current_replicas=current, recommend=rec,
                                behavior=Behavior(min_replicas=1, max_replicas=10)))


def conditions(outcome: SyncOutcome, previous: list[ConditionValue] | None = None,
               ) -> tuple[dict[str, ConditionValue], list[EventValue]]:
    conds, events = conditions_for(outcome, GEN, T_NOW, previous or [])
    return {c.type: c for c in conds}, events


# ---------------------------------------------------------------- item 8: MetricsPipeline

# (id, recommendation, status, reason, message)
PIPELINE: list[tuple[str, RecommendResult, str, str, str]] = [
    ("all-reads-ok", RecommendResult.from_metrics(7, evaluated=2, total=2), "True", "AllMetricsAvailable",
     "all 2 metrics available"),
    # the read of queue failed, its window still had samples: the decision is unchanged, the failure shows
    ("one-failed-window-decides",
     RecommendResult.from_metrics(7, evaluated=2, total=2, metric_errors=("queue: connection refused",)),
     "False", "PartialMetrics",
     "1 of 2 metric reads failed this sync; the decision used the window's earlier samples; failing: "
     "queue: connection refused"),
    ("all-failed-window-decides",
     RecommendResult.from_metrics(7, evaluated=2, total=2,
                                  metric_errors=("queue: HTTP 503", "kv-cache: timeout after 5s")),
     "False", "NoMetrics",
     "all 2 metric reads failed this sync; the decision used the window's earlier samples; failing: "
     "queue: HTTP 503; kv-cache: timeout after 5s"),
    # the failing metric had nothing in the window: the decision comes from the other one only
    ("one-failed-no-window",
     RecommendResult.from_metrics(7, evaluated=1, total=2, metric_errors=("queue: HTTP 503",)),
     "False", "PartialMetrics", "1 of 2 metric reads failed this sync; failing: queue: HTTP 503"),
    ("all-failed-no-decision",
     RecommendResult.no_decision("metrics", "queue: HTTP 503", total=1, metric_errors=("queue: HTTP 503",)),
     "False", "NoMetrics", "all 1 metric reads failed this sync; failing: queue: HTTP 503"),
]


@pytest.mark.parametrize(("rec", "status", "reason", "message"), [p[1:] for p in PIPELINE],
                         ids=[p[0] for p in PIPELINE])
def test_metrics_pipeline_reports_a_failed_read_at_once(rec: RecommendResult, status: str, reason: str,
                                                        message: str) -> None:
    previous = [ConditionValue("MetricsPipeline", "True", "AllMetricsAvailable", "all 2 metrics available",
                               GEN - 1, T_OLD)]
    conds, _ = conditions(SyncOutcome(decision=dec(rec)), previous)
    c = conds["MetricsPipeline"]
    assert (c.status, c.reason, c.message, c.observed_generation) == (status, reason, message, GEN)
    assert c.last_transition_time == (T_OLD if status == "True" else T_NOW)


def test_failed_read_does_not_change_the_decision_from_the_window() -> None:
    rr = RecommendResult.from_metrics(7, evaluated=2, total=2, metric_errors=("queue: connection refused",))
    d = dec(rr)
    assert (d.desired, d.write) == (7, True)
    conds, _ = conditions(SyncOutcome(decision=d))
    assert (conds["ScalingActive"].status, conds["ScalingActive"].reason) == ("True", "MetricsAvailable")


def test_failing_sources_are_capped_each_and_as_a_whole() -> None:
    errors = tuple(f"metric-{i}: <html>" + "x" * 5000 for i in range(8))
    rr = RecommendResult.from_metrics(7, evaluated=8, total=8, metric_errors=errors)
    conds, _ = conditions(SyncOutcome(decision=dec(rr)))
    message = conds["MetricsPipeline"].message
    assert message.startswith("all 8 metric reads failed this sync; the decision used the window's earlier "
                              "samples; failing: metric-0: <html>xxx")
    # each source's error is capped at 1 KiB, the whole message at 4 KiB
    assert f"xxx{TRUNCATED}; metric-1: <html>" in message
    assert message.endswith(TRUNCATED) and len(message.encode()) <= 4096


# ---------------------------------------------------------------- item 10: target errors


PREVIOUS = [
    ConditionValue("ScalingActive", "True", "MetricsAvailable", "old", 1, T_OLD),
    ConditionValue("AbleToScale", "True", "Synced", "old", 1, T_OLD),
    ConditionValue("Validated", "False", "TargetConflict", "owned by ElasticScaler default/a", 1, T_OLD),
]


@pytest.mark.parametrize("reason", ["InvalidSpec", "TargetNotFound", "TargetUnreadable"])
@pytest.mark.parametrize(
    "validation",
    [Validation(), Validation("TargetConflict", "owned by ElasticScaler default/b"),
     Validation("InvalidSpec", "spec.trigger: exactly one")],
    ids=["valid", "conflict", "invalid-spec"],
)
def test_target_read_error_never_touches_validated(reason: str, validation: Validation) -> None:
    conds, events = conditions(SyncOutcome(target_error=TargetError(reason, "boom"), validation=validation),
                               PREVIOUS)
    assert conds["Validated"] == PREVIOUS[2]
    assert conds["ScalingActive"] == PREVIOUS[0]
    able = conds["AbleToScale"]
    assert (able.status, able.reason, able.message, able.observed_generation) == (
        "False", reason, "boom", GEN)
    assert events == [EventValue("Warning", "FailedGetScale", "boom")]


def test_target_write_failure_never_touches_validated() -> None:
    d = dec(RecommendResult.from_metrics(7, evaluated=1, total=1))
    conds, events = conditions(SyncOutcome(decision=d, target_error=TargetError("TargetWriteFailed", "409"),
                                           validation=Validation()), PREVIOUS)
    assert conds["Validated"] == PREVIOUS[2]
    assert (conds["AbleToScale"].status, conds["AbleToScale"].reason) == ("False", "TargetWriteFailed")
    # what was computed earlier in the sync is still written
    assert (conds["ScalingActive"].reason, conds["ScalingActive"].observed_generation) == ("MetricsAvailable",
                                                                                           GEN)
    assert [e.reason for e in events] == ["FailedRescale"]


def test_first_sync_target_error_writes_only_able_to_scale() -> None:
    conds, _ = conditions(SyncOutcome(target_error=TargetError("TargetNotFound", "gone"),
                                      validation=Validation()))
    assert list(conds) == ["AbleToScale"]
