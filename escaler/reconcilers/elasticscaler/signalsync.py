"""SignalTrigger in a sync (SPEC §5.5): pull the endpoint when due, apply the signal rule.

``SignalRecommender.recommend(...)`` pulls ``signalTrigger.endpoint`` at most once per
``pollIntervalSeconds`` (the sync is requeued for the next pull), records the reading in the
``SignalStore`` like a pushed signal, and returns the pipeline's ``RecommendResult``
(``DecisionReceived``; a SignalTrigger may scale from zero). A failed pull holds
(``DecisionUnavailable``: an unreachable gateway is never mistaken for an idle one); an endpoint
outside ``--allowed-endpoint-hosts`` is ``InvalidSpec``. While active, the sync is requeued for
the moment the idle timeout would expire; once idle, a standing replica request is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from escaler.api.elasticscaler import ElasticScaler, SignalTrigger
from escaler.clock import Clock
from escaler.reconcilers.elasticscaler.context import ScalerMemory, Sync
from escaler.reconcilers.elasticscaler.signal import Signal, SignalStore, recommend
from escaler.reconcilers.scalermetrics import ScalerMetrics
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult
from escaler.signals.signal_pull import SignalReading

__all__ = ["MAX_PULL_TIMEOUT_SECONDS", "SignalRecommender"]

# one pull never waits longer than this (nor longer than pollIntervalSeconds)
MAX_PULL_TIMEOUT_SECONDS = 5.0

Puller = Callable[[str, float], SignalReading]


class SignalRecommender:
    """See the module docstring."""

    def __init__(self, signals: SignalStore, puller: Puller | None, clock: Clock, metrics: ScalerMetrics,
                 allowed_hosts: Sequence[str]) -> None:
        # shared with the push API; fixed
        self._signals = signals
        # GETs an endpoint; None = pulls are not possible (no connection)
        self._pull = puller
        self._clock = clock
        # escaler_metric_errors_total counts failed pulls too
        self._metrics = metrics
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)

    def recommend(self, sync: Sync, scaler: ElasticScaler, mem: ScalerMemory,
                  current: int) -> RecommendResult:
        """The signal rule's recommendation for this sync (see the module docstring)."""
        st = scaler.spec.trigger.signal_trigger or SignalTrigger()
        endpoint = st.endpoint
        poll = float(st.poll_interval_seconds)
        idle = float(st.idle_timeout_seconds)
        activation = st.activation_replicas
        mono = self._clock.monotonic()
        entry = self._signals.seen(sync.req, mono)
        if endpoint:
            try:
                host = check_endpoint_url(endpoint)
            except ValueError as err:
                return RecommendResult.invalid(f"spec.trigger.signalTrigger.endpoint: {err}",
                                               kind=FROM_DECISION)
            if not host_allowed(host, self._allowed_hosts):
                return RecommendResult.invalid(
                    f"spec.trigger.signalTrigger.endpoint: host {host} is not in --allowed-endpoint-hosts",
                    kind=FROM_DECISION)
            if mono >= mem.next_pull and self._pull is not None:
                reading = self._pull(endpoint, min(poll, MAX_PULL_TIMEOUT_SECONDS))
                mem.next_pull = mono + poll
                if reading.error is not None:
                    mem.pull_error = reading.error
                    self._metrics.metric_errors.labels(sync.req.namespace, sync.req.name).inc()
                else:
                    mem.pull_error = None
                    entry = self._signals.record(sync.req, Signal(reading.active, reading.replicas), mono,
                                                 self._clock.now())
            sync.wait(max(0.1, mem.next_pull - mono))
            if mem.pull_error is not None:
                return RecommendResult.no_decision(f"signal endpoint {endpoint}", mem.pull_error,
                                                   kind=FROM_DECISION)
        rec = recommend(entry, mono, current=current, min_replicas=scaler.spec.min_replicas,
                        idle_timeout=idle, activation_replicas=activation)
        if rec.idle:
            self._signals.expire(sync.req)
        else:
            sync.wait(rec.idle_in)
        source = "push signals" if not endpoint else f"signals (pushed, and pulled from {endpoint})"
        return RecommendResult.from_decision(rec.replicas, source=source, detail=rec.reason,
                                             can_scale_from_zero=True)
