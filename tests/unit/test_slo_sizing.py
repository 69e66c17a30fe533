"""The pure SLO sizing rules (``escaler.scaling.slo``, docs/slo.md), table-driven: up on TTFT, up on
OTPS, the worst ratio wins, hold inside the hysteresis band, down with headroom, bounds of each type
(replica, concurrency, pdengine, zero), the job formula, missing signals holding the last decision, and
the in-flight load signal (scale-down by load where a latency ratio would overshoot)."""

from __future__ import annotations

import pytest

from escaler.api.slo import Bound, BoundType, JobBounds, LLMBounds
from escaler.scaling.slo import (
    DEFAULT_HYSTERESIS_BAND,
    Direction,
    Objective,
    ReplicaBounds,
    bound_replicas,
    load_objective,
    replica_bounds,
    size_job,
    size_llm,
)

UNBOUNDED = ReplicaBounds()


def ttft(observed: float | None, target: float = 800.0, error: str | None = None) -> Objective:
    return Objective("ttftMs", "TTFT p90 (ms)", target, Direction.UPPER, observed,
                     error if observed is None else None, target_name="ttftTargetMs")


def otps(observed: float | None, target: float = 20.0, error: str | None = None) -> Objective:
    return Objective("otps", "OTPS", target, Direction.LOWER, observed,
                     error if observed is None else None, target_name="otpsTarget")


def depth(observed: float | None, max_depth: float = 200.0, error: str | None = None) -> Objective:
    return Objective("queueDepth", "queue depth", max_depth, Direction.UPPER, observed,
                     error if observed is None else None, target_name="maxDepth")


LLM_CASES = [
    # (objectives, current, bounds, last, expected replicas, words in the reason)
    ([ttft(1200)], 4, UNBOUNDED, None, 6, ("TTFT p90", "ratio 1.500", "scale up 4 -> 6")),
    ([otps(10)], 3, UNBOUNDED, None, 6, ("OTPS", "ratio 2.000", "scale up 3 -> 6")),
    ([ttft(1000), otps(10)], 4, UNBOUNDED, None, 8, ("OTPS", "ratio 2.000")),
    ([ttft(2000), otps(18)], 4, UNBOUNDED, None, 10, ("TTFT", "ratio 2.500")),
    ([ttft(810)], 4, UNBOUNDED, None, 5, ("ratio 1.012", "scale up 4 -> 5")),
    ([ttft(760), otps(21)], 4, UNBOUNDED, None, 4, ("hysteresis band [0.90, 1.00]", "holding 4")),
    ([ttft(800)], 4, UNBOUNDED, None, 4, ("hysteresis band",)),
    ([ttft(720)], 4, UNBOUNDED, None, 4, ("hysteresis band",)),
    ([ttft(400), otps(40)], 8, UNBOUNDED, None, 5, ("headroom", "scale down 8 -> 5")),
    ([ttft(100), otps(200)], 8, UNBOUNDED, None, 2, ("scale down 8 -> 2",)),
    ([ttft(400), otps(19)], 8, UNBOUNDED, None, 9, ("OTPS", "scale up 8 -> 9")),
    ([ttft(700)], 4, UNBOUNDED, None, 4, ("not enough to remove a replica",)),
    ([ttft(1600)], 0, UNBOUNDED, None, 2, ("scale up 0 -> 2",)),
    ([ttft(3000)], 4, ReplicaBounds(1, 8), None, 8, ("capped at bounds.max (8 replicas)",)),
    ([ttft(100)], 8, ReplicaBounds(3, 8), None, 3, ("raised to bounds.min (3 replicas)",)),
    ([ttft(100)], 8, ReplicaBounds(0, 0), None, 0, ("capped at bounds.max (0 replicas)",)),
    ([], 5, ReplicaBounds(1, 4), None, 4, ("no ttft, otps or inflight signal",)),
]


@pytest.mark.parametrize(
    ("objectives", "current", "bounds", "last", "want", "words"), LLM_CASES,
    ids=["up-on-ttft", "up-on-otps", "worst-ratio-wins-otps", "worst-ratio-wins-ttft", "up-just-above-target",
         "hold-inside-band", "hold-at-target", "hold-at-band-edge", "down-with-headroom", "down-far",
         "one-signal-without-headroom-blocks-down", "headroom-too-small-to-remove-one", "up-from-zero",
         "max-bound-caps", "min-bound-raises", "zero-bounds", "no-objectives-clamps-current"])
def test_llm_rule(objectives: list[Objective], current: int, bounds: ReplicaBounds, last: int | None,
                  want: int, words: tuple[str, ...]) -> None:
    d = size_llm(objectives, current=current, bounds=bounds, last=last)
    assert d.replicas == want, d.reason
    for w in words:
        assert w in d.reason
    assert not d.held and d.missing == ()
    assert d.signals["currentReplicas"] == current


def test_a_scale_down_is_not_pushed_up_by_float_error() -> None:
    # 12 x 0.525 / 0.9 is 7.000000000000001 in floats: the smallest count that keeps the worst ratio
    # at or below 0.9 is 7, not 8
    d = size_llm([ttft(420)], current=12, bounds=UNBOUNDED, last=None)
    assert d.replicas == 7 and "scale down 12 -> 7" in d.reason, d.reason


def test_a_scale_down_lands_inside_the_band_and_then_holds() -> None:
    """Down to a predicted worst ratio <= 1 - band: the next observation (load spread over fewer
    replicas) is inside the band, and the count holds."""
    first = size_llm([ttft(400)], current=8, bounds=UNBOUNDED, last=None)
    assert first.replicas == 5  # ceil(8 x 0.5 / 0.9)
    predicted = 400 * 8 / first.replicas
    assert predicted / 800 <= 1 - DEFAULT_HYSTERESIS_BAND
    again = size_llm([ttft(predicted)], current=first.replicas, bounds=UNBOUNDED, last=first.replicas)
    assert again.replicas == first.replicas


def test_signals_carry_values_and_targets() -> None:
    d = size_llm([ttft(900), otps(25)], current=2, bounds=UNBOUNDED, last=None)
    assert d.signals == {"currentReplicas": 2, "ttftMs": 900, "ttftTargetMs": 800, "otps": 25,
                         "otpsTarget": 20}


MISSING_CASES = [
    ([ttft(None, error="Prometheus query failed: HTTP 503")], 3, 5, UNBOUNDED, 5,
     ("ttftMs: Prometheus query failed: HTTP 503", "holding the last decision (5 replicas)")),
    ([ttft(2000), otps(None, error="no series")], 3, 5, UNBOUNDED, 5, ("otps: no series",)),
    ([ttft(900), otps(0)], 3, 5, UNBOUNDED, 5, ("otps: the value is 0",)),
    ([ttft(None, error="timeout")], 3, None, UNBOUNDED, 3,
     ("no decision yet: holding the current count (3",)),
    ([ttft(None, error="timeout")], 3, 9, ReplicaBounds(1, 6), 6, ("capped at bounds.max (6",)),
]


@pytest.mark.parametrize(("objectives", "current", "last", "bounds", "want", "words"), MISSING_CASES,
                         ids=["missing-ttft-holds-last", "partial-reading-holds", "otps-zero-is-missing",
                              "no-last-holds-current", "held-decision-still-clamped"])
def test_missing_signal_holds_the_last_decision(objectives: list[Objective], current: int, last: int | None,
                                                bounds: ReplicaBounds, want: int,
                                                words: tuple[str, ...]) -> None:
    d = size_llm(objectives, current=current, bounds=bounds, last=last)
    assert (d.replicas, d.held) == (want, True)
    assert d.reason.startswith("signals missing (")
    for w in words:
        assert w in d.reason
    assert d.missing


JOB_CASES = [
    # depth, maxDepth, current, bounds, want
    (340.0, 200.0, 2, UNBOUNDED, 4),
    (100.0, 200.0, 4, UNBOUNDED, 2),
    (200.0, 200.0, 3, UNBOUNDED, 3),
    (0.0, 200.0, 3, UNBOUNDED, 0),
    (50.0, 200.0, 0, UNBOUNDED, 1),
    (900.0, 200.0, 0, UNBOUNDED, 5),
    (0.0, 200.0, 3, ReplicaBounds(1, 4), 1),
    (5000.0, 200.0, 3, ReplicaBounds(0, 4), 4),
    (0.0, 200.0, 3, ReplicaBounds(0, 4), 0),
]


@pytest.mark.parametrize(("d", "max_depth", "current", "bounds", "want"), JOB_CASES,
                         ids=["up", "down", "at-max-depth-holds", "empty-queue-to-zero",
                              "activation-from-zero", "activation-from-zero-big-queue", "min-bound",
                              "max-bound", "zero-min-bound"])
def test_job_formula(d: float, max_depth: float, current: int, bounds: ReplicaBounds, want: int) -> None:
    dec = size_job(depth(d, max_depth), current=current, bounds=bounds, last=None)
    assert dec.replicas == want, dec.reason
    assert dec.signals["queueDepth"] == d and dec.signals["maxDepth"] == max_depth


def test_job_missing_depth_holds_last() -> None:
    dec = size_job(depth(None, error="HTTP 502"), current=1, bounds=UNBOUNDED, last=3)
    assert (dec.replicas, dec.held) == (3, True)
    assert "queueDepth: HTTP 502" in dec.reason


BOUND_CASES = [
    (Bound(type=BoundType.REPLICA, value=3), 16, 3),
    (Bound(type=BoundType.REPLICA, value=0), 16, 0),
    (Bound(type=BoundType.CONCURRENCY, value=32), 16, 2),
    (Bound(type=BoundType.CONCURRENCY, value=33), 16, 3),
    (Bound(type=BoundType.CONCURRENCY, value=1), 16, 1),
    (Bound(type=BoundType.CONCURRENCY, value=0), 16, 0),
    (Bound(type=BoundType.PDENGINE, value=4), 16, 4),
    (Bound(type=BoundType.PDENGINE, value=0), 16, 0),
]


@pytest.mark.parametrize(("bound", "cpr", "want"), BOUND_CASES,
                         ids=["replica", "replica-zero", "concurrency-exact", "concurrency-rounds-up",
                              "concurrency-one-request", "concurrency-zero", "pdengine-groups",
                              "pdengine-zero"])
def test_bound_conversion(bound: Bound, cpr: int, want: int) -> None:
    assert bound_replicas(bound, cpr) == want


def test_llm_concurrency_bounds_and_job_min_above_max() -> None:
    llm = LLMBounds(min=Bound(type=BoundType.CONCURRENCY, value=20),
                    max=Bound(type=BoundType.CONCURRENCY, value=100))
    assert replica_bounds(llm, 16) == ReplicaBounds(2, 7)
    assert replica_bounds(None, 16) == ReplicaBounds(0, None)
    job = JobBounds(min=Bound(type=BoundType.CONCURRENCY, value=100),
                    max=Bound(type=BoundType.REPLICA, value=4))
    rb = replica_bounds(job, 16)
    assert rb == ReplicaBounds(7, 4)
    n, why = rb.clamp(0)
    assert n == 4 and "the maximum wins" in why


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"band": 0.0}, r"band: must be in \(0"),
    ({"band": 0.95}, r"band: must be in \(0"),
    ({"current": -1}, "current: must be >= 0"),
], ids=["band-zero", "band-too-wide", "negative-current"])
def test_bad_arguments_are_refused(kwargs: dict[str, float], words: str) -> None:
    args: dict[str, object] = {"current": 2, "bounds": UNBOUNDED, "last": None, **kwargs}
    with pytest.raises(ValueError, match=words):
        size_llm([ttft(900)], **args)  # type: ignore[arg-type]


def test_objective_target_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"Objective\.target"):
        Objective("x", "x", 0.0, Direction.UPPER, 1.0)
    with pytest.raises(ValueError, match="concurrencyPerReplica"):
        bound_replicas(Bound(type=BoundType.CONCURRENCY, value=1), 0)


@pytest.mark.parametrize(("n", "t", "o", "want"), [
    (4, 1200.0, 25.0, 6), (4, 700.0, 10.0, 8), (6, 760.0, 21.0, 6), (8, 400.0, 40.0, 5), (5, 640.0, 32.0, 5),
    (8, 3000.0, 25.0, 8),
], ids=["up-ttft", "up-otps", "band", "down", "hysteresis-after-down", "capped"])
def test_the_worked_example_of_docs_slo_md(n: int, t: float, o: float, want: int) -> None:
    d = size_llm([ttft(t), otps(o)], current=n, bounds=ReplicaBounds(1, 8), last=None)
    assert d.replicas == want, d.reason


def test_replicas_still_starting_count_as_capacity_on_its_way() -> None:
    # 6 replicas ordered, 2 serve: TTFT 3x the target over the 2 -> 6, which is already ordered
    held = size_llm([ttft(2400)], current=6, bounds=UNBOUNDED, last=6, ready=2)
    assert held.replicas == 6 and "with 2 of 6 replicas ready: holding 6 while 4 start" in held.reason
    # the ready ones alone need fewer than are ordered (2 x 1600/800 = 4): still no scale-down while
    # 4 start, the count never falls below the current one on a missed SLO
    cold = size_llm([ttft(1600)], current=6, bounds=UNBOUNDED, last=6, ready=2)
    assert cold.replicas == 6 and "with 2 of 6 replicas ready: holding 6 while 4 start" in cold.reason
    # the ready ones alone would need more than is ordered: scale up from them, not from 6
    more = size_llm([ttft(4000)], current=6, bounds=UNBOUNDED, last=6, ready=2)
    assert more.replicas == 10 and "scale up 6 -> 10" in more.reason
    # without the ready count (or all ready) the rule multiplies the current count, as before
    assert size_llm([ttft(2400)], current=6, bounds=UNBOUNDED, last=6).replicas == 18
    assert size_llm([ttft(2400)], current=6, bounds=UNBOUNDED, last=6, ready=6).replicas == 18
    # a scale-down is not judged on the ready ones
    assert size_llm([ttft(100)], current=8, bounds=UNBOUNDED, last=8, ready=2).replicas == 2
    with pytest.raises(ValueError, match="ready: must be >= 0"):
        size_llm([ttft(100)], current=8, bounds=UNBOUNDED, last=8, ready=-1)


def inflight(total: float | None, *, cpr: int = 32, current: int = 4, ready: int | None = None,
             error: str | None = None) -> Objective:
    return load_objective(total, error if total is None else None, concurrency_per_replica=cpr,
                          current=current, ready=ready)


def test_a_latency_ratio_alone_overshoots_the_scale_down_the_load_signal_stops_it() -> None:
    # an idle-looking TTFT (its prefill time) on 4 replicas carrying 100 requests in flight
    alone = size_llm([ttft(150)], current=4, bounds=UNBOUNDED, last=None)
    assert alone.replicas == 1
    both = size_llm([ttft(150), inflight(100)], current=4, bounds=UNBOUNDED, last=None)
    # the load is the worst ratio: 100 / (4 x 32) = 0.78 → ceil(4 x 0.78 / 0.9) = 4: holds
    assert both.replicas == 4
    assert "in-flight requests per serving replica 25 vs target 32 (ratio 0.781)" in both.reason
    assert both.signals["inflightPerReplica"] == 25.0 and both.signals["concurrencyPerReplica"] == 32
    lighter = size_llm([ttft(200), inflight(40)], current=4, bounds=UNBOUNDED, last=None)
    assert lighter.replicas == 2  # ceil(4 x (10/32) / 0.9) = 2: 40 requests at 20 each
    assert "scale down 4 -> 2" in lighter.reason


def test_a_saturated_service_scales_to_the_load_not_to_a_multiple_of_its_queueing_delay() -> None:
    # TTFT 1.2x the target; 256 in flight on 4 replicas of 32 = ratio 2 → 8
    d = size_llm([ttft(960), inflight(256)], current=4, bounds=UNBOUNDED, last=None)
    assert d.replicas == 8 and "scale up 4 -> 8" in d.reason


def test_the_load_is_per_ready_replica_while_others_start() -> None:
    # 6 wanted, 2 ready carry 192 in flight: 96 each vs 32 → 2 x 3 = 6; the starting 4 are on the way
    o = inflight(192, current=6, ready=2)
    assert o.observed == 96.0
    d = size_llm([ttft(700), o], current=6, bounds=UNBOUNDED, last=None, ready=2)
    assert d.replicas == 6 and "holding 6 while 4 start" in d.reason
    # none ready yet: per replica is the total (at least 1 serving), never a division by zero
    assert inflight(50, current=3, ready=0).observed == 50.0


@pytest.mark.parametrize(("total", "error", "words"), [
    (None, "HTTP 503", "inflightPerReplica: HTTP 503"),
    (float("nan"), None, "inflightPerReplica: the value nan is not a finite number >= 0"),
    (-3.0, None, "inflightPerReplica: the value -0.75 is not a finite number >= 0"),
])
def test_an_unreadable_load_signal_holds_the_last_decision(total: float | None, error: str | None,
                                                            words: str) -> None:
    o = load_objective(total, error, concurrency_per_replica=32, current=4, ready=4)
    d = size_llm([ttft(200), o], current=4, bounds=UNBOUNDED, last=5)
    assert d.held and d.replicas == 5 and words in d.reason


def test_load_objective_refuses_a_concurrency_below_one() -> None:
    with pytest.raises(ValueError, match="concurrencyPerReplica: must be >= 1, got 0"):
        load_objective(10.0, None, concurrency_per_replica=0, current=1, ready=1)
