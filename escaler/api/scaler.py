"""What the two scaler kinds (ElasticScaler, LLMScaler) share: defaults and the status model.

The status follows the HPA v2 model (docs/concepts.md#conditions-and-health): conditions are the source of
truth (no phase, no summary Ready condition); ``currentMetrics`` says *why* (value, target and the replicas
each metric recommends); ``recentDecisions`` keeps the last ``MAX_RECENT_DECISIONS`` decisions, oldest
first (``ScalerStatus.record`` appends and trims, keeping the CRD's ``maxItems``).

Every field is optional: a field is written when the controller knows its value, and absent
otherwise (``None`` in Python), never a made-up zero.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from escaler.api.common import MODE_DESCRIPTION, KubeModel, Mode, TargetRef, Time
from escaler.api.conditions import Condition, conditions_field
from escaler.api.rules import Rule

__all__ = [
    "DEFAULT_DEFER_TIMEOUT_SECONDS",
    "DEFAULT_MAX_REPLICAS",
    "DEFAULT_MIN_REPLICAS",
    "MAX_POLL_INTERVAL_SECONDS",
    "MAX_RECENT_DECISIONS",
    "BoundBy",
    "Fallback",
    "FallbackStatus",
    "FloorFrom",
    "MetricStatus",
    "RecentDecision",
    "ScalerStatus",
    "poll_interval_field",
]

DEFAULT_MIN_REPLICAS = 1
DEFAULT_MAX_REPLICAS = 10
# How long a guard may hold a write before it is forced (0 = never force),
# docs/concepts.md#the-decision-pipeline step 5.
DEFAULT_DEFER_TIMEOUT_SECONDS = 600
MAX_RECENT_DECISIONS = 10
# Longest text copied from an error into status (docs/concepts.md#conditions-and-health: error bodies capped
# at 1 KiB).
MAX_ERROR_LENGTH = 1024

DEFER_TIMEOUT_DESCRIPTION = (
    "Seconds a guard (RolloutInProgress, ScaleDownSettling) may hold a write before it is forced "
    "(AbleToScale=True/DeferralTimedOut); forced writes are then paced to at most one per this "
    "interval. 0 never forces a held write."
)


class MetricStatus(KubeModel):
    """What one metric read this sync, and the replicas it recommends."""

    name: str = Field(
        max_length=1024,
        description="The metric: a resource name (cpu), a metric name, an ExternalServer query, "
        "an LLMScaler Prometheus metric's name, or a Flow signal or figure.",
    )
    type: str | None = Field(
        default=None,
        max_length=63,
        description="Source type: Resource, Custom, External, ExternalServer (ElasticScaler), "
        "Prometheus, Flow (a signal flow sizing read) or FlowDecision (a figure of the flow's "
        "decision: work, backlog, planned, utilization, headroom, need) (LLMScaler).",
    )
    value: float | None = Field(
        default=None,
        description="The aggregated value, as of the last status write: rewritten when it moves beyond "
        "the algorithm's tolerance or with a decision (the live value is the manager's "
        "escaler_scaler_metric_value metric); absent when the read failed.",
    )
    target: float | None = Field(default=None, description="The target the value is compared with.")
    target_type: str | None = Field(
        default=None,
        max_length=63,
        description="How the target is read: Utilization (percent of requests), AverageValue (per "
        "replica) or Value (total).",
    )
    recommended_replicas: int | None = Field(
        default=None, ge=0, description="The replica count this metric alone recommends."
    )
    error: str | None = Field(
        default=None,
        max_length=MAX_ERROR_LENGTH,
        description="Why this metric produced no recommendation this sync (capped at 1 KiB).",
    )


class BoundBy(StrEnum):
    """The decision-pipeline step (docs/concepts.md#the-decision-pipeline) that last changed the count
    (``recentDecisions[].boundBy``, ``escaler explain``). One enum for the model, the CRD and the pipeline
    (``escaler.scaling``)."""

    # the algorithm's own per-step rate cap (apa scaleUpRate/scaleDownRate) cut the raw recommendation
    RATE_LIMIT = "RateLimit"
    # a stabilization window kept the count
    STABILIZE = "Stabilize"
    # a per-sync step limit (maxPodsPerStep / maxStepReplicas) cut the count
    STEP_LIMIT = "StepLimit"
    # the [minReplicas, maxReplicas] clamp changed the count
    CLAMP = "Clamp"
    # a guard (RolloutInProgress, ScaleDownSettling, InsufficientCapacity) held the write
    GUARD = "Guard"
    # elasticscaler.io/paused froze the count
    PAUSED = "Paused"
    # elasticscaler.io/paused-replicas pinned the count
    PAUSED_REPLICAS = "PausedReplicas"
    # MetricsTrigger activation took the count to 0 (below the value) or woke it to 1 (above it)
    ACTIVATION = "Activation"
    # spec.floorFrom: the named Tidal's schedule lifted the recommendation to its floor
    FLOOR = "Floor"


class RecentDecision(KubeModel):
    """One replica-count decision: when, from, to, why, and the pipeline step that bound it."""

    time: Time = Field(description="When the decision was taken.")
    from_: int = Field(ge=0, description="Replica count before the decision.")
    to: int = Field(ge=0, description="Replica count decided.")
    reason: str = Field(max_length=1024, description="Why, in words (e.g. the metric that drove it).")
    bound_by: BoundBy | None = Field(
        default=None,
        description="The decision-pipeline step that last changed the count: RateLimit (the "
        "algorithm's rate cap), Stabilize, StepLimit, Clamp, Guard, Paused, PausedReplicas, Activation "
        "(MetricsTrigger activation took the count to 0 or woke it) or Floor (spec.floorFrom's Tidal "
        "lifted the recommendation); absent "
        "when no step changed the recommendation.",
    )


# Longest per-scaler poll interval (spec.pollIntervalSeconds of ElasticScaler and LLMScaler); the
# shortest honoured is the manager's --min-poll-interval
MAX_POLL_INTERVAL_SECONDS = 3600


def poll_interval_field(what: str, only: str = "") -> Any:
    """The optional per-scaler poll interval field (docs/design.md#beyond-the-seeds), one description
    for both kinds."""
    return Field(
        default=None,
        ge=1,
        le=MAX_POLL_INTERVAL_SECONDS,
        description=f"{only}Seconds between two {what} of this scaler (1 to {MAX_POLL_INTERVAL_SECONDS}); "
        "default: the manager's --metrics-trigger-poll-interval (30s). A value below the manager's "
        "--min-poll-interval (default 5s) is raised to it, and a Warning event PollIntervalClamped "
        "says so. Polls stay spread over the interval (a fixed phase per scaler). Ignored when the "
        "manager's polling is off (interval 0).",
    )


# Both scaler kinds refuse minReplicas > maxReplicas, with the same words (CEL and webhook).
MIN_MAX_RULE = Rule(
    rule="self.minReplicas <= self.maxReplicas",
    message="minReplicas must be less than or equal to maxReplicas",
    check=lambda m: m.min_replicas <= m.max_replicas,
    field_path=".minReplicas",
)


class ScalerSpec(KubeModel):
    """The spec fields every scaler kind shares (docs/concepts.md); each kind adds its trigger or provider
    and may re-declare ``target_ref``/``min_replicas`` with its own documentation."""

    target_ref: TargetRef = Field(
        description="The workload to scale (anything with a /scale subresource or spec.replicas). A "
        "workload is managed by at most one escaler scaler (Validated=False/TargetConflict)."
    )
    min_replicas: int = Field(
        default=DEFAULT_MIN_REPLICAS,
        ge=0,
        description="Lower bound of the replica count (0 allows scale to zero).",
    )
    max_replicas: int = Field(
        default=DEFAULT_MAX_REPLICAS,
        ge=1,
        description="Upper bound of the replica count; at least minReplicas.",
    )
    defer_timeout_seconds: int = Field(
        default=DEFAULT_DEFER_TIMEOUT_SECONDS, ge=0, description=DEFER_TIMEOUT_DESCRIPTION
    )
    mode: Mode = Field(default=Mode.ACTIVE, description=MODE_DESCRIPTION)


class Fallback(KubeModel):
    """What to do when the metrics die (docs/design.md#beyond-the-seeds, KEDA's fallback): after
    ``failureThreshold`` consecutive polls without a usable signal (every metric failed, or the decision
    provider gave none), go to ``replicas``. Shared by ElasticScaler (MetricsTrigger) and LLMScaler."""

    failure_threshold: int = Field(
        ge=1,
        description="Consecutive polls without a usable signal (every metric of the scaler failed or had "
        "nothing usable, or the custom provider gave no decision) before the fallback engages. Polls "
        "are counted, not reconciles: a sync between two polls reuses the last poll's outcome. A poll "
        "with a usable signal resets the count.",
    )
    replicas: int = Field(
        ge=0,
        description="The recommendation while the fallback is engaged. Like any recommendation it goes "
        "through stabilization, step limits and the [minReplicas, maxReplicas] clamp (as KEDA's "
        "fallback count goes through the HPA's behavior and bounds), so it is recorded in the "
        "stabilization history: when the signal comes back, a scale-down below the fallback count "
        "waits for the scale-down window (no cliff).",
    )


# metadata.name of the Tidal a floorFrom names (a DNS subdomain, as every object name)
_OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class FloorFrom(KubeModel):
    """A schedule as a floor under reactive scaling (docs/design.md#beyond-the-seeds): the Tidal whose rules
    give a lower bound on the recommendation. Shared by ElasticScaler (MetricsTrigger) and LLMScaler."""

    kind: Literal["Tidal"] = Field(default="Tidal", description="Kind of the floor source: Tidal.")
    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=_OBJECT_NAME_PATTERN,
        description="Name of a Tidal in the scaler's own namespace (never another namespace's). The "
        "floor is what the Tidal's rules ask for now, computed from its spec at each sync: the highest "
        "replicas of its active rules, else its defaultReplicas, else no floor (its excludeDates "
        "honoured). The recommendation is raised to the floor before stabilization, so the floor lifts "
        "the count at a rule's start and, at its end, the count comes down through the scale-down "
        "stabilization window like any recommendation; step limits and the [minReplicas, maxReplicas] "
        "clamp still apply after it. The ScheduleFloor condition says whether a floor is in force. A "
        "missing Tidal gives no floor (ScheduleFloor=False/TidalNotFound), never a failed sync. The "
        "Tidal's own targetRef may name this scaler's target (it then needs no elasticscaler.io labels "
        "and reports no conflict) or anything else: no StateTrigger needs to follow it.",
    )


class FallbackStatus(KubeModel):
    """The running count of consecutive polls without a usable signal (kept in status so a new
    leader goes on counting where the last one stopped)."""

    failures: int = Field(
        ge=1,
        description="Consecutive polls without a usable signal, counted up to "
        "spec.fallback.failureThreshold (the fallback is engaged at that count).",
    )
    since: Time = Field(description="When the first of these polls happened.")


class ScalerStatus(KubeModel):
    """Observed state of a scaler (HPA v2 model)."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation at the last status write."
    )
    current_replicas: int | None = Field(
        default=None, ge=0, description="Replicas of the target after the last sync: the count a sync wrote, "
        "or the one it found (the step is in recentDecisions)."
    )
    desired_replicas: int | None = Field(
        default=None, ge=0, description="Replicas the controller decided at the last sync."
    )
    last_scale_time: Time | None = Field(
        default=None,
        description="When the controller last wrote replicas to the target (a normal or a forced "
        "write); unchanged on every other sync.",
    )
    deferred_since: Time | None = Field(
        default=None,
        description="Set while a guard holds a write (rollout in progress, scale-down settling); "
        "cleared when the write happens.",
    )
    current_metrics: list[MetricStatus] = Field(
        default=[], description="Per metric: the value read, its target and the replicas it recommends."
    )
    recent_decisions: list[RecentDecision] = Field(
        default=[],
        max_length=MAX_RECENT_DECISIONS,
        description=f"The last {MAX_RECENT_DECISIONS} decisions, oldest first.",
    )
    conditions: list[Condition] = conditions_field(
        "ScalingActive (a decision could be computed), AbleToScale (the target can be written; "
        "its reason says whether a guard or stabilization is holding), ScalingLimited (a bound or "
        "step limit changed the count), Validated and MetricsPipeline. A scaler is failing when "
        "AbleToScale or ScalingActive is False."
    )

    def record(self, decision: RecentDecision) -> None:
        """Append ``decision`` to ``recent_decisions``, dropping the oldest beyond the limit."""
        self.recent_decisions = [*self.recent_decisions, decision][-MAX_RECENT_DECISIONS:]
