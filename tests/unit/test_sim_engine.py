"""The simulator's engine and serving model against cases with a closed-form answer."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass

import pytest

from escaler.sim.engine import MissBudget, SimOptions, View, simulate
from escaler.sim.model import ReplicaProfile
from escaler.sim.report import SloTargets, summarize
from escaler.sim.trace import Arrival

# the closed-form cases: no context terms (escaler.sim.model), a constant cold start
FLAT = {"prefill_context_scale": 0.0, "decode_per_kv_token_s": 0.0}

# one sequence per iteration, no batching gain: a replica is a D/D/1 server
SERIAL = ReplicaProfile(max_batch=1, prefill_tokens_per_s=10_000, decode_base_s=0.01, decode_per_seq_s=0.0,
                        kv_capacity_tokens=100_000, cold_start_s=30.0, cold_start_p90_s=30.0, **FLAT)


@dataclass
class Fixed:
    n: int
    name: str = "fixed"
    period_s: float = 1.0

    def decide(self, view: View) -> int:
        return self.n


@dataclass
class Schedule:
    """A replica count that changes at given times."""

    steps: list[tuple[float, int]]
    name: str = "schedule"
    period_s: float = 1.0

    def decide(self, view: View) -> int:
        n = view.replicas
        for t, k in self.steps:
            if view.now >= t:
                n = k
        return n


def steady(n: int, every: float, prompt: int = 1000, output: int = 10) -> list[Arrival]:
    return [Arrival(i * every, prompt, output) for i in range(n)]


def test_an_idle_replica_serves_each_request_in_its_closed_form_time() -> None:
    # first iteration: decode step + prompt / prefill = 0.01 + 1000 / 10000 = 0.11 s; then 9 x 0.01 s
    run = simulate(steady(20, every=1.0), Fixed(1), SimOptions(profile=SERIAL, initial_replicas=1))
    assert run.unfinished == 0 and len(run.requests) == 20
    for q in run.requests:
        assert q.ttft == pytest.approx(0.11)
        assert q.tpot == pytest.approx(0.01)
        assert q.done is not None and q.done - q.arrival == pytest.approx(0.2)
    # one warm replica paid from 0 to the end of the last request (19 + 0.2 s)
    assert run.end == pytest.approx(19.2)
    assert run.replica_seconds == pytest.approx(19.2)


def test_an_overloaded_server_queues_linearly() -> None:
    # service S = 0.2 s per request, one every T = 0.15 s: request k starts at k x S, so its TTFT
    # is k x (S - T) + 0.11
    run = simulate(steady(40, every=0.15), Fixed(1), SimOptions(profile=SERIAL))
    for k, q in enumerate(run.requests):
        assert q.ttft == pytest.approx(k * (0.2 - 0.15) + 0.11, abs=1e-9)


def test_join_shortest_queue_spreads_a_burst_over_the_replicas() -> None:
    burst = [Arrival(0.0, 1000, 10) for _ in range(6)]
    run = simulate(burst, Fixed(3), SimOptions(profile=SERIAL, initial_replicas=3, min_replicas=3))
    per = sorted(sum(1 for q in run.requests if q.replica == r) for r in range(3))
    assert per == [2, 2, 2]
    # each replica serves two in a row: TTFTs 0.11 and 0.2 + 0.11
    assert sorted(round(q.ttft, 6) for q in run.requests) == [0.11] * 3 + [0.31] * 3


def test_continuous_batching_shares_iterations() -> None:
    prof = ReplicaProfile(max_batch=8, prefill_tokens_per_s=10_000, decode_base_s=0.01,
                          decode_per_seq_s=0.001,
                          kv_capacity_tokens=100_000, cold_start_s=0.0, cold_start_p90_s=0.0, **FLAT)
    burst = [Arrival(0.0, 100, 5) for _ in range(4)]
    run = simulate(burst, Fixed(1), SimOptions(profile=prof))
    first, *rest = run.requests
    # the first request starts an iteration the moment it arrives: 0.01 + 0.001 + 100 / 10000
    assert first.ttft == pytest.approx(0.021)
    # the other three join the next one, with the first's decode: 0.01 + 4 x 0.001 + 300 / 10000
    for q in rest:
        assert q.ttft == pytest.approx(0.021 + 0.044)
    # then iterations of four (0.014 s each) until the first has its 5 tokens, then of three (0.013)
    assert first.done == pytest.approx(0.065 + 3 * 0.014)
    for q in rest:
        assert q.done == pytest.approx(0.065 + 3 * 0.014 + 0.013)


def test_a_new_replica_serves_only_after_its_cold_start_and_costs_from_its_creation() -> None:
    # one warm replica, a second ordered at t=1 (serves at 31); a burst at 20 s finds one replica,
    # a burst at 40 s two
    arrivals = [Arrival(20.0, 1000, 10)] * 2 + [Arrival(40.0, 1000, 10)] * 2
    run = simulate(arrivals, Schedule([(1.0, 2)]), SimOptions(profile=SERIAL, initial_replicas=1))
    assert [q.replica for q in run.requests] == [0, 0, 0, 1]
    assert run.scale_events == [(1.0, 1, 2)]
    # replica 0 from 0, replica 1 from 1, both to the end (40.2)
    assert run.end == pytest.approx(40.2)
    assert run.replica_seconds == pytest.approx(40.2 + 39.2)


def test_requests_wait_while_no_replica_serves() -> None:
    run = simulate([Arrival(0.5, 1000, 10)], Fixed(1),
                   SimOptions(profile=SERIAL, initial_replicas=0, min_replicas=0))
    # the policy asks for 1 at t=1; it serves at 31; the request waited 30.5 s
    assert run.requests[0].ttft == pytest.approx(31.0 - 0.5 + 0.11)


def test_scale_down_drains_a_replica_without_losing_a_request() -> None:
    long = [Arrival(0.0, 1000, 500), Arrival(0.0, 1000, 500)]  # 0.1 + 500 x 0.01 = 5.1 s each
    run = simulate(long, Schedule([(1.0, 1)]), SimOptions(profile=SERIAL, initial_replicas=2, min_replicas=1))
    assert run.unfinished == 0 and len(run.requests) == 2
    assert all(q.done == pytest.approx(5.1) for q in run.requests)
    # both replicas paid until 5.1: the drained one finished its request
    assert run.replica_seconds == pytest.approx(2 * 5.1)


def test_a_run_crosses_processes_as_columns_and_comes_back_equal() -> None:
    # one request unfinished (None times), prefix hashes on some, a run a budget stopped
    arrivals = [Arrival(i * 0.05, 300 + 7 * i % 500, 1 + i % 40, hash_ids=(i % 3, i % 5) if i % 2 else ())
                for i in range(400)]
    opts = SimOptions(profile=ReplicaProfile(cold_start_s=5.0), max_replicas=4)
    full = simulate(arrivals, Schedule([(3.0, 2)]), opts)
    stopped = simulate(arrivals, Schedule([]), opts, budget=MissBudget(lambda q: q.ttft > 0.01, 3))
    assert stopped.stopped and stopped.unfinished > 0
    for run in (full, stopped):
        wire = pickle.dumps(run, protocol=pickle.HIGHEST_PROTOCOL)
        back = pickle.loads(wire)
        assert back == run and back.requests == run.requests
        assert any(q.hash_ids for q in back.requests)
        # columns, not one pickled object per record
        assert b"RequestRecord" not in wire


def test_same_inputs_give_byte_identical_results() -> None:
    arrivals = [Arrival(i * 0.37 % 50 + i * 0.01, 200 + 37 * i % 900, 1 + 13 * i % 80) for i in range(300)]
    arrivals.sort()
    opts = SimOptions(profile=ReplicaProfile(cold_start_s=5.0), max_replicas=8)
    a = json.dumps(summarize(simulate(arrivals, Schedule([(10.0, 3), (30.0, 1)]), opts), SloTargets()))
    b = json.dumps(summarize(simulate(arrivals, Schedule([(10.0, 3), (30.0, 1)]), opts), SloTargets()))
    assert a == b


def test_summary_attainment_and_flaps() -> None:
    run = simulate(steady(10, every=1.0), Schedule([(2.0, 2), (3.0, 1), (4.0, 2)]),
                   SimOptions(profile=SERIAL))
    s = summarize(run, SloTargets(ttft_s=0.1, tpot_s=0.1))
    assert s["attainment"] == 0.0 and s["ttft_attainment"] == 0.0  # 0.11 > 0.1
    s = summarize(run, SloTargets(ttft_s=0.2, tpot_s=0.1))
    assert s["attainment"] == 1.0
    assert s["scale_events"] == 3 and s["flaps"] == 2


def test_invalid_options_are_refused() -> None:
    with pytest.raises(ValueError, match="min_replicas 3 / max_replicas 2"):
        simulate(steady(1, 1.0), Fixed(1), SimOptions(min_replicas=3, max_replicas=2))
    with pytest.raises(ValueError, match="no requests"):
        simulate([], Fixed(1), SimOptions())


# chunked prefill: 10,000 prompt tokens/s, a 0.01 s decode step, a budget of 4,096 tokens
CHUNKED = ReplicaProfile(max_batch=8, prefill_tokens_per_s=10_000, decode_base_s=0.01, decode_per_seq_s=0.0,
                         kv_capacity_tokens=100_000, cold_start_s=0.0, cold_start_p90_s=0.0,
                         max_batched_tokens=4096, **FLAT)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget() -> None:
    run = simulate([Arrival(0.0, 10_000, 2)], Fixed(1), SimOptions(profile=CHUNKED))
    (q,) = run.requests
    # 4,096 + 4,096 + 1,808 tokens: (0.01 + 0.4096) x 2 + (0.01 + 0.1808), then one decode step
    assert q.ttft == pytest.approx(2 * 0.4196 + 0.1908)
    assert q.done == pytest.approx(2 * 0.4196 + 0.1908 + 0.01)
    # without a budget the whole prompt goes in one iteration
    whole = simulate([Arrival(0.0, 10_000, 2)], Fixed(1),
                     SimOptions(profile=ReplicaProfile(**{**CHUNKED.__dict__, "max_batched_tokens": 0})))
    assert whole.requests[0].ttft == pytest.approx(0.01 + 1.0)


def test_decodes_go_first_and_a_prefill_takes_what_the_budget_leaves() -> None:
    # a short request decodes while a 10,000-token prompt arrives: each of its iterations carries at
    # most 4,095 prompt tokens (one token of the budget is its decode), so no decode step takes
    # longer than 0.01 + 0.4095 s, where an unchunked prefill would stall it for 1.01 s
    arrivals = [Arrival(0.0, 100, 50), Arrival(0.05, 10_000, 2)]
    run = simulate(arrivals, Fixed(1), SimOptions(profile=CHUNKED))
    short = next(q for q in run.requests if q.prompt_tokens == 100)
    assert short.done is not None and short.first_token is not None
    long_gap = (short.done - short.first_token) / (short.output_tokens - 1)
    assert long_gap < (0.01 * 48 + 3 * 0.4196) / 49 + 1e-9


def test_scrapes_carry_the_token_counters_and_each_finished_requests_tpot() -> None:
    arrivals = steady(30, every=0.5, prompt=500, output=20)
    run = simulate(arrivals, Fixed(2), SimOptions(profile=CHUNKED, initial_replicas=2))
    last = run.scrapes[-1].t  # the run ends with the last request: its tail is in no scrape
    assert last < run.end
    # a 500-token prompt is prefilled in the iteration that gives its first token
    prefilled = [q for q in run.requests if q.first_token is not None and q.first_token <= last]
    assert sum(s.prompt_tokens for s in run.scrapes) == 500 * len(prefilled)
    done = [q for q in run.requests if q.done is not None and q.done <= last]
    assert len(done) >= 25
    assert sorted(t for s in run.scrapes for t in s.tpots) == sorted(q.tpot for q in done)
    # every token generated by the last scrape: the finished requests' 20 and the others' so far
    assert sum(s.generation_tokens for s in run.scrapes) >= 20 * len(done)


def test_summary_oscillations_and_event_rate() -> None:
    run = simulate(steady(10, every=1.0), Schedule([(2.0, 2), (3.0, 1), (4.0, 2)]),
                   SimOptions(profile=SERIAL))
    s = summarize(run, SloTargets(oscillation_window_s=60.0))
    # up at 2, down at 3, up at 4: two turns back within a cold start
    assert s["oscillations"] == 2
    assert summarize(run, SloTargets(oscillation_window_s=0.5))["oscillations"] == 0
    # 3 events over run.end seconds, a fleet under 10 counted as 10
    assert s["event_rate"] == pytest.approx(3 / (run.end / 300.0), rel=1e-5)


def test_a_token_budget_below_the_batch_is_refused() -> None:
    problems = ReplicaProfile(max_batch=64, max_batched_tokens=32).validate()
    assert problems == ["max_batched_tokens: must be 0 (no budget) or at least max_batch (64: every decode "
                        "takes one token), got 32"]
    assert ReplicaProfile(max_batched_tokens=-1).validate()[0].startswith("max_batched_tokens:")
