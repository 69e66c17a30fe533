"""The ElasticScaler reconciler (SPEC §5), one concept per module:

* ``setup`` — ``setup_elasticscaler(mgr, ...)``: the controller, its watches, the poller, the
  signal route;
* ``reconciler`` — ``ElasticScalerReconciler``: read, validate, resolve, decide, write, report;
* ``hpa`` — the companion HPA of ``scalingAlgorithm: HPA`` (desired object, drift, status mirror);
* ``state`` — StateTrigger: the targetRef chain and the source's binding labels;
* ``signal`` — SignalTrigger: the in-memory signal store, the signal rule, the push API;
* ``poller`` — the MetricsTrigger poller, spread over the interval;
* ``watches`` — per-scaler registrations on dynamic informers (sources, targets);
* ``status`` — status writes only when changed; ``condset`` — conditions outside the pipeline.

Target conflicts are resolved by ``escaler.reconcilers.bindings`` (shared with LLMScaler).
"""

from escaler.reconcilers.elasticscaler.reconciler import ElasticScalerReconciler, target_of
from escaler.reconcilers.elasticscaler.setup import (
    CONTROLLER_NAME,
    ElasticScalerController,
    setup_elasticscaler,
)

__all__ = [
    "CONTROLLER_NAME",
    "ElasticScalerController",
    "ElasticScalerReconciler",
    "setup_elasticscaler",
    "target_of",
]
