"""Indexer: keys, frozen storage, indexes (incl. namespace and re-indexing), tombstones."""

from __future__ import annotations

import random
from typing import Any

import pytest
from fakeapi import make_obj

from escaler.informers.frozen import FrozenDict
from escaler.informers.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    meta_namespace_key,
    namespace_index_func,
    split_key,
)


def by_app(obj: FrozenDict) -> list[str]:
    labels = obj["metadata"].get("labels") or {}
    return [labels["app"]] if "app" in labels else []


def by_each_label_value(obj: FrozenDict) -> list[str]:
    return sorted((obj["metadata"].get("labels") or {}).values())


def names(objs: list[FrozenDict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        (make_obj("a", "ns1"), "ns1/a"),
        (make_obj("node-1", ""), "node-1"),
        ({"metadata": {"name": "x", "namespace": None}}, "x"),
        (DeletedFinalStateUnknown("ns/gone", FrozenDict(make_obj("gone", "ns"))), "ns/gone"),
    ],
    ids=["namespaced", "cluster-scoped", "null-namespace", "tombstone"],
)
def test_meta_namespace_key(obj: Any, key: str) -> None:
    assert meta_namespace_key(obj) == key


@pytest.mark.parametrize(
    "obj", [{}, {"metadata": {}}, {"metadata": {"name": ""}}, {"metadata": "x"}],
    ids=["no-metadata", "no-name", "empty-name", "metadata-not-object"],
)
def test_meta_namespace_key_rejects_unnamed(obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="metadata"):
        meta_namespace_key(obj)


@pytest.mark.parametrize(
    ("key", "expected"),
    [("a", ("", "a")), ("ns/a", ("ns", "a"))],
    ids=["cluster-scoped", "namespaced"],
)
def test_split_key(key: str, expected: tuple[str, str]) -> None:
    assert split_key(key) == expected


@pytest.mark.parametrize("key", ["", "/a", "ns/", "a/b/c"], ids=["empty", "no-ns", "no-name", "three-parts"])
def test_split_key_rejects(key: str) -> None:
    with pytest.raises(ValueError, match="store key"):
        split_key(key)


def test_add_update_delete_get_list() -> None:
    store = Indexer()
    a = store.add(make_obj("a", "ns1", data={"v": 1}))
    store.add(make_obj("b", "ns2"))
    assert isinstance(a, FrozenDict)
    assert store.get(make_obj("a", "ns1")) is a
    assert store.get_by_key("ns1/a") is a
    assert sorted(store.list_keys()) == ["ns1/a", "ns2/b"]
    assert names(store.list()) == ["a", "b"]
    store.update(make_obj("a", "ns1", data={"v": 2}))
    assert store.get_by_key("ns1/a")["data"]["v"] == 2  # type: ignore[index]
    assert store.delete(make_obj("a", "ns1"))["data"]["v"] == 2  # type: ignore[index]
    assert store.delete(make_obj("a", "ns1")) is None
    assert store.get_by_key("ns1/a") is None
    assert len(store) == 1


def test_stored_objects_are_read_only_and_detached_from_input() -> None:
    store = Indexer()
    src = make_obj("a", labels={"app": "x"})
    stored = store.add(src)
    src["metadata"]["labels"]["app"] = "mutated"
    assert stored["metadata"]["labels"]["app"] == "x"
    with pytest.raises(TypeError, match="read-only"):
        store.list()[0]["metadata"]["labels"]["app"] = "y"


def test_delete_by_tombstone() -> None:
    store = Indexer()
    obj = store.add(make_obj("a"))
    assert store.delete(DeletedFinalStateUnknown("default/a", obj)) is obj
    assert store.list() == []


def test_replace_swaps_contents_and_returns_previous() -> None:
    store = Indexer(indexers={NAMESPACE_INDEX: namespace_index_func})
    store.add(make_obj("a", "ns1"))
    store.add(make_obj("b", "ns1"))
    old = store.replace([make_obj("b", "ns1"), make_obj("c", "ns2")], "42")
    assert sorted(old) == ["ns1/a", "ns1/b"]
    assert sorted(store.list_keys()) == ["ns1/b", "ns2/c"]
    assert store.index_keys(NAMESPACE_INDEX, "ns1") == ["ns1/b"]
    assert store.index_keys(NAMESPACE_INDEX, "ns2") == ["ns2/c"]


def test_namespace_index() -> None:
    store = Indexer(indexers={NAMESPACE_INDEX: namespace_index_func})
    for name, ns in [("a", "ns1"), ("b", "ns1"), ("c", "ns2"), ("node", "")]:
        store.add(make_obj(name, ns))
    assert names(store.by_index(NAMESPACE_INDEX, "ns1")) == ["a", "b"]
    assert names(store.by_index(NAMESPACE_INDEX, "")) == ["node"]
    assert store.by_index(NAMESPACE_INDEX, "nope") == []
    assert names(store.index(NAMESPACE_INDEX, make_obj("other", "ns2"))) == ["c"]


def test_index_follows_updates_and_deletes() -> None:
    store = Indexer(indexers={"app": by_app})
    store.add(make_obj("a", labels={"app": "web"}))
    store.add(make_obj("b", labels={"app": "web"}))
    store.update(make_obj("a", labels={"app": "db"}))
    assert names(store.by_index("app", "web")) == ["b"]
    assert names(store.by_index("app", "db")) == ["a"]
    store.update(make_obj("b"))  # label removed: leaves the index
    assert store.by_index("app", "web") == []
    store.delete(make_obj("a"))
    assert store.by_index("app", "db") == []
    assert store._indices["app"] == {}  # no empty buckets left behind


def test_multi_value_index_and_index_lookup() -> None:
    store = Indexer(indexers={"labels": by_each_label_value})
    store.add(make_obj("a", labels={"x": "red", "y": "blue"}))
    store.add(make_obj("b", labels={"x": "blue"}))
    store.add(make_obj("c", labels={"x": "green"}))
    assert names(store.by_index("labels", "blue")) == ["a", "b"]
    assert names(store.index("labels", make_obj("q", labels={"k": "red", "j": "green"}))) == ["a", "c"]


def test_add_indexers_after_items_reindexes() -> None:
    store = Indexer()
    store.add(make_obj("a", labels={"app": "web"}))
    store.add(make_obj("b", labels={"app": "db"}))
    store.add_indexers({"app": by_app, NAMESPACE_INDEX: namespace_index_func})
    assert names(store.by_index("app", "web")) == ["a"]
    assert sorted(store.index_keys(NAMESPACE_INDEX, "default")) == ["default/a", "default/b"]
    store.add(make_obj("c", labels={"app": "web"}))
    assert names(store.by_index("app", "web")) == ["a", "c"]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda s: s.by_index("nope", "v"), KeyError, "does not exist"),
        (lambda s: s.index_keys("nope", "v"), KeyError, "does not exist"),
        (lambda s: s.index("nope", make_obj("a")), KeyError, "does not exist"),
        (lambda s: s.add_indexers({"app": by_app}), ValueError, "already exist"),
    ],
    ids=["by_index-unknown", "index_keys-unknown", "index-unknown", "duplicate-name"],
)
def test_index_errors(call: Any, error: type[Exception], match: str) -> None:
    store = Indexer(indexers={"app": by_app})
    with pytest.raises(error, match=match):
        call(store)


def test_raising_index_func_leaves_store_unchanged() -> None:
    def picky(obj: FrozenDict) -> list[str]:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        return [obj["metadata"]["name"]]

    store = Indexer(indexers={"picky": picky})
    store.add(make_obj("good"))
    with pytest.raises(RuntimeError):
        store.add(make_obj("bad"))
    assert store.list_keys() == ["default/good"]
    assert store.index_keys("picky", "good") == ["default/good"]


def test_a_value_with_one_object_holds_its_key_not_a_set() -> None:
    """Memory per scaler (issue 30): most index values name one object (a target's scaler), and a
    one-key set costs 216 bytes; the index keeps the key itself until a second object shares the
    value, and goes back to it when one is left."""
    store = Indexer(indexers={"app": by_app})
    store.add(make_obj("a", labels={"app": "web"}))
    assert store._indices["app"] == {"web": "default/a"}
    store.add(make_obj("b", labels={"app": "web"}))
    assert store._indices["app"] == {"web": {"default/a", "default/b"}}
    store.delete(make_obj("a"))
    assert store._indices["app"] == {"web": "default/b"}
    store.replace([make_obj("c", labels={"app": "db"})])
    assert store._indices["app"] == {"db": "default/c"}


def test_the_index_matches_a_plain_model_through_random_changes() -> None:
    """Every add, update, delete and replace, checked against a recomputation from the objects."""
    rng = random.Random(30)
    store = Indexer(indexers={"each": by_each_label_value})
    objs: dict[str, dict[str, Any]] = {}
    values = ["v0", "v1", "v2"]
    for step in range(600):
        op = rng.random()
        name = f"o{rng.randrange(8)}"
        if op < 0.6:
            labels = {f"k{i}": rng.choice(values) for i in range(rng.randrange(3))}
            objs[name] = make_obj(name, labels=labels)
            store.add(objs[name])
        elif op < 0.95:
            objs.pop(name, None)
            store.delete(make_obj(name))
        else:
            keep = rng.sample(sorted(objs), k=len(objs) // 2)
            objs = {n: objs[n] for n in keep}
            store.replace(list(objs.values()))
        for v in values:
            want = sorted(n for n, o in objs.items() if v in (o["metadata"].get("labels") or {}).values())
            assert names(store.by_index("each", v)) == want, (step, v)
            assert sorted(store.index_keys("each", v)) == [f"default/{n}" for n in want], (step, v)
        assert all(isinstance(k, str) or len(k) > 1 for k in store._indices["each"].values()), step


def test_keys_and_request_names_are_one_string_per_object_not_one_per_event() -> None:
    """Issue 30: a store key, and a Request made from one, are interned: the store, its indexes, the
    watch index and every per-scaler map hold one string per object, not a copy per event."""
    import json

    from escaler.runtime.types import Request

    text = json.dumps({"metadata": {"name": "a-scaler-seen-twice", "namespace": "team-interned"}})
    one, two = json.loads(text), json.loads(text)  # two events: two decodes, two sets of strings
    assert one["metadata"]["name"] is not two["metadata"]["name"]
    assert meta_namespace_key(one) is meta_namespace_key(two)
    r1 = Request.from_key(meta_namespace_key(one))
    r2 = Request(*json.loads('["team-interned", "a-scaler-seen-twice"]'))
    assert r1 == r2 and r1.name is r2.name and r1.namespace is r2.namespace
