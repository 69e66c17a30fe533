"""Schedule floors in the scaler reconcilers (docs/design.md#beyond-the-seeds): reading a scaler's floor
Tidal, and waking the scalers that name a Tidal when it changes.

* ``FloorReader.floor(namespace, floor_from, now)`` → ``FloorState`` (``escaler.scaling.floor``), or
  None without ``spec.floorFrom``. The Tidal is read from the Tidal informer's cache (never a GET),
  **in the scaler's namespace only**: ``floorFrom`` carries a name, not a namespace, so a namespace
  user can never make the manager read another namespace's schedule. A Tidal that is not in the
  cache is ``TidalNotFound``, one that does not parse ``TidalInvalid``: no floor, never a failed
  sync. A Tidal's spec is parsed once per (uid, resourceVersion), and evaluated once per (uid,
  resourceVersion, minute) — its fires are whole minutes — however many scalers and syncs read it,
  the Tidal's own reconcile included (``escaler.reconcilers.kit.tidalevaluations.SHARED``: bounded).
* ``FloorWatch(mgr, scaler_informer)`` — ``.store`` the Tidal cache a ``FloorReader`` reads,
  ``.add_to(builder)`` — adds to a scaler controller the one Tidal watch
  of schedule floors (docs/floors.md): an index on the *scaler* informer (``FLOOR_INDEX``: ``namespace/tidal``
  → the scalers naming it) and **one** handler on the Tidal informer mapping a Tidal to those scalers
  (controller-runtime's ``EnqueueRequestsFromMapFunc`` over a field index; never a handler per
  scaler or per Tidal), passing creates, deletes and spec changes (``metadata.generation``: the
  floor is computed from the spec, so the Tidal controller's status writes wake nobody). The Tidal
  informer is the manager's shared one (the Tidal controller's own cache when it runs too). Rule
  boundaries need no event: the pipeline requeues the scaler at the floor's next change
  (``Decision.requeue_after``). A manager whose API server does not serve the Tidal kind gets no
  watch and an empty store: every floor is then ``TidalNotFound``. Given the manager's ``CRDGate``
  (``FloorWatch(mgr, scalers, gate)``), ``.wire_when_served(controller, name)`` has the gate (an
  optional entry: INFO, not on /readyz) add the Tidal cache and watch to the running controller once
  the Tidal CRD is installed — no restart — after which the informer's initial adds wake the
  scalers naming a Tidal. Without a gate the store stays empty.

Thread-safe: the shared caches are guarded by their lock; the rest is read-only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from escaler.api.registry import KINDS
from escaler.api.scaler import FloorFrom
from escaler.api.tidal import Tidal
from escaler.informers.factory import ResourceKey
from escaler.reconcilers.kit.ports import ObjectStore
from escaler.reconcilers.kit.tidalevaluations import SHARED, TidalEvaluations
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.crdgate import CRDGate, Needed
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import GenerationChangedPredicate
from escaler.runtime.source import Kind
from escaler.runtime.types import Request
from escaler.scaling.floor import TIDAL_INVALID, FloorState, floor_of
from escaler.scaling.floor import floor_from as floor_from_evaluation

__all__ = ["FLOOR_INDEX", "FloorReader", "FloorWatch", "LateStore", "floor_index", "scalers_naming",
           "tidal_store"]

# indexer on a scaler informer: "namespace/tidal" of spec.floorFrom → the scalers naming that Tidal
FLOOR_INDEX = "escaler.io/floor-from"

_log = logging.getLogger(__name__)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def floor_index(obj: Mapping[str, Any]) -> list[str]:
    """``FLOOR_INDEX``: the ``namespace/name`` of the Tidal a scaler object's ``spec.floorFrom`` names."""
    spec = obj.get("spec")
    floor = spec.get("floorFrom") if isinstance(spec, Mapping) else None
    name = floor.get("name") if isinstance(floor, Mapping) else None
    if not isinstance(name, str) or not name:
        return []
    return [f"{_meta(obj).get('namespace') or ''}/{name}"]


def scalers_naming(indexer: Any) -> Callable[[Mapping[str, Any]], list[Request]]:
    """The map function of the Tidal handler: a Tidal → the scalers (of ``indexer``) naming it."""

    def scalers(tidal: Mapping[str, Any]) -> list[Request]:
        meta = _meta(tidal)
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        return [Request(str(_meta(o).get("namespace") or ""), str(_meta(o).get("name") or ""))
                for o in indexer.by_index(FLOOR_INDEX, key)]

    return scalers


def tidal_store(mgr: Manager) -> Any | None:
    """The manager's shared Tidal informer (namespace scope as every controller's), or None when the
    API server does not serve the Tidal kind."""
    try:
        m = mgr.mapper.mapping_for(Tidal.API_VERSION, Tidal.KIND)
    except Exception as err:  # no Tidal CRD: floors report TidalNotFound
        _log.info("Tidal kind not served (%s): spec.floorFrom finds no Tidal", err)
        return None
    ns = mgr.options.namespace if m.namespaced else ""
    return mgr.informers.informer_for(ResourceKey(m.group, m.version, m.resource, namespace=ns))


class LateStore:
    """An ``ObjectStore`` bound later: empty until ``bind(store)``, then that store's answers."""

    def __init__(self) -> None:
        # the bound store; None until bind() (then fixed)
        self._store: ObjectStore | None = None

    def bind(self, store: ObjectStore) -> None:
        self._store = store

    def get_by_key(self, key: str) -> Mapping[str, Any] | None:
        store = self._store
        return None if store is None else store.get_by_key(key)

    def list(self) -> list[Any]:
        store = self._store
        return [] if store is None else store.list()


class FloorWatch:
    """One scaler controller's floor wiring: the Tidal cache and the Tidal watch (module docstring)."""

    def __init__(self, mgr: Manager, scaler_informer: Any, gate: CRDGate | None = None) -> None:
        # the manager; its mapper and informers serve a Tidal watch wired late
        self._mgr = mgr
        # wires the Tidal watch once the kind is served (None: never, floors stay TidalNotFound)
        self._gate = gate
        # the manager's shared Tidal informer at setup; None when the kind was not served then
        self._tidals = tidal_store(mgr)
        # the controller's own scaler informer (FLOOR_INDEX is added to it by add_to)
        self._scalers = scaler_informer
        # FloorReader's input: the Tidal cache, bound when a late watch is wired (empty until then)
        self._store = LateStore()
        if self._tidals is not None:
            self._store.bind(self._tidals.store)

    @property
    def store(self) -> ObjectStore:
        """The Tidal cache (``FloorReader``'s input); empty while the kind is not served."""
        return self._store

    def add_to(self, builder: ControllerBuilder) -> ControllerBuilder:
        """``builder`` with the floor watch; unchanged when the Tidal kind is not served."""
        if self._tidals is None:
            return builder
        self._scalers.add_indexers({FLOOR_INDEX: floor_index})
        return builder.watches(Tidal.API_VERSION, Tidal.KIND,
                               EnqueueRequestsFromMapFunc(scalers_naming(self._scalers.indexer)),
                               predicates=[GenerationChangedPredicate()])

    def wire_when_served(self, controller: Controller, name: str) -> None:
        """When the Tidal kind was not served at setup: have the gate add the Tidal cache and watch to
        ``controller`` once it is (an optional entry: INFO, not on /readyz). No-op otherwise."""
        gate = self._gate
        if self._tidals is not None or gate is None:
            return
        info = KINDS[Tidal.KIND]
        gate.add(f"{name}-floors", [Needed(info.api_version, info.kind, info.crd_name)],
                 lambda: self._wire(controller), optional=True,
                 label=f"spec.floorFrom of controller {name}")

    def _wire(self, controller: Controller) -> None:
        tidals = tidal_store(self._mgr)
        if tidals is None:  # served a moment ago: the next discovery check decides again
            raise RuntimeError("the Tidal kind is served, but its mapping could not be read")
        self._tidals = tidals
        self._scalers.add_indexers({FLOOR_INDEX: floor_index})
        self._store.bind(tidals.store)
        # the informer's initial adds wake every scaler naming a Tidal: its floor is read again
        handler = EnqueueRequestsFromMapFunc(scalers_naming(self._scalers.indexer))
        controller.watch(Kind(tidals, handler, [GenerationChangedPredicate()],
                              description=f"floors {Tidal.API_VERSION} Tidal"))


class FloorReader:
    """See the module docstring."""

    def __init__(self, tidals: ObjectStore | None, evaluations: TidalEvaluations | None = None) -> None:
        # the Tidal informer's cache; None = the kind is not served (every floor: TidalNotFound)
        self._tidals = tidals
        # parses once per (uid, resourceVersion), evaluates once per (uid, resourceVersion, minute);
        # shared with the Tidal reconciler and every other reader (the manager's SHARED)
        self._evaluations = evaluations if evaluations is not None else SHARED

    def floor(self, namespace: str, floor_from: FloorFrom | None, now: datetime) -> FloorState | None:
        """The floor of a scaler in ``namespace`` with ``floor_from`` at ``now``; None without one."""
        if floor_from is None:
            return None
        key = f"{namespace}/{floor_from.name}"
        obj = None if self._tidals is None else self._tidals.get_by_key(key)
        if obj is None:
            return floor_of(floor_from.name, None, now)
        parsed = self._evaluations.parsed(obj)
        if parsed.invalid:
            spec = "; ".join(f"{loc}: {msg}" for loc, msg in parsed.invalid[:3])
            why = f"Tidal {floor_from.name!r} (spec.floorFrom.name) does not parse: {spec}: no floor"
            return FloorState(floor_from.name, None, problem=why, reason=TIDAL_INVALID)
        return floor_from_evaluation(floor_from.name, parsed.errors,
                                     lambda: self._evaluations.evaluate(obj, parsed, now))
