"""The simulator's predictive policy (issue 16): apa unchanged plus a seasonal forecast floor. It is
the reactive policy until a season has been seen, then orders replicas a cold start ahead of a rise
it has seen before; the runner and the CLI offer it opt-in, and a rate curve is scaled at its rate
(so a 14-day curve can be replayed at a small fraction of its traffic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from escaler.cli.main import main
from escaler.sim.engine import Run, SimOptions, View, simulate
from escaler.sim.model import ReplicaProfile
from escaler.sim.policies import ApaPolicy
from escaler.sim.predictive import DAY_S, PredictivePolicy, season_for
from escaler.sim.report import SloTargets, summarize
from escaler.sim.runner import POLICIES, Experiment, build, verdicts
from escaler.sim.trace import Arrival, load_trace

PROFILE = ReplicaProfile(max_batch=16, prefill_tokens_per_s=20_000, decode_base_s=0.01,
                         decode_per_seq_s=0.001, kv_capacity_tokens=200_000, cold_start_s=20.0)
OPTS = SimOptions(profile=PROFILE, max_replicas=16)
SLO = SloTargets(ttft_s=0.5, tpot_s=0.1)
SEASON = 600.0
POLL = 15.0
# a season: 2 req/s, a burst of 12 req/s at 300-450 s, 2 req/s again
BURST = (300.0, 450.0)


def seasons(n: int) -> list[Arrival]:
    out = []
    for k in range(n):
        t = 0.0
        for rate, until in ((2.0, BURST[0]), (12.0, BURST[1]), (2.0, SEASON)):
            while t < until:
                out.append(Arrival(round(k * SEASON + t, 6), 400, 60))
                t += 1.0 / rate
    return out


def apa() -> ApaPolicy:
    return ApaPolicy("inflight", 8.0, OPTS.min_replicas, OPTS.max_replicas, poll_s=POLL)


def predictive() -> PredictivePolicy:
    return PredictivePolicy(apa(), SEASON, 20, horizon_s=PROFILE.cold_start_s + POLL)


def replicas_at(run: Run, t: float) -> int:
    return [s.replicas for s in run.scrapes if s.t <= t][-1]


def attainment_in(run: Run, start: float, end: float) -> float:
    got = [q for q in run.requests if start <= q.arrival < end]
    ok = [q for q in got if q.ttft <= SLO.ttft_s and (q.output_tokens <= 1 or q.tpot <= SLO.tpot_s)]
    return len(ok) / len(got)


def test_in_the_first_season_it_is_the_reactive_policy() -> None:
    arrivals = seasons(1)
    reactive, pred = simulate(arrivals, apa(), OPTS), simulate(arrivals, predictive(), OPTS)
    horizon = PROFILE.cold_start_s + POLL
    # until the horizon reaches the places seen (the next season's start) nothing is forecast
    assert [e for e in pred.scale_events if e[0] < SEASON - horizon] == \
        [e for e in reactive.scale_events if e[0] < SEASON - horizon]
    assert reactive.scale_events  # the burst made apa scale: the comparison is not of two idle runs


def test_from_the_second_season_it_scales_up_a_cold_start_ahead_of_the_burst() -> None:
    arrivals = seasons(3)
    reactive = simulate(arrivals, apa(), OPTS)
    policy = predictive()
    pred = simulate(arrivals, policy, OPTS)
    for k in (1, 2):
        start = k * SEASON + BURST[0]
        # replicas ordered a cold start before the burst: more than the reactive policy has then
        assert replicas_at(pred, start - 1) > replicas_at(reactive, start - 1), k
        assert attainment_in(pred, start, k * SEASON + BURST[1]) > attainment_in(reactive, start,
                                                                                 k * SEASON + BURST[1]), k
    assert policy.floors > 0
    assert summarize(pred, SLO)["attainment"] > summarize(reactive, SLO)["attainment"]


class RecordingApa(ApaPolicy):
    """apa, remembering what it decided at each tick."""

    said: list[int]

    def decide(self, view: View) -> int:
        got = super().decide(view)
        self.said.append(got)
        return got


class RecordingPredictive(PredictivePolicy):
    said: list[int]

    def decide(self, view: View) -> int:
        got = super().decide(view)
        self.said.append(got)
        return got


def test_the_floor_only_ever_raises_the_reactive_count() -> None:
    reactive = RecordingApa("inflight", 8.0, OPTS.min_replicas, OPTS.max_replicas, poll_s=POLL)
    reactive.said = []
    policy = RecordingPredictive(reactive, SEASON, 20, horizon_s=PROFILE.cold_start_s + POLL)
    policy.said = []
    simulate(seasons(2), policy, OPTS)
    pairs = list(zip(reactive.said, policy.said, strict=True))
    assert all(p >= r for r, p in pairs)
    raised = sum(1 for r, p in pairs if p > r)
    assert raised == policy.floors > 0


def test_the_runner_builds_it_opt_in_with_a_cold_start_horizon() -> None:
    assert "predictive" not in POLICIES
    exp = Experiment(seasons(1), OPTS, SLO, metric="inflight", target=8.0, poll_s=POLL, season_s=SEASON,
                     predict_slots=20)
    p = build("predictive", exp)
    assert isinstance(p, PredictivePolicy)
    assert (p.horizon_s, p.season_s, p.slots, p.period_s) == (35.0, SEASON, 20, POLL)
    assert season_for(24) == 3600.0 and season_for(1) == DAY_S
    with pytest.raises(ValueError, match="predictive speedup: must be a finite number > 0"):
        season_for(0)


def test_the_verdict_applies_the_issue_rule() -> None:
    apa_row = {"policy": "apa", "attainment": 0.95, "replica_hours": 2.0}
    said = verdicts([apa_row, {"policy": "predictive", "attainment": 0.97, "replica_hours": 2.0}])
    assert said == ["predictive wins over apa (higher attainment at equal or lower cost): 97.00 % vs "
                    "95.00 % attainment at 2.0 vs 2.0 replica-hours"]
    said = verdicts([apa_row, {"policy": "predictive", "attainment": 0.97, "replica_hours": 2.1}])
    assert said[0].startswith("predictive does NOT win over apa")


def test_cli_runs_it_and_refuses_a_bad_slot_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{a.t},{a.prompt_tokens},{a.output_tokens}\n" for a in seasons(1)[::4]))
    assert main(["simulate", "--trace", str(trace), "--policy", "predictive", "--predict-slots", "0",
                 "--out", str(tmp_path / "bad")]) == 2
    assert "--predict-slots must be in [1, 2016], got 0" in capsys.readouterr().err
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(trace), "--policy", "apa,predictive", "--speedup", "144",
                 "--no-plots", "--no-progress", "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "`season_s=600.0`" in summary and "predictive" in summary
    assert "forecast_floor_polls" in (out / "predictive.json").read_text()


def test_a_rate_curve_is_scaled_at_its_rate_and_drawn_only_to_the_duration(tmp_path: Path) -> None:
    curve = tmp_path / "r.csv"
    # 60,000 req/min for a day: 86 M arrivals unscaled; scaled by 1e-4 and cut at an hour, ~360
    curve.write_text("model,window_start_s,total_rate_rps,req_per_min,active_clients\n"
                     + "".join(f"m,{600 * i},1000,60000,1\n" for i in range(144)))
    lengths = tmp_path / "l.csv"
    lengths.write_text("arrival_s,prompt_tokens,output_tokens\n0,7,8\n")
    got = load_trace(curve, lengths=lengths, scale=1e-4, duration=3600.0, seed=1)
    assert 300 < len(got) < 420 and got[-1].t <= 3600.0
    assert got == load_trace(curve, lengths=lengths, scale=1e-4, duration=3600.0, seed=1)
    fast = load_trace(curve, lengths=lengths, scale=1e-4, speedup=24, duration=150.0, seed=1)
    assert 300 < len(fast) < 420 and fast[-1].t <= 150.0
