"""The data-path wake of the simulator's standby tier (escaler/sim/serving.py, data-path wake;
issue 26): the router wakes a sleeper between polls when an arriving request would queue; the woken
replica serves ``wake_s`` later at full price, the pool refills by a cold start, and the next poll
counts it; the flow-standby-wake policy and its flag."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from escaler.cli.main import main
from escaler.sim import engine
from escaler.sim.engine import Run, SimOptions, simulate
from escaler.sim.model import ReplicaProfile
from escaler.sim.policies import FlowPolicy
from escaler.sim.report import summarize
from escaler.sim.runner import STANDBY_SWEEP, Experiment, build, default_wake_delay, run_experiment
from escaler.sim.trace import Arrival
from tests.unit.test_sim_bound import PROFILE, SLO, bursty
from tests.unit.test_sim_engine import SERIAL, Schedule
from tests.unit.test_sim_speed_equivalence import _case


@dataclass
class Waking(Schedule):
    """A schedule over a fleet with ``standby`` sleepers; ``wake_delay_s`` set: the data-path wake."""

    standby: int = 0
    wake_delay_s: float | None = None


WAKE_S, COST = 2.0, 0.25


def burst() -> list[Arrival]:
    """Quiet, then from t=5 a request of 1,000 prompt tokens every 0.05 s for 10 s: 20 a second, four
    times what the one serial replica (0.1 s of prefill + 9 decode steps of 0.01 s each) serves."""
    return [Arrival(1.0, 1000, 10)] + [Arrival(5.0 + 0.05 * i, 1000, 10) for i in range(200)]


def options(**kw: object) -> SimOptions:
    return SimOptions(profile=SERIAL, initial_replicas=1, max_replicas=8, wake_s=WAKE_S, standby_cost=COST,
                      **kw)  # type: ignore[arg-type]


def test_a_burst_between_polls_wakes_a_sleeper_that_serves_after_the_wake_the_poll_tier_does_not() -> None:
    # one warm serial replica, one asleep; the policy polls every 30 s and never orders more
    data_path = simulate(burst(), Waking([], period_s=30.0, standby=1, wake_delay_s=0.5), options())
    poll_only = simulate(burst(), Waking([], period_s=30.0, standby=1), options())
    # the backlog passes 0.5 s of prefill (5,000 tokens) at the burst's 7th request (5.30 s: seven
    # prompts routed, the first one prefilled at 5.11)
    assert data_path.wakes == 1 and len(data_path.scale_events) == 1
    t, before, after = data_path.scale_events[0]
    assert t == pytest.approx(5.3) and (before, after) == (1, 2)
    woken = [q for q in data_path.requests if q.replica == 1]
    assert woken, "the woken replica served nothing"
    # it serves wake_s after the wake, not a cold start (30 s) after it; JSQ sends it the next arrival
    first = min(q.first_token for q in woken if q.first_token is not None)
    assert t + WAKE_S <= first <= t + WAKE_S + 0.05 + 0.1 + 1e-9
    # the poll-only tier: every request of the burst queues on replica 0, nothing woke before the poll
    assert poll_only.wakes == 0 and poll_only.scale_events == []
    assert {q.replica for q in poll_only.requests} == {0}
    assert summarize(data_path, SLO)["attainment"] > summarize(poll_only, SLO)["attainment"]
    assert data_path.end < poll_only.end


def test_no_wake_while_the_queues_stay_empty() -> None:
    # a request every second, 0.1 s of prefill each: the backlog never reaches 0.5 s
    quiet = [Arrival(float(i), 1000, 10) for i in range(60)]
    data_path = simulate(quiet, Waking([], period_s=30.0, standby=2, wake_delay_s=0.5), options())
    poll_only = simulate(quiet, Waking([], period_s=30.0, standby=2), options())
    assert data_path.wakes == 0 and data_path.scale_events == []
    assert data_path == poll_only


def test_a_woken_replica_costs_full_price_from_the_wake_its_sleep_the_standby_price() -> None:
    run = simulate(burst(), Waking([], period_s=30.0, standby=1, wake_delay_s=0.5), options())
    t, end = run.scale_events[0][0], run.end
    assert t + 30.0 > end  # the refill is still loading at the end (SERIAL's cold start: 30 s)
    spans = sorted((round(a, 6), round(b, 6), w) for a, b, w in run.lifetimes)
    assert spans == sorted([
        (0.0, round(end, 6), 1.0),  # the warm replica
        (0.0, 0.0, 1.0),  # the warm sleeper: no load paid
        (0.0, round(t, 6), COST),  # asleep until the wake, at the standby price
        (round(t, 6), round(end, 6), 1.0),  # woken: full price from the wake
        (round(t, 6), round(end, 6), 1.0),  # the pool's refill, cold-starting at full price
    ])
    assert run.replica_seconds == pytest.approx(end + COST * t + 2 * (end - t))
    assert run.standby_seconds == pytest.approx(t)


def test_the_next_poll_counts_the_woken_replica_no_second_order() -> None:
    # the policy asks for 2 replicas at its poll at 30 s: the woken one is already the second
    plan = [(30.0, 2)]
    data_path = simulate(burst(), Waking(plan, period_s=30.0, standby=1, wake_delay_s=0.5), options())
    poll_only = simulate(burst(), Waking(plan, period_s=30.0, standby=1), options())
    assert [(a, b) for _, a, b in data_path.scale_events] == [(1, 2)]
    assert data_path.scale_events[0][0] < 30.0
    assert [e for e in poll_only.scale_events] == [(30.0, 1, 2)]
    assert max(s.replicas for s in data_path.scrapes) == 2


def test_a_poll_below_the_fleet_returns_an_idle_woken_replica_to_the_pool() -> None:
    # down to 1 at the poll at 30 s, after the burst's queues drained (26.2 s): the woken replica, idle,
    # sleeps again in place of the refill still loading (asleep at t + 30), which is trimmed
    arrivals = [*burst(), Arrival(40.0, 1000, 10)]
    run = simulate(arrivals, Waking([(30.0, 1)], period_s=30.0, standby=1, wake_delay_s=0.5), options())
    assert [(a, b) for _, a, b in run.scale_events] == [(1, 2), (2, 1)]
    t = run.scale_events[0][0]
    assert run.scale_events[1][0] == 30.0 and run.unfinished == 0
    spans = sorted((round(a, 6), round(b, 6), w) for a, b, w in run.lifetimes)
    # woken at t, full price until the poll, then asleep at the standby price to the end; the refill
    # paid its load from t until it was trimmed at the poll
    assert (round(t, 6), 30.0, 1.0) in spans and (30.0, round(run.end, 6), COST) in spans
    assert spans.count((round(t, 6), 30.0, 1.0)) == 2
    assert run.standby_seconds == pytest.approx(t + run.end - 30.0)
    assert {q.replica for q in run.requests if q.arrival == 40.0} == {0}


def test_a_wake_in_flight_counts_and_no_sleeper_still_loading_is_woken() -> None:
    # three asleep: the burst's backlog grows past the budget again with each wake counted, so
    # more than one wake, each at a later arrival, never more than the pool held asleep
    run = simulate(burst(), Waking([], period_s=30.0, standby=3, wake_delay_s=0.5), options())
    times = [t for t, _, _ in run.scale_events]
    assert 1 < run.wakes <= 3 and times == sorted(times) and len(set(times)) == len(times)
    assert [b - a for _, a, b in run.scale_events] == [1] * run.wakes
    # and never past max_replicas
    capped = simulate(burst(), Waking([], period_s=30.0, standby=3, wake_delay_s=0.5),
                      replace(options(), max_replicas=2))
    assert capped.wakes == 1


def test_a_run_with_wakes_is_the_same_for_the_same_seed() -> None:
    arrivals = bursty(2)
    opts = SimOptions(profile=PROFILE, initial_replicas=1, max_replicas=16, wake_s=3.0, seed=7)
    runs = [simulate(arrivals, Waking([(60, 2)], period_s=30.0, standby=2, wake_delay_s=0.2), opts)
            for _ in range(2)]
    assert runs[0].wakes > 0
    assert runs[0] == runs[1]


# the cases of the coalescing equivalence test (escaler.sim.serving: coalesced decode runs) in which
# the router wakes sleepers
def test_a_run_with_wakes_crosses_processes_unchanged() -> None:
    # a report's runs come back from worker processes pickled (escaler.sim.parallel)
    run = simulate(burst(), Waking([], period_s=30.0, standby=3, wake_delay_s=0.5), options())
    assert run.wakes > 1
    assert pickle.loads(pickle.dumps(run)) == run


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 7])
def test_coalesced_runs_with_wakes_give_the_step_by_step_run(seed: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    arrivals, schedule, opts = _case(seed)
    policy = Waking(schedule.steps, period_s=schedule.period_s, standby=2, wake_delay_s=0.05)
    opts = replace(opts, wake_s=1.5)

    def run(coalesce: bool) -> Run:
        with monkeypatch.context() as m:
            m.setattr(engine, "COALESCE", coalesce)
            return simulate(arrivals, policy, opts)

    step_by_step = run(False)
    assert step_by_step.wakes > 0
    assert run(True) == step_by_step


def test_the_default_trigger_is_half_the_ttft_objective_or_one_iterations_prefill_budget() -> None:
    assert default_wake_delay(ReplicaProfile(), 2.0) == pytest.approx(8192 / 25_000)
    assert default_wake_delay(ReplicaProfile(), 0.5) == pytest.approx(0.25)
    assert default_wake_delay(replace(ReplicaProfile(), max_batched_tokens=0), 2.0) == pytest.approx(1.0)
    exp = Experiment(arrivals=[Arrival(0.0, 10, 2)], options=SimOptions(profile=PROFILE), slo=SLO)
    policy, standby = build("flow-standby-wake", exp), build("flow-standby", exp)
    given = build("flow-standby-wake", replace(exp, wake_delay_s=0.3))
    assert isinstance(policy, FlowPolicy) and isinstance(standby, FlowPolicy)
    assert isinstance(given, FlowPolicy)
    # half of SLO's 1 s TTFT, shorter than PROFILE's budget (8,192 tokens at 8,000 a second)
    assert policy.wake_delay_s == pytest.approx(0.5 * SLO.ttft_s)
    assert standby.wake_delay_s is None and given.wake_delay_s == 0.3


def test_flow_standby_wake_is_swept_counts_its_wakes_and_is_against_the_standby_bound(tmp_path: Path) -> None:
    # quiet, then a burst between polls: flow's decisions over a fleet whose router wakes sleepers
    arrivals = ([Arrival(float(t), 800, 40) for t in range(0, 300, 3)]
                + [Arrival(300 + 0.02 * i, 2000, 40) for i in range(400)]
                + [Arrival(float(t), 800, 40) for t in range(310, 600, 3)])
    exp = Experiment(arrivals=arrivals, options=SimOptions(profile=PROFILE, max_replicas=16, wake_s=2.0),
                     slo=SLO, policies=("flow-standby", "flow-standby-wake"), goal=0.9)
    rows = run_experiment(exp, tmp_path, plot=False)
    by = {r["policy"]: r for r in rows}
    wake = by["flow-standby-wake"]
    assert wake["standby"] in (*STANDBY_SWEEP, 16) and wake["wakes"] > 0 and "wakes" not in by["flow-standby"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    sb = summary["references"]["lower_bound_standby"]
    assert wake["x_bound"] == round(wake["replica_hours"] / sb["replica_hours"], 3)
    assert summary["settings"]["wake_delay_s"] == 0.5 * SLO.ttft_s and summary["settings"]["wake_s"] == 2.0
    sweep = json.loads((tmp_path / "flow-standby-wake.json").read_text())["sweep"]
    assert [p["standby"] for p in sweep][: len(STANDBY_SWEEP)] == list(STANDBY_SWEEP)
    assert (tmp_path / "flow-standby-wake-decisions.jsonl").read_text().strip()


def test_a_negative_wake_delay_is_refused_naming_the_flag(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--wake-delay", "-0.5", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--wake-delay" in err and ">= 0" in err
