"""Leader election on a Lease: acquire, renew, standby, expiry by our own clock, loss, release,
conflicts, transitions, and client-go's timing validation. All time is a FakeClock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from fakeapi import wait_until
from lease_fakes import InMemoryLeaseClient
from runtime_fakes import FlakyLeaseClient

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from escaler.runtime.leaselock import (
    LeaderElectionRecord,
    LeaseLock,
    format_micro_time,
    parse_micro_time,
)

NS, NAME = "ops", "escaler-manager"


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.0


@dataclass
class Candidate:
    elector: LeaderElector
    stop: threading.Event
    thread: threading.Thread
    events: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)


def config(identity: str, **kw: Any) -> LeaderElectionConfig:
    return LeaderElectionConfig(name=NAME, namespace=NS, identity=identity, **kw)


@contextmanager
def candidate(client: InMemoryLeaseClient, clock: FakeClock, identity: str, **kw: Any) -> Iterator[Candidate]:
    events: list[str] = []
    started, stopped = threading.Event(), threading.Event()

    def on_started() -> None:
        events.append("started")
        started.set()

    def on_stopped() -> None:
        events.append("stopped")
        stopped.set()

    elector = LeaderElector(
        config(identity, **kw), LeaseLock(client, NS, NAME), clock=clock, rng=NoJitter(),
        on_started_leading=on_started, on_stopped_leading=on_stopped,
        on_new_leader=lambda holder: events.append(f"leader={holder}"),
    )
    stop = threading.Event()
    t = threading.Thread(target=elector.run, args=(stop,), daemon=True, name=f"elector-{identity}")
    c = Candidate(elector, stop, t, events, started, stopped)
    t.start()
    try:
        yield c
    finally:
        stop.set()
        t.join(5)
        assert not t.is_alive()


def spec(client: InMemoryLeaseClient) -> dict[str, Any]:
    lease = client.get(NS, NAME)
    assert lease is not None
    return dict(lease["spec"])


def put_lease(client: InMemoryLeaseClient, holder: str, renew: str, duration: int = 15,
              transitions: int = 3) -> None:
    # straight to the store: not a call of the code under test (FlakyLeaseClient would log it)
    InMemoryLeaseClient.create(client, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": NAME, "namespace": NS},
                   "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                            "acquireTime": renew, "renewTime": renew, "leaseTransitions": transitions}})


def renewed_at(client: InMemoryLeaseClient, when: str) -> Callable[[], bool]:
    return lambda: bool(spec(client)["renewTime"] == when)


def step(clock: FakeClock, seconds: float, waiters: int = 1) -> None:
    """Step once every elector is parked on the clock (deterministic hand-off)."""
    clock.block_until_waiters(waiters)
    clock.step(seconds)


def test_acquires_an_absent_lease_and_writes_micro_times() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        assert a.elector.is_leader()
        s = spec(client)
        assert s == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                     "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.000000Z"}
        assert a.events[:2] == ["leader=a", "started"]


def test_leader_renews_every_retry_period() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        for i in (1, 2, 3):
            step(clock, 2.0)
            wait_until(renewed_at(client, f"2026-01-01T00:00:0{2 * i}.000000Z"), what=f"renewal {i}")
        s = spec(client)
        assert s["acquireTime"] == "2026-01-01T00:00:00.000000Z"
        assert s["leaseTransitions"] == 0
        assert a.elector.is_leader()


def test_standby_cannot_take_a_live_lease() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        with candidate(client, clock, "b") as b:
            for _ in range(15):  # 30 s: twice the lease duration, the leader renewing throughout
                step(clock, 2.0, waiters=2)
            wait_until(lambda: "leader=a" in b.events)
            assert not b.elector.is_leader()
            assert not b.started.is_set()
            assert b.elector.get_leader() == "a"
            assert spec(client)["holderIdentity"] == "a"


@pytest.mark.parametrize("remote_renew", [
    "2000-01-01T00:00:00.000000Z",  # remote clock says long expired
    "2099-01-01T00:00:00.000000Z",  # remote clock says valid for decades
    "not-a-time",
], ids=["remote-time-in-past", "remote-time-in-future", "remote-time-garbage"])
def test_takes_over_an_expired_lease_by_its_own_monotonic_clock(remote_renew: str) -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    put_lease(client, "dead", remote_renew, duration=15, transitions=3)
    with candidate(client, clock, "b") as b:
        # first observation at t=0; attempts every 2 s; valid while observed + 15 > now
        for _ in range(7):  # t = 14
            step(clock, 2.0)
        wait_until(lambda: clock.waiters() == 1)
        assert not b.elector.is_leader()
        step(clock, 2.0)  # t = 16: expired
        assert b.started.wait(5)
        s = spec(client)
        assert s["holderIdentity"] == "b"
        assert s["leaseTransitions"] == 4
        assert b.events[0] == "leader=dead" and "leader=b" in b.events


def test_loses_leadership_when_renewals_fail_past_the_renew_deadline() -> None:
    client, clock = FlakyLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        step(clock, 2.0)  # t=2: a renewal succeeds
        wait_until(lambda: spec(client)["renewTime"].startswith("2026-01-01T00:00:02"))
        client.fail_all = ConnectionFailure("apiserver unreachable")
        # the deadline is the last successful renewal's send time + renew_deadline: t=2+10=12
        step(clock, 2.0)  # t=4: renewal round starts; attempts at 4, 6, 8, 10
        for _ in range(3):
            step(clock, 2.0)
        wait_until(lambda: clock.waiters() == 1)
        assert a.elector.is_leader() and not a.stopped.is_set()  # t=10: still within the deadline
        step(clock, 2.0)  # t=12: deadline reached
        assert a.stopped.wait(5)
        a.thread.join(5)
        assert not a.thread.is_alive(), "run() returns after losing the lease"
        assert not a.elector.is_leader()
        assert a.events[-1] == "stopped"
        client.fail_all = None
        assert spec(client)["holderIdentity"] == "a"  # a lost leader does not write a release


def test_renewal_finding_another_live_holder_is_lost_at_once() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        lease = client.get(NS, NAME)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        client.update(lease)
        step(clock, 2.0)  # fast path: 409; read: held by a live "intruder"
        assert a.stopped.wait(5)
        assert "leader=intruder" in a.events


def test_release_on_cancel_clears_holder_and_a_standby_takes_over_at_once() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        with candidate(client, clock, "b") as b:
            wait_until(lambda: "leader=a" in b.events)
            a.stop.set()
            assert a.stopped.wait(5)
            s = spec(client)
            assert s["holderIdentity"] == "" and s["leaseDurationSeconds"] == 1
            assert s["leaseTransitions"] == 0
            step(clock, 2.0)  # b's next attempt: the released lease is free now
            assert b.started.wait(5)
            assert spec(client)["holderIdentity"] == "b"
            assert spec(client)["leaseTransitions"] == 1


def test_no_release_when_release_on_cancel_is_off() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a", release_on_cancel=False) as a:
        assert a.started.wait(5)
        a.stop.set()
        assert a.stopped.wait(5)
    assert spec(client)["holderIdentity"] == "a"


def test_disable_release_keeps_the_lease() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        a.elector.disable_release()
        a.stop.set()
        assert a.stopped.wait(5)
    assert spec(client)["holderIdentity"] == "a"


def test_conflict_on_acquire_is_a_failed_attempt_then_retried() -> None:
    client, clock = FlakyLeaseClient(), FakeClock()
    put_lease(client, "", "2026-01-01T00:00:00.000000Z", duration=1)  # released
    client.next_errors["update"].append(StatusError(409, "Conflict", "the object has been modified"))
    with candidate(client, clock, "b") as b:
        wait_until(lambda: client.calls == ["get", "update"], what="first attempt")
        clock.block_until_waiters(1)
        assert not b.elector.is_leader()
        clock.step(2.0)
        assert b.started.wait(5)
        assert client.calls == ["get", "update", "get", "update"]


def test_conflict_on_renewal_is_retried_without_losing() -> None:
    client, clock = FlakyLeaseClient(), FakeClock()
    with candidate(client, clock, "a") as a:
        assert a.started.wait(5)
        conflict = StatusError(409, "Conflict", "modified")
        client.next_errors["update"].extend([conflict, conflict])  # fast path and slow path
        client.calls.clear()
        step(clock, 2.0)
        wait_until(lambda: client.calls == ["update", "get", "update"], what="failed renewal attempt")
        step(clock, 2.0)  # retry within the renew deadline succeeds
        wait_until(lambda: spec(client)["renewTime"].startswith("2026-01-01T00:00:04"))
        assert a.elector.is_leader() and not a.stopped.is_set()


def test_stop_before_acquiring_returns_without_callbacks() -> None:
    client, clock = InMemoryLeaseClient(), FakeClock()
    put_lease(client, "other", "2026-01-01T00:00:00.000000Z")
    with candidate(client, clock, "b") as b:
        clock.block_until_waiters(1)
        b.stop.set()
        b.thread.join(5)
        assert not b.thread.is_alive()
    assert b.events == ["leader=other"]


def test_acquire_waits_are_jittered_up_to_2_2_retry_periods() -> None:
    class MaxJitter(random.Random):
        def random(self) -> float:
            return 0.999

    client, clock = FlakyLeaseClient(), FakeClock()
    put_lease(client, "other", "2026-01-01T00:00:00.000000Z")
    elector = LeaderElector(config("b"), LeaseLock(client, NS, NAME), clock=clock, rng=MaxJitter())
    stop = threading.Event()
    t = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    t.start()
    try:
        clock.block_until_waiters(1)
        assert client.calls == ["get"]
        clock.step(4.39)  # 2 * (1 + 0.999 * 1.2) = 4.3976: not yet
        assert client.calls == ["get"] and clock.waiters() == 1
        clock.step(0.01)
        wait_until(lambda: client.calls == ["get", "get"], what="second attempt")
    finally:
        stop.set()
        t.join(5)


VALIDATION_CASES = [
    # (id, kwargs, message fragment)
    ("lease-equals-renew", {"lease_duration": 10.0, "renew_deadline": 10.0},
     r"lease_duration: must be greater than renew_deadline \(lease_duration > renew_deadline\)"),
    ("lease-below-renew", {"lease_duration": 5.0, "renew_deadline": 10.0}, "lease_duration > renew_deadline"),
    ("renew-equals-jittered-retry", {"renew_deadline": 6.0, "retry_period": 5.0},
     r"renew_deadline: .*\(renew_deadline > JitterFactor \* retry_period\)"),
    ("renew-below-jittered-retry", {"renew_deadline": 10.0, "retry_period": 9.0},
     "renew_deadline > JitterFactor"),
    ("zero-lease", {"lease_duration": 0.0}, "lease_duration: must be > 0"),
    ("negative-renew", {"renew_deadline": -1.0}, "renew_deadline: must be > 0"),
    ("zero-retry", {"retry_period": 0.0}, "retry_period: must be > 0"),
    ("nan-retry", {"retry_period": float("nan")}, "retry_period: must be > 0"),
    ("empty-identity", {"identity": ""}, "identity: must not be empty"),
    ("empty-name", {"name": ""}, "name: must not be empty"),
    ("empty-namespace", {"namespace": ""}, "namespace: must not be empty"),
]


@pytest.mark.parametrize(("kwargs", "message"), [c[1:] for c in VALIDATION_CASES],
                         ids=[c[0] for c in VALIDATION_CASES])
def test_config_validation(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"name": NAME, "namespace": NS, "identity": "a"}
    with pytest.raises(ValueError, match=message):
        LeaderElectionConfig(**{**base, **kwargs})


@pytest.mark.parametrize(("lease", "renew", "retry", "lease_seconds"),
                         [(15.0, 10.0, 2.0, 15), (0.5, 0.3, 0.2, 1), (60, 30, 24, 60), (15.2, 10.0, 2.0, 16)],
                         ids=["spec-defaults", "sub-second-rounds-up-to-1", "just-above-jitter",
                              "fraction-rounds-up"])
def test_valid_configs(lease: float, renew: float, retry: float, lease_seconds: int) -> None:
    cfg = config("a", lease_duration=lease, renew_deadline=renew, retry_period=retry)
    assert cfg.lease_duration_seconds == lease_seconds  # whole seconds, never less than configured


def test_lock_must_match_config() -> None:
    with pytest.raises(ValueError, match="does not match"):
        LeaderElector(config("a"), LeaseLock(InMemoryLeaseClient(), "other", NAME))


def test_micro_time_roundtrip() -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)
    assert format_micro_time(when) == "2026-03-04T05:06:07.000890Z"
    assert parse_micro_time("2026-03-04T05:06:07.000890Z") == when
    assert parse_micro_time("") is None and parse_micro_time(None) is None


def test_record_spec_roundtrip() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    rec = LeaderElectionRecord("a", 15, t, t, 2)
    assert LeaderElectionRecord.from_spec(rec.to_spec()) == rec


def test_in_memory_lease_client_enforces_resource_version() -> None:
    client = InMemoryLeaseClient()
    put_lease(client, "a", "2026-01-01T00:00:00.000000Z")
    with pytest.raises(StatusError) as exists:
        put_lease(client, "b", "2026-01-01T00:00:00.000000Z")
    assert exists.value.code == 409
    first = client.get(NS, NAME)
    second = client.get(NS, NAME)
    assert first is not None and second is not None
    client.update(first)
    with pytest.raises(StatusError) as conflict:
        client.update(second)
    assert conflict.value.code == 409 and conflict.value.reason == "Conflict"


def test_standby_wakes_exactly_when_the_observed_lease_expires() -> None:
    class MaxJitter(random.Random):
        def random(self) -> float:
            return 0.999

    client, clock = InMemoryLeaseClient(), FakeClock()
    put_lease(client, "dead", "2026-01-01T00:00:00.000000Z", duration=15)
    started = threading.Event()
    elector = LeaderElector(config("b"), LeaseLock(client, NS, NAME), clock=clock, rng=MaxJitter(),
                            on_started_leading=started.set)
    stop = threading.Event()
    t = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    t.start()
    try:
        # observed at t=0; jittered retries at 4.3976, 8.7952, 13.1928; the next would be 17.59,
        # but the lease expires at 15.0, so the standby wakes then
        for _ in range(3):
            step(clock, 4.3976)
        clock.block_until_waiters(1)
        clock.step(15.0 - 3 * 4.3976 - 0.01)
        clock.block_until_waiters(1)
        assert not started.is_set() and not elector.is_leader()
        clock.step(0.01)
        assert started.wait(5), "standby did not take the lease at expiry"
        assert spec(client)["holderIdentity"] == "b"
    finally:
        stop.set()
        t.join(5)


def test_a_renewal_answered_after_the_deadline_is_a_loss_and_does_not_reopen_the_fence() -> None:
    from escaler.runtime.fence import WriteFence

    class FreezesAfterSending(InMemoryLeaseClient):
        def __init__(self, clock: FakeClock) -> None:
            super().__init__()
            self.clock = clock
            self.freeze = 0.0

        def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
            out = super().update(obj, timeout=timeout)  # stored by the API server...
            self.clock.step(self.freeze)  # ...but the process froze before reading the answer
            return out

    clock = FakeClock()
    client = FreezesAfterSending(clock)
    fence = WriteFence(clock, leased=True)
    stopped, started = threading.Event(), threading.Event()

    def on_started() -> None:
        fence.open()
        started.set()

    elector = LeaderElector(config("a"), LeaseLock(client, NS, NAME), clock=clock, rng=NoJitter(),
                            fence=fence, on_started_leading=on_started, on_stopped_leading=stopped.set)
    stop = threading.Event()
    t = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    t.start()
    try:
        assert started.wait(5)
        t0 = clock.monotonic()
        assert fence.allowed() and fence.valid_until == t0 + 10
        client.freeze = 11.0
        step(clock, 2.0)  # renewal sent at t0+2 succeeds, answer read at t0+13 > deadline t0+10
        assert stopped.wait(5), "a late renewal is a loss"
        assert not fence.allowed()
        assert fence.valid_until == t0 + 10, "the late grant was refused"
        assert spec(client)["holderIdentity"] == "a"  # no release after a loss
    finally:
        stop.set()
        t.join(5)
