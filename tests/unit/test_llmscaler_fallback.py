"""spec.fallback on the LLMScaler reconciler (docs/design.md#beyond-the-seeds; the ElasticScaler's rule,
``count_poll``), on the unit harness of ``test_llmscaler_reconciler`` (FakeClock, a read per sync): the custom
provider gives no decision for failureThreshold - 1 syncs (held), then the fallback count is written with
ScalingActive=False/DecisionUnavailable saying so; a decision again clears the count and the
scale-down window still holds the fallback count; a count left in status by another leader is
carried on; Prometheus metrics all failing count the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import deployment
from test_llmscaler_reconciler import LLM, llmscaler

from escaler.cli import explain
from escaler.reconcilers.llmscaler.provider import CustomReading
from escaler.scaling.text import format_time

THRESHOLD, FALLBACK = 2, 5
WINDOW = 60


@pytest.fixture
def t() -> Iterator[LLM]:
    t = LLM()
    try:
        yield t
    finally:
        t.stop()


def _setup(t: LLM, provider: str = "Custom", status: dict[str, Any] | None = None) -> None:
    t.h.api("deployments").create(deployment("web", 2))
    obj = llmscaler(provider=provider, scale_down={"stabilizationWindowSeconds": WINDOW})
    obj["spec"]["fallback"] = {"failureThreshold": THRESHOLD, "replicas": FALLBACK}
    if status is not None:
        obj["status"] = status
    t.h.api("llmscalers").create(obj)
    t.start()


def _sync(t: LLM, seconds: float = 10) -> None:
    t.h.clock.step(seconds)
    t.reconcile()


def test_custom_provider_without_decision_goes_to_fallback_and_recovers_through_the_window(t: LLM) -> None:
    _setup(t)
    t.reader.decision = CustomReading(None, "HTTP 503")
    t.reconcile()
    first = t.h.clock.now().timestamp()
    assert t.h.replicas() == 2
    assert t.status()["fallback"] == {"failures": 1, "since": format_time(first)}
    message = t.cond("ScalingActive")["message"]  # type: ignore[index]
    assert message.startswith(f"fallback not engaged: 1 of {THRESHOLD} consecutive metric polls")
    _sync(t)
    assert t.h.replicas() == FALLBACK
    assert t.status()["fallback"] == {"failures": THRESHOLD, "since": format_time(first)}
    assert t.reason("ScalingActive") == ("False", "DecisionUnavailable")
    assert t.cond("ScalingActive")["message"].startswith(  # type: ignore[index]
        f"fallback engaged: {THRESHOLD} consecutive metric polls without a usable signal")
    assert t.cond("DecisionAvailable")["message"] == t.cond("ScalingActive")["message"]  # type: ignore[index]
    engaged_at = t.h.clock.now().timestamp()
    t.h.settle()
    assert "ENGAGED" in explain.render(t.obj())

    t.reader.decision = CustomReading(2)
    _sync(t)
    assert "fallback" not in t.status()
    assert t.reason("ScalingActive") == ("True", "DecisionReceived")
    assert t.h.replicas() == FALLBACK  # the window remembers the fallback count
    assert t.reason("AbleToScale") == ("True", "ScaleDownStabilized")
    t.h.clock.step(engaged_at + WINDOW - t.h.clock.now().timestamp() + 1)
    t.reconcile()
    assert t.h.replicas() == 2


def test_a_count_in_status_from_another_leader_is_carried_on(t: LLM) -> None:
    since = "2026-01-01T00:00:00Z"
    t.reader.decision = CustomReading(None, "HTTP 503")
    _setup(t, status={"fallback": {"failures": THRESHOLD - 1, "since": since}})
    t.reconcile()  # this process's first failed poll, the Nth overall
    assert t.h.replicas() == FALLBACK
    assert t.status()["fallback"] == {"failures": THRESHOLD, "since": since}


def test_prometheus_metrics_all_failing_count(t: LLM) -> None:
    _setup(t, provider="Prometheus")
    t.reader.values.update({"sum(running)": "connection refused", "sum(waiting)": "connection refused"})
    t.reconcile()
    assert t.h.replicas() == 2 and t.status()["fallback"]["failures"] == 1
    _sync(t)
    assert t.h.replicas() == FALLBACK
    t.reader.values.update({"sum(running)": "connection refused", "sum(waiting)": 5.0})  # partial: usable
    _sync(t)
    assert "fallback" not in t.status()
