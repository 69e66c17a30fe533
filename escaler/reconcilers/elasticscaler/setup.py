"""``setup_elasticscaler(mgr, ...)``: the ElasticScaler controller wired onto a manager.

What it registers:

* the controller (``ControllerBuilder``), named ``elasticscaler``:

  - ``for_`` ElasticScaler, passing creates, deletes and updates that change
    ``metadata.generation`` or the annotations (status-only writes do not retrigger: the
    reconciler writes status itself, and every status write would otherwise loop);
  - ``owns`` autoscaling/v2 HorizontalPodAutoscaler (the companion HPA's status changes wake its
    scaler, which mirrors it, and a hand edit is reverted);
  - ``watches`` HPAs with a mapping to the scalers that claim the HPA's ``scaleTargetRef`` (a
    foreign HPA appearing or going away), and ElasticScalers with a mapping to the *other*
    claimants of the same target (when the winner of a conflict goes, the next one takes over);
* the targets and the StateTrigger sources are watched per scaler on dynamic informers
  (``ScalerWatches``), released when the scaler goes or changes;
* the ``MetricsPoller`` (leader-only runnable) when ``poll_interval > 0``;
* the SignalTrigger push route on the manager's API server (``mgr.api_server``), when there is
  one: ``POST /signal/v1/namespaces/{namespace}/elasticscalers/{name}``, authorized as
  ``update`` on ``elasticscalers/signal``.

Every collaborator the reconciler talks to can be injected (tests, embedding): ``client``
(writes), ``handlers`` (``HandlerRegistry``), ``collector`` (``MetricsCollector``),
``signal_puller``; by default they are built on the manager's client and REST connection.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import requests

from escaler.api.elasticscaler import HPA_ALGORITHM, ElasticScaler, TriggerType
from escaler.informers.factory import ResourceKey
from escaler.kube.dynamic import DynamicClient
from escaler.reconcilers.bindings import TargetBindings, bindings_for, hpa_target
from escaler.reconcilers.elasticscaler.hpa import HPA_API_VERSION, HPA_KIND
from escaler.reconcilers.elasticscaler.poller import MetricsPoller
from escaler.reconcilers.elasticscaler.reconciler import (
    Collector,
    ElasticScalerReconciler,
    HandlerLookup,
    KubeWriter,
    target_of,
)
from escaler.reconcilers.elasticscaler.signal import SIGNAL_ROUTE, SignalAPI, SignalStore
from escaler.reconcilers.elasticscaler.watches import ScalerWatches
from escaler.reconcilers.scalermetrics import scaler_metrics_for
from escaler.runtime.authn import ResourceAttributes
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.manager import Manager
from escaler.runtime.predicates import AnnotationChangedPredicate, GenerationChangedPredicate, or_
from escaler.runtime.types import Request
from escaler.scaling.endpoints import host_allowed
from escaler.signals.collector import MetricsCollector
from escaler.signals.signal_pull import SignalReading, pull_signal
from escaler.targets.registry import default_registry

__all__ = ["CONTROLLER_NAME", "ElasticScalerController", "setup_elasticscaler"]

CONTROLLER_NAME = "elasticscaler"
DEFAULT_POLL_INTERVAL_SECONDS = 30.0

_log = logging.getLogger(__name__)


@dataclass
class ElasticScalerController:
    """What ``setup_elasticscaler`` built (handles for tests and embedding)."""

    controller: Controller
    reconciler: ElasticScalerReconciler
    # None when polling is off
    poller: MetricsPoller | None
    signals: SignalStore
    watches: ScalerWatches
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


def setup_elasticscaler(
    mgr: Manager,
    *,
    poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS,
    allowed_hosts: Sequence[str] = (),
    max_concurrent_reconciles: int | None = None,
    client: KubeWriter | None = None,
    handlers: HandlerLookup | None = None,
    collector: Collector | None = None,
    signal_puller: Callable[[str, float], SignalReading] | None = None,
    api_server: Any = None,
    poll_tick: float | None = None,
) -> ElasticScalerController:
    """Register the ElasticScaler controller on ``mgr``; see the module docstring."""
    ns = mgr.options.namespace
    es_map = mgr.mapper.mapping_for(ElasticScaler.API_VERSION, ElasticScaler.KIND)
    hpa_map = mgr.mapper.mapping_for(HPA_API_VERSION, HPA_KIND)
    # the same keys the builder resolves, so these are the controller's own (shared) informers
    scaler_informer = mgr.informers.informer_for(
        ResourceKey(es_map.group, es_map.version, es_map.resource, namespace=ns if es_map.namespaced else ""))
    hpa_informer = mgr.informers.informer_for(
        ResourceKey(hpa_map.group, hpa_map.version, hpa_map.resource, namespace=ns))
    bindings = bindings_for(mgr)
    bindings.add_source(ElasticScaler.KIND, scaler_informer, target_of)
    bindings.set_hpa_informer(hpa_informer)

    dynamic = _manager_client(mgr)
    writer: KubeWriter = client if client is not None else (dynamic if dynamic is not None else _NoClient())
    metrics = scaler_metrics_for(mgr.metrics.registry)
    signals = SignalStore()
    allowed = tuple(allowed_hosts)

    def allowed_host(host: str) -> bool:
        return host_allowed(host, allowed)

    if collector is None and mgr.rest is not None and dynamic is not None:
        collector = MetricsCollector(mgr.rest, dynamic, clock=mgr.clock, allowed=allowed_host,
                                     secret_reader=secret_key_reader(dynamic))
    if signal_puller is None and mgr.rest is not None:
        session = requests.Session()

        def signal_puller(endpoint: str, timeout: float) -> SignalReading:
            return pull_signal(session, endpoint, timeout=timeout, allowed=allowed_host, clock=mgr.clock)

    # late-bound: the watches enqueue on the controller's queue, which exists after complete()
    queue_ref: list[Controller] = []

    def enqueue(req: Request) -> None:
        if queue_ref:
            queue_ref[0].enqueue(req)

    watches = ScalerWatches(mgr.dynamic_informers, enqueue)
    reconciler = ElasticScalerReconciler(
        scalers=scaler_informer.store, hpas=hpa_informer.store, client=writer, mapper=mgr.mapper,
        handlers=handlers if handlers is not None else default_registry(
            cast(DynamicClient, dynamic if dynamic is not None else _NoClient()),
            cache_get=lambda av, k, n, name: reconciler.target_cache_get(av, k, n, name)),
        collector=collector, recorder=mgr.event_recorder, clock=mgr.clock, metrics=metrics, bindings=bindings,
        watches=watches, signals=signals, signal_puller=signal_puller, allowed_hosts=allowed,
        poll_interval=poll_interval,
        can_write=mgr.can_write, source_selector_namespace=ns,
    )

    def others_on_same_target(obj: Mapping[str, Any]) -> list[Request]:
        return [Request(c.namespace, c.name) for c in bindings.same_target(ElasticScaler.KIND, obj)
                if c.kind == ElasticScaler.KIND]

    def claimants_of_hpa_target(obj: Mapping[str, Any]) -> list[Request]:
        target = hpa_target(obj)
        if target is None:
            return []
        return [Request(c.namespace, c.name) for c in bindings.claimants(target)
                if c.kind == ElasticScaler.KIND]

    builder = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(ElasticScaler.API_VERSION, ElasticScaler.KIND,
              predicates=[or_(GenerationChangedPredicate(), AnnotationChangedPredicate())])
        .owns(HPA_API_VERSION, HPA_KIND)
        .watches(HPA_API_VERSION, HPA_KIND, EnqueueRequestsFromMapFunc(claimants_of_hpa_target),
                 predicates=[_TargetChanged(hpa_target)])
        .watches(ElasticScaler.API_VERSION, ElasticScaler.KIND,
                 EnqueueRequestsFromMapFunc(others_on_same_target), predicates=[_TargetChanged(target_of)])
    )
    if max_concurrent_reconciles is not None:
        builder = builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles)
    controller = builder.complete(reconciler)
    queue_ref.append(controller)

    poller: MetricsPoller | None = None
    if poll_interval > 0:
        def polled() -> list[Request]:
            return [Request(str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"]))
                    for o in scaler_informer.store.list() if _is_polled(o)]

        kwargs: dict[str, float] = {} if poll_tick is None else {"tick": poll_tick}
        poller = MetricsPoller(poll_interval, polled, controller.queue.add_after, mgr.clock, **kwargs)
        mgr.add(poller, needs_leader_election=True)

    server = api_server if api_server is not None else getattr(mgr, "api_server", None)
    signal_api: SignalAPI | None = None
    if server is not None:
        signal_api = SignalAPI(signals, lambda r: scaler_informer.store.get_by_key(str(r)),
                               controller.enqueue, mgr.clock)
        server.add_route("POST", SIGNAL_ROUTE, signal_api.handle, authz=ResourceAttributes(
            verb="update", group="elasticscaler.io", resource="elasticscalers", subresource="signal",
            namespace="{namespace}", name="{name}"))
    _log.info("ElasticScaler controller set up (poll interval %gs, %s)", poll_interval,
              "signal API on" if server is not None else "no signal API")
    return ElasticScalerController(controller, reconciler, poller, signals, watches, bindings, signal_api)


def _manager_client(mgr: Manager) -> DynamicClient | None:
    try:
        return mgr.client
    except RuntimeError:  # a manager built on injected fakes without a client
        return None


class _NoClient:
    """Stands in for the API client of a manager that has none: every call says so."""

    def __getattr__(self, name: str) -> Any:
        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError(f"ElasticScaler reconciler: {name}() needs an API client, and this manager "
                               "was built without one (pass client= and handlers= to setup_elasticscaler)")
        return refuse


class _TargetChanged:
    """Pass creates and deletes, and updates that change the target an object claims."""

    def __init__(self, target_fn: Callable[[Mapping[str, Any]], Any]) -> None:
        self._fn = target_fn

    def _target(self, obj: Mapping[str, Any]) -> Any:
        try:
            return self._fn(obj)
        except Exception:
            return None

    def create(self, obj: Mapping[str, Any]) -> bool:
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return bool(self._target(old) != self._target(new))

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return True

    def generic(self, obj: Mapping[str, Any]) -> bool:
        return True


def secret_key_reader(dynamic: DynamicClient) -> Callable[[str, str, str], str]:
    """Reads one key of a Secret (for ExternalServer ``bearerTokenSecretRef``) at every query, so a
    rotated token is used at the next poll; the error names the Secret and key, never the value."""

    def read(namespace: str, name: str, key: str) -> str:
        secret = dynamic.get(("v1", "Secret"), name, namespace=namespace)
        data = secret.get("data") or {}
        if key not in data:
            raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
        try:
            return base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"Secret {namespace}/{name} key {key!r} is not base64 UTF-8 text") from err

    return read
