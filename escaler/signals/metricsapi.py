"""Reading the aggregated metrics APIs (metrics.k8s.io, custom.metrics.k8s.io, external.metrics.k8s.io).

``get_items(rest, path, query, api)`` GETs one list from a metrics API through the manager's
``RestClient`` (so authentication, TLS and the connection pool are the API server's) and returns its
``items`` as a list of objects, or an error ``Sample`` naming the API and the cause:

* 404 → the API is not served or does not know the metric (with a hint: which component serves
  that API);
* 401/403 → the manager's RBAC lacks the permission (with the verb and the API group);
* 503 → the API is registered but its backing service is down (the usual state of a broken
  metrics adapter);
* any other status, a connection failure, or a body without an ``items`` list → the message,
  capped at 1 KiB.

Metric names are single URL path segments: they are percent-quoted (``:`` is kept as is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.rest import Query, RestClient
from escaler.signals.sample import Sample

__all__ = [
    "CUSTOM_METRICS_API",
    "EXTERNAL_METRICS_API",
    "RESOURCE_METRICS_API",
    "get_items",
    "path_segment",
]

RESOURCE_METRICS_API = "/apis/metrics.k8s.io/v1beta1"
CUSTOM_METRICS_API = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL_METRICS_API = "/apis/external.metrics.k8s.io/v1beta1"

_SERVED_BY = {
    "metrics.k8s.io": "metrics-server",
    "custom.metrics.k8s.io": "a custom metrics adapter (e.g. prometheus-adapter)",
    "external.metrics.k8s.io": "an external metrics adapter (e.g. prometheus-adapter or KEDA)",
}


def path_segment(value: str) -> str:
    return quote(value, safe=":")


def get_items(rest: RestClient, path: str, query: Query, api: str) -> list[Mapping[str, Any]] | Sample:
    """The ``items`` of a metrics API list, or an error sample (see the module docstring)."""
    try:
        body = rest.request("GET", path, query=query)
    except StatusError as err:
        return Sample.fail(_status_message(err, path, api))
    except ConnectionFailure as err:
        return Sample.fail(f"{api}: {err}")
    items = body.get("items")
    if not isinstance(items, list):
        return Sample.fail(f"{api}: GET {path}: the response has no items list")
    return [i for i in items if isinstance(i, Mapping)]


# the metric APIs whose RBAC resource is the metric's name, granted one by one (manifests/rbac)
_GRANTED_BY_NAME = frozenset({"custom.metrics.k8s.io", "external.metrics.k8s.io"})
METRICS_CLUSTER_ROLE = "escaler-manager-metrics"


def _status_message(err: StatusError, path: str, api: str) -> str:
    served_by = _SERVED_BY.get(api, "its metrics adapter")
    if err.code == 404:
        return (f"{api}: GET {path}: 404 {err.message or 'not found'} (is {served_by} installed, "
                "and does it serve this metric?)")
    if err.code in (401, 403):
        if api in _GRANTED_BY_NAME:
            return (f"{api}: GET {path}: {err.code} {err.message} (the manager's RBAC grants "
                    f"{api} by metric name: add the metric to the ClusterRole {METRICS_CLUSTER_ROLE}, "
                    "docs/install.md)")
        return (f"{api}: GET {path}: {err.code} {err.message} (the manager needs get/list on "
                f"{api} in its RBAC)")
    if err.code == 503:
        return (f"{api}: GET {path}: 503 {err.message or 'service unavailable'} (the APIService is "
                f"registered but {served_by} is not answering)")
    return f"{api}: GET {path}: {err}"
