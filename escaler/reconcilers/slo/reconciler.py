"""``SLOReconciler``: one SLO requirement → its decision, in ``status.decision`` and in the
``DecisionBook`` (``GET /decisions/v1/namespaces/{namespace}/{serviceId}``; docs/slo.md). One instance
per kind (``escaler.reconcilers.slo.kinds``).

One reconcile, level-based:

1. read the requirement from the informer cache (gone → forget what is held for it);
2. parse and validate it (``SLOKind.parse``): an invalid spec is ``Ready=False/InvalidSpec`` naming
   each field and rule, the decision in status is kept and the route answers 503 saying why;
3. the current replicas of ``targetRef``, from the caches (``TargetCounts``; a job without one uses
   its own last decision, 0 before the first);
4. the PromQL signals (``SignalReader``): at most one read per poll interval, on the outbound executor;
   a reconcile whose first read is in flight returns and is woken by its completion;
5. size (``escaler.scaling.slo``, pure), with the decision ``status.decision`` holds as the "last
   decision" a missing signal holds; a requirement with ``spec.flow`` is sized by flow sizing
   (``escaler.reconcilers.slo.flow``) from the flow state kept per requirement (``FlowStates``: once
   per reading, reset when the flow's config changes, dropped with the requirement, when it turns
   invalid or loses its flow);
6. write the status only when it changed beyond drift (``report.worth_writing``, then
   ``StatusWriter``: nothing sent when equal), and put the live decision in the ``DecisionBook``;
7. requeue when the next read is due (the poll interval after the last read), or when a target
   problem is worth a new look.

``Ready`` reasons, first that applies: ``InvalidSpec``, ``ServiceIdConflict`` (another requirement of
either kind in the same namespace has the serviceId — requirements of other namespaces never count:
the decision is computed, the route answers 409), ``TargetNotFound`` /
``TargetUnreadable`` (the last decision is held; none before the first), ``SignalsMissing`` (the last
decision is held), ``Sized``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escaler.clock import Clock
from escaler.reconcilers.kit.ports import ObjectStore
from escaler.reconcilers.kit.status import StatusClient, StatusWriter
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.reconcilers.slo.decisions import DecisionBook, Owner, conflict_message
from escaler.reconcilers.slo.flow import FlowStates
from escaler.reconcilers.slo.kinds import Invalid, Plan, SLOKind, confined
from escaler.reconcilers.slo.readings import BUSY, BUSY_RETRY_SECONDS, PENDING, Readings, SignalReader
from escaler.reconcilers.slo.report import (
    INVALID_SPEC,
    SERVICE_ID_CONFLICT,
    SIGNALS_MISSING,
    SIZED,
    Ready,
    build_status,
    decision_wire,
    held_replicas,
    rfc3339,
    worth_writing,
)
from escaler.reconcilers.slo.target import NOT_SYNCED, Replicas, TargetCounts, TargetProblem
from escaler.runtime.types import Request, Result
from escaler.scaling.slo import Decision
from escaler.signals.promqlscope import PromQLScope

__all__ = ["SLODeps", "SLOReconciler"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SLODeps:
    """What the reconciler talks to; ``setup_slo`` wires the manager's, tests pass fakes."""

    kind: SLOKind
    # the kind's informer cache
    store: ObjectStore
    # status patches (``DynamicClient.patch_status``)
    client: StatusClient
    # the kind's resource (a ResourceMapping, or an (apiVersion, kind) pair the client resolves)
    mapping: Any
    # current replicas of targets, from the caches
    targets: TargetCounts
    # the PromQL reads, off the reconcile workers
    reader: SignalReader
    # decisions by serviceId, shared by both kinds and the route
    book: DecisionBook
    clock: Clock
    # tenant PromQL confinement (--promql-namespace-label); None = not confined (tests)
    promql_scope: PromQLScope | None = None
    # --slo-prometheus-endpoint (what --promql-unconfined-hosts is matched against)
    prometheus_endpoint: str = ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _ready(decision: Decision | None, problem: TargetProblem | None, conflict: str | None) -> Ready:
    if conflict is not None:
        return Ready(False, SERVICE_ID_CONFLICT,
                     conflict + ": the decisions route answers 409 until one remains")
    if problem is not None:
        held = (f"; holding the last decision ({decision.replicas} replicas)" if decision is not None
                else "; no decision yet")
        return Ready(False, problem.reason, problem.message + held)
    assert decision is not None
    if decision.held:
        return Ready(False, SIGNALS_MISSING, decision.reason)
    return Ready(True, SIZED, f"sized from its signals: {decision.replicas} replicas")


class SLOReconciler:
    """See the module docstring."""

    def __init__(self, deps: SLODeps) -> None:
        # collaborators; fixed
        self._d = deps
        # the status-write-only-on-change rule (remembers our last write per requirement, bounded)
        self.writer = StatusWriter(deps.client)
        # guards _plans
        self._mu = threading.Lock()
        # requirement → (uid, generation, its parse): a poll does not re-validate an unchanged spec
        # (10,000 requirements on a 30 s poll would parse ~330 specs a second); dropped by forget
        self._plans: dict[Request, tuple[str, int, Plan | Invalid]] = {}
        # requirement with spec.flow → its flow state; dropped by forget, an invalid spec, or no flow
        self.flows = FlowStates()

    def reconcile(self, req: Request) -> Result:
        obj = self._d.store.get_by_key(str(req))
        if obj is None or _meta(obj).get("deletionTimestamp"):
            self.forget(req)
            return Result()
        meta = _meta(obj)
        uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
        now_iso = rfc3339(self._d.clock.now())
        base = self.writer.base_status(obj)
        plan = self._plan(req, obj, uid, generation)
        if isinstance(plan, Invalid):
            self._d.targets.release(req)
            self._d.reader.forget(req)
            self.flows.forget(req)
            self._d.book.put_problem(self._d.kind.kind, req, uid, f"InvalidSpec: {plan.message}")
            invalid = Ready(False, INVALID_SPEC, plan.message)
            self._write(obj, base, build_status(base, generation, None, invalid, now_iso))
            return Result()
        current = self._current(req, plan, held_replicas(base))
        if current is NOT_SYNCED:
            return Result(requeue_after=NOT_SYNCED_RETRY_SECONDS)
        readings = self._readings(req, plan, uid, generation)
        if readings is PENDING:
            return Result()
        if readings is BUSY:
            return Result(requeue_after=BUSY_RETRY_SECONDS)
        assert isinstance(readings, Readings)
        return self._decide(req, obj, plan, base, current, readings, now_iso)

    def _plan(self, req: Request, obj: Mapping[str, Any], uid: str, generation: int) -> Plan | Invalid:
        with self._mu:
            cached = self._plans.get(req)
        if cached is not None and cached[:2] == (uid, generation):
            return cached[2]
        plan = confined(self._d.kind.parse(obj), req.namespace, self._d.promql_scope,
                        self._d.prometheus_endpoint)
        with self._mu:
            self._plans[req] = (uid, generation, plan)
        return plan

    def _current(self, req: Request, plan: Plan, last: int | None) -> Replicas | TargetProblem | object:
        if plan.target is None:
            self._d.targets.release(req)
            return Replicas(last if last is not None else 0)
        return self._d.targets.current(req, req.namespace, plan.target)

    def _readings(self, req: Request, plan: Plan, uid: str, generation: int) -> Readings | object:
        if not plan.queries:
            self._d.reader.forget(req)
            return Readings({}, self._d.clock.monotonic(), None)
        return self._d.reader.read(req, (uid, generation), req.namespace, plan.queries,
                                   self._d.clock.monotonic())

    def _decide(self, req: Request, obj: Mapping[str, Any], plan: Plan, base: Mapping[str, Any],
                current: Replicas | TargetProblem | object, readings: Readings, now_iso: str) -> Result:
        meta = _meta(obj)
        uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
        last = held_replicas(base)
        problem = current if isinstance(current, TargetProblem) else None
        decision: Decision | None
        if problem is not None:
            decision = None
            if last is not None:
                n, _ = plan.bounds.clamp(last)
                decision = Decision(n, f"{problem.message}: holding the last decision ({n} replicas)",
                                    held=True)
        else:
            assert isinstance(current, Replicas)
            decision = self._size(req, uid, plan, readings, current, last)
        me = Owner(self._d.kind.kind, req.namespace, req.name, uid)
        # only this namespace's requirements share a route (a serviceId is scoped by namespace)
        owners = self._d.book.owners(req.namespace, plan.service_id)
        conflict = None
        if [o for o in owners if o != me]:  # names only requirements of this namespace
            conflict = (f"{conflict_message(plan.service_id, req.namespace)} "
                        f"({', '.join(o.describe() for o in owners)})")
        wire = decision_wire(decision, now_iso) if decision is not None else None
        ready = _ready(decision, problem, conflict)
        # the book first: whoever reads the status must never get an older answer from the route
        if wire is not None:
            self._d.book.put(self._d.kind.kind, req, uid, wire)
        else:
            self._d.book.put_problem(self._d.kind.kind, req, uid, f"{ready.reason}: {ready.message}")
        self._write(obj, base, build_status(base, generation, wire, ready, now_iso))
        return _requeue(readings.due_in, problem.retry if problem is not None else None)

    def _size(self, req: Request, uid: str, plan: Plan, readings: Readings, current: Replicas,
              last: int | None) -> Decision:
        if plan.flow is not None:
            return self.flows.size(req, uid, plan.flow, readings.samples, readings.at,
                                   current=current.desired, last=last, poll_s=self._d.reader.interval)
        self.flows.forget(req)
        assert plan.size is not None
        return plan.size(readings.samples, current.desired, last, current.ready)

    def _write(self, obj: Mapping[str, Any], base: Mapping[str, Any], status: dict[str, Any]) -> None:
        """Write ``status`` unless it differs from what the cluster holds only by drift."""
        if worth_writing(base, status):
            self.writer.write(self._d.mapping, obj, status)
        else:
            self.writer.skip()

    def forget(self, req: Request) -> None:
        """The requirement is gone: release everything held for it."""
        with self._mu:
            self._plans.pop(req, None)
        self.flows.forget(req)
        self._d.reader.forget(req)
        self._d.targets.release(req)
        self._d.book.forget(self._d.kind.kind, req)


def _requeue(*delays: float | None) -> Result:
    due = [d for d in delays if d is not None]
    return Result(requeue_after=max(0.0, min(due))) if due else Result()
