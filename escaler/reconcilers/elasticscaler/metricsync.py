"""MetricsTrigger with an algorithm (docs/guide/elasticscaler.md#the-triggers, docs/reference/annotations.md):
collect, window, aggregate, run the algorithm.

``MetricsRecommender.recommend(scaler, annotations, snapshot, memory, now=...)`` turns one sync into
a ``MetricsOutcome``: the pipeline's ``RecommendResult``, the ``status.currentMetrics`` rows, and
the ``MetricsMemory`` to keep for the next sync. It writes nothing: the caller stores the memory it
returns (``ScalerMemory`` holds one ``MetricsMemory`` per scaler) and reports the rest.

* **Cadence.** Metrics are collected at most once per poll interval — the scaler's
  ``pollIntervalSeconds`` raised to ``--min-poll-interval``, or ``--metrics-trigger-poll-interval``
  (``poller.effective_interval``; what the poll interval promises the metric backends): a sync woken
  before the scaler's next due poll (``poller.same_poll``: its phase's grid, so a collection that
  ran late never makes the next poll skip) by an event (a target rollout step, a foreign HPA) reuses
  the last collection's outcome, against the target as it is now (a recommendation is an absolute
  count, so reusing it after our own write does not compound: the next step waits for the next
  poll). A spec or annotation change collects afresh; with polling off (interval 0) every sync
  collects. The poller enqueues every scaler once per interval, so a recommendation never needs a
  timer of its own: the outcome has no requeue time.
* **Off the reconcile worker.** A collection is I/O against servers a tenant names, so it runs on
  the outbound executor (``escaler.runtime.executor``; inline when none is given), never on the
  reconcile worker: the sync that starts one returns a *pending* outcome (the reconciler writes
  nothing) and the collection's completion enqueues the scaler; the next sync consumes it —
  windows, algorithm, decision — against the target as it is then. A sync while a collection is
  in flight keeps the last outcome (the status goes on reporting it) and starts no other: one
  collection per scaler at a time. A result is consumed only by the scaler object it was made for
  (uid, generation and annotations; anything else is dropped and collected afresh), and a
  deleted scaler's job is discarded (``forget``). Samples are windowed at the time the collection
  started, as totals of the replica count they were read at, and divided by today's; the windows
  are read as of that time too, so a sync that waited in a queue backed up by a fleet-wide surge
  still sees the step in the panic window (read "now", the sample had aged out of it). A full
  namespace queue (``Submitted.FULL``) is reported as ``DecisionUnavailable`` and retried at the
  next poll.
* **Windows.** Each usable sample enters the scaler's in-memory window, keyed by the metric's
  identity (``window_key``: its index in the spec and a hash of its canonical spec — two metrics
  with one display name never share a series, and a spec edit starts a fresh one); the value
  handed to the algorithm is the window's aggregate (``metrics.*`` annotations). A value *per
  replica* is windowed as the total it was computed from and divided by today's denominator
  after aggregation — the current count for External/ExternalServer ``AverageValue``, the ready
  pods' weight for Resource metrics (``Sample.pods``) — because averaging per-replica quotients
  taken at different counts overshoots after every scale (40 at 2 then at 4 replicas averages to
  15 per replica, not 10).
* **Panic window** (``escaler.scaling.window``): the newest sample (panic window) and the peak of
  the stable window are read alongside the aggregate; the algorithm runs on each and
  ``window.choose`` picks: the panic window takes over a scale-up, a scale-down waits until the
  whole window asks for it. The ``currentMetrics`` rows show the values of the window used, and
  ``RecommendResult.detail`` says which.
* **Failures.** A read that fails is reported at once — ``RecommendResult.metric_errors`` (the
  metric's name and the capped error) and the row's ``error`` — on every path, while the decision
  still comes from the window when the ``missingDataPolicy`` allows it. Metrics whose aggregate is
  missing are left out (``MetricsPipeline=False/PartialMetrics``); none usable →
  ``DecisionUnavailable``. On partial metrics the recommendation never scales *down* (a missing
  metric could be the one asking for more replicas; the HPA does the same).
* **Algorithm.** The registered function runs on a read-only ``AlgorithmContext``; it may return an
  ``int`` or an ``AlgorithmResult``; the capped and uncapped counts both go to the pipeline
  (``RecommendResult.uncapped``: apa's rate cap shows as its own step). ``NoDecision`` →
  ``DecisionUnavailable``, ``ValueError`` → ``InvalidSpec``. Each metric's own recommendation (the
  algorithm on that metric alone, capped) is reported in ``currentMetrics``. This step, the
  window choice and the partial-metrics rule are ``escaler.scaling.metricdecision.decide_metrics``
  (pure; the policy simulator calls the same function).
* ``ExternalServer`` endpoints outside ``--allowed-endpoint-hosts`` are refused (``InvalidSpec``)
  before any request. Without ``activation`` a MetricsTrigger cannot scale a target from zero
  (``ScalingDisabled``: nothing is collected at 0).
* **Activation** (``metricsTrigger.activation``, ``escaler.scaling.activation``): every recommendation
  carries ``RecommendResult.activation``, the threshold and the totals this collection read for the
  External/ExternalServer metrics (the newest sample times the replica count it was read at, not
  the window); every outcome may scale from zero. At 0 replicas only those metrics are collected
  (read as for 1 replica, so an AverageValue gives its total), the windows and the algorithm are
  skipped (no per-replica value exists at 0) and the recommendation is 0 — the pipeline's
  activation step wakes it to 1 when a total is above the value. No readable total at 0 →
  ``DecisionUnavailable``: the pipeline holds 0 (or engages ``spec.fallback``).

State: ``MetricsMemory`` is a frozen value. Its ``MetricWindows`` is a mutable object (a sorted
list per metric, appended to each poll); ``recommend`` never mutates the one it is given — it
works on a ``copy()`` (O(samples): ~60 floats per metric at a 2 s poll and the default 60 s x 2
window) and returns it in the new memory. Copying is cheaper than making the windows persistent
and keeps every input of a sync unchanged if the caller drops the outcome.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from escaler.api.compact import share_bookkeeping
from escaler.api.elasticscaler import WAKE_METRIC_TYPES, ElasticScaler, MetricSpec, MetricsTrigger
from escaler.api.quantity import parse_quantity
from escaler.api.scaler import MetricStatus
from escaler.clock import Clock
from escaler.reconcilers.kit.poller import (
    DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    effective_interval,
    same_poll,
)
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.runtime.executor import Executor, Finished, InlineExecutor, Submitted
from escaler.runtime.types import Request
from escaler.scaling.activation import ActivationReading, ActivationState
from escaler.scaling.algorithm import (
    MetricValue,
    NoDecision,
    PodCounts,
    Recommendation,
)
from escaler.scaling.annotations import ScalerAnnotations
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.metricdecision import ALGORITHM_HISTORY, WindowedValue, decide_metrics
from escaler.scaling.pipeline import RecommendResult
from escaler.scaling.text import cap_text
from escaler.scaling.window import MetricWindows, WindowPolicy
from escaler.signals.collector import metric_name
from escaler.signals.sample import Sample
from escaler.targets.snapshot import TargetSnapshot

__all__ = [
    "ALGORITHM_HISTORY",
    "Collection",
    "Collector",
    "MetricsMemory",
    "MetricsOutcome",
    "MetricsRecommender",
    "collection_key",
    "window_key",
]

# what a collection's result must match to be consumed: uid, generation, annotations
_Tag = tuple[str, int, tuple[tuple[str, str], ...]]
# hex digits of the spec hash in a window key (64 bits: no two specs of one scaler collide)
_KEY_HASH_DIGITS = 16


class Collector(Protocol):
    """``MetricsCollector``: one ``Sample`` per metric, in spec order."""

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]: ...

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue: ...


def collection_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The outbound executor's key of a scaler's metrics collection (one in flight per scaler)."""
    return ("metrics", namespace, name)


def window_key(index: int, spec: MetricSpec) -> str:
    """A metric's window key: ``<index>/<hash of its canonical spec>`` (see the module docstring)."""
    canonical = json.dumps(spec.to_object(), sort_keys=True, separators=(",", ":"))
    # interned: every scaler with this metric keys its window with one shared string (issue 30)
    return sys.intern(f"{index}/{hashlib.sha256(canonical.encode()).hexdigest()[:_KEY_HASH_DIGITS]}")


# the pod groups of a scaler without Resource metrics: one shared empty mapping, not one per scaler
_NO_PODS: Mapping[str, PodCounts] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Collection:
    """One metrics collection and what it recommended (reused until the next poll)."""

    # monotonic time of the collection
    at: float
    # metadata.generation and annotations it was made under (a spec change collects afresh)
    generation: int
    annotations: tuple[tuple[str, str], ...]
    recommend: RecommendResult
    statuses: tuple[MetricStatus, ...]


@dataclass(frozen=True, slots=True)
class MetricsMemory:
    """What metricsync keeps about one scaler between syncs (in this process only)."""

    # the sample windows, keyed by window_key; never mutated once in a MetricsMemory (see the module
    # docstring)
    windows: MetricWindows = field(default_factory=MetricWindows)
    # window key → the pod groups of the last read that had them (Resource metrics): the denominator
    # of the windowed total when this sync's read failed
    pods: Mapping[str, PodCounts] = field(default_factory=lambda: _NO_PODS)
    # past raw recommendations, oldest first, at most ALGORITHM_HISTORY (AlgorithmContext.history);
    # a compact RecommendationHistory once decide_metrics appended one (16 bytes an entry)
    history: Sequence[Recommendation] = ()
    # the last collection; None before the first
    last: Collection | None = None


@dataclass(frozen=True)
class MetricsOutcome:
    """One sync's recommendation, its currentMetrics rows, and the memory to keep."""

    recommend: RecommendResult
    # status.currentMetrics, in spec order (empty when nothing was read)
    statuses: tuple[MetricStatus, ...]
    # store this for the next sync (the same object when the last collection was reused)
    memory: MetricsMemory
    # a collection is in flight and no earlier one stands in for it: write nothing (its completion
    # wakes the scaler); ``recommend`` then only says so
    pending: bool = False


@dataclass(frozen=True)
class _Collected:
    """What a collection job returns: the samples, and what they were read under."""

    samples: tuple[tuple[MetricSpec, Sample], ...]
    # the target's spec.replicas the per-replica values were computed with
    current: int
    # monotonic time the collection was started (the samples' time; the cadence's anchor)
    at: float


@dataclass(frozen=True)
class _Metric:
    """One metric after windowing: its values per window and this sync's read error."""

    spec: MetricSpec
    # the display name (resource, metric name or query)
    name: str
    # the stable aggregate as the algorithm reads it (value None: nothing usable in the window)
    stable: MetricValue
    # the newest sample of the panic window, per replica like stable.value; None without one
    panic: float | None
    # the largest sample of the stable window, likewise; None without one
    peak: float | None
    # this sync's read error; None when the read succeeded
    error: str | None


@dataclass(frozen=True)
class _Windowed:
    """Every metric after windowing, and the memory that holds the new samples."""

    metrics: tuple[_Metric, ...]
    errors: tuple[str, ...]
    memory: MetricsMemory


class MetricsRecommender:
    """See the module docstring; stateless apart from its collaborators (state is ``MetricsMemory``)."""

    def __init__(self, collector: Collector | None, metrics: ScalerMetrics, clock: Clock,
                 allowed_hosts: Sequence[str], poll_interval: float,
                 executor: Executor | None = None,
                 min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS) -> None:
        # reads the metrics; None = no collector configured (every sync: DecisionUnavailable)
        self._collector = collector
        # escaler_metric_errors_total
        self._metrics = metrics
        # monotonic time of the samples and of the collection cadence
        self._clock = clock
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)
        # --metrics-trigger-poll-interval (0 = collect on every sync)
        self._poll_interval = poll_interval
        # --min-poll-interval: the floor of a scaler's own pollIntervalSeconds
        self._min_poll_interval = min_poll_interval
        # runs collections off the reconcile worker; inline (synchronous) when none is given
        self._executor: Executor = executor if executor is not None else InlineExecutor(clock)

    def recommend(self, scaler: ElasticScaler, ann: ScalerAnnotations, snap: TargetSnapshot,
                  memory: MetricsMemory, *, now: float) -> MetricsOutcome:
        """One sync's outcome at wall-clock ``now`` (see the module docstring)."""
        out = self._recommend(scaler, ann, snap, memory, now=now)
        mt = scaler.spec.trigger.metrics_trigger
        if mt is None or mt.activation is None or out.recommend.can_scale_from_zero:
            return out
        # activation: no outcome is ScalingDisabled at 0 (a failed read at 0 holds, or falls back)
        return replace(out, recommend=replace(out.recommend, can_scale_from_zero=True))

    def _recommend(self, scaler: ElasticScaler, ann: ScalerAnnotations, snap: TargetSnapshot,
                   memory: MetricsMemory, *, now: float) -> MetricsOutcome:
        mono = self._clock.monotonic()
        key, tag = _identity(scaler)
        fresh = self._fresh(key, tag)
        if fresh is not None:
            return self._consume(scaler, ann, snap, memory, fresh, now, mono)
        last, in_flight = memory.last, self._executor.pending(key)
        if self._reusable(scaler, last, tag, mono) or (in_flight and _same_spec(last, tag)):
            # a sync between polls, or while the next collection is in flight: the last outcome stands
            assert last is not None
            return MetricsOutcome(last.recommend, last.statuses, memory)
        if in_flight:
            return _pending(scaler, memory)
        early = self._preflight(scaler, snap)
        if early is not None:
            return _remember(MetricsOutcome(early, (), memory), mono, tag[1], tag[2])
        return self._submit(scaler, ann, snap, memory, key, tag, now, mono)

    def prefetch(self, scaler: ElasticScaler, snap: TargetSnapshot, memory: MetricsMemory) -> bool:
        """The poller's shortcut: start this poll's collection now, so the one reconcile its
        completion wakes consumes it (one reconcile per poll, not one to submit and one to consume).

        True when a collection was started or is already in flight (nothing else to do: its
        completion enqueues the scaler). False when a sync must decide instead — the last
        collection is still recent, its result waits unconsumed, a preflight refusal (refused
        endpoint, 0 replicas) must be reported, or the namespace's queue is full — and the poller
        enqueues the scaler as before. Never touches ``memory`` (a reconcile owns it) and never
        waits on I/O."""
        if not self._executor.wakes:
            return False  # an inline executor would run the collection on the poller's thread
        mono = self._clock.monotonic()
        key, tag = _identity(scaler)
        if self._executor.pending(key):
            return True
        if self._executor.finished(key) or self._reusable(scaler, memory.last, tag, mono):
            return False
        if self._preflight(scaler, snap) is not None:
            return False
        return self._start(scaler, snap, key, tag, mono) != Submitted.FULL

    def _reusable(self, scaler: ElasticScaler, last: Collection | None, tag: _Tag, mono: float) -> bool:
        """The last collection was made for this spec less than a poll (the scaler's own) ago."""
        every = effective_interval(scaler.spec.poll_interval_seconds, self._poll_interval,
                                   self._min_poll_interval)
        return (_same_spec(last, tag) and last is not None
                and same_poll(Request(scaler.namespace, scaler.name), last.at, mono, every))

    def forget(self, namespace: str, name: str) -> None:
        """The scaler is gone: drop its queued collection, and the result of a running one."""
        self._executor.discard(collection_key(namespace, name))

    def _fresh(self, key: tuple[str, str, str], tag: _Tag) -> Finished | None:
        """The finished collection of this scaler as it is now (uid, generation, annotations); a
        result made for anything else (a predecessor of the same name, an older spec) is dropped."""
        fin = self._executor.take(key)
        if fin is None or fin.tag != tag:
            return None
        return fin

    def _submit(self, scaler: ElasticScaler, ann: ScalerAnnotations, snap: TargetSnapshot,
                memory: MetricsMemory, key: tuple[str, str, str], tag: _Tag, now: float,
                mono: float) -> MetricsOutcome:
        """Start a collection off the reconcile worker; pending (write nothing) until it finishes."""
        mt = scaler.spec.trigger.metrics_trigger
        assert mt is not None
        ns = scaler.namespace
        if self._start(scaler, snap, key, tag, mono) == Submitted.FULL:
            return MetricsOutcome(RecommendResult.no_decision(
                "metrics", f"too many metric collections are queued in namespace {ns}; retrying at the "
                           "next poll", total=len(mt.metrics), can_scale_from_zero=False), (), memory)
        fresh = self._fresh(key, tag)  # an inline executor has finished already
        if fresh is not None:
            return self._consume(scaler, ann, snap, memory, fresh, now, mono)
        return _pending(scaler, memory)

    def _start(self, scaler: ElasticScaler, snap: TargetSnapshot, key: tuple[str, str, str],
               tag: _Tag, mono: float) -> Submitted:
        """Submit the collection (windowed at ``mono``, the time it was asked for)."""
        mt = scaler.spec.trigger.metrics_trigger
        collector = self._collector
        assert mt is not None and collector is not None
        ns, current, metrics = scaler.namespace, snap.spec_replicas, tuple(mt.metrics)
        if current == 0:
            # activation at 0 (the preflight let it through): only the totals that exist without
            # pods, read as for 1 replica so that an AverageValue metric gives its total
            current, metrics = 1, _wake_metrics(mt)

        def collect() -> _Collected:
            return _Collected(tuple(collector.collect(ns, metrics, snap, current)), current, mono)

        return self._executor.submit(key, ns, tag, collect, Request(ns, scaler.name))

    def _preflight(self, scaler: ElasticScaler, snap: TargetSnapshot) -> RecommendResult | None:
        """The outcome of a sync that needs no collection (refused endpoint, 0 replicas, no
        collector), or None."""
        mt = scaler.spec.trigger.metrics_trigger
        assert mt is not None
        total, current = len(mt.metrics), snap.spec_replicas
        refused = self._refused(mt)
        if refused is not None:
            return refused
        if (current == 0 and mt.activation is None) or self._collector is None:
            # someone switched the workload off: a MetricsTrigger without activation does not scale
            # from zero (ScalingDisabled), so there is nothing to query
            why = "the target has 0 replicas" if current == 0 else "no metrics collector configured"
            return RecommendResult.no_decision("metrics", why, total=total, can_scale_from_zero=False)
        return None

    def _consume(self, scaler: ElasticScaler, ann: ScalerAnnotations, snap: TargetSnapshot,
                 memory: MetricsMemory, fin: Finished, now: float, mono: float) -> MetricsOutcome:
        """Window a finished collection and decide on it, against the target as it is now."""
        mt = scaler.spec.trigger.metrics_trigger
        assert mt is not None
        gen = scaler.metadata.generation or 0
        ann_key = tuple(sorted((scaler.metadata.annotations or {}).items()))
        got = fin.value if isinstance(fin.value, _Collected) else None
        at = got.at if got is not None else fin.submitted_at
        early = self._preflight(scaler, snap)
        if early is not None:
            return _remember(MetricsOutcome(early, (), memory), at, gen, ann_key)
        if got is None:
            why = "nothing was collected" if fin.error is None else f"collection failed: {fin.error}"
            got = _Collected(tuple((m, Sample.fail(why)) for m in mt.metrics), snap.spec_replicas, at)
        for _, sample in got.samples:
            if sample.error is not None:
                self._metrics.metric_errors.labels(scaler.namespace, scaler.metadata.name).inc()
        if snap.spec_replicas == 0:
            return _remember(MetricsOutcome(_at_zero(mt, got), (), memory), got.at, gen, ann_key)
        try:
            windowed = self._window(got.samples, ann, memory, got.current, snap.spec_replicas, got.at, mono)
        except _Refusal as refusal:
            out = MetricsOutcome(refusal.result, refusal.statuses, refusal.memory)
        else:
            out = self._decide(mt, windowed, snap.spec_replicas, now)
            act = _activation(mt, got)
            if act is not None and out.recommend.replicas is not None:
                out = replace(out, recommend=replace(out.recommend, activation=act))
        return _remember(out, got.at, gen, ann_key)

    def _refused(self, mt: MetricsTrigger) -> RecommendResult | None:
        """InvalidSpec for an ExternalServer endpoint outside --allowed-endpoint-hosts, before any request."""
        if not self._allowed_hosts:
            return None
        for i, m in enumerate(mt.metrics):
            if m.external_server is None:
                continue
            path = f"spec.trigger.metricsTrigger.metrics[{i}].externalServer.endpoint"
            try:
                host = check_endpoint_url(m.external_server.endpoint)
            except ValueError as err:
                return RecommendResult.invalid(f"{path}: {err}", total=len(mt.metrics))
            if not host_allowed(host, self._allowed_hosts):
                return RecommendResult.invalid(f"{path}: host {host} is not in --allowed-endpoint-hosts",
                                               total=len(mt.metrics))
        return None

    def _window(self, samples: Sequence[tuple[MetricSpec, Sample]], ann: ScalerAnnotations,
                memory: MetricsMemory, collected_current: int, current: int, at: float, mono: float,
                ) -> _Windowed:
        """Add a collection's samples (made at monotonic ``at`` with ``collected_current`` replicas) to a
        copy of the windows and read every metric's values back as of ``at`` for ``current`` replicas
        (``mono``, now, only collects old samples).
        ``_Refusal`` for missingDataPolicy Fail (DecisionUnavailable) and an unreadable target
        (InvalidSpec); the new samples are kept either way."""
        assert self._collector is not None
        keys = [window_key(i, spec) for i, (spec, _) in enumerate(samples)]
        windows = memory.windows.copy(_window_policy(ann))
        windows.retain(keys)
        pods = {k: p for k, p in memory.pods.items() if k in keys}
        errors: list[str] = []
        for key, (spec, sample) in zip(keys, samples, strict=True):
            if sample.value is not None:
                windows.add(key, at, sample.value * _denominator(spec, sample.pods, collected_current))
                if sample.pods is not None:
                    pods[key] = sample.pods
            else:
                errors.append(f"{metric_name(spec)}: {sample.error}")
        kept = replace(memory, windows=windows, pods=MappingProxyType(pods) if pods else _NO_PODS)
        metrics: list[_Metric] = []
        try:
            for key, (spec, sample) in zip(keys, samples, strict=True):
                # read as of the collection: its samples are that new, however long the sync that
                # consumes them waited in a backed-up queue (the panic window must still hold them)
                metrics.append(self._read(windows, key, spec, sample, pods.get(key), current, at))
        except NoDecision as err:
            raise _Refusal(RecommendResult.no_decision(
                "metrics", str(err), total=len(samples), metric_errors=tuple(errors),
                can_scale_from_zero=False), _rows(metrics), kept) from None
        except ValueError as err:
            raise _Refusal(RecommendResult.invalid(f"spec.trigger.metricsTrigger.metrics: {err}",
                                                   total=len(samples)), _rows(metrics), kept) from None
        finally:
            windows.gc(mono)
        return _Windowed(tuple(metrics), tuple(errors), kept)

    def _read(self, windows: MetricWindows, key: str, spec: MetricSpec, sample: Sample,
              pods: PodCounts | None, current: int, at: float) -> _Metric:
        """One metric's stable, panic and peak values as of ``at``, per replica where the spec says so."""
        assert self._collector is not None
        name = metric_name(spec)
        scale = _denominator(spec, pods, current)

        def per(value: float | None) -> float | None:
            return None if value is None else value / scale

        stable = per(windows.aggregate(key, at, metric=name))
        read = Sample(value=stable, pods=pods) if stable is not None else \
            Sample(value=None, error=sample.error or "no sample in the window")
        mv = self._collector.to_metric_value(spec, read)
        return _Metric(spec, name, mv, per(windows.panic(key, at)), per(windows.peak(key, at)),
                       sample.error)

    def _decide(self, mt: MetricsTrigger, w: _Windowed, current: int, now: float) -> MetricsOutcome:
        """Run the algorithm on the stable, panic and peak values and choose
        (``escaler.scaling.metricdecision``, shared with the simulator), and build the rows."""
        d = decide_metrics(mt.scaling_algorithm, mt.algorithm_config or {}, current, now,
                           [WindowedValue(m.stable, m.panic, m.peak) for m in w.metrics], w.errors,
                           w.memory.history)
        if d.used is None or d.alone is None:
            return MetricsOutcome(d.recommend, _rows(w.metrics), w.memory)
        rows = tuple(_row(m, v, a) for m, v, a in zip(w.metrics, d.used, d.alone, strict=True))
        return MetricsOutcome(d.recommend, rows, replace(w.memory, history=d.history))


class _Refusal(Exception):
    """A sync that ends after reading: its result, the rows so far, and the memory with the samples."""

    def __init__(self, result: RecommendResult, statuses: tuple[MetricStatus, ...],
                 memory: MetricsMemory) -> None:
        super().__init__(result.summary())
        self.result = result
        self.statuses = statuses
        self.memory = memory


def _identity(scaler: ElasticScaler) -> tuple[tuple[str, str, str], _Tag]:
    """The executor key of the scaler's collection, and the tag its result must match: uid,
    generation and annotations (a result made for anything else is dropped)."""
    ann_key = tuple(sorted((scaler.metadata.annotations or {}).items()))
    tag: _Tag = (scaler.metadata.uid or "", scaler.metadata.generation or 0, ann_key)
    return collection_key(scaler.namespace, scaler.name), tag


def _same_spec(last: Collection | None, tag: _Tag) -> bool:
    """``last`` was collected for the generation and annotations in ``tag``."""
    return last is not None and last.generation == tag[1] and last.annotations == tag[2]


def _pending(scaler: ElasticScaler, memory: MetricsMemory) -> MetricsOutcome:
    mt = scaler.spec.trigger.metrics_trigger
    total = len(mt.metrics) if mt is not None else 0
    rr = RecommendResult.no_decision("metrics", "a metrics collection is in flight", total=total,
                                     can_scale_from_zero=False)
    return MetricsOutcome(rr, (), memory, pending=True)


def _remember(out: MetricsOutcome, at: float, generation: int,
              annotations: tuple[tuple[str, str], ...]) -> MetricsOutcome:
    """``out`` with its memory recording it as the last collection (reused until the next poll)."""
    last = Collection(at, generation, annotations, out.recommend, out.statuses)
    return replace(out, memory=replace(out.memory, last=last))


def _wake_metrics(mt: MetricsTrigger) -> tuple[MetricSpec, ...]:
    """The metrics activation reads: External and ExternalServer (totals that exist at 0 replicas)."""
    return tuple(m for m in mt.metrics if str(m.type) in WAKE_METRIC_TYPES)


def _activation(mt: MetricsTrigger, got: _Collected) -> ActivationState | None:
    """``activation`` and this collection's totals of its wake-capable metrics; None without it."""
    if mt.activation is None:
        return None
    readings = tuple(
        ActivationReading(metric_name(spec), None if sample.value is None
                          else sample.value * _denominator(spec, sample.pods, got.current))
        for spec, sample in got.samples if str(spec.type) in WAKE_METRIC_TYPES)
    if not readings:  # CEL and the webhook require one; a stored object from before them may lack it
        readings = (ActivationReading("no External or ExternalServer metric", None),)
    return ActivationState(parse_quantity(mt.activation.value), readings)


def _at_zero(mt: MetricsTrigger, got: _Collected) -> RecommendResult:
    """The target has 0 replicas and the trigger has activation: recommend 0 on the readable totals
    (the activation step decides whether to wake), or no decision when none is readable."""
    act = _activation(mt, got)
    assert act is not None
    known = sum(r.value is not None for r in act.readings)
    errors = tuple(f"{metric_name(spec)}: {sample.error}" for spec, sample in got.samples
                   if sample.value is None and str(spec.type) in WAKE_METRIC_TYPES)
    if not known:
        return RecommendResult.no_decision("metrics", "; ".join(errors) or "no External or ExternalServer "
                                           "reading at 0 replicas", total=len(mt.metrics),
                                           metric_errors=errors, can_scale_from_zero=True)
    return RecommendResult.from_metrics(
        0, evaluated=known, total=len(mt.metrics), metric_errors=errors, can_scale_from_zero=True,
        detail="the target has 0 replicas: only activation is read", activation=act)


def _denominator(spec: MetricSpec, pods: PodCounts | None, current: int) -> float:
    """What a windowed total is divided by to give the per-replica value (see the module docstring):
    the current count (External/ExternalServer AverageValue), the ready pods' weight (Resource), or 1."""
    source = spec.external or spec.external_server
    if source is not None and str(source.target.type) == "AverageValue":
        return float(current)
    if pods is not None and spec.resource is not None:
        return pods.ready_weight
    return 1.0


def _row(m: _Metric, used: MetricValue, recommended: int | None) -> MetricStatus:
    # kept with the scaler's last collection until the next poll, and read only: shared bookkeeping,
    # and the type names interned (str() of an enum member is a new string each time: ~120 bytes a
    # scaler for two words every scaler repeats; issue 30)
    target_type = used.target_type
    return share_bookkeeping(MetricStatus(
        name=m.name[:1024], type=sys.intern(str(m.spec.type)), value=used.value, target=used.target_value,
        target_type=sys.intern(target_type) if isinstance(target_type, str) else target_type,
        recommended_replicas=recommended,
        error=cap_text(m.error) if m.error is not None else None))


def _rows(metrics: Sequence[_Metric]) -> tuple[MetricStatus, ...]:
    return tuple(_row(m, m.stable, None) for m in metrics)


@functools.lru_cache(maxsize=256)
def _window_policy(ann: ScalerAnnotations) -> WindowPolicy:
    """``WindowPolicy.from_annotations(ann)``, one shared (frozen) instance per distinct annotations:
    built once, not on every poll, and not held once per scaler (issue 10: memory per scaler)."""
    return WindowPolicy.from_annotations(ann)
