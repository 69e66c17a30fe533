"""What one Tidal evaluation costs, whatever the spec the API server accepts (issue 27 item 2).

64 rules x 366 excludeDates made one evaluation re-parse a cron expression per excluded day
(~24,000 croniter constructions, 7.5 s of CPU on a reconcile worker). An evaluation now walks each
schedule's compiled matcher (escaler.scaling.cronmatch: no croniter after compiling), crosses a
run of excluded dates in one bisection, stops a rule's walk at its last end (or at the next
transition), and looks past at most MAX_SKIPPED_FIRES excluded fires: beyond that the Tidal is
InvalidSchedule naming the rule's excludeDates. The cost is counted in matcher look-ups here, not
timed (bench/bench_tidal_cost.py times it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import escaler.scaling.cronmatch as cronmatch
from escaler.scaling.cronmatch import CronMatcher
from escaler.scaling.tidal import MAX_SKIPPED_FIRES, TooManyExcludedFires, evaluate, parse_rule_schedules

NOW = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)


class Counted:
    look_ups = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Counted]]:
    """Counts matcher look-ups; croniter may compile (expand) but never walk."""
    prev, nxt = CronMatcher.prev, CronMatcher.next

    def counting(f: Any) -> Any:
        def wrapped(self: CronMatcher, wall: datetime) -> datetime | None:
            Counted.look_ups += 1
            out: datetime | None = f(self, wall)
            return out
        return wrapped

    class NoWalks:
        expand = staticmethod(cronmatch.croniter.expand)

        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("an evaluation walks no croniter")

    monkeypatch.setattr(CronMatcher, "prev", counting(prev))
    monkeypatch.setattr(CronMatcher, "next", counting(nxt))
    monkeypatch.setattr(cronmatch, "croniter", NoWalks)
    Counted.look_ups = 0
    yield Counted


def _days(first: date, n: int, step: int = 1) -> list[str]:
    return [(first + timedelta(days=step * k)).isoformat() for k in range(n)]


def test_the_largest_spec_costs_a_few_look_ups_per_rule(counted: type[Counted]) -> None:
    # the review's spec: 64 rules, each with 366 consecutive excluded dates around now
    days = _days(date(2026, 6, 5), 366)
    rules, errors = parse_rule_schedules(
        [(f"r{i}", f"CRON_TZ=America/New_York {i % 60} 9 * * *", "CRON_TZ=America/New_York 0 8 * * *", 3,
          days) for i in range(64)])
    assert not errors
    counted.look_ups = 0
    ev = evaluate(rules, 1, NOW)
    assert ev.desired_replicas == 1 and ev.active_rules == ()
    # a handful of matcher look-ups per rule: last end, last start, next end, next start, one skip
    assert counted.look_ups <= 64 * 6, counted.look_ups


def test_excluded_fires_past_the_budget_are_an_error_naming_the_rule() -> None:
    # a weekly start whose 366 past Mondays are all excluded and an end that fires only on Feb 29:
    # the walk back to the last end would cross 144 excluded weeks
    mondays = _days(date(2026, 11, 30), 366, step=-7)
    rules, errors = parse_rule_schedules(
        [("weekly", "CRON_TZ=Europe/Berlin 0 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *", 3, mondays)])
    assert not errors
    with pytest.raises(TooManyExcludedFires) as err:
        evaluate(rules, 1, NOW)
    assert str(err.value).startswith("spec.rules[0] (weekly).excludeDates: more than "
                                     f"{MAX_SKIPPED_FIRES} start fires fall on excluded dates")
    # the same spec with the excluded weeks inside the budget evaluates
    rules, _ = parse_rule_schedules(
        [("weekly", "CRON_TZ=Europe/Berlin 0 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *", 3,
          mondays[:MAX_SKIPPED_FIRES - 1])])
    ev = evaluate(rules, 1, NOW)
    assert ev.active_rules == ("weekly",)
    # the Monday before the excluded ones, at 09:00 in Berlin
    first_counted = date(2026, 11, 30) - timedelta(weeks=MAX_SKIPPED_FIRES - 1)
    started = ev.rules[0].last_start
    assert started is not None
    assert started.astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None) == datetime(
        first_counted.year, first_counted.month, first_counted.day, 9, 0)
