"""The ElasticScaler reconciler (SPEC §3, §4, §5): level-based, one scaler per reconcile.

A reconcile reads the scaler from the informer cache and converges (never trusting the event
that woke it):

1. **Read and validate.** Gone → forget everything held for it (watches, windows, signals,
   metric series). Malformed or breaking a cross-field rule → ``Validated=False/InvalidSpec``.
2. **Route by trigger.** ``MetricsTrigger`` + ``HPA`` → the companion HPA (``_sync_hpa``); every
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
5. **Recommend** (metrics through the sample windows and the algorithm; the State source's
   ``status.desiredReplicas``; the signal rule), **decide** (``escaler.scaling.pipeline``),
   **write** the target only when the count changes (``ResourceHandler``, optimistic
   concurrency; a 409 requeues at once), **report** (``conditions_for``; events; status written
   only when it changed), and **requeue** at the earliest moment the answer can change.

MetricsTrigger polling is the ``MetricsPoller``'s job (``poller.py``); this reconciler only adds
per-trigger requeues (signal idle timeout and pull interval, stabilization and deferral ends).

Partial metrics: when some metrics have no usable value, the recommendation comes from the
others but never scales *down* (a missing metric could be the one asking for more replicas; the
HPA does the same).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from escaler.api.common import Mode, TargetRef
from escaler.api.conditions import Condition
from escaler.api.elasticscaler import (
    HPA_ALGORITHM,
    ElasticScaler,
    ElasticScalerStatus,
    MetricSpec,
    TriggerType,
)
from escaler.api.rules import validate
from escaler.api.scaler import MetricStatus, RecentDecision
from escaler.clock import Clock
from escaler.errors import ConnectionFailure, StatusError, is_conflict, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.informers.frozen import thaw
from escaler.kube.discovery import ResourceMapping
from escaler.kube.events import Recorder
from escaler.reconcilers.bindings import TargetBindings, TargetKey, claim_of
from escaler.reconcilers.elasticscaler.condset import ConditionSet
from escaler.reconcilers.elasticscaler.hpa import (
    HPA_API_VERSION,
    HPA_KIND,
    HPA_MIRRORED_CONDITIONS,
    UnsupportedMetric,
    desired_hpa,
    hpa_name,
    metadata_drift,
    metric_statuses,
    owned_by,
    spec_drift,
)
from escaler.reconcilers.elasticscaler.signal import SignalStore, recommend
from escaler.reconcilers.elasticscaler.state import (
    LABEL_NAME,
    ChainError,
    ObjectRef,
    desired_replicas_of,
    label_problem,
    resolve_chain,
)
from escaler.reconcilers.elasticscaler.status import StatusWriter
from escaler.reconcilers.elasticscaler.watches import ROLE_SOURCE, ROLE_TARGET, ScalerWatches
from escaler.reconcilers.scalermetrics import ScalerMetrics
from escaler.runtime.types import Request, Result
from escaler.scaling.algorithm import AlgorithmContext, MetricValue, NoDecision, Recommendation, is_usable
from escaler.scaling.annotations import AnnotationProblem, ScalerAnnotations, parse_annotations
from escaler.scaling.conditions import (
    TARGET_CHAIN_INVALID,
    TARGET_CONFLICT,
    TARGET_NOT_FOUND,
    TARGET_UNREADABLE,
    TARGET_WRITE_FAILED,
    UNSUPPORTED_METRIC,
    ConditionValue,
    EventValue,
    SyncOutcome,
    TargetError,
    Validation,
    conditions_for,
)
from escaler.scaling.conditions import (
    ALGORITHM_NOT_REGISTERED as R_ALGORITHM_NOT_REGISTERED,
)
from escaler.scaling.conditions import (
    INVALID_SPEC as R_INVALID_SPEC,
)
from escaler.scaling.endpoints import host_allowed
from escaler.scaling.guards import TargetSnapshot as GuardTarget
from escaler.scaling.pipeline import (
    Behavior,
    Decision,
    PipelineInput,
    PipelineState,
    RecommendResult,
    decide,
)
from escaler.scaling.registry import AlgorithmNotRegistered, get_algorithm, is_known_algorithm
from escaler.scaling.text import cap_text, format_time
from escaler.scaling.window import MetricWindows, WindowPolicy
from escaler.signals.collector import metric_name
from escaler.signals.sample import Sample
from escaler.signals.signal_pull import SignalReading
from escaler.targets.snapshot import TargetSnapshot, TargetUnreadable

__all__ = [
    "ALGORITHM_HISTORY",
    "CHAIN_RETRY_SECONDS",
    "SOURCE_SYNC_WAIT_SECONDS",
    "Collector",
    "ElasticScalerReconciler",
    "HandlerLookup",
    "KubeWriter",
]

# past raw recommendations given to an algorithm (AlgorithmContext.history)
ALGORITHM_HISTORY = 64
# how long a reconcile waits for a freshly started source/target informer to list
SOURCE_SYNC_WAIT_SECONDS = 5.0
# retry interval when nothing can wake the scaler (an unserved kind in the chain, say)
CHAIN_RETRY_SECONDS = 60.0
# requeue while an informer this scaler needs has not synced yet
NOT_SYNCED_RETRY_SECONDS = 1.0
# the reason of the Warning event reporting an unusable annotation (SPEC §5.4)
EVENT_INVALID_ANNOTATION = "InvalidAnnotation"
# a companion HPA write or delete
EVENT_HPA = "CompanionHPA"

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


class Collector(Protocol):
    """``MetricsCollector``: one ``Sample`` per metric, in spec order."""

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]: ...

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue: ...


class Mapper(Protocol):
    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping: ...


class Store(Protocol):
    def get_by_key(self, key: str) -> Any: ...


@dataclass
class _Memory:
    """What this process keeps about one scaler between syncs (lost on restart, by design)."""

    # metadata.uid of the scaler this memory belongs to (a recreated scaler starts afresh)
    uid: str
    # the metric sample windows (MetricsTrigger)
    windows: MetricWindows = field(default_factory=MetricWindows)
    # the pipeline state (stabilization history, deferral); None until the first decision
    state: PipelineState | None = None
    # past raw recommendations of the algorithm, oldest first (AlgorithmContext.history)
    algorithm_history: tuple[Recommendation, ...] = ()
    # annotation problems already reported as Warning events
    reported: frozenset[str] = frozenset()
    # monotonic time of the next SignalTrigger endpoint pull
    next_pull: float = 0.0
    # the last pull's error (kept until the next pull)
    pull_error: str | None = None


@dataclass
class _Sync:
    """One reconcile's inputs and accumulating outputs."""

    req: Request
    # the cached object (frozen)
    obj: Mapping[str, Any]
    # wall-clock now, epoch seconds and datetime
    now: float
    now_dt: datetime
    # requeue candidates (seconds)
    waits: list[float] = field(default_factory=list)

    @property
    def now_iso(self) -> str:
        return format_time(self.now)

    def wait(self, seconds: float | None) -> None:
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            self.waits.append(seconds)

    def result(self) -> Result:
        return Result(requeue_after=min(self.waits)) if self.waits else Result()


def _to_value(c: Condition) -> ConditionValue:
    return ConditionValue(type=c.type, status=str(c.status), reason=c.reason, message=c.message,
                          observed_generation=c.observed_generation or 0,
                          last_transition_time=format_time(c.last_transition_time.timestamp()))


def _to_condition(v: ConditionValue) -> Condition:
    return Condition.model_validate({
        "type": v.type, "status": v.status, "reason": v.reason, "message": v.message,
        "observedGeneration": v.observed_generation, "lastTransitionTime": v.last_transition_time})


def _epoch(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(math.floor(seconds), UTC)


def _regarding(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"apiVersion": ElasticScaler.API_VERSION, "kind": ElasticScaler.KIND,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")
                         if meta.get(k)}}


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
        can_write: threading.Event | None = None,
        source_selector_namespace: str = "",
    ) -> None:
        # caches (the ElasticScaler and HPA informers' stores); fixed
        self._scalers = scalers
        self._hpas = hpas
        # API writes, kind resolution, target handlers, metric collection; fixed
        self._client = client
        self._mapper = mapper
        self._handlers = handlers
        self._collector = collector
        self._recorder = recorder
        self._clock = clock
        self._metrics = metrics
        self._bindings = bindings
        self._watches = watches
        self._signals = signals
        self._pull = signal_puller
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)
        # the manager's write fence; None = always allowed
        self._can_write = can_write
        # namespace scope of the source informers ("" = all namespaces)
        self._source_ns = source_selector_namespace
        # status writes only when changed
        self.status_writer = StatusWriter(client)
        # guards _memory (entries are only touched by the reconcile of their own key)
        self._mu = threading.Lock()
        # scaler → what this process remembers about it
        self._memory: dict[Request, _Memory] = {}
        # the mapping of HPAs; resolved on first use
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
        sync = _Sync(req, obj, now_dt.timestamp(), now_dt)
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
            self._delete_companion(sync, scaler)
        if problems:
            self._watches.drop(req, ROLE_TARGET)
            return self._hold_invalid(sync, scaler, Validation(R_INVALID_SPEC, "; ".join(problems)))
        policies = trigger.type == TriggerType.METRICS and not is_hpa
        ann, ann_problems = parse_annotations(scaler.metadata.annotations, policies=policies or is_hpa)
        self._report_annotation_problems(sync, mem, ann_problems)
        if is_hpa:
            self._watches.drop(req, ROLE_TARGET)
            return self._sync_hpa(sync, scaler, ann)
        if trigger.type == TriggerType.METRICS and not is_known_algorithm(algorithm):
            self._watches.drop(req, ROLE_TARGET)
            return self._hold_invalid(sync, scaler, Validation(
                R_ALGORITHM_NOT_REGISTERED,
                f"spec.trigger.metricsTrigger.scalingAlgorithm: {AlgorithmNotRegistered_message(algorithm)}"))
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

    def _memory_for(self, req: Request, uid: str) -> _Memory:
        with self._mu:
            mem = self._memory.get(req)
            if mem is None or mem.uid != uid:
                mem = self._memory[req] = _Memory(uid=uid)
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

    def _emit(self, sync: _Sync, events: Sequence[EventValue], action: str = "Scale") -> None:
        regarding = _regarding(sync.obj)
        for ev in events:
            t = "Warning" if ev.type == "Warning" else "Normal"
            try:
                self._recorder.event(regarding, t, ev.reason, action, ev.note)
            except ValueError:
                _log.exception("cannot record event %s", ev.reason)

    def _report_annotation_problems(self, sync: _Sync, mem: _Memory, problems: list[AnnotationProblem]) -> None:
        new = [p for p in problems if p.fallback_message() not in mem.reported]
        if not new:
            return
        self._emit(sync, [EventValue("Warning", EVENT_INVALID_ANNOTATION, p.fallback_message()) for p in new],
                   action="ParseAnnotations")
        mem.reported = mem.reported | {p.fallback_message() for p in new}

    def _previous_status(self, sync: _Sync) -> ElasticScalerStatus:
        raw = sync.obj.get("status")
        if isinstance(raw, Mapping):
            try:
                return ElasticScalerStatus.model_validate(thaw(raw))
            except ValidationError:
                _log.warning("status of %s does not parse; rewriting it", sync.req)
        return ElasticScalerStatus()

    def _write_status(self, sync: _Sync, status: ElasticScalerStatus) -> None:
        new = status.to_object()
        try:
            self.status_writer.write(self._scaler_map(), sync.obj, new)
        except StatusError as err:
            if is_not_found(err):
                return  # deleted meanwhile; the delete event forgets it
            raise

    def _apply_conditions(self, sync: _Sync, status: ElasticScalerStatus, generation: int,
                          outcome: SyncOutcome) -> list[EventValue]:
        previous = [_to_value(c) for c in status.conditions]
        conds, events = conditions_for(outcome, generation, sync.now_iso, previous)
        status.conditions = [_to_condition(c) for c in conds]
        status.observed_generation = generation
        return events

    # ------------------------------------------------------------------ holds before any decision

    def _invalid_object(self, sync: _Sync, err: ValidationError) -> Result:
        """The object does not parse (stored before a schema rule, or edited around it)."""
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])
        meta = sync.obj.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        raw = sync.obj.get("status")
        old = thaw(raw) if isinstance(raw, Mapping) else {}
        cs = ConditionSet(old.get("conditions") or (), generation, sync.now_dt)
        cs.set("Validated", False, R_INVALID_SPEC, cap_text(f"the object does not parse: {details}"))
        cs.set("ScalingActive", False, R_INVALID_SPEC, cap_text(f"the object does not parse: {details}"))
        new = dict(old)
        new["observedGeneration"] = generation
        new["conditions"] = [c.to_object() for c in cs.conditions()]
        self.status_writer.write(self._scaler_map(), sync.obj, new)
        _log.warning("ElasticScaler %s does not parse: %s", sync.req, details)
        return Result()

    def _hold_invalid(self, sync: _Sync, scaler: ElasticScaler, validation: Validation,
                      requeue: float | None = None) -> Result:
        status = self._previous_status(sync)
        events = self._apply_conditions(sync, status, scaler.metadata.generation or 0,
                                        SyncOutcome(validation=validation))
        self._emit(sync, events)
        self._write_status(sync, status)
        sync.wait(requeue)
        return sync.result()

    # ------------------------------------------------------------------ MetricsTrigger + HPA

    def _delete_companion(self, sync: _Sync, scaler: ElasticScaler) -> None:
        """Delete our companion HPA if it exists (the scaler left the HPA path, or may not scale)."""
        name = hpa_name(scaler.name)
        existing = self._hpas.get_by_key(f"{scaler.namespace}/{name}")
        if existing is None or not owned_by(existing, scaler.metadata.uid or "") or not self._allowed_to_write():
            return
        try:
            self._client.delete(self._hpa_map(), name, scaler.namespace,
                                preconditions_uid=str(existing["metadata"].get("uid") or "") or None)
        except StatusError as err:
            if not is_not_found(err):
                raise
        self._emit(sync, [EventValue("Normal", EVENT_HPA, f"deleted the companion HPA {name}")], action="Delete")
        _log.info("deleted companion HPA %s/%s", scaler.namespace, name)

    def _sync_hpa(self, sync: _Sync, scaler: ElasticScaler, ann: ScalerAnnotations) -> Result:
        ns, name = scaler.namespace, hpa_name(scaler.name)
        generation = scaler.metadata.generation or 0
        status = self._previous_status(sync)
        status.hpa_name = name
        status.resolved_target_ref = TargetRef(api_version=scaler.spec.target_ref.api_version,
                                               kind=scaler.spec.target_ref.kind,
                                               name=scaler.spec.target_ref.name)
        existing = self._hpas.get_by_key(f"{ns}/{name}")
        pinned: int | None = None
        if ann.paused_replicas is not None:
            pinned = ann.paused_replicas
        elif ann.paused:
            pinned = self._hpa_current(existing, status)
        try:
            desired = desired_hpa(scaler, ann, pinned_replicas=pinned)
        except UnsupportedMetric as err:
            return self._hold_invalid(sync, scaler, Validation(UNSUPPORTED_METRIC, str(err)))
        if scaler.spec.mode == Mode.ADVISORY:
            self._delete_companion(sync, scaler)
            cs = ConditionSet(status.conditions, generation, sync.now_dt)
            cs.set("Validated", True, "Valid", "the spec is valid")
            cs.set("ScalingActive", False, "ScalingDisabled",
                   "Advisory mode with scalingAlgorithm HPA: the companion HPA is not created (it would "
                   "scale the target); use an escaler algorithm such as apa to get advisory decisions")
            status.conditions = cs.conditions()
            status.observed_generation = generation
            self._write_status(sync, status)
            return Result()
        conflict = self._conflict(scaler, TargetKey.from_ref(ns, scaler.spec.target_ref.api_version,
                                                             scaler.spec.target_ref.kind,
                                                             scaler.spec.target_ref.name),
                                  ignore_hpa=name)
        if existing is not None and not owned_by(existing, scaler.metadata.uid or ""):
            conflict = (f"HorizontalPodAutoscaler {ns}/{name} exists and is not controlled by this "
                        "ElasticScaler; delete or rename it")
        if conflict is not None:
            self._delete_companion(sync, scaler)
            return self._hold_invalid(sync, scaler, Validation(TARGET_CONFLICT, conflict))
        hpa = existing
        if self._allowed_to_write():
            hpa = self._converge_hpa(sync, existing, desired)
        self._mirror_hpa(sync, scaler, status, hpa, generation, pinned)
        self._write_status(sync, status)
        return Result()

    @staticmethod
    def _hpa_current(existing: Mapping[str, Any] | None, status: ElasticScalerStatus) -> int:
        st = existing.get("status") if existing is not None else None
        if isinstance(st, Mapping) and isinstance(st.get("currentReplicas"), int):
            return int(st["currentReplicas"])
        return status.current_replicas or 1

    def _converge_hpa(self, sync: _Sync, existing: Mapping[str, Any] | None,
                      desired: dict[str, Any]) -> Mapping[str, Any] | None:
        name = desired["metadata"]["name"]
        if existing is None:
            try:
                created = self._client.create(self._hpa_map(), desired)
            except StatusError as err:
                if err.code == 409:  # AlreadyExists: the cache is behind; next sync compares
                    return None
                raise
            self._emit(sync, [EventValue("Normal", EVENT_HPA, f"created the companion HPA {name}")],
                       action="Create")
            _log.info("created companion HPA %s", name)
            return created
        drift = spec_drift(desired, existing)
        if not drift and not metadata_drift(desired, existing):
            return existing
        obj = thaw(existing)
        obj["spec"] = desired["spec"]
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **desired["metadata"]["labels"]}
        refs = [r for r in meta.get("ownerReferences") or () if r.get("controller") is not True]
        meta["ownerReferences"] = [*refs, *desired["metadata"]["ownerReferences"]]
        try:
            updated = self._client.update(self._hpa_map(), obj)
        except StatusError as err:
            if is_conflict(err):
                return existing  # changed meanwhile: its update event requeues us
            raise
        what = ", ".join(f"spec.{f}" for f in drift) or "metadata"
        self._emit(sync, [EventValue("Normal", EVENT_HPA, f"updated the companion HPA {name} ({what})")],
                   action="Update")
        _log.info("updated companion HPA %s (%s)", name, what)
        return updated

    def _mirror_hpa(self, sync: _Sync, scaler: ElasticScaler, status: ElasticScalerStatus,
                    hpa: Mapping[str, Any] | None, generation: int, pinned: int | None) -> None:
        cs = ConditionSet(status.conditions, generation, sync.now_dt)
        cs.set("Validated", True, "Valid", "the spec is valid")
        cs.remove("MetricsPipeline")
        hst = hpa.get("status") if hpa is not None else None
        hst = hst if isinstance(hst, Mapping) else {}
        by_type = {c.get("type"): c for c in hst.get("conditions") or () if isinstance(c, Mapping)}
        hname = hpa_name(scaler.name)
        for t in HPA_MIRRORED_CONDITIONS:
            c = by_type.get(t)
            if c is None:
                if t != "ScalingLimited":
                    cs.set(t, "Unknown", "WaitingForHPA",
                           f"the HorizontalPodAutoscaler {hname} has not reported {t} yet")
                continue
            reason = str(c.get("reason") or "Unknown")
            message = f"HPA {hname}: {c.get('message', '')}"
            if t == "AbleToScale" and pinned is not None:
                reason, message = "Paused", (f"the companion HPA is pinned to {max(1, pinned)} replicas by "
                                             f"elasticscaler.io/{'paused-replicas' if scaler.metadata.annotations and 'elasticscaler.io/paused-replicas' in scaler.metadata.annotations else 'paused'}; "
                                             + message)
            cs.set(t, str(c.get("status") or "Unknown"), reason, message)
        status.conditions = cs.conditions()
        status.observed_generation = generation
        prev_current = status.current_replicas
        if isinstance(hst.get("currentReplicas"), int):
            status.current_replicas = int(hst["currentReplicas"])
        if isinstance(hst.get("desiredReplicas"), int):
            status.desired_replicas = int(hst["desiredReplicas"])
        last = hst.get("lastScaleTime")
        if isinstance(last, str):
            try:
                new_last = datetime.fromisoformat(last.replace("Z", "+00:00"))
            except ValueError:
                new_last = None
            if new_last is not None and new_last != status.last_scale_time:
                if status.last_scale_time is not None and status.desired_replicas is not None:
                    status.record(RecentDecision(
                        time=new_last, from_=prev_current or 0, to=status.desired_replicas,
                        reason=f"HorizontalPodAutoscaler {hname} rescaled the target", bound_by=None))
                status.last_scale_time = new_last
        status.current_metrics = metric_statuses(scaler, hpa)
        status.deferred_since = None

    # ------------------------------------------------------------------ conflicts

    def _conflict(self, scaler: ElasticScaler, target: TargetKey, ignore_hpa: str | None = None) -> str | None:
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

    def _watch_target(self, sync: _Sync, namespace: str, ref: ObjectRef) -> ResourceMapping:
        """Watch ``ref``'s kind in ``namespace`` (enqueues on its changes); raises like mapping_for."""
        m = self._mapper.mapping_for(ref.api_version, ref.kind)
        key = ResourceKey(m.group, m.version, m.resource, namespace=namespace if m.namespaced else "")
        name = ref.name
        self._watches.ensure(sync.req, ROLE_TARGET, key, lambda o: (o.get("metadata") or {}).get("name") == name)
        return m

    def target_cache_get(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Informer-cache lookup for the ResourceHandlers (``CacheGet``): only synced target watches."""
        return self._watches.lookup(api_version, kind, namespace, name, self._mapper)

    # ------------------------------------------------------------------ every other trigger

    def _sync_workload(self, sync: _Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: _Memory) -> Result:
        req, ns = sync.req, scaler.namespace
        generation = scaler.metadata.generation or 0
        status = self._previous_status(sync)
        status.hpa_name = None
        trigger = scaler.spec.trigger
        source_obj: Mapping[str, Any] | None = None
        source_ref: ObjectRef | None = None

        # -- the target
        if trigger.type == TriggerType.STATE:
            resolved = self._resolve_state(sync, scaler)
            if isinstance(resolved, Result):
                return resolved
            source_ref, source_obj, target_ref = resolved
        else:
            ref = scaler.spec.target_ref
            target_ref = ObjectRef(ref.api_version, ref.kind, ref.name)
        status.resolved_target_ref = TargetRef(api_version=target_ref.api_version, kind=target_ref.kind,
                                               name=target_ref.name)
        try:
            target_key = TargetKey.from_ref(ns, target_ref.api_version, target_ref.kind, target_ref.name)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(
                R_INVALID_SPEC, f"spec.targetRef.apiVersion: {err}"), Validation())

        # -- conflicts (Advisory never writes, so it neither claims nor conflicts)
        advisory = scaler.spec.mode == Mode.ADVISORY
        if not advisory:
            conflict = self._conflict(scaler, target_key)
            if conflict is not None:
                self._watches.drop(req, ROLE_TARGET)
                outcome = SyncOutcome(validation=Validation(TARGET_CONFLICT, conflict))
                events = self._apply_conditions(sync, status, generation, outcome)
                self._emit(sync, events)
                self._write_status(sync, status)
                return sync.result()

        # -- read the target (from the watch cache when synced)
        try:
            self._watch_target(sync, ns, target_ref)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(R_INVALID_SPEC, str(err)), Validation())
        except StatusError as err:
            if not is_not_found(err):
                raise
            sync.wait(CHAIN_RETRY_SECONDS)
            return self._target_error(sync, scaler, status, TargetError(
                TARGET_NOT_FOUND, f"{target_ref.kind} {ns}/{target_ref.name}: the API server does not serve "
                                  f"kind {target_ref.kind} in {target_ref.api_version}"), Validation())
        self._watches.synced(req, ROLE_TARGET, SOURCE_SYNC_WAIT_SECONDS)
        try:
            handler = self._handlers.handler_for(target_ref.api_version, target_ref.kind)
            snap: TargetSnapshot = handler.read(ns, target_ref)
        except ValueError as err:
            return self._target_error(sync, scaler, status, TargetError(R_INVALID_SPEC, str(err)), Validation())
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
            rr, metric_statuses_ = self._recommend_metrics(sync, scaler, ann, mem, snap)
            status.current_metrics = metric_statuses_
        elif trigger.type == TriggerType.STATE:
            assert source_obj is not None and source_ref is not None
            rr = self._recommend_state(source_ref, source_obj, ns)
            status.current_metrics = []
        else:
            rr = self._recommend_signal(sync, scaler, mem, current)
            status.current_metrics = []

        # -- decide
        spec = scaler.spec
        behavior = Behavior.from_annotations(ann, min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
                                             defer_timeout_seconds=spec.defer_timeout_seconds)
        state = mem.state if mem.state is not None else PipelineState(
            deferred_since=_epoch(status.deferred_since), last_forced_write=None)
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
        status.deferred_since = _dt(mem.state.deferred_since) if mem.state.deferred_since is not None else None
        if written:
            status.last_scale_time = sync.now_dt.replace(microsecond=0)
            status.record(RecentDecision(time=sync.now_dt, from_=current, to=decision.desired,
                                         reason=cap_text(decision.reason), bound_by=decision.bound_by))
        elif advisory and decision.would_write:
            last = status.recent_decisions[-1] if status.recent_decisions else None
            if last is None or (last.from_, last.to) != (current, decision.desired):
                status.record(RecentDecision(time=sync.now_dt, from_=current, to=decision.desired,
                                             reason=cap_text("Advisory mode (not written): " + decision.reason),
                                             bound_by=decision.bound_by))
        self._emit(sync, events)
        self._write_status(sync, status)
        if target_error is not None:
            return Result(requeue=True)
        sync.wait(decision.requeue_after)
        return sync.result()

    def _target_error(self, sync: _Sync, scaler: ElasticScaler, status: ElasticScalerStatus, err: TargetError,
                      validation: Validation | None) -> Result:
        events = self._apply_conditions(sync, status, scaler.metadata.generation or 0,
                                        SyncOutcome(target_error=err, validation=validation))
        self._emit(sync, events, action="GetScale")
        self._write_status(sync, status)
        return sync.result()

    # ------------------------------------------------------------------ StateTrigger

    def _resolve_state(self, sync: _Sync, scaler: ElasticScaler) -> tuple[ObjectRef, Mapping[str, Any], ObjectRef] | Result:
        req, ns = sync.req, scaler.namespace
        ref = scaler.spec.target_ref
        source = ObjectRef(ref.api_version, ref.kind, ref.name)
        try:
            m = self._mapper.mapping_for(ref.api_version, ref.kind)
        except ValueError as err:
            return self._hold_invalid(sync, scaler, Validation(TARGET_CHAIN_INVALID, f"spec.targetRef: {err}"))
        except StatusError as err:
            if not is_not_found(err):
                raise
            return self._hold_invalid(sync, scaler, Validation(
                TARGET_CHAIN_INVALID, f"spec.targetRef: the API server does not serve kind {ref.kind} in "
                                      f"{ref.api_version}"), requeue=CHAIN_RETRY_SECONDS)
        key = ResourceKey(m.group, m.version, m.resource,
                          namespace=self._source_ns if m.namespaced else "", label_selector=LABEL_NAME)
        me = (req.namespace, req.name)

        def mine(obj: Mapping[str, Any]) -> bool:
            from escaler.reconcilers.elasticscaler.state import request_for_source
            return request_for_source(obj) == me

        self._watches.ensure(req, ROLE_SOURCE, key, mine)
        if not self._watches.synced(req, ROLE_SOURCE, SOURCE_SYNC_WAIT_SECONDS):
            return Result(requeue_after=NOT_SYNCED_RETRY_SECONDS)
        scaler_ref = ObjectRef(ElasticScaler.API_VERSION, ElasticScaler.KIND, scaler.name)
        label_issue: list[str] = []

        def read(r: ObjectRef) -> Mapping[str, Any] | None:
            if r is source or r == source:
                cached = self._watches.cached(req, ROLE_SOURCE, ns, r.name)
                if cached is not None:
                    return cached
            obj = self._get(r, ns)
            if obj is not None and (r is source or r == source):
                problem = label_problem(obj, ns, scaler.name)
                if problem:
                    label_issue.append(f"state source {r.describe()} {problem}")
            return obj

        try:
            chain = resolve_chain(scaler_ref, source, read)
        except ChainError as err:
            # watch what is missing, so that its creation wakes the scaler
            self._watch_missing(sync, ns, str(err), scaler)
            return self._hold_invalid(sync, scaler, Validation(TARGET_CHAIN_INVALID, str(err)))
        except StatusError as err:
            if not is_not_found(err):
                raise
            return self._hold_invalid(sync, scaler, Validation(TARGET_CHAIN_INVALID, f"targetRef chain: {err}"),
                                      requeue=CHAIN_RETRY_SECONDS)
        if label_issue:
            # readable with a GET but invisible to the label-selected informer: no event would reach us
            status = self._previous_status(sync)
            decision_rr = RecommendResult.no_decision(f"state source {source.describe()}", label_issue[0],
                                                      kind="Decision")
            del decision_rr
            return self._hold_invalid(sync, scaler, Validation(TARGET_CHAIN_INVALID, label_issue[0]),
                                      requeue=CHAIN_RETRY_SECONDS) if not status else \
                self._hold_invalid(sync, scaler, Validation(TARGET_CHAIN_INVALID, label_issue[0]),
                                   requeue=CHAIN_RETRY_SECONDS)
        return source, chain.source, chain.target

    def _watch_missing(self, sync: _Sync, ns: str, message: str, scaler: ElasticScaler) -> None:
        del sync, ns, message, scaler  # the chain objects' own watches wake the scaler (see _get)

    def _get(self, ref: ObjectRef, namespace: str) -> Mapping[str, Any] | None:
        """One chain hop: from a synced target-watch cache when we hold one, else a GET."""
        cached = self._watches.lookup(ref.api_version, ref.kind, namespace, ref.name, self._mapper)
        if cached is not None:
            return cached
        try:
            return self._client.get((ref.api_version, ref.kind), ref.name, namespace)
        except StatusError as err:
            if is_not_found(err):
                return None
            raise

    @staticmethod
    def _recommend_state(source: ObjectRef, obj: Mapping[str, Any], ns: str) -> RecommendResult:
        who = f"{source.kind} {ns}/{source.name}"
        desired = desired_replicas_of(obj)
        if desired is None:
            status = obj.get("status")
            raw = status.get("desiredReplicas") if isinstance(status, Mapping) else None
            why = "has no status.desiredReplicas" if raw is None else f"status.desiredReplicas is {raw!r}, " \
                                                                      "not an integer >= 0"
            return RecommendResult.no_decision(f"state source {who}", why, kind="Decision")
        return RecommendResult.from_decision(desired, source=f"state source {who}",
                                             detail=f"{who} status.desiredReplicas {desired}")

    # ------------------------------------------------------------------ SignalTrigger

    def _recommend_signal(self, sync: _Sync, scaler: ElasticScaler, mem: _Memory, current: int) -> RecommendResult:
        st = scaler.spec.trigger.signal_trigger
        endpoint = st.endpoint if st else None
        poll = float(st.poll_interval_seconds if st else 10)
        idle = float(st.idle_timeout_seconds if st else 600)
        activation = int(st.activation_replicas if st else 1)
        mono = self._clock.monotonic()
        entry = self._signals.seen(sync.req, mono)
        if endpoint:
            host = ""
            try:
                from escaler.scaling.endpoints import check_endpoint_url
                host = check_endpoint_url(endpoint)
            except ValueError as err:
                return RecommendResult.invalid(f"spec.trigger.signalTrigger.endpoint: {err}", kind="Decision")
            if not host_allowed(host, self._allowed_hosts):
                return RecommendResult.invalid(
                    f"spec.trigger.signalTrigger.endpoint: host {host} is not in --allowed-endpoint-hosts",
                    kind="Decision")
            if mono >= mem.next_pull and self._pull is not None:
                reading = self._pull(endpoint, min(poll, 5.0))
                mem.next_pull = mono + poll
                if reading.error is not None:
                    mem.pull_error = reading.error
                    self._metrics.metric_errors.labels(sync.req.namespace, sync.req.name).inc()
                else:
                    mem.pull_error = None
                    from escaler.reconcilers.elasticscaler.signal import Signal
                    entry = self._signals.record(sync.req, Signal(reading.active, reading.replicas), mono,
                                                 self._clock.now())
            sync.wait(max(0.1, mem.next_pull - mono))
            if mem.pull_error is not None:
                return RecommendResult.no_decision(f"signal endpoint {endpoint}", mem.pull_error, kind="Decision")
        rec = recommend(entry, mono, current=current, min_replicas=scaler.spec.min_replicas,
                        idle_timeout=idle, activation_replicas=activation)
        if rec.idle:
            self._signals.expire(sync.req)
        else:
            sync.wait(rec.idle_in)
        source = "push signals" if not endpoint else f"signals (pushed, and pulled from {endpoint})"
        return RecommendResult.from_decision(rec.replicas, source=source, detail=rec.reason,
                                             can_scale_from_zero=True)

    # ------------------------------------------------------------------ MetricsTrigger + algorithm

    def _recommend_metrics(self, sync: _Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: _Memory,
                           snap: TargetSnapshot) -> tuple[RecommendResult, list[MetricStatus]]:
        mt = scaler.spec.trigger.metrics_trigger
        assert mt is not None
        total = len(mt.metrics)
        mono = self._clock.monotonic()
        mem.windows.policy = WindowPolicy.from_annotations(ann)
        mem.windows.retain(metric_name(m) for m in mt.metrics)
        current = snap.spec_replicas
        # endpoints outside --allowed-endpoint-hosts are refused before any request
        for i, m in enumerate(mt.metrics):
            if m.external_server is not None and self._allowed_hosts:
                try:
                    from escaler.scaling.endpoints import check_endpoint_url
                    host = check_endpoint_url(m.external_server.endpoint)
                except ValueError as err:
                    return RecommendResult.invalid(
                        f"spec.trigger.metricsTrigger.metrics[{i}].externalServer.endpoint: {err}", total=total), []
                if not host_allowed(host, self._allowed_hosts):
                    return RecommendResult.invalid(
                        f"spec.trigger.metricsTrigger.metrics[{i}].externalServer.endpoint: host {host} is not "
                        "in --allowed-endpoint-hosts", total=total), []
        if self._collector is None:
            return RecommendResult.no_decision("metrics", "no metrics collector configured", total=total), []
        samples = self._collector.collect(scaler.namespace, mt.metrics, snap, current)
        values: list[MetricValue] = []
        statuses: list[MetricStatus] = []
        errors: list[str] = []
        try:
            for spec, sample in samples:
                name = metric_name(spec)
                if sample.value is not None:
                    mem.windows.add(name, mono, sample.value)
                else:
                    errors.append(f"{name}: {sample.error}")
                    self._metrics.metric_errors.labels(sync.req.namespace, sync.req.name).inc()
                aggregated = mem.windows.aggregate(name, mono)
                mv = self._collector.to_metric_value(spec, Sample(value=aggregated) if aggregated is not None
                                                     else Sample(value=None, error=sample.error or "no sample"))
                values.append(mv)
                statuses.append(MetricStatus(
                    name=name[:1024], type=str(spec.type), value=aggregated, target=mv.target_value,
                    target_type=mv.target_type,
                    error=cap_text(sample.error) if sample.error is not None else None))
        except NoDecision as err:
            # missingDataPolicy Fail
            return RecommendResult.no_decision("metrics", str(err), total=total,
                                               metric_errors=tuple(errors)), statuses
        except ValueError as err:
            return RecommendResult.invalid(f"spec.trigger.metricsTrigger.metrics: {err}", total=total), statuses
        finally:
            mem.windows.gc(mono)
        usable = [v for v in values if is_usable(v.value)]
        if not usable:
            return RecommendResult.no_decision(
                "metrics", "; ".join(errors) or "no usable sample in the window", total=total,
                metric_errors=tuple(errors), can_scale_from_zero=False), statuses
        try:
            algorithm = get_algorithm(mt.scaling_algorithm)
        except AlgorithmNotRegistered as err:
            return RecommendResult.invalid(str(err), total=total), statuses
        config = mt.algorithm_config or {}
        try:
            raw = algorithm(AlgorithmContext(current_replicas=current, metrics=tuple(usable), config=config,
                                             history=mem.algorithm_history))
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise ValueError(f"algorithm {mt.scaling_algorithm!r} returned {raw!r}, not an integer >= 0")
        except NoDecision as err:
            return RecommendResult.no_decision("metrics", str(err), evaluated=len(usable), total=total,
                                               metric_errors=tuple(errors), can_scale_from_zero=False), statuses
        except ValueError as err:
            return RecommendResult.invalid(f"spec.trigger.metricsTrigger: {err}", total=total), statuses
        # per-metric recommendations (what each metric alone says), for status.currentMetrics
        by_name = {v.name: v for v in usable}
        for i, st in enumerate(statuses):
            mv = by_name.get(st.name)
            if mv is None:
                continue
            try:
                alone = algorithm(AlgorithmContext(current_replicas=current, metrics=(mv,), config=config,
                                                   history=mem.algorithm_history))
                statuses[i] = st.model_copy(update={"recommended_replicas": alone})
            except (NoDecision, ValueError):
                pass
        detail_parts = [f"{v.name[:80]} {v.value:g}/{v.target_value:g} ({v.target_type})" for v in usable
                        if v.value is not None]
        if len(usable) < total:
            # partial metrics: never scale down on them
            if raw < current:
                detail_parts.append(f"partial metrics: scale-down to {raw} suppressed")
                raw = current
        mem.algorithm_history = (*mem.algorithm_history, Recommendation(time=sync.now, replicas=raw))[
            -ALGORITHM_HISTORY:]
        return RecommendResult.from_metrics(raw, evaluated=len(usable), total=total,
                                            detail=", ".join(detail_parts), metric_errors=tuple(errors),
                                            can_scale_from_zero=False), statuses


def AlgorithmNotRegistered_message(name: str) -> str:  # noqa: N802 - reads as the error it builds
    try:
        get_algorithm(name)
    except AlgorithmNotRegistered as err:
        return str(err)
    return f"scaling algorithm {name!r} is not registered"


_ = (time, replace, Decision)
