"""escaler.api: pydantic models of every escaler kind, and the CRDs generated from them.

A pure bottom layer (docs/toolkit.md#the-packages): imports only pydantic, PyYAML (``crdgen``) and the
standard library; no kube client, no I/O.

* One module per kind: ``elasticscaler``, ``tidal``, ``rsg``, ``llmscaler``, ``slo``; shared
  pieces in ``common`` (model base, ``TargetRef``, quantities, times), ``meta`` (``ObjectMeta``,
  ``KubeObject``), ``conditions`` (``Condition``), ``scaler`` (the scaler status).
* Read: ``ElasticScaler.parse(obj)`` (or ``registry.parse(obj)`` for any kind). Write:
  ``model.to_object()``, the one dump call (see ``common``). Unknown fields survive both.
* Cross-field rules: ``rules.validate(model, admission=True)``, the Python twin of the CRDs' CEL
  rules (a reconciler calls it without ``admission`` and skips the few it reports itself).
* ``registry.KINDS``: kind → ``KindInfo`` (group, version, plural, short names, printer columns).
* ``crdgen.generate_crds()`` / ``render_crds_yaml()``: what ``manifests/crds/`` holds.
"""

from escaler.api.common import KubeModel, Mode, TargetRef
from escaler.api.conditions import Condition, ConditionStatus
from escaler.api.elasticscaler import ElasticScaler, ElasticScalerSpec, ElasticScalerStatus
from escaler.api.llmscaler import LLMScaler, LLMScalerSpec, LLMScalerStatus
from escaler.api.meta import KubeObject, ObjectMeta
from escaler.api.quantity import parse_quantity
from escaler.api.registry import KINDS, KindInfo, UnknownKind, lookup, parse
from escaler.api.rsg import ResourceScalingGroup, ResourceScalingGroupSpec, ResourceScalingGroupStatus
from escaler.api.rules import FieldError, Rule, validate
from escaler.api.scaler import MetricStatus, RecentDecision, ScalerStatus
from escaler.api.slo import (
    JobSLORequirement,
    JobSLORequirementSpec,
    LLMSLORequirement,
    LLMSLORequirementSpec,
    SLODecision,
    SLOStatus,
)
from escaler.api.tidal import Tidal, TidalSpec, TidalStatus

__all__ = [
    "KINDS",
    "Condition",
    "ConditionStatus",
    "ElasticScaler",
    "ElasticScalerSpec",
    "ElasticScalerStatus",
    "FieldError",
    "JobSLORequirement",
    "JobSLORequirementSpec",
    "KindInfo",
    "KubeModel",
    "KubeObject",
    "LLMSLORequirement",
    "LLMSLORequirementSpec",
    "LLMScaler",
    "LLMScalerSpec",
    "LLMScalerStatus",
    "MetricStatus",
    "Mode",
    "ObjectMeta",
    "RecentDecision",
    "ResourceScalingGroup",
    "ResourceScalingGroupSpec",
    "ResourceScalingGroupStatus",
    "Rule",
    "SLODecision",
    "SLOStatus",
    "ScalerStatus",
    "TargetRef",
    "Tidal",
    "TidalSpec",
    "TidalStatus",
    "UnknownKind",
    "lookup",
    "parse",
    "parse_quantity",
    "validate",
]
