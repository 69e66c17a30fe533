"""Tidal (``tidal.io/v1alpha1``): time rules → ``status.desiredReplicas``, docs/guide/tidal.md.

A Tidal never writes replicas itself; a ``StateTrigger`` ElasticScaler whose ``targetRef``
names the Tidal does. Rules: rule names are unique (CEL; also the key the reconciler reports
``activeRules`` by), replicas are >= 0 (schema minimum), and each schedule (``start``, ``end``)
passes three CEL rules, so the default install (no webhook) refuses what a pattern can see:

1. it begins with ``CRON_TZ=<zone> ``, the zone of the tz database's form: ``Area/Location``
   (up to three ``/``-separated parts, each starting with a capital: ``Asia/Shanghai``,
   ``America/Argentina/Buenos_Aires``, ``Etc/GMT+8``) or one such word (``UTC``, ``GMT``,
   ``EST5EDT``); every zone of ``zoneinfo.available_timezones()`` has that form (a unit test
   checks it) except ``localtime``, which would follow the controller's clock;
2. exactly five space-separated cron fields follow;
3. each field is ``*``, ``?``, a value, a range ``a-b``, a step ``/n`` or a comma list of those,
   with values in range: minute 0-59, hour 0-23, day-of-month 1-31 (or ``L``, ``nW``), month
   1-12 or a three-letter name, day-of-week 0-7 or a three-letter name (``n#k``, ``nL``).

and ``end`` differs from ``start``. ``excludeDates`` (docs/design.md#beyond-the-seeds: holidays) lists at most
``MAX_EXCLUDE_DATES`` calendar dates ``YYYY-MM-DD`` (``EXCLUDE_DATE_PATTERN``: a real date — month
lengths and leap years are in the pattern, so ``2026-02-30`` is refused by CEL and the webhook
alike, years 1000-9999), read in the zone of the rule's ``start`` schedule: on such a date the rule
does not *start* (``escaler.scaling.tidal`` states the DST-correct reading). What a pattern cannot
see stays in the webhook and the reconciler (``escaler.scaling.schedule``): that the zone exists
in the tz database (``Mars/Olympus`` has the right form), croniter's reading of the fields (``*/0``,
names that are not months), and a schedule that never fires (February 30). The reconciler reports those as
``Ready=False/InvalidSchedule`` naming the rule.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from escaler.api.common import KubeModel, TargetRef, Time
from escaler.api.conditions import Condition, conditions_field
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule, cel_matches

__all__ = [
    "EXCLUDE_DATE_PATTERN",
    "MAX_EXCLUDE_DATES",
    "MAX_SCHEDULE_LENGTH",
    "MAX_TIDAL_RULES",
    "SCHEDULE_FIELDS_PATTERN",
    "SCHEDULE_PATTERN",
    "SCHEDULE_PREFIX_PATTERN",
    "Tidal",
    "TidalRule",
    "TidalSpec",
    "TidalStatus",
]

# Upper bound on rules per Tidal; also bounds the CEL cost of the uniqueness rule.
MAX_TIDAL_RULES = 64
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Longest schedule string; also bounds the CEL cost of the schedule rules.
MAX_SCHEDULE_LENGTH = 256
# Upper bound on excludeDates per rule (a year of days); also bounds the CEL cost of the date rule.
MAX_EXCLUDE_DATES = 366

# A calendar date YYYY-MM-DD, years 1000-9999: 31-day months, 30-day months, February 1-28, and
# February 29 of leap years (divisible by 4, centuries only when divisible by 400).
_YEAR = "[1-9][0-9]{3}"
# ("{1}" keeps "](" out of the text: the reference renders the CEL rule in Markdown)
_LEAP_YEAR = "([1-9][0-9]{1}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26])00)"
EXCLUDE_DATE_PATTERN = (
    rf"^({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    rf"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP_YEAR}-02-29)$"
)

# The schedule patterns (CEL raw strings and Python alike, see escaler.api.rules).
_ZONE = r"[A-Z][A-Za-z0-9_+-]*(/[A-Z][A-Za-z0-9_+-]*){0,2}"
SCHEDULE_PREFIX_PATTERN = rf"^CRON_TZ={_ZONE}( |$)"
SCHEDULE_FIELDS_PATTERN = r"^CRON_TZ=[^ ]+( +[^ ]+){5} *$"


def _cron_field(value: str) -> str:
    """One cron field whose plain values match ``value``: ``*``, ``?``, a value, a range, a step, a list."""
    item = rf"(\*|\?|({value})(-({value}))?)(/[0-9]+)?"
    return rf"{item}(,{item})*"


_NAME = "[A-Za-z][A-Za-z][A-Za-z]"
_MINUTE = _cron_field("0*[1-5]?[0-9]")
_HOUR = _cron_field("0*(1?[0-9]|2[0-3])")
_DAY_OF_MONTH = _cron_field("0*([1-9]|[12][0-9]|3[01])[Ww]?|[Ll]")
_MONTH = _cron_field(f"0*([1-9]|1[0-2])|{_NAME}")
_DAY_OF_WEEK = _cron_field(f"(0*[0-7]|{_NAME})(#[1-5]|[Ll])?")
SCHEDULE_PATTERN = (
    rf"^CRON_TZ={_ZONE} +{_MINUTE} +{_HOUR} +{_DAY_OF_MONTH} +{_MONTH} +{_DAY_OF_WEEK} *$"
)
SCHEDULE_FORM = "CRON_TZ=<zone> <minute> <hour> <day-of-month> <month> <day-of-week>"


def _schedule_rules(field: str) -> tuple[Rule, ...]:
    """The three pattern rules of one schedule field (see the module docstring); each later rule
    only speaks when the earlier ones hold, so one mistake gives one message."""
    v = f"self.{field}"
    prefix = f"{v}.matches(r'{SCHEDULE_PREFIX_PATTERN}')"
    fields = f"{v}.matches(r'{SCHEDULE_FIELDS_PATTERN}')"

    def has_prefix(m: TidalRule) -> bool:
        return cel_matches(SCHEDULE_PREFIX_PATTERN, getattr(m, field))

    def has_fields(m: TidalRule) -> bool:
        return cel_matches(SCHEDULE_FIELDS_PATTERN, getattr(m, field))

    return (
        Rule(
            rule=prefix,
            message=f"{field} must begin with CRON_TZ=<zone> and a space, the zone a tz database name "
            f"such as Asia/Shanghai, America/Argentina/Buenos_Aires, Etc/GMT+8 or UTC (the form is "
            f"{SCHEDULE_FORM!r})",
            check=has_prefix,
            field_path=f".{field}",
        ),
        Rule(
            rule=f"!{prefix} || {fields}",
            message=f"{field} must have exactly 5 space-separated cron fields after the zone: <minute> "
            "<hour> <day-of-month> <month> <day-of-week>",
            check=lambda m: not has_prefix(m) or has_fields(m),
            field_path=f".{field}",
        ),
        Rule(
            rule=f"!({prefix} && {fields}) || {v}.matches(r'{SCHEDULE_PATTERN}')",
            message=f"{field} has a cron field out of range or malformed: minute 0-59, hour 0-23, "
            "day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT; each field is *, "
            "?, a value, a range a-b, a step /n, or a comma list of those",
            check=lambda m: not (has_prefix(m) and has_fields(m))
            or cel_matches(SCHEDULE_PATTERN, getattr(m, field)),
            field_path=f".{field}",
        ),
    )


class TidalRule(KubeModel):
    """A time window with its replica count. Active from a start fire until the next end fire."""

    RULES = (
        *_schedule_rules("start"),
        *_schedule_rules("end"),
        Rule(
            rule="self.end != self.start",
            message="end must differ from start (a rule that ends when it starts is never active)",
            check=lambda m: m.end != m.start,
            field_path=".end",
        ),
        Rule(
            rule=f"!has(self.excludeDates) || self.excludeDates.all(d, d.matches(r'{EXCLUDE_DATE_PATTERN}'))",
            message="excludeDates entries must be calendar dates written YYYY-MM-DD (e.g. 2026-12-25; "
            "years 1000-9999, a day that exists in its month: no 2026-02-30, 02-29 only in leap years)",
            check=lambda m: all(cel_matches(EXCLUDE_DATE_PATTERN, d) for d in m.exclude_dates),
            field_path=".excludeDates",
        ),
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="Name of the rule, unique in the Tidal (lower-case letters, digits and '-').",
    )
    start: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULE_LENGTH,
        description='Cron schedule opening the window, with its time zone: "CRON_TZ=<IANA zone> '
        '<minute> <hour> <day-of-month> <month> <day-of-week>", e.g. "CRON_TZ=Asia/Shanghai 0 9 * * '
        '1-5": minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-7 or '
        "SUN-SAT; each field *, a value, a range a-b, a step /n or a comma list. Daylight-saving "
        "changes follow the zone.",
    )
    end: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULE_LENGTH,
        description="Cron schedule closing the window, same form as start and different from it, "
        'e.g. "CRON_TZ=Asia/Shanghai 0 19 * * 1-5".',
    )
    replicas: int = Field(ge=0, description="Replicas while the rule is active.")
    exclude_dates: list[Annotated[str, Field(max_length=10)]] = Field(
        default=[],
        max_length=MAX_EXCLUDE_DATES,
        description=f"Dates (YYYY-MM-DD, at most {MAX_EXCLUDE_DATES}) on which the rule does not start, "
        "e.g. public holidays: a start fire whose date, read in the zone of the start schedule, is "
        "listed is skipped (daylight-saving days included: the date is the zone's wall-clock date). "
        "A window that started on an earlier day is not cut short; it ends at its end fire as usual.",
    )


class TidalSpec(KubeModel):
    """Desired behaviour of a Tidal."""

    RULES = (
        Rule(
            rule="self.rules.all(r, self.rules.exists_one(o, o.name == r.name))",
            message="rules[].name must be unique",
            check=lambda m: len({r.name for r in m.rules}) == len(m.rules),
            field_path=".rules",
        ),
    )

    target_ref: TargetRef = Field(
        description="The workload the schedule is for; a StateTrigger ElasticScaler follows this "
        "link from the Tidal to find what to scale."
    )
    default_replicas: int | None = Field(
        default=None,
        ge=0,
        description="status.desiredReplicas when no rule is active; when absent, desiredReplicas is "
        "left unset then (the ElasticScaler holds).",
    )
    rules: list[TidalRule] = Field(
        default=[],
        max_length=MAX_TIDAL_RULES,
        description="Time rules. A rule is active when its last start fire is later than its last "
        "end fire; with several active rules, the highest replicas wins.",
    )


class TidalStatus(KubeModel):
    """Observed state of a Tidal."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation at the last status write."
    )
    desired_replicas: int | None = Field(
        default=None,
        ge=0,
        description="The replica count in force now: the highest replicas of the active rules, else "
        "spec.defaultReplicas; absent when neither applies.",
    )
    active_rules: list[str] = Field(
        default=[], max_length=MAX_TIDAL_RULES, description="Names of the active rules."
    )
    next_transition_time: Time | None = Field(
        default=None,
        description="The next time a rule starts or ends; the controller re-evaluates exactly then.",
    )
    conditions: list[Condition] = conditions_field(
        "Ready: True when every schedule parses and the elasticscaler.io/name and "
        "elasticscaler.io/namespace labels are set; False with InvalidSchedule (naming the rule) or "
        "MissingRequiredLabels."
    )


class Tidal(KubeObject):
    """Time-of-day replica schedule, followed by a StateTrigger ElasticScaler."""

    API_VERSION = "tidal.io/v1alpha1"
    KIND = "Tidal"

    spec: TidalSpec = Field(description="Desired behaviour.")
    status: TidalStatus | None = Field(default=None, description="Observed state, written by the controller.")
