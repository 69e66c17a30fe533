"""Cross-field validation rules: one declaration, two evaluators.

A ``Rule`` is declared on the model it constrains (``RULES`` class attribute, next to the
fields). It carries:

* ``rule``: a CEL expression, evaluated by the API server with ``self`` bound to the object the
  model describes. ``escaler.api.crdgen`` writes it into the CRD as an
  ``x-kubernetes-validations`` entry, so the API server refuses a violating object at admission.
* ``check``: the same rule as a Python predicate over the model instance. ``validate`` walks a
  parsed object and reports every failing rule, so that the webhook can refuse with the same
  words and a reconciler can report ``InvalidSpec`` for an object stored before a rule existed.
* ``message``: the refusal text (both evaluators use it verbatim; it names the field path).
* ``field_path``: where the API server reports the error, relative to ``self`` (a JSONPath such
  as ``.minReplicas``); ``None`` reports it on the object itself.
* ``reason``: the ``metav1.CauseType`` the API server reports (``FieldValueInvalid`` when unset).

Guarantee kept by the unit tests: every rule has a non-empty message, and the two evaluators
agree on every valid sample and on every refusal case in the tests' table. The API server is
the final judge of the CEL text itself (syntax and cost); ``make e2e`` applies the CRDs.

This module imports only pydantic and the standard library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["FieldError", "Rule", "validate"]

# FieldValueDuplicate is left out on purpose: the API server prints it as "Duplicate value" and
# drops the rule's message.
Reason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"]


@dataclass(frozen=True)
class Rule:
    """One cross-field rule; see the module docstring."""

    # CEL expression over ``self``; must be within the API server's cost budget
    rule: str
    # the refusal message; non-empty, names the offending field path
    message: str
    # the Python twin of ``rule``: returns True when the object satisfies it
    check: Callable[[Any], bool]
    # JSONPath relative to ``self`` where the error is reported, e.g. ".minReplicas"
    field_path: str | None = None
    # metav1.CauseType reported by the API server; None means FieldValueInvalid
    reason: Reason | None = None

    def to_schema(self) -> dict[str, Any]:
        """The ``x-kubernetes-validations`` entry for this rule."""
        out: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class FieldError:
    """A failed rule: ``path`` is the dotted field path (``spec.trigger``), as the API server prints it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def validate(model: BaseModel, path: str = "") -> list[FieldError]:
    """Every rule of ``model`` and of the models nested in it that fails, depth first.

    ``path`` is the field path of ``model`` itself (``""`` for a whole object, so that errors
    read ``spec.minReplicas``). Rules of an absent (``None``) sub-object are not evaluated, as
    the API server does not evaluate them either.
    """
    errors: list[FieldError] = []
    _walk(model, path, errors)
    return errors


def _walk(model: BaseModel, path: str, errors: list[FieldError]) -> None:
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        _walk_value(getattr(model, name), f"{path}.{key}" if path else key, errors)
    for rule in getattr(type(model), "RULES", ()):
        if not rule.check(model):
            where = path + (rule.field_path or "")
            errors.append(FieldError(where.lstrip("."), rule.message))


def _walk_value(value: Any, path: str, errors: list[FieldError]) -> None:
    if isinstance(value, BaseModel):
        _walk(value, path, errors)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk_value(item, f"{path}[{i}]", errors)
