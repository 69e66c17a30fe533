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
  as ``.minReplicas``, or ``.algorithmConfig['tolerance']`` for a map key, which the API server
  prints as ``algorithmConfig[tolerance]``); ``None`` reports it on the object itself.
* ``reason``: the ``metav1.CauseType`` the API server reports (``FieldValueInvalid`` when unset).
* ``admission_only``: the rule guards admission (CEL, and the webhook's ``validate(...,
  admission=True)``) but is left out of ``validate(model)`` at reconcile time, because the
  reconciler reports that case more precisely itself (``scalingAlgorithm: HPA`` with an
  ExternalServer metric is ``Validated=False/UnsupportedMetric``, docs/guide/elasticscaler.md#the-triggers) or
  because refusing an object stored before the rule existed would stop a scaler that works
  (``algorithmConfig`` in HPA mode is ignored, not harmful).

Guarantee kept by the unit tests: every rule has a non-empty message, and the two evaluators
agree on every valid sample and on every refusal case in the tests' table (the CEL side is
evaluated in the unit suite with ``cel-python`` over the committed CRDs, and by the real API
server in ``tests/e2e/test_api.py``). The API server is the final judge of the CEL text itself
(syntax and cost); ``make e2e`` applies the CRDs.

Regular expressions in rules use only the syntax RE2 (CEL's ``matches``) and Python's ``re``
read alike (classes, groups, ``?``/``*``/``+``/``{m,n}``, anchors, escapes such as ``\\[``), and are
written in CEL raw strings (``r'...'``), so the Python twin runs the very same text through
``cel_matches`` (a search, as RE2's; ``$`` only at the very end of the text, as RE2's — Python's
would also match before a trailing newline). ``$`` appears in them only as that anchor.

This module imports only pydantic and the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["FieldError", "Rule", "cel_matches", "render_field_path", "validate"]

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
    # True: evaluated by CEL and by validate(..., admission=True) only (see the module docstring)
    admission_only: bool = False

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


def validate(model: BaseModel, path: str = "", *, admission: bool = False) -> list[FieldError]:
    """Every rule of ``model`` and of the models nested in it that fails, depth first.

    ``path`` is the field path of ``model`` itself (``""`` for a whole object, so that errors
    read ``spec.minReplicas``). Rules of an absent (``None``) sub-object are not evaluated, as
    the API server does not evaluate them either. ``admission=True`` (the webhook) evaluates
    every rule, as the API server does; the default (a reconciler) skips the ``admission_only``
    ones.
    """
    errors: list[FieldError] = []
    _walk(model, path, errors, admission)
    return errors


def cel_matches(pattern: str, text: str) -> bool:
    """CEL's ``text.matches(pattern)`` in Python: an unanchored RE2 search; see the module docstring."""
    return _compiled(pattern).search(text) is not None


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("$", r"\Z"))


def render_field_path(field_path: str) -> str:
    """A rule's ``fieldPath`` as the API server prints it: ``.a['k']`` (a map key) → ``.a[k]``."""
    return _QUOTED_KEY_RE.sub(r"[\1]", field_path)


_QUOTED_KEY_RE = re.compile(r"\['([^']*)'\]")


def _walk(model: BaseModel, path: str, errors: list[FieldError], admission: bool) -> None:
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        _walk_value(getattr(model, name), f"{path}.{key}" if path else key, errors, admission)
    for rule in getattr(type(model), "RULES", ()):
        if rule.admission_only and not admission:
            continue
        if not rule.check(model):
            where = path + render_field_path(rule.field_path or "")
            errors.append(FieldError(where.lstrip("."), rule.message))


def _walk_value(value: Any, path: str, errors: list[FieldError], admission: bool) -> None:
    if isinstance(value, BaseModel):
        _walk(value, path, errors, admission)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk_value(item, f"{path}[{i}]", errors, admission)
