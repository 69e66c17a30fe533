"""escaler.scaling.deletioncost (pure): which pods a scale-down removes, the victims' costs, which pods
are patched (only those whose annotation changes), that a held or upward decision patches nothing,
the pods the ReplicaSet controller removes first anyway, the patch bound, and pod parsing."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.scaling.deletioncost import (
    ANNOTATION,
    MAX_COST,
    MIN_COST,
    Patch,
    PodView,
    parse_cost,
    plan,
    pod_view,
    removals,
)

BUSY_AND_IDLE = {"a": 8.0, "b": 0.0, "c": 5.0, "d": 1.0}


def _pods(*names: str, **costs: int) -> list[PodView]:
    return [PodView(n, costs.get(n)) for n in names]


@pytest.mark.parametrize(
    ("write", "current", "desired", "want"),
    [
        (True, 4, 2, 2),
        (True, 4, 0, 4),
        (False, 4, 2, 0),  # held by a guard or the stabilization window: not written, nothing patched
        (True, 2, 4, 0),  # scale-up
        (True, 3, 3, 0),
    ],
    ids=["scale-down", "to-zero", "held", "scale-up", "no-change"],
)
def test_removals(write: bool, current: int, desired: int, want: int) -> None:
    assert removals(write, current, desired) == want


def test_the_idle_pods_get_the_lowest_costs_most_idle_first() -> None:
    p = plan(_pods("a", "b", "c", "d"), BUSY_AND_IDLE, 2)
    assert p.victims == (("b", 0.0), ("d", 1.0))
    assert p.patches == (Patch("b", -2), Patch("d", -1))
    assert p.skipped is None
    assert "b (value 0, cost -2), d (value 1, cost -1)" in p.describe()


def test_only_the_pods_whose_annotation_changes_are_patched() -> None:
    # b already carries -2; a busy pod with a positive cost keeps it; an unannotated busy pod is left
    p = plan(_pods("a", "b", "c", "d", b=-2, a=100), BUSY_AND_IDLE, 2)
    assert p.patches == (Patch("d", -1),)


def test_a_negative_cost_on_a_busy_pod_is_cleared_before_the_victims_are_lowered() -> None:
    # c was a victim of an earlier scale-down that did not happen, and is busy now
    p = plan(_pods("a", "b", "c", "d", c=-2), BUSY_AND_IDLE, 1)
    assert p.victims == (("b", 0.0),)
    assert p.patches == (Patch("c", None), Patch("b", -1))
    assert "negative cost cleared on c" in p.describe()


def test_zero_removals_plan_nothing() -> None:
    assert plan(_pods("a", "b", c=-5), BUSY_AND_IDLE, 0).patches == ()


def test_pods_the_controller_removes_first_take_their_share() -> None:
    pods = [PodView("a"), PodView("b"), PodView("c"), PodView("new", goes_first=True)]
    p = plan(pods, BUSY_AND_IDLE, 2)
    assert p.first == ("new",)
    assert p.victims == (("b", 0.0),)  # one not-Ready pod goes anyway: only one Ready pod to choose
    assert p.patches == (Patch("b", -1),)
    only_unready = plan(pods, BUSY_AND_IDLE, 1)
    assert only_unready.patches == () and only_unready.victims == ()


def test_terminating_pods_are_not_counted() -> None:
    pods = [PodView("a"), PodView("b", terminating=True), PodView("c"), PodView("d")]
    p = plan(pods, BUSY_AND_IDLE, 1)
    assert p.victims == (("d", 1.0),)


def test_a_pod_without_a_value_is_never_chosen_over_a_measured_one() -> None:
    values = {"a": 8.0, "c": 5.0}  # b and d have no series
    p = plan(_pods("a", "b", "c", "d"), values, 1)
    assert p.victims == (("c", 5.0),)
    fewer = plan(_pods("a", "b", "c", "d"), values, 3)
    assert [name for name, _ in fewer.victims] == ["c", "a"]  # the unmeasured are left unannotated
    assert {x.pod for x in fewer.patches} == {"a", "c"}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_non_finite_values_count_as_missing(bad: float) -> None:
    p = plan(_pods("a", "b"), {"a": 3.0, "b": bad}, 1)
    assert p.victims == (("a", 3.0),)


def test_ties_are_broken_by_name() -> None:
    p = plan(_pods("z", "y", "x"), {"x": 1.0, "y": 1.0, "z": 1.0}, 2)
    assert p.victims == (("x", 1.0), ("y", 1.0))


def test_more_patches_than_the_bound_patch_nothing() -> None:
    names = [f"p{i:02d}" for i in range(10)]
    values = {n: float(i) for i, n in enumerate(names)}
    p = plan(_pods(*names), values, 5, max_patches=4)
    assert p.patches == ()
    assert p.skipped == "5 pod patches needed, more than 4 per scale-down"
    assert p.describe().startswith("pod deletion cost not set: 5 pod patches needed")
    assert len(plan(_pods(*names), values, 5, max_patches=5).patches) == 5


@pytest.mark.parametrize(
    ("raw", "want"),
    [("-3", -3), (" 12 ", 12), ("0", 0), (str(MIN_COST), MIN_COST), (str(MAX_COST), MAX_COST),
     (str(MAX_COST + 1), None), ("1.5", None), ("", None), ("x", None), (None, None), (7, None)],
    ids=["negative", "spaces", "zero", "int32-min", "int32-max", "over-int32", "decimal", "empty", "word",
         "absent", "not-a-string"],
)
def test_parse_cost(raw: object, want: int | None) -> None:
    assert parse_cost(raw) == want


def _pod(name: str = "p", *, node: str | None = "n1", phase: str = "Running", ready: bool = True,
         annotations: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (_pod(annotations={ANNOTATION: "-4"}), PodView("p", -4)),
        (_pod(), PodView("p")),
        (_pod(ready=False), PodView("p", goes_first=True)),
        (_pod(node=None), PodView("p", goes_first=True)),
        (_pod(phase="Pending"), PodView("p", goes_first=True)),
        (_pod(deleting=True), PodView("p", terminating=True)),
        ({"metadata": {}}, None),
    ],
    ids=["annotated", "plain", "not-ready", "unassigned", "pending", "terminating", "no-name"],
)
def test_pod_view(pod: dict[str, Any], want: PodView | None) -> None:
    assert pod_view(pod) == want
