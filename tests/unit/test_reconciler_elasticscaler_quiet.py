"""Idle must mean idle (issue 10): a metric that wobbles inside the algorithm's tolerance writes no
status (or, with the opt-in --status-refresh-seconds, only the refreshes), while significant
changes, condition changes and decisions are written at the next poll; live values go to /metrics.
FakeClock, 30 s poll, seeded RNG."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler

from escaler.scaling.text import format_time

POLL = 30.0
# --status-refresh-seconds in the tests that opt in
REFRESH = 300.0
HOUR = 3600.0
# Value target 10 at 4 replicas: 40 is exactly on target; apa's tolerance band is ±10 %
ON_TARGET = 40.0
# the status value is the window's aggregate; Latest makes it this poll's sample (exact numbers)
LATEST = {"elasticscaler.io/metrics.aggregationType": "Latest"}


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=POLL) as hh:
        yield hh


def _setup(h: Harness, config: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
           first: float = ON_TARGET) -> None:
    h.api("deployments").create(deployment("web", 4))
    trigger = metrics_trigger(external_metric("queue", "10"), config=config)
    h.api("elasticscalers").create(scaler("es", trigger, annotations=annotations))
    h.collector.values["queue"] = first
    h.start()
    h.reconcile("es")  # the first status


def _status_writes(h: Harness) -> int:
    return h.client.count("patch", "elasticscalers/status")


def _poll(h: Harness, value: float | str) -> None:
    h.clock.step(POLL)
    h.collector.values["queue"] = value
    h.reconcile("es")


def _now_iso(h: Harness) -> str:
    return format_time(h.clock.now().timestamp())


def _noisy_hour(h: Harness) -> int:
    """An hour of ±4 % noise around the target at a 30 s poll; the status writes it made."""
    _setup(h)
    rng = random.Random(42)
    writes, events = _status_writes(h), len(h.reasons())
    for _ in range(int(HOUR / POLL)):
        _poll(h, ON_TARGET * (1 + rng.uniform(-0.04, 0.04)))
    assert len(h.reasons()) == events, "no event while nothing scales"
    assert h.replicas() == 4 and h.client.count("patch", "deployments") == 0
    return _status_writes(h) - writes


def test_a_noisy_metric_for_an_hour_writes_no_status(h: Harness) -> None:
    written = _noisy_hour(h)
    assert written == 0, f"{written} status writes in an hour of noise inside the tolerance"


def test_with_a_refresh_a_noisy_hour_writes_only_the_refreshes() -> None:
    with harness(poll_interval=POLL, status_refresh_seconds=REFRESH) as h:
        written = _noisy_hour(h)
    assert 1 <= written <= HOUR / REFRESH, f"{written} status writes in an hour (refresh every {REFRESH:g} s)"


def test_a_flat_metric_writes_nothing_and_skips_rebuilding(h: Harness,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    _setup(h)
    _poll(h, ON_TARGET)  # the first sync after the cache saw our write builds once more
    reporter = h.reconciler.reporter
    built: list[object] = []
    real = reporter.previous_status

    def counting(sync: Any) -> Any:
        built.append(sync)
        return real(sync)

    reporter.previous_status = counting  # type: ignore[method-assign]
    writes, events = _status_writes(h), len(h.reasons())
    with caplog.at_level(logging.INFO, logger="escaler"):
        for _ in range(int(HOUR / POLL)):
            _poll(h, ON_TARGET)
    assert _status_writes(h) == writes, "nothing differs: not even a refresh"
    assert built == [], "an unchanged poll neither parses nor rebuilds the status"
    assert len(h.reasons()) == events
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_a_significant_move_inside_the_band_is_written_at_the_next_poll(h: Harness) -> None:
    _setup(h, annotations=LATEST, first=36.5)  # ratio 0.91: inside the band, written first
    _poll(h, 39.5)  # an 8 % move: drift
    writes = _status_writes(h)
    assert h.status("es")["currentMetrics"][0]["value"] == 36.5
    _poll(h, 43.5)  # ratio 1.09: still inside the band, but 19 % from the value the status holds
    assert _status_writes(h) == writes + 1
    row = h.status("es")["currentMetrics"][0]
    assert (row["value"], row["recommendedReplicas"]) == (43.5, 4)
    assert h.replicas() == 4


def test_the_significance_follows_the_algorithms_tolerance(h: Harness) -> None:
    _setup(h, config={"tolerance": "0.02"}, annotations=LATEST)
    writes = _status_writes(h)
    _poll(h, ON_TARGET * 1.015)  # 1.5 %: inside a 2 % tolerance
    assert _status_writes(h) == writes
    _poll(h, ON_TARGET * 0.975)  # 2.5 % from the value held: beyond it (apa still keeps 4)
    assert _status_writes(h) == writes + 1


def test_a_condition_change_is_written_at_once_with_its_transition_time(h: Harness) -> None:
    _setup(h, annotations=LATEST)
    _poll(h, ON_TARGET * 1.02)
    writes = _status_writes(h)
    _poll(h, "connection refused")  # the read fails; the window still decides
    assert _status_writes(h) == writes + 1
    cond = h.condition("es", "MetricsPipeline")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "NoMetrics")
    assert cond["lastTransitionTime"] == _now_iso(h)
    assert "connection refused" in h.status("es")["currentMetrics"][0]["error"]
    _poll(h, ON_TARGET)  # recovered
    assert _status_writes(h) == writes + 2
    cond = h.condition("es", "MetricsPipeline")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "AllMetricsAvailable")
    assert cond["lastTransitionTime"] == _now_iso(h)


def test_an_error_whose_numbers_change_is_drift(h: Harness) -> None:
    _setup(h, annotations=LATEST)
    for _ in range(3):  # the read fails until the window is empty: DecisionUnavailable
        _poll(h, "HTTP 503 after 1.20s")
    writes = _status_writes(h)
    for i in range(5):
        _poll(h, f"HTTP 503 after {1.3 + i / 10:.2f}s")
    assert _status_writes(h) == writes, "a message that embeds a live value is drift"
    _poll(h, "connection refused")  # another error: written at once
    assert _status_writes(h) == writes + 1


def test_a_decision_is_written_at_the_next_poll(h: Harness) -> None:
    _setup(h)
    _poll(h, ON_TARGET * 1.03)
    writes = _status_writes(h)
    _poll(h, ON_TARGET * 2)  # surge: 4 -> 8
    assert h.replicas() == 8
    assert _status_writes(h) == writes + 1
    st = h.status("es")
    assert (st["currentReplicas"], st["desiredReplicas"]) == (8, 8)
    assert [(d["from"], d["to"]) for d in st["recentDecisions"]] == [(4, 8)]


def test_the_sync_a_scale_triggers_writes_no_status(h: Harness) -> None:
    """A write's own informer echo (the target now at the desired count) rewrote currentReplicas and
    AbleToScale's message: two status patches per scale-up in a fleet-wide surge, not one."""
    _setup(h)
    _poll(h, ON_TARGET * 2)  # surge: 4 -> 8
    assert h.replicas() == 8
    writes = _status_writes(h)
    h.clock.step(0.2)
    h.reconcile("es")  # the target's update event
    _poll(h, ON_TARGET * 2)  # and the next poll
    assert _status_writes(h) == writes, "the syncs after a scale-up rewrote the status"
    able = next(c for c in h.status("es")["conditions"] if c["type"] == "AbleToScale")
    assert (able["reason"], able["message"]) == ("Synced", "the target is at the desired count (8)")


def test_the_drift_refresh_comes_after_the_refresh_interval() -> None:
    with harness(poll_interval=POLL, status_refresh_seconds=REFRESH) as h:
        _setup(h, annotations=LATEST)
        writes = _status_writes(h)
        for i in range(int(REFRESH / POLL) - 1):
            _poll(h, ON_TARGET * (1.01 if i % 2 else 0.99))
        assert _status_writes(h) == writes
        _poll(h, ON_TARGET * 1.03)  # REFRESH after the last write
        assert _status_writes(h) == writes + 1
        assert h.status("es")["currentMetrics"][0]["value"] == pytest.approx(ON_TARGET * 1.03)


def test_a_restarted_manager_does_not_rewrite_drift_at_once() -> None:
    with harness(poll_interval=POLL, status_refresh_seconds=REFRESH) as h:
        _setup(h)
        writes = _status_writes(h)
        restarted = {"cluster": h.cluster, "clock": h.clock, "status_refresh_seconds": REFRESH}
        with harness(poll_interval=POLL, **restarted) as h2:
            h2.start()
            for _ in range(int(REFRESH / POLL) - 1):
                h2.clock.step(POLL)
                h2.collector.values["queue"] = ON_TARGET * 1.03
                h2.reconcile("es")
            assert _status_writes(h) == writes, "the status the cluster holds counts as just written"


def test_live_values_are_on_metrics_and_go_with_the_scaler(h: Harness) -> None:
    _setup(h, annotations=LATEST)
    _poll(h, 41.5)
    text = h.mgr.metrics.exposition().decode()
    assert f'escaler_scaler_metric_value{{index="0",metric="queue",name="es",namespace="{NS}"}} 41.5' in text
    assert f'escaler_current_replicas{{name="es",namespace="{NS}"}} 4.0' in text
    assert h.status("es")["currentMetrics"][0]["value"] == ON_TARGET  # the status holds the last written
    h.api("elasticscalers").delete(f"{NS}/es")
    h.reconcile("es")
    text = h.mgr.metrics.exposition().decode()
    assert "escaler_scaler_metric_value{" not in text and "escaler_current_replicas{" not in text


def test_an_unchanged_scaler_is_parsed_once_per_resource_version(h: Harness,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from escaler.api.elasticscaler import ElasticScaler

    _setup(h)
    _poll(h, ON_TARGET)  # the cache has seen our status write
    parses: list[object] = []
    real = ElasticScaler.parse

    def counting(obj: Any) -> Any:
        parses.append(obj)
        return real(obj)

    monkeypatch.setattr(ElasticScaler, "parse", staticmethod(counting))
    for _ in range(10):
        _poll(h, ON_TARGET)
    assert parses == [], "the same resourceVersion is not parsed again"
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["maxReplicas"] = 6
    h.api("elasticscalers").update(obj)
    _poll(h, ON_TARGET)
    assert len(parses) >= 1, "an edited object is parsed afresh"
