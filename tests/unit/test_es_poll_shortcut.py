"""The poller's shortcut (issue 10, "a poll whose inputs did not change must cost next to nothing").

A due MetricsTrigger scaler's collection starts on the poller (``ElasticScalerReconciler.poll``
→ ``MetricsRecommender.prefetch``) instead of in a reconcile that then waits for it: a poll costs
one reconcile (the one the completion wakes), not two. Everything the shortcut cannot vouch for
is left to a reconcile (it returns False and the poller enqueues the scaler as before).
"""

from __future__ import annotations

from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler
from executor_fakes import ManualExecutor

from escaler.clock import FakeClock
from escaler.reconcilers.kit.poller import MetricsPoller
from escaler.runtime import Request

KEY = ("metrics", NS, "es")
ES = Request(NS, "es")


@pytest.fixture
def mx() -> ManualExecutor:
    return ManualExecutor()


def _ready(h: Harness, mx: ManualExecutor, *objs: dict[str, Any]) -> None:
    """Create, reconcile and consume a first collection: the scaler as a poll finds it."""
    h.api("deployments").create(deployment("web", 2))
    for o in objs or (scaler("es", metrics_trigger(external_metric("queue", "10"))),):
        h.api("elasticscalers").create(o)
    h.start()
    mx.start(h.es.controller.queue)
    h.collector.values["queue"] = 20.0
    h.reconcile("es")
    mx.complete(KEY)
    h.reconcile("es")
    h.settle()
    h.reconcile("es")  # the status write made a new resourceVersion: the reconciler has seen it


def test_a_due_poll_starts_the_collection_and_costs_one_reconcile(mx: ManualExecutor) -> None:
    with harness(outbound=mx, poll_interval=30.0) as h:
        _ready(h, mx)
        assert h.replicas() == 2 and len(mx.submitted) == 1
        h.clock.step(30.0)
        h.collector.values["queue"] = 50.0
        assert h.reconciler.poll(ES) is True
        assert len(mx.submitted) == 2 and mx.pending(KEY), "the poller started the collection"
        assert h.collector.calls == 1, "and did not run it on its own thread"
        assert h.reconciler.poll(ES) is True and len(mx.submitted) == 2, "one in flight at a time"
        mx.complete(KEY)
        assert mx.woken[-1] == ES, "its completion wakes the scaler"
        h.reconcile("es")  # the only reconcile of this poll
        assert h.replicas() > 2, "the one reconcile consumed the poller's collection"
        assert len(mx.submitted) == 2


def test_the_shortcut_declines_what_a_reconcile_must_decide(mx: ManualExecutor) -> None:
    with harness(outbound=mx, poll_interval=30.0) as h:
        _ready(h, mx)
        assert h.reconciler.poll(Request(NS, "missing")) is False
        assert h.reconciler.poll(ES) is False, "the last collection is still recent"
        h.clock.step(30.0)
        assert h.reconciler.poll(ES) is True
        mx.complete(KEY)
        assert h.reconciler.poll(ES) is False, "a finished result waits for its reconcile"
        h.reconcile("es")
        # an edit the reconciler has not seen yet: the shortcut never parses
        h.clock.step(30.0)
        obj = h.api("elasticscalers").get(f"{NS}/es")
        obj["spec"]["maxReplicas"] = 7
        h.api("elasticscalers").update(obj)
        h.wait_synced("elasticscalers")
        assert h.reconciler.poll(ES) is False
        submitted = len(mx.submitted)
        h.reconcile("es")
        assert len(mx.submitted) == submitted + 1, "the reconcile collects instead"


def test_a_full_namespace_queue_is_left_to_the_reconcile_that_reports_it(mx: ManualExecutor) -> None:
    with harness(outbound=mx, poll_interval=30.0) as h:
        _ready(h, mx)
        h.clock.step(30.0)
        mx.full = True
        assert h.reconciler.poll(ES) is False


def test_a_conflict_loser_makes_no_outbound_query_from_the_poller(mx: ManualExecutor) -> None:
    older = scaler("older", metrics_trigger(external_metric("queue", "10")),
                   created="2020-01-01T00:00:00Z")
    with harness(outbound=mx, poll_interval=30.0) as h:
        _ready(h, mx)
        h.api("elasticscalers").create(older)
        h.wait_synced("elasticscalers")
        h.clock.step(30.0)
        assert h.reconciler.poll(ES) is False, "the older scaler owns the target now"


def test_an_inline_executor_is_never_used_by_the_poller() -> None:
    with harness(poll_interval=30.0) as h:
        h.api("deployments").create(deployment("web", 2))
        h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric("queue", "10"))))
        h.start()
        h.collector.values["queue"] = 20.0
        h.reconcile("es")
        h.clock.step(30.0)
        assert h.reconciler.poll(ES) is False
        assert h.collector.calls == 1


def test_the_poller_enqueues_only_what_the_shortcut_declines() -> None:
    clock = FakeClock()
    added: list[tuple[Request, float]] = []
    started: list[Request] = []
    scalers = [Request("ns", f"s{i}") for i in range(40)]

    def start_poll(req: Request) -> bool:
        if req.name.endswith("3"):
            raise RuntimeError("boom")
        ok = int(req.name[1:]) % 2 == 0
        if ok:
            started.append(req)
        return ok

    poller = MetricsPoller(10.0, lambda: scalers, lambda r, d: added.append((r, d)), clock, tick=1.0,
                           start_poll=start_poll)
    for _ in range(10):
        poller.poll_once()
        clock.step(1.0)
    assert sorted(started + [r for r, _ in added]) == sorted(scalers), "every scaler polled once"
    assert {r for r, _ in added} == {r for r in scalers if int(r.name[1:]) % 2 or r.name.endswith("3")}
