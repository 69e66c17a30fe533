"""escaler.kube.listdecode and the item-by-item relist it serves (issue 27 item 3: the restart peak).

A restart relists every cache: a page of large clones must not live decoded all at once before
the informer's transform strips each one (``ResourceListerWatcher.list_each``), and pages are
sized by bytes once the objects' size is known (``Reflector``).
"""

from __future__ import annotations

import gc
import json
import threading
import tracemalloc
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from escaler.errors import StatusError
from escaler.informers.frozen import FrozenDict
from escaler.informers.interfaces import ItemwiseLister, WatchEvent
from escaler.informers.reflector import DEFAULT_PAGE_BYTES, FIRST_PAGE_SIZE, Reflector
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import ResourceListerWatcher
from escaler.kube.listdecode import decode_list

CLONE = ResourceMapping("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True,
                        frozenset({"status", "scale"}))
MIB = 1024 * 1024

# -- decode_list ----------------------------------------------------------------------------------


@pytest.mark.parametrize("indent", [None, 2])
def test_decode_list_calls_each_in_order_and_returns_the_other_members(indent: int | None) -> None:
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7", "continue": "c"},
            "items": [{"n": 1}, 2, {"n": 3, "a": [1, {"b": None}]}, "x"]}
    seen: list[Any] = []

    def each(item: dict[str, Any]) -> int:
        seen.append(item)
        return int(item["n"])

    results, rest = decode_list(" \n" + json.dumps(body, indent=indent) + "\n", each)
    assert results == [1, 3]
    assert seen == [{"n": 1}, {"n": 3, "a": [1, {"b": None}]}]  # only objects, as list skips others
    assert rest == {"kind": "PodList", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "7", "continue": "c"}}


@pytest.mark.parametrize(("text", "items", "rest"), [
    ("{}", [], {}),
    ('{"items": []}', [], {}),
    ('{"items": null, "metadata": {}}', [], {"items": None, "metadata": {}}),
    ('{"items": [{"a": 1}], "items": [{"a": 2}]}', [{"a": 2}], {}),  # last wins, as json.loads
    ('{"items": [{"a": 1}], "items": null}', [], {"items": None}),
])
def test_decode_list_edge_cases_match_json_loads(text: str, items: list[Any], rest: dict[str, Any]) -> None:
    assert decode_list(text, lambda i: i) == (items, rest)


@pytest.mark.parametrize("text", ["", "[]", "{", '{"items": [1,]}', '{"a": 1,}', '{"a": 1} x',
                                  '{"items": [{}', '{"a" 1}', "{a: 1}", '{"items": [{"a": 1} {"b": 2}]}'])
def test_decode_list_refuses_what_is_not_one_json_object(text: str) -> None:
    with pytest.raises(ValueError):  # json.JSONDecodeError or the decoder's own
        decode_list(text, lambda i: i)


def test_decode_list_holds_one_untransformed_item_at_a_time() -> None:
    """``each`` runs before the next item is decoded: at each call, the items before are garbage."""
    n, size = 32, 256 * 1024
    text = json.dumps({"metadata": {}, "items": [{"i": i, "big": "b" * size} for i in range(n)]})
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        live: list[int] = []

        def each(item: dict[str, Any]) -> int:
            live.append(tracemalloc.get_traced_memory()[0] - base)
            return int(item["i"])

        results, _ = decode_list(text, each)
    finally:
        tracemalloc.stop()
    assert results == list(range(n))
    # at most the item being transformed and the one before (not yet collected) are alive: a whole
    # page decoded at once would hold n * size by the last call
    assert max(live) < 3 * size, [round(x / size, 1) for x in live]


# -- a relist through escaler.kube's lister ---------------------------------------------------------


class PagedRest:
    """A ``RestClient`` stand-in serving one list of pre-encoded objects in ``limit``/``continue``
    pages (``request`` decodes like ``RestClient.request``; ``request_raw`` returns the body)."""

    def __init__(self, n: int, size: int) -> None:
        # each object's JSON text: a clone-like object with one large field the transform drops
        self.items = [json.dumps({"metadata": {"name": f"c{i}", "namespace": "ns", "uid": f"u{i}",
                                               "resourceVersion": str(10 + i)},
                                  "spec": {"replicas": 1, "template": "t" * size}}) for i in range(n)]
        # the limit of every list request, in order
        self.limits: list[int] = []

    def request_raw(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                    **_: Any) -> bytes:
        q = dict(query or [])
        start, limit = int(q.get("continue", "0")), int(q.get("limit", str(len(self.items))))
        self.limits.append(limit)
        end = min(start + limit, len(self.items))
        token = str(end) if end < len(self.items) else ""
        return ('{"kind": "LeaderWorkerSetList", "apiVersion": "leaderworkerset.x-k8s.io/v1", '
                f'"metadata": {{"resourceVersion": "99", "continue": "{token}"}}, "items": ['
                + ", ".join(self.items[start:end]) + "]}").encode()

    def request(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                **_: Any) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.request_raw(method, path, query=query))
        return decoded


def slim(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or "template" not in spec:
        return obj
    return {**obj, "spec": {k: v for k, v in spec.items() if k != "template"}}


class ReplaceSink:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.items: list[dict[str, Any]] = []
        self.rv = ""

    def add(self, obj: Mapping[str, Any]) -> None: ...

    def update(self, obj: Mapping[str, Any]) -> None: ...

    def delete(self, obj: Mapping[str, Any]) -> None: ...

    def replace(self, objs: list[dict[str, Any]], resource_version: str) -> None:
        self.items, self.rv = objs, resource_version
        self.stop.set()


class NoWatch:
    def __iter__(self) -> Iterator[WatchEvent]:
        return iter(())

    def close(self) -> None: ...


def test_list_each_fills_kind_and_passes_each_item_through_each() -> None:
    rest = PagedRest(3, 10)
    lw = ResourceListerWatcher(rest, CLONE, namespace="ns")  # type: ignore[arg-type]
    assert isinstance(lw, ItemwiseLister)
    seen: list[str] = []

    def each(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(f'{item["apiVersion"]} {item["kind"]} {item["metadata"]["name"]}')
        return {"name": item["metadata"]["name"]}

    page = lw.list_each(limit=2, each=each)
    assert seen == [f"leaderworkerset.x-k8s.io/v1 LeaderWorkerSet c{i}" for i in (0, 1)]
    assert page.items == [{"name": "c0"}, {"name": "c1"}]
    assert (page.resource_version, page.continue_token) == ("99", "2")
    assert page.body_bytes == len(rest.request_raw("GET", "/", query=[("limit", "2")]))
    assert lw.list(limit=5).items[2]["metadata"]["name"] == "c2"  # list: the items as they came


def test_list_each_errors() -> None:
    lw = ResourceListerWatcher(PagedRest(2, 10), CLONE)  # type: ignore[arg-type]

    def boom(item: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("transform failed")

    with pytest.raises(ValueError, match="transform failed"):  # each's own error, not a decode error
        lw.list_each(each=boom)

    class Garbage(PagedRest):
        def request_raw(self, method: str, path: str, **_: Any) -> bytes:
            return b'{"items": [{"a": 1},'

    with pytest.raises(StatusError, match="list response is not a JSON object") as ei:
        ResourceListerWatcher(Garbage(0, 0), CLONE).list_each(each=lambda i: i)  # type: ignore[arg-type]
    assert ei.value.code == 500


def test_a_relist_of_large_objects_never_holds_a_page_of_them_decoded() -> None:
    """The restart of issue 27 item 3: 128 clones of 128 KiB, dynamic informers' page size 100.

    Before: one page of 100 full clones (12.5 MiB of JSON) was read, decoded whole, then transformed
    (a peak of its bytes, text and objects). Now: a first page of FIRST_PAGE_SIZE, then pages of
    about DEFAULT_PAGE_BYTES, each item transformed as it is decoded.
    """
    n, size = 128, 128 * 1024
    rest = PagedRest(n, size)
    lw = ResourceListerWatcher(rest, CLONE, namespace="ns")  # type: ignore[arg-type]
    lw.watch = lambda **_: NoWatch()  # type: ignore[method-assign]
    stop = threading.Event()
    sink = ReplaceSink(stop)
    transformed: list[str] = []

    def transform(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        transformed.append(obj["metadata"]["name"])
        return slim(obj)

    reflector = Reflector(lw, sink, name="clones", page_size=100, transform=transform)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        reflector.run(stop)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert transformed == [f"c{i}" for i in range(n)]
    assert [o["metadata"]["name"] for o in sink.items] == transformed and sink.rv == "99"
    assert all(isinstance(o, FrozenDict) and "template" not in o["spec"] for o in sink.items)
    assert rest.limits[0] == FIRST_PAGE_SIZE
    assert all(limit * (size + 200) <= DEFAULT_PAGE_BYTES for limit in rest.limits), rest.limits
    # a page of ~4 MiB lives as its bytes and then its text, never as decoded objects beside them
    assert peak < 3 * DEFAULT_PAGE_BYTES, f"list peak {peak / MIB:.1f} MiB (pages {rest.limits})"
