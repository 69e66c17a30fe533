"""escaler.api.crdgen: committed CRDs are current, schemas are structural, CEL is documented,
and the ``escaler crds`` command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_cases import CRDS_DIR

from escaler.api import KINDS
from escaler.api.crdgen import (
    HEADER,
    SchemaError,
    _structural,
    generate_crds,
    render_crds_yaml,
    render_stream,
)
from escaler.api.scaler import BoundBy
from escaler.cli.main import main

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in generate_crds()}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, node
    for key, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """The API server's structural-schema rules that matter here, as a small checker."""
    problems = []
    for path, node in _nodes(schema):
        where = path or "<root>"
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        if "type" not in node and not int_or_string and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{where}: no type")
        for banned in ("$ref", "title", "$defs", "allOf", "oneOf", "not", "nullable", "const"):
            if banned in node:
                problems.append(f"{where}: has {banned}")
        if "anyOf" in node and (
            not int_or_string or node["anyOf"] != [{"type": "integer"}, {"type": "string"}]
        ):
            problems.append(f"{where}: anyOf other than int-or-string")
        if node.get("type") == "null":
            problems.append(f"{where}: type null")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties")
        if isinstance(node.get("additionalProperties"), bool):
            problems.append(f"{where}: boolean additionalProperties")
        for flag in ("exclusiveMinimum", "exclusiveMaximum"):
            if flag in node and node[flag] is not True:
                problems.append(f"{where}: {flag} must be the boolean form")
        if node.get("x-kubernetes-list-type") == "map":
            required = set(node["items"].get("required", []))
            defaulted = {k for k, v in node["items"].get("properties", {}).items() if "default" in v}
            if not set(node["x-kubernetes-list-map-keys"]) <= required | defaulted:
                problems.append(f"{where}: list-map keys must be required or defaulted")
        fieldless = node.get("type") == "object" and not {"properties", "additionalProperties"} & set(node)
        # an object without fields is allowed (StateTrigger) but must say why in its docs
        if fieldless and path != ".metadata" and not node.get("description"):
            problems.append(f"{where}: an object without fields and without a description")
    return problems


@pytest.mark.parametrize("kind", list(KINDS))
def test_schema_is_structural(kind: str) -> None:
    assert structural_problems(_schema(kind)) == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_field_is_documented(kind: str) -> None:
    """kubectl explain shows a description for every field."""
    undocumented = [
        path
        for path, node in _nodes(_schema(kind))
        if path and not path.endswith(("[]", "{}")) and not node.get("description")
    ]
    assert undocumented == [".metadata"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_cel_rule_has_a_message(kind: str) -> None:
    rules = [(p, r) for p, n in _nodes(_schema(kind)) for r in n.get("x-kubernetes-validations", [])]
    assert rules, "every kind has at least one cross-field rule"
    for path, rule in rules:
        assert set(rule) <= {"rule", "message", "fieldPath", "reason"}, path
        assert rule["rule"].strip() and rule["message"].strip(), path
        assert rule.get("reason", "FieldValueInvalid") in (
            "FieldValueInvalid",
            "FieldValueForbidden",
            "FieldValueRequired",
        )


@pytest.mark.parametrize("kind", list(KINDS))
def test_lists_under_cel_rules_are_bounded(kind: str) -> None:
    """CEL cost is estimated from maxItems: a list whose items carry rules, or that a rule
    iterates, must declare it (otherwise the API server refuses the CRD)."""
    for path, node in _nodes(_schema(kind)):
        if node.get("type") != "array" or path.startswith(".status"):
            continue
        item_rules = any("x-kubernetes-validations" in n for _, n in _nodes(node["items"]))
        if item_rules:
            assert "maxItems" in node, path


def test_committed_crds_are_current() -> None:
    want = render_crds_yaml()
    have = {p.name: p.read_text() for p in sorted(CRDS_DIR.glob("*.yaml"))}
    stale = sorted(set(have) ^ set(want)) + sorted(n for n in want if n in have and have[n] != want[n])
    assert not stale, f"manifests/crds/ is out of date ({', '.join(stale)}): run make crds"


def test_rendering_is_deterministic_and_parses_back() -> None:
    first = render_crds_yaml()
    assert first == render_crds_yaml()
    assert list(first) == [f"{i.plural}.{i.group}.yaml" for i in KINDS.values()]
    for name, text in first.items():
        assert text.startswith(HEADER) and "&id" not in text and "*id" not in text, name
        parsed = yaml.safe_load(text)
        assert parsed == CRDS[parsed["spec"]["names"]["kind"]]


@pytest.mark.parametrize(
    ("kind", "group", "plural", "short", "scale"),
    [
        ("ElasticScaler", "elasticscaler.io", "elasticscalers", ["es"], None),
        ("Tidal", "tidal.io", "tidals", ["tidal"], None),
        (
            "ResourceScalingGroup",
            "autoscaling.openfuyao.com",
            "resourcescalinggroups",
            ["rsg"],
            {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        ),
        ("LLMScaler", "llm.escaler.io", "llmscalers", ["llms"], None),
        ("LLMSLORequirement", "llm.escaler.io", "llmslorequirements", ["llmslo"], None),
        ("JobSLORequirement", "llm.escaler.io", "jobslorequirements", ["jobslo"], None),
    ],
    ids=lambda v: v if isinstance(v, str) and v[0].isupper() else "",
)
def test_names_and_subresources(kind: str, group: str, plural: str, short: list[str], scale: Any) -> None:
    crd = CRDS[kind]
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    assert crd["spec"]["group"] == group and crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["plural"], names["shortNames"], names["categories"]) == (plural, short, ["escaler"])
    version = crd["spec"]["versions"][0]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    want: dict[str, Any] = {"status": {}}
    if scale:
        want["scale"] = scale
    assert version["subresources"] == want


_SCALER_COLUMNS = ["Target", "Min", "Max", "Current", "Desired", "Active", "AbleToScale", "Scaling", "Age"]


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        ("ElasticScaler", _SCALER_COLUMNS),
        ("LLMScaler", _SCALER_COLUMNS),
        ("Tidal", ["Target", "Desired", "Active Rules", "Next Transition", "Ready", "Age"]),
        ("ResourceScalingGroup", ["Strategy", "Groups", "Ready", "Age"]),
        ("LLMSLORequirement", ["Service", "Replicas", "Reason", "Age"]),
        ("JobSLORequirement", ["Service", "Replicas", "Reason", "Age"]),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_printer_columns(kind: str, columns: list[str]) -> None:
    printed = CRDS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in printed] == columns
    assert all(c["description"] and c["jsonPath"].startswith(".") for c in printed)


def test_scaler_condition_columns() -> None:
    cols = {
        c["name"]: c["jsonPath"]
        for c in CRDS["ElasticScaler"]["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert cols["Active"] == '.status.conditions[?(@.type=="ScalingActive")].status'
    assert cols["AbleToScale"] == '.status.conditions[?(@.type=="AbleToScale")].status'
    assert cols["Scaling"] == '.status.conditions[?(@.type=="AbleToScale")].reason'


@pytest.mark.parametrize(
    ("kind", "path", "key", "value"),
    [
        ("ElasticScaler", ".status.recentDecisions", "maxItems", 10),
        ("ElasticScaler", ".status.conditions", "x-kubernetes-list-type", "map"),
        ("ElasticScaler", ".status.conditions", "x-kubernetes-list-map-keys", ["type"]),
        ("ElasticScaler", ".status.lastScaleTime", "format", "date-time"),
        ("ElasticScaler", ".status.conditions[].lastTransitionTime", "format", "date-time"),
        ("ElasticScaler", ".status.conditions[].status", "enum", ["True", "False", "Unknown"]),
        ("ElasticScaler", ".spec.trigger.type", "enum", ["MetricsTrigger", "StateTrigger", "SignalTrigger"]),
        (
            "ElasticScaler",
            ".spec.trigger.metricsTrigger.metrics[].type",
            "enum",
            ["Resource", "Custom", "External", "ExternalServer"],
        ),
        (
            "ElasticScaler",
            ".spec.trigger.metricsTrigger.metrics[].resource.target.type",
            "enum",
            ["Utilization", "AverageValue", "Value"],
        ),
        (
            "ElasticScaler",
            ".spec.trigger.metricsTrigger.metrics[].custom.target.averageValue",
            "x-kubernetes-int-or-string",
            True,
        ),
        (
            "ElasticScaler",
            ".spec.trigger.metricsTrigger.algorithmConfig",
            "additionalProperties",
            {"type": "string", "maxLength": 256},
        ),
        ("ElasticScaler", ".spec.mode", "enum", ["Active", "Advisory"]),
        ("ElasticScaler", ".spec.mode", "default", "Active"),
        ("ElasticScaler", ".spec.minReplicas", "default", 1),
        ("ElasticScaler", ".spec.maxReplicas", "default", 10),
        ("ElasticScaler", ".spec.deferTimeoutSeconds", "default", 600),
        ("ElasticScaler", ".spec.trigger.metricsTrigger.scalingAlgorithm", "default", "apa"),
        ("ElasticScaler", ".spec.trigger.stateTrigger", "type", "object"),
        ("LLMScaler", ".spec.metricProvider", "enum", ["Prometheus", "Custom", "Flow"]),
        ("LLMScaler", ".spec.flow.engine", "enum", ["vllm", "sglang", "tgi", "generic"]),
        ("LLMScaler", ".spec.scaleDown", "default", {}),
        ("LLMScaler", ".spec.prometheus.metrics[].targetPerReplica", "exclusiveMinimum", True),
        ("ResourceScalingGroup", ".spec.strategy", "enum", ["InplaceScaling", "GroupReplication"]),
        ("ResourceScalingGroup", ".spec.members[].replicasPerGroup", "minimum", 1),
        ("Tidal", ".spec.rules[].replicas", "minimum", 0),
        ("LLMSLORequirement", ".spec.deployType", "enum", ["aggregated", "pd"]),
        ("LLMSLORequirement", ".spec.bounds.min.type", "enum", ["replica", "concurrency", "pdengine"]),
        ("LLMSLORequirement", ".spec.bounds.min.value", "minimum", 0),
        ("LLMSLORequirement", ".status.decision.signals", "x-kubernetes-preserve-unknown-fields", True),
        ("JobSLORequirement", ".spec.queue.maxDepth", "minimum", 1),
        (
            "ElasticScaler",
            ".status.recentDecisions[].boundBy",
            "enum",
            ["RateLimit", "Stabilize", "StepLimit", "Clamp", "Guard", "Paused", "PausedReplicas",
             "Activation", "Floor"],
        ),
        ("LLMScaler", ".status.recentDecisions[].boundBy", "enum", [b.value for b in BoundBy]),
        (
            "ElasticScaler",
            ".spec.trigger.metricsTrigger.metrics[].resource.name",
            "enum",
            ["cpu", "memory"],
        ),
        ("ElasticScaler", ".spec.trigger.metricsTrigger.metrics[].external.target.value", "maxLength", 64),
        ("ElasticScaler", ".spec.trigger.metricsTrigger.algorithmConfig", "maxProperties", 32),
        ("Tidal", ".spec.rules[].start", "maxLength", 256),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith(".") else None,
)
def test_schema_details(kind: str, path: str, key: str, value: Any) -> None:
    nodes = dict(_nodes(_schema(kind)))
    assert nodes[path][key] == value


@pytest.mark.parametrize(
    ("kind", "required"),
    [
        ("ElasticScaler", {"": ["spec"], ".spec": ["targetRef", "trigger"], ".spec.trigger": ["type"]}),
        ("JobSLORequirement", {".spec": ["serviceId", "queue"], ".spec.queue": ["maxDepth", "promql"]}),
        ("LLMSLORequirement", {".spec": ["serviceId", "targetRef"], ".spec.bounds": ["min", "max"]}),
        ("ResourceScalingGroup", {".spec": ["members"], ".spec.members[]": ["name", "targetRef"]}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_required(kind: str, required: dict[str, list[str]]) -> None:
    nodes = dict(_nodes(_schema(kind)))
    assert {p: nodes[p].get("required") for p in required} == required


@pytest.mark.parametrize("kind", ["ElasticScaler", "LLMScaler"])
def test_bound_by_is_documented_for_kubectl_explain(kind: str) -> None:
    """Issue 8 item 9: one enum, in the model and the CRD, every value named in the field's docs."""
    node = dict(_nodes(_schema(kind)))[".status.recentDecisions[].boundBy"]
    assert all(b.value in node["description"] for b in BoundBy)
    assert "Recommend" not in node["description"]


def test_unsupported_unions_are_refused() -> None:
    with pytest.raises(SchemaError, match="cannot be structural"):
        _structural({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, {}, "x")


def test_cli_prints_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    out = capsys.readouterr().out
    assert out == render_stream()
    assert [d for d in yaml.safe_load_all(out) if d] == generate_crds()


def test_cli_writes_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old.kind.yaml").write_text(HEADER + "kind: Gone\n")
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    assert main(["crds", "--out", str(tmp_path / ".")]) == 0
    files = sorted(p.name for p in tmp_path.glob("*.yaml"))
    assert files == sorted([*render_crds_yaml(), "kustomization.yaml"])
    assert all((tmp_path / n).read_text() == t for n, t in render_crds_yaml().items())
    assert len(capsys.readouterr().out.splitlines()) == len(KINDS)


def test_cli_reports_an_unwritable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["crds", "--out", str(blocker / "sub")]) == 1
    assert "escaler crds:" in capsys.readouterr().err
