"""``Condition``: the ``metav1.Condition`` shape every escaler status uses.

Same fields, required set and limits as ``metav1.Condition`` (type, status, observedGeneration,
lastTransitionTime, reason, message), so kubectl, ``kubectl wait --for=condition=...`` and
generic tooling read escaler conditions like any other. In the CRDs a conditions list is an
``x-kubernetes-list-type: map`` keyed by ``type`` (``conditions_field`` declares it): one
condition per type, merged per type by server-side apply.

Which types and reasons each kind writes, and when, is the reconcilers' contract
(docs/concepts.md#conditions-and-health); this module only fixes the shape.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from escaler.api.common import KubeModel, Time

__all__ = ["Condition", "ConditionStatus", "conditions_field"]


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """One aspect of the object's current state."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Type of condition in CamelCase, e.g. ScalingActive, AbleToScale, ScalingLimited.",
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="metadata.generation of the object when this condition was set; a value below the "
        "current generation means the condition is stale.",
    )
    last_transition_time: Time = Field(
        description="Last time the condition changed status (not merely its reason or message)."
    )
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase reason for the condition's last change, "
        "e.g. MetricsAvailable.",
    )
    message: str = Field(
        max_length=32768, description="Human-readable details about the last change; may be empty."
    )


def conditions_field(description: str) -> Any:
    """The ``conditions`` field of a status: a list-map keyed by ``type``, default empty."""
    return Field(
        default=[],
        description=description,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
