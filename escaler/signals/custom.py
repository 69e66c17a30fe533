"""Custom metrics (custom.metrics.k8s.io): a per-pod metric of the target's pods, averaged.

``CustomCollector.collect(namespace, metric, target, metric_selector="")`` sends
``GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{metric}?labelSelector=<pods>``
(plus ``metricLabelSelector=<metric_selector>`` when the metric names a selector) and returns the
**average over the pods** in the answer: the per-pod value an ``AverageValue`` target compares
against (the only target type a Custom metric allows). No item at all, an item without a
parsable ``value``, and an empty pod selector are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from escaler.api.quantity import parse_quantity
from escaler.kube.rest import Query, RestClient
from escaler.signals.metricsapi import CUSTOM_METRICS_API, get_items, path_segment
from escaler.signals.sample import PodTarget, Sample

__all__ = ["CustomCollector"]


class CustomCollector:
    """Reads per-pod custom metrics; thread-safe (no mutable state)."""

    def __init__(self, rest: RestClient) -> None:
        # GETs the custom metrics API through the API server
        self._rest = rest

    def collect(self, namespace: str, metric: str, target: PodTarget, metric_selector: str = "") -> Sample:
        where = f"{target.kind} {namespace}/{target.name}"
        if not target.selector:
            return Sample.fail(f"{where} reports no pod selector, so its pods' metrics cannot be found")
        path = (f"{CUSTOM_METRICS_API}/namespaces/{quote(namespace, safe='')}/pods/*/"
                f"{path_segment(metric)}")
        query: Query = [("labelSelector", target.selector)]
        if metric_selector:
            query.append(("metricLabelSelector", metric_selector))
        items = get_items(self._rest, path, query, "custom.metrics.k8s.io")
        if isinstance(items, Sample):
            return items
        if not items:
            return Sample.fail(f"custom.metrics.k8s.io: no values of {metric} for the pods of {where} "
                               f"({target.selector})")
        total = 0.0
        for item in items:
            try:
                total += parse_quantity(item.get("value"))
            except ValueError as err:
                pod = item.get("describedObject")
                name = pod.get("name") if isinstance(pod, Mapping) else "?"
                return Sample.fail(f"custom.metrics.k8s.io: {metric} of pod {name}: {err}")
        return Sample.of(total / len(items), f"average {metric} of the pods of {where}")
