"""The LLMScaler's recommend step: read the provider when due, off the reconcile worker.

``LLMRecommender.recommend(scaler, memory, current)`` returns an ``Outcome``: the pipeline's
``RecommendResult``, the ``status.currentMetrics`` rows (Prometheus and Flow; empty for Custom),
and the ``Reading`` to remember. It writes nothing; the reconciler keeps the memory it returns.
``current`` is the target's ``spec.replicas``: only flow sizing reads it (the reconciler always
passes it; the default 0 serves the other providers' callers).

* **Preflight**, before any request: the provider the spec selects must be configured
  (``metricProvider: Custom`` without ``customProvider`` — possible only for objects older than
  the CEL rule — is ``ScalingActive=False/InvalidSpec`` and the count is held, apart from the
  min/max bounds), and its URL must name a host in ``--allowed-endpoint-hosts``
  (``InvalidSpec`` naming the field); a Custom provider by ``serviceId`` has no URL: it needs the
  SLO decision engine's ``DecisionLookup`` (none → ``DecisionUnavailable``) and reads the route of the
  scaler's own namespace, never another; a Flow provider's queries must resolve
  (``escaler.reconcilers.kit.flowpresets.flow_queries``: the selector's grammar, a generic engine's
  queries). No reader configured → ``DecisionUnavailable``.
* **Flow** (``flow``): the queries of ``flowpresets.flow_queries`` are read like Prometheus metrics
  (one instant query each, same deadline and body cap); a fresh reading is decided once by
  ``flow.flow_result`` from the ``FlowMemo`` carried in the ``Reading`` (every path that replaces
  the reading carries it on: a failed or refused read leaves the flow state as it was), and a sync
  that reuses the reading reuses its decision. The decision's time is the due time of the poll the
  read belongs to (``kit.poller.poll_time``), not the moment a worker got to it.
* **Cadence** (as an ElasticScaler MetricsTrigger): a provider is read at most once per
  ``--metrics-trigger-poll-interval`` (``kit.poller.same_poll``: once per due time of the scaler's
  phase, so a read that ran late never makes the next poll skip); a sync in between (a target event,
  our own write's echo) reuses the last reading, against the target as it is now. A spec change
  (generation) or a new object (uid) reads afresh; with polling off (interval 0) every sync reads.
  The poller enqueues every LLMScaler once per interval.
* **Off the reconcile worker.** A read is I/O against a server a tenant names, so it runs on the
  outbound executor (``escaler.runtime.executor``; inline when none is given), keyed
  ``("llm", namespace, name)``, grouped per namespace: the sync that submits one is *pending*
  (the reconciler writes nothing) and the read's completion enqueues the scaler, whose next sync
  consumes it. While a read is in flight, a sync reuses the last reading of the same spec, or is
  pending when there is none. A result is consumed only by the scaler object and generation it was
  read for (``Finished.tag``); a deleted scaler's job is discarded (``forget``). A full namespace
  queue is ``DecisionUnavailable``, retried at the next poll.
* Every request has a total deadline (``timeoutSeconds`` of the provider, at most
  ``escaler.signals.fetch.MAX_TIMEOUT_SECONDS``) and a body cap (``provider``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.api.llmscaler import LLMScaler, MetricProvider
from escaler.api.scaler import MetricStatus
from escaler.clock import Clock
from escaler.reconcilers.kit.flowpresets import flow_queries, flow_query_path
from escaler.reconcilers.kit.flowsizing import FlowMemo
from escaler.reconcilers.kit.poller import (
    DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    effective_interval,
    poll_time,
    same_poll,
)
from escaler.reconcilers.kit.ports import DecisionLookup
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.llmscaler.flow import flow_config, flow_result, flow_source, signal_targets
from escaler.reconcilers.llmscaler.provider import (
    CUSTOM_SOURCE,
    CustomReading,
    custom_result,
    prometheus_result,
    read_served,
)
from escaler.runtime.executor import Executor, Finished, InlineExecutor, Submitted
from escaler.runtime.types import Request
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.pipeline import FROM_DECISION, FROM_METRICS, RecommendResult
from escaler.signals.promqlscope import PromQLScope
from escaler.signals.sample import Sample

__all__ = ["LLMRecommender", "Outcome", "ProviderReader", "Reading", "read_key"]

# (uid, generation): what a read's result must match to be consumed
_Tag = tuple[str, int]


class ProviderReader(Protocol):
    """The outbound reads (``setup`` builds the production one on the hardened fetch path)."""

    def prometheus(self, endpoint: str, query: str, timeout: float) -> Sample: ...

    def custom(self, url: str, timeout: float) -> CustomReading: ...


def read_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The outbound executor's key of an LLMScaler's provider read (one in flight per scaler)."""
    return ("llm", namespace, name)


@dataclass(frozen=True)
class Reading:
    """The last provider reading of one scaler and what it recommended (reused until the next poll)."""

    # monotonic time the read was submitted (the cadence's anchor)
    at: float
    # (uid, generation) it was read for
    tag: _Tag
    recommend: RecommendResult
    rows: tuple[MetricStatus, ...]
    # metricProvider Flow: flow sizing's state and what it was computed under; None before the first
    # flow decision (or for another provider)
    flow: FlowMemo | None = None


@dataclass(frozen=True)
class Outcome:
    """One sync's recommendation, its currentMetrics rows, and the reading to remember."""

    recommend: RecommendResult
    rows: tuple[MetricStatus, ...]
    # store this for the next sync (None: nothing read yet)
    memory: Reading | None
    # a read is in flight and no earlier reading of this spec stands in: write nothing
    pending: bool = False


class LLMRecommender:
    """See the module docstring; stateless apart from its collaborators (state is ``Reading``)."""

    def __init__(self, reader: ProviderReader | None, clock: Clock, metrics: ScalerMetrics,
                 allowed_hosts: Sequence[str], poll_interval: float,
                 executor: Executor | None = None,
                 min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS,
                 decisions: DecisionLookup | None = None,
                 promql_scope: PromQLScope | None = None) -> None:
        if not poll_interval >= 0:
            raise ValueError(f"LLMRecommender.poll_interval: must be >= 0, got {poll_interval!r}")
        # does the GETs; None = no outbound reads possible (every sync: DecisionUnavailable)
        self._reader = reader
        # monotonic time of the cadence
        self._clock = clock
        # escaler_metric_errors_total
        self._metrics = metrics
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)
        # --metrics-trigger-poll-interval (0 = read on every sync)
        self._poll_interval = poll_interval
        # --min-poll-interval: the floor of a scaler's own spec.pollIntervalSeconds
        self._min_poll_interval = min_poll_interval
        # runs reads off the reconcile worker; inline (synchronous) when none is given
        self._executor: Executor = executor if executor is not None else InlineExecutor(clock)
        # the SLO decision engine's decisions, in-process (customProvider.serviceId); None = no engine
        self._decisions = decisions
        # tenant PromQL confinement (--promql-namespace-label); None = not confined
        self._scope = promql_scope

    def forget(self, namespace: str, name: str) -> None:
        """The scaler is gone: drop its queued read, and the result of a running one."""
        self._executor.discard(read_key(namespace, name))

    def recommend(self, scaler: LLMScaler, memory: Reading | None, current: int = 0) -> Outcome:
        mono = self._clock.monotonic()
        tag: _Tag = (scaler.metadata.uid or "", scaler.metadata.generation or 0)
        carried = memory.flow if memory is not None else None
        early = self._preflight(scaler)
        if early is not None:
            return Outcome(early, (), Reading(mono, tag, early, (), carried))
        key = read_key(scaler.namespace, scaler.name)
        every = effective_interval(scaler.spec.poll_interval_seconds, self._poll_interval,
                                   self._min_poll_interval)
        fin = self._executor.take(key)
        if fin is not None and fin.tag == tag:
            return self._consume(scaler, fin, tag, carried, current, every)
        same = memory is not None and memory.tag == tag
        if same and memory is not None and same_poll(Request(scaler.namespace, scaler.name), memory.at, mono,
                                                     every):
            return Outcome(memory.recommend, memory.rows, memory)
        if self._executor.pending(key):
            if same and memory is not None:
                return Outcome(memory.recommend, memory.rows, memory)
            return _pending(scaler, memory)
        submitted = self._executor.submit(key, scaler.namespace, tag, self._job(scaler),
                                          Request(scaler.namespace, scaler.name))
        if submitted == Submitted.FULL:
            rr = _unavailable(scaler, f"too many provider reads are queued in namespace {scaler.namespace}; "
                                      "retrying at the next poll")
            return Outcome(rr, (), Reading(mono, tag, rr, (), carried))
        fin = self._executor.take(key)  # an inline executor has finished already
        if fin is not None and fin.tag == tag:
            return self._consume(scaler, fin, tag, carried, current, every)
        return _pending(scaler, memory)

    # ------------------------------------------------------------------ steps

    def _preflight(self, scaler: LLMScaler) -> RecommendResult | None:
        spec = scaler.spec
        if spec.metric_provider == MetricProvider.CUSTOM:
            if spec.custom_provider is None:
                return RecommendResult.invalid(
                    "spec.customProvider: required when metricProvider is Custom", kind=FROM_DECISION)
            if spec.custom_provider.url is None:  # serviceId: read in-process, no URL to check
                return None if self._decisions is not None else _unavailable(
                    scaler, "spec.customProvider.serviceId: this manager has no SLO decision engine to read")
            refused = self._refused("spec.customProvider.url", spec.custom_provider.url, FROM_DECISION)
        elif spec.metric_provider == MetricProvider.FLOW:
            if spec.flow is None:
                return RecommendResult.invalid("spec.flow: required when metricProvider is Flow")
            try:
                queries = flow_queries(spec.flow)
            except ValueError as err:
                return RecommendResult.invalid(str(err))
            paths = [(flow_query_path(spec.flow, s), q) for s, q in queries]
            refused = (self._refused("spec.flow.endpoint", spec.flow.endpoint, FROM_METRICS, total=len(paths))
                       or self._confined(scaler.namespace, spec.flow.endpoint, paths, len(paths)))
        else:
            if spec.prometheus is None:
                return RecommendResult.invalid(
                    "spec.prometheus: required when metricProvider is Prometheus", kind=FROM_METRICS)
            metrics = spec.prometheus.metrics
            refused = (self._refused("spec.prometheus.endpoint", spec.prometheus.endpoint, FROM_METRICS,
                                     total=len(metrics))
                       or self._confined(scaler.namespace, spec.prometheus.endpoint,
                                         [(f"spec.prometheus.metrics[{i}].query", m.query)
                                          for i, m in enumerate(metrics)], len(metrics)))
        if refused is not None:
            return refused
        if self._reader is None:
            return _unavailable(scaler, "no HTTP client configured")
        return None

    def _confined(self, namespace: str, endpoint: str, queries: Sequence[tuple[str, str]],
                  total: int) -> RecommendResult | None:
        """InvalidSpec naming the first query that reads outside ``namespace`` (``promqlscope``)."""
        if self._scope is None:
            return None
        for path, query in queries:
            why = self._scope.refusal(query, namespace, endpoint)
            if why is not None:
                return RecommendResult.invalid(f"{path}: {why}", kind=FROM_METRICS, total=total)
        return None

    def _refused(self, path: str, url: str, kind: str, total: int = 0) -> RecommendResult | None:
        try:
            host = check_endpoint_url(url)
        except ValueError as err:
            return RecommendResult.invalid(f"{path}: {err}", kind=kind, total=total)
        if not host_allowed(host, self._allowed_hosts):
            return RecommendResult.invalid(f"{path}: host {host} is not in --allowed-endpoint-hosts",
                                           kind=kind, total=total)
        return None

    def _job(self, scaler: LLMScaler) -> Callable[[], Any]:
        """The read, as a closure over plain values (it runs on an executor thread)."""
        spec = scaler.spec
        if spec.metric_provider == MetricProvider.CUSTOM and spec.custom_provider is not None \
                and spec.custom_provider.service_id is not None:
            lookup, ns, sid = self._decisions, scaler.namespace, spec.custom_provider.service_id
            assert lookup is not None
            # the scaler's own namespace, always: a serviceId names a route of that namespace only
            return lambda: read_served(lookup, ns, sid)
        reader = self._reader
        assert reader is not None
        if spec.metric_provider == MetricProvider.CUSTOM:
            cp = spec.custom_provider
            assert cp is not None and cp.url is not None
            url, timeout = cp.url, float(cp.timeout_seconds)
            return lambda: reader.custom(url, timeout)
        if spec.metric_provider == MetricProvider.FLOW:
            flow = spec.flow
            assert flow is not None
            endpoint, timeout = flow.endpoint, float(flow.timeout_seconds)
            flow_q = [q for _, q in flow_queries(flow)]
            return lambda: tuple(reader.prometheus(endpoint, q, timeout) for q in flow_q)
        prom = spec.prometheus
        assert prom is not None
        endpoint, timeout = prom.endpoint, float(prom.timeout_seconds)
        queries = [m.query for m in prom.metrics]
        return lambda: tuple(reader.prometheus(endpoint, q, timeout) for q in queries)

    def _consume(self, scaler: LLMScaler, fin: Finished, tag: _Tag, carried: FlowMemo | None, current: int,
                 every: float) -> Outcome:
        spec = scaler.spec
        rows: tuple[MetricStatus, ...] = ()
        if spec.metric_provider == MetricProvider.FLOW:
            return self._consume_flow(scaler, fin, tag, carried, current, every)
        if spec.metric_provider == MetricProvider.CUSTOM:
            assert spec.custom_provider is not None
            reading = fin.value if isinstance(fin.value, CustomReading) else \
                CustomReading(None, f"the read failed: {fin.error or 'nothing was returned'}")
            if reading.error is not None:
                self._count_error(scaler)
            rr = custom_result(spec.custom_provider.source(), reading)
        else:
            prom = spec.prometheus
            assert prom is not None
            samples = fin.value if isinstance(fin.value, tuple) and len(fin.value) == len(prom.metrics) else \
                tuple(Sample.fail(f"the query failed: {fin.error or 'nothing was returned'}")
                      for _ in prom.metrics)
            for s in samples:
                if s.error is not None:
                    self._count_error(scaler)
            rr, rows = prometheus_result(prom.endpoint, prom.metrics, samples)
        return Outcome(rr, rows, Reading(fin.submitted_at, tag, rr, rows, carried))

    def _consume_flow(self, scaler: LLMScaler, fin: Finished, tag: _Tag, carried: FlowMemo | None,
                      current: int, every: float) -> Outcome:
        """A fresh flow reading, decided once (``flow.flow_result``), at the due time of the poll the
        read belongs to (``poller.poll_time`` of the read's start): a read a busy executor started late
        is not a poll off its period to the flow's intervals."""
        flow = scaler.spec.flow
        assert flow is not None
        queries = flow_queries(flow)
        samples = fin.value if isinstance(fin.value, tuple) and len(fin.value) == len(queries) else \
            tuple(Sample.fail(f"the query failed: {fin.error or 'nothing was returned'}") for _ in queries)
        for s in samples:
            if s.error is not None:
                self._count_error(scaler)
        config = flow_config(scaler.spec, every)
        now = poll_time(Request(scaler.namespace, scaler.name), fin.submitted_at, every)
        rr, rows, memo = flow_result(flow.endpoint, queries, samples, config, carried, now=now,
                                     current=current, targets=signal_targets(flow, config))
        return Outcome(rr, rows, Reading(fin.submitted_at, tag, rr, rows, memo))

    def _count_error(self, scaler: LLMScaler) -> None:
        self._metrics.metric_errors.labels(scaler.namespace, scaler.name).inc()


def _unavailable(scaler: LLMScaler, why: str) -> RecommendResult:
    spec = scaler.spec
    if spec.metric_provider == MetricProvider.CUSTOM:
        return RecommendResult.no_decision(CUSTOM_SOURCE, why, kind=FROM_DECISION)
    if spec.metric_provider == MetricProvider.FLOW and spec.flow is not None:
        return RecommendResult.no_decision(flow_source(spec.flow.endpoint), why,
                                           total=len(flow_queries(spec.flow)))
    total = len(spec.prometheus.metrics) if spec.prometheus is not None else 0
    endpoint = spec.prometheus.endpoint if spec.prometheus is not None else "(none)"
    return RecommendResult.no_decision(f"Prometheus {endpoint}", why, total=total)


def _pending(scaler: LLMScaler, memory: Reading | None) -> Outcome:
    return Outcome(_unavailable(scaler, "a read is in flight"), (), memory, pending=True)
