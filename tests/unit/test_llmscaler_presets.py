"""The engine presets of LLMScaler ``metricProvider: Flow`` (``escaler.reconcilers.kit.flowpresets``):
the exact PromQL of every signal per engine, the per-signal overrides, the latency signals read only
with their objective, the bucket bound a miss share is read above, and the selector grammar checked
again right before it is spliced (an object stored before the rule cannot inject PromQL)."""

from __future__ import annotations

from typing import Any

import pytest
from api_cases import FLOW_BAD_SELECTORS

from escaler.api.llmflow import (
    FLOW_SIGNALS,
    SELECTOR_FORBIDDEN_NAMES_PATTERN,
    SELECTOR_PATTERN,
    FlowProvider,
    selector_ok,
)
from escaler.api.rules import cel_matches
from escaler.reconcilers.kit.flowpresets import (
    SGLANG_TTFT_BUCKETS,
    VLLM_TPOT_BUCKETS,
    VLLM_TTFT_BUCKETS,
    flow_queries,
    share_bound,
)
from escaler.sim.signals import VLLM_TPOT_BUCKETS_S, VLLM_TTFT_BUCKETS_S

SEL = 'model_name="llama-3-8b"'


def provider(**kw: Any) -> FlowProvider:
    spec: dict[str, Any] = {
        "engine": "vllm",
        "selector": SEL,
        "capacity": {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500},
        "endpoint": "http://prometheus:9090",
        **kw,
    }
    return FlowProvider.model_validate({k: v for k, v in spec.items() if v is not None})


def share(hist: str, le: str, window: int, sel: str = SEL) -> str:
    count = f"sum(rate({hist}_count{{{sel}}}[{window}s]))"
    return (f'(1 - sum(rate({hist}_bucket{{{sel},le="{le}"}}[{window}s])) / ({count} > 0)) '
            f"or ({count} == 0)")


def p90(hist: str, window: int = 60, sel: str = SEL) -> str:
    count = f"sum(rate({hist}_count{{{sel}}}[{window}s]))"
    return (f"(histogram_quantile(0.9, sum by (le) (rate({hist}_bucket{{{sel}}}[{window}s]))) and "
            f"({count} > 0)) or ({count} == 0)")


def burst(counter: str, sel: str = SEL, lookback: int = 300) -> str:
    return f"max_over_time(sum(irate({counter}{{{sel}}}[1m]))[{lookback}s:15s])"


def test_vllm_every_signal_with_both_objectives() -> None:
    got = dict(flow_queries(provider(ttftSeconds=2, tpotSeconds=0.1)))
    ttft, tpot = "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"
    assert got == {
        "promptTokensRate": 'sum(rate(vllm:prompt_tokens_total{model_name="llama-3-8b"}[60s]))',
        "generationTokensRate": 'sum(rate(vllm:generation_tokens_total{model_name="llama-3-8b"}[60s]))',
        "waiting": 'sum(vllm:num_requests_waiting{model_name="llama-3-8b"})',
        "requestsRate": 'sum(rate(vllm:request_success_total{model_name="llama-3-8b"}[60s]))',
        "ttftP90": p90(ttft),
        "ttftMissShare": share(ttft, "2.5", 60),  # 2 s is between the 1.0 and 2.5 buckets
        "ttftMissShareLong": share(ttft, "2.5", 900),
        "tpotMissShare": share(tpot, "0.1", 60),
        "tpotMissShareLong": share(tpot, "0.1", 900),
        # the largest rate between two scrapes over the down delay: two cold starts, at least 300 s
        "burstPromptTokensRate": burst("vllm:prompt_tokens_total"),
        "burstGenerationTokensRate": burst("vllm:generation_tokens_total"),
    }
    assert [s for s, _ in flow_queries(provider(ttftSeconds=2, tpotSeconds=0.1))] == list(FLOW_SIGNALS)


def test_vllm_share_query_spelled_out() -> None:
    got = dict(flow_queries(provider(ttftSeconds=1)))["ttftMissShare"]
    assert got == (
        '(1 - sum(rate(vllm:time_to_first_token_seconds_bucket{model_name="llama-3-8b",le="1.0"}[60s])) / '
        '(sum(rate(vllm:time_to_first_token_seconds_count{model_name="llama-3-8b"}[60s])) > 0)) or '
        '(sum(rate(vllm:time_to_first_token_seconds_count{model_name="llama-3-8b"}[60s])) == 0)'
    )


def test_sglang_every_signal() -> None:
    sel = 'namespace="team",pod=~"llama-.*"'
    got = dict(flow_queries(provider(engine="sglang", selector=sel, ttftSeconds=0.5, tpotSeconds=0.05,
                                     rateWindowSeconds=120)))
    ttft, tpot = "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds"
    assert got == {
        "promptTokensRate": f"sum(rate(sglang:prompt_tokens_total{{{sel}}}[120s]))",
        "generationTokensRate": f"sum(rate(sglang:generation_tokens_total{{{sel}}}[120s]))",
        "waiting": f"sum(sglang:num_queue_reqs{{{sel}}})",
        "requestsRate": f"sum(rate(sglang:num_requests_total{{{sel}}}[120s]))",
        "ttftP90": p90(ttft, 120, sel),
        "ttftMissShare": share(ttft, "0.6", 120, sel),
        "ttftMissShareLong": share(ttft, "0.6", 900, sel),
        "tpotMissShare": share(tpot, "0.06", 120, sel),
        "tpotMissShareLong": share(tpot, "0.06", 900, sel),
        "burstPromptTokensRate": burst("sglang:prompt_tokens_total", sel),
        "burstGenerationTokensRate": burst("sglang:generation_tokens_total", sel),
    }


def test_tgi_presets_the_flow_and_no_latency() -> None:
    got = dict(flow_queries(provider(engine="tgi")))
    assert got == {
        "promptTokensRate": 'sum(rate(tgi_request_input_length_sum{model_name="llama-3-8b"}[60s]))',
        "generationTokensRate": 'sum(rate(tgi_request_generated_tokens_sum{model_name="llama-3-8b"}[60s]))',
        "waiting": 'sum(tgi_queue_size{model_name="llama-3-8b"})',
        "requestsRate": 'sum(rate(tgi_request_success{model_name="llama-3-8b"}[60s]))',
        "burstPromptTokensRate": burst("tgi_request_input_length_sum"),
        "burstGenerationTokensRate": burst("tgi_request_generated_tokens_sum"),
    }


def test_tgi_latency_only_from_queries() -> None:
    got = dict(flow_queries(provider(engine="tgi", tpotSeconds=0.1, queries={"tpotMissShare": "my_share"})))
    assert got["tpotMissShare"] == "my_share" and "tpotMissShareLong" not in got and "ttftP90" not in got


def test_without_objectives_no_latency_signal_is_read() -> None:
    assert [s for s, _ in flow_queries(provider())] == ["promptTokensRate", "generationTokensRate", "waiting",
                                                         "requestsRate", "burstPromptTokensRate",
                                                         "burstGenerationTokensRate"]


def test_the_burst_lookback_is_the_down_delay() -> None:
    got = dict(flow_queries(provider(coldStartSeconds=240)))  # two cold starts: 480 s
    assert got["burstPromptTokensRate"] == burst("vllm:prompt_tokens_total", lookback=480)


def test_a_query_overrides_the_preset_signal_by_signal() -> None:
    got = dict(flow_queries(provider(ttftSeconds=2, queries={"waiting": "sum(my_queue)", "ttftP90": "0.5"})))
    assert got["waiting"] == "sum(my_queue)" and got["ttftP90"] == "0.5"
    assert got["promptTokensRate"].startswith("sum(rate(vllm:prompt_tokens_total")


def test_generic_reads_only_what_is_given() -> None:
    q = {"promptTokensRate": "sum(rate(p[1m]))", "generationTokensRate": "sum(rate(g[1m]))",
         "waiting": "sum(w)"}
    got = flow_queries(provider(engine="generic", selector=None, queries=q))
    assert got == (("promptTokensRate", "sum(rate(p[1m]))"), ("generationTokensRate", "sum(rate(g[1m]))"),
                   ("waiting", "sum(w)"))


def test_generic_without_a_token_query_names_the_field() -> None:
    bad = FlowProvider.model_construct(**{**provider().__dict__, "engine": "generic", "selector": None,
                                          "queries": None})
    with pytest.raises(ValueError, match=r"^spec\.flow\.queries\.promptTokensRate: required"):
        flow_queries(bad)


@pytest.mark.parametrize("bad", FLOW_BAD_SELECTORS, ids=range(len(FLOW_BAD_SELECTORS)))
def test_a_selector_outside_the_grammar_is_never_spliced(bad: str) -> None:
    # an object stored before the rule existed (or written around it): the preset refuses to build
    stored = FlowProvider.model_construct(**{**provider().__dict__, "selector": bad})
    with pytest.raises(ValueError, match=r"^spec\.flow\.selector: "):
        flow_queries(stored)


@pytest.mark.parametrize("good", [
    'model_name="llama-3-8b"',
    'namespace="x",pod=~"llama-.*"',
    ' namespace = "x" , pod !~ "canary-(a|b)[0-9]+" ',
    'job!="",model_name=~"meta-llama/Llama-3.1-8B-Instruct|qwen"',
    'label_with_underscore_9=""',
])
def test_good_selectors_are_accepted(good: str) -> None:
    assert selector_ok(good)
    assert cel_matches(SELECTOR_PATTERN, good) and not cel_matches(SELECTOR_FORBIDDEN_NAMES_PATTERN, good)
    assert flow_queries(provider(selector=good))


@pytest.mark.parametrize("bad", FLOW_BAD_SELECTORS, ids=range(len(FLOW_BAD_SELECTORS)))
def test_bad_selectors_are_refused(bad: str) -> None:
    assert not selector_ok(bad)


@pytest.mark.parametrize(("objective", "buckets", "bound"), [
    (2.0, VLLM_TTFT_BUCKETS, 2.5),
    (2.5, VLLM_TTFT_BUCKETS, 2.5),
    (0.0005, VLLM_TTFT_BUCKETS, 0.001),
    (5000.0, VLLM_TTFT_BUCKETS, 2560.0),
    (0.1, VLLM_TPOT_BUCKETS, 0.1),
    (3.0, SGLANG_TTFT_BUCKETS, 4.0),
], ids=["between", "on-a-bound", "below-all", "above-all", "tpot", "sglang"])
def test_share_bound_is_the_smallest_bound_at_or_above(objective: float, buckets: tuple[float, ...],
                                                      bound: float) -> None:
    assert share_bound(objective, buckets) == bound


def test_vllm_buckets_are_the_simulators() -> None:
    assert VLLM_TTFT_BUCKETS == VLLM_TTFT_BUCKETS_S and VLLM_TPOT_BUCKETS == VLLM_TPOT_BUCKETS_S
