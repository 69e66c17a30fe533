"""ExternalServer metrics: one instant query against a Prometheus-compatible HTTP API
(docs/guide/elasticscaler.md).

``query_prometheus(client, endpoint, query, timeout)`` sends ``GET {endpoint}/api/v1/query?query=...``
(``escaler.signals.fetch``: allow-list hook, address policy, no redirects, one total deadline,
bounded body; an optional bearer token, over https only) and returns a ``Sample`` of **one number**:

* a ``scalar`` result → its value;
* a ``vector`` with exactly one sample → that sample's value;
* an empty vector → error. An empty result means "no series matched", which escaler does not guess
  to be zero; if absence means zero for your query, say so in PromQL: ``sum(...) or vector(0)``;
* a vector with N > 1 samples → error ``query returned N series; aggregate them to one (e.g. wrap
  the query in sum())``: picking one, or summing silently, would hide a query that is wrong;
* ``matrix``/``string`` results, native histograms, and values that are not numbers → error;
* NaN and ±Inf (Prometheus writes them as ``"NaN"``, ``"+Inf"``, ``"-Inf"``) → error;
* ``status`` other than ``success``, or an HTTP status other than 200 → error with Prometheus'
  own ``errorType``/``error`` fields when the body is a JSON object carrying them (strings,
  capped at ``MAX_ERROR_TEXT``), else only ``HTTP 502, N bytes``;
* timeouts, refused connections, a refused host or address → error.

**No echo.** The endpoint is named by whoever can create a scaler and may be any server the
manager can reach, so the answer's bytes never reach a status message or an Event (which that
user can read): only the HTTP status, the body's size, and the fields of the Prometheus API
described above. Nothing else of a body (not a malformed value, not a non-JSON page) is quoted.

The number is the query's raw result (the metric's total over the target). Turning a total into a
per-replica average for an ``AverageValue`` target is the collector's job (``collector.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

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
from escaler.signals.sample import Sample

__all__ = ["MAX_ERROR_TEXT", "QUERY_PATH", "capped_text", "parse_query_response", "query_prometheus"]

QUERY_PATH = "/api/v1/query"
# longest errorType/error text quoted from a Prometheus error answer
MAX_ERROR_TEXT = 256


def query_prometheus(
    client: HttpClient,
    endpoint: str,
    query: str,
    timeout: float,
    *,
    bearer_token: str | None = None,
    allowed: HostAllowed | None = None,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    clock: Clock | None = None,
) -> Sample:
    """Run one instant query; see the module docstring for what comes back."""
    try:
        check_endpoint_url(endpoint, base=True)
    except ValueError as err:
        return Sample.fail(f"Prometheus query failed: endpoint {redact_url(endpoint)!r}: {err}")
    url = endpoint.rstrip("/") + QUERY_PATH
    try:
        resp = fetch(client, url, timeout=timeout, params={"query": query}, bearer_token=bearer_token,
                     allowed=allowed, max_bytes=max_bytes, clock=clock)
    except FetchError as err:
        return Sample.fail(f"Prometheus query failed: {err}")
    return parse_query_response(resp.status, resp.body, where=endpoint)


def parse_query_response(status: int, body: bytes, *, where: str = "Prometheus") -> Sample:
    """A ``/api/v1/query`` answer (HTTP status and body) as a sample; pure."""
    try:
        doc = json.loads(body) if body else None
    except (ValueError, RecursionError):  # deep nesting: not an answer either
        doc = None
    if status != 200:
        if 300 <= status < 400:
            return Sample.fail(f"{where}: HTTP {status}: redirects are not followed; set the endpoint to "
                               "the final URL")
        return Sample.fail(f"{where}: HTTP {status}{_error_text(doc, body)}")
    if not isinstance(doc, Mapping):
        return Sample.fail(f"{where}: the response is not a JSON object ({len(body)} bytes)")
    if doc.get("status") != "success":
        return Sample.fail(f"{where}: query status is not \"success\"{_error_text(doc, body)}")
    data = doc.get("data")
    if not isinstance(data, Mapping):
        return Sample.fail(f"{where}: the response has no data object")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _value(result, where, "the scalar")
    if kind != "vector":
        return Sample.fail(f"{where}: result type {kind!r} is not supported: the query must return an "
                           "instant vector with one series, or a scalar")
    if not isinstance(result, list):
        return Sample.fail(f"{where}: the vector result is not a list")
    if not result:
        return Sample.fail(f"{where}: the query returned no series (write `... or vector(0)` if "
                           "absence means zero)")
    if len(result) > 1:
        return Sample.fail(f"{where}: the query returned {len(result)} series; aggregate them to one "
                           "(e.g. wrap the query in sum())")
    series = result[0]
    if not isinstance(series, Mapping):
        return Sample.fail(f"{where}: malformed series in the result")
    if "value" not in series:
        what = "a native histogram" if "histogram" in series else "a series without a value"
        return Sample.fail(f"{where}: the query returned {what}; it must return a plain number")
    return _value(series.get("value"), where, f"series {_labels(series.get('metric'))}")


def _value(pair: object, where: str, what: str) -> Sample:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        return Sample.fail(f"{where}: malformed sample for {what} (want [time, \"number\"])")
    try:
        value = float(pair[1])
    except ValueError:
        return Sample.fail(f"{where}: {what} has a value that is not a number")
    return Sample.of(value, f"{where}: {what}")


def _labels(metric: object) -> str:
    if not isinstance(metric, Mapping) or not metric:
        return "{}"
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def _error_text(doc: object, body: bytes) -> str:
    """``: (errorType) error`` from a Prometheus error answer, else ``, N bytes``: never the body."""
    if isinstance(doc, Mapping):
        etype, err = doc.get("errorType"), doc.get("error")
        parts = [f"({_capped(etype)})" if isinstance(etype, str) and etype else "",
                 _capped(err) if isinstance(err, str) and err else ""]
        text = " ".join(p for p in parts if p)
        if text:
            return f": {text}"
    return f", {len(body)} bytes"


def capped_text(text: object) -> str:
    """A server's text fit for a condition, an event or a terminal: every character that is not
    printable (control, ANSI escape, bidi override) a space, at most ``MAX_ERROR_TEXT`` long."""
    out = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return out if len(out) <= MAX_ERROR_TEXT else out[:MAX_ERROR_TEXT - 3] + "..."


_capped = capped_text
