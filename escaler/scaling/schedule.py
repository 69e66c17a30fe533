"""Tidal schedules (docs/guide/tidal.md): ``CRON_TZ=<IANA zone> <minute> <hour> <day-of-month> <month>
<day-of-week>``.

``parse_schedule`` is the one reading of that syntax, shared by the admission webhook (which
refuses a bad schedule) and the Tidal reconciler (which reports ``Ready=False/InvalidSchedule``).
A schedule is valid when:

* it starts with ``CRON_TZ=`` followed by a zone ``zoneinfo`` knows (``Asia/Shanghai``,
  ``UTC``, ``Etc/GMT+8``; keys are case-sensitive, as in the tz database) — a schedule without
  a zone would silently follow the controller's local time, so the zone is mandatory;
* the rest is exactly five cron fields that ``croniter`` accepts (names such as ``MON-FRI`` and
  croniter's ``L``/``#`` extensions included; macros such as ``@daily`` and six-field
  expressions are refused, because the seconds field would be read differently by other cron
  implementations);
* it fires at least once: ``0 0 30 2 *`` (February 30) is syntactically fine and never fires.

Errors are ``ValueError`` whose message states the rule, to be prefixed with the field path.
The zone database is read through ``zoneinfo`` (files installed with Python or ``tzdata``);
no clock is read — the "fires at all" check starts from a fixed instant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = ["CRON_TZ_PREFIX", "SCHEDULE_FORMAT", "CronSchedule", "parse_schedule"]

CRON_TZ_PREFIX = "CRON_TZ="
SCHEDULE_FORMAT = "CRON_TZ=<IANA zone> <minute> <hour> <day-of-month> <month> <day-of-week>"
# no schedule string needs to be longer; refusing early bounds the work on hostile input
_MAX_LENGTH = 256
_ZONE_RE = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")
# "fires at all" is checked from here (a fixed instant: no clock read)
_FIRES_FROM = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed, valid schedule."""

    # the IANA zone key, as written
    zone: str
    # the five cron fields, single-space separated
    expression: str

    @property
    def tzinfo(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def __str__(self) -> str:
        return f"{CRON_TZ_PREFIX}{self.zone} {self.expression}"


def _load_zone(zone: str) -> ZoneInfo:
    if not _ZONE_RE.match(zone) or ".." in zone:
        raise ValueError(f"time zone {zone!r} is not an IANA zone name")
    try:
        return ZoneInfo(zone)
    except (ValueError, OSError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"unknown time zone {zone!r} (an IANA zone such as Asia/Shanghai or UTC)") from None


def parse_schedule(text: str) -> CronSchedule:
    """The parsed schedule; ``ValueError`` naming the rule otherwise (see the module docstring)."""
    if not isinstance(text, str):
        raise ValueError(f"must be a string of the form {SCHEDULE_FORMAT!r}")
    if len(text) > _MAX_LENGTH:
        raise ValueError(f"must be at most {_MAX_LENGTH} characters")
    if not text.startswith(CRON_TZ_PREFIX):
        raise ValueError(f"must start with {CRON_TZ_PREFIX}<IANA zone> (the form is {SCHEDULE_FORMAT!r})")
    parts = text[len(CRON_TZ_PREFIX):].split()
    if not parts or not parts[0]:
        raise ValueError(f"{CRON_TZ_PREFIX} needs a zone (the form is {SCHEDULE_FORMAT!r})")
    zone, fields = parts[0], parts[1:]
    tz = _load_zone(zone)
    if len(fields) != 5:
        raise ValueError(f"needs exactly 5 cron fields after the zone, got {len(fields)} "
                         f"(the form is {SCHEDULE_FORMAT!r})")
    expression = " ".join(fields)
    try:
        valid = bool(croniter.is_valid(expression))
    except Exception:  # croniter raises assorted errors on odd input; any of them means invalid
        valid = False
    if not valid:
        raise ValueError(f"invalid cron expression {expression!r}")
    try:
        croniter(expression, _FIRES_FROM.astimezone(tz)).get_next(datetime)
    except Exception:
        raise ValueError(f"cron expression {expression!r} never fires") from None
    return CronSchedule(zone=zone, expression=expression)
