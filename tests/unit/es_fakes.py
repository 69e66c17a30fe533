"""Fakes for the ElasticScaler reconciler tests (no tests here).

* ``Cluster``: one ``fakeapi.FakeAPI`` per resource of ``MAPPINGS``, an ``lw_factory`` for the
  manager's informers, and ``FakeClient``: the writes a reconciler makes (get, create, update,
  merge patch — status subresource included —, delete), applied to those FakeAPIs with
  resourceVersion preconditions, and counted per (verb, resource[/subresource]).
* ``FakeCollector``: metric samples from a dict the test sets; ``to_metric_value`` is the real one.
* ``Harness``: a ``Manager.for_testing`` on a ``FakeClock`` with ``setup_elasticscaler`` wired to the
  fakes (the real ``default_registry`` handlers over ``FakeClient``); ``start()`` runs the
  informers only, and tests call ``reconcile(name)`` directly (deterministic: no worker threads).
  Metric collections and signal pulls run inline (``InlineExecutor``) unless ``outbound=`` passes
  another executor (``executor_fakes.ManualExecutor`` finishes jobs when the test says so).
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fakeapi import FakeAPI, wait_until
from runtime_fakes import FakeMapper

from escaler.api.elasticscaler import MetricSpec
from escaler.clock import FakeClock
from escaler.errors import StatusError
from escaler.informers.factory import ResourceKey
from escaler.informers.interfaces import ListerWatcher
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.elasticscaler import ElasticScalerController, setup_elasticscaler
from escaler.reconcilers.kit.report import CLAIM_RECHECK_SECONDS
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.runtime import Manager, Request, Result
from escaler.runtime.executor import InlineExecutor
from escaler.scaling.algorithm import MetricValue
from escaler.signals.collector import to_metric_value
from escaler.signals.sample import Sample
from escaler.signals.signal_pull import SignalReading
from escaler.targets.registry import default_registry

NS = "team"
SCALERS = ResourceMapping(
    "elasticscaler.io", "v1alpha1", "elasticscalers", "ElasticScaler", True, frozenset({"status"})
)
DEPLOYMENTS = ResourceMapping("apps", "v1", "deployments", "Deployment", True, frozenset({"status"}))
HPAS = ResourceMapping(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, frozenset({"status"})
)
TIDALS = ResourceMapping("tidal.io", "v1alpha1", "tidals", "Tidal", True, frozenset({"status"}))
WIDGETS = ResourceMapping("example.com", "v1", "widgets", "Widget", True, frozenset())
LLMSCALERS = ResourceMapping(
    "llm.escaler.io", "v1alpha1", "llmscalers", "LLMScaler", True, frozenset({"status"})
)
PODS = ResourceMapping("", "v1", "pods", "Pod", True, frozenset({"status"}))
# (the fake client writes spec.replicas; /scale is exercised by the e2e suite)
STATEFULSETS = ResourceMapping("apps", "v1", "statefulsets", "StatefulSet", True, frozenset({"status"}))
RSGS = ResourceMapping("autoscaling.openfuyao.com", "v1alpha1", "resourcescalinggroups",
                       "ResourceScalingGroup", True, frozenset({"status"}))
LLMSLOS = ResourceMapping("llm.escaler.io", "v1alpha1", "llmslorequirements", "LLMSLORequirement", True,
                          frozenset({"status"}))
JOBSLOS = ResourceMapping("llm.escaler.io", "v1alpha1", "jobslorequirements", "JobSLORequirement", True,
                          frozenset({"status"}))
MAPPINGS = (SCALERS, DEPLOYMENTS, HPAS, TIDALS, WIDGETS, LLMSCALERS, PODS, STATEFULSETS, RSGS, LLMSLOS,
            JOBSLOS)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class FakeClient:
    """The reconciler's ``KubeWriter`` (and a ``DynamicClient`` for the handlers) over FakeAPIs."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._mu = threading.Lock()
        # (verb, resource or resource/subresource) → count
        self.calls: Counter[tuple[str, str]] = Counter()
        # scripted failures: (verb, resource) → exceptions popped one per call
        self.faults: dict[tuple[str, str], list[BaseException]] = {}

    def resolve(self, m: Any) -> ResourceMapping:
        if isinstance(m, ResourceMapping):
            return m
        return self._cluster.mapper.mapping_for(*m)

    def _api(self, m: Any) -> tuple[ResourceMapping, FakeAPI]:
        rm = self.resolve(m)
        return rm, self._cluster.apis[rm.resource]

    def _count(self, verb: str, what: str) -> None:
        with self._mu:
            self.calls[(verb, what)] += 1
            queued = self.faults.get((verb, what))
            if queued:
                raise queued.pop(0)

    def count(self, verb: str, what: str) -> int:
        with self._mu:
            return self.calls[(verb, what)]

    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        rm, api = self._api(m)
        self._count("get", rm.resource)
        obj = api.get(f"{namespace}/{name}" if namespace else name)
        if obj is None:
            raise StatusError(404, "NotFound", f"{rm.resource} {name} not found")
        return obj

    def create(self, m: Any, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        rm, api = self._api(m)
        self._count("create", rm.resource)
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {}).setdefault(
            "namespace", namespace or body["metadata"].get("namespace")
        )
        body["metadata"].setdefault("generation", 1)
        body["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        return api.create(body)

    def _check_rv(self, api: FakeAPI, key: str, rv: str | None) -> dict[str, Any]:
        current = api.get(key)
        if current is None:
            raise StatusError(404, "NotFound", f"{key} not found")
        if rv and current["metadata"].get("resourceVersion") != rv:
            raise StatusError(409, "Conflict", f"{key}: the object has been modified")
        return current

    def update(self, m: Any, obj: dict[str, Any]) -> dict[str, Any]:
        rm, api = self._api(m)
        self._count("update", rm.resource)
        meta = obj["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        current = self._check_rv(api, key, meta.get("resourceVersion"))
        body = copy.deepcopy(obj)
        if body.get("spec") != current.get("spec"):
            body["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        body["status"] = current.get("status")
        return api.update(body)

    def patch(
        self,
        m: Any,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "merge",
        field_manager: str | None = None,
        force: bool | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        rm, api = self._api(m)
        self._count("patch", rm.resource + (f"/{subresource}" if subresource else ""))
        assert patch_type == "merge", patch_type
        key = f"{namespace}/{name}" if namespace else name
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        current = self._check_rv(api, key, rv)
        if subresource == "status":
            merged = dict(current)
            merged["status"] = _merge(current.get("status"), patch.get("status"))
        else:
            body = {k: v for k, v in patch.items() if k != "status"}
            merged = _merge(current, body)
            if merged.get("spec") != current.get("spec"):
                merged["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
        return api.update(merged)

    def patch_status(
        self, m: Any, name: str, patch: Any, namespace: str | None = None, patch_type: str = "merge"
    ) -> dict[str, Any]:
        return self.patch(m, name, patch, namespace, patch_type=patch_type, subresource="status")

    def delete(
        self,
        m: Any,
        name: str,
        namespace: str | None = None,
        propagation_policy: Any = None,
        preconditions_uid: str | None = None,
    ) -> dict[str, Any]:
        rm, api = self._api(m)
        self._count("delete", rm.resource)
        return api.delete(f"{namespace}/{name}" if namespace else name)


class Cluster:
    """One FakeAPI per resource; see the module docstring."""

    def __init__(self, mappings: Sequence[ResourceMapping] = MAPPINGS) -> None:
        self.mapper = FakeMapper(tuple(mappings))
        self.apis: dict[str, FakeAPI] = {m.resource: FakeAPI() for m in mappings}
        self.client = FakeClient(self)
        # every ResourceKey an informer was built for, in order
        self.keys: list[ResourceKey] = []

    def lw_factory(self, key: ResourceKey) -> ListerWatcher:
        self.keys.append(key)
        return self.apis[key.resource].for_key(key)


class FakeCollector:
    """Samples per metric name (``values[name] = float | str error``); counts collect calls."""

    def __init__(self) -> None:
        self.values: dict[str, float | str] = {}
        self.calls = 0

    def collect(
        self, namespace: str, metrics: Sequence[MetricSpec], target: Any, current_replicas: int
    ) -> list[tuple[MetricSpec, Sample]]:
        from escaler.signals.collector import metric_name

        self.calls += 1
        out = []
        for spec in metrics:
            v = self.values.get(metric_name(spec), "no value scripted")
            out.append((spec, Sample.fail(v) if isinstance(v, str) else Sample(value=float(v))))
        return out

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue:
        return to_metric_value(spec, sample)


# ---------------------------------------------------------------------------------------- objects


def deployment(
    name: str, replicas: int = 2, *, ready: int | None = None, namespace: str = NS, generation: int = 1
) -> dict[str, Any]:
    ready = replicas if ready is None else ready
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": replicas,
        },
    }


def pod(name: str, app: str = "web", *, phase: str = "Running", ready: bool = True,
        unschedulable_since: str | None = None, message: str = "0/3 nodes are available: 3 Insufficient "
        "nvidia.com/gpu.", namespace: str = NS) -> dict[str, Any]:
    """A pod of Deployment ``app``; ``unschedulable_since`` makes it Pending as Unschedulable."""
    conditions: list[dict[str, Any]] = []
    if unschedulable_since is not None:
        phase = "Pending"
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": message, "lastTransitionTime": unschedulable_since})
    else:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                         "creationTimestamp": unschedulable_since or "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": phase, "conditions": conditions}}


def scaler(
    name: str,
    trigger: dict[str, Any],
    *,
    target: dict[str, str] | None = None,
    min_replicas: int = 1,
    max_replicas: int = 10,
    created: str = "2026-01-01T00:00:00Z",
    mode: str | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = NS,
    uid: str | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "generation": generation,
        "creationTimestamp": created,
        "uid": uid or f"uid-{name}",
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {
        "targetRef": target or {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "trigger": trigger,
    }
    if mode:
        spec["mode"] = mode
    return {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "metadata": meta,
        "spec": spec,
    }


def metrics_trigger(
    *metrics: dict[str, Any], algorithm: str = "apa", config: dict[str, str] | None = None
) -> dict[str, Any]:
    mt: dict[str, Any] = {"scalingAlgorithm": algorithm, "metrics": list(metrics)}
    if config:
        mt["algorithmConfig"] = config
    return {"type": "MetricsTrigger", "metricsTrigger": mt}


def external_metric(name: str = "queue", value: str = "10") -> dict[str, Any]:
    return {
        "type": "External",
        "external": {"metric": {"name": name}, "target": {"type": "Value", "value": value}},
    }


def external_server_metric(query: str = "sum(load)", value: str = "10") -> dict[str, Any]:
    return {
        "type": "ExternalServer",
        "externalServer": {
            "endpoint": "http://prom.example:9090",
            "query": query,
            "target": {"type": "Value", "value": value},
        },
    }


def cpu_metric(utilization: int = 70) -> dict[str, Any]:
    return {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": utilization}},
    }


# ---------------------------------------------------------------------------------------- harness


class LaggingStore:
    """The scaler cache as the reconciler sees it: the informer's store, or — after ``freeze(obj)`` —
    one that keeps answering with ``obj`` (a cache that has not seen our own write yet)."""

    def __init__(self) -> None:
        self.store: Any = None
        self.frozen: Mapping[str, Any] | None = None

    def freeze(self, obj: Mapping[str, Any] | None) -> None:
        self.frozen = obj

    def get_by_key(self, key: str) -> Any:
        return self.frozen if self.frozen is not None else self.store.get_by_key(key)

    def list(self) -> list[Any]:
        return [self.frozen] if self.frozen is not None else list(self.store.list())


class Harness:
    """A manager on fakes with the ElasticScaler controller; see the module docstring."""

    def __init__(
        self,
        *,
        poll_interval: float = 0.0,
        allowed_hosts: Sequence[str] = (),
        api_server: Any = None,
        with_collector: bool = True,
        cluster: Cluster | None = None,
        clock: FakeClock | None = None,
        outbound: Any = None,
        status_refresh_seconds: float = 0.0,
        metric_grants: Any = None,
    ) -> None:
        # a second Harness on the same cluster and clock is a restarted manager (or a new leader)
        self.cluster = cluster if cluster is not None else Cluster()
        self.client = self.cluster.client
        self.clock = clock if clock is not None else FakeClock()
        self.mgr = Manager.for_testing(self.cluster.lw_factory, self.cluster.mapper, clock=self.clock)
        self.collector = FakeCollector()
        self.pulls: list[str] = []
        self.pull_reading = SignalReading(active=False)
        # the cache the reconciler reads scalers from: the informer's, unless a test freezes it
        self.scaler_cache = LaggingStore()
        self.es: ElasticScalerController = setup_elasticscaler(
            self.mgr,
            poll_interval=poll_interval,
            allowed_hosts=allowed_hosts,
            client=self.client,
            handlers=default_registry(self.client),  # type: ignore[arg-type]
            collector=self.collector if with_collector else None,
            signal_puller=self._pull,
            api_server=api_server,
            scaler_store=self.scaler_cache,
            # reads run inline (synchronously) unless a test passes an executor of its own
            outbound=outbound if outbound is not None else InlineExecutor(self.clock),
            status_refresh_seconds=status_refresh_seconds,
            metric_grants=metric_grants,
        )
        self.reconciler = self.es.reconciler
        # the ElasticScaler informer's cache (what the reconciler reads)
        self.scalers = self.mgr.informers.informer_for(
            ResourceKey(SCALERS.group, SCALERS.version, SCALERS.resource, namespace="")).store
        self.scaler_cache.store = self.scalers
        self.recorder = self.mgr.event_recorder
        self._stop = threading.Event()

    def _pull(self, endpoint: str, timeout: float) -> SignalReading:
        self.pulls.append(endpoint)
        return self.pull_reading

    def api(self, resource: str) -> FakeAPI:
        return self.cluster.apis[resource]

    def start(self) -> None:
        self.mgr.informers.start(self._stop)
        assert self.mgr.informers.wait_for_cache_sync(5.0)
        self.mgr.can_write.set()  # as if elected
        # the controller is not started (tests call reconcile themselves); its watch index is
        # started with its queue as the controller would, so watch events enqueue scalers
        self.es.watches.start(self.es.controller.queue)

    def stop(self) -> None:
        self._stop.set()
        self.mgr.dynamic_informers.stop_all()

    def cached(self, name: str, namespace: str = NS) -> Mapping[str, Any] | None:
        obj = self.scalers.get_by_key(f"{namespace}/{name}")
        return obj if isinstance(obj, Mapping) else None

    def wait_synced(self, resource: str = "elasticscalers") -> None:
        """Wait until every informer of ``resource`` (shared and dynamic) shows the API's current state."""
        api = self.api(resource)

        def caught_up() -> bool:
            pairs = [(k, i) for k, i in self.mgr.informers.informers().items() if k.resource == resource]
            pairs += [
                (k, i)
                for k in self.mgr.dynamic_informers.active_keys()
                if k.resource == resource
                for i in [self.mgr.dynamic_informers.informer(k)]
                if i is not None
            ]
            for key, inf in pairs:
                if not inf.has_synced():
                    continue
                view = api.view(key.namespace, key.label_selector)
                want = {
                    o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                    for o in api.objects()
                    if view.matches(o)
                }
                have = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.store.list()}
                if want != have:
                    return False
            return True

        wait_until(caught_up, what=f"{resource} caches caught up")

    def wait_listed(self) -> None:
        """Wait until every dynamic informer the reconciler asked for has listed."""
        wait_until(lambda: not self._listing(), what="dynamic informers listed")

    def _listing(self) -> bool:
        """True when a dynamic informer the reconciler asked for has not listed yet."""
        keys = self.mgr.dynamic_informers.active_keys()
        return any(not inf.has_synced() for k in keys
                   if (inf := self.mgr.dynamic_informers.informer(k)) is not None)

    def reconcile_once(self, name: str, namespace: str = NS) -> Result:
        """One reconcile on caches that show the API's current state."""
        self.wait_synced("elasticscalers")
        for r in ("deployments", "horizontalpodautoscalers", "tidals", "widgets", "pods", "statefulsets"):
            self.wait_synced(r)
        return self.reconciler.reconcile(Request(namespace, name))

    def reconcile(self, name: str, namespace: str = NS) -> Result:
        """A reconcile as the controller would run it, with the follow-ups that happen at once. A
        reconcile never waits for an informer it has just started (it returns a short requeue and
        the informer's initial list wakes the scaler), and a StateTrigger scaler's first sync only
        records its claim (the binding index update wakes it): a test sees the sync after those
        wake-ups, as a user would."""
        for _ in range(6):
            result = self.reconcile_once(name, namespace)
            if self._listing() or result.requeue_after == NOT_SYNCED_RETRY_SECONDS:
                self.wait_listed()
                continue
            if result.requeue_after != CLAIM_RECHECK_SECONDS:
                return result
        return result

    def status(self, name: str, namespace: str = NS) -> dict[str, Any]:
        obj = self.api("elasticscalers").get(f"{namespace}/{name}")
        assert obj is not None
        return dict(obj.get("status") or {})

    def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or () if c["type"] == ctype), None)

    def replicas(self, name: str = "web") -> int:
        obj = self.api("deployments").get(f"{NS}/{name}")
        assert obj is not None
        return int(obj["spec"]["replicas"])

    def settle(self, name: str = "web") -> None:
        """Play the Deployment controller: status catches up with spec and generation."""
        obj = self.api("deployments").get(f"{NS}/{name}")
        assert obj is not None
        n = obj["spec"]["replicas"]
        obj["status"] = {
            "observedGeneration": obj["metadata"].get("generation", 1),
            "replicas": n,
            "readyReplicas": n,
            "updatedReplicas": n,
        }
        self.api("deployments").update(obj)

    def reasons(self) -> list[str]:
        return self.recorder.reasons()  # type: ignore[attr-defined,no-any-return]


@contextmanager
def harness(**kwargs: Any) -> Iterator[Harness]:
    h = Harness(**kwargs)
    try:
        yield h
    finally:
        h.stop()
