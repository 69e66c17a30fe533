"""The LLMScaler reconciler (docs/llmscaler.md; conditions and pipeline shared with ElasticScaler), one
concept per module:

* ``setup`` — ``setup_llmscaler(mgr, ...)``: the controller, its watches, the poller, the outbound
  executor and the production provider reader;
* ``reconciler`` — ``LLMScalerReconciler``: load, claim, read, recommend, decide, write, report;
* ``recommend`` — ``LLMRecommender``: the provider read's cadence, off the reconcile workers;
* ``provider`` — the Prometheus and custom-provider rules (what an answer recommends, or why not);
* ``flow`` — a Flow reading → ``escaler.scaling.flow.decide_flow`` → the recommendation, the status
  rows and the flow state kept per scaler (the engines' PromQL, ``escaler.reconcilers.kit.flowpresets``,
  and the reading and state, ``escaler.reconcilers.kit.flowsizing``, are shared with the SLO engine);
* ``claims`` — what an LLMScaler claims in the shared binding index.

What is not LLMScaler-specific comes from the scaler kit (``escaler.reconcilers.kit``): the
``Reporter`` (status written only when changed, events, conditions from
``escaler.scaling.conditions``), ``TargetReader`` and ``write_replicas`` (``kit.targetread``),
``TargetBindings``, ``WatchIndex``, the ``MetricsPoller`` and the outbound ``KeyedExecutor``
(``kit.setup.outbound_executor``); the decision pipeline is
``escaler.scaling.pipeline`` with ``Behavior.for_llmscaler``.
"""

from escaler.reconcilers.llmscaler.reconciler import LLMReconcilerDeps, LLMScalerReconciler
from escaler.reconcilers.llmscaler.setup import CONTROLLER_NAME, LLMScalerController, setup_llmscaler

__all__ = ["CONTROLLER_NAME", "LLMReconcilerDeps", "LLMScalerController", "LLMScalerReconciler",
           "setup_llmscaler"]
