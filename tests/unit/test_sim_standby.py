"""The simulator's standby tier (escaler/sim/serving.py, Standby; issue 26): replicas kept loaded and
asleep at a share of the price, woken first on a scale-up; the bound for such policies; the
flow-standby sweep; the command's flags."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from escaler.cli.main import main
from escaler.sim.bound import lower_bound
from escaler.sim.engine import SimOptions, simulate
from escaler.sim.report import summarize
from escaler.sim.runner import STANDBY_SWEEP, Experiment, run_experiment
from escaler.sim.trace import Arrival
from tests.unit.test_sim_bound import PROFILE, SLO, bursty, hours
from tests.unit.test_sim_engine import SERIAL, Schedule


@dataclass
class WithStandby(Schedule):
    standby: int = 0


def test_a_scale_up_wakes_a_standby_replica_which_serves_after_the_wake_not_a_cold_start() -> None:
    # one warm replica and one asleep; a second ordered at t=1 is the sleeper, serving at 1 + 5
    arrivals = [Arrival(20.0, 1000, 10)] * 2
    opts = SimOptions(profile=SERIAL, initial_replicas=1, wake_s=5.0, standby_cost=0.25)
    run = simulate(arrivals, WithStandby([(1.0, 2)], standby=1), opts)
    assert [q.replica for q in run.requests] == [0, 1]  # the woken replica served at 20 s
    cold = simulate(arrivals, Schedule([(1.0, 2)]), replace(opts))
    assert [q.replica for q in cold.requests] == [0, 0]  # a cold start (30 s) did not
    end = run.end
    # the sleeper: asleep 0..1 at a quarter of the price; its replacement cold-starts at 1 (full
    # price for 30 s, until past the end) — the pool is refilled at once
    assert end == pytest.approx(20.2)
    assert run.replica_seconds == pytest.approx(end + (end - 1.0) + 0.25 * 1.0 + (end - 1.0))
    assert run.standby_seconds == pytest.approx(1.0)


def test_a_scale_down_puts_an_idle_replica_to_sleep_in_place_of_one_still_loading() -> None:
    long = [Arrival(0.0, 1000, 500)]  # on replica 0 until 5.1 s
    opts = SimOptions(profile=SERIAL, initial_replicas=2, min_replicas=0, wake_s=10.0, standby_cost=0.5)
    run = simulate(long, WithStandby([(1.0, 3), (3.0, 0)], standby=1), opts)
    assert run.unfinished == 0
    # t=1: the warm sleeper wakes into replica 2 (serving at 11) and a cold one (B) refills the pool,
    # asleep at 31. t=3, down to 0: replica 2 (still waking) and the idle replica 1 would both be
    # asleep before B; they join the pool and it is trimmed back to one, latest asleep first: B, then
    # replica 2's. Replica 0 drains its request until 5.1; replica 1 sleeps from 3 to the end.
    spans = sorted((round(a, 6), round(b, 6), w) for a, b, w in run.lifetimes)
    assert spans == [(0.0, 0.0, 1.0), (0.0, 1.0, 0.5), (0.0, 3.0, 1.0), (0.0, 5.1, 1.0), (1.0, 3.0, 1.0),
                     (1.0, 3.0, 1.0), (3.0, 3.0, 1.0), (3.0, 3.0, 1.0), (3.0, 5.1, 0.5)]
    assert run.replica_seconds == pytest.approx(0.5 + 3.0 + 5.1 + 2.0 + 2.0 + 0.5 * 2.1)
    assert run.standby_seconds == pytest.approx(1.0 + 2.1)


def test_no_standby_is_the_run_without_the_tier() -> None:
    arrivals = bursty(3, seconds=120.0)
    opts = SimOptions(profile=PROFILE, initial_replicas=2)
    plain = simulate(arrivals, Schedule([(30, 4), (90, 2)]), opts)
    zero = simulate(arrivals, WithStandby([(30, 4), (90, 2)], standby=0), opts)
    assert summarize(zero, SLO) == summarize(plain, SLO)
    assert zero.replica_seconds == plain.replica_seconds and zero.standby_seconds == 0.0


def test_no_run_with_a_standby_tier_that_meets_the_goal_costs_less_than_the_standby_bound() -> None:
    arrivals = bursty(1)
    opts = SimOptions(profile=PROFILE, initial_replicas=2, max_replicas=32, wake_s=2.0, standby_cost=0.2)
    plans = [WithStandby([(0, 2), (50, 5), (100, 2), (120, 6)], standby=m) for m in (1, 3, 6)]
    plans += [WithStandby([(0, 1), (40, 8), (100, 3), (130, 8)], standby=m) for m in (2, 8)]
    checked = 0
    for goal in (0.5, 0.9):
        plain = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=goal,
                            initial_replicas=2, max_replicas=32).replica_hours
        got = lower_bound(arrivals, PROFILE, ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, goal=goal,
                          initial_replicas=2, max_replicas=32, startup_s=2.0).replica_hours
        assert got is not None and plain is not None and got <= plain
        for plan in plans:
            run = simulate(arrivals, plan, opts)
            if (summarize(run, SLO)["attainment"] or 0) >= goal:
                assert got <= hours(run) + 1e-9, f"standby {plan.standby} met {goal} at {hours(run)} < {got}"
                checked += 1
    assert checked >= 4  # not vacuous


def test_flow_standby_is_swept_and_reported_against_its_own_bound(tmp_path: Path) -> None:
    arrivals = [Arrival(float(t), 800, 40) for t in range(0, 600, 2)]
    exp = Experiment(arrivals=arrivals, options=SimOptions(profile=PROFILE, max_replicas=16),
                     slo=SLO, policies=("flow", "flow-standby"), goal=0.9)
    rows = run_experiment(exp, tmp_path, plot=False)
    by = {r["policy"]: r for r in rows}
    assert by["flow-standby"]["standby"] in (*STANDBY_SWEEP, 16)
    assert by["flow-standby"]["standby_hours"] > 0 and "standby_hours" not in by["flow"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    sb = summary["references"]["lower_bound_standby"]
    assert sb["wake_s"] == 10.0 and sb["standby_cost"] == 0.2
    assert sb["replica_hours"] <= summary["references"]["lower_bound"]["replica_hours"]
    sweep = json.loads((tmp_path / "flow-standby.json").read_text())["sweep"]
    assert [p["standby"] for p in sweep][: len(STANDBY_SWEEP)] == list(STANDBY_SWEEP)
    assert "lower bound with a standby tier" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "flow-standby-decisions.jsonl").read_text().strip()


@pytest.mark.parametrize(("flag", "value", "rule"), [("--standby-cost", "1.5", "share between 0 and 1"),
                                                     ("--wake-seconds", "-1", ">= 0"),
                                                     ("--standby", "-2", ">= 0")])
def test_bad_standby_flags_are_refused_naming_the_flag(flag: str, value: str, rule: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", flag, value, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and rule in err
