"""The simulator's one Prometheus pipeline (escaler/sim/signals.py): what a policy reading Prometheus
can know at a time — the samples every scrape interval, a range up to the newest one, percentiles
from histogram buckets as ``histogram_quantile`` gives them — and the baselines that read it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from escaler.sim.engine import Scrape, View
from escaler.sim.hpa import HpaPolicy
from escaler.sim.kpa import KpaPolicy
from escaler.sim.serving import Gauge
from escaler.sim.signals import (
    VLLM_TPOT_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    histogram_quantile,
    histogram_share_above,
    per_replica,
    prometheus_view,
    prometheus_window,
)


def ramp(t_end: int, value: Callable[[float], int], replicas: int = 1) -> list[Scrape]:
    return [Scrape(float(t), replicas, replicas, tuple(Gauge(i, value(t), 0, 0.0) for i in range(replicas)),
                   0, 0, (0.1 * t,)) for t in range(1, t_end + 1)]


def test_histogram_quantile_interpolates_inside_the_bucket_as_prometheus_does() -> None:
    buckets = (1.0, 2.5, 5.0)
    # 10 observations: 8 at or under 1.0, 2 in (1.0, 2.5]: p90 is rank 9, the first of the 2 in
    # (1, 2.5]: 1 + 1.5 x (9 - 8) / 2 = 1.75, whatever the observations' exact values
    values = [0.5] * 8 + [1.1, 1.2]
    assert histogram_quantile(0.9, values, buckets) == pytest.approx(1.75)
    assert histogram_quantile(0.9, [0.5] * 8 + [2.4, 2.4], buckets) == pytest.approx(1.75)
    # the first bucket starts at 0; +Inf answers the highest finite bound; nothing observed: None
    assert histogram_quantile(0.5, [0.3, 0.3], buckets) == pytest.approx(0.5)
    assert histogram_quantile(0.99, [9.0] * 5, buckets) == 5.0
    assert histogram_quantile(0.9, [], buckets) is None
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\]"):
        histogram_quantile(90, values, buckets)


def test_vllm_buckets_blur_a_p90_around_a_2_s_objective() -> None:
    # every request at 1.6 s: the exact p90 is 1.6, Prometheus answers 2.35 over vLLM's buckets
    got = histogram_quantile(0.9, [1.6] * 100, VLLM_TTFT_BUCKETS_S)
    assert got == pytest.approx(1.0 + 1.5 * 0.9)
    assert 1.0 in VLLM_TTFT_BUCKETS_S and 2.5 in VLLM_TTFT_BUCKETS_S and 2.0 not in VLLM_TTFT_BUCKETS_S


def test_prometheus_holds_only_the_samples_of_its_scrape_interval() -> None:
    s = ramp(40, lambda t: int(t))
    assert prometheus_view(s, 29.0, 15.0).t == 15.0  # type: ignore[union-attr]
    assert prometheus_view(s, 30.0, 15.0).t == 30.0  # type: ignore[union-attr]
    assert prometheus_view(s, 10.0, 15.0) is None
    # a 20 s range at 37 s covers observations up to the 30 s scrape, not those after it
    span = prometheus_window(s, 37.0, 20.0, 15.0)
    assert span[0].t == 11.0 and span[-1].t == 30.0


def test_the_hpa_reads_prometheus_samples_not_the_servers_every_second() -> None:
    # a load that doubled at 31 s: at 44 s Prometheus' newest sample is the 30 s one (10 per replica)
    s = ramp(44, lambda t: 10 if t <= 30 else 20, replicas=2)
    assert per_replica(s, 44.0, 15.0, "running", cadence=15.0) == {0: 10.0, 1: 10.0}
    assert per_replica(s, 44.0, 15.0, "running")[0] > 19  # the servers' own view, every second
    # a tick at 45 s before the 45 s scrape is taken: the instant query answers the 30 s sample
    assert per_replica(s, 45.0, 15.0, "running", cadence=15.0) == {0: 10.0, 1: 10.0}
    hpa = HpaPolicy("running", target=10.0)
    assert hpa.decide(View(44.0, 2, 2, s)) == 2  # nothing yet
    s += ramp(45, lambda t: 20, replicas=2)[-1:]
    assert hpa.decide(View(45.0, 2, 2, s)) == 4  # the 45 s sample: 20 per replica


def test_kpa_scale_down_delay_holds_the_highest_count_of_the_delay() -> None:
    def at(t: float, per: int, n: int) -> list[Scrape]:
        return [Scrape(float(x), n, n, tuple(Gauge(i, per, 0, 0.0) for i in range(n)), 0, 0, ())
                for x in range(int(t) - 70, int(t) + 1)]

    plain, delayed = KpaPolicy(target=10), KpaPolicy(target=10, scale_down_delay_s=120)
    for k in (plain, delayed):
        assert k.decide(View(100.0, 4, 4, at(100, 10, 4))) == 4
    # the load halves: KPA drops to 2 at once, with a 120 s delay it keeps 4 until 100 + 120
    assert plain.decide(View(200.0, 4, 4, at(200, 5, 4))) == 2
    assert delayed.decide(View(200.0, 4, 4, at(200, 5, 4))) == 4
    assert delayed.decide(View(221.0, 4, 4, at(221, 5, 4))) == 2
    with pytest.raises(ValueError, match="scale-down-delay: must be >= 0"):
        KpaPolicy(target=10, scale_down_delay_s=-1)


def test_the_share_above_an_objective_counts_only_what_a_bucket_bound_makes_certain() -> None:
    # a 2 s objective between the 1.0 and 2.5 s buckets: 1.5 s and 2.2 s are not certainly misses,
    # 3 s is
    assert histogram_share_above(2.0, [0.5, 1.5, 2.2, 3.0], VLLM_TTFT_BUCKETS_S) == 0.25
    # on a bound: what is above it
    assert histogram_share_above(2.5, [2.5, 2.6], VLLM_TTFT_BUCKETS_S) == 0.5
    assert histogram_share_above(0.1, [0.05, 0.1, 0.2, 0.3], VLLM_TPOT_BUCKETS_S) == 0.5
    assert histogram_share_above(2.0, [], VLLM_TTFT_BUCKETS_S) is None
    # above every bound: the largest
    assert histogram_share_above(1e6, [1e4], VLLM_TTFT_BUCKETS_S) == 1.0
