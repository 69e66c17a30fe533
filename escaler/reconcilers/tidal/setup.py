"""``setup_tidal(mgr, *, bindings, ...)``: the Tidal controller wired onto a manager (docs/guide/tidal.md).

What it registers, on the manager that runs every other escaler controller (same leader election,
same write fence):

* the controller, named ``tidal``:

  - ``for_`` Tidal, passing creates, deletes and updates that change ``metadata.generation`` (the
    spec) or the labels (``MissingRequiredLabels``); the reconciler's own status writes do not
    retrigger it — it requeues itself exactly at ``status.nextTransitionTime``;
  - ``watches`` autoscaling/v2 HPAs, mapped through their ``scaleTargetRef`` to the Tidals on that
    target (a foreign HPA is a ``TargetConflict``);
  - ``watches_source`` a ``ClaimWatch``: claim changes of every scaler kind of the shared binding
    index enqueue the Tidals on the claimed target (``escaler.reconcilers.tidal.conflicts``);
* an indexer on the Tidal informer (``TIDAL_TARGET_INDEX``) that those mappings read.

``bindings`` is the manager's one ``TargetBindings`` (``escaler.cli.manager`` makes it and passes it
to every kind's setup). ``clock`` (default: the manager's) is what the reconciler evaluates the rules
at; ``client`` (default: the manager's ``DynamicClient``, resolved at the first write) takes the
status patches; ``tidal_store`` replaces the cache the reconciler reads (tests).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escaler.api.tidal import Tidal
from escaler.clock import Clock
from escaler.informers.factory import ResourceKey
from escaler.reconcilers.kit.bindings import TargetBindings, hpa_target
from escaler.reconcilers.kit.managerclient import LazyManagerClient
from escaler.reconcilers.kit.names import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.kit.ports import ObjectStore
from escaler.reconcilers.kit.status import StatusClient
from escaler.reconcilers.tidal.conflicts import TIDAL_TARGET_INDEX, ClaimWatch, tidal_index, tidals_on
from escaler.reconcilers.tidal.reconciler import TidalDeps, TidalReconciler
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import GenerationChangedPredicate, LabelChangedPredicate, or_
from escaler.runtime.types import Request

__all__ = ["CONTROLLER_NAME", "TidalController", "setup_tidal"]

CONTROLLER_NAME = "tidal"

_log = logging.getLogger(__name__)


@dataclass
class TidalController:
    """What ``setup_tidal`` built (handles for tests and embedding)."""

    controller: Controller
    reconciler: TidalReconciler
    claims: ClaimWatch
    # the Tidal informer (indexed by TIDAL_TARGET_INDEX)
    informer: Any



class _HpaTargetChanged:
    """Pass creates and deletes, and updates that change an HPA's ``scaleTargetRef``."""

    def create(self, obj: Mapping[str, Any]) -> bool:
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return hpa_target(old) != hpa_target(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return True

    def generic(self, obj: Mapping[str, Any]) -> bool:
        return True


def setup_tidal(
    mgr: Manager,
    *,
    bindings: TargetBindings,
    clock: Clock | None = None,
    client: StatusClient | None = None,
    max_concurrent_reconciles: int | None = None,
    tidal_store: ObjectStore | None = None,
) -> TidalController:
    """Register the Tidal controller on ``mgr``; see the module docstring."""
    mapping = mgr.mapper.mapping_for(Tidal.API_VERSION, Tidal.KIND)
    ns = mgr.options.namespace
    informer = mgr.informers.informer_for(ResourceKey(mapping.group, mapping.version, mapping.resource,
                                                      namespace=ns if mapping.namespaced else ""))
    informer.add_indexers({TIDAL_TARGET_INDEX: tidal_index})
    reconciler = TidalReconciler(TidalDeps(
        tidals=tidal_store if tidal_store is not None else informer.store,
        client=client if client is not None else LazyManagerClient(mgr),
        mapping=mapping, bindings=bindings, recorder=mgr.event_recorder,
        clock=clock if clock is not None else mgr.clock))
    claims = ClaimWatch(bindings, informer.indexer)

    def tidals_of_hpa(obj: Mapping[str, Any]) -> list[Request]:
        target = hpa_target(obj)
        return [] if target is None else tidals_on(informer.indexer, [target])

    builder = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(Tidal.API_VERSION, Tidal.KIND,
              predicates=[or_(GenerationChangedPredicate(), LabelChangedPredicate())])
        .watches(HPA_API_VERSION, HPA_KIND, EnqueueRequestsFromMapFunc(tidals_of_hpa),
                 predicates=[_HpaTargetChanged()])
        .watches_source(claims)
    )
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    controller = builder.complete(reconciler)
    _log.info("Tidal controller set up")
    return TidalController(controller, reconciler, claims, informer)
