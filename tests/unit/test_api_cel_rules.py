"""The CEL rules moved out of the webhook (issue 8, item 11) against the code that owns each rule.

Contract: a CEL rule (and its Python twin) refuses only what the owner of the rule refuses too —
``escaler.scaling.apa`` for ``algorithmConfig``, ``escaler.scaling.endpoints`` for URLs,
``escaler.scaling.schedule`` for Tidal schedules — and, where a pattern can decide it exactly (apa's
settings), refuses all of it. Where it cannot (a zone that does not exist, croniter's reading of a
field, February 30), the webhook and the reconciler still refuse with the owner's code; those cases
are listed here as accepted by CEL, so the limit is written down.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escaler.api.common import URL_RULE_PATTERN, is_positive_quantity
from escaler.api.elasticscaler import APA_CONFIG_KEYS, MetricsTrigger
from escaler.api.rules import cel_matches, validate
from escaler.api.tidal import SCHEDULE_FIELDS_PATTERN, SCHEDULE_PATTERN, SCHEDULE_PREFIX_PATTERN
from escaler.scaling.apa import CONFIG_KEYS, config_errors
from escaler.scaling.endpoints import check_endpoint_url
from escaler.scaling.schedule import parse_schedule

_METRIC = {
    "type": "External",
    "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "1"}},
}


def _apa_refuses(config: dict[str, str]) -> bool:
    trigger = MetricsTrigger.model_validate({"algorithmConfig": config, "metrics": [_METRIC]})
    return bool(validate(trigger, admission=True))


def test_apa_keys_are_the_algorithms_keys() -> None:
    assert APA_CONFIG_KEYS == CONFIG_KEYS


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tolerance", "0"),
        ("tolerance", "0.1"),
        ("tolerance", ".5"),
        ("tolerance", "0.999"),
        ("tolerance", "1"),
        ("tolerance", "2"),
        ("tolerance", "-0.1"),
        ("tolerance", "1e-3"),
        ("tolerance", "lots"),
        ("tolerance", " 0.1"),
        ("tolerance", "nan"),
        ("tolerance", "1_0"),
        ("tolerance", "500m"),
        ("scaleUpRate", "2.0"),
        ("scaleUpRate", "1"),
        ("scaleUpRate", "1.0001"),
        ("scaleUpRate", "inf"),
        ("scaleUpRate", "1e400"),
        ("scaleDownRate", "+3"),
        ("scaleDownRate", "0.5"),
        ("scaleDownRate", ""),
        ("scaleUpRatio", "3"),
    ],
    ids=lambda v: repr(v),
)
def test_apa_config_refused_exactly_when_apa_refuses_it(key: str, value: str) -> None:
    assert _apa_refuses({key: value}) == bool(config_errors({key: value}))


def test_apa_config_with_a_trailing_newline_is_refused_by_cel_only() -> None:
    """CEL's RE2 ``$`` is the end of the text; escaler.scaling.strconv's ``re.match(...$)`` also accepts
    a final newline ("0.1\\n"), which its own docstring says it should not: CEL is right here."""
    assert _apa_refuses({"tolerance": "0.1\n"})
    assert config_errors({"tolerance": "0.1\n"}) == []


@given(
    key=st.sampled_from(APA_CONFIG_KEYS),
    value=st.text(alphabet="0123456789.+-eE", max_size=8),
)
def test_apa_config_rules_agree_with_apa_on_any_number_like_text(key: str, value: str) -> None:
    assert _apa_refuses({key: value}) == bool(config_errors({key: value}))


def test_apa_rules_apply_to_apa_only() -> None:
    config = {"tolerance": "7", "x": "y"}
    plugin = MetricsTrigger.model_validate(
        {"scalingAlgorithm": "my-plugin", "algorithmConfig": config, "metrics": [_METRIC]}
    )
    assert validate(plugin, admission=True) == []


# ---------------------------------------------------------------- URLs


def _endpoints_accept(url: str) -> bool:
    try:
        check_endpoint_url(url)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("url", "cel_accepts"),
    [
        ("http://prometheus.monitoring:9090", True),
        ("https://prometheus.monitoring.svc.cluster.local/prefix?x=1", True),
        ("http://10.0.0.7:9090/x", True),
        ("http://[fd00::1]:9090", True),
        ("http://prometheus:65535", True),
        ("http://prometheus.:80/", True),
        ("http://prometheus:1", True),
        ("http://prometheus:0", False),
        ("http://prometheus:99999", False),
        ("http://prometheus:65536", False),
        ("http://:9090/x", False),
        ("http://", False),
        ("http://user:secret@slo:8080/decisions/x", False),
        ("http://token@slo:8080", False),
        ("ftp://prometheus:9090", False),
        ("prometheus:9090", False),
        ("http://prom etheus:9090", False),
        ("http://-prometheus:9090", False),
        # the owner refuses these, a pattern does not see why: the webhook keeps them
        ("http://a..b:9090", True),
        ("http://" + "a" * 64 + ":9090", True),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_url_rule_refuses_only_what_endpoints_refuses(url: str, cel_accepts: bool) -> None:
    assert cel_matches(URL_RULE_PATTERN, url) is cel_accepts
    if not cel_accepts:
        assert not _endpoints_accept(url)


# ---------------------------------------------------------------- Tidal schedules


def _cel_accepts(schedule: str) -> bool:
    return all(
        cel_matches(p, schedule) for p in (SCHEDULE_PREFIX_PATTERN, SCHEDULE_FIELDS_PATTERN, SCHEDULE_PATTERN)
    )


def _schedule_ok(schedule: str) -> bool:
    try:
        parse_schedule(schedule)
    except ValueError:
        return False
    return True


def test_every_tz_database_zone_has_the_cel_form() -> None:
    zones = sorted(zoneinfo.available_timezones() - {"localtime"})
    assert len(zones) > 300
    assert [z for z in zones if not cel_matches(SCHEDULE_PREFIX_PATTERN, f"CRON_TZ={z} 0 9 * * *")] == []


VALID_SCHEDULES = [
    "CRON_TZ=Asia/Shanghai 0 9 * * 1-5",
    "CRON_TZ=UTC 0 0 * * *",
    "CRON_TZ=Etc/GMT+8 30 23 31 12 6",
    "CRON_TZ=America/Argentina/Buenos_Aires */15 0-23/2 1,15 jan-jun/2 *",
    "CRON_TZ=America/Port-au-Prince 0 9 ? * MON-FRI",
    "CRON_TZ=EST5EDT 0 9 L * *",
    "CRON_TZ=Europe/Paris 0 9 1W * *",
    "CRON_TZ=Europe/Paris 0 9 * * fri#3",
    "CRON_TZ=Europe/Paris 0 9 * * 5#3",
    "CRON_TZ=UTC 00 09 01 01 00",
    "CRON_TZ=UTC 0 9 1-L * *",
    "CRON_TZ=UTC 0 9 * * 7",
    "CRON_TZ=UTC 0 9 * * sun-sat",
    "CRON_TZ=UTC 0 9 * * SUN,Mon",
    "CRON_TZ=UTC 5/10 * * * *",
    "CRON_TZ=UTC 0-59/5 * * * *",
    "CRON_TZ=UTC  0  9  *  *  *",
    "CRON_TZ=UTC 0 9 * * * ",
]


@pytest.mark.parametrize("schedule", VALID_SCHEDULES, ids=repr)
def test_valid_schedules_pass_cel(schedule: str) -> None:
    assert _schedule_ok(schedule)
    assert _cel_accepts(schedule)


@pytest.mark.parametrize(
    "schedule",
    [
        "0 9 * * 1-5",
        "CRON_TZ=utc 0 9 * * *",
        "CRON_TZ=../etc/passwd 0 9 * * *",
        "CRON_TZ=UTC",
        "CRON_TZ=UTC 0 9 * *",
        "CRON_TZ=UTC 0 0 9 * * *",
        "CRON_TZ=UTC @daily",
        "CRON_TZ=UTC 60 9 * * *",
        "CRON_TZ=UTC 0 24 * * *",
        "CRON_TZ=UTC 0 25 * * *",
        "CRON_TZ=UTC 0 9 0 * *",
        "CRON_TZ=UTC 0 9 32 * *",
        "CRON_TZ=UTC 0 9 * 0 *",
        "CRON_TZ=UTC 0 9 * 13 *",
        "CRON_TZ=UTC 0 9 * * 8",
        "CRON_TZ=UTC 0 9-25 * * *",
        "CRON_TZ=UTC 0 9 * * 1,8",
        "CRON_TZ=UTC 0 9,, * * *",
        "CRON_TZ=UTC 0 -9 * * *",
    ],
    ids=repr,
)
def test_cel_refuses_only_invalid_schedules(schedule: str) -> None:
    assert not _cel_accepts(schedule)
    assert not _schedule_ok(schedule)


@pytest.mark.parametrize(
    "schedule",
    [
        "CRON_TZ=localtime 0 9 * * *",  # the controller's own clock, which the zone is there to avoid
        "CRON_TZ= UTC 0 9 * * *",  # the zone right after CRON_TZ=, as the form says
        "CRON_TZ=UTC 0 9 * * 1-5\n",  # no trailing newline (a YAML block scalar's)
        "CRON_TZ=UTC\t0 9 * * *",  # fields separated by spaces
    ],
    ids=repr,
)
def test_cel_is_stricter_than_the_parser_on_purpose(schedule: str) -> None:
    """The form is exact; parse_schedule splits on any whitespace and loads any zone file."""
    assert not _cel_accepts(schedule)
    assert _schedule_ok(schedule)


@pytest.mark.parametrize(
    "schedule",
    [
        "CRON_TZ=Mars/Olympus 0 9 * * *",  # the form of a zone, not a zone: the tz database says no
        "CRON_TZ=UTC 0 9 30 2 *",  # February 30 never fires
        "CRON_TZ=UTC 0 9 */0 * *",  # a step of 0
        "CRON_TZ=UTC 0 9 * xyz *",  # three letters, not a month
    ],
    ids=repr,
)
def test_what_only_the_webhook_and_the_reconciler_refuse(schedule: str) -> None:
    assert _cel_accepts(schedule)
    assert not _schedule_ok(schedule)


# ---------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("value", "positive"),
    [
        (1, True),
        ("4", True),
        ("500m", True),
        ("1Gi", True),
        ("1n", True),
        (0, False),
        ("0", False),
        ("0.0", False),
        ("-5", False),
        ("-1m", False),
        (True, False),
        ("1e1.5", False),
        ("four", False),
        (None, False),
    ],
    ids=repr,
)
def test_positive_quantity(value: Any, positive: bool) -> None:
    assert is_positive_quantity(value) is positive
