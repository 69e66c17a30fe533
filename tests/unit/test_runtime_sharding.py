"""Sharding (escaler.runtime.sharding): stable assignment, one Lease per shard with a preferred
shard and standbys, per-shard write fencing (guard, controller gate, Event recorder).

Time is a FakeClock (manager and elector tests); the wire tests use the loopback fake API, so a
refusal is observed as "no request arrived".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fakeapi import make_obj, wait_until
from lease_fakes import InMemoryLeaseClient
from runtime_fakes import FakeCluster, FakeMapper, step_until
from test_kube_fakeapi import FakeAPI

from escaler.clock import FakeClock
from escaler.errors import FencedWrite, StatusError
from escaler.kube.events import EventRecorder
from escaler.runtime import ControllerBuilder, Manager, Request, Result
from escaler.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from escaler.runtime.leaselock import LeaseLock
from escaler.runtime.sharding import ShardedFence, ordinal_shard, shard_for, writing_for

NS = "default"
WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget",
          "metadata": {"name": "w1", "namespace": "ns1", "uid": "uid-1"}}
OTHER = {"apiVersion": "example.com/v1", "kind": "Widget",
         "metadata": {"name": "w2", "namespace": "ns1", "uid": "uid-2"}}


def names_in(shard: int, total: int, n: int = 1, prefix: str = "cm") -> list[str]:
    out = [f"{prefix}-{i}" for i in range(1000) if shard_for(NS, f"{prefix}-{i}", total) == shard]
    return out[:n]


# --------------------------------------------------------------------------- assignment


def test_shard_assignment_is_stable_and_balanced() -> None:
    # the documented function: SHA-256 of "namespace/name", first 8 bytes big-endian, mod K
    for ns, name, k in [("default", "a", 3), ("team-7", "web-frontend", 2), ("x", "y", 10)]:
        expected = int.from_bytes(hashlib.sha256(f"{ns}/{name}".encode()).digest()[:8], "big") % k
        assert shard_for(ns, name, k) == expected
    assert shard_for("any", "thing", 1) == 0
    keys = [(f"ns{i % 7}", f"scaler-{i}") for i in range(9000)]
    for k in (2, 3, 5):
        counts = Counter(shard_for(ns, name, k) for ns, name in keys)
        assert set(counts) == set(range(k))
        for shard, c in counts.items():
            assert abs(c - len(keys) / k) <= 0.05 * len(keys) / k, f"K={k} shard {shard}: {c}"
    # the same in another process whose str hash is salted differently
    code = ("from escaler.runtime.sharding import shard_for; "
            "print([shard_for('ns%d' % (i % 7), 'scaler-%d' % i, 3) for i in range(50)])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str([shard_for(f"ns{i % 7}", f"scaler-{i}", 3) for i in range(50)])


@pytest.mark.parametrize(("pod", "total", "want"), [
    ("escaler-0", 3, 0), ("escaler-4", 3, 1), ("escaler-manager-2", 3, 2), ("escaler-7d9f-abcde", 3, None),
    ("laptop", 2, None),
], ids=["ordinal-0", "ordinal-mod", "dashed-name", "deployment-pod", "no-ordinal"])
def test_preferred_shard_from_the_pod_ordinal(pod: str, total: int, want: int | None) -> None:
    assert ordinal_shard(pod, total) == want


# --------------------------------------------------------------------------- the guard


def test_a_write_for_a_shard_not_held_is_refused_by_the_guard_on_the_wire() -> None:
    clock = FakeClock()
    fences = ShardedFence(clock, 2, leased=True)
    f0 = fences.new_term(0)
    f0.grant(clock.monotonic() + 10)
    assert fences.gained(0, f0)
    with FakeAPI() as api:
        rest = api.rest()
        rest.set_write_guard(fences.guard)
        path0 = f"/api/v1/namespaces/{NS}/configmaps/{names_in(0, 2)[0]}"
        path1 = f"/api/v1/namespaces/{NS}/configmaps/{names_in(1, 2)[0]}"
        with writing_for(1), pytest.raises(FencedWrite, match="shard 1"):
            rest.request("PATCH", path1, body={"data": {}}, content_type="application/merge-patch+json")
        with pytest.raises(FencedWrite, match="outside a shard"):
            rest.request("PATCH", path0, body={"data": {}}, content_type="application/merge-patch+json")
        assert api.reqs("PATCH") == [], "a refused write never reaches the API server"
        with writing_for(0):
            # the fake has no such object (StatusError); what matters is that the request arrived
            with contextlib.suppress(StatusError):
                rest.request("PATCH", path0, body={"data": {}}, content_type="application/merge-patch+json")
            assert fences.is_set()
        assert [r.path for r in api.reqs("PATCH")] == [path0]
        clock.step(10)  # shard 0's term lapses at grant + 0
        with writing_for(0), pytest.raises(FencedWrite, match="shard 0"):
            rest.request("PATCH", path0, body={"data": {}}, content_type="application/merge-patch+json")
        assert len(api.reqs("PATCH")) == 1


def test_events_are_fenced_by_the_shard_of_the_reconcile_that_recorded_them() -> None:
    clock = FakeClock()
    fences = ShardedFence(clock, 2, leased=False)
    fences.gained(0, fences.new_term(0))  # static: shard 0 only
    with FakeAPI() as api:
        rest = api.rest()
        rest.set_write_guard(fences.guard)
        rec = EventRecorder(rest, component="escaler", instance="pod-0", clock=clock)
        try:
            with writing_for(0):
                rec.event(WIDGET, "Normal", "Scaled", "Scale", "shard 0's scaler")
            with writing_for(1):
                rec.event(OTHER, "Normal", "Scaled", "Scale", "shard 1's scaler")
            assert rec.flush(5)
            posts = api.reqs("POST", "/apis/events.k8s.io/")
            assert len(posts) == 1 and "w1" in posts[0].path + str(posts[0].body)
            assert rec.fenced == 1
        finally:
            rec.stop(2)


# --------------------------------------------------------------------------- electors


def _elector(lease: InMemoryLeaseClient, clock: FakeClock, identity: str, *, standby: bool,
             started: threading.Event) -> LeaderElector:
    cfg = LeaderElectionConfig(name="escaler-manager-shard-0", namespace=NS, identity=identity,
                               standby=standby)
    return LeaderElector(cfg, LeaseLock(lease, NS, cfg.name), clock=clock, on_started_leading=started.set)


def _holder(lease: InMemoryLeaseClient) -> str | None:
    obj = lease.get(NS, "escaler-manager-shard-0")
    return None if obj is None else str(obj["spec"].get("holderIdentity") or "")


def test_preferred_candidate_wins_and_a_standby_waits_a_full_lease_duration() -> None:
    clock = FakeClock()
    lease = InMemoryLeaseClient()
    a_led, b_led = threading.Event(), threading.Event()
    b = _elector(lease, clock, "b", standby=True, started=b_led)
    a = _elector(lease, clock, "a", standby=False, started=a_led)
    stop_a, stop_b = threading.Event(), threading.Event()
    tb = threading.Thread(target=b.run, args=(stop_b,), daemon=True)
    tb.start()
    try:
        clock.block_until_waiters(1)
        step_until(clock, lambda: clock.monotonic() >= 14.0, step=1.0, what="t=14")
        assert _holder(lease) is None, "a standby does not create a missing shard Lease at once"
        ta = threading.Thread(target=a.run, args=(stop_a,), daemon=True)
        ta.start()
        wait_until(a_led.is_set, what="the preferred candidate acquires at once")
        # a renews every 2 s; b never takes over while a is alive
        start = clock.monotonic()
        step_until(clock, lambda: clock.monotonic() >= start + 40, step=0.5, what="40 s of a leading")
        assert not b_led.is_set() and _holder(lease) == "a"
        stop_a.set()  # graceful: a releases (holderIdentity "", leaseDurationSeconds 1)
        ta.join(5)
        assert _holder(lease) == ""
        released = clock.monotonic()
        step_until(clock, b_led.is_set, step=0.5, timeout=20, what="standby takeover")
        assert clock.monotonic() >= released + 15, "a released Lease is still not taken before 15 s"
        assert clock.monotonic() <= released + 15 + 2 * 2.2 + 0.5
        assert _holder(lease) == "b"
    finally:
        stop_a.set()
        stop_b.set()
        clock.step(100)
        tb.join(5)


# --------------------------------------------------------------------------- the manager


class ShardPartitionLeases(InMemoryLeaseClient):
    """In-memory Leases; updates of the Leases named in ``failing`` fail (a partition for them)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        if (obj.get("metadata") or {}).get("name") in self.failing:
            raise StatusError(503, "ServiceUnavailable", "partitioned")
        return super().update(obj, timeout=timeout)


class WritingReconciler:
    """Writes (through the manager's write guard, as the REST client does) for each reconcile."""

    def __init__(self, mgr: Manager) -> None:
        self._mgr = mgr
        self._mu = threading.Lock()
        self.log: list[tuple[str, str]] = []

    def reconcile(self, request: Request) -> Result:
        try:
            path = f"/api/v1/namespaces/{request.namespace}/configmaps/{request.name}"
            self._mgr.can_write.guard("PATCH", path)
            outcome = "wrote"
        except FencedWrite:
            outcome = "refused"
        with self._mu:
            self.log.append((outcome, request.name))
        return Result()

    def count(self, outcome: str, name: str) -> int:
        with self._mu:
            return self.log.count((outcome, name))


@contextmanager
def running(mgr: Manager) -> Iterator[tuple[threading.Event, list[int]]]:
    stop, code = threading.Event(), []
    t = threading.Thread(target=lambda: code.append(mgr.start(stop)), daemon=True, name="manager")
    t.start()
    try:
        yield stop, code
    finally:
        stop.set()
        t.join(15)
        assert not t.is_alive(), "manager did not stop"


def sharded_manager(cluster: FakeCluster, lease: InMemoryLeaseClient, clock: FakeClock, identity: str,
                    shard_index: int, **kw: Any) -> tuple[Manager, WritingReconciler]:
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity=identity,
                              clock=clock, total_shards=2, shard_index=shard_index, **kw)
    reconciler = WritingReconciler(mgr)
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(reconciler)
    return mgr, reconciler


def test_losing_shard_1_stops_its_writes_while_shard_0_writes_continue() -> None:
    clock = FakeClock()
    cluster = FakeCluster()
    s0, s1 = names_in(0, 2)[0], names_in(1, 2)[0]
    for name in (s0, s1):
        cluster.apis["configmaps"].create(make_obj(name))
    lease = ShardPartitionLeases()
    mgr, rec = sharded_manager(cluster, lease, clock, "me", shard_index=0)
    assert mgr.shards is not None
    shards = mgr.shards
    with running(mgr) as (_stop, code):
        wait_until(lambda: rec.count("wrote", s0) == 1, what="shard 0 (preferred) led and reconciled at once")
        assert not shards.leads(1) and rec.count("wrote", s1) == 0
        # shard 1: a standby here (no one holds it): taken after a full lease duration, then enqueued whole
        step_until(clock, lambda: rec.count("wrote", s1) == 1, step=1.0, what="shard 1 picked up")
        assert clock.monotonic() >= 15
        # partition shard 1's Lease only: its fence closes within the renew deadline
        lease.failing.add("escaler-manager-shard-1")
        step_until(clock, lambda: not shards.leads(1), step=1.0, what="shard 1 lost")
        assert shards.leads(0) and code == [], "the process and shard 0 go on"
        ctrl_enqueue = mgr_controller(mgr)
        ctrl_enqueue(Request(NS, s0))
        ctrl_enqueue(Request(NS, s1))
        wait_until(lambda: rec.count("wrote", s0) == 2, what="shard 0 still reconciles")
        assert rec.count("wrote", s1) == 1 and rec.count("refused", s1) == 0, \
            "a shard-1 request is dropped, not reconciled"
        with writing_for(1), pytest.raises(FencedWrite):
            mgr.can_write.guard("PATCH", f"/api/v1/namespaces/{NS}/configmaps/{s1}")
        # the partition heals: shard 1 is run for again and its scalers come back
        lease.failing.clear()
        step_until(clock, lambda: rec.count("wrote", s1) == 2, step=1.0, timeout=20, what="shard 1 regained")
    assert code == [0]
    assert [o for o, _ in rec.log].count("refused") == 0


def mgr_controller(mgr: Manager) -> Any:
    runnables = mgr._leaders.runnables  # the builder's controller is the only leader runnable
    return runnables[0].enqueue


def test_two_replicas_each_lead_their_own_shard_and_a_dead_ones_moves() -> None:
    clock = FakeClock()
    cluster = FakeCluster()
    s0, s1 = names_in(0, 2)[0], names_in(1, 2)[0]
    for name in (s0, s1):
        cluster.apis["configmaps"].create(make_obj(name))
    lease = InMemoryLeaseClient()
    a, rec_a = sharded_manager(cluster, lease, clock, "a", shard_index=0)
    b, rec_b = sharded_manager(cluster, lease, clock, "b", shard_index=1,
                               leader_election_release_on_cancel=False)
    assert a.shards is not None and b.shards is not None
    with running(a) as (_sa, code_a):
        with running(b) as (stop_b, _code_b):
            wait_until(lambda: a.shards.led() == [0] and b.shards.led() == [1],  # type: ignore[union-attr]
                       what="each replica leads its preferred shard")
            start = clock.monotonic()
            step_until(clock, lambda: clock.monotonic() >= start + 30, step=1.0, what="steady state")
            assert a.shards.led() == [0] and b.shards.led() == [1], "standbys never take a live shard"
            assert rec_a.count("wrote", s1) == 0 and rec_b.count("wrote", s0) == 0
            assert rec_a.count("wrote", s0) == 1 and rec_b.count("wrote", s1) == 1
            stop_b.set()  # b stops without releasing: as if killed after its last renewal
        last_renewal = clock.monotonic()
        # step only until a leads shard 1 (its elector parks on the clock, so each step settles);
        # the reconcile that follows runs on a worker thread the clock cannot tell apart from an
        # idle one, so stepping on until its write let the clock race past the takeover under load
        step_until(clock, lambda: a.shards.led() == [0, 1], step=0.5, timeout=30,  # type: ignore[union-attr]
                   what="a takes over b's shard")
        assert last_renewal + 15 - 2 <= clock.monotonic() <= last_renewal + 15 + 2 * 2.2 + 0.5
        wait_until(lambda: rec_a.count("wrote", s1) == 1, what="a reconciles b's shard")
        assert a.shards.led() == [0, 1]
    assert code_a == [0]
    for name in ("escaler-manager-shard-0", "escaler-manager-shard-1"):
        held = lease.get(NS, name)
        assert held is not None and held["spec"]["holderIdentity"] == "", "a graceful stop releases"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"total_shards": 0}, "total_shards"),
    ({"total_shards": 2, "shard_index": 2, "leader_election": True, "leader_election_namespace": NS},
     "shard_index"),
    ({"total_shards": 2}, "shard_index: required"),
], ids=["zero-shards", "index-out-of-range", "static-needs-index"])
def test_sharding_options_are_validated(kwargs: dict[str, Any], message: str) -> None:
    from escaler.runtime.manager import ManagerOptions

    with pytest.raises(ValueError, match=message):
        ManagerOptions(**kwargs)


def test_static_shard_without_leader_election_reconciles_only_its_own() -> None:
    cluster = FakeCluster()
    s0, s1 = names_in(0, 2)[0], names_in(1, 2)[0]
    for name in (s0, s1):
        cluster.apis["configmaps"].create(make_obj(name))
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), total_shards=2, shard_index=1,
                              clock=FakeClock())
    rec = WritingReconciler(mgr)
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(rec)
    with running(mgr):
        wait_until(lambda: rec.count("wrote", s1) == 1, what="shard 1 reconciled")
        mgr_controller(mgr)(Request(NS, s0))
        mgr_controller(mgr)(Request(NS, s1))
        wait_until(lambda: rec.count("wrote", s1) == 2, what="shard 1 again")
    assert rec.count("wrote", s0) == 0 and rec.count("refused", s0) == 0


# --------------------------------------------------------------------------- the ElasticScaler wiring


class FakeApiServer:
    """Records add_route calls (the ApiServer surface the ElasticScaler setup uses)."""

    def __init__(self) -> None:
        self.handlers: list[Any] = []

    def add_route(self, method: str, pattern: str, handler: Any, *, authz: Any = None,
                  public: bool = False) -> None:
        self.handlers.append(handler)


def test_sharded_elasticscaler_polls_and_takes_signals_only_for_led_shards() -> None:
    from es_fakes import NS as ES_NS
    from es_fakes import Cluster, FakeCollector, external_metric, metrics_trigger, scaler

    from escaler.informers.factory import ResourceKey
    from escaler.reconcilers.elasticscaler import setup_elasticscaler
    from escaler.runtime.apiserver import ApiError, ApiRequest
    from escaler.runtime.executor import InlineExecutor
    from escaler.targets.registry import default_registry

    clock = FakeClock()
    cluster = Cluster()
    mine = [f"s-{i}" for i in range(40) if shard_for(ES_NS, f"s-{i}", 2) == 0][:5]
    theirs = [f"s-{i}" for i in range(40) if shard_for(ES_NS, f"s-{i}", 2) == 1][:5]
    for name in mine + theirs:
        cluster.apis["elasticscalers"].create(scaler(name, metrics_trigger(external_metric())))
    mgr = Manager.for_testing(cluster.lw_factory, cluster.mapper, clock=clock, total_shards=2, shard_index=0)
    server = FakeApiServer()
    es = setup_elasticscaler(mgr, poll_interval=30, client=cluster.client,
                             handlers=default_registry(cluster.client),  # type: ignore[arg-type]
                             collector=FakeCollector(), api_server=server, outbound=InlineExecutor(clock))
    stop = threading.Event()
    try:
        mgr.informers.start(stop)
        assert mgr.informers.wait_for_cache_sync(5.0)
        informer = mgr.informers.informer_for(ResourceKey("elasticscaler.io", "v1alpha1", "elasticscalers"))
        wait_until(lambda: len(informer.store.list_keys()) == 10, what="scalers cached")
        assert mgr.shards is not None and es.poller is not None
        assert es.poller.poll_once() == [], "nothing led yet: nothing polled"
        assert es.poller.due_times() == {}
        mgr.shards.gained(0, mgr.shards.new_term(0))
        es.poller.poll_once()
        assert sorted(r.name for r in es.poller.due_times()) == sorted(mine), "only shard 0's scalers"

        def push(name: str) -> int:
            req = ApiRequest("POST", f"/signal/v1/namespaces/{ES_NS}/elasticscalers/{name}",
                             {"namespace": ES_NS, "name": name}, {}, {}, b'{"active": true}', None)
            try:
                return int(server.handlers[0](req).status)
            except ApiError as err:
                shard = shard_for(ES_NS, name, 2)
                assert err.status != 503 or f"Lease escaler-manager-shard-{shard}" in err.message
                return int(err.status)

        assert push(theirs[0]) == 503, "another replica's scaler: retry there"
        assert push(mine[0]) == 409, "ours: handled (a MetricsTrigger scaler takes no signal)"
        mgr.shards.lost(0)
        es.poller.poll_once()
        assert es.poller.due_times() == {}, "a lost shard's scalers are no longer polled"
        assert push(mine[0]) == 503
    finally:
        stop.set()
        mgr.informers.shutdown()
