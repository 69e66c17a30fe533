"""The ElasticScaler reconciler (docs/concepts.md, docs/guide/elasticscaler.md): level-based, one scaler per
reconcile.

A reconcile reads the scaler from the informer cache and converges, never trusting the event that
woke it. It is a chain of small steps; each returns its value or a ``Hold`` (``kit.sync.Hold``:
what to report and when to look again), and one ``report`` (``kit.report.Reporter``) writes status and
events for either::

    load       the cached object → ElasticScaler, parsed and validated once per resourceVersion
               (``parsecache``; or Hold: InvalidSpec, AlgorithmNotRegistered; an object that does
               not parse)
    route      MetricsTrigger + HPA → the companion HPA (``hpasync``); everything else goes on
    resolve    spec.targetRef, or for StateTrigger the end of the chain from the state source
               (``statesync``; or Hold: TargetChainInvalid, a source informer not listed yet)
    claim      one scaler per target across escaler kinds (``escaler.reconcilers.kit.bindings``): a
               younger claimant, or any scaler facing an HPA escaler does not own, holds with
               TargetConflict. A StateTrigger scaler first records its claim in status
               (``resolvedTargetRef``) and writes the target only once the index shows it.
               Advisory scalers never write, so they neither claim nor conflict.
    read       first the target's *kind*, from discovery alone: it must be namespaced and have a
               handler or a ``scale`` subresource (``HandlerRegistry.target_problem``), else
               AbleToScale=False/InvalidSpec and no watch at all (nor the one an earlier spec held);
               then the target from its watch cache (``WatchIndex``; a cache not listed yet is a quiet
               hold — its initial list wakes the scaler) through its ResourceHandler, which also
               says whether a *template* rollout is in progress; the target's pods give the
               InsufficientCapacity guard input (``escaler.targets.pods``); the read and write steps
               are ``kit.targetread`` (shared with LLMScaler)
    recommend  ``metricsync`` (metrics through the sample windows and the algorithm), ``statesync``
               (the source's ``status.desiredReplicas``), ``signalsync`` (the signal rule)
    fallback   MetricsTrigger with ``spec.fallback``: count the consecutive *polls* (a fresh
               collection, not a reused outcome) without a usable signal
               (``escaler.scaling.fallback.count``), seeded once from ``status.fallback`` so a new
               leader goes on counting; the pipeline engages it at ``failureThreshold``, and the
               count is written to ``status.fallback`` (only when it changes)
    floor      ``spec.floorFrom``: the named Tidal (this namespace, from the Tidal cache) evaluated at
               now (``escaler.reconcilers.kit.floor``, ``escaler.scaling.floor``); the pipeline raises the
               recommendation to it and requeues at its next rule start or end
    decide     ``escaler.scaling.pipeline.decide``, from the state this process remembers — or, after
               a restart or a leader change, from state seeded from status
    costs      ``spec.scaleDown.podDeletionCost`` and a Deployment scale-down written now (not held):
               read a value per pod off the worker, then patch
               ``controller.kubernetes.io/pod-deletion-cost`` on the pods that matter
               (``deletioncost``; a failure never blocks the scale-down)
    write      only when the count changes, only while the manager may write, with optimistic
               concurrency (a 409 requeues at once)
    report     conditions (``escaler.scaling.conditions``), events, status — written only when changed
               significantly, drift only at the opt-in --status-refresh-seconds (``kit.drift``); an
               unchanged sync rebuilds nothing

and requeues at the earliest moment the answer can change. MetricsTrigger polling is the
``MetricsPoller``'s job (``kit/poller.py``). Nothing in a reconcile waits for an informer or a thread,
nor for a server a tenant names: metric collections and signal pulls run on the outbound executor
(``ReconcilerDeps.outbound``); the sync that starts one writes nothing, its completion wakes the
scaler.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from escaler.api.common import Mode
from escaler.api.elasticscaler import (
    HPA_ALGORITHM,
    ElasticScaler,
    ElasticScalerStatus,
    TriggerType,
)
from escaler.clock import Clock
from escaler.errors import StatusError
from escaler.reconcilers.elasticscaler.context import Resolved, ScalerMemory
from escaler.reconcilers.elasticscaler.deletioncost import (
    DeletionCoster,
    PodPatcher,
    PodValueReader,
    deletion_cost_of,
)
from escaler.reconcilers.elasticscaler.grants import MetricGrants
from escaler.reconcilers.elasticscaler.hpasync import HpaSync
from escaler.reconcilers.elasticscaler.metricsync import Collector, MetricsRecommender
from escaler.reconcilers.elasticscaler.parsecache import ParseCache
from escaler.reconcilers.elasticscaler.signal import SignalStore
from escaler.reconcilers.elasticscaler.signalsync import SignalRecommender
from escaler.reconcilers.elasticscaler.statesync import (
    StateResolver,
    recommend_state,
)
from escaler.reconcilers.kit.bindings import TargetBindings, TargetKey, claim_of
from escaler.reconcilers.kit.claims import scaler_target
from escaler.reconcilers.kit.drift import (
    DEFAULT_SIGNIFICANCE,
    DEFAULT_STATUS_REFRESH_SECONDS,
    significance_of,
)
from escaler.reconcilers.kit.fallback import advance_fallback
from escaler.reconcilers.kit.floor import FloorReader
from escaler.reconcilers.kit.poller import (
    DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    clamp_events,
)
from escaler.reconcilers.kit.ports import EventSink, HandlerLookup, KubeClient, Mapper, ObjectRef, ObjectStore
from escaler.reconcilers.kit.report import ReportedKind, Reporter, Synced
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.sync import Claim, Hold, Sync, epoch
from escaler.reconcilers.kit.targetread import (
    Target,
    TargetReader,
    Written,
    guard_input,
    write_replicas,
)
from escaler.reconcilers.kit.watchindex import ROLE_HOP, ROLE_PODS, ROLE_SOURCE, ROLE_TARGET, WatchIndex
from escaler.runtime.executor import Executor, InlineExecutor
from escaler.runtime.fence import WriteGate
from escaler.runtime.types import Request, Result
from escaler.scaling.annotations import ScalerAnnotations
from escaler.scaling.conditions import (
    ALGORITHM_NOT_REGISTERED,
    INVALID_SPEC,
    TARGET_CONFLICT,
    TargetError,
    Validation,
)
from escaler.scaling.fallback import FallbackState
from escaler.scaling.pipeline import Behavior, Decision, PipelineInput, PipelineState, RecommendResult, decide
from escaler.scaling.registry import AlgorithmNotRegistered, get_algorithm, is_known_algorithm
from escaler.signals.signal_pull import SignalReading
from escaler.targets.snapshot import TargetSnapshot, TargetUnreadable

__all__ = ["ES_REPORTED", "Collector", "ElasticScalerReconciler", "ReconcilerDeps"]

_log = logging.getLogger(__name__)

# what the shared Reporter writes for an ElasticScaler: its status resource and model, its Events
ES_REPORTED: ReportedKind[ElasticScalerStatus] = ReportedKind(
    ElasticScaler.API_VERSION, ElasticScaler.KIND, ElasticScalerStatus)


@dataclass(frozen=True)
class ReconcilerDeps:
    """Everything the reconciler talks to; ``setup_elasticscaler`` wires the manager's own."""

    # the ElasticScaler and HPA informer caches
    scalers: ObjectStore
    hpas: ObjectStore
    # API writes (and the GETs no cache can answer)
    client: KubeClient
    mapper: Mapper
    handlers: HandlerLookup
    recorder: EventSink
    clock: Clock
    metrics: ScalerMetrics
    bindings: TargetBindings
    watches: WatchIndex
    signals: SignalStore
    # reads the metrics; None = none configured (every MetricsTrigger sync: DecisionUnavailable)
    collector: Collector | None = None
    # GETs a SignalTrigger endpoint; None = pulls are not possible
    signal_puller: Callable[[str, float], SignalReading] | None = None
    # --allowed-endpoint-hosts patterns (() = every host)
    allowed_hosts: Sequence[str] = ()
    # --metrics-trigger-poll-interval (0 = collect on every sync)
    poll_interval: float = 0.0
    # --min-poll-interval: a spec pollIntervalSeconds below it is raised to it (and a Warning says so)
    min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS
    # the manager's write fence (a WriteFence; anything with is_set()); None = always allowed
    can_write: WriteGate | None = None
    # runs metric collections and signal pulls off the reconcile workers (a KeyedExecutor, whose
    # completions enqueue the scaler); None = inline, on the reconcile worker (tests, simulation)
    outbound: Executor | None = None
    # --status-refresh-seconds: status drift is written at most this often (0 = never on its own)
    status_refresh: float = DEFAULT_STATUS_REFRESH_SECONDS
    # reads the per-pod values of scaleDown.podDeletionCost; None = none configured (skipped, said so)
    pod_values: PodValueReader | None = None
    # patches the pod-deletion-cost annotation (the manager's fenced DynamicClient); None = cannot
    pod_patcher: PodPatcher | None = None
    # the Tidal informer's cache, where spec.floorFrom is read; None = the kind is not served
    tidals: ObjectStore | None = None
    # whether the manager may itself read a companion HPA's Custom/External metrics; None = unchecked
    metric_grants: MetricGrants | None = None


class ElasticScalerReconciler:
    """See the module docstring. Thread-safe: the workqueue never runs one key twice at once."""

    def __init__(self, deps: ReconcilerDeps) -> None:
        # collaborators; fixed
        self._d = deps
        # the SignalTrigger store, shared with the push API
        self.signals = deps.signals
        # status writes and events (also the HPA path's reporter)
        self.reporter = Reporter(deps.client, deps.mapper, deps.recorder, deps.status_refresh,
                                 kind=ES_REPORTED)
        # one helper per trigger path (each module's docstring states its contract)
        self._hpa = HpaSync(self.reporter, deps.hpas, deps.client, self._may_write, deps.metric_grants)
        self._metrics_rec = MetricsRecommender(deps.collector, deps.metrics, deps.clock, deps.allowed_hosts,
                                               deps.poll_interval, deps.outbound, deps.min_poll_interval)
        self._signal_rec = SignalRecommender(deps.signals, deps.signal_puller, deps.clock, deps.metrics,
                                             deps.allowed_hosts, deps.outbound, deps.min_poll_interval)
        self._state = StateResolver(deps.mapper, deps.watches, deps.client)
        self._costs = DeletionCoster(
            deps.pod_values, deps.pod_patcher, deps.mapper, deps.watches,
            deps.outbound if deps.outbound is not None else InlineExecutor(deps.clock), deps.clock,
            lambda sync, events: self.reporter.emit(sync, events))
        self._floors = FloorReader(deps.tidals)
        # guards _memory (an entry is only touched by the reconcile of its own key)
        self._mu = threading.Lock()
        # scaler → what this process remembers about it
        self._memory: dict[Request, ScalerMemory] = {}
        # each scaler parsed and validated once per resourceVersion
        self._parsed = ParseCache()

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
        scaler, ann = loaded
        if _is_hpa(scaler):
            self._d.watches.release(req)
            return self._hpa.sync(sync, scaler, ann, self.conflict)
        self._hpa.delete(sync, scaler)
        if scaler.spec.trigger.type != TriggerType.STATE:
            self._d.watches.drop(req, ROLE_SOURCE)
            self._d.watches.drop(req, ROLE_HOP)
        return self._sync_workload(sync, scaler, ann)

    def poll(self, req: Request) -> bool:
        """The poller's shortcut for a due scaler: start its metrics collection without a
        reconcile, so the one reconcile the collection's completion wakes consumes it (one
        reconcile per poll instead of two). Only for a MetricsTrigger scaler this process has
        already reconciled as it is now (same uid and resourceVersion, a collection made for its
        spec), whose target is in the cache and which may write it (no conflict); anything else,
        and anything ``MetricsRecommender.prefetch`` declines, returns False and the poller
        enqueues a reconcile as before. Runs on the poller's thread: reads caches and this
        scaler's memory and writes nothing; its only possible I/O is the discovery lookup every
        reconcile makes too (cached, refreshed once per TTL per API group version)."""
        obj = self._d.scalers.get_by_key(str(req))
        parsed = self._parsed.peek(req, obj) if obj is not None else None
        if parsed is None or parsed.problems or not self._may_write():
            return False
        scaler = parsed.scaler
        mt = scaler.spec.trigger.metrics_trigger
        if mt is None or scaler.spec.trigger.type != TriggerType.METRICS or _is_hpa(scaler):
            return False
        with self._mu:
            mem = self._memory.get(req)
        if mem is None or mem.uid != (scaler.metadata.uid or ""):
            return False
        snap = self._cached_target(scaler)
        if snap is None or not self._metrics_rec.prefetch(scaler, snap, mem.metrics):
            return False
        mem.polled_target = snap  # the consuming reconcile reads the target once more only if it changed
        return True

    def _cached_target(self, scaler: ElasticScaler) -> TargetSnapshot | None:
        """The scaler's target as the cache has it, when this scaler may write it; else None."""
        ns, ref = scaler.namespace, ObjectRef.of(scaler.spec.target_ref)
        kind = self._targets.kind(ns, ref)
        if isinstance(kind, Hold):
            return None
        key, handler = kind
        if not self._d.watches.synced(key) or self._d.watches.cached(key, ns, ref.name) is None:
            return None
        try:
            if scaler.spec.mode != Mode.ADVISORY and self.conflict(
                    scaler, TargetKey.from_ref(ns, ref.api_version, ref.kind, ref.name)) is not None:
                return None
            return handler.read(ns, ref)
        except (TargetUnreadable, StatusError, ValueError):
            return None

    def forget(self, req: Request) -> None:
        """The scaler is gone: release everything held for it."""
        with self._mu:
            mem = self._memory.pop(req, None)
        self._parsed.forget(req)
        self._d.watches.release(req)
        self._d.signals.forget(req)
        self._d.metrics.forget(req.namespace, req.name)
        self._metrics_rec.forget(req.namespace, req.name)
        self._costs.forget(req.namespace, req.name)
        self._signal_rec.forget(req.namespace, req.name)
        if mem is not None:
            self.reporter.forget(mem.uid)

    # ------------------------------------------------------------------ steps

    def _load(self, sync: Sync) -> tuple[ElasticScaler, ScalerAnnotations] | Hold:
        try:
            parsed = self._parsed.load(sync.req, sync.obj)  # once per resourceVersion
        except ValidationError as err:
            details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])
            _log.warning("ElasticScaler %s does not parse: %s", sync.req, details)
            return Hold(unparsable=f"the object does not parse: {details}")
        scaler = parsed.scaler
        if parsed.problems:
            return Hold(validation=Validation(INVALID_SPEC, "; ".join(parsed.problems)))
        mt = scaler.spec.trigger.metrics_trigger
        if mt is not None and mt.scaling_algorithm != HPA_ALGORITHM and not is_known_algorithm(
                mt.scaling_algorithm):
            return Hold(validation=Validation(
                ALGORITHM_NOT_REGISTERED,
                f"spec.trigger.metricsTrigger.scalingAlgorithm: {_not_registered(mt.scaling_algorithm)}"))
        mem = self._memory_for(sync.req, scaler.metadata.uid or "")
        mem.reported = self.reporter.annotation_problems(sync, mem.reported, parsed.annotation_problems)
        st = scaler.spec.trigger.signal_trigger
        if st is not None and st.endpoint:  # a SignalTrigger's pulls have the same floor
            mem.poll_clamp_reported, clamp = clamp_events(
                st.poll_interval_seconds, float(st.poll_interval_seconds), self._d.min_poll_interval,
                mem.poll_clamp_reported, path="spec.trigger.signalTrigger.pollIntervalSeconds")
        else:
            mem.poll_clamp_reported, clamp = clamp_events(
                scaler.spec.poll_interval_seconds, self._d.poll_interval, self._d.min_poll_interval,
                mem.poll_clamp_reported)
        if clamp:
            self.reporter.emit(sync, clamp, action="Poll")
        return scaler, parsed.annotations

    def _sync_workload(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations) -> Result:
        resolved = self._resolve(sync, scaler)
        if isinstance(resolved, Hold):
            return self._stop(sync, resolved)
        ref, state_source = resolved
        held = self._claim(sync, scaler, ref)
        if isinstance(held, Claim):
            return self.reporter.claim(sync, held)
        if held is not None:
            return self._stop(sync, held)
        target = self._read(sync, scaler, ref)
        if isinstance(target, Hold):
            return self.reporter.hold(sync, target)
        mem = self._memory_for(sync.req, scaler.metadata.uid or "")
        recommended = self._recommend(sync, scaler, ann, mem, target, state_source)
        if isinstance(recommended, Hold):
            return self.reporter.hold(sync, recommended)  # a read in flight: its completion wakes us
        rr, current_metrics, fresh = recommended
        fallback = self._fallback(sync, scaler, mem, rr, fresh, target.snapshot.spec_replicas)
        decision = self._decide(sync, scaler, ann, mem, target, rr, fallback)
        costs = self._costs.before_write(sync, scaler, target, decision, may_write=self._may_write,
                                         wrote_from=mem.wrote_from)
        if costs is not None:
            return self.reporter.hold(sync, costs)  # the per-pod read in flight: its completion wakes us
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
        self._d.metrics.record_sync(sync.req.namespace, sync.req.name, decision.current, decision.desired,
                                    current_metrics)
        return self.reporter.synced(sync, Synced(
            decision=decision, target=ref, current_metrics=current_metrics, written=written.written,
            error=written.error, advisory=scaler.spec.mode == Mode.ADVISORY,
            recheck_at=target.pods.recheck_at, significance=_significance(scaler)))

    def _stop(self, sync: Sync, hold: Hold) -> Result:
        """A hold before the target is read: the target watch goes too (nothing will be read)."""
        if not hold.quiet:
            self._d.watches.drop(sync.req, ROLE_TARGET)
            self._d.watches.drop(sync.req, ROLE_PODS)
        return self.reporter.hold(sync, hold)

    def _resolve(self, sync: Sync, scaler: ElasticScaler) -> tuple[ObjectRef, Resolved | None] | Hold:
        if scaler.spec.trigger.type != TriggerType.STATE:
            return ObjectRef.of(scaler.spec.target_ref), None
        got = self._state.resolve(sync, scaler)
        return got if isinstance(got, Hold) else (got.target, got)

    def _claim(self, sync: Sync, scaler: ElasticScaler, ref: ObjectRef) -> Hold | Claim | None:
        """None when this scaler may write ``ref``; a TargetConflict hold; or a claim to record first."""
        try:
            key = TargetKey.from_ref(scaler.namespace, ref.api_version, ref.kind, ref.name)
        except ValueError as err:
            return Hold(target_error=TargetError(INVALID_SPEC, f"spec.targetRef.apiVersion: {err}"))
        if scaler.spec.mode == Mode.ADVISORY:
            return None
        conflict = self.conflict(scaler, key)
        if conflict is not None:
            return Hold(validation=Validation(TARGET_CONFLICT, conflict), resolved=ref)
        if scaler.spec.trigger.type == TriggerType.STATE and scaler_target(sync.obj) != key:
            return Claim(ref)
        return None

    def conflict(self, scaler: ElasticScaler, target: TargetKey, ignore_hpa: str | None = None) -> str | None:
        """Why ``scaler`` may not write ``target``, or None."""
        created = scaler.metadata.creation_timestamp
        me = claim_of(ElasticScaler.KIND, {"metadata": {
            "name": scaler.name, "namespace": scaler.namespace,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ") if created else ""}})
        return self._d.bindings.refusal(target, me, ignore_hpa)

    def _read(self, sync: Sync, scaler: ElasticScaler, ref: ObjectRef) -> Target | Hold:
        with self._mu:
            mem = self._memory.get(sync.req)
        reuse = None
        if mem is not None:
            reuse, mem.polled_target = mem.polled_target, None
        return self._targets.read(sync, scaler.namespace, ref, reads_pods=_reads_pods(scaler), reuse=reuse)

    def _recommend(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: ScalerMemory,
                   target: Target, resolved: Resolved | None,
                   ) -> tuple[RecommendResult, list[Any], bool] | Hold:
        """The recommendation, the currentMetrics rows, and whether it comes from a new metrics poll
        (a reused outcome keeps the memory's last collection: ``_remember`` records a new one)."""
        trigger = scaler.spec.trigger
        if trigger.type == TriggerType.METRICS:
            out = self._metrics_rec.recommend(scaler, ann, target.snapshot, mem.metrics, now=sync.now)
            fresh = out.memory.last is not mem.metrics.last
            mem.metrics = out.memory
            return Hold(quiet=True) if out.pending else (out.recommend, list(out.statuses), fresh)
        if resolved is not None:
            return recommend_state(resolved, scaler.namespace), [], False
        signal = self._signal_rec.recommend(sync.req, scaler, target.snapshot.spec_replicas, mem.pull)
        mem.pull = signal.memory
        if signal.pending:
            return Hold(quiet=True, requeue=signal.requeue)
        sync.wait(signal.requeue)
        return signal.recommend, [], False

    def _fallback(self, sync: Sync, scaler: ElasticScaler, mem: ScalerMemory, rr: RecommendResult,
                  fresh: bool, current: int) -> FallbackState | None:
        """``spec.fallback`` and the count after this sync (see the module docstring); None without it."""
        metrics = scaler.spec.trigger.type == TriggerType.METRICS
        return advance_fallback(mem, scaler.spec.fallback if metrics else None,
                                lambda: self.reporter.previous_status(sync).fallback, rr, fresh=fresh,
                                current=current, now=sync.now)

    def _decide(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: ScalerMemory,
                target: Target, rr: RecommendResult, fallback: FallbackState | None = None) -> Decision:
        spec, snap = scaler.spec, target.snapshot
        behavior = Behavior.from_annotations(ann, min_replicas=spec.min_replicas,
                                             max_replicas=spec.max_replicas,
                                             defer_timeout_seconds=spec.defer_timeout_seconds)
        state = mem.state if mem.state is not None else self._seed(sync, snap)
        metrics = spec.trigger.type == TriggerType.METRICS  # floorFrom is a MetricsTrigger field (CEL)
        floor = self._floors.floor(scaler.namespace, spec.floor_from if metrics else None, sync.now_dt)
        started = self._d.clock.monotonic()
        decision = decide(PipelineInput(
            now=sync.now, current_replicas=snap.spec_replicas, recommend=rr, behavior=behavior,
            target=guard_input(snap, target.pods), state=state, paused=ann.paused,
            paused_replicas=ann.paused_replicas, advisory=spec.mode == Mode.ADVISORY, fallback=fallback,
            floor=floor))
        self._d.metrics.decision_latency.observe(max(0.0, self._d.clock.monotonic() - started))
        return decision

    def _seed(self, sync: Sync, snap: TargetSnapshot) -> PipelineState:
        """The pipeline state of a scaler this process holds no memory of (a restart, a new leader),
        from its status; the status is parsed only then, not on every sync."""
        status = self.reporter.previous_status(sync)
        return PipelineState.seed(now=sync.now, current=snap.spec_replicas,
                                  deferred_since=epoch(status.deferred_since),
                                  last_scale_time=epoch(status.last_scale_time))

    def _write(self, sync: Sync, decision: Decision, target: Target, mem: ScalerMemory) -> Written:
        if not decision.write or not self._may_write():
            return Written()
        written = write_replicas(sync, target, decision.desired, self._d.metrics, decision.reason,
                                 wrote_from=mem.wrote_from)
        if written.from_version:
            mem.wrote_from = written.from_version
        return written

    # ------------------------------------------------------------------ helpers

    @property
    def _targets(self) -> TargetReader:
        """The read step, shared with LLMScaler (``targetread``); stateless, so built over the current
        collaborators each time (an embedder or a test may swap ``_d``)."""
        return TargetReader(self._d.mapper, self._d.handlers, self._d.watches)

    def _memory_for(self, req: Request, uid: str) -> ScalerMemory:
        """The memory of the scaler object ``uid``. A scaler deleted and recreated under the same name
        (a new uid; the delete and the create may reach us as one queued key) starts afresh: nothing
        kept for the old object — windows, pipeline state, signals, the status last written —
        applies to the new one."""
        with self._mu:
            mem = self._memory.get(req)
            if mem is not None and mem.uid == uid:
                return mem
            fresh = self._memory[req] = ScalerMemory(uid=uid)
        previous = mem.uid if mem is not None else uid
        self._d.signals.forget_stale(req, uid, previous)
        if mem is not None:
            self.reporter.forget(mem.uid)
        return fresh

    def _may_write(self) -> bool:
        return self._d.can_write is None or self._d.can_write.is_set()


def _reads_pods(scaler: ElasticScaler) -> bool:
    """Resource metrics are computed over the target's pods, and a podDeletionCost ranks them, both
    read from the namespace's pod cache."""
    mt = scaler.spec.trigger.metrics_trigger
    return (mt is not None and any(m.resource is not None for m in mt.metrics)) or \
        deletion_cost_of(scaler) is not None


def _significance(scaler: ElasticScaler) -> float:
    """How far a metric value must move to be written to status at once (``drift``)."""
    mt = scaler.spec.trigger.metrics_trigger
    return DEFAULT_SIGNIFICANCE if mt is None else significance_of(mt.scaling_algorithm, mt.algorithm_config)


def _is_hpa(scaler: ElasticScaler) -> bool:
    mt = scaler.spec.trigger.metrics_trigger
    return scaler.spec.trigger.type == TriggerType.METRICS and mt is not None and \
        mt.scaling_algorithm == HPA_ALGORITHM


def _not_registered(name: str) -> str:
    try:
        get_algorithm(name)
    except AlgorithmNotRegistered as err:
        return str(err)
    return f"scaling algorithm {name!r} is not registered"
