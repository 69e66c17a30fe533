"""Label-selected dynamic informers: informers that live exactly as long as someone needs them.

An autoscaler discovers at runtime which workloads (and which pods, by label selector) it must
watch; those sets change as custom resources come and go. ``DynamicInformers`` reference-counts
informers by ``ResourceKey`` (which includes the label selector):

* ``register(key, handler)``: the first registration for a key creates and starts an informer
  with its own stop event; later ones share it, and their handler first receives synthetic adds
  for everything already cached (``SharedInformer`` late-handler semantics).
* ``Registration.release()`` (idempotent; also the context-manager exit) removes the handler;
  when it was the last one for the key, the informer is stopped (its watch is closed) and
  forgotten, so a later ``register`` for the key starts a fresh informer with a fresh list.
* ``stop_all()`` stops every informer; outstanding registrations become released.
* **Transform.** Every informer of a kind applies one transform, the same whoever registers a key
  first, so two consumers of a key never see differently shaped objects: by default its kind's
  (``escaler.informers.transform.transform_for``: what every consumer of that kind reads, the
  table there), else the ``transform`` given for every kind. ``add_transform(t)`` chains ``t``
  after it; it is refused once any informer was started (a cache must not hold objects of two
  shapes).
* **List pages** of at most ``page_size`` objects (default the reflector's 500), and of about the
  reflector's ``DEFAULT_PAGE_BYTES`` once the objects' size is known; with ``escaler.kube``'s
  lister each object is transformed as it is decoded, so a list of large objects the transform
  strips (clones of a big template) never holds a page of them untransformed.
* Thread-safe. ``release()`` may be called from inside the handler itself: the handler is
  detached first, so stopping never waits on the calling thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from escaler.clock import Clock, RealClock
from escaler.informers.factory import ResourceKey
from escaler.informers.handlers import ResourceEventHandler
from escaler.informers.interfaces import ListerWatcher
from escaler.informers.reflector import DEFAULT_PAGE_SIZE
from escaler.informers.shared import HandlerRegistration, SharedInformer
from escaler.informers.transform import Transform, chain, identity, transform_for

__all__ = ["STOP_JOIN_TIMEOUT", "DynamicInformers", "Registration"]

log = logging.getLogger("escaler.informers")

# how long release()/stop_all() wait for an informer thread to finish
STOP_JOIN_TIMEOUT = 10.0


@dataclass(eq=False)
class _Entry:
    # the informer serving this key; running from creation until the entry is dropped
    informer: SharedInformer
    # set exactly when the entry is dropped (last release or stop_all)
    stop: threading.Event
    # the informer's run thread
    thread: threading.Thread
    # live registrations for this key; the entry exists iff this is non-empty (or being dropped)
    registrations: set[Registration] = field(default_factory=set)


class Registration:
    """A lease on a shared informer for one handler; ``release()`` gives it back."""

    def __init__(self, owner: DynamicInformers, key: ResourceKey, informer: SharedInformer,
                 handle: HandlerRegistration) -> None:
        # the registry, the key and the informer this lease holds; fixed
        self._owner = owner
        self._key = key
        self._informer = informer
        # the handler's registration on the informer
        self._handle = handle
        # True once released (guarded by the owner's lock)
        self._released = False

    @property
    def key(self) -> ResourceKey:
        return self._key

    @property
    def informer(self) -> SharedInformer:
        """The shared informer (for its cache); do not keep it past ``release()``."""
        return self._informer

    @property
    def released(self) -> bool:
        return self._released

    def has_synced(self) -> bool:
        """True once this handler was delivered the informer's initial contents."""
        return self._handle.has_synced()

    def release(self) -> None:
        """Remove the handler; stop the informer if this was its last registration (idempotent)."""
        self._owner._release(self)

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class DynamicInformers:
    """Reference-counted informers by ``ResourceKey``; see the module docstring."""

    def __init__(self, lw_factory: Callable[[ResourceKey], ListerWatcher], *,
                 clock: Clock | None = None, transform: Transform | None = None,
                 page_size: int = DEFAULT_PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError(f"DynamicInformers.page_size: must be >= 1, got {page_size!r}")
        # builds the ListerWatcher of a new informer; fixed
        self._lw_factory = lw_factory
        # every informer's transform (None: its kind's, transform_for); fixed
        self._base = transform
        # chained after the base one (add_transform); changes only before the first informer starts
        # (guarded by _lock)
        self._added: Transform = identity
        # objects per list page of every informer; fixed
        self._page_size = page_size
        # True once an informer was started: add_transform then refuses (guarded by _lock)
        self._started_any = False
        # passed to every informer
        self._clock: Clock = clock or RealClock()
        # guards _entries and every Registration._released
        self._lock = threading.Lock()
        # the running informers, one per key with at least one live registration
        self._entries: dict[ResourceKey, _Entry] = {}

    def register(self, key: ResourceKey, handler: ResourceEventHandler) -> Registration:
        """Attach ``handler`` to the informer for ``key``, starting one if none runs."""
        with self._lock:
            running = key in self._entries
        # building a ListerWatcher may do discovery (I/O): not under the lock, and only when needed
        lw = None if running else self._lw_factory(key)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                informer = SharedInformer(lw if lw is not None else self._lw_factory(key), name=str(key),
                                          clock=self._clock, transform=self._transform_of(key),
                                          page_size=self._page_size)
                self._started_any = True
                handle = informer.add_event_handler(handler)
                stop = threading.Event()
                entry = _Entry(informer, stop, informer.start(stop))
                self._entries[key] = entry
                log.info("dynamic informers: started %s", key)
            else:
                handle = entry.informer.add_event_handler(handler)
            registration = Registration(self, key, entry.informer, handle)
            entry.registrations.add(registration)
            return registration

    def add_transform(self, transform: Transform) -> None:
        """Apply ``transform`` too (after the current one) in every informer; before any starts."""
        with self._lock:
            if self._started_any:
                raise RuntimeError("DynamicInformers.add_transform: informers already started; add "
                                   "transforms while setting up the controllers")
            self._added = transform if self._added is identity else chain(self._added, transform)

    def _transform_of(self, key: ResourceKey) -> Transform:
        base = self._base if self._base is not None else transform_for(key.group, key.resource)
        return base if self._added is identity else chain(base, self._added)

    def active_keys(self) -> list[ResourceKey]:
        with self._lock:
            return list(self._entries)

    def refcount(self, key: ResourceKey) -> int:
        with self._lock:
            entry = self._entries.get(key)
            return len(entry.registrations) if entry is not None else 0

    def informer(self, key: ResourceKey) -> SharedInformer | None:
        """The running informer for ``key``, if any (for reading its cache)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.informer if entry is not None else None

    def stop_all(self) -> None:
        """Stop every informer and release every registration."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            for entry in entries:
                for registration in entry.registrations:
                    registration._released = True
                entry.registrations.clear()
                entry.stop.set()
        for entry in entries:
            self._join(entry)

    def _release(self, registration: Registration) -> None:
        with self._lock:
            if registration._released:
                return
            registration._released = True
            entry = self._entries.get(registration.key)
            last = False
            if entry is not None and registration in entry.registrations:
                entry.registrations.discard(registration)
                if not entry.registrations:
                    del self._entries[registration.key]
                    last = True
        # outside the lock: removal may wait (bounded) for the handler's thread
        registration._handle.remove()
        if last and entry is not None:
            entry.stop.set()
            log.info("dynamic informers: stopped %s (last registration released)", registration.key)
            self._join(entry)

    @staticmethod
    def _join(entry: _Entry) -> None:
        if entry.thread is threading.current_thread():
            return
        entry.thread.join(STOP_JOIN_TIMEOUT)
        if entry.thread.is_alive():
            log.warning("dynamic informers: %s did not stop within %.1fs", entry.informer.name,
                        STOP_JOIN_TIMEOUT)
