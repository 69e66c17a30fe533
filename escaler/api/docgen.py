"""The per-kind reference (Markdown) generated from the models, so it cannot drift from them.

``render_reference(conditions, annotations) -> dict[file name, text]``: one page per kind of
``KINDS`` (``elasticscaler.md``, ``tidal.md``, ...) plus ``README.md`` (the index) and, when the
caller renders it, ``annotations.md`` (the scaler annotations: ``escaler.cli.annotationdocs``, from
``escaler.scaling.annotations.ANNOTATIONS``, a layer this module may not import), every page
starting with ``HEADER`` (generated, do not edit). A kind's page holds:

* the identity: apiVersion, short names, scope, subresources, the webhook path, the sample in
  ``manifests/samples/`` and the ``kubectl get`` columns (``registry.KindInfo``);
* **every field** of ``spec`` and ``status``, one table row each: the path (``[]`` for a list item,
  ``{key}`` for a map value), the type, the default, the constraints (required, enum, bounds,
  lengths, pattern, item counts, list-map keys) and the description — read from the structural
  OpenAPI schema ``crdgen.openapi_schema`` writes into the CRD, i.e. from the same source the
  API server and ``kubectl explain`` use;
* **every validation rule** (``RULES`` of each model reachable from the kind): where it is declared
  and reported, its message, its CEL text, the ``metav1.CauseType`` and whether its Python twin
  (``rules.validate``) also runs at reconcile time or only at admission (``admission_only``);
* **the conditions**: every type and reason with when it is set and what to do, and the health
  rule — given by the caller as ``ConditionDocs`` (the reasons are the reconcilers' constants, a
  layer this pure module may not import; ``escaler.cli.conditiondocs`` builds them and a unit
  test checks they cover exactly the reasons the code writes).

Guarantees: pure (no I/O, no clock); deterministic (kinds in ``KINDS`` order, fields in schema
order, rules in declaration order), so a unit test can keep ``docs/reference/`` equal to this
output. ``DocError`` is raised when a model and its schema disagree (a rule on the schema that is
not the model's), rather than document either one wrongly.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escaler.api.common import KubeModel
from escaler.api.crdgen import openapi_schema
from escaler.api.registry import KINDS, KindInfo
from escaler.api.rules import Rule, render_field_path

__all__ = [
    "ANNOTATIONS_PAGE",
    "HEADER",
    "REFRESH_COMMAND",
    "ConditionDocs",
    "DocError",
    "FieldRow",
    "ReasonDoc",
    "RuleRow",
    "field_rows",
    "markdown_table",
    "page_name",
    "render_kind",
    "render_reference",
    "rule_rows",
]

REFRESH_COMMAND = "python -m escaler docs --out docs/reference"
HEADER = (
    "<!-- Generated from escaler/api, the reconcilers' condition constants and escaler/scaling/annotations.py"
    f" by `{REFRESH_COMMAND}`; do not edit. -->\n"
)
# the reference's index page
INDEX = "README.md"
# the annotations page (rendered by the caller: the annotations are escaler.scaling's, above this layer)
ANNOTATIONS_PAGE = "annotations.md"


class DocError(ValueError):
    """A model and its generated schema disagree; the reference would be wrong."""


@dataclass(frozen=True)
class ReasonDoc:
    """One (condition type, status, reason) a reconciler writes."""

    # condition type, e.g. AbleToScale
    type: str
    # "True", "False", "Unknown" or several joined by " / " (a mirrored condition)
    status: str
    # the reason constant's value, e.g. TargetNotFound
    reason: str
    # when it is set (Markdown, one line)
    when: str
    # what a user does about it (Markdown, one line; "" when nothing is needed)
    action: str = ""


@dataclass(frozen=True)
class ConditionDocs:
    """The conditions section of one kind's page."""

    # the condition types, in status order, each with its one-line meaning
    types: tuple[tuple[str, str], ...]
    # every reason, grouped by type in ``types`` order
    reasons: tuple[ReasonDoc, ...]
    # the health rule: how Ready / failing / waiting is decided (Markdown paragraphs)
    health: str
    # further rules (precedence, what a target error touches, ...): Markdown bullet items
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FieldRow:
    """One field of a kind, as the reference tables show it."""

    path: str
    type: str
    default: str
    constraints: str
    description: str


@dataclass(frozen=True)
class RuleRow:
    """One cross-field rule, where it is declared and where the API server reports it."""

    # the path of the object the rule's ``self`` is bound to ("spec", "spec.rules[]")
    declared_on: str
    # the model class declaring it (its ``RULES``), for the Python twin
    model: str
    # the path the refusal names
    reported_at: str
    rule: Rule


# --------------------------------------------------------------------------- fields


def _type_of(node: Mapping[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = node.get("type")
    if kind == "array":
        return f"[]{_type_of(node.get('items', {}))}"
    if kind == "object" or node.get("x-kubernetes-preserve-unknown-fields"):
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            return f"map[string]{_type_of(extra)}"
        if "properties" in node:
            return "object"
        return "object (any fields)"
    fmt = node.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _bound(node: Mapping[str, Any], key: str, strict: str, loose: str) -> str | None:
    if key not in node:
        return None
    exclusive = node.get("exclusiveMinimum" if key == "minimum" else "exclusiveMaximum") is True
    return f"{strict if exclusive else loose} {_num(node[key])}"


def _num(value: Any) -> str:
    return json.dumps(value)


def _range(low: Any, high: Any, unit: str) -> str | None:
    if low is None and high is None:
        return None
    if high is None:
        return f"{unit} >= {low}"
    if low is None:
        return f"{unit} <= {high}"
    return f"{unit} {low}..{high}"


def _constraints(node: Mapping[str, Any], required: bool) -> list[str]:
    out: list[str] = ["**required**"] if required else []
    if "enum" in node:
        out.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, strict, loose in (("minimum", ">", ">="), ("maximum", "<", "<=")):
        bound = _bound(node, key, strict, loose)
        if bound:
            out.append(bound)
    for low, high, unit in (
        ("minLength", "maxLength", "length"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "keys"),
    ):
        text = _range(node.get(low), node.get(high), unit)
        if text:
            out.append(text)
    if "pattern" in node:
        out.append(f"pattern `{node['pattern']}`")
    if node.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(f"`{k}`" for k in node.get("x-kubernetes-list-map-keys", ()))
        out.append(f"one item per {keys}")
    for key, what in (("items", "each item"), ("additionalProperties", "each value")):
        inner = node.get(key)
        # a scalar element has no rows of its own: its constraints are shown here
        if isinstance(inner, Mapping) and "properties" not in inner:
            shown = _constraints(inner, False)
            if shown:
                out.append(f"{what}: " + ", ".join(shown))
    return out


def _default(node: Mapping[str, Any]) -> str:
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'], separators=(',', ':'))}`"


def _walk_fields(node: Mapping[str, Any], path: str) -> Iterator[FieldRow]:
    required = set(node.get("required", ()))
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}"
        yield FieldRow(
            path=child_path,
            type=_type_of(child),
            default=_default(child),
            constraints="; ".join(_constraints(child, name in required)),
            description=_prose(" ".join(str(child.get("description", "")).split())),
        )
        yield from _walk_nested(child, child_path)


def _walk_nested(node: Mapping[str, Any], path: str) -> Iterator[FieldRow]:
    if "properties" in node:
        yield from _walk_fields(node, path)
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _walk_nested(items, f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        yield from _walk_nested(extra, f"{path}" + "{key}")


def field_rows(info: KindInfo, section: str) -> list[FieldRow]:
    """Every field under ``section`` (``"spec"`` or ``"status"``) of ``info``'s kind, depth first; the
    first row is ``section`` itself."""
    root = openapi_schema(info)["properties"][section]
    return [
        FieldRow(row.path.lstrip("."), row.type, row.default, row.constraints, row.description)
        for row in _walk_fields({"properties": {section: root}}, "")
    ]


# --------------------------------------------------------------------------- rules


def _models_in(annotation: Any) -> list[type[KubeModel]]:
    """The KubeModel classes an annotation holds (through Optional, unions, lists, dicts, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, KubeModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict, Sequence, Mapping):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _child_path(path: str, annotation: Any, name: str) -> str:
    origin = typing.get_origin(annotation)
    while origin in (typing.Union, types.UnionType, typing.Annotated):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
        origin = typing.get_origin(annotation)
    suffix = "[]" if origin in (list, tuple, Sequence) else "{key}" if origin in (dict, Mapping) else ""
    return f"{path}.{name}{suffix}" if path else f"{name}{suffix}"


def _walk_rules(model: type[KubeModel], path: str, out: list[RuleRow], seen: set[tuple[str, str]]) -> None:
    key = (path, model.__qualname__)
    if key in seen:
        return
    seen.add(key)
    for rule in model.RULES:
        out.append(RuleRow(path, model.__name__, path + render_field_path(rule.field_path or ""), rule))
    for name, info in model.model_fields.items():
        alias = info.alias or name
        for child in _models_in(info.annotation):
            _walk_rules(child, _child_path(path, info.annotation, alias), out, seen)


def rule_rows(info: KindInfo) -> list[RuleRow]:
    """Every cross-field rule of ``info``'s kind, depth first in field order (spec before status).

    Raises ``DocError`` when the rules do not match the ``x-kubernetes-validations`` of the CRD."""
    out: list[RuleRow] = []
    _walk_rules(info.model, "", out, set())
    _check_against_schema(info, out)
    return out


def _schema_rules(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for rule in node.get("x-kubernetes-validations", ()):
        yield path, rule
    for name, child in node.get("properties", {}).items():
        yield from _schema_rules(child, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), Mapping):
        yield from _schema_rules(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _schema_rules(node["additionalProperties"], f"{path}" + "{key}")


def _check_against_schema(info: KindInfo, rows: Sequence[RuleRow]) -> None:
    schema = openapi_schema(info)
    in_schema = sorted((p, json.dumps(r, sort_keys=True)) for p, r in _schema_rules(schema, ""))
    in_models = sorted((r.declared_on, json.dumps(r.rule.to_schema(), sort_keys=True)) for r in rows)
    if in_schema != in_models:
        raise DocError(f"{info.kind}: the models' RULES and the CRD's x-kubernetes-validations differ")


# --------------------------------------------------------------------------- rendering


def page_name(info: KindInfo) -> str:
    """``elasticscaler.md``: a kind's page in the reference."""
    return f"{info.kind.lower()}.md"


def _prose(text: str) -> str:
    """Model text (a description, a rule's message) as Markdown prose: ``<zone>`` must not read as HTML."""
    return text.replace("<", "&lt;")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _identity(info: KindInfo) -> str:
    subresources = ["status"] if info.status_subresource else []
    if info.scale is not None:
        s = info.scale
        subresources.append(
            f"scale (`{s.spec_replicas_path}`, `{s.status_replicas_path}`"
            + (f", selector `{s.label_selector_path}`)" if s.label_selector_path else ")")
        )
    sample = f"manifests/samples/{info.kind.lower()}.yaml"
    rows = [
        ("apiVersion", f"`{info.api_version}`"),
        ("kind", f"`{info.kind}`"),
        ("scope", "Namespaced" if info.namespaced else "Cluster"),
        ("short names", ", ".join(f"`{n}`" for n in info.short_names)),
        ("categories", ", ".join(f"`{c}`" for c in info.categories) + " (`kubectl get escaler` lists it)"),
        ("subresources", ", ".join(subresources)),
        ("CRD", f"`manifests/crds/{info.crd_name}.yaml`"),
        ("sample", f"[`{sample}`](../../{sample})"),
        ("admission webhook path", f"`{info.webhook_path}`"),
    ]
    return markdown_table(("", ""), rows)


def _columns(info: KindInfo) -> str:
    rows = [
        (f"`{c.name}`", f"`{c.json_path}`", _prose(c.description) + (" (`-o wide`)" if c.priority else ""))
        for c in info.printer_columns
    ]
    return markdown_table(("column", "JSONPath", "meaning"), rows)


def _fields(info: KindInfo, section: str) -> str:
    rows = [(f"`{r.path}`", f"`{r.type}`", r.default, r.constraints, r.description)
            for r in field_rows(info, section)]
    return markdown_table(("field", "type", "default", "constraints", "description"), rows)


def _rules(info: KindInfo) -> str:
    rows = rule_rows(info)
    if not rows:
        return "No cross-field rules: the schema's types, enums and bounds above are the whole check.\n"
    parts: list[str] = []
    for i, row in enumerate(rows, 1):
        r = row.rule
        cause = r.reason or "FieldValueInvalid"
        twin = (
            "at admission only (CEL and the webhook); the reconciler reports this case itself"
            if r.admission_only
            else "at admission (CEL and the webhook) and at reconcile time (`InvalidSpec`)"
        )
        parts.append(
            f"{i}. **`{row.reported_at or info.kind}`**: {_prose(r.message)}\n\n"
            f"   Declared on `{row.declared_on}` (`{row.model}.RULES`, Python twin run by "
            f"`escaler.api.rules.validate`); checked {twin}; cause `{cause}`.\n\n"
            f"   ```cel\n   {r.rule}\n   ```\n"
        )
    return "\n".join(parts)


def _conditions(docs: ConditionDocs) -> str:
    types_table = markdown_table(("type", "meaning"), [(f"`{t}`", meaning) for t, meaning in docs.types])
    reasons_table = markdown_table(
        ("type", "status", "reason", "when it is set", "what to do"),
        [(f"`{r.type}`", r.status, f"`{r.reason}`", r.when, r.action) for r in docs.reasons],
    )
    notes = "".join(f"* {n}\n" for n in docs.notes)
    notes_block = f"\n### Rules\n\n{notes}" if notes else ""
    return (
        f"{types_table}\n### Reasons\n\n{reasons_table}{notes_block}\n"
        f"### Health rule\n\n{docs.health.strip()}\n"
    )


def render_kind(info: KindInfo, conditions: ConditionDocs) -> str:
    """The reference page of one kind (see the module docstring)."""
    title = _prose((info.model.__doc__ or "").strip().splitlines()[0]) if info.model.__doc__ else ""
    return (
        f"{HEADER}\n# {info.kind}\n\n{title}\n\n{_identity(info)}\n"
        f"`kubectl get {info.short_names[0]}` columns:\n\n{_columns(info)}\n"
        f"## Spec\n\n{_fields(info, 'spec')}\n"
        f"## Status\n\n{_fields(info, 'status')}\n"
        "## Validation rules\n\n"
        "Single-field constraints (types, enums, bounds, lengths, patterns) are in the tables above and "
        "in the CRD's schema. The cross-field rules below are CEL `x-kubernetes-validations` in the "
        "CRD, so the API server refuses a violating object even without the webhook; each has a Python "
        "twin with the same message, run by the validating webhook and by the reconciler. The webhook "
        "adds what CEL cannot check (registered algorithms, `--allowed-endpoint-hosts`, the tz database "
        "for schedules, annotations): see `escaler/webhook/checks.py`.\n\n"
        f"{_rules(info)}\n"
        f"## Conditions\n\n{_conditions(conditions)}"
    )


def _index(conditions: Mapping[str, ConditionDocs], annotations: bool) -> str:
    rows = []
    for info in KINDS.values():
        reasons = ", ".join(sorted({f"`{r.reason}`" for r in conditions[info.kind].reasons}))
        rows.append((f"[{info.kind}]({page_name(info)})", f"`{info.api_version}`",
                     ", ".join(f"`{n}`" for n in info.short_names), reasons))
    return (
        f"{HEADER}\n# escaler API reference\n\n"
        "One page per kind, generated from the pydantic models in `escaler/api/` (the same source as "
        "the CRDs in `manifests/crds/` and `kubectl explain`) and from the condition reasons the "
        "reconcilers define: every spec and status field, every validation rule (CEL and its Python "
        "twin), every condition reason with when it is set and what to do, and the health rule.\n\n"
        f"Regenerate with `{REFRESH_COMMAND}`; `tests/unit/test_reference_docs.py` fails when these "
        "pages differ from the models.\n\n"
        f"{markdown_table(('kind', 'apiVersion', 'short names', 'condition reasons'), rows)}"
        + (f"\nThe scaler annotations (`elasticscaler.io/paused`, `elasticscaler.io/metrics.*`, "
           f"`elasticscaler.io/behavior.*`: values, defaults, who reads them and what an invalid value "
           f"does) are in [{ANNOTATIONS_PAGE}]({ANNOTATIONS_PAGE}), generated from the table the "
           f"annotation parser reads.\n" if annotations else "")
    )


def render_reference(conditions: Mapping[str, ConditionDocs],
                     annotations: str | None = None) -> dict[str, str]:
    """File name → Markdown for every kind's page and the index (``README.md``), in ``KINDS`` order,
    and ``annotations`` (the annotations page, starting with ``HEADER``) as ``ANNOTATIONS_PAGE``,
    linked from the index, when given.

    ``conditions`` maps every kind name of ``KINDS`` to its ``ConditionDocs``; a missing kind is a
    ``DocError``, and so is an annotations page without the header."""
    missing = [k for k in KINDS if k not in conditions]
    if missing:
        raise DocError(f"no condition docs for {', '.join(missing)}")
    if annotations is not None and not annotations.startswith(HEADER):
        raise DocError(f"the {ANNOTATIONS_PAGE} page does not start with the generated-file header")
    pages = {page_name(info): render_kind(info, conditions[info.kind]) for info in KINDS.values()}
    extra = {ANNOTATIONS_PAGE: annotations} if annotations is not None else {}
    return {INDEX: _index(conditions, annotations is not None), **pages, **extra}
