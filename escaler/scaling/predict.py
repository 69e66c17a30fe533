"""Seasonal load forecast for predictive pre-scaling (issue 16): per-slot peaks of past seasons.

A scaler that knows its load repeats (a day, a week) can order replicas a cold start *before* a
rise it has already seen, instead of a poll plus a cold start after it. This module is the
forecaster, and only that: pure, no I/O, no clock (``now`` is an argument, epoch seconds).

Model — a seasonal profile of fixed size:

* The season (``SeasonalConfig.season_seconds``, e.g. 86,400) is cut into ``slots`` equal slots
  (at most ``MAX_SLOTS``). The slot of a time ``t`` is ``floor(t / slot_seconds)`` (its *absolute*
  slot); its place in the season is that modulo ``slots``. Epoch-aligned: a daily season's slots
  start at 00:00 UTC.
* ``observe(config, state, now, value)`` records one sample of the load (what the scaler's metric
  read this poll; any non-negative number). Samples of the same absolute slot keep their peak
  (``open_peak``); when a sample falls in a later slot, the open slot's peak is folded into the
  profile: ``level = peak`` the first time that place of the season is seen, else ``level = alpha
  x peak + (1 - alpha) x level`` (an exponentially weighted average over seasons, so the profile
  follows a drifting load and forgets a one-off). A slot with no sample is left as it was: missing
  data is not zero load. A sample older than the open slot (a new leader whose clock is behind) and
  a non-finite or negative sample are ignored — they never move the forecast.
* ``forecast(config, state, now, horizon_seconds)`` is the highest level of the places of the
  season that ``[now, now + horizon]`` touches (the interval a replica ordered now takes to serve:
  the cold start plus a poll), counting only places seen in at least ``min_seasons`` seasons;
  None when there is none (no history yet: the caller does not raise anything).
* ``forecast_replicas(value, per_replica)`` turns that load into replicas with the scaler's own
  per-replica target (``ceil(value / per_replica)``), the same rule as a ``Value`` target.

State and its size bound (so it can be persisted and survive failover): ``SeasonalState`` is
``slots`` levels (a float or None) and ``slots`` season counts (capped at ``MAX_SEEN``), plus the
open slot and its peak. ``to_dict``/``from_dict`` give a JSON-able dict whose compact JSON text is
at most ``encoded_size_bound(slots)`` bytes (levels written with 6 significant digits): 48 slots
(a day in 30-minute slots) in 897 bytes, 96 (15-minute slots) in 1,713, ``MAX_SLOTS`` = 2,016 (a
week in 5-minute slots) in 34,353 — small enough for an annotation or a status field (a unit test
holds these numbers). ``from_dict`` refuses a
malformed dict naming the field and the rule (a state written for another slot count is refused:
the caller starts a new profile).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_ALPHA", "DEFAULT_MIN_SEASONS", "MAX_SEEN", "MAX_SLOTS", "SeasonalConfig", "SeasonalState",
    "encoded_size_bound", "forecast", "forecast_replicas", "observe",
]

# a week in 5-minute slots: the largest profile (bounds the persisted state)
MAX_SLOTS = 2016
# season counts stop here (they only gate min_seasons; the cap bounds their text)
MAX_SEEN = 999
# the newest season's weight in a slot's level
DEFAULT_ALPHA = 0.5
# seasons a place must have seen before it forecasts
DEFAULT_MIN_SEASONS = 1
# the encoded form's version
_VERSION = 1
# widest text of one level: 6 significant digits of a finite float >= 0 ("1.23457e+308") or null
_LEVEL_CHARS = 12
# widest text of one season count ("999") and of the open slot (an absolute slot number; epoch
# seconds / 1 s slots stays below 1e15 for millennia) and of the open peak
_SEEN_CHARS = len(str(MAX_SEEN))
_SLOT_CHARS = 20
_PEAK_CHARS = _LEVEL_CHARS


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SeasonalConfig:
    """The profile's shape and how it learns (validated)."""

    # length of the season, seconds (> 0); slots x slot_seconds
    season_seconds: float
    # places in a season, 1..MAX_SLOTS
    slots: int
    # the newest season's weight in a level, in (0, 1]
    alpha: float = DEFAULT_ALPHA
    # seasons a place must have seen before it forecasts, 1..MAX_SEEN
    min_seasons: int = DEFAULT_MIN_SEASONS

    def __post_init__(self) -> None:
        if not _number(self.season_seconds) or not self.season_seconds > 0:
            raise ValueError(f"predictive seasonSeconds: must be a finite number > 0, got "
                             f"{self.season_seconds!r}")
        if not _whole(self.slots) or not 1 <= self.slots <= MAX_SLOTS:
            raise ValueError(f"predictive slots: must be an integer in [1, {MAX_SLOTS}], got {self.slots!r}")
        if not _number(self.alpha) or not 0 < self.alpha <= 1:
            raise ValueError(f"predictive alpha: must be a number in (0, 1], got {self.alpha!r}")
        if not _whole(self.min_seasons) or not 1 <= self.min_seasons <= MAX_SEEN:
            raise ValueError(f"predictive minSeasons: must be an integer in [1, {MAX_SEEN}], got "
                             f"{self.min_seasons!r}")

    @property
    def slot_seconds(self) -> float:
        return self.season_seconds / self.slots

    def absolute_slot(self, t: float) -> int:
        return math.floor(t / self.slot_seconds)


@dataclass(frozen=True)
class SeasonalState:
    """What the forecaster keeps between polls (immutable; ``observe`` returns a new one)."""

    # per place of the season, the weighted peak load of past seasons (>= 0); None = never seen
    levels: tuple[float | None, ...]
    # per place, the seasons folded into its level, 0..MAX_SEEN (0 exactly when the level is None)
    seen: tuple[int, ...]
    # the absolute slot now being observed; None before the first sample
    open_slot: int | None = None
    # the highest sample of open_slot (>= 0; 0 when open_slot is None)
    open_peak: float = 0.0

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.seen) or not 1 <= len(self.levels) <= MAX_SLOTS:
            raise ValueError(f"predictive state: levels and seen must have the same length in [1, "
                             f"{MAX_SLOTS}], got {len(self.levels)} and {len(self.seen)}")

    @classmethod
    def empty(cls, slots: int) -> SeasonalState:
        return cls((None,) * slots, (0,) * slots)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form (see the module docstring for its size bound)."""
        return {"v": _VERSION, "slot": self.open_slot, "peak": _g(self.open_peak),
                "levels": [None if x is None else _g(x) for x in self.levels], "seen": list(self.seen)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], slots: int) -> SeasonalState:
        """Parse ``to_dict``'s form for a profile of ``slots`` places; ValueError naming the field."""
        where = "predictive state"
        if data.get("v") != _VERSION:
            raise ValueError(f"{where} v: must be {_VERSION}, got {data.get('v')!r}")
        levels, seen = data.get("levels"), data.get("seen")
        if not isinstance(levels, list) or len(levels) != slots:
            raise ValueError(f"{where} levels: must be a list of {slots} entries (one per slot), got "
                             f"{len(levels) if isinstance(levels, list) else type(levels).__name__}")
        if not isinstance(seen, list) or len(seen) != slots:
            raise ValueError(f"{where} seen: must be a list of {slots} entries (one per slot), got "
                             f"{len(seen) if isinstance(seen, list) else type(seen).__name__}")
        for i, (lv, n) in enumerate(zip(levels, seen, strict=True)):
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_SEEN:
                raise ValueError(f"{where} seen[{i}]: must be an integer in [0, {MAX_SEEN}], got {n!r}")
            if lv is None:
                if n != 0:
                    raise ValueError(f"{where} seen[{i}]: must be 0 where levels[{i}] is null, got {n}")
            elif not _number(lv) or lv < 0 or n == 0:
                raise ValueError(f"{where} levels[{i}]: must be a finite number >= 0 with seen[{i}] >= 1, "
                                 f"got {lv!r} (seen {n!r})")
        slot, peak = data.get("slot"), data.get("peak")
        if slot is not None and not _whole(slot):
            raise ValueError(f"{where} slot: must be an integer or null, got {slot!r}")
        if not isinstance(peak, int | float) or isinstance(peak, bool) or not math.isfinite(peak) or peak < 0:
            raise ValueError(f"{where} peak: must be a finite number >= 0, got {peak!r}")
        return cls(tuple(None if lv is None else float(lv) for lv in levels), tuple(seen), slot,
                   float(peak) if slot is not None else 0.0)


def _g(x: float) -> float:
    """6 significant digits: bounds the text of a level and makes the encoding stable."""
    return float(f"{x:.6g}")


def encoded_size_bound(slots: int) -> int:
    """Most bytes ``json.dumps(state.to_dict(), separators=(",", ":"))`` takes for ``slots`` places."""
    fixed = len(json.dumps({"v": _VERSION, "slot": 0, "peak": 0.0, "levels": [], "seen": []},
                           separators=(",", ":")))
    # each list entry: its text and a comma; the open slot and peak replace "0" and "0.0"
    return fixed + slots * (_LEVEL_CHARS + 1) + slots * (_SEEN_CHARS + 1) + _SLOT_CHARS + _PEAK_CHARS


def _fold(config: SeasonalConfig, state: SeasonalState) -> SeasonalState:
    """The open slot's peak folded into its place of the season."""
    if state.open_slot is None:
        return state
    i = state.open_slot % config.slots
    old, n = state.levels[i], state.seen[i]
    level = state.open_peak if old is None else config.alpha * state.open_peak + (1 - config.alpha) * old
    levels = (*state.levels[:i], _g(level), *state.levels[i + 1:])
    seen = (*state.seen[:i], min(n + 1, MAX_SEEN), *state.seen[i + 1:])
    return SeasonalState(levels, seen, None, 0.0)


def observe(config: SeasonalConfig, state: SeasonalState, now: float, value: float) -> SeasonalState:
    """``state`` after one sample of the load at ``now`` (see the module docstring)."""
    if len(state.levels) != config.slots:
        raise ValueError(f"predictive state: has {len(state.levels)} slots, the config {config.slots}")
    if not _number(now) or not _number(value) or value < 0:
        return state
    slot = config.absolute_slot(now)
    if state.open_slot is not None and slot < state.open_slot:
        return state
    if slot == state.open_slot:
        return state if value <= state.open_peak else SeasonalState(state.levels, state.seen, slot, value)
    folded = _fold(config, state)
    return SeasonalState(folded.levels, folded.seen, slot, value)


def forecast(config: SeasonalConfig, state: SeasonalState, now: float,
             horizon_seconds: float) -> float | None:
    """The highest learned load over ``[now, now + horizon_seconds]``; None without enough history."""
    if not _number(horizon_seconds) or horizon_seconds < 0:
        raise ValueError(f"predictive horizonSeconds: must be a finite number >= 0, got {horizon_seconds!r}")
    if not _number(now):
        raise ValueError(f"predictive forecast: now must be a finite number, got {now!r}")
    first, last = config.absolute_slot(now), config.absolute_slot(now + horizon_seconds)
    best: float | None = None
    for s in range(first, min(last, first + config.slots - 1) + 1):
        i = s % config.slots
        lv = state.levels[i]
        if lv is not None and state.seen[i] >= config.min_seasons and (best is None or lv > best):
            best = lv
    return best


def forecast_replicas(value: float | None, per_replica: float) -> int:
    """Replicas a forecast load needs at ``per_replica`` each (0 without a forecast)."""
    if not _number(per_replica) or not per_replica > 0:
        raise ValueError(f"predictive target: must be a finite number > 0, got {per_replica!r}")
    if value is None:
        return 0
    return max(0, math.ceil(value / per_replica - 1e-9))
