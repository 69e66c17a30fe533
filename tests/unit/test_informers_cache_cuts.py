"""What each kind's informer cache keeps (issue 30, caches by reader): ``KIND_CUTS`` drops only what no
consumer reads, checked against the declared reads; the real readers (target handlers, the RSG's
clone, the parse, the status writer, the claims) give the same answers on a transformed object as
on the object the API server sent; equal status rows are shared across an ElasticScaler fleet; and
``DynamicInformers`` applies each kind's transform."""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import pytest
from fakeapi import FakeAPI, make_obj
from test_informers_transform import RecordingHandler

from escaler.api import TargetRef
from escaler.api.elasticscaler import ElasticScaler
from escaler.api.rsg import ResourceScalingGroup
from escaler.clock import FakeClock
from escaler.informers.dynamic import DynamicInformers
from escaler.informers.factory import InformerFactory, ResourceKey
from escaler.informers.frozen import FrozenDict, PackedMapping, freeze, thaw
from escaler.informers.transform import (
    KIND_CUTS,
    LAST_APPLIED,
    Cut,
    check_cut,
    drop_paths,
    identity,
    pack_paths,
    strip_managed_fields,
    transform_for,
)
from escaler.packed import JsonPacker
from escaler.reconcilers.kit.claims import scaler_target
from escaler.reconcilers.kit.status import StatusWriter
from escaler.reconcilers.rsg.clones import clone_of
from escaler.scaling.annotations import parse_annotations
from escaler.targets import DeploymentHandler, StatefulSetHandler

NS = "team"
APPLIED = '{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":"...the whole object..."}}'


def _condition(kind: str, status: str, reason: str, message: str, when: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "observedGeneration": 1, "lastTransitionTime": when,
            "reason": reason, "message": message}


def _deployment(name: str = "llama", kind: str = "Deployment", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "42",
                     "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"app": name}, "managedFields": [{"manager": "kubectl"}],
                     "annotations": {LAST_APPLIED: APPLIED, "deployment.kubernetes.io/revision": "3",
                                     "team": "llm"}},
        "spec": {"replicas": 4, "paused": False, "selector": {"matchLabels": {"app": name}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "llm:1",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        "status": {"observedGeneration": 2, "replicas": 4, "readyReplicas": 3, "updatedReplicas": 2,
                   "currentRevision": "r1", "updateRevision": "r2", **status,
                   "conditions": [
                       _condition("Available", "True", "MinimumReplicasAvailable",
                                  "Deployment has minimum availability.", "2026-01-01T00:00:05Z"),
                       _condition("Progressing", "True", "NewReplicaSetAvailable",
                                  f'ReplicaSet "{name}-7d9f" has successfully progressed.',
                                  "2026-01-01T00:00:07Z")]},
    }


class _Dynamic:
    """What a handler needs of a DynamicClient when the cache has the object: ``resolve`` only."""

    def resolve(self, ref: Any) -> object:
        return object()

    def get(self, *args: Any) -> Any:
        raise AssertionError("the handler must read the cached object, not GET")


# ---- the cut table --------------------------------------------------------------------------------


def test_a_cut_may_not_drop_what_a_consumer_reads() -> None:
    with pytest.raises(ValueError, match=r"apps/deployments: the cache may not drop spec.template: "
                                         r"rsg.clones reads spec"):
        check_cut("apps/deployments", Cut(drops=(("spec", "template"),), reads={"rsg.clones": (("spec",),)}))
    with pytest.raises(ValueError, match=r"may not drop status: x reads status\.replicas"):
        check_cut("k", Cut(drops=(("status",),), reads={"x": (("status", "replicas"),)}))
    with pytest.raises(ValueError, match=r"reads the whole object"):
        check_cut("k", Cut(drops=(("status",),), reads={"x": ((),)}))
    with pytest.raises(ValueError, match=r"annotations\.a/b: x reads metadata\.annotations\.a/\*"):
        check_cut("k", Cut(drops=(("metadata", "annotations", "a/b"),),
                           reads={"x": (("metadata", "annotations", "a/*"),)}))
    # "every annotation but last-applied" does not read last-applied
    check_cut("k", Cut(drops=(("metadata", "annotations", LAST_APPLIED),),
                       reads={"x": (("metadata", "annotations", "!" + LAST_APPLIED),)}))
    with pytest.raises(ValueError, match=r"annotations\.team"):
        check_cut("k", Cut(drops=(("metadata", "annotations", "team"),),
                           reads={"x": (("metadata", "annotations", "!" + LAST_APPLIED),)}))


def test_every_declared_cut_passes_its_own_check_and_horizontalpodautoscalers_are_never_cut() -> None:
    for kind, cut in KIND_CUTS.items():
        check_cut("/".join(kind), cut)
        assert cut.reads, f"{kind}: a cut names its readers"
    # hpasync PUTs a thawed cached HPA: a dropped field would be erased on the server
    assert ("autoscaling", "horizontalpodautoscalers") not in KIND_CUTS
    assert transform_for("autoscaling", "horizontalpodautoscalers") is strip_managed_fields
    assert transform_for("", "pods") is strip_managed_fields


def test_drop_paths_removes_only_those_keys_and_never_mutates() -> None:
    drop = drop_paths(("metadata", "annotations", LAST_APPLIED), ("status", "conditions"))
    obj = _deployment()
    before = copy.deepcopy(obj)
    out = drop(obj)
    assert obj == before, "the argument is not mutated"
    assert out["metadata"]["annotations"] == {"deployment.kubernetes.io/revision": "3", "team": "llm"}
    assert "conditions" not in out["status"] and out["status"]["replicas"] == 4
    assert out["spec"] is obj["spec"], "what is not cut is shared, not copied"
    assert drop(out) is out, "idempotent: nothing left to drop"
    bare = make_obj("x", spec={"replicas": 1})
    assert drop(bare) is bare
    with pytest.raises(ValueError, match="at least one key"):
        drop_paths(())


# ---- workloads: the real readers on the transformed object ---------------------------------------


@pytest.mark.parametrize("kind, resource, handler", [
    ("Deployment", "deployments", DeploymentHandler), ("StatefulSet", "statefulsets", StatefulSetHandler)])
def test_workload_caches_drop_conditions_and_last_applied_and_every_reader_sees_the_same(
        kind: str, resource: str, handler: Any) -> None:
    sent = _deployment(kind=kind)
    cached = freeze(transform_for("apps", resource)(copy.deepcopy(sent)))
    # dropped
    assert "conditions" not in cached["status"]
    assert LAST_APPLIED not in cached["metadata"]["annotations"]
    assert "managedFields" not in cached["metadata"]
    # the target handler's snapshot: every count, flag, selector and version the same
    a, b = handler(_Dynamic(), cache_get=lambda *_: sent), handler(_Dynamic(), cache_get=lambda *_: cached)
    ref = TargetRef(api_version="apps/v1", kind=kind, name="llama")
    snap_sent, snap_cached = a.read(NS, ref), b.read(NS, ref)
    fields = ("uid", "generation", "observed_generation", "spec_replicas", "status_replicas",
              "ready_replicas", "updated_replicas", "selector", "resource_version", "rollout_in_progress",
              "rollout_message", "settling_scale_down")
    assert {f: getattr(snap_cached, f) for f in fields} == {f: getattr(snap_sent, f) for f in fields}
    assert snap_cached.rollout_in_progress, "the fixture is mid-rollout: the flag is really compared"
    # the RSG's clone of a member: the same object to create (pod template, labels, annotations)
    owner = ResourceScalingGroup.model_validate({
        "apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd", "namespace": NS, "uid": "rsg-uid"},
        "spec": {"members": [{"name": "m", "targetRef": {"apiVersion": "apps/v1", "kind": kind,
                                                          "name": "llama"}}]}})
    assert clone_of(thaw(cached), owner, "m", 2, 1) == clone_of(sent, owner, "m", 2, 1)
    assert cached["spec"]["template"] == sent["spec"]["template"], "the pod template stays (RSG reads it)"


def test_other_kinds_keep_everything_but_managed_fields() -> None:
    pod = _deployment(kind="Pod")
    cached = transform_for("", "pods")(pod)
    assert cached["status"]["conditions"] == pod["status"]["conditions"]
    assert cached["metadata"]["annotations"][LAST_APPLIED] == APPLIED


# ---- ElasticScalers: nothing read is dropped, equal status rows are shared -----------------------


def _scaler(name: str, when: str = "2026-01-01T00:00:00Z", replicas: int = 2) -> dict[str, Any]:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"w-{name}"}
    return {
        "apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "7",
                     "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "managedFields": [{"manager": "kubectl"}],
                     "annotations": {LAST_APPLIED: APPLIED, "elasticscaler.io/metrics.windowSeconds": "120"}},
        "spec": {"targetRef": ref, "minReplicas": 1, "maxReplicas": 10,
                 "trigger": {"type": "MetricsTrigger", "metricsTrigger": {
                     "scalingAlgorithm": "apa", "metrics": [
                     {"type": "ExternalServer", "externalServer": {
                         "endpoint": "http://prom.example:9090", "query": f'sum(load{{s="{name}"}})',
                         "target": {"type": "Value", "value": "10"}}}]}}},
        "status": {
            "observedGeneration": 1, "currentReplicas": replicas, "desiredReplicas": replicas,
            "currentMetrics": [{"name": f'sum(load{{s="{name}"}})', "type": "ExternalServer", "value": 20.0,
                                "target": 10.0, "targetType": "Value", "recommendedReplicas": replicas}],
            "recentDecisions": [{"time": when, "from": 1, "to": replicas, "reason": "load"}],
            "conditions": [
                _condition("ScalingActive", "True", "MetricsAvailable",
                           f"evaluated 1 of 1 metrics; recommends {replicas} replicas", when),
                _condition("AbleToScale", "True", "Synced",
                           f"the target is at the desired count ({replicas})", when),
                _condition("Validated", "True", "Valid", "the spec is valid", when)],
            "resolvedTargetRef": dict(ref),
        },
    }


def test_elasticscaler_cache_drops_only_last_applied_and_the_readers_see_the_same() -> None:
    es = transform_for("elasticscaler.io", "elasticscalers")
    sent = _scaler("a")
    cached = freeze(es(copy.deepcopy(sent)))
    expected = copy.deepcopy(sent)
    del expected["metadata"]["managedFields"]
    del expected["metadata"]["annotations"][LAST_APPLIED]
    assert thaw(cached) == expected, "nothing else is dropped"
    # the parse: the same model, the same annotations
    assert ElasticScaler.parse(cached).spec == ElasticScaler.parse(sent).spec
    assert (parse_annotations(cached["metadata"]["annotations"])
            == parse_annotations(sent["metadata"]["annotations"]))
    # the status writer: the cached status is what the cluster holds (nothing to write)
    writer = StatusWriter(client=None)  # type: ignore[arg-type]
    assert not writer.changed(cached, copy.deepcopy(sent["status"]))
    assert writer.changed(cached, {**copy.deepcopy(sent["status"]), "desiredReplicas": 3})
    assert writer.base_status(cached) == sent["status"]
    # the claims: the same target
    assert scaler_target(cached) == scaler_target(sent) is not None


def test_the_cached_spec_and_status_are_kept_packed_and_read_as_sent() -> None:
    es = transform_for("elasticscaler.io", "elasticscalers")
    sent = _scaler("a")
    before = copy.deepcopy(sent)
    cached = freeze(es(sent))
    assert sent == before, "the argument is not mutated"
    spec, status = cached["spec"], cached["status"]
    assert isinstance(spec, PackedMapping) and isinstance(status, PackedMapping)
    assert spec == before["spec"] and status == before["status"]
    assert status["conditions"][0]["message"] == "evaluated 1 of 1 metrics; recommends 2 replicas"
    assert spec["targetRef"]["name"] == "w-a"
    # each a fraction of its text
    for packed, sent_part in ((spec, before["spec"]), (status, before["status"])):
        text = json.dumps(sent_part, separators=(",", ":"))
        assert packed.packed_size() < len(text) / 2, (packed.packed_size(), len(text))
    # idempotent: a cached object passes unchanged (the reflector and the store both transform)
    again = es(cached)
    assert again["spec"] is spec and again["status"] is status
    # metadata is not packed: every sync reads its uid and resourceVersion
    assert type(cached["metadata"]) is FrozenDict


def test_pack_paths_keeps_the_transform_contract() -> None:
    packer = JsonPacker(b'{"status":{}}')
    pack = pack_paths(packer, ("status",), ("spec", "inner"))
    obj = {"spec": {"inner": {"a": 1}, "other": 2}, "status": {"b": [1, 2]}}
    before = copy.deepcopy(obj)
    out = pack(obj)
    assert obj == before, "the argument is not mutated"
    assert isinstance(out["status"], PackedMapping) and isinstance(out["spec"]["inner"], PackedMapping)
    assert out == before and out["spec"]["other"] == 2
    assert pack(out) is out, "idempotent"
    bare = make_obj("x")
    assert pack(bare) is bare, "absent paths: as it was"
    odd = {"status": "text", "spec": {"inner": [1]}}
    assert pack(odd) is odd, "not a mapping: as it was"
    with pytest.raises(ValueError, match="every path needs at least one key"):
        pack_paths(packer, ())


# ---- both factories apply the kind's transform ---------------------------------------------------


def test_the_factory_caches_elasticscalers_with_their_status_packed() -> None:
    fake = FakeAPI([_scaler("a"), _scaler("b")])
    factory = InformerFactory(lambda key: fake, clock=FakeClock())
    informer = factory.informer_for(ResourceKey("elasticscaler.io", "v1alpha1", "elasticscalers"))
    stop = threading.Event()
    factory.start(stop)
    try:
        assert factory.wait_for_cache_sync(5.0)
        cached = {o["metadata"]["name"]: o for o in informer.indexer.list()}
        assert isinstance(cached["a"]["status"], PackedMapping)
        assert cached["a"]["status"] == _scaler("a")["status"]
        assert LAST_APPLIED not in cached["a"]["metadata"]["annotations"]
    finally:
        stop.set()
        factory.shutdown()


def test_dynamic_informers_apply_each_kinds_transform_and_an_explicit_one_to_every_kind() -> None:
    fake = FakeAPI([_deployment("a")])
    dyn = DynamicInformers(fake.for_key, clock=FakeClock())
    seen: list[str] = []
    dyn.add_transform(lambda o: seen.append(o["metadata"]["name"]) or o)  # type: ignore[func-returns-value]
    try:
        deployments = dyn.register(ResourceKey("apps", "v1", "deployments", namespace=NS), RecordingHandler())
        pods = dyn.register(ResourceKey("", "v1", "pods", namespace=NS), RecordingHandler())
        fake.wait_for(lambda: fake.open_watches == 2)
        dep = deployments.informer.store.get_by_key(f"{NS}/a")
        pod = pods.informer.store.get_by_key(f"{NS}/a")
        assert dep is not None and "conditions" not in dep["status"]
        assert pod is not None and len(pod["status"]["conditions"]) == 2, "pods keep their conditions"
        assert "managedFields" not in pod["metadata"] and isinstance(pod, FrozenDict)
        assert "a" in seen, "the added transform runs after the kind's"
    finally:
        dyn.stop_all()
    fake = FakeAPI([_deployment("a")])
    dyn = DynamicInformers(fake.for_key, clock=FakeClock(), transform=identity)
    try:
        reg = dyn.register(ResourceKey("apps", "v1", "deployments", namespace=NS), RecordingHandler())
        fake.wait_for(lambda: fake.open_watches == 1)
        cached = reg.informer.store.get_by_key(f"{NS}/a")
        assert cached is not None and len(cached["status"]["conditions"]) == 2
    finally:
        dyn.stop_all()
