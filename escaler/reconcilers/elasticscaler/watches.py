"""Per-scaler watches on dynamic informers: StateTrigger sources and write targets.

A scaler learns at reconcile time which objects it depends on: the state source named by a
StateTrigger's ``spec.targetRef`` (any kind), and the workload it writes (Deployment,
StatefulSet, LeaderWorkerSet, any CR with ``/scale``). ``ScalerWatches`` keeps, per scaler and
per *role* ("source", "target"), exactly one ``Registration`` on ``mgr.dynamic_informers``:

* ``ensure(scaler, role, key, match)`` registers a handler on the informer for ``key`` (started
  by the first registration, shared by later ones — ``DynamicInformers`` reference-counts them)
  that enqueues ``scaler`` whenever an object ``match``es, and releases the scaler's previous
  registration for that role when the key changed (a scaler that switched source or target
  stops holding the old informer at once). Idempotent when nothing changed.
* ``release(scaler)`` (the scaler is gone) releases all of its registrations; the last one for a
  key stops that informer.
* ``cached(scaler, role, namespace, name)`` reads the object from that informer's cache; ``None``
  while the informer has not synced (``synced`` tells the two apart).

Source informers are label-selected (``elasticscaler.io/name``, one per source GroupVersionResource
in the manager's namespace scope, SPEC §5.3); target informers watch one resource in the scaler's
namespace. Handlers only enqueue; no default resync.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import FrozenDict
from escaler.informers.handlers import FuncHandler
from escaler.informers.store import DeletedFinalStateUnknown
from escaler.runtime.types import Request

__all__ = ["ROLE_SOURCE", "ROLE_TARGET", "Registrar", "ScalerWatches"]

ROLE_SOURCE = "source"
ROLE_TARGET = "target"

_log = logging.getLogger(__name__)

Match = Callable[[Mapping[str, Any]], bool]


class _Reg(Protocol):
    @property
    def key(self) -> ResourceKey: ...

    @property
    def informer(self) -> Any: ...

    def release(self) -> None: ...


class MapperLike(Protocol):
    def mapping_for(self, api_version: str, kind: str) -> Any: ...


class RefLike(Protocol):
    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...


class Registrar(Protocol):
    """What ``ScalerWatches`` needs from ``DynamicInformers``."""

    def register(self, key: ResourceKey, handler: Any) -> Any: ...


@dataclass
class _Held:
    # the registration on the dynamic informer for key
    registration: _Reg
    # the informer key; equal to registration.key
    key: ResourceKey


class ScalerWatches:
    """Per-scaler, per-role registrations on dynamic informers; see the module docstring."""

    def __init__(self, informers: Registrar, enqueue: Callable[[Request], None]) -> None:
        # the manager's DynamicInformers (or a fake); fixed
        self._informers = informers
        # adds a request to the controller's queue; fixed
        self._enqueue = enqueue
        # guards _held
        self._mu = threading.Lock()
        # (scaler, role) → its one registration; absent = none held
        self._held: dict[tuple[Request, str], _Held] = {}

    def ensure(self, scaler: Request, role: str, key: ResourceKey, match: Match) -> None:
        """Hold a registration on ``key`` for (scaler, role), dropping a previous one on another key."""
        with self._mu:
            held = self._held.get((scaler, role))
            if held is not None and held.key == key:
                return
        previous = held
        registration = self._informers.register(key, self._handler(scaler, match))
        with self._mu:
            self._held[(scaler, role)] = _Held(registration, key)
        if previous is not None:
            previous.registration.release()
            _log.info("released %s watch %s for %s", role, previous.key, scaler)
        _log.info("watching %s %s for %s", role, key, scaler)

    def drop(self, scaler: Request, role: str) -> None:
        """Release the registration of (scaler, role), if any."""
        with self._mu:
            held = self._held.pop((scaler, role), None)
        if held is not None:
            held.registration.release()
            _log.info("released %s watch %s for %s", role, held.key, scaler)

    def release(self, scaler: Request) -> None:
        """Release every registration of ``scaler``."""
        with self._mu:
            roles = [role for (req, role) in self._held if req == scaler]
        for role in roles:
            self.drop(scaler, role)

    def key(self, scaler: Request, role: str) -> ResourceKey | None:
        with self._mu:
            held = self._held.get((scaler, role))
        return held.key if held is not None else None

    def synced(self, scaler: Request, role: str, timeout: float = 0.0) -> bool:
        """True once the informer behind (scaler, role) holds its initial list (waits ``timeout``)."""
        with self._mu:
            held = self._held.get((scaler, role))
        if held is None:
            return False
        informer = held.registration.informer
        if informer.has_synced():
            return True
        return bool(timeout > 0 and informer.wait_for_sync(timeout))

    def cached(self, scaler: Request, role: str, namespace: str, name: str) -> FrozenDict | None:
        """The object from the (scaler, role) informer's cache; None if absent or not watched."""
        with self._mu:
            held = self._held.get((scaler, role))
        if held is None:
            return None
        found = held.registration.informer.store.get_by_key(f"{namespace}/{name}" if namespace else name)
        return found if isinstance(found, FrozenDict) else None

    def watch_object(self, scaler: Request, role: str, namespace: str, ref: RefLike,
                     mapper: MapperLike) -> None:
        """Watch ``ref``'s kind in ``namespace`` for (scaler, role), enqueueing on events of that object.

        Raises what ``mapper.mapping_for`` raises (``ValueError``: bad apiVersion; ``StatusError``
        404: the kind is not served).
        """
        m = mapper.mapping_for(ref.api_version, ref.kind)
        key = ResourceKey(m.group, m.version, m.resource, namespace=namespace if m.namespaced else "")
        name = ref.name
        self.ensure(scaler, role, key, lambda o: (o.get("metadata") or {}).get("name") == name)

    def lookup(self, api_version: str, kind: str, namespace: str, name: str,
               mapper: MapperLike) -> FrozenDict | None:
        """An object from a *synced* informer this registry holds for its kind and namespace, else None.

        Only unselected informers count (a label-selected one may simply not show the object).
        """
        try:
            m = mapper.mapping_for(api_version, kind)
        except Exception:
            return None
        key = ResourceKey(m.group, m.version, m.resource, namespace=namespace if m.namespaced else "")
        with self._mu:
            held = next((h for h in self._held.values() if h.key == key), None)
        if held is None:
            return None
        informer = held.registration.informer
        if not informer.has_synced():
            return None
        found = informer.store.get_by_key(f"{namespace}/{name}" if m.namespaced and namespace else name)
        return found if isinstance(found, FrozenDict) else None

    def held(self) -> dict[tuple[Request, str], ResourceKey]:
        """A snapshot: (scaler, role) → key (for tests and debugging)."""
        with self._mu:
            return {k: v.key for k, v in self._held.items()}

    def _handler(self, scaler: Request, match: Match) -> FuncHandler:
        def hit(*objs: Mapping[str, Any] | DeletedFinalStateUnknown) -> None:
            try:
                matched = any(match(o.obj if isinstance(o, DeletedFinalStateUnknown) else o) for o in objs)
            except Exception:
                _log.exception("watch match for %s failed; event dropped", scaler)
                return
            if matched:
                self._enqueue(scaler)

        return FuncHandler(add=lambda obj, _initial: hit(obj), update=lambda old, new: hit(old, new),
                           delete=lambda obj: hit(obj))
