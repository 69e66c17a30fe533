"""CustomResourceDefinitions (``apiextensions.k8s.io/v1``) generated from the models.

The models are the one source of truth: this module turns each kind's pydantic JSON schema
into a *structural* OpenAPI v3 schema, as the API server requires:

* every ``$ref`` inlined; no ``title``; ``Optional`` fields are simply not ``required`` (the
  ``anyOf [X, null]`` pydantic emits is collapsed, and ``default: null`` dropped);
* ``additionalProperties`` only for maps; a model's own "extra fields allowed" is dropped, so
  the API server prunes fields the CRD does not know; a free-form map (``dict[str, Any]``)
  becomes ``x-kubernetes-preserve-unknown-fields: true``;
* the only ``anyOf`` left is a quantity's ``int-or-string`` (with ``x-kubernetes-int-or-string``);
* JSON Schema's numeric ``exclusiveMinimum``/``exclusiveMaximum`` become OpenAPI v3.0's boolean
  form next to ``minimum``/``maximum``;
* descriptions (``kubectl explain``), defaults, enums, bounds, patterns, ``format: date-time``,
  list-map markers and the CEL ``x-kubernetes-validations`` declared on the models pass through.

A field's own description wins over the description (docstring) of the model it refers to.
Output is deterministic: kinds in ``KINDS`` order, properties in field order, schema keywords in
a fixed order, so ``manifests/crds/`` diffs only when a model changes (a unit test keeps the
committed files equal to ``render_crds_yaml()``; regenerate them with ``make crds``).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from escaler.api.registry import KINDS, KindInfo

__all__ = ["HEADER", "crd_filename", "generate_crd", "generate_crds", "render_crds_yaml", "render_stream"]

HEADER = "# Generated from escaler/api by `python -m escaler crds`; do not edit (run `make crds`).\n"

_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values."
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase."
)

# schema keywords in the order they are written (unlisted keywords follow, sorted)
_KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "anyOf",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)


class SchemaError(ValueError):
    """A model produced a schema that cannot be made structural."""


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {k: i for i, k in enumerate(_KEY_ORDER)}
    return {k: node[k] for k in sorted(node, key=lambda k: (rank.get(k, len(rank)), k))}


def _structural(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    """One pydantic JSON-schema node → its structural form (recursively)."""
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = _structural(defs[name], defs, where)
        rules = target.get("x-kubernetes-validations", []) + node.pop("x-kubernetes-validations", [])
        node = {**target, **node}
        if rules:
            node["x-kubernetes-validations"] = rules
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        variants = [v for v in node.pop("anyOf") if v != {"type": "null"}]
        if len(variants) != 1:
            raise SchemaError(f"{where}: a union other than X | None or int | str cannot be structural")
        node = {**_structural(variants[0], defs, where), **node}
    node.pop("title", None)
    if node.get("default", 0) is None:
        del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(node.get(exclusive), int | float) and not isinstance(node[exclusive], bool):
            node[bound] = node[exclusive]
            node[exclusive] = True
    extra = node.pop("additionalProperties", None)
    if "properties" in node:
        props = node["properties"]
        node["properties"] = {k: _structural(v, defs, f"{where}.{k}") for k, v in props.items()}
        if not node["properties"]:
            del node["properties"]
    elif extra is True:
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, dict):
        node["additionalProperties"] = _structural(extra, defs, f"{where}[*]")
    if "items" in node:
        node["items"] = _structural(node["items"], defs, f"{where}[]")
    if "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaError(f"{where}: no type")
    return _ordered(node)


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one kind."""
    raw = info.model.model_json_schema(mode="validation", by_alias=True)
    defs = raw.pop("$defs", {})
    root = _structural(raw, defs, info.kind)
    props = root["properties"]
    return _ordered(
        {
            "description": root.get("description", ""),
            "type": "object",
            "properties": {
                "apiVersion": {"description": _API_VERSION_DESCRIPTION, "type": "string"},
                "kind": {"description": _KIND_DESCRIPTION, "type": "string"},
                "metadata": {"type": "object"},
                "spec": props["spec"],
                "status": props["status"],
            },
            "required": ["spec"],
        }
    )


def generate_crd(info: KindInfo) -> dict[str, Any]:
    """The CRD of one kind."""
    subresources: dict[str, Any] = {}
    if info.status_subresource:
        subresources["status"] = {}
    if info.scale is not None:
        subresources["scale"] = info.scale.to_crd()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.crd_name, "labels": {"app.kubernetes.io/part-of": "escaler"}},
        "spec": {
            "group": info.group,
            "names": {
                "kind": info.kind,
                "listKind": info.list_kind,
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": list(info.categories),
            },
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [
                {
                    "name": info.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema(info)},
                    "subresources": subresources,
                    "additionalPrinterColumns": [c.to_crd() for c in info.printer_columns],
                }
            ],
        },
    }


def generate_crds() -> list[dict[str, Any]]:
    """Every escaler CRD, in ``KINDS`` order (fresh dicts: callers may mutate them)."""
    return [copy.deepcopy(generate_crd(info)) for info in KINDS.values()]


def crd_filename(crd: dict[str, Any]) -> str:
    """``<plural>.<group>.yaml``."""
    return f"{crd['metadata']['name']}.yaml"


class _Dumper(yaml.SafeDumper):
    """Never writes anchors/aliases: shared sub-schemas are spelled out in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(crd: dict[str, Any]) -> str:
    return yaml.dump(
        crd, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )


def render_crds_yaml() -> dict[str, str]:
    """File name → YAML text (with a generated-file header) for every CRD, in ``KINDS`` order."""
    return {crd_filename(crd): HEADER + _dump(crd) for crd in generate_crds()}


def render_stream() -> str:
    """Every CRD as one multi-document YAML stream (what ``escaler crds`` prints)."""
    return HEADER + "".join(f"---\n{_dump(crd)}" for crd in generate_crds())
