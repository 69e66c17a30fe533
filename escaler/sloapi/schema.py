"""The SLO API's wire shapes, as pydantic models: what ``/openapi.json`` documents.

These models describe; they do not validate requests (``escaler.sloapi.translate`` does, with
messages naming the field, and the API server has the last word on the merged spec). Names are
the JSON names (camelCase), as the CRDs spell them.

* ``RouteSummary`` / ``RouteList``: ``GET /config``.
* ``LLMRoute`` / ``JobRoute``: ``GET /config/namespaces/{namespace}/{route}`` and the answer to
  ``PUT``/``DELETE``.
* ``Observed``: a route's ``observed`` (in both of the above): objectives, measured values and
  decision from the CR's status (``escaler.sloapi.observed``), read-only.
* ``LLMRoutePatch`` / ``JobRoutePatch``: the ``PUT`` body, a JSON merge patch (RFC 7396) —
  every field optional, ``null`` removes an optional one.
* ``ErrorResponse``: every error, ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from escaler.api.slo import BoundType, DeployType

__all__ = [
    "OTPS",
    "TTFT",
    "Bound",
    "Bounds",
    "ErrorDetail",
    "ErrorResponse",
    "JobRoute",
    "JobRoutePatch",
    "LLMRoute",
    "LLMRoutePatch",
    "OTPSPatch",
    "Observed",
    "ObservedDecision",
    "ObservedObjective",
    "ObservedReady",
    "Probe",
    "Queue",
    "QueuePatch",
    "RouteKind",
    "RouteList",
    "RouteSummary",
    "TTFTPatch",
]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class RouteKind(StrEnum):
    LLM = "llm"
    JOB = "job"


class Bound(_Wire):
    type: BoundType = Field(description="replica | concurrency | pdengine (LLM, deployType pd only).")
    value: int = Field(ge=0, description="The bound in units of type; 0 scales to zero.")


class Bounds(_Wire):
    min: Bound
    max: Bound


class TTFT(_Wire):
    target_ms: float = Field(gt=0)
    percentile: float = Field(default=90, gt=0, le=100)
    promql: str = Field(min_length=1, max_length=4096)


class OTPS(_Wire):
    target: float = Field(gt=0)
    promql: str = Field(min_length=1, max_length=4096)


class Queue(_Wire):
    max_depth: int = Field(ge=1)
    promql: str = Field(min_length=1, max_length=4096)


class ObservedObjective(_Wire):
    signal: str = Field(description="The decision engine's signal key: ttftMs, otps or queueDepth.")
    objective: str = Field(description="The objective in words, e.g. 'TTFT p90 <= 500 ms'.")
    measured: str | None = Field(description="The value the last decision was computed from, named and "
                                 "with its unit ('TTFT p90 612 ms'); null when there is none (no status "
                                 "yet, or the signal could not be read).")


class ObservedDecision(_Wire):
    replicas: int | None = Field(description="The decided replica count.")
    reason: str = Field(description="Why, in the engine's words.")
    time: str = Field(description="When the decision was computed (RFC 3339).")


class ObservedReady(_Wire):
    status: str = Field(description="True, False or Unknown.")
    reason: str
    message: str


class Observed(_Wire):
    """What the decision engine observed of the route (its status), read-only."""

    objectives: list[ObservedObjective]
    decision: ObservedDecision | None = Field(description="null: the engine has written none yet.")
    ready: ObservedReady | None = Field(description="The Ready condition; null: no status yet.")


OBSERVED_DESCRIPTION = "Read-only: the objectives, the latest measured values and the engine's decision."


class RouteSummary(_Wire):
    namespace: str = Field(description="The namespace of the route's SLO requirement: a route is a "
                           "serviceId within its namespace.")
    route: str
    kind: RouteKind
    high_priority: bool
    bounds: Bounds | None
    observed: Observed = Field(description=OBSERVED_DESCRIPTION)


class RouteList(_Wire):
    routes: list[RouteSummary]


class LLMRoute(_Wire):
    route: str
    kind: RouteKind = Field(description="Always llm.")
    high_priority: bool
    concurrency_per_replica: int = Field(ge=1)
    deploy_type: DeployType = Field(description="Read-only on the SLO API.")
    ttft: TTFT | None = None
    otps: OTPS | None = None
    bounds: Bounds | None
    observed: Observed = Field(description=OBSERVED_DESCRIPTION)


class JobRoute(_Wire):
    route: str
    kind: RouteKind = Field(description="Always job.")
    high_priority: bool
    concurrency_per_replica: int = Field(ge=1)
    queue: Queue
    bounds: Bounds | None
    observed: Observed = Field(description=OBSERVED_DESCRIPTION)


class BoundPatch(_Wire):
    type: BoundType | None = None
    value: int | None = Field(default=None, ge=0)


class BoundsPatch(_Wire):
    min: BoundPatch | None = None
    max: BoundPatch | None = None


class TTFTPatch(_Wire):
    target_ms: float | None = Field(default=None, gt=0)
    percentile: float | None = Field(default=None, gt=0, le=100)
    promql: str | None = Field(default=None, min_length=1, max_length=4096,
                               description="Left out: the stored query is kept.")


class OTPSPatch(_Wire):
    target: float | None = Field(default=None, gt=0)
    promql: str | None = Field(default=None, min_length=1, max_length=4096,
                               description="Left out: the stored query is kept.")


class QueuePatch(_Wire):
    max_depth: int | None = Field(default=None, ge=1)
    promql: str | None = Field(default=None, min_length=1, max_length=4096,
                               description="Left out: the stored query is kept.")


class LLMRoutePatch(_Wire):
    """A JSON merge patch of an LLM route; route, kind and deployType only with their current value."""

    high_priority: bool | None = None
    concurrency_per_replica: int | None = Field(default=None, ge=1)
    ttft: TTFTPatch | None = Field(default=None, description="null removes the objective.")
    otps: OTPSPatch | None = Field(default=None, description="null removes the objective.")
    bounds: BoundsPatch | None = Field(default=None, description="null removes the bounds.")


class JobRoutePatch(_Wire):
    """A JSON merge patch of a job route; queue cannot be removed."""

    high_priority: bool | None = None
    concurrency_per_replica: int | None = Field(default=None, ge=1)
    queue: QueuePatch | None = Field(default=None, description="Required by the CRD: null is refused.")
    bounds: BoundsPatch | None = Field(default=None, description="null removes the bounds.")


class ErrorDetail(_Wire):
    code: str = Field(description="invalid_request, unauthorized, forbidden, not_found, conflict, "
                                  "payload_too_large, upstream_error, unavailable, ...")
    message: str


class ErrorResponse(_Wire):
    error: ErrorDetail


class Probe(_Wire):
    status: str
