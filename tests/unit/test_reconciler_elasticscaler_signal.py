"""SignalTrigger (push API, pull, idle timeout, activation from zero) and the MetricsTrigger poller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler

from escaler.clock import FakeClock
from escaler.reconcilers.elasticscaler.signal import (
    Signal,
    SignalEntry,
    parse_signal_body,
    recommend,
)
from escaler.reconcilers.kit.poller import MetricsPoller, phase
from escaler.runtime import Request
from escaler.runtime.apiserver import ApiError, ApiRequest
from escaler.signals.signal_pull import SignalReading


class FakeServer:
    """Records add_route calls (the manager's ApiServer surface the reconciler uses)."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, str, Any, Any]] = []

    def add_route(
        self, method: str, pattern: str, handler: Any, *, authz: Any = None, public: bool = False
    ) -> None:
        self.routes.append((method, pattern, handler, authz))


def signal_trigger(**fields: Any) -> dict[str, Any]:
    return {"type": "SignalTrigger", "signalTrigger": fields} if fields else {"type": "SignalTrigger"}


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def h(server: FakeServer) -> Iterator[Harness]:
    with harness(api_server=server) as hh:
        yield hh


def push(server: FakeServer, ns: str, name: str, body: Any) -> tuple[int, Any]:
    _, _, handler, _ = server.routes[0]
    req = ApiRequest(
        "POST",
        f"/signal/v1/namespaces/{ns}/elasticscalers/{name}",
        {"namespace": ns, "name": name},
        {},
        {},
        body,
        None,
    )
    try:
        resp = handler(req)
    except ApiError as err:
        return err.status, err.message
    return resp.status, resp.body


# -- the rule (pure) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "now", "current", "want", "idle"),
    [
        (SignalEntry(first_seen=0), 10, 2, 2, False),
        (SignalEntry(first_seen=0), 700, 2, 0, True),
        (SignalEntry(first_seen=0, last_activity=650), 700, 0, 3, False),
        (SignalEntry(first_seen=0, last_activity=650), 700, 4, 4, False),
        (SignalEntry(first_seen=0, last_activity=50), 700, 4, 0, True),
        (SignalEntry(first_seen=0, last_activity=690, replicas=6), 700, 1, 6, False),
    ],
    ids=[
        "no-signal-holds",
        "idle-since-first-seen",
        "activates-from-zero",
        "active-holds",
        "idle-after-activity",
        "replicas-request",
    ],
)
def test_signal_rule(entry: SignalEntry, now: float, current: int, want: int, idle: bool) -> None:
    rec = recommend(entry, now, current=current, min_replicas=0, idle_timeout=600, activation_replicas=3)
    assert (rec.replicas, rec.idle) == (want, idle)


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"active": True}, Signal(True, None)),
        ({"replicas": 3}, Signal(None, 3)),
        (b'{"active": false}', Signal(False, None)),
    ],
    ids=["active", "replicas", "bytes"],
)
def test_parse_signal(body: Any, want: Signal) -> None:
    assert parse_signal_body(body) == want


@pytest.mark.parametrize(
    "body",
    [{}, {"active": "yes"}, {"replicas": -1}, [1], b"nope"],
    ids=["empty", "active-string", "negative", "list", "not-json"],
)
def test_parse_signal_refused(body: Any) -> None:
    with pytest.raises(ValueError):
        parse_signal_body(body)


# -- push API -------------------------------------------------------------------------------------


def test_push_route_registered_with_authz(h: Harness, server: FakeServer) -> None:
    [(method, pattern, _, authz)] = server.routes
    assert (method, pattern) == ("POST", "/signal/v1/namespaces/{namespace}/elasticscalers/{name}")
    assert (authz.verb, authz.group, authz.resource, authz.subresource) == (
        "update",
        "elasticscaler.io",
        "elasticscalers",
        "signal",
    )


def test_push_enqueues_and_scales_from_zero(h: Harness, server: FakeServer) -> None:
    h.api("deployments").create(deployment("web", 0))
    h.api("elasticscalers").create(scaler("es", signal_trigger(activationReplicas=2), min_replicas=0))
    h.start()
    h.reconcile("es")
    assert h.replicas() == 0
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "DecisionReceived")
    queue = h.es.controller.queue
    while len(queue):
        queue.done(queue.get())
    status, body = push(server, NS, "es", {"active": True})
    assert status == 202 and body["accepted"] is True and body["scaler"] == "team/es"
    assert len(queue) == 1 and queue.get() == Request(NS, "es"), "the push enqueues the scaler at once"
    h.reconcile("es")
    assert h.replicas() == 2


def test_push_unknown_scaler_is_404(h: Harness, server: FakeServer) -> None:
    h.start()
    status, message = push(server, NS, "nope", {"active": True})
    assert status == 404 and "nope" in message


def test_push_to_a_non_signal_scaler_is_409_and_bad_body_400(h: Harness, server: FakeServer) -> None:
    h.api("elasticscalers").create(scaler("m", metrics_trigger(external_metric())))
    h.api("elasticscalers").create(scaler("s", signal_trigger(), min_replicas=0))
    h.start()
    h.wait_synced()
    assert push(server, NS, "m", {"active": True})[0] == 409
    assert push(server, NS, "s", {"active": 1})[0] == 400


def test_idle_timeout_scales_to_min(h: Harness, server: FakeServer) -> None:
    h.api("deployments").create(deployment("web", 3))
    h.api("elasticscalers").create(
        scaler(
            "es",
            signal_trigger(idleTimeoutSeconds=100),
            min_replicas=0,
            annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"},
        )
    )
    h.start()
    push(server, NS, "es", {"active": True})
    result = h.reconcile("es")
    assert h.replicas() == 3
    # requeued exactly when the idle timeout expires (the fake clock has not moved), not on a tick
    assert result.requeue_after == 100.0
    h.clock.step(101)
    h.reconcile("es")
    assert h.replicas() == 0


def test_replicas_signal(h: Harness, server: FakeServer) -> None:
    h.api("deployments").create(deployment("web", 1))
    h.api("elasticscalers").create(scaler("es", signal_trigger(), min_replicas=0, max_replicas=5))
    h.start()
    push(server, NS, "es", {"replicas": 9})
    h.reconcile("es")
    assert h.replicas() == 5, "bounds apply to signals too"
    assert h.condition("es", "ScalingLimited")["reason"] == "TooManyReplicas"  # type: ignore[index]


def test_pull_endpoint(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 0))
    h.api("elasticscalers").create(
        scaler(
            "es", signal_trigger(endpoint="http://gw.example/activity", pollIntervalSeconds=7), min_replicas=0
        )
    )
    h.start()
    h.pull_reading = SignalReading(active=True)
    result = h.reconcile("es")
    assert h.pulls == ["http://gw.example/activity"]
    assert h.replicas() == 1
    assert result.requeue_after == 7.0  # the next pull, pollIntervalSeconds after this one
    h.reconcile("es")
    assert len(h.pulls) == 1, "pulled at most once per pollIntervalSeconds"
    h.settle("web")
    h.clock.step(7)
    h.pull_reading = SignalReading.fail("gateway: HTTP 503")
    h.reconcile("es")
    assert len(h.pulls) == 2
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and cond["reason"] == "DecisionUnavailable" and "503" in cond["message"]
    assert h.replicas() == 1, "a failed pull holds (never mistaken for idle)"


def test_pull_endpoint_host_not_allowed() -> None:
    with harness(allowed_hosts=("*.svc",)) as h:
        h.api("deployments").create(deployment("web", 1))
        h.api("elasticscalers").create(
            scaler("es", signal_trigger(endpoint="http://gw.example/a"), min_replicas=0)
        )
        h.start()
        h.reconcile("es")
        cond = h.condition("es", "ScalingActive")
        assert (
            cond is not None
            and cond["reason"] == "InvalidSpec"
            and "allowed-endpoint-hosts" in cond["message"]
        )
        assert h.pulls == []


# -- the MetricsTrigger poller --------------------------------------------------------------------


def test_poller_phases_are_distinct_and_within_the_interval() -> None:
    reqs = [Request(NS, f"s{i}") for i in range(200)]
    phases = [phase(r, 30.0) for r in reqs]
    assert all(0 <= p < 30.0 for p in phases)
    assert len(set(phases)) == len(phases)
    # spread: every 3 s slice of the interval gets some scalers
    assert len({int(p // 3) for p in phases}) == 10
    assert phase(reqs[0], 30.0) == phase(Request(NS, "s0"), 30.0), "deterministic across processes"


def test_poller_enqueues_each_scaler_once_per_interval_at_its_phase() -> None:
    clock = FakeClock()
    reqs = [Request(NS, f"s{i}") for i in range(20)]
    added: list[tuple[Request, float, float]] = []
    poller = MetricsPoller(
        30.0, lambda: reqs, lambda r, d: added.append((r, d, clock.monotonic() + d)), clock, tick=1.0
    )
    for _ in range(60):  # two intervals, one pass per tick
        poller.poll_once()
        clock.step(1.0)
    by_req: dict[Request, list[float]] = {}
    for r, delay, at in added:
        assert 0 <= delay <= 1.0
        by_req.setdefault(r, []).append(at)
    for r in reqs:
        times = by_req[r]
        assert len(times) == 2, f"{r}: {times}"
        assert times[1] - times[0] == pytest.approx(30.0)
        assert times[0] % 30.0 == pytest.approx(phase(r, 30.0))


def test_poller_forgets_gone_scalers_and_zero_disables() -> None:
    clock = FakeClock()
    current = [Request(NS, "a"), Request(NS, "b")]
    poller = MetricsPoller(10.0, lambda: list(current), lambda r, d: None, clock)
    poller.poll_once()
    assert set(poller.due_times()) == set(current)
    current.pop()
    clock.step(poller.relist)  # the list is re-read at most every `relist` seconds
    poller.poll_once()
    assert set(poller.due_times()) == {Request(NS, "a")}
    assert MetricsPoller(0.0, lambda: current, lambda r, d: None, clock).poll_once() == []


def test_poller_wired_to_metrics_scalers_only() -> None:
    with harness(poll_interval=30.0) as h:
        h.api("elasticscalers").create(scaler("m", metrics_trigger(external_metric())))
        h.api("elasticscalers").create(scaler("hpa", metrics_trigger(external_metric(), algorithm="HPA")))
        h.api("elasticscalers").create(scaler("s", signal_trigger(), min_replicas=0))
        h.start()
        h.wait_synced()
        assert h.es.poller is not None
        scheduled = []
        for _ in range(31):
            scheduled += [r for r, _ in h.es.poller.poll_once()]
            h.clock.step(1.0)
        assert scheduled == [Request(NS, "m")]


def test_a_pull_interval_below_the_managers_floor_is_raised_to_it_and_a_warning_says_so(h: Harness) -> None:
    # issue 27 item 11: a SignalTrigger's pollIntervalSeconds 1 was pulled every second whatever
    # --min-poll-interval (5 s here, the default) said
    h.api("deployments").create(deployment("web", 0))
    h.api("elasticscalers").create(
        scaler("es", signal_trigger(endpoint="http://gw.example/activity", pollIntervalSeconds=1),
               min_replicas=0))
    h.start()
    h.pull_reading = SignalReading(active=True)
    result = h.reconcile("es")
    assert h.pulls == ["http://gw.example/activity"]
    assert result.requeue_after == 5.0, "the next pull waits the manager's floor, not the spec's 1 s"
    for _ in range(4):
        h.clock.step(1)
        h.reconcile("es")
    assert len(h.pulls) == 1, "pulled more often than --min-poll-interval allows"
    h.clock.step(1)
    h.reconcile("es")
    assert len(h.pulls) == 2
    notes = [e.note for e in h.recorder.events if e.reason == "PollIntervalClamped"]  # type: ignore[attr-defined]
    assert notes == ["spec.trigger.signalTrigger.pollIntervalSeconds 1 is below the manager's "
                     "--min-poll-interval 5s: polled every 5s"], notes
