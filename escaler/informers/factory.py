"""InformerFactory: one shared informer per resource key (client-go's SharedInformerFactory).

Contract:

* ``informer_for(key)`` returns the same ``SharedInformer`` for equal keys, creating it (with
  ``lw_factory(key)``, and the kind's transform: ``escaler.informers.transform.transform_for``) on
  first use. Keys differ by group/version/resource, namespace and
  selectors: two controllers watching the same thing share one watch and one cache.
* ``start(stop)`` starts every informer not started yet; informers requested afterwards are
  started by the next ``start`` call. ``wait_for_cache_sync(timeout)`` waits (one deadline on
  the injected clock for all of them) until every started informer has synced.
* ``shutdown()`` is client-go's: set the stop event(s) given to ``start`` first, then call it to
  join the informer threads (``SHUTDOWN_JOIN_TIMEOUT`` each). It refuses, naming the fix, if a
  stop event is still clear, instead of hanging. After it, ``start`` refuses.
* Thread-safe.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from escaler.clock import Clock, RealClock
from escaler.informers.interfaces import ListerWatcher
from escaler.informers.shared import SharedInformer
from escaler.informers.transform import transform_for

__all__ = ["SHUTDOWN_JOIN_TIMEOUT", "InformerFactory", "ResourceKey"]

log = logging.getLogger("escaler.informers")

# how long shutdown() waits for each informer thread
SHUTDOWN_JOIN_TIMEOUT = 10.0


@dataclass(frozen=True)
class ResourceKey:
    """What an informer lists and watches; equal keys share one informer."""

    # API group ("" for the core group)
    group: str
    # API version, e.g. "v1"
    version: str
    # plural resource name, e.g. "deployments"
    resource: str
    # "" for all namespaces
    namespace: str = ""
    # label selector in the API's syntax ("" = everything)
    label_selector: str = ""
    # field selector in the API's syntax ("" = everything)
    field_selector: str = ""

    def __str__(self) -> str:
        gv = f"{self.group}/{self.version}" if self.group else self.version
        text = f"{gv}/{self.resource}"
        if self.namespace:
            text += f" ns={self.namespace}"
        if self.label_selector:
            text += f" labels={self.label_selector}"
        if self.field_selector:
            text += f" fields={self.field_selector}"
        return text


class InformerFactory:
    """Creates, shares, starts and syncs informers by ``ResourceKey``; see the module docstring."""

    def __init__(self, lw_factory: Callable[[ResourceKey], ListerWatcher], *, clock: Clock | None = None,
                 default_resync: float = 0.0) -> None:
        if not math.isfinite(default_resync) or default_resync < 0:
            raise ValueError(f"InformerFactory.default_resync: must be a finite number >= 0, "
                             f"got {default_resync!r}")
        # builds the ListerWatcher of a new informer; fixed
        self._lw_factory = lw_factory
        # passed to every informer
        self._clock: Clock = clock or RealClock()
        # every informer's resync_period; validated again by SharedInformer
        self._default_resync = default_resync
        # guards every field below
        self._lock = threading.Lock()
        # one informer per key, never removed
        self._informers: dict[ResourceKey, SharedInformer] = {}
        # thread and stop event of each started informer; keys are a subset of _informers
        self._started: dict[ResourceKey, tuple[threading.Thread, threading.Event]] = {}
        # True after shutdown(); start() then refuses
        self._shut_down = False

    def informer_for(self, key: ResourceKey) -> SharedInformer:
        """The informer for ``key``, created on first request (not started until ``start``)."""
        with self._lock:
            informer = self._informers.get(key)
        if informer is not None:
            return informer
        # building a ListerWatcher may do discovery (I/O): not under the lock
        lw = self._lw_factory(key)
        with self._lock:
            informer = self._informers.get(key)  # another thread may have won the race
            if informer is None:
                informer = SharedInformer(lw, name=str(key), clock=self._clock,
                                          resync_period=self._default_resync,
                                          transform=transform_for(key.group, key.resource))
                self._informers[key] = informer
            return informer

    def start(self, stop: threading.Event) -> None:
        """Start every informer not yet started; they run until ``stop`` is set."""
        with self._lock:
            if self._shut_down:
                raise RuntimeError("InformerFactory.start: the factory was shut down")
            for key, informer in self._informers.items():
                if key not in self._started:
                    self._started[key] = (informer.start(stop), stop)

    def wait_for_cache_sync(self, timeout: float) -> bool:
        """True if every started informer synced within ``timeout`` clock seconds (one deadline)."""
        with self._lock:
            informers = [self._informers[key] for key in self._started]
        deadline = self._clock.monotonic() + timeout
        for informer in informers:
            if not informer.wait_for_sync(max(0.0, deadline - self._clock.monotonic())):
                log.warning("informer factory: %s did not sync within %.1fs", informer.name, timeout)
                return False
        return True

    def shutdown(self) -> None:
        """Join the informers' threads; the stop event(s) given to ``start`` must be set first."""
        with self._lock:
            running = list(self._started.values())
            if any(not stop.is_set() for _, stop in running):
                raise RuntimeError("InformerFactory.shutdown: set the stop event passed to start() "
                                   "first; shutdown() only waits for the informers to finish")
            self._shut_down = True
        for thread, _ in running:
            thread.join(SHUTDOWN_JOIN_TIMEOUT)
            if thread.is_alive():
                log.warning("informer factory: %s did not stop within %.1fs",
                            thread.name, SHUTDOWN_JOIN_TIMEOUT)

    def informers(self) -> dict[ResourceKey, SharedInformer]:
        """A snapshot of the informers created so far."""
        with self._lock:
            return dict(self._informers)
