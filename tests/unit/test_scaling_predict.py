"""The seasonal forecaster (``escaler.scaling.predict``): learning per-slot peaks over seasons, the
forecast over a cold-start horizon, the bounds of its state and its persisted form. Time is plain
epoch seconds stepped by hand; nothing reads a clock."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escaler.scaling.predict import (
    MAX_SEEN,
    MAX_SLOTS,
    SeasonalConfig,
    SeasonalState,
    encoded_size_bound,
    forecast,
    forecast_replicas,
    observe,
)

DAY = 86_400.0
# 2026-01-01T00:00:00Z: a day boundary, so slot 0 of a daily season starts here
T0 = 1_767_225_600.0
# a day in 24 one-hour slots
CFG = SeasonalConfig(DAY, 24)
HOUR = 3600.0


def _day(cfg: SeasonalConfig, state: SeasonalState, start: float, per_hour: list[float]) -> SeasonalState:
    """One season observed: a sample every 10 minutes, each hour's samples rising to its value."""
    for h, peak in enumerate(per_hour):
        for k in range(6):
            state = observe(cfg, state, start + h * HOUR + k * 600.0, peak * (k + 1) / 6)
    return state


# a day that is quiet (2) except 09:00-11:00 (40) and 14:00 (70)
PROFILE = [2.0] * 24
PROFILE[9] = PROFILE[10] = 40.0
PROFILE[14] = 70.0


# ================================================================ config

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"season_seconds": 0.0, "slots": 24}, "seasonSeconds: must be a finite number > 0"),
    ({"season_seconds": math.inf, "slots": 24}, "seasonSeconds: must be a finite number > 0"),
    ({"season_seconds": DAY, "slots": 0}, f"slots: must be an integer in \\[1, {MAX_SLOTS}\\]"),
    ({"season_seconds": DAY, "slots": MAX_SLOTS + 1}, "slots: must be an integer in"),
    ({"season_seconds": DAY, "slots": True}, "slots: must be an integer in"),
    ({"season_seconds": DAY, "slots": 24, "alpha": 0.0}, "alpha: must be a number in \\(0, 1\\]"),
    ({"season_seconds": DAY, "slots": 24, "alpha": 1.5}, "alpha: must be a number in"),
    ({"season_seconds": DAY, "slots": 24, "min_seasons": 0}, "minSeasons: must be an integer in"),
], ids=["zero-season", "infinite-season", "no-slots", "too-many-slots", "bool-slots", "alpha-zero",
        "alpha-above-one", "min-seasons-zero"])
def test_a_bad_config_is_refused_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SeasonalConfig(**kwargs)


# ================================================================ learning and forecasting

def test_no_forecast_before_a_season_has_been_seen() -> None:
    state = SeasonalState.empty(24)
    for h in range(24):
        state = observe(CFG, state, T0 + h * HOUR, 50.0)
        # the hours seen so far forecast the same hours of the next day, not the rest of today
        assert forecast(CFG, state, T0 + h * HOUR, 600.0) is None
    assert state.seen == (1,) * 23 + (0,)


def test_the_next_day_forecasts_each_hours_peak_ahead_of_it() -> None:
    state = _day(CFG, SeasonalState.empty(24), T0, PROFILE)
    day2 = T0 + DAY
    state = observe(CFG, state, day2, 2.0)  # closes the last hour of day 1
    # 08:45 with a 90 s horizon sees only 08:00's place; with 20 minutes it sees 09:00's rise
    assert forecast(CFG, state, day2 + 8 * HOUR + 2700, 90.0) == 2.0
    assert forecast(CFG, state, day2 + 8 * HOUR + 2700, 1200.0) == 40.0
    assert forecast(CFG, state, day2 + 13 * HOUR + 3500, 200.0) == 70.0
    assert forecast(CFG, state, day2 + 16 * HOUR, 60.0) == 2.0


def test_a_horizon_across_the_end_of_the_season_wraps_to_its_start() -> None:
    per_hour = [2.0] * 24
    per_hour[0] = 90.0
    state = _day(CFG, SeasonalState.empty(24), T0, per_hour)
    state = observe(CFG, state, T0 + DAY, 2.0)
    assert forecast(CFG, state, T0 + DAY + 23 * HOUR + 3000, 900.0) == 90.0


def test_a_slot_keeps_its_peak_and_levels_are_weighted_over_seasons() -> None:
    cfg = SeasonalConfig(DAY, 24, alpha=0.25)
    state = SeasonalState.empty(24)
    for day, peak in enumerate([100.0, 20.0, 20.0]):
        for v in (peak / 2, peak, peak / 4):  # the peak, not the last or the mean, is kept
            state = observe(cfg, state, T0 + day * DAY + 5 * HOUR + 60, v)
        state = observe(cfg, state, T0 + day * DAY + 6 * HOUR, 0.0)
    # 100, then 0.25 x 20 + 0.75 x 100 = 80, then 0.25 x 20 + 0.75 x 80 = 65
    assert state.levels[5] == 65.0 and state.seen[5] == 3
    assert forecast(cfg, state, T0 + 3 * DAY + 5 * HOUR, 0.0) == 65.0


def test_a_slot_without_samples_keeps_what_it_learned() -> None:
    state = _day(CFG, SeasonalState.empty(24), T0, PROFILE)
    # day 2 observes only midnight, then nothing until day 3 (a gap: metrics down, leader away)
    state = observe(CFG, state, T0 + DAY, 2.0)
    state = observe(CFG, state, T0 + 2 * DAY, 2.0)
    assert state.levels[14] == 70.0 and state.seen[14] == 1
    assert forecast(CFG, state, T0 + 2 * DAY + 14 * HOUR, 60.0) == 70.0


@pytest.mark.parametrize(("now", "value"), [
    (T0 + 5 * HOUR - 1, 500.0), (T0 + 6 * HOUR, math.nan), (T0 + 6 * HOUR, math.inf),
    (T0 + 6 * HOUR, -1.0), (math.nan, 5.0),
], ids=["older-than-the-open-slot", "nan", "inf", "negative", "nan-time"])
def test_samples_that_cannot_be_load_change_nothing(now: float, value: float) -> None:
    state = observe(CFG, SeasonalState.empty(24), T0 + 5 * HOUR, 7.0)
    assert observe(CFG, state, now, value) == state


def test_min_seasons_gates_the_forecast() -> None:
    cfg = SeasonalConfig(DAY, 24, min_seasons=2)
    state = _day(cfg, SeasonalState.empty(24), T0, PROFILE)
    state = observe(cfg, state, T0 + DAY, 2.0)
    assert forecast(cfg, state, T0 + DAY + 14 * HOUR, 60.0) is None
    state = _day(cfg, state, T0 + DAY, PROFILE)
    state = observe(cfg, state, T0 + 2 * DAY, 2.0)
    assert forecast(cfg, state, T0 + 2 * DAY + 14 * HOUR, 60.0) == 70.0


def test_a_state_of_another_slot_count_is_refused() -> None:
    with pytest.raises(ValueError, match="has 12 slots, the config 24"):
        observe(CFG, SeasonalState.empty(12), T0, 1.0)


@pytest.mark.parametrize(("horizon", "message"), [(-1.0, "horizonSeconds: must be a finite number >= 0"),
                                                  (math.nan, "horizonSeconds")], ids=["negative", "nan"])
def test_a_bad_horizon_is_refused(horizon: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        forecast(CFG, SeasonalState.empty(24), T0, horizon)


@pytest.mark.parametrize(("value", "per_replica", "want"), [
    (None, 32.0, 0), (0.0, 32.0, 0), (32.0, 32.0, 1), (32.5, 32.0, 2), (100.0, 8.0, 13),
], ids=["no-forecast", "zero", "exactly-one", "just-above-one", "thirteen"])
def test_forecast_replicas(value: float | None, per_replica: float, want: int) -> None:
    assert forecast_replicas(value, per_replica) == want


def test_forecast_replicas_refuses_a_bad_target() -> None:
    with pytest.raises(ValueError, match="predictive target: must be a finite number > 0"):
        forecast_replicas(1.0, 0.0)


# ================================================================ bounded, persisted state

def test_memory_does_not_grow_with_history() -> None:
    state = SeasonalState.empty(24)
    for day in range(30):
        state = _day(CFG, state, T0 + day * DAY, PROFILE)
    assert len(state.levels) == len(state.seen) == 24
    assert max(state.seen) == 30 and state.levels[14] == 70.0


def test_season_counts_stop_at_their_cap() -> None:
    cfg = SeasonalConfig(10.0, 1)
    state = SeasonalState.empty(1)
    for k in range(MAX_SEEN + 5):
        state = observe(cfg, state, 10.0 * k, 1.0)
    assert state.seen == (MAX_SEEN,)


def test_the_documented_size_bounds() -> None:
    bounds = (encoded_size_bound(48), encoded_size_bound(96), encoded_size_bound(MAX_SLOTS))
    assert bounds == (897, 1713, 34353)


_LOADS = st.floats(min_value=0.0, max_value=1e308, allow_nan=False)
_STEPS = st.lists(st.tuples(st.floats(min_value=0.0, max_value=5 * DAY), _LOADS), max_size=60)


@settings(max_examples=150, deadline=None)
@given(slots=st.integers(1, 96), steps=_STEPS, alpha=st.floats(0.01, 1.0))
def test_any_state_round_trips_and_fits_its_bound(slots: int, steps: list[tuple[float, float]],
                                                  alpha: float) -> None:
    cfg = SeasonalConfig(DAY, slots, alpha=alpha)
    state = SeasonalState.empty(slots)
    for dt, v in sorted(steps):
        state = observe(cfg, state, T0 + dt, v)
    text = json.dumps(state.to_dict(), separators=(",", ":"))
    assert len(text.encode()) <= encoded_size_bound(slots)
    back = SeasonalState.from_dict(json.loads(text), slots)
    assert back.to_dict() == state.to_dict()
    # a new leader seeded from the persisted state forecasts what the old one would have
    for h in (0.0, 600.0, 7200.0):
        now = T0 + 6 * DAY + h
        assert forecast(cfg, back, now, 90.0) == forecast(cfg, state, now, 90.0)


@settings(max_examples=100, deadline=None)
@given(steps=_STEPS)
def test_the_forecast_never_exceeds_the_highest_sample(steps: list[tuple[float, float]]) -> None:
    state = SeasonalState.empty(24)
    for dt, v in sorted(steps):
        state = observe(CFG, state, T0 + dt, v)
    top = max((v for _, v in steps), default=0.0)
    got = forecast(CFG, state, T0 + 6 * DAY, DAY)
    assert got is None or got <= top * (1 + 1e-5)


def test_the_largest_profile_at_its_widest_fits_its_bound() -> None:
    n = MAX_SLOTS
    widest = SeasonalState(tuple([1.23456789e300] * n), tuple([MAX_SEEN] * n), -(10 ** 15), 1.23456789e300)
    text = json.dumps(widest.to_dict(), separators=(",", ":"))
    assert len(text.encode()) <= encoded_size_bound(n)


GOOD: dict[str, Any] = {"v": 1, "slot": 5, "peak": 3.0, "levels": [1.0, None], "seen": [2, 0]}


@pytest.mark.parametrize(("patch", "message"), [
    ({"v": 2}, "predictive state v: must be 1"),
    ({"levels": [1.0]}, r"levels: must be a list of 2 entries \(one per slot\), got 1"),
    ({"seen": "x"}, "seen: must be a list of 2 entries"),
    ({"seen": [2, -1]}, r"seen\[1\]: must be an integer in \[0, 999\]"),
    ({"seen": [2, 1]}, r"seen\[1\]: must be 0 where levels\[1\] is null"),
    ({"levels": [-1.0, None]}, r"levels\[0\]: must be a finite number >= 0 with seen\[0\] >= 1"),
    ({"levels": [1.0, None], "seen": [0, 0]}, r"levels\[0\]: must be a finite number >= 0"),
    ({"slot": 1.5}, "slot: must be an integer or null"),
    ({"peak": math.nan}, "peak: must be a finite number >= 0"),
], ids=["version", "short-levels", "seen-not-a-list", "negative-seen", "seen-without-level",
        "negative-level", "level-without-seen", "fractional-slot", "nan-peak"])
def test_a_malformed_persisted_state_is_refused_naming_the_field(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SeasonalState.from_dict({**GOOD, **patch}, 2)


def test_a_well_formed_persisted_state_parses() -> None:
    state = SeasonalState.from_dict(GOOD, 2)
    assert state == SeasonalState((1.0, None), (2, 0), 5, 3.0)
