"""LLMScaler (``llm.escaler.io/v1alpha1``): the LLM-specific scaler, docs/llmscaler.md.

Decides from Prometheus queries (``desired = ceil(value / targetPerReplica)``, the max over the
usable metrics), from a custom decision provider (GET ``customProvider.url`` →
``{"replicas": n}``, or ``customProvider.serviceId``: the SLO decision engine's route of the
scaler's own namespace, read in-process), or by flow sizing (``metricProvider: Flow``,
``spec.flow``: ``escaler.api.llmflow``). Status is the shared scaler status
(docs/concepts.md#conditions-and-health) plus the deprecated ``DecisionAvailable`` condition mirroring
ScalingActive.

Rules (CEL and ``validate``): ``metricProvider: Custom`` requires ``customProvider``,
``Prometheus`` requires ``prometheus``, ``Flow`` requires ``flow`` (several may be configured, so
switching the provider is a one-field edit; ``spec.flow``'s own rules are in ``llmflow``);
``minReplicas <= maxReplicas``; ``prometheus.endpoint``, ``flow.endpoint`` and
``customProvider.url`` name a host, without credentials, with a port in 1..65535;
``customProvider`` has exactly one of ``url`` and ``serviceId``.
``minReplicas: 0`` is allowed: a custom provider may decide zero (SLO bounds of 0 scale to zero).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from escaler.api.common import URL_PATTERN, KubeModel, url_rule
from escaler.api.llmflow import DEFAULT_PROVIDER_TIMEOUT_SECONDS, FlowProvider
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule
from escaler.api.scaler import (
    MIN_MAX_RULE,
    Fallback,
    FallbackStatus,
    FloorFrom,
    ScalerSpec,
    ScalerStatus,
    poll_interval_field,
)
from escaler.api.slo import SERVICE_ID_PATTERN

__all__ = [
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS",
    "CustomProvider",
    "LLMScaleDown",
    "LLMScaler",
    "LLMScalerSpec",
    "LLMScalerStatus",
    "MetricProvider",
    "PrometheusMetric",
    "PrometheusProvider",
]

DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS = 300
MAX_PROMETHEUS_METRICS = 16


class MetricProvider(StrEnum):
    PROMETHEUS = "Prometheus"
    CUSTOM = "Custom"
    FLOW = "Flow"


class PrometheusMetric(KubeModel):
    """One query and the share of it a replica should carry."""

    name: str = Field(
        min_length=1, max_length=63, description="Name of the metric (shown in status.currentMetrics)."
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL instant query returning one number: the total load over the target.",
    )
    target_per_replica: float = Field(
        gt=0,
        description="Load one replica should carry: this metric recommends ceil(value / targetPerReplica).",
    )


class PrometheusProvider(KubeModel):
    """Prometheus queries, each recommending a replica count; the highest wins."""

    RULES = (url_rule("endpoint", "endpoint"),)

    endpoint: str = Field(
        max_length=2048,
        pattern=URL_PATTERN,
        description="Base URL of a Prometheus-compatible query API, e.g. http://prometheus:9090.",
    )
    metrics: list[PrometheusMetric] = Field(
        min_length=1,
        max_length=MAX_PROMETHEUS_METRICS,
        description="Every metric is evaluated each sync; K of M usable metrics recommend the max of "
        "their counts; none usable is ScalingActive=False/DecisionUnavailable (replicas held).",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_PROVIDER_TIMEOUT_SECONDS,
        ge=1,
        le=300,
        description="Timeout of one query, in seconds.",
    )


class CustomProvider(KubeModel):
    """A decision source: an HTTP URL, or the SLO decision engine's route of this namespace by serviceId."""

    RULES = (
        url_rule("url", "url", optional=True),
        Rule(
            rule="has(self.url) != has(self.serviceId)",
            message="customProvider needs exactly one of url and serviceId",
            check=lambda m: (m.url is None) != (m.service_id is None),
            reason="FieldValueInvalid",
        ),
    )

    url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=URL_PATTERN,
        description='URL answering GET with {"replicas": n} (other fields are ignored). Anything else '
        "is ScalingActive=False/DecisionUnavailable and replicas are held. Exactly one of url and "
        "serviceId.",
    )
    service_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=SERVICE_ID_PATTERN,
        description="The serviceId of an LLMSLORequirement or JobSLORequirement in this LLMScaler's "
        "namespace: its decision is read from the manager's SLO decision engine in-process (no URL, "
        "no credentials; another namespace's route cannot be named). Exactly one of url and serviceId.",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_PROVIDER_TIMEOUT_SECONDS,
        ge=1,
        le=300,
        description="Timeout of one request, in seconds (url only).",
    )

    def source(self) -> str:
        """How messages name the source: the URL, or ``serviceId <id>``."""
        return self.url if self.url is not None else f"serviceId {self.service_id}"


class LLMScaleDown(KubeModel):
    """Scale-down behaviour (scale-up is never limited)."""

    stabilization_window_seconds: int = Field(
        default=DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
        ge=0,
        description="Scale down only to the highest recommendation seen within this window (seconds).",
    )
    max_step_replicas: int | None = Field(
        default=None, ge=1, description="At most this many replicas removed per sync; unlimited when absent."
    )


class LLMScalerSpec(ScalerSpec):
    """Desired behaviour of an LLMScaler."""

    RULES = (
        Rule(
            rule="self.metricProvider != 'Custom' || has(self.customProvider)",
            message="customProvider is required when metricProvider is Custom",
            check=lambda m: m.metric_provider != MetricProvider.CUSTOM or m.custom_provider is not None,
            field_path=".customProvider",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="self.metricProvider != 'Prometheus' || has(self.prometheus)",
            message="prometheus is required when metricProvider is Prometheus",
            check=lambda m: m.metric_provider != MetricProvider.PROMETHEUS or m.prometheus is not None,
            field_path=".prometheus",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="self.metricProvider != 'Flow' || has(self.flow)",
            message="flow is required when metricProvider is Flow",
            check=lambda m: m.metric_provider != MetricProvider.FLOW or m.flow is not None,
            field_path=".flow",
            reason="FieldValueRequired",
        ),
        MIN_MAX_RULE,
    )

    metric_provider: MetricProvider = Field(
        default=MetricProvider.PROMETHEUS,
        description="Prometheus (default): decide from spec.prometheus. Custom: read the decision from "
        "spec.customProvider. Flow: size the fleet on its token flow (spec.flow). Switching overwrites "
        "the conditions at once.",
    )
    prometheus: PrometheusProvider | None = Field(
        default=None, description="Queries used when metricProvider is Prometheus (required then)."
    )
    custom_provider: CustomProvider | None = Field(
        default=None, description="Decision source used when metricProvider is Custom (required then)."
    )
    flow: FlowProvider | None = Field(
        default=None,
        description="Flow sizing used when metricProvider is Flow (required then): the replicas the "
        "prompt and generated tokens per second need at one replica's capacity and a utilisation "
        "target, the waiting backlog drained, a forecast one cold start ahead that only raises, and "
        "burst headroom from latency misses (docs/llmscaler.md).",
    )
    scale_down: LLMScaleDown = Field(
        default_factory=lambda: LLMScaleDown(),
        json_schema_extra={"default": {}},
        description="Scale-down stabilization and step limit.",
    )
    poll_interval_seconds: int | None = poll_interval_field(
        "reads (Prometheus queries, provider GETs or the flow's queries)")
    fallback: Fallback | None = Field(
        default=None,
        description="After failureThreshold consecutive polls without a usable signal (every Prometheus "
        "metric failed, the custom provider gave no decision, or a flow signal failed), scale to replicas "
        "instead of holding the current count (ScalingActive stays False/DecisionUnavailable and its "
        "message names the fallback). Without it, the count is held.",
    )
    floor_from: FloorFrom | None = Field(
        default=None,
        description="A Tidal in this namespace whose schedule is a lower bound under the provider's "
        "decisions (a calendar floor: office hours, a launch, minus holidays with excludeDates). See "
        "floorFrom.name for how the floor is applied.",
    )


class LLMScalerStatus(ScalerStatus):
    """Observed state of an LLMScaler (HPA v2 model, plus the deprecated DecisionAvailable condition)."""

    fallback: FallbackStatus | None = Field(
        default=None,
        description="Set while polls fail with spec.fallback set: how many in a row, and since when; "
        "cleared by a poll with a usable signal.",
    )


class LLMScaler(KubeObject):
    """Scales an LLM serving workload from Prometheus queries, a custom decision provider or its token
    flow."""

    API_VERSION = "llm.escaler.io/v1alpha1"
    KIND = "LLMScaler"

    spec: LLMScalerSpec = Field(description="Desired behaviour.")
    status: LLMScalerStatus | None = Field(
        default=None, description="Observed state, written by the controller."
    )
