"""SignalTrigger in a sync (SPEC §5.5): pull the endpoint when due, apply the signal rule.

``SignalRecommender.recommend(req, scaler, current, memory)`` pulls ``signalTrigger.endpoint`` at
most once per ``pollIntervalSeconds``, records the reading in the ``SignalStore`` like a pushed
signal, and returns a ``SignalOutcome``: the pipeline's ``RecommendResult`` (``DecisionReceived``;
a SignalTrigger may scale from zero), when to look again (the next pull, or the moment the idle
timeout would expire), and the pull bookkeeping to keep (``PullMemory``) — it changes nothing it
was given. A failed pull holds (``DecisionUnavailable``: an unreachable gateway is never mistaken
for an idle one); an endpoint outside ``--allowed-endpoint-hosts`` is ``InvalidSpec``. Once idle,
a standing replica request is dropped from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from escaler.api.elasticscaler import ElasticScaler, SignalTrigger
from escaler.clock import Clock
from escaler.reconcilers.elasticscaler.signal import Signal, SignalEntry, SignalStore, recommend
from escaler.reconcilers.scalermetrics import ScalerMetrics
from escaler.runtime.types import Request
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult
from escaler.signals.signal_pull import SignalReading

__all__ = ["MAX_PULL_TIMEOUT_SECONDS", "PullMemory", "SignalOutcome", "SignalRecommender"]

# one pull never waits longer than this (nor longer than pollIntervalSeconds)
MAX_PULL_TIMEOUT_SECONDS = 5.0

Puller = Callable[[str, float], SignalReading]


@dataclass(frozen=True)
class PullMemory:
    """The endpoint pull bookkeeping of one scaler."""

    # monotonic time of the next pull (0: pull at the first sync)
    next_pull: float = 0.0
    # the last pull's error, kept until the next pull
    error: str | None = None


@dataclass(frozen=True)
class SignalOutcome:
    """One sync's recommendation, when to look again, and the bookkeeping to keep."""

    recommend: RecommendResult
    # seconds until the outcome can change with no new event (next pull, idle expiry); None: an event
    requeue: float | None
    memory: PullMemory


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

    def recommend(self, req: Request, scaler: ElasticScaler, current: int,
                  memory: PullMemory) -> SignalOutcome:
        """The signal rule's outcome for this sync (see the module docstring)."""
        st = scaler.spec.trigger.signal_trigger or SignalTrigger()
        mono = self._clock.monotonic()
        entry = self._signals.seen(req, mono)
        waits: list[float] = []
        if st.endpoint:
            refused = self._refused(st.endpoint)
            if refused is not None:
                return SignalOutcome(refused, None, memory)
            poll = float(st.poll_interval_seconds)
            memory, pulled = self._pull_if_due(req, st.endpoint, poll, memory, mono)
            entry = pulled or entry
            waits.append(max(0.1, memory.next_pull - mono))
            if memory.error is not None:
                rr = RecommendResult.no_decision(f"signal endpoint {st.endpoint}", memory.error,
                                                 kind=FROM_DECISION)
                return SignalOutcome(rr, min(waits), memory)
        rec = recommend(entry, mono, current=current, min_replicas=scaler.spec.min_replicas,
                        idle_timeout=float(st.idle_timeout_seconds),
                        activation_replicas=st.activation_replicas)
        if rec.idle:
            self._signals.expire(req)
        elif rec.idle_in is not None and rec.idle_in > 0:
            waits.append(rec.idle_in)
        source = "push signals" if not st.endpoint else f"signals (pushed, and pulled from {st.endpoint})"
        rr = RecommendResult.from_decision(rec.replicas, source=source, detail=rec.reason,
                                           can_scale_from_zero=True)
        return SignalOutcome(rr, min(waits, default=None), memory)

    def _refused(self, endpoint: str) -> RecommendResult | None:
        try:
            host = check_endpoint_url(endpoint)
        except ValueError as err:
            return RecommendResult.invalid(f"spec.trigger.signalTrigger.endpoint: {err}", kind=FROM_DECISION)
        if not host_allowed(host, self._allowed_hosts):
            return RecommendResult.invalid(
                f"spec.trigger.signalTrigger.endpoint: host {host} is not in --allowed-endpoint-hosts",
                kind=FROM_DECISION)
        return None

    def _pull_if_due(self, req: Request, endpoint: str, poll: float, memory: PullMemory,
                     mono: float) -> tuple[PullMemory, SignalEntry | None]:
        if mono < memory.next_pull or self._pull is None:
            return memory, None
        reading = self._pull(endpoint, min(poll, MAX_PULL_TIMEOUT_SECONDS))
        if reading.error is not None:
            self._metrics.metric_errors.labels(req.namespace, req.name).inc()
            return PullMemory(mono + poll, reading.error), None
        entry = self._signals.record(req, Signal(reading.active, reading.replicas), mono, self._clock.now())
        return PullMemory(mono + poll, None), entry
