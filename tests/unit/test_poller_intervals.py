"""Per-scaler poll intervals (issue 16, docs/design.md#beyond-the-seeds): ``pollIntervalSeconds`` on the one
poller (one thread, one heap): each scaler is enqueued once per its own interval at its phase of that
interval, a spec value below ``--min-poll-interval`` is raised to it (and ``clamp_note`` words the Warning
event), the manager's own interval is never raised, an interval changed in the spec is picked up at
the next relist, and ``effective_interval`` is the one rule the reuse cadence of the recommenders
shares. FakeClock only."""

from __future__ import annotations

from itertools import pairwise

import pytest

from escaler.clock import FakeClock
from escaler.reconcilers.kit.poller import (
    MetricsPoller,
    clamp_note,
    effective_interval,
    phase,
    same_poll,
)
from escaler.reconcilers.kit.setup import spec_poll_interval
from escaler.runtime.types import Request

NS = "team"
FAST, SLOW, DEFAULT = Request(NS, "fast"), Request(NS, "slow"), Request(NS, "plain")


def _run(own: dict[Request, float | None], seconds: int, *, interval: float = 30.0, floor: float = 5.0,
         ) -> tuple[MetricsPoller, dict[Request, list[float]]]:
    clock = FakeClock()
    added: dict[Request, list[float]] = {}
    poller = MetricsPoller(interval, lambda: list(own), lambda r, d: added.setdefault(r, []).append(
        clock.monotonic() + d), clock, tick=1.0, interval_of=own.get, min_interval=floor)
    for _ in range(seconds):
        poller.poll_once()
        clock.step(1.0)
    return poller, added


def test_each_scaler_is_polled_at_its_own_interval_and_phase() -> None:
    _, added = _run({FAST: 6.0, SLOW: 15.0, DEFAULT: None}, 60)
    for req, every, count in ((FAST, 6.0, 10), (SLOW, 15.0, 4), (DEFAULT, 30.0, 2)):
        times = added[req]
        assert len(times) == count, f"{req.name}: {times}"
        assert all(b - a == pytest.approx(every) for a, b in pairwise(times))
        assert times[0] % every == pytest.approx(phase(req, every))


def test_a_spec_value_below_the_floor_is_raised_to_it() -> None:
    poller, added = _run({FAST: 1.0}, 30, floor=5.0)
    assert poller.interval_for(FAST) == 5.0
    assert len(added[FAST]) == 6
    note = clamp_note(1.0, 30.0, 5.0, "spec.pollIntervalSeconds")
    assert note == ("spec.pollIntervalSeconds 1 is below the manager's "
                    "--min-poll-interval 5s: polled every 5s")


# (id, spec, manager default, floor, effective, clamped)
RULES: list[tuple[str, float | None, float, float, float, bool]] = [
    ("unset-takes-the-manager-default", None, 30.0, 5.0, 30.0, False),
    ("own-value", 10.0, 30.0, 5.0, 10.0, False),
    ("longer-than-the-default", 120.0, 30.0, 5.0, 120.0, False),
    ("below-the-floor-is-raised", 2.0, 30.0, 5.0, 5.0, True),
    ("at-the-floor", 5.0, 30.0, 5.0, 5.0, False),
    ("the-default-itself-is-never-raised", None, 2.0, 5.0, 2.0, False),
    ("polling-off-stays-off", 10.0, 0.0, 5.0, 0.0, False),
]


@pytest.mark.parametrize("case", RULES, ids=[c[0] for c in RULES])
def test_effective_interval(case: tuple[str, float | None, float, float, float, bool]) -> None:
    _, spec, default, floor, effective, clamped = case
    assert effective_interval(spec, default, floor) == effective
    assert (clamp_note(spec, default, floor, "x") is not None) == clamped


def test_a_changed_interval_is_picked_up_at_the_next_relist() -> None:
    clock = FakeClock()
    own: dict[Request, float | None] = {FAST: 20.0}
    added: list[float] = []
    poller = MetricsPoller(30.0, lambda: list(own), lambda r, d: added.append(clock.monotonic() + d), clock,
                           tick=1.0, relist=5.0, interval_of=own.get, min_interval=5.0)
    poller.poll_once()
    assert poller.interval_for(FAST) == 20.0
    own[FAST] = 6.0
    for _ in range(40):
        clock.step(1.0)
        poller.poll_once()
    assert poller.interval_for(FAST) == 6.0
    late = [t for t in added if t >= 10.0]
    assert all(b - a == pytest.approx(6.0) for a, b in pairwise(late)), added


def test_the_default_interval_is_validated_and_a_bad_floor_refused() -> None:
    with pytest.raises(ValueError, match=r"MetricsPoller\.min_interval"):
        MetricsPoller(30.0, list, lambda r, d: None, FakeClock(), min_interval=0.0)


def test_the_spec_fields_are_read_from_the_cache_objects() -> None:
    es = {"spec": {"trigger": {"type": "MetricsTrigger"}, "pollIntervalSeconds": 7}}
    assert spec_poll_interval(es) == 7.0
    assert spec_poll_interval({"spec": {"trigger": {"type": "MetricsTrigger"}}}) is None
    assert spec_poll_interval({"spec": {"pollIntervalSeconds": 9}}) == 9.0
    assert spec_poll_interval({"spec": {"pollIntervalSeconds": True}}) is None


def test_metric_collections_follow_the_scalers_own_interval() -> None:
    """The recommender's reuse cadence uses the same effective interval: at a manager default of
    30 s, a scaler with pollIntervalSeconds 6 collects afresh 7 s later, one without reuses."""
    from test_metricsync import Run, ScriptedCollector, average, es, external

    from escaler.api.elasticscaler import ElasticScaler

    plain = es(external("queue", average("4")))
    obj = plain.to_object()
    obj["spec"]["pollIntervalSeconds"] = 6
    own = ElasticScaler.parse(obj)
    for scaler, calls in ((own, 2), (plain, 1)):
        collector = ScriptedCollector(samples=[8.0])
        run = Run(collector, poll_interval=30.0)
        run.sync(scaler, 2)
        run.sync(scaler, 2, step=7.0)
        assert collector.calls == calls, scaler.spec.trigger


def test_same_poll_follows_the_due_grid_not_a_fraction_of_the_interval() -> None:
    """A reading serves until the scaler's next due time: early by up to the tick (the poller's
    shortcut) belongs to the coming due time, late belongs to the one it was for."""
    req = Request("ns", "a")
    p = phase(req, 30.0)
    due = 3000.0 + p  # a due time of req's grid
    assert same_poll(req, due, due + 28.5, 30.0)  # an event's sync shortly before the next due
    assert not same_poll(req, due, due + 29.5, 30.0)  # within the tick of it: the next due poll starts
    assert not same_poll(req, due, due + 30.0, 30.0)  # the next due poll reads
    assert not same_poll(req, due + 8.0, due + 30.0, 30.0)  # a late reading does not skip it
    assert same_poll(req, due - 0.5, due + 20.0, 30.0)  # started early: it is this due's reading
    assert not same_poll(req, due - 16.0, due + 1.0, 30.0)  # 16 s before the due time: the previous one's
    assert same_poll(req, due - 5.0, due + 1.0, 30.0)  # a reading 6 s old is not read again (a first one)
    assert same_poll(req, due, due - 1.0, 30.0)  # a clock before the reading: nothing new is due
    assert not same_poll(req, due, due + 1.0, 0.0)  # polling off: every sync reads
    short = 1000.0 + phase(req, 2.0)  # a due time of the 2 s grid: the tick is capped at 0.5 s
    assert same_poll(req, short, short + 1.4, 2.0) and not same_poll(req, short, short + 1.6, 2.0)
