"""Tidal (``tidal.io/v1alpha1``): time rules → ``status.desiredReplicas``, SPEC §6.

A Tidal never writes replicas itself; a ``StateTrigger`` ElasticScaler whose ``targetRef``
names the Tidal does. Rules: rule names are unique (CEL; also the key the reconciler reports
``activeRules`` by), replicas are >= 0 (schema minimum). Schedules are plain strings here: the
``CRON_TZ=<zone>`` prefix and cron syntax need the tz database and a cron parser, so the
webhook refuses a bad schedule and the reconciler reports it as ``Ready=False/InvalidSchedule``
naming the rule.
"""

from __future__ import annotations

from pydantic import Field

from escaler.api.common import KubeModel, TargetRef, Time
from escaler.api.conditions import Condition, conditions_field
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule

__all__ = ["MAX_TIDAL_RULES", "Tidal", "TidalRule", "TidalSpec", "TidalStatus"]

# Upper bound on rules per Tidal; also bounds the CEL cost of the uniqueness rule.
MAX_TIDAL_RULES = 64
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class TidalRule(KubeModel):
    """A time window with its replica count. Active from a start fire until the next end fire."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="Name of the rule, unique in the Tidal (lower-case letters, digits and '-').",
    )
    start: str = Field(
        min_length=1,
        max_length=256,
        description='Cron schedule opening the window, with its time zone: "CRON_TZ=<IANA zone> '
        '<minute> <hour> <day> <month> <weekday>", e.g. "CRON_TZ=Asia/Shanghai 0 9 * * 1-5". '
        "Daylight-saving changes follow the zone.",
    )
    end: str = Field(
        min_length=1,
        max_length=256,
        description="Cron schedule closing the window, same form as start, "
        'e.g. "CRON_TZ=Asia/Shanghai 0 19 * * 1-5".',
    )
    replicas: int = Field(ge=0, description="Replicas while the rule is active.")


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
