"""The simulator's policies: the baselines follow their published rules, escaler's run its code,
and the calibrated oracle meets its goal above the lower bound."""

from __future__ import annotations

import pytest

from escaler.scaling.flow import FlowConfig
from escaler.sim.engine import Scrape, SimOptions, View
from escaler.sim.hpa import HpaPolicy
from escaler.sim.kpa import KpaPolicy
from escaler.sim.model import ReplicaProfile
from escaler.sim.oracle import OraclePolicy, bucket_replicas
from escaler.sim.policies import ApaPolicy, FlowPolicy, SloPolicy, flow_capacity
from escaler.sim.report import SloTargets, summarize
from escaler.sim.runner import Experiment, build, calibrate_oracle
from escaler.sim.serving import Gauge
from escaler.sim.trace import Arrival


def scrapes(t_end: float, per_replica: list[int], every: float = 1.0,
            ttfts: tuple[float, ...] = ()) -> list[Scrape]:
    out = []
    t = every
    while t <= t_end + 1e-9:
        gauges = tuple(Gauge(i, v, 0, 0.0) for i, v in enumerate(per_replica))
        out.append(Scrape(t, len(per_replica), len(per_replica), gauges, 0, 0, ttfts))
        t += every
    return out


def token_scrapes(t_end: float, prompt_per_s: int, generation_per_s: int, serving: int,
                  ttfts: tuple[float, ...] = (), tpots: tuple[float, ...] = ()) -> list[Scrape]:
    gauges = tuple(Gauge(i, 1, 0, 0.0) for i in range(serving))
    return [Scrape(float(t), serving, serving, gauges, 0, 1, ttfts, prompt_per_s, generation_per_s, tpots)
            for t in range(1, int(t_end) + 1)]


# ------------------------------------------------------------------ HPA


def test_hpa_scales_by_the_ratio_outside_the_tolerance() -> None:
    hpa = HpaPolicy("inflight", target=10)
    # 2 replicas at 15 each: ratio 1.5 -> ceil(1.5 x 2) = 3
    assert hpa.decide(View(15.0, 2, 2, scrapes(15, [15, 15]))) == 3
    # within the 10 % tolerance: keep
    assert HpaPolicy("inflight", target=10).decide(View(15.0, 2, 2, scrapes(15, [10, 11]))) == 2


def test_hpa_caps_a_scale_up_at_max_4_pods_or_100_percent() -> None:
    hpa = HpaPolicy("inflight", target=1)
    assert hpa.decide(View(15.0, 2, 2, scrapes(15, [50, 50]))) == 6  # max(2 + 4, 2 x 2)
    hpa = HpaPolicy("inflight", target=1)
    assert hpa.decide(View(15.0, 10, 10, scrapes(15, [50] * 10))) == 20


def test_hpa_holds_a_scale_down_for_the_300_s_window() -> None:
    hpa = HpaPolicy("inflight", target=10)
    assert hpa.decide(View(15.0, 4, 4, scrapes(15, [10] * 4))) == 4
    low = scrapes(315, [2] * 4)
    for t in range(30, 315, 15):
        assert hpa.decide(View(float(t), 4, 4, [s for s in low if s.t <= t])) == 4
    assert hpa.decide(View(330.0, 4, 4, scrapes(330, [2] * 4))) == 1


def test_hpa_counts_pods_not_serving_yet_as_zero_on_a_scale_up() -> None:
    hpa = HpaPolicy("inflight", target=10)
    # 4 replicas, 2 serving at 30 each: ratio 3 over the 2; with the 2 missing at 0: 60/40 = 1.5 -> 6
    assert hpa.decide(View(15.0, 4, 2, scrapes(15, [30, 30]))) == 6


# ------------------------------------------------------------------ KPA


def test_kpa_stable_mode_uses_the_60_s_average() -> None:
    kpa = KpaPolicy(target=10)
    assert kpa.decide(View(60.0, 2, 2, scrapes(60, [15, 15]))) == 3


def test_kpa_panics_on_a_burst_and_does_not_scale_down_in_panic() -> None:
    kpa = KpaPolicy(target=10)
    quiet = scrapes(54, [10, 10])
    burst = [Scrape(s.t, 2, 2, s.gauges, 0, 0, ()) for s in quiet] + \
        [Scrape(54.0 + i, 2, 2, (Gauge(0, 40, 0, 0.0), Gauge(1, 40, 0, 0.0)), 0, 0, ()) for i in range(1, 7)]
    # the panic window (6 s) sees 80 -> 8 replicas, 4x the 2 ready: panic
    assert kpa.decide(View(60.0, 2, 2, burst)) == 8
    # in panic a lower panic count does not scale down
    calm = burst + [Scrape(60.0 + i, 8, 8, tuple(Gauge(k, 1, 0, 0.0) for k in range(8)), 0, 0, ())
                    for i in range(1, 7)]
    assert kpa.decide(View(66.0, 8, 8, calm)) == 8


# ------------------------------------------------------------------ escaler's policies


def test_apa_follows_a_step_through_the_panic_window() -> None:
    apa = ApaPolicy("inflight", target=10, min_replicas=1, max_replicas=20, poll_s=30, prometheus_scrape_s=15)
    assert apa.decide(View(30.0, 2, 2, scrapes(30, [10, 10]))) == 2  # 20 / 10 = 2: hold
    # the load triples: the newest sample (panic window, 60 -> 6) takes over the scale-up at once,
    # capped by apa's default scaleUpRate (2 x 2 = 4)
    tripled = (Gauge(0, 30, 0, 0.0), Gauge(1, 30, 0, 0.0))
    step = scrapes(30, [10, 10]) + [Scrape(30.0 + i, 2, 2, tripled, 0, 0, ()) for i in range(1, 31)]
    assert apa.decide(View(60.0, 2, 2, step)) == 4


def test_apa_refuses_an_invalid_annotation() -> None:
    with pytest.raises(ValueError, match="apa annotations"):
        ApaPolicy("inflight", 10, 1, 4, annotations={"elasticscaler.io/metrics.window-seconds": "zero"})


def test_slo_policy_scales_up_by_the_ttft_ratio_and_holds_without_a_signal() -> None:
    slo = SloPolicy(ttft_target_s=1.0, min_replicas=1, max_replicas=20, poll_s=30, ttft_buckets_s=())
    # p90 TTFT 3 s (exact) against 1 s: ceil(2 x 3) = 6
    assert slo.decide(View(30.0, 2, 2, scrapes(30, [1, 1], ttfts=(3.0,)))) == 6
    # no first token in the window: the engine holds its last decision (6)
    assert slo.decide(View(90.0, 6, 6, [])) == 6
    # as Prometheus answers it (the default): 3 s falls in vLLM's (2.5, 5] bucket, p90 reads
    # 2.5 + 2.5 x 0.9 = 4.75 s: ceil(2 x 4.75) = 10
    prom = SloPolicy(ttft_target_s=1.0, min_replicas=1, max_replicas=20, poll_s=30)
    assert prom.decide(View(30.0, 2, 2, scrapes(30, [1, 1], ttfts=(3.0,)))) == 10


def test_slo_policy_with_the_inflight_signal_keeps_a_loaded_fleet() -> None:
    # TTFT 0.2 s against 1 s on 4 replicas with 14 in flight each (56 on 4 x 16: ratio 0.875)
    view = View(30.0, 4, 4, scrapes(30, [14, 14, 14, 14], ttfts=(0.2,)))
    alone = SloPolicy(ttft_target_s=1.0, min_replicas=1, max_replicas=20, scale_down_stabilization_s=0,
                      ttft_buckets_s=())
    assert alone.decide(view) == 1  # ceil(4 x 0.2 / 0.9): the latency ratio alone overshoots
    loaded = SloPolicy(ttft_target_s=1.0, min_replicas=1, max_replicas=20, scale_down_stabilization_s=0,
                       concurrency_per_replica=16, ttft_buckets_s=())
    assert loaded.decide(view) == 4  # ceil(4 x 0.875 / 0.9) = 4
    with pytest.raises(ValueError, match="slo concurrency per replica: must be >= 0, got -1"):
        SloPolicy(ttft_target_s=1.0, min_replicas=1, max_replicas=2, concurrency_per_replica=-1)


# ------------------------------------------------------------------ the oracle


PROFILE = ReplicaProfile(max_batch=16, prefill_tokens_per_s=20_000, decode_base_s=0.01,
                         decode_per_seq_s=0.001,
                         kv_capacity_tokens=200_000, cold_start_s=20.0, cold_start_p90_s=20.0)


def ramp() -> list[Arrival]:
    """2 req/s for 100 s, 12 req/s for 100 s, 2 req/s for 100 s (deterministic spacing)."""
    out = []
    t = 0.0
    for rate, until in ((2.0, 100.0), (12.0, 200.0), (2.0, 300.0)):
        while t < until:
            out.append(Arrival(round(t, 6), 400, 60))
            t += 1.0 / rate
    return out


def test_bucket_replicas_is_the_work_over_the_bucket_at_the_utilization() -> None:
    # a request costs 400 / 20000 + 60 x (0.01 + 0.016) / 16 = 0.1175 s of a replica
    need = bucket_replicas([Arrival(0.0, 400, 60)] * 100, PROFILE, utilization=0.5, bucket_s=10.0)
    assert need == [3]  # 11.75 s / (10 s x 0.5) = 2.35 -> 3


def test_the_oracle_orders_capacity_a_cold_start_ahead() -> None:
    o = OraclePolicy(ramp(), PROFILE, utilization=0.5, bucket_s=10.0, tick_s=5.0)
    before = o.decide(View(75.0, 1, 1, []))  # 75 + 20 + 5 reaches the busy bucket at 100
    assert before == max(bucket_replicas(ramp(), PROFILE, 0.5, 10.0)[7:11])
    assert before > o.decide(View(40.0, 1, 1, []))


def test_the_calibrated_oracle_meets_its_goal_and_never_costs_less_than_the_lower_bound() -> None:
    # the oracle is a foresight heuristic, not a bound (a fixed fleet can beat it): what holds is
    # that it reaches the goal it is calibrated to, and that the LP bound stays below it
    from escaler.sim.bound import lower_bound

    arrivals = ramp()
    opts = SimOptions(profile=PROFILE, max_replicas=16)
    slo = SloTargets(ttft_s=0.5, tpot_s=0.1)
    for goal in (0.9, 0.99):
        oracle, _ = calibrate_oracle(Experiment(arrivals, opts, slo, goal=goal))
        o = summarize(oracle, slo)
        assert o["attainment"] >= goal
        b = lower_bound(arrivals, PROFILE, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, goal=goal,
                        initial_replicas=opts.initial_replicas, max_replicas=opts.max_replicas)
        assert b.replica_hours is not None and b.replica_hours <= oracle.replica_seconds / 3600


def test_the_verdicts_say_plainly_who_beats_whom_and_whether_the_slo_goal_is_met() -> None:
    from escaler.sim.runner import verdicts

    def row(p: str, a: float, rh: float) -> dict[str, object]:
        return {"policy": p, "attainment": a, "replica_hours": rh}

    def refs(bound: float | None, fixed_n: int | None = 3, fixed_rh: float = 2.1) -> dict[str, object]:
        return {"goal": 0.99,
                "cheapest_fixed": {"policy": f"fixed-{fixed_n}", "n": fixed_n, "attainment": 0.992,
                                   "replica_hours": fixed_rh},
                "lower_bound": {"reachable": bound is not None, "replica_hours": bound}}

    said = verdicts([row("slo", 0.995, 2.2), row("hpa", 0.99, 2.0), row("kpa", 0.7, 3.0)], refs(1.87))
    assert "slo does NOT beat hpa: 2.2 vs 2.0 replica-hours at 99.50 % vs 99.00 % attainment" in said
    assert "slo beats kpa: 2.2 vs 3.0 replica-hours at 99.50 % vs 70.00 % attainment" in said
    assert ("slo does NOT beat the cheapest fixed fleet (fixed-3) at the 99 % goal: 2.2 vs 2.1 replica-hours "
            "at 99.50 % vs 99.20 %") in said
    assert ("slo meets the goal (>= 99 % attainment at <= 1.2x the lower bound's replica-hours): "
            "99.50 % at 1.18x") in said
    missed = verdicts([row("slo", 0.98, 1.9)], refs(1.87, fixed_rh=2.5))
    assert missed == ["slo does NOT beat the cheapest fixed fleet (fixed-3) at the 99 % goal: 1.9 vs 2.5 "
                      "replica-hours at 98.00 % vs 99.20 %",
                      "slo does NOT meet the goal (>= 99 % attainment at <= 1.2x the lower bound's "
                      "replica-hours): 98.00 % at 1.02x"]
    # unreachable even for the bound: said so, and no ratio
    out = verdicts([row("apa", 0.9, 5.0), row("slo", 0.95, 6.0)], refs(None, fixed_n=None))
    assert out[:2] == ["apa vs the cheapest fixed fleet: no fixed fleet up to max_replicas reaches 99 %",
                       "slo vs the cheapest fixed fleet: no fixed fleet up to max_replicas reaches 99 %"]
    assert out[2].startswith("the 99 % goal is out of reach even for the lower bound")
    assert not any("x the lower bound" in v for v in out)


# ------------------------------------------------------------------ flow


FLOW_PROFILE = ReplicaProfile(max_batch=64, prefill_tokens_per_s=10_000, decode_base_s=0.012,
                              decode_per_seq_s=0.0003, decode_per_kv_token_s=0.0)


def flow(**kw: object) -> FlowPolicy:
    cfg = FlowConfig(flow_capacity(FLOW_PROFILE), 1, 64, utilization=0.8, min_utilization=0.5,
                     max_utilization=0.9, seed_headroom=False)
    return FlowPolicy(cfg, **kw)  # type: ignore[arg-type]


def test_flow_capacity_is_the_profiles_prefill_and_full_batch_decode() -> None:
    cap = flow_capacity(FLOW_PROFILE)
    assert cap.prefill_tokens_per_s == 10_000
    assert cap.decode_tokens_per_s == pytest.approx(64 / (0.012 + 0.0003 * 64))


def test_flow_policy_reads_prometheus_rates_and_holds_until_a_full_range() -> None:
    p = flow(burst_lookback_s=0.0)
    # 20,000 prompt tokens/s = 2.0 replicas at 100 %; / 0.8 -> 3
    sc = token_scrapes(120, 20_000, 0, serving=2)
    assert p.decide(View(30.0, 2, 2, sc[:30])) == 2  # 30 s of a 60 s range: hold
    assert "token rates missing" in p.last_steps[0]
    assert p.decide(View(90.0, 2, 2, sc[:90])) == 3
    # Prometheus holds the sample of 90 s (a multiple of 15): the range is (30, 90]
    assert p.last_steps[0].startswith("work: 20000 prompt tok/s / 10000")


def test_flow_policy_burst_floor_takes_the_short_range_percentile() -> None:
    p = flow(burst_lookback_s=1800.0, burst_quantile=100.0)
    sc = token_scrapes(600, 5_000, 0, serving=2)
    # one 15 s sample with 4 s at 225,000 prompt tokens/s and 11 s at 5,000: 63,667 tokens/s
    for i in range(300, 304):
        s = sc[i]
        sc[i] = Scrape(s.t, s.replicas, s.serving, s.gauges, 0, 1, (), 225_000, 0, ())
    assert p.decide(View(600.0, 2, 2, sc)) == 7  # ceil(63,667 / 10,000)
    assert any(x.startswith("burst floor:") for x in p.last_steps)


def test_flow_policy_burst_floor_forgets_a_burst_after_the_down_delay() -> None:
    """The runner's flow remembers a burst for its down delay, not longer: a burst 10 minutes
    old no longer holds the fleet (with 30 minutes of memory it held the peak after the load fell)."""
    arrivals = [Arrival(float(t), 100, 10) for t in range(60)]
    p = build("flow", Experiment(arrivals=arrivals, options=SimOptions(profile=FLOW_PROFILE)))
    assert isinstance(p, FlowPolicy)
    assert p.burst_lookback_s == p.config.down_delay_s == 300.0
    sc = token_scrapes(1200, 5_000, 0, serving=2)
    for i in range(300, 304):  # the burst of the test above, 900 s before the decision
        s = sc[i]
        sc[i] = Scrape(s.t, s.replicas, s.serving, s.gauges, 0, 1, (), 225_000, 0, ())
    p.decide(View(1200.0, 2, 2, sc))
    assert not any(x.startswith("burst floor:") for x in p.last_steps)


def test_flow_policy_miss_share_counts_ttft_and_tpot_above_their_bucket() -> None:
    p = flow(burst_lookback_s=0.0, miss_window_s=900.0)
    # every first token at 3 s (above the 2.5 s bucket over a 2 s objective), TPOTs fine
    sc = token_scrapes(120, 10_000, 0, serving=2, ttfts=(3.0,), tpots=(0.05,))
    p.decide(View(90.0, 2, 2, sc[:90]))
    assert any("burst headroom: 100 % of requests" in x for x in p.last_steps)


def test_the_baselines_default_targets_follow_the_profiles_batch() -> None:
    """A target tuned for a batch of 64 would over-provision a replica that runs 256 (the default
    profile since the profiles have sources): the defaults are shares of the profile's max batch."""
    arrivals = [Arrival(0.0, 100, 10)]
    small = Experiment(arrivals=arrivals, options=SimOptions(profile=ReplicaProfile(max_batch=64)))
    assert (small.metric_target(), small.concurrency()) == (32.0, 28)
    default = Experiment(arrivals=arrivals)
    assert default.options.profile.max_batch == 256
    assert (default.metric_target(), default.concurrency()) == (128.0, 112)
    assert Experiment(arrivals=arrivals, metric="kv").metric_target() == 0.7
    given = Experiment(arrivals=arrivals, target=9.0, slo_concurrency=0)
    assert (given.metric_target(), given.concurrency()) == (9.0, 0)


def test_the_tuning_sweep_extends_below_its_edge_while_the_best_is_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the 256-sequence profile the tuned HPA, KPA and apa all came out at 32, the sweep's
    smallest target: the optimum may lie below. The sweep halves its smallest target while the
    best run is at it."""
    from escaler.sim import runner

    monkeypatch.setattr(runner, "TUNE_BATCH_FRACTIONS", (0.25, 0.5))
    arrivals = [Arrival(0.05 * i, 2000, 100) for i in range(400)]  # 20 requests/s for 20 s
    exp = Experiment(arrivals=arrivals, options=SimOptions(profile=ReplicaProfile(max_batch=64),
                                                           max_replicas=16), tune=True)
    _run, row, sweep = runner.tuned("hpa", exp)
    targets = [p["target"] for p in sweep]
    assert targets[:2] == [16.0, 32.0]
    best = row["tuned"]["target"]
    # the sweep went on below 16 while the best sat at its smallest target, and stopped once not
    assert len(targets) > 2 and targets[2:] == sorted(targets[2:], reverse=True)
    assert best != min(targets) or min(targets) == 1.0
