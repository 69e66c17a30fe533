"""The simulator's reference rows: the LP lower bound (escaler/sim/bound.py) and the cheapest fixed
fleet (escaler/sim/fixed.py). The bound's one promise is that no run meeting the goal costs less,
so it is checked against every run these tests can make: fixed fleets, fleets that scale up and
down (paying cold starts), and the shipped policies."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from escaler.sim.bound import DEFAULT_BUCKET_S, MAX_BUCKETS, default_bucket_s, lower_bound
from escaler.sim.engine import MissBudget, Run, SimOptions, simulate
from escaler.sim.fixed import FixedPolicy, cheapest_fixed, steady_state_fleet
from escaler.sim.hpa import HpaPolicy
from escaler.sim.model import ReplicaProfile
from escaler.sim.report import SloTargets, meets, summarize
from escaler.sim.trace import Arrival
from tests.unit.test_sim_engine import Schedule

PROFILE = ReplicaProfile(max_batch=8, prefill_tokens_per_s=8_000, decode_base_s=0.01, decode_per_seq_s=0.002,
                         kv_capacity_tokens=50_000, cold_start_s=20.0)
SLO = SloTargets(ttft_s=1.0, tpot_s=0.05)


def bursty(seed: int, seconds: float = 180.0) -> list[Arrival]:
    """Poisson arrivals whose rate jumps between a base and a burst, mixed prompt and output sizes."""
    rng = random.Random(seed)
    out, t = [], 0.0
    while t < seconds:
        rate = 12.0 if (t // 60) % 2 else 3.0
        t += rng.expovariate(rate)
        out.append(Arrival(round(t, 4), rng.choice([100, 400, 2000]), rng.choice([5, 40, 120])))
    return out


def hours(run: Run) -> float:
    return run.replica_seconds / 3600.0


def attainment(run: Run) -> float:
    return float(summarize(run, SLO)["attainment"] or 0.0)


def bound_for(arrivals: list[Arrival], goal: float, initial: int, *, max_replicas: int = 32,
              profile: ReplicaProfile = PROFILE, bucket_s: float = 10.0) -> float | None:
    return lower_bound(arrivals, profile, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=goal,
                       initial_replicas=initial, max_replicas=max_replicas, bucket_s=bucket_s).replica_hours


def runs_of(arrivals: list[Arrival], initial: int) -> list[Run]:
    opts = SimOptions(profile=PROFILE, initial_replicas=initial, max_replicas=32)
    plans = [FixedPolicy(n) for n in range(1, 9)]
    plans += [Schedule([(0, 2), (50, 5), (100, 2), (120, 6)]),
              Schedule([(0, 1), (40, 8), (100, 3), (130, 8)])]
    runs = [simulate(arrivals, p, replace(opts, initial_replicas=p.n) if isinstance(p, FixedPolicy) else opts)
            for p in plans]
    runs.append(simulate(arrivals, HpaPolicy(metric="running", target=1.0), opts))
    return runs


@pytest.mark.parametrize("seed", [1, 2])
def test_no_run_that_meets_the_goal_costs_less_than_the_bound(seed: int) -> None:
    arrivals = bursty(seed)
    runs = runs_of(arrivals, initial=2)
    checked = set()
    # a coarse bucket (a long trace's default) is a bound as well, not only a fine one
    for bucket_s in (2.0, 10.0, 60.0):
        for goal in (0.5, 0.9, 0.99):
            # every run starts with at most 8 warm replicas: the bound for 8 is below each one's
            got = bound_for(arrivals, goal, initial=8, bucket_s=bucket_s)
            for run in runs:
                if attainment(run) < goal:
                    continue
                assert got is not None, f"{run.policy} met {goal} but the bound says it is unreachable"
                assert got <= hours(run) + 1e-9, f"{run.policy} met {goal} at {hours(run):.4f} rh < {got:.4f}"
                checked.add((run.policy, goal))
    # the check is not vacuous: scaling runs and fixed ones were compared at every goal
    assert {g for _, g in checked} == {0.5, 0.9, 0.99}
    assert {p for p, _ in checked} >= {"schedule", "hpa", "fixed-8"}


def test_the_default_resolution_is_ten_seconds_until_a_trace_needs_more_than_the_most_buckets() -> None:
    assert default_bucket_s(3600.0) == DEFAULT_BUCKET_S
    assert default_bucket_s(DEFAULT_BUCKET_S * MAX_BUCKETS) == DEFAULT_BUCKET_S
    day = default_bucket_s(86_400.0)
    assert day == 60.0 and 86_400.0 / day <= MAX_BUCKETS
    assert default_bucket_s(7 * 86_400.0) == 420.0
    b = lower_bound([Arrival(0.0, 100, 5), Arrival(86_000.0, 100, 5)], PROFILE, ttft_s=SLO.ttft_s,
                    tpot_s=SLO.tpot_s, goal=1.0, initial_replicas=1, max_replicas=4)
    assert b.bucket_s == 60.0


def test_the_bound_is_close_to_the_work_on_a_steady_load() -> None:
    # 10 requests/s, each 0.05 s prefill + 10 x 0.026 / 8 s decode = 0.0825 s of full-batch work: 0.825
    # replicas of work for 600 s (a deadline lets work of the last bucket spill past the trace's end)
    arrivals = [Arrival(i * 0.1, 400, 10) for i in range(6000)]
    got = bound_for(arrivals, 1.0, initial=1)
    assert got is not None
    work_hours = 6000 * (400 / 8000 + 10 * PROFILE.decode_step_s(8) / 8) / 3600
    assert work_hours * 0.98 <= got <= work_hours * 1.02


def test_a_request_no_replica_serves_in_time_makes_a_perfect_goal_unreachable_and_spends_the_budget() -> None:
    # 16,000 prompt tokens take 2 s of prefill on any replica: above the 1 s TTFT whatever the fleet
    arrivals = [Arrival(float(i), 100, 5) for i in range(100)] + [Arrival(50.5, 16_000, 5)]
    b = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=1.0, initial_replicas=1,
                    max_replicas=32)
    assert not b.reachable and b.replica_hours is None and b.may_fail == 0
    # at 99 % one of the 101 requests may fail: that one
    b99 = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=0.99, initial_replicas=1,
                      max_replicas=32)
    assert b99.reachable and b99.may_fail == 1 and b99.replica_hours is not None


def test_a_burst_inside_the_first_cold_start_can_be_met_only_by_warm_replicas() -> None:
    # 40 requests of 0.5 s prefill each at t=5 s, due 1 s later: 20 replica-seconds of work in 1 s
    burst = [Arrival(5.0 + i * 0.001, 4_000, 2) for i in range(40)]
    assert bound_for(burst, 1.0, initial=1, max_replicas=64) is None  # a new replica serves at 20 s
    assert bound_for(burst, 1.0, initial=30, max_replicas=64) is not None
    # and with no cold start at all, new replicas can carry it
    instant = replace(PROFILE, cold_start_s=0.0)
    assert bound_for(burst, 1.0, initial=1, max_replicas=64, profile=instant) is not None


def test_more_ambition_never_costs_less_and_a_cap_can_make_it_unreachable() -> None:
    arrivals = bursty(7)
    values = [bound_for(arrivals, g, initial=2) for g in (0.5, 0.9, 0.99, 1.0)]
    assert all(v is not None for v in values)
    assert values == sorted(values)  # type: ignore[type-var]
    assert bound_for(arrivals, 0.99, initial=1, max_replicas=1) is None


def test_bad_arguments_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="no requests"):
        bound_for([], 0.9, initial=1)
    with pytest.raises(ValueError, match=r"goal must be in \(0, 1\]"):
        bound_for([Arrival(0.0, 10, 2)], 1.5, initial=1)
    with pytest.raises(ValueError, match="bucket_s must be > 0"):
        bound_for([Arrival(0.0, 10, 2)], 0.9, initial=1, bucket_s=0)


def test_the_bound_is_at_least_the_fleet_a_policy_may_never_go_below() -> None:
    # two small bursts an hour apart: the program alone says a fraction of a replica; a policy with
    # min_replicas 1 pays one replica all along
    arrivals = [Arrival(float(i) * 0.1, 200, 5) for i in range(20)] + [Arrival(3600.0 + i * 0.1, 200, 5)
                                                                        for i in range(20)]
    free = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=0.99, initial_replicas=1,
                       max_replicas=8)
    kept = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=0.99, initial_replicas=1,
                       max_replicas=8, min_replicas=1)
    assert free.replica_hours is not None and free.replica_hours < 0.5
    assert kept.replica_hours == pytest.approx(arrivals[-1].t / 3600.0)
    # and still below a run that keeps one replica
    run = simulate(arrivals, FixedPolicy(1), SimOptions(profile=PROFILE, max_replicas=8))
    assert kept.replica_hours <= hours(run)


def test_cheapest_fixed_is_the_smallest_fleet_that_meets_the_goal() -> None:
    arrivals = bursty(4, seconds=180)
    opts = SimOptions(profile=PROFILE, max_replicas=32)
    found = cheapest_fixed(arrivals, opts, SLO, 0.99)
    assert found.n is not None and found.n > 1
    assert found.tried[found.n] >= 0.99 and found.tried[found.n - 1] < 0.99
    assert attainment(found.run) == found.tried[found.n]
    # the run is the fixed fleet's: n warm replicas, never scaled
    assert found.run.scale_events == [] and found.run.policy == f"fixed-{found.n}"
    # and the bound is below it
    got = bound_for(arrivals, 0.99, initial=found.n)
    assert got is not None and got <= hours(found.run)


def test_a_sweep_stops_an_overloaded_candidate_once_its_misses_prove_it_short() -> None:
    # a long overload: fleets of 1 and 2 queue for the whole trace; each stops early, the answer
    # and its run are those of full runs
    rng = random.Random(9)
    arrivals = sorted((Arrival(round(rng.uniform(0, 900), 4), rng.choice([400, 2000]), rng.choice([5, 40]))
                       for _ in range(9_000)), key=lambda a: a.t)
    opts = SimOptions(profile=PROFILE, max_replicas=32)
    found = cheapest_fixed(arrivals, opts, SLO, 0.99)
    assert found.n is not None and {1, 2} <= found.stopped and found.n not in found.stopped
    total = len(arrivals)
    for n in sorted(found.stopped):
        full = attainment(simulate(arrivals, FixedPolicy(n), replace(opts, initial_replicas=n)))
        # the recorded value is the most the run could have reached: above the full run's, below the goal
        assert full <= found.tried[n] < 0.99
    assert attainment(found.run) == found.tried[found.n] >= 0.99
    assert found.tried[found.n - 1] < 0.99
    # a stopped run says how many had missed, more than the goal allows
    budget = MissBudget.for_goal(lambda q: not meets(q, SLO), total, 0.99)
    stopped = simulate(arrivals, FixedPolicy(1), replace(opts, initial_replicas=1), budget=budget)
    assert stopped.stopped and stopped.misses_at_stop > budget.misses == total - math.ceil(0.99 * total)
    assert stopped.unfinished > 0 and stopped.end < arrivals[-1].t


def test_a_miss_budget_is_exact_at_the_goal() -> None:
    never = MissBudget.for_goal(lambda q: True, 100, 0.99)
    assert never.misses == 1
    assert MissBudget.for_goal(lambda q: True, 101, 0.99).misses == 1   # 99.99 needed: 100 must meet
    assert MissBudget.for_goal(lambda q: True, 100, 1.0).misses == 0


def test_cheapest_fixed_says_none_when_even_the_largest_fleet_misses() -> None:
    arrivals = [Arrival(float(i), 100, 5) for i in range(30)] + [Arrival(10.5, 16_000, 5)]
    found = cheapest_fixed(arrivals, SimOptions(profile=PROFILE, max_replicas=4), SLO, 1.0)
    assert found.n is None and max(found.tried) == 4 and found.tried[4] < 1.0


def test_the_initial_fleet_is_sized_to_the_first_minutes() -> None:
    light = [Arrival(i * 1.0, 400, 10) for i in range(300)]
    heavy = [Arrival(i * 0.05, 400, 40) for i in range(6_000)]
    opts = SimOptions(profile=PROFILE, max_replicas=32)
    small = steady_state_fleet(light, opts, SLO, 0.99)
    big = steady_state_fleet([*heavy, Arrival(400.0, 400, 10)], opts, SLO, 0.99)
    assert small == 1 and big > 3
    # only the window counts: a heavy tail after it does not size the start
    assert steady_state_fleet(light + [Arrival(300.0 + i * 0.05, 400, 40) for i in range(2000)], opts, SLO,
                              0.99) == small
    with pytest.raises(ValueError, match="window_s must be > 0"):
        steady_state_fleet(light, opts, SLO, 0.99, window_s=0)
