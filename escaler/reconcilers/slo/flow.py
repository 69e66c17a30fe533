"""Flow sizing of an LLMSLORequirement (``spec.flow``): the LLM sizing policy
(docs/design.md#the-llm-sizing-policy) as the decision engine's rule (docs/slo.md), and the flow state the
engine keeps per requirement.

``flow_plan(spec, bounds)`` → ``FlowPlan`` (``ValueError`` naming ``spec.flow.<field>`` when its queries
do not resolve: an object stored before a rule existed):

* **Objectives**, one per requirement: ``flow.ttftSeconds`` is ``ttft.targetMs / 1000`` and
  ``flow.tpotSeconds`` is ``1 / otps.target`` (output tokens/s per request is one over the time per
  output token) when ``ttft``/``otps`` are set (the CRD refuses the flow's own field next to them);
  their ``promql`` is not read — the flow reads latency from the engine's histograms (its preset, or
  ``flow.queries``) and sizes on its token rates, never on a latency ratio
  (docs/design.md#the-llm-sizing-policy: latency trims the utilisation target, it does not multiply the
  count). ``ttft.percentile`` is not used: the burst headroom grows on misses above 1 % of requests, as for
  the LLMScaler.
* **Queries**: ``escaler.reconcilers.kit.flowpresets.flow_queries`` of that flow, named by signal
  (``promptTokensRate``, ...), read by the engine's ``SignalReader`` through ``--slo-prometheus-endpoint``
  like every other SLO signal.
* **Config** (``FlowPlan.config(poll_s)``): ``escaler.scaling.flow.service_config`` — the one definition
  the LLMScaler's ``metricProvider: Flow`` and the simulator use — with the engine's poll interval; its
  replica range is the requirement's bounds in replicas (``escaler.scaling.slo.replica_bounds``:
  concurrency bounds converted with ``concurrencyPerReplica``), the minimum at least 1 unless
  ``bounds.max`` is 0: flow sizing reads the engine's counters, which a fleet of zero does not have,
  so it never decides 0 on its own (as the ratio rule). The flow's own clamp applies it, so its down
  history never holds a count the bounds refuse.

``FlowPlan.size(samples, current=, last=, memo=, now=, poll_s=)`` → ``(Decision, memo to keep)``, pure:

* every signal of the queries must be read: one that is not is the engine's usual hold
  (``escaler.scaling.slo.hold``: ``Ready=False/SignalsMissing``, the last decision held within the
  bounds, each missing signal named with its error — signals failing alike are named together, so
  the reason stays short) and the memo is returned unchanged (a partial reading is not acted on);
* otherwise ``escaler.reconcilers.kit.flowsizing.flow_decide`` under the key (the ``FlowConfig``, the
  queries): the decision's replicas; its reason the flow's steps in words, joined by ``"; "`` (the
  status caps it at 1024 characters); its signals ``currentReplicas`` and the flow's figures
  (``work``, ``backlog``, ``planned``, ``utilization``, ``headroom``, ``need``).

``FlowStates`` is the engine's memory of the flows, one entry per requirement (its uid, the reading
it last decided on, the memo, that decision), thread-safe: ``size(req, uid, plan, samples, at, ...)``
decides once per reading (``at``, the read's time, is also the flow's ``now``) and answers that
decision again for the same reading (a target event between polls; the flow's histories must count a
reading once); a new uid starts afresh; ``forget(req)`` drops the entry (the requirement deleted,
invalid, or without a flow). After a manager restart the flows start fresh, by design
(``escaler.reconcilers.kit.flowsizing``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from escaler.api.slo import LLMSLORequirementSpec
from escaler.reconcilers.kit.flowpresets import flow_queries
from escaler.reconcilers.kit.flowsizing import FLOW_MAX_REPLICAS, FlowMemo, flow_decide
from escaler.reconcilers.slo.readings import signal_value
from escaler.runtime.types import Request
from escaler.scaling.flow import FlowCapacity, FlowConfig, service_config
from escaler.scaling.slo import Decision, ReplicaBounds, hold
from escaler.signals.sample import Sample

__all__ = ["CURRENT_REPLICAS", "FlowPlan", "FlowStates", "flow_plan"]

# Decision.signals key of the target's current replicas (as the ratio rule's)
CURRENT_REPLICAS = "currentReplicas"


@dataclass(frozen=True)
class FlowPlan:
    """What sizes a requirement with ``spec.flow`` (see the module docstring); immutable."""

    # one replica's throughput (tokens/s)
    capacity: FlowCapacity
    # the flow's settings: cold start, utilisation, rate window (seconds); ttft_s its TTFT objective
    cold_start_s: float
    utilization: float
    rate_window_s: float
    ttft_s: float | None
    # the requirement's bounds in replicas (a hold is clamped to them)
    bounds: ReplicaBounds
    # the replicas the flow may decide, within bounds: [floor, ceiling], floor >= 1 unless ceiling is 0
    floor: int
    ceiling: int
    # (signal, PromQL) of every signal read, in FLOW_SIGNALS order
    queries: tuple[tuple[str, str], ...]

    def config(self, poll_s: float) -> FlowConfig:
        return service_config(self.capacity, cold_start_s=self.cold_start_s, poll_s=poll_s,
                              min_replicas=self.floor, max_replicas=self.ceiling, ttft_s=self.ttft_s,
                              utilization=self.utilization, rate_window_s=self.rate_window_s)

    def size(self, samples: Mapping[str, Sample], *, current: int, last: int | None, memo: FlowMemo | None,
             now: float, poll_s: float) -> tuple[Decision, FlowMemo | None]:
        read = {signal: signal_value(samples, signal) for signal, _ in self.queries}
        missing = [(signal, err or "no value") for signal, (value, err) in read.items()
                   if value is None or err is not None]
        if missing:
            return hold(last, current, self.bounds, _grouped(missing), {CURRENT_REPLICAS: current}), memo
        values = {signal: float(value) for signal, (value, _) in read.items() if value is not None}
        config = self.config(poll_s)
        d, kept = flow_decide((config, self.queries), values, config, memo, now=now, current=current)
        return Decision(d.replicas, "; ".join(d.steps), {CURRENT_REPLICAS: current, **d.signals}), kept


def _grouped(missing: Sequence[tuple[str, str]]) -> list[str]:
    """``"a, b: why"`` for the signals missing for one reason, in reading order."""
    by_why: dict[str, list[str]] = {}
    for signal, why in missing:
        by_why.setdefault(why, []).append(signal)
    return [f"{', '.join(signals)}: {why}" for why, signals in by_why.items()]


def flow_plan(spec: LLMSLORequirementSpec, bounds: ReplicaBounds) -> FlowPlan:
    """The ``FlowPlan`` of ``spec.flow`` within ``bounds`` (see the module docstring)."""
    flow = spec.flow
    if flow is None:
        raise ValueError("spec.flow: required for flow sizing")
    ttft = flow.ttft_seconds if spec.ttft is None else spec.ttft.target_ms / 1000.0
    tpot = flow.tpot_seconds if spec.otps is None else 1.0 / spec.otps.target
    effective = flow.model_copy(update={"ttft_seconds": ttft, "tpot_seconds": tpot})
    ceiling = bounds.maximum if bounds.maximum is not None else FLOW_MAX_REPLICAS
    cap = flow.capacity
    return FlowPlan(
        FlowCapacity(cap.prefill_tokens_per_second, cap.decode_tokens_per_second),
        cold_start_s=float(flow.cold_start_seconds), utilization=flow.utilization,
        rate_window_s=float(flow.rate_window_seconds), ttft_s=ttft, bounds=bounds,
        floor=min(max(1, bounds.minimum), ceiling), ceiling=ceiling, queries=flow_queries(effective))


@dataclass(frozen=True)
class _Held:
    # metadata.uid of the requirement the flow state is for
    uid: str
    # the time of the reading last decided on (monotonic seconds)
    at: float
    # the flow's state after that reading (None before the first decision)
    memo: FlowMemo | None
    # the decision of that reading
    decision: Decision


class FlowStates:
    """The flows' state, one entry per requirement (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        # guards _held
        self._mu = threading.Lock()
        # requirement → its flow's last reading, state and decision; dropped by forget
        self._held: dict[Request, _Held] = {}

    def size(self, req: Request, uid: str, plan: FlowPlan, samples: Mapping[str, Sample], at: float, *,
             current: int, last: int | None, poll_s: float) -> Decision:
        """The decision of the reading made at ``at`` (see the module docstring)."""
        with self._mu:
            held = self._held.get(req)
        if held is not None and held.uid != uid:
            held = None
        if held is not None and held.at == at:
            return held.decision
        decision, memo = plan.size(samples, current=current, last=last,
                                   memo=held.memo if held is not None else None, now=at, poll_s=poll_s)
        with self._mu:
            self._held[req] = _Held(uid, at, memo, decision)
        return decision

    def memo(self, req: Request) -> FlowMemo | None:
        """The flow state kept for ``req`` (None when there is none)."""
        with self._mu:
            held = self._held.get(req)
        return held.memo if held is not None else None

    def forget(self, req: Request) -> None:
        with self._mu:
            self._held.pop(req, None)

    def __len__(self) -> int:
        with self._mu:
            return len(self._held)
