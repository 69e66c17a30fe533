"""MetricsTrigger with an algorithm (SPEC §5.2, §5.4): collect, window, aggregate, run the algorithm.

``MetricsRecommender.recommend(...)`` turns one sync into the pipeline's ``RecommendResult`` and the
``status.currentMetrics`` rows:

* **Cadence.** Metrics are collected at most once per ``--metrics-trigger-poll-interval`` (what
  the poll interval promises the metric backends): a sync woken in between by an event (a target
  rollout step, a foreign HPA) reuses the last collection's recommendation, against the target
  as it is now (a recommendation is an absolute count, so reusing it after our own write does
  not compound: the next step waits for the next poll). A spec or annotation change collects
  afresh; with polling off (interval 0) every sync collects.
* **Windows.** Each usable sample enters the scaler's in-memory window; the value handed to the
  algorithm is the window's aggregate (``metrics.*`` annotations: window, aggregation, missing
  data policy, outlier filter); old samples are collected (``gcFactor``).
* **Usable metrics.** Metrics whose aggregate is missing are left out (``MetricsPipeline=False/
  PartialMetrics``, the errors named); none usable → ``DecisionUnavailable``. On partial metrics
  the recommendation never scales *down* (a missing metric could be the one asking for more
  replicas; the HPA does the same).
* **Algorithm.** The registered function runs on a read-only ``AlgorithmContext``; ``NoDecision``
  → ``DecisionUnavailable``, ``ValueError`` → ``InvalidSpec``. Each metric's own recommendation
  (the algorithm on that metric alone) is reported in ``currentMetrics``.
* ``ExternalServer`` endpoints outside ``--allowed-endpoint-hosts`` are refused (``InvalidSpec``)
  before any request. A MetricsTrigger cannot scale a target from zero (``ScalingDisabled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from escaler.api.elasticscaler import ElasticScaler, MetricSpec
from escaler.api.scaler import MetricStatus
from escaler.clock import Clock
from escaler.reconcilers.elasticscaler.context import Collected, ScalerMemory, Sync
from escaler.reconcilers.scalermetrics import ScalerMetrics
from escaler.scaling.algorithm import AlgorithmContext, MetricValue, NoDecision, Recommendation, is_usable
from escaler.scaling.annotations import ScalerAnnotations
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.pipeline import RecommendResult
from escaler.scaling.registry import AlgorithmNotRegistered, get_algorithm
from escaler.scaling.text import cap_text
from escaler.scaling.window import WindowPolicy
from escaler.signals.collector import metric_name
from escaler.signals.sample import Sample
from escaler.targets.snapshot import TargetSnapshot

__all__ = ["ALGORITHM_HISTORY", "REUSE_FRACTION", "Collector", "MetricsRecommender"]

# past raw recommendations given to an algorithm (AlgorithmContext.history)
ALGORITHM_HISTORY = 64
# a sync within this fraction of the poll interval after a collection reuses it (the poller's
# next enqueue lands exactly one interval later; the slack absorbs scheduling jitter)
REUSE_FRACTION = 0.8


class Collector(Protocol):
    """``MetricsCollector``: one ``Sample`` per metric, in spec order."""

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]: ...

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue: ...


class MetricsRecommender:
    """See the module docstring; stateless apart from its collaborators (state is in ``ScalerMemory``)."""

    def __init__(self, collector: Collector | None, metrics: ScalerMetrics, clock: Clock,
                 allowed_hosts: Sequence[str], poll_interval: float) -> None:
        # reads the metrics; None = no collector configured (every sync: DecisionUnavailable)
        self._collector = collector
        # escaler_metric_errors_total
        self._metrics = metrics
        self._clock = clock
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)
        # --metrics-trigger-poll-interval (0 = collect on every sync)
        self._poll_interval = poll_interval

    def recommend(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: ScalerMemory,
                  snap: TargetSnapshot) -> tuple[RecommendResult, list[MetricStatus]]:
        """One sync's recommendation and currentMetrics rows (see the module docstring)."""
        mono = self._clock.monotonic()
        ann_key = tuple(sorted((scaler.metadata.annotations or {}).items()))
        gen = scaler.metadata.generation or 0
        last = mem.last_metrics
        if (self._poll_interval > 0 and last is not None and last.generation == gen
                and last.annotations == ann_key and mono - last.at < self._poll_interval * REUSE_FRACTION):
            return last.recommend, list(last.statuses)
        rr, statuses = self._collect(sync, scaler, ann, mem, snap)
        mem.last_metrics = Collected(mono, gen, ann_key, rr, tuple(statuses))
        return rr, statuses

    def _collect(self, sync: Sync, scaler: ElasticScaler, ann: ScalerAnnotations, mem: ScalerMemory,
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
                    host = check_endpoint_url(m.external_server.endpoint)
                except ValueError as err:
                    return RecommendResult.invalid(
                        f"spec.trigger.metricsTrigger.metrics[{i}].externalServer.endpoint: {err}",
                        total=total), []
                if not host_allowed(host, self._allowed_hosts):
                    return RecommendResult.invalid(
                        f"spec.trigger.metricsTrigger.metrics[{i}].externalServer.endpoint: host {host} "
                        "is not in --allowed-endpoint-hosts", total=total), []
        if current == 0:
            # someone switched the workload off: a MetricsTrigger does not scale from zero
            # (ScalingDisabled), so there is nothing to query
            return RecommendResult.no_decision("metrics", "the target has 0 replicas", total=total,
                                               can_scale_from_zero=False), []
        if self._collector is None:
            return RecommendResult.no_decision("metrics", "no metrics collector configured", total=total,
                                               can_scale_from_zero=False), []
        samples = self._collector.collect(scaler.namespace, mt.metrics, snap, current)
        values: list[MetricValue] = []
        statuses: list[MetricStatus] = []
        errors: list[str] = []
        try:
            for spec, sample in samples:
                name = metric_name(spec)
                # A total divided per replica (External/ExternalServer with AverageValue) is windowed
                # as the total and divided by the *current* count after aggregation: windowing the
                # per-replica quotient would mix samples taken at different replica counts and
                # overshoot after every scale (a 40 total at 2 then 4 replicas averages to 15, not 10).
                per_replica = _total_per_replica(spec)
                if sample.value is not None:
                    mem.windows.add(name, mono, sample.value * current if per_replica else sample.value)
                else:
                    errors.append(f"{name}: {sample.error}")
                    self._metrics.metric_errors.labels(sync.req.namespace, sync.req.name).inc()
                aggregated = mem.windows.aggregate(name, mono)
                if aggregated is not None and per_replica:
                    aggregated = aggregated / current
                agg = Sample(value=aggregated) if aggregated is not None else \
                    Sample(value=None, error=sample.error or "no sample in the window")
                mv = self._collector.to_metric_value(spec, agg)
                values.append(mv)
                statuses.append(MetricStatus(
                    name=name[:1024], type=str(spec.type), value=aggregated, target=mv.target_value,
                    target_type=mv.target_type,
                    error=cap_text(sample.error) if sample.error is not None else None))
        except NoDecision as err:
            # missingDataPolicy Fail
            return RecommendResult.no_decision("metrics", str(err), total=total, metric_errors=tuple(errors),
                                               can_scale_from_zero=False), statuses
        except ValueError as err:
            return (RecommendResult.invalid(f"spec.trigger.metricsTrigger.metrics: {err}", total=total),
                    statuses)
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
                                               metric_errors=tuple(errors),
                                               can_scale_from_zero=False), statuses
        except ValueError as err:
            return RecommendResult.invalid(f"spec.trigger.metricsTrigger: {err}", total=total), statuses
        # per-metric recommendations (what each metric alone says), for status.currentMetrics
        for i, (st, one) in enumerate(zip(statuses, values, strict=True)):
            if not is_usable(one.value):
                continue
            try:
                alone = algorithm(AlgorithmContext(current_replicas=current, metrics=(one,), config=config,
                                                   history=mem.algorithm_history))
                statuses[i] = st.model_copy(update={"recommended_replicas": alone})
            except (NoDecision, ValueError):
                pass
        detail_parts = [f"{v.name[:80]} {v.value:g}/{v.target_value:g} ({v.target_type})" for v in usable
                        if v.value is not None]
        if len(usable) < total and raw < current:
            # partial metrics: never scale down on them
            detail_parts.append(f"partial metrics: scale-down to {raw} suppressed")
            raw = current
        mem.algorithm_history = (*mem.algorithm_history, Recommendation(time=sync.now, replicas=raw))[
            -ALGORITHM_HISTORY:]
        return RecommendResult.from_metrics(raw, evaluated=len(usable), total=total,
                                            detail=", ".join(detail_parts), metric_errors=tuple(errors),
                                            can_scale_from_zero=False), statuses


def _total_per_replica(spec: MetricSpec) -> bool:
    """True when the collector reports a workload total divided by the current replica count."""
    source = spec.external or spec.external_server
    return source is not None and str(source.target.type) == "AverageValue"
