"""``setup_elasticscaler(mgr, ...)``: the ElasticScaler controller wired onto a manager.

What it registers:

* the controller (``ControllerBuilder``), named ``elasticscaler``:

  - ``for_`` ElasticScaler, passing creates, deletes and updates that change
    ``metadata.generation`` or the annotations (status-only writes do not retrigger: the
    reconciler writes status itself, and every status write would otherwise loop);
  - ``owns`` autoscaling/v2 HorizontalPodAutoscaler (the companion HPA's status changes wake its
    scaler, which mirrors it, and a hand edit is reverted);
  - ``watches`` HPAs with a mapping to the scalers that claim the HPA's ``scaleTargetRef`` (a
    foreign HPA appearing or going away), and ElasticScalers with a mapping to *every* claimant of
    the target an object claims before and after the change (when the winner of a conflict goes
    or stops being able to act, the next one takes over; a StateTrigger scaler whose claim just
    reached the index writes at once);
  - ``watches_source`` the ``WatchIndex``: the targets, the StateTrigger sources, missing chain hops
    and the targets' pods, on dynamic informers — one handler per watched resource and an index
    from object to scalers, never one per scaler;
  - ``watches`` Tidals (spec changes) mapped through the ``FLOOR_INDEX`` on the ElasticScaler
    informer to the scalers whose ``spec.floorFrom`` names them (``escaler.reconcilers.kit.floor``); when
    the Tidal kind is not served at setup, ``crd_gate`` (the manager's ``CRDGate``) adds that watch
    once the Tidal CRD is installed;
* the ``MetricsPoller`` (leader-only runnable) when ``poll_interval > 0``, with the reconciler's
  ``poll`` shortcut (a due scaler's collection starts on the poller, so a poll costs one
  reconcile, not two), each scaler at its ``pollIntervalSeconds`` raised to ``min_poll_interval``
  (``--min-poll-interval``) or at ``poll_interval``; on a sharded manager
  it polls only the scalers of the shards this replica leads (``escaler.runtime.sharding``),
  relisting at once when one is gained or lost; the signal API answers 503 for another shard's;
* the outbound executor (``outbound``; by default ``kit.setup.outbound_executor``, a
  ``escaler.runtime.executor.KeyedExecutor``) that runs metric collections and signal pulls off
  the reconcile workers; a source of the controller (started and stopped with it), whose
  completions enqueue the scaler. Tests pass ``outbound=InlineExecutor()`` to keep reads
  synchronous;
* the SignalTrigger push route on the manager's API server (``mgr.api_server``), when there is
  one: ``POST /signal/v1/namespaces/{namespace}/elasticscalers/{name}``, authorized as
  ``update`` on ``elasticscalers/signal``;
* the companion HPA's metric-grant check (``grants.MetricGrants`` on the manager's REST
  connection, or ``metric_grants``; none on a manager without one).

State shared across scaler kinds — the ``TargetBindings`` index and the ``ScalerMetrics``
collectors — belongs to the caller that owns the manager (``escaler.cli.manager`` makes one of
each and passes them to every kind's setup); when none is given, a fresh one is made. Every
collaborator the reconciler talks to can be injected (tests, embedding): ``client``,
``handlers``, ``collector``, ``signal_puller``, ``metric_grants``, and ``scaler_store`` (the
cache the reconciler reads scalers from; tests pass one that lags behind the API, as a real cache
can); by default they are built on the manager's client and REST connection, and a manager
without a client needs ``client`` and ``handlers``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from escaler.api.elasticscaler import HPA_ALGORITHM, ElasticScaler, TriggerType
from escaler.informers.factory import ResourceKey
from escaler.kube.dynamic import DynamicClient
from escaler.kube.scalepaths import CrdScalePaths
from escaler.reconcilers.elasticscaler.deletioncost import PodPatcher, PodValueReader
from escaler.reconcilers.elasticscaler.grants import MetricGrants, kube_review
from escaler.reconcilers.elasticscaler.metricsync import Collector
from escaler.reconcilers.elasticscaler.reconciler import ElasticScalerReconciler, ReconcilerDeps
from escaler.reconcilers.elasticscaler.signal import SIGNAL_ROUTE, SignalAPI, SignalStore
from escaler.reconcilers.kit.bindings import TargetBindings, hpa_target
from escaler.reconcilers.kit.claims import Claims
from escaler.reconcilers.kit.floor import FloorWatch
from escaler.reconcilers.kit.names import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.kit.poller import DEFAULT_MIN_POLL_INTERVAL_SECONDS, MetricsPoller
from escaler.reconcilers.kit.ports import HandlerLookup, KubeClient, Mapper, ObjectRef, ObjectStore
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.setup import (
    DEFAULT_POLL_INTERVAL_SECONDS,
    TargetChanged,
    add_poller,
    cache_reader,
    outbound_executor,
)
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.kit.watchkey import watch_key
from escaler.runtime.apiserver import ApiError
from escaler.runtime.authn import ResourceAttributes
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.crdgate import CRDGate
from escaler.runtime.executor import ExecutorSource
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import AnnotationChangedPredicate, GenerationChangedPredicate, or_
from escaler.runtime.types import Request
from escaler.scaling.endpoints import host_allowed
from escaler.signals.bearer import secret_key_reader
from escaler.signals.collector import MetricsCollector
from escaler.signals.dedupe import SharedQueries
from escaler.signals.fetch import HttpClient
from escaler.signals.netpolicy import AddressPolicy, IPNetwork
from escaler.signals.promqlscope import DEFAULT_SCOPE, PromQLScope
from escaler.signals.signal_pull import SignalReading, pull_signal
from escaler.targets.pods import select_pods
from escaler.targets.registry import default_registry

__all__ = [
    "CONTROLLER_NAME",
    "ElasticScalerController",
    "pod_lister",
    "setup_elasticscaler",
]

CONTROLLER_NAME = "elasticscaler"

_log = logging.getLogger(__name__)


@dataclass
class ElasticScalerController:
    """What ``setup_elasticscaler`` built (handles for tests and embedding)."""

    controller: Controller
    reconciler: ElasticScalerReconciler
    # None when polling is off
    poller: MetricsPoller | None
    signals: SignalStore
    watches: WatchIndex
    bindings: TargetBindings
    # None when the manager has no API server
    signal_api: SignalAPI | None


def _is_polled(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    trigger = spec.get("trigger") or {}
    if trigger.get("type") != TriggerType.METRICS:
        return False
    mt = trigger.get("metricsTrigger") or {}
    return bool(mt.get("scalingAlgorithm", "apa") != HPA_ALGORITHM)


def pod_lister(mapper: Mapper,
               watches: WatchIndex) -> Callable[[str, str], Sequence[Mapping[str, Any]] | None]:
    """The Resource collector's ``PodLister``: the namespace's pod cache the reconciler holds for its
    targets (``ROLE_PODS``), filtered by selector; None while it has not listed."""

    def pods(namespace: str, selector: str) -> Sequence[Mapping[str, Any]] | None:
        listed = watches.listed(watch_key(mapper, namespace, ObjectRef("v1", "Pod", "")))
        return None if listed is None else select_pods(listed, selector)

    return pods


def _client_of(mgr: Manager, client: KubeClient | None) -> tuple[KubeClient, DynamicClient | None]:
    try:
        dynamic: DynamicClient | None = mgr.client
    except RuntimeError:  # a manager built on injected fakes has no client
        dynamic = None
    if client is not None:
        return client, dynamic
    if dynamic is None:
        raise ValueError("setup_elasticscaler: this manager has no API client; pass client= and handlers=")
    return dynamic, dynamic


def setup_elasticscaler(
    mgr: Manager,
    *,
    poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS,
    allowed_hosts: Sequence[str] = (),
    allow_networks: Sequence[IPNetwork] = (),
    max_concurrent_reconciles: int | None = None,
    client: KubeClient | None = None,
    handlers: HandlerLookup | None = None,
    collector: Collector | None = None,
    signal_puller: Callable[[str, float], SignalReading] | None = None,
    api_server: Any = None,
    poll_tick: float | None = None,
    bindings: TargetBindings | None = None,
    scaler_metrics: ScalerMetrics | None = None,
    scaler_store: ObjectStore | None = None,
    outbound: ExecutorSource | None = None,
    status_refresh_seconds: float = 0.0,
    min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    metric_grants: MetricGrants | None = None,
    promql_scope: PromQLScope | None = DEFAULT_SCOPE,
    crd_gate: CRDGate | None = None,
) -> ElasticScalerController:
    """Register the ElasticScaler controller on ``mgr``; see the module docstring."""
    ns = mgr.options.namespace
    writer, dynamic = _client_of(mgr, client)
    scaler_informer, hpa_informer, floors = _informers(mgr, ns, crd_gate)
    bindings = bindings if bindings is not None else TargetBindings()
    claims = Claims(live=scaler_informer.store.list)
    bindings.add_source(ElasticScaler.KIND, scaler_informer, claims.target_of)
    bindings.set_hpa_informer(hpa_informer)
    metrics = scaler_metrics if scaler_metrics is not None else ScalerMetrics(mgr.metrics.registry)
    watches = WatchIndex(mgr.dynamic_informers)
    allowed = tuple(allowed_hosts)
    allowed_host = functools.partial(host_allowed, patterns=allowed)
    http = HttpClient(AddressPolicy(allow_networks))  # the SSRF address policy (--allow-endpoint-networks)
    if collector is None and mgr.rest is not None and dynamic is not None:
        collector = _collector(mgr, dynamic, http, allowed_host, watches, promql_scope)
    if signal_puller is None and mgr.rest is not None:
        signal_puller = _signal_puller(allowed_host, mgr, http)
    outbound = outbound if outbound is not None else outbound_executor(mgr, controller=CONTROLLER_NAME)
    handlers = handlers if handlers is not None else _handlers_of(mgr, dynamic, watches)
    reconciler = ElasticScalerReconciler(ReconcilerDeps(
        scalers=scaler_store if scaler_store is not None else scaler_informer.store,
        hpas=hpa_informer.store, client=writer, mapper=mgr.mapper,
        handlers=handlers, recorder=mgr.event_recorder, clock=mgr.clock, metrics=metrics, bindings=bindings,
        watches=watches, signals=SignalStore(), collector=collector, signal_puller=signal_puller,
        allowed_hosts=allowed, poll_interval=poll_interval, can_write=mgr.can_write,
        outbound=outbound, status_refresh=status_refresh_seconds, min_poll_interval=min_poll_interval,
        pod_values=_pod_values_of(collector), pod_patcher=_patcher_of(writer), tidals=floors.store,
        metric_grants=_grants_of(mgr, metric_grants)))
    controller = _build(mgr, reconciler, bindings, claims, watches, max_concurrent_reconciles, floors)
    controller.watch(outbound)  # completions enqueue on the controller's queue, from its start on
    poller = add_poller(mgr, controller, scaler_informer.store, poll_interval, poll_tick, reconciler.poll,
                        is_polled=_is_polled, min_poll_interval=min_poll_interval)
    signal_api = _signal_api(mgr, controller, reconciler, scaler_informer.store, api_server)
    _log.info("ElasticScaler controller set up (poll interval %gs, %s)", poll_interval,
              "signal API on" if signal_api is not None else "no signal API")
    return ElasticScalerController(controller, reconciler, poller, reconciler.signals, watches, bindings,
                                   signal_api)


def _handlers_of(mgr: Manager, dynamic: DynamicClient | None, watches: WatchIndex) -> HandlerLookup:
    """The default ResourceHandlers: on the manager's client, reading targets from the watch cache."""
    assert dynamic is not None  # _client_of refused a manager without one
    return default_registry(dynamic, cache_get=cache_reader(mgr.mapper, watches),
                            scale_paths=CrdScalePaths(dynamic, clock=mgr.clock))


def _grants_of(mgr: Manager, given: MetricGrants | None) -> MetricGrants | None:
    """The companion HPA's metric-grant check: ``given``, else one on the manager's REST connection
    (None on a manager without one: built on injected fakes)."""
    if given is not None or mgr.rest is None:
        return given
    return MetricGrants(kube_review(mgr.rest), mgr.clock)


def _pod_values_of(collector: Collector | None) -> PodValueReader | None:
    """The reader of scaleDown.podDeletionCost's per-pod values: the collector when it has one (the
    manager's MetricsCollector: the same outbound client as ExternalServer metrics), else None."""
    return cast(PodValueReader, collector) if callable(getattr(collector, "pod_values", None)) else None


def _patcher_of(writer: KubeClient) -> PodPatcher | None:
    """The client that patches pods for scaleDown.podDeletionCost: the writer itself when it can patch
    (the manager's fenced DynamicClient), else None (an injected fake without patch)."""
    return cast(PodPatcher, writer) if callable(getattr(writer, "patch", None)) else None


def _collector(mgr: Manager, dynamic: DynamicClient, http: HttpClient, allowed_host: Callable[[str], bool],
               watches: WatchIndex, promql_scope: PromQLScope | None) -> MetricsCollector:
    """The production collector: bearer tokens from label-selected Secret caches, identical
    ExternalServer queries shared within a poll tick, pods from the reconciler's pod caches."""
    assert mgr.rest is not None
    return MetricsCollector(mgr.rest, dynamic, http, clock=mgr.clock, allowed=allowed_host,
                            secret_reader=secret_key_reader(dynamic, informers=mgr.dynamic_informers),
                            shared=SharedQueries(mgr.clock), pod_lister=pod_lister(mgr.mapper, watches),
                            promql_scope=promql_scope)


def _informers(mgr: Manager, ns: str, gate: CRDGate | None = None) -> tuple[Any, Any, FloorWatch]:
    """The ElasticScaler and HPA informers: the same keys the builder resolves, so these are the
    controller's own (shared) informers; and the spec.floorFrom wiring on the first."""
    es_map = mgr.mapper.mapping_for(ElasticScaler.API_VERSION, ElasticScaler.KIND)
    hpa_map = mgr.mapper.mapping_for(HPA_API_VERSION, HPA_KIND)
    scalers = mgr.informers.informer_for(ResourceKey(es_map.group, es_map.version, es_map.resource,
                                                     namespace=ns if es_map.namespaced else ""))
    return (scalers, mgr.informers.informer_for(ResourceKey(hpa_map.group, hpa_map.version, hpa_map.resource,
                                                            namespace=ns)), FloorWatch(mgr, scalers, gate))


def _build(mgr: Manager, reconciler: ElasticScalerReconciler, bindings: TargetBindings, claims: Claims,
           watches: WatchIndex, max_concurrent_reconciles: int | None,
           floors: FloorWatch | None = None) -> Controller:
    def claimants_of_target(obj: Mapping[str, Any]) -> list[Request]:
        target = claims.target_of(obj)
        return [] if target is None else bindings.requests_of(target, ElasticScaler.KIND)

    def claimants_of_hpa_target(obj: Mapping[str, Any]) -> list[Request]:
        target = hpa_target(obj)
        return [] if target is None else bindings.requests_of(target, ElasticScaler.KIND)

    builder = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(ElasticScaler.API_VERSION, ElasticScaler.KIND,
              predicates=[or_(GenerationChangedPredicate(), AnnotationChangedPredicate())])
        .owns(HPA_API_VERSION, HPA_KIND)
        .watches(HPA_API_VERSION, HPA_KIND, EnqueueRequestsFromMapFunc(claimants_of_hpa_target),
                 predicates=[TargetChanged(hpa_target)])
        .watches(ElasticScaler.API_VERSION, ElasticScaler.KIND,
                 EnqueueRequestsFromMapFunc(claimants_of_target),
                 predicates=[TargetChanged(claims.target_of)])
        .watches_source(watches)
    )
    # spec.floorFrom: one Tidal handler over an index of the scalers naming each Tidal
    builder = builder if floors is None else floors.add_to(builder)
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    controller = builder.complete(reconciler)
    if floors is not None:  # the Tidal CRD installed after this setup: its watch is added then
        floors.wire_when_served(controller, CONTROLLER_NAME)
    # another kind (LLMScaler) whose claim on a target changes wakes our claimants of it
    bindings.set_waker(ElasticScaler.KIND, lambda ns, name: controller.enqueue(Request(ns, name)))
    return controller


def _signal_api(mgr: Manager, controller: Controller, reconciler: ElasticScalerReconciler, store: Any,
                api_server: Any) -> SignalAPI | None:
    server = api_server if api_server is not None else getattr(mgr, "api_server", None)
    if server is None:
        return None
    shards = mgr.shards

    def get_scaler(r: Request) -> Mapping[str, Any] | None:
        if shards is not None and not shards.leads(shard := shards.shard_of(r.namespace, r.name)):
            # sharded: only the replica leading the scaler's shard keeps its signals
            lease = f"{mgr.options.leader_election_id}-shard-{shard}"
            raise ApiError(503, f"ElasticScaler {r}: shard {shard} of {shards.total} is not led by this "
                                f"replica; retry on the holder of Lease {lease}")
        obj: Mapping[str, Any] | None = store.get_by_key(str(r))
        return obj

    api = SignalAPI(reconciler.signals, get_scaler, controller.enqueue, mgr.clock)
    server.add_route("POST", SIGNAL_ROUTE, api.handle, authz=ResourceAttributes(
        verb="update", group="elasticscaler.io", resource="elasticscalers", subresource="signal",
        namespace="{namespace}", name="{name}"))
    return api


def _signal_puller(allowed_host: Callable[[str], bool], mgr: Manager,
                   http: HttpClient) -> Callable[[str, float], SignalReading]:
    def pull(endpoint: str, timeout: float) -> SignalReading:
        return pull_signal(http, endpoint, timeout=timeout, allowed=allowed_host, clock=mgr.clock)

    return pull
