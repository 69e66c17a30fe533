"""An in-process fake API server for one resource, implementing ``ListerWatcher`` with scripted faults.

Shared by the informer, runtime and controller unit tests. No network, no sleeps: streams are
blocking iterators over queues, and tests observe the fake with bounded ``wait_for``.

Data (all thread-safe; objects are plain dicts, copied in and out like JSON on the wire)::

    api = FakeAPI(objects=[make_obj("a"), ...])   # initial objects get resourceVersions 1..n
    api.create(obj) -> dict      # 409 StatusError if it exists; sets metadata.resourceVersion/uid
    api.update(obj) -> dict      # 404 if missing; bumps resourceVersion; MODIFIED to watchers
    api.delete(obj_or_key) -> dict   # 404 if missing; DELETED (final state, new RV) to watchers
    api.get(key) -> dict | None; api.objects() -> list[dict]; api.resource_version -> str
    make_obj(name, namespace="default", labels=None, **fields) -> dict    # a small object

ListerWatcher (``api`` is the unfiltered view; ``api.view(namespace, label_selector)`` or
``api.for_key(resource_key)`` gives a filtered one sharing the same state and counters)::

    list(resource_version="", limit=None, continue_=None) -> ListResult
        # a consistent snapshot; with ``limit`` it pages with continue tokens "rv:offset". A token
        # older than the last compact() raises 410 Expired (as etcd does).
    watch(resource_version, timeout_seconds, allow_bookmarks=True) -> FakeWatch
        # replays recorded events after resource_version, then live ones. resource_version
        # older than the last compact() -> StatusError 410 on open (or, with
        # ``api.gone_as_event = True``, a stream yielding one ERROR 410 event and ending).
        # "" or "0" start from now (no synthetic adds). Objects leaving / entering a view's
        # selector on update are sent as DELETED / ADDED to that view, like the real server.
    FakeWatch: iterate for WatchEvents (blocks); close() is idempotent and ends iteration.

Scripted faults and server behaviour::

    api.fail_next_list(*errors)      # each list call pops one; None = let that call succeed
    api.fail_next_watch(*errors)     # same, for watch calls (raised on open)
    api.on_list = fn(api, ListRequest) | None   # hook run before serving each list call
    api.compact()                    # forget history: watches from an older RV get 410; open
                                     # watches receive an ERROR 410 event and end
    api.send_bookmark() -> str       # bump the RV (as other writes would) and send BOOKMARK
    api.end_watches()                # the server closes all open streams normally
    api.break_watches(err=None)      # open streams raise ConnectionFailure (or ``err``)
    api.send_watch_error(code, reason="", message="")   # ERROR event with that Status, then end
    api.pause_watches() / api.resume_watches()          # hold live events (a lagging watch);
                                     # compact() while paused drops the held events

Observation::

    api.list_calls, api.watch_calls            # counts, failed calls included
    api.list_requests, api.watch_requests      # ListRequest / WatchRequest records, in order
    api.open_watches                           # streams neither ended by the server nor closed
    api.wait_for(predicate, timeout=5.0)       # block until predicate() (evaluated under the
                                               # fake's lock on every change); TimeoutError

Test helpers for code fed by the fake::

    wait_until(predicate, timeout=5.0)   # poll with a real-time deadline (cross-thread observation
                                         # only; drive *time* with FakeClock); TimeoutError
    RecordingHandler()                   # a ResourceEventHandler that records Recorded(kind, key,
                                         # obj, old, initial) in order; .wait_for_count(n),
                                         # .kinds(), .keys(), .clear()
"""

from __future__ import annotations

import builtins
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from escaler.errors import ConnectionFailure, StatusError
from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict, thaw
from escaler.informers.interfaces import EventType, ListResult, WatchEvent
from escaler.informers.store import DeletedFinalStateUnknown, meta_namespace_key

__all__ = ["FakeAPI", "FakeView", "FakeWatch", "ListRequest", "Recorded", "RecordingHandler", "WatchRequest",
           "make_obj", "wait_until"]

_END = object()


def make_obj(name: str, namespace: str = "default", labels: Mapping[str, str] | None = None,
             **fields: Any) -> dict[str, Any]:
    """A small namespaced object (``namespace=""`` for cluster-scoped) with optional top-level fields."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **fields}


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


def _parse_selector(selector: str) -> list[tuple[str, str, str]]:
    """Equality-based label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k`` (comma-joined)."""
    terms: list[tuple[str, str, str]] = []
    for raw in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in raw:
            k, v = raw.split("!=", 1)
            terms.append(("!=", k.strip(), v.strip()))
        elif "=" in raw:
            k, v = raw.replace("==", "=").split("=", 1)
            terms.append(("=", k.strip(), v.strip()))
        elif raw.startswith("!"):
            terms.append(("!", raw[1:].strip(), ""))
        elif " " in raw or "(" in raw:
            raise ValueError(f"FakeAPI: unsupported label selector term {raw!r} (equality-based only)")
        else:
            terms.append(("exists", raw, ""))
    return terms


@dataclass(frozen=True)
class ListRequest:
    view: str
    resource_version: str
    limit: int | None
    continue_: str | None


@dataclass(frozen=True)
class WatchRequest:
    view: str
    resource_version: str
    timeout_seconds: int
    allow_bookmarks: bool


class FakeWatch:
    """A watch stream: a blocking iterator over a queue. ``close()`` ends it (idempotent)."""

    def __init__(self, api: FakeAPI, view: FakeView) -> None:
        # the server and the (filtered) view this stream serves; fixed
        self._api = api
        self.view = view
        # events, _END, or an exception to raise; fed by the fake under its lock
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # live events held while the fake's watches are paused
        self.held: list[WatchEvent] = []
        # set by close() (client side) or by the server ending the stream
        self.closed = False

    def put(self, item: object) -> None:
        self._queue.put(item)

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            item = self._queue.get()
            if item is _END or self.closed:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, WatchEvent)
            yield item

    def close(self) -> None:
        self._api._close_watch(self)


class FakeView:
    """A ListerWatcher over the fake's objects that match a namespace and label selector."""

    def __init__(self, api: FakeAPI, namespace: str = "", label_selector: str = "") -> None:
        # the shared server state; fixed
        self._api = api
        # filters; "" means all
        self.namespace = namespace
        self.label_selector = label_selector
        self._terms = _parse_selector(label_selector)

    @property
    def name(self) -> str:
        return f"ns={self.namespace or '*'} labels={self.label_selector or '*'}"

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        for op, k, v in self._terms:
            if (op == "=" and labels.get(k) != v) or (op == "!=" and labels.get(k) == v) \
                    or (op == "exists" and k not in labels) or (op == "!" and k in labels):
                return False
        return True

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        return self._api._list(self, resource_version, limit, continue_)

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> FakeWatch:
        return self._api._watch(self, resource_version, timeout_seconds, allow_bookmarks)


class FakeAPI:
    """The fake server; see the module docstring for its API."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        # guards every field below; notified on every change (wait_for)
        self._cond = threading.Condition(threading.RLock())
        # current objects by key, each with metadata.resourceVersion set; never mutated in place
        # (a write stores a fresh copy), and only copies are handed out
        self._objects: dict[str, dict[str, Any]] = {}
        # last resourceVersion handed out (etcd revision)
        self._rv = 0
        # events after _compacted_rv: (rv, type, object, previous object or None)
        self._history: list[tuple[int, str, dict[str, Any], dict[str, Any] | None]] = []
        # watches from a resourceVersion older than this get 410
        self._compacted_rv = 0
        # list snapshots by resourceVersion, for continue tokens (sorted by key). They hold the
        # stored dicts themselves: stored objects are replaced on write, never mutated in place
        self._snapshots: dict[int, list[dict[str, Any]]] = {}
        # open streams (not ended by the server, not closed by the client)
        self._watches: list[FakeWatch] = []
        # while True, live events are held per stream instead of delivered
        self._paused = False
        # scripted failures: popped one per call; None = succeed
        self._list_faults: list[BaseException | None] = []
        self._watch_faults: list[BaseException | None] = []
        # how a watch from a compacted RV fails: HTTP 410 on open (False) or an ERROR event (True)
        self.gone_as_event = False
        # called before serving each list request (e.g. to compact between pages)
        self.on_list: Callable[[FakeAPI, ListRequest], None] | None = None
        # observation
        self.list_calls = 0
        self.watch_calls = 0
        self.list_requests: list[ListRequest] = []
        self.watch_requests: list[WatchRequest] = []
        self._all = FakeView(self)
        for obj in objects:
            self.create(obj)

    # ---- views (ListerWatcher) ----------------------------------------------------------

    def view(self, namespace: str = "", label_selector: str = "") -> FakeView:
        return FakeView(self, namespace, label_selector)

    def for_key(self, key: ResourceKey) -> FakeView:
        """A view for an informer ``ResourceKey`` (namespace and label selector; GVR ignored)."""
        return self.view(key.namespace, key.label_selector)

    def list(self, *, resource_version: str = "", limit: int | None = None,
             continue_: str | None = None) -> ListResult:
        return self._all.list(resource_version=resource_version, limit=limit, continue_=continue_)

    def watch(self, *, resource_version: str, timeout_seconds: int,
              allow_bookmarks: bool = True) -> FakeWatch:
        return self._all.watch(resource_version=resource_version, timeout_seconds=timeout_seconds,
                               allow_bookmarks=allow_bookmarks)

    # ---- data ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._rv)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self._objects.get(key)
            return thaw(obj) if obj is not None else None

    def objects(self) -> builtins.list[dict[str, Any]]:
        with self._cond:
            return [thaw(o) for o in self._objects.values()]

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        with self._cond:
            key = _key(obj)
            if key in self._objects:
                raise StatusError(409, "AlreadyExists", f"{key} already exists")
            stored = self._stamp(obj)
            stored["metadata"].setdefault("uid", str(uuid.UUID(int=self._rv)))
            self._objects[key] = stored
            self._emit("ADDED", stored, None)
            return thaw(stored)

    def update(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        with self._cond:
            key = _key(obj)
            old = self._objects.get(key)
            if old is None:
                raise StatusError(404, "NotFound", f"{key} not found")
            stored = self._stamp(obj)
            stored["metadata"].setdefault("uid", old["metadata"].get("uid"))
            self._objects[key] = stored
            self._emit("MODIFIED", stored, old)
            return thaw(stored)

    def delete(self, obj_or_key: Mapping[str, Any] | str) -> dict[str, Any]:
        with self._cond:
            key = obj_or_key if isinstance(obj_or_key, str) else _key(obj_or_key)
            old = self._objects.pop(key, None)
            if old is None:
                raise StatusError(404, "NotFound", f"{key} not found")
            final = self._stamp(old)
            self._emit("DELETED", final, old)
            return thaw(final)

    def _stamp(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._rv += 1
        stored: dict[str, Any] = thaw(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        return stored

    def _emit(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._history.append((self._rv, kind, obj, old))
        for w in list(self._watches):
            event = self._event_for(w.view, kind, obj, old)
            if event is not None:
                self._deliver(w, event)
        self._cond.notify_all()

    @staticmethod
    def _event_for(view: FakeView, kind: str, obj: dict[str, Any],
                   old: dict[str, Any] | None) -> WatchEvent | None:
        now_in = view.matches(obj)
        was_in = old is not None and view.matches(old)
        if kind == "MODIFIED":
            if now_in and not was_in:
                kind = "ADDED"
            elif was_in and not now_in:
                kind = "DELETED"
            elif not now_in:
                return None
        elif not now_in and not (kind == "DELETED" and was_in):
            return None
        return WatchEvent(cast(EventType, kind), thaw(obj))

    def _deliver(self, w: FakeWatch, event: WatchEvent) -> None:
        if self._paused:
            w.held.append(event)
        else:
            w.put(event)

    # ---- ListerWatcher implementation -----------------------------------------------------

    def _list(self, view: FakeView, resource_version: str, limit: int | None,
              continue_: str | None) -> ListResult:
        request = ListRequest(view.name, resource_version, limit, continue_)
        with self._cond:
            self.list_calls += 1
            self.list_requests.append(request)
            self._cond.notify_all()
            hook = self.on_list
        if hook is not None:
            hook(self, request)
        with self._cond:
            if self._list_faults:
                fault = self._list_faults.pop(0)
                if fault is not None:
                    raise fault
            if continue_:
                rv_text, offset_text = continue_.split(":", 1)
                rv, offset = int(rv_text), int(offset_text)
                snapshot = self._snapshots.get(rv)
                if rv < self._compacted_rv or snapshot is None:
                    raise StatusError(410, "Expired", "The provided continue parameter is too old "
                                      "to display a consistent list result.")
            else:
                rv, offset = self._rv, 0
                snapshot = [self._objects[k] for k in sorted(self._objects) if view.matches(self._objects[k])]
                if limit:
                    self._snapshots[rv] = snapshot
            end = len(snapshot) if not limit else min(len(snapshot), offset + limit)
            items = [thaw(o) for o in snapshot[offset:end]]
            token = f"{rv}:{end}" if end < len(snapshot) else None
            return ListResult(items, str(rv), token)

    def _watch(self, view: FakeView, resource_version: str, timeout_seconds: int,
               allow_bookmarks: bool) -> FakeWatch:
        with self._cond:
            self.watch_calls += 1
            self.watch_requests.append(WatchRequest(view.name, resource_version, timeout_seconds,
                                                    allow_bookmarks))
            self._cond.notify_all()
            if self._watch_faults:
                fault = self._watch_faults.pop(0)
                if fault is not None:
                    raise fault
            start = int(resource_version) if resource_version not in ("", "0") else self._rv
            w = FakeWatch(self, view)
            if start < self._compacted_rv:
                message = f"too old resource version: {start} ({self._compacted_rv})"
                if not self.gone_as_event:
                    raise StatusError(410, "Expired", message)
                w.put(WatchEvent("ERROR", _status(410, "Expired", message)))
                w.put(_END)
                return w
            for rv, kind, obj, old in self._history:
                if rv > start:
                    event = self._event_for(view, kind, obj, old)
                    if event is not None:
                        w.put(event)
            self._watches.append(w)
            self._cond.notify_all()
            return w

    def _close_watch(self, w: FakeWatch) -> None:
        with self._cond:
            w.closed = True
            if w in self._watches:
                self._watches.remove(w)
            w.put(_END)
            self._cond.notify_all()

    def _end(self, w: FakeWatch, last: object = _END) -> None:
        if w in self._watches:
            self._watches.remove(w)
        if last is not _END:
            w.put(last)
        w.put(_END)

    # ---- scripted behaviour -------------------------------------------------------------

    def fail_next_list(self, *errors: BaseException | None) -> None:
        with self._cond:
            self._list_faults.extend(errors)

    def fail_next_watch(self, *errors: BaseException | None) -> None:
        with self._cond:
            self._watch_faults.extend(errors)

    def compact(self) -> None:
        """Forget all history up to now; open watches get ERROR 410 and end."""
        with self._cond:
            self._compacted_rv = self._rv
            self._history.clear()
            self._snapshots.clear()
            status = _status(410, "Expired", f"too old resource version (compacted at {self._rv})")
            for w in list(self._watches):
                w.held.clear()
                self._end(w, WatchEvent("ERROR", status))
            self._cond.notify_all()

    def send_bookmark(self) -> str:
        """Advance the resourceVersion (as writes to other resources would) and send a BOOKMARK."""
        with self._cond:
            self._rv += 1
            rv = str(self._rv)
            for w in self._watches:
                self._deliver(w, WatchEvent("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                                                         "metadata": {"resourceVersion": rv}}))
            self._cond.notify_all()
            return rv

    def end_watches(self) -> None:
        with self._cond:
            for w in list(self._watches):
                for event in w.held:
                    w.put(event)
                w.held.clear()
                self._end(w)
            self._cond.notify_all()

    def break_watches(self, err: BaseException | None = None) -> None:
        with self._cond:
            for w in list(self._watches):
                w.held.clear()
                self._end(w, err or ConnectionFailure("connection reset by peer"))
            self._cond.notify_all()

    def send_watch_error(self, code: int, reason: str = "", message: str = "") -> None:
        with self._cond:
            for w in list(self._watches):
                self._end(w, WatchEvent("ERROR", _status(code, reason, message)))
            self._cond.notify_all()

    def pause_watches(self) -> None:
        with self._cond:
            self._paused = True

    def resume_watches(self) -> None:
        with self._cond:
            self._paused = False
            for w in self._watches:
                for event in w.held:
                    w.put(event)
                w.held.clear()
            self._cond.notify_all()

    # ---- observation --------------------------------------------------------------------

    @property
    def open_watches(self) -> int:
        with self._cond:
            return len(self._watches)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Block (real time, bounded) until ``predicate()`` holds; it is re-checked on every change."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"FakeAPI.wait_for: condition not met within {timeout}s")
                self._cond.wait(min(left, 0.05))



# ---- helpers for code fed by the fake ---------------------------------------------------------

_POLL_SECONDS = 0.005


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true or ``timeout`` real seconds pass (then TimeoutError)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"wait_until: {what} not met within {timeout}s")
        time.sleep(_POLL_SECONDS)


@dataclass(frozen=True)
class Recorded:
    # "add" | "update" | "delete"
    kind: str
    # store key of the object
    key: str
    # the object (the new one for updates; the tombstone for a delete after a gap)
    obj: FrozenDict | DeletedFinalStateUnknown
    # the old object of an update
    old: FrozenDict | None = None
    # is_in_initial_list of an add
    initial: bool | None = None

    @property
    def rv(self) -> str:
        obj = self.obj.obj if isinstance(self.obj, DeletedFinalStateUnknown) else self.obj
        return str(obj["metadata"].get("resourceVersion", ""))


class RecordingHandler:
    """A thread-safe ResourceEventHandler that records every call in order."""

    def __init__(self, on_event: Callable[[Recorded], object] | None = None) -> None:
        # guards events; notified on every call
        self._cond = threading.Condition()
        # every call, in delivery order
        self.events: list[Recorded] = []
        # optional side effect run after recording (e.g. to block or raise)
        self._on_event = on_event

    def _record(self, event: Recorded) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()
        if self._on_event is not None:
            self._on_event(event)

    def on_add(self, obj: FrozenDict, is_in_initial_list: bool) -> None:
        self._record(Recorded("add", meta_namespace_key(obj), obj, None, is_in_initial_list))

    def on_update(self, old: FrozenDict, new: FrozenDict) -> None:
        self._record(Recorded("update", meta_namespace_key(new), new, old))

    def on_delete(self, obj: FrozenDict | DeletedFinalStateUnknown) -> None:
        self._record(Recorded("delete", meta_namespace_key(obj), obj))

    def wait_for_count(self, n: int, timeout: float = 5.0) -> builtins.list[Recorded]:
        """Block until at least ``n`` events were recorded; returns a snapshot."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.events) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"RecordingHandler: {len(self.events)} events, wanted {n}: "
                                       f"{[(e.kind, e.key) for e in self.events]}")
                self._cond.wait(left)
            return builtins.list(self.events)

    def snapshot(self) -> builtins.list[Recorded]:
        with self._cond:
            return builtins.list(self.events)

    def kinds(self) -> builtins.list[tuple[str, str]]:
        return [(e.kind, e.key) for e in self.snapshot()]

    def clear(self) -> None:
        with self._cond:
            self.events.clear()
