"""``PackedMapping`` (escaler.informers.frozen): a cached mapping kept deflated, read as a frozen one.

What a reader of a cached object sees must not change when a part of it is packed (issue 30: the
ElasticScaler cache keeps each status packed): every read gives the frozen value, equality both
ways, ``thaw`` and ``copy`` give plain data, ``freeze`` leaves it alone, and it says loudly
(``TypeError``) where a plain ``dict`` was assumed (``json.dumps``).
"""

from __future__ import annotations

import copy
import json
import math
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escaler.api.typical import STATUS_ZDICT
from escaler.informers.frozen import FrozenDict, FrozenList, PackedMapping, freeze, thaw
from escaler.packed import JsonPacker

PACKER = JsonPacker(STATUS_ZDICT)

STATUS: dict[str, Any] = {
    "currentReplicas": 3, "desiredReplicas": 4, "lastScaleTime": "2026-01-01T00:00:00Z",
    "conditions": [{"type": "ScalingActive", "status": "True", "reason": "MetricsAvailable",
                    "message": "evaluated 1 of 1 metrics; recommends 4 replicas"}],
    "currentMetrics": [{"name": "q", "value": 20.5, "target": 10.0}],
}


def test_reads_give_the_frozen_value() -> None:
    m = PackedMapping(PACKER, STATUS)
    assert m["currentReplicas"] == 3 and m.get("desiredReplicas") == 4
    assert m.get("absent") is None and m.get("absent", 7) == 7
    with pytest.raises(KeyError):
        m["absent"]
    assert "conditions" in m and "absent" not in m
    assert list(m) == list(STATUS) and len(m) == len(STATUS)
    assert list(m.keys()) == list(STATUS) and dict(m.items()) == STATUS
    assert list(m.values()) == list(STATUS.values())
    assert isinstance(m["conditions"], FrozenList) and isinstance(m["conditions"][0], FrozenDict)
    with pytest.raises(TypeError, match="read-only"):
        m["conditions"][0]["status"] = "False"  # type: ignore[index]
    assert isinstance(m.unpack(), FrozenDict)


def test_equality_both_ways_and_with_another_packed_one() -> None:
    m = PackedMapping(PACKER, STATUS)
    assert m == STATUS and STATUS == m and m == freeze(STATUS) and freeze(STATUS) == m  # noqa: SIM300
    assert m == PackedMapping(PACKER, copy.deepcopy(STATUS))
    other = {**STATUS, "currentReplicas": 5}
    assert m != other and other != m and m != PackedMapping(PACKER, other)
    # a packed value inside a frozen object: the object compares as before
    assert freeze({"status": m}) == {"status": STATUS}
    assert m != [1] and m != "text"
    with pytest.raises(TypeError):
        hash(m)


def test_thaw_copy_pickle_give_plain_data_and_freeze_leaves_it_alone() -> None:
    m = PackedMapping(PACKER, STATUS)
    obj = freeze({"spec": {"a": 1}, "status": m})
    assert obj["status"] is m, "freeze keeps a packed mapping packed"
    assert freeze(m) is m
    plain = thaw(obj)
    assert plain == {"spec": {"a": 1}, "status": STATUS} and type(plain["status"]) is dict
    assert type(plain["status"]["conditions"]) is list
    assert copy.deepcopy(m) == STATUS and type(copy.deepcopy(m)) is dict
    assert copy.copy(m) == STATUS and type(copy.copy(m)) is dict
    assert pickle.loads(pickle.dumps(m)) == m


def test_json_refuses_it_instead_of_writing_something_else() -> None:
    obj = freeze({"status": PackedMapping(PACKER, STATUS)})
    with pytest.raises(TypeError, match="PackedMapping"):
        json.dumps(obj)
    assert json.loads(json.dumps(thaw(obj))) == {"status": STATUS}


def test_reads_in_a_row_decode_once(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = PackedMapping(PACKER, STATUS), PackedMapping(PACKER, {**STATUS, "currentReplicas": 9})
    calls: list[bytes] = []
    unpack = JsonPacker.unpack

    def counted(self: JsonPacker, packed: bytes, *args: Any) -> Any:
        calls.append(packed)
        return unpack(self, packed, *args)

    monkeypatch.setattr(JsonPacker, "unpack", counted)
    a.get("currentReplicas"), a.get("desiredReplicas"), a["conditions"], list(a.items())
    assert len(calls) == 1
    assert b["currentReplicas"] == 9 and a["currentReplicas"] == 3, "each its own value"
    assert len(calls) == 3


def test_nan_and_the_infinities_round_trip() -> None:
    m = PackedMapping(PACKER, {"v": math.nan, "w": math.inf, "x": -math.inf})
    assert math.isnan(m["v"]) and m["w"] == math.inf and m["x"] == -math.inf


json_objects = st.dictionaries(st.text(max_size=6), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12), max_size=5)


@given(json_objects)
def test_any_json_object_reads_back_equal(value: dict[str, Any]) -> None:
    m = PackedMapping(PACKER, value)
    assert m == value and thaw(m) == value and dict(m) == value
    assert json.dumps(thaw(m), sort_keys=True) == json.dumps(value, sort_keys=True)
