"""The ElasticScaler reconciler (SPEC §5), one concept per module:

* ``setup`` — ``setup_elasticscaler(mgr, ...)``: the controller, its watches, the poller, the
  signal route;
* ``reconciler`` — ``ElasticScalerReconciler``: small steps (load, resolve, claim, read, recommend,
  decide, write), each returning a value or a ``Hold``; ``report`` — the one place a sync becomes
  status and events; ``claims`` — what a scaler holds in the binding index;
* ``hpa`` — the companion HPA of ``scalingAlgorithm: HPA`` (desired object, drift, status mirror);
* ``state`` — StateTrigger: the targetRef chain and the source's binding labels;
* ``signal`` — SignalTrigger: the in-memory signal store, the signal rule, the push API;
* ``poller`` — the MetricsTrigger poller, spread over the interval;
* ``status`` — status writes only when changed;
* ``targetread`` — the read and write steps on the target (``TargetReader``, ``write_replicas``),
  shared with LLMScaler, as ``report.Reporter`` (``ReportedKind``) is;
* ``context`` — what one sync carries (``Sync``, ``Hold``, ``Claim``) and the per-scaler memory.

The objects scalers read (targets, sources, pods) are watched by ``escaler.reconcilers.watchindex``;
the ports are ``escaler.reconcilers.ports``; the conditions engine is ``escaler.scaling.conditions``.

Target conflicts are resolved by ``escaler.reconcilers.bindings`` (shared with LLMScaler).
"""

from escaler.reconcilers.elasticscaler.claims import Claims
from escaler.reconcilers.elasticscaler.reconciler import ElasticScalerReconciler, ReconcilerDeps
from escaler.reconcilers.elasticscaler.setup import (
    CONTROLLER_NAME,
    ElasticScalerController,
    setup_elasticscaler,
)

__all__ = [
    "CONTROLLER_NAME",
    "Claims",
    "ElasticScalerController",
    "ElasticScalerReconciler",
    "ReconcilerDeps",
    "setup_elasticscaler",
]
