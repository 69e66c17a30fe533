"""freeze/thaw: cached objects are read-only, cheap to freeze, and still JSON."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escaler.informers.frozen import (
    INTERN_MAX_LENGTH,
    READ_ONLY_MESSAGE,
    FrozenDict,
    FrozenList,
    freeze,
    loads_frozen,
    thaw,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
    "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}], "args": ["a", "b"]}]},
    "status": {"phase": "Running", "ready": True, "restarts": 0, "score": 0.5, "nodeName": None},
}

MUTATIONS: list[tuple[str, Callable[[FrozenDict], object]]] = [
    ("setitem", lambda d: d.__setitem__("k", 1)),
    ("delitem", lambda d: d.__delitem__("kind")),
    ("update", lambda d: d.update({"k": 1})),
    ("update-kwargs", lambda d: d.update(k=1)),
    ("pop", lambda d: d.pop("kind")),
    ("pop-default", lambda d: d.pop("missing", None)),
    ("popitem", lambda d: d.popitem()),
    ("clear", lambda d: d.clear()),
    ("setdefault", lambda d: d.setdefault("k", 1)),
    ("ior", lambda d: d.__ior__({"k": 1})),
]


@pytest.mark.parametrize("mutate", [m for _, m in MUTATIONS], ids=[n for n, _ in MUTATIONS])
@pytest.mark.parametrize("where", ["top", "nested"])
def test_every_mutating_method_raises(mutate: Callable[[FrozenDict], object], where: str) -> None:
    frozen = freeze(POD)
    target = frozen if where == "top" else frozen["metadata"]
    before = thaw(frozen)
    with pytest.raises(TypeError, match="read-only; use thaw"):
        mutate(target)
    assert thaw(frozen) == before


def test_augmented_assignment_and_item_assignment_raise() -> None:
    frozen = freeze(POD)
    with pytest.raises(TypeError) as info:
        frozen["metadata"]["labels"]["app"] = "y"
    assert str(info.value) == READ_ONLY_MESSAGE
    labels = frozen["metadata"]["labels"]
    with pytest.raises(TypeError):
        labels |= {"b": "c"}


def test_lists_become_tuples() -> None:
    frozen = freeze(POD)
    containers = frozen["spec"]["containers"]
    assert isinstance(containers, tuple)
    assert isinstance(containers[0], FrozenDict)
    assert containers[0]["args"] == ("a", "b")
    with pytest.raises(AttributeError):
        containers.append({})  # type: ignore[attr-defined]


def test_json_round_trips_and_reads_like_a_dict() -> None:
    frozen = freeze(POD)
    assert json.loads(json.dumps(frozen)) == POD
    assert frozen == POD  # dict equality with the plain original
    assert frozen["metadata"]["name"] == "p"
    assert frozen.get("missing") is None
    assert isinstance(frozen, dict)
    assert sorted(frozen) == sorted(POD)


def test_thaw_is_a_deep_mutable_copy() -> None:
    frozen = freeze(POD)
    thawed = thaw(frozen)
    assert type(thawed) is dict
    assert type(thawed["spec"]["containers"]) is list
    assert thawed == POD
    thawed["metadata"]["labels"]["app"] = "changed"
    thawed["spec"]["containers"].append({"name": "d"})
    assert frozen["metadata"]["labels"]["app"] == "x"
    assert len(frozen["spec"]["containers"]) == 1


def test_freeze_copies_its_input_and_is_identity_on_frozen() -> None:
    src = thaw(POD)
    frozen = freeze(src)
    src["metadata"]["name"] = "mutated-after-freeze"
    assert frozen["metadata"]["name"] == "p"
    assert freeze(frozen) is frozen
    assert freeze(frozen["metadata"]) is frozen["metadata"]


@pytest.mark.parametrize("value", ["s", 1, 1.5, True, None], ids=["str", "int", "float", "bool", "none"])
def test_scalars_pass_through(value: Any) -> None:
    assert freeze(value) is value
    assert thaw(value) is value


def test_copy_deepcopy_and_pickle() -> None:
    frozen = freeze(POD)
    shallow = copy.copy(frozen)
    assert type(shallow) is dict and shallow == POD
    shallow["kind"] = "Other"  # top level is mutable, nested still frozen
    assert isinstance(shallow["metadata"], FrozenDict)
    deep = copy.deepcopy(frozen)
    assert type(deep) is dict and type(deep["metadata"]) is dict
    deep["metadata"]["name"] = "q"
    restored = pickle.loads(pickle.dumps(frozen))
    assert isinstance(restored, FrozenDict) and restored == POD
    assert isinstance(restored["metadata"], FrozenDict)
    assert frozen.copy() == POD and type(frozen.copy()) is dict
    assert (frozen | {"x": 1})["x"] == 1  # | builds a new dict and leaves frozen alone
    assert "x" not in frozen


def test_direct_construction_deep_freezes() -> None:
    fd = FrozenDict({"a": {"b": [1, {"c": 2}]}}, d=[3])
    assert isinstance(fd["a"], FrozenDict)
    assert fd["a"]["b"] == (1, FrozenDict({"c": 2}))
    assert fd["d"] == (3,)
    with pytest.raises(TypeError):
        fd["a"]["b"][1]["c"] = 3
    assert fd == {"a": {"b": [1, {"c": 2}]}, "d": [3]}


@pytest.mark.parametrize(
    "text",
    [json.dumps(POD), json.dumps([POD, [1, [2, {"a": []}]]]), '"s"', "3", "null", "[]", "{}"],
    ids=["object", "nested-arrays", "string", "number", "null", "empty-array", "empty-object"],
)
def test_loads_frozen_decodes_straight_to_frozen(text: str) -> None:
    value = loads_frozen(text)
    assert value == json.loads(text)
    assert json.dumps(value) == json.dumps(json.loads(text))
    assert freeze(value) is value  # nothing left to freeze

    def walk(v: Any) -> None:
        assert not isinstance(v, list) or isinstance(v, FrozenList)
        if isinstance(v, dict):
            assert isinstance(v, FrozenDict)
            for x in v.values():
                walk(x)
        elif isinstance(v, tuple):
            assert isinstance(v, FrozenList)
            for x in v:
                walk(x)

    walk(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_thaw_inverts_freeze_and_json_agrees(value: Any) -> None:
    frozen = freeze(value)
    assert thaw(frozen) == value
    assert frozen == value and loads_frozen(json.dumps(value)) == frozen
    assert json.dumps(frozen, sort_keys=True) == json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("decode", [lambda text: freeze(json.loads(text)), loads_frozen],
                         ids=["freeze", "loads_frozen"])
def test_keys_and_short_values_are_shared_between_separately_decoded_objects(
        decode: Callable[[str], Any]) -> None:
    # loads_frozen (every PackedMapping read) interned nothing before 2026-12-08
    text = json.dumps({"metadata": {"name": "a-name-decoded-twice"},
                       "status": {"reason": "ScaledUp", "message": "x" * (INTERN_MAX_LENGTH + 1)}})
    one, two = decode(text), decode(text)
    assert one["metadata"]["name"] is two["metadata"]["name"]
    key_one = next(iter(one))
    key_two = next(iter(two))
    assert key_one == key_two == "metadata" and key_one is key_two
    assert one["status"]["reason"] is two["status"]["reason"]
    # long strings (messages, queries) are not interned
    assert one["status"]["message"] == two["status"]["message"]
    assert one["status"]["message"] is not two["status"]["message"]
