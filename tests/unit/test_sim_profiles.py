"""Replica profiles (escaler/sim/model.py): the context-dependent costs, the prefix cache, the
cold start as a distribution with an optional node delay, the shipped named profiles, and the
consumers that must stay honest with them (the lower bound, the oracle, the flow capacity)."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

from escaler.cli.main import main
from escaler.sim.bound import lower_bound, reusable, work
from escaler.sim.engine import Run, SimOptions, simulate
from escaler.sim.fixed import FixedPolicy
from escaler.sim.hpa import HpaPolicy
from escaler.sim.model import (
    COLD_START_FLOOR,
    DEFAULT_PROFILE,
    PROFILES,
    ProfileError,
    ReplicaProfile,
    load_profile,
    profile_path,
)
from escaler.sim.oracle import OraclePolicy, lead_s
from escaler.sim.policies import flow_capacity
from escaler.sim.report import SloTargets, summarize
from escaler.sim.serving import Fleet
from escaler.sim.trace import Arrival
from tests.unit.test_sim_engine import Fixed, Schedule

# closed-form timings: a 10,000 tokens/s prefill with no context term, a 0.01 s step, a constant
# cold start, no token budget
FLAT = ReplicaProfile(max_batch=8, prefill_tokens_per_s=10_000, prefill_context_scale=0.0, decode_base_s=0.01,
                      decode_per_seq_s=0.0, decode_per_kv_token_s=0.0, kv_capacity_tokens=100_000,
                      cold_start_s=0.0, cold_start_p90_s=0.0, max_batched_tokens=0, prefix_block_tokens=100)


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(("changes", "message"), [
    ({"prefill_context_scale": -1.0}, "prefill_context_scale: must be a number >= 0, got -1.0"),
    ({"decode_per_kv_token_s": float("nan")}, "decode_per_kv_token_s: must be a number >= 0, got nan"),
    ({"decode_context_tokens": -1}, "decode_context_tokens: must be at least 0, got -1"),
    ({"cold_start_p90_s": 30.0}, "cold_start_p90_s: must be at least cold_start_s (60, the median), got 30"),
    ({"cold_start_s": 0.0, "cold_start_p90_s": 10.0},
     "cold_start_p90_s: must be 0 when cold_start_s is 0 (no spread without a median), got 10"),
    ({"node_delay_s": -5.0}, "node_delay_s: must be a number >= 0, got -5.0"),
    ({"node_delay_s": float("inf")}, "node_delay_s: must be a number >= 0, got inf"),
    ({"node_delay_share": 1.5},
     "node_delay_share: must be in [0, 1] (the share of new replicas that need a new node), got 1.5"),
    ({"prefix_block_tokens": -1}, "prefix_block_tokens: must be 0 (no prefix cache) or more, got -1"),
], ids=["context-scale", "kv-token-nan", "context-tokens", "p90-below-median", "p90-without-median",
        "node-delay", "node-delay-inf", "node-share", "prefix-block"])
def test_each_new_field_is_validated_with_its_rule(changes: dict[str, float], message: str) -> None:
    assert replace(ReplicaProfile(), **changes).validate() == [message]


def test_a_yaml_override_of_a_new_field_is_validated_with_the_file_name(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("cold_start_s: 90\ncold_start_p90_s: 45\nnode_delay_share: -1\n")
    with pytest.raises(ProfileError) as err:
        load_profile(f)
    assert str(err.value).startswith(f"{f}: cold_start_p90_s: must be at least cold_start_s (90")
    assert "node_delay_share: must be in [0, 1]" in str(err.value)
    f.write_text("decode_per_kv_token_s: 1.0e-7\nnode_delay_s: 120\nnode_delay_share: 0.25\n")
    got = load_profile(f)
    assert (got.decode_per_kv_token_s, got.node_delay_s, got.node_delay_share) == (1e-7, 120.0, 0.25)


# ------------------------------------------------------------------ context-dependent costs


def test_prefill_grows_with_the_context_attended_and_does_not_depend_on_chunking() -> None:
    p = replace(FLAT, prefill_context_scale=20_000.0)
    # 1,000 tokens attend on average to 500 of context: x (1 + 500 / 20,000)
    assert p.prefill_s(1000) == pytest.approx(0.1 * 1.025)
    # after 3,000 cached tokens they attend to 3,500
    assert p.prefill_s(1000, 3000) == pytest.approx(0.1 * 1.175)
    chunks = p.prefill_s(4096) + p.prefill_s(4096, 4096) + p.prefill_s(1808, 8192)
    assert chunks == pytest.approx(p.prefill_s(10_000))
    assert replace(p, prefill_context_scale=0.0).prefill_s(1000, 50_000) == pytest.approx(0.1)


def test_the_decode_step_grows_with_the_batch_and_the_context_it_reads() -> None:
    p = ReplicaProfile(decode_base_s=0.01, decode_per_seq_s=0.001, decode_per_kv_token_s=1e-6,
                       decode_context_tokens=1000, kv_capacity_tokens=50_000)
    assert p.decode_step_s(4, 2000) == pytest.approx(0.01 + 0.004 + 0.002)
    # without a context: every sequence at decode_context_tokens, at most the KV cache
    assert p.decode_step_s(4) == pytest.approx(0.01 + 0.004 + 0.004)
    assert p.decode_step_s(64) == pytest.approx(0.01 + 0.064 + 0.05)


def test_a_chunked_prompt_pays_the_context_of_its_earlier_chunks() -> None:
    p = replace(FLAT, prefill_context_scale=20_000.0, max_batched_tokens=4096)
    run = simulate([Arrival(0.0, 10_000, 2)], Fixed(1), SimOptions(profile=p))
    # three iterations (4,096 + 4,096 + 1,808 tokens): three steps and the whole prompt's prefill
    assert run.requests[0].ttft == pytest.approx(3 * 0.01 + 1.0 * (1 + 5000 / 20_000))


def test_decode_iterations_read_the_batchs_growing_context() -> None:
    p = replace(FLAT, decode_per_kv_token_s=1e-5)
    run = simulate([Arrival(0.0, 1000, 4), Arrival(0.05, 500, 3)], Fixed(1), SimOptions(profile=p))
    a, b = run.requests
    assert a.ttft == pytest.approx(0.11)  # a prefill iteration reads no decoding context
    # a decodes reading 1,001 tokens while b's 500 are prefilled; then both: 1,002 + 501, 1,003 + 502
    assert b.first_token == pytest.approx(0.11 + 0.01 + 0.01001 + 0.05)
    end = 0.11 + 0.07001 + (0.01 + 0.01503) + (0.01 + 0.01505)
    assert a.done == pytest.approx(end) and b.done == pytest.approx(end)


# ------------------------------------------------------------------ the prefix cache


def test_a_prefix_cache_hit_prefills_only_the_missed_tokens() -> None:
    shared = tuple(range(8))
    arrivals = [Arrival(0.0, 1000, 2, (*shared, 8, 9)),
                Arrival(5.0, 1000, 2, (*shared, 100, 101)),   # the first 8 blocks hit
                Arrival(10.0, 1000, 2, (50, *shared, 102)),   # a miss first: nothing hits after it
                Arrival(15.0, 1000, 2, (*shared, 8, 9))]      # all ten hit: all but the last token
    run = simulate(arrivals, Fixed(1), SimOptions(profile=FLAT))
    assert [q.cached for q in run.requests] == [0, 800, 0, 999]
    assert [round(q.ttft, 6) for q in run.requests] == [0.11, 0.03, 0.11, 0.0101]
    # the prompt tokens counter counts what was prefilled, not what the cache served
    last = run.scrapes[-1].t
    scraped = [q for q in run.requests if q.first_token is not None and q.first_token <= last]
    assert len(scraped) == 3
    prefilled = sum(q.prompt_tokens - q.cached for q in scraped)
    assert sum(s.prompt_tokens for s in run.scrapes) == prefilled == 2200
    # with a context term, the missed tokens attend to the cached ones too
    ctx = simulate(arrivals[:2], Fixed(1), SimOptions(profile=replace(FLAT, prefill_context_scale=20_000.0)))
    assert ctx.requests[1].ttft == pytest.approx(0.01 + 0.02 * (1 + 900 / 20_000))


def test_the_prefix_cache_evicts_the_least_recently_used_blocks() -> None:
    p = replace(FLAT, kv_capacity_tokens=1000)  # ten blocks of 100
    arrivals = [Arrival(0.0, 500, 2, (0, 1, 2, 3, 4)), Arrival(5.0, 500, 2, (10, 11, 12, 13, 14)),
                Arrival(10.0, 500, 2, (20, 21, 22, 23, 24)),  # evicts the first request's blocks
                Arrival(15.0, 500, 2, (0, 1, 2, 3, 4)), Arrival(20.0, 500, 2, (20, 21, 22, 23, 24))]
    run = simulate(arrivals, Fixed(1), SimOptions(profile=p))
    assert [q.cached for q in run.requests] == [0, 0, 0, 0, 499]


def test_a_trace_without_hash_ids_runs_as_with_no_prefix_cache() -> None:
    rng = random.Random(5)
    arrivals = sorted(Arrival(round(rng.uniform(0, 60), 3), rng.randint(50, 3000), rng.randint(1, 200))
                      for _ in range(400))
    opts = SimOptions(profile=replace(ReplicaProfile(), cold_start_s=10.0, cold_start_p90_s=30.0),
                      max_replicas=8)
    policy = Schedule([(10.0, 3), (30.0, 1)])
    with_cache = simulate(arrivals, policy, opts)
    without = simulate(arrivals, policy, replace(opts, profile=replace(opts.profile, prefix_block_tokens=0)))
    assert with_cache.requests == without.requests and with_cache.replica_seconds == without.replica_seconds
    assert all(q.cached == 0 for q in with_cache.requests)


def test_only_a_prefix_cache_of_the_same_replica_hits() -> None:
    same = (1, 2, 3)
    arrivals = [Arrival(0.0, 300, 50, same), Arrival(0.0, 300, 50, same), Arrival(5.0, 300, 2, same)]
    run = simulate(arrivals, Fixed(2), SimOptions(profile=FLAT, initial_replicas=2))
    # the first two run side by side on replicas 0 and 1 (nothing cached yet); the third finds it
    assert [q.replica for q in run.requests] == [0, 1, 0]
    assert [q.cached for q in run.requests] == [0, 0, 299]


# ------------------------------------------------------------------ cold start and node delay


def test_a_cold_start_whose_p90_is_its_median_is_the_constant_and_draws_nothing() -> None:
    p = replace(ReplicaProfile(), cold_start_s=45.0, cold_start_p90_s=45.0)
    rng = random.Random(1)
    state = rng.getstate()
    assert [p.startup_s(rng) for _ in range(5)] == [45.0] * 5
    assert rng.getstate() == state
    assert p.min_startup_s == 45.0 and p.cold_start_quantile_s(0.99) == 45.0


def test_cold_start_draws_are_seeded_with_the_median_p90_and_floor_of_the_profile() -> None:
    p = ReplicaProfile()  # median 60, p90 120
    a = [p.startup_s(random.Random(7)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    r1, r2, r3 = random.Random(7), random.Random(7), random.Random(8)
    first, again, other = ([p.startup_s(r) for _ in range(50)] for r in (r1, r2, r3))
    assert first == again and first != other
    rng = random.Random(11)
    draws = sorted(p.startup_s(rng) for _ in range(20_001))
    assert statistics.median(draws) == pytest.approx(60.0, rel=0.03)
    assert draws[int(0.9 * len(draws))] == pytest.approx(120.0, rel=0.05)
    assert draws[0] >= COLD_START_FLOOR * 60.0 == p.min_startup_s
    assert p.cold_start_quantile_s(0.5) == pytest.approx(60.0)
    assert p.cold_start_quantile_s(0.9) == pytest.approx(120.0)


@pytest.mark.parametrize(("share", "low", "high"), [(1.0, 1.0, 1.0), (0.5, 0.45, 0.55), (0.0, 0.0, 0.0)],
                         ids=["every-replica", "half", "none"])
def test_a_node_delay_is_added_to_the_drawn_share_of_new_replicas(share: float, low: float,
                                                                  high: float) -> None:
    p = replace(ReplicaProfile(), cold_start_s=60.0, cold_start_p90_s=60.0, node_delay_s=180.0,
                node_delay_share=share)
    rng = random.Random(3)
    draws = [p.startup_s(rng) for _ in range(4000)]
    assert set(draws) <= {60.0, 240.0}
    assert low <= draws.count(240.0) / len(draws) <= high
    assert p.min_startup_s == (240.0 if share == 1.0 else 60.0)


def test_the_fleet_draws_each_new_replicas_start_up_from_its_seed() -> None:
    p = replace(ReplicaProfile(), node_delay_s=100.0, node_delay_share=0.5)
    fleet = Fleet(p, lambda t, kind, r: None, seed=42)
    fleet.scale_to(6, 10.0)
    rng = random.Random(42)
    assert [r.ready_at for r in fleet.replicas] == [10.0 + p.startup_s(rng) for _ in range(6)]
    assert len({r.ready_at for r in fleet.replicas}) == 6


def test_a_run_is_a_pure_function_of_its_seed() -> None:
    arrivals = [Arrival(i * 0.05, 2000 + 37 * i % 900, 1 + 13 * i % 80) for i in range(2000)]
    opts = SimOptions(profile=replace(ReplicaProfile(), cold_start_s=20.0, cold_start_p90_s=60.0,
                                      prefill_tokens_per_s=8000.0), max_replicas=8)
    policy = Schedule([(5.0, 4), (40.0, 2), (60.0, 6)])

    def report(seed: int) -> str:
        return json.dumps(summarize(simulate(arrivals, policy, replace(opts, seed=seed)), SloTargets()))

    assert report(1) == report(1)
    assert report(1) != report(2)


# ------------------------------------------------------------------ the bound and the oracle


def conversations(seed: int, seconds: float = 180.0) -> list[Arrival]:
    """Poisson arrivals, bursty, each a turn of one of 20 conversations: a turn's prompt is the
    conversation so far (its blocks' hashes a prefix of the conversation's)."""
    rng = random.Random(seed)
    out, t = [], 0.0
    turns = [0] * 20
    while t < seconds:
        t += rng.expovariate(12.0 if (t // 60) % 2 else 3.0)
        c = rng.randrange(20)
        turns[c] += 1
        blocks = min(2 * turns[c], 16)
        out.append(Arrival(round(t, 4), blocks * 100 - rng.randrange(50), rng.choice([5, 40, 120]),
                           tuple(1000 * c + k for k in range(blocks))))
    return out


SPREAD = replace(ReplicaProfile(), max_batch=8, prefill_tokens_per_s=8000.0, prefill_context_scale=4000.0,
                 decode_base_s=0.01, decode_per_seq_s=0.002, decode_per_kv_token_s=2e-6,
                 kv_capacity_tokens=50_000,
                 cold_start_s=20.0, cold_start_p90_s=50.0, node_delay_s=15.0, node_delay_share=0.5,
                 max_batched_tokens=512, prefix_block_tokens=100)


def test_the_bound_assumes_the_least_start_up_and_the_most_a_prefix_can_hit() -> None:
    arrivals = conversations(1)
    cached = reusable(arrivals, SPREAD)
    assert cached[0] == 0 and max(cached) > 0
    for a, c in zip(arrivals, cached, strict=True):
        assert 0 <= c <= a.prompt_tokens - 1
        assert sum(work(a, SPREAD, c)) <= sum(work(a, SPREAD)) + 1e-12
    assert reusable(arrivals, replace(SPREAD, prefix_block_tokens=0)) == [0] * len(arrivals)
    assert SPREAD.min_startup_s == COLD_START_FLOOR * 20.0  # half the replicas need no node


@pytest.mark.parametrize("seed", [1, 2])
def test_no_run_meeting_the_goal_costs_less_than_the_bound_with_spread_cold_starts_and_a_prefix_cache(
        seed: int) -> None:
    slo = SloTargets(ttft_s=1.0, tpot_s=0.08)
    arrivals = conversations(seed)
    opts = SimOptions(profile=SPREAD, initial_replicas=2, max_replicas=32, seed=seed)
    runs: list[Run] = [simulate(arrivals, FixedPolicy(n), replace(opts, initial_replicas=n))
                       for n in range(1, 9)]
    runs += [simulate(arrivals, p, opts) for p in (Schedule([(0, 2), (50, 5), (100, 2), (120, 6)]),
                                                   Schedule([(0, 1), (40, 8), (100, 3), (130, 8)]),
                                                   HpaPolicy(metric="running", target=1.0),
                                                   OraclePolicy(arrivals, SPREAD, utilization=0.5))]
    assert any(q.cached for q in runs[0].requests)
    checked = set()
    for goal in (0.5, 0.9, 0.99):
        got = lower_bound(arrivals, SPREAD, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, goal=goal,
                          initial_replicas=8, max_replicas=32).replica_hours
        for run in runs:
            if (summarize(run, slo)["attainment"] or 0.0) < goal:
                continue
            assert got is not None, f"{run.policy} met {goal} but the bound says it is unreachable"
            assert got <= run.replica_seconds / 3600 + 1e-9, f"{run.policy} beat the bound at {goal}"
            checked.add((run.policy, goal))
    assert {g for _, g in checked} == {0.5, 0.9, 0.99}
    assert {p for p, _ in checked} >= {"schedule", "oracle"}


def test_the_oracle_orders_a_p90_start_up_ahead() -> None:
    assert lead_s(SPREAD) == 50.0 + 15.0
    assert lead_s(replace(SPREAD, node_delay_share=0.0)) == 50.0


# ------------------------------------------------------------------ named profiles


def test_the_default_profile_is_the_shipped_8b_h100_file() -> None:
    assert DEFAULT_PROFILE == "llama-3.1-8b-h100"
    assert load_profile(DEFAULT_PROFILE) == ReplicaProfile() == load_profile(None)
    assert SimOptions().profile == ReplicaProfile()


@pytest.mark.parametrize("name", PROFILES)
def test_each_shipped_profile_sets_every_field_validly_and_cites_its_sources(name: str) -> None:
    text = profile_path(name).read_text(encoding="utf-8")
    assert set(yaml.safe_load(text)) == {f.name for f in fields(ReplicaProfile)}
    profile = load_profile(name)
    assert profile.validate() == []
    assert load_profile(profile_path(name)) == profile  # a file path still works
    assert "Sources" in text and "order of magnitude" in text.lower()


def test_the_shipped_profiles_are_distinct_model_gpu_pairs() -> None:
    h100, a100, big = (load_profile(n)
                       for n in ("llama-3.1-8b-h100", "llama-3.1-8b-a100", "llama-3.1-70b-h100x4"))
    assert a100.max_batched_tokens == 2048 and h100.max_batched_tokens == 8192  # vLLM's defaults
    assert a100.decode_step_s(a100.max_batch) > h100.decode_step_s(h100.max_batch)
    assert big.decode_step_s(1, 2048) > h100.decode_step_s(1, 2048)
    assert big.prefill_tokens_per_s < h100.prefill_tokens_per_s and big.cold_start_s > h100.cold_start_s


def test_an_unknown_profile_name_is_refused_naming_the_shipped_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile("llama-9000")
    assert str(err.value) == ("llama-9000: no such profile or file (shipped profiles: "
                              f"{', '.join(PROFILES)}; or a YAML file of fields)")
    assert main(["simulate", "--profile", "llama-9000", "--out", str(tmp_path / "o")]) == 2
    assert "llama-3.1-70b-h100x4" in capsys.readouterr().err
    with pytest.raises(ProfileError, match="cannot be read"):
        load_profile(tmp_path / "missing.yaml")


def test_the_flow_capacity_decodes_a_full_batch_at_the_profiles_context() -> None:
    p = ReplicaProfile()
    cap = flow_capacity(p)
    assert cap.prefill_tokens_per_s == p.prefill_tokens_per_s
    # 256 sequences of 2,048 tokens would overflow the 430,000-token cache: the cache full
    assert cap.decode_tokens_per_s == pytest.approx(256 / (0.007 + 256 * 0.00004 + 5e-8 * 430_000))
    short = replace(p, decode_context_tokens=500)
    assert flow_capacity(short).decode_tokens_per_s == pytest.approx(
        256 / (0.007 + 256 * 0.00004 + 5e-8 * 128_000))
