"""Event handlers: turn an informer event into zero or more ``Request``s on a queue.

Contract (controller-runtime's ``handler`` package):

* A handler only *enqueues keys*: it never reads the API, never blocks, never mutates the object.
  The reconciler re-reads the world; the event is just a hint (level-based).
* ``create``/``delete``/``generic`` map the one object; ``update`` maps *both* the old and the new
  object and enqueues the union (so a change of owner or of a mapped label wakes both the old
  and the new target). Duplicates collapse in the queue anyway.
* A ``DeletedFinalStateUnknown`` tombstone is unwrapped to its last known object.

Provided: ``EnqueueRequestForObject`` (the object's own key), ``EnqueueRequestForOwner`` (the key
of its owner of a given group/kind, from ``metadata.ownerReferences``), and
``EnqueueRequestsFromMapFunc`` (an arbitrary pure mapping).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from escaler.informers.store import DeletedFinalStateUnknown
from escaler.runtime.types import Request

__all__ = [
    "EnqueueRequestForObject",
    "EnqueueRequestForOwner",
    "EnqueueRequestsFromMapFunc",
    "Enqueuer",
    "EventHandler",
    "MapFunc",
    "request_for",
    "unwrap",
]

Obj = Mapping[str, Any]
MapFunc = Callable[[Obj], list[Request]]

_log = logging.getLogger(__name__)

# A bare Kubernetes version ("v1", "v1beta2", "v2alpha1"): an apiVersion of the core group.
_VERSION_RE = re.compile(r"^v\d+(?:(?:alpha|beta)\d+)?$")


class Enqueuer(Protocol):
    """The part of a work queue a handler may touch."""

    def add(self, item: Request) -> None: ...


class EventHandler(Protocol):
    def create(self, obj: Obj, queue: Enqueuer) -> None: ...

    def update(self, old: Obj, new: Obj, queue: Enqueuer) -> None: ...

    def delete(self, obj: Obj, queue: Enqueuer) -> None: ...

    def generic(self, obj: Obj, queue: Enqueuer) -> None: ...


def unwrap(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    """The object itself, or a tombstone's last known state."""
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


def request_for(obj: Obj) -> Request | None:
    """The object's own key; ``None`` (logged) for an object without ``metadata.name``."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        _log.warning("event for an object without metadata.name ignored")
        return None
    return Request(str(meta.get("namespace") or ""), str(meta["name"]))


class _MappingHandler:
    """Base: a handler defined by one ``requests(obj)`` mapping."""

    def requests(self, obj: Obj) -> Iterable[Request]:
        raise NotImplementedError

    def _enqueue(self, objs: Sequence[Obj | DeletedFinalStateUnknown], queue: Enqueuer) -> None:
        seen: set[Request] = set()
        for o in objs:
            for req in self.requests(unwrap(o)):
                if req not in seen:
                    seen.add(req)
                    queue.add(req)

    def create(self, obj: Obj, queue: Enqueuer) -> None:
        self._enqueue([obj], queue)

    def update(self, old: Obj, new: Obj, queue: Enqueuer) -> None:
        self._enqueue([old, new], queue)

    def delete(self, obj: Obj | DeletedFinalStateUnknown, queue: Enqueuer) -> None:
        self._enqueue([obj], queue)

    def generic(self, obj: Obj, queue: Enqueuer) -> None:
        self._enqueue([obj], queue)


class EnqueueRequestForObject(_MappingHandler):
    """Enqueue the object's own key (the handler of a controller's primary kind).

    On update only the new object's key is enqueued: old and new have the same key.
    """

    def requests(self, obj: Obj) -> Iterable[Request]:
        req = request_for(obj)
        return [req] if req is not None else []

    def update(self, old: Obj, new: Obj, queue: Enqueuer) -> None:
        self._enqueue([new], queue)


def _group_of(api_version_or_group: str) -> str:
    """``"apps/v1"`` → ``"apps"``; ``"v1"`` → ``""`` (core); ``"escaler.io"`` → ``"escaler.io"``."""
    if "/" in api_version_or_group:
        return api_version_or_group.split("/", 1)[0]
    if _VERSION_RE.match(api_version_or_group):
        return ""
    return api_version_or_group


class EnqueueRequestForOwner(_MappingHandler):
    """Enqueue the owner(s) of the object that have the given group and kind.

    ``owner_api_version_group`` is the owner's apiVersion (``"apps/v1"``, ``"v1"``) or bare group
    (``"apps"``, ``""`` for core); only the *group* is compared, as in controller-runtime, so an
    owner reference written at another version still matches. With ``is_controller`` (the
    default) only the reference marked ``controller: true`` counts. The owner is looked up in the
    object's namespace when ``owner_namespaced``, else as cluster-scoped.
    """

    def __init__(self, owner_api_version_group: str, owner_kind: str, is_controller: bool = True,
                 *, owner_namespaced: bool = True) -> None:
        if not owner_kind:
            raise ValueError("EnqueueRequestForOwner.owner_kind: must not be empty")
        # the owner's API group ("" = core) and kind to match; fixed
        self.owner_group = _group_of(owner_api_version_group)
        self.owner_kind = owner_kind
        # only follow the reference with controller: true
        self.is_controller = is_controller
        # whether the owner kind is namespaced (its Request takes the object's namespace)
        self.owner_namespaced = owner_namespaced

    def requests(self, obj: Obj) -> Iterable[Request]:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            return []
        refs = meta.get("ownerReferences") or ()
        namespace = str(meta.get("namespace") or "") if self.owner_namespaced else ""
        out: list[Request] = []
        for ref in refs:
            if not isinstance(ref, Mapping):
                continue
            if self.is_controller and ref.get("controller") is not True:
                continue
            if ref.get("kind") != self.owner_kind:
                continue
            if _group_of(str(ref.get("apiVersion") or "")) != self.owner_group:
                continue
            name = ref.get("name")
            if isinstance(name, str) and name:
                out.append(Request(namespace, name))
        return out


class EnqueueRequestsFromMapFunc(_MappingHandler):
    """Enqueue whatever ``fn(obj)`` returns; ``fn`` must be pure and fast (it may read caches).

    An exception from ``fn`` is logged and the event dropped for that object: a mapping bug must
    not stall the informer's delivery to other handlers.
    """

    def __init__(self, fn: MapFunc) -> None:
        # the mapping; fixed
        self.fn = fn

    def requests(self, obj: Obj) -> Iterable[Request]:
        try:
            return list(self.fn(obj))
        except Exception:
            _log.exception("map function %r failed; event dropped", self.fn)
            return []
