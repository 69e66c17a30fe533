"""escaler.targets.registry: (group, kind) → handler, generic fallback, embedder overrides."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_kube_fakeapi import FakeAPI
from test_targets_handlers import LWS_GV, RSG_GV, scale_doc

from escaler.api import TargetRef
from escaler.errors import StatusError
from escaler.kube.discovery import ResourceMapping, RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.targets import (
    DeploymentHandler,
    GenericScaleHandler,
    HandlerRegistry,
    LeaderWorkerSetHandler,
    ResourceScalingGroupHandler,
    StatefulSetHandler,
    TargetSnapshot,
    default_registry,
)
from escaler.targets.handler import ResourceHandler


@pytest.fixture
def dynamic() -> Iterator[DynamicClient]:
    with FakeAPI() as api:
        api.discovery[LWS_GV] = scale_doc("leaderworkerset.x-k8s.io/v1", "leaderworkersets",
                                          "LeaderWorkerSet")
        api.discovery[RSG_GV] = scale_doc("autoscaling.openfuyao.com/v1alpha1", "resourcescalinggroups",
                                          "ResourceScalingGroup")
        rest = api.rest()
        yield DynamicClient(rest, RESTMapper(rest))


@pytest.mark.parametrize(
    ("api_version", "kind", "cls"),
    [
        ("apps/v1", "Deployment", DeploymentHandler),
        ("apps/v1beta2", "Deployment", DeploymentHandler),
        ("apps/v1", "StatefulSet", StatefulSetHandler),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", LeaderWorkerSetHandler),
        ("autoscaling.openfuyao.com/v1alpha1", "ResourceScalingGroup", ResourceScalingGroupHandler),
        ("example.com/v1", "Widget", GenericScaleHandler),
        ("v1", "ReplicationController", GenericScaleHandler),
        ("apps/v1", "ReplicaSet", GenericScaleHandler),
    ],
    ids=["deployment", "any-version-of-the-group", "statefulset", "lws", "rsg", "generic-cr", "core-group",
         "unregistered-kind-of-a-known-group"],
)
def test_builtins_and_fallback(dynamic: DynamicClient, api_version: str, kind: str, cls: type) -> None:
    assert type(default_registry(dynamic).handler_for(api_version, kind)) is cls


def test_cache_get_reaches_every_builtin(dynamic: DynamicClient) -> None:
    seen: list[str] = []

    def cache_get(api_version: str, kind: str, namespace: str, name: str) -> None:
        seen.append(kind)
        return None

    reg = default_registry(dynamic, cache_get=cache_get)
    for api_version, kind in [("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
                              ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
                              ("autoscaling.openfuyao.com/v1alpha1", "ResourceScalingGroup"),
                              ("example.com/v1", "Widget")]:
        handler = reg.handler_for(api_version, kind)
        # the object does not exist (404): only the cache lookup before the GET matters here
        with pytest.raises(StatusError):
            handler.read("ns1", TargetRef(api_version=api_version, kind=kind, name="absent"))
    assert seen == ["Deployment", "StatefulSet", "LeaderWorkerSet", "ResourceScalingGroup", "Widget"]


class _Custom:
    def read(self, namespace: str, ref: object) -> TargetSnapshot:
        raise NotImplementedError

    def write_replicas(self, snapshot: TargetSnapshot, replicas: int) -> TargetSnapshot:
        raise NotImplementedError

    def pod_selector(self, snapshot: TargetSnapshot) -> str:
        return "custom=1"


def test_register_adds_and_replaces(dynamic: DynamicClient) -> None:
    reg = default_registry(dynamic)
    custom: ResourceHandler = _Custom()
    reg.register("serving.example.com", "InferencePool", custom)
    assert reg.handler_for("serving.example.com/v1", "InferencePool") is custom
    reg.register("apps", "Deployment", custom)  # an embedder overrides a built-in
    assert reg.handler_for("apps/v1", "Deployment") is custom
    assert ("serving.example.com", "InferencePool") in reg.registered()


def test_generic_only_registry(dynamic: DynamicClient) -> None:
    generic = GenericScaleHandler(dynamic)
    reg = HandlerRegistry(generic)
    assert reg.handler_for("apps/v1", "Deployment") is generic
    assert reg.generic is generic
    assert reg.registered() == []


@pytest.mark.parametrize("api_version", ["a/b/c", "Apps/v1", "", "apps/"], ids=["three-parts", "upper",
                                                                                  "empty", "no-version"])
def test_handler_for_refuses_bad_api_versions(dynamic: DynamicClient, api_version: str) -> None:
    with pytest.raises(ValueError, match="invalid apiVersion"):
        default_registry(dynamic).handler_for(api_version, "Deployment")


@pytest.mark.parametrize(("group", "kind"), [("apps", ""), ("Bad_Group", "X")],
                         ids=["empty-kind", "bad-group"])
def test_register_validates(dynamic: DynamicClient, group: str, kind: str) -> None:
    with pytest.raises(ValueError):
        default_registry(dynamic).register(group, kind, GenericScaleHandler(dynamic))


# -- which kinds may be a scaler's target (checked from discovery, before any watch) --------------

_M = ResourceMapping


@pytest.mark.parametrize(
    ("mapping", "problem"),
    [
        (_M("apps", "v1", "deployments", "Deployment", True, frozenset({"status", "scale"})), None),
        (_M("apps", "v1", "deployments", "Deployment", True), None),  # a handler suffices
        (_M("example.com", "v1", "widgets", "Widget", True, frozenset({"scale"})), None),
        (_M("", "v1", "replicationcontrollers", "ReplicationController", True, frozenset({"scale"})), None),
        (_M("", "v1", "nodes", "Node", False, frozenset({"status"})), "kind Node (nodes) is cluster-scoped"),
        (_M("example.com", "v1", "clusterwidgets", "ClusterWidget", False, frozenset({"scale"})),
         "kind ClusterWidget (clusterwidgets.example.com) is cluster-scoped"),
        (_M("", "v1", "secrets", "Secret", True), "kind Secret (secrets) is not scalable"),
        (_M("", "v1", "configmaps", "ConfigMap", True), "kind ConfigMap (configmaps) is not scalable"),
        (_M("example.com", "v1", "widgets", "Widget", True, frozenset({"status"})),
         "kind Widget (widgets.example.com) is not scalable"),
    ],
    ids=["deployment", "deployment-handler-without-scale", "crd-with-scale", "rc-with-scale",
         "node-cluster-scoped", "cluster-scoped-even-with-scale", "secret", "configmap", "crd-without-scale"],
)
def test_target_problem(dynamic: DynamicClient, mapping: ResourceMapping, problem: str | None) -> None:
    got = default_registry(dynamic).target_problem(mapping)
    if problem is None:
        assert got is None
    else:
        assert got is not None and got.startswith(problem), got


def test_target_problem_follows_registered_handlers(dynamic: DynamicClient) -> None:
    pools = ResourceMapping("serving.example.com", "v1", "inferencepools", "InferencePool", True)
    reg = default_registry(dynamic)
    assert reg.target_problem(pools) is not None
    assert not reg.has_handler("serving.example.com/v1", "InferencePool")
    reg.register("serving.example.com", "InferencePool", _Custom())
    assert reg.has_handler("serving.example.com/v1", "InferencePool")
    assert reg.target_problem(pools) is None
