"""The two SLO requirement kinds, as the decision engine sees them: parse, validate, what to query,
how to size.

``SLOKind`` describes one kind (LLMSLORequirement or JobSLORequirement); ``LLM_KIND`` and
``JOB_KIND`` are the two instances. ``kind.parse(obj)`` turns a cached object into a ``Plan``, or
into the list of errors that stop it (``Invalid``), each naming the field and the rule:

* the object must parse as the kind (pydantic: types, ranges, required fields — an object stored
  before a schema rule existed, or written around admission), reported as ``spec.x.y: <rule>``;
* the cross-field rules of docs/slo.md#bounds-in-replicas (``escaler.api.slo``'s ``RULES``, the Python twins
  of the CRD's CEL) must hold: bounds share a type, a ``pdengine`` max is not 1, ``pdengine`` only with
  ``deployType: pd``, min <= max, job bounds are ``replica`` (or ``concurrency`` for min).

A ``Plan`` carries the ``serviceId``, the target whose current replicas are an input (always for
an LLM requirement; optional for a job), the PromQL queries of this poll (``name → promql``, in a
fixed order) and how it is sized: ``size(readings, current, last, ready)``, the pure rule of
``escaler.scaling.slo`` bound to the spec's objectives and bounds — or, for an LLM requirement with
``spec.flow``, ``flow`` (``escaler.reconcilers.slo.flow.FlowPlan``: the flow's queries are the plan's,
``ttft``/``otps`` only set its objectives and are not read, and the reconciler sizes it with the flow
state it keeps per requirement). A flow whose queries do not resolve (a selector outside the grammar,
stored before the rule existed) is ``Invalid`` naming ``spec.flow.selector``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from escaler.api.rules import validate
from escaler.api.slo import JobSLORequirement, LLMSLORequirement, LLMSLORequirementSpec
from escaler.reconcilers.kit.ports import ObjectRef
from escaler.reconcilers.slo.flow import FlowPlan, flow_plan
from escaler.reconcilers.slo.readings import signal_value
from escaler.scaling.slo import (
    Decision,
    Direction,
    Objective,
    ReplicaBounds,
    load_objective,
    replica_bounds,
    size_job,
    size_llm,
)
from escaler.signals.promqlscope import PromQLScope
from escaler.signals.sample import Sample

__all__ = ["JOB_KIND", "KINDS", "LLM_KIND", "Invalid", "Plan", "SLOKind", "confined", "service_id_of"]

# signal names (keys of Decision.signals and of the queries)
TTFT = "ttftMs"
OTPS = "otps"
INFLIGHT = "inflight"
QUEUE_DEPTH = "queueDepth"
# the field that holds each signal's PromQL (a flow signal's is its selector or queries entry)
_QUERY_FIELDS = {TTFT: "spec.ttft.promql", OTPS: "spec.otps.promql", INFLIGHT: "spec.inflight.promql",
                 QUEUE_DEPTH: "spec.queue.promql"}
# how many validation errors one message lists
_MAX_ERRORS = 5

# (readings by signal name, current replicas, last decided replicas, ready replicas or None) → decision
Sizer = Callable[[Mapping[str, Sample], int, int | None, int | None], Decision]


@dataclass(frozen=True)
class Plan:
    """What one reconcile of a valid requirement does (see the module docstring)."""

    service_id: str
    # the workload whose current replicas are an input; None (a job without targetRef): the last decision
    target: ObjectRef | None
    # signal name → PromQL, read together on the outbound executor; empty: nothing to read
    queries: tuple[tuple[str, str], ...]
    # the replicas the bounds allow (for messages and the hold without a target)
    bounds: ReplicaBounds
    # (readings by signal name, current replicas, last decided replicas, ready replicas) → the decision;
    # None exactly when flow is set
    size: Sizer | None
    # spec.flow: sized by flow sizing with its state (FlowStates), not by size
    flow: FlowPlan | None = None


@dataclass(frozen=True)
class Invalid:
    """The object cannot be sized: every error names a field and the rule it breaks."""

    errors: tuple[str, ...]

    @property
    def message(self) -> str:
        shown = "; ".join(self.errors[:_MAX_ERRORS])
        more = len(self.errors) - _MAX_ERRORS
        return shown + (f" (and {more} more)" if more > 0 else "")


def _pydantic_errors(err: ValidationError) -> tuple[str, ...]:
    return tuple(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


# the two SLO kinds (parse, then validate their spec)
_R = TypeVar("_R", LLMSLORequirement, JobSLORequirement)


def _valid(model: type[_R], obj: Mapping[str, Any]) -> _R | Invalid:
    """``obj`` parsed as ``model`` with its ``spec`` checked by the CEL twins, or Invalid."""
    try:
        req = model.parse(obj)
    except ValidationError as err:
        return Invalid(_pydantic_errors(err))
    errors = validate(req.spec, "spec")
    if errors:
        return Invalid(tuple(str(e) for e in errors))
    return req


def _plan_llm(obj: Mapping[str, Any]) -> Plan | Invalid:
    req = _valid(LLMSLORequirement, obj)
    if isinstance(req, Invalid):
        return req
    spec = req.spec
    bounds = replica_bounds(spec.bounds, spec.concurrency_per_replica)
    target = ObjectRef.of(spec.target_ref)
    if spec.flow is not None:
        try:
            flow = flow_plan(spec, bounds)
        except ValueError as err:
            return Invalid((str(err),))
        return Plan(spec.service_id, target, flow.queries, bounds, None, flow)
    queries: list[tuple[str, str]] = []
    if spec.ttft is not None:
        queries.append((TTFT, spec.ttft.promql))
    if spec.otps is not None:
        queries.append((OTPS, spec.otps.promql))
    if spec.inflight is not None:
        queries.append((INFLIGHT, spec.inflight.promql))
    return Plan(spec.service_id, target, tuple(queries), bounds, _ratio_sizer(spec, bounds))


def _ratio_sizer(spec: LLMSLORequirementSpec, bounds: ReplicaBounds) -> Sizer:
    """``size_llm`` bound to the spec's objectives and bounds."""
    ttft, otps, inflight, cpr = spec.ttft, spec.otps, spec.inflight, spec.concurrency_per_replica

    def size(samples: Mapping[str, Sample], current: int, last: int | None, ready: int | None) -> Decision:
        objectives: list[Objective] = []
        if ttft is not None:
            v, e = signal_value(samples, TTFT)
            objectives.append(Objective(TTFT, f"TTFT p{ttft.percentile:g} (ms)", ttft.target_ms,
                                        Direction.UPPER, v, e, target_name="ttftTargetMs"))
        if otps is not None:
            v, e = signal_value(samples, OTPS)
            objectives.append(Objective(OTPS, "OTPS", otps.target, Direction.LOWER, v, e,
                                        target_name="otpsTarget"))
        if inflight is not None:
            v, e = signal_value(samples, INFLIGHT)
            objectives.append(load_objective(v, e, concurrency_per_replica=cpr, current=current,
                                             ready=ready))
        return size_llm(objectives, current=current, bounds=bounds, last=last, ready=ready)

    return size


def _plan_job(obj: Mapping[str, Any]) -> Plan | Invalid:
    req = _valid(JobSLORequirement, obj)
    if isinstance(req, Invalid):
        return req
    spec = req.spec
    bounds = replica_bounds(spec.bounds, spec.concurrency_per_replica)
    queue = spec.queue

    def size(samples: Mapping[str, Sample], current: int, last: int | None, ready: int | None) -> Decision:
        v, e = signal_value(samples, QUEUE_DEPTH)
        depth = Objective(QUEUE_DEPTH, "queue depth", float(queue.max_depth), Direction.UPPER, v, e,
                          target_name="maxDepth")
        return size_job(depth, current=current, bounds=bounds, last=last)

    target = ObjectRef.of(spec.target_ref) if spec.target_ref is not None else None
    return Plan(spec.service_id, target, ((QUEUE_DEPTH, queue.promql),), bounds, size)


@dataclass(frozen=True)
class SLOKind:
    """One SLO requirement kind (see the module docstring)."""

    api_version: str
    kind: str
    # the controller's name (metrics, logs)
    controller_name: str
    parse: Callable[[Mapping[str, Any]], Plan | Invalid]


LLM_KIND = SLOKind(LLMSLORequirement.API_VERSION, LLMSLORequirement.KIND, "llmslorequirement", _plan_llm)
JOB_KIND = SLOKind(JobSLORequirement.API_VERSION, JobSLORequirement.KIND, "jobslorequirement", _plan_job)
KINDS = (LLM_KIND, JOB_KIND)


def confined(plan: Plan | Invalid, namespace: str, scope: PromQLScope | None,
             endpoint: str) -> Plan | Invalid:
    """``plan``, or Invalid naming each query that reads outside ``namespace`` (tenant PromQL
    confinement, ``escaler.signals.promqlscope``; ``scope`` None = not confined)."""
    if scope is None or isinstance(plan, Invalid):
        return plan
    errors = []
    for signal, query in plan.queries:
        why = scope.refusal(query, namespace, endpoint)
        if why is not None:
            path = _QUERY_FIELDS.get(signal) or (f"spec.flow (the {signal} signal: spec.flow.selector, "
                                                 f"or spec.flow.queries.{signal})")
            errors.append(f"{path}: {why}")
    return Invalid(tuple(errors)) if errors else plan


def service_id_of(obj: Mapping[str, Any]) -> str | None:
    """``spec.serviceId`` of a requirement object of either kind, or None when absent or malformed."""
    spec = obj.get("spec")
    sid = spec.get("serviceId") if isinstance(spec, Mapping) else None
    return sid if isinstance(sid, str) and sid else None
