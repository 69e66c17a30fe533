"""escaler.targets: each ResourceHandler's snapshot, guard flags, conditional writes and errors,
against the kube tests' fake API server (real HTTP)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kubernetes.client import Configuration
from test_kube_fakeapi import FakeAPI, Reply, status

from escaler.api import TargetRef
from escaler.errors import StatusError, is_conflict, is_not_found
from escaler.kube.config import new_api_client
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.kube.rest import RestClient
from escaler.targets import (
    CacheGet,
    DeploymentHandler,
    GenericScaleHandler,
    LeaderWorkerSetHandler,
    ResourceScalingGroupHandler,
    StatefulSetHandler,
    TargetSnapshot,
    TargetUnreadable,
    WorkloadHandler,
)

NS = "ns1"
LWS_GV = "/apis/leaderworkerset.x-k8s.io/v1"
RSG_GV = "/apis/autoscaling.openfuyao.com/v1alpha1"


def scale_doc(gv: str, name: str, kind: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
        {"name": name, "kind": kind, "namespaced": True, "verbs": ["get", "list", "watch"]},
        {"name": f"{name}/status", "kind": kind, "namespaced": True, "verbs": ["get", "update", "patch"]},
        {"name": f"{name}/scale", "kind": "Scale", "namespaced": True, "verbs": ["get", "update", "patch"]},
    ]}


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        a.discovery[LWS_GV] = scale_doc("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "LeaderWorkerSet")
        a.discovery[RSG_GV] = scale_doc("autoscaling.openfuyao.com/v1alpha1", "resourcescalinggroups",
                                   "ResourceScalingGroup")
        yield a


@pytest.fixture
def dynamic(api: FakeAPI) -> DynamicClient:
    rest = api.rest()
    return DynamicClient(rest, RESTMapper(rest))


# ---- objects ----------------------------------------------------------------------------------

# (gv path, resource, apiVersion, kind, handler class)
KINDS: dict[str, tuple[str, str, str, str, type[WorkloadHandler]]] = {
    "Deployment": ("/apis/apps/v1", "deployments", "apps/v1", "Deployment", DeploymentHandler),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", "apps/v1", "StatefulSet", StatefulSetHandler),
    "LeaderWorkerSet": (LWS_GV, "leaderworkersets", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet",
                        LeaderWorkerSetHandler),
    "ResourceScalingGroup": (RSG_GV, "resourcescalinggroups", "autoscaling.openfuyao.com/v1alpha1",
                             "ResourceScalingGroup", ResourceScalingGroupHandler),
    "Widget": ("/apis/example.com/v1", "widgets", "example.com/v1", "Widget", GenericScaleHandler),
    "Gadget": ("/apis/example.com/v1", "gadgets", "example.com/v1", "Gadget", GenericScaleHandler),
}


def obj(kind: str, *, generation: int | None = 2, spec: Mapping[str, Any] | None = None,
        status: Mapping[str, Any] | None = None, name: str = "t") -> dict[str, Any]:
    _, _, api_version, k, _ = KINDS[kind]
    md: dict[str, Any] = {"name": name, "namespace": NS}
    if generation is not None:
        md["generation"] = generation
    out: dict[str, Any] = {"apiVersion": api_version, "kind": k, "metadata": md,
                           "spec": dict(spec or {})}
    if status is not None:
        out["status"] = dict(status)
    return out


SEL = {"matchLabels": {"app": "web"}}


def ready(n: int, observed: int = 2, **extra: Any) -> dict[str, Any]:
    """A status in which n replicas exist, are updated and ready."""
    return {"observedGeneration": observed, "replicas": n, "readyReplicas": n, "updatedReplicas": n, **extra}


# ---- snapshots ----------------------------------------------------------------------------------

# id → (kind, object, expected (spec, status, ready, updated, observed, selector), rollout, settling,
#       rollout message fragment)
SNAPSHOT_CASES: list[tuple[str, str, dict[str, Any], tuple[Any, ...], bool, bool, str]] = [
    ("deploy-steady", "Deployment", obj("Deployment", spec={"replicas": 3, "selector": SEL}, status=ready(3)),
     (3, 3, 3, 3, 2, "app=web"), False, False, ""),
    ("deploy-unobserved-generation", "Deployment",
     obj("Deployment", generation=3, spec={"replicas": 3, "selector": SEL}, status=ready(3)),
     (3, 3, 3, 3, 2, "app=web"), True, False, "observedGeneration 2 < metadata.generation 3"),
    ("deploy-updated-behind", "Deployment",
     obj("Deployment", spec={"replicas": 3, "selector": SEL}, status={**ready(3), "updatedReplicas": 1}),
     (3, 3, 3, 1, 2, "app=web"), True, False, "updatedReplicas 1 < 3"),
    # docs/concepts.md#the-decision-pipeline step 5 (corrected): replicas that are not Ready yet are capacity
    # on the way, not a rollout
    ("deploy-ready-behind-is-no-rollout", "Deployment",
     obj("Deployment", spec={"replicas": 3, "selector": SEL}, status={**ready(3), "readyReplicas": 2}),
     (3, 3, 2, 3, 2, "app=web"), False, False, ""),
    ("deploy-brand-new-omitted-status", "Deployment",
     obj("Deployment", generation=1, spec={"replicas": 2, "selector": SEL}),
     (2, 0, 0, 0, 0, "app=web"), True, False, "observedGeneration 0 < metadata.generation 1"),
    ("deploy-scale-down-settling", "Deployment",
     obj("Deployment", spec={"replicas": 2, "selector": SEL}, status=ready(4)),
     (2, 4, 4, 4, 2, "app=web"), False, True, ""),
    ("deploy-paused-skips-updated", "Deployment",
     obj("Deployment", spec={"replicas": 3, "paused": True, "selector": SEL},
         status={**ready(3), "updatedReplicas": 1}),
     (3, 3, 3, 1, 2, "app=web"), False, False, ""),
    ("deploy-zero-replicas", "Deployment",
     obj("Deployment", spec={"replicas": 0, "selector": SEL}, status={"observedGeneration": 2}),
     (0, 0, 0, 0, 2, "app=web"), False, False, ""),
    ("sts-steady", "StatefulSet", obj("StatefulSet", spec={"replicas": 2, "selector": SEL}, status=ready(2)),
     (2, 2, 2, 2, 2, "app=web"), False, False, ""),
    ("sts-partition-done", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 5, "selector": SEL,
                              "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
         status={**ready(5), "updatedReplicas": 3}),
     (5, 5, 5, 3, 2, "app=web"), False, False, ""),
    ("sts-partition-behind", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 5, "selector": SEL,
                              "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
         status={**ready(5), "updatedReplicas": 2}),
     (5, 5, 5, 2, 2, "app=web"), True, False, "updatedReplicas 2 < 3"),
    ("sts-ordered-scale-up-revisions-agree", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 4, "selector": SEL},
         status={**ready(3), "readyReplicas": 2, "currentRevision": "web-1", "updateRevision": "web-1"}),
     (4, 3, 2, 3, 2, "app=web"), False, False, ""),
    ("sts-template-rollout-revisions-differ", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 4, "selector": SEL},
         status={**ready(4), "updatedReplicas": 1, "currentRevision": "web-1", "updateRevision": "web-2"}),
     (4, 4, 4, 1, 2, "app=web"), True, False, "updatedReplicas 1 < 4"),
    ("sts-ondelete-skips-updated", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 2, "selector": SEL, "updateStrategy": {"type": "OnDelete"}},
         status={**ready(2), "updatedReplicas": 0}),
     (2, 2, 2, 0, 2, "app=web"), False, False, ""),
    ("sts-settling", "StatefulSet",
     obj("StatefulSet", spec={"replicas": 1, "selector": SEL}, status=ready(2)),
     (1, 2, 2, 2, 2, "app=web"), False, True, ""),
    ("lws-steady-hpa-selector", "LeaderWorkerSet",
     obj("LeaderWorkerSet", spec={"replicas": 2},
         status={"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2,
                 "hpaPodSelector": "lws=t,leader=1"}),
     (2, 2, 2, 2, None, "lws=t,leader=1"), False, False, ""),
    ("lws-default-leader-selector", "LeaderWorkerSet",
     obj("LeaderWorkerSet", spec={"replicas": 1}, status={"replicas": 1, "readyReplicas": 1,
                                                          "updatedReplicas": 1}),
     (1, 1, 1, 1, None,
      "leaderworkerset.sigs.k8s.io/name=t,leaderworkerset.sigs.k8s.io/worker-index=0"), False, False, ""),
    ("lws-group-updating", "LeaderWorkerSet",
     obj("LeaderWorkerSet", spec={"replicas": 3},
         status={"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1, "hpaPodSelector": "x=y"}),
     (3, 3, 3, 1, None, "x=y"), True, False, "updatedReplicas 1 < 3"),
    ("lws-settling", "LeaderWorkerSet",
     obj("LeaderWorkerSet", spec={"replicas": 2},
         status={"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "hpaPodSelector": "x=y"}),
     (2, 3, 3, 3, None, "x=y"), False, True, ""),
    ("rsg-steady", "ResourceScalingGroup",
     obj("ResourceScalingGroup", spec={"replicas": 2, "members": []},
         status={"observedGeneration": 2, "replicas": 2, "readyReplicas": 2, "selector": "rsg=t"}),
     (2, 2, 2, None, 2, "rsg=t"), False, False, ""),
    ("rsg-group-not-ready-is-no-rollout", "ResourceScalingGroup",
     obj("ResourceScalingGroup", spec={"replicas": 2},
         status={"observedGeneration": 2, "replicas": 2, "readyReplicas": 1, "selector": "rsg=t"}),
     (2, 2, 1, None, 2, "rsg=t"), False, False, ""),
    ("rsg-unobserved", "ResourceScalingGroup",
     obj("ResourceScalingGroup", generation=5, spec={"replicas": 2},
         status={"observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "selector": "rsg=t"}),
     (2, 3, 3, None, 4, "rsg=t"), True, True, "observedGeneration 4 < metadata.generation 5"),
    ("generic-scale-reports-nothing", "Widget",
     obj("Widget", spec={"replicas": 4}, status={"replicas": 4, "selector": "w=1"}),
     (4, 4, None, None, None, "w=1"), False, False, ""),
    ("generic-scale-reports-all", "Widget",
     obj("Widget", generation=3, spec={"replicas": 4},
         status={"replicas": 5, "readyReplicas": 2, "updatedReplicas": 4, "observedGeneration": 3,
                 "selector": "w=1"}),
     (4, 5, 2, 4, 3, "w=1"), False, True, ""),
    ("generic-no-scale-spec-replicas", "Gadget",
     obj("Gadget", spec={"replicas": 3, "selector": {"matchLabels": {"g": "1"}}},
         status={"replicas": 3, "readyReplicas": 3}),
     (3, 3, 3, None, None, "g=1"), False, False, ""),
    ("generic-no-scale-defaults-to-one", "Gadget", obj("Gadget"),
     (1, 0, None, None, None, ""), False, False, ""),
]


@pytest.mark.parametrize(("kind", "o", "expected", "rollout", "settling", "message"),
                         [c[1:] for c in SNAPSHOT_CASES], ids=[c[0] for c in SNAPSHOT_CASES])
def test_snapshot(api: FakeAPI, dynamic: DynamicClient, kind: str, o: dict[str, Any],
                  expected: tuple[Any, ...], rollout: bool, settling: bool, message: str) -> None:
    gv, resource, api_version, k, cls = KINDS[kind]
    stored = api.put_object(gv, resource, copy.deepcopy(o))
    snap = cls(dynamic).read(NS, TargetRef(api_version=api_version, kind=k, name="t"))
    got = (snap.spec_replicas, snap.status_replicas, snap.ready_replicas, snap.updated_replicas,
           snap.observed_generation, snap.selector)
    assert got == expected
    assert (snap.rollout_in_progress, snap.settling_scale_down) == (rollout, settling)
    assert message in snap.rollout_message and bool(snap.rollout_message) == rollout
    assert (snap.api_version, snap.kind, snap.namespace, snap.name) == (api_version, k, NS, "t")
    assert snap.uid == stored["metadata"]["uid"]
    assert snap.resource_version == stored["metadata"]["resourceVersion"]
    assert snap.generation == (o["metadata"].get("generation") or 0)
    assert snap.raw["metadata"]["name"] == "t"
    assert cls(dynamic).pod_selector(snap) == expected[-1]


def test_generic_with_scale_reads_replicas_from_scale(api: FakeAPI, dynamic: DynamicClient) -> None:
    api.put_object("/apis/example.com/v1", "widgets", obj("Widget", spec={"replicas": 4},
                                                          status={"replicas": 4, "selector": "w=1"}))
    GenericScaleHandler(dynamic).read(NS, TargetRef(api_version="example.com/v1", kind="Widget", name="t"))
    paths = [r.path for r in api.reqs("GET", "/apis/example.com/v1/")]
    assert paths == ["/apis/example.com/v1/namespaces/ns1/widgets/t",
                     "/apis/example.com/v1/namespaces/ns1/widgets/t/scale"]


def test_builtin_kinds_read_one_object(api: FakeAPI, dynamic: DynamicClient) -> None:
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", spec={"replicas": 1}, status=ready(1)))
    DeploymentHandler(dynamic).read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    paths = [r.path for r in api.reqs("GET", "/apis/apps/v1/")]
    assert paths == ["/apis/apps/v1/namespaces/ns1/deployments/t"]


# ---- cache ----------------------------------------------------------------------------------------


def test_read_uses_the_cache_when_it_has_the_object(api: FakeAPI, dynamic: DynamicClient) -> None:
    cached = obj("Deployment", spec={"replicas": 7, "selector": SEL}, status=ready(7))
    cached["metadata"]["resourceVersion"] = "42"
    calls: list[tuple[str, str, str, str]] = []

    def cache_get(api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        calls.append((api_version, kind, namespace, name))
        return cached if name == "t" else None

    lookup: CacheGet = cache_get
    handler = DeploymentHandler(dynamic, cache_get=lookup)
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    assert (snap.spec_replicas, snap.resource_version) == (7, "42")
    assert calls == [("apps/v1", "Deployment", NS, "t")]
    assert api.reqs("GET", "/apis/apps/v1/namespaces") == []
    # a cache miss falls back to a GET (so a miss never reads as NotFound)
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", name="u", spec={"replicas": 2},
                                                       status=ready(2)))
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="u"))
    assert snap.spec_replicas == 2
    assert [r.path for r in api.reqs("GET", "/apis/apps/v1/namespaces")] == [
        "/apis/apps/v1/namespaces/ns1/deployments/u"]


# ---- writes -------------------------------------------------------------------------------------

WRITE_CASES = [
    ("deployment", "Deployment", "/scale", "PUT"),
    ("statefulset", "StatefulSet", "/scale", "PUT"),
    ("lws", "LeaderWorkerSet", "/scale", "PUT"),
    ("rsg", "ResourceScalingGroup", "/scale", "PUT"),
    ("generic-with-scale", "Widget", "/scale", "PUT"),
    ("generic-spec-replicas-fallback", "Gadget", "", "PATCH"),
]


@pytest.mark.parametrize(("kind", "suffix", "method"), [c[1:] for c in WRITE_CASES],
                         ids=[c[0] for c in WRITE_CASES])
def test_write_is_conditional_and_a_stale_snapshot_conflicts(
        api: FakeAPI, dynamic: DynamicClient, kind: str, suffix: str, method: str) -> None:
    gv, resource, api_version, k, cls = KINDS[kind]
    api.put_object(gv, resource, obj(kind, spec={"replicas": 2}, status=ready(2, selector="a=b")))
    handler = cls(dynamic)
    snap = handler.read(NS, TargetRef(api_version=api_version, kind=k, name="t"))
    out = handler.write_replicas(snap, 4)
    path = f"{gv}/namespaces/{NS}/{resource}/t{suffix}"
    write = api.reqs(method, path)[-1]
    assert write.path == path
    rv = write.body["metadata"]["resourceVersion"]
    assert rv == snap.resource_version
    stored = api.get_object(gv, resource, NS, "t")
    assert stored["spec"]["replicas"] == 4
    assert out.spec_replicas == 4
    assert out.resource_version == stored["metadata"]["resourceVersion"] != snap.resource_version
    # another writer's change is not overwritten from the stale read
    with pytest.raises(StatusError) as ei:
        handler.write_replicas(snap, 1)
    assert is_conflict(ei.value)
    assert api.get_object(gv, resource, NS, "t")["spec"]["replicas"] == 4


def test_write_result_recomputes_guards(api: FakeAPI, dynamic: DynamicClient) -> None:
    api.put_object("/apis/apps/v1", "deployments",
                   obj("Deployment", spec={"replicas": 2, "selector": SEL}, status=ready(2)))
    handler = DeploymentHandler(dynamic)
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    assert not snap.rollout_in_progress
    up = handler.write_replicas(snap, 4)
    # the write's answer does not carry the status: the read's counts now lag the new spec
    assert up.rollout_in_progress and "updatedReplicas 2 < 4" in up.rollout_message
    assert up.selector == "app=web"
    down = handler.write_replicas(up, 1)
    assert down.settling_scale_down and not down.rollout_in_progress


def test_unconditional_write_with_empty_resource_version(api: FakeAPI, dynamic: DynamicClient) -> None:
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", spec={"replicas": 2}, status=ready(2)))
    handler = DeploymentHandler(dynamic)
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    handler.write_replicas(snap, 3)
    out = handler.write_replicas(dataclasses.replace(snap, resource_version=""), 5)
    assert out.spec_replicas == 5
    assert "resourceVersion" not in api.reqs("PUT")[-1].body["metadata"]


@pytest.mark.parametrize("replicas", [-1, 2.0, True, "3"], ids=["negative", "float", "bool", "string"])
def test_write_refuses_bad_counts(api: FakeAPI, dynamic: DynamicClient, replicas: Any) -> None:
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", spec={"replicas": 2}, status=ready(2)))
    handler = DeploymentHandler(dynamic)
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    with pytest.raises(ValueError, match="replicas must be an integer >= 0"):
        handler.write_replicas(snap, replicas)
    assert api.reqs("PUT") == []


def test_write_to_a_deleted_target_is_not_found(api: FakeAPI, dynamic: DynamicClient) -> None:
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", spec={"replicas": 2}, status=ready(2)))
    handler = DeploymentHandler(dynamic)
    snap = handler.read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    with api.lock:
        del api.objects[("/apis/apps/v1", "deployments", NS, "t")]
    with pytest.raises(StatusError) as ei:
        handler.write_replicas(snap, 3)
    assert is_not_found(ei.value)


# ---- read errors -------------------------------------------------------------------------------


def test_missing_object_is_not_found(dynamic: DynamicClient) -> None:
    with pytest.raises(StatusError) as ei:
        DeploymentHandler(dynamic).read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="nope"))
    assert is_not_found(ei.value)


def test_kind_not_served_is_not_found(dynamic: DynamicClient) -> None:
    with pytest.raises(StatusError) as ei:
        GenericScaleHandler(dynamic).read(NS, TargetRef(api_version="example.com/v1", kind="Sprocket",
                                                        name="x"))
    assert is_not_found(ei.value)
    assert "no resource for kind Sprocket" in ei.value.message


def test_unparsable_api_version_is_a_value_error(dynamic: DynamicClient) -> None:
    with pytest.raises(ValueError, match="invalid apiVersion"):
        DeploymentHandler(dynamic).read(NS, TargetRef(api_version="a/b/c", kind="Deployment", name="x"))


@pytest.mark.parametrize(("code", "retryable"), [(500, True), (429, True), (403, False)],
                         ids=["server-error", "throttled", "forbidden"])
def test_other_statuses_are_unreadable(api: FakeAPI, dynamic: DynamicClient, code: int,
                                       retryable: bool) -> None:
    api.on("GET", "/apis/apps/v1/namespaces/ns1/deployments/t",
           lambda _r: Reply(code, status(code, "Whatever", "nope")))
    with pytest.raises(TargetUnreadable) as ei:
        DeploymentHandler(dynamic).read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    assert ei.value.retryable is retryable
    assert str(ei.value).startswith("reading Deployment ns1/t: ")
    assert str(code) in str(ei.value)


def test_connection_failure_is_unreadable_and_retryable() -> None:
    with FakeAPI() as a:
        url = a.url  # closed on exit: nothing listens there any more
    rest = RestClient(new_api_client(Configuration(host=url), pool_size=1), default_timeout=(0.5, 0.5))
    try:
        with pytest.raises(TargetUnreadable) as ei:
            DeploymentHandler(DynamicClient(rest, RESTMapper(rest))).read(
                NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
        assert ei.value.retryable
    finally:
        rest.api_client.close()


@pytest.mark.parametrize(
    ("spec", "status", "field"),
    [({"replicas": "3"}, {}, "spec.replicas"),
     ({"replicas": -1}, {}, "spec.replicas"),
     ({"replicas": 2}, {"readyReplicas": True}, "status.readyReplicas"),
     ({"replicas": 2}, {"observedGeneration": 1.5}, "status.observedGeneration")],
    ids=["string-replicas", "negative-replicas", "bool-ready", "float-observed"],
)
def test_malformed_object_is_unreadable_naming_the_field(api: FakeAPI, dynamic: DynamicClient,
                                                         spec: dict[str, Any], status: dict[str, Any],
                                                         field: str) -> None:
    api.put_object("/apis/apps/v1", "deployments", obj("Deployment", spec=spec, status=status))
    with pytest.raises(TargetUnreadable, match=field) as ei:
        DeploymentHandler(dynamic).read(NS, TargetRef(api_version="apps/v1", kind="Deployment", name="t"))
    assert not ei.value.retryable


def test_snapshot_is_frozen_and_raw_is_not_compared() -> None:
    base: dict[str, Any] = dict(api_version="apps/v1", kind="Deployment", namespace="n", name="a", uid="u",
                                generation=1, observed_generation=1, spec_replicas=1, status_replicas=1,
                                ready_replicas=1, updated_replicas=1, selector="", resource_version="1",
                                rollout_in_progress=False, settling_scale_down=False)
    a = TargetSnapshot(**base, raw={"x": 1})
    b = TargetSnapshot(**base, raw={"x": 2})
    assert a == b
    assert a.describe() == "Deployment n/a"
    with pytest.raises(AttributeError):
        a.spec_replicas = 2  # type: ignore[misc]
