"""``escaler.scaling.rsg``: ratio math, write ordering and group ranking (pure)."""

from __future__ import annotations

import math

import pytest

from escaler.scaling.rsg import (
    MemberCount,
    MemberWrite,
    complete_groups,
    groups_to_remove,
    indices_to_create,
    inplace_writes,
    member_replicas,
    removal_order,
)

PD = (("prefill", 2), ("decode", 1), ("router", 3))


def members(*replicas: int) -> list[MemberCount]:
    return [MemberCount(name, per, n) for (name, per), n in zip(PD, replicas, strict=True)]


@pytest.mark.parametrize(("groups", "per", "want"), [(0, 1, 0), (1, 2, 2), (3, 2, 6), (5, 3, 15)],
                         ids=["zero-groups", "one", "three-by-two", "five-by-three"])
def test_member_replicas_is_groups_times_per_group(groups: int, per: int, want: int) -> None:
    assert member_replicas(groups, per) == want


@pytest.mark.parametrize(("groups", "per"), [(-1, 1), (1, 0), (1.5, 1), (True, 1)],
                         ids=["negative-groups", "zero-per-group", "float", "bool"])
def test_member_replicas_refuses_bad_input(groups: object, per: int) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        member_replicas(groups, per)  # type: ignore[arg-type]


@pytest.mark.parametrize(("current", "groups", "want"), [
    ((2, 1, 3), 3, [MemberWrite("prefill", 2, 6), MemberWrite("decode", 1, 3), MemberWrite("router", 3, 9)]),
    ((6, 3, 9), 1, [MemberWrite("router", 9, 3), MemberWrite("decode", 3, 1), MemberWrite("prefill", 6, 2)]),
    ((4, 2, 6), 2, []),
    # a half-written scale-up undone: grow first (list order), then shrink (reverse order)
    ((6, 1, 9), 2, [MemberWrite("decode", 1, 2), MemberWrite("router", 9, 6), MemberWrite("prefill", 6, 4)]),
    ((2, 2, 6), 2, [MemberWrite("prefill", 2, 4)]),
], ids=["scale-up-list-order", "scale-down-reverse-order", "steady-no-writes", "mixed-grow-then-shrink",
        "repair-one-member"])
def test_inplace_writes_order(current: tuple[int, int, int], groups: int, want: list[MemberWrite]) -> None:
    assert inplace_writes(members(*current), groups) == want


@pytest.mark.parametrize(("replicas", "want"),
                         [((4, 2, 6), 2), ((6, 2, 9), 2), ((1, 5, 9), 0), ((0, 0, 0), 0)],
                         ids=["consistent", "prefill-ahead", "partial-group", "empty"])
def test_complete_groups_counts_whole_groups_only(replicas: tuple[int, int, int], want: int) -> None:
    assert complete_groups(members(*replicas)) == want


def test_complete_groups_of_no_members_is_zero() -> None:
    assert complete_groups([]) == 0


@pytest.mark.parametrize(("present", "groups", "want"), [
    ((), 3, [0, 1, 2]), ((0, 1), 3, [2]), ((0, 2), 4, [1, 3]), ((0, 1, 2), 2, []), ((5,), 2, [0]),
], ids=["from-nothing", "append", "fill-the-hole-first", "enough", "after-deletes"])
def test_indices_to_create_fills_lowest_free(present: tuple[int, ...], groups: int, want: list[int]) -> None:
    assert indices_to_create(present, groups) == want


@pytest.mark.parametrize(("loads", "want"), [
    (None, [3, 2, 1, 0]),
    ({0: 5.0, 1: 0.5, 2: 9.0, 3: 2.0}, [1, 3, 0, 2]),
    ({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, [3, 2, 1, 0]),
    ({0: 5.0, 2: 9.0}, [3, 1, 0, 2]),
    ({}, [3, 2, 1, 0]),
], ids=["no-query-highest-index-first", "least-loaded-first", "ties-highest-index-first",
        "missing-group-counts-as-idle", "empty-answer"])
def test_removal_order(loads: dict[int, float] | None, want: list[int]) -> None:
    assert removal_order([0, 1, 2, 3], loads) == want


def test_removal_order_refuses_non_finite_loads() -> None:
    with pytest.raises(ValueError, match=r"loads\[1\] must be a finite number"):
        removal_order([0, 1], {1: math.nan})


@pytest.mark.parametrize(("groups", "loads", "want"), [
    (2, None, [3, 2]), (2, {0: 0.0, 1: 7.0, 2: 3.0, 3: 1.0}, [0, 3]), (4, None, []), (5, {0: 1.0}, []),
    (0, None, [3, 2, 1, 0]),
], ids=["down-two-by-index", "down-two-by-load", "no-change", "scale-up-nothing-to-remove", "to-zero"])
def test_groups_to_remove(groups: int, loads: dict[int, float] | None, want: list[int]) -> None:
    assert groups_to_remove([0, 1, 2, 3], groups, loads) == want
