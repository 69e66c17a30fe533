"""The two SLO requirement kinds the SLO API serves, and what a route of each kind may hold.

Contract:

* ``LLM`` (``LLMSLORequirement``) and ``JOB`` (``JobSLORequirement``), both
  ``llm.escaler.io/v1alpha1``, namespaced. ``KINDS`` lists them in the order the index and
  ``GET /config`` use.
* ``SLOKind.sections`` are the SLO objectives of a route (LLM: ``ttft``, ``otps``; job:
  ``queue``); ``optional_sections`` are the ones ``DELETE /config/namespaces/{namespace}/{route}``
  clears (a job route's ``queue`` is required by its CRD, so a job route has none).
* ``writable`` are the body fields a ``PUT`` may set on that kind; ``read_only`` fields are
  shown by ``GET`` and accepted in a ``PUT`` only with their current value; ``foreign`` are the
  fields of the *other* kind, refused with a message saying which kind takes them.
* Bound types per end (``min_bound_types``, ``max_bound_types``) follow docs/slo.md#bounds-in-replicas: an LLM
  bound is ``replica``, ``concurrency`` or ``pdengine``; a job's max is ``replica`` and its min
  ``replica`` or ``concurrency``. Cross-field rules (same type, min <= max, pdengine max != 1,
  pdengine only with ``deployType: pd``) stay with the API server's CEL, on the merged spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from escaler.api.slo import BoundType

__all__ = ["GROUP", "JOB", "KINDS", "LLM", "VERSION", "SLOKind"]

GROUP = "llm.escaler.io"
VERSION = "v1alpha1"

_ALL_BOUND_TYPES = (BoundType.REPLICA.value, BoundType.CONCURRENCY.value, BoundType.PDENGINE.value)


@dataclass(frozen=True)
class SLOKind:
    """One SLO requirement kind, as the SLO API sees it; immutable."""

    # "llm" | "job": the ``kind`` of a route in API bodies
    name: str
    # the Kubernetes kind, e.g. "LLMSLORequirement"
    kind: str
    # the plural resource name in URLs and RBAC
    plural: str
    # SLO objective sections of the route body
    sections: tuple[str, ...]
    # sections DELETE clears (a subset of sections)
    optional_sections: tuple[str, ...]
    # scalar body fields a PUT may set besides sections and bounds
    scalars: tuple[str, ...]
    # body fields shown but not writable (a PUT may repeat the current value)
    read_only: tuple[str, ...]
    # bound types allowed at each end
    min_bound_types: tuple[str, ...]
    max_bound_types: tuple[str, ...]

    def __post_init__(self) -> None:
        if not set(self.optional_sections) <= set(self.sections):
            raise ValueError(
                f"SLOKind.optional_sections: {self.optional_sections} not all in {self.sections}")

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{VERSION}"

    @property
    def writable(self) -> tuple[str, ...]:
        return (*self.scalars, *self.sections, "bounds")

    def path(self, namespace: str = "", name: str = "") -> str:
        """The REST path of the collection (all namespaces or one) or of one object."""
        base = f"/apis/{GROUP}/{VERSION}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


LLM = SLOKind(
    name="llm",
    kind="LLMSLORequirement",
    plural="llmslorequirements",
    sections=("ttft", "otps"),
    optional_sections=("ttft", "otps"),
    scalars=("highPriority", "concurrencyPerReplica"),
    read_only=("route", "kind", "deployType"),
    min_bound_types=_ALL_BOUND_TYPES,
    max_bound_types=_ALL_BOUND_TYPES,
)

JOB = SLOKind(
    name="job",
    kind="JobSLORequirement",
    plural="jobslorequirements",
    sections=("queue",),
    optional_sections=(),
    scalars=("highPriority", "concurrencyPerReplica"),
    read_only=("route", "kind"),
    min_bound_types=(BoundType.REPLICA.value, BoundType.CONCURRENCY.value),
    max_bound_types=(BoundType.REPLICA.value,),
)

KINDS: tuple[SLOKind, ...] = (LLM, JOB)
