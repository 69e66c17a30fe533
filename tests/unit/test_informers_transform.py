"""Informer transforms: managedFields are not cached by default; a transform never mutates its input;
the reflector transforms each list page as it arrives; DynamicInformers apply one chained transform."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fakeapi import FakeAPI, RecordingHandler, make_obj

from escaler.clock import FakeClock
from escaler.informers.dynamic import DynamicInformers
from escaler.informers.factory import ResourceKey
from escaler.informers.shared import SharedInformer
from escaler.informers.transform import chain, identity, strip_managed_fields

MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}}]


def _obj(name: str) -> dict[str, Any]:
    obj = make_obj(name, spec={"replicas": 1})
    obj["metadata"]["managedFields"] = MANAGED
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def _run(informer: SharedInformer, fake: FakeAPI, handler: RecordingHandler) -> threading.Event:
    informer.add_event_handler(handler)
    stop = threading.Event()
    informer.start(stop)
    assert informer.wait_for_sync(5.0)
    fake.wait_for(lambda: fake.open_watches == 1)
    return stop


def test_listed_and_watched_objects_are_cached_and_delivered_without_managed_fields() -> None:
    fake = FakeAPI([_obj("listed")])
    informer = SharedInformer(fake, name="t", clock=FakeClock())
    handler = RecordingHandler()
    stop = _run(informer, fake, handler)
    try:
        fake.create(_obj("watched"))
        events = handler.wait_for_count(2)
        for key in ("default/listed", "default/watched"):
            cached = informer.store.get_by_key(key)
            assert cached is not None
            assert "managedFields" not in cached["metadata"]
            assert cached["metadata"]["uid"] == f"uid-{key.split('/')[1]}"
            assert cached["spec"] == {"replicas": 1}
        assert all("managedFields" not in e.obj["metadata"] for e in events)
    finally:
        stop.set()


def test_identity_keeps_managed_fields() -> None:
    fake = FakeAPI([_obj("kept")])
    informer = SharedInformer(fake, name="t", clock=FakeClock(), transform=identity)
    stop = _run(informer, fake, RecordingHandler())
    try:
        cached = informer.store.get_by_key("default/kept")
        assert cached is not None and cached["metadata"]["managedFields"] == MANAGED
    finally:
        stop.set()


def test_strip_managed_fields_copies_instead_of_mutating() -> None:
    obj = _obj("x")
    out = strip_managed_fields(obj)
    assert "managedFields" in obj["metadata"]
    assert "managedFields" not in out["metadata"]
    assert out["spec"] is obj["spec"]
    plain = make_obj("y")
    assert strip_managed_fields(plain) is plain
    assert strip_managed_fields({"kind": "List"}) == {"kind": "List"}


def _count_calls(seen: list[str]) -> Any:
    def t(obj: Any) -> Any:
        seen.append(obj["metadata"]["name"])
        return {**obj, "spec": {"replicas": obj["spec"]["replicas"]}, "big": None} if "big" in obj else obj
    return t


def test_the_reflector_transforms_each_list_page_as_it_arrives() -> None:
    # a relist of large objects must peak at one page of them: the transform runs per page, before the
    # sink sees the whole list (and again in the sink: transforms are idempotent)
    objs = [{**_obj(f"o{i}"), "big": "x" * 1000} for i in range(3)]
    fake = FakeAPI(objs)
    calls: list[str] = []
    informer = SharedInformer(fake, name="t", clock=FakeClock(), transform=_count_calls(calls))
    stop = _run(informer, fake, RecordingHandler())
    try:
        cached = informer.store.get_by_key("default/o0")
        assert cached is not None and cached["big"] is None
        assert calls.count("o0") == 2, "once per page in the reflector, once in the store"
    finally:
        stop.set()


def test_chain_applies_both_in_order() -> None:
    both = chain(strip_managed_fields, lambda o: {**o, "seen": "managedFields" in o["metadata"]})
    out = both(_obj("a"))
    assert out["seen"] is False and "managedFields" not in out["metadata"]


def test_dynamic_informers_apply_one_transform_whoever_registers_and_refuse_a_late_one() -> None:
    fake = FakeAPI([_obj("a")])
    dyn = DynamicInformers(fake.for_key, clock=FakeClock())
    dyn.add_transform(lambda o: {**o, "spec": {}})
    try:
        reg = dyn.register(ResourceKey("", "v1", "pods"), RecordingHandler())
        fake.wait_for(lambda: fake.open_watches == 1)
        cached = reg.informer.store.get_by_key("default/a")
        assert cached is not None and cached["spec"] == {} and "managedFields" not in cached["metadata"]
        with pytest.raises(RuntimeError, match="already started"):
            dyn.add_transform(identity)
    finally:
        dyn.stop_all()
