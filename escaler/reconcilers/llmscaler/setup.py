"""``setup_llmscaler(mgr, ...)``: the LLMScaler controller wired onto a manager.

What it registers (the ElasticScaler's pieces, for another kind):

* the controller, named ``llmscaler``:

  - ``for_`` LLMScaler, passing creates, deletes and updates that change ``metadata.generation``
    or the annotations (status-only writes do not retrigger);
  - ``watches`` HPAs, LLMScalers and ElasticScalers with a mapping to the *LLMScalers* that claim
    the target the object claims before and after the change (a foreign HPA, or the winner of a
    TargetConflict of either kind going away, wakes the next claimant); an LLMScaler's change also
    wakes the other kinds' claimants of its target (``TargetBindings.wake_claimants``);
  - ``watches_source`` its ``WatchIndex`` (targets and their pods, on dynamic informers: one
    handler per watched resource and an index, never one per scaler);
  - ``watch`` its outbound executor (provider reads off the reconcile workers; completions
    enqueue the scaler);
* the claim source ``LLMScaler`` in the shared ``TargetBindings`` (``claims.llm_claims``);
* the poller (leader-only, sharded like the ElasticScaler's) enqueuing every LLMScaler once per
  ``poll_interval`` (``--metrics-trigger-poll-interval``; 0 = events only);
* the production ``ProviderReader``: Prometheus instant queries
  (``escaler.signals.prometheus.query_prometheus``; the Flow provider's queries too) and
  custom-provider GETs (``provider.read_custom``), both on one ``HttpClient`` with the SSRF address policy
  (``--allow-endpoint-networks``) and the ``--allowed-endpoint-hosts`` hook;
* the ``spec.floorFrom`` Tidal watch (``escaler.reconcilers.kit.floor.FloorWatch``), as the
  ElasticScaler's: added once the Tidal CRD is installed when ``crd_gate`` is given and it was not;
* ``decisions``: the SLO decision engine's lookup (``escaler.reconcilers.kit.ports.DecisionLookup``),
  read in-process by a Custom provider with ``serviceId`` — in the scaler's namespace only.

``bindings`` and ``scaler_metrics`` are shared across kinds (``escaler.cli.manager`` passes the
same ones to every setup). Tests inject ``client``, ``handlers``, ``reader``, ``outbound``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.api.elasticscaler import ElasticScaler
from escaler.api.llmscaler import LLMScaler
from escaler.clock import Clock
from escaler.informers.factory import ResourceKey
from escaler.kube.scalepaths import CrdScalePaths
from escaler.reconcilers.kit.bindings import TargetBindings, TargetKey, hpa_target
from escaler.reconcilers.kit.claims import Claims
from escaler.reconcilers.kit.floor import FloorWatch
from escaler.reconcilers.kit.managerclient import manager_client
from escaler.reconcilers.kit.names import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.kit.poller import DEFAULT_MIN_POLL_INTERVAL_SECONDS, MetricsPoller
from escaler.reconcilers.kit.ports import DecisionLookup, HandlerLookup, KubeClient
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.setup import (
    DEFAULT_POLL_INTERVAL_SECONDS,
    TargetChanged,
    add_poller,
    cache_reader,
    outbound_executor,
    spec_poll_interval,
)
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.llmscaler.claims import llm_claims
from escaler.reconcilers.llmscaler.provider import CustomReading, read_custom
from escaler.reconcilers.llmscaler.recommend import ProviderReader
from escaler.reconcilers.llmscaler.reconciler import LLMReconcilerDeps, LLMScalerReconciler
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.crdgate import CRDGate
from escaler.runtime.executor import ExecutorSource
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import AnnotationChangedPredicate, GenerationChangedPredicate, or_
from escaler.runtime.types import Request
from escaler.scaling.endpoints import host_allowed
from escaler.signals.fetch import HttpClient
from escaler.signals.netpolicy import AddressPolicy, IPNetwork
from escaler.signals.prometheus import query_prometheus
from escaler.signals.promqlscope import DEFAULT_SCOPE, PromQLScope
from escaler.signals.sample import Sample
from escaler.targets.registry import default_registry

__all__ = ["CONTROLLER_NAME", "HttpProviderReader", "LLMScalerController", "setup_llmscaler"]

CONTROLLER_NAME = "llmscaler"

_log = logging.getLogger(__name__)


@dataclass
class LLMScalerController:
    """What ``setup_llmscaler`` built (handles for tests and embedding)."""

    controller: Controller
    reconciler: LLMScalerReconciler
    # None when polling is off
    poller: MetricsPoller | None
    watches: WatchIndex
    bindings: TargetBindings


class HttpProviderReader:
    """The production ``ProviderReader``: the hardened fetch path (see the module docstring)."""

    def __init__(self, http: HttpClient, allowed: Callable[[str], bool], clock: Clock) -> None:
        # one client: the address policy and its connection pool; fixed
        self._http = http
        # the --allowed-endpoint-hosts hook, checked on every request (redirects are not followed)
        self._allowed = allowed
        # the fetch deadline's clock
        self._clock = clock

    def prometheus(self, endpoint: str, query: str, timeout: float) -> Sample:
        return query_prometheus(self._http, endpoint, query, timeout, allowed=self._allowed,
                                clock=self._clock)

    def custom(self, url: str, timeout: float) -> CustomReading:
        return read_custom(self._http, url, timeout=timeout, allowed=self._allowed, clock=self._clock)






def setup_llmscaler(
    mgr: Manager,
    *,
    poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS,
    allowed_hosts: Sequence[str] = (),
    allow_networks: Sequence[IPNetwork] = (),
    max_concurrent_reconciles: int | None = None,
    client: KubeClient | None = None,
    handlers: HandlerLookup | None = None,
    reader: ProviderReader | None = None,
    bindings: TargetBindings | None = None,
    scaler_metrics: ScalerMetrics | None = None,
    outbound: ExecutorSource | None = None,
    poll_tick: float | None = None,
    status_refresh_seconds: float = 0.0,
    min_poll_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS,
    decisions: DecisionLookup | None = None,
    promql_scope: PromQLScope | None = DEFAULT_SCOPE,
    crd_gate: CRDGate | None = None,
) -> LLMScalerController:
    """Register the LLMScaler controller on ``mgr``; see the module docstring."""
    ns = mgr.options.namespace
    dynamic = manager_client(mgr)
    writer: Any = client if client is not None else dynamic
    scaler_informer, hpa_informer = _informers(mgr, ns)
    floors = FloorWatch(mgr, scaler_informer, crd_gate)
    bindings = bindings if bindings is not None else TargetBindings()
    claims = llm_claims(live=scaler_informer.store.list)
    bindings.add_source(LLMScaler.KIND, scaler_informer, claims.target_of)
    bindings.set_hpa_informer(hpa_informer)
    metrics = scaler_metrics if scaler_metrics is not None else ScalerMetrics(mgr.metrics.registry)
    watches = WatchIndex(mgr.dynamic_informers)
    allowed = tuple(allowed_hosts)
    if reader is None:
        reader = HttpProviderReader(HttpClient(AddressPolicy(allow_networks)),
                                    lambda host: host_allowed(host, allowed), mgr.clock)
    if handlers is None:
        handlers = default_registry(dynamic, cache_get=cache_reader(mgr.mapper, watches),
                                    scale_paths=CrdScalePaths(dynamic, clock=mgr.clock))
    outbound = outbound if outbound is not None else outbound_executor(mgr, controller=CONTROLLER_NAME)
    reconciler = LLMScalerReconciler(LLMReconcilerDeps(
        scalers=scaler_informer.store, client=writer, mapper=mgr.mapper, handlers=handlers,
        recorder=mgr.event_recorder, clock=mgr.clock, metrics=metrics, bindings=bindings, watches=watches,
        reader=reader, allowed_hosts=allowed, poll_interval=poll_interval, can_write=mgr.can_write,
        outbound=outbound, status_refresh=status_refresh_seconds, min_poll_interval=min_poll_interval,
        tidals=floors.store, decisions=decisions, promql_scope=promql_scope))
    controller = _build(mgr, reconciler, bindings, claims, watches, max_concurrent_reconciles, floors)
    controller.watch(outbound)  # completions enqueue on the controller's queue, from its start on
    poller = add_poller(mgr, controller, scaler_informer.store, poll_interval, poll_tick, None,
                        is_polled=lambda _obj: True, interval_of=spec_poll_interval,
                        min_poll_interval=min_poll_interval)
    _log.info("LLMScaler controller set up (poll interval %gs)", poll_interval)
    return LLMScalerController(controller, reconciler, poller, watches, bindings)


def _informers(mgr: Manager, ns: str) -> tuple[Any, Any]:
    """The LLMScaler and HPA informers: the keys the builder resolves, so the controller's own."""
    llm_map = mgr.mapper.mapping_for(LLMScaler.API_VERSION, LLMScaler.KIND)
    hpa_map = mgr.mapper.mapping_for(HPA_API_VERSION, HPA_KIND)
    return (mgr.informers.informer_for(ResourceKey(llm_map.group, llm_map.version, llm_map.resource,
                                                   namespace=ns if llm_map.namespaced else "")),
            mgr.informers.informer_for(ResourceKey(hpa_map.group, hpa_map.version, hpa_map.resource,
                                                   namespace=ns)))


def _build(mgr: Manager, reconciler: LLMScalerReconciler, bindings: TargetBindings, claims: Claims,
           watches: WatchIndex, max_concurrent_reconciles: int | None,
           floors: FloorWatch | None = None) -> Controller:
    es_map = mgr.mapper.mapping_for(ElasticScaler.API_VERSION, ElasticScaler.KIND)
    es_informer = mgr.informers.informer_for(ResourceKey(
        es_map.group, es_map.version, es_map.resource,
        namespace=mgr.options.namespace if es_map.namespaced else ""))
    es_claims = Claims(live=es_informer.store.list)

    def claimants_of(target_of: Callable[[Mapping[str, Any]], TargetKey | None],
                     wake_others: bool = False) -> EnqueueRequestsFromMapFunc:
        def mapped(obj: Mapping[str, Any]) -> list[Request]:
            target = target_of(obj)
            if target is None:
                return []
            if wake_others:  # an LLMScaler's claim changed: other kinds' claimants may take over
                bindings.wake_claimants(target, but=LLMScaler.KIND)
            return bindings.requests_of(target, LLMScaler.KIND)

        return EnqueueRequestsFromMapFunc(mapped)

    builder = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(LLMScaler.API_VERSION, LLMScaler.KIND,
              predicates=[or_(GenerationChangedPredicate(), AnnotationChangedPredicate())])
        .watches(HPA_API_VERSION, HPA_KIND, claimants_of(hpa_target), predicates=[TargetChanged(hpa_target)])
        .watches(LLMScaler.API_VERSION, LLMScaler.KIND, claimants_of(claims.target_of, wake_others=True),
                 predicates=[TargetChanged(claims.target_of)])
        .watches(ElasticScaler.API_VERSION, ElasticScaler.KIND, claimants_of(es_claims.target_of),
                 predicates=[TargetChanged(es_claims.target_of)])
        .watches_source(watches)
    )
    # spec.floorFrom: one Tidal handler over an index of the scalers naming each Tidal
    builder = builder if floors is None else floors.add_to(builder)
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    controller = builder.complete(reconciler)
    if floors is not None:  # the Tidal CRD installed after this setup: its watch is added then
        floors.wire_when_served(controller, CONTROLLER_NAME)
    bindings.set_waker(LLMScaler.KIND, lambda ns, name: controller.enqueue(Request(ns, name)))
    return controller

