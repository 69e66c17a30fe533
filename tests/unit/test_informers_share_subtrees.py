"""ElasticScaler caches share equal spec parts across the fleet (``SubtreeSharer``, issue 30): nothing
is removed, equal triggers are one frozen object, the transform keeps the ``Transform`` contract
(no mutation, idempotent), and ``InformerFactory`` gives it to the ElasticScaler informers only."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from fakeapi import FakeAPI, make_obj

from escaler.clock import FakeClock
from escaler.informers.factory import InformerFactory, ResourceKey
from escaler.informers.frozen import FrozenDict, thaw
from escaler.informers.transform import (
    ELASTICSCALER_SHARED_PATHS,
    SubtreeSharer,
    strip_managed_fields,
    transform_for,
)

TRIGGER = {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [
    {"type": "External",
     "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}]}}


def _scaler(name: str, trigger: dict[str, Any] | None = None) -> dict[str, Any]:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"w-{name}"}
    obj = make_obj(name, spec={"targetRef": ref, "minReplicas": 1, "maxReplicas": 10,
                               "trigger": copy.deepcopy(trigger or TRIGGER)})
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    obj["status"] = {"desiredReplicas": 2, "conditions": [{"type": "Validated", "status": "True"}]}
    return obj


def test_equal_triggers_become_one_frozen_object_and_nothing_else_changes() -> None:
    share = SubtreeSharer(ELASTICSCALER_SHARED_PATHS)
    a_in, b_in = _scaler("a"), _scaler("b")
    before = copy.deepcopy(a_in)
    a, b = share(a_in), share(b_in)
    assert a_in == before, "the argument is not mutated"
    assert a == a_in and b == b_in, "every field is what came in"
    assert a["spec"]["trigger"] is b["spec"]["trigger"] and isinstance(a["spec"]["trigger"], FrozenDict)
    assert a["spec"]["targetRef"] is a_in["spec"]["targetRef"] and a["status"] is a_in["status"]
    assert share(a) == a and share(a)["spec"]["trigger"] is a["spec"]["trigger"], "idempotent"
    assert len(share) == 1


def test_different_values_are_not_shared() -> None:
    share = SubtreeSharer(ELASTICSCALER_SHARED_PATHS)
    other = copy.deepcopy(TRIGGER)
    other["metricsTrigger"]["metrics"][0]["external"]["target"]["value"] = 10  # 10, not "10"
    a, b = share(_scaler("a")), share(_scaler("b", other))
    assert a["spec"]["trigger"] is not b["spec"]["trigger"]
    assert thaw(b["spec"]["trigger"]) == other and thaw(a["spec"]["trigger"]) == TRIGGER


def test_objects_without_the_paths_pass_unchanged() -> None:
    share = SubtreeSharer(ELASTICSCALER_SHARED_PATHS)
    obj = make_obj("x", spec={"replicas": 1})
    assert share(obj) is obj and share({"metadata": {}}) == {"metadata": {}}
    assert share({"spec": {"trigger": "not a mapping"}}) == {"spec": {"trigger": "not a mapping"}}


def test_the_table_is_bounded_and_its_arguments_validated() -> None:
    share = SubtreeSharer((("spec", "trigger"),), max_entries=2)
    for i in range(5):
        share({"spec": {"trigger": {"n": i}}})
    assert len(share) == 2
    with pytest.raises(ValueError, match="max_entries: must be >= 1"):
        SubtreeSharer((("spec",),), max_entries=0)
    with pytest.raises(ValueError, match="paths: every path needs at least one key"):
        SubtreeSharer(((),))


def test_transform_for_elasticscalers_shares_and_strips_the_rest_strips_only() -> None:
    es = transform_for("elasticscaler.io", "elasticscalers")
    a, b = es(_scaler("a")), es(_scaler("b"))
    assert a["spec"]["trigger"] is b["spec"]["trigger"]
    assert "managedFields" not in a["metadata"]
    assert transform_for("example.com", "widgets") is strip_managed_fields


def test_the_factorys_elasticscaler_informer_caches_one_trigger_for_the_fleet() -> None:
    fake = FakeAPI([_scaler("a"), _scaler("b")])
    factory = InformerFactory(lambda key: fake, clock=FakeClock())
    informer = factory.informer_for(ResourceKey("elasticscaler.io", "v1alpha1", "elasticscalers"))
    stop = threading.Event()
    factory.start(stop)
    try:
        assert factory.wait_for_cache_sync(5.0)
        cached = {o["metadata"]["name"]: o for o in informer.indexer.list()}
        assert cached["a"]["spec"]["trigger"] is cached["b"]["spec"]["trigger"]
        assert cached["a"]["spec"]["targetRef"]["name"] == "w-a"
        assert cached["b"]["status"]["desiredReplicas"] == 2
        assert "managedFields" not in cached["a"]["metadata"]
    finally:
        stop.set()
        factory.shutdown()
