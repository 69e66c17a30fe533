"""LLMScaler ``metricProvider: Flow``: a reading → flow sizing's decision → the LLMScaler pipeline.

Pure (``escaler.reconcilers.llmscaler.flow``, and ``escaler.reconcilers.kit.flowsizing`` shared with the SLO
engine): the ``FlowConfig`` a spec gives, the reading built from the signals (queueing delay, miss
shares), the recommendation, rows and memo of one reading, a failed signal named and the state left
alone. Through the reconciler (the ElasticScaler unit harness with
the LLMScaler controller and a scripted reader, as ``test_llmscaler_reconciler``): the target written
to the flow's count with the usual conditions, the steps in ``recentDecisions``, the flow's state
kept per scaler object across polls and a spec change that leaves the flow alone, reset by one that
changes it, dropped with the scaler."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, deployment
from test_llmscaler_reconciler import LLM

from escaler.api.llmflow import FlowProvider
from escaler.api.llmscaler import LLMScalerSpec
from escaler.reconcilers.kit import poller
from escaler.reconcilers.kit.flowpresets import flow_queries
from escaler.reconcilers.kit.flowsizing import FlowMemo, flow_reading
from escaler.reconcilers.llmscaler.flow import (
    FIGURES,
    FLOW_DECISION_TYPE,
    FLOW_MAX_REPLICAS,
    FLOW_TYPE,
    flow_config,
    flow_result,
)
from escaler.runtime import Request, Result
from escaler.scaling.flow import FlowState
from escaler.signals.sample import Sample

PROM = "http://prom.example:9090"
CAPACITY = {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500}


def flow_spec(**kw: Any) -> dict[str, Any]:
    return {"engine": "vllm", "selector": 'model_name="llama"', "endpoint": PROM, "capacity": CAPACITY,
            "utilization": 0.8, "coldStartSeconds": 60, **kw}


def spec(min_replicas: int = 1, max_replicas: int = 20, **flow: Any) -> LLMScalerSpec:
    return LLMScalerSpec.model_validate({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": min_replicas, "maxReplicas": max_replicas, "metricProvider": "Flow",
        "flow": flow_spec(**flow)})


def samples(queries: tuple[tuple[str, str], ...], values: dict[str, float | str]) -> tuple[Sample, ...]:
    out = []
    for signal, _ in queries:
        v = values.get(signal, 0.0)
        out.append(Sample.fail(v) if isinstance(v, str) else Sample(float(v)))
    return tuple(out)


# 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4 replicas at 100 %; / 0.8 → 5
BUSY = {"promptTokensRate": 16000.0, "generationTokensRate": 3000.0, "waiting": 0.0, "requestsRate": 10.0}


# ------------------------------------------------------------------ pure


def test_the_config_a_spec_gives() -> None:
    c = flow_config(spec(min_replicas=2, ttftSeconds=2, utilization=0.95, rateWindowSeconds=120), 30.0)
    assert (c.capacity.prefill_tokens_per_s, c.capacity.decode_tokens_per_s) == (8000, 1500)
    assert (c.min_replicas, c.max_replicas) == (2, FLOW_MAX_REPLICAS)
    assert (c.utilization, c.min_utilization, c.max_utilization) == (0.95, 0.5, 0.95)
    assert (c.horizon_s, c.down_delay_s) == (90.0, 300.0)  # a cold start + a poll; two cold starts, >= 300 s
    # half the TTFT objective; the headroom grows at most once per rate window (120 s) and horizon (90 s)
    assert (c.queue_delay_budget_s, c.headroom_interval_s) == (1.0, 120.0)
    assert flow_config(spec(coldStartSeconds=180), 30.0).headroom_interval_s == 210.0
    low = flow_config(spec(utilization=0.3), 0.0)
    assert (low.min_utilization, low.max_utilization, low.horizon_s) == (0.3, 0.92, 60.0)


def test_the_reading_queue_delay_and_miss_shares() -> None:
    r = flow_reading(100.0, 3, {**BUSY, "ttftP90": 1.5, "ttftMissShare": 0.02, "tpotMissShare": 0.05,
                                "ttftMissShareLong": 1.7, "tpotMissShareLong": -0.1}, 8000.0)
    # the mean prompt is 16000 / 10 = 1600 tokens: 0.2 s of prefill; 1.5 - 0.2 = 1.3 s queueing
    assert r.queue_delay_s == pytest.approx(1.3)
    assert (r.miss_share, r.long_miss_share) == (0.05, 1.0)  # the larger share, clamped to [0, 1]
    assert (r.now, r.current, r.waiting, r.requests_per_s) == (100.0, 3, 0.0, 10.0)
    idle = flow_reading(0.0, 3, {**BUSY, "requestsRate": 0.0, "ttftP90": 0.0}, 8000.0)
    assert idle.queue_delay_s is None and idle.miss_share is None  # no request: nothing observed


def test_the_burst_rates_set_the_floor_as_in_the_simulator() -> None:
    s = spec()
    queries = flow_queries(s.flow)  # type: ignore[arg-type]
    # a burst of 45600 prompt tok/s within the down delay: 5.7 replicas of work, 6 at the burst
    # floor's 95 %, over the flow's 5
    burst = {**BUSY, "burstPromptTokensRate": 45600.0, "burstGenerationTokensRate": 0.0}
    rr, _rows, _memo = flow_result(PROM, queries, samples(queries, burst), flow_config(s, 30.0), None,
                                   now=1000.0, current=2)
    assert rr.replicas == 6
    assert "burst floor: the lookback's short-range work 5.700 / 0.95 = 6 > 5" in rr.detail
    r = flow_reading(0.0, 2, burst, 8000.0)
    assert (r.burst_prompt_tokens_per_s, r.burst_generation_tokens_per_s) == (45600.0, 0.0)


def test_one_reading_decides_with_rows_and_steps() -> None:
    s = spec()
    queries = flow_queries(s.flow)  # type: ignore[arg-type]
    rr, rows, memo = flow_result(PROM, queries, samples(queries, BUSY), flow_config(s, 30.0), None,
                                 now=1000.0, current=2)
    assert rr.replicas == 5 and rr.summary() == "evaluated 6 of 6 metrics; recommends 5 replicas"
    assert rr.detail.startswith("work: 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4.000 "
                                "replicas at 100 %; ")
    assert "flow need: ceil(4.000 / 0.80 + 0.000) = 5" in rr.detail and "up at once: 2 -> 5" in rr.detail
    assert [(m.name, m.type) for m in rows] == [
        *((q, FLOW_TYPE) for q, _ in queries), *((f, FLOW_DECISION_TYPE) for f in FIGURES)]
    figures = {m.name: m for m in rows if m.type == FLOW_DECISION_TYPE}
    need = figures["need"]
    assert (figures["work"].value, need.value, need.recommended_replicas) == (4.0, 5.0, 5)
    assert (figures["utilization"].value, figures["utilization"].target) == (0.8, 0.8)
    assert memo is not None and memo.state.last == 5


def test_a_failed_signal_is_no_decision_naming_it_and_keeps_the_state() -> None:
    s = spec()
    queries = flow_queries(s.flow)  # type: ignore[arg-type]
    before = FlowMemo("k", FlowState(headroom=2))
    rr, rows, memo = flow_result(PROM, queries, samples(queries, {**BUSY, "waiting": "HTTP 503, 12 bytes"}),
                                 flow_config(s, 30.0), before, now=1.0, current=2)
    assert rr.replicas is None and memo is before
    assert rr.unavailable == f"Flow {PROM}: waiting: HTTP 503, 12 bytes"
    assert (rr.evaluated, rr.total, rr.metric_errors) == (5, 6, ("waiting: HTTP 503, 12 bytes",))
    assert [m.error for m in rows if m.name == "waiting"] == ["HTTP 503, 12 bytes"]
    assert not any(m.type == FLOW_DECISION_TYPE for m in rows)


def test_the_state_follows_its_key() -> None:
    s = spec()
    queries = flow_queries(s.flow)  # type: ignore[arg-type]
    cfg = flow_config(s, 30.0)
    _, _, first = flow_result(PROM, queries, samples(queries, BUSY), cfg, None, now=0.0, current=8)
    assert first is not None and first.state.headroom == 3  # the running 8 over a need of 5: seeded
    _, _, same = flow_result(PROM, queries, samples(queries, BUSY), cfg, first, now=30.0, current=8)
    assert same is not None and len(same.state.work) == 2  # the history goes on
    other = flow_config(spec(utilization=0.5), 30.0)
    _, _, fresh = flow_result(PROM, queries, samples(queries, BUSY), other, same, now=60.0, current=8)
    assert fresh is not None and len(fresh.state.work) == 1  # another config: FlowState() again


# ------------------------------------------------------------------ through the reconciler


def flow_scaler(generation: int = 1, min_replicas: int = 1, max_replicas: int = 20,
                **flow: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llm.escaler.io/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": "chat", "namespace": NS, "uid": "uid-chat", "generation": generation,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metricProvider": "Flow",
            "flow": flow_spec(**flow),
            "scaleDown": {"stabilizationWindowSeconds": 0},
        },
    }


@pytest.fixture
def t() -> Iterator[LLM]:
    t = LLM()
    try:
        yield t
    finally:
        t.stop()


def script(t: LLM, values: dict[str, float | str], **flow: Any) -> None:
    """The reader answers each of the flow's queries (by the preset's PromQL) with ``values``."""
    provider = FlowProvider.model_validate(flow_spec(**flow))
    for signal, query in flow_queries(provider):
        t.reader.values[query] = values.get(signal, 0.0)


def _setup(t: LLM, replicas: int = 2, **flow: Any) -> None:
    t.h.api("deployments").create(deployment("web", replicas))
    t.h.api("llmscalers").create(flow_scaler(**flow))
    t.start()


def memo(t: LLM) -> FlowMemo | None:
    mem = t.ctl.reconciler._memory.get(Request(NS, "chat"))
    return None if mem is None or mem.reading is None else mem.reading.flow


def test_the_target_goes_to_the_flows_count_with_the_usual_conditions(t: LLM) -> None:
    _setup(t)
    script(t, BUSY)
    t.reconcile()
    assert t.h.replicas() == 5
    assert t.reason("ScalingActive") == ("True", "MetricsAvailable")
    assert t.cond("ScalingActive")["message"] == "evaluated 6 of 6 metrics; recommends 5 replicas"  # type: ignore[index]
    assert t.reason("AbleToScale") == ("True", "Synced")
    assert t.reason("ScalingLimited") == ("False", "DesiredWithinRange")
    assert t.reason("MetricsPipeline") == ("True", "AllMetricsAvailable")
    assert t.reason("Validated") == ("True", "Valid")
    st = t.status()
    assert [m["name"] for m in st["currentMetrics"]] == [
        "promptTokensRate", "generationTokensRate", "waiting", "requestsRate", "burstPromptTokensRate",
        "burstGenerationTokensRate", *FIGURES]
    prompt = st["currentMetrics"][0]
    assert (prompt["value"], prompt["target"], prompt["targetType"]) == (16000.0, 8000.0, "AverageValue")
    reason = st["recentDecisions"][-1]["reason"]
    assert reason.startswith("evaluated 6 of 6 metrics; recommends 5 replicas (work: ")
    assert "flow need: ceil(4.000 / 0.80 + 0.000) = 5" in reason and "need: 5 + 0 headroom = 5" in reason
    assert "SuccessfulRescale" in t.h.reasons()


def test_max_replicas_binds_in_the_pipeline_as_for_the_other_providers(t: LLM) -> None:
    _setup(t, max_replicas=3)
    script(t, BUSY)
    t.reconcile()
    assert t.h.replicas() == 3
    assert t.reason("ScalingLimited") == ("True", "TooManyReplicas")


def test_a_failed_signal_holds_and_names_it(t: LLM) -> None:
    _setup(t)
    script(t, {**BUSY, "requestsRate": "Prometheus query failed: connection refused"})
    t.reconcile()
    assert t.h.replicas() == 2
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    msg = t.cond("ScalingActive")["message"]  # type: ignore[index]
    assert msg.startswith(f"Flow {PROM}: requestsRate: Prometheus query failed")
    assert "connection refused" in msg
    assert t.reason("MetricsPipeline") == ("False", "PartialMetrics")
    assert memo(t) is None  # no decision taken, no state


def test_a_bad_selector_stored_before_the_rule_is_invalid_spec_and_reads_nothing(t: LLM) -> None:
    _setup(t, selector='model_name="x"} or vector(100) #')
    t.reconcile()
    assert t.reader.calls == 0 and t.h.replicas() == 2
    assert t.reason("Validated") == ("False", "InvalidSpec")
    assert "spec.flow.selector" in t.cond("Validated")["message"]  # type: ignore[index]


def test_flow_without_flow_is_invalid_spec_and_holds(t: LLM) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    obj = flow_scaler()
    del obj["spec"]["flow"]
    t.h.api("llmscalers").create(obj)
    t.start()
    t.reconcile()
    assert t.reason("ScalingActive") == ("False", "InvalidSpec")
    assert t.cond("ScalingActive")["message"] == "spec.flow: required when metricProvider is Flow"  # type: ignore[index]
    assert t.h.replicas() == 2 and t.reader.calls == 0


def test_state_lives_per_scaler_and_resets_only_with_the_flow_config(t: LLM) -> None:
    _setup(t, replicas=8)
    script(t, BUSY)
    t.reconcile()
    first = memo(t)
    assert first is not None and first.state.headroom == 3  # seeded from the running 8 over a need of 5
    assert t.h.replicas() == 8
    t.h.clock.step(30)
    t.reconcile()
    kept = memo(t)
    assert kept is not None and len(kept.state.work) == 2
    # a spec change outside the flow's config (maxReplicas): the state goes on
    t.edit(maxReplicas=30)
    t.h.clock.step(30)
    t.reconcile()
    after_edit = memo(t)
    assert after_edit is not None and len(after_edit.state.work) == 3 and after_edit.key == kept.key
    # a change of the flow's config (its capacity): FlowState() again, seeded from the fleet again
    obj = t.obj()
    obj["spec"]["flow"]["capacity"] = {"prefillTokensPerSecond": 16000, "decodeTokensPerSecond": 3000}
    obj["metadata"]["generation"] += 1
    t.h.api("llmscalers").update(obj)
    script(t, BUSY, capacity={"prefillTokensPerSecond": 16000, "decodeTokensPerSecond": 3000})
    t.h.clock.step(30)
    t.reconcile()
    reset = memo(t)
    assert reset is not None and reset.key != kept.key
    assert len(reset.state.work) == 1 and reset.state.headroom == 5  # 8 running over a need of 3


def test_a_deleted_scaler_drops_its_flow_state(t: LLM) -> None:
    _setup(t)
    script(t, BUSY)
    t.reconcile()
    assert memo(t) is not None
    t.h.api("llmscalers").delete(f"{NS}/chat")
    assert t.reconcile() == Result()
    assert Request(NS, "chat") not in t.ctl.reconciler._memory


def test_a_recreated_scaler_starts_afresh(t: LLM) -> None:
    _setup(t, replicas=8)
    script(t, BUSY)
    t.reconcile()
    assert memo(t) is not None
    t.h.api("llmscalers").delete(f"{NS}/chat")
    t.reconcile()
    obj = flow_scaler()
    obj["metadata"]["uid"] = "uid-chat-2"
    t.h.api("llmscalers").create(obj)
    t.reconcile()
    again = memo(t)
    assert again is not None and len(again.state.work) == 1


def test_the_flow_decides_at_each_polls_due_time_however_late_the_read() -> None:
    """Flow sizing's intervals (its down delay, the headroom's) compare the times of its readings
    with one second of slack. A read a busy worker starts late used to decide at the moment it
    started, so the same readings decided differently on a loaded manager than in the simulator
    (CI of f78e1b0: the manager held 8 for five polls where the simulator went to 6, a down delay
    after the last change — a read started over a second late holds a scale-down at the delay's
    edge). Every reading now decides at its poll's due time."""
    t = LLM(poll_interval=30.0)
    try:
        t.h.api("deployments").create(deployment("web", 2))
        obj = flow_scaler()
        obj["spec"]["pollIntervalSeconds"] = 30
        t.h.api("llmscalers").create(obj)
        t.start()
        script(t, BUSY)
        every = 30.0
        due0 = poller.phase(Request(NS, "chat"), every) + every * math.ceil(t.h.clock.monotonic() / every + 1)
        lateness = [0.4, 2.5, 0.0, 1.7, 6.0, 0.2]  # seconds after each due time the read starts
        for k, late in enumerate(lateness):
            t.h.clock.step(due0 + every * k + late - t.h.clock.monotonic())
            t.reconcile()
        kept = memo(t)
        assert kept is not None
        assert [round(at - due0, 6) for at, _ in kept.state.work] == [every * k for k in range(len(lateness))]
        # a reading off the grid (more than half an interval after a due time) decides at its own time
        assert poller.poll_time(Request(NS, "chat"), due0 + 16.0, every) == due0 + 16.0
        assert poller.poll_time(Request(NS, "chat"), due0 - 0.5, every) == due0  # the shortcut's early start
    finally:
        t.stop()
