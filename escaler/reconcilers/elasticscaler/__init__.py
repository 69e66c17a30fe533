"""The ElasticScaler reconciler (docs/guide/elasticscaler.md), one concept per module:

* ``setup`` — ``setup_elasticscaler(mgr, ...)``: the controller, its watches, the poller, the
  signal route;
* ``reconciler`` — ``ElasticScalerReconciler``: small steps (load, resolve, claim, read, recommend,
  decide, write), each returning a value or a ``Hold``;
* ``context`` — what the reconciler remembers per scaler (``ScalerMemory``) and a StateTrigger's
  ``Resolved`` chain;
* ``metricsync`` — MetricsTrigger collections and recommendations; ``parsecache`` — the parsed spec
  and annotations per (uid, generation);
* ``hpa`` / ``hpasync`` / ``grants`` — the companion HPA of ``scalingAlgorithm: HPA`` (desired object,
  drift, status mirror, the metric grants it needs);
* ``state`` / ``statesync`` — StateTrigger: the targetRef chain and the source's binding labels;
* ``signal`` / ``signalsync`` — SignalTrigger: the in-memory signal store, the signal rule, the push
  API, endpoint pulls;
* ``deletioncost`` — ``scaleDown.podDeletionCost``.

What every scaler kind shares — the status writer and its drift rule, the ``Reporter``, the claims
and the binding index, the poller, ``Sync``/``Hold``, the target read and write steps, the watch
index, the ports — is the kit, ``escaler.reconcilers.kit``; the conditions engine is
``escaler.scaling.conditions``.
"""

from escaler.reconcilers.elasticscaler.reconciler import ElasticScalerReconciler, ReconcilerDeps
from escaler.reconcilers.elasticscaler.setup import (
    CONTROLLER_NAME,
    ElasticScalerController,
    setup_elasticscaler,
)

__all__ = [
    "CONTROLLER_NAME",
    "ElasticScalerController",
    "ElasticScalerReconciler",
    "ReconcilerDeps",
    "setup_elasticscaler",
]
