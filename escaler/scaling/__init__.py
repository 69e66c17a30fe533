"""escaler.scaling: the pure decision layer (see docs/design.md#design-rules, rule 1) — no I/O, no clock
reads, no kube.

Public API so far:

* the algorithm contract and registry (docs/guide/elasticscaler.md#the-triggers): ``Algorithm``,
  ``AlgorithmContext``, ``MetricValue``, ``Recommendation``, ``NoDecision``, ``register_algorithm``,
  ``get_algorithm``, ``registered_algorithms``, ``is_known_algorithm``, ``unregister_algorithm``, ``HPA``,
  ``DEFAULT_ALGORITHM``; the built-in ``apa`` (``escaler.scaling.apa``);
* ``escaler.scaling.annotations`` — the pause and policy annotation keys, defaults and parser;
* ``escaler.scaling.schedule`` — Tidal's ``CRON_TZ=<zone> <cron>`` syntax;
* ``escaler.scaling.endpoints`` — endpoint URL syntax and ``--allowed-endpoint-hosts`` matching;
* sample windows (docs/reference/annotations.md, ``escaler.scaling.window``): ``SampleWindow``,
  ``MetricWindows``, ``WindowPolicy``;
* the decision pipeline (docs/concepts.md#the-decision-pipeline, ``escaler.scaling.pipeline``):
  ``decide(PipelineInput) -> Decision`` and its steps ``stabilize`` (``stabilizer``), ``limit_step``,
  ``clamp`` (``limits``), ``guards``, ``defer`` (``guards``); inputs ``RecommendResult``, ``Behavior``,
  ``PipelineState``, ``TargetSnapshot``; ``explain_lines`` for ``escaler explain``;
* the condition model (docs/concepts.md#conditions-and-health, ``escaler.scaling.conditions``):
  ``conditions_for(SyncOutcome, ...) -> (conditions, events)``, ``ConditionValue``, ``EventValue``,
  ``TargetError``, ``Validation``, ``health``.

Reconciler sketch (time is an argument; nothing here reads a clock or the API)::

    decision = decide(PipelineInput(now=clock.now().timestamp(), current_replicas=scale.spec_replicas,
                                    recommend=RecommendResult.from_metrics(n, evaluated=k, total=m),
                                    behavior=Behavior.from_annotations(ann, min_replicas=1, max_replicas=10),
                                    target=TargetSnapshot(...), state=kept_state))
    if decision.write: ...write decision.desired through the ResourceHandler...
    conditions, events = conditions_for(SyncOutcome(decision=decision), generation, now_iso, previous)
    return Result(requeue_after=decision.requeue_after)

Registering an algorithm::

    from escaler.scaling import AlgorithmContext, register_algorithm

    def at_least_two(ctx: AlgorithmContext) -> int:
        return max(2, ctx.current_replicas)

    register_algorithm("at-least-two", at_least_two)
"""

from escaler.scaling.algorithm import (
    Algorithm,
    AlgorithmContext,
    MetricValue,
    NoDecision,
    Recommendation,
)
from escaler.scaling.apa import apa
from escaler.scaling.conditions import (
    ConditionValue,
    EventValue,
    SyncOutcome,
    TargetError,
    Validation,
    conditions_for,
    health,
)
from escaler.scaling.guards import DeferralOutcome, GuardHold, TargetSnapshot, defer, guards
from escaler.scaling.limits import clamp, limit_step
from escaler.scaling.pipeline import (
    Behavior,
    Decision,
    PipelineInput,
    PipelineState,
    RecommendResult,
    Step,
    decide,
    explain_lines,
)
from escaler.scaling.registry import (
    DEFAULT_ALGORITHM,
    HPA,
    AlgorithmNotRegistered,
    get_algorithm,
    is_known_algorithm,
    register_algorithm,
    registered_algorithms,
    unregister_algorithm,
)
from escaler.scaling.stabilizer import stabilize
from escaler.scaling.window import MetricWindows, SampleWindow, WindowPolicy

__all__ = [
    "DEFAULT_ALGORITHM",
    "HPA",
    "Algorithm",
    "AlgorithmContext",
    "AlgorithmNotRegistered",
    "Behavior",
    "ConditionValue",
    "Decision",
    "DeferralOutcome",
    "EventValue",
    "GuardHold",
    "MetricValue",
    "MetricWindows",
    "NoDecision",
    "PipelineInput",
    "PipelineState",
    "RecommendResult",
    "Recommendation",
    "SampleWindow",
    "Step",
    "SyncOutcome",
    "TargetError",
    "TargetSnapshot",
    "Validation",
    "WindowPolicy",
    "apa",
    "clamp",
    "conditions_for",
    "decide",
    "defer",
    "explain_lines",
    "get_algorithm",
    "guards",
    "health",
    "is_known_algorithm",
    "limit_step",
    "register_algorithm",
    "registered_algorithms",
    "stabilize",
    "unregister_algorithm",
]
