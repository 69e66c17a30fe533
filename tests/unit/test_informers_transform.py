"""Informer transforms: managedFields are not cached by default; a transform never mutates its input."""

from __future__ import annotations

import threading
from typing import Any

from fakeapi import FakeAPI, RecordingHandler, make_obj

from escaler.clock import FakeClock
from escaler.informers.shared import SharedInformer
from escaler.informers.transform import identity, strip_managed_fields

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
