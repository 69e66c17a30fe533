"""The write fence on its own, the REST client's write guard over a real loopback server, and the
event recorder dropping (not flushing) writes the fence refuses. All time is a FakeClock."""

from __future__ import annotations

import logging
import math

import pytest
from fakeapi import wait_until
from test_kube_fakeapi import FakeAPI as HTTPFakeAPI

from escaler.clock import FakeClock
from escaler.errors import FencedWrite, StatusError
from escaler.kube.dynamic import DynamicClient
from escaler.kube.events import EventRecorder
from escaler.runtime.fence import WriteFence

RENEW_DEADLINE = 10.0


def leased(clock: FakeClock) -> WriteFence:
    """An elected fence granted until now + renew deadline."""
    fence = WriteFence(clock, leased=True)
    assert fence.grant(clock.monotonic() + RENEW_DEADLINE)
    fence.open()
    return fence


def test_a_leased_fence_is_closed_until_granted_and_opened() -> None:
    clock = FakeClock()
    fence = WriteFence(clock, leased=True)
    assert not fence.allowed() and fence.valid_until == -math.inf
    fence.open()
    assert not fence.allowed(), "opened without a grant: no lease, no write"
    assert fence.grant(clock.monotonic() + RENEW_DEADLINE)
    assert fence.allowed() and fence.is_set()


def test_granted_but_not_opened_refuses_and_names_the_reason() -> None:
    clock = FakeClock()
    fence = WriteFence(clock, leased=True)
    fence.grant(clock.monotonic() + RENEW_DEADLINE)
    with pytest.raises(FencedWrite, match=r"PUT /x: refused, this manager may not write \(not elected\)"):
        fence.check("PUT /x")


def test_permission_ends_exactly_at_valid_until_and_latches() -> None:
    clock = FakeClock()
    fence = leased(clock)
    t0 = clock.monotonic()
    clock.step(RENEW_DEADLINE - 0.001)
    assert fence.allowed()
    clock.step(0.001)
    assert not fence.allowed(), "monotonic() == valid_until is already too late"
    with pytest.raises(FencedWrite, match="not renewed within the renew deadline"):
        fence.check("PATCH /status")
    # a renewal whose answer arrives now (sent before the lapse) must not revive it
    assert not fence.grant(t0 + 2 * RENEW_DEADLINE)
    assert not fence.allowed()


def test_renewals_extend_and_never_shorten() -> None:
    clock = FakeClock()
    fence = leased(clock)
    t0 = clock.monotonic()
    clock.step(2.0)
    assert fence.grant(t0 + 2.0 + RENEW_DEADLINE)
    assert fence.grant(t0 + 1.0)  # an older grant: accepted, no effect
    assert fence.valid_until == t0 + 12.0
    clock.step(9.9)
    assert fence.allowed()
    clock.step(0.1)
    assert not fence.allowed()


def test_a_lapse_latches_even_if_nobody_asked_before_the_next_grant() -> None:
    clock = FakeClock()
    fence = leased(clock)
    clock.step(RENEW_DEADLINE + 5)  # frozen past the deadline; no writer checked meanwhile
    assert not fence.grant(clock.monotonic() + RENEW_DEADLINE)
    assert not fence.allowed()


def test_close_is_final() -> None:
    clock = FakeClock()
    fence = leased(clock)
    fence.close("leader lease lost")
    fence.open()
    assert fence.grant(math.inf) is False
    with pytest.raises(FencedWrite, match=r"\(leader lease lost\)"):
        fence.check("POST /events")


def test_without_leader_election_the_fence_is_open_until_closed() -> None:
    clock = FakeClock()
    fence = WriteFence(clock, leased=False)
    assert not fence.allowed()
    fence.set()  # threading.Event alias of open()
    clock.step(1e9)
    assert fence.allowed() and fence.is_set()
    fence.clear()
    assert not fence.allowed()


@pytest.mark.parametrize(("method", "path", "fenced"), [
    ("PUT", "/apis/apps/v1/namespaces/t/deployments/web/scale", True),
    ("PATCH", "/apis/elasticscaler.io/v1alpha1/namespaces/t/elasticscalers/s/status", True),
    ("POST", "/apis/autoscaling/v2/namespaces/t/horizontalpodautoscalers", True),
    ("DELETE", "/apis/autoscaling/v2/namespaces/t/horizontalpodautoscalers/h", True),
    ("POST", "/apis/events.k8s.io/v1/namespaces/t/events", True),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/escaler-manager", False),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", False),
    ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", False),
], ids=["scale", "status", "hpa-create", "hpa-delete", "event", "lease", "tokenreview", "sar"])
def test_guard_fences_cluster_writes_and_exempts_lease_and_review_calls(method: str, path: str,
                                                                        fenced: bool) -> None:
    fence = WriteFence(FakeClock(), leased=True)  # never granted: every fenced write is refused
    if fenced:
        with pytest.raises(FencedWrite, match=method):
            fence.guard(method, path)
    else:
        fence.guard(method, path)


# --------------------------------------------------------------------------- on the wire


def test_rest_write_guard_refuses_before_sending_and_passes_reads_lease_and_reviews() -> None:
    clock = FakeClock()
    fence = leased(clock)
    with HTTPFakeAPI() as api:
        rest = api.rest()
        rest.set_write_guard(fence.guard)
        scale = "/apis/apps/v1/namespaces/t/deployments/web/scale"
        with pytest.raises(StatusError):  # allowed: it reaches the server (404 there)
            rest.request("PUT", scale, body={"spec": {"replicas": 2}})
        assert len(api.reqs("PUT", scale)) == 1
        clock.step(RENEW_DEADLINE)
        with pytest.raises(FencedWrite):
            rest.request("PUT", scale, body={"spec": {"replicas": 3}})
        with pytest.raises(FencedWrite):
            rest.request("POST", "/apis/events.k8s.io/v1/namespaces/t/events", body={})
        assert len(api.reqs("PUT", scale)) == 1 and api.reqs("POST") == [], "nothing fenced was sent"
        for method, path in [("GET", scale),
                             ("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
                             ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/l")]:
            with pytest.raises(StatusError):  # sent: the fake answers 404
                rest.request(method, path, body=None if method == "GET" else {})
            assert api.reqs(method, path), f"{method} {path} must not be fenced"
        rest.set_write_guard(None)
        with pytest.raises(StatusError):
            rest.request("PUT", scale, body={"spec": {"replicas": 4}})


def test_event_backlog_is_dropped_not_flushed_once_fenced(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    fence = leased(clock)
    with HTTPFakeAPI() as api:
        rest = api.rest()
        rest.set_write_guard(fence.guard)
        from escaler.kube.discovery import RESTMapper

        recorder = EventRecorder(DynamicClient(rest, RESTMapper(rest, clock=clock)), component="escaler",
                                 instance="me", clock=clock)
        try:
            clock.step(RENEW_DEADLINE)  # the lease lapsed (a frozen process wakes up)
            regarding = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "t", "name": "web",
                         "uid": "u1"}
            with caplog.at_level(logging.WARNING, logger="escaler.kube.events"):
                for i in range(20):
                    recorder.event(regarding, "Normal", f"Reason{i}", "Scale", f"note {i}")
                assert recorder.flush(5.0)
                wait_until(lambda: recorder.fenced == 20, what="every fenced create dropped")
            assert api.reqs("POST") == [] and api.reqs("PATCH") == [], "the backlog was not flushed"
            assert recorder.write_failures == 0
            fenced_logs = [r for r in caplog.records if "fenced" in r.getMessage()]
            assert len(fenced_logs) == 1, "logged once, not once per Event"
        finally:
            recorder.stop(5.0)
        assert api.reqs("POST") == [] and api.reqs("PATCH") == []


def test_socket_guard_is_the_last_check_and_sends_the_request_in_one_piece() -> None:
    """A fence that lapses after the REST client's check (the process froze in the HTTP stack)
    is caught by the connection's own check: nothing of the request is written."""
    checks: list[tuple[str, str]] = []
    refuse_from = {"n": 99}

    def guard(method: str, path: str) -> None:
        checks.append((method, path))
        if len(checks) >= refuse_from["n"]:
            raise FencedWrite(f"{method} {path}: refused")

    scale = "/apis/apps/v1/namespaces/t/deployments/web/scale"
    with HTTPFakeAPI() as api:
        rest = api.rest()
        rest.set_write_guard(guard)
        with pytest.raises(StatusError):  # allowed: both checks pass, the body arrives whole
            rest.request("PUT", scale, body={"spec": {"replicas": 2}})
        assert checks == [("PUT", scale), ("PUT", scale)], "checked by the client, then at the socket"
        assert [r.body for r in api.reqs("PUT")] == [{"spec": {"replicas": 2}}]
        with pytest.raises(StatusError):
            rest.request("DELETE", "/api/v1/namespaces/t/configmaps/c")  # body-less write
        assert len(checks) == 4 and api.reqs("DELETE")
        with pytest.raises(StatusError):
            rest.request("GET", scale)  # reads are not checked
        assert len(checks) == 4
        refuse_from["n"] = len(checks) + 2  # the client-level check passes, the socket-level one refuses
        with pytest.raises(FencedWrite):
            rest.request("PATCH", scale, body={"spec": {"replicas": 3}},
                         content_type="application/merge-patch+json")
        assert api.reqs("PATCH") == [], "not a byte of the write reached the server"
        refuse_from["n"] = 99
        with pytest.raises(StatusError):  # the pool recovers: the next write goes out normally
            rest.request("PATCH", scale, body={"spec": {"replicas": 4}},
                         content_type="application/merge-patch+json")
        assert [r.body for r in api.reqs("PATCH")] == [{"spec": {"replicas": 4}}]
