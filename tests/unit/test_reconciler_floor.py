"""spec.floorFrom in the ElasticScaler reconciler (docs/design.md#beyond-the-seeds), on the fakes with a
FakeClock: a Tidal's active rule lifts a metric-scaled Deployment at its start and the scale-down window
releases it after its end (the reconcile requeues at each boundary), an excluded date does not lift it, a
missing Tidal is a ScheduleFloor=False/TidalNotFound condition (the scaler goes on scaling), a Tidal of
another namespace is never read, the Tidal handler maps a Tidal to the scalers naming it through the index,
and the Tidal controller reports a floor Tidal Ready without labels or a conflict."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler

from escaler.reconcilers.kit.floor import FLOOR_INDEX, floor_index, scalers_naming
from escaler.runtime.types import Request

WINDOW = 300  # longer than the rule: syncs at its start and end only (no polling here)
ANNOTATIONS = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(WINDOW)}
LOW_LOAD = 5.0  # Value target 10: one replica


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=0) as hh:
        hh.clock.step(3600)  # 01:00 UTC: a rule starting a minute ago started today
        yield hh


def _cron(h: Harness, minutes: int) -> str:
    at = h.clock.now() + timedelta(minutes=minutes)
    return f"CRON_TZ=UTC {at.minute} {at.hour} {at.day} {at.month} *"


def _tidal(name: str, rules: list[dict[str, Any]], namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "rules": rules}}


def _rule(h: Harness, start_in: int, end_in: int, replicas: int = 4,
          exclude: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"name": "launch", "start": _cron(h, start_in), "end": _cron(h, end_in),
                            "replicas": replicas}
    if exclude:
        rule["excludeDates"] = exclude
    return rule


def _floor_scaler(tidal: str = "launch-floor") -> dict[str, Any]:
    obj = scaler("es", metrics_trigger(external_metric("queue", "10")), annotations=ANNOTATIONS)
    obj["spec"]["floorFrom"] = {"name": tidal}
    return obj


def _start(h: Harness, *tidals: dict[str, Any]) -> None:
    for t in tidals:
        h.api("tidals").create(t)
    h.api("deployments").create(deployment("web", 1))
    h.api("elasticscalers").create(_floor_scaler())
    h.collector.values["queue"] = LOW_LOAD
    h.start()


def _floor_condition(h: Harness) -> tuple[str, str, str]:
    c = h.condition("es", "ScheduleFloor")
    assert c is not None
    return c["status"], c["reason"], c["message"]


def _step_to(h: Harness, result_requeue: float | None) -> None:
    assert result_requeue is not None
    h.clock.step(result_requeue)


def test_a_rule_lifts_at_its_start_and_releases_through_the_window(h: Harness) -> None:
    _start(h, _tidal("launch-floor", [_rule(h, 2, 4)]))
    first = h.reconcile("es")
    assert h.replicas() == 1
    assert _floor_condition(h)[:2] == ("False", "NoActiveRule")
    assert first.requeue_after == pytest.approx(120, abs=60)  # the rule's start (whole minutes)
    _step_to(h, first.requeue_after)
    started = h.reconcile("es")
    assert h.replicas() == 4
    h.settle()
    status, reason, message = _floor_condition(h)
    assert (status, reason) == ("True", "FloorActive")
    assert message == "Tidal launch-floor: floor 4 replicas (rules launch)"
    last = h.status("es")["recentDecisions"][-1]
    assert (last["from"], last["to"], last["boundBy"]) == (1, 4, "Floor")
    assert "raised to 4 by the schedule floor" in last["reason"]
    assert started.requeue_after == pytest.approx(120)  # the rule's end
    _step_to(h, started.requeue_after)
    ended = h.reconcile("es")
    assert h.replicas() == 4  # the scale-down window still holds the floor's 4
    assert _floor_condition(h)[:2] == ("False", "NoActiveRule")
    assert h.condition("es", "AbleToScale")["reason"] == "ScaleDownStabilized"  # type: ignore[index]
    assert ended.requeue_after is not None and ended.requeue_after <= WINDOW
    h.clock.step(ended.requeue_after)
    h.reconcile("es")
    assert h.replicas() == 2  # apa's scaleDownRate 2 halves per step: 4 -> 2 -> 1
    h.settle()
    h.reconcile("es")
    assert h.replicas() == 1


def test_an_excluded_date_does_not_lift(h: Harness) -> None:
    today = h.clock.now().date().isoformat()
    _start(h, _tidal("launch-floor", [_rule(h, -1, 5, exclude=[today])]))
    h.reconcile("es")
    assert h.replicas() == 1
    assert _floor_condition(h)[:2] == ("False", "NoActiveRule")


def test_a_missing_tidal_is_a_condition_not_a_failure(h: Harness) -> None:
    # the only Tidal of that name is in another namespace: never read
    _start(h, _tidal("launch-floor", [_rule(h, -1, 5)], namespace="elsewhere"))
    h.collector.values["queue"] = 15.0  # two replicas on metrics alone
    h.reconcile("es")
    assert h.replicas() == 2
    status, reason, message = _floor_condition(h)
    assert (status, reason) == ("False", "TidalNotFound")
    assert "'launch-floor'" in message and "spec.floorFrom.name" in message
    assert h.condition("es", "ScalingActive")["status"] == "True"  # type: ignore[index]
    # the Tidal appears: its handler wakes the scaler, which now lifts to the floor
    h.settle()
    h.api("tidals").create(_tidal("launch-floor", [_rule(h, -1, 5, replicas=6)]))
    h.reconcile("es")
    assert h.replicas() == 6


def test_the_tidal_handler_maps_a_tidal_to_the_scalers_naming_it(h: Harness) -> None:
    _start(h, _tidal("launch-floor", [_rule(h, 2, 4)]))
    h.api("elasticscalers").create(
        scaler("other", metrics_trigger(external_metric("queue", "10")), target={
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}))
    h.wait_synced("elasticscalers")
    informer = next(i for k, i in h.mgr.informers.informers().items() if k.resource == "elasticscalers")
    assert FLOOR_INDEX in informer.indexer.indexers()
    mapped = scalers_naming(informer.indexer)(_tidal("launch-floor", []))
    assert mapped == [Request(NS, "es")]
    assert scalers_naming(informer.indexer)(_tidal("launch-floor", [], namespace="elsewhere")) == []
    assert floor_index({"metadata": {"namespace": NS}, "spec": {}}) == []


def test_the_tidal_controller_reports_a_floor_tidal_ready() -> None:
    from escaler.reconcilers.tidal.conflicts import is_floor_user

    es = _floor_scaler("launch-floor")
    assert is_floor_user(es, NS, "launch-floor")
    assert not is_floor_user(es, NS, "other")
    assert not is_floor_user(es, "elsewhere", "launch-floor")


class _Tidals:
    """An ObjectStore holding one Tidal."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    def get_by_key(self, key: str) -> dict[str, Any] | None:
        return self.obj if key == f"{NS}/plan" else None

    def list(self) -> list[dict[str, Any]]:
        return [self.obj]


def test_a_floor_is_evaluated_once_a_minute_per_resource_version() -> None:
    # issue 27 item 2: every sync of every scaler naming a Tidal evaluated it again
    from datetime import UTC, datetime

    import escaler.reconcilers.kit.floor as floor_mod
    from escaler.api.scaler import FloorFrom
    from escaler.reconcilers.kit.tidalevaluations import TidalEvaluations

    tidal = {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
             "metadata": {"name": "plan", "namespace": NS, "uid": "u1", "resourceVersion": "7"},
             "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                      "rules": [{"name": "day", "start": "CRON_TZ=UTC 0 9 * * *",
                                 "end": "CRON_TZ=UTC 0 17 * * *", "replicas": 4}]}}
    store = _Tidals(tidal)
    evaluations = TidalEvaluations()
    reader = floor_mod.FloorReader(store, evaluations)
    ref = FloorFrom(kind="Tidal", name="plan")
    t = datetime(2026, 12, 7, 10, 0, 5, tzinfo=UTC)
    first = reader.floor(NS, ref, t)
    assert first is not None and first.replicas == 4
    for s in (10, 30, 54):  # the same minute: one evaluation
        assert reader.floor(NS, ref, t.replace(second=s)) == first
    assert evaluations.evaluations == 1
    reader.floor(NS, ref, t + timedelta(minutes=1))  # a new minute
    assert evaluations.evaluations == 2
    store.obj = {**tidal, "metadata": {**tidal["metadata"], "resourceVersion": "8"}}  # a new version
    reader.floor(NS, ref, t + timedelta(minutes=1))
    assert evaluations.evaluations == 3 and evaluations.parses == 2
