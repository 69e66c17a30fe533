"""escaler.kube.scale: the /scale subresource and the spec.replicas fallback, both conditional."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI

from escaler.errors import StatusError, is_conflict
from escaler.kube.discovery import RESTMapper
from escaler.kube.dynamic import DynamicClient
from escaler.kube.scale import Scale, ScaleClient, selector_string

DEPLOY = "/apis/apps/v1/namespaces/ns1/deployments/web"
GADGET = "/apis/example.com/v1/namespaces/ns1/gadgets/g1"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        a.put_object("/apis/apps/v1", "deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns1"},
            "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=web"}})
        a.put_object("/apis/example.com/v1", "gadgets", {
            "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "ns1"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "g"}}}, "status": {"replicas": 4}})
        yield a


@pytest.fixture
def scales(api: FakeAPI) -> ScaleClient:
    rest = api.rest()
    return ScaleClient(DynamicClient(rest, RESTMapper(rest)))


def test_get_scale_uses_subresource(api: FakeAPI, scales: ScaleClient) -> None:
    s = scales.get_scale(("apps/v1", "Deployment"), "web", "ns1")
    rv = api.get_object("/apis/apps/v1", "deployments", "ns1", "web")["metadata"]["resourceVersion"]
    assert s == Scale(spec_replicas=3, status_replicas=2, selector="app=web", resource_version=rv)
    assert [r.path for r in api.reqs("GET", "/apis/apps/v1/")] == [DEPLOY + "/scale"]


def test_update_scale_puts_a_conditional_scale(api: FakeAPI, scales: ScaleClient) -> None:
    ref = ("apps/v1", "Deployment")
    s = scales.get_scale(ref, "web", "ns1")
    out = scales.update_scale(ref, "web", "ns1", 5, s.resource_version)
    assert out.spec_replicas == 5
    assert out.resource_version != s.resource_version
    put = api.reqs("PUT")[-1]
    assert put.path == DEPLOY + "/scale"
    assert put.body == {
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "ns1", "resourceVersion": s.resource_version},
        "spec": {"replicas": 5},
    }
    # a second writer with the old read loses
    with pytest.raises(StatusError) as ei:
        scales.update_scale(ref, "web", "ns1", 1, s.resource_version)
    assert is_conflict(ei.value)
    assert api.get_object("/apis/apps/v1", "deployments", "ns1", "web")["spec"]["replicas"] == 5


def test_fallback_reads_the_object(api: FakeAPI, scales: ScaleClient) -> None:
    s = scales.get_scale(("example.com/v1", "Gadget"), "g1", "ns1")
    assert (s.spec_replicas, s.status_replicas, s.selector) == (4, 4, "app=g")
    assert [r.path for r in api.reqs("GET", "/apis/example.com/v1/")] == [GADGET]


def test_fallback_writes_a_merge_patch_with_resource_version(api: FakeAPI, scales: ScaleClient) -> None:
    ref = ("example.com/v1", "Gadget")
    s = scales.get_scale(ref, "g1", "ns1")
    out = scales.update_scale(ref, "g1", "ns1", 7, s.resource_version)
    assert out.spec_replicas == 7
    patch = api.reqs("PATCH")[-1]
    assert (patch.path, patch.headers["content-type"]) == (GADGET, "application/merge-patch+json")
    assert patch.body == {"spec": {"replicas": 7}, "metadata": {"resourceVersion": s.resource_version}}
    with pytest.raises(StatusError) as ei:
        scales.update_scale(ref, "g1", "ns1", 1, s.resource_version)
    assert is_conflict(ei.value)


def test_unconditional_write_without_resource_version(api: FakeAPI, scales: ScaleClient) -> None:
    scales.update_scale(("example.com/v1", "Gadget"), "g1", "ns1", 2, "")
    assert api.reqs("PATCH")[-1].body == {"spec": {"replicas": 2}}


def test_fallback_defaults_missing_replicas_to_one(api: FakeAPI, scales: ScaleClient) -> None:
    api.put_object("/apis/example.com/v1", "gadgets", {
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g2", "namespace": "ns1"}})
    s = scales.get_scale(("example.com/v1", "Gadget"), "g2", "ns1")
    assert (s.spec_replicas, s.status_replicas, s.selector) == (1, 0, "")


@pytest.mark.parametrize("replicas", [-1, 1.5, True], ids=["negative", "float", "bool"])
def test_update_scale_validates_replicas(scales: ScaleClient, replicas: Any) -> None:
    with pytest.raises(ValueError, match="replicas"):
        scales.update_scale(("apps/v1", "Deployment"), "web", "ns1", replicas, "1")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["y", "x"]}]}, "tier in (x,y)"),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]}, "t notin (x)"),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}, {"key": "u", "operator": "DoesNotExist"}]},
         "t,!u"),
        ({}, ""),
    ],
    ids=["match-labels-sorted", "in", "notin", "exists", "empty"],
)
def test_selector_string(selector: dict[str, Any], expected: str) -> None:
    assert selector_string(selector) == expected
