"""Outbound I/O off the reconcile workers (issue 9, "slow sources must not delay other scalers").

(The controller-level proof — one worker, A's collection hangs, B still writes — is
``test_es_slow_source_isolation.py``, kept free of new imports so it runs on the code before.)

* Reconciler level, with a ``ManualExecutor`` (jobs finish when the test says so; FakeClock): the
  sync that submits a read writes nothing; the completion wakes the scaler and the next sync
  decides on the result; a sync while a read is in flight keeps the last outcome and submits
  nothing; a recreated scaler (new uid) never consumes its predecessor's result; a deleted
  scaler's job is discarded; a full namespace queue is reported, not waited on; SignalTrigger
  pulls follow the same rules.
"""

from __future__ import annotations

from typing import Any

import pytest
from es_fakes import (
    NS,
    Cluster,
    FakeCollector,
    Harness,
    deployment,
    external_metric,
    harness,
    metrics_trigger,
    scaler,
)
from executor_fakes import ManualExecutor

from escaler.reconcilers.elasticscaler import setup_elasticscaler
from escaler.runtime import Manager, Request
from escaler.runtime.executor import KeyedExecutor
from escaler.signals.signal_pull import SignalReading
from escaler.targets.registry import default_registry

METRICS_KEY = ("metrics", NS, "es")
SIGNAL_KEY = ("signal", NS, "es")


# -- reconciler level, with a manual executor ------------------------------------------------------


@pytest.fixture
def mx() -> ManualExecutor:
    return ManualExecutor()


def _start(h: Harness, mx: ManualExecutor, *objs: dict[str, Any], replicas: int = 2) -> None:
    h.api("deployments").create(deployment("web", replicas))
    for o in objs:
        h.api("elasticscalers").create(o)
    h.start()
    mx.start(h.es.controller.queue)


def _writes(h: Harness) -> tuple[int, int]:
    return h.client.count("patch", "elasticscalers/status"), h.client.count("patch", "deployments")


def test_the_sync_that_submits_writes_nothing_and_the_completion_decides(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.collector.values["queue"] = 50.0
        result = h.reconcile("es")
        assert (result.requeue, result.requeue_after) == (False, 0.0), "the completion wakes the scaler"
        assert h.collector.calls == 0, "no I/O on the reconcile worker"
        assert list(mx.jobs) == [METRICS_KEY] and mx.jobs[METRICS_KEY].group == NS
        assert _writes(h) == (0, 0) and h.reasons() == [], "the submitting sync writes nothing"

        mx.complete(METRICS_KEY)
        assert mx.woken == [Request(NS, "es")]
        assert len(h.es.controller.queue) == 1, "the completion enqueued the scaler"
        h.reconcile("es")
        assert h.replicas() == 4 and _writes(h) == (1, 1)
        assert h.status("es")["desiredReplicas"] == 4


def test_a_sync_while_the_next_collection_is_in_flight_keeps_the_last_outcome(mx: ManualExecutor) -> None:
    with harness(outbound=mx, poll_interval=30.0) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.collector.values["queue"] = 50.0
        h.reconcile("es")
        mx.complete(METRICS_KEY)
        h.reconcile("es")
        assert h.replicas() == 4 and len(mx.submitted) == 1
        h.settle()
        h.reconcile("es")  # an event between polls: the last collection is reused
        assert len(mx.submitted) == 1

        h.clock.step(30.0)  # the next poll
        h.collector.values["queue"] = 80.0
        h.reconcile("es")
        assert len(mx.submitted) == 2 and mx.pending(METRICS_KEY)
        status_writes = _writes(h)[0]
        h.reconcile("es")  # woken by an event while the collection is in flight
        h.reconcile("es")
        assert len(mx.submitted) == 2, "one collection per scaler at a time"
        assert _writes(h)[0] == status_writes and h.status("es")["desiredReplicas"] == 4, \
            "the status keeps reporting the last outcome"
        mx.complete(METRICS_KEY)
        h.reconcile("es")
        assert h.replicas() == 8, "the fresh collection decides"


def test_a_recreated_scaler_never_consumes_its_predecessors_collection(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10")), uid="uid-old"))
        h.collector.values["queue"] = 50.0
        h.reconcile("es")
        # deleted and recreated under the same name before any reconcile saw the delete
        h.api("elasticscalers").delete(f"{NS}/es")
        h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric("queue", "10")),
                                              uid="uid-new"))
        mx.complete(METRICS_KEY)  # the old object's collection (50: scale to 4)
        h.collector.values["queue"] = 20.0
        h.reconcile("es")
        assert _writes(h) == (0, 0), "the old object's result was dropped, not decided on"
        assert len(mx.submitted) == 2 and mx.jobs[METRICS_KEY].tag[0] == "uid-new"
        mx.complete(METRICS_KEY)
        h.reconcile("es")
        assert h.replicas() == 2 and h.status("es")["desiredReplicas"] == 2


def test_a_deleted_scalers_job_is_discarded(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.collector.values["queue"] = 50.0
        h.reconcile("es")
        assert mx.pending(METRICS_KEY)
        h.api("elasticscalers").delete(f"{NS}/es")
        h.reconcile_once("es")
        assert METRICS_KEY in mx.discarded and not mx.pending(METRICS_KEY)
        assert h.client.count("patch", "deployments") == 0


def test_a_failed_collection_is_reported_like_a_failed_read(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.reconcile("es")

        def broken() -> Any:
            raise RuntimeError("socket closed")

        mx.jobs[METRICS_KEY].fn = broken
        mx.complete(METRICS_KEY)
        h.reconcile("es")
        cond = h.condition("es", "ScalingActive")
        assert cond is not None and cond["reason"] == "DecisionUnavailable"
        assert "collection failed: socket closed" in cond["message"]


def test_a_full_namespace_queue_is_reported_not_waited_on(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        mx.full = True
        h.reconcile("es")
        cond = h.condition("es", "ScalingActive")
        assert cond is not None and cond["reason"] == "DecisionUnavailable"
        assert f"too many metric collections are queued in namespace {NS}" in cond["message"]
        assert h.replicas() == 2
        mx.full = False
        h.reconcile("es")
        assert mx.pending(METRICS_KEY), "the next sync submits again"


def test_a_signal_pull_runs_off_the_worker(mx: ManualExecutor) -> None:
    with harness(outbound=mx) as h:
        trigger = {"type": "SignalTrigger",
                   "signalTrigger": {"endpoint": "http://gw.example/activity", "pollIntervalSeconds": 7}}
        _start(h, mx, scaler("es", trigger, min_replicas=0), replicas=0)
        h.pull_reading = SignalReading(active=True)
        result = h.reconcile("es")
        assert h.pulls == [] and mx.pending(SIGNAL_KEY), "the pull was submitted, not made"
        assert _writes(h) == (0, 0)
        assert result.requeue_after == 7.0, "a backstop in case the completion's wake-up is lost"
        h.reconcile("es")
        assert len(mx.submitted) == 1, "one pull in flight per scaler"
        mx.complete(SIGNAL_KEY)
        assert h.pulls == ["http://gw.example/activity"]
        result = h.reconcile("es")
        assert h.replicas() == 1, "the reading activated the target from zero"
        assert result.requeue_after == 7.0
        h.reconcile("es")
        assert len(mx.submitted) == 1, "pulled at most once per pollIntervalSeconds"


def test_executor_is_wired_as_a_controller_source() -> None:
    """setup_elasticscaler's default executor is started and stopped with the controller."""
    cluster = Cluster()
    mgr = Manager.for_testing(cluster.lw_factory, cluster.mapper)
    es = setup_elasticscaler(mgr, client=cluster.client,
                             handlers=default_registry(cluster.client),  # type: ignore[arg-type]
                             collector=FakeCollector())
    outbound = es.reconciler._d.outbound
    assert isinstance(outbound, KeyedExecutor)
    assert (outbound.workers, outbound.per_group) == (16, 4)
    assert outbound in es.controller._sources
    text = mgr.metrics.exposition().decode()
    assert "escaler_outbound_jobs_queued" in text and "escaler_outbound_jobs_in_flight" in text


def _surge(mx: ManualExecutor, consume_delay: float) -> tuple[int, str]:
    """A steady metric for a minute of 10 s polls, then a step; the step's collection is consumed
    ``consume_delay`` seconds after it was made (a work queue backed up by a fleet-wide surge)."""
    with harness(outbound=mx, poll_interval=10.0) as h:
        _start(h, mx, scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.collector.values["queue"] = 10.0
        for _ in range(7):
            h.reconcile("es")
            mx.complete(METRICS_KEY)
            h.reconcile("es")
            h.clock.step(10.0)
        assert h.replicas() == 2, "steady at the target"
        h.collector.values["queue"] = 40.0  # the surge
        h.reconcile("es")
        mx.complete(METRICS_KEY)
        h.clock.step(consume_delay)
        h.reconcile("es")
        return h.replicas(), str(h.status("es").get("recentDecisions", ""))


def test_the_panic_window_is_read_at_the_collections_time_not_the_consuming_syncs() -> None:
    # A sample is as new as its collection: a surge's backlog between the collection and the sync
    # that consumes it must not age the sample out of the 6 s panic window, or the stable 60 s
    # average decides a scale-up that the panic window should have taken over.
    at_once, _ = _surge(ManualExecutor(), 0.0)
    late, decisions = _surge(ManualExecutor(), 10.0)
    assert at_once > 2, "the panic window takes over the scale-up"
    assert late == at_once, decisions
