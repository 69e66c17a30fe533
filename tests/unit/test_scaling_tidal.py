"""Tidal rule evaluation (``escaler.scaling.tidal``): last/next fires in each schedule's zone across
DST spring-forward and fall-back (America/New_York, Europe/Berlin, Australia/Lord_Howe's 30-minute
shift), odd offsets (Asia/Kathmandu +05:45), overlapping rules, the next transition, and schedules
that do not parse. Pure: ``now`` is an argument, no clock is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from escaler.scaling.schedule import parse_schedule
from escaler.scaling.tidal import (
    RuleSchedule,
    evaluate,
    last_fire,
    local_instant,
    next_fire,
    parse_rule_schedules,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def rule(name: str, zone: str, start: str, end: str, replicas: int) -> RuleSchedule:
    return RuleSchedule(name, parse_schedule(f"CRON_TZ={zone} {start}"),
                        parse_schedule(f"CRON_TZ={zone} {end}"), replicas)


# (zone, schedule, now, expected last fire, expected next fire) around clock changes of 2026
DST_CASES = [
    # America/New_York springs forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z): 02:30 does not
    # exist and fires once, at the change
    ("America/New_York", "30 2 * * *", utc(2026, 3, 8, 6, 59), utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0)),
    ("America/New_York", "30 2 * * *", utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)),
    # ... and falls back 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 fires at its first
    # occurrence (05:30Z) only, not again at 06:30Z
    ("America/New_York", "30 1 * * *", utc(2026, 11, 1, 5, 29),
     utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30)),
    ("America/New_York", "30 1 * * *", utc(2026, 11, 1, 6, 45),
     utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
    # Europe/Berlin springs forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z)
    ("Europe/Berlin", "30 2 * * *", utc(2026, 3, 29, 0, 59), utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0)),
    ("Europe/Berlin", "0 3 * * *", utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 1, 0)),
    # ... and falls back 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z): 02:30 fires at 00:30Z only
    ("Europe/Berlin", "30 2 * * *", utc(2026, 10, 25, 1, 45),
     utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)),
    # Australia/Lord_Howe moves 30 minutes: 2026-10-04 02:00 (+10:30) -> 02:30 (+11:00) at 15:30Z
    ("Australia/Lord_Howe", "15 2 * * *", utc(2026, 10, 3, 15, 0), utc(2026, 10, 2, 15, 45),
     utc(2026, 10, 3, 15, 30)),
    # ... and back 2026-04-05 02:00 (+11:00) -> 01:30 (+10:30) at 15:00Z: 01:45 fires at 14:45Z only
    ("Australia/Lord_Howe", "45 1 * * *", utc(2026, 4, 4, 15, 30),
     utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)),
    # Asia/Kathmandu, +05:45 all year
    ("Asia/Kathmandu", "0 9 * * *", utc(2026, 6, 1, 3, 14), utc(2026, 5, 31, 3, 15), utc(2026, 6, 1, 3, 15)),
    ("Asia/Kathmandu", "0 9 * * *", utc(2026, 6, 1, 3, 15), utc(2026, 6, 1, 3, 15), utc(2026, 6, 2, 3, 15)),
]


@pytest.mark.parametrize(("zone", "expr", "now", "last", "nxt"), DST_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]:%m%dT%H%M}" for c in DST_CASES])
def test_last_and_next_fire_across_clock_changes(zone: str, expr: str, now: datetime, last: datetime,
                                                  nxt: datetime) -> None:
    s = parse_schedule(f"CRON_TZ={zone} {expr}")
    assert last_fire(s, now) == last
    assert next_fire(s, now) == nxt


def test_a_fire_exactly_at_now_has_happened_and_sub_seconds_do_not_matter() -> None:
    s = parse_schedule("CRON_TZ=UTC 0 9 * * *")
    at = utc(2026, 5, 1, 9, 0)
    assert last_fire(s, at) == at
    assert last_fire(s, at - timedelta(microseconds=1)) == utc(2026, 4, 30, 9, 0)
    assert next_fire(s, at - timedelta(microseconds=1)) == at
    assert next_fire(s, at) == utc(2026, 5, 2, 9, 0)
    assert last_fire(s, at + timedelta(seconds=0.999)) == at


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
                                  "Asia/Kathmandu", "America/St_Johns"])
@pytest.mark.parametrize("expr", ["*/15 * * * *", "* * * * *", "30 1,2,3 * * *"],
                         ids=["15min", "1min", "hours"])
def test_fires_are_ordered_and_last_next_agree_on_dst_days(zone: str, expr: str) -> None:
    """Sweep both clock-change days of 2026: the last fire is <= now < the next fire, nothing fires in
    between (the next fire after the last one is after now), and wall times map to instants in order."""
    s = parse_schedule(f"CRON_TZ={zone} {expr}")
    tz = ZoneInfo(zone)
    for day in _change_days(tz):
        walls = [day + timedelta(minutes=m) for m in range(0, 36 * 60, 5)]
        instants = [local_instant(w, tz) for w in walls]
        assert instants == sorted(instants)
        now = day.replace(tzinfo=tz).astimezone(UTC) - timedelta(hours=3)
        end = now + timedelta(hours=30)
        while now < end:
            last, nxt = last_fire(s, now), next_fire(s, now)
            assert last is not None and nxt is not None
            assert last <= now < nxt, (now, last, nxt)
            assert next_fire(s, last) == nxt, (now, last, nxt)  # nothing fires in (last, now]
            assert last_fire(s, nxt) == nxt
            now += timedelta(minutes=13, seconds=7)


def _change_days(tz: ZoneInfo) -> list[datetime]:
    """The local midnights (naive) of the 2026 days on which ``tz``'s offset changes (if any)."""
    out = []
    day = datetime(2026, 1, 1)
    while day.year == 2026:
        a = day.replace(tzinfo=tz).utcoffset()
        b = (day + timedelta(days=1)).replace(tzinfo=tz).utcoffset()
        if a != b:
            out.append(day)
        day += timedelta(days=1)
    return out or [datetime(2026, 6, 1)]


def test_a_skipped_wall_time_fires_at_the_change_and_the_end_wins_a_tie() -> None:
    # both 02:10 and 02:50 are skipped on 2026-03-08 in New York: both fire at 07:00Z; end wins
    r = rule("gap", "America/New_York", "10 2 * * *", "50 2 * * *", 5)
    ev = evaluate([r], 1, utc(2026, 3, 8, 7, 0))
    assert ev.active_rules == () and ev.desired_replicas == 1
    # on an ordinary day the window is open for 40 minutes
    assert evaluate([r], 1, utc(2026, 3, 9, 6, 30)).active_rules == ("gap",)


def test_fall_back_a_window_in_the_repeated_hour_opens_once() -> None:
    r = rule("late", "America/New_York", "30 1 * * *", "45 1 * * *", 7)
    # first 01:30-01:45 (EDT, 05:30Z-05:45Z): active
    assert evaluate([r], 2, utc(2026, 11, 1, 5, 40)).desired_replicas == 7
    # second 01:30-01:45 (EST, 06:30Z-06:45Z): not again
    ev = evaluate([r], 2, utc(2026, 11, 1, 6, 40))
    assert ev.desired_replicas == 2 and ev.next_transition == utc(2026, 11, 2, 6, 30)


def test_odd_offset_zone_window() -> None:
    r = rule("day", "Asia/Kathmandu", "0 9 * * *", "0 17 * * *", 4)
    assert evaluate([r], 1, utc(2026, 6, 1, 3, 14, 59)).desired_replicas == 1
    at = evaluate([r], 1, utc(2026, 6, 1, 3, 15))
    assert at.desired_replicas == 4 and at.next_transition == utc(2026, 6, 1, 11, 15)
    assert evaluate([r], 1, utc(2026, 6, 1, 11, 15)).desired_replicas == 1


OFFICE = [
    rule("weekday-peak", "Asia/Shanghai", "0 9 * * 1-5", "0 19 * * 1-5", 8),
    rule("weekday-lunch", "Asia/Shanghai", "30 11 * * 1-5", "0 14 * * 1-5", 10),
    rule("overnight", "UTC", "0 22 * * *", "0 2 * * *", 3),
]


@pytest.mark.parametrize(
    ("now", "default", "desired", "active", "nxt"),
    [
        # Wed 2026-06-03, Shanghai = UTC+8
        (utc(2026, 6, 3, 0, 30), 2, 3, ("overnight",), utc(2026, 6, 3, 1, 0)),
        (utc(2026, 6, 3, 1, 0), 2, 8, ("weekday-peak", "overnight"), utc(2026, 6, 3, 2, 0)),
        (utc(2026, 6, 3, 3, 30), 2, 10, ("weekday-peak", "weekday-lunch"), utc(2026, 6, 3, 6, 0)),
        (utc(2026, 6, 3, 6, 0), 2, 8, ("weekday-peak",), utc(2026, 6, 3, 11, 0)),
        (utc(2026, 6, 3, 12, 0), 2, 2, (), utc(2026, 6, 3, 22, 0)),
        (utc(2026, 6, 3, 12, 0), None, None, (), utc(2026, 6, 3, 22, 0)),
        # Saturday: only the overnight rule
        (utc(2026, 6, 6, 4, 0), 0, 0, (), utc(2026, 6, 6, 22, 0)),
    ],
    ids=["overnight-only", "peak-and-overnight-max", "lunch-overlaps-peak-max", "lunch-ended",
         "default", "no-default-unset", "weekend"],
)
def test_overlapping_rules_max_default_and_next_transition(now: datetime, default: int | None,
                                                            desired: int | None, active: tuple[str, ...],
                                                            nxt: datetime) -> None:
    ev = evaluate(OFFICE, default, now)
    assert (ev.desired_replicas, ev.active_rules, ev.next_transition) == (desired, active, nxt)


def test_rules_in_different_zones_compare_as_instants() -> None:
    tokyo = rule("tokyo", "Asia/Tokyo", "0 9 * * *", "0 10 * * *", 5)     # 00:00Z-01:00Z
    berlin = rule("berlin", "Europe/Berlin", "30 1 * * *", "0 3 * * *", 6)  # 23:30Z-01:00Z (CEST)
    ev = evaluate([tokyo, berlin], 1, utc(2026, 6, 3, 0, 30))
    assert ev.active_rules == ("tokyo", "berlin") and ev.desired_replicas == 6
    assert ev.next_transition == utc(2026, 6, 3, 1, 0)


def test_no_rules_no_transition() -> None:
    ev = evaluate([], 3, utc(2026, 1, 1))
    assert (ev.desired_replicas, ev.active_rules, ev.next_transition) == (3, (), None)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        evaluate(OFFICE, 1, datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("start", "end", "field", "needle"),
    [
        ("CRON_TZ=Mars/Olympus 0 9 * * *", "CRON_TZ=UTC 0 10 * * *", "start",
         "unknown time zone 'Mars/Olympus'"),
        ("CRON_TZ=UTC 0 9 * * *", "CRON_TZ=UTC 0 0 30 2 *", "end", "never fires"),
        ("0 9 * * *", "CRON_TZ=UTC 0 10 * * *", "start", "must start with CRON_TZ="),
        ("CRON_TZ=UTC */0 9 * * *", "CRON_TZ=UTC 0 10 * * *", "start", "invalid cron expression"),
    ],
    ids=["unknown-zone", "never-fires", "no-zone", "bad-step"],
)
def test_invalid_schedules_name_the_rule_and_field(start: str, end: str, field: str, needle: str) -> None:
    rules, errors = parse_rule_schedules([("ok", "CRON_TZ=UTC 0 1 * * *", "CRON_TZ=UTC 0 2 * * *", 1),
                                          ("bad", start, end, 4)])
    assert [r.name for r in rules] == ["ok"]
    assert len(errors) == 1
    msg = errors[0].message
    assert msg.startswith(f"spec.rules[1] (bad).{field}: ") and needle in msg
