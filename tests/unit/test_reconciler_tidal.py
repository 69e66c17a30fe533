"""The Tidal reconciler on a manager on fakes (``es_fakes.Harness`` + ``setup_tidal``), on a FakeClock:
status written only when it changes, ``requeue_after`` exactly until the next transition, a restart
mid-rule computes the same state without writing, ``MissingRequiredLabels`` still computes,
``InvalidSchedule`` names the rule and holds, ``TargetConflict`` through the shared binding index
(never against the Tidal's own follower), claim changes wake the Tidal, and the follower
ElasticScaler writes what the Tidal decided."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, metrics_trigger, scaler
from fakeapi import wait_until

from escaler.reconcilers.tidal import TidalController, TidalDeps, TidalReconciler, setup_tidal
from escaler.reconcilers.tidal.reconciler import EXCLUDED_RETRY_SECONDS
from escaler.runtime import Request, Result
from escaler.scaling.tidal import MAX_SKIPPED_FIRES

START = "CRON_TZ=UTC 0 1 * * *"
END = "CRON_TZ=UTC 0 2 * * *"
LABELS = {"elasticscaler.io/name": "follower", "elasticscaler.io/namespace": NS}
FOLLOWER_REF = {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": "plan"}


def tidal(rules: list[dict[str, Any]] | None = None, *, labels: dict[str, str] | None = LABELS,
          default: int | None = 2, generation: int = 1, target: str = "web") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "plan", "namespace": NS, "uid": "uid-plan", "generation": generation,
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if labels is not None:
        meta["labels"] = dict(labels)
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                            "rules": rules if rules is not None else [night()]}
    if default is not None:
        spec["defaultReplicas"] = default
    return {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "metadata": meta, "spec": spec}


def night(name: str = "night", start: str = START, end: str = END, replicas: int = 5) -> dict[str, Any]:
    return {"name": name, "start": start, "end": end, "replicas": replicas}


class Rig:
    """A Harness with the Tidal controller on the same manager, bindings and clock."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.tc: TidalController = setup_tidal(h.mgr, bindings=h.es.bindings, client=h.client, clock=h.clock)
        self.h.mgr.can_write.set()

    def at(self, when: datetime) -> None:
        self.h.clock.set_wall(when)

    def reconcile(self, reconciler: TidalReconciler | None = None) -> Result:
        for r in ("tidals", "elasticscalers", "horizontalpodautoscalers", "deployments"):
            self.h.wait_synced(r)
        return (reconciler or self.tc.reconciler).reconcile(Request(NS, "plan"))

    def status(self) -> dict[str, Any]:
        obj = self.h.api("tidals").get(f"{NS}/plan")
        assert obj is not None
        return dict(obj.get("status") or {})

    def ready(self) -> tuple[str, str, str]:
        c = next(c for c in self.status()["conditions"] if c["type"] == "Ready")
        return c["status"], c["reason"], c["message"]

    def writes(self) -> int:
        return self.h.client.count("patch", "tidals/status")

    def update_spec(self, obj: dict[str, Any]) -> None:
        current = self.h.api("tidals").get(f"{NS}/plan")
        assert current is not None
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        new["status"] = current.get("status")
        self.h.api("tidals").update(new)


@pytest.fixture
def rig() -> Iterator[Rig]:
    h = Harness()
    r = Rig(h)
    h.api("deployments").create(deployment("web", 2))
    h.start()
    try:
        yield r
    finally:
        h.stop()


def test_status_written_once_and_requeue_is_exactly_the_transition(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.at(datetime(2026, 6, 3, 0, 59, 29, 250000, tzinfo=UTC))
    assert rig.reconcile() == Result(requeue_after=30.75)
    st = rig.status()
    assert (st["desiredReplicas"], st["activeRules"], st["nextTransitionTime"], st["observedGeneration"]) == (
        2, [], "2026-06-03T01:00:00Z", 1)
    assert rig.ready()[:2] == ("True", "Scheduled")
    assert rig.writes() == 1
    # a second reconcile (the cache caught up) writes nothing and requeues for what is left
    rig.h.clock.step(0.5)
    assert rig.reconcile() == Result(requeue_after=30.25)
    assert rig.writes() == 1
    # the queue wakes the Tidal at the transition: the rule is active
    rig.h.clock.step(30.25)
    assert rig.reconcile() == Result(requeue_after=3600.0)
    st = rig.status()
    assert (st["desiredReplicas"], st["activeRules"], st["nextTransitionTime"]) == (
        5, ["night"], "2026-06-03T02:00:00Z")
    assert rig.writes() == 2
    assert "DesiredReplicasChanged" in rig.h.reasons()
    # ... and at its end, back to the default
    rig.h.clock.step(3600)
    assert rig.reconcile() == Result(requeue_after=23 * 3600.0)
    assert (rig.status()["desiredReplicas"], rig.status()["activeRules"]) == (2, [])
    assert rig.writes() == 3


def test_a_restarted_manager_mid_rule_computes_the_same_state_and_writes_nothing(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.at(datetime(2026, 6, 3, 1, 20, tzinfo=UTC))
    first = rig.reconcile()
    before = rig.status()
    assert (before["desiredReplicas"], before["activeRules"]) == (5, ["night"])
    # a fresh reconciler (a restarted process: nothing remembered) 10 minutes later
    rig.h.clock.step(600)
    fresh = TidalReconciler(TidalDeps(tidals=rig.tc.informer.store, client=rig.h.client,
                                      mapping=("tidal.io/v1alpha1", "Tidal"), bindings=rig.h.es.bindings,
                                      recorder=rig.h.recorder, clock=rig.h.clock))
    again = rig.reconcile(fresh)
    assert rig.status() == before
    assert rig.writes() == 1
    assert first.requeue_after - again.requeue_after == pytest.approx(600)


def test_missing_labels_report_but_still_compute(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal(labels={"elasticscaler.io/name": "follower"}))
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "MissingRequiredLabels")
    assert "metadata.labels: missing elasticscaler.io/namespace" in message
    assert (rig.status()["desiredReplicas"], rig.status()["activeRules"]) == (5, ["night"])
    assert "MissingRequiredLabels" in rig.h.reasons()


def test_invalid_schedule_names_the_rule_and_holds_the_last_state(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    rig.reconcile()
    bad = tidal([night(), night("moon", start="CRON_TZ=Mars/Olympus 0 3 * * *", replicas=9)], generation=2)
    rig.update_spec(bad)
    result = rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSchedule")
    assert "spec.rules[1] (moon).start: unknown time zone 'Mars/Olympus'" in message
    st = rig.status()
    assert (st["desiredReplicas"], st["activeRules"], st["observedGeneration"]) == (5, ["night"], 2)
    assert "nextTransitionTime" not in st
    assert result == Result()  # nothing scheduled until the spec is fixed


def test_a_rule_whose_excluded_fires_exceed_the_budget_holds_with_invalid_schedule(rig: Rig) -> None:
    # issue 27 item 2: a start on Mondays, every Monday of seven years excluded, an end on Feb 29
    rig.h.api("tidals").create(tidal())
    rig.at(datetime(2026, 12, 6, 13, 0, tzinfo=UTC))
    rig.reconcile()
    mondays = [(date(2026, 11, 30) - timedelta(weeks=k)).isoformat() for k in range(366)]
    weekly = {**night("weekly", start="CRON_TZ=UTC 0 9 * * 1", end="CRON_TZ=UTC 0 0 29 2 *"),
              "excludeDates": mondays}
    rig.update_spec(tidal([night(), weekly], generation=2))
    result = rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSchedule")
    assert message.startswith(f"spec.rules[1] (weekly).excludeDates: more than {MAX_SKIPPED_FIRES} "
                              "start fires")
    assert rig.status()["observedGeneration"] == 2
    assert result == Result(requeue_after=EXCLUDED_RETRY_SECONDS)  # the count moves with time


def test_an_object_that_does_not_parse_is_invalid_spec(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal([night(replicas=-1)]))
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    assert rig.reconcile() == Result()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec") and "spec.rules.0.replicas" in message


def _follower(created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return scaler("follower", {"type": "StateTrigger"}, target=FOLLOWER_REF, created=created)


def test_the_follower_is_no_conflict_and_writes_what_the_tidal_decided(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.h.api("elasticscalers").create(_follower())
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    rig.reconcile()
    rig.h.reconcile("follower")  # resolves the chain, claims web, reads desiredReplicas 5, writes
    assert rig.h.replicas("web") == 5
    rig.reconcile()
    assert rig.ready()[:2] == ("True", "Scheduled")


@pytest.mark.parametrize(("other_created", "conflict"), [("2025-01-01T00:00:00Z", True),
                                                         ("2027-01-01T00:00:00Z", False)],
                         ids=["older-metrics-scaler-wins", "younger-metrics-scaler-loses"])
def test_another_scaler_on_the_target_is_a_conflict_only_when_it_wins(rig: Rig, other_created: str,
                                                                      conflict: bool) -> None:
    rig.h.api("tidals").create(tidal())
    rig.h.api("elasticscalers").create(_follower())
    rig.h.reconcile("follower")
    rig.h.api("elasticscalers").create(
        scaler("other", metrics_trigger(external_metric()), created=other_created))
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    rig.reconcile()
    status, reason, message = rig.ready()
    if conflict:
        assert (status, reason) == ("False", "TargetConflict")
        assert "Deployment.apps web is written by ElasticScaler team/other" in message
        assert "TargetConflict" in rig.h.reasons()
    else:
        assert (status, reason) == ("True", "Scheduled")
    # the schedule is still evaluated
    assert rig.status()["desiredReplicas"] == 5


def test_a_foreign_hpa_on_the_target_is_a_conflict(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.h.api("horizontalpodautoscalers").create({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "legacy", "namespace": NS},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 4}})
    rig.at(datetime(2026, 6, 3, 1, 30, tzinfo=UTC))
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "TargetConflict")
    assert "HorizontalPodAutoscaler team/legacy" in message


class _Recording:
    def __init__(self) -> None:
        self.items: list[Request] = []

    def add(self, item: Request) -> None:
        self.items.append(item)


def test_a_claim_on_the_target_wakes_the_tidal(rig: Rig) -> None:
    rig.h.api("tidals").create(tidal())
    rig.h.wait_synced("tidals")
    queue = _Recording()
    rig.tc.claims.start(queue)
    try:
        rig.h.api("elasticscalers").create(scaler("other", metrics_trigger(external_metric())))
        wait_until(lambda: Request(NS, "plan") in queue.items, what="the Tidal enqueued by a new claim")
        queue.items.clear()
        # a scaler on another workload does not wake it
        rig.h.api("elasticscalers").create(
            scaler("elsewhere", metrics_trigger(external_metric()),
                   target={"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}))
        rig.h.wait_synced("elasticscalers")
        assert Request(NS, "plan") not in queue.items
    finally:
        rig.tc.claims.stop()


@pytest.mark.parametrize("worker_pause", [0.0, 0.5], ids=["prompt-worker", "worker-paused-after-write"])
def test_the_running_controller_wakes_the_tidal_exactly_at_the_transition(rig: Rig,
                                                                           worker_pause: float) -> None:
    """The delaying queue's timer, not a poll: the Tidal is parked on the clock until exactly the
    transition, is not reconciled half a second before it, and is at the transition. With the
    worker paused (real time) between the status write and the return, as a loaded machine or a GC
    pause does: the test used to step the clock in that gap and wait forever (its old wait fails
    this case)."""
    if worker_pause:
        reconcile = rig.tc.reconciler.reconcile

        def paused(req: Request) -> Result:
            result = reconcile(req)
            time.sleep(worker_pause)
            return result

        rig.tc.reconciler.reconcile = paused  # type: ignore[method-assign]
    rig.h.api("tidals").create(tidal())
    rig.at(datetime(2026, 6, 3, 0, 59, 30, tzinfo=UTC))
    clock = rig.h.clock
    # The status is visible before the reconcile that wrote it returns, and the controller
    # schedules the requeue (add_after, relative to the clock *then*) after the return: stepping
    # the clock in between would schedule it from the stepped time. ``done`` comes after both.
    queue, scheduled = rig.tc.controller.queue, threading.Event()
    original_done = queue.done

    def done(item: Request) -> None:
        original_done(item)
        if rig.status().get("nextTransitionTime") == "2026-06-03T01:00:00Z":
            scheduled.set()

    queue.done = done  # type: ignore[method-assign]
    stop = threading.Event()
    runner = threading.Thread(target=rig.tc.controller.start, args=(stop,), daemon=True)
    runner.start()
    try:
        wait_until(scheduled.is_set, what="the reconcile of the first status write returned")
        due = clock.monotonic() + 30.0
        # half a second before: the queue's timer is parked until exactly the transition
        clock.step(29.5)
        clock.block_until_deadline(due)
        assert rig.status()["desiredReplicas"] == 2
        clock.step(0.5)
        wait_until(lambda: rig.status().get("desiredReplicas") == 5, what="the rule applied at 01:00:00")
        assert rig.status()["nextTransitionTime"] == "2026-06-03T02:00:00Z"
    finally:
        stop.set()
        runner.join(10)
