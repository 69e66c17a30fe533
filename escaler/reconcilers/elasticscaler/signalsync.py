"""SignalTrigger in a sync (docs/guide/elasticscaler.md#the-triggers): pull the endpoint when due, apply the
signal rule.

``SignalRecommender.recommend(req, scaler, current, memory)`` pulls ``signalTrigger.endpoint`` at
most once per ``pollIntervalSeconds`` raised to ``--min-poll-interval`` (``pull_interval``; the
reconciler says so with a Warning, as for a metrics poll), records the reading in the
``SignalStore`` like a pushed signal, and returns a ``SignalOutcome``: the pipeline's
``RecommendResult`` (``DecisionReceived``; a SignalTrigger may scale from zero), when to look
again (the next pull, or the moment the idle timeout would expire), and the pull bookkeeping to
keep (``PullMemory``) — it changes nothing it was given. A failed pull holds
(``DecisionUnavailable``: an unreachable gateway is never mistaken for an idle one); an endpoint
outside ``--allowed-endpoint-hosts`` is ``InvalidSpec``. Once idle, a standing replica request is
dropped from the store.

The pull runs on the outbound executor (``escaler.runtime.executor``), never on the reconcile
worker: the sync that finds a pull due submits it and is *pending* (it writes nothing); the
pull's completion wakes the scaler, whose sync records the reading and decides. Syncs in between
(a push, an idle timer) decide on what the store holds, as between two pulls. A reading is
consumed only by the scaler object (uid) and endpoint it was pulled for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from escaler.api.elasticscaler import ElasticScaler, SignalTrigger
from escaler.clock import Clock
from escaler.reconcilers.elasticscaler.signal import Signal, SignalEntry, SignalStore, recommend
from escaler.reconcilers.kit.poller import DEFAULT_MIN_POLL_INTERVAL_SECONDS
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.runtime.executor import Executor, Finished, InlineExecutor, Submitted
from escaler.runtime.types import Request
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult
from escaler.signals.signal_pull import SignalReading

__all__ = ["MAX_PULL_TIMEOUT_SECONDS", "PullMemory", "SignalOutcome", "SignalRecommender", "pull_interval",
           "pull_key"]

# one pull never waits longer than this (nor longer than pollIntervalSeconds)
MAX_PULL_TIMEOUT_SECONDS = 5.0

Puller = Callable[[str, float], SignalReading]


def pull_interval(trigger: SignalTrigger, floor: float) -> float:
    """Seconds between two pulls: ``pollIntervalSeconds`` raised to ``floor`` (--min-poll-interval)."""
    return max(float(trigger.poll_interval_seconds), floor)


def pull_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The outbound executor's key of a scaler's endpoint pull (one in flight per scaler)."""
    return ("signal", namespace, name)


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
    # a pull was just submitted: write nothing (its completion wakes the scaler); ``requeue`` is the
    # backstop in case that wake-up is lost
    pending: bool = False


class SignalRecommender:
    """See the module docstring."""

    def __init__(self, signals: SignalStore, puller: Puller | None, clock: Clock, metrics: ScalerMetrics,
                 allowed_hosts: Sequence[str], executor: Executor | None = None,
                 min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS) -> None:
        # shared with the push API; fixed
        self._signals = signals
        # GETs an endpoint; None = pulls are not possible (no connection)
        self._pull = puller
        self._clock = clock
        # escaler_metric_errors_total counts failed pulls too
        self._metrics = metrics
        # --allowed-endpoint-hosts patterns (() = every host)
        self._allowed_hosts = tuple(allowed_hosts)
        # runs pulls off the reconcile worker; inline (synchronous) when none is given
        self._executor: Executor = executor if executor is not None else InlineExecutor(clock)
        # --min-poll-interval: a pollIntervalSeconds below it is raised to it
        self._min_poll_interval = min_poll_interval

    def forget(self, namespace: str, name: str) -> None:
        """The scaler is gone: drop its queued pull, and the reading of a running one."""
        self._executor.discard(pull_key(namespace, name))

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
            poll = pull_interval(st, self._min_poll_interval)
            tag = (scaler.metadata.uid or "", st.endpoint)
            memory, pulled, pending = self._pull_if_due(req, tag, poll, memory, mono)
            entry = pulled or entry
            waits.append(max(0.1, memory.next_pull - mono))
            if pending:
                rr = RecommendResult.no_decision(f"signal endpoint {st.endpoint}", "a pull is in flight",
                                                 kind=FROM_DECISION)
                return SignalOutcome(rr, min(waits), memory, pending=True)
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

    def _pull_if_due(self, req: Request, tag: tuple[str, str], poll: float, memory: PullMemory,
                     mono: float) -> tuple[PullMemory, SignalEntry | None, bool]:
        """The pull bookkeeping after this sync, the entry a finished pull recorded, and whether a
        pull was just submitted (the sync is pending)."""
        key = pull_key(req.namespace, req.name)
        fin = self._executor.take(key)
        if fin is not None and fin.tag == tag:
            memory, entry = self._consume(req, fin, memory)
            return memory, entry, False
        if mono < memory.next_pull or self._pull is None or self._executor.pending(key):
            return memory, None, False
        pull, endpoint = self._pull, tag[1]
        timeout = min(poll, MAX_PULL_TIMEOUT_SECONDS)
        submitted = self._executor.submit(key, req.namespace, tag, lambda: pull(endpoint, timeout), req)
        if submitted == Submitted.FULL:
            error = f"too many pulls are queued in namespace {req.namespace}; retrying in {poll:g}s"
            return PullMemory(mono + poll, error), None, False
        memory = replace(memory, next_pull=mono + poll)
        fin = self._executor.take(key)  # an inline executor has finished already
        if fin is not None and fin.tag == tag:
            memory, entry = self._consume(req, fin, memory)
            return memory, entry, False
        return memory, None, True

    def _consume(self, req: Request, fin: Finished,
                 memory: PullMemory) -> tuple[PullMemory, SignalEntry | None]:
        """Record a finished pull: its reading in the store, or its error in the bookkeeping."""
        reading = fin.value
        if not isinstance(reading, SignalReading):
            why = "the pull returned nothing" if fin.error is None else f"pull failed: {fin.error}"
            reading = SignalReading(active=None, error=why)
        if reading.error is not None:
            self._metrics.metric_errors.labels(req.namespace, req.name).inc()
            return replace(memory, error=reading.error), None
        entry = self._signals.record(req, Signal(reading.active, reading.replicas), self._clock.monotonic(),
                                     self._clock.now())
        return replace(memory, error=None), entry
