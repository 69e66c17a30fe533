"""The Tidal reconciler (docs/guide/tidal.md): time rules → ``status.desiredReplicas``, one concept per
module:

* ``setup`` — ``setup_tidal(mgr, bindings=...)``: the controller, its watches, the Tidal target index;
* ``reconciler`` — ``TidalReconciler``: read, evaluate at ``clock.now()``, write status only when it
  changed, requeue exactly at ``status.nextTransitionTime``;
* ``report`` — the status (``Ready`` and its reasons) and the events of a sync;
* ``conflicts`` — the ``TargetConflict`` rule (who writes the Tidal's target, through the shared
  binding index) and the watch of claim changes.

The rule evaluation itself (cron in each schedule's zone, DST, odd offsets) is pure:
``escaler.scaling.tidal``. A Tidal never writes its target: the StateTrigger ElasticScaler that
follows it does.
"""

from escaler.reconcilers.tidal.reconciler import TidalDeps, TidalReconciler
from escaler.reconcilers.tidal.setup import CONTROLLER_NAME, TidalController, setup_tidal

__all__ = ["CONTROLLER_NAME", "TidalController", "TidalDeps", "TidalReconciler", "setup_tidal"]
