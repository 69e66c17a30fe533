"""The committed CRDs (``manifests/crds/``) as the API server alone applies them, without the webhook.

Contract checked here (issue 8, item 11; docs/install.md#the-admission-webhook: the webhook is off by
default): every malformed object of ``api_cases.MALFORMED`` (at least 40, across all six kinds) is refused by
the CRD's OpenAPI schema or its CEL ``x-kubernetes-validations``, with an error naming the field path (and,
for a CEL rule, the rule's message); every sample is accepted; and for every object of
``REFUSED_BY_RULE`` the CEL rules fail with exactly the errors the Python twins report
(``escaler.api.validate(..., admission=True)``), so the two evaluators of each ``Rule`` agree.

How the API server is imitated, in-process:

* structural defaulting first (``api_cases.apply_defaults``), as the API server defaults before it
  validates;
* the schema: types (with ``x-kubernetes-int-or-string``), ``enum``, bounds, lengths, ``pattern``,
  item and property counts, ``required``;
* CEL: each rule is compiled and evaluated with ``cel-python`` (``celpy``), ``self`` bound to the
  node, at every node the object has (per list item, as the API server does). Kubernetes' own CEL
  libraries that the rules use are provided here: ``isQuantity``, ``quantity`` and ``sign`` (over
  ``escaler.api.quantity.parse_quantity``, which reads the grammar of
  ``resource.ParseQuantity``). A rule that evaluates to anything but ``true`` (false, or an
  evaluation error) refuses, as on the API server.

The real API server stays the final judge of the CEL text (its cost estimates, RE2 itself): the
e2e test ``tests/e2e/test_api.py::test_cel_and_schema_rules_enforced_by_the_api_server_alone``
replays the same table there.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from api_cases import (
    ACCEPTED,
    CRDS_DIR,
    MALFORMED,
    REFUSED_BY_RULE,
    Malformed,
    Refusal,
    apply_defaults,
    load_samples,
    mutate,
)
from celpy import celtypes

from escaler.api import parse, validate
from escaler.api.quantity import parse_quantity

SAMPLES = load_samples()
# (path, message) of one refusal, the path as the API server prints it (spec.rules[0].start)
Error = tuple[str, str]


def _crd_schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(CRDS_DIR).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


SCHEMAS = _crd_schemas()


# ---------------------------------------------------------------- Kubernetes' CEL quantity library


class _Quantity:
    """A parsed quantity (the value of ``quantity(s)``)."""

    def __init__(self, value: float) -> None:
        # the quantity's value; finite
        self.value = value


def _is_quantity(text: Any) -> celtypes.BoolType:
    if not isinstance(text, str):
        raise TypeError(f"isQuantity: no such overload for {type(text).__name__}")
    try:
        parse_quantity(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _quantity(text: Any) -> _Quantity:
    if not isinstance(text, str):
        raise TypeError(f"quantity: no such overload for {type(text).__name__}")
    return _Quantity(parse_quantity(str(text)))


def _is_greater_than(q: _Quantity, other: _Quantity) -> celtypes.BoolType:
    return celtypes.BoolType(q.value > other.value)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "isGreaterThan": _is_greater_than,
}
_ENV = celpy.Environment()


@cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule), functions=_FUNCTIONS)


def _cel_holds(rule: str, value: Any) -> bool:
    try:
        result = _program(rule).evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


# ---------------------------------------------------------------- the schema, as the API server reads it


def _type_ok(node: dict[str, Any], value: Any) -> bool:
    if node.get("x-kubernetes-int-or-string"):
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    want = node.get("type")
    if want == "object":
        return isinstance(value, dict)
    if want == "array":
        return isinstance(value, list)
    if want == "string":
        return isinstance(value, str)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if want == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return True  # x-kubernetes-preserve-unknown-fields


def _bounds(node: dict[str, Any], value: Any, path: str) -> Iterator[Error]:
    if "enum" in node and value not in node["enum"]:
        yield path, f"Unsupported value: {value!r}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and (value < low or (node.get("exclusiveMinimum") and value == low)):
            yield path, f"should be greater than (or equal to) {low}"
        if high is not None and (value > high or (node.get("exclusiveMaximum") and value == high)):
            yield path, f"should be less than (or equal to) {high}"
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0):
            yield path, f"should be at least {node['minLength']} chars long"
        if "maxLength" in node and len(value) > node["maxLength"]:
            yield path, f"may not be more than {node['maxLength']} bytes"
        if "pattern" in node and not re.search(node["pattern"], value):
            yield path, f"should match {node['pattern']!r}"
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0):
            yield path, f"should have at least {node['minItems']} items"
        if "maxItems" in node and len(value) > node["maxItems"]:
            yield path, f"must have at most {node['maxItems']} items"
    if isinstance(value, dict) and "maxProperties" in node and len(value) > node["maxProperties"]:
        yield path, f"must have at most {node['maxProperties']} items"


def _printed(field_path: str) -> str:
    """A rule's fieldPath as the API server prints it (ValidFieldPath): a map key ``['k']`` is ``[k]``."""
    return re.sub(r"\['([^']*)'\]", r"[\1]", field_path)


def _server_errors(node: dict[str, Any], value: Any, path: str) -> Iterator[Error]:
    """Schema errors first (as ``field.Error``s), then the CEL rules of this node, then its children."""
    if not _type_ok(node, value):
        yield path, f"Invalid value: must be of type {node.get('type')}"
        return
    yield from _bounds(node, value, path)
    if isinstance(value, dict):
        props = node.get("properties", {})
        for key in node.get("required", []):
            if key not in value:
                yield f"{path}.{key}".lstrip("."), "Required value"
        for key, sub in value.items():
            if key in props:
                yield from _server_errors(props[key], sub, f"{path}.{key}".lstrip("."))
            elif isinstance(node.get("additionalProperties"), dict):
                yield from _server_errors(node["additionalProperties"], sub, f"{path}[{key}]")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            yield from _server_errors(node["items"], item, f"{path}[{i}]")
    for rule in node.get("x-kubernetes-validations", []):
        if not _cel_holds(rule["rule"], value):
            where = path + _printed(rule.get("fieldPath", ""))
            yield where.lstrip("."), rule["message"]


def server_errors(kind: str, obj: dict[str, Any]) -> list[Error]:
    """Every error the API server alone reports for ``obj`` (metadata is not checked)."""
    return list(_server_errors_of(kind, json.dumps(obj, sort_keys=True)))


@cache
def _server_errors_of(kind: str, text: str) -> tuple[Error, ...]:
    # cel-python is slow (~0.1 s per object): both tables share objects, so evaluate each once
    schema = SCHEMAS[kind]
    obj = apply_defaults(schema, json.loads(text))
    body = {k: v for k, v in obj.items() if k in ("spec", "status")}
    return tuple(_server_errors({**schema, "required": ["spec"]}, body, ""))


def _rules(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for rule in node.get("x-kubernetes-validations", []):
        yield path, rule
    for key, sub in node.get("properties", {}).items():
        yield from _rules(sub, f"{path}.{key}")
    for sub_key in ("items", "additionalProperties"):
        if isinstance(node.get(sub_key), dict):
            yield from _rules(node[sub_key], f"{path}[]")


# ---------------------------------------------------------------- the tests


def test_the_table_spans_every_kind_and_at_least_40_objects() -> None:
    assert len(MALFORMED) >= 40
    assert {m.kind for m in MALFORMED} == set(SCHEMAS)
    assert len({m.id for m in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize("key", sorted(SAMPLES), ids=sorted(SAMPLES))
def test_samples_are_accepted(key: str) -> None:
    assert server_errors(key.split("/")[0], SAMPLES[key]) == []


@pytest.mark.parametrize("case", MALFORMED, ids=[m.id for m in MALFORMED])
def test_malformed_object_refused_by_the_api_server_alone(case: Malformed) -> None:
    errors = server_errors(case.kind, case.obj())
    assert errors, "accepted without the webhook"
    if case.message is None:
        assert case.path in [p for p, _ in errors], errors
    else:
        assert (case.path, case.message) in errors, errors


@pytest.mark.parametrize("case", REFUSED_BY_RULE, ids=[c.id for c in REFUSED_BY_RULE])
def test_cel_and_python_twins_report_the_same_errors(case: Refusal) -> None:
    kind = case.sample.split("/")[0]
    errors = server_errors(kind, case.obj())
    assert sorted(errors) == sorted(case.errors)


@pytest.mark.parametrize(("key", "changes"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted_by_cel_and_python_alike(key: str, changes: dict[str, Any]) -> None:
    obj = mutate(SAMPLES[key], changes)
    assert server_errors(key.split("/")[0], obj) == []
    assert validate(parse(obj), admission=True) == []


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_cel_rule_compiles(kind: str) -> None:
    for path, rule in _rules(SCHEMAS[kind]):
        assert _program(rule["rule"]) is not None, path


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        ("4", True),
        ("500m", True),
        (3, True),
        ("1e3", True),
        ("0", False),
        (0, False),
        ("-5", False),
        ("-500m", False),
        (-1, False),
        ("1e1.5", False),  # the CRD pattern admits it, resource.ParseQuantity does not
    ],
    ids=str,
)
def test_quantity_rule_reads_values_as_kubernetes_does(value: Any, holds: bool) -> None:
    rule = (
        "type(self.v) == int ? self.v > 0 : "
        "(isQuantity(self.v) && quantity(self.v).isGreaterThan(quantity('0')))"
    )
    assert _cel_holds(rule, {"v": value}) is holds
