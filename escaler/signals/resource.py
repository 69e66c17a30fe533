"""Resource metrics (metrics.k8s.io): CPU or memory of the target's pods, HPA semantics.

``ResourceCollector.collect(namespace, source, target)`` reads

1. the target's pods: ``target.selector`` through the ``pod_lister`` (an informer-cache lookup,
   when the manager provides one and it answers) or a paged pod list through ``DynamicClient``;
   an empty selector is refused (it would select every pod of the namespace);
2. their usage: ``GET /apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector=...``;

and computes, over the pods that are *counted* — not being deleted, not ``Failed``/``Succeeded``,
and present in the metrics answer with a usage for the resource on every container:

* ``Utilization`` → ``100 * sum(usage) / sum(requests)`` (percent of requests, like the HPA). A request
  is the pod-level ``spec.resources.requests`` when set, else the sum over its containers
  (and restartable init containers, i.e. sidecars). A counted pod whose containers do not all
  request the resource makes the sample an error naming those pods, as the HPA refuses to compute
  utilization then;
* ``AverageValue`` → ``sum(usage) / number of counted pods`` in base units (cores, bytes).

Pods without metrics yet (just started) are left out, not counted as zero. No counted pod at all
is an error ("no cpu metrics for any of the N pods ..."), so is no pod at all. The pure part is
``resource_sample(resource, target_type, pods, pod_metrics)``; ``PodUsage`` carries one read so
the cpu and memory metrics of one scaler share it (``collect(..., memo=...)``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from escaler.api.quantity import parse_quantity
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.dynamic import DynamicClient
from escaler.kube.rest import RestClient
from escaler.signals.metricsapi import RESOURCE_METRICS_API, get_items
from escaler.signals.sample import PodTarget, Sample

__all__ = ["POD_LIST_PAGE", "PodLister", "PodUsage", "ResourceCollector", "resource_sample"]

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
                memo: dict[str, PodUsage | Sample] | None = None) -> Sample:
        """The value of one Resource metric; ``memo`` shares the read between metrics of one sync."""
        key = f"{namespace}\x00{target.selector}"
        usage = memo.get(key) if memo is not None else None
        if usage is None:
            usage = self.read(namespace, target)
            if memo is not None:
                memo[key] = usage
        if isinstance(usage, Sample):
            return usage
        return resource_sample(resource, target_type, usage.pods, usage.metrics,
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


def _pod_usage(item: _Obj, resource: str) -> float | None:
    """Sum of the containers' usage of the resource; None when a container lacks it (the pod is skipped)."""
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


def resource_sample(resource: str, target_type: str, pods: Sequence[_Obj], pod_metrics: Sequence[_Obj],
                    *, where: str = "the target") -> Sample:
    """Utilization (percent of requests) or AverageValue (per pod) over counted pods; pure."""
    if target_type not in ("Utilization", "AverageValue"):
        return Sample.fail(f"Resource metric {resource}: target type {target_type!r} is not supported "
                           "(use Utilization or AverageValue)")
    live = {str(_dict(p.get("metadata")).get("name")): p for p in pods if _counted(p)}
    if not live:
        return Sample.fail(f"no running pods match {where}")
    usage: dict[str, float] = {}
    try:
        for item in pod_metrics:
            name = str(_dict(item.get("metadata")).get("name"))
            if name in live:
                value = _pod_usage(item, resource)
                if value is not None:
                    usage[name] = value
    except ValueError as err:
        return Sample.fail(f"metrics.k8s.io: {resource} usage of a pod of {where}: {err}")
    if not usage:
        return Sample.fail(f"metrics.k8s.io: no {resource} metrics for any of the {len(live)} pods "
                           f"of {where}")
    total_usage = sum(usage.values())
    if target_type == "AverageValue":
        return Sample.of(total_usage / len(usage), f"average {resource} usage of {where}")
    requests: dict[str, float] = {}
    missing: list[str] = []
    try:
        for name in usage:
            req = _pod_request(live[name], resource)
            if req is None:
                missing.append(name)
            else:
                requests[name] = req
    except ValueError as err:
        return Sample.fail(f"{resource} request of a pod of {where}: {err}")
    if missing:
        return Sample.fail(f"{resource} utilization is measured against requests, but pods {_names(missing)} "
                           f"of {where} do not request {resource} on every container: set "
                           f"resources.requests.{resource}, or use an AverageValue target")
    total_requests = sum(requests.values())
    if total_requests <= 0:
        return Sample.fail(f"the pods of {where} request no {resource} (sum of requests is 0)")
    return Sample.of(100.0 * total_usage / total_requests, f"{resource} utilization of {where}")
