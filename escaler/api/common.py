"""Building blocks shared by every kind: the model base, wire types, ``TargetRef``, ``Mode``.

Contract of ``KubeModel`` (the base of every model in ``escaler.api``):

* **Names.** Python attributes are snake_case; the JSON/YAML names are camelCase, derived by
  ``camel`` (a trailing underscore is dropped, so ``from_`` is ``from``). Both names are
  accepted when parsing; dumps use the JSON names.
* **Unknown fields are kept** (``extra="allow"``): a field this version does not know, at any
  level, survives ``parse`` → ``to_object``, so a controller older than the CRD in the cluster
  never drops data on a write.
* **The one dump call** is ``to_object()`` = ``model_dump(mode="json", by_alias=True,
  exclude_none=True)``: JSON names, JSON types (times as RFC 3339 ``...Z`` strings, seconds
  precision like ``metav1.Time``), ``None`` meaning *absent*. Model defaults are written out;
  they are the CRD's defaults (``crdgen`` generates those from the same fields), so the result
  is what the API server would store anyway. To clear a field, set it to ``None``.
* **Cross-field rules** are declared in ``RULES`` (see ``escaler.api.rules``); parsing does
  not enforce them, so an object stored before a rule existed still parses and a reconciler
  can report it as ``InvalidSpec``. Single-field constraints (enums, minimum, lengths) are
  enforced by parsing and by the CRD schema alike.

This module imports only pydantic and the standard library.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from escaler.api.quantity import parse_quantity
from escaler.api.rules import Rule, cel_matches

__all__ = [
    "MODE_DESCRIPTION",
    "QUANTITY_MAX_LENGTH",
    "QUANTITY_PATTERN",
    "URL_PATTERN",
    "URL_RULE_PATTERN",
    "KubeModel",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Mode",
    "Quantity",
    "TargetRef",
    "Time",
    "camel",
    "is_positive_quantity",
    "positive_quantity_rule",
    "url_rule",
]


def camel(name: str) -> str:
    """``min_replicas`` → ``minReplicas``; a trailing ``_`` (for Python keywords) is dropped."""
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _add_rules(schema: dict[str, Any], cls: type[Any]) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "RULES", ())
    if rules:
        schema["x-kubernetes-validations"] = [r.to_schema() for r in rules]


class KubeModel(BaseModel):
    """Base of every API model; see the module docstring."""

    model_config = ConfigDict(
        extra="allow",
        alias_generator=camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        json_schema_extra=_add_rules,
    )

    # cross-field rules of this model (CEL for the CRD, Python for ``validate``)
    RULES: ClassVar[tuple[Rule, ...]] = ()

    def to_object(self) -> dict[str, Any]:
        """The JSON form to send to the API server (the only dump call reconcilers use)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# A metav1.Time: an aware datetime in Python, RFC 3339 in UTC with seconds precision on the wire.
Time = Annotated[AwareDatetime, AfterValidator(_utc), PlainSerializer(_rfc3339, when_used="json")]

# resource.Quantity's serialized form (the pattern controller-gen emits).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)
# Longest quantity string accepted; also bounds the CEL cost of the rules that read a quantity.
QUANTITY_MAX_LENGTH = 64


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"a quantity is at most {QUANTITY_MAX_LENGTH} characters")
    if isinstance(value, str) and not _QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a quantity (e.g. 4, 500m, 1.5, 2Gi)")
    return value


# A resource.Quantity: an integer or a quantity string ("4", "500m", "2Gi"), kept as written.
Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": QUANTITY_MAX_LENGTH,
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


def is_positive_quantity(value: object) -> bool:
    """True for an integer > 0 or a quantity string whose value is > 0 (``"500m"``, ``"4"``); False
    for zero, a negative value, or a string ``resource.ParseQuantity`` refuses: the Python twin of
    ``type(v) == int ? v > 0 : (isQuantity(v) && quantity(v).isGreaterThan(quantity('0')))``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value > 0
    if not isinstance(value, str):
        return False
    try:
        return parse_quantity(value) > 0
    except ValueError:
        return False


def positive_quantity_rule(field: str, attr: str) -> Rule:
    """``field`` (an optional ``Quantity``), when set, is greater than 0."""
    v = f"self.{field}"
    return Rule(
        rule=f"!has({v}) || (type({v}) == int ? {v} > 0 : "
        f"(isQuantity({v}) && quantity({v}).isGreaterThan(quantity('0'))))",
        message=f"{field} must be a quantity greater than 0",
        check=lambda m: getattr(m, attr) is None or is_positive_quantity(getattr(m, attr)),
        field_path=f".{field}",
    )


# An http(s) URL with a host (endpoints, provider URLs); the webhook checks hosts against
# --allowed-endpoint-hosts.
URL_PATTERN = r"^https?://[^\s/]+(/\S*)?$"

# What CEL checks of an endpoint URL beyond URL_PATTERN (escaler.scaling.endpoints is the full
# rule, in the webhook and the collectors): a host (a DNS name, an IPv4 or a bracketed IPv6
# literal), no user-info, an optional port in 1..65535. RE2 and Python read it alike.
_PORT = (
    "6553[0-5]|655[0-2][0-9]|65[0-4][0-9][0-9]|6[0-4][0-9][0-9][0-9]|[1-5][0-9][0-9][0-9][0-9]"
    "|[1-9][0-9]?[0-9]?[0-9]?"
)
URL_RULE_PATTERN = rf"^https?://([A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])(:({_PORT}))?([/?#].*)?$"


def url_rule(field: str, attr: str, *, optional: bool = False) -> Rule:
    """``field`` is an http(s) URL naming a host, without credentials, with a valid port."""
    v = f"self.{field}"
    test = f"{v}.matches(r'{URL_RULE_PATTERN}')"
    return Rule(
        rule=f"!has({v}) || {test}" if optional else test,
        message=f"{field} must be an http(s) URL naming a host (a DNS name or an IP address), with an "
        "optional port in 1..65535 and no user:password@",
        check=lambda m: getattr(m, attr) is None or cel_matches(URL_RULE_PATTERN, getattr(m, attr)),
        field_path=f".{field}",
    )


class Mode(StrEnum):
    """Whether a scaler writes the target (``Active``) or only reports (``Advisory``)."""

    ACTIVE = "Active"
    ADVISORY = "Advisory"


MODE_DESCRIPTION = (
    "Active (default) writes the computed replica count to the target. Advisory computes and "
    "reports everything (status, events, metrics, `escaler explain`) but never writes the "
    "target: a dry run to compare escaler's decisions with the autoscaler in charge today."
)


class TargetRef(KubeModel):
    """A reference to an object in the same namespace."""

    api_version: str = Field(
        min_length=1,
        max_length=253,
        description="API version of the referent, e.g. apps/v1 or leaderworkerset.x-k8s.io/v1.",
    )
    kind: str = Field(min_length=1, max_length=63, description="Kind of the referent, e.g. Deployment.")
    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the referent, in the same namespace as this object.",
    )


class LabelSelectorRequirement(KubeModel):
    """A label selector requirement: a key, an operator and values."""

    key: str = Field(description="The label key that the selector applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] | None = Field(
        default=None, description="Values for In and NotIn (non-empty); empty for Exists and DoesNotExist."
    )


class LabelSelector(KubeModel):
    """A label query over a set of series or objects (metav1.LabelSelector)."""

    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels that must match exactly (ANDed with matchExpressions)."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, description="Label selector requirements (ANDed)."
    )
