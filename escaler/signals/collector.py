"""``MetricsCollector``: one sample per metric of a MetricsTrigger scaler (docs/guide/elasticscaler.md,
docs/guide/elasticscaler.md#the-triggers).

Contract:

* ``collect(namespace, metrics, target, current_replicas, now=None)`` returns ``[(spec, Sample),
  ...]`` in spec order, one pair per metric, dispatching on ``spec.type``:

  ==============  ===========================================  ======================================
  type            source                                       value (by target type)
  ==============  ===========================================  ======================================
  Resource        metrics.k8s.io, the target's pods            Utilization: % of requests;
                                                               AverageValue: usage per pod
                                                               (over the ready pods; the HPA's
                                                               pod groups in ``Sample.pods``)
  Custom          custom.metrics.k8s.io, the target's pods     AverageValue: the per-pod average
  External        external.metrics.k8s.io, metric selector     Value: the total; AverageValue:
                                                               total / current_replicas
  ExternalServer  Prometheus ``/api/v1/query``                 Value: the result; AverageValue:
                                                               result / current_replicas
  ==============  ===========================================  ======================================

  Those are the meanings ``escaler.scaling.algorithm.MetricValue`` documents. Data problems are
  error samples (see each collector's module); nothing is raised for them. Resource metrics of
  one scaler share one pod list and one metrics read per call. ``now`` (wall-clock epoch seconds;
  default: the injected clock's ``now()``) is what the Resource collector judges the pods'
  readiness times against (the HPA's cpu initialization period).
* A call is bounded: once ``budget_seconds`` (default 30 s, on the injected clock) have passed,
  the remaining metrics are not read (error samples say so), and a Prometheus query never waits
  longer than the least of its ``timeoutSeconds``, ``MAX_TIMEOUT_SECONDS`` and what is left of
  the budget. A scaler with sixteen slow ExternalServer metrics takes 30 s, not 16 x 30 s.
* ``to_metric_value(spec, sample)`` builds the algorithm's ``MetricValue`` (name: the resource name,
  the metric name, or the ExternalServer query; the target from the spec; ``pods`` from the
  sample). It raises
  ``ValueError`` naming the field when the spec's target cannot be read (a quantity that does
  not parse, a missing value): the spec cannot produce a decision (``InvalidSpec``).
* ExternalServer endpoints go through the ``allowed(host)`` hook (``--allowed-endpoint-hosts``;
  see ``escaler.scaling.endpoints.host_allowed``) and the ``HttpClient``'s address policy
  (``--allow-endpoint-networks``; ``escaler.signals.netpolicy``), and carry
  ``prometheus_bearer_token`` when one is configured.
* ``bearerTokenSecretRef``: the token is read (``secret_reader``; in the manager
  ``escaler.signals.bearer``, which reads only Secrets labelled
  ``elasticscaler.io/bearer-token: "true"``) at every query, and only for an ``https://``
  endpoint: with ``http://`` the metric is an error naming the field and the Secret is not read.
* ``shared`` (``escaler.signals.dedupe.SharedQueries``; the manager passes one, None = off): an
  ExternalServer query identical to one in flight or answered within the window — same endpoint,
  query, ``timeoutSeconds`` and bearer token (by SHA-256; no token is a different key from any
  token) — takes that answer instead of sending its own request.
* ``pod_values(namespace, source)``: the per-pod values of ``scaleDown.podDeletionCost``
  (``escaler.signals.podvalues``), sent as an ExternalServer query is (the same HTTP client,
  allow-list hook, bearer-token rules and timeout cap; never shared with other queries).

Thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from escaler.api.elasticscaler import (
    MetricSourceType,
    MetricSpec,
    MetricTarget,
    MetricTargetType,
    PodDeletionCostPrometheus,
    SecretKeyRef,
)
from escaler.api.quantity import parse_quantity
from escaler.clock import Clock, RealClock
from escaler.kube.dynamic import DynamicClient
from escaler.kube.rest import RestClient
from escaler.kube.scale import selector_string
from escaler.scaling.algorithm import MetricValue
from escaler.scaling.endpoints import check_endpoint_url
from escaler.signals.custom import CustomCollector
from escaler.signals.dedupe import SharedQueries
from escaler.signals.external import ExternalCollector, per_target_type
from escaler.signals.fetch import MAX_TIMEOUT_SECONDS, HostAllowed, HttpClient, redact_url
from escaler.signals.podvalues import PodValues, query_pod_values
from escaler.signals.prometheus import query_prometheus
from escaler.signals.promqlscope import PromQLScope
from escaler.signals.resource import PodLister, PodUsage, ResourceCollector
from escaler.signals.sample import PodTarget, Sample

if TYPE_CHECKING:
    from escaler.api.common import LabelSelector

__all__ = ["DEFAULT_COLLECT_BUDGET_SECONDS", "MetricsCollector", "metric_name", "to_metric_value"]

# Longest one collect() call may spend; the longest single ExternalServer timeout allowed by the API.
DEFAULT_COLLECT_BUDGET_SECONDS = MAX_TIMEOUT_SECONDS

# (namespace, secret name, key) -> the decoded value; raises when it cannot be read
SecretReader = Callable[[str, str, str, str], str]


def metric_name(spec: MetricSpec) -> str:
    """The display name of a metric: resource name, metric name, or the ExternalServer query."""
    if spec.type == MetricSourceType.RESOURCE and spec.resource is not None:
        return spec.resource.name
    if spec.type == MetricSourceType.CUSTOM and spec.custom is not None:
        return spec.custom.metric.name
    if spec.type == MetricSourceType.EXTERNAL and spec.external is not None:
        return spec.external.metric.name
    if spec.type == MetricSourceType.EXTERNAL_SERVER and spec.external_server is not None:
        return spec.external_server.query
    return str(spec.type)


def _target_of(spec: MetricSpec) -> MetricTarget | None:
    source = {
        MetricSourceType.RESOURCE: spec.resource,
        MetricSourceType.CUSTOM: spec.custom,
        MetricSourceType.EXTERNAL: spec.external,
        MetricSourceType.EXTERNAL_SERVER: spec.external_server,
    }.get(spec.type)
    return source.target if source is not None else None


def _field_of(spec: MetricSpec) -> str:
    return {
        MetricSourceType.RESOURCE: "resource",
        MetricSourceType.CUSTOM: "custom",
        MetricSourceType.EXTERNAL: "external",
        MetricSourceType.EXTERNAL_SERVER: "externalServer",
    }[spec.type]


def to_metric_value(spec: MetricSpec, sample: Sample) -> MetricValue:
    """The algorithm's view of one collected metric (see the module docstring)."""
    target = _target_of(spec)
    path = f"{_field_of(spec)}.target"
    if target is None:
        raise ValueError(f"{_field_of(spec)}: required when type is {spec.type}")
    if target.type == MetricTargetType.UTILIZATION:
        if target.average_utilization is None:
            raise ValueError(f"{path}.averageUtilization: required when type is Utilization")
        target_value = float(target.average_utilization)
    elif target.type == MetricTargetType.AVERAGE_VALUE:
        target_value = _target_quantity(target.average_value, f"{path}.averageValue", target.type)
    else:
        target_value = _target_quantity(target.value, f"{path}.value", target.type)
    return MetricValue(
        name=metric_name(spec),
        type=str(spec.type),
        value=sample.value,
        target_type=str(target.type),
        target_value=target_value,
        pods=sample.pods,
    )


def _target_quantity(q: int | str | None, path: str, target_type: str) -> float:
    if q is None:
        raise ValueError(f"{path}: required when type is {target_type}")
    try:
        return parse_quantity(q)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _selector(sel: LabelSelector | None) -> str:
    return selector_string(sel.to_object()) if sel is not None else ""


class MetricsCollector:
    """Collects every metric of a scaler (see the module docstring)."""

    def __init__(
        self,
        rest: RestClient,
        dynamic: DynamicClient,
        http: HttpClient | None = None,
        clock: Clock | None = None,
        *,
        pod_lister: PodLister | None = None,
        allowed: HostAllowed | None = None,
        prometheus_bearer_token: str | None = None,
        secret_reader: SecretReader | None = None,
        budget_seconds: float = DEFAULT_COLLECT_BUDGET_SECONDS,
        shared: SharedQueries[Sample] | None = None,
        promql_scope: PromQLScope | None = None,
    ) -> None:
        if budget_seconds <= 0:
            raise ValueError(f"MetricsCollector: budget_seconds must be > 0, got {budget_seconds}")
        # the three kube-backed collectors; stateless
        self._resource = ResourceCollector(rest, dynamic, pod_lister=pod_lister)
        self._custom = CustomCollector(rest)
        self._external = ExternalCollector(rest)
        # outbound GETs (address policy, resolver, TLS); stateless per request, shared by threads
        self._http = http if http is not None else HttpClient()
        # measures the budget and the Prometheus total timeouts
        self._clock: Clock = clock or RealClock()
        # --allowed-endpoint-hosts hook; None allows every host
        self._allowed = allowed
        # sent as "Authorization: Bearer" to Prometheus when set (https endpoints only)
        self._flag_token = prometheus_bearer_token
        # reads a Secret key (namespace, name, key) -> value, for bearerTokenSecretRef; None = refuse
        self._secret_reader = secret_reader
        # seconds one collect() may spend
        self._budget = budget_seconds
        # identical ExternalServer queries in flight or just answered: one request; None = off
        self._shared = shared
        # tenant PromQL confinement (--promql-namespace-label); None = not confined
        self._scope = promql_scope

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: PodTarget,
                current_replicas: int, now: float | None = None) -> list[tuple[MetricSpec, Sample]]:
        if isinstance(current_replicas, bool) or not isinstance(current_replicas, int) \
                or current_replicas < 0:
            raise ValueError(f"collect: current_replicas must be an integer >= 0, got {current_replicas!r}")
        wall = self._clock.now().timestamp() if now is None else now
        deadline = self._clock.monotonic() + self._budget
        memo: dict[str, PodUsage | Sample] = {}
        out: list[tuple[MetricSpec, Sample]] = []
        for spec in metrics:
            left = deadline - self._clock.monotonic()
            if left <= 0:
                sample = Sample.fail(f"{metric_name(spec)}: not read: the collection budget of "
                                     f"{self._budget:g}s was used up by the metrics before it")
            else:
                sample = self._one(namespace, spec, target, current_replicas, memo, left, wall)
            out.append((spec, sample))
        return out

    def to_metric_value(self, spec: MetricSpec, sample: Sample) -> MetricValue:
        return to_metric_value(spec, sample)

    def pod_values(self, namespace: str, source: PodDeletionCostPrometheus) -> PodValues:
        """The values per pod of ``scaleDown.podDeletionCost.prometheus`` (see the module docstring)."""
        why = self._confinement(source.query, namespace, source.endpoint)
        if why is not None:
            return PodValues.fail(f"scaleDown.podDeletionCost.prometheus.query: {why}")
        token = self._token(namespace, source.query, source.endpoint, source.bearer_token_secret_ref)
        if isinstance(token, Sample):
            return PodValues.fail(token.error or "the bearer token could not be read")
        return query_pod_values(self._http, source.endpoint, source.query, source.pod_label,
                                min(float(source.timeout_seconds), MAX_TIMEOUT_SECONDS), bearer_token=token,
                                allowed=self._allowed, clock=self._clock)

    def _one(self, namespace: str, spec: MetricSpec, target: PodTarget, current_replicas: int,
             memo: dict[str, PodUsage | Sample], time_left: float, now: float) -> Sample:
        t = spec.type
        if t == MetricSourceType.RESOURCE and spec.resource is not None:
            r = spec.resource
            return self._resource.collect(namespace, r.name, str(r.target.type), target, memo, now=now)
        if t == MetricSourceType.CUSTOM and spec.custom is not None:
            c = spec.custom
            return self._custom.collect(namespace, c.metric.name, target, _selector(c.metric.selector))
        if t == MetricSourceType.EXTERNAL and spec.external is not None:
            e = spec.external
            return self._external.collect(namespace, e.metric.name, _selector(e.metric.selector),
                                          str(e.target.type), current_replicas)
        if t == MetricSourceType.EXTERNAL_SERVER and spec.external_server is not None:
            s = spec.external_server
            why = self._confinement(s.query, namespace, s.endpoint)
            if why is not None:  # never sent, and no Secret read for it
                return Sample.fail(f"externalServer.query: {why}")
            token = self._token(namespace, s.query, s.endpoint, s.bearer_token_secret_ref)
            if isinstance(token, Sample):
                return token
            total = self._query(s.endpoint, s.query, float(s.timeout_seconds), token, time_left)
            return per_target_type(total, str(s.target.type), current_replicas, f"query {s.query!r}")
        return Sample.fail(f"metric of type {t}: its {_field_of(spec)} configuration is missing")

    def _confinement(self, query: str, namespace: str, endpoint: str) -> str | None:
        """Why ``query`` may not run for ``namespace`` (``escaler.signals.promqlscope``), or None."""
        return self._scope.refusal(query, namespace, endpoint) if self._scope is not None else None

    def _query(self, endpoint: str, query: str, timeout_seconds: float, token: str | None,
               time_left: float) -> Sample:
        """One Prometheus query, shared with identical ones when ``shared`` is set."""
        timeout = min(timeout_seconds, MAX_TIMEOUT_SECONDS, time_left)

        def ask() -> Sample:
            return query_prometheus(self._http, endpoint, query, timeout, bearer_token=token,
                                    allowed=self._allowed, clock=self._clock)

        if self._shared is None:
            return ask()
        digest = hashlib.sha256(token.encode()).hexdigest() if token is not None else None

        def late() -> Sample:
            return Sample.fail(f"query {query!r}: no answer from {redact_url(endpoint)} within {timeout:g}s "
                               "(an identical query in flight did not finish)")

        return self._shared.run((endpoint, query, timeout_seconds, digest), ask, timeout, late)

    def _token(self, namespace: str, query: str, endpoint: str,
               ref: SecretKeyRef | None) -> str | Sample | None:
        """The bearer token of one ExternalServer query, or the error sample that replaces it."""
        if ref is None:
            return self._flag_token
        where = f"query {query!r}: bearerTokenSecretRef {namespace}/{ref.name}[{ref.key}]"
        if not endpoint.lower().startswith("https://"):
            return Sample.fail(f"{where}: a bearer token is only sent over https://; externalServer.endpoint "
                               f"{endpoint} is plain http:// (the Secret was not read)")
        if self._secret_reader is None:
            return Sample.fail(f"{where}: no Secret reader configured")
        try:
            # the Secret names the hosts its token may go to (escaler.signals.bearer)
            return self._secret_reader(namespace, ref.name, ref.key, check_endpoint_url(endpoint))
        except Exception as err:  # any failure to read the token is this metric's error
            return Sample.fail(f"{where}: {err}")
