"""Flow sizing (escaler.scaling.flow): each step of the contract on hand-computed readings."""

from __future__ import annotations

import pytest

from escaler.scaling.flow import FlowCapacity, FlowConfig, FlowReading, FlowState, decide_flow

# one replica prefills 10,000 prompt tokens/s or decodes 2,000 tokens/s
CAP = FlowCapacity(10_000.0, 2_000.0)


def config(**kw: object) -> FlowConfig:
    base: dict[str, object] = {"capacity": CAP, "min_replicas": 1, "max_replicas": 64, "utilization": 0.8,
                               "min_utilization": 0.5, "max_utilization": 0.9, "seed_headroom": False}
    base.update(kw)
    return FlowConfig(**base)  # type: ignore[arg-type]


def reading(now: float, current: int, prompt: float, generation: float, **kw: object) -> FlowReading:
    return FlowReading(now, current, prompt, generation, **kw)  # type: ignore[arg-type]


def test_work_is_prompt_over_prefill_plus_generation_over_decode_at_the_target() -> None:
    # 15,000 / 10,000 + 1,000 / 2,000 = 2.0 replicas at 100 %; / 0.8 = 2.5 -> 3
    d = decide_flow(reading(0, 3, 15_000, 1_000), config(), FlowState())
    assert d.replicas == 3
    assert d.signals["work"] == 2.0
    assert d.steps[0] == ("work: 15000 prompt tok/s / 10000 + 1000 generated tok/s / 2000 = 2.000 "
                          "replicas at 100 %")


def test_up_at_once_counting_the_current_replicas_as_capacity() -> None:
    # 6.0 at 100 % -> ceil(7.5) = 8 from 3 in one step, whatever is still starting
    d = decide_flow(reading(0, 3, 40_000, 4_000), config(), FlowState())
    assert d.replicas == 8
    assert any(s.startswith("up at once: 3 -> 8") for s in d.steps)
    # the next poll, the same flow: 8 (starting replicas are in current), not 8 more
    d2 = decide_flow(reading(30, 8, 40_000, 4_000), config(), d.state)
    assert d2.replicas == 8


def test_a_missing_rate_holds_the_last_decision() -> None:
    d = decide_flow(reading(0, 3, 40_000, 4_000), config(), FlowState())
    held = decide_flow(FlowReading(30, 8, None, 4_000), config(), d.state)
    assert held.held and held.replicas == 8
    assert "token rates missing" in held.steps[0]
    # no decision yet: the current count
    first = decide_flow(FlowReading(0, 5, 1_000, None), config(), FlowState())
    assert first.held and first.replicas == 5


def test_backlog_is_drained_over_the_drain_time() -> None:
    # work 1.0 over 10 requests/s: 0.1 replica-seconds each; 300 waiting over 60 s = 0.5 replicas
    d = decide_flow(reading(0, 1, 5_000, 1_000, requests_per_s=10.0, waiting=300.0), config(), FlowState())
    assert d.signals["backlog"] == 0.5
    assert d.replicas == 2  # ceil(1.0 / 0.8 + 0.5) = ceil(1.75)
    # no request finished in the window: the last known work per request
    d2 = decide_flow(reading(30, 2, 5_000, 1_000, requests_per_s=0.0, waiting=600.0), config(), d.state)
    assert d2.signals["backlog"] == 1.0


def test_down_only_after_the_down_delay_and_to_the_largest_need_of_it() -> None:
    c = config(down_delay_s=300.0)
    s = FlowState()
    d = decide_flow(reading(0, 10, 60_000, 4_000), c, s)  # 8.0 / 0.8 = 10: hold 10
    assert d.replicas == 10
    # the load halves: need 5, but the window (seeded with 10) holds 10 until 300 s have passed
    for t in (30, 60, 150, 270):
        d = decide_flow(reading(t, 10, 30_000, 2_000), c, d.state)
        assert d.replicas == 10, t
    d = decide_flow(reading(330, 10, 30_000, 2_000), c, d.state)
    # need ceil(4.0 / 0.8) = 5; a scale-down keeps what 10 % lower targets need: ceil(4.0 / 0.72) = 6
    assert d.replicas == 6
    assert any("down to the largest keep (the need within the down margin) of the last 300 s: 6" in s
               for s in d.steps)
    # without the margin, the need itself
    d0 = decide_flow(reading(0, 10, 60_000, 4_000), config(down_delay_s=300.0, down_margin=0.0), FlowState())
    for t in (30, 60, 150, 270, 330):
        d0 = decide_flow(reading(t, 10, 30_000, 2_000), config(down_delay_s=300.0, down_margin=0.0), d0.state)
    assert d0.replicas == 5


def test_a_load_at_a_replica_boundary_does_not_shed_the_replica_it_asks_back() -> None:
    # work 1.55 at a 0.8 target (need 2) for the whole down delay, then wobbling 1.55 / 1.65 (need
    # 2 / 3): without the margin the fleet of 3 goes 3 -> 2 -> 3 within a poll; with it 3 is kept
    # (ceil(1.55 / 0.72) = 3)
    loads = [15_500] * 12 + [16_500, 15_500] * 10

    def counts(cfg: FlowConfig) -> list[int]:
        d, cur, out = None, 3, []
        for i, p in enumerate(loads):
            d = decide_flow(reading(30.0 * i, cur, p, 0), cfg, d.state if d else FlowState())
            cur = d.replicas
            out.append(cur)
        return out

    with_margin = counts(config(down_delay_s=300.0))
    without = counts(config(down_delay_s=300.0, down_margin=0.0))
    assert set(with_margin) == {3}
    i = without.index(2)
    assert without[:i] == [3] * i and 3 in without[i:i + 3]  # the down is reversed within 2 polls


def test_a_scale_down_waits_a_down_delay_after_the_last_change() -> None:
    c = config(down_delay_s=300.0)
    d = decide_flow(reading(0, 2, 40_000, 4_000), c, FlowState())  # up to 8 at 0
    assert d.replicas == 8
    # the load is gone at once: the need window says 1 after 300 s, the change was 300 s ago
    for t in range(30, 300, 30):
        d = decide_flow(reading(t, 8, 0, 0), c, d.state)
        assert d.replicas == 8, t
    d = decide_flow(reading(301, 8, 0, 0), c, d.state)
    assert d.replicas == 1


def test_a_rising_trend_raises_the_count_a_falling_one_never_lowers_it() -> None:
    c = config(trend_window_s=600.0, horizon_s=90.0)
    s = FlowState()
    # work rises 0.1 replica per 30 s exactly (no noise): at 120 s it is 1.4, projected 1.7 at 210 s
    for i, t in enumerate(range(0, 150, 30)):
        prompt = 10_000 * (1.0 + 0.1 * i)
        d = decide_flow(reading(t, 3, prompt, 0), c, s)
        s = d.state
    assert d.signals["work"] == pytest.approx(1.4)
    assert d.signals["planned"] == pytest.approx(1.7)
    assert d.replicas == 3  # ceil(1.7 / 0.8) = 3
    s = FlowState()
    for i, t in enumerate(range(0, 150, 30)):
        d = decide_flow(reading(t, 3, 10_000 * (2.0 - 0.1 * i), 0), c, s)
        s = d.state
    assert d.signals["planned"] == d.signals["work"]


def test_a_rise_inside_the_noise_projects_nothing() -> None:
    c = config(trend_window_s=600.0, horizon_s=90.0)
    s = FlowState()
    for t, w in zip(range(0, 300, 30), (1.0, 1.3, 0.9, 1.2, 1.0, 1.25, 0.95, 1.2, 1.05, 1.1), strict=True):
        d = decide_flow(reading(t, 2, 10_000 * w, 0), c, s)
        s = d.state
    assert d.signals["planned"] == d.signals["work"]


def test_latency_trims_the_utilisation_target_slowly_within_its_bounds() -> None:
    c = config(queue_delay_budget_s=0.5, trim_step=0.1)
    d = decide_flow(reading(0, 4, 10_000, 0, queue_delay_s=2.0), c, FlowState())
    assert d.signals["utilization"] == pytest.approx(0.7)
    for t in (30, 60, 90):
        d = decide_flow(reading(t, 4, 10_000, 0, queue_delay_s=2.0), c, d.state)
    assert d.signals["utilization"] == 0.5  # min_utilization
    d = decide_flow(reading(120, 4, 10_000, 0, queue_delay_s=0.01), c, d.state)
    assert d.signals["utilization"] == pytest.approx(0.525)  # a quarter step up
    d = decide_flow(reading(150, 4, 10_000, 0, queue_delay_s=0.3), c, d.state)
    assert d.signals["utilization"] == pytest.approx(0.525)  # within budget: unchanged


def test_burst_headroom_grows_on_misses_once_per_interval_and_decays_slowly() -> None:
    c = config(miss_budget=0.01, headroom_interval_s=60.0, headroom_decay_s=600.0)
    # 3 % of requests missed in the window and over the long one: +3 (a quarter of 12 caps at 3)
    d = decide_flow(reading(0, 12, 10_000, 0, miss_share=0.05, long_miss_share=0.02), c, FlowState())
    assert d.signals["headroom"] == 3
    d = decide_flow(reading(30, 12, 10_000, 0, miss_share=0.05, long_miss_share=0.02), c, d.state)
    assert d.signals["headroom"] == 3  # the same window's misses count once
    d = decide_flow(reading(60, 12, 10_000, 0, miss_share=0.02, long_miss_share=0.02), c, d.state)
    assert d.signals["headroom"] == 5
    # a noisy minute alone (the long share within budget) grows nothing
    d = decide_flow(reading(120, 12, 10_000, 0, miss_share=0.5, long_miss_share=0.009), c, d.state)
    assert d.signals["headroom"] == 5
    # calm (long share under half the budget): one less per decay period
    d = decide_flow(reading(658, 12, 10_000, 0, miss_share=0.0, long_miss_share=0.001), c, d.state)
    assert d.signals["headroom"] == 5
    # 600 s after the last change, less a poll's jitter
    d = decide_flow(reading(659.5, 12, 10_000, 0, miss_share=0.0, long_miss_share=0.001), c, d.state)
    assert d.signals["headroom"] == 4
    assert d.signals["need"] == 2 + 4  # ceil(1.0 / 0.8) + headroom


def test_a_poll_a_few_milliseconds_early_decides_as_one_on_its_period() -> None:
    """A real manager's polls land a little off their period; the simulator's land on it. Both must
    decide alike: before the slack, a poll 60 s less 3 ms after the headroom grew did not grow it
    again (the e2e replay caught the manager two replicas under the simulator in a burst)."""
    c = config(miss_budget=0.01, headroom_interval_s=60.0, down_delay_s=300.0)
    miss = {"miss_share": 0.02, "long_miss_share": 0.02}
    on = decide_flow(reading(0, 12, 10_000, 0, **miss), c, FlowState())
    early = decide_flow(reading(59.997, 12, 10_000, 0, **miss), c, on.state)
    exact = decide_flow(reading(60, 12, 10_000, 0, **miss), c, on.state)
    assert early.signals["headroom"] == exact.signals["headroom"] == 4
    # the down delay too: a change 300 s less 4 ms ago no longer holds the count
    up = decide_flow(reading(0, 2, 40_000, 0), config(down_delay_s=300.0, seed_headroom=False), FlowState())
    c2 = config(down_delay_s=300.0, seed_headroom=False)
    downs = [decide_flow(reading(t, up.replicas, 1_000, 0), c2, up.state).replicas for t in (299.996, 300.0)]
    assert downs[0] == downs[1] < up.replicas


def test_the_burst_floor_sizes_on_the_short_range_peak() -> None:
    c = config(burst_utilization=1.0)
    d = decide_flow(reading(0, 2, 10_000, 0, burst_prompt_tokens_per_s=45_000.0,
                            burst_generation_tokens_per_s=1_000.0), c, FlowState())
    assert d.replicas == 5  # ceil(4.5 + 0.5)
    assert any(s.startswith("burst floor:") for s in d.steps)


def test_the_first_decision_keeps_the_running_fleet_as_headroom() -> None:
    c = config(seed_headroom=True)
    d = decide_flow(reading(0, 7, 10_000, 0), c, FlowState())
    assert d.replicas == 7 and d.signals["headroom"] == 5
    assert any("seeded from the running fleet: 7 - 2 = 5" in s for s in d.steps)
    # seeded once: the next decision does not seed again
    d2 = decide_flow(reading(30, 7, 10_000, 0), c, d.state)
    assert d2.signals["headroom"] == 5


def test_bounds_clamp_and_say_so() -> None:
    d = decide_flow(reading(0, 3, 1_000_000, 0), config(max_replicas=10), FlowState())
    assert d.replicas == 10
    assert d.steps[-1] == "clamped to [1, 10]: 10"


@pytest.mark.parametrize(("kw", "message"), [
    ({"utilization": 1.5}, "flow utilization"),
    ({"min_replicas": 5, "max_replicas": 2}, "flow replicas"),
    ({"drain_s": 0.0}, "flow drain_s"),
    ({"miss_budget": 0.0}, "flow miss_budget"),
    ({"burst_utilization": 0.0}, "flow burst_utilization"),
    ({"horizon_s": float("nan")}, "flow horizon_s"),
])
def test_a_bad_config_names_the_field(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**kw)


def test_a_bad_capacity_names_the_field() -> None:
    with pytest.raises(ValueError, match="decode_tokens_per_s"):
        FlowCapacity(1.0, 0.0)
