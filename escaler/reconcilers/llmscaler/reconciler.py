"""The LLMScaler reconciler (docs/concepts.md, docs/llmscaler.md): level-based, one scaler per reconcile, in
the shape of the ElasticScaler's and on its machinery.

A reconcile reads the scaler from the informer cache and converges; each step returns its value or
a ``Hold`` (``escaler.reconcilers.kit.sync.Hold``), and the shared ``Reporter``
(``ReportedKind`` ``LLM_REPORTED``: LLMScaler status, the deprecated ``DecisionAvailable`` mirror)
turns either into status and events::

    load       the cached object → LLMScaler, parsed and validated once per resourceVersion; a spec
               rule other than the missing provider section → Validated=False/InvalidSpec and
               ScalingActive=False/InvalidSpec (hold); an object that does not parse says so; an
               unusable pause annotation (``elasticscaler.io/paused``, ``paused-replicas``) falls
               back to its default and is reported once as a Warning event (InvalidAnnotation), as
               the ElasticScaler does
    claim      the shared ``TargetBindings``: an older scaler of any kind on the same target, or an
               HPA escaler does not own → Validated=False/TargetConflict, never writes; an
               unparsable targetRef.apiVersion → AbleToScale=False/InvalidSpec
    read       the target through ``kit.targetread.TargetReader`` (watch cache, ResourceHandler, pods
               for InsufficientCapacity) → AbleToScale=False/TargetNotFound / TargetUnreadable /
               InvalidSpec on failure (only AbleToScale and observedGeneration are written)
    recommend  ``recommend.LLMRecommender``: Prometheus (max of ceil(value / targetPerReplica) over
               the usable metrics), the custom provider, or flow sizing (``flow``: its state kept
               in this memory, per scaler object), off the reconcile worker on the outbound
               executor (the sync that starts a read writes nothing; its completion wakes us)
    fallback   with ``spec.fallback``: the consecutive polls (a new reading, not a reused one)
               without a usable signal, seeded once from ``status.fallback`` — the ElasticScaler's
               rule (``count_poll``); the pipeline engages it at ``failureThreshold``
    floor      ``spec.floorFrom``: the named Tidal of this namespace at now, from the Tidal cache
               (``escaler.reconcilers.kit.floor``): the pipeline's floor step and its requeue at the
               next rule start or end, as for the ElasticScaler
    decide     ``escaler.scaling.pipeline.decide`` with ``Behavior.for_llmscaler``: scale-down
               stabilization and ``maxStepReplicas``, no scale-up cap (never ScaleUpLimit), the
               clamp to [min, max] last, the deferral guards and ``deferTimeoutSeconds`` — the
               ElasticScaler's code, unchanged; a restart seeds the state from status
    write      only when the count changes, only while the manager may write (the fence), with
               optimistic concurrency (a 409 decides again at once); ``lastScaleTime`` only after
               a successful write
    report     conditions (``escaler.scaling.conditions``, ``decision_available``), events, status —
               written only when changed

and requeues at the earliest moment the answer can change. The poller (``setup``) enqueues every
LLMScaler once per ``--metrics-trigger-poll-interval``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from escaler.api.common import Mode
from escaler.api.llmscaler import LLMScaler, LLMScalerStatus
from escaler.api.rules import validate
from escaler.clock import Clock
from escaler.reconcilers.kit.bindings import TargetBindings, TargetKey, claim_of
from escaler.reconcilers.kit.fallback import advance_fallback
from escaler.reconcilers.kit.floor import FloorReader
from escaler.reconcilers.kit.poller import (
    DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    clamp_events,
)
from escaler.reconcilers.kit.ports import (
    DecisionLookup,
    EventSink,
    HandlerLookup,
    KubeClient,
    Mapper,
    ObjectRef,
    ObjectStore,
)
from escaler.reconcilers.kit.report import ReportedKind, Reporter, Synced
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.sync import Hold, Sync, epoch
from escaler.reconcilers.kit.targetread import (
    Target,
    TargetReader,
    Written,
    guard_input,
    write_replicas,
)
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.llmscaler.claims import provider_problems
from escaler.reconcilers.llmscaler.recommend import LLMRecommender, ProviderReader, Reading
from escaler.runtime.executor import Executor
from escaler.runtime.fence import WriteGate
from escaler.runtime.types import Request, Result
from escaler.scaling.annotations import AnnotationProblem, ScalerAnnotations, parse_annotations
from escaler.scaling.conditions import INVALID_SPEC, TARGET_CONFLICT, TargetError, Validation
from escaler.scaling.fallback import FallbackCount, FallbackState
from escaler.scaling.pipeline import Behavior, Decision, PipelineInput, PipelineState, RecommendResult, decide
from escaler.signals.promqlscope import PromQLScope

__all__ = ["LLM_REPORTED", "LLMReconcilerDeps", "LLMScalerReconciler"]

_log = logging.getLogger(__name__)

LLM_REPORTED: ReportedKind[LLMScalerStatus] = ReportedKind(
    LLMScaler.API_VERSION, LLMScaler.KIND, LLMScalerStatus, decision_available=True)


@dataclass(frozen=True)
class LLMReconcilerDeps:
    """Everything the reconciler talks to; ``setup_llmscaler`` wires the manager's own."""

    # the LLMScaler informer cache
    scalers: ObjectStore
    # status writes, target writes
    client: KubeClient
    mapper: Mapper
    handlers: HandlerLookup
    recorder: EventSink
    clock: Clock
    metrics: ScalerMetrics
    bindings: TargetBindings
    watches: WatchIndex
    # the outbound reads; None = none possible (every sync: DecisionUnavailable)
    reader: ProviderReader | None = None
    # --allowed-endpoint-hosts patterns (() = every host)
    allowed_hosts: tuple[str, ...] = ()
    # --metrics-trigger-poll-interval (0 = read on every sync)
    poll_interval: float = 0.0
    # --min-poll-interval: a spec pollIntervalSeconds below it is raised to it (and a Warning says so)
    min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS
    # the manager's write fence; None = always allowed
    can_write: WriteGate | None = None
    # runs provider reads off the reconcile workers; None = inline (tests, simulation)
    outbound: Executor | None = None
    # --status-refresh-seconds
    status_refresh: float = 0.0
    # the Tidal informer's cache, where spec.floorFrom is read; None = the kind is not served
    tidals: ObjectStore | None = None
    # the SLO decision engine's decisions (customProvider.serviceId), in-process; None = no engine
    decisions: DecisionLookup | None = None
    # tenant PromQL confinement (--promql-namespace-label); None = not confined (tests, simulation)
    promql_scope: PromQLScope | None = None


@dataclass(frozen=True)
class _Parsed:
    """One object version, parsed: the model, its annotations, and the spec rules it breaks."""

    scaler: LLMScaler
    annotations: ScalerAnnotations
    # the pause annotations whose value is unusable (their default is used; a Warning event says so)
    annotation_problems: tuple[AnnotationProblem, ...]
    # the missing provider section (the pipeline runs and holds: InvalidSpec)
    provider_problems: tuple[str, ...]
    # any other rule (the sync holds before the pipeline: Validated=False/InvalidSpec)
    problems: tuple[str, ...]


@dataclass
class _Memory:
    """What this process keeps about one scaler between syncs."""

    # metadata.uid of the scaler this memory belongs to (a recreated scaler starts afresh)
    uid: str
    # the pipeline state (stabilization history, deferral); None until the first decision
    state: PipelineState | None = None
    # the last provider reading (reused until the next poll), with flow sizing's state (Flow); None
    # before the first
    reading: Reading | None = None
    # (resourceVersion, parse) of the last object version loaded
    parsed: tuple[str, _Parsed] | None = field(default=None, repr=False)
    # spec.fallback: consecutive polls without a usable signal; seeded once from status.fallback
    fallback: FallbackCount | None = None
    fallback_seeded: bool = False
    # the target resourceVersion the last replica write went out from (written, or 409); no write
    # goes out from it again (kit.targetread.write_replicas: one write per cached version)
    wrote_from: str = ""
    # the pollIntervalSeconds clamp last reported as a Warning event (None: not clamped)
    poll_clamp_reported: str | None = None
    # annotation problems already reported as Warning events (Reporter.annotation_problems)
    reported: frozenset[str] = frozenset()


class LLMScalerReconciler:
    """See the module docstring. Thread-safe: the workqueue never runs one key twice at once."""

    def __init__(self, deps: LLMReconcilerDeps) -> None:
        # collaborators; fixed
        self._d = deps
        # status writes and events (the ElasticScaler's Reporter, for LLMScaler)
        self.reporter: Reporter[LLMScalerStatus] = Reporter(
            deps.client, deps.mapper, deps.recorder, deps.status_refresh, kind=LLM_REPORTED)
        # the read step (shared with ElasticScaler)
        self._targets = TargetReader(deps.mapper, deps.handlers, deps.watches)
        # the recommend step
        self._rec = LLMRecommender(deps.reader, deps.clock, deps.metrics, deps.allowed_hosts,
                                   deps.poll_interval, deps.outbound, deps.min_poll_interval,
                                   decisions=deps.decisions, promql_scope=deps.promql_scope)
        # spec.floorFrom: the floor Tidal, read from the Tidal cache
        self._floors = FloorReader(deps.tidals)
        # guards _memory (an entry is only touched by the reconcile of its own key)
        self._mu = threading.Lock()
        # scaler → what this process remembers about it
        self._memory: dict[Request, _Memory] = {}

    # ------------------------------------------------------------------ entry point

    def reconcile(self, req: Request) -> Result:
        obj = self._d.scalers.get_by_key(str(req))
        meta = obj.get("metadata") if obj is not None else None
        if obj is None or not isinstance(meta, Mapping) or meta.get("deletionTimestamp"):
            self.forget(req)
            return Result()
        now = self._d.clock.now()
        sync = Sync(req, obj, now.timestamp(), now)
        loaded = self._load(sync)
        if isinstance(loaded, Hold):
            self._d.watches.release(req)
            return self.reporter.hold(sync, loaded)
        p, mem = loaded
        scaler = p.scaler
        mem.reported = self.reporter.annotation_problems(sync, mem.reported, p.annotation_problems)
        mem.poll_clamp_reported, clamp = clamp_events(
            scaler.spec.poll_interval_seconds, self._d.poll_interval, self._d.min_poll_interval,
            mem.poll_clamp_reported)
        if clamp:
            self.reporter.emit(sync, clamp, action="Poll")
        ref = ObjectRef.of(scaler.spec.target_ref)
        held = self._claim(scaler, ref)
        if held is not None:
            self._d.watches.release(req)
            return self.reporter.hold(sync, held)
        target = self._targets.read(sync, scaler.namespace, ref)
        if isinstance(target, Hold):
            return self.reporter.hold(sync, target)
        out = self._rec.recommend(scaler, mem.reading, target.snapshot.spec_replicas)
        fresh = out.memory is not mem.reading  # a reused reading is the same object
        mem.reading = out.memory
        if out.pending:
            return Result()  # a read in flight: its completion wakes us
        fallback = self._fallback(sync, scaler, mem, out.recommend, fresh, target.snapshot.spec_replicas)
        decision = self._decide(sync, p, mem, target, out.recommend, fallback)
        written = self._write(sync, decision, target, mem)
        if written.retry:
            mem.state = decision.state_after_failed_write  # keep this sync's recommendation
            return Result(requeue=True)
        if decision.write and not written.written and written.error is None:
            # no longer allowed to write, or the cache still shows the version our last write went
            # out from (its next version wakes us): write nothing, not even status
            return Result()
        mem.state = decision.state if written.written or not decision.write else \
            decision.state_after_failed_write
        self._d.metrics.record_sync(req.namespace, req.name, decision.current, decision.desired, out.rows)
        validation = Validation(INVALID_SPEC, "; ".join(p.provider_problems)) if p.provider_problems \
            else Validation()
        return self.reporter.synced(sync, Synced(
            decision=decision, target=ref, current_metrics=out.rows, written=written.written,
            error=written.error, advisory=scaler.spec.mode == Mode.ADVISORY,
            recheck_at=target.pods.recheck_at, validation=validation))

    def forget(self, req: Request) -> None:
        """The scaler is gone: release everything held for it."""
        with self._mu:
            mem = self._memory.pop(req, None)
        self._d.watches.release(req)
        self._d.metrics.forget(req.namespace, req.name)
        self._rec.forget(req.namespace, req.name)
        if mem is not None:
            self.reporter.forget(mem.uid)

    # ------------------------------------------------------------------ steps

    def _load(self, sync: Sync) -> tuple[_Parsed, _Memory] | Hold:
        meta = sync.obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        mem = self._memory_for(sync.req, str(meta.get("uid") or ""))
        rv = str(meta.get("resourceVersion") or "")
        if mem.parsed is not None and rv and mem.parsed[0] == rv:
            p = mem.parsed[1]
        else:
            try:
                scaler = LLMScaler.parse({k: v for k, v in sync.obj.items() if k != "status"})
            except ValidationError as err:
                details = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                                    for e in err.errors()[:5])
                _log.warning("LLMScaler %s does not parse: %s", sync.req, details)
                return Hold(unparsable=f"the object does not parse: {details}")
            ann, ann_problems = parse_annotations(scaler.metadata.annotations, policies=False)
            provider, other = provider_problems([str(e) for e in validate(scaler)])
            p = _Parsed(scaler, ann, tuple(ann_problems), tuple(provider), tuple(other))
            mem.parsed = (rv, p) if rv else None
        if p.problems:
            return Hold(validation=Validation(INVALID_SPEC, "; ".join(p.problems)))
        return p, mem

    def _claim(self, scaler: LLMScaler, ref: ObjectRef) -> Hold | None:
        """None when this scaler may write ``ref``; else the hold to report."""
        try:
            key = TargetKey.from_ref(scaler.namespace, ref.api_version, ref.kind, ref.name)
        except ValueError as err:
            return Hold(target_error=TargetError(INVALID_SPEC, f"spec.targetRef.apiVersion: {err}"))
        if scaler.spec.mode == Mode.ADVISORY:
            return None  # it never writes: it neither claims nor conflicts
        created = scaler.metadata.creation_timestamp
        me = claim_of(LLMScaler.KIND, {"metadata": {
            "name": scaler.name, "namespace": scaler.namespace,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ") if created else ""}})
        refusal = self._d.bindings.refusal(key, me)
        return None if refusal is None else Hold(validation=Validation(TARGET_CONFLICT, refusal))

    def _fallback(self, sync: Sync, scaler: LLMScaler, mem: _Memory, rr: RecommendResult, fresh: bool,
                  current: int) -> FallbackState | None:
        """``spec.fallback`` and the count after this sync; None without it."""
        return advance_fallback(mem, scaler.spec.fallback,
                                lambda: self.reporter.previous_status(sync).fallback, rr, fresh=fresh,
                                current=current, now=sync.now)

    def _decide(self, sync: Sync, p: _Parsed, mem: _Memory, target: Target, rr: RecommendResult,
                fallback: FallbackState | None = None) -> Decision:
        spec, snap = p.scaler.spec, target.snapshot
        behavior = Behavior.for_llmscaler(
            min_replicas=spec.min_replicas, max_replicas=spec.max_replicas,
            scale_down_stabilization_seconds=spec.scale_down.stabilization_window_seconds,
            scale_down_max_step_replicas=spec.scale_down.max_step_replicas,
            defer_timeout_seconds=spec.defer_timeout_seconds)
        state = mem.state if mem.state is not None else self._seed(sync, snap.spec_replicas)
        started = self._d.clock.monotonic()
        decision = decide(PipelineInput(
            now=sync.now, current_replicas=snap.spec_replicas, recommend=rr, behavior=behavior,
            target=guard_input(snap, target.pods), state=state, paused=p.annotations.paused,
            paused_replicas=p.annotations.paused_replicas, advisory=spec.mode == Mode.ADVISORY,
            fallback=fallback, floor=self._floors.floor(p.scaler.namespace, spec.floor_from, sync.now_dt)))
        self._d.metrics.decision_latency.observe(max(0.0, self._d.clock.monotonic() - started))
        return decision

    def _seed(self, sync: Sync, current: int) -> PipelineState:
        """The pipeline state of a scaler this process holds no memory of, from its status."""
        status = self.reporter.previous_status(sync)
        return PipelineState.seed(now=sync.now, current=current, deferred_since=epoch(status.deferred_since),
                                  last_scale_time=epoch(status.last_scale_time))

    def _write(self, sync: Sync, decision: Decision, target: Target, mem: _Memory) -> Written:
        if not decision.write or not self._may_write():
            return Written()
        written = write_replicas(sync, target, decision.desired, self._d.metrics, decision.reason,
                                 wrote_from=mem.wrote_from)
        if written.from_version:
            mem.wrote_from = written.from_version
        return written

    # ------------------------------------------------------------------ helpers

    def _memory_for(self, req: Request, uid: str) -> _Memory:
        """The memory of the scaler object ``uid``; a recreated scaler (new uid) starts afresh."""
        with self._mu:
            mem = self._memory.get(req)
            if mem is not None and mem.uid == uid:
                return mem
            fresh = self._memory[req] = _Memory(uid=uid)
        if mem is not None:
            self.reporter.forget(mem.uid)
        return fresh

    def _may_write(self) -> bool:
        return self._d.can_write is None or self._d.can_write.is_set()
