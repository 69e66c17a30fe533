"""The LLMScaler's two decision sources (docs/llmscaler.md): reading them, and turning what they said into the
pipeline's ``RecommendResult`` and the ``status.currentMetrics`` rows.

**Custom provider.** ``read_custom(client, url, timeout=...)`` sends ``GET url`` through the
hardened outbound path (``escaler.signals.fetch``: the allow-list hook, the SSRF address policy,
no redirects, one total deadline, a body of at most ``MAX_DECISION_BYTES``) and expects a JSON
object ``{"replicas": n}`` with ``n`` a JSON integer >= 0 (a bool, a float such as ``2.0``, a
string are refused; other keys — the SLO decision engine's ``reason`` and ``signals`` — are
ignored). Anything else is a ``CustomReading`` with an ``error``; ``custom_result`` makes that
``ScalingActive=False/DecisionUnavailable`` with the message ``custom provider returned no
decision: <url>: <error>`` (docs/llmscaler.md). ``read_served(lookup, namespace, serviceId)`` is the same rule
for ``customProvider.serviceId``: the SLO decision engine's decision, read in-process through a
``DecisionLookup`` for the scaler's own namespace only (messages name ``serviceId <id>``; the
engine's reason for having none — 404, 409, no decision yet — is the error). **No echo**: an
error names the HTTP status, the body's size and the rule a value broke (with its JSON type), never
bytes of the body — the URL is named by whoever can create a scaler, and these messages reach
status and Events.

**Prometheus.** Each metric's query runs through ``escaler.signals.prometheus.query_prometheus``
(the same path as an ElasticScaler ``ExternalServer`` metric: one number per query; a non-200
answer is reported by its status and size, and Prometheus' own ``errorType``/``error`` fields
capped at 256 characters — so nothing of a body beyond 1 KiB ever reaches a message).
``prometheus_result(metrics, samples)`` evaluates **every** metric: a usable one recommends
``ceil(value / targetPerReplica)`` (a negative value recommends 0); K usable of M recommend the
**max** of their counts (``ScalingActive=True/MetricsAvailable``, "evaluated K of M metrics;
recommends N replicas"); none usable is ``DecisionUnavailable`` naming the endpoint and every
metric's error. Each metric has a row: value, target, ``AverageValue`` (the target is per
replica), the count it recommends, or its error.

Both sources may decide from zero replicas (a query measures load on the route, not on the pods;
a custom provider may decide to wake a service), so ``can_scale_from_zero`` is True.
Pure apart from ``read_custom`` (which only does the GET it is asked to) and ``read_served`` (one
in-memory lookup).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from escaler.api.llmscaler import PrometheusMetric
from escaler.api.scaler import MetricStatus
from escaler.clock import Clock
from escaler.errors import cap_body
from escaler.reconcilers.kit.ports import DecisionLookup
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult
from escaler.scaling.text import cap_text
from escaler.signals.fetch import FetchError, HostAllowed, HttpClient, fetch, redact_url
from escaler.signals.sample import Sample

__all__ = [
    "CUSTOM_SOURCE",
    "MAX_DECISION_BYTES",
    "PROMETHEUS_TYPE",
    "CustomReading",
    "custom_result",
    "decision_reading",
    "parse_decision",
    "prometheus_result",
    "read_custom",
    "read_served",
]

# a decision is a few hundred bytes (the SLO engine adds its reason and signals); far larger is not one
MAX_DECISION_BYTES = 64 * 1024
# the message prefix of a Custom DecisionUnavailable (docs/llmscaler.md)
CUSTOM_SOURCE = "custom provider returned no decision"
# status.currentMetrics[].type of a Prometheus metric
PROMETHEUS_TYPE = "Prometheus"
# how a Prometheus metric's target reads: load per replica
_PER_REPLICA = "AverageValue"


@dataclass(frozen=True)
class CustomReading:
    """What a custom provider answered: a replica count, or why there is none."""

    # the decided count, >= 0; None exactly when error is set
    replicas: int | None
    # why there is no decision (capped at 1 KiB); None on success
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.replicas is None) == (self.error is None):
            raise ValueError(f"CustomReading: exactly one of replicas and error must be set, got {self!r}")
        if self.error is not None:
            object.__setattr__(self, "error", cap_body(self.error))


def read_custom(client: HttpClient, url: str, *, timeout: float, allowed: HostAllowed | None = None,
                clock: Clock | None = None) -> CustomReading:
    """GET the custom provider once; never raises for what the server does."""
    try:
        resp = fetch(client, url, timeout=timeout, allowed=allowed, max_bytes=MAX_DECISION_BYTES, clock=clock)
    except FetchError as err:
        return CustomReading(None, str(err))
    if resp.status != 200:
        return CustomReading(None, f"HTTP {resp.status}, {len(resp.body)} bytes")
    return parse_decision(resp.body)


def parse_decision(body: bytes | str) -> CustomReading:
    """Strictly parse ``{"replicas": n}`` (see the module docstring); pure."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return CustomReading(None, f'the body is not JSON (want {{"replicas": n}}; got {len(body)} bytes)')
    return decision_reading(doc)


def read_served(lookup: DecisionLookup, namespace: str, service_id: str) -> CustomReading:
    """The SLO decision engine's decision for ``(namespace, service_id)``, in-process (``serviceId``)."""
    answer = lookup(namespace, service_id)
    return CustomReading(None, answer) if isinstance(answer, str) else decision_reading(answer)


def decision_reading(doc: object) -> CustomReading:
    """The replicas of a decision object, with the same rules as a body (pure)."""
    if not isinstance(doc, Mapping):
        return CustomReading(None, 'the body is not a JSON object (want {"replicas": n})')
    if "replicas" not in doc:
        return CustomReading(None, 'the object has no "replicas" field (want {"replicas": n})')
    n = doc["replicas"]
    if isinstance(n, bool) or not isinstance(n, int):
        return CustomReading(None, f'"replicas" must be an integer >= 0, got {_json_type(n)}')
    if n < 0:
        return CustomReading(None, '"replicas" must be an integer >= 0, got a negative integer')
    return CustomReading(n)


def custom_result(source: str, reading: CustomReading) -> RecommendResult:
    """The pipeline's view of a custom provider's answer; ``source`` is the URL (redacted here) or
    ``serviceId <id>`` (``CustomProvider.source()``)."""
    where = redact_url(source)
    if reading.replicas is None:
        return RecommendResult.no_decision(CUSTOM_SOURCE, f"{where}: {reading.error}", kind=FROM_DECISION)
    return RecommendResult.from_decision(reading.replicas, source=f"custom provider {where}")


def prometheus_result(endpoint: str, metrics: Sequence[PrometheusMetric],
                      samples: Sequence[Sample]) -> tuple[RecommendResult, tuple[MetricStatus, ...]]:
    """Every metric evaluated (see the module docstring); ``samples`` in ``metrics`` order."""
    if len(samples) != len(metrics):
        raise ValueError(f"prometheus_result: {len(samples)} samples for {len(metrics)} metrics")
    rows: list[MetricStatus] = []
    counts: list[int] = []
    errors: list[str] = []
    notes: list[str] = []
    for m, sample in zip(metrics, samples, strict=True):
        if sample.value is None:
            errors.append(f"{m.name}: {sample.error}")
            rows.append(_row(m, None, None, sample.error))
            continue
        wanted = max(0, math.ceil(sample.value / m.target_per_replica))
        counts.append(wanted)
        notes.append(f"{m.name} {sample.value:g}/{m.target_per_replica:g} per replica → {wanted}")
        rows.append(_row(m, sample.value, wanted, None))
    total = len(metrics)
    if not counts:
        rr = RecommendResult.no_decision(f"Prometheus {redact_url(endpoint)}", "; ".join(errors), total=total,
                                         metric_errors=tuple(errors))
    else:
        rr = RecommendResult.from_metrics(max(counts), evaluated=len(counts), total=total,
                                          detail=", ".join(notes), metric_errors=tuple(errors))
    return rr, tuple(rows)


def _row(m: PrometheusMetric, value: float | None, wanted: int | None, error: str | None) -> MetricStatus:
    return MetricStatus(name=m.name, type=PROMETHEUS_TYPE, value=value, target=m.target_per_replica,
                        target_type=_PER_REPLICA, recommended_replicas=wanted,
                        error=cap_text(error) if error is not None else None)


def _json_type(value: object) -> str:
    """The JSON type of a parsed value, never the value itself (no echo)."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return "a number that is not an integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "an array" if isinstance(value, list) else "an object"
