"""Builder wiring and the manager's lifecycle on the in-process fake API: start order, graceful
drain, lost lease, failures, probes and signals."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from fakeapi import make_obj, wait_until
from runtime_fakes import FakeCluster, FakeMapper, FlakyLeaseClient, http_get, step_until

from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, FencedWrite, StatusError
from escaler.informers.factory import ResourceKey
from escaler.runtime import (
    ControllerBuilder,
    Manager,
    ManagerOptions,
    Request,
    Result,
)
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import CACHE_SYNC_SLICE_SECONDS
from escaler.runtime.predicates import GenerationChangedPredicate

SCALER_API = "escaler.io/v1alpha1"


def scaler(name: str, namespace: str = "team", generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": SCALER_API, "kind": "ElasticScaler",
            "metadata": {"name": name, "namespace": namespace, "generation": generation}}


def deployment(name: str, owner: str | None, namespace: str = "team", replicas: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": SCALER_API, "kind": "ElasticScaler", "name": owner,
                                    "uid": "u", "controller": True}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": replicas}}


class Recorder:
    """A thread-safe ordered event log shared by the fakes of one test."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self.entries: list[str] = []

    def __call__(self, entry: str) -> None:
        with self._mu:
            self.entries.append(entry)

    def snapshot(self) -> list[str]:
        with self._mu:
            return list(self.entries)

    def index(self, prefix: str, last: bool = False) -> int:
        snap = self.snapshot()
        hits = [i for i, e in enumerate(snap) if e.startswith(prefix)]
        assert hits, f"{prefix!r} not in {snap}"
        return hits[-1] if last else hits[0]


@dataclass
class RecordingRunnable:
    name: str
    rec: Recorder
    on_start: Callable[[], str] = lambda: ""
    stop_seen: threading.Event = field(default_factory=threading.Event)

    def start(self, stop: threading.Event) -> None:
        self.rec(f"{self.name}{self.on_start()}")
        stop.wait()
        self.rec(f"{self.name}:stopped")
        self.stop_seen.set()


class RecordingReconciler:
    def __init__(self, rec: Recorder, block: Callable[[Request], None] | None = None) -> None:
        self.rec = rec
        self.block = block
        self._mu = threading.Lock()
        self.requests: list[Request] = []

    def reconcile(self, request: Request) -> Result:
        with self._mu:
            self.requests.append(request)
        self.rec(f"reconcile:{request}")
        if self.block is not None:
            self.block(request)
        self.rec(f"reconciled:{request}")
        return Result()

    def count(self, request: Request) -> int:
        with self._mu:
            return self.requests.count(request)


@contextmanager
def running(mgr: Manager, stop: threading.Event | None = None) -> Iterator[tuple[threading.Event, list[int]]]:
    stop = stop or threading.Event()
    code: list[int] = []
    t = threading.Thread(target=lambda: code.append(mgr.start(stop)), daemon=True, name="manager")
    t.start()
    try:
        yield stop, code
    finally:
        stop.set()
        t.join(15)
        assert not t.is_alive(), "manager did not stop"


# --------------------------------------------------------------------------- builder


def test_builder_resolves_kinds_into_shared_informer_keys() -> None:
    cluster = FakeCluster()
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), namespace="team")
    rec = Recorder()
    c1 = (ControllerBuilder(mgr)
          .for_(SCALER_API, "ElasticScaler", predicates=[GenerationChangedPredicate()])
          .owns("apps/v1", "Deployment")
          .watches("v1", "Node", EnqueueRequestsFromMapFunc(lambda o: []))
          .watches("v1", "ConfigMap", EnqueueRequestsFromMapFunc(lambda o: []), namespace="ops",
                   label_selector="app=x")
          .with_options(max_concurrent_reconciles=3)
          .complete(RecordingReconciler(rec)))
    c2 = (ControllerBuilder(mgr).named("second").for_("apps/v1", "Deployment")
          .complete(RecordingReconciler(rec)))
    assert c1.name == "elasticscaler" and c1.max_concurrent_reconciles == 3
    # the manager's default (DEFAULT_MAX_CONCURRENT_RECONCILES)
    assert c2.name == "second" and c2.max_concurrent_reconciles == 8
    assert set(mgr.informers.informers()) == {
        ResourceKey("escaler.io", "v1alpha1", "elasticscalers", namespace="team"),
        ResourceKey("apps", "v1", "deployments", namespace="team"),  # shared by c1.owns and c2.for_
        ResourceKey("", "v1", "nodes"),  # cluster-scoped: never namespaced
        ResourceKey("", "v1", "configmaps", namespace="ops", label_selector="app=x"),
    }


@pytest.mark.parametrize(("build", "message"), [
    (lambda b: b.complete(RecordingReconciler(Recorder())), r"for_\(\) must be called"),
    (lambda b: b.for_("v1", "ConfigMap").for_("v1", "ConfigMap"), "only once"),
    (lambda b: b.named("Bad Name"), "lower-case"),
    (lambda b: b.with_options(max_concurrent_reconciles=0), "max_concurrent_reconciles"),
], ids=["missing-for", "for-twice", "bad-name", "zero-workers"])
def test_builder_refusals(build: Callable[[ControllerBuilder], object], message: str) -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    with pytest.raises(ValueError, match=message):
        build(ControllerBuilder(mgr))


def test_builder_refuses_duplicate_names_and_unknown_kinds() -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(Recorder()))
    with pytest.raises(ValueError, match="already used"):
        ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(Recorder()))
    with pytest.raises(StatusError) as err:
        ControllerBuilder(mgr).for_("v1", "Nope").complete(RecordingReconciler(Recorder()))
    assert err.value.code == 404


def test_for_and_owns_route_events_to_the_owner() -> None:
    cluster = FakeCluster()
    cluster.apis["elasticscalers"].create(scaler("s1"))
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper())
    rec = Recorder()
    reconciler = RecordingReconciler(rec)
    (ControllerBuilder(mgr).for_(SCALER_API, "ElasticScaler", predicates=[GenerationChangedPredicate()])
     .owns("apps/v1", "Deployment").complete(reconciler))
    s1 = Request("team", "s1")
    with running(mgr):
        wait_until(lambda: reconciler.count(s1) == 1, what="initial reconcile")
        deps = cluster.apis["deployments"]
        deps.create(deployment("d1", owner="s1"))
        wait_until(lambda: reconciler.count(s1) == 2, what="owned create")
        deps.update(deployment("d1", owner="s1", replicas=3))
        wait_until(lambda: reconciler.count(s1) == 3, what="owned update")
        deps.create(deployment("orphan", owner=None))
        cluster.apis["elasticscalers"].update(scaler("s1", generation=1))  # status-only: filtered
        cluster.apis["elasticscalers"].update(scaler("s1", generation=2))
        wait_until(lambda: reconciler.count(s1) == 4, what="spec change")
    assert reconciler.count(s1) == 4
    assert all(r == s1 for r in reconciler.requests)


# --------------------------------------------------------------------------- lifecycle


def test_start_order_and_shutdown_order() -> None:
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["configmaps"].create(make_obj("a"))
    cluster.on_list = lambda entry: rec(f"{entry}:webhook-running={_thread_alive('webhooks-')}")
    lease = FlakyLeaseClient(on_call=lambda method: rec(f"lease:{method}"))
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              health_probe_bind_address="127.0.0.1:0", metrics_bind_address="127.0.0.1:0")
    mgr.add_webhook(RecordingRunnable(
        "webhook", rec, lambda: f":probes={http_get(mgr.health_probe_port or 0, '/healthz')[0]}"))
    mgr.add(RecordingRunnable("runnable", rec, lambda: f":synced={mgr.caches_synced.is_set()}"),
            needs_leader_election=False)
    leader = RecordingRunnable("leader", rec, lambda: f":can_write={mgr.can_write.is_set()}")
    mgr.add(leader)
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(rec))
    with running(mgr) as (_stop, code):
        wait_until(lambda: "reconciled:default/a" in rec.snapshot(), what="reconcile")
        assert mgr.is_leader()
    assert code == [0]
    e = rec.snapshot()
    assert "webhook:probes=200" in e
    assert e[rec.index("list:configmaps")] == "list:configmaps:webhook-running=True"
    assert rec.index("list:") < rec.index("runnable:synced=True")
    assert rec.index("list:") < rec.index("lease:")
    assert rec.index("lease:") < rec.index("leader:can_write=True") < rec.index("reconcile:default/a")
    # shutdown: leader runnables first, then the lease release, then the others, webhooks last
    assert rec.index("leader:stopped") < rec.index("lease:update", last=True)
    assert rec.index("leader:stopped") < rec.index("runnable:stopped") < rec.index("webhook:stopped")
    released = lease.get("default", "escaler-manager")
    assert released is not None and released["spec"]["holderIdentity"] == ""


def _thread_alive(prefix: str) -> bool:
    return any(t.name.startswith(prefix) and t.is_alive() for t in threading.enumerate())


def test_graceful_stop_drains_in_flight_reconcile_before_releasing_the_lease() -> None:
    clock = FakeClock()
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["configmaps"].create(make_obj("slow"))
    lease = FlakyLeaseClient()
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock, graceful_shutdown_timeout=30.0)
    gate, entered = threading.Event(), threading.Event()

    def block(_: Request) -> None:
        entered.set()
        assert gate.wait(10)

    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(rec, block))
    stop = threading.Event()
    code: list[int] = []
    t = threading.Thread(target=lambda: code.append(mgr.start(stop)), daemon=True)
    t.start()
    assert entered.wait(5)
    stopped_at = clock.monotonic()
    stop.set()
    # parked on its clock until the end of the grace period: waiting for the in-flight reconcile
    clock.block_until_deadline(stopped_at + 30.0)
    assert t.is_alive() and code == [], "the manager waits for the in-flight reconcile"
    held = lease.get("default", "escaler-manager")
    assert held is not None and held["spec"]["holderIdentity"] == "me", "no release while a reconcile runs"
    gate.set()
    t.join(10)
    assert code == [0]
    assert rec.snapshot()[-1] == "reconciled:default/slow"
    released = lease.get("default", "escaler-manager")
    assert released is not None and released["spec"]["holderIdentity"] == ""
    assert not mgr.can_write.is_set()


def test_lost_lease_stops_leader_runnables_and_exits_1() -> None:
    clock = FakeClock()
    rec = Recorder()
    cluster = FakeCluster()
    lease = FlakyLeaseClient()
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock)
    leader = RecordingRunnable("leader", rec)
    other = RecordingRunnable("other", rec)
    mgr.add(leader)
    mgr.add(other, needs_leader_election=False)
    with running(mgr) as (_stop, code):
        wait_until(mgr.can_write.is_set, what="elected")
        assert mgr.metrics.registry.get_sample_value(
            "leader_election_master_status", {"name": "escaler-manager"}) == 1
        lease.fail_all = ConnectionFailure("partitioned")
        step_until(clock, lambda: bool(code), step=1.0, what="manager exit")
        assert code == [1]
        assert leader.stop_seen.wait(5) and other.stop_seen.wait(5)
    assert not mgr.can_write.is_set()
    assert mgr.lease_lost()
    ok, body = mgr.readyz.evaluate() or (True, "")
    assert not ok and "[-]informers-synced failed" in body
    assert mgr.metrics.registry.get_sample_value(
        "leader_election_master_status", {"name": "escaler-manager"}) == 0
    lease.fail_all = None
    held = lease.get("default", "escaler-manager")
    assert held is not None and held["spec"]["holderIdentity"] == "me"  # a loser does not release


def test_standby_keeps_caches_warm_and_does_not_run_leader_runnables() -> None:
    clock = FakeClock()
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["configmaps"].create(make_obj("a"))
    lease = FlakyLeaseClient()
    from lease_fakes import InMemoryLeaseClient
    InMemoryLeaseClient.create(lease, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "escaler-manager", "namespace": "default"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15}})
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock)
    reconciler = RecordingReconciler(rec)
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(reconciler)
    with running(mgr) as (_stop, code):
        wait_until(lambda: lease.calls.count("get") >= 1, what="first election attempt")
        assert mgr.caches_synced.is_set()
        ok, _ = mgr.readyz.evaluate() or (False, "")
        assert ok, "a synced standby is ready"
        assert not mgr.can_write.is_set()
        assert reconciler.requests == []
        step_until(clock, mgr.can_write.is_set, step=1.0, what="takeover after expiry")
        wait_until(lambda: reconciler.count(Request("default", "a")) == 1, what="reconcile after election")
    assert code == [0]


def test_controller_added_late_on_a_standby_warms_its_cache_and_runs_only_once_elected() -> None:
    # a controller whose CRD appeared while the manager runs (escaler.runtime.crdgate) is set up late
    clock = FakeClock()
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["configmaps"].create(make_obj("a"))
    lease = FlakyLeaseClient()
    from lease_fakes import InMemoryLeaseClient
    InMemoryLeaseClient.create(lease, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "escaler-manager", "namespace": "default"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15}})
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock)
    with running(mgr) as (_stop, code):
        wait_until(lambda: lease.calls.count("get") >= 1, what="first election attempt")
        assert mgr.caches_synced.is_set() and not mgr.can_write.is_set()
        reconciler = RecordingReconciler(rec)
        ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(reconciler)
        wait_until(lambda: "list:configmaps" in cluster.snapshot(), what="the late controller's cache listed")
        assert reconciler.requests == [], "a standby runs no controller, however late it was added"
        step_until(clock, mgr.can_write.is_set, step=1.0, what="takeover after expiry")
        wait_until(lambda: reconciler.count(Request("default", "a")) == 1, what="reconcile after election")
    assert code == [0]


def test_cache_sync_timeout_fails_the_start() -> None:
    clock = FakeClock()
    cluster = FakeCluster()
    cluster.apis["configmaps"].fail_next_list(*[StatusError(500, "InternalError", "boom")] * 1000)
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), cache_sync_timeout=120.0, clock=clock)
    runnable = RecordingRunnable("r", Recorder())
    mgr.add(runnable, needs_leader_election=False)
    # the cache alone (a controller's workqueue metrics thread would park on the same 0.5 s grid)
    mgr.informers.informer_for(ResourceKey("", "v1", "configmaps"))
    started_at = clock.monotonic()
    with running(mgr) as (_stop, code):
        # the manager waits for the sync in CACHE_SYNC_SLICE_SECONDS slices of its clock
        slices = round(120.0 / CACHE_SYNC_SLICE_SECONDS)
        for k in range(1, slices + 1):
            clock.block_until_deadline(started_at + k * CACHE_SYNC_SLICE_SECONDS)
            assert code == [], f"gave up {k * CACHE_SYNC_SLICE_SECONDS}s into a 120s sync timeout"
            clock.step(CACHE_SYNC_SLICE_SECONDS)
        wait_until(lambda: bool(code), what="start failed at the sync timeout")
    assert code == [1]
    assert runnable.rec.snapshot() == []  # nothing after the caches ran


def test_bind_failure_fails_the_start_before_touching_the_cluster() -> None:
    cluster = FakeCluster()
    blocker = Manager.for_testing(cluster.lw_factory, FakeMapper(), health_probe_bind_address="127.0.0.1:0")
    with running(blocker):
        wait_until(lambda: blocker.health_probe_port is not None)
        mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(),
                                  metrics_bind_address=f"127.0.0.1:{blocker.health_probe_port}")
        ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(Recorder()))
        calls_before = cluster.apis["configmaps"].list_calls
        assert mgr.start(threading.Event()) == 1
        assert cluster.apis["configmaps"].list_calls == calls_before


def test_failing_runnable_stops_the_manager_with_exit_1() -> None:
    class Boom:
        def start(self, stop: threading.Event) -> None:
            raise RuntimeError("kaput")

    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    mgr.add(Boom(), needs_leader_election=False)
    assert mgr.start(threading.Event()) == 1


def test_probes_and_metrics_served_by_the_manager() -> None:
    cluster = FakeCluster()
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), health_probe_bind_address="127.0.0.1:0",
                              metrics_bind_address="127.0.0.1:0")
    ControllerBuilder(mgr).named("demo").for_("v1", "ConfigMap").complete(RecordingReconciler(Recorder()))
    mgr.add_readyz_check("custom", lambda: True)
    with running(mgr):
        wait_until(mgr.can_write.is_set)
        probe, metrics = mgr.health_probe_port, mgr.metrics_port
        assert probe and metrics and probe != metrics
        assert http_get(probe, "/healthz")[:2] == (200, "ok")
        assert http_get(probe, "/readyz")[:2] == (200, "ok")
        assert http_get(probe, "/readyz/custom")[:2] == (200, "ok")
        assert http_get(probe, "/metrics")[0] == 404  # metrics live on their own port
        status, body, _ = http_get(metrics, "/metrics")
        assert status == 200
        assert 'controller_runtime_reconcile_total{controller="demo",result="success"}' in body
        assert 'controller_runtime_max_concurrent_reconciles{controller="demo"} 8.0' in body
        assert 'workqueue_depth{name="demo"}' in body
    assert mgr.health_probe_port is None  # servers stopped


def test_same_address_serves_probes_and_metrics_on_one_port() -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    assert mgr.health_probe_port is None
    both = Manager.for_testing(FakeCluster().lw_factory, FakeMapper(),
                               health_probe_bind_address="127.0.0.1:0", metrics_bind_address="127.0.0.1:0")
    assert len(both._servers) == 2
    same = Manager(ManagerOptions(health_probe_bind_address="127.0.0.1:18081",
                                  metrics_bind_address="127.0.0.1:18081"),
                   mapper=FakeMapper(), lw_factory=FakeCluster().lw_factory)
    assert len(same._servers) == 1 and set(same._servers[0].routes) == {"/healthz", "/readyz", "/metrics"}


def test_sigterm_in_the_main_thread_stops_gracefully() -> None:
    assert threading.current_thread() is threading.main_thread()
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    previous = signal.getsignal(signal.SIGTERM)

    def send() -> None:
        wait_until(mgr.can_write.is_set)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=send, daemon=True)
    killer.start()
    assert mgr.start() == 0
    killer.join(5)
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored


OPTION_CASES = [
    ({"metrics_bind_address": "8080"}, "metrics_bind_address"),
    ({"health_probe_bind_address": "x:y"}, "health_probe_bind_address"),
    ({"max_concurrent_reconciles": 0}, "max_concurrent_reconciles"),
    ({"graceful_shutdown_timeout": -1.0}, "graceful_shutdown_timeout"),
    ({"cache_sync_timeout": 0.0}, "cache_sync_timeout"),
    ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease_duration > renew_deadline"),
    ({"renew_deadline": 2.0, "retry_period": 2.0}, "renew_deadline > JitterFactor"),
    ({"leader_election": True, "leader_election_id": ""}, "leader_election_id"),
    ({"api_pool_size": 0}, "api_pool_size"),
]


@pytest.mark.parametrize(("kwargs", "message"), OPTION_CASES, ids=[
    "metrics-bare-port", "probe-garbage", "zero-workers", "negative-grace", "zero-sync",
    "lease-not-above-renew", "renew-not-above-jittered-retry", "empty-election-id", "zero-pool"])
def test_manager_options_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ManagerOptions(**kwargs)


def test_leader_election_needs_a_namespace_and_a_lease_client() -> None:
    with pytest.raises(ValueError, match="leader_election_namespace"):
        Manager(ManagerOptions(leader_election=True, metrics_bind_address="0", health_probe_bind_address="0"),
                mapper=FakeMapper(), lw_factory=FakeCluster().lw_factory)
    with pytest.raises(ValueError, match="lease_client"):
        Manager(ManagerOptions(leader_election=True, leader_election_namespace="ops",
                               metrics_bind_address="0", health_probe_bind_address="0"),
                mapper=FakeMapper(), lw_factory=FakeCluster().lw_factory)
    with pytest.raises(ValueError, match="both mapper and lw_factory"):
        Manager(ManagerOptions(), mapper=FakeMapper())


# --------------------------------------------------------------------------- real wiring over HTTP

LEASE_DISCOVERY = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "coordination.k8s.io/v1",
    "resources": [{"name": "leases", "kind": "Lease", "namespaced": True,
                   "verbs": ["get", "list", "watch", "create", "update"]}],
}
LEASES = "/apis/coordination.k8s.io/v1"


def test_kube_lease_client_over_http() -> None:
    from test_kube_fakeapi import FakeAPI as HTTPFakeAPI

    from escaler.runtime.leaselock import KubeLeaseClient

    with HTTPFakeAPI() as api:
        api.discovery[LEASES] = LEASE_DISCOVERY
        client = KubeLeaseClient(api.rest(), timeout=2.0)
        assert client.get("ops", "l") is None
        created = client.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                 "metadata": {"name": "l", "namespace": "ops"},
                                 "spec": {"holderIdentity": "a"}})
        stale = dict(created)
        created["spec"] = {"holderIdentity": "b"}
        client.update(created)
        with pytest.raises(StatusError) as err:
            client.update(stale)
        assert err.value.code == 409
        fetched = client.get("ops", "l")
        assert fetched is not None and fetched["spec"]["holderIdentity"] == "b"


def test_manager_built_on_a_rest_client_elects_and_releases_over_http() -> None:
    from test_kube_fakeapi import FakeAPI as HTTPFakeAPI

    with HTTPFakeAPI() as api:
        api.discovery[LEASES] = LEASE_DISCOVERY
        mgr = Manager(ManagerOptions(leader_election=True, leader_election_namespace="ops",
                                     leader_election_identity="me", metrics_bind_address="0",
                                     health_probe_bind_address="0"),
                      rest=api.rest())
        assert mgr.mapper.mapping_for("apps/v1", "Deployment").resource == "deployments"  # real discovery
        with running(mgr) as (_stop, code):
            wait_until(mgr.can_write.is_set, what="elected over HTTP")
            lease = api.get_object(LEASES, "leases", "ops", "escaler-manager")
            assert lease["spec"]["holderIdentity"] == "me"
            assert lease["spec"]["leaseDurationSeconds"] == 15
        assert code == [0]
        released = api.get_object(LEASES, "leases", "ops", "escaler-manager")
        assert released["spec"]["holderIdentity"] == "" and released["spec"]["leaseDurationSeconds"] == 1


def test_reconcile_outliving_the_grace_period_keeps_the_lease_and_exits_1() -> None:
    # Regression: the grace period was measured with time.monotonic(), not the manager's clock.
    clock = FakeClock()
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["configmaps"].create(make_obj("stuck"))
    lease = FlakyLeaseClient()
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock, graceful_shutdown_timeout=30.0)
    gate, entered = threading.Event(), threading.Event()

    def block(_: Request) -> None:
        entered.set()
        gate.wait(10)

    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(rec, block))
    try:
        with running(mgr) as (stop, code):
            assert entered.wait(5)
            stopped_at = clock.monotonic()
            stop.set()
            clock.block_until_deadline(stopped_at + 30.0)
            clock.step(29.0)
            clock.block_until_deadline(stopped_at + 30.0)  # still within the grace period
            assert code == []
            clock.step(1.0)
            wait_until(lambda: bool(code), what="manager exit once the grace period has passed")
        assert code == [1]
        held = lease.get("default", "escaler-manager")
        assert held is not None and held["spec"]["holderIdentity"] == "me", "lease left to expire"
        assert not mgr.can_write.is_set()
        assert rec.snapshot() == ["reconcile:default/stuck"]  # it never finished
    finally:
        gate.set()


def test_controller_added_after_start_gets_its_informers_started() -> None:
    rec = Recorder()
    cluster = FakeCluster()
    cluster.apis["deployments"].create(deployment("d1", owner=None))
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper())
    with running(mgr):
        wait_until(mgr.can_write.is_set)
        reconciler = RecordingReconciler(rec)
        ControllerBuilder(mgr).for_("apps/v1", "Deployment").complete(reconciler)
        wait_until(lambda: reconciler.count(Request("team", "d1")) == 1, what="late controller reconciles")


def test_stop_during_a_slow_cache_sync_is_honoured_promptly() -> None:
    cluster = FakeCluster()
    cluster.apis["configmaps"].fail_next_list(*[StatusError(500, "InternalError", "boom")] * 1000)
    mgr = Manager.for_testing(cluster.lw_factory, FakeMapper(), cache_sync_timeout=600.0)
    ControllerBuilder(mgr).for_("v1", "ConfigMap").complete(RecordingReconciler(Recorder()))
    with running(mgr) as (stop, code):
        wait_until(lambda: cluster.apis["configmaps"].list_calls >= 1, what="first list")
        stop.set()
        wait_until(lambda: bool(code), timeout=5.0, what="exit long before the sync timeout")
    assert code == [0]
    assert not mgr.caches_synced.is_set()


def test_an_unleased_write_passes_the_fence_and_nothing_else_does() -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    secrets = "/api/v1/namespaces/escaler-system/secrets"
    mgr.allow_unleased_write("post", secrets)
    mgr.write_guard("POST", secrets)  # not elected, not started: still allowed
    for method, path in (("PUT", f"{secrets}/other"), ("POST", "/api/v1/namespaces/team/secrets"),
                         ("PATCH", secrets)):
        with pytest.raises(FencedWrite, match="may not write"):
            mgr.write_guard(method, path)


def test_a_failing_before_start_step_fails_the_start_before_anything_binds() -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), health_probe_bind_address="127.0.0.1:0")
    ran: list[str] = []

    def provision() -> None:
        ran.append("provision")
        raise RuntimeError("the Secret cannot be read")

    mgr.add_before_start("the serving certificate", provision)
    assert mgr.start(threading.Event()) == 1
    assert ran == ["provision"]
    assert mgr.health_probe_port is None
