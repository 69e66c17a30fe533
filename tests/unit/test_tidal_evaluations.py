"""The shared Tidal parse/evaluation cache (escaler.reconcilers.kit.tidalevaluations, issue 27 item 2):
one evaluation per (uid, resourceVersion, minute) however many scalers read the Tidal as a floor,
the Tidal's own reconcile included; a new minute or a new resourceVersion evaluates again; bounded
by weight; concurrent readers of one key share one evaluation. Time comes from the harness's
FakeClock (or is an argument): nothing here is timed."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment
from fakeapi import wait_until

from escaler.api.scaler import FloorFrom
from escaler.reconcilers.kit.floor import FloorReader
from escaler.reconcilers.kit.tidalevaluations import SHARED, TidalEvaluations
from escaler.reconcilers.tidal import setup_tidal
from escaler.runtime import Request
from escaler.scaling.tidal import TooManyExcludedFires

T0 = datetime(2026, 12, 7, 10, 0, 5, tzinfo=UTC)


def tidal(rv: str = "7", uid: str = "u1", rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
            "metadata": {"name": "plan", "namespace": NS, "uid": uid, "resourceVersion": rv},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "rules": rules or [{"name": "day", "start": "CRON_TZ=UTC 0 9 * * *",
                                         "end": "CRON_TZ=UTC 0 17 * * *", "replicas": 4}]}}


class Store:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    def get_by_key(self, key: str) -> Mapping[str, Any] | None:
        return self.obj if key == f"{NS}/plan" else None

    def list(self) -> list[Any]:
        return [self.obj]


REF = FloorFrom(kind="Tidal", name="plan")


def test_ten_thousand_floor_reads_in_a_minute_are_one_evaluation() -> None:
    ev = TidalEvaluations()
    store = Store(tidal())
    readers = [FloorReader(store, ev), FloorReader(store, ev)]  # the ElasticScaler and LLMScaler controllers
    floors = {readers[i % 2].floor(NS, REF, T0 + timedelta(seconds=i % 50)) for i in range(10_000)}
    assert len(floors) == 1 and next(iter(floors)).replicas == 4  # type: ignore[union-attr]
    assert (ev.parses, ev.evaluations) == (1, 1)
    # the next minute: evaluated again, not parsed again
    readers[0].floor(NS, REF, T0 + timedelta(minutes=1))
    assert (ev.parses, ev.evaluations) == (1, 2)
    # a new resourceVersion (a spec change): parsed and evaluated again, in the same minute
    store.obj = tidal(rv="8", rules=[{"name": "day", "start": "CRON_TZ=UTC 0 9 * * *",
                                      "end": "CRON_TZ=UTC 0 17 * * *", "replicas": 6}])
    floor = readers[1].floor(NS, REF, T0 + timedelta(minutes=1))
    assert floor is not None and floor.replicas == 6
    assert (ev.parses, ev.evaluations) == (2, 3)


def test_an_object_without_uid_or_resource_version_is_never_cached() -> None:
    ev = TidalEvaluations()
    obj = tidal()
    del obj["metadata"]["resourceVersion"]
    reader = FloorReader(Store(obj), ev)
    reader.floor(NS, REF, T0)
    reader.floor(NS, REF, T0)
    assert (ev.parses, ev.evaluations) == (2, 2)


def test_concurrent_readers_of_one_key_share_one_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    import escaler.reconcilers.kit.tidalevaluations as mod

    ev = TidalEvaluations()
    entered, release = threading.Event(), threading.Event()
    real = mod.evaluate

    def slow(*args: Any) -> Any:
        entered.set()
        assert release.wait(10)  # the other readers arrive while this one evaluates
        return real(*args)

    monkeypatch.setattr(mod, "evaluate", slow)
    store = Store(tidal())
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(FloorReader(store, ev).floor(NS, REF, T0)))
    first.start()
    assert entered.wait(10)
    others = [threading.Thread(target=lambda: results.append(FloorReader(store, ev).floor(NS, REF, T0)))
              for _ in range(8)]
    for t in others:
        t.start()
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert len(results) == 9 and len(set(results)) == 1
    assert ev.evaluations == 1


def test_too_many_excluded_fires_is_kept_and_raised_afresh() -> None:
    mondays = [(date(2026, 11, 30) - timedelta(weeks=k)).isoformat() for k in range(366)]
    obj = tidal(rules=[{"name": "weekly", "start": "CRON_TZ=Europe/Berlin 0 9 * * 1",
                        "end": "CRON_TZ=Europe/Berlin 0 0 29 2 *", "replicas": 3, "excludeDates": mondays}])
    ev = TidalEvaluations()
    parsed = ev.parsed(obj)
    errors = []
    now = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)  # a Sunday: the last 366 Mondays are excluded
    for _ in range(3):
        with pytest.raises(TooManyExcludedFires) as err:
            ev.evaluate(obj, parsed, now)
        errors.append(err.value)
    assert ev.evaluations == 1
    assert errors[0] is not errors[1] and str(errors[0]) == str(errors[1])
    floor = FloorReader(Store(obj), ev).floor(NS, REF, now)
    assert floor is not None and floor.reason == "TidalInvalid" and "excludeDates" in (floor.problem or "")
    assert ev.evaluations == 1


def test_the_caches_are_bounded_by_weight() -> None:
    # a parsed Tidal weighs 1 + its rules + its excluded dates; the oldest goes first
    dates = [(date(2027, 1, 1) + timedelta(days=k)).isoformat() for k in range(100)]
    ev = TidalEvaluations(parsed_weight=500, evaluation_weight=10)
    rules = [{"name": "day", "start": "CRON_TZ=UTC 0 9 * * *", "end": "CRON_TZ=UTC 0 17 * * *",
              "replicas": 4, "excludeDates": dates}]
    objs = [tidal(uid=f"u{i}", rules=rules) for i in range(10)]  # weight 102 each
    for o in objs:
        ev.evaluate(o, ev.parsed(o), T0)
    assert ev._parsed.weight <= 500 and len(ev._parsed) == 4
    assert ev._evaluations.weight <= 10 and len(ev._evaluations) == 5
    ev.parsed(objs[-1])
    assert ev.parses == 10  # the newest is kept
    ev.parsed(objs[0])
    assert ev.parses == 11  # the oldest was dropped


def test_a_namespace_flooding_tidals_does_not_evict_anothers() -> None:
    """Tenant A writes ten times the caches' weight of distinct Tidals, each read every minute;
    tenant B's parse and evaluation are still answered from the caches, and both stay bounded."""
    ev = TidalEvaluations(parsed_weight=100, evaluation_weight=40)
    b = tidal(uid="b")
    b["metadata"]["namespace"] = "team-b"
    ev.evaluate(b, ev.parsed(b), T0)
    for i in range(10 * 100 // 2):  # a one-rule Tidal weighs 2 parsed, 2 evaluated
        a = tidal(uid=f"a{i}")
        a["metadata"]["namespace"] = "team-a"
        ev.evaluate(a, ev.parsed(a), T0)
    parses, evaluations = ev.parses, ev.evaluations
    assert ev.evaluate(b, ev.parsed(b), T0 + timedelta(seconds=30)).desired_replicas == 4
    assert (ev.parses - parses, ev.evaluations - evaluations) == (0, 0), \
        "tenant A's Tidals evicted tenant B's parse or evaluation"
    assert ev._parsed.weight <= 100 and ev._evaluations.weight <= 40


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    h.api("deployments").create(deployment("web", 2))
    yield h
    h.stop()


def test_the_tidal_reconcile_and_the_floors_share_the_evaluation(harness: Harness) -> None:
    tc = setup_tidal(harness.mgr, bindings=harness.es.bindings, client=harness.client, clock=harness.clock)
    harness.mgr.can_write.set()
    harness.start()
    obj = tidal()
    del obj["metadata"]["resourceVersion"]
    harness.api("tidals").create(obj)
    harness.clock.set_wall(T0)
    harness.wait_synced("tidals")
    tc.reconciler.reconcile(Request(NS, "plan"))  # writes the status: a new resourceVersion
    harness.clock.step(5)
    harness.wait_synced("tidals")
    key = f"{NS}/plan"

    def caught_up() -> bool:
        o = tc.informer.store.get_by_key(key)
        return o is not None and bool(o.get("status"))

    wait_until(caught_up)
    tc.reconciler.reconcile(Request(NS, "plan"))  # the written version: evaluated once
    before = SHARED.evaluations
    reader = FloorReader(tc.informer.store)
    for s in range(0, 40, 4):  # scalers' syncs through the rest of the minute: no evaluation
        harness.clock.set_wall(T0 + timedelta(seconds=10 + s))
        floor = reader.floor(NS, REF, harness.clock.now())
        assert floor is not None and floor.replicas == 4
        tc.reconciler.reconcile(Request(NS, "plan"))
    assert SHARED.evaluations == before
    harness.clock.set_wall(T0 + timedelta(minutes=1))
    reader.floor(NS, REF, harness.clock.now())
    tc.reconciler.reconcile(Request(NS, "plan"))
    assert SHARED.evaluations == before + 1
