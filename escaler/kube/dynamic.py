"""Unstructured (dict) access to any resource, and the informers' ``ListerWatcher`` over HTTP.

Contract:

* ``DynamicClient`` methods take a ``ResourceMapping`` or an ``(api_version, kind)`` pair (resolved
  through the ``RESTMapper``) and return the server's JSON as a dict. Failures raise
  ``StatusError``/``ConnectionFailure`` as ``RestClient`` does; a namespaced resource addressed
  without a namespace (or a cluster-scoped one with a namespace) raises ``ValueError`` before any
  request is sent.
* ``update``/``update_status`` are PUTs: the object's ``metadata.resourceVersion`` makes them
  conditional (409 Conflict when it is stale); without one the write is unconditional.
* Paths: ``/api/v1[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]]`` for the core group,
  ``/apis/<group>/<version>/...`` otherwise; namespace and name are URL-quoted.
* ``ResourceListerWatcher`` implements ``escaler.informers.interfaces.ListerWatcher`` (see that
  module for the contract). A watch's client-side read timeout — the longest one read may wait for
  the next byte — is ``min(timeout_seconds + read_timeout_margin, idle_timeout)``: the server ends a
  healthy watch at ``timeout_seconds``, and kube-apiserver's watch cache sends a watch that asked
  for bookmarks one about every minute (``defaultBookmarkFrequency``, and 2 s before the deadline),
  so a read that waits ``idle_timeout`` (110 s) is a dead connection, noticed within two minutes
  rather than at the end of a 5-10 min watch. A server that sends no bookmarks (watch cache off)
  costs an idle watch a re-open from its resourceVersion every ``idle_timeout``: no relist, no
  event lost. ``timeout_seconds=0`` sends no ``timeoutSeconds`` (the server picks its own, tens of
  minutes) yet reads still time out after the margin alone: only sensible for busy streams.
  Items of a list, which the server sends without ``apiVersion``/``kind`` for built-in types, get
  them filled in (so do watch objects that lack them).
* ``lister_watcher_factory`` builds one per informer key; the discovery lookup it needs is deferred
  to the first ``list``/``watch``, so a server that is down (or a CRD not yet installed: 404) surfaces
  as an error inside the reflector's loop, which backs off and retries, rather than at informer
  construction.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol
from urllib.parse import quote

from escaler.errors import ConnectionFailure, StatusError
from escaler.informers.interfaces import ListerWatcher, ListResult, WatchEvent, WatchStream
from escaler.kube.discovery import ResourceMapping, RESTMapper
from escaler.kube.listdecode import decode_list
from escaler.kube.rest import Query, RestClient

__all__ = [
    "DEFAULT_WATCH_IDLE_TIMEOUT",
    "DEFAULT_WATCH_READ_TIMEOUT_MARGIN",
    "PATCH_CONTENT_TYPES",
    "DynamicClient",
    "MappingRef",
    "PatchType",
    "ResourceKeyLike",
    "ResourceListerWatcher",
    "lister_watcher_factory",
    "resource_path",
]

# Seconds a watch read may wait beyond the server-side timeoutSeconds before the connection is
# declared dead.
DEFAULT_WATCH_READ_TIMEOUT_MARGIN = 30.0
# The longest a watch read waits for the next byte: kube-apiserver sends a bookmark to a watch that
# asked for them about every 60 s, so silence this long means a dead connection (< 2 min).
DEFAULT_WATCH_IDLE_TIMEOUT = 110.0

MappingRef = ResourceMapping | tuple[str, str]
PatchType = Literal["merge", "json", "strategic", "apply"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    # server-side apply takes YAML; JSON is YAML
    "apply": "application/apply-patch+yaml",
}
_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

_Obj = dict[str, Any]


def resource_path(
    m: ResourceMapping,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The URL path of a collection, an object, or an object's subresource."""
    namespace = namespace or None
    if m.namespaced and namespace is None and name is not None:
        raise ValueError(f"{m.group_resource} is namespaced: a namespace is required to address {name!r}")
    if not m.namespaced and namespace:
        raise ValueError(f"{m.group_resource} is cluster-scoped: namespace {namespace!r} must not be given")
    if subresource and name is None:
        raise ValueError(f"subresource {subresource!r} of {m.group_resource} needs an object name")
    parts = [f"/apis/{m.group}/{m.version}" if m.group else f"/api/{m.version}"]
    if namespace:
        parts.append("namespaces/" + _segment(namespace, "namespace"))
    parts.append(m.resource)
    if name is not None:
        parts.append(_segment(name, "name"))
        if subresource:
            parts.append(_segment(subresource, "subresource"))
    return "/".join(parts)


def _segment(value: str, what: str) -> str:
    if not value or value in (".", ".."):
        raise ValueError(f"invalid {what} {value!r}")
    return quote(value, safe="")


def _metadata(obj: _Obj, what: str) -> _Obj:
    md = obj.get("metadata")
    if not isinstance(md, dict) or not md.get("name"):
        raise ValueError(f"{what}: object has no metadata.name")
    return md


class DynamicClient:
    """Get/list/create/update/patch/delete any resource as dicts; thread-safe."""

    def __init__(self, rest: RestClient, mapper: RESTMapper) -> None:
        # sends the requests
        self._rest = rest
        # resolves (api_version, kind) references
        self._mapper = mapper

    @property
    def rest(self) -> RestClient:
        return self._rest

    @property
    def mapper(self) -> RESTMapper:
        return self._mapper

    def resolve(self, m: MappingRef) -> ResourceMapping:
        if isinstance(m, ResourceMapping):
            return m
        api_version, kind = m
        return self._mapper.mapping_for(api_version, kind)

    def get(self, m: MappingRef, name: str, namespace: str | None = None) -> _Obj:
        rm = self.resolve(m)
        return self._rest.request("GET", resource_path(rm, namespace, name))

    def list(
        self,
        m: MappingRef,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
    ) -> _Obj:
        rm = self.resolve(m)
        query = _list_query(label_selector, field_selector, limit, continue_, resource_version)
        return self._rest.request("GET", resource_path(rm, namespace or None), query=query)

    def create(self, m: MappingRef, obj: _Obj, namespace: str | None = None) -> _Obj:
        rm = self.resolve(m)
        md = obj.get("metadata")
        obj_ns = md.get("namespace") if isinstance(md, dict) else None
        if namespace and obj_ns and namespace != obj_ns:
            raise ValueError(f"create {rm.group_resource}: namespace {namespace!r} != metadata.namespace "
                             f"{obj_ns!r}")
        ns = namespace or obj_ns or None
        if rm.namespaced and not ns:
            raise ValueError(f"create {rm.group_resource}: namespaced resource needs a namespace")
        return self._rest.request("POST", resource_path(rm, ns), body=obj)

    def update(self, m: MappingRef, obj: _Obj) -> _Obj:
        return self._put(m, obj, None)

    def update_status(self, m: MappingRef, obj: _Obj) -> _Obj:
        return self._put(m, obj, "status")

    def patch(
        self,
        m: MappingRef,
        name: str,
        patch: _Obj | builtins.list[_Obj],
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
        force: bool | None = None,
        subresource: str | None = None,
    ) -> _Obj:
        rm = self.resolve(m)
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f"patch_type must be one of {sorted(PATCH_CONTENT_TYPES)}, got {patch_type!r}")
        if (patch_type == "json") != isinstance(patch, builtins.list):
            raise ValueError("a 'json' patch is a list of operations; other patch types are objects")
        if patch_type == "apply" and not field_manager:
            raise ValueError("server-side apply ('apply' patch) requires field_manager")
        if force is not None and patch_type != "apply":
            raise ValueError("force is only meaningful for server-side apply ('apply' patch)")
        query: Query = []
        if field_manager:
            query.append(("fieldManager", field_manager))
        if force is not None:
            query.append(("force", "true" if force else "false"))
        return self._rest.request(
            "PATCH", resource_path(rm, namespace, name, subresource),
            query=query, body=patch, content_type=content_type,
        )

    def patch_status(
        self,
        m: MappingRef,
        name: str,
        patch: _Obj | builtins.list[_Obj],
        namespace: str | None = None,
        patch_type: PatchType = "merge",
    ) -> _Obj:
        return self.patch(m, name, patch, namespace, patch_type=patch_type, subresource="status")

    def delete(
        self,
        m: MappingRef,
        name: str,
        namespace: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        preconditions_uid: str | None = None,
    ) -> _Obj:
        rm = self.resolve(m)
        body: _Obj | None = None
        if propagation_policy is not None or preconditions_uid is not None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1"}
            if propagation_policy is not None:
                body["propagationPolicy"] = propagation_policy
            if preconditions_uid is not None:
                body["preconditions"] = {"uid": preconditions_uid}
        return self._rest.request("DELETE", resource_path(rm, namespace, name), body=body)

    def _put(self, m: MappingRef, obj: _Obj, subresource: str | None) -> _Obj:
        rm = self.resolve(m)
        md = _metadata(obj, f"update {rm.group_resource}")
        ns = md.get("namespace") or None
        return self._rest.request("PUT", resource_path(rm, ns, str(md["name"]), subresource), body=obj)


def _list_query(
    label_selector: str | None,
    field_selector: str | None,
    limit: int | None,
    continue_: str | None,
    resource_version: str | None,
) -> Query:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    query: Query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    if limit is not None:
        query.append(("limit", str(limit)))
    if continue_:
        query.append(("continue", continue_))
    elif resource_version:
        # the server rejects resourceVersion together with continue (the token carries it)
        query.append(("resourceVersion", resource_version))
    return query


class ResourceListerWatcher:
    """``ListerWatcher`` for one resource, optionally one namespace and label/field selectors."""

    def __init__(
        self,
        rest: RestClient,
        mapping: ResourceMapping,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        read_timeout_margin: float = DEFAULT_WATCH_READ_TIMEOUT_MARGIN,
        idle_timeout: float = DEFAULT_WATCH_IDLE_TIMEOUT,
    ) -> None:
        if read_timeout_margin <= 0:
            raise ValueError(
                f"ResourceListerWatcher: read_timeout_margin must be > 0, got {read_timeout_margin}"
            )
        if not idle_timeout > 0:
            raise ValueError(f"ResourceListerWatcher: idle_timeout must be > 0, got {idle_timeout}")
        # validates scope now rather than on the first list
        resource_path(mapping, namespace or None)
        # sends list and watch requests
        self._rest = rest
        # what is listed/watched; fixed for the object's life
        self._mapping = mapping
        # None/"" = all namespaces
        self._namespace = namespace or None
        # passed verbatim as labelSelector / fieldSelector; None = everything
        self._label_selector = label_selector or None
        self._field_selector = field_selector or None
        # seconds a watch read may wait beyond timeout_seconds
        self._margin = read_timeout_margin
        # the longest a watch read waits for the next byte (see the module docstring)
        self._idle = idle_timeout

    @property
    def mapping(self) -> ResourceMapping:
        return self._mapping

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        return self.list_each(resource_version=resource_version, limit=limit, continue_=continue_,
                              each=_same)

    def list_each(self, *, resource_version: str = "", limit: int | None = None,
                  continue_: str | None = None,
                  each: Callable[[dict[str, Any]], dict[str, Any]]) -> ListResult:
        """``list`` whose items are ``each(item)``, decoded one at a time (``escaler.kube.listdecode``):
        a page of large objects that ``each`` shrinks never lives decoded all at once."""
        query = _list_query(self._label_selector, self._field_selector, limit, continue_, resource_version)
        path = resource_path(self._mapping, self._namespace)
        data = self._rest.request_raw("GET", path, query=query)
        size = len(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StatusError(500, "InternalError", f"GET {path}: list response is not UTF-8: {exc}") from exc
        del data  # the text is the one copy of the page kept while its items are decoded
        api_version, kind = self._mapping.api_version, self._mapping.kind

        def fill(item: dict[str, Any]) -> dict[str, Any]:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            try:
                return each(item)
            except Exception as exc:
                raise _EachFailed(exc) from exc

        try:
            items, rest = decode_list(text, fill) if text.strip() else ([], {})
        except _EachFailed as failed:
            raise failed.error from None
        except ValueError as exc:
            raise StatusError(500, "InternalError",
                              f"GET {path}: list response is not a JSON object: {exc}") from exc
        md = rest.get("metadata")
        if not isinstance(md, dict):
            md = {}
        return ListResult(items, str(md.get("resourceVersion") or ""), md.get("continue") or None, size)

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> WatchStream:
        if timeout_seconds < 0:
            raise ValueError(f"watch: timeout_seconds must be >= 0, got {timeout_seconds}")
        query: Query = [("watch", "1")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if timeout_seconds > 0:
            query.append(("timeoutSeconds", str(timeout_seconds)))
        if self._label_selector:
            query.append(("labelSelector", self._label_selector))
        if self._field_selector:
            query.append(("fieldSelector", self._field_selector))
        path = resource_path(self._mapping, self._namespace)
        lines, close = self._rest.stream_lines(path, query, min(timeout_seconds + self._margin, self._idle))
        return _WatchStream(lines, close, self._mapping, path)


def _same(item: dict[str, Any]) -> dict[str, Any]:
    return item


class _EachFailed(Exception):
    """Carries an exception raised by ``list_each``'s ``each`` past the decoder's error handling."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _WatchStream:
    """Decodes a watch response, one JSON event per line; see the ListerWatcher contract."""

    def __init__(self, lines: Iterator[bytes], close: Callable[[], None], mapping: ResourceMapping,
                 path: str) -> None:
        # raw lines from the response; consumed once
        self._lines = lines
        # aborts the response (any thread)
        self._close = close
        # fills apiVersion/kind when an event object lacks them
        self._mapping = mapping
        # for error messages
        self._path = path

    def __iter__(self) -> Iterator[WatchEvent]:
        for line in self._lines:
            yield self._decode(line)

    def close(self) -> None:
        self._close()

    def _decode(self, line: bytes) -> WatchEvent:
        try:
            ev = json.loads(line)
        except ValueError as exc:
            self._close()
            raise ConnectionFailure(f"watch {self._path}: malformed event: {line[:200]!r}") from exc
        etype = ev.get("type") if isinstance(ev, dict) else None
        obj = ev.get("object") if isinstance(ev, dict) else None
        if etype not in _WATCH_TYPES or not isinstance(obj, dict):
            self._close()
            raise ConnectionFailure(f"watch {self._path}: unexpected event: {line[:200]!r}")
        if etype != "ERROR":
            obj.setdefault("apiVersion", self._mapping.api_version)
            obj.setdefault("kind", self._mapping.kind)
        return WatchEvent(etype, obj)


class ResourceKeyLike(Protocol):
    """What the informers' ``ResourceKey`` carries (read-only attributes)."""

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def resource(self) -> str: ...

    @property
    def namespace(self) -> str | None: ...

    @property
    def label_selector(self) -> str | None: ...

    @property
    def field_selector(self) -> str | None: ...


class _DeferredListerWatcher:
    """A ResourceListerWatcher whose discovery lookup happens on first use (and is retried until
    it succeeds)."""

    def __init__(self, rest: RestClient, mapper: RESTMapper, key: ResourceKeyLike) -> None:
        # used to build the inner lister-watcher
        self._rest = rest
        self._mapper = mapper
        # the informer's key; immutable
        self._key = key
        # guards _inner
        self._lock = threading.Lock()
        # built on the first successful discovery lookup; never replaced afterwards
        self._inner: ResourceListerWatcher | None = None

    def _resolve(self) -> ResourceListerWatcher:
        with self._lock:
            if self._inner is not None:
                return self._inner
        k = self._key
        mapping = self._mapper.mapping_for_resource(k.group, k.version, k.resource)
        inner = ResourceListerWatcher(
            self._rest, mapping, namespace=k.namespace or None,
            label_selector=k.label_selector or None, field_selector=k.field_selector or None,
        )
        with self._lock:
            if self._inner is None:
                self._inner = inner
            return self._inner

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        return self._resolve().list(resource_version=resource_version, limit=limit, continue_=continue_)

    def list_each(self, *, resource_version: str = "", limit: int | None = None,
                  continue_: str | None = None,
                  each: Callable[[dict[str, Any]], dict[str, Any]]) -> ListResult:
        return self._resolve().list_each(resource_version=resource_version, limit=limit,
                                         continue_=continue_, each=each)

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> WatchStream:
        return self._resolve().watch(resource_version=resource_version, timeout_seconds=timeout_seconds,
                                     allow_bookmarks=allow_bookmarks)


def lister_watcher_factory(
    rest: RestClient, mapper: RESTMapper
) -> Callable[[ResourceKeyLike], ListerWatcher]:
    """A factory the informers layer calls with its ``ResourceKey`` to get a ``ListerWatcher``."""

    def build(key: ResourceKeyLike) -> ListerWatcher:
        return _DeferredListerWatcher(rest, mapper, key)

    return build

