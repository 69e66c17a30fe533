"""A value per pod from a Prometheus instant query (``scaleDown.podDeletionCost``,
docs/design.md#beyond-the-seeds).

``query_pod_values(client, endpoint, query, label, timeout, ...)`` sends the query as an
ExternalServer metric is sent (``escaler.signals.fetch``: the ``--allowed-endpoint-hosts`` hook,
the address policy, no redirects, one total deadline, a bounded body, a bearer token over https
only) and returns ``PodValues``: pod name → value, or the error.

``parse_pod_values(status, body, label)`` reads the answer (pure):

* a ``vector`` result: each sample's ``label`` names the pod; a sample without that label (or
  with an empty one) is skipped and counted (``PodValues.unlabelled``), so a query that lost its
  ``by (pod)`` is visible in the message rather than silently empty;
* several samples for one pod: the largest counts (the pod looks busier, so it is not chosen to
  go on a smaller reading);
* NaN, ±Inf and values that are not numbers are skipped (that pod has no value);
* an empty vector is *not* an error: no pod has a value, and nothing is annotated;
* any other result type, an HTTP status other than 200 or a ``status`` other than ``success`` is
  an error, worded as ``escaler.signals.prometheus`` words it (never quoting the body).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from escaler.clock import Clock
from escaler.scaling.endpoints import check_endpoint_url
from escaler.signals.fetch import (
    DEFAULT_MAX_RESPONSE_BYTES,
    FetchError,
    HostAllowed,
    HttpClient,
    fetch,
    redact_url,
)
from escaler.signals.prometheus import QUERY_PATH, parse_query_response

__all__ = ["PodValues", "parse_pod_values", "query_pod_values"]


@dataclass(frozen=True)
class PodValues:
    """Pod name → value, or why there are none."""

    values: Mapping[str, float] = field(default_factory=dict)
    # the query failed: nothing in ``values``
    error: str | None = None
    # samples without the pod label (skipped)
    unlabelled: int = 0

    @classmethod
    def fail(cls, error: str) -> PodValues:
        return cls(error=error)


def query_pod_values(client: HttpClient, endpoint: str, query: str, label: str, timeout: float, *,
                     bearer_token: str | None = None, allowed: HostAllowed | None = None,
                     max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, clock: Clock | None = None) -> PodValues:
    """Run the query; see the module docstring."""
    try:
        check_endpoint_url(endpoint, base=True)
    except ValueError as err:
        return PodValues.fail(f"Prometheus query failed: endpoint {redact_url(endpoint)!r}: {err}")
    try:
        resp = fetch(client, endpoint.rstrip("/") + QUERY_PATH, timeout=timeout, params={"query": query},
                     bearer_token=bearer_token, allowed=allowed, max_bytes=max_bytes, clock=clock)
    except FetchError as err:
        return PodValues.fail(f"Prometheus query failed: {err}")
    return parse_pod_values(resp.status, resp.body, label, where=endpoint)


def parse_pod_values(status: int, body: bytes, label: str, *, where: str = "Prometheus") -> PodValues:
    """A ``/api/v1/query`` answer as a value per pod (see the module docstring); pure."""
    try:
        doc = json.loads(body) if body else None
    except (ValueError, RecursionError):
        doc = None
    if status != 200 or not isinstance(doc, Mapping) or doc.get("status") != "success":
        # the single-number parser words every such failure (and never quotes the body)
        return PodValues.fail(parse_query_response(status, body, where=where).error or f"{where}: no answer")
    data = doc.get("data")
    kind = data.get("resultType") if isinstance(data, Mapping) else None
    result = data.get("result") if isinstance(data, Mapping) else None
    if kind != "vector" or not isinstance(result, list):
        return PodValues.fail(f"{where}: result type {kind!r} is not supported: the query must return an "
                              f"instant vector with one sample per pod (label {label!r})")
    values: dict[str, float] = {}
    unlabelled = 0
    for series in result:
        metric = series.get("metric") if isinstance(series, Mapping) else None
        pod = metric.get(label) if isinstance(metric, Mapping) else None
        if not isinstance(pod, str) or not pod:
            unlabelled += 1
            continue
        value = _number(series.get("value") if isinstance(series, Mapping) else None)
        if value is not None:
            values[pod] = max(value, values.get(pod, value))
    return PodValues(values, unlabelled=unlabelled)


def _number(pair: object) -> float | None:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        return None
    try:
        value = float(pair[1])
    except ValueError:
        return None
    return value if math.isfinite(value) else None
