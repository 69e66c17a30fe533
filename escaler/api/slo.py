"""LLMSLORequirement and JobSLORequirement (``llm.escaler.io/v1alpha1``), docs/slo.md.

An SLO requirement names a route (``serviceId``), its SLO signals (PromQL) and replica bounds.
The decision engine sizes it and writes ``status.decision``; the SLO API serves and edits the
SLO fields; an LLMScaler with ``metricProvider: Custom`` reads the decision.

Bound rules (CEL on the CRD and ``validate``), docs/slo.md#bounds-in-replicas:

* LLM: both bounds share a type; a ``pdengine`` max is not 1; ``pdengine`` only with
  ``deployType: pd``; min <= max.
* Job: max is ``replica``; min is ``replica`` or ``concurrency``; min <= max when both are
  ``replica``.
* Values are >= 0 for both (schema minimum; 0 is scale to zero).

``spec.flow`` (LLM, optional: flow sizing for the route, ``escaler.api.llmflow.FlowSizing``, read
through the engine's Prometheus). With it the decision is flow sizing's; ``ttft`` and ``otps`` only
set the flow's objectives (``ttftSeconds = ttft.targetMs / 1000``, ``tpotSeconds = 1 / otps.target``:
one objective per requirement). Its rules: refused with ``deployType: pd`` and with ``inflight``;
``flow.ttftSeconds`` refused with ``ttft``, ``flow.tpotSeconds`` with ``otps``; the flow's latency
rules (``objective_rules``) with ``ttft``/``otps`` counting as the objectives they set.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from escaler.api.common import KubeModel, TargetRef, Time
from escaler.api.conditions import Condition, conditions_field
from escaler.api.llmflow import FlowSizing, objective_rules
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule

__all__ = [
    "FLOW_OBJECTIVES_FROM",
    "Bound",
    "BoundType",
    "DeployType",
    "JobBounds",
    "JobSLORequirement",
    "JobSLORequirementSpec",
    "LLMBounds",
    "LLMSLORequirement",
    "LLMSLORequirementSpec",
    "OTPSObjective",
    "QueueObjective",
    "SLODecision",
    "SLOStatus",
    "TTFTObjective",
]

SERVICE_ID_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DEFAULT_TTFT_PERCENTILE = 90.0
DEFAULT_CONCURRENCY_PER_REPLICA = 1
# flow objective → the LLMSLORequirementSpec field that sets it (when the flow does not)
FLOW_OBJECTIVES_FROM = {"ttftSeconds": "ttft", "tpotSeconds": "otps"}


class DeployType(StrEnum):
    AGGREGATED = "aggregated"
    PD = "pd"


class BoundType(StrEnum):
    REPLICA = "replica"
    CONCURRENCY = "concurrency"
    PDENGINE = "pdengine"


class Bound(KubeModel):
    """A replica bound, in replicas, concurrent requests or PD engine groups."""

    type: BoundType = Field(
        description="replica: a replica count. concurrency: concurrent requests, converted with "
        "concurrencyPerReplica. pdengine: PD engine groups (deployType pd only)."
    )
    value: int = Field(ge=0, description="The bound, in units of type; 0 scales to zero.")


class LLMBounds(KubeModel):
    """Lower and upper bound of the decision; both of one type."""

    RULES = (
        Rule(
            rule="self.min.type == self.max.type",
            message="bounds.min.type and bounds.max.type must be the same",
            check=lambda m: m.min.type == m.max.type,
            field_path=".max.type",
        ),
        Rule(
            rule="self.max.type != 'pdengine' || self.max.value != 1",
            message="bounds.max.value of type pdengine must not be 1",
            check=lambda m: m.max.type != BoundType.PDENGINE or m.max.value != 1,
            field_path=".max.value",
        ),
        Rule(
            rule="self.min.value <= self.max.value",
            message="bounds.min.value must be less than or equal to bounds.max.value",
            check=lambda m: m.min.value <= m.max.value,
            field_path=".min.value",
        ),
    )

    min: Bound = Field(description="Lower bound.")
    max: Bound = Field(description="Upper bound.")


class JobBounds(KubeModel):
    """Lower and upper bound of a job decision."""

    RULES = (
        Rule(
            rule="self.max.type == 'replica'",
            message="bounds.max.type must be replica",
            check=lambda m: m.max.type == BoundType.REPLICA,
            field_path=".max.type",
        ),
        Rule(
            rule="self.min.type == 'replica' || self.min.type == 'concurrency'",
            message="bounds.min.type must be replica or concurrency",
            check=lambda m: m.min.type in (BoundType.REPLICA, BoundType.CONCURRENCY),
            field_path=".min.type",
        ),
        Rule(
            rule="self.min.type != self.max.type || self.min.value <= self.max.value",
            message="bounds.min.value must be less than or equal to bounds.max.value",
            check=lambda m: m.min.type != m.max.type or m.min.value <= m.max.value,
            field_path=".min.value",
        ),
    )

    min: Bound = Field(description="Lower bound: replica or concurrency (0 scales to zero).")
    max: Bound = Field(description="Upper bound: replica.")


class TTFTObjective(KubeModel):
    """Time-to-first-token objective: the observed percentile must stay at or below the target."""

    target_ms: float = Field(gt=0, description="Target time to first token, in milliseconds.")
    percentile: float = Field(
        default=DEFAULT_TTFT_PERCENTILE,
        gt=0,
        le=100,
        description="The percentile the target applies to (e.g. 90).",
    )
    promql: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL returning the observed TTFT percentile in milliseconds, "
        "e.g. histogram_quantile(0.9, ...).",
    )


class OTPSObjective(KubeModel):
    """Output tokens per second per request: a lower bound."""

    target: float = Field(gt=0, description="Minimum output tokens per second per request.")
    promql: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL returning the observed output tokens per second per request.",
    )


class InflightSignal(KubeModel):
    """Requests in flight across the service: a load signal against ``concurrencyPerReplica``."""

    promql: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL returning the requests in flight across the service (running + waiting), "
        "e.g. sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting). Its ratio is "
        "in-flight / (serving replicas x concurrencyPerReplica): it sizes a scale-down by load, which "
        "a latency signal cannot predict.",
    )


class QueueObjective(KubeModel):
    """Job queue objective: decision = ceil(depth / maxDepth x current replicas)."""

    max_depth: int = Field(ge=1, description="Queue depth the current replicas should not exceed.")
    promql: str = Field(
        min_length=1, max_length=4096, description="PromQL returning the current queue depth."
    )


_SERVICE_ID_DESCRIPTION = (
    "The route this SLO is for, unique across LLM and Job SLO requirements of this namespace "
    "(other namespaces may use the same serviceId); the decision is served at "
    "GET /decisions/v1/namespaces/{namespace}/{serviceId} and read by an LLMScaler in this "
    "namespace with customProvider.serviceId."
)
_HIGH_PRIORITY_DESCRIPTION = (
    "Marks the route as high priority (reported by the SLO API to upper orchestration)."
)
_CONCURRENCY_DESCRIPTION = "Concurrent requests one replica serves; converts concurrency bounds to replicas."


class LLMSLORequirementSpec(KubeModel):
    """SLO of an LLM serving route."""

    RULES = (
        Rule(
            rule="self.deployType == 'pd' || !has(self.bounds) || "
            "(self.bounds.min.type != 'pdengine' && self.bounds.max.type != 'pdengine')",
            message="bounds of type pdengine require deployType pd",
            check=lambda m: (
                m.deploy_type == DeployType.PD
                or m.bounds is None
                or BoundType.PDENGINE not in (m.bounds.min.type, m.bounds.max.type)
            ),
            field_path=".bounds",
        ),
        Rule(
            rule="!has(self.flow) || self.deployType != 'pd'",
            message="flow is not supported with deployType pd: flow sizing adds a replica's prefill and "
            "decode time on one GPU, which the members of a PD engine group do not share",
            check=lambda m: m.flow is None or m.deploy_type != DeployType.PD,
            field_path=".flow",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.flow) || !has(self.inflight)",
            message="inflight is not used with flow (flow sizing reads its own load: the token rates and "
            "the waiting backlog): remove one",
            check=lambda m: m.flow is None or m.inflight is None,
            field_path=".inflight",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.flow) || !has(self.ttft) || !has(self.flow.ttftSeconds)",
            message="flow.ttftSeconds is not used with ttft: the flow's TTFT objective is ttft.targetMs "
            "(one objective per requirement): remove flow.ttftSeconds",
            check=lambda m: m.flow is None or m.ttft is None or m.flow.ttft_seconds is None,
            field_path=".flow.ttftSeconds",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule="!has(self.flow) || !has(self.otps) || !has(self.flow.tpotSeconds)",
            message="flow.tpotSeconds is not used with otps: the flow's TPOT objective is 1 / otps.target "
            "(one objective per requirement): remove flow.tpotSeconds",
            check=lambda m: m.flow is None or m.otps is None or m.flow.tpot_seconds is None,
            field_path=".flow.tpotSeconds",
            reason="FieldValueForbidden",
        ),
        *objective_rules("flow", FLOW_OBJECTIVES_FROM),
    )

    service_id: str = Field(
        min_length=1, max_length=253, pattern=SERVICE_ID_PATTERN, description=_SERVICE_ID_DESCRIPTION
    )
    high_priority: bool = Field(default=False, description=_HIGH_PRIORITY_DESCRIPTION)
    deploy_type: DeployType = Field(
        default=DeployType.AGGREGATED,
        description="aggregated (default): one workload serves prefill and decode. pd: prefill/decode "
        "disaggregated, sized in PD engine groups (targetRef is then usually a ResourceScalingGroup).",
    )
    target_ref: TargetRef = Field(description="What the decision sizes; its current replicas are an input.")
    concurrency_per_replica: int = Field(
        default=DEFAULT_CONCURRENCY_PER_REPLICA, ge=1, description=_CONCURRENCY_DESCRIPTION
    )
    ttft: TTFTObjective | None = Field(default=None, description="Time-to-first-token objective.")
    otps: OTPSObjective | None = Field(
        default=None, description="Output-tokens-per-second objective (a lower bound)."
    )
    inflight: InflightSignal | None = Field(
        default=None,
        description="Optional load signal: requests in flight, judged against concurrencyPerReplica "
        "per serving replica.",
    )
    bounds: LLMBounds | None = Field(
        default=None, description="Bounds of the decision; unbounded when absent."
    )
    flow: FlowSizing | None = Field(
        default=None,
        description="Flow sizing for this route: the decision is the count flow sizing gives "
        "from the engine's token rates, backlog and latency, read through the decision engine's "
        "Prometheus, clamped to bounds (never below 1 unless bounds.max is 0); ttft and otps then only "
        "set its objectives (flow.ttftSeconds = ttft.targetMs / 1000, flow.tpotSeconds = 1 / "
        "otps.target) and their promql is not read. Refused with inflight and with deployType pd.",
    )


class JobSLORequirementSpec(KubeModel):
    """SLO of a batch (queue-driven) route."""

    service_id: str = Field(
        min_length=1, max_length=253, pattern=SERVICE_ID_PATTERN, description=_SERVICE_ID_DESCRIPTION
    )
    high_priority: bool = Field(default=False, description=_HIGH_PRIORITY_DESCRIPTION)
    target_ref: TargetRef | None = Field(
        default=None, description="What the decision sizes; its current replicas are an input when set."
    )
    concurrency_per_replica: int = Field(
        default=DEFAULT_CONCURRENCY_PER_REPLICA, ge=1, description=_CONCURRENCY_DESCRIPTION
    )
    queue: QueueObjective = Field(description="Queue-depth objective (required).")
    bounds: JobBounds | None = Field(
        default=None, description="Bounds of the decision; unbounded when absent."
    )


class SLODecision(KubeModel):
    """The decision engine's last answer for this route."""

    replicas: int = Field(ge=0, description="Decided replica count.")
    reason: str = Field(
        max_length=1024, description="Why, in words (which signal drove it, or why it holds)."
    )
    signals: dict[str, Any] | None = Field(
        default=None,
        description="The signal values the decision was computed from (free-form, e.g. ttftMs, "
        "otps, queueDepth).",
    )
    time: Time = Field(description="When the decision was computed.")


class SLOStatus(KubeModel):
    """Observed state of an SLO requirement."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation at the last status write."
    )
    decision: SLODecision | None = Field(
        default=None, description="The last decision; served at "
        "GET /decisions/v1/namespaces/{namespace}/{serviceId}."
    )
    conditions: list[Condition] = conditions_field(
        "Ready (the route is sized), with reasons such as SignalsMissing when the last decision is held."
    )


class LLMSLORequirement(KubeObject):
    """SLO of an LLM serving route (TTFT, OTPS, bounds), sized by escaler's decision engine."""

    API_VERSION = "llm.escaler.io/v1alpha1"
    KIND = "LLMSLORequirement"

    spec: LLMSLORequirementSpec = Field(description="The SLO.")
    status: SLOStatus | None = Field(
        default=None, description="The decision, written by the decision engine."
    )


class JobSLORequirement(KubeObject):
    """SLO of a batch route (queue depth, bounds), sized by escaler's decision engine."""

    API_VERSION = "llm.escaler.io/v1alpha1"
    KIND = "JobSLORequirement"

    spec: JobSLORequirementSpec = Field(description="The SLO.")
    status: SLOStatus | None = Field(
        default=None, description="The decision, written by the decision engine."
    )
