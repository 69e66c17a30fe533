"""escaler.boundeddict.BoundedDict: a dict's reads, a bound on writes, the oldest-written dropped."""

from __future__ import annotations

import gc
import sys

import pytest
from cachetools import LRUCache
from hypothesis import given
from hypothesis import strategies as st

from escaler.boundeddict import BoundedDict


def test_reads_like_a_dict_and_keeps_what_fits() -> None:
    d: BoundedDict[str, int] = BoundedDict(4)
    for i in range(4):
        d[f"k{i}"] = i
    assert dict(d) == {"k0": 0, "k1": 1, "k2": 2, "k3": 3} and d.get("k9") is None
    assert d.pop("k1") == 1 and "k1" not in d and len(d) == 3


def test_a_write_past_the_bound_drops_the_oldest_written() -> None:
    d: BoundedDict[str, int] = BoundedDict(3)
    for key in ("a", "b", "c"):
        d[key] = 0
    d["a"] = 1  # rewritten: now the newest
    d["d"] = 0
    assert list(d) == ["c", "a", "d"]


def test_a_full_dict_drops_an_eighth_at_once() -> None:
    d: BoundedDict[int, int] = BoundedDict(64)
    for i in range(64):
        d[i] = i
    d[64] = 64
    assert len(d) == 64 - 8 and list(d) == list(range(9, 65))


@given(st.integers(1, 40), st.lists(st.integers(0, 60), max_size=300))
def test_never_holds_more_than_maxsize_and_keeps_the_newest_write(maxsize: int, keys: list[int]) -> None:
    d: BoundedDict[int, int] = BoundedDict(maxsize)
    for n, key in enumerate(keys):
        d[key] = n
        assert len(d) <= maxsize and d[key] == n


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_a_bad_maxsize_is_refused_naming_the_rule(bad: object) -> None:
    with pytest.raises(ValueError, match=r"BoundedDict\.maxsize: must be an integer >= 1"):
        BoundedDict(bad)  # type: ignore[arg-type]


def _bytes(obj: object) -> int:
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type | int | str):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def test_costs_a_dict_not_an_lru() -> None:
    # the per-entry cost this replaces: an LRUCache also keeps an OrderedDict of recency
    keys = [f"uid-{i:06d}" for i in range(2000)]
    bounded: BoundedDict[str, int] = BoundedDict(4096)
    lru: LRUCache[str, int] = LRUCache(maxsize=4096)
    for i, key in enumerate(keys):
        bounded[key] = lru[key] = i
    assert _bytes(bounded) <= _bytes(dict(bounded)) + 64 < _bytes(lru) / 2


def test_every_way_in_is_bounded() -> None:
    d: BoundedDict[int, int] = BoundedDict(3)
    d.update({i: i for i in range(5)})
    assert len(d) <= 3 and d[4] == 4
    d.update([(10, 10), (11, 11)], **{})
    assert len(d) <= 3 and d[11] == 11
    assert d.setdefault(20, 7) == 7 and len(d) <= 3
    assert d.setdefault(20, 9) == 7
    d |= {30: 1, 31: 2, 32: 3, 33: 4}
    assert len(d) <= 3 and d[33] == 4 and isinstance(d, BoundedDict)
