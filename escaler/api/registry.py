"""``KINDS``: every escaler kind, with what the CRD generator, the webhook and the manager need.

``KINDS`` maps the kind name (``"ElasticScaler"``) to a frozen ``KindInfo``: the model class,
group/version/plural/singular/short names/categories, printer columns and the ``scale``
subresource paths (ResourceScalingGroup only). Insertion order is the documented order of
docs/concepts.md#the-kinds and is the order ``crdgen`` emits CRDs in.

``parse(obj)`` turns any escaler object dict into its typed model, by ``apiVersion``/``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from escaler.api.elasticscaler import ElasticScaler
from escaler.api.llmscaler import LLMScaler
from escaler.api.meta import KubeObject
from escaler.api.rsg import ResourceScalingGroup
from escaler.api.slo import JobSLORequirement, LLMSLORequirement
from escaler.api.tidal import Tidal

__all__ = [
    "CATEGORY",
    "KINDS",
    "KindInfo",
    "PrinterColumn",
    "ScaleSubresource",
    "UnknownKind",
    "lookup",
    "parse",
]

# kubectl get escaler lists every escaler object
CATEGORY = "escaler"


@dataclass(frozen=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str
    # 0 shows in plain ``kubectl get``; higher only with ``-o wide``
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class ScaleSubresource:
    """Paths of the ``scale`` subresource."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None

    def to_crd(self) -> dict[str, Any]:
        out = {"specReplicasPath": self.spec_replicas_path, "statusReplicasPath": self.status_replicas_path}
        if self.label_selector_path:
            out["labelSelectorPath"] = self.label_selector_path
        return out


@dataclass(frozen=True)
class KindInfo:
    """Everything about one kind outside its schema."""

    kind: str
    group: str
    version: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    model: type[KubeObject]
    printer_columns: tuple[PrinterColumn, ...]
    scale: ScaleSubresource | None = None
    categories: tuple[str, ...] = (CATEGORY,)
    # every escaler kind is namespaced (docs/concepts.md#the-kinds)
    namespaced: bool = True
    # every escaler kind has the status subresource (docs/concepts.md#the-kinds)
    status_subresource: bool = field(default=True)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``: the CRD's metadata.name."""
        return f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def webhook_path(self) -> str:
        """The validating webhook's path (docs/install.md#the-admission-webhook):
        ``/validate-<group with dashes>-<version>-<kind lower>``."""
        return f"/validate-{self.group.replace('.', '-')}-{self.version}-{self.kind.lower()}"


def _age() -> PrinterColumn:
    return PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")


def _condition(name: str, cond: str, attr: str, description: str) -> PrinterColumn:
    return PrinterColumn(name, "string", f'.status.conditions[?(@.type=="{cond}")].{attr}', description)


_SCALER_COLUMNS = (
    PrinterColumn(
        "Target", "string", ".spec.targetRef.name", "Name of the scaled workload (or state source)."
    ),
    PrinterColumn("Min", "integer", ".spec.minReplicas", "Lower bound of the replica count."),
    PrinterColumn("Max", "integer", ".spec.maxReplicas", "Upper bound of the replica count."),
    PrinterColumn(
        "Current", "integer", ".status.currentReplicas", "Replicas of the target at the last sync."
    ),
    PrinterColumn("Desired", "integer", ".status.desiredReplicas", "Replicas decided at the last sync."),
    _condition("Active", "ScalingActive", "status", "ScalingActive: a decision could be computed."),
    _condition("AbleToScale", "AbleToScale", "status", "AbleToScale: the target can be written."),
    _condition(
        "Scaling",
        "AbleToScale",
        "reason",
        "AbleToScale reason: Synced, a guard or stabilization holding, or why the target cannot be written.",
    ),
    _age(),
)

_SLO_COLUMNS = (
    PrinterColumn("Service", "string", ".spec.serviceId", "The route."),
    PrinterColumn("Replicas", "integer", ".status.decision.replicas", "Decided replica count."),
    PrinterColumn("Reason", "string", ".status.decision.reason", "Why."),
    _age(),
)

KINDS: dict[str, KindInfo] = {
    info.kind: info
    for info in (
        KindInfo(
            kind="ElasticScaler",
            group="elasticscaler.io",
            version="v1alpha1",
            plural="elasticscalers",
            singular="elasticscaler",
            short_names=("es",),
            model=ElasticScaler,
            printer_columns=_SCALER_COLUMNS,
        ),
        KindInfo(
            kind="Tidal",
            group="tidal.io",
            version="v1alpha1",
            plural="tidals",
            singular="tidal",
            short_names=("tidal",),
            model=Tidal,
            printer_columns=(
                PrinterColumn("Target", "string", ".spec.targetRef.name", "Name of the scheduled workload."),
                PrinterColumn("Desired", "integer", ".status.desiredReplicas", "Replica count in force now."),
                PrinterColumn("Active Rules", "string", ".status.activeRules", "Names of the active rules."),
                PrinterColumn(
                    "Next Transition", "string", ".status.nextTransitionTime",
                    "Next time a rule starts or ends (the controller re-evaluates exactly then).",
                ),
                _condition("Ready", "Ready", "status", "Ready: schedules valid and binding labels set."),
                _age(),
            ),
        ),
        KindInfo(
            kind="ResourceScalingGroup",
            group="autoscaling.openfuyao.com",
            version="v1alpha1",
            plural="resourcescalinggroups",
            singular="resourcescalinggroup",
            short_names=("rsg",),
            model=ResourceScalingGroup,
            printer_columns=(
                PrinterColumn("Strategy", "string", ".spec.strategy", "InplaceScaling or GroupReplication."),
                PrinterColumn("Groups", "integer", ".spec.replicas", "Desired number of groups."),
                PrinterColumn(
                    "Ready", "integer", ".status.readyReplicas", "Groups whose every member is ready."
                ),
                _age(),
            ),
            scale=ScaleSubresource(".spec.replicas", ".status.replicas", ".status.selector"),
        ),
        KindInfo(
            kind="LLMScaler",
            group="llm.escaler.io",
            version="v1alpha1",
            plural="llmscalers",
            singular="llmscaler",
            short_names=("llms",),
            model=LLMScaler,
            printer_columns=_SCALER_COLUMNS,
        ),
        KindInfo(
            kind="LLMSLORequirement",
            group="llm.escaler.io",
            version="v1alpha1",
            plural="llmslorequirements",
            singular="llmslorequirement",
            short_names=("llmslo",),
            model=LLMSLORequirement,
            printer_columns=_SLO_COLUMNS,
        ),
        KindInfo(
            kind="JobSLORequirement",
            group="llm.escaler.io",
            version="v1alpha1",
            plural="jobslorequirements",
            singular="jobslorequirement",
            short_names=("jobslo",),
            model=JobSLORequirement,
            printer_columns=_SLO_COLUMNS,
        ),
    )
}


class UnknownKind(ValueError):
    """The object is not of an escaler kind."""


def lookup(api_version: str, kind: str) -> KindInfo | None:
    """The ``KindInfo`` of ``apiVersion``/``kind``, or ``None`` when it is not an escaler kind."""
    info = KINDS.get(kind)
    return info if info is not None and info.api_version == api_version else None


def parse(obj: Mapping[str, Any]) -> KubeObject:
    """The typed model of any escaler object, chosen by its ``apiVersion`` and ``kind``.

    Raises ``UnknownKind`` for another kind and ``pydantic.ValidationError`` for a malformed object.
    """
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    info = lookup(api_version, kind)
    if info is None:
        raise UnknownKind(f"{api_version}/{kind} is not an escaler kind")
    return info.model.parse(obj)
