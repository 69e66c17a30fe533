"""Flow sizing run from a reconciler: the values of a flow's signals → ``FlowReading`` → ``decide_flow``,
with the ``FlowState`` carried from one reading to the next. Pure; shared by the kinds that size with a
flow (the LLMScaler's ``metricProvider: Flow``, the SLO decision engine's ``spec.flow``), which each keep
the ``FlowMemo`` it returns in their memory of the object.

* **Reading** (``flow_reading``), from the values by signal name (``escaler.api.llmflow.FLOW_SIGNALS``):
  the token rates, ``waiting``, ``requestsRate``; the queueing delay = ``ttftP90`` less the mean prompt's
  prefill time (``promptTokensRate / requestsRate / prefill``; none without requests); the burst floor's
  rates (``burst*TokensRate``, both or no floor); the miss shares = the larger of the TTFT and TPOT
  shares (clamped to [0, 1]), over the rate window and the long one. A signal not in the values is
  not read (None).
* **State** (``flow_decide(key, values, config, memo, now=, current=)``): the decision starts from the
  ``FlowState`` of ``memo`` when ``memo.key == key``, from ``FlowState()`` otherwise — the caller's key
  is what the state was computed under (the ``FlowConfig`` and the queries, plus whatever else of the
  object changes what a state means), so a change of the flow's config resets it and any other change
  keeps it. It returns the decision and the memo to keep. Deciding twice on one reading would count
  it twice in the histories: callers decide once per fresh reading and reuse that decision until the
  next one.
* After a manager restart the memo starts empty, by design: ``decide_flow`` seeds its burst headroom
  and its down history from the current count (the running fleet is taken as right, as a
  stabilization window is seeded), so a restart never sheds replicas the history would have kept.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from escaler.scaling.flow import FlowConfig, FlowDecision, FlowReading, FlowState, decide_flow

__all__ = ["FLOW_MAX_REPLICAS", "FlowMemo", "flow_decide", "flow_reading"]

# the upper bound a flow's config is given when its caller's bound binds elsewhere (the LLMScaler
# pipeline's clamp to maxReplicas) or there is none (an SLO requirement without bounds.max)
FLOW_MAX_REPLICAS = 1_000_000


@dataclass(frozen=True)
class FlowMemo:
    """Flow sizing's state of one object, and what it was computed under."""

    # what the state was computed under (the caller's: its FlowConfig, its queries, ...); a reading
    # under another key starts afresh
    key: Hashable
    # the state the last decision left
    state: FlowState


def _share(*values: float | None) -> float | None:
    shares = [min(1.0, max(0.0, v)) for v in values if v is not None]
    return max(shares) if shares else None


def flow_reading(now: float, current: int, values: Mapping[str, float],
                 prefill_tokens_per_s: float) -> FlowReading:
    """The ``FlowReading`` of the signals' values (see the module docstring)."""
    prompt = values.get("promptTokensRate")
    rps = values.get("requestsRate")
    p90 = values.get("ttftP90")
    delay = None
    if p90 is not None and prompt is not None and rps is not None and rps > 0:
        delay = max(0.0, p90 - max(0.0, prompt) / rps / prefill_tokens_per_s)
    return FlowReading(
        now, current, prompt, values.get("generationTokensRate"), requests_per_s=rps,
        waiting=values.get("waiting"), queue_delay_s=delay,
        burst_prompt_tokens_per_s=values.get("burstPromptTokensRate"),
        burst_generation_tokens_per_s=values.get("burstGenerationTokensRate"),
        miss_share=_share(values.get("ttftMissShare"), values.get("tpotMissShare")),
        long_miss_share=_share(values.get("ttftMissShareLong"), values.get("tpotMissShareLong")))


def flow_decide(key: Hashable, values: Mapping[str, float], config: FlowConfig, memo: FlowMemo | None, *,
                now: float, current: int) -> tuple[FlowDecision, FlowMemo]:
    """One fresh reading decided from the state ``memo`` holds under ``key`` (see the module
    docstring); returns the decision and the memo to keep."""
    state = memo.state if memo is not None and memo.key == key else FlowState()
    reading = flow_reading(now, current, values, config.capacity.prefill_tokens_per_s)
    decision = decide_flow(reading, config, state)
    return decision, FlowMemo(key, decision.state)
