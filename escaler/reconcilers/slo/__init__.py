"""The SLO decision engine (docs/slo.md): LLMSLORequirement and JobSLORequirement → replica decisions,
one concept per module:

* ``setup`` — ``setup_slo(mgr, ...)``: one controller per kind, the shared ``DecisionBook`` and the
  decisions route ``GET /decisions/v1/namespaces/{namespace}/{serviceId}``;
* ``reconciler`` — ``SLOReconciler``: validate, read the target's replicas and the signals, size,
  write status only when it changed beyond drift, requeue at the next poll;
* ``kinds`` — the two kinds: parse, validate (field-named errors), the queries, the sizing rule bound
  to the spec;
* ``flow`` — an LLM requirement's ``spec.flow``: flow sizing's plan, decision and the state kept per
  requirement;
* ``readings`` — the PromQL reads, off the reconcile workers, once per poll interval;
* ``target`` — the target's current replicas from the caches (0 GETs);
* ``report`` — the status (``decision``, ``Ready``) and the drift rule;
* ``decisions`` — decisions by (namespace, serviceId), the lookup and the authenticated route
  (404 / 409 / 503 / 200; the unscoped route of 0.1 answers 410).

The sizing itself is pure: ``escaler.scaling.slo``, and ``escaler.scaling.flow`` through the flow
modules shared with the LLMScaler (``escaler.reconcilers.kit.flowpresets``,
``escaler.reconcilers.kit.flowsizing``). The engine never writes a workload: an LLMScaler with
``metricProvider: Custom`` and ``customProvider.serviceId`` (read in-process) does.
"""

from escaler.reconcilers.slo.decisions import DECISIONS_ROUTE, DecisionBook, Decisions, DecisionsAPI
from escaler.reconcilers.slo.reconciler import SLODeps, SLOReconciler
from escaler.reconcilers.slo.setup import SLOController, SLOEngine, setup_slo

__all__ = ["DECISIONS_ROUTE", "DecisionBook", "Decisions", "DecisionsAPI", "SLOController", "SLODeps",
           "SLOEngine", "SLOReconciler", "setup_slo"]
