"""The PromQL of flow sizing's signals per serving engine (``spec.flow.engine``), scoped by
``spec.flow.selector``: ``flow_queries(flow)`` → ``((signal, query), ...)``, the signals read, in
``escaler.api.llmflow.FLOW_SIGNALS`` order. Pure. Shared by the kinds that size with a flow: the
LLMScaler (``metricProvider: Flow``, a ``FlowProvider``) and the SLO decision engine (an
LLMSLORequirement's ``spec.flow``, a ``FlowSizing`` whose objectives the caller has filled in from
``ttft``/``otps``); both hold the flow at ``spec.flow``, the path the errors name.

What is read: ``promptTokensRate`` and ``generationTokensRate`` always; ``waiting`` and
``requestsRate`` when the engine presets them or ``queries`` gives them; the latency signals only
with their objective (``ttftSeconds``: ``ttftP90``, ``ttftMissShare``, ``ttftMissShareLong``;
``tpotSeconds``: ``tpotMissShare``, ``tpotMissShareLong``), from the preset or ``queries``. A query
in ``spec.flow.queries`` replaces the preset's, signal by signal. ``W`` is
``rateWindowSeconds``, ``L`` is ``LONG_WINDOW_SECONDS`` (900 s), ``S`` the selector:

* ``vllm``: ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:num_requests_waiting``, ``vllm:request_success_total``; histograms
  ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds``;
* ``sglang``: ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
  ``sglang:num_queue_reqs``, ``sglang:num_requests_total``; histograms
  ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds``;
* ``tgi``: ``tgi_request_input_length_sum``, ``tgi_request_generated_tokens_sum`` (the sums of
  its per-request token histograms), ``tgi_queue_size``, ``tgi_request_success``; no latency
  preset (TGI has no TTFT histogram, and its TPOT buckets are generated, not round numbers):
  ``ttftSeconds``/``tpotSeconds`` need ``queries.ttftMissShare``/``tpotMissShare`` there

(rates as ``sum(rate(<counter>{S}[W]))``, gauges as ``sum(<gauge>{S})``), and the burst floor's
``burstPromptTokensRate``/``burstGenerationTokensRate`` as
``max_over_time(sum(irate(<counter>{S}[1m]))[D:15s])``: the largest rate between two consecutive
scrapes over ``D``, the down delay (``escaler.scaling.flow.down_delay`` of ``coldStartSeconds``:
a burst is remembered as long as a replica is kept after its need). vLLM's TPOT histogram is
``vllm:inter_token_latency_seconds`` (vLLM >= 0.11; the former ``vllm:time_per_output_token_seconds``,
same buckets, was removed in 0.13): its share counts inter-token gaps, not requests — for vLLM
before 0.11, override ``queries.tpotMissShare``/``tpotMissShareLong`` with the old name.

The histogram signals, with ``H`` the histogram and ``B`` the smallest of the engine's default
bucket bounds at or above the objective (the largest when the objective is above them all; the
share is then under-read — choose an objective on a bound), written as the Python clients write
``le`` and Prometheus 3 normalises it (``"2.5"``, ``"1.0"``):

* ``ttftP90``: ``(histogram_quantile(0.9, sum by (le) (rate(H_bucket{S}[W]))) and
  (sum(rate(H_count{S}[W])) > 0)) or (sum(rate(H_count{S}[W])) == 0)``;
* ``…MissShare`` (range ``W``) and ``…MissShareLong`` (range ``L``): ``(1 -
  sum(rate(H_bucket{S,le="B"}[R])) / (sum(rate(H_count{S}[R])) > 0)) or
  (sum(rate(H_count{S}[R])) == 0)``.

So a window without a request reads 0 (no miss, no delay: flow sizing treats them as nothing
observed), while a selector matching nothing, or an engine started with other buckets (no ``le="B"``
series), returns no series: the signal fails, named, rather than reading a silent zero.

``selector`` is checked against the API's grammar (``escaler.api.llmflow.selector_ok``) here again,
right before it is spliced, so an object stored before the rule existed cannot inject PromQL:
``ValueError`` naming ``spec.flow.selector``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from escaler.api.llmflow import (
    FLOW_SIGNALS,
    LATENCY_SIGNALS,
    FlowEngine,
    FlowSizing,
    selector_ok,
)
from escaler.scaling.flow import down_delay

__all__ = [
    "BURST_STEP_SECONDS",
    "LONG_WINDOW_SECONDS",
    "PRESETS",
    "TTFT_QUANTILE",
    "EnginePreset",
    "flow_queries",
    "flow_query_path",
    "share_bound",
]

# the long window of the miss shares (the burst headroom grows only when both windows miss)
LONG_WINDOW_SECONDS = 900
# the step of the burst signals' subquery: Prometheus' common scrape interval (a longer one repeats
# a value, a shorter one is sampled)
BURST_STEP_SECONDS = 15
# the TTFT percentile the queueing delay is read at
TTFT_QUANTILE = 0.9


@dataclass(frozen=True)
class EnginePreset:
    """The metric names of one engine; None = the engine has no such metric."""

    # counters: prompt tokens, generated tokens (their rate is the flow), completed requests
    prompt_tokens: str
    generation_tokens: str
    # gauge: requests waiting for a slot
    waiting: str
    requests: str
    # TTFT and TPOT histograms (without _bucket) and their default bucket bounds (seconds, ascending)
    ttft: str | None = None
    ttft_buckets: tuple[float, ...] = ()
    tpot: str | None = None
    tpot_buckets: tuple[float, ...] = ()


# vLLM's defaults (vllm/v1/metrics/loggers.py; the simulator's VLLM_TTFT_BUCKETS_S, VLLM_TPOT_BUCKETS_S)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                     10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0)
# SGLang's defaults (python/sglang/srt/metrics/collector.py, TokenizerMetricsCollector)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
                       200.0, 400.0)
SGLANG_TPOT_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
                       0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)

PRESETS: dict[FlowEngine, EnginePreset] = {
    FlowEngine.VLLM: EnginePreset(
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_requests_waiting",
        "vllm:request_success_total", "vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS,
        "vllm:inter_token_latency_seconds", VLLM_TPOT_BUCKETS),
    FlowEngine.SGLANG: EnginePreset(
        "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_queue_reqs",
        "sglang:num_requests_total", "sglang:time_to_first_token_seconds", SGLANG_TTFT_BUCKETS,
        "sglang:inter_token_latency_seconds", SGLANG_TPOT_BUCKETS),
    FlowEngine.TGI: EnginePreset(
        "tgi_request_input_length_sum", "tgi_request_generated_tokens_sum", "tgi_queue_size",
        "tgi_request_success"),
}


def share_bound(objective: float, buckets: Sequence[float]) -> float:
    """The bucket bound a miss share is read above: the smallest at or above ``objective`` (the
    largest when it is above them all), as ``escaler.sim.signals.histogram_share_above``."""
    i = bisect.bisect_left(buckets, objective)
    return float(buckets[min(i, len(buckets) - 1)])


def _sel(selector: str, *extra: str) -> str:
    return "{" + ",".join(x for x in (selector, *extra) if x) + "}"


def _rate(metric: str, selector: str, window: int) -> str:
    return f"sum(rate({metric}{_sel(selector)}[{window}s]))"


def _burst(metric: str, selector: str, lookback: int) -> str:
    """The largest rate between two consecutive scrapes over ``lookback`` seconds: ``irate`` (the
    last two samples of a minute) at every 15 s step of the subquery, the largest of them."""
    return f"max_over_time(sum(irate({metric}{_sel(selector)}[1m]))[{lookback}s:{BURST_STEP_SECONDS}s])"


def _p90(hist: str, selector: str, window: int) -> str:
    count = _rate(f"{hist}_count", selector, window)
    return (f"(histogram_quantile({TTFT_QUANTILE:g}, sum by (le) (rate({hist}_bucket{_sel(selector)}"
            f"[{window}s]))) and ({count} > 0)) or ({count} == 0)")


def _share(hist: str, bound: float, selector: str, window: int) -> str:
    count = _rate(f"{hist}_count", selector, window)
    le = f'le="{bound!r}"'
    return (f"(1 - sum(rate({hist}_bucket{_sel(selector, le)}[{window}s])) / ({count} > 0)) "
            f"or ({count} == 0)")


def _preset(flow: FlowSizing, selector: str) -> dict[str, str]:
    """The engine's queries of every signal it presets (before the objectives choose)."""
    p = PRESETS.get(flow.engine)
    if p is None:
        return {}
    w = flow.rate_window_seconds
    lookback = math.ceil(down_delay(float(flow.cold_start_seconds)))
    out = {
        "promptTokensRate": _rate(p.prompt_tokens, selector, w),
        "generationTokensRate": _rate(p.generation_tokens, selector, w),
        "waiting": f"sum({p.waiting}{_sel(selector)})",
        "requestsRate": _rate(p.requests, selector, w),
        "burstPromptTokensRate": _burst(p.prompt_tokens, selector, lookback),
        "burstGenerationTokensRate": _burst(p.generation_tokens, selector, lookback),
    }
    if p.ttft is not None and flow.ttft_seconds is not None:
        bound = share_bound(flow.ttft_seconds, p.ttft_buckets)
        out["ttftP90"] = _p90(p.ttft, selector, w)
        out["ttftMissShare"] = _share(p.ttft, bound, selector, w)
        out["ttftMissShareLong"] = _share(p.ttft, bound, selector, LONG_WINDOW_SECONDS)
    if p.tpot is not None and flow.tpot_seconds is not None:
        bound = share_bound(flow.tpot_seconds, p.tpot_buckets)
        out["tpotMissShare"] = _share(p.tpot, bound, selector, w)
        out["tpotMissShareLong"] = _share(p.tpot, bound, selector, LONG_WINDOW_SECONDS)
    return out


def _overrides(flow: FlowSizing) -> dict[str, str]:
    q = flow.queries
    if q is None:
        return {}
    given = q.to_object()
    return {s: str(given[s]) for s in FLOW_SIGNALS if given.get(s) is not None}


def _objective_off(flow: FlowSizing, signal: str) -> bool:
    """True when ``signal`` is a latency signal whose objective is not set (it is not read)."""
    return any(signal in signals and getattr(flow, field) is None
               for field, signals in (("ttft_seconds", LATENCY_SIGNALS["ttftSeconds"]),
                                      ("tpot_seconds", LATENCY_SIGNALS["tpotSeconds"])))


def flow_queries(flow: FlowSizing) -> tuple[tuple[str, str], ...]:
    """``((signal, PromQL), ...)`` of the signals read (see the module docstring); ``ValueError``
    naming the field for a selector outside the grammar or a required signal without a query."""
    selector = ""
    if flow.engine in PRESETS:
        if flow.selector is None or not selector_ok(flow.selector):
            raise ValueError("spec.flow.selector: must be a PromQL label-matcher list (name op \"value\", "
                             "comma-separated) with a preset engine")
        selector = flow.selector.strip()
    queries = {**_preset(flow, selector), **_overrides(flow)}
    for signal in ("promptTokensRate", "generationTokensRate"):
        if signal not in queries:
            raise ValueError(f"spec.flow.queries.{signal}: required with engine {flow.engine}")
    return tuple((s, queries[s]) for s in FLOW_SIGNALS if s in queries and not _objective_off(flow, s))


def flow_query_path(flow: FlowSizing, signal: str) -> str:
    """The field a user edits to change ``signal``'s query: its ``spec.flow.queries`` entry when one is
    given, else ``spec.flow.selector`` (the preset's query is built from it)."""
    return f"spec.flow.queries.{signal}" if signal in _overrides(flow) else "spec.flow.selector"
