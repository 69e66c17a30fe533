"""``setup_slo(mgr, ...)``: the SLO decision engine wired onto a manager (docs/slo.md).

What it registers, on the manager that runs every other escaler controller (same leader election,
same write fence, same sharding):

* one controller per SLO kind, named ``llmslorequirement`` and ``jobslorequirement``, each with:

  - ``for_`` its kind, passing creates, deletes and updates that change ``metadata.generation``
    (the reconciler's own status writes do not retrigger it; it requeues itself at its poll);
  - ``watches`` both kinds, mapping a requirement whose ``serviceId`` appears, changes or goes to
    the requirements of this kind with the same serviceId (before and after the change), so a
    ``ServiceIdConflict`` is raised and cleared at once — through an index on ``spec.serviceId``
    (``SERVICE_ID_INDEX``), never a handler per requirement;
  - ``watches_source`` its ``WatchIndex`` (the targets' dynamic informers: a replica write wakes the
    requirements sizing that target) and its outbound executor (a finished signal read wakes the
    requirement);
* one ``DecisionBook`` shared by both kinds, keyed by ``(namespace, serviceId)``, its lookup
  ``Decisions`` (``SLOEngine.decisions``), and the decisions route on the manager's API server
  (``mgr.api_server``) when there is one.

**The route is authenticated** (docs/slo.md, issue 27 item 5): ``GET
/decisions/v1/namespaces/{namespace}/{serviceId}`` needs a bearer token for the ``escaler`` audience
and ``get`` on the requirement defining the route; a denied route is the same 404 as a missing one
(``escaler.reconcilers.slo.decisions``). The unscoped ``GET /decisions/{serviceId}`` of 0.1 answers 410
naming the new route. An LLMScaler of the same manager does not use HTTP at all: its
``customProvider.serviceId`` reads ``SLOEngine.decisions`` in-process, in its own namespace only
(``escaler.cli.manager`` wires it).

**Signals.** SLO requirements name PromQL, not a server: the platform's Prometheus is
``prometheus_endpoint`` (``--slo-prometheus-endpoint``, a base URL; validated here: a bad one is a
``ValueError`` naming the flag). Without it, every requirement with an objective reports
``Ready=False/SignalsMissing`` saying the flag is unset. Reads use the manager's outbound policy
(``allowed_hosts`` = ``--allowed-endpoint-hosts``, ``allow_networks`` =
``--allow-endpoint-networks``) on a ``KeyedExecutor`` per kind (``slo_outbound``:
``outbound_workers`` threads, the manager's ``--outbound-workers``, and of those at most
``SLO_OUTBOUND_PER_NAMESPACE`` for one namespace: a tenant's expensive PromQL holds two threads for
a query's deadline, and it takes ``outbound_workers / 2`` such tenants at once — 8 by default, not 2
— to delay another's), each query with a total deadline of ``QUERY_TIMEOUT_SECONDS`` and a body cap
of ``MAX_RESPONSE_BYTES``. ``poll_interval`` (``--metrics-trigger-poll-interval``) is how often each
requirement's signals are read; 0 (polling off for ElasticScalers) falls back to
``DEFAULT_POLL_INTERVAL_SECONDS`` here, because an SLO decision has no other input that moves.

Tests inject ``client``, ``handlers`` (per kind: a callable from the kind's ``WatchIndex``),
``outbound`` (a callable from the kind's name), ``query`` and ``clock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.clock import Clock
from escaler.informers.factory import ResourceKey
from escaler.kube.scalepaths import CrdScalePaths
from escaler.reconcilers.kit.managerclient import LazyManagerClient
from escaler.reconcilers.kit.ports import HandlerLookup
from escaler.reconcilers.kit.setup import DEFAULT_POLL_INTERVAL_SECONDS, cache_reader
from escaler.reconcilers.kit.status import StatusClient
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.slo.decisions import (
    DECISIONS_ROUTE,
    LEGACY_DECISIONS_ROUTE,
    SERVICE_ID_INDEX,
    DecisionBook,
    Decisions,
    DecisionsAPI,
    KindResource,
    Owner,
    gone,
    service_id_index,
)
from escaler.reconcilers.slo.kinds import KINDS, SLOKind, service_id_of
from escaler.reconcilers.slo.readings import QUERY_TIMEOUT_SECONDS, Query, SignalReader
from escaler.reconcilers.slo.reconciler import SLODeps, SLOReconciler
from escaler.reconcilers.slo.target import TargetCounts
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.executor import DEFAULT_OUTBOUND_WORKERS, ExecutorSource, KeyedExecutor, executor_metrics
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import GenerationChangedPredicate
from escaler.runtime.types import Request
from escaler.scaling.endpoints import check_endpoint_url, host_allowed
from escaler.signals.fetch import HttpClient, redact_url
from escaler.signals.netpolicy import AddressPolicy, IPNetwork
from escaler.signals.prometheus import query_prometheus
from escaler.signals.promqlscope import DEFAULT_SCOPE, PromQLScope
from escaler.signals.sample import Sample
from escaler.targets.registry import default_registry

__all__ = ["MAX_RESPONSE_BYTES", "NO_PROMETHEUS", "SLO_OUTBOUND_PER_NAMESPACE", "SLOController", "SLOEngine",
           "setup_slo", "slo_outbound"]

# of the threads reading one kind's SLO signals, at most this many for one namespace at once
SLO_OUTBOUND_PER_NAMESPACE = 2
# largest Prometheus answer read (one sample: a few hundred bytes)
MAX_RESPONSE_BYTES = 1 << 20
NO_PROMETHEUS = ("no Prometheus to query: start the manager with --slo-prometheus-endpoint "
                 "(the base URL of the Prometheus holding the SLO metrics)")

_log = logging.getLogger(__name__)


@dataclass
class SLOController:
    """One kind's controller (handles for tests and embedding)."""

    kind: SLOKind
    controller: Controller
    reconciler: SLOReconciler
    watches: WatchIndex
    outbound: ExecutorSource
    # the kind's informer (indexed by SERVICE_ID_INDEX)
    informer: Any


@dataclass
class SLOEngine:
    """What ``setup_slo`` built."""

    # kind name → its controller
    controllers: dict[str, SLOController]
    book: DecisionBook
    # the lookup by (namespace, serviceId): the route's, and in-process readers' (an LLMScaler's)
    decisions: Decisions
    # None when the manager has no API server
    api: DecisionsAPI | None



def _prometheus_query(endpoint: str, allowed_hosts: Sequence[str], allow_networks: Sequence[IPNetwork],
                      clock: Clock) -> Query:
    if endpoint:
        try:
            check_endpoint_url(endpoint, base=True)
        except ValueError as err:
            raise ValueError(f"--slo-prometheus-endpoint {redact_url(endpoint)!r}: {err}") from None
    http = HttpClient(AddressPolicy(allow_networks))
    allowed = tuple(allowed_hosts)

    def run(promql: str) -> Sample:
        if not endpoint:
            return Sample.fail(NO_PROMETHEUS)
        return query_prometheus(http, endpoint, promql, QUERY_TIMEOUT_SECONDS,
                                allowed=lambda host: host_allowed(host, allowed),
                                max_bytes=MAX_RESPONSE_BYTES, clock=clock)

    return run


class _ServiceIdChanged:
    """Pass creates and deletes, and updates that change ``spec.serviceId``."""

    def create(self, obj: Mapping[str, Any]) -> bool:
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return service_id_of(old) != service_id_of(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return True

    def generic(self, obj: Mapping[str, Any]) -> bool:
        return True


def _sharers(indexer: Any) -> Callable[[Mapping[str, Any]], list[Request]]:
    """A map function: an object → this kind's requirements with the same serviceId in its namespace."""

    def fn(obj: Mapping[str, Any]) -> list[Request]:
        keys = service_id_index(obj)
        return [Request(str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"]))
                for key in keys for o in indexer.by_index(SERVICE_ID_INDEX, key)]

    return fn


def _informer(mgr: Manager, kind: SLOKind) -> Any:
    m = mgr.mapper.mapping_for(kind.api_version, kind.kind)
    informer = mgr.informers.informer_for(ResourceKey(
        m.group, m.version, m.resource, namespace=mgr.options.namespace if m.namespaced else ""))
    informer.add_indexers({SERVICE_ID_INDEX: service_id_index})
    return informer


def _handlers(mgr: Manager, watches: WatchIndex) -> HandlerLookup:
    dynamic: Any = LazyManagerClient(mgr)
    return default_registry(dynamic, cache_get=cache_reader(mgr.mapper, watches),
                            scale_paths=CrdScalePaths(dynamic, clock=mgr.clock))


def _shard_problem(mgr: Manager) -> Callable[[Owner], str | None] | None:
    shards = mgr.shards
    if shards is None:
        return None

    def problem(owner: Owner) -> str | None:
        shard = shards.shard_of(owner.namespace, owner.name)
        if shards.leads(shard):
            return None
        lease = f"{mgr.options.leader_election_id}-shard-{shard}"
        return (f"{owner.describe()}: shard {shard} of {shards.total} is not led by this replica; retry on "
                f"the holder of Lease {lease}")

    return problem


def slo_outbound(mgr: Manager, controller: str, workers: int = DEFAULT_OUTBOUND_WORKERS) -> KeyedExecutor:
    """The executor that reads one SLO kind's signals (module docstring)."""
    return KeyedExecutor(f"{controller}-outbound", workers=workers, per_group=SLO_OUTBOUND_PER_NAMESPACE,
                         clock=mgr.clock, metrics=executor_metrics(mgr.metrics.registry))


def setup_slo(
    mgr: Manager,
    *,
    prometheus_endpoint: str = "",
    poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS,
    allowed_hosts: Sequence[str] = (),
    allow_networks: Sequence[IPNetwork] = (),
    max_concurrent_reconciles: int | None = None,
    client: StatusClient | None = None,
    handlers: Callable[[WatchIndex], HandlerLookup] | None = None,
    outbound: Callable[[str], ExecutorSource] | None = None,
    query: Query | None = None,
    clock: Clock | None = None,
    api_server: Any = None,
    outbound_workers: int = DEFAULT_OUTBOUND_WORKERS,
    promql_scope: PromQLScope | None = DEFAULT_SCOPE,
) -> SLOEngine:
    """Register the SLO decision engine on ``mgr``; see the module docstring."""
    clock = clock if clock is not None else mgr.clock
    query = query if query is not None else _prometheus_query(prometheus_endpoint, allowed_hosts,
                                                              allow_networks, clock)
    interval = poll_interval if poll_interval > 0 else DEFAULT_POLL_INTERVAL_SECONDS
    book = DecisionBook()
    informers = {k.kind: _informer(mgr, k) for k in KINDS}
    for k in KINDS:
        book.add_kind(k.kind, informers[k.kind].indexer)
    controllers: dict[str, SLOController] = {}
    for k in KINDS:
        executor = (outbound(k.controller_name) if outbound is not None
                    else slo_outbound(mgr, k.controller_name, outbound_workers))
        watches = WatchIndex(mgr.dynamic_informers)
        reconciler = SLOReconciler(SLODeps(
            kind=k, store=informers[k.kind].store,
            client=client if client is not None else LazyManagerClient(mgr),
            mapping=mgr.mapper.mapping_for(k.api_version, k.kind),
            targets=TargetCounts(
                mgr.mapper, handlers(watches) if handlers is not None else _handlers(mgr, watches), watches),
            reader=SignalReader(executor, query, interval, k.kind), book=book, clock=clock,
            promql_scope=promql_scope, prometheus_endpoint=prometheus_endpoint))
        controller = _controller(mgr, k, informers[k.kind], reconciler, watches, max_concurrent_reconciles)
        controller.watch(executor)
        controllers[k.kind] = SLOController(k, controller, reconciler, watches, executor, informers[k.kind])
    decisions = Decisions(book, _shard_problem(mgr))
    api = _decisions_api(mgr, decisions, api_server)
    _log.info("SLO decision engine set up (poll interval %gs, Prometheus %s, %s)", interval,
              redact_url(prometheus_endpoint) if prometheus_endpoint else "not configured",
              "decisions API on" if api is not None else "no decisions API")
    return SLOEngine(controllers, book, decisions, api)


def _controller(mgr: Manager, k: SLOKind, informer: Any, reconciler: SLOReconciler, watches: WatchIndex,
                max_concurrent_reconciles: int | None) -> Controller:
    builder = (ControllerBuilder(mgr).named(k.controller_name)
               .for_(k.api_version, k.kind, predicates=[GenerationChangedPredicate()]))
    for other in KINDS:
        builder = builder.watches(other.api_version, other.kind, EnqueueRequestsFromMapFunc(
            _sharers(informer.indexer)), predicates=[_ServiceIdChanged()])
    builder = builder.watches_source(watches)
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    return builder.complete(reconciler)


def _decisions_api(mgr: Manager, decisions: Decisions, api_server: Any) -> DecisionsAPI | None:
    server = api_server if api_server is not None else getattr(mgr, "api_server", None)
    if server is None:
        return None
    resources = {}
    for k in KINDS:
        m = mgr.mapper.mapping_for(k.api_version, k.kind)
        resources[k.kind] = KindResource(m.group, m.resource)
    api = DecisionsAPI(decisions, resources, auth=getattr(server, "auth", None))
    # authenticated by the server's filter; authorized per requirement by the handler (denied == 404)
    server.add_route("GET", DECISIONS_ROUTE, api.handle)
    server.add_route("GET", LEGACY_DECISIONS_ROUTE, gone, public=True)
    return api
