"""``SLOIndex``: every SLO requirement of both kinds, one shared informer per kind, by route.

Contract:

* One ``SharedInformer`` per kind (``LLMSLORequirement``, ``JobSLORequirement``), built by the
  injected ``informer_for(kind)``; each caches its kind keyed by ``namespace/name``, so an entry
  is identified by ``(plural, namespace, name)``. Each informer has the ``SERVICE_ID_INDEX``
  (``namespace/spec.serviceId``): a route is a serviceId **within a namespace** (issue 27 item 5),
  so ``resolve(namespace, route)`` is a lookup per kind, never a scan, spans both kinds and never
  another namespace: a route with more than one entry (in one namespace) is a conflict the caller
  answers 409.
* The kinds are independent: a relist (410) of one kind replaces only that kind's cache.
* **A missing CRD.** Before a kind's informer starts, ``probe(kind)`` asks whether the kind is
  served (a list of one item): ``False`` (404) indexes the kind as empty and the index looks
  again every ``recheck_seconds`` (``CRD_RECHECK_SECONDS`` = 60 s of the injected clock); when it
  appears, its informer starts. A present kind is probed on the same period, and one whose CRD
  went away (404) has its informer stopped and is indexed as empty again. A probe that fails
  otherwise (no connection, 403, 5xx) leaves the kind as it was and is retried after
  ``PROBE_RETRY_SECONDS``; a kind never probed successfully is *unknown*.
* ``ready()`` is True once every kind is known and every present kind's informer has synced —
  so ``/readyz`` is 503 only until then; an absent kind does not hold it. ``not_ready_reason()``
  says what is awaited.
* **Read your writes.** ``record_write(kind, obj)`` keeps the object the API server answered a
  write with (what client-go's ``MutationCache`` does) until the informer's copy is at least as
  new (resourceVersions compared as integers, as etcd issues them; a non-integer one never
  overrides the informer) or ``WRITE_OVERLAY_SECONDS`` of the injected clock pass. ``resolve``
  and ``entries`` answer the newer of the two, so a listing right after a successful ``PUT``
  shows it — without holding the request until the watch delivers it. At most
  ``WRITE_OVERLAY_MAX`` writes are kept (the oldest dropped first).
* ``run(stop)`` blocks until ``stop`` is set, then stops every informer; ``start(stop)`` runs it
  on a daemon thread. Thread-safe; reads never block on the network.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cachetools import TTLCache

from escaler.clock import Clock, RealClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.informers.frozen import FrozenDict
from escaler.informers.shared import SharedInformer
from escaler.sloapi.kinds import KINDS, SLOKind

__all__ = [
    "CRD_RECHECK_SECONDS",
    "PROBE_RETRY_SECONDS",
    "SERVICE_ID_INDEX",
    "WRITE_OVERLAY_MAX",
    "WRITE_OVERLAY_SECONDS",
    "Entry",
    "KindState",
    "SLOIndex",
    "route_key",
    "service_id_index",
]

# How often a kind's CRD presence is checked again (absent → present, present → gone).
CRD_RECHECK_SECONDS = 60.0
# How soon a probe that failed for another reason than 404 is retried.
PROBE_RETRY_SECONDS = 5.0
# How long a written object overrides an informer that has not delivered it yet.
WRITE_OVERLAY_SECONDS = 30.0
# How many written objects are kept for that at most.
WRITE_OVERLAY_MAX = 4096
# The informer index from spec.serviceId to objects.
SERVICE_ID_INDEX = "serviceId"

_log = logging.getLogger(__name__)

# kind → True when it is served, False on 404; raises StatusError/ConnectionFailure otherwise
Probe = Callable[[SLOKind], bool]
InformerFor = Callable[[SLOKind], SharedInformer]


def route_key(namespace: str, route: str) -> str:
    """The ``SERVICE_ID_INDEX`` value of a route: a serviceId is unique within its namespace only."""
    return f"{namespace}/{route}"


def service_id_index(obj: FrozenDict) -> list[str]:
    spec = obj.get("spec")
    sid = spec.get("serviceId") if isinstance(spec, Mapping) else None
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return [route_key(ns if isinstance(ns, str) else "", sid)] if isinstance(sid, str) and sid else []


class KindState(StrEnum):
    UNKNOWN = "unknown"
    ABSENT = "absent"
    PRESENT = "present"


@dataclass(frozen=True)
class Entry:
    """One SLO requirement CR in the index."""

    kind: SLOKind
    namespace: str
    name: str
    # the cached object (frozen; never modified)
    obj: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind.plural, self.namespace, self.name)

    @property
    def route(self) -> str:
        spec = self.obj.get("spec")
        sid = spec.get("serviceId") if isinstance(spec, Mapping) else None
        return sid if isinstance(sid, str) else ""


class _Watch:
    """One kind's informer and its own stop event."""

    def __init__(self, informer: SharedInformer) -> None:
        # the kind's cache; started once, never restarted (a new _Watch replaces it)
        self.informer = informer
        # set to stop this informer alone (CRD gone) or with the index
        self.stop = threading.Event()


def _entry(kind: SLOKind, obj: Mapping[str, Any]) -> Entry:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return Entry(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), obj)


def _version(e: Entry) -> int | None:
    meta = e.obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    try:
        return int(rv) if isinstance(rv, str) else None
    except ValueError:
        return None


def _newer(written: Entry, cached: Entry) -> bool:
    w, c = _version(written), _version(cached)
    return w is not None and c is not None and w > c


class SLOIndex:
    """See the module docstring."""

    def __init__(self, informer_for: InformerFor, probe: Probe, *, kinds: tuple[SLOKind, ...] = KINDS,
                 clock: Clock | None = None, recheck_seconds: float = CRD_RECHECK_SECONDS,
                 retry_seconds: float = PROBE_RETRY_SECONDS) -> None:
        if not recheck_seconds > 0:
            raise ValueError(f"SLOIndex.recheck_seconds: must be > 0, got {recheck_seconds!r}")
        if not retry_seconds > 0:
            raise ValueError(f"SLOIndex.retry_seconds: must be > 0, got {retry_seconds!r}")
        if not kinds:
            raise ValueError("SLOIndex.kinds: must name at least one kind")
        # builds a kind's informer (not started); fixed
        self._informer_for = informer_for
        # tells whether a kind is served; fixed
        self._probe = probe
        # the kinds indexed, in listing order; fixed
        self.kinds = kinds
        # times the recheck and retry waits; fixed
        self._clock: Clock = clock or RealClock()
        # seconds between two probes of every kind once each has answered; > 0, fixed
        self._recheck = recheck_seconds
        # seconds before probing again when a probe failed (not a 404); > 0, fixed
        self._retry = retry_seconds
        # guards _states and _watches
        self._mu = threading.Lock()
        # kind name → what the last successful probe said (UNKNOWN before one succeeded)
        self._states: dict[str, KindState] = {k.name: KindState.UNKNOWN for k in kinds}
        # kind name → its running informer; present exactly when the state is PRESENT
        self._watches: dict[str, _Watch] = {}
        # set once run() has returned
        self.stopped = threading.Event()
        # (plural, namespace, name) → the object a write returned, until the informer has it;
        # guarded by _mu
        self._written: TTLCache[tuple[str, str, str], Entry] = TTLCache(
            maxsize=WRITE_OVERLAY_MAX, ttl=WRITE_OVERLAY_SECONDS, timer=self._clock.monotonic)

    # ---- reads ------------------------------------------------------------------------------

    def state(self, kind: SLOKind) -> KindState:
        with self._mu:
            return self._states[kind.name]

    def _informers(self) -> list[tuple[SLOKind, SharedInformer]]:
        with self._mu:
            return [(k, self._watches[k.name].informer) for k in self.kinds if k.name in self._watches]

    def ready(self) -> bool:
        return self.not_ready_reason() is None

    def not_ready_reason(self) -> str | None:
        with self._mu:
            unknown = [k.kind for k in self.kinds if self._states[k.name] is KindState.UNKNOWN]
            syncing = [k.kind for k in self.kinds
                       if k.name in self._watches and not self._watches[k.name].informer.has_synced()]
        if unknown:
            return f"waiting to learn whether {', '.join(unknown)} is served by the cluster"
        if syncing:
            return f"waiting for the cache of {', '.join(syncing)} to sync"
        return None

    def resolve(self, namespace: str, route: str) -> list[Entry]:
        """Every CR of ``namespace`` whose spec.serviceId is ``route``, across both kinds (by key)."""
        found = [_entry(kind, obj) for kind, inf in self._informers()
                 for obj in inf.indexer.by_index(SERVICE_ID_INDEX, route_key(namespace, route))]
        return sorted([e for e in self._overlay(found) if e.route == route and e.namespace == namespace],
                      key=lambda e: e.key)

    def entries(self) -> list[Entry]:
        """Every indexed CR, by route then key."""
        found = [_entry(kind, obj) for kind, inf in self._informers() for obj in inf.store.list()]
        return sorted(self._overlay(found), key=lambda e: (e.route, e.key))

    # ---- read your writes -------------------------------------------------------------------

    def record_write(self, kind: SLOKind, obj: Mapping[str, Any]) -> None:
        """Answer ``obj`` (what the API server returned for a write) until the informer has it."""
        e = _entry(kind, obj)
        if _version(e) is None or not e.name:
            return
        with self._mu:
            self._written[e.key] = e

    def _overlay(self, found: list[Entry]) -> list[Entry]:
        """``found`` with each entry replaced by a newer written copy; caught-up copies dropped."""
        with self._mu:
            if not self._written:
                return found
            out = []
            for e in found:
                w = self._written.get(e.key)
                if w is not None and _newer(w, e):
                    out.append(w)
                    continue
                if w is not None:
                    del self._written[e.key]
                out.append(e)
            return out

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(stop,), name="slo-index", daemon=True)
        t.start()
        return t

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                all_known = self.check_once(stop)
                if self._clock.sleep(self._recheck if all_known else self._retry, stop):
                    break
        finally:
            with self._mu:
                watches = list(self._watches.values())
                self._watches.clear()
            for w in watches:
                w.stop.set()
            self.stopped.set()

    def check_once(self, stop: threading.Event) -> bool:
        """Probe every kind once and start/stop informers to match; True when every probe answered."""
        all_known = True
        for kind in self.kinds:
            try:
                present = self._probe(kind)
            except (StatusError, ConnectionFailure) as exc:
                all_known = False
                _log.warning("cannot tell whether %s is served (retrying in %.0f s): %s",
                             kind.kind, self._retry, exc)
                continue
            self._apply(kind, present, stop)
        return all_known

    def _apply(self, kind: SLOKind, present: bool, stop: threading.Event) -> None:
        with self._mu:
            previous = self._states[kind.name]
            watch = self._watches.get(kind.name)
            if present and watch is None:
                watch = _Watch(self._informer_for(kind))
                self._watches[kind.name] = watch
                start: _Watch | None = watch
                gone: _Watch | None = None
            elif not present and watch is not None:
                gone, start = self._watches.pop(kind.name), None
            else:
                gone = start = None
            self._states[kind.name] = KindState.PRESENT if present else KindState.ABSENT
        if gone is not None:
            _log.warning("%s is no longer served (CRD removed?); indexing it as empty", kind.kind)
            gone.stop.set()
        if start is not None:
            _log.info("%s is served; watching it", kind.kind)
            if stop.is_set():  # the index is stopping: run()'s cleanup may have passed already
                start.stop.set()
            start.informer.start(start.stop)
        elif not present and previous is not KindState.ABSENT:
            _log.info("%s is not served by this cluster (no CRD); indexing it as empty and checking "
                      "again every %.0f s", kind.kind, self._recheck)

