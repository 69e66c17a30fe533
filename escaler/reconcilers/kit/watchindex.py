"""``WatchIndex``: the objects scalers depend on, watched with one handler per resource and an index.

A scaler learns at reconcile time which objects it reads: the workload it writes, a StateTrigger's
state source, a chain hop that does not exist yet, the pods of its target. Those sets change as
scalers come and go, so they are watched on ``DynamicInformers`` (reference-counted, label-selected
informers). The cost of an event must not grow with the fleet (docs/design.md#design-rules, rule 3), so:

* **One registration per watched resource** (a ``ResourceKey``: group/version/resource, namespace
  scope, label selector), held while at least one scaler is interested, whatever the number of
  scalers; never a handler (nor a delivery thread) per scaler.
* **An index** ``(key, "namespace/name") → scalers``: an event on an object enqueues exactly the
  scalers that asked for that object, in O(1) plus the number of those scalers.
* ``want(scaler, role, key, namespace, name)`` records that ``scaler`` reads that object in that
  ``role`` (``ROLE_TARGET``, ``ROLE_SOURCE``, ``ROLE_HOP``; one object per role), replacing what the
  role pointed at before. ``name=None`` holds the informer for its cache only (``ROLE_PODS``: pod
  events do not wake scalers; the target's status and the polls do). Idempotent and cheap: a
  reconcile calls it every time.
* ``drop(scaler, role)`` / ``release(scaler)`` remove interest. When the last interest in a key
  goes, its registration is released **off the calling thread** (stopping an informer may wait
  for its threads): a reconcile never blocks on a watch change.
* ``synced(key)`` and ``cached(key, namespace, name)`` never wait: a reconcile whose informer has
  not listed yet returns ``Result(requeue_after=...)``, and the informer's initial-list add events
  wake the scalers that asked for an object in it.
* **What** may be watched is decided before ``want``, from discovery, because a namespace user
  chooses the kinds: only namespaced kinds, in the scaler's namespace (a source's informer spans the
  manager's namespace scope, label-selected), never core Secrets (``watchkey.watch_key``); a
  target kind must also have a handler or a ``scale`` subresource (``HandlerRegistry.
  target_problem``). A scaler whose kind is refused holds nothing here.
* ``observer`` (optional, fixed at construction): called with ``(key, object)`` for every event of
  every watched resource, on the informer's delivery thread, before the scalers are enqueued — for
  bookkeeping that must see each object at least once (the RSG's create expectations,
  ``rsg.ledger``). It must be quick and must not raise.
* ``WatchIndex`` is a controller ``Source``: ``start(queue)`` gives it the queue its handlers
  enqueue on (``ControllerBuilder.watches_source``), so nothing is late-bound.

Thread-safe: one lock guards the index and the registrations; handlers read the index under it
and enqueue outside it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict
from escaler.informers.store import DeletedFinalStateUnknown
from escaler.runtime.types import Request

__all__ = ["ROLE_HOP", "ROLE_PODS", "ROLE_SOURCE", "ROLE_TARGET", "Enqueuer", "Registrar", "WatchIndex"]

ROLE_TARGET = "target"
ROLE_SOURCE = "source"
ROLE_HOP = "hop"
ROLE_PODS = "pods"

_log = logging.getLogger(__name__)


class Enqueuer(Protocol):
    def add(self, item: Request) -> None: ...


class _Registration(Protocol):
    @property
    def informer(self) -> Any: ...

    def has_synced(self) -> bool: ...

    def release(self) -> None: ...


class Registrar(Protocol):
    """What ``WatchIndex`` needs from ``DynamicInformers``."""

    def register(self, key: ResourceKey, handler: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Want:
    # ROLE_TARGET, ROLE_SOURCE, ROLE_HOP or ROLE_PODS
    role: str
    key: ResourceKey
    # "namespace/name" (or "name" for cluster-scoped kinds); None = the cache only, no events
    obj: str | None


def _find(wants: tuple[_Want, ...], role: str) -> _Want | None:
    for w in wants:
        if w.role == role:
            return w
    return None


def _obj_key(namespace: str, name: str) -> str:
    # interned, as the informer store's keys are: one string per watched object (issue 30)
    return sys.intern(f"{namespace}/{name}") if namespace else name


class _Handler:
    """The one handler of a watched resource: maps an object to the scalers that asked for it."""

    def __init__(self, index: WatchIndex, key: ResourceKey) -> None:
        self._index = index
        self._key = key

    def on_add(self, obj: FrozenDict, is_in_initial_list: bool) -> None:
        self._index._notify(self._key, obj)

    def on_update(self, old: FrozenDict, new: FrozenDict) -> None:
        self._index._notify(self._key, new)

    def on_delete(self, obj: FrozenDict | DeletedFinalStateUnknown) -> None:
        self._index._notify(self._key, obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj)


class WatchIndex:
    """See the module docstring."""

    def __init__(self, informers: Registrar,
                 observer: Callable[[ResourceKey, Mapping[str, Any]], None] | None = None) -> None:
        # the manager's DynamicInformers (or a fake); fixed
        self._informers = informers
        # sees every event's object before scalers are enqueued; fixed
        self._observer = observer
        # guards every field below
        self._mu = threading.Lock()
        # the controller queue handlers enqueue on; None until start() (no interest exists before)
        self._queue: Enqueuer | None = None
        # one registration per key with at least one interested scaler
        self._regs: dict[ResourceKey, _Registration] = {}
        # key → object key → scalers that asked for that object: the one scaler itself while it is
        # alone (a target read by one scaler: a one-member set costs 216 bytes, issue 30), a set
        # from the second; no empty entries are kept
        self._index: dict[ResourceKey, dict[str, Request | set[Request]]] = {}
        # key → number of (scaler, role) interests in it (the registration lives while > 0)
        self._refs: dict[ResourceKey, int] = {}
        # scaler → what it asked for, one want per role, sorted by role (at most four): one entry and
        # one tuple a scaler, not a (scaler, role) key tuple per want plus a roles tuple (issue 30:
        # 0.29 → 0.21 KiB a scaler, bench/mem_by_owner.py); releasing one scaler is O(its roles)
        self._wants: dict[Request, tuple[_Want, ...]] = {}
        # key → the one equal key every want of it holds (while it has a registration): a scaler's
        # reconcile builds its keys afresh, and a 56-byte key per want is two per scaler (issue 30)
        self._keys: dict[ResourceKey, ResourceKey] = {}

    # ------------------------------------------------------------------ Source protocol

    def start(self, queue: Enqueuer) -> None:
        with self._mu:
            self._queue = queue

    def wait_for_sync(self, timeout: float) -> bool:
        return True  # nothing is watched before the first reconcile asks

    def stop(self) -> None:
        with self._mu:
            regs = list(self._regs.values())
            self._regs.clear()
            self._index.clear()
            self._refs.clear()
            self._wants.clear()
            self._keys.clear()
            self._queue = None
        for reg in regs:
            reg.release()

    # ------------------------------------------------------------------ interest

    def want(self, scaler: Request, role: str, key: ResourceKey, namespace: str = "",
             name: str | None = None) -> None:
        """``scaler`` reads ``namespace/name`` of ``key`` in ``role`` (see the module docstring)."""
        obj = None if name is None else _obj_key(namespace, name)
        with self._mu:
            key = self._keys.setdefault(key, key)
            want = _Want(role, key, obj)
            held = self._wants.get(scaler, ())
            old = _find(held, role)
            if old == want:
                return  # its key is registered (old holds a reference): _keys keeps it rightly
            if key not in self._regs:
                # registering starts the informer thread; it never waits for the list
                self._regs[key] = self._informers.register(key, _Handler(self, key))
                _log.info("watching %s", key)
            self._wants[scaler] = tuple(sorted((*(w for w in held if w.role != role), want),
                                               key=lambda w: w.role))
            self._add(scaler, want)
            released = self._remove(scaler, old) if old is not None else None
        self._release_later(released)

    def drop(self, scaler: Request, role: str) -> None:
        with self._mu:
            held = self._wants.get(scaler, ())
            old = _find(held, role)
            if old is not None:
                left = tuple(w for w in held if w.role != role)
                if left:
                    self._wants[scaler] = left
                else:
                    del self._wants[scaler]
            released = self._remove(scaler, old) if old is not None else None
        self._release_later(released)

    def release(self, scaler: Request) -> None:
        """Drop every interest of ``scaler`` (it is gone)."""
        with self._mu:
            roles = [w.role for w in self._wants.get(scaler, ())]
        for role in roles:
            self.drop(scaler, role)

    def _add(self, scaler: Request, want: _Want) -> None:
        self._refs[want.key] = self._refs.get(want.key, 0) + 1
        if want.obj is not None:
            objs = self._index.setdefault(want.key, {})
            have = objs.get(want.obj)
            if have is None or have == scaler:
                objs[want.obj] = scaler
            elif isinstance(have, Request):
                objs[want.obj] = {have, scaler}
            else:
                have.add(scaler)

    def _remove(self, scaler: Request, want: _Want) -> tuple[ResourceKey, _Registration] | None:
        if want.obj is not None:
            objs = self._index.get(want.key, {})
            have = objs.get(want.obj)
            if isinstance(have, Request):
                if have == scaler:
                    del objs[want.obj]
            elif have is not None:
                have.discard(scaler)
                if len(have) == 1:
                    objs[want.obj] = next(iter(have))
                elif not have:
                    del objs[want.obj]
            if not objs:
                self._index.pop(want.key, None)
        left = self._refs.get(want.key, 0) - 1
        if left > 0:
            self._refs[want.key] = left
            return None
        self._refs.pop(want.key, None)
        self._keys.pop(want.key, None)
        reg = self._regs.pop(want.key, None)
        return (want.key, reg) if reg is not None else None

    @staticmethod
    def _release_later(released: tuple[ResourceKey, _Registration] | None) -> None:
        if released is None:
            return
        key, reg = released
        _log.info("released %s (no scaler reads it any more)", key)
        threading.Thread(target=reg.release, name=f"release-{key.resource}", daemon=True).start()

    # ------------------------------------------------------------------ reads (never wait)

    def synced(self, key: ResourceKey) -> bool:
        with self._mu:
            reg = self._regs.get(key)
        return reg is not None and bool(reg.informer.has_synced())

    def cached(self, key: ResourceKey, namespace: str, name: str) -> FrozenDict | None:
        """The object from ``key``'s cache; None when absent, not watched, or not listed yet."""
        with self._mu:
            reg = self._regs.get(key)
        if reg is None or not reg.informer.has_synced():
            return None
        found = reg.informer.store.get_by_key(_obj_key(namespace, name))
        return found if isinstance(found, FrozenDict) else None

    def listed(self, key: ResourceKey) -> list[FrozenDict] | None:
        """Every object of ``key``'s cache; None when not watched or not listed yet."""
        with self._mu:
            reg = self._regs.get(key)
        if reg is None or not reg.informer.has_synced():
            return None
        return [o for o in reg.informer.store.list() if isinstance(o, FrozenDict)]

    def held(self) -> dict[tuple[Request, str], ResourceKey]:
        """A snapshot: (scaler, role) → key (for tests and debugging)."""
        with self._mu:
            return {(scaler, w.role): w.key for scaler, held in self._wants.items() for w in held}

    def keys(self) -> list[ResourceKey]:
        with self._mu:
            return list(self._regs)

    # ------------------------------------------------------------------ events

    def _notify(self, key: ResourceKey, obj: Mapping[str, Any]) -> None:
        if self._observer is not None:
            self._observer(key, obj)
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            return
        name = _obj_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._mu:
            queue = self._queue
            have = self._index.get(key, {}).get(name)
            scalers = [have] if isinstance(have, Request) else list(have or ())
        if queue is None:
            return
        for scaler in scalers:
            queue.add(scaler)
