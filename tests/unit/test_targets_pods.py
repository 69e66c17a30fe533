"""Pods of a target as the guards see them, and label selectors in their string form."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.kube.labels import parse_selector
from escaler.targets.pods import UNSCHEDULABLE_GRACE_SECONDS, capacity, select_pods

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def _pod(name: str, labels: dict[str, str], *, unschedulable: bool = False, phase: str = "Running",
         deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    conds = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}] if unschedulable else \
        [{"type": "Ready", "status": "False"}]
    return {"metadata": meta, "status": {"phase": "Pending" if unschedulable else phase, "conditions": conds}}


@pytest.mark.parametrize(("selector", "labels", "match"), [
    ("app=web", {"app": "web"}, True),
    ("app=web", {"app": "db"}, False),
    ("app==web,tier!=cache", {"app": "web"}, True),
    ("app in (web,api)", {"app": "api"}, True),
    ("app notin (web,api)", {"app": "api"}, False),
    ("app notin (web,api)", {}, True),
    ("gpu", {"gpu": "a100"}, True),
    ("!gpu", {"gpu": "a100"}, False),
    ("app=web,app in (web)", {"app": "web"}, True),
], ids=["eq", "eq-miss", "neq-absent", "in", "notin-hit", "notin-absent", "exists", "not-exists",
        "two-terms"])
def test_selector(selector: str, labels: dict[str, str], match: bool) -> None:
    assert parse_selector(selector).matches(labels) is match


def test_a_malformed_selector_names_the_term() -> None:
    with pytest.raises(ValueError, match=r"cannot parse term 'a b c'"):
        parse_selector("app=web,a b c")


def test_capacity_counts_only_pods_unschedulable_beyond_the_grace_period() -> None:
    pods = [_pod("a", {"app": "web"}), _pod("b", {"app": "web"}, unschedulable=True),
            _pod("c", {"app": "web"}, unschedulable=True, deleting=True)]
    inside = capacity(pods, T0 + 10)
    assert (inside.unschedulable, inside.message, inside.recheck_at) == (
        0, "", T0 + UNSCHEDULABLE_GRACE_SECONDS)
    beyond = capacity(pods, T0 + UNSCHEDULABLE_GRACE_SECONDS)
    assert (beyond.unschedulable, beyond.message, beyond.recheck_at) == (
        1, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", None)


def test_not_ready_pods_are_capacity_on_the_way_not_a_problem() -> None:
    assert capacity([_pod("a", {"app": "web"}, phase="Running")] * 3, T0 + 3600).unschedulable == 0


def test_select_pods_needs_a_selector() -> None:
    pods = [_pod("a", {"app": "web"}), _pod("b", {"app": "db"})]
    assert [p["metadata"]["name"] for p in select_pods(pods, "app=web")] == ["a"]
    assert select_pods(pods, "") == []  # an empty selector would select the whole namespace
