"""Fakes for the ResourceScalingGroup reconciler tests (no tests here).

``RSGHarness``: a ``Manager.for_testing`` on a ``FakeClock`` over ``es_fakes.Cluster`` (plus the RSG
and LeaderWorkerSet resources), with ``setup_elasticscaler`` (for cross-kind conflicts) and
``setup_rsg`` wired to the fakes: the real ``default_registry`` handlers reading from the
reconciler's watch caches, a ``RecordingClient`` that records every workload write in order, and
the ranking queries answered by ``query`` (or ``loads``/``query_error`` set by the test) on an
``InlineExecutor`` unless ``outbound`` is given, and GroupReplication's ``limits``. ``start()``
runs the informers; tests call ``reconcile(name)`` (deterministic: no worker threads).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from es_fakes import MAPPINGS, NS, Cluster, FakeClient
from fakeapi import wait_until

from escaler.api.rsg import RSGPrometheus
from escaler.clock import FakeClock
from escaler.informers.factory import ResourceKey
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.elasticscaler import setup_elasticscaler
from escaler.reconcilers.rsg import RSGController, setup_rsg
from escaler.reconcilers.rsg.limits import ReplicationLimits
from escaler.reconcilers.rsg.members import NOT_SYNCED_RETRY_SECONDS
from escaler.reconcilers.rsg.replication import AWAITING_RETRY_SECONDS, CLONES_LISTING_RETRY_SECONDS
from escaler.runtime import Manager, Request, Result
from escaler.runtime.executor import InlineExecutor
from escaler.signals.promqlscope import PromQLScope
from escaler.targets.registry import default_registry

LWS = ResourceMapping("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True,
                      frozenset({"status"}))
RSG_MAPPINGS = (*MAPPINGS, LWS)
RESOURCES = ("resourcescalinggroups", "deployments", "statefulsets", "leaderworkersets", "elasticscalers")


class RecordingClient(FakeClient):
    """``FakeClient`` that also records workload writes, in order: (verb, resource, name)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.writes: list[tuple[str, str, str]] = []

    def patch(self, m: Any, name: str, patch: Any, namespace: str | None = None, patch_type: str = "merge",
              field_manager: str | None = None, force: bool | None = None,
              subresource: str | None = None) -> dict[str, Any]:
        if subresource != "status":
            self.writes.append(("patch", self.resolve(m).resource, name))
        return super().patch(m, name, patch, namespace, patch_type, field_manager, force, subresource)

    def create(self, m: Any, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        self.writes.append(("create", self.resolve(m).resource, obj["metadata"]["name"]))
        return super().create(m, obj, namespace)

    def delete(self, m: Any, name: str, namespace: str | None = None, propagation_policy: Any = None,
               preconditions_uid: str | None = None) -> dict[str, Any]:
        self.writes.append(("delete", self.resolve(m).resource, name))
        return super().delete(m, name, namespace, propagation_policy, preconditions_uid)


def deployment(name: str, replicas: int, app: str | None = None) -> dict[str, Any]:
    app = app or name
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": app},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                         "team": "llm"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": {"containers": [{"name": "main", "image": "llm:1"}]}}},
            "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": replicas,
                       "updatedReplicas": replicas}}


def rsg(name: str, members: list[tuple[str, str, int]], *, replicas: int = 1,
        strategy: str = "InplaceScaling", prometheus: Mapping[str, Any] | None = None,
        created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    """An RSG of (member name, Deployment name, replicasPerGroup) members."""
    spec: dict[str, Any] = {"strategy": strategy, "replicas": replicas, "members": [
        {"name": m, "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
         "replicasPerGroup": per} for m, target, per in members]}
    if prometheus is not None:
        spec["scaleDown"] = {"prometheus": dict(prometheus)}
    return {"apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
            "metadata": {"name": name, "namespace": NS, "generation": 1, "creationTimestamp": created},
            "spec": spec}


class RSGHarness:
    """See the module docstring."""

    def __init__(self, *, outbound: Any = None, limits: ReplicationLimits | None = None,
                 promql_scope: PromQLScope | None = None) -> None:
        """``promql_scope`` None: ranking queries unconfined (confinement: test_promql_scope.py)."""
        self.cluster = Cluster(RSG_MAPPINGS)
        self.client = self.cluster.client = RecordingClient(self.cluster)
        self.clock = FakeClock()
        self.mgr = Manager.for_testing(self.cluster.lw_factory, self.cluster.mapper, clock=self.clock)
        es = setup_elasticscaler(self.mgr, poll_interval=0, client=self.client,
                                 handlers=default_registry(self.client),  # type: ignore[arg-type]
                                 outbound=InlineExecutor(self.clock))
        # the ranking query's answer, as the test sets it
        self.loads: dict[int, float] = {}
        self.query_error: str | None = None
        self.queries: list[str] = []
        self.es = es
        self.rsg: RSGController = setup_rsg(
            self.mgr, bindings=es.bindings, client=self.client,
            outbound=outbound if outbound is not None else InlineExecutor(self.clock), query=self._query,
            limits=limits, promql_scope=promql_scope)
        self.reconciler = self.rsg.reconciler
        self._stop = threading.Event()

    def _query(self, prom: RSGPrometheus) -> dict[int, float]:
        self.queries.append(prom.query)
        if self.query_error is not None:
            raise ValueError(self.query_error)
        return dict(self.loads)

    def api(self, resource: str) -> Any:
        return self.cluster.apis[resource]

    def start(self) -> None:
        self.mgr.informers.start(self._stop)
        assert self.mgr.informers.wait_for_cache_sync(5.0)
        self.mgr.can_write.set()  # as if elected
        self.rsg.watches.start(self.rsg.controller.queue)

    def stop(self) -> None:
        self._stop.set()
        self.mgr.dynamic_informers.stop_all()

    def _caught_up(self, resource: str) -> bool:
        api = self.api(resource)
        pairs: list[tuple[ResourceKey, Any]] = [
            (k, i) for k, i in self.mgr.informers.informers().items() if k.resource == resource]
        pairs += [(k, i) for k in self.mgr.dynamic_informers.active_keys() if k.resource == resource
                  for i in [self.mgr.dynamic_informers.informer(k)] if i is not None]
        for key, inf in pairs:
            if not inf.has_synced():
                continue
            view = api.view(key.namespace, key.label_selector)
            want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in api.objects()
                    if view.matches(o)}
            have = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.store.list()}
            if want != have:
                return False
        return True

    def _listing(self) -> bool:
        return any(not inf.has_synced() for k in self.mgr.dynamic_informers.active_keys()
                   if (inf := self.mgr.dynamic_informers.informer(k)) is not None)

    def sync_caches(self) -> None:
        for r in RESOURCES:
            wait_until(lambda r=r: self._caught_up(r), what=f"{r} caches caught up")

    def reconcile(self, name: str) -> Result:
        """Reconciles until no cache the reconciler asked for is still listing (as the initial list
        events would wake the RSG)."""
        result = Result()
        for _ in range(6):
            self.sync_caches()
            result = self.reconciler.reconcile(Request(NS, name))
            listing = (NOT_SYNCED_RETRY_SECONDS, CLONES_LISTING_RETRY_SECONDS)
            if result.requeue_after == AWAITING_RETRY_SECONDS:  # the clone events are on their way
                wait_until(lambda: self.reconciler.ledger.awaiting(NS, f"{NS}/{name}", ()) == 0,
                           what="created clones observed")
                continue
            if self._listing() or result.requeue_after in listing:
                wait_until(lambda: not self._listing(), what="dynamic informers listed")
                continue
            return result
        return result

    def status(self, name: str) -> dict[str, Any]:
        obj = self.api("resourcescalinggroups").get(f"{NS}/{name}")
        assert obj is not None
        return dict(obj.get("status") or {})

    def condition(self, name: str, ctype: str) -> dict[str, Any]:
        found = next((c for c in self.status(name).get("conditions") or () if c["type"] == ctype), None)
        assert found is not None, f"no {ctype} condition in {self.status(name)}"
        return dict(found)

    def replicas(self, name: str) -> int:
        obj = self.api("deployments").get(f"{NS}/{name}")
        assert obj is not None
        return int(obj["spec"]["replicas"])

    def settle(self, name: str) -> None:
        """Play the Deployment controller: every replica ready."""
        obj = self.api("deployments").get(f"{NS}/{name}")
        assert obj is not None
        n = obj["spec"]["replicas"]
        obj["status"] = {"observedGeneration": obj["metadata"].get("generation", 1), "replicas": n,
                         "readyReplicas": n, "updatedReplicas": n}
        self.api("deployments").update(obj)

    def set_replicas(self, name: str, n: int) -> None:
        """The user (or an ElasticScaler through /scale) sets the RSG's spec.replicas."""
        obj = self.api("resourcescalinggroups").get(f"{NS}/{name}")
        obj["spec"]["replicas"] = n
        obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        self.api("resourcescalinggroups").update(obj)

    def clones(self) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.api("deployments").objects()
                      if "autoscaling.openfuyao.com/rsg" in (o["metadata"].get("labels") or {}))
