"""The ElasticScaler reconciler (SPEC §3, §4, §5): level-based, one scaler per reconcile.

A reconcile reads the scaler from the informer cache and converges (never trusting the event
that woke it):

1. **Read and validate.** Gone → forget everything held for it (watches, windows, signals,
   metric series). Malformed or breaking a cross-field rule → ``Validated=False/InvalidSpec``.
2. **Route by trigger.** ``MetricsTrigger`` + ``HPA`` → the companion HPA (``hpasync``); every
   other trigger → ``_sync_workload``. A scaler that leaves the HPA path has its companion HPA
   deleted; one that leaves StateTrigger releases its source informer.
3. **Resolve the target.** ``spec.targetRef``, or for StateTrigger the end of the targetRef chain
   from the state source (read from a label-selected dynamic informer; a change on the source
   enqueues the scaler at once). The target's kind is watched in the scaler's namespace (a
   dynamic informer, released with the scaler) so that its creation, deletion or rollout
   progress enqueues the scaler, and reads come from that cache.
4. **Conflicts.** One scaler per target across escaler kinds (``escaler.reconcilers.bindings``):
   a younger claimant, or any scaler facing an HPA escaler does not own, reports
   ``Validated=False/TargetConflict`` and never writes. Advisory scalers never write, so they
   neither claim nor conflict.
5. **Recommend** (``metricsync``: metrics through the sample windows and the algorithm;
   ``statesync``: the State source's ``status.desiredReplicas``; ``signalsync``: the signal
   rule), **decide** (``escaler.scaling.pipeline``),
   **write** the target only when the count changes (``ResourceHandler``, optimistic
   concurrency; a 409 requeues at once), **report** (``conditions_for``; events; status written
   only when it changed), and **requeue** at the earliest moment the answer can change.

MetricsTrigger polling is the ``MetricsPoller``'s job (``poller.py``); this reconciler only adds
per-trigger requeues (signal idle timeout and pull interval, stabilization and deferral ends).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from escaler.api.common import Mode, TargetRef
from escaler.api.elasticscaler import HPA_ALGORITHM, ElasticScaler, ElasticScalerStatus, TriggerType
from escaler.api.rules import validate
from escaler.api.scaler import RecentDecision
from escaler.clock import Clock
from escaler.errors import ConnectionFailure, StatusError, is_conflict, is_not_found
from escaler.informers.frozen import thaw
from escaler.kube.discovery import ResourceMapping
from escaler.kube.events import Recorder
from escaler.reconcilers.bindings import TargetBindings, TargetKey, claim_of
from escaler.reconcilers.elasticscaler.condset import ConditionSet
from escaler.reconcilers.elasticscaler.context import (
    Resolved,
    ScalerMemory,
    Sync,
    epoch,
    regarding,
    to_condition,
    to_value,
    wall,
)
from escaler.reconcilers.elasticscaler.hpa import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.elasticscaler.hpasync import HpaSync
from escaler.reconcilers.elasticscaler.metricsync import Collector, MetricsRecommender
from escaler.reconcilers.elasticscaler.signal import SignalStore
from escaler.reconcilers.elasticscaler.signalsync import SignalRecommender
from escaler.reconcilers.elasticscaler.state import ObjectRef
from escaler.reconcilers.elasticscaler.statesync import (
    CHAIN_RETRY_SECONDS,
    ChainHold,
    NotSynced,
    StateResolver,
    recommend_state,
)
from escaler.reconcilers.elasticscaler.status import StatusWriter
from escaler.reconcilers.elasticscaler.watches import ROLE_SOURCE, ROLE_TARGET, ScalerWatches
from escaler.reconcilers.scalermetrics import ScalerMetrics
from escaler.runtime.types import Request, Result
from escaler.scaling.annotations import AnnotationProblem, ScalerAnnotations, parse_annotations
from escaler.scaling.conditions import (
    ALGORITHM_NOT_REGISTERED,
    INVALID_SPEC,
    TARGET_CONFLICT,
    TARGET_NOT_FOUND,
    TARGET_UNREADABLE,
    TARGET_WRITE_FAILED,
    EventValue,
    SyncOutcome,
    TargetError,
    Validation,
    conditions_for,
)
from escaler.scaling.guards import TargetSnapshot as GuardTarget
from escaler.scaling.pipeline import Behavior, PipelineInput, PipelineState, decide
from escaler.scaling.registry import AlgorithmNotRegistered, get_algorithm, is_known_algorithm
from escaler.scaling.text import cap_text
from escaler.signals.signal_pull import SignalReading
from escaler.targets.snapshot import TargetSnapshot, TargetUnreadable

__all__ = ["EVENT_INVALID_ANNOTATION", "Collector", "ElasticScalerReconciler", "HandlerLookup", "KubeWriter",
           "target_of"]

# the reason of the Warning event reporting an unusable annotation (SPEC §5.4)
EVENT_INVALID_ANNOTATION = "InvalidAnnotation"
# how long a sync waits for a freshly started target informer to list (else it reads with a GET)
TARGET_SYNC_WAIT_SECONDS = 5.0

_log = logging.getLogger(__name__)


class KubeWriter(Protocol):
    """What the reconciler writes through (``DynamicClient`` satisfies it)."""

    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    def create(self, m: Any, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...

    def update(self, m: Any, obj: dict[str, Any]) -> dict[str, Any]: ...

    def delete(self, m: Any, name: str, namespace: str | None = None, propagation_policy: Any = None,
               preconditions_uid: str | None = None) -> dict[str, Any]: ...

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]: ...


class Handler(Protocol):
    def read(self, namespace: str, ref: Any) -> TargetSnapshot: ...

    def write_replicas(self, snapshot: TargetSnapshot, replicas: int) -> TargetSnapshot: ...


class HandlerLookup(Protocol):
    """``HandlerRegistry``: the ResourceHandler of a target kind (ValueError: bad apiVersion)."""

    def handler_for(self, api_version: str, kind: str) -> Any: ...


class Mapper(Protocol):
    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping: ...


class Store(Protocol):
    def get_by_key(self, key: str) -> Any: ...


def target_of(obj: Mapping[str, Any]) -> TargetKey | None:
    """The target an ElasticScaler object claims (for ``TargetBindings``).

    Advisory scalers claim nothing (they never write). StateTrigger scalers claim the end of
    their chain, as their status last recorded it (``status.resolvedTargetRef``).
    """
    spec = obj.get("spec")
    meta = obj.get("metadata")
    if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
        return None
    if spec.get("mode") == Mode.ADVISORY:
        return None
    trigger = spec.get("trigger")
    kind = trigger.get("type") if isinstance(trigger, Mapping) else None
    if kind == TriggerType.STATE:
        status = obj.get("status")
        ref = status.get("resolvedTargetRef") if isinstance(status, Mapping) else None
    else:
        ref = spec.get("targetRef")
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        return None
    return TargetKey.from_ref(str(meta.get("namespace") or ""), str(ref.get("apiVersion") or ""),
                              str(ref["kind"]), str(ref["name"]))


class ElasticScalerReconciler:
    """See the module docstring. Construct with ``setup_elasticscaler``; thread-safe per key."""

    def __init__(
        self,
        *,
        scalers: Store,
        hpas: Store,
        client: KubeWriter,
        mapper: Mapper,
        handlers: HandlerLookup,
        collector: Collector | None,
        recorder: Recorder,
        clock: Clock,
        metrics: ScalerMetrics,
        bindings: TargetBindings,
        watches: ScalerWatches,
        signals: SignalStore,
        signal_puller: Callable[[str, float], SignalReading] | None,
        allowed_hosts: Sequence[str] = (),
        poll_interval: float = 0.0,
        can_write: threading.Event | None = None,
        source_selector_namespace: str = "",
    ) -> None:
        # caches (the ElasticScaler and HPA informers' stores); fixed
        self._scalers = scalers
        # API writes, kind resolution, target handlers; fixed
        self._client = client
        self._mapper = mapper
        self._handlers = handlers
        self._recorder = recorder
        self._clock = clock
        self._metrics = metrics
        self._bindings = bindings
        self._watches = watches
        self._signals = signals
        # the manager's write fence; None = always allowed
        self._can_write = can_write
        # status writes only when changed
        self.status_writer = StatusWriter(client)
        # one helper per trigger path (each module's docstring states its contract)
        self._hpa = HpaSync(self, hpas, client, self._hpa_map, self._allowed_to_write)
        self._metrics_rec = MetricsRecommender(collector, metrics, clock, allowed_hosts, poll_interval)
        self._signal_rec = SignalRecommender(signals, signal_puller, clock, metrics, allowed_hosts)
        self._state = StateResolver(mapper, watches, client, source_selector_namespace)
        # guards _memory (entries are only touched by the reconcile of their own key)
        self._mu = threading.Lock()
        # scaler → what this process remembers about it
        self._memory: dict[Request, ScalerMemory] = {}
        # the HPA and ElasticScaler mappings; resolved on first use
        self._hpa_mapping: ResourceMapping | None = None
        self._scaler_mapping: ResourceMapping | None = None

    # ------------------------------------------------------------------ entry point

    def reconcile(self, req: Request) -> Result:
        obj = self._scalers.get_by_key(str(req))
        if obj is None:
            self.forget(req)
            return Result()
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            self.forget(req)
            return Result()
        now_dt = self._clock.now()
        sync = Sync(req, obj, now_dt.timestamp(), now_dt)
        try:
            scaler = ElasticScaler.parse(obj)
        except ValidationError as err:
            return self._invalid_object(sync, err)
        mem = self._memory_for(req, scaler.metadata.uid or "")
        problems = [str(e) for e in validate(scaler)]
        trigger = scaler.spec.trigger
        algorithm = trigger.metrics_trigger.scaling_algorithm if trigger.metrics_trigger else ""
        if trigger.type != TriggerType.STATE:
            self._watches.drop(req, ROLE_SOURCE)
        is_hpa = trigger.type == TriggerType.METRICS and algorithm == HPA_ALGORITHM
        if not is_hpa:
            self._hpa.delete(sync, scaler)
        if problems:
            self._watches.drop(req, ROLE_TARGET)
            return self.hold_invalid(sync, scaler, Validation(INVALID_SPEC, "; ".join(problems)))
        # behavior.* (stabilization, step limits) applies to every trigger; metrics.* is only read
        # by MetricsTrigger, and harmless elsewhere
        ann, ann_problems = parse_annotations(scaler.metadata.annotations, policies=True)
        self._report_annotation_problems(sync, mem, ann_problems)
        if is_hpa:
            self._watches.drop(req, ROLE_TARGET)
            return self._hpa.sync(sync, scaler, ann)
        if trigger.type == TriggerType.METRICS and not is_known_algorithm(algorithm):
            self._watches.drop(req, ROLE_TARGET)
            return self.hold_invalid(sync, scaler, Validation(
                ALGORITHM_NOT_REGISTERED,
                f"spec.trigger.metricsTrigger.scalingAlgorithm: {_not_registered(algorithm)}"))
        return self._sync_workload(sync, scaler, ann, mem)

    def forget(self, req: Request) -> None:
        """The scaler is gone: release everything held for it."""
        with self._mu:
            mem = self._memory.pop(req, None)
        self._watches.release(req)
        self._signals.forget(req)
        self._metrics.forget(req.namespace, req.name)
        if mem is not None:
            self.status_writer.forget(mem.uid)

    def _memory_for(self, req: Request, uid: str) -> ScalerMemory:
        with self._mu:
            mem = self._memory.get(req)
            if mem is None or mem.uid != uid:
                mem = self._memory[req] = ScalerMemory(uid=uid)
            return mem

    # ------------------------------------------------------------------ common helpers

    def _scaler_map(self) -> ResourceMapping:
        if self._scaler_mapping is None:
            self._scaler_mapping = self._mapper.mapping_for(ElasticScaler.API_VERSION, ElasticScaler.KIND)
        return self._scaler_mapping

    def _hpa_map(self) -> ResourceMapping:
        if self._hpa_mapping is None:
            self._hpa_mapping = self._mapper.mapping_for(HPA_API_VERSION, HPA_KIND)
        return self._hpa_mapping

    def _allowed_to_write(self) -> bool:
        return self._can_write is None or self._can_write.is_set()

    def emit(self, sync: Sync, events: Sequence[EventValue], action: str = "Scale") -> None:
        ref = regarding(sync.obj)
        for ev in events:
            try:
                if ev.type == "Warning":
                    self._recorder.event(ref, "Warning", ev.reason, action, ev.note)
                else:
                    self._recorder.event(ref, "Normal", ev.reason, action, ev.note)
            except ValueError:
                _log.exception("cannot record event %s", ev.reason)

    def _report_annotation_problems(self, sync: Sync, mem: ScalerMemory,
                                    problems: list[AnnotationProblem]) -> None:
        new = [p for p in problems if p.fallback_message() not in mem.reported]
        if not new:
            return
        self.emit(sync, [EventValue("Warning", EVENT_INVALID_ANNOTATION, p.fallback_message()) for p in new],
                  action="ParseAnnotations")
        mem.reported = mem.reported | {p.fallback_message() for p in new}

    def previous_status(self, sync: Sync) -> ElasticScalerStatus:
        raw = self.status_writer.base_status(sync.obj)
        if raw:
            try:
                return ElasticScalerStatus.model_validate(raw)
            except ValidationError:
                _log.warning("status of %s does not parse; rewriting it", sync.req)
        return ElasticScalerStatus()

    def write_status(self, sync: Sync, status: ElasticScalerStatus) -> None:
        new = status.to_object()
        try:
            self.status_writer.write(self._scaler_map(), sync.obj, new)
        except StatusError as err:
            if is_not_found(err):
                return  # deleted meanwhile; the delete event forgets it
            raise

    def _apply_conditions(self, sync: Sync, status: ElasticScalerStatus, generation: int,
                          outcome: SyncOutcome) -> list[EventValue]:
        previous = [to_value(c) for c in status.conditions]
        conds, events = conditions_for(outcome, generation, sync.now_iso, previous)
        status.conditions = [to_condition(c) for c in conds]
        status.observed_generation = generation
        return events

    # ------------------------------------------------------------------ holds before any decision

    def _invalid_object(self, sync: Sync, err: ValidationError) -> Result:
        """The object does not parse (stored before a schema rule, or edited around it)."""
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])
        meta = sync.obj.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        raw = sync.obj.get("status")
        old = thaw(raw) if isinstance(raw, Mapping) else {}
        cs = ConditionSet(old.get("conditions") or (), generation, sync.now_dt)
        cs.set("Validated", False, INVALID_SPEC, cap_text(f"the object does not parse: {details}"))
        cs.set("ScalingActive", False, INVALID_SPEC, cap_text(f"the object does not parse: {details}"))
        new = dict(old)
        new["observedGeneration"] = generation
        new["conditions"] = [c.to_object() for c in cs.conditions()]
        self.status_writer.write(self._scaler_map(), sync.obj, new)
        _log.warning("ElasticScaler %s does not parse: %s", sync.req, details)
        return Result()

    def hold_invalid(self, sync: Sync, scaler: ElasticScaler, validation: Validation,
                     requeue: float | None = None) -> Result:
        status = self.previous_status(sync)
        events = self._apply_conditions(sync, status, scaler.metadata.generation or 0,
                                        SyncOutcome(validation=validation))
        self.emit(sync, events)
        self.write_status(sync, status)
        sync.wait(requeue)
        return sync.result()

    # ------------------------------------------------------------------ conflicts

    def conflict(self, scaler: ElasticScaler, target: TargetKey,
                 ignore_hpa: str | None = None) -> str | None:
        """Why ``scaler`` may not write ``target``, or None."""
        me = claim_of(ElasticScaler.KIND, {"metadata": {
            "name": scaler.name, "namespace": scaler.namespace,
            "creationTimestamp": scaler.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ")
            if scaler.metadata.creation_timestamp else ""}})
        winner = self._bindings.winner(target, me)
        if winner != me:
            return (f"{target.describe()} is already managed by {winner.describe()} (created "
                    f"{winner.created or 'earlier'}); the older scaler wins, this one never writes")
        foreign = [h for h in self._bindings.foreign_hpas(target) if h != ignore_hpa]
        if foreign:
            return (f"{target.describe()} is also scaled by HorizontalPodAutoscaler "
                    f"{', '.join(foreign)}, which escaler does not own; holding rather than fighting it")
        return None

    # ------------------------------------------------------------------ targets

    def target_cache_get(self, api_version: str, kind: str, namespace: str,
                         name: str) -> Mapping[str, Any] | None:
        """Informer-cache lookup for the ResourceHandlers (``CacheGet``): only synced target watches."""
        return self._watches.lookup(api_version, kind, namespace, name, self._mapper)

    # ------------------------------------------------------------------ every other trigger

    def _sync_workload(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations,
                       mem: ScalerMemory) -> Result:
        req, ns = sync.req, scaler.namespace
        generation = scaler.metadata.generation or 0
        status = self.previous_status(sync)
        status.hpa_name = None
        trigger = scaler.spec.trigger
        resolved: Resolved | None = None

        # -- the target
        if trigger.type == TriggerType.STATE:
            got = self._state.resolve(sync, scaler)
            if isinstance(got, NotSynced):
                return Result(requeue_after=got.requeue)
            if isinstance(got, ChainHold):
                return self.hold_invalid(sync, scaler, got.validation, requeue=got.requeue)
            resolved = got
            target_ref = resolved.target
        else:
            ref = scaler.spec.target_ref
            target_ref = ObjectRef(ref.api_version, ref.kind, ref.name)
        status.resolved_target_ref = TargetRef(api_version=target_ref.api_version, kind=target_ref.kind,
                                               name=target_ref.name)
        try:
            target_key = TargetKey.from_ref(ns, target_ref.api_version, target_ref.kind, target_ref.name)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(
                INVALID_SPEC, f"spec.targetRef.apiVersion: {err}"), Validation())

        # -- conflicts (Advisory never writes, so it neither claims nor conflicts)
        advisory = scaler.spec.mode == Mode.ADVISORY
        if not advisory:
            conflict = self.conflict(scaler, target_key)
            if conflict is not None:
                self._watches.drop(req, ROLE_TARGET)
                outcome = SyncOutcome(validation=Validation(TARGET_CONFLICT, conflict))
                events = self._apply_conditions(sync, status, generation, outcome)
                self.emit(sync, events)
                self.write_status(sync, status)
                return sync.result()

        # -- read the target (from the watch cache when synced)
        try:
            self._watches.watch_object(req, ROLE_TARGET, ns, target_ref, self._mapper)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(INVALID_SPEC, str(err)),
                                      Validation())
        except StatusError as err:
            if not is_not_found(err):
                raise
            sync.wait(CHAIN_RETRY_SECONDS)
            return self._target_error(sync, scaler, status, TargetError(
                TARGET_NOT_FOUND, f"{target_ref.kind} {ns}/{target_ref.name}: the API server does not serve "
                                  f"kind {target_ref.kind} in {target_ref.api_version}"), Validation())
        self._watches.synced(req, ROLE_TARGET, TARGET_SYNC_WAIT_SECONDS)
        try:
            handler = self._handlers.handler_for(target_ref.api_version, target_ref.kind)
            snap: TargetSnapshot = handler.read(ns, target_ref)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(INVALID_SPEC, str(err)),
                                      Validation())
        except TargetUnreadable as err:
            if err.retryable:
                sync.wait(CHAIN_RETRY_SECONDS / 2)
            return self._target_error(sync, scaler, status, TargetError(TARGET_UNREADABLE, str(err)),
                                      Validation())
        except StatusError as err:
            if not is_not_found(err):
                raise
            return self._target_error(sync, scaler, status, TargetError(
                TARGET_NOT_FOUND, f"{target_ref.kind} {ns}/{target_ref.name} not found"), Validation())

        # -- recommend
        started = self._clock.monotonic()
        current = snap.spec_replicas
        if trigger.type == TriggerType.METRICS:
            rr, metric_statuses_ = self._metrics_rec.recommend(sync, scaler, ann, mem, snap)
            status.current_metrics = metric_statuses_
        elif trigger.type == TriggerType.STATE:
            assert resolved is not None
            rr = recommend_state(resolved, ns)
            status.current_metrics = []
        else:
            rr = self._signal_rec.recommend(sync, scaler, mem, current)
            status.current_metrics = []

        # -- decide
        spec = scaler.spec
        behavior = Behavior.from_annotations(ann, min_replicas=spec.min_replicas,
                                             max_replicas=spec.max_replicas,
                                             defer_timeout_seconds=spec.defer_timeout_seconds)
        state = mem.state if mem.state is not None else PipelineState(
            deferred_since=epoch(status.deferred_since), last_forced_write=None)
        guard_target = GuardTarget(spec_replicas=snap.spec_replicas, generation=snap.generation,
                                   observed_generation=snap.observed_generation,
                                   status_replicas=snap.status_replicas,
                                   updated_replicas=snap.updated_replicas, ready_replicas=snap.ready_replicas)
        decision = decide(PipelineInput(
            now=sync.now, current_replicas=current, recommend=rr, behavior=behavior, target=guard_target,
            state=state, paused=ann.paused, paused_replicas=ann.paused_replicas, advisory=advisory))
        self._metrics.decision_latency.observe(max(0.0, self._clock.monotonic() - started))

        # -- write
        target_error: TargetError | None = None
        written = False
        if decision.write and self._allowed_to_write():
            try:
                handler.write_replicas(snap, decision.desired)
                written = True
                self._metrics.scale_writes.labels(req.namespace, req.name, "success").inc()
                _log.info("scaled %s %s/%s from %d to %d (%s)", snap.kind, ns, snap.name, current,
                          decision.desired, decision.reason)
            except StatusError as err:
                if is_conflict(err):
                    # the target changed since it was read: re-read and decide again at once
                    self._metrics.scale_writes.labels(req.namespace, req.name, "conflict").inc()
                    mem.state = decision.state_after_failed_write
                    return Result(requeue=True)
                self._metrics.scale_writes.labels(req.namespace, req.name, "error").inc()
                target_error = TargetError(TARGET_WRITE_FAILED, f"writing {snap.describe()}: {err}")
            except (ConnectionFailure, OSError, ValueError) as err:
                self._metrics.scale_writes.labels(req.namespace, req.name, "error").inc()
                target_error = TargetError(TARGET_WRITE_FAILED, f"writing {snap.describe()}: {err}")
        elif decision.write:
            return Result()  # no longer leader: write nothing, not even status
        mem.state = decision.state if target_error is None else decision.state_after_failed_write

        # -- report
        self._metrics.desired_replicas.labels(req.namespace, req.name).set(decision.desired)
        outcome = SyncOutcome(decision=decision, target_error=target_error, validation=Validation())
        events = self._apply_conditions(sync, status, generation, outcome)
        status.current_replicas = current
        status.desired_replicas = decision.desired
        since = mem.state.deferred_since
        status.deferred_since = wall(since) if since is not None else None
        if written:
            status.last_scale_time = sync.now_dt.replace(microsecond=0)
            status.record(RecentDecision(time=sync.now_dt, from_=current, to=decision.desired,
                                         reason=cap_text(decision.reason), bound_by=decision.bound_by))
        elif advisory and decision.would_write:
            last = status.recent_decisions[-1] if status.recent_decisions else None
            if last is None or (last.from_, last.to) != (current, decision.desired):
                status.record(RecentDecision(time=sync.now_dt, from_=current, to=decision.desired,
                                             reason=cap_text("Advisory mode (not written): "
                                                             + decision.reason),
                                             bound_by=decision.bound_by))
        self.emit(sync, events)
        self.write_status(sync, status)
        if target_error is not None:
            return Result(requeue=True)
        sync.wait(decision.requeue_after)
        return sync.result()

    def _target_error(self, sync: Sync, scaler: ElasticScaler, status: ElasticScalerStatus, err: TargetError,
                      validation: Validation | None) -> Result:
        events = self._apply_conditions(sync, status, scaler.metadata.generation or 0,
                                        SyncOutcome(target_error=err, validation=validation))
        self.emit(sync, events, action="GetScale")
        self.write_status(sync, status)
        return sync.result()


def _not_registered(name: str) -> str:
    try:
        get_algorithm(name)
    except AlgorithmNotRegistered as err:
        return str(err)
    return f"scaling algorithm {name!r} is not registered"
