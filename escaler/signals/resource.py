"""Resource metrics (metrics.k8s.io): CPU or memory of the target's pods, with the HPA's rules.

``ResourceCollector.collect(namespace, resource, target_type, target, memo, now=...)`` reads

1. the target's pods: ``target.selector`` through the ``pod_lister`` (an informer-cache lookup,
   when the manager provides one and it answers) or a paged pod list through ``DynamicClient``;
   an empty selector is refused (it would select every pod of the namespace);
2. their usage: ``GET /apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector=...``;

and groups the pods as the HPA's replica calculator does (``pkg/controller/podautoscaler``,
``groupPods``; ``now`` is wall-clock epoch seconds, because the pods' times are):

* **ignored**: pods being deleted, ``Failed`` or ``Succeeded``;
* **unready**: ``Pending`` pods; and, for ``cpu`` only, pods whose readiness says their usage is not
  yet representative: no ``Ready`` condition or no ``startTime``; within
  ``CPU_INITIALIZATION_PERIOD_SECONDS`` (the HPA's ``--horizontal-pod-autoscaler-cpu-initialization-period``,
  5 min) of ``startTime``, a pod not ``Ready`` or whose metric sample was taken less than one metric
  ``window`` after its last readiness transition; after it, a pod not ``Ready`` that has never been
  ready (its ``Ready`` condition last changed within ``INITIAL_READINESS_DELAY_SECONDS``, the HPA's
  ``--horizontal-pod-autoscaler-initial-readiness-delay``, 30 s, of ``startTime``);
* **missing**: other pods without a usage for the resource on every container (not scraped yet);
* **ready**: the rest.

The sample's value is computed over the **ready** pods only — ``Utilization`` →
``100 * sum(usage) / sum(requests)``, ``AverageValue`` → ``sum(usage) / count`` (cores, bytes) — and
that is the value ``status.currentMetrics`` shows, as the HPA's status does. The groups travel with
it (``Sample.pods``, a ``PodCounts``: per group the count and the sum of the weights — requests for
``Utilization``, 1 per pod for ``AverageValue``) so that the algorithm applies the HPA's rule for
missing and unready pods (``escaler.scaling.apa.pod_replicas``) instead of multiplying by
``spec.replicas``: two pods at 140 % of a 70 % target plus two ``Pending`` ones give 4, not 8.

A request is the pod-level ``spec.resources.requests`` when set, else the sum over its containers
(and restartable init containers, i.e. sidecars); for ``Utilization`` every grouped pod must request
the resource on every container, or the sample is an error naming the pods (the HPA refuses too).
No ready pod with a metric is an error saying how many pods were unready or missing; so is no pod.

The pure parts are ``resource_sample(resource, target_type, pods, pod_metrics, now=...)`` and
``resource_replicas(...)``, the HPA's count and the reported value for one read (``tolerance``,
``current_replicas``). ``PodUsage`` carries one read so the cpu and memory metrics of one scaler
share it (``collect(..., memo=...)``).
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from escaler.api.quantity import parse_quantity
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.dynamic import DynamicClient
from escaler.kube.rest import RestClient
from escaler.kube.timestamps import epoch_seconds
from escaler.scaling.algorithm import MetricValue, PodCounts
from escaler.scaling.apa import recommend_metric
from escaler.signals.metricsapi import RESOURCE_METRICS_API, get_items
from escaler.signals.sample import PodTarget, Sample

__all__ = [
    "CPU_INITIALIZATION_PERIOD_SECONDS",
    "INITIAL_READINESS_DELAY_SECONDS",
    "POD_LIST_PAGE",
    "PodLister",
    "PodUsage",
    "ResourceCollector",
    "resource_replicas",
    "resource_sample",
]

# the HPA's --horizontal-pod-autoscaler-cpu-initialization-period default: a cpu pod this young is
# judged by its readiness and the freshness of its sample
CPU_INITIALIZATION_PERIOD_SECONDS = 300.0
# the HPA's --horizontal-pod-autoscaler-initial-readiness-delay default: an older cpu pod that is not
# Ready counts as unready only if it has never been ready (its last transition was this close to start)
INITIAL_READINESS_DELAY_SECONDS = 30.0
# pods per page when listing through the API
POD_LIST_PAGE = 500
# pod names quoted in one error message, at most
_MAX_NAMED_PODS = 5

# An informer-cache lookup: (namespace, label selector) -> the matching pods, or None when the cache
# cannot answer (the collector then lists through the API).
PodLister = Callable[[str, str], Sequence[Mapping[str, Any]] | None]

_Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodUsage:
    """One read of a target's pods and their metrics."""

    # the pods the selector matched
    pods: tuple[_Obj, ...]
    # the metrics API's PodMetrics items for that selector
    metrics: tuple[_Obj, ...]


def _dict(value: object) -> _Obj:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[_Obj]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:_MAX_NAMED_PODS])
    more = len(names) - _MAX_NAMED_PODS
    return shown + (f" and {more} more" if more > 0 else "")


class ResourceCollector:
    """Reads Resource metrics of a target's pods; thread-safe (no mutable state)."""

    def __init__(self, rest: RestClient, dynamic: DynamicClient, *,
                 pod_lister: PodLister | None = None) -> None:
        # GETs the metrics API
        self._rest = rest
        # lists pods when the cache cannot
        self._dynamic = dynamic
        # optional informer-cache pod lookup
        self._pod_lister = pod_lister

    def read(self, namespace: str, target: PodTarget) -> PodUsage | Sample:
        """The target's pods and their metrics, or an error sample."""
        where = f"{target.kind} {namespace}/{target.name}"
        if not target.selector:
            return Sample.fail(f"{where} reports no pod selector, so its pods cannot be found")
        try:
            pods = self._pods(namespace, target.selector)
        except (StatusError, ConnectionFailure) as err:
            return Sample.fail(f"listing the pods of {where} ({target.selector}): {err}")
        path = f"{RESOURCE_METRICS_API}/namespaces/{quote(namespace, safe='')}/pods"
        items = get_items(self._rest, path, [("labelSelector", target.selector)], "metrics.k8s.io")
        if isinstance(items, Sample):
            return items
        return PodUsage(tuple(pods), tuple(items))

    def collect(self, namespace: str, resource: str, target_type: str, target: PodTarget,
                memo: dict[str, PodUsage | Sample] | None = None, *, now: float) -> Sample:
        """The value of one Resource metric at wall-clock ``now``; ``memo`` shares the read between
        metrics of one sync."""
        key = f"{namespace}\x00{target.selector}"
        usage = memo.get(key) if memo is not None else None
        if usage is None:
            usage = self.read(namespace, target)
            if memo is not None:
                memo[key] = usage
        if isinstance(usage, Sample):
            return usage
        return resource_sample(resource, target_type, usage.pods, usage.metrics, now=now,
                               where=f"{target.kind} {namespace}/{target.name} ({target.selector})")

    def _pods(self, namespace: str, selector: str) -> builtins.list[_Obj]:
        if self._pod_lister is not None:
            cached = self._pod_lister(namespace, selector)
            if cached is not None:
                return builtins.list(cached)
        pods: builtins.list[_Obj] = []
        token: str | None = None
        while True:
            page = self._dynamic.list(("v1", "Pod"), namespace, label_selector=selector,
                                      limit=POD_LIST_PAGE, continue_=token)
            pods.extend(_list(page.get("items")))
            token = _dict(page.get("metadata")).get("continue") or None
            if not token:
                return pods


def _counted(pod: _Obj) -> bool:
    md, status = _dict(pod.get("metadata")), _dict(pod.get("status"))
    return not md.get("deletionTimestamp") and status.get("phase") not in ("Failed", "Succeeded")


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(value: object) -> float | None:
    """A Go duration (``30s``, ``1m0.5s``, the PodMetrics ``window``) in seconds; None when unparsable."""
    if not isinstance(value, str) or not value:
        return None
    parts = _DURATION_PART.findall(value)
    if "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _ready_condition(pod: _Obj) -> _Obj | None:
    for cond in _list(_dict(pod.get("status")).get("conditions")):
        if cond.get("type") == "Ready":
            return cond
    return None


def _cpu_unready(pod: _Obj, item: _Obj, now: float) -> bool:
    """The HPA's test of whether a cpu sample of a Running pod is not representative yet."""
    cond = _ready_condition(pod)
    start = epoch_seconds(_dict(pod.get("status")).get("startTime"))
    if cond is None or start is None:
        return True
    not_ready = cond.get("status") == "False"
    # an absent lastTransitionTime reads as the beginning of time, as Go's zero time.Time does
    transition = epoch_seconds(cond.get("lastTransitionTime"))
    if start + CPU_INITIALIZATION_PERIOD_SECONDS > now:
        if not_ready:
            return True
        sampled, window = epoch_seconds(item.get("timestamp")), _duration(item.get("window"))
        # a sample without a timestamp cannot be shown stale; one within a window of the
        # transition may still average in the not-ready time
        return sampled is not None and transition is not None and sampled < transition + (window or 0.0)
    return not_ready and (transition is None or start + INITIAL_READINESS_DELAY_SECONDS > transition)


def _pod_usage(item: _Obj, resource: str) -> float | None:
    """Sum of the containers' usage of the resource; None when a container lacks it (the pod is missing)."""
    containers = _list(item.get("containers"))
    if not containers:
        return None
    total = 0.0
    for c in containers:
        q = _dict(c.get("usage")).get(resource)
        if q is None:
            return None
        total += parse_quantity(q)
    return total


def _pod_request(pod: _Obj, resource: str) -> float | None:
    """The pod's request for the resource; None when some container does not request it."""
    spec = _dict(pod.get("spec"))
    pod_level = _dict(_dict(spec.get("resources")).get("requests")).get(resource)
    if pod_level is not None:
        return parse_quantity(pod_level)
    containers = _list(spec.get("containers")) + [
        c for c in _list(spec.get("initContainers")) if c.get("restartPolicy") == "Always"]
    if not containers:
        return None
    total = 0.0
    for c in containers:
        q = _dict(_dict(c.get("resources")).get("requests")).get(resource)
        if q is None:
            return None
        total += parse_quantity(q)
    return total


@dataclass(frozen=True)
class _Groups:
    """The counted pods by group (names), and the ready pods' usage."""

    ready: dict[str, float]
    unready: list[str]
    missing: list[str]


def _group(resource: str, live: Mapping[str, _Obj], pod_metrics: Sequence[_Obj], now: float) -> _Groups:
    items = {str(_dict(i.get("metadata")).get("name")): i for i in pod_metrics}
    groups = _Groups({}, [], [])
    for name, pod in live.items():
        item = items.get(name)
        usage = _pod_usage(item, resource) if item is not None else None
        if _dict(pod.get("status")).get("phase") == "Pending":
            groups.unready.append(name)
        elif item is None or usage is None:
            groups.missing.append(name)
        elif resource == "cpu" and _cpu_unready(pod, item, now):
            groups.unready.append(name)
        else:
            groups.ready[name] = usage
    return groups


def _weights(resource: str, target_type: str, live: Mapping[str, _Obj], names: Sequence[str],
             where: str) -> dict[str, float] | Sample:
    """Each pod's weight (its request for Utilization, 1 for AverageValue), or an error sample."""
    if target_type == "AverageValue":
        return dict.fromkeys(names, 1.0)
    weights: dict[str, float] = {}
    lacking: list[str] = []
    try:
        for name in names:
            req = _pod_request(live[name], resource)
            if req is None:
                lacking.append(name)
            else:
                weights[name] = req
    except ValueError as err:
        return Sample.fail(f"{resource} request of a pod of {where}: {err}")
    if lacking:
        return Sample.fail(f"{resource} utilization is measured against requests, but pods {_names(lacking)} "
                           f"of {where} do not request {resource} on every container: set "
                           f"resources.requests.{resource}, or use an AverageValue target")
    return weights


def resource_sample(resource: str, target_type: str, pods: Sequence[_Obj], pod_metrics: Sequence[_Obj],
                    *, now: float, where: str = "the target") -> Sample:
    """Utilization (percent of requests) or AverageValue (per pod) over the ready pods, with the
    pod groups (``Sample.pods``); see the module docstring. Pure."""
    if target_type not in ("Utilization", "AverageValue"):
        return Sample.fail(f"Resource metric {resource}: target type {target_type!r} is not supported "
                           "(use Utilization or AverageValue)")
    live = {str(_dict(p.get("metadata")).get("name")): p for p in pods if _counted(p)}
    if not live:
        return Sample.fail(f"no running pods match {where}")
    try:
        groups = _group(resource, live, pod_metrics, now)
    except ValueError as err:
        return Sample.fail(f"metrics.k8s.io: {resource} usage of a pod of {where}: {err}")
    if not groups.ready:
        return Sample.fail(f"metrics.k8s.io: no {resource} metrics for any ready pod of the {len(live)} pods "
                           f"of {where} ({len(groups.unready)} unready, {len(groups.missing)} without "
                           "metrics yet)")
    weights = _weights(resource, target_type, live, [*groups.ready, *groups.unready, *groups.missing], where)
    if isinstance(weights, Sample):
        return weights
    ready_weight = math.fsum(weights[n] for n in groups.ready)
    if ready_weight <= 0:
        return Sample.fail(f"the pods of {where} request no {resource} (sum of requests is 0)")
    counts = PodCounts(
        ready=len(groups.ready), ready_weight=ready_weight,
        unready=len(groups.unready), unready_weight=math.fsum(weights[n] for n in groups.unready),
        missing=len(groups.missing), missing_weight=math.fsum(weights[n] for n in groups.missing))
    value = math.fsum(groups.ready.values()) / ready_weight
    if target_type == "AverageValue":
        return Sample.of(value, f"average {resource} usage of {where}", pods=counts)
    return Sample.of(100.0 * value, f"{resource} utilization of {where}", pods=counts)


def resource_replicas(resource: str, target_type: str, target_value: float, pods: Sequence[_Obj],
                      pod_metrics: Sequence[_Obj], *, tolerance: float, now: float, current_replicas: int,
                      where: str = "the target") -> tuple[int, float]:
    """The HPA's replica count for one read of a Resource metric, and the value to report (over the
    ready pods). ``ValueError`` with the sample's error when the read gives no value. Pure."""
    sample = resource_sample(resource, target_type, pods, pod_metrics, now=now, where=where)
    if sample.value is None:
        raise ValueError(sample.error)
    metric = MetricValue(name=resource, type="Resource", value=sample.value, target_type=target_type,
                         target_value=target_value, pods=sample.pods)
    return recommend_metric(current_replicas, metric, tolerance), sample.value
