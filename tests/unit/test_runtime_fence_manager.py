"""Leader fencing, end to end through the manager: a leader whose lease renewal hangs (a frozen
process, a partition) must stop writing before any standby could take the lease over, and a
write must be refused on the wire, not only between reconciles.

Time is a FakeClock; the HTTP tests use a real loopback server (tests/unit/test_kube_fakeapi.py)
so the refusal is observed as "no request arrived". Only names that exist before and after the
fencing change are imported at module level, so this file also runs against the base commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fakeapi import wait_until
from lease_fakes import InMemoryLeaseClient
from runtime_fakes import FakeCluster, FakeMapper
from test_kube_fakeapi import FakeAPI as HTTPFakeAPI
from test_kube_fakeapi import Reply, Req

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure
from escaler.runtime.manager import Manager, ManagerOptions

LEASE_DISCOVERY = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "coordination.k8s.io/v1",
    "resources": [{"name": "leases", "kind": "Lease", "namespaced": True,
                   "verbs": ["get", "list", "watch", "create", "update"]}],
}
LEASES = "/apis/coordination.k8s.io/v1"
# the manager's defaults: lease_duration 15, renew_deadline 10, retry_period 2


class HangingLeaseClient(InMemoryLeaseClient):
    """In-memory Leases whose updates by ``hang_for`` block (in real time) until ``release`` —
    a lease PUT that never answers, as seen by a frozen or partitioned leader."""

    def __init__(self) -> None:
        super().__init__()
        # the holder whose updates hang ("" = none)
        self.hang_for = ""
        # set to let hung updates proceed (they then apply, conditionally, as usual)
        self.release = threading.Event()
        # set while an update is hung
        self.hung = threading.Event()

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        if self.hang_for and (obj.get("spec") or {}).get("holderIdentity") == self.hang_for:
            self.hung.set()
            self.release.wait(30)
        return super().update(obj, timeout=timeout)


@contextmanager
def running(mgr: Manager,
            unblock: threading.Event | None = None) -> Iterator[tuple[threading.Event, list[int]]]:
    stop, code = threading.Event(), []
    t = threading.Thread(target=lambda: code.append(mgr.start(stop)), daemon=True, name="manager")
    t.start()
    try:
        yield stop, code
    finally:
        if unblock is not None:
            unblock.set()  # a hung fake call must return for the manager to stop
        stop.set()
        t.join(15)
        assert not t.is_alive(), "manager did not stop"


def standby_manager(lease: InMemoryLeaseClient, clock: FakeClock) -> Manager:
    return Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), lease, leader_election_identity="b",
                               clock=clock)


def test_hung_lease_put_closes_the_fence_before_a_standby_can_acquire() -> None:
    clock = FakeClock()
    lease = HangingLeaseClient()
    a = Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), lease, leader_election_identity="a",
                            clock=clock)
    b = standby_manager(lease, clock)
    try:
        with running(a, lease.release) as (_sa, code_a):
            wait_until(a.can_write.is_set, what="a elected at t=0")  # acquire sent at t=0
            with running(b):
                clock.block_until_waiters(2)
                clock.step(2.0)  # t=2: a renews (sent at t=2); b may re-read now or a bit later
                wait_until(lambda: clock.waiters() == 2, what="t=2: a renewed")
                renew_sent = clock.monotonic()
                lease.hang_for = "a"
                clock.block_until_waiters(2)
                clock.step(2.0)  # t=4: a's next renewal PUT goes out and never answers
                assert lease.hung.wait(5)
                fence_closed_at: float | None = None
                takeover: float | None = None
                while clock.monotonic() < renew_sent + 40.0:
                    clock.block_until_waiters(1)  # b settled; a is stuck in its PUT
                    if b.can_write.is_set():
                        takeover = clock.monotonic()
                        break
                    clock.step(0.5)
                    if fence_closed_at is None and not a.can_write.is_set():
                        fence_closed_at = clock.monotonic()
                assert fence_closed_at == renew_sent + 10, "the fence closes at send time + renew_deadline"
                assert takeover is not None, "b takes over once a's claim expired by its clock"
                # b observed a's t=2 renewal no earlier than t=2, so it waits at least 15 s from there
                assert takeover >= renew_sent + 15 > fence_closed_at
                assert not a.can_write.is_set() and not a.is_leader()
                lease.release.set()  # a's PUT lands at last: a 409 against b's lease, and too late
                wait_until(lambda: bool(code_a), what="a exits after losing")
        assert code_a == [1]
        assert not a.can_write.is_set()
    finally:
        lease.release.set()


def test_renewal_calls_get_the_time_left_and_none_starts_after_the_deadline() -> None:
    class TimingOut(InMemoryLeaseClient):
        """Every call after ``fail_from`` consumes its whole budget (a call that timed out)."""

        def __init__(self, clock: FakeClock) -> None:
            super().__init__()
            self.clock = clock
            self.failing = False
            self.calls: list[tuple[str, float, float | None]] = []

        def _call(self, method: str, timeout: float | None) -> None:
            self.calls.append((method, self.clock.monotonic(), timeout))
            if self.failing:
                self.clock.step(timeout if timeout is not None else 5.0)
                raise ConnectionFailure(f"{method}: timed out")

        def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
            self._call("get", timeout)
            return super().get(namespace, name, timeout=timeout)

        def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
            self._call("update", timeout)
            return super().update(obj, timeout=timeout)

    clock = FakeClock()
    lease = TimingOut(clock)
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock)
    with running(mgr) as (_stop, code):
        wait_until(mgr.can_write.is_set, what="elected at t=0")
        t0 = clock.monotonic()
        clock.block_until_waiters(1)
        clock.step(2.0)  # t=2: a renewal, sent at t=2 → deadline t=12
        wait_until(lambda: clock.waiters() == 1 and any(c[:2] == ("update", t0 + 2) for c in lease.calls))
        lease.calls.clear()
        lease.failing = True
        clock.step(2.0)  # t=4: the fast-path PUT hangs for its whole budget
        wait_until(lambda: bool(code), what="the elector gives up at the deadline")
    assert code == [1]
    # one call, given exactly the time left (12 - 4); the read that would follow it is not started
    assert lease.calls == [("update", t0 + 4, 8.0)]
    assert clock.monotonic() == t0 + 12
    assert not mgr.can_write.is_set()


# --------------------------------------------------------------------------- over HTTP


def lease_path(name: str = "escaler-manager") -> str:
    return f"{LEASES}/namespaces/ops/leases/{name}"


def test_thawed_manager_sends_no_write_once_its_lease_lapsed() -> None:
    clock = FakeClock()
    with HTTPFakeAPI() as api:
        api.discovery[LEASES] = LEASE_DISCOVERY
        gate = threading.Event()

        def hang(req: Req) -> Reply:  # the renewal never answers while "frozen"
            gate.wait(20)
            return Reply(504, {"kind": "Status", "code": 504, "reason": "Timeout", "message": "late"})

        mgr = Manager(ManagerOptions(leader_election=True, leader_election_namespace="ops",
                                     leader_election_identity="me", metrics_bind_address="0",
                                     health_probe_bind_address="0", clock=clock, renew_deadline=10.0),
                      rest=api.rest())
        assert mgr.rest is not None
        rest = mgr.rest
        with running(mgr):
            wait_until(mgr.can_write.is_set, what="elected over HTTP")
            patch_path = "/apis/apps/v1/namespaces/team/deployments/web/scale"
            api.on("PUT", lease_path(), hang)
            clock.block_until_waiters(1)
            clock.step(2.0)  # t=2: the renewal goes out and hangs (elector stuck, not on the clock)
            wait_until(lambda: len(api.reqs("PUT", LEASES)) == 1, what="renewal on the wire")
            clock.step(8.5)  # t=10.5: past acquire send time (0) + renew_deadline: the "thaw"
            refused: BaseException | None = None
            try:
                rest.request("PATCH", patch_path, body={"spec": {"replicas": 9}},
                             content_type="application/merge-patch+json")
            except Exception as exc:
                refused = exc
            assert api.reqs("PATCH") == [], "a write left the process after its lease lapsed"
            assert type(refused).__name__ == "FencedWrite"
            assert "may not write" in str(refused)
            gate.set()
    assert not mgr.can_write.is_set()


def test_kube_lease_call_is_bounded_by_the_callers_budget_without_retries() -> None:
    try:
        from escaler.runtime.leaselock import KubeLeaseClient
    except ImportError:  # the base layout
        from escaler.runtime.leaderelection import KubeLeaseClient  # type: ignore[attr-defined,no-redef]
    with HTTPFakeAPI() as api:
        release = threading.Event()

        def hang(req: Req) -> Reply:
            release.wait(20)
            return Reply(200, {})

        api.on("PUT", lease_path("l"), hang)
        client = KubeLeaseClient(api.rest(), timeout=15.0)  # per-call bound far above the budget
        obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "l", "namespace": "ops", "resourceVersion": "1"}, "spec": {}}
        started = time.monotonic()
        try:
            with pytest.raises(ConnectionFailure):
                client.update(obj, timeout=0.3)
            elapsed = time.monotonic() - started
        finally:
            release.set()
        # generous: without the budget the call would take the per-call 15 s (or twice that)
        assert elapsed < 5.0
        assert len(api.reqs("PUT")) == 1, "a lease call is never retried"
