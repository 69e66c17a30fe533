"""Flow sizing in the SLO decision engine (an LLMSLORequirement's ``spec.flow``, issue 26).

Pure (``escaler.reconcilers.slo.flow``, ``escaler.reconcilers.slo.kinds``): the plan's queries (the flow's
preset PromQL, the objectives taken from ``ttft``/``otps``, their own PromQL not read), the replica range
the bounds give the flow, one reading sized with its steps and figures, a missing signal held naming it,
the state kept under its key. The rules (each refusal naming its field) are in ``api_cases`` (both
evaluators); here the accepted neighbours. Through the reconciler (``test_slo_reconciler``'s ``Rig``): the
decision in ``status.decision`` and on the route, decided once per reading, the state kept per
requirement across polls and spec changes that leave the flow alone, reset by one that changes it,
dropped when the requirement goes, turns invalid or loses its flow, and a recreated requirement afresh."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, deployment
from test_slo_reconciler import LLM, OTPS_Q, POLL, TTFT_Q, Rig, llm_req

from escaler.api.llmflow import FlowSizing
from escaler.api.rules import validate
from escaler.api.slo import LLMSLORequirement, LLMSLORequirementSpec
from escaler.reconcilers.kit.flowpresets import VLLM_TTFT_BUCKETS, flow_queries, share_bound
from escaler.reconcilers.kit.flowsizing import FLOW_MAX_REPLICAS, FlowMemo
from escaler.reconcilers.slo.flow import FlowPlan, FlowStates, flow_plan
from escaler.reconcilers.slo.kinds import LLM_KIND, Invalid, Plan
from escaler.runtime import Request, Result
from escaler.scaling.flow import FlowState
from escaler.scaling.slo import ReplicaBounds, replica_bounds
from escaler.signals.sample import Sample

CAPACITY = {"prefillTokensPerSecond": 8000, "decodeTokensPerSecond": 1500}
# 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4 replicas at 100 %; / 0.8 → 5. TTFT p90
# 0.4 s less the mean prompt's 0.2 s prefill: 0.2 s of queueing, within the 0.4 s budget (half of 0.8 s)
BUSY: dict[str, float | str] = {"promptTokensRate": 16000.0, "generationTokensRate": 3000.0, "waiting": 0.0,
                                "requestsRate": 10.0, "ttftP90": 0.4}
FIGURES = ("work", "backlog", "planned", "utilization", "headroom", "need")


def flow(**kw: Any) -> dict[str, Any]:
    return {"engine": "vllm", "selector": 'model_name="llama"', "capacity": CAPACITY, "utilization": 0.8,
            "coldStartSeconds": 60, **kw}


def flow_req(name: str = "chat", *, flow_spec: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """An LLMSLORequirement with ttft (800 ms), otps (20/s) and ``spec.flow``."""
    return llm_req(name, flow=flow_spec if flow_spec is not None else flow(), **kw)


def plan_of(obj: dict[str, Any]) -> Plan:
    plan = LLM_KIND.parse(obj)
    assert isinstance(plan, Plan), plan
    return plan


def spec_of(obj: dict[str, Any]) -> LLMSLORequirementSpec:
    return LLMSLORequirement.parse(obj).spec


def samples(plan: FlowPlan, values: dict[str, float | str]) -> dict[str, Sample]:
    out = {}
    for signal, _ in plan.queries:
        v = values.get(signal, 0.0)
        out[signal] = Sample.fail(v) if isinstance(v, str) else Sample(float(v))
    return out


# ------------------------------------------------------------------ the plan


def test_the_plan_reads_the_flows_queries_with_the_objectives_of_ttft_and_otps() -> None:
    obj = flow_req()
    plan = plan_of(obj)
    assert plan.size is None and plan.flow is not None and plan.queries == plan.flow.queries
    # the objectives: ttft.targetMs / 1000 and 1 / otps.target, on the flow's own preset queries
    effective = FlowSizing.model_validate(flow(ttftSeconds=0.8, tpotSeconds=0.05))
    assert plan.queries == flow_queries(effective)
    assert [s for s, _ in plan.queries] == [
        "promptTokensRate", "generationTokensRate", "waiting", "requestsRate", "ttftP90", "ttftMissShare",
        "ttftMissShareLong", "tpotMissShare", "tpotMissShareLong", "burstPromptTokensRate",
        "burstGenerationTokensRate"]
    queries = dict(plan.queries)
    assert queries["promptTokensRate"] == 'sum(rate(vllm:prompt_tokens_total{model_name="llama"}[60s]))'
    # 0.8 s is read above vLLM's 1.0 s bound (the smallest at or above it), 0.05 s on its own
    assert share_bound(0.8, VLLM_TTFT_BUCKETS) == 1.0 and 'le="1.0"' in queries["ttftMissShare"]
    assert 'le="0.05"' in queries["tpotMissShare"]
    # the objectives' own PromQL is not read with a flow
    assert TTFT_Q not in queries.values() and OTPS_Q not in queries.values()
    assert plan.flow.ttft_s == 0.8 and plan.flow.config(30.0).queue_delay_budget_s == 0.4


def test_without_ttft_and_otps_the_flows_own_objectives_are_used_or_none() -> None:
    obj = llm_req(otps=False, flow=flow(ttftSeconds=2.5))
    del obj["spec"]["ttft"]
    plan = plan_of(obj)
    assert plan.flow is not None and plan.flow.ttft_s == 2.5
    assert "ttftP90" in dict(plan.queries) and "tpotMissShare" not in dict(plan.queries)
    obj["spec"]["flow"] = flow()
    bare = plan_of(obj)
    assert [s for s, _ in bare.queries] == [
        "promptTokensRate", "generationTokensRate", "waiting", "requestsRate", "burstPromptTokensRate",
        "burstGenerationTokensRate"]


@pytest.mark.parametrize(("bounds", "cpr", "want"), [
    (None, 1, (1, FLOW_MAX_REPLICAS)),
    ({"min": {"type": "replica", "value": 2}, "max": {"type": "replica", "value": 8}}, 1, (2, 8)),
    ({"min": {"type": "replica", "value": 0}, "max": {"type": "replica", "value": 8}}, 1, (1, 8)),
    ({"min": {"type": "replica", "value": 0}, "max": {"type": "replica", "value": 0}}, 1, (0, 0)),
    ({"min": {"type": "concurrency", "value": 20}, "max": {"type": "concurrency", "value": 100}}, 16, (2, 7)),
], ids=["unbounded", "replica", "min-0-is-1", "max-0", "concurrency"])
def test_the_bounds_give_the_flow_its_range_never_below_1_unless_max_is_0(
        bounds: dict[str, Any] | None, cpr: int, want: tuple[int, int]) -> None:
    obj = flow_req(concurrencyPerReplica=cpr, **({"bounds": bounds} if bounds else {}))
    spec = spec_of(obj)
    plan = flow_plan(spec, replica_bounds(spec.bounds, cpr))
    assert (plan.floor, plan.ceiling) == want
    config = plan.config(30.0)
    assert (config.min_replicas, config.max_replicas) == want
    assert (config.horizon_s, config.down_delay_s) == (90.0, 300.0)  # a cold start + a poll; >= 300 s


def test_an_objective_set_by_ttft_lets_a_latency_query_be_overridden() -> None:
    """The latency rules count ``ttft``/``otps`` as the objectives they set (the refusals are in
    ``api_cases``)."""
    obj = flow_req(flow_spec=flow(queries={"ttftP90": "my_p90", "tpotMissShare": "my_share"}))
    assert validate(LLMSLORequirement.parse(obj), admission=True) == []
    queries = dict(plan_of(obj).queries)
    assert (queries["ttftP90"], queries["tpotMissShare"]) == ("my_p90", "my_share")
    tgi = flow_req(flow_spec=flow(engine="tgi", queries={"ttftMissShare": "t", "tpotMissShare": "o"}))
    assert validate(LLMSLORequirement.parse(tgi), admission=True) == []


def test_a_selector_stored_before_the_rule_is_invalid_naming_the_field() -> None:
    obj = flow_req(flow_spec=flow(selector='model_name="x"} or vector(100) #'))
    invalid = LLM_KIND.parse(obj)
    assert isinstance(invalid, Invalid)
    assert invalid.errors[0].startswith("spec.flow.selector: selector must be a PromQL label-matcher list")


# ------------------------------------------------------------------ sizing, pure


def test_one_reading_sizes_with_the_steps_and_the_figures() -> None:
    plan = plan_of(flow_req()).flow
    assert plan is not None
    d, memo = plan.size(samples(plan, BUSY), current=2, last=None, memo=None, now=1000.0, poll_s=30.0)
    assert d.replicas == 5 and not d.held
    assert d.reason.startswith("work: 16000 prompt tok/s / 8000 + 3000 generated tok/s / 1500 = 4.000 "
                               "replicas at 100 %; ")
    for step in ("queueing delay 0.2 s within budget: utilisation target 0.80",
                 "flow need: ceil(4.000 / 0.80 + 0.000) = 5", "need: 5 + 0 headroom = 5",
                 "up at once: 2 -> 5"):
        assert step in d.reason
    assert d.signals == {"currentReplicas": 2, "work": 4.0, "backlog": 0.0, "planned": 4.0,
                         "utilization": 0.8, "headroom": 0.0, "need": 5.0}
    assert memo is not None and memo.state.last == 5 and len(memo.state.work) == 1


def test_the_bounds_clamp_the_flows_count_in_its_own_steps() -> None:
    obj = flow_req(bounds={"min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 3}})
    plan = plan_of(obj).flow
    assert plan is not None
    d, _ = plan.size(samples(plan, BUSY), current=2, last=None, memo=None, now=0.0, poll_s=30.0)
    assert d.replicas == 3 and d.reason.endswith("; clamped to [1, 3]: 3")
    assert d.signals["need"] == 5.0


def test_a_missing_signal_holds_naming_it_and_leaves_the_state() -> None:
    plan = plan_of(flow_req()).flow
    assert plan is not None
    before = FlowMemo("k", FlowState(headroom=2))
    down = "Prometheus query failed: HTTP 503, 12 bytes"
    values: dict[str, float | str] = {**BUSY, "waiting": down, "requestsRate": down,
                                      "ttftMissShare": "query returned no series"}
    d, memo = plan.size(samples(plan, values), current=4, last=6, memo=before, now=0.0, poll_s=30.0)
    assert memo is before and d.held and d.replicas == 6
    assert d.reason == (f"signals missing (waiting, requestsRate: {down}; ttftMissShare: query returned no "
                        "series): holding the last decision (6 replicas)")
    assert d.missing == (f"waiting, requestsRate: {down}", "ttftMissShare: query returned no series")
    assert d.signals == {"currentReplicas": 4}
    # a read that failed whole counts for every signal
    whole, _ = plan.size({"*": Sample.fail("signal read failed: boom")}, current=4, last=None, memo=None,
                         now=0.0, poll_s=30.0)
    assert whole.held and whole.replicas == 4
    assert whole.reason.startswith("signals missing (promptTokensRate, generationTokensRate, waiting, ")


def test_the_state_is_kept_under_its_key_and_decided_once_per_reading() -> None:
    plan = plan_of(flow_req()).flow
    assert plan is not None
    states, req = FlowStates(), Request(NS, "chat")
    first = states.size(req, "uid-1", plan, samples(plan, BUSY), 0.0, current=8, last=None, poll_s=30.0)
    memo = states.memo(req)
    assert memo is not None and memo.state.headroom == 3  # the running 8 over a need of 5: seeded
    # the same reading again (a target event between polls): the same decision, the state unmoved
    again = states.size(req, "uid-1", plan, samples(plan, BUSY), 0.0, current=5, last=8, poll_s=30.0)
    assert again is first and states.memo(req) is memo
    states.size(req, "uid-1", plan, samples(plan, BUSY), 30.0, current=8, last=8, poll_s=30.0)
    kept = states.memo(req)
    assert kept is not None and len(kept.state.work) == 2
    # another flow config (capacity): FlowState() again
    other = plan_of(flow_req(flow_spec=flow(capacity={"prefillTokensPerSecond": 16000,
                                                      "decodeTokensPerSecond": 3000}))).flow
    assert other is not None
    states.size(req, "uid-1", other, samples(other, BUSY), 60.0, current=8, last=8, poll_s=30.0)
    reset = states.memo(req)
    assert reset is not None and reset.key != kept.key and len(reset.state.work) == 1
    # a recreated requirement (a new uid) starts afresh; forget drops the one entry
    states.size(req, "uid-2", other, samples(other, BUSY), 90.0, current=8, last=8, poll_s=30.0)
    fresh = states.memo(req)
    assert fresh is not None and len(fresh.state.work) == 1 and len(states) == 1
    states.forget(req)
    assert len(states) == 0 and states.memo(req) is None


# ------------------------------------------------------------------ through the reconciler


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        yield r
    finally:
        r.h.stop()


def answer(rig: Rig, obj: dict[str, Any], values: dict[str, float | str]) -> None:
    """The scripted Prometheus answers each of the flow's queries with ``values[signal]`` (0 when absent)."""
    for signal, promql in plan_of(obj).queries:
        rig.answers[promql] = values.get(signal, 0.0)


def memo(rig: Rig) -> FlowMemo | None:
    return rig.engine.controllers[LLM].reconciler.flows.memo(Request(NS, "chat"))


def test_the_decision_is_the_flows_in_status_and_on_the_route(rig: Rig) -> None:
    obj = flow_req()
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    assert rig.reconcile() == Result(requeue_after=POLL)
    d = rig.decision()
    assert d["replicas"] == 5
    assert "flow need: ceil(4.000 / 0.80 + 0.000) = 5" in d["reason"] and "up at once: 4 -> 5" in d["reason"]
    assert d["signals"] == {"currentReplicas": 4, "work": 4.0, "backlog": 0.0, "planned": 4.0,
                            "utilization": 0.8, "headroom": 0.0, "need": 5.0}
    assert rig.ready() == ("True", "Sized", "sized from its signals: 5 replicas")
    assert sorted(rig.queries) == sorted(q for _, q in plan_of(obj).queries)  # ttft/otps PromQL not read
    served = rig.served().body
    assert served["replicas"] == 5 and served["signals"]["need"] == 5.0 and served["reason"] == d["reason"]


def test_a_missing_flow_signal_is_signals_missing_naming_it(rig: Rig) -> None:
    obj = flow_req()
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    rig.reconcile()
    rig.h.clock.step(POLL)
    answer(rig, obj, {**BUSY, "generationTokensRate": "Prometheus query failed: HTTP 503, 22 bytes"})
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "SignalsMissing")
    assert message == ("signals missing (generationTokensRate: Prometheus query failed: HTTP 503, 22 bytes): "
                       "holding the last decision (5 replicas)")
    assert rig.decision()["replicas"] == 5 and rig.served().body["replicas"] == 5
    kept = memo(rig)
    assert kept is not None and len(kept.state.work) == 1  # the failed poll left the state alone


def test_the_state_lives_per_requirement_and_resets_only_with_the_flow_config(rig: Rig) -> None:
    obj = flow_req()
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    rig.reconcile()
    first = memo(rig)
    assert first is not None and len(first.state.work) == 1
    # a reconcile between polls (a target event) reuses the reading and its decision: counted once
    rig.h.clock.step(5)
    rig.reconcile()
    assert memo(rig) is first
    rig.h.clock.step(POLL)
    rig.reconcile()
    polled = memo(rig)
    assert polled is not None and len(polled.state.work) == 2
    # a spec change outside the flow's config (highPriority): read afresh, the state goes on
    rig.update_spec(flow_req(generation=2, highPriority=True))
    rig.h.clock.step(1)
    rig.reconcile()
    edited = memo(rig)
    assert edited is not None and edited.key == polled.key and len(edited.state.work) == 3
    # the TTFT objective is the flow's: changing it changes the flow's config, FlowState() again
    changed = flow_req(generation=3, highPriority=True)
    changed["spec"]["ttft"]["targetMs"] = 2500
    answer(rig, changed, BUSY)
    rig.update_spec(changed)
    rig.h.clock.step(1)
    rig.reconcile()
    reset = memo(rig)
    assert reset is not None and reset.key != edited.key and len(reset.state.work) == 1


def test_the_state_is_dropped_with_the_flow_an_invalid_spec_and_the_requirement(rig: Rig) -> None:
    obj = flow_req()
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    rig.reconcile()
    assert memo(rig) is not None
    # the flow removed: the ratio rule sizes, the flow's state goes
    rig.answers.update({TTFT_Q: 800.0, OTPS_Q: 20.0})
    plain = llm_req(generation=2)
    rig.update_spec(plain)
    rig.h.clock.step(1)
    rig.reconcile()
    assert memo(rig) is None and "hysteresis band" in rig.decision()["reason"]
    # back with a flow, then stored invalid (inflight next to it, as before the rule): InvalidSpec, dropped
    rig.update_spec(flow_req(generation=3))
    rig.h.clock.step(1)
    rig.reconcile()
    assert memo(rig) is not None
    bad = flow_req(generation=4, inflight={"promql": "sum(x)"})
    rig.update_spec(bad)
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("spec.inflight: inflight is not used with flow")
    assert memo(rig) is None
    # deleted: forgotten
    rig.update_spec(flow_req(generation=5))
    rig.h.clock.step(1)
    rig.reconcile()
    assert memo(rig) is not None
    rig.api().delete(f"{NS}/chat")
    assert rig.reconcile() == Result()
    assert memo(rig) is None and len(rig.engine.controllers[LLM].reconciler.flows) == 0


def test_a_recreated_requirement_starts_afresh(rig: Rig) -> None:
    obj = flow_req()
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    rig.reconcile()
    rig.h.clock.step(POLL)
    rig.reconcile()
    grown = memo(rig)
    assert grown is not None and len(grown.state.work) == 2
    rig.api().delete(f"{NS}/chat")
    rig.reconcile()
    again = copy.deepcopy(obj)
    again["metadata"]["uid"] = "uid-chat-2"
    rig.api().create(again)
    rig.h.clock.step(1)
    rig.reconcile()
    fresh = memo(rig)
    assert fresh is not None and len(fresh.state.work) == 1


def test_bounds_of_the_requirement_bind_the_flow(rig: Rig) -> None:
    obj = flow_req(bounds={"min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 3}})
    answer(rig, obj, BUSY)
    rig.api().create(obj)
    rig.reconcile()
    d = rig.decision()
    assert d["replicas"] == 3 and d["reason"].endswith("clamped to [1, 3]: 3") and d["signals"]["need"] == 5.0


def test_flow_with_pd_stored_before_the_rule_is_invalid_naming_the_field(rig: Rig) -> None:
    obj = flow_req(deployType="pd")
    rig.api().create(obj)
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("spec.flow: flow is not supported with deployType pd")
    assert rig.queries == []


def test_replica_bounds_are_unchanged_by_the_flow() -> None:
    """The hold without a target (the plan's bounds) is the requirement's, not the flow's floor."""
    obj = flow_req()
    assert plan_of(obj).bounds == ReplicaBounds()
