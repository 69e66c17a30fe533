"""The write guards (docs/concepts.md#the-decision-pipeline step 5 as corrected; issue 8, items 1 and 13, pure
part).

The guard input is the facts the target's ResourceHandler computed (``rollout_in_progress`` with
each kind's exceptions, ``settling_scale_down``) plus the reconciler's count of Unschedulable pods:

* RolloutInProgress holds any write, and only a *template rollout* is one: replicas that are not
  Ready yet (an LLM server loading weights) count as capacity on the way and hold nothing;
* ScaleDownSettling holds a scale-down only;
* InsufficientCapacity holds a scale-up only (never a scale-down or a no-op), with the scheduler's
  message, and is reported on AbleToScale (health: waiting) even when it holds nothing;
* a held write of any kind goes through the same deferral state machine (forced after
  deferTimeoutSeconds, then paced).

Every snapshot is built inside a test, so that against a pipeline without these inputs each test
fails on its own rather than the whole module failing to import.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

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
    guards,
    health,
)
from escaler.scaling.pipeline import Decision

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SCHEDULER = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def run(rec: int, current: int = 4, *, target: dict[str, object] | None = None,
        deferred_since: float | None = None, last_forced: float | None = None, advisory: bool = False,
        defer_timeout: float = 600, now: float = NOW) -> Decision:
    snap = None if target is None else TargetSnapshot(**{"spec_replicas": current, **target})  # type: ignore[arg-type]
    return decide(PipelineInput(
        now=now, current_replicas=current, recommend=RecommendResult.from_metrics(rec, evaluated=1, total=1),
        behavior=Behavior(min_replicas=1, max_replicas=20, defer_timeout_seconds=defer_timeout), target=snap,
        state=PipelineState.of((), deferred_since, last_forced), advisory=advisory))


ROLLING: dict[str, object] = {"rollout_in_progress": True,
                              "rollout_message": "status.updatedReplicas 1 < 4 expected"}
SETTLING: dict[str, object] = {"status_replicas": 6, "settling_scale_down": True}
PENDING: dict[str, object] = {"unschedulable_pods": 2, "unschedulable_message": SCHEDULER}


# ---------------------------------------------------------------- guards()

# (id, target facts, current, desired, reason, message)
GUARDS: list[tuple[str, dict[str, object] | None, int, int, str | None, str | None]] = [
    ("no-target-info", None, 4, 6, None, None),
    ("settled", {}, 4, 6, None, None),
    ("rollout-holds-up", ROLLING, 4, 6, "RolloutInProgress",
     "target rollout in progress: status.updatedReplicas 1 < 4 expected"),
    ("rollout-holds-down", ROLLING, 4, 2, "RolloutInProgress",
     "target rollout in progress: status.updatedReplicas 1 < 4 expected"),
    ("rollout-without-message", {"rollout_in_progress": True}, 4, 6, "RolloutInProgress",
     "target rollout in progress"),
    # the handler's verdict is the source of truth: a paused Deployment, a StatefulSet partition or
    # OnDelete reports rollout_in_progress=False even though updated replicas lag behind
    ("handler-says-no-rollout", {"rollout_in_progress": False, "status_replicas": 4}, 4, 6, None, None),
    ("settling-holds-down", SETTLING, 4, 2, "ScaleDownSettling",
     "previous scale-down not settled: status.replicas 6 > spec.replicas 4"),
    ("settling-ignores-up", SETTLING, 4, 6, None, None),
    ("settling-without-counts", {"settling_scale_down": True}, 4, 2, "ScaleDownSettling",
     "previous scale-down not settled"),
    ("capacity-holds-up", PENDING, 4, 6, "InsufficientCapacity",
     f"2 pods of the target Pending as Unschedulable: {SCHEDULER}; a scale-up waits for them, a scale-down "
     "does not"),
    ("capacity-never-holds-down", PENDING, 4, 2, None, None),
    ("capacity-one-pod-no-message", {"unschedulable_pods": 1}, 4, 5, "InsufficientCapacity",
     "1 pod of the target Pending as Unschedulable; a scale-up waits for them, a scale-down does not"),
    ("rollout-before-settling", {**ROLLING, **SETTLING}, 4, 2, "RolloutInProgress", None),
    ("rollout-before-capacity", {**ROLLING, **PENDING}, 4, 6, "RolloutInProgress", None),
    ("settling-and-capacity-down", {**SETTLING, **PENDING}, 4, 2, "ScaleDownSettling", None),
    ("no-write-never-held", {**ROLLING, **SETTLING, **PENDING}, 4, 4, None, None),
]


@pytest.mark.parametrize(("facts", "current", "desired", "reason", "message"), [g[1:] for g in GUARDS],
                         ids=[g[0] for g in GUARDS])
def test_guards(facts: dict[str, object] | None, current: int, desired: int, reason: str | None,
                message: str | None) -> None:
    target = None if facts is None else TargetSnapshot(**{"spec_replicas": current, **facts})  # type: ignore[arg-type]
    hold = guards(target, current, desired)
    assert (None if hold is None else hold.reason) == reason
    if message is not None:
        assert hold is not None and hold.message == message


# (id, target facts, reason): a no-op while a deferral runs keeps the first guard still standing on
# the target, whatever its direction (seed 000: the guard reason stays on a no-op during a deferral)
DEFERRING: list[tuple[str, dict[str, object], str | None]] = [
    ("rollout", ROLLING, "RolloutInProgress"),
    ("settling", SETTLING, "ScaleDownSettling"),
    ("capacity", PENDING, "InsufficientCapacity"),
    ("rollout-first", {**ROLLING, **SETTLING, **PENDING}, "RolloutInProgress"),
    ("nothing-left", {}, None),
]


@pytest.mark.parametrize(("facts", "reason"), [g[1:] for g in DEFERRING], ids=[g[0] for g in DEFERRING])
def test_guards_on_a_no_op_while_deferring(facts: dict[str, object], reason: str | None) -> None:
    hold = guards(TargetSnapshot(**{"spec_replicas": 4, **facts}), 4, 4, deferring=True)  # type: ignore[arg-type]
    assert (None if hold is None else hold.reason) == reason


@dataclass(frozen=True)
class HandlerRead:
    """The fields of ``escaler.targets.TargetSnapshot`` the guards take (a handler's read)."""

    spec_replicas: int
    status_replicas: int
    rollout_in_progress: bool
    rollout_message: str
    settling_scale_down: bool


def test_snapshot_of_a_handler_read() -> None:
    read = HandlerRead(3, 5, True, "status.observedGeneration 1 < metadata.generation 2", True)
    snap = TargetSnapshot.of(read, unschedulable_pods=1, unschedulable_message=SCHEDULER)
    assert snap == TargetSnapshot(spec_replicas=3, status_replicas=5, rollout_in_progress=True,
                                  rollout_message="status.observedGeneration 1 < metadata.generation 2",
                                  settling_scale_down=True, unschedulable_pods=1,
                                  unschedulable_message=SCHEDULER)


@pytest.mark.parametrize(
    "kwargs",
    [{"spec_replicas": -1}, {"spec_replicas": 2, "unschedulable_pods": -1},
     {"spec_replicas": 2, "status_replicas": True}, {"spec_replicas": 2, "rollout_in_progress": 1}],
    ids=["negative-spec", "negative-unschedulable", "bool-status", "int-flag"],
)
def test_snapshot_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="TargetSnapshot"):
        TargetSnapshot(**kwargs)  # type: ignore[arg-type]


def test_scheduler_message_is_capped() -> None:
    snap = TargetSnapshot(spec_replicas=2, unschedulable_pods=1, unschedulable_message="x" * 5000)
    assert len(snap.unschedulable_message.encode()) <= 1024


# ---------------------------------------------------------------- through decide and the conditions


def test_replicas_not_ready_yet_do_not_hold_a_second_scale_up() -> None:
    # 4 replicas, 2 of them still loading weights (not Ready): the handler reports no rollout, so
    # the next step of the surge is written at once instead of waiting deferTimeoutSeconds
    d = run(9, target={"status_replicas": 4, "rollout_in_progress": False})
    assert (d.desired, d.write, d.held, d.guard, d.requeue_after) == (9, True, False, None, None)


@pytest.mark.parametrize(
    ("rec", "held", "write", "reason", "requeue_after"),
    [(9, True, False, "InsufficientCapacity", 600.0), (2, False, True, "Synced", None),
     (4, False, False, "InsufficientCapacity", None)],
    ids=["scale-up-held", "scale-down-written", "no-op-reported"],
)
def test_unschedulable_pods_hold_only_scale_up(rec: int, held: bool, write: bool, reason: str,
                                               requeue_after: float | None) -> None:
    d = run(rec, target=PENDING)
    assert (d.held, d.write, d.requeue_after) == (held, write, requeue_after)
    conds, _ = conditions_for(SyncOutcome(decision=d), 2, "2026-01-01T00:00:00Z", [])
    able = next(c for c in conds if c.type == "AbleToScale")
    assert (able.status, able.reason) == ("True", reason)
    assert SCHEDULER in able.message
    assert health(conds) == ("ok" if reason == "Synced" else "waiting")


def test_insufficient_capacity_hold_message_and_event() -> None:
    d = run(9, target=PENDING)
    conds, events = conditions_for(SyncOutcome(decision=d), 2, "2026-01-01T00:00:00Z", [])
    able = next(c for c in conds if c.type == "AbleToScale")
    assert able.message == (f"2 pods of the target Pending as Unschedulable: {SCHEDULER}; a scale-up waits "
                            "for them, a scale-down does not; holding the write 4 -> 9 since "
                            "2026-01-01T00:00:00Z; forced at 2026-01-01T00:10:00Z")
    assert [(e.type, e.reason) for e in events] == [("Normal", "ScalingDeferred")]
    assert d.bound_by == "Guard"


def test_insufficient_capacity_goes_through_the_deferral_state_machine() -> None:
    # held from t=0, forced at t=600, then paced: a new deferral at 660 is forced at 1260
    state: tuple[float | None, float | None] = (None, None)
    seen: list[tuple[float, bool, bool]] = []
    for t in (0.0, 300.0, 600.0, 660.0, 1259.0, 1260.0):
        d = run(9, target=PENDING, deferred_since=state[0], last_forced=state[1], now=NOW + t)
        seen.append((t, d.held, d.forced))
        state = (d.state.deferred_since, d.state.last_forced_write)
    assert seen == [(0.0, True, False), (300.0, True, False), (600.0, False, True), (660.0, True, False),
                    (1259.0, True, False), (1260.0, False, True)]


def test_rollout_holds_every_direction_with_the_handler_message() -> None:
    for rec in (9, 2):
        d = run(rec, target=ROLLING)
        assert d.held and d.guard is not None
        assert (d.guard.reason, d.guard.message) == (
            "RolloutInProgress", "target rollout in progress: status.updatedReplicas 1 < 4 expected")


def test_settling_holds_scale_down_and_lets_scale_up_through() -> None:
    down, up = run(2, target=SETTLING), run(9, target=SETTLING)
    assert down.held and down.guard is not None and down.guard.reason == "ScaleDownSettling"
    assert up.write and up.guard is None


def test_write_with_unschedulable_pods_says_so() -> None:
    d = run(2, target=PENDING)
    conds, _ = conditions_for(SyncOutcome(decision=d), 2, "2026-01-01T00:00:00Z", [])
    able = next(c for c in conds if c.type == "AbleToScale")
    assert able.message == ("the target is at the desired count (2); "
                            f"2 pods of the target Pending as Unschedulable: {SCHEDULER}; "
                            "a scale-up waits for them, a scale-down does not")


def test_explain_lines_report_unschedulable_pods() -> None:
    held = explain_lines(run(9, target=PENDING))
    assert held[2].startswith("2. stabilize: 9 -> 9")
    assert any(line.startswith("5. guard: 9 -> 4: held by InsufficientCapacity since 2026-01-01T00:00:00Z: "
                               "2 pods of the target Pending as Unschedulable") for line in held)
    assert not any("not holding" in line for line in held)
    down = explain_lines(run(2, target=PENDING))
    assert ("InsufficientCapacity (not holding this sync): 2 pods of the target Pending as Unschedulable: "
            f"{SCHEDULER}; a scale-up waits for them, a scale-down does not") in down
