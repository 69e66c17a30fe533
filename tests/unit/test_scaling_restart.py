"""A restart or a leader change never scales down earlier than one leader would have (issue 8,
item 6): ``PipelineState.seed(now, current, deferred_since, last_scale_time)``.

A reconciler without in-memory state for a scaler seeds the stabilization history with one
recommendation equal to the current count at ``now``, the running deferral from
``status.deferredSince`` and the pacing of forced writes from ``status.lastScaleTime``. The
scenario of the issue (a spike, a restart 10 s later, then the load drops) is replayed against an
uninterrupted leader on the same recommendations, and a property test checks the argument of
``seed``'s docstring on random traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escaler.scaling import (
    Behavior,
    PipelineInput,
    PipelineState,
    Recommendation,
    RecommendResult,
    TargetSnapshot,
    decide,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WINDOW = 300.0


@dataclass(frozen=True)
class Sync:
    """One sync of a run: its time, the recommendation, and the count after it."""

    t: float
    rec: int
    count: int


def replay(trace: Sequence[tuple[float, int]], current: int, behavior: Behavior, *,
           restart_at: float | None = None, seeded: bool = True) -> list[Sync]:
    """Run the pipeline over ``(seconds after T0, recommendation)`` syncs, writing every decision.

    With ``restart_at``, the in-memory state is lost at that moment: the first sync after it starts
    from ``PipelineState.seed`` (or, with ``seeded=False``, from an empty history, as before)."""
    state = PipelineState()
    last_scale: float | None = None
    restarted = restart_at is None
    out: list[Sync] = []
    for t, rec in trace:
        now = T0 + t
        if not restarted and restart_at is not None and t >= restart_at:
            restarted = True
            state = PipelineState.seed(now, current, state.deferred_since, last_scale) if seeded \
                else PipelineState(deferred_since=state.deferred_since)
        d = decide(PipelineInput(now=now, current_replicas=current,
                                 recommend=RecommendResult.from_metrics(rec, evaluated=1, total=1),
                                 behavior=behavior, state=state))
        state = d.state
        if d.write:
            current, last_scale = d.desired, now
        out.append(Sync(t, rec, current))
    return out


def first_below(run: list[Sync], level: int) -> float | None:
    return next((s.t for s in run if s.count < level), None)


def test_seed_state() -> None:
    state = PipelineState.seed(T0 + 5, 7, T0 - 40, T0 - 100)
    assert state == PipelineState(history=(Recommendation(T0 + 5, 7),), deferred_since=T0 - 40,
                                  last_forced_write=T0 - 100)
    assert PipelineState.seed(T0, 0, None, None) == PipelineState(history=(Recommendation(T0, 0),))


@pytest.mark.parametrize(("now", "current"), [(float("nan"), 3), (T0, -1), (T0, True)],
                         ids=["nan-now", "negative-current", "bool-current"])
def test_seed_validates(now: float, current: int) -> None:
    with pytest.raises(ValueError, match="seed"):
        PipelineState.seed(now, current, None, None)


# a spike to 10 at t=0, the leader dies at t=10, the new leader's first sync is at t=20, when the load
# has already dropped to 2; syncs every 10 s
SPIKE = [(0.0, 10), (10.0, 10)] + [(float(t), 2) for t in range(20, 700, 10)]


def test_spike_restart_then_drop_does_not_scale_down_early() -> None:
    behavior = Behavior(min_replicas=1, max_replicas=20, scale_down_stabilization_seconds=WINDOW)
    one_leader = replay(SPIKE, 2, behavior)
    # the new leader never synced at t=10: its first sync is t=20
    restarted = replay([s for s in SPIKE if s[0] != 10.0], 2, behavior, restart_at=15.0)
    forgetful = replay([s for s in SPIKE if s[0] != 10.0], 2, behavior, restart_at=15.0, seeded=False)
    # one leader: the last 10 (t=10) leaves the 300 s window at t=310
    assert first_below(one_leader, 10) == 310.0
    # seeded at t=20: the window must elapse again from the restart — never earlier than one leader
    assert first_below(restarted, 10) == 320.0
    # what a restart did before the seed: scale down at the new leader's first sync
    assert first_below(forgetful, 10) == 20.0
    by_time = {s.t: s.count for s in one_leader}
    assert all(s.count >= by_time[s.t] for s in restarted)
    assert [s.count for s in restarted if s.t < 320] == [10] * len([s for s in restarted if s.t < 320])


def test_seeded_requeue_is_the_end_of_the_restarted_window() -> None:
    behavior = Behavior(min_replicas=1, max_replicas=20)
    d = decide(PipelineInput(now=T0 + 20, current_replicas=10,
                             recommend=RecommendResult.from_metrics(2, evaluated=1, total=1),
                             behavior=behavior, state=PipelineState.seed(T0 + 20, 10, None, None)))
    assert (d.desired, d.write, d.down_stabilized, d.requeue_after) == (10, False, True, 300.0)


def test_seed_keeps_the_running_deferral_and_paces_forced_writes() -> None:
    # status: a deferral running since t=-500, the last write at t=-50 (lastScaleTime); a guard holds
    behavior = Behavior(min_replicas=1, max_replicas=20, defer_timeout_seconds=600)
    rolling = TargetSnapshot(spec_replicas=4, rollout_in_progress=True, rollout_message="rolling")
    state = PipelineState.seed(T0, 4, T0 - 500, T0 - 50)

    def at(t: float, st_: PipelineState) -> tuple[bool, bool, float | None, PipelineState]:
        d = decide(PipelineInput(now=T0 + t, current_replicas=4,
                                 recommend=RecommendResult.from_metrics(7, evaluated=1, total=1),
                                 behavior=behavior, target=rolling, state=st_))
        return d.held, d.forced, d.requeue_after, d.state

    held, forced, requeue, state = at(0, state)
    # the deferral's own timeout (t=100) is not enough: forced writes stay paced after the last write
    assert (held, forced, requeue, state.deferred_since) == (True, False, 550.0, T0 - 500)
    held, forced, requeue, state = at(549, state)
    assert (held, forced, requeue) == (True, False, 1.0)
    held, forced, requeue, state = at(550, state)
    assert (held, forced, requeue, state.last_forced_write) == (False, True, None, T0 + 550)


@settings(max_examples=300, deadline=None)
@given(
    recs=st.lists(st.integers(min_value=0, max_value=20), min_size=2, max_size=60),
    start=st.integers(min_value=0, max_value=20),
    restart=st.integers(min_value=1, max_value=59),
    window=st.sampled_from([0.0, 60.0, 300.0]),
    down_step=st.sampled_from([None, 1, 3]),
    up_step=st.sampled_from([None, 2]),
)
def test_seeded_count_is_never_below_one_leader(recs: list[int], start: int, restart: int, window: float,
                                                 down_step: int | None, up_step: int | None) -> None:
    # syncs every 15 s; the state is lost between two syncs and the next sync seeds it
    trace = [(15.0 * i, r) for i, r in enumerate(recs)]
    behavior = Behavior(min_replicas=0, max_replicas=20, scale_down_stabilization_seconds=window,
                        scale_up_max_pods=up_step, scale_down_max_pods=down_step)
    restart_at = 15.0 * min(restart, len(recs) - 1) - 5
    one_leader = replay(trace, start, behavior)
    restarted = replay(trace, start, behavior, restart_at=restart_at)
    seeded_at = next(s for s in restarted if s.t >= restart_at)
    count_at_seed = next((s.count for s in reversed(restarted) if s.t < restart_at), start)
    for one, seeded in zip(one_leader, restarted, strict=True):
        # the one-leader count is never above the seeded one: no scale-down happens earlier
        assert seeded.count >= one.count
        # and before the window has elapsed again since the restart, nothing falls below the seed
        if window > 0 and seeded_at.t <= seeded.t < seeded_at.t + window:
            assert seeded.count >= count_at_seed
