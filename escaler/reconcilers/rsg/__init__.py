"""The ResourceScalingGroup reconciler (docs/guide/resourcescalinggroup.md): ``setup_rsg`` wires it onto a
manager.

Modules: ``setup`` (wiring), ``reconciler`` (the sync), ``claims`` (binding-index claims),
``members`` (member resolution and watches), ``inplace`` (InplaceScaling), ``replication``
(GroupReplication), ``clones`` (clone construction and labels), ``limits`` (GroupReplication's
bounds per sync, per namespace, per clone), ``ledger`` (create expectations and per-namespace
reservations), ``clonecache`` (clones cached without templates), ``ranking`` (the scale-down
Prometheus query), ``backoff`` (failed-write retries), ``report`` (status and events),
``context`` (the sync and its outcome). The arithmetic is ``escaler.scaling.rsg`` (pure).
"""

from escaler.reconcilers.rsg.reconciler import RSGDeps, RSGReconciler
from escaler.reconcilers.rsg.setup import CONTROLLER_NAME, RSGController, setup_rsg

__all__ = ["CONTROLLER_NAME", "RSGController", "RSGDeps", "RSGReconciler", "setup_rsg"]
