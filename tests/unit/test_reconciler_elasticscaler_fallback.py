"""spec.fallback on the ElasticScaler reconciler (docs/design.md#beyond-the-seeds), on the fakes with a
FakeClock and a 30 s poll: N-1 failed polls hold, the Nth goes to fallback.replicas with ScalingActive saying
so, an engaged fallback writes no status per poll, recovery goes back through the scale-down window, a new
leader mid-count keeps counting from status.fallback, reused outcomes count nothing, and a
fallback on a State/Signal trigger is refused naming spec.fallback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import Harness, deployment, external_metric, harness, metrics_trigger, scaler

from escaler.scaling.text import format_time

POLL = 30.0
WINDOW = 120  # the scale-down stabilization window of these scalers
THRESHOLD, FALLBACK = 3, 7
ON_TARGET = 40.0  # Value target 10 at 4 replicas
DOWN = "HTTP 503 from the metrics adapter"
ANNOTATIONS = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(WINDOW)}


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=POLL) as hh:
        yield hh


def _fallback_scaler(name: str = "es", trigger: dict[str, Any] | None = None,
                     fallback: dict[str, int] | None = None) -> dict[str, Any]:
    obj = scaler(name, trigger or metrics_trigger(external_metric("queue", "10")), annotations=ANNOTATIONS)
    obj["spec"]["fallback"] = fallback or {"failureThreshold": THRESHOLD, "replicas": FALLBACK}
    return obj


def _setup(h: Harness, obj: dict[str, Any] | None = None) -> None:
    h.api("deployments").create(deployment("web", 4))
    h.api("elasticscalers").create(obj or _fallback_scaler())
    h.collector.values["queue"] = ON_TARGET
    h.start()
    h.reconcile("es")
    assert h.replicas() == 4


def _poll(h: Harness, value: float | str = DOWN) -> None:
    """One poll later, the metric source answers ``value`` (an error string: the read fails)."""
    h.clock.step(POLL)
    h.collector.values["queue"] = value
    h.reconcile("es")


def _fail_until_the_window_is_empty(h: Harness) -> None:
    """The first failed poll still decides from the window's earlier sample (usable): no count."""
    _poll(h)
    assert "fallback" not in h.status("es")
    assert h.condition("es", "ScalingActive")["status"] == "True"  # type: ignore[index]


def _scaling_active(h: Harness) -> dict[str, Any]:
    cond = h.condition("es", "ScalingActive")
    assert cond is not None
    return cond


def test_n_minus_one_failed_polls_hold_and_the_nth_goes_to_fallback(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    since = format_time(h.clock.now().timestamp() + POLL)
    for failures in range(1, THRESHOLD):
        _poll(h)
        assert h.replicas() == 4  # held
        assert h.status("es")["fallback"] == {"failures": failures, "since": since}
        cond = _scaling_active(h)
        assert (cond["status"], cond["reason"]) == ("False", "DecisionUnavailable")
        assert cond["message"].startswith(
            f"fallback not engaged: {failures} of {THRESHOLD} consecutive metric polls without a usable "
            f"signal since {since}; at {THRESHOLD}, fallback to {FALLBACK} replicas; metrics: ")
        assert DOWN in cond["message"]
    _poll(h)
    assert h.replicas() == FALLBACK
    assert h.status("es")["fallback"] == {"failures": THRESHOLD, "since": since}
    cond = _scaling_active(h)
    assert (cond["status"], cond["reason"]) == ("False", "DecisionUnavailable")
    assert cond["message"].startswith(
        f"fallback engaged: {THRESHOLD} consecutive metric polls without a usable signal since {since} "
        f"(failureThreshold {THRESHOLD}): recommending fallback.replicas {FALLBACK}; metrics: ")
    last = h.status("es")["recentDecisions"][-1]
    assert (last["from"], last["to"]) == (4, FALLBACK)
    assert f"fallback to {FALLBACK} replicas after {THRESHOLD} consecutive metric polls" in last["reason"]
    assert "SuccessfulRescale" in h.reasons()


def test_an_engaged_fallback_writes_no_status_per_poll(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    for _ in range(THRESHOLD):
        _poll(h)
    assert h.replicas() == FALLBACK
    h.settle()
    h.reconcile("es")
    writes = h.client.count("patch", "elasticscalers/status")
    for _ in range(5):
        _poll(h)
    assert h.replicas() == FALLBACK
    assert h.status("es")["fallback"]["failures"] == THRESHOLD  # counted up to the threshold only
    assert h.client.count("patch", "elasticscalers/status") == writes


def test_syncs_between_polls_count_nothing(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    _poll(h)
    for _ in range(5):
        h.settle()
        h.reconcile("es")  # woken by an event: reuses the last poll's outcome
    assert h.status("es")["fallback"]["failures"] == 1
    assert h.collector.calls == 3


def test_recovery_goes_back_through_the_scale_down_window(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    for _ in range(THRESHOLD):
        _poll(h)
    assert h.replicas() == FALLBACK
    h.settle()
    engaged_at = h.clock.now().timestamp()  # the last sync that recommended the fallback count
    _poll(h, 10.0)  # healed, and the load is gone: the metrics alone want fewer replicas
    assert "fallback" not in h.status("es")  # a usable poll clears the count
    assert _scaling_active(h)["status"] == "True"
    assert h.status("es")["currentMetrics"][0]["recommendedReplicas"] < FALLBACK
    held = 0
    while h.replicas() == FALLBACK:
        able = h.condition("es", "AbleToScale")
        assert able is not None and able["reason"] == "ScaleDownStabilized"  # no cliff
        assert f"({FALLBACK} over" in able["message"]
        held += 1
        _poll(h, 10.0)
    # the count leaves the fallback only once the window has passed since the last fallback sync
    assert h.clock.now().timestamp() - engaged_at >= WINDOW
    assert held == WINDOW // POLL - 1
    assert h.replicas() < FALLBACK


def test_a_new_leader_mid_count_keeps_the_count(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    for _ in range(THRESHOLD - 1):
        _poll(h)
    assert h.status("es")["fallback"]["failures"] == THRESHOLD - 1
    since = h.status("es")["fallback"]["since"]
    # the manager fails over: a new process, same cluster, nothing in memory
    with harness(cluster=h.cluster, clock=h.clock, poll_interval=POLL) as h2:
        h2.start()
        h2.collector.values["queue"] = DOWN
        h2.clock.step(POLL)
        h2.reconcile("es")
        assert h2.replicas() == FALLBACK  # the Nth failed poll overall, the first of this leader
        assert h2.status("es")["fallback"] == {"failures": THRESHOLD, "since": since}


def test_without_fallback_the_count_is_held_and_nothing_is_recorded(h: Harness) -> None:
    obj = scaler("es", metrics_trigger(external_metric("queue", "10")), annotations=ANNOTATIONS)
    _setup(h, obj)
    for _ in range(THRESHOLD + 3):
        _poll(h)
    assert h.replicas() == 4
    assert "fallback" not in h.status("es")
    assert not _scaling_active(h)["message"].startswith("fallback")


def test_removing_the_fallback_clears_status(h: Harness) -> None:
    _setup(h)
    _fail_until_the_window_is_empty(h)
    _poll(h)
    assert h.status("es")["fallback"]["failures"] == 1
    obj = h.api("elasticscalers").get("team/es")
    assert obj is not None
    del obj["spec"]["fallback"]
    obj["metadata"]["generation"] = 2
    h.api("elasticscalers").update(obj)
    _poll(h)
    assert "fallback" not in h.status("es")
    assert h.replicas() == 4


@pytest.mark.parametrize("trigger", [{"type": "StateTrigger"}, {"type": "SignalTrigger"}],
                         ids=["state", "signal"])
def test_a_fallback_off_a_metrics_trigger_is_refused_naming_the_field(h: Harness,
                                                                      trigger: dict[str, Any]) -> None:
    h.api("deployments").create(deployment("web", 4))
    h.api("elasticscalers").create(_fallback_scaler(trigger=trigger))
    h.start()
    h.reconcile("es")
    validated = h.condition("es", "Validated")
    assert validated is not None
    assert (validated["status"], validated["reason"]) == ("False", "InvalidSpec")
    assert "spec.fallback: fallback is only allowed with trigger.type MetricsTrigger" in validated["message"]
    assert h.replicas() == 4
