"""escaler.kube.dynamic: paths, CRUD, conflicts, and the HTTP ListerWatcher (list paging, watch)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from test_kube_fakeapi import DROP, STALL, FakeAPI, Reply, Stream, event_line, status

from escaler.errors import ConnectionFailure, StatusError, is_conflict, is_gone, is_not_found
from escaler.informers.interfaces import ListerWatcher, WatchEvent
from escaler.kube.discovery import ResourceMapping, RESTMapper
from escaler.kube.dynamic import DynamicClient, ResourceListerWatcher, lister_watcher_factory, resource_path

POD = ResourceMapping("", "v1", "pods", "Pod", True, frozenset({"status"}))
NODE = ResourceMapping("", "v1", "nodes", "Node", False, frozenset({"status"}))
WIDGET = ResourceMapping("example.com", "v1", "widgets", "Widget", True, frozenset({"status", "scale"}))
WIDGETS_NS1 = "/apis/example.com/v1/namespaces/ns1/widgets"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


@pytest.fixture
def dyn(api: FakeAPI) -> DynamicClient:
    rest = api.rest()
    return DynamicClient(rest, RESTMapper(rest))


def widget(name: str, ns: str = "ns1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns},
            "spec": dict(spec)}


# -- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "ns", "name", "sub", "path"),
    [
        (POD, None, None, None, "/api/v1/pods"),
        (POD, "ns1", None, None, "/api/v1/namespaces/ns1/pods"),
        (POD, "ns1", "p", "status", "/api/v1/namespaces/ns1/pods/p/status"),
        (NODE, None, "n1", None, "/api/v1/nodes/n1"),
        (WIDGET, "ns1", "w", "scale", "/apis/example.com/v1/namespaces/ns1/widgets/w/scale"),
        (WIDGET, "ns1", "a b/c?", None, "/apis/example.com/v1/namespaces/ns1/widgets/a%20b%2Fc%3F"),
    ],
    ids=["core-all-namespaces", "core-collection", "core-status", "cluster-scoped", "crd-scale",
         "quoted-name"],
)
def test_resource_path(m: ResourceMapping, ns: str | None, name: str | None, sub: str | None,
                       path: str) -> None:
    assert resource_path(m, ns, name, sub) == path


@pytest.mark.parametrize(
    ("m", "ns", "name", "sub", "needle"),
    [
        (POD, None, "p", None, "namespaced"),
        (NODE, "ns1", "n", None, "cluster-scoped"),
        (POD, "ns1", None, "status", "needs an object name"),
        (POD, "ns1", "..", None, "invalid name"),
    ],
    ids=["namespaced-without-namespace", "cluster-scoped-with-namespace", "subresource-without-name",
         "dotdot"],
)
def test_resource_path_refusals(m: ResourceMapping, ns: str | None, name: str | None, sub: str | None,
                                needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        resource_path(m, ns, name, sub)


# -- CRUD -----------------------------------------------------------------------------------------


def test_crud_round_trip_by_api_version_and_kind(api: FakeAPI, dyn: DynamicClient) -> None:
    ref = ("example.com/v1", "Widget")
    created = dyn.create(ref, widget("w1", replicas=2))
    assert created["metadata"]["resourceVersion"]
    assert api.reqs("POST")[-1].path == WIDGETS_NS1

    got = dyn.get(ref, "w1", "ns1")
    assert got["spec"] == {"replicas": 2}

    got["spec"]["replicas"] = 3
    updated = dyn.update(ref, got)
    assert updated["spec"]["replicas"] == 3
    assert api.reqs("PUT")[-1].path == WIDGETS_NS1 + "/w1"

    patched = dyn.patch(ref, "w1", {"spec": {"color": "red"}}, "ns1")
    assert patched["spec"] == {"replicas": 3, "color": "red"}
    assert api.reqs("PATCH")[-1].headers["content-type"] == "application/merge-patch+json"

    deleted = dyn.delete(ref, "w1", "ns1", propagation_policy="Foreground", preconditions_uid="u-1")
    assert deleted["status"] == "Success"
    assert api.reqs("DELETE")[-1].body == {"kind": "DeleteOptions", "apiVersion": "v1",
                                           "propagationPolicy": "Foreground", "preconditions": {"uid": "u-1"}}
    with pytest.raises(StatusError) as ei:
        dyn.get(WIDGET, "w1", "ns1")
    assert is_not_found(ei.value)


def test_update_with_stale_resource_version_conflicts(dyn: DynamicClient) -> None:
    first = dyn.create(WIDGET, widget("w1", replicas=1))
    fresh = dict(first, spec={"replicas": 2})
    dyn.update(WIDGET, fresh)
    stale = dict(first, spec={"replicas": 9})
    with pytest.raises(StatusError) as ei:
        dyn.update(WIDGET, stale)
    assert is_conflict(ei.value)
    assert "the object has been modified" in ei.value.message
    assert dyn.get(WIDGET, "w1", "ns1")["spec"]["replicas"] == 2


def test_create_twice_is_already_exists(dyn: DynamicClient) -> None:
    dyn.create(WIDGET, widget("w1"))
    with pytest.raises(StatusError) as ei:
        dyn.create(WIDGET, widget("w1"))
    assert (ei.value.code, ei.value.reason) == (409, "AlreadyExists")


def test_status_writes_use_the_status_subresource(api: FakeAPI, dyn: DynamicClient) -> None:
    obj = dyn.create(WIDGET, widget("w1"))
    obj["status"] = {"phase": "Ready"}
    out = dyn.update_status(WIDGET, obj)
    assert out["status"] == {"phase": "Ready"}
    assert api.reqs("PUT")[-1].path == WIDGETS_NS1 + "/w1/status"

    out = dyn.patch_status(WIDGET, "w1", {"status": {"observedGeneration": 4}}, "ns1")
    assert out["status"] == {"phase": "Ready", "observedGeneration": 4}
    req = api.reqs("PATCH")[-1]
    assert req.path == WIDGETS_NS1 + "/w1/status"
    assert req.headers["content-type"] == "application/merge-patch+json"


@pytest.mark.parametrize(
    ("patch_type", "patch", "kwargs", "content_type", "query"),
    [
        ("json", [{"op": "replace", "path": "/spec/replicas", "value": 5}], {},
         "application/json-patch+json", []),
        ("strategic", {"spec": {"replicas": 5}}, {}, "application/strategic-merge-patch+json", []),
        ("apply", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                   "spec": {"replicas": 5}},
         {"field_manager": "escaler", "force": True}, "application/apply-patch+yaml",
         [("fieldManager", "escaler"), ("force", "true")]),
    ],
    ids=["json", "strategic", "server-side-apply"],
)
def test_patch_types(api: FakeAPI, dyn: DynamicClient, patch_type: Any, patch: Any, kwargs: dict[str, Any],
                     content_type: str, query: list[tuple[str, str]]) -> None:
    dyn.create(WIDGET, widget("w1", replicas=1))
    out = dyn.patch(WIDGET, "w1", patch, "ns1", patch_type=patch_type, **kwargs)
    assert out["spec"]["replicas"] == 5
    req = api.reqs("PATCH")[-1]
    assert (req.headers["content-type"], req.query, req.body) == (content_type, query, patch)


@pytest.mark.parametrize(
    ("patch_type", "patch", "kwargs", "needle"),
    [
        ("json", {"spec": {}}, {}, "list of operations"),
        ("merge", [{"op": "add"}], {}, "list of operations"),
        ("apply", {"spec": {}}, {}, "field_manager"),
        ("merge", {"spec": {}}, {"force": True}, "force"),
        ("yaml", {"spec": {}}, {}, "patch_type"),
    ],
    ids=["json-needs-list", "merge-needs-object", "apply-needs-manager", "force-only-for-apply",
         "unknown-type"],
)
def test_patch_refusals(api: FakeAPI, dyn: DynamicClient, patch_type: Any, patch: Any, kwargs: dict[str, Any],
                        needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        dyn.patch(WIDGET, "w1", patch, "ns1", patch_type=patch_type, **kwargs)
    assert api.reqs("PATCH") == []


def test_list_query_params(api: FakeAPI, dyn: DynamicClient) -> None:
    dyn.create(WIDGET, widget("a"))
    out = dyn.list(WIDGET, "ns1", label_selector="app=x", field_selector="metadata.name=a", limit=10,
                   resource_version="0")
    assert out["kind"] == "WidgetList"
    req = api.reqs("GET", WIDGETS_NS1)[-1]
    assert req.query == [("labelSelector", "app=x"), ("fieldSelector", "metadata.name=a"), ("limit", "10"),
                         ("resourceVersion", "0")]
    dyn.list(("v1", "Pod"))
    assert api.reqs("GET", "/api/v1/pods")[-1].query == []


def test_create_refusals(dyn: DynamicClient) -> None:
    with pytest.raises(ValueError, match="namespace"):
        dyn.create(WIDGET, {"metadata": {"name": "w"}})
    with pytest.raises(ValueError, match=r"!= metadata\.namespace"):
        dyn.create(WIDGET, widget("w", ns="a"), namespace="b")
    with pytest.raises(ValueError, match=r"metadata\.name"):
        dyn.update(WIDGET, {"metadata": {}})


# -- ListerWatcher: list --------------------------------------------------------------------------


def _pods(api: FakeAPI, n: int, ns: str = "ns1") -> None:
    for i in range(n):
        api.put_object("/api/v1", "pods", {"apiVersion": "v1", "kind": "Pod",
                                           "metadata": {"name": f"p{i}", "namespace": ns}})


def test_list_pages_with_continue(api: FakeAPI) -> None:
    _pods(api, 5)
    _pods(api, 2, ns="other")
    lw = ResourceListerWatcher(api.rest(), POD, namespace="ns1")
    pages = []
    token: str | None = None
    while True:
        page = lw.list(resource_version="", limit=2, continue_=token)
        pages.append([i["metadata"]["name"] for i in page.items])
        token = page.continue_token
        if not token:
            break
    assert pages == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert page.resource_version == str(api.rv)
    # the server omits apiVersion/kind on items of built-in lists; the lister-watcher fills them in
    assert {(i["apiVersion"], i["kind"]) for i in page.items} == {("v1", "Pod")}
    reqs = api.reqs("GET", "/api/v1/namespaces/ns1/pods")
    assert reqs[0].query == [("limit", "2")]
    assert reqs[1].query == [("limit", "2"), ("continue", "2")]  # no resourceVersion with continue


def test_list_passes_selectors_and_resource_version(api: FakeAPI) -> None:
    lw = ResourceListerWatcher(api.rest(), POD, label_selector="app=x", field_selector="spec.nodeName=n1")
    lw.list(resource_version="0")
    assert api.reqs("GET", "/api/v1/pods")[-1].query == [
        ("labelSelector", "app=x"), ("fieldSelector", "spec.nodeName=n1"), ("resourceVersion", "0")]


def test_list_error_is_status_error(api: FakeAPI) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Reply(410, status(410, "Expired", "continue token expired")))
    with pytest.raises(StatusError) as ei:
        ResourceListerWatcher(api.rest(), POD).list(limit=1, continue_="abc")
    assert is_gone(ei.value)


# -- ListerWatcher: watch -------------------------------------------------------------------------


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns1",
                                                            "resourceVersion": rv}}


def test_watch_streams_events_until_the_server_ends(api: FakeAPI) -> None:
    gone = status(410, "Expired", "too old resource version: 5 (10)")
    api.on("GET", "/api/v1/namespaces/ns1/pods", lambda r: Stream([
        event_line("ADDED", _pod("a", "11")),
        event_line("MODIFIED", {"metadata": {"name": "a", "namespace": "ns1", "resourceVersion": "12"}}),
        event_line("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "13"}}),
        event_line("DELETED", _pod("a", "14")),
        event_line("ERROR", gone),
    ]))
    lw = ResourceListerWatcher(api.rest(), POD, namespace="ns1", label_selector="app=x")
    events = list(lw.watch(resource_version="10", timeout_seconds=300))

    assert [e.type for e in events] == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED", "ERROR"]
    assert events[1].object["kind"] == "Pod"  # filled in when the server left it out
    assert events[2].object["metadata"]["resourceVersion"] == "13"
    assert events[4] == WatchEvent("ERROR", gone)
    (req,) = api.reqs("GET", "/api/v1/namespaces/ns1/pods")
    assert req.query == [("watch", "1"), ("resourceVersion", "10"), ("allowWatchBookmarks", "true"),
                         ("timeoutSeconds", "300"), ("labelSelector", "app=x")]


def test_watch_open_error_raises(api: FakeAPI) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Reply(410, status(410, "Expired", "too old")))
    with pytest.raises(StatusError) as ei:
        ResourceListerWatcher(api.rest(), POD).watch(resource_version="1", timeout_seconds=60)
    assert is_gone(ei.value)


@pytest.mark.parametrize(
    "steps",
    [[event_line("ADDED", _pod("a", "1")), DROP], [b"not json\n"], [b'{"type":"WHAT","object":{}}\n']],
    ids=["connection-dropped", "malformed-line", "unknown-type"],
)
def test_broken_watch_raises_connection_failure(api: FakeAPI, steps: list[Any]) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Stream(steps))
    stream = ResourceListerWatcher(api.rest(), POD).watch(resource_version="1", timeout_seconds=60)
    with pytest.raises(ConnectionFailure):
        list(stream)


def test_dead_connection_hits_the_read_timeout(api: FakeAPI) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Stream([event_line("ADDED", _pod("a", "1")), STALL]))
    lw = ResourceListerWatcher(api.rest(), POD, read_timeout_margin=0.3)
    stream = lw.watch(resource_version="1", timeout_seconds=0)  # read timeout = 0 + 0.3 s
    seen: list[WatchEvent] = []
    start = time.monotonic()
    with pytest.raises(ConnectionFailure):
        for ev in stream:
            seen.append(ev)
    assert [e.type for e in seen] == ["ADDED"]
    assert time.monotonic() - start < 5
    assert ("timeoutSeconds", "0") not in api.reqs("GET", "/api/v1/pods")[0].query


def test_close_from_another_thread_ends_iteration(api: FakeAPI) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Stream([event_line("ADDED", _pod("a", "1")), STALL]))
    stream = ResourceListerWatcher(api.rest(), POD).watch(resource_version="1", timeout_seconds=300)
    got_first = threading.Event()
    outcome: list[Any] = []

    def consume() -> None:
        try:
            for ev in stream:
                outcome.append(ev.type)
                got_first.set()
            outcome.append("end")
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=consume)
    t.start()
    assert got_first.wait(5)
    stream.close()
    t.join(5)
    assert not t.is_alive()
    assert outcome == ["ADDED", "end"]
    stream.close()  # idempotent


def test_close_before_iterating(api: FakeAPI) -> None:
    api.on("GET", "/api/v1/pods", lambda r: Stream([event_line("ADDED", _pod("a", "1")), STALL]))
    stream = ResourceListerWatcher(api.rest(), POD).watch(resource_version="1", timeout_seconds=300)
    stream.close()
    assert list(stream) == []


def test_lister_watcher_validates(api: FakeAPI) -> None:
    with pytest.raises(ValueError, match="read_timeout_margin"):
        ResourceListerWatcher(api.rest(), POD, read_timeout_margin=0)
    with pytest.raises(ValueError, match="cluster-scoped"):
        ResourceListerWatcher(api.rest(), NODE, namespace="ns1")


# -- factory --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    group: str
    version: str
    resource: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


def test_factory_builds_lister_watchers_from_keys(api: FakeAPI) -> None:
    _pods(api, 3)
    rest = api.rest()
    factory = lister_watcher_factory(rest, RESTMapper(rest))
    lw: ListerWatcher = factory(Key("", "v1", "pods", namespace="ns1", label_selector="app=x"))
    page_body = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "z"}}]}
    api.on("GET", "/api/v1/namespaces/ns1/pods", lambda r: Reply(200, page_body))
    page = lw.list(limit=100)
    assert (page.resource_version, page.items[0]["kind"]) == ("7", "Pod")
    assert api.reqs("GET", "/api/v1/namespaces/ns1/pods")[-1].query == [("labelSelector", "app=x"),
                                                                      ("limit", "100")]


def test_factory_defers_discovery_errors_to_list(api: FakeAPI) -> None:
    rest = api.rest()
    lw = lister_watcher_factory(rest, RESTMapper(rest))(Key("example.com", "v9", "widgets"))
    assert api.requests == []  # nothing fetched at construction
    with pytest.raises(StatusError) as ei:
        lw.list()
    assert is_not_found(ei.value)
