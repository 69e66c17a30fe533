"""Group loads for GroupReplication scale-down: ``scaleDown.prometheus``, off the reconcile workers.

``GroupRanker.loads(rsg, present)`` answers one of:

* ``Loads(values)``: the query's answer, one value per group index (``{group="<i>"}``), made for this
  RSG object (uid, generation) and this set of present groups;
* ``Loads(error=...)``: the query failed (refused endpoint, timeout, HTTP error, malformed answer):
  the caller falls back to highest index first and says so in a condition — a scale-down is never
  stuck on a query;
* ``PENDING``: a query is in flight on the outbound executor; its completion enqueues the RSG, whose
  next reconcile consumes the answer (the one that started it writes nothing).

The query goes through the hardened outbound path, exactly as ElasticScaler's ExternalServer
metrics do: ``escaler.signals.fetch`` (the SSRF address policy of ``--allow-endpoint-networks``,
``--allowed-endpoint-hosts``, no redirects, one total deadline of ``timeoutSeconds``, a capped
body), run on a ``KeyedExecutor`` (one job per RSG, bounded per namespace). **No echo**: an error
names the HTTP status, the body size, and Prometheus' own ``errorType``/``error`` fields (capped,
every unprintable character a space: ``escaler.signals.prometheus.capped_text``), never other bytes
of the answer.

The answer must be an instant ``vector`` whose samples carry a ``group`` label holding a group
index; a sample without one, a repeated group, or a value that is not a finite number is an error
naming the rule. Groups the answer does not mention count as idle (``escaler.scaling.rsg``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escaler.api.rsg import ResourceScalingGroup, RSGPrometheus
from escaler.clock import Clock
from escaler.runtime.executor import Executor, Submitted
from escaler.runtime.types import Request
from escaler.scaling.endpoints import check_endpoint_url
from escaler.signals.fetch import FetchError, HostAllowed, HttpClient, fetch, redact_url
from escaler.signals.prometheus import capped_text as _capped
from escaler.signals.promqlscope import PromQLScope

__all__ = ["GROUP_LOAD_LABEL", "PENDING", "GroupRanker", "Loads", "parse_group_loads", "query_group_loads"]

# the label of each sample that names its group index
GROUP_LOAD_LABEL = "group"
QUERY_PATH = "/api/v1/query"
# largest answer read (one sample per group: small)
MAX_RESPONSE_BYTES = 1 << 20


@dataclass(frozen=True)
class Loads:
    """The answer of a group-load query: values by group index, or why there are none."""

    values: Mapping[int, float] = field(default_factory=dict)
    error: str | None = None


# the query is in flight: its completion wakes the RSG
PENDING = object()

Query = Callable[[RSGPrometheus], Mapping[int, float]]


def _error_of(status: int, body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return f"HTTP {status}: {_capped(doc.get('errorType') or 'error')}: {_capped(doc['error'])}"
    return f"HTTP {status}, {len(body)} bytes"


def _sample(item: object) -> tuple[int, float]:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise ValueError("a result sample is not an object with a metric")
    label = item["metric"].get(GROUP_LOAD_LABEL)
    if not isinstance(label, str) or not label.isdigit():
        raise ValueError(f"every sample needs a {GROUP_LOAD_LABEL!r} label holding a group index "
                         f"(aggregate with sum by ({GROUP_LOAD_LABEL}) (...))")
    pair = item.get("value")
    try:
        value = float(pair[1]) if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str) \
            else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"the sample of group {label} is not a finite number")
    return int(label), value


def parse_group_loads(status: int, body: bytes) -> dict[int, float]:
    """A ``/api/v1/query`` answer as loads by group index; ``ValueError`` naming the rule it breaks."""
    if status != 200:
        raise ValueError(_error_of(status, body))
    try:
        doc = json.loads(body)
    except ValueError:
        raise ValueError(f"the answer is not JSON ({len(body)} bytes)") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(data, dict):
        raise ValueError(_error_of(status, body))
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise ValueError(f"the query must return an instant vector, got {_capped(data.get('resultType'))!r}")
    loads: dict[int, float] = {}
    for item in data["result"]:
        group, value = _sample(item)
        if group in loads:
            raise ValueError(f"group {group} appears twice; aggregate with sum by ({GROUP_LOAD_LABEL}) (...)")
        loads[group] = value
    return loads


def query_group_loads(client: HttpClient, prom: RSGPrometheus, *, allowed: HostAllowed | None,
                      clock: Clock | None) -> dict[int, float]:
    """Run the query (blocking, bounded by ``timeoutSeconds``); ``ValueError`` when it fails."""
    try:
        check_endpoint_url(prom.endpoint, base=True)
    except ValueError as err:
        raise ValueError(f"endpoint {redact_url(prom.endpoint)!r}: {err}") from None
    try:
        resp = fetch(client, prom.endpoint.rstrip("/") + QUERY_PATH, timeout=float(prom.timeout_seconds),
                     params={"query": prom.query}, allowed=allowed, max_bytes=MAX_RESPONSE_BYTES, clock=clock)
    except FetchError as err:
        raise ValueError(str(err)) from None
    return parse_group_loads(resp.status, resp.body)


class GroupRanker:
    """Starts and consumes group-load queries (see the module docstring). Thread-safe."""

    def __init__(self, executor: Executor, query: Query, promql_scope: PromQLScope | None = None) -> None:
        # runs the queries off the reconcile workers; completions enqueue the RSG
        self._executor = executor
        # the blocking query (query_group_loads bound to the manager's client and policy)
        self._query = query
        # tenant PromQL confinement (--promql-namespace-label); None = not confined
        self._scope = promql_scope

    @staticmethod
    def _key(rsg: ResourceScalingGroup) -> Hashable:
        return ("rsg-group-loads", rsg.namespace, rsg.name)

    def loads(self, rsg: ResourceScalingGroup, prom: RSGPrometheus, present: Collection[int]) -> Any:
        """``Loads`` for this RSG and these groups, or ``PENDING``."""
        scope = self._scope
        why = scope.refusal(prom.query, rsg.namespace, prom.endpoint) if scope is not None else None
        if why is not None:  # never sent: the query reads outside the RSG's namespace
            return Loads(error=f"query: {why}")
        key = self._key(rsg)
        tag = (rsg.metadata.uid, rsg.metadata.generation, tuple(sorted(present)))
        fin = self._executor.take(key)
        if fin is not None and fin.tag == tag:
            if fin.error is not None:
                return Loads(error=str(fin.error))
            return Loads(values=dict(fin.value))
        if self._executor.pending(key):
            return PENDING
        query = self._query
        submitted = self._executor.submit(key, rsg.namespace, tag, lambda: query(prom),
                                          Request(rsg.namespace, rsg.name))
        if submitted == Submitted.FULL:
            return Loads(error=f"too many outbound queries are queued in namespace {rsg.namespace}")
        fin = self._executor.take(key)  # an inline executor has finished already
        if fin is not None and fin.tag == tag:
            return Loads(error=str(fin.error)) if fin.error is not None else Loads(values=dict(fin.value))
        return PENDING

    def forget(self, namespace: str, name: str) -> None:
        self._executor.discard(("rsg-group-loads", namespace, name))
