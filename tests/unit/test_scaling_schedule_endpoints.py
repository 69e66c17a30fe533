"""Tidal schedules (``CRON_TZ=<zone> <cron>``) and endpoint URLs / allowed hosts."""

from __future__ import annotations

import pytest

from escaler.scaling.endpoints import check_endpoint_url, host_allowed, parse_host_patterns
from escaler.scaling.schedule import CronSchedule, parse_schedule

GOOD_SCHEDULES = [
    ("shanghai-weekdays", "CRON_TZ=Asia/Shanghai 0 9 * * 1-5", CronSchedule("Asia/Shanghai", "0 9 * * 1-5")),
    ("utc", "CRON_TZ=UTC 30 4 * * *", CronSchedule("UTC", "30 4 * * *")),
    (
        "names",
        "CRON_TZ=Europe/Paris 0 9 * JAN-MAR MON-FRI",
        CronSchedule("Europe/Paris", "0 9 * JAN-MAR MON-FRI"),
    ),
    ("extra-spaces", "CRON_TZ=UTC  0  9 * *  *", CronSchedule("UTC", "0 9 * * *")),
    ("etc-offset-zone", "CRON_TZ=Etc/GMT+8 */15 * * * *", CronSchedule("Etc/GMT+8", "*/15 * * * *")),
    ("leap-day-fires", "CRON_TZ=UTC 0 0 29 2 *", CronSchedule("UTC", "0 0 29 2 *")),
]


@pytest.mark.parametrize(
    ("text", "parsed"), [c[1:] for c in GOOD_SCHEDULES], ids=[c[0] for c in GOOD_SCHEDULES]
)
def test_good_schedules(text: str, parsed: CronSchedule) -> None:
    assert parse_schedule(text) == parsed
    assert str(parsed).startswith("CRON_TZ=")
    assert parsed.tzinfo.key == parsed.zone


BAD_SCHEDULES = [
    ("no-prefix", "0 9 * * 1-5", "must start with CRON_TZ="),
    ("tz-prefix", "TZ=UTC 0 9 * * *", "must start with CRON_TZ="),
    ("no-zone", "CRON_TZ= 0 9 * * *", "unknown time zone '0'"),
    ("empty-zone", "CRON_TZ=", "needs a zone"),
    ("unknown-zone", "CRON_TZ=Mars/Olympus 0 9 * * *", "unknown time zone 'Mars/Olympus'"),
    ("zone-wrong-case", "CRON_TZ=asia/shanghai 0 9 * * *", "unknown time zone 'asia/shanghai'"),
    ("zone-directory", "CRON_TZ=America 0 9 * * *", "unknown time zone 'America'"),
    ("zone-path-traversal", "CRON_TZ=../../etc/passwd 0 9 * * *", "is not an IANA zone name"),
    ("zone-absolute", "CRON_TZ=/etc/localtime 0 9 * * *", "is not an IANA zone name"),
    ("four-fields", "CRON_TZ=UTC 0 9 * *", "needs exactly 5 cron fields after the zone, got 4"),
    ("six-fields", "CRON_TZ=UTC 0 0 9 * * *", "got 6"),
    ("macro", "CRON_TZ=UTC @daily", "got 1"),
    ("minute-61", "CRON_TZ=UTC 61 9 * * *", "invalid cron expression '61 9 * * *'"),
    ("step-zero", "CRON_TZ=UTC */0 9 * * *", "invalid cron expression"),
    ("garbage", "CRON_TZ=UTC a b c d e", "invalid cron expression"),
    ("never-fires", "CRON_TZ=UTC 0 0 30 2 *", "never fires"),
    ("too-long", "CRON_TZ=UTC " + "1," * 200 + "1 * * * *", "at most 256 characters"),
    ("not-a-string", 5, "must be a string"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in BAD_SCHEDULES], ids=[c[0] for c in BAD_SCHEDULES]
)
def test_bad_schedules(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        parse_schedule(text)
    assert message in str(err.value)


GOOD_URLS = [
    ("service-port", "http://prometheus.monitoring:9090", "prometheus.monitoring"),
    ("https-path", "https://thanos.example.com/prometheus", "thanos.example.com"),
    ("ipv4", "http://10.0.0.7:9090", "10.0.0.7"),
    ("ipv6", "http://[fd00::1]:9090/", "fd00::1"),
    ("upper-scheme-host", "HTTP://Prometheus:9090", "prometheus"),
    ("query", "http://gateway.llm:8080/activity/llama?x=1", "gateway.llm"),
    (
        "fqdn-dot",
        "http://prometheus.monitoring.svc.cluster.local.:9090",
        "prometheus.monitoring.svc.cluster.local.",
    ),
]


@pytest.mark.parametrize(("url", "host"), [c[1:] for c in GOOD_URLS], ids=[c[0] for c in GOOD_URLS])
def test_good_urls(url: str, host: str) -> None:
    assert check_endpoint_url(url) == host


BAD_URLS = [
    ("empty", "", "non-empty"),
    ("not-string", None, "non-empty"),
    ("no-scheme", "prometheus:9090", "absolute URL"),
    ("relative", "/api/v1/query", "absolute URL"),
    ("ftp", "ftp://prometheus", "scheme 'ftp' is not supported"),
    ("file", "file:///etc/passwd", "scheme 'file' is not supported"),
    ("space", "http://prom etheus", "whitespace"),
    ("newline", "http://prometheus\n", "whitespace"),
    ("tab", "http://prometheus\t:9090", "whitespace"),
    ("no-host", "http://:9090", "must name a host"),
    ("empty-authority", "https://", "must name a host"),
    ("port-range", "http://prometheus:99999", "not a valid URL"),
    ("port-zero", "http://prometheus:0", "port must be in 1..65535"),
    ("port-word", "http://prometheus:http", "not a valid URL"),
    ("credentials", "http://user:pw@prometheus:9090", "must not carry credentials"),
    ("bad-host-chars", "http://prom$theus:9090", "neither a DNS name nor an IP address"),
    ("label-too-long", "http://" + "a" * 64 + ".svc", "neither a DNS name nor an IP address"),
    ("too-long", "http://p/" + "x" * 3000, "at most 2048 characters"),
]


@pytest.mark.parametrize(("url", "message"), [c[1:] for c in BAD_URLS], ids=[c[0] for c in BAD_URLS])
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        check_endpoint_url(url)
    assert message in str(err.value)


def test_host_patterns() -> None:
    patterns = parse_host_patterns(" Prometheus.Monitoring ,*.svc.cluster.local,,10.0.0.7")
    assert patterns == ("prometheus.monitoring", "*.svc.cluster.local", "10.0.0.7")
    assert host_allowed("prometheus.monitoring", patterns)
    assert host_allowed("PROM.monitoring.svc.cluster.local", patterns)
    assert host_allowed("10.0.0.7", patterns)
    assert not host_allowed("svc.cluster.local", patterns)
    assert not host_allowed("evil.example", patterns)
    assert host_allowed("anything", ())
    for bad in ("a b", "*", "foo*.example", "x/y"):
        with pytest.raises(ValueError, match="host pattern"):
            parse_host_patterns(bad)
