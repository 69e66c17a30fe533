"""A cron expression compiled once into a matcher of naive wall-clock minutes (docs/guide/tidal.md schedules).

``CronMatcher(expression)`` reads the five fields with croniter's own parser (``croniter.expand``:
names, ranges, steps, ``*``/``?``, ``L``, ``nW``, ``n#k``, ``nL``, 7 = Sunday — one reading of the
syntax, the one ``escaler.scaling.schedule`` validated), then answers without croniter:

* ``prev(wall)`` — the latest matching minute at or before the naive datetime ``wall``;
* ``next(wall)`` — the earliest matching minute at or after ``wall`` (a ``wall`` with seconds
  counts from the next whole minute);

or None when there is none within ``MAX_YEARS`` calendar years of ``wall`` (croniter's
``max_years_between_matches``; every schedule the parser accepts fires far more often).

These are croniter's ``get_prev(wall + 1 s)`` and ``get_next(wall - 1 s)`` on naive datetimes for
a ``wall`` in whole seconds (tests/unit/test_cronmatch.py checks them against croniter over random
expressions and instants), with croniter's reading of the day fields (``day_or``, its default):

* day-of-month and day-of-week both restricted (neither expands to ``*``): a day matches either;
* ``n#k`` / ``nL`` in day-of-week replace the plain weekday test (the k-th / last weekday n of the
  month), and stay in force on the day-of-month side of that union too;
* ``nW`` (the weekday nearest day n, within the month, n clamped to the month's last day) replaces
  the day-of-month test, likewise on both sides of the union;
* ``L`` in day-of-month is the month's last day; days past a month's end never match.

Cost: a month's matching days depend only on the month, whether the year is a leap year and the
weekday of its 1st, so they are computed once per such kind (at most 168) and kept; a look-up
walks whole days and hours by bisection and skips whole months (and, month field permitting,
years) in one step each: a few microseconds for a schedule that fires every day, at most ~40 steps
for the rarest accepted ones (the fifth Friday of February comes every 28 years or so). Pure, no
clock, no I/O; a matcher is immutable apart from its memo of month kinds (safe to share between
threads: a race at worst computes one kind twice).
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from collections.abc import Collection
from datetime import datetime

from croniter import croniter

__all__ = ["MAX_YEARS", "CronMatcher"]

# croniter gives up after this many years without a match (its max_years_between_matches default)
MAX_YEARS = 50
# months whose matching days a matcher keeps (20 years of look-ups; cleared when full)
_MONTH_MEMO = 240
# days of each month (index 1-12) in a common year
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALL_MINUTES = tuple(range(60))
_ALL_HOURS = tuple(range(24))


def _ints(values: Collection[object], full: tuple[int, ...]) -> tuple[int, ...]:
    if "*" in values:  # croniter keeps "*" in a list ("*,7"): every value
        return full
    return tuple(sorted(v for v in values if isinstance(v, int)))


def _nearest_weekday(last: int, first_wd: int, day: int) -> int:
    """croniter's ``nW``: the Mon-Fri day nearest ``day`` (clamped to ``last``) within the month.
    ``first_wd`` is the weekday of the 1st, Monday = 0."""
    day = min(day, last)
    wd = (first_wd + day - 1) % 7
    if wd < 5:
        return day
    if wd == 5:  # Saturday: Friday before, or Monday after when the 1st is a Saturday
        return day - 1 if day > 1 else day + 2
    return day + 1 if day < last else day - 2  # Sunday: Monday after, or Friday before at month end


class CronMatcher:
    """See the module docstring."""

    __slots__ = ("_by_month", "_dom", "_dom_any", "_dom_last", "_dow", "_dow_any", "_kinds", "_months",
                 "_nearest", "_nth", "_union", "expression", "hours", "minutes", "months")

    def __init__(self, expression: str) -> None:
        expanded, nth = croniter.expand(expression)
        fields = expression.lower().split()
        # the expression, as given
        self.expression = expression
        # the matching minutes and hours, ascending
        self.minutes = _ints(expanded[0], _ALL_MINUTES)
        self.hours = _ints(expanded[1], _ALL_HOURS)
        # the matching months 1-12, ascending, and as a set
        self.months = _ints(expanded[3], tuple(range(1, 13)))
        self._months = frozenset(self.months)
        dom, dow = expanded[2], expanded[4]
        # croniter's day_or: both day fields restricted → a day matches either
        self._union = dom[0] != "*" and dow[0] != "*"
        self._dom_any = dom[0] == "*"
        self._dom = frozenset(v for v in dom if isinstance(v, int))
        self._dom_last = "l" in dom
        # nW: the single day n whose nearest weekday matches (croniter allows W on one value only)
        self._nearest = tuple(v for v in dom if isinstance(v, int)) if "w" in fields[2] else ()
        self._dow_any = dow[0] == "*"
        self._dow = frozenset(v for v in dow if isinstance(v, int))
        # n#k / nL: weekday (0 = Sunday) → the occurrences (1-5, or "l" for the last)
        self._nth: dict[int, frozenset[int | str]] = {int(k): frozenset(v) for k, v in nth.items()}
        # (month, leap, weekday of the 1st) → the matching days of such a month, ascending
        self._kinds: dict[tuple[int, bool, int], tuple[int, ...]] = {}
        # year * 12 + month - 1 → that month's matching days (a memo over _kinds; bounded)
        self._by_month: dict[int, tuple[int, ...]] = {}

    # -- days ---------------------------------------------------------------------------------

    def _days_of(self, month: int, leap: bool, first_wd: int) -> tuple[int, ...]:
        """The matching days of a month of this kind (``first_wd``: weekday of the 1st, Monday = 0)."""
        kind = (month, leap, first_wd)
        days = self._kinds.get(kind)
        if days is None:
            days = self._kinds[kind] = self._compute_days(month, leap, first_wd)
        return days

    def _compute_days(self, month: int, leap: bool, first_wd: int) -> tuple[int, ...]:
        last = 29 if month == 2 and leap else _MONTH_DAYS[month]
        every = frozenset(range(1, last + 1))

        def cron_wd(d: int) -> int:  # 0 = Sunday, as in the cron field
            return (first_wd + d) % 7  # (first_wd + d - 1 + 1) % 7: Monday 0 → Sunday 0

        nearest = frozenset(_nearest_weekday(last, first_wd, w) for w in self._nearest)
        dom = frozenset(d for d in self._dom if d <= last) | ({last} if self._dom_last else frozenset())
        nth: set[int] = set()
        for wd, which in self._nth.items():
            first = 1 + (wd - cron_wd(1)) % 7
            occurrences = range(first, last + 1, 7)
            for k in which:
                if k == "l":
                    nth.add(occurrences[-1])
                elif isinstance(k, int) and k <= len(occurrences):
                    nth.add(occurrences[k - 1])
        plain_dow = frozenset(d for d in every if cron_wd(d) in self._dow)
        w_side = nearest if self._nearest else None
        nth_side = frozenset(nth) if self._nth else None
        if self._union:
            # croniter: (dom with dow "*") or (dow with dom "*"); nW and n#k stay in force on both sides
            left = (w_side if w_side is not None else dom) & (nth_side if nth_side is not None else every)
            right = (w_side if w_side is not None else every) & (nth_side if nth_side is not None
                                                                  else plain_dow)
            days = left | right
        else:
            a = w_side if w_side is not None else (every if self._dom_any else dom)
            b = nth_side if nth_side is not None else (every if self._dow_any else plain_dow)
            days = a & b
        return tuple(sorted(days))

    def _month_days(self, year: int, month: int) -> tuple[int, ...]:
        key = year * 12 + month - 1
        days = self._by_month.get(key)
        if days is None:
            if len(self._by_month) >= _MONTH_MEMO:
                self._by_month.clear()
            days = self._by_month[key] = self._days_of(
                month, month == 2 and calendar.isleap(year), calendar.weekday(year, month, 1))
        return days

    # -- look-ups -----------------------------------------------------------------------------

    def prev(self, wall: datetime) -> datetime | None:
        """The latest matching minute at or before ``wall`` (naive), or None (module docstring)."""
        y, mo, d, h, mi = wall.year, wall.month, wall.day, wall.hour, wall.minute
        minutes, hours = self.minutes, self.hours
        if mo in self._months:
            days = self._month_days(y, mo)
            i = bisect_right(days, d)
            if i and days[i - 1] == d:
                j = bisect_right(hours, h)
                if j and hours[j - 1] == h:
                    k = bisect_right(minutes, mi)
                    if k:
                        return datetime(y, mo, d, h, minutes[k - 1])
                    j -= 1
                if j:
                    return datetime(y, mo, d, hours[j - 1], minutes[-1])
                i -= 1
            if i:
                return datetime(y, mo, days[i - 1], hours[-1], minutes[-1])
        months = self.months
        year = y
        m = bisect_left(months, mo) - 1  # index of the latest allowed month before mo in this year
        while y - year <= MAX_YEARS:
            if m < 0:
                year -= 1
                m = len(months) - 1
                continue
            days = self._month_days(year, months[m])
            if days:
                return datetime(year, months[m], days[-1], hours[-1], minutes[-1])
            m -= 1
        return None

    def next(self, wall: datetime) -> datetime | None:
        """The earliest matching minute at or after ``wall`` (naive), or None (module docstring)."""
        y, mo, d, h, mi = wall.year, wall.month, wall.day, wall.hour, wall.minute
        if wall.second or wall.microsecond:
            mi += 1  # the next whole minute; carried below when it is 60
        minutes, hours = self.minutes, self.hours
        if mo in self._months:
            days = self._month_days(y, mo)
            i = bisect_left(days, d)
            if i < len(days) and days[i] == d:
                j = bisect_left(hours, h)
                if j < len(hours) and hours[j] == h:
                    k = bisect_left(minutes, mi)
                    if k < len(minutes):
                        return datetime(y, mo, d, h, minutes[k])
                    j += 1
                if j < len(hours):
                    return datetime(y, mo, d, hours[j], minutes[0])
                i += 1
            if i < len(days):
                return datetime(y, mo, days[i], hours[0], minutes[0])
        months = self.months
        year = y
        m = bisect_right(months, mo)  # index of the earliest allowed month after mo in this year
        while year - y <= MAX_YEARS:
            if m >= len(months):
                year += 1
                m = 0
                continue
            days = self._month_days(year, months[m])
            if days:
                return datetime(year, months[m], days[0], hours[0], minutes[0])
            m += 1
        return None
