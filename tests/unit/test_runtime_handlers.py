"""Event handlers (object, owner, map func), tombstones, and the source glue with predicates."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.informers.frozen import freeze
from escaler.informers.store import DeletedFinalStateUnknown
from escaler.runtime.handlers import (
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
    EventHandler,
)
from escaler.runtime.predicates import GenerationChangedPredicate, predicate_funcs
from escaler.runtime.source import EventSource
from escaler.runtime.types import Request


class ListQueue:
    def __init__(self) -> None:
        self.items: list[Request] = []

    def add(self, item: Request) -> None:
        self.items.append(item)


def ref(kind: str, name: str, api_version: str = "escaler.io/v1alpha1", controller: bool | None = True,
        ) -> dict[str, Any]:
    r: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}"}
    if controller is not None:
        r["controller"] = controller
    return r


def pod(name: str = "p", namespace: str = "team", owners: list[dict[str, Any]] | None = None,
        generation: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": generation}
    if namespace:
        meta["namespace"] = namespace
    if owners is not None:
        meta["ownerReferences"] = owners
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def test_enqueue_for_object_create_update_delete_generic() -> None:
    h = EnqueueRequestForObject()
    q = ListQueue()
    h.create(pod("a"), q)
    h.update(pod("a"), pod("a", generation=2), q)
    h.delete(pod("b"), q)
    h.generic(pod("c", namespace=""), q)
    assert q.items == [Request("team", "a"), Request("team", "a"), Request("team", "b"), Request("", "c")]


def test_enqueue_for_object_ignores_objects_without_name() -> None:
    q = ListQueue()
    EnqueueRequestForObject().create({"metadata": {}}, q)
    assert q.items == []


OWNER_CASES = [
    # (id, handler, owner refs, expected requests)
    ("controller-ref", EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler"),
     [ref("ElasticScaler", "s1")], [Request("team", "s1")]),
    ("group-only-matches-any-version", EnqueueRequestForOwner("escaler.io", "ElasticScaler"),
     [ref("ElasticScaler", "s1", api_version="escaler.io/v1beta9")], [Request("team", "s1")]),
    ("other-group-ignored", EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler"),
     [ref("ElasticScaler", "s1", api_version="other.io/v1")], []),
    ("other-kind-ignored", EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler"),
     [ref("Tidal", "t1")], []),
    ("non-controller-ref-ignored", EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler"),
     [ref("ElasticScaler", "s1", controller=False), ref("ElasticScaler", "s2", controller=None)], []),
    ("all-owners-when-not-is-controller",
     EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler", is_controller=False),
     [ref("ElasticScaler", "s1", controller=False), ref("ElasticScaler", "s2")],
     [Request("team", "s1"), Request("team", "s2")]),
    ("core-group-apiversion", EnqueueRequestForOwner("v1", "ConfigMap"),
     [ref("ConfigMap", "cm", api_version="v1")], [Request("team", "cm")]),
    ("apps-group", EnqueueRequestForOwner("apps/v1", "ReplicaSet"),
     [ref("ReplicaSet", "rs", api_version="apps/v1")], [Request("team", "rs")]),
    ("cluster-scoped-owner", EnqueueRequestForOwner("v1", "Node", owner_namespaced=False),
     [ref("Node", "n1", api_version="v1")], [Request("", "n1")]),
    ("no-owner-refs", EnqueueRequestForOwner("apps/v1", "Deployment"), None, []),
]


@pytest.mark.parametrize(("handler", "owners", "expected"), [c[1:] for c in OWNER_CASES],
                         ids=[c[0] for c in OWNER_CASES])
def test_enqueue_for_owner(handler: EnqueueRequestForOwner, owners: list[dict[str, Any]] | None,
                           expected: list[Request]) -> None:
    q = ListQueue()
    handler.create(freeze(pod(owners=owners)), q)  # frozen: ownerReferences is a tuple
    assert q.items == expected


def test_enqueue_for_owner_update_enqueues_old_and_new_owner_once_each() -> None:
    h = EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler")
    q = ListQueue()
    h.update(pod(owners=[ref("ElasticScaler", "old")]), pod(owners=[ref("ElasticScaler", "new")]), q)
    assert q.items == [Request("team", "old"), Request("team", "new")]
    q2 = ListQueue()
    h.update(pod(owners=[ref("ElasticScaler", "same")]), pod(owners=[ref("ElasticScaler", "same")]), q2)
    assert q2.items == [Request("team", "same")]


def test_map_func_maps_and_dedups_old_and_new() -> None:
    def fn(o: Any) -> list[Request]:
        target = (o["metadata"].get("labels") or {}).get("scaler")
        return [Request("ops", target)] if target else []

    h = EnqueueRequestsFromMapFunc(fn)
    q = ListQueue()
    h.create(pod(labels={"scaler": "a"}), q)
    h.update(pod(labels={"scaler": "a"}), pod(labels={"scaler": "b"}), q)
    h.delete(pod(labels={}), q)
    assert q.items == [Request("ops", "a"), Request("ops", "a"), Request("ops", "b")]


def test_map_func_failure_is_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    def fn(o: Any) -> list[Request]:
        raise KeyError("bug")

    q = ListQueue()
    EnqueueRequestsFromMapFunc(fn).create(pod(), q)
    assert q.items == []
    assert "map function" in caplog.text


@pytest.mark.parametrize("handler", [
    EnqueueRequestForObject(),
    EnqueueRequestForOwner("escaler.io/v1alpha1", "ElasticScaler"),
    EnqueueRequestsFromMapFunc(lambda o: [Request("team", "s1")]),
], ids=["object", "owner", "map-func"])
def test_handlers_unwrap_tombstones(handler: EventHandler) -> None:
    last = freeze(pod("s1" if isinstance(handler, EnqueueRequestForObject) else "p",
                      owners=[ref("ElasticScaler", "s1")]))
    q = ListQueue()
    handler.delete(DeletedFinalStateUnknown("team/p", last), q)  # type: ignore[arg-type]
    assert q.items == [Request("team", "s1")]


def test_event_source_applies_predicates_per_event_kind_and_unwraps() -> None:
    q = ListQueue()
    src = EventSource(EnqueueRequestForObject(), [GenerationChangedPredicate()], q)
    src.on_add(freeze(pod("a")), True)
    src.on_update(freeze(pod("a", generation=1)), freeze(pod("a", generation=1)))  # status write
    src.on_update(freeze(pod("b", generation=1)), freeze(pod("b", generation=2)))  # spec change
    src.on_delete(DeletedFinalStateUnknown("team/c", freeze(pod("c"))))
    assert q.items == [Request("team", "a"), Request("team", "b"), Request("team", "c")]


def test_event_source_all_predicates_must_pass_and_delete_sees_unwrapped_object() -> None:
    seen: list[Any] = []

    def on_delete(o: Any) -> bool:
        seen.append(o)
        return True

    q = ListQueue()
    src = EventSource(EnqueueRequestForObject(),
                      [predicate_funcs(delete=on_delete), predicate_funcs(create=lambda o: False)], q)
    src.on_add(freeze(pod("a")), False)
    src.on_delete(DeletedFinalStateUnknown("team/c", freeze(pod("c"))))
    assert q.items == [Request("team", "c")]
    assert seen[0]["metadata"]["name"] == "c"


def test_event_source_survives_a_failing_predicate(caplog: pytest.LogCaptureFixture) -> None:
    def boom(o: Any) -> bool:
        raise RuntimeError("predicate bug")

    q = ListQueue()
    src = EventSource(EnqueueRequestForObject(), [predicate_funcs(create=boom)], q, "test watch")
    src.on_add(freeze(pod("a")), False)
    src.on_delete(freeze(pod("b")))
    assert q.items == [Request("team", "b")]
    assert "create event handling failed for test watch" in caplog.text
