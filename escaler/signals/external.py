"""External metrics (external.metrics.k8s.io): a metric not tied to any object, summed.

``ExternalCollector.collect(namespace, metric, selector, target_type, current_replicas)`` sends
``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector=<selector>``
(the metric's own selector, in string form) and sums the values of all returned series: the
metric's **total**. What it returns depends on the target type, so that the value means what
``escaler.scaling.algorithm`` expects:

* ``Value`` → the total;
* ``AverageValue`` → the total divided by ``current_replicas`` (the per-replica average; as the HPA
  does it, the algorithm's ``ceil(current * average / target)`` is then ``ceil(total / target)``).
  With ``current_replicas == 0`` there is no average: error.

No series at all is an error (absence is not guessed to be zero).
"""

from __future__ import annotations

from urllib.parse import quote

from escaler.api.quantity import parse_quantity
from escaler.kube.rest import Query, RestClient
from escaler.signals.metricsapi import EXTERNAL_METRICS_API, get_items, path_segment
from escaler.signals.sample import Sample

__all__ = ["ExternalCollector", "per_target_type"]


def per_target_type(total: Sample, target_type: str, current_replicas: int, what: str) -> Sample:
    """A total as the value for ``target_type``: itself (Value) or per replica (AverageValue)."""
    if total.value is None or target_type != "AverageValue":
        return total
    if current_replicas <= 0:
        return Sample.fail(f"{what}: the target has 0 replicas, so a per-replica average (AverageValue) "
                           "is undefined; use a Value target to scale from zero")
    return Sample.of(total.value / current_replicas, what)


class ExternalCollector:
    """Reads external metrics; thread-safe (no mutable state)."""

    def __init__(self, rest: RestClient) -> None:
        # GETs the external metrics API through the API server
        self._rest = rest

    def total(self, namespace: str, metric: str, selector: str = "") -> Sample:
        """The sum of every series of ``metric`` matching ``selector``."""
        path = f"{EXTERNAL_METRICS_API}/namespaces/{quote(namespace, safe='')}/{path_segment(metric)}"
        query: Query = [("labelSelector", selector)] if selector else []
        items = get_items(self._rest, path, query, "external.metrics.k8s.io")
        if isinstance(items, Sample):
            return items
        what = f"external metric {metric}" + (f" ({selector})" if selector else "")
        if not items:
            return Sample.fail(f"external.metrics.k8s.io: no series of {what}")
        total = 0.0
        for item in items:
            try:
                total += parse_quantity(item.get("value"))
            except ValueError as err:
                return Sample.fail(f"external.metrics.k8s.io: {what}: {err}")
        return Sample.of(total, what)

    def collect(self, namespace: str, metric: str, selector: str, target_type: str,
                current_replicas: int) -> Sample:
        total = self.total(namespace, metric, selector)
        return per_target_type(total, target_type, current_replicas, f"external metric {metric}")
