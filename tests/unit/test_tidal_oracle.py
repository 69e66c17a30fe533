"""The Tidal evaluator gives the answers of the croniter-based one it replaced (tests/unit/tidal_oracle.py,
escaler/scaling/tidal.py at fb705e9): random rules of the Tidal dialect in zones with every kind of
clock change, instants around those changes, month ends and leap days, excluded dates in runs and
scattered, past the look-up budget included (the same rule named by the same error)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.unit.tidal_oracle as oracle
from escaler.scaling import tidal
from tests.unit.tidal_strategies import EXPRESSIONS, ZONES, instants, transitions, walls


def _answer(module: Any, rules: list[tuple[str, str, str, int, list[str]]], default: int | None,
            now: datetime) -> object:
    parsed, errors = module.parse_rule_schedules(rules)
    assert not errors
    try:
        ev = module.evaluate(parsed, default, now)
    except module.TooManyExcludedFires as err:
        return ("TooManyExcludedFires", err.index, err.name, str(err))
    return (ev.desired_replicas, ev.active_rules, ev.next_transition,
            [(s.name, s.active, s.last_start, s.last_end, s.replicas) for s in ev.rules])


def _mondays(around: date, step: int) -> list[str]:
    """366 Mondays from the week of ``around``, back (``step`` -7) or ahead (7)."""
    monday = around - timedelta(days=around.weekday())
    return sorted((monday + timedelta(days=step * k)).isoformat() for k in range(366))


@st.composite
def _excluded(draw: st.DrawFn, around: date) -> list[str]:
    """Dates within ~6 weeks of ``around``: none, scattered, runs, every day; or every other day
    for two years (past the look-up budget when the start fires often and the end rarely)."""
    kind = draw(st.sampled_from(["none", "scattered", "runs", "all", "alternate", "mondays"]))
    if kind == "none":
        return []
    if kind == "mondays":
        return _mondays(around, draw(st.sampled_from([-7, 7])))
    if kind == "alternate":
        first = around - timedelta(days=draw(st.integers(0, 732)))
        return [(first + timedelta(days=2 * k)).isoformat() for k in range(366)]
    if kind == "all":
        first = around - timedelta(days=draw(st.integers(0, 60)))
        return [(first + timedelta(days=k)).isoformat() for k in range(draw(st.integers(1, 366)))]
    offsets = draw(st.lists(st.integers(-45, 45), min_size=1, max_size=40))
    if kind == "runs":
        offsets = [o + k for o in offsets[:4] for k in range(draw(st.integers(1, 12)))]
    return sorted({(around + timedelta(days=o)).isoformat() for o in offsets})


@st.composite
def _tidal(draw: st.DrawFn) -> tuple[list[tuple[str, str, str, int, list[str]]], int | None, datetime]:
    zone = draw(st.sampled_from(ZONES))
    now = draw(instants(zone))
    today = now.astimezone(zoneinfo.ZoneInfo(zone)).date()
    rules = []
    for i in range(draw(st.integers(1, 4))):
        # sometimes a frequent start and a rare end: long walks; or a weekly start whose 366
        # Mondays are excluded: past the look-up budget
        if draw(st.integers(0, 5)) == 0:
            start, end = "0 9 * * 1", draw(st.sampled_from(["0 0 29 2 *", "0 0 1 1 *"]))
            excluded = _mondays(today, draw(st.sampled_from([-7, 7])))
        else:
            start = draw(EXPRESSIONS | st.sampled_from(["0 9 * * *", "*/7 * * * *", "0 9 * * 1"]))
            end = draw(EXPRESSIONS | st.sampled_from(["0 0 29 2 *", "0 0 1 1 *", "0 0 * 2 5#5"]))
            excluded = draw(_excluded(today))
        other = draw(st.sampled_from([zone, *ZONES[:3]]))
        rules.append((f"r{i}", f"CRON_TZ={zone} {start}", f"CRON_TZ={other} {end}",
                      draw(st.integers(0, 5)), excluded))
    return rules, draw(st.none() | st.integers(0, 3)), now


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much,
                                                                   HealthCheck.data_too_large])
@given(_tidal())
def test_the_evaluation_is_the_croniter_one(case: tuple[list[Any], int | None, datetime]) -> None:
    rules, default, now = case
    assert _answer(tidal, rules, default, now) == _answer(oracle, rules, default, now)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})),
       st.integers(1990, 2040), st.integers(-180, 180), st.data())
def test_local_instant_is_the_old_one_in_every_zone(zone: str, year: int, minutes: int,
                                                    data: st.DataObject) -> None:
    tz = zoneinfo.ZoneInfo(zone)
    changes = transitions(zone, year)
    if changes:
        # a wall time near a change: skipped, repeated or right at its edges
        at = data.draw(st.sampled_from(changes)) + timedelta(minutes=minutes)
        wall = at.astimezone(tz).replace(tzinfo=None, fold=0)
        walls_ = [wall, wall + timedelta(hours=1), wall - timedelta(hours=1),
                  wall.replace(minute=0, second=0)]
    else:
        walls_ = [data.draw(walls())]
    for w in walls_:
        assert tidal.local_instant(w, tz) == oracle.local_instant(w, tz), (zone, w)


def test_named_dst_cases_match() -> None:
    # a start in the skipped hour and an end in the repeated one, around both New York changes
    rules = [("spring", "CRON_TZ=America/New_York 30 2 * * *", "CRON_TZ=America/New_York 30 1 * * *", 2, []),
             ("leap", "CRON_TZ=Australia/Lord_Howe 15 2 29 2 *", "CRON_TZ=UTC 0 0 1 3 *", 4, []),
             ("month-end", "CRON_TZ=Europe/Dublin 0 23 L * *", "CRON_TZ=Europe/Dublin 0 1 1 * *", 3,
              ["2026-03-31", "2026-10-31"])]
    for zone in ("America/New_York", "Australia/Lord_Howe", "Europe/Dublin"):
        for change in transitions(zone, 2026):
            for minutes in range(-150, 151, 15):
                now = change + timedelta(minutes=minutes)
                assert _answer(tidal, rules, 1, now) == _answer(oracle, rules, 1, now), (zone, now)
    now = datetime(2028, 2, 28, 15, 20, tzinfo=UTC)
    for minutes in range(0, 24 * 60, 30):
        at = now + timedelta(minutes=minutes)
        assert _answer(tidal, rules, None, at) == _answer(oracle, rules, None, at), at


def test_minute_schedules_across_every_clock_change_match() -> None:
    # every wall minute of a repeated or skipped hour: the walk past the change bisects instead of
    # stepping through each fire, and must land on the same fire
    rules = [("minutes", "CRON_TZ={z} * * * * *", "CRON_TZ={z} 30 * * * *", 2, []),
             ("quarter", "CRON_TZ={z} */15 0-3 * * *", "CRON_TZ={z} 7-59/5 1,2 * * *", 3, [])]
    for zone in ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll",
                 "America/Havana", "Pacific/Apia"):
        zoned = [(n, s.format(z=zone), e.format(z=zone), r, x) for n, s, e, r, x in rules]
        for change in transitions(zone, 2026 if zone != "Pacific/Apia" else 2011):
            for minutes in range(-190, 191, 7):
                now = change + timedelta(minutes=minutes, seconds=minutes % 3 * 20)
                assert _answer(tidal, zoned, None, now) == _answer(oracle, zoned, None, now), (zone, now)
