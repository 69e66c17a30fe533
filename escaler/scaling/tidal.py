"""Tidal rule evaluation (docs/guide/tidal.md): which rules are active at ``now``, the replicas in force, and
when that can next change. Pure: no I/O, no clock read (``now`` is an argument).

Contract:

* A schedule (``escaler.scaling.schedule.CronSchedule``) *fires* at instants (UTC). A rule is
  **active** at ``now`` when its last ``start`` fire at or before ``now`` is later than its last
  ``end`` fire at or before ``now`` (a schedule that never fired counts as "long ago"). Nothing is
  stored: a restarted controller computes the same answer from the schedules and ``now``.
* ``desired_replicas`` is the highest ``replicas`` of the active rules, else ``default_replicas``,
  else None. ``active_rules`` lists the active rules' names in spec order.
* ``next_transition`` is the earliest fire of any ``start`` or ``end`` schedule strictly after
  ``now`` (None without rules): the only instants at which the answer can change.
* Instants are compared in UTC; a fire exactly at ``now`` has happened (``<=``). Fires are whole
  minutes, so sub-second parts of ``now`` never matter.

**Excluded dates** (``excludeDates``, docs/design.md#beyond-the-seeds: holidays). A rule's ``exclude_dates``
are calendar dates in the zone of its ``start`` schedule. A ``start`` fire whose *wall-clock date in that
zone* is excluded does not count: the rule's last start is its latest fire at or before ``now`` on a date
that is not excluded, its next start the earliest one after ``now`` likewise. So on an excluded
date the rule does not open; a window opened on an earlier day runs to its ``end`` fire as usual
(it is not cut at midnight), and ``end`` fires are never skipped. The date of a fire is the date of
its instant read in the zone, so a DST day is one date like any other (23 or 25 hours long; a fire
mapped to the instant of a spring-forward change carries the date of that change). Skipping walks
back (or forward) one run of consecutive excluded dates at a time (one bisection in the rule's
sorted dates), from the first instant of that date in the zone (``local_instant`` of its 00:00,
which is also right when midnight itself is skipped): at most ``len(exclude_dates) + 1`` fire
look-ups, and at most ``MAX_SKIPPED_FIRES`` runs crossed per evaluation (``TooManyExcludedFires``).

**Local time and daylight saving.** Each schedule's five fields are matched against the
*wall-clock time of its zone* (naive local datetimes, calendar arithmetic only: the expression is
compiled once into an ``escaler.scaling.cronmatch.CronMatcher``, croniter's reading of the fields
without croniter's per-call cost), and
each matching wall time becomes one UTC instant by this rule — deterministic, and the same for the
previous and the next fire:

* a wall time that exists once is that instant;
* a wall time that exists twice (fall-back: 01:30 in America/New_York on the first Sunday of
  November) fires **once**, at its **first** occurrence (the daylight-saving one, PEP 495
  ``fold=0``); the repeated hour does not fire again;
* a wall time that does not exist (spring-forward: 02:30 in America/New_York on the second Sunday of
  March; 02:15 in Australia/Lord_Howe, whose clocks move 30 minutes) fires **once, at the instant
  of the change** (03:00 EDT = 07:00 UTC): the first instant that exists after the skipped
  wall time. A schedule is therefore never silently dropped on a DST day. When a start and an end
  of one rule land on the same instant this way, the end wins (the rule is not active: its start is
  not *later* than its end).

This is what Vixie cron does for schedules in a skipped hour (run as the clocks change) and
for the repeated hour (run once), stated here for every zone, odd offsets included
(Asia/Kathmandu +05:45, Australia/Lord_Howe +10:30/+11:00). The mapping keeps fires in order:
later wall times never give earlier instants, which is what makes "last fire" and "next fire"
well defined.

Cost: a handful of matcher look-ups per schedule (microseconds each: whole days, months and years
are skipped by bisection), each fire's instant computed once per (wall time, zone) and kept
(``_INSTANT_CACHE_SIZE``); around a clock change at most the fires inside the shifted window are
walked (every minute of a repeated hour for ``* * * * *``). An evaluation of the largest spec the
API accepts (64 rules x 366 excludeDates) is a few milliseconds (docs/benchmarks.md). The answers
are those of the croniter walk this replaced (tests/unit/test_tidal_oracle.py keeps it as the
oracle).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from escaler.scaling.cronmatch import CronMatcher
from escaler.scaling.schedule import CronSchedule, parse_schedule

__all__ = [
    "MAX_SKIPPED_FIRES",
    "MAX_WALK",
    "Evaluation",
    "RuleSchedule",
    "RuleState",
    "ScheduleError",
    "TooManyExcludedFires",
    "evaluate",
    "last_fire",
    "last_start",
    "local_instant",
    "next_fire",
    "next_start",
    "parse_exclude_dates",
    "parse_rule_schedules",
]

# the most start fires on excluded dates one evaluation of a Tidal looks past (a run of consecutive
# excluded dates is one); each costs a fire look-up: this bounds what a spec can cost
MAX_SKIPPED_FIRES = 64
# upper bound on matcher steps in one last_fire/next_fire walk (a day of every-minute fires,
# beyond anything a real clock change needs); past it the schedule is treated as not firing
MAX_WALK = 1500
# the offsets in force this far around `now` bound the wall-time window of a walk
_OFFSET_HORIZON = (timedelta(0), timedelta(days=1), timedelta(days=2))
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_HOUR = timedelta(hours=1)
_UTC_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_DAY = timedelta(days=1)
# parsed schedules kept (parse_schedule is pure: one entry per distinct schedule string)
_PARSE_CACHE_SIZE = 4096
# compiled expressions kept (7-20 KB each after decades of look-ups, tracemalloc; 128 per Tidal at most)
_MATCHER_CACHE_SIZE = 1024
# excludeDates lists kept parsed, and their runs indexed (366 dates with their runs: ~75 KB)
_DATES_CACHE_SIZE = 128
# (zone, now, direction) offset bounds kept: one evaluation asks a few; a few evaluations share them
_OFFSET_CACHE_SIZE = 256
# (wall time, zone) → fire instant kept (~300 bytes each, tracemalloc): a few per schedule in use
_INSTANT_CACHE_SIZE = 16384


@dataclass(frozen=True)
class RuleSchedule:
    """A rule whose schedules parsed."""

    # the rule's name (unique in its Tidal)
    name: str
    start: CronSchedule
    end: CronSchedule
    # replicas while active; >= 0
    replicas: int
    # dates (in the start schedule's zone) on which the rule does not start; see the module docstring
    exclude_dates: frozenset[date] = frozenset()

    def run_of(self, day: date) -> tuple[date, date]:
        """The first and last date of the run of consecutive excluded dates holding ``day``
        (an excluded date): crossing a run is one bisection, however long the run."""
        ords, keys = _runs(self.exclude_dates)
        key = keys[bisect_left(ords, day.toordinal())]
        return (date.fromordinal(ords[bisect_left(keys, key)]),
                date.fromordinal(ords[bisect_right(keys, key) - 1]))


@dataclass(frozen=True)
class ScheduleError:
    """A schedule that does not parse; ``message`` names the rule and the field."""

    # index of the rule in spec.rules
    index: int
    # the rule's name
    name: str
    # "start", "end" or "excludeDates[j]"
    field: str
    # what is wrong (parse_schedule's error)
    error: str

    @property
    def message(self) -> str:
        return f"spec.rules[{self.index}] ({self.name}).{self.field}: {self.error}"


@dataclass(frozen=True)
class RuleState:
    """One rule at ``now``."""

    name: str
    active: bool
    # the last counted start after the last end (UTC; None when none: the rule is not active), and
    # the last end fire at or before now (None when it never fired)
    last_start: datetime | None
    last_end: datetime | None
    replicas: int


@dataclass(frozen=True)
class Evaluation:
    """The state of a Tidal's rules at one instant."""

    # highest replicas of the active rules, else the default, else None
    desired_replicas: int | None
    # names of the active rules, in spec order
    active_rules: tuple[str, ...]
    # earliest start/end fire strictly after now (UTC); None without rules
    next_transition: datetime | None
    rules: tuple[RuleState, ...]


@lru_cache(maxsize=_MATCHER_CACHE_SIZE)
def _matcher(expression: str) -> CronMatcher:
    """The compiled matcher of a five-field expression (pure: one per distinct expression)."""
    return CronMatcher(expression)


@lru_cache(maxsize=_DATES_CACHE_SIZE)
def _runs(excluded: frozenset[date]) -> tuple[list[int], list[int]]:
    """``excluded`` as sorted ordinals, and each one's run key: ``ordinal - index`` is the same for
    every date of a run of consecutive dates (and grows from run to run), so a run's first and last
    index are two bisections of the keys."""
    ords = sorted(map(date.toordinal, excluded))
    return ords, [o - i for i, o in enumerate(ords)]


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse(text: str) -> CronSchedule | str:
    try:
        return parse_schedule(text)
    except ValueError as err:
        return str(err)


# one rule as the parser takes it: (name, start, end, replicas) or with its excludeDates strings
RuleText = tuple[str, str, str, int] | tuple[str, str, str, int, Sequence[str]]


def parse_exclude_dates(values: Sequence[str]) -> tuple[frozenset[date], list[tuple[int, str]]]:
    """The dates of ``YYYY-MM-DD`` strings, and ``(index, error)`` for each one that is not a date.
    A list parsed before (the same strings: a spec parsed again at a new resourceVersion, or one
    holiday list in every rule) gives the same frozenset object, its runs indexed once."""
    if all(isinstance(text, str) for text in values):
        dates, errors = _parse_dates(tuple(values))
        return dates, list(errors)
    return _parse_dates_uncached(values)


@lru_cache(maxsize=_DATES_CACHE_SIZE)
def _parse_dates(values: tuple[str, ...]) -> tuple[frozenset[date], tuple[tuple[int, str], ...]]:
    dates, errors = _parse_dates_uncached(values)
    return dates, tuple(errors)


def _parse_dates_uncached(values: Sequence[str]) -> tuple[frozenset[date], list[tuple[int, str]]]:
    try:  # every one a date (what the API admits): one pass, no per-date checks
        if all(isinstance(text, str) and len(text) == 10 for text in values):
            return frozenset(map(date.fromisoformat, values)), []
    except ValueError:
        pass  # one is not: the loop below names it
    dates: set[date] = set()
    errors: list[tuple[int, str]] = []
    for j, text in enumerate(values):
        try:
            if not isinstance(text, str) or len(text) != 10:
                raise ValueError
            dates.add(date.fromisoformat(text))
        except ValueError:
            errors.append((j, f"{text!r} is not a calendar date written YYYY-MM-DD"))
    return frozenset(dates), errors


def parse_rule_schedules(
    rules: Sequence[RuleText],
) -> tuple[list[RuleSchedule], list[ScheduleError]]:
    """Parse ``(name, start, end, replicas[, excludeDates])`` rules: the parsed rules and every error
    (a schedule that does not parse, a date that is not one)."""
    parsed: list[RuleSchedule] = []
    errors: list[ScheduleError] = []
    for i, rule in enumerate(rules):
        name, start, end, replicas = rule[0], rule[1], rule[2], rule[3]
        s, e = _parse(start), _parse(end)
        if isinstance(s, str):
            errors.append(ScheduleError(i, name, "start", s))
        if isinstance(e, str):
            errors.append(ScheduleError(i, name, "end", e))
        excluded, bad = parse_exclude_dates(rule[4] if len(rule) > 4 else ())
        errors.extend(ScheduleError(i, name, f"excludeDates[{j}]", why) for j, why in bad)
        if isinstance(s, CronSchedule) and isinstance(e, CronSchedule) and not bad:
            parsed.append(RuleSchedule(name, s, e, replicas, excluded))
    return parsed, errors


def _utc(now: datetime) -> datetime:
    if now.tzinfo is UTC:
        return now
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


def _first_wall_after(now: datetime, tz: ZoneInfo, lo: datetime) -> datetime:
    """The earliest whole-minute wall time at or after ``lo`` (whole minutes) whose instant is after
    ``now``: wall times map to instants in order (module docstring), so a bisection finds it."""
    if local_instant(lo, tz) > now:
        return lo
    step = _HOUR
    hi = lo + step
    while local_instant(hi, tz) <= now:  # widen: f(lo) <= now
        lo, step = hi, step * 2
        hi = lo + step
    return _narrow(now, tz, lo, hi)[1]


def _last_wall_at_or_before(now: datetime, tz: ZoneInfo, hi: datetime) -> datetime:
    """The latest whole-minute wall time at or before ``hi`` (whole minutes) whose instant is at or
    before ``now`` (``_first_wall_after`` mirrored)."""
    if local_instant(hi, tz) <= now:
        return hi
    step = _HOUR
    lo = hi - step
    while local_instant(lo, tz) > now:  # widen: f(hi) > now
        hi, step = lo, step * 2
        lo = hi - step
    return _narrow(now, tz, lo, hi)[0]


def _narrow(now: datetime, tz: ZoneInfo, lo: datetime, hi: datetime) -> tuple[datetime, datetime]:
    """Bisect whole-minute wall times with ``f(lo) <= now < f(hi)`` (``f`` = ``local_instant``) down
    to one minute apart: the last wall time at or before ``now`` and the first after it."""
    while hi - lo > _MINUTE:
        mid = lo + _MINUTE * ((hi - lo) // _MINUTE // 2)
        if local_instant(mid, tz) > now:
            hi = mid
        else:
            lo = mid
    return lo, hi


def local_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive wall time of ``tz`` fires at (the module docstring's DST rule)."""
    return _local_instant(wall, tz)[0]


def _local_instant(wall: datetime, tz: ZoneInfo) -> tuple[datetime, bool]:
    """``local_instant``, and whether ``wall`` exists (False: skipped, the instant is the change)."""
    # PEP 495: fold=0 reads a wall time with the offset before a change, fold=1 with the one after;
    # they agree unless the wall time is repeated (fold=0's offset is the larger) or skipped (smaller)
    if wall.fold:
        wall = wall.replace(fold=0)
    before = tz.utcoffset(wall)
    if before is not None and before >= tz.utcoffset(wall.replace(fold=1)):  # type: ignore[operator]
        # exists (once, or twice: fold=0 is the first occurrence); naive arithmetic, then UTC
        return _UTC_EPOCH + (wall - before - _NAIVE_EPOCH), True
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    # In a gap: fold=0 read it with the offset before the change, so `first` is past the change,
    # and fold=1 (the offset after it) lands before the change. The change is the earliest
    # instant in between whose offset is the new one.
    after = wall.replace(tzinfo=tz, fold=1).utcoffset()
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = int(first.timestamp())
    while hi - lo > 1:  # offset(lo) is the old one, offset(hi) the new one
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC), False


@lru_cache(maxsize=_INSTANT_CACHE_SIZE)
def _dated_instant(wall: datetime, tz: ZoneInfo) -> tuple[datetime, date]:
    """``local_instant(wall, tz)`` and its date in ``tz`` (``wall``'s own date unless ``wall`` is
    skipped: the instant of the change may fall on the next day). Kept: the fires of a Tidal's
    schedules are the same wall times evaluation after evaluation."""
    instant, exists = _local_instant(wall, tz)
    # a wall time that exists reads back from its instant as itself: its date
    return instant, wall.date() if exists else instant.astimezone(tz).date()


@lru_cache(maxsize=_OFFSET_CACHE_SIZE)
def _bound_offset(tz: ZoneInfo, now: datetime, sign: int) -> timedelta:
    """The largest (``sign`` -1: looking back) or smallest (+1: ahead) UTC offset of ``tz`` over
    ``_OFFSET_HORIZON`` from ``now``; every rule of one evaluation asks the same (tz, now)."""
    out = []
    for d in _OFFSET_HORIZON:
        off = (now + sign * d).astimezone(tz).utcoffset()
        out.append(off if off is not None else timedelta(0))
    return max(out) if sign < 0 else min(out)


def _naive_second(now: datetime) -> datetime:
    """``now`` (UTC, aware) as a naive UTC datetime floored to the second (arithmetic only: cheap)."""
    naive = _NAIVE_EPOCH + (now - _UTC_EPOCH)
    return naive - timedelta(microseconds=naive.microsecond) if naive.microsecond else naive


class TooManyExcludedFires(ValueError):
    """An evaluation would look past more than ``MAX_SKIPPED_FIRES`` start fires on excluded dates;
    ``error`` names the rule it breaks, ``index``/``name`` the rule (``ScheduleError``'s fields)."""

    def __init__(self, index: int, name: str) -> None:
        self.index, self.name = index, name
        self.error = (f"more than {MAX_SKIPPED_FIRES} start fires fall on excluded dates between the rules' "
                      "last ends and now or their next transition, and an evaluation looks past at most "
                      "that many (exclude fewer dates on which the start fires, or give the rule an end "
                      "that fires more often)")
        super().__init__(f"spec.rules[{index}] ({name}).excludeDates: {self.error}")


@dataclass
class _Skips:
    """The excluded-date look-ups one evaluation has left (``MAX_SKIPPED_FIRES``)."""

    left: int = 0

    def take(self, index: int, rule: RuleSchedule) -> None:
        if self.left <= 0:
            raise TooManyExcludedFires(index, rule.name)
        self.left -= 1


class _Fires:
    """One schedule's fires: its compiled matcher (``escaler.scaling.cronmatch``) walked over the
    wall-clock minutes of its zone, each mapped to its instant (the module docstring's DST rule)."""

    __slots__ = ("matcher", "schedule", "tz")

    def __init__(self, schedule: CronSchedule) -> None:
        self.schedule = schedule
        self.tz = schedule.tzinfo
        self.matcher = _matcher(schedule.expression)

    def last_dated(self, now: datetime) -> tuple[datetime, date] | None:
        """The latest fire at or before ``now`` (UTC) with its date in the zone, or None."""
        now = _utc(now)
        tz, prev = self.tz, self.matcher.prev
        # every fire at or before now has a wall time at or before this one (see the module docstring)
        wall = prev(_naive_second(now) + _bound_offset(tz, now, -1))
        for step in range(MAX_WALK):
            if wall is None:
                return None
            fire = _dated_instant(wall, tz)
            if fire[0] <= now:
                return fire
            # past a clock change, the wall times between map after now: skip them by bisection
            # rather than walk every fire (a minute schedule in a repeated hour: up to 60 steps)
            wall = prev(_last_wall_at_or_before(now, tz, wall - _MINUTE) if step else wall - _MINUTE)
        return None

    def next_dated(self, now: datetime) -> tuple[datetime, date] | None:
        """The earliest fire strictly after ``now`` (UTC) with its date in the zone, or None."""
        now = _utc(now)
        tz, nxt = self.tz, self.matcher.next
        # every fire after now has a wall time at or after this one (see the module docstring)
        wall = nxt(_naive_second(now) + _bound_offset(tz, now, +1))
        for step in range(MAX_WALK):
            if wall is None:
                return None
            fire = _dated_instant(wall, tz)
            if fire[0] > now:
                return fire
            wall = nxt(_first_wall_after(now, tz, wall + _MINUTE) if step else wall + _MINUTE)
        return None

    def last(self, now: datetime) -> datetime | None:
        """The latest fire at or before ``now`` (UTC), or None when it never fired."""
        fire = self.last_dated(now)
        return None if fire is None else fire[0]

    def next(self, now: datetime) -> datetime | None:
        """The earliest fire strictly after ``now`` (UTC), or None."""
        fire = self.next_dated(now)
        return None if fire is None else fire[0]


@lru_cache(maxsize=_MATCHER_CACHE_SIZE)
def _fires_of(schedule: CronSchedule) -> _Fires:
    return _Fires(schedule)


def last_fire(schedule: CronSchedule, now: datetime) -> datetime | None:
    """The latest fire of ``schedule`` at or before ``now`` (UTC), or None when it never fired."""
    return _Fires(schedule).last(now)


def next_fire(schedule: CronSchedule, now: datetime) -> datetime | None:
    """The earliest fire of ``schedule`` strictly after ``now`` (UTC), or None."""
    return _Fires(schedule).next(now)


def _day_start(day: date, tz: ZoneInfo) -> datetime:
    """The first instant of ``day`` in ``tz`` (its 00:00, or the change instant when 00:00 is skipped)."""
    return _dated_instant(datetime(day.year, day.month, day.day), tz)[0]


def last_start(rule: RuleSchedule, now: datetime, after: datetime | None = None,
               fires: _Fires | None = None, skips: tuple[_Skips, int] | None = None) -> datetime | None:
    """The rule's latest ``start`` fire at or before ``now`` on a date it does not exclude; None when
    there is none, or none later than ``after`` (the walk stops there). ``skips`` (the evaluation's
    budget, the rule's index) is charged one per excluded run looked past."""
    f = fires if fires is not None else _Fires(rule.start)
    tz, at, excluded = rule.start.tzinfo, _utc(now), rule.exclude_dates
    for _ in range(len(excluded) + 1):
        dated = f.last_dated(at)
        if dated is None or (after is not None and dated[0] <= after):
            return None
        fire, day = dated
        if day not in excluded:
            return fire
        day = rule.run_of(day)[0]  # a run of excluded dates is crossed in one look-up
        if skips is not None:
            skips[0].take(skips[1], rule)
        at = _day_start(day, tz) - _SECOND  # the end of the day before the excluded run
    return None


def next_start(rule: RuleSchedule, now: datetime, before: datetime | None = None,
               fires: _Fires | None = None, skips: tuple[_Skips, int] | None = None) -> datetime | None:
    """The rule's earliest ``start`` fire strictly after ``now`` on a date it does not exclude; None
    when there is none, or none earlier than ``before`` (the walk stops there); ``skips`` as for
    ``last_start``."""
    f = fires if fires is not None else _Fires(rule.start)
    tz, at, excluded = rule.start.tzinfo, _utc(now), rule.exclude_dates
    for _ in range(len(excluded) + 1):
        dated = f.next_dated(at)
        if dated is None or (before is not None and dated[0] >= before):
            return None
        fire, day = dated
        if day not in excluded:
            return fire
        day = rule.run_of(day)[1]
        if skips is not None:
            skips[0].take(skips[1], rule)
        at = _day_start(day + _DAY, tz) - _SECOND  # the last second of the excluded run
    return None


def evaluate(rules: Sequence[RuleSchedule], default_replicas: int | None, now: datetime) -> Evaluation:
    """The rules' state at ``now``; see the module docstring. ``TooManyExcludedFires`` when it
    would look past more than ``MAX_SKIPPED_FIRES`` excluded start fires."""
    now = _utc(now)
    budget = _Skips(MAX_SKIPPED_FIRES)
    of = _fires_of  # one _Fires per schedule, kept across evaluations (immutable)

    states = []
    for i, r in enumerate(rules):
        ended = of(r.end).last(now)
        # a start at or before the last end does not make the rule active: the walk stops there
        started = last_start(r, now, after=ended, fires=of(r.start), skips=(budget, i))
        states.append(RuleState(r.name, started is not None, started, ended, r.replicas))
    active = [s for s in states if s.active]
    desired = max(s.replicas for s in active) if active else default_replicas
    ends = [t for r in rules if (t := of(r.end).next(now)) is not None]
    # a start later than the earliest end is not the next transition: the walk stops there
    soonest = min(ends, default=None)
    starts = [t for i, r in enumerate(rules)
              if (t := next_start(r, now, before=soonest, fires=of(r.start), skips=(budget, i))) is not None]
    nexts = ends + starts
    return Evaluation(
        desired_replicas=desired,
        active_rules=tuple(s.name for s in active),
        next_transition=min(nexts) if nexts else None,
        rules=tuple(states),
    )
