"""The LLMScaler reconciler (SPEC §8, with §3 and §4 shared with ElasticScaler), one concept per module:

* ``setup`` — ``setup_llmscaler(mgr, ...)``: the controller, its watches, the poller, the outbound
  executor and the production provider reader;
* ``reconciler`` — ``LLMScalerReconciler``: load, claim, read, recommend, decide, write, report;
* ``recommend`` — ``LLMRecommender``: the provider read's cadence, off the reconcile workers;
* ``provider`` — the Prometheus and custom-provider rules (what an answer recommends, or why not);
* ``flow`` — a Flow reading → ``escaler.scaling.flow.decide_flow`` → the recommendation, the status
  rows and the flow state kept per scaler (the engines' PromQL, ``escaler.reconcilers.flowpresets``,
  and the reading and state, ``escaler.reconcilers.flowsizing``, are shared with the SLO engine);
* ``claims`` — what an LLMScaler claims in the shared binding index.

What is not LLMScaler-specific is the ElasticScaler's, reused: the ``Reporter`` (status written
only when changed, events, conditions from ``escaler.scaling.conditions``), ``TargetReader`` and
``write_replicas`` (``escaler.reconcilers.elasticscaler.targetread``), ``TargetBindings``,
``WatchIndex``, the ``MetricsPoller`` and the outbound ``KeyedExecutor``; the decision pipeline is
``escaler.scaling.pipeline`` with ``Behavior.for_llmscaler``.
"""

from escaler.reconcilers.llmscaler.reconciler import LLMReconcilerDeps, LLMScalerReconciler
from escaler.reconcilers.llmscaler.setup import CONTROLLER_NAME, LLMScalerController, setup_llmscaler

__all__ = ["CONTROLLER_NAME", "LLMReconcilerDeps", "LLMScalerController", "LLMScalerReconciler",
           "setup_llmscaler"]
