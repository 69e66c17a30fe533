"""SharedInformer: one reflector and one cache per resource, fanned out to many handlers.

Contract (client-go's sharedIndexInformer and processorListener):

* **Cache.** ``store``/``indexer`` is an ``Indexer`` of frozen objects kept in step by a
  ``Reflector``. It always has ``NAMESPACE_INDEX``; more indexers may be added at any time.
  ``has_synced()`` is True once the initial list is in the store; ``wait_for_sync(timeout)``
  blocks (on a condition, timeout in the injected clock's seconds) until then, and returns
  False on timeout or if the informer stopped first.
* **Notifications.** Each store change is applied and turned into notifications under one lock,
  so every handler sees one linear history: ``on_add``/``on_update``/``on_delete`` in the order
  the store changed. A relist (after 410) notifies only differences: ``on_add`` for new
  objects, ``on_update`` for those whose resourceVersion changed, and ``on_delete`` with a
  ``DeletedFinalStateUnknown`` for those that vanished (client-go also re-delivers unchanged
  objects as updates; that is what resync is for here).
* **Transform.** Every listed or watched object passes through ``transform`` (default
  ``strip_managed_fields``: ``metadata.managedFields`` is not cached) before it is frozen, so
  listers and handlers (deletes included) all see the transformed object. The reflector applies it
  to each list page as it arrives too (a relist peaks at one page of untransformed objects).
* **Per-handler delivery.** Every handler has its own unbounded buffer and delivery thread: a
  slow handler delays only itself (its buffer grows) and never reorders its own events. A
  handler that raises is logged with its traceback; delivery goes on with the next event.
* **Late handlers.** A handler added after the informer started first receives
  ``on_add(obj, is_in_initial_list=True)`` for every cached object, then every later change —
  the snapshot and the registration are atomic with respect to store updates.
  ``HandlerRegistration.has_synced()`` is True once that handler has been *delivered* its
  initial adds (client-go's per-handler HasSynced).
* **Resync.** With a resync period (the informer's default, or per handler), every period on the
  injected clock the handlers that asked for it get ``on_update(obj, obj)`` for each cached
  object. The informer checks every ``resync_period`` (the smallest one requested before start);
  a handler added later with a shorter period is raised to the check period (logged).
* **Lifecycle.** ``run(stop)`` blocks until ``stop`` is set; ``start(stop)`` runs it on a daemon
  thread. An informer runs once. On stop, undelivered notifications are dropped and handler
  threads are joined with ``HANDLER_JOIN_TIMEOUT`` each; a handler stuck past that is logged and
  left behind (daemon thread). ``remove()`` on a registration stops its deliveries (one in
  progress may finish) and discards what was buffered for it.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from escaler.clock import Clock, RealClock
from escaler.informers.frozen import FrozenDict, freeze
from escaler.informers.handlers import ResourceEventHandler
from escaler.informers.interfaces import ListerWatcher
from escaler.informers.reflector import DEFAULT_PAGE_SIZE, Reflector
from escaler.informers.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    namespace_index_func,
)
from escaler.informers.transform import Transform, strip_managed_fields

__all__ = ["HANDLER_JOIN_TIMEOUT", "MIN_RESYNC_PERIOD", "HandlerRegistration", "SharedInformer"]

log = logging.getLogger("escaler.informers")

# a resync more frequent than this is a configuration error (client-go: minimumResyncPeriod)
MIN_RESYNC_PERIOD = 1.0
# how long stopping waits for each handler thread (and the reflector's helper threads)
HANDLER_JOIN_TIMEOUT = 5.0

# notification kinds; a notification is a (kind, a, b) tuple to keep fan-out of big lists cheap
_ADD = 0  # (ADD, obj, is_in_initial_list)
_UPDATE = 1  # (UPDATE, old, new)
_DELETE = 2  # (DELETE, obj_or_tombstone, None)
_SYNCED = 3  # (SYNCED, None, None): the initial adds before it have been delivered
_Notification = tuple[int, Any, Any]
_SYNCED_NOTE: _Notification = (_SYNCED, None, None)


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) and rv else None


def _changed(old: FrozenDict, new: FrozenDict) -> bool:
    old_rv, new_rv = _resource_version(old), _resource_version(new)
    if old_rv is not None and new_rv is not None:
        return old_rv != new_rv
    return old != new


class _Listener:
    """One handler's buffer and delivery thread (client-go processorListener)."""

    def __init__(self, handler: ResourceEventHandler, resync_period: float, now: float,
                 informer_name: str) -> None:
        # the user's handler; fixed
        self.handler = handler
        # for thread names and logs
        self._informer_name = informer_name
        # seconds between resyncs for this handler; 0 = never. Guarded by the informer's lock
        self.resync_period = resync_period
        # clock.monotonic() at or after which this handler is due a resync; informer's lock
        self.next_resync = now + resync_period
        # guards _buffer and _stopped; the delivery thread never holds it while calling the handler
        self._cond = threading.Condition()
        # notifications not yet delivered, oldest first; unbounded; cleared on stop
        self._buffer: collections.deque[_Notification] = collections.deque()
        # once True, nothing more is buffered or delivered
        self._stopped = False
        # the delivery thread; None until start()
        self._thread: threading.Thread | None = None
        # set when the SYNCED marker (after the initial adds) has been delivered
        self.synced = threading.Event()

    def push(self, note: _Notification) -> None:
        with self._cond:
            if not self._stopped:
                self._buffer.append(note)
                self._cond.notify()

    def push_many(self, notes: Iterable[_Notification]) -> None:
        with self._cond:
            if not self._stopped:
                self._buffer.extend(notes)
                self._cond.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"informer-{self._informer_name}-handler")
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._buffer.clear()
            self._cond.notify()

    def join(self, timeout: float) -> bool:
        """Wait for the delivery thread to exit; False if it is still busy after ``timeout``."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._buffer and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                kind, a, b = self._buffer.popleft()
            try:
                if kind == _ADD:
                    self.handler.on_add(a, b)
                elif kind == _UPDATE:
                    self.handler.on_update(a, b)
                elif kind == _DELETE:
                    self.handler.on_delete(a)
                else:
                    self.synced.set()
            except Exception:
                log.exception("informer %s: handler %r raised in %s; continuing with the next event",
                              self._informer_name, self.handler,
                              ("on_add", "on_update", "on_delete", "sync")[kind])


class HandlerRegistration:
    """The handle returned by ``SharedInformer.add_event_handler``."""

    def __init__(self, informer: SharedInformer, listener: _Listener) -> None:
        # the informer and this handler's listener; fixed
        self._informer = informer
        self._listener = listener

    @property
    def handler(self) -> ResourceEventHandler:
        return self._listener.handler

    def has_synced(self) -> bool:
        """True once the informer synced and this handler was delivered its initial adds."""
        return self._informer.has_synced() and self._listener.synced.is_set()

    def remove(self) -> None:
        """Stop deliveries to this handler (idempotent). Safe to call from inside the handler."""
        self._informer._remove_listener(self._listener)


class _Sink:
    """The reflector's sink: store changes turned into notifications, under the informer's lock."""

    def __init__(self, informer: SharedInformer) -> None:
        # the informer whose lock, store and listeners this writes to; fixed
        self._inf = informer

    def add(self, obj: Mapping[str, Any]) -> None:
        self._upsert(obj)

    def update(self, obj: Mapping[str, Any]) -> None:
        self._upsert(obj)

    def _upsert(self, obj: Mapping[str, Any]) -> None:
        inf = self._inf
        frozen: FrozenDict = freeze(inf._transform(obj))
        with inf._lock:
            old = inf._indexer.get(frozen)
            inf._indexer.add(frozen)
            note = (_ADD, frozen, False) if old is None else (_UPDATE, old, frozen)
            for listener in inf._listeners:
                listener.push(note)

    def delete(self, obj: Mapping[str, Any]) -> None:
        inf = self._inf
        frozen: FrozenDict = freeze(inf._transform(obj))
        with inf._lock:
            inf._indexer.delete(frozen)
            note = (_DELETE, frozen, None)
            for listener in inf._listeners:
                listener.push(note)

    def replace(self, objs: list[dict[str, Any]], resource_version: str) -> None:
        inf = self._inf
        key_of = inf._indexer.key_of
        new: dict[str, FrozenDict] = {}
        transform = inf._transform
        for obj in objs:
            frozen: FrozenDict = freeze(transform(obj))
            new[key_of(frozen)] = frozen
        with inf._lock:
            old = inf._indexer.replace(new.values(), resource_version)
            initial = not inf._synced.is_set()
            notes: list[_Notification] = []
            for key, obj in new.items():
                prev = old.get(key)
                if prev is None:
                    notes.append((_ADD, obj, initial))
                elif _changed(prev, obj):
                    notes.append((_UPDATE, prev, obj))
            notes.extend((_DELETE, DeletedFinalStateUnknown(key, prev), None)
                         for key, prev in old.items() if key not in new)
            if initial:
                notes.append(_SYNCED_NOTE)
            for listener in inf._listeners:
                listener.push_many(notes)
            if initial:
                with inf._sync_cond:
                    inf._synced.set()
                    inf._sync_cond.notify_all()
        if not initial:
            log.info("informer %s: relisted %d objects at resourceVersion %s (%d changes)",
                     inf.name, len(new), resource_version, len(notes))

    def resync(self) -> None:
        inf = self._inf
        with inf._lock:
            now = inf._clock.monotonic()
            due = [ls for ls in inf._listeners if ls.resync_period > 0 and now >= ls.next_resync]
            if not due:
                return
            notes = [(_UPDATE, obj, obj) for obj in inf._indexer.list()]
            for listener in due:
                listener.push_many(notes)
                listener.next_resync = now + listener.resync_period


class SharedInformer:
    """A cached, watched view of one resource with fan-out to handlers; see the module docstring."""

    def __init__(
        self,
        lw: ListerWatcher,
        *,
        name: str = "",
        clock: Clock | None = None,
        resync_period: float = 0.0,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform = strip_managed_fields,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        _validate_resync("SharedInformer.resync_period", resync_period)
        # objects per list page (the reflector's; a relist holds one page of untransformed objects)
        self._page_size = page_size
        # applied to every listed or watched object before it is cached (escaler.informers.transform)
        self._transform = transform
        # the API and a name for logs and thread names; fixed
        self._lw = lw
        self._name = name or "informer"
        # time source for resync, wait_for_sync and the reflector
        self._clock: Clock = clock or RealClock()
        # the resync period handlers get when they do not ask for one; fixed
        self._default_resync = resync_period
        # how often the reflector calls resync(): the smallest positive period asked for before
        # start; fixed once running (guarded by _lock)
        self._resync_check = resync_period
        # the cache; always has NAMESPACE_INDEX
        self._indexer = Indexer(indexers={NAMESPACE_INDEX: namespace_index_func, **(indexers or {})})
        # serialises store changes with notification fan-out and handler (de)registration,
        # which is what gives every handler one consistent, ordered history
        self._lock = threading.Lock()
        # registered handlers in registration order (guarded by _lock)
        self._listeners: list[_Listener] = []
        # "new" -> "running" -> "stopped", never backwards (guarded by _lock)
        self._state = "new"
        # created on start; None before
        self._reflector: Reflector | None = None
        # set (under _sync_cond) once the initial list is in the store; never cleared
        self._synced = threading.Event()
        # notified when _synced is set or the informer stops; wait_for_sync waits on it
        self._sync_cond = threading.Condition()
        # set (under _sync_cond) when run() has returned
        self._stopped = threading.Event()

    # ---- cache --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def store(self) -> Indexer:
        return self._indexer

    @property
    def indexer(self) -> Indexer:
        return self._indexer

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions to the cache (existing objects are indexed at once)."""
        self._indexer.add_indexers(indexers)

    def has_synced(self) -> bool:
        """True once the initial list has been stored."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float) -> bool:
        """Wait up to ``timeout`` clock seconds for ``has_synced()``; False on timeout or stop."""
        deadline = self._clock.monotonic() + timeout
        with self._sync_cond:
            while not self._synced.is_set():
                if self._stopped.is_set():
                    return False
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    return False
                self._clock.wait(self._sync_cond, left)
            return True

    def last_sync_resource_version(self) -> str:
        """The resourceVersion the cache reflects ("" before the first list)."""
        with self._lock:
            reflector = self._reflector
        return reflector.last_sync_resource_version() if reflector is not None else ""

    # ---- handlers -----------------------------------------------------------------------

    def add_event_handler(self, handler: ResourceEventHandler,
                          resync_period: float | None = None) -> HandlerRegistration:
        """Register ``handler``; if the informer already has objects, it gets them as adds first."""
        period = self._default_resync if resync_period is None else resync_period
        _validate_resync("add_event_handler.resync_period", period)
        with self._lock:
            if self._state == "stopped":
                raise RuntimeError(f"informer {self._name} has stopped: handlers can no longer be added")
            if period > 0:
                if self._state == "running":
                    if self._resync_check == 0:
                        log.warning("informer %s: started without resync; handler %r's resync period "
                                    "%.1fs is ignored", self._name, handler, period)
                        period = 0.0
                    elif period < self._resync_check:
                        log.warning("informer %s: handler %r's resync period %.1fs raised to the "
                                    "informer's %.1fs (it is already running)",
                                    self._name, handler, period, self._resync_check)
                        period = self._resync_check
                elif self._resync_check == 0 or period < self._resync_check:
                    self._resync_check = period
            listener = _Listener(handler, period, self._clock.monotonic(), self._name)
            listener.push_many([(_ADD, obj, True) for obj in self._indexer.list()])
            if self._synced.is_set():
                listener.push(_SYNCED_NOTE)
            self._listeners.append(listener)
            if self._state == "running":
                listener.start()
        return HandlerRegistration(self, listener)

    def _remove_listener(self, listener: _Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
        listener.stop()
        if not listener.join(HANDLER_JOIN_TIMEOUT):
            log.warning("informer %s: handler %r still busy %.1fs after removal",
                        self._name, listener.handler, HANDLER_JOIN_TIMEOUT)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run the informer on a daemon thread until ``stop`` is set; returns the thread."""
        self._begin()
        thread = threading.Thread(target=self._run_started, args=(stop,), daemon=True,
                                  name=f"informer-{self._name}")
        thread.start()
        return thread

    def run(self, stop: threading.Event) -> None:
        """List, watch and deliver until ``stop`` is set (blocking)."""
        self._begin()
        self._run_started(stop)

    def _begin(self) -> None:
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"informer {self._name} was already started: an informer runs once")
            self._state = "running"
            self._reflector = Reflector(self._lw, _Sink(self), name=self._name, clock=self._clock,
                                        resync_period=self._resync_check, transform=self._transform,
                                        page_size=self._page_size)
            for listener in self._listeners:
                listener.start()

    def _run_started(self, stop: threading.Event) -> None:
        reflector = self._reflector
        assert reflector is not None  # set by _begin()
        try:
            reflector.run(stop)
        finally:
            with self._lock:
                self._state = "stopped"
                listeners = list(self._listeners)
            for listener in listeners:
                listener.stop()
            for listener in listeners:
                if not listener.join(HANDLER_JOIN_TIMEOUT):
                    log.warning("informer %s: handler %r did not return within %.1fs of stop",
                                self._name, listener.handler, HANDLER_JOIN_TIMEOUT)
            with self._sync_cond:
                self._stopped.set()
                self._sync_cond.notify_all()

    def is_stopped(self) -> bool:
        """True once ``run`` has returned."""
        return self._stopped.is_set()


def _validate_resync(field: str, period: float) -> None:
    if not math.isfinite(period) or period < 0 or 0 < period < MIN_RESYNC_PERIOD:
        raise ValueError(f"{field}: must be 0 (no resync) or >= {MIN_RESYNC_PERIOD}s, got {period!r}")
