"""``setup_rsg(mgr, bindings=...)``: the ResourceScalingGroup controller wired onto a manager.

What it registers:

* the controller (``ControllerBuilder``), named ``resourcescalinggroup``:

  - ``for_`` ResourceScalingGroup, passing creates, deletes and updates that change
    ``metadata.generation`` (a ``/scale`` write by an ElasticScaler or an HPA changes
    ``spec.replicas``, hence the generation; the reconciler's own status writes do not retrigger);
  - ``watches`` ElasticScalers and ResourceScalingGroups (creates, deletes, spec changes) with a
    mapping to the RSGs that claim the same workloads (``TargetBindings.same_target``): when another
    claimant comes or goes, the RSG re-checks its conflict at once (and every 30 s while it holds);
  - ``watches_source`` the ``WatchIndex`` of its members and clones (one handler per watched
    resource and an index from object to RSGs; clone caches are label-selected on
    ``autoscaling.openfuyao.com/rsg`` per namespace);
  - ``watches_source`` the outbound executor of ``scaleDown.prometheus`` queries (its completions
    enqueue the RSG);
* the RSG kind as a claim source of the shared ``TargetBindings`` (``claims.rsg_targets``): one
  writer per workload across ElasticScaler, LLMScaler and ResourceScalingGroup;
* ``clonecache.slim_clone`` as a transform of the manager's ``DynamicInformers``: every dynamic
  cache (the clone caches and the namespace-wide caches of member kinds) holds clones without their
  templates.

GroupReplication's bounds (``limits.ReplicationLimits``: writes per sync, clones per namespace,
bytes per clone) come from ``limits`` (the manager's flags; None = the defaults).

The ranking queries go through ``escaler.signals.fetch`` with the manager's outbound policy:
``allowed_hosts`` (``--allowed-endpoint-hosts``) and ``allow_networks``
(``--allow-endpoint-networks``, the SSRF address policy), on a ``KeyedExecutor`` of
``RANKING_WORKERS`` threads, ``RANKING_PER_NAMESPACE`` per namespace. Tests inject ``client``,
``handlers``, ``outbound`` (``InlineExecutor``), ``query`` and ``clock`` through the same keywords.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.api.elasticscaler import ElasticScaler
from escaler.api.rsg import ResourceScalingGroup
from escaler.informers.factory import ResourceKey
from escaler.kube.scalepaths import CrdScalePaths
from escaler.reconcilers.kit.bindings import TargetBindings
from escaler.reconcilers.kit.managerclient import manager_client
from escaler.reconcilers.kit.ports import HandlerLookup, KubeClient
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.rsg.backoff import WriteBackoff
from escaler.reconcilers.rsg.claims import rsg_targets
from escaler.reconcilers.rsg.clonecache import slim_clone
from escaler.reconcilers.rsg.clones import RSG_LABEL
from escaler.reconcilers.rsg.ledger import CloneLedger
from escaler.reconcilers.rsg.limits import ReplicationLimits
from escaler.reconcilers.rsg.ranking import GroupRanker, Query, query_group_loads
from escaler.reconcilers.rsg.reconciler import RSGDeps, RSGReconciler
from escaler.reconcilers.rsg.replication import clone_observer
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.executor import ExecutorSource, KeyedExecutor, executor_metrics
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import GenerationChangedPredicate
from escaler.runtime.types import Request
from escaler.scaling.endpoints import host_allowed
from escaler.signals.fetch import HttpClient
from escaler.signals.netpolicy import AddressPolicy, IPNetwork
from escaler.signals.promqlscope import DEFAULT_SCOPE, PromQLScope
from escaler.targets.registry import default_registry

__all__ = ["CONTROLLER_NAME", "RANKING_PER_NAMESPACE", "RANKING_WORKERS", "RSGController", "setup_rsg"]

CONTROLLER_NAME = "resourcescalinggroup"
RANKING_WORKERS = 4
RANKING_PER_NAMESPACE = 2

_log = logging.getLogger(__name__)


@dataclass
class RSGController:
    """What ``setup_rsg`` built (handles for tests and embedding)."""

    controller: Controller
    reconciler: RSGReconciler
    watches: WatchIndex
    outbound: ExecutorSource




def _cache_get(mgr: Manager, watches: WatchIndex) -> Callable[[str, str, str, str], Mapping[str, Any] | None]:
    """The handlers' cache lookup: a member from its watch, a clone from its namespace's clone cache."""

    def get(api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            m = mgr.mapper.mapping_for(api_version, kind)
        except Exception:  # the handler GETs and reports what is wrong
            return None
        plain = ResourceKey(m.group, m.version, m.resource, namespace=namespace)
        found = watches.cached(plain, namespace, name)
        if found is None:
            found = watches.cached(ResourceKey(m.group, m.version, m.resource, namespace=namespace,
                                               label_selector=RSG_LABEL), namespace, name)
        return found

    return get


def _query(allowed_hosts: Sequence[str], allow_networks: Sequence[IPNetwork], mgr: Manager) -> Query:
    http = HttpClient(AddressPolicy(allow_networks))
    allowed = tuple(allowed_hosts)

    def run(prom: Any) -> Mapping[int, float]:
        return query_group_loads(http, prom, allowed=lambda host: host_allowed(host, allowed),
                                 clock=mgr.clock)

    return run


def setup_rsg(
    mgr: Manager,
    *,
    bindings: TargetBindings | None = None,
    allowed_hosts: Sequence[str] = (),
    allow_networks: Sequence[IPNetwork] = (),
    max_concurrent_reconciles: int | None = None,
    client: KubeClient | None = None,
    handlers: HandlerLookup | None = None,
    outbound: ExecutorSource | None = None,
    query: Query | None = None,
    backoff: WriteBackoff | None = None,
    limits: ReplicationLimits | None = None,
    promql_scope: PromQLScope | None = DEFAULT_SCOPE,
) -> RSGController:
    """Register the ResourceScalingGroup controller on ``mgr``; see the module docstring."""
    bindings = bindings if bindings is not None else TargetBindings()
    rsg_map = mgr.mapper.mapping_for(ResourceScalingGroup.API_VERSION, ResourceScalingGroup.KIND)
    informer = mgr.informers.informer_for(ResourceKey(rsg_map.group, rsg_map.version, rsg_map.resource,
                                                     namespace=mgr.options.namespace))
    bindings.add_source(ResourceScalingGroup.KIND, informer, rsg_targets)
    # clones are cached without their templates, in every dynamic cache of their kind (clonecache)
    mgr.dynamic_informers.add_transform(slim_clone)
    limits = limits if limits is not None else ReplicationLimits()
    ledger = CloneLedger(limits.clones_per_namespace, mgr.clock)
    watches = WatchIndex(mgr.dynamic_informers, observer=clone_observer(ledger))
    writer: Any = client if client is not None else manager_client(mgr)
    if handlers is None:
        handlers = default_registry(writer, cache_get=_cache_get(mgr, watches),
                                    scale_paths=CrdScalePaths(writer, clock=mgr.clock))
    outbound = outbound if outbound is not None else KeyedExecutor(
        f"{CONTROLLER_NAME}-outbound", workers=RANKING_WORKERS, per_group=RANKING_PER_NAMESPACE,
        clock=mgr.clock, metrics=executor_metrics(mgr.metrics.registry))
    ranker = GroupRanker(outbound, query if query is not None else _query(allowed_hosts, allow_networks, mgr),
                         promql_scope)
    reconciler = RSGReconciler(RSGDeps(
        rsgs=informer.store, client=writer, mapper=mgr.mapper, handlers=handlers, recorder=mgr.event_recorder,
        clock=mgr.clock, bindings=bindings, watches=watches, ranker=ranker, can_write=mgr.can_write,
        backoff=backoff, limits=limits, ledger=ledger))
    controller = _build(mgr, reconciler, bindings, watches, max_concurrent_reconciles)
    controller.watch(outbound)
    _log.info("ResourceScalingGroup controller set up")
    return RSGController(controller, reconciler, watches, outbound)


def _build(mgr: Manager, reconciler: RSGReconciler, bindings: TargetBindings, watches: WatchIndex,
           max_concurrent_reconciles: int | None) -> Controller:
    def rsgs_sharing(kind: str) -> Callable[[Mapping[str, Any]], list[Request]]:
        def fn(obj: Mapping[str, Any]) -> list[Request]:
            return [Request(c.namespace, c.name) for c in bindings.same_target(kind, obj)
                    if c.kind == ResourceScalingGroup.KIND]
        return fn

    builder = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(ResourceScalingGroup.API_VERSION, ResourceScalingGroup.KIND,
              predicates=[GenerationChangedPredicate()])
        .watches(ElasticScaler.API_VERSION, ElasticScaler.KIND,
                 EnqueueRequestsFromMapFunc(rsgs_sharing(ElasticScaler.KIND)),
                 predicates=[GenerationChangedPredicate()])
        .watches(ResourceScalingGroup.API_VERSION, ResourceScalingGroup.KIND,
                 EnqueueRequestsFromMapFunc(rsgs_sharing(ResourceScalingGroup.KIND)),
                 predicates=[GenerationChangedPredicate()])
        .watches_source(watches)
    )
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    return builder.complete(reconciler)
