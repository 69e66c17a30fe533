"""``metricProvider: Flow`` (docs/llmscaler.md, docs/design.md#the-llm-sizing-policy): the signals read → flow
sizing's decision (``escaler.scaling.flow.decide_flow``) → the pipeline's recommendation and the status rows.

``flow_result(...)`` is pure; the recommender (``recommend``) calls it once per fresh reading, off
nothing but the values read, and keeps the ``FlowMemo`` it returns.

* **Config** (``flow_config``): ``escaler.scaling.flow.service_config`` — the one definition the
  simulator's ``flow`` uses too — of ``spec.flow.capacity``, ``coldStartSeconds``, the scaler's
  effective poll interval, ``ttftSeconds``, ``utilization`` and ``rateWindowSeconds``: the horizon
  is a cold start plus a poll, the down delay two cold starts and at least 300 s, the queueing-delay
  budget half of ``ttftSeconds``; the rest is ``FlowConfig``'s defaults. ``min_replicas`` is the
  spec's (a need under it would make the flow's down history flap against the pipeline's clamp);
  ``max_replicas`` is ``FLOW_MAX_REPLICAS``, so a need above ``maxReplicas`` reaches the pipeline,
  whose clamp says so (``ScalingLimited=True/TooManyReplicas``) as it does for the other providers.
* **Reading and state** (``escaler.reconcilers.kit.flowsizing``: ``flow_reading``, ``flow_decide``, shared
  with the SLO decision engine): the signals' values → a ``FlowReading`` → ``decide_flow``, from the
  ``FlowState`` of the ``FlowMemo`` when its key is this reading's.
* **Every configured signal must be read**: one that fails is ``ScalingActive=False/
  DecisionUnavailable`` (``Flow <endpoint>: <signal>: <error>; ...``: the usual hold, or
  ``spec.fallback``) and the flow state is left as it was — a partial reading is not acted on.
* **State** (``FlowMemo``): the key is the ``FlowConfig``, the endpoint and the queries. A spec change of
  the flow's config resets it, any other spec change keeps it. The memo lives in the reconciler's
  memory of the scaler (one per existing scaler, dropped with it, and a recreated scaler — a new uid —
  starts afresh). After a manager restart the state starts fresh too, by design (``flowsizing``).
* **Result**: ``RecommendResult.from_metrics(replicas, evaluated=M, total=M, detail=<the flow's steps
  joined by "; ">)`` — ``ScalingActive=True/MetricsAvailable``, and the steps in words in
  ``recentDecisions[].reason`` and the ``SuccessfulRescale`` event; then the LLMScaler pipeline
  (scale-down stabilization, ``maxStepReplicas``, the clamp, the guards) unchanged. The rows of
  ``status.currentMetrics``: one per signal read (``type: Flow``, its value or error; the token
  rates with one replica's capacity as their per-replica target, ``ttftP90`` with ``ttftSeconds``,
  the miss shares with the miss budget — the scale a move is judged significant against, so a
  status is not rewritten for noise) and one per figure of the decision (``type: FlowDecision``:
  ``work``, ``backlog``, ``planned``, ``utilization``, ``headroom``, ``need`` — ``need`` with
  ``recommendedReplicas``), which ``escaler explain`` prints step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from escaler.api.llmflow import FlowProvider
from escaler.api.llmscaler import LLMScalerSpec
from escaler.api.scaler import MetricStatus
from escaler.reconcilers.kit.flowsizing import FLOW_MAX_REPLICAS, FlowMemo, flow_decide
from escaler.scaling.flow import FlowCapacity, FlowConfig, service_config
from escaler.scaling.pipeline import RecommendResult
from escaler.scaling.text import cap_text
from escaler.signals.fetch import redact_url
from escaler.signals.sample import Sample

__all__ = [
    "FIGURES",
    "FLOW_DECISION_TYPE",
    "FLOW_MAX_REPLICAS",
    "FLOW_TYPE",
    "flow_config",
    "flow_result",
    "flow_source",
    "signal_targets",
]

# status.currentMetrics[].type of a signal read, and of a figure of the flow's decision
FLOW_TYPE = "Flow"
FLOW_DECISION_TYPE = "FlowDecision"
# the figures of FlowDecision.signals shown as rows, in the order of the steps
FIGURES = ("work", "backlog", "planned", "utilization", "headroom", "need")
# currentMetrics targetType of a per-replica target (a token rate against one replica's capacity), and
# of a target the value is compared with as is
_PER_REPLICA, _VALUE = "AverageValue", "Value"


def flow_source(endpoint: str) -> str:
    """How messages name the flow's source."""
    return f"Flow {redact_url(endpoint)}"


def flow_config(spec: LLMScalerSpec, poll_interval: float) -> FlowConfig:
    """The ``FlowConfig`` of ``spec.flow`` (see the module docstring); ``poll_interval`` is the
    scaler's effective poll interval (0 = polling off)."""
    flow = spec.flow
    if flow is None:
        raise ValueError("spec.flow: required when metricProvider is Flow")
    cap = flow.capacity
    return service_config(
        FlowCapacity(cap.prefill_tokens_per_second, cap.decode_tokens_per_second),
        cold_start_s=float(flow.cold_start_seconds), poll_s=poll_interval, min_replicas=spec.min_replicas,
        max_replicas=max(FLOW_MAX_REPLICAS, spec.min_replicas), ttft_s=flow.ttft_seconds,
        utilization=flow.utilization, rate_window_s=float(flow.rate_window_seconds))


def signal_targets(flow: FlowProvider, config: FlowConfig) -> dict[str, tuple[float, str]]:
    """signal → (target, targetType) of its ``currentMetrics`` row (see the module docstring)."""
    prefill, decode = config.capacity.prefill_tokens_per_s, config.capacity.decode_tokens_per_s
    out = {"promptTokensRate": (prefill, _PER_REPLICA), "generationTokensRate": (decode, _PER_REPLICA),
           "burstPromptTokensRate": (prefill, _PER_REPLICA),
           "burstGenerationTokensRate": (decode, _PER_REPLICA)}
    shares = ("ttftMissShare", "ttftMissShareLong", "tpotMissShare", "tpotMissShareLong")
    out.update({s: (config.miss_budget, _VALUE) for s in shares})
    if flow.ttft_seconds is not None:
        out["ttftP90"] = (flow.ttft_seconds, _VALUE)
    return out


def _signal_row(signal: str, sample: Sample, target: tuple[float, str] | None) -> MetricStatus:
    return MetricStatus(name=signal, type=FLOW_TYPE, value=sample.value,
                        target=target[0] if target is not None else None,
                        target_type=target[1] if target is not None else None,
                        error=cap_text(sample.error) if sample.error is not None else None)


def _figure_rows(figures: Mapping[str, float], config: FlowConfig) -> list[MetricStatus]:
    rows = []
    for name in FIGURES:
        if name not in figures:
            continue
        value = figures[name]
        rows.append(MetricStatus(
            name=name, type=FLOW_DECISION_TYPE, value=value,
            target=config.utilization if name == "utilization" else None,
            recommended_replicas=int(value) if name == "need" else None))
    return rows


def flow_result(endpoint: str, queries: Sequence[tuple[str, str]], samples: Sequence[Sample],
                config: FlowConfig, memo: FlowMemo | None, *, now: float, current: int,
                targets: Mapping[str, tuple[float, str]] | None = None,
                ) -> tuple[RecommendResult, tuple[MetricStatus, ...], FlowMemo | None]:
    """One fresh reading → (recommendation, currentMetrics rows, the memo to keep); ``samples`` in
    ``queries`` order, ``targets`` the rows' (``signal_targets``). Pure."""
    if len(samples) != len(queries):
        raise ValueError(f"flow_result: {len(samples)} samples for {len(queries)} queries")
    targets = targets or {}
    rows = [_signal_row(signal, s, targets.get(signal))
            for (signal, _), s in zip(queries, samples, strict=True)]
    errors = tuple(f"{signal}: {s.error}" for (signal, _), s in zip(queries, samples, strict=True)
                   if s.error is not None)
    total = len(queries)
    if errors:
        rr = RecommendResult.no_decision(flow_source(endpoint), "; ".join(errors),
                                         evaluated=total - len(errors), total=total, metric_errors=errors)
        return rr, tuple(rows), memo
    values = {signal: float(s.value) for (signal, _), s in zip(queries, samples, strict=True)
              if s.value is not None}
    d, kept = flow_decide((config, endpoint, tuple(queries)), values, config, memo, now=now, current=current)
    rows.extend(_figure_rows(d.signals, config))
    rr = RecommendResult.from_metrics(d.replicas, evaluated=total, total=total, detail="; ".join(d.steps))
    return rr, tuple(rows), kept
