"""The Tidal evaluator before issue 27 item 2 (escaler/scaling/tidal.py at fb705e9), kept verbatim
below this docstring as the oracle of tests/unit/test_tidal_oracle.py: it walks croniter over
naive wall times, one croniter step per fire. The evaluator in escaler.scaling.tidal must give the
same answers (a compiled matcher, escaler.scaling.cronmatch, in place of croniter).

ORIGINAL DOCSTRING:
Tidal rule evaluation (docs/guide/tidal.md): which rules are active at ``now``, the replicas in force, and
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
back (or forward) one excluded date at a time, from the first instant of that date in the zone
(``local_instant`` of its 00:00, which is also right when midnight itself is skipped): at most
``len(exclude_dates) + 1`` fire look-ups.

**Local time and daylight saving.** Each schedule's five fields are matched by croniter against the
*wall-clock time of its zone* (naive local datetimes: croniter does calendar arithmetic only), and
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

Cost: a handful of croniter steps per schedule; around a clock change at most the fires inside the
shifted window are walked (every minute of a repeated hour for ``* * * * *``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter

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
# excluded dates is one); each costs a croniter look-up (~0.2 ms): this bounds what a spec can cost
MAX_SKIPPED_FIRES = 64
# upper bound on croniter steps in one last_fire/next_fire walk (a day of every-minute fires,
# beyond anything a real clock change needs); past it the schedule is treated as not firing
MAX_WALK = 1500
# the offsets in force this far around `now` bound the wall-time window of a walk
_OFFSET_HORIZON = (timedelta(0), timedelta(days=1), timedelta(days=2))
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
# parsed schedules kept (parse_schedule is pure: one entry per distinct schedule string)
_PARSE_CACHE_SIZE = 4096


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


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse(text: str) -> CronSchedule | str:
    try:
        return parse_schedule(text)
    except ValueError as err:
        return str(err)


# one rule as the parser takes it: (name, start, end, replicas) or with its excludeDates strings
RuleText = tuple[str, str, str, int] | tuple[str, str, str, int, Sequence[str]]


def parse_exclude_dates(values: Sequence[str]) -> tuple[frozenset[date], list[tuple[int, str]]]:
    """The dates of ``YYYY-MM-DD`` strings, and ``(index, error)`` for each one that is not a date."""
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
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    return now.astimezone(UTC)


def _wall(instant: datetime, tz: ZoneInfo) -> datetime:
    """The naive wall-clock reading of a UTC instant in ``tz``."""
    return instant.astimezone(tz).replace(tzinfo=None)


def local_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive wall time of ``tz`` fires at (the module docstring's DST rule)."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if _wall(first, tz) == wall:
        return first  # exists (once, or twice: fold=0 is the first occurrence)
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
    return datetime.fromtimestamp(hi, UTC)


def _offsets(now: datetime, tz: ZoneInfo, sign: int) -> list[timedelta]:
    out = []
    for d in _OFFSET_HORIZON:
        off = (now + sign * d).astimezone(tz).utcoffset()
        out.append(off if off is not None else timedelta(0))
    return out


def _floor_second(t: datetime) -> datetime:
    return t.replace(microsecond=0)


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
    """One schedule's fires, looked up with one croniter repositioned for every look-up:
    constructing a croniter parses its expression again, most of a look-up's cost."""

    def __init__(self, schedule: CronSchedule) -> None:
        self.schedule = schedule
        self.tz = schedule.tzinfo
        self._it: croniter | None = None

    def _from(self, wall: datetime) -> croniter:
        if self._it is None:
            self._it = croniter(self.schedule.expression, wall)
        else:
            self._it.set_current(wall, force=True)
        return self._it

    def last(self, now: datetime) -> datetime | None:
        """The latest fire at or before ``now`` (UTC), or None when it never fired."""
        now = _utc(now)
        tz = self.tz
        # every fire at or before now has a wall time at or before this one (see the module docstring)
        top = _floor_second(now.replace(tzinfo=None) + max(_offsets(now, tz, -1)))
        try:
            it = self._from(top + _SECOND)
            for _ in range(MAX_WALK):
                instant = local_instant(it.get_prev(datetime), tz)
                if instant <= now:
                    return instant
        except Exception:  # croniter found no earlier match (a schedule that has not fired yet)
            return None
        return None

    def next(self, now: datetime) -> datetime | None:
        """The earliest fire strictly after ``now`` (UTC), or None."""
        now = _utc(now)
        tz = self.tz
        # every fire after now has a wall time at or after this one (see the module docstring)
        bottom = _floor_second(now.replace(tzinfo=None) + min(_offsets(now, tz, +1)))
        try:
            it = self._from(bottom - _SECOND)
            for _ in range(MAX_WALK):
                instant = local_instant(it.get_next(datetime), tz)
                if instant > now:
                    return instant
        except Exception:  # croniter found no later match
            return None
        return None


def last_fire(schedule: CronSchedule, now: datetime) -> datetime | None:
    """The latest fire of ``schedule`` at or before ``now`` (UTC), or None when it never fired."""
    return _Fires(schedule).last(now)


def next_fire(schedule: CronSchedule, now: datetime) -> datetime | None:
    """The earliest fire of ``schedule`` strictly after ``now`` (UTC), or None."""
    return _Fires(schedule).next(now)


def _day_start(day: date, tz: ZoneInfo) -> datetime:
    """The first instant of ``day`` in ``tz`` (its 00:00, or the change instant when 00:00 is skipped)."""
    return local_instant(datetime(day.year, day.month, day.day), tz)


def last_start(rule: RuleSchedule, now: datetime, after: datetime | None = None,
               fires: _Fires | None = None, skips: tuple[_Skips, int] | None = None) -> datetime | None:
    """The rule's latest ``start`` fire at or before ``now`` on a date it does not exclude; None when
    there is none, or none later than ``after`` (the walk stops there). ``skips`` (the evaluation's
    budget, the rule's index) is charged one per excluded run looked past."""
    f = fires if fires is not None else _Fires(rule.start)
    tz, at, excluded = rule.start.tzinfo, _utc(now), rule.exclude_dates
    for _ in range(len(excluded) + 1):
        fire = f.last(at)
        if fire is None or (after is not None and fire <= after):
            return None
        day = fire.astimezone(tz).date()
        if day not in excluded:
            return fire
        while day - _DAY in excluded:  # a run of excluded dates is crossed in one look-up
            day -= _DAY
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
        fire = f.next(at)
        if fire is None or (before is not None and fire >= before):
            return None
        day = fire.astimezone(tz).date()
        if day not in excluded:
            return fire
        while day + _DAY in excluded:
            day += _DAY
        if skips is not None:
            skips[0].take(skips[1], rule)
        at = _day_start(day + _DAY, tz) - _SECOND  # the last second of the excluded run
    return None


def evaluate(rules: Sequence[RuleSchedule], default_replicas: int | None, now: datetime) -> Evaluation:
    """The rules' state at ``now``; see the module docstring. ``TooManyExcludedFires`` when it
    would look past more than ``MAX_SKIPPED_FIRES`` excluded start fires."""
    now = _utc(now)
    fires: dict[CronSchedule, _Fires] = {}
    budget = _Skips(MAX_SKIPPED_FIRES)

    def of(schedule: CronSchedule) -> _Fires:
        return fires.setdefault(schedule, _Fires(schedule))

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
