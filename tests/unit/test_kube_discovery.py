"""escaler.kube.discovery: REST mapping from discovery documents, caching and refresh on a miss."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from test_kube_fakeapi import FakeAPI, Reply, status

from escaler.clock import FakeClock
from escaler.errors import StatusError, is_not_found
from escaler.kube.discovery import ResourceMapping, RESTMapper, parse_api_version


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def mapper(api: FakeAPI, clock: FakeClock) -> RESTMapper:
    return RESTMapper(api.rest(), clock=clock)


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("v1", "Pod", ResourceMapping("", "v1", "pods", "Pod", True, frozenset({"status"}))),
        ("v1", "Namespace",
         ResourceMapping("", "v1", "namespaces", "Namespace", False, frozenset({"status"}))),
        ("v1", "ConfigMap", ResourceMapping("", "v1", "configmaps", "ConfigMap", True, frozenset())),
        ("apps/v1", "Deployment",
         ResourceMapping("apps", "v1", "deployments", "Deployment", True, frozenset({"status", "scale"}))),
        ("example.com/v1", "Widget",
         ResourceMapping("example.com", "v1", "widgets", "Widget", True, frozenset({"status", "scale"}))),
        ("example.com/v1", "Gadget",
         ResourceMapping("example.com", "v1", "gadgets", "Gadget", True, frozenset({"status"}))),
    ],
    ids=["core-pod", "core-cluster-scoped", "no-subresources", "apps-deployment", "crd-with-scale",
         "crd-without-scale"],
)
def test_mapping_for(mapper: RESTMapper, api_version: str, kind: str, expected: ResourceMapping) -> None:
    m = mapper.mapping_for(api_version, kind)
    assert m == expected
    assert m.api_version == api_version


def test_mapping_for_resource(mapper: RESTMapper) -> None:
    assert mapper.mapping_for_resource("apps", "v1", "statefulsets").kind == "StatefulSet"
    assert mapper.mapping_for_resource("", "v1", "nodes").namespaced is False
    with pytest.raises(StatusError, match="no resource bogus in apiVersion apps/v1"):
        mapper.mapping_for_resource("apps", "v1", "bogus")


def test_documents_are_cached_per_group_version(api: FakeAPI, mapper: RESTMapper) -> None:
    for _ in range(3):
        mapper.mapping_for("v1", "Pod")
        mapper.mapping_for("v1", "Namespace")
        mapper.mapping_for("apps/v1", "Deployment")
        mapper.mapping_for_resource("apps", "v1", "deployments")
    assert api.discovery_hits == {"/api/v1": 1, "/apis/apps/v1": 1}


def test_miss_refetches_once_and_finds_a_new_crd_kind(
    api: FakeAPI, mapper: RESTMapper, clock: FakeClock
) -> None:
    mapper.mapping_for("example.com/v1", "Widget")
    # a new CRD version of the group is installed after the first lookup
    api.discovery["/apis/example.com/v1"]["resources"].append(
        {"name": "gizmos", "kind": "Gizmo", "namespaced": False, "verbs": ["get"]})
    clock.step(10)
    assert mapper.mapping_for("example.com/v1", "Gizmo").resource == "gizmos"
    assert api.discovery_hits["/apis/example.com/v1"] == 2
    # the refreshed document serves hits from the cache again
    mapper.mapping_for("example.com/v1", "Gizmo")
    assert api.discovery_hits["/apis/example.com/v1"] == 2


def test_unknown_kind_is_not_found_and_misses_are_throttled(
    api: FakeAPI, mapper: RESTMapper, clock: FakeClock
) -> None:
    mapper.mapping_for("example.com/v1", "Widget")
    for _ in range(5):  # a hot loop of misses right after a fetch: no refetch
        with pytest.raises(StatusError) as ei:
            mapper.mapping_for("example.com/v1", "Nope")
        assert is_not_found(ei.value)
        assert ei.value.reason == "NotFound"
        assert ei.value.message == "no resource for kind Nope in apiVersion example.com/v1"
    assert api.discovery_hits["/apis/example.com/v1"] == 1
    clock.step(5)
    with pytest.raises(StatusError):
        mapper.mapping_for("example.com/v1", "Nope")
    assert api.discovery_hits["/apis/example.com/v1"] == 2


def test_unserved_group_version_is_not_found(api: FakeAPI, mapper: RESTMapper, clock: FakeClock) -> None:
    with pytest.raises(StatusError) as ei:
        mapper.mapping_for("example.com/v2", "Widget")
    assert ei.value.code == 404
    assert ei.value.message == "no resource for kind Widget in apiVersion example.com/v2"
    # the CRD version gets installed; a later miss (after the throttle) finds it
    api.discovery["/apis/example.com/v2"] = api.discovery["/apis/example.com/v1"]
    clock.step(5)
    assert mapper.mapping_for("example.com/v2", "Widget").version == "v2"


def test_ttl_and_invalidate_refetch(api: FakeAPI, mapper: RESTMapper, clock: FakeClock) -> None:
    mapper.mapping_for("v1", "Pod")
    clock.step(599)
    mapper.mapping_for("v1", "Pod")
    assert api.discovery_hits["/api/v1"] == 1
    clock.step(1)
    mapper.mapping_for("v1", "Pod")
    assert api.discovery_hits["/api/v1"] == 2
    mapper.invalidate()
    mapper.mapping_for("v1", "Pod")
    assert api.discovery_hits["/api/v1"] == 3


def test_discovery_server_errors_propagate(api: FakeAPI, mapper: RESTMapper) -> None:
    api.on("GET", "/apis/apps/v1", lambda r: Reply(503, status(503, "ServiceUnavailable", "starting")))
    with pytest.raises(StatusError) as ei:
        mapper.mapping_for("apps/v1", "Deployment")
    assert ei.value.code == 503


@pytest.mark.parametrize(
    ("api_version", "expected"),
    [("v1", ("", "v1")), ("apps/v1", ("apps", "v1")), ("example.com/v1beta1", ("example.com", "v1beta1"))],
    ids=["core", "group", "dotted-group"],
)
def test_parse_api_version(api_version: str, expected: tuple[str, str]) -> None:
    assert parse_api_version(api_version) == expected


@pytest.mark.parametrize(
    "bad", ["", "apps/v1/x", "/v1", "apps/", "Apps/v1", "apps v1", "a..b/v1"],
    ids=["empty", "three-parts", "empty-group", "empty-version", "uppercase", "space", "double-dot"],
)
def test_invalid_api_version_is_value_error(mapper: RESTMapper, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid apiVersion") as ei:
        mapper.mapping_for(bad, "Pod")
    assert repr(bad) in str(ei.value)


def test_concurrent_lookups(mapper: RESTMapper) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(20):
                assert mapper.mapping_for("apps/v1", "Deployment").resource == "deployments"
                assert mapper.mapping_for("v1", "Pod").resource == "pods"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []


@pytest.mark.parametrize(
    "kwargs", [{"ttl": 0}, {"miss_refresh_interval": -1}], ids=["zero-ttl", "negative-miss-interval"]
)
def test_mapper_validates(api: FakeAPI, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RESTMapper(api.rest(), **kwargs)
