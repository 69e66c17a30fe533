"""Tidal rules' ``excludeDates`` (docs/design.md#beyond-the-seeds, holidays): the date pattern the CRD and the
webhook share is exactly the calendar, and the pure evaluation skips a rule's start on an excluded date read
in the start schedule's zone — across DST changes (America/New_York spring-forward, Europe/Berlin
fall-back), without cutting a window opened the day before, and with the next start found past a run
of excluded dates."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from escaler.api.rules import cel_matches
from escaler.api.tidal import EXCLUDE_DATE_PATTERN, TidalRule
from escaler.scaling.tidal import evaluate, last_start, next_start, parse_rule_schedules


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _rule(start: str, end: str, exclude: tuple[str, ...] = (), replicas: int = 5):  # type: ignore[no-untyped-def]
    rules, errors = parse_rule_schedules([("r", start, end, replicas, exclude)])
    assert errors == []
    return rules[0]


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def test_the_date_pattern_is_exactly_the_calendar() -> None:
    # every year-month-day combination 1896..2404 (leap rules at 1900, 2000, 2100, 2400), days 00..32
    checked = 0
    for year in range(1896, 2405):
        for month in range(0, 14):
            for day in range(0, 33):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                assert cel_matches(EXCLUDE_DATE_PATTERN, text) == _is_date(text), text
                checked += 1
    assert checked == 509 * 14 * 33
    for text in ("2026-1-05", "26-01-05", "2026-01-05 ", "0999-01-01", "2026/01/05", "2026-01-05T00:00"):
        assert not cel_matches(EXCLUDE_DATE_PATTERN, text), text


def test_the_model_refuses_a_non_date_naming_the_field() -> None:
    rule = TidalRule.model_validate({"name": "r", "start": "CRON_TZ=UTC 0 9 * * *",
                                     "end": "CRON_TZ=UTC 0 17 * * *", "replicas": 1,
                                     "excludeDates": ["2026-12-25", "2026-02-29"]})
    failing = [r for r in TidalRule.RULES if not r.check(rule)]
    assert [r.field_path for r in failing] == [".excludeDates"]


def test_a_bad_date_is_a_schedule_error_naming_its_index() -> None:
    rules, errors = parse_rule_schedules([("holiday", "CRON_TZ=UTC 0 9 * * *", "CRON_TZ=UTC 0 17 * * *", 3,
                                           ["2026-12-25", "2026-13-01"])])
    assert rules == []
    assert [e.message for e in errors] == [
        "spec.rules[0] (holiday).excludeDates[1]: '2026-13-01' is not a calendar date written YYYY-MM-DD"]


DAY = ("CRON_TZ=UTC 0 9 * * *", "CRON_TZ=UTC 0 17 * * *")


@pytest.mark.parametrize(("now", "excluded", "active"), [
    ("2026-03-10T10:00:00", (), True),
    ("2026-03-10T10:00:00", ("2026-03-10",), False),
    ("2026-03-11T10:00:00", ("2026-03-10",), True),
    ("2026-03-10T08:59:00", ("2026-03-10",), False),
    ("2026-03-10T18:00:00", ("2026-03-10",), False),
], ids=["plain", "excluded-day", "day-after", "before-start", "after-end"])
def test_an_excluded_date_does_not_start(now: str, excluded: tuple[str, ...], active: bool) -> None:
    ev = evaluate([_rule(*DAY, excluded)], None, _utc(now))
    assert ev.active_rules == (("r",) if active else ())
    assert ev.desired_replicas == (5 if active else None)


def test_a_window_opened_the_day_before_is_not_cut() -> None:
    night = _rule("CRON_TZ=UTC 0 22 * * *", "CRON_TZ=UTC 0 6 * * *", ("2026-03-10",))
    assert evaluate([night], 1, _utc("2026-03-10T02:00:00")).desired_replicas == 5  # opened 03-09 22:00
    assert evaluate([night], 1, _utc("2026-03-10T23:00:00")).desired_replicas == 1  # 03-10 22:00 skipped
    assert evaluate([night], 1, _utc("2026-03-11T23:00:00")).desired_replicas == 5


def test_the_next_start_skips_a_run_of_excluded_dates() -> None:
    rule = _rule(*DAY, ("2026-12-24", "2026-12-25", "2026-12-26"))
    assert next_start(rule, _utc("2026-12-23T12:00:00")) == _utc("2026-12-27T09:00:00")
    assert last_start(rule, _utc("2026-12-26T12:00:00")) == _utc("2026-12-23T09:00:00")
    # the next transition is the next start or end, whichever comes first
    ev = evaluate([rule], None, _utc("2026-12-23T18:00:00"))
    assert ev.next_transition == _utc("2026-12-24T17:00:00")  # an end fire still counts (a no-op)
    ev = evaluate([rule], None, _utc("2026-12-26T18:00:00"))
    assert ev.next_transition == _utc("2026-12-27T09:00:00")


def test_spring_forward_new_york_excluded_on_the_change_day() -> None:
    # 2026-03-08: 02:00 EST -> 03:00 EDT; a 02:30 start fires at the change (07:00 UTC)
    start, end = "CRON_TZ=America/New_York 30 2 * * *", "CRON_TZ=America/New_York 0 12 * * *"
    plain, skipped = _rule(start, end), _rule(start, end, ("2026-03-08",))
    at = _utc("2026-03-08T08:00:00")  # 04:00 EDT
    assert last_start(plain, at) == _utc("2026-03-08T07:00:00")
    assert evaluate([plain], None, at).active_rules == ("r",)
    assert evaluate([skipped], None, at).active_rules == ()
    assert last_start(skipped, at) == _utc("2026-03-07T07:30:00")  # 02:30 EST the day before
    assert next_start(skipped, _utc("2026-03-07T12:00:00")) == _utc("2026-03-09T06:30:00")  # 02:30 EDT


def test_fall_back_berlin_reads_the_date_in_the_zone_not_in_utc() -> None:
    # 2026-10-25: 03:00 CEST -> 02:00 CET. Local midnight of the 25th is 2026-10-24T22:00Z
    start, end = "CRON_TZ=Europe/Berlin 0 0 * * *", "CRON_TZ=Europe/Berlin 0 23 * * *"
    rule = _rule(start, end, ("2026-10-25",))
    assert last_start(rule, _utc("2026-10-24T22:30:00")) == _utc("2026-10-23T22:00:00")
    assert evaluate([rule], None, _utc("2026-10-25T12:00:00")).active_rules == ()
    # the 25th has 25 hours: the next start is the 26th's midnight CET = 23:00Z
    assert next_start(rule, _utc("2026-10-24T21:00:00")) == _utc("2026-10-25T23:00:00")
    assert evaluate([rule], None, _utc("2026-10-26T12:00:00")).active_rules == ("r",)
    # excluding the 24th (UTC date of the 25th's local midnight) does not touch the 25th's start
    other = _rule(start, end, ("2026-10-24",))
    assert last_start(other, _utc("2026-10-24T22:30:00")) == _utc("2026-10-24T22:00:00")
