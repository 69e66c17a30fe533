"""docs/reference/ is generated from the models, the reconcilers' condition constants and the annotation
table: the committed pages equal the generator's output (annotations.md included), the condition catalog
covers exactly the reasons the code writes, and the generator's tables say what the models and the
annotation parser say."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

from escaler.api.docgen import (
    ANNOTATIONS_PAGE,
    HEADER,
    REFRESH_COMMAND,
    DocError,
    field_rows,
    render_reference,
    rule_rows,
)
from escaler.api.registry import KINDS
from escaler.cli import conditiondocs
from escaler.cli.annotationdocs import EVENT_REASON, NON_READERS, render_annotations
from escaler.cli.docs import render
from escaler.cli.main import main
from escaler.reconcilers.kit.report import EVENT_INVALID_ANNOTATION
from escaler.scaling import annotations as ann
from escaler.scaling import conditions as scaler_conditions

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

# ------------------------------------------------------------------ the committed pages


def test_committed_reference_is_current() -> None:
    want = render()
    have = {p.name: p.read_text(encoding="utf-8") for p in sorted(REFERENCE.glob("*.md"))}
    stale = sorted(n for n in want.keys() | have.keys() if want.get(n) != have.get(n))
    assert not stale, (f"docs/reference/ is out of date ({', '.join(stale)}): run `{REFRESH_COMMAND}` "
                       "and commit the result")


def test_every_kind_has_a_page_linked_from_the_index() -> None:
    pages = render()
    index = pages["README.md"]
    for info in KINDS.values():
        name = f"{info.kind.lower()}.md"
        assert name in pages and pages[name].startswith(HEADER)
        assert f"]({name})" in index


def test_links_in_the_reference_resolve() -> None:
    for name, text in render().items():
        prose = re.sub(r"`[^`\n]*`", "", text)  # patterns in code spans are not links
        for target in re.findall(r"\]\(([^)#]+)\)", prose):
            if "://" not in target:
                assert (REFERENCE / target).resolve().exists(), f"{name}: broken link {target}"


def test_cli_writes_the_pages_and_removes_stale_generated_ones(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "oldkind.md").write_text(HEADER + "gone\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("hand-written\n", encoding="utf-8")
    assert main(["docs", "--out", str(tmp_path)]) == 0
    written = {p.name for p in tmp_path.glob("*.md")}
    assert written == set(render()) | {"notes.md"}
    assert str(tmp_path / "tidal.md") in capsys.readouterr().out


def test_cli_prints_every_page_without_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    assert out.count(HEADER) == len(render())


def test_cli_reports_an_unwritable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    assert main(["docs", "--out", str(blocker / "sub")]) == 1
    assert "escaler docs:" in capsys.readouterr().err


def test_a_kind_without_condition_docs_is_refused() -> None:
    docs = conditiondocs.condition_docs()
    del docs["Tidal"]
    with pytest.raises(DocError, match="Tidal"):
        render_reference(docs)


# ------------------------------------------------------------------ the annotations page (issue 28 item 7)


def test_the_annotations_page_is_committed_and_linked() -> None:
    """A missing or stale annotations.md fails test_committed_reference_is_current; this says which."""
    page = REFERENCE / ANNOTATIONS_PAGE
    assert page.exists(), f"docs/reference/{ANNOTATIONS_PAGE} is missing: run `{REFRESH_COMMAND}`"
    assert page.read_text(encoding="utf-8") == render_annotations(), (
        f"docs/reference/{ANNOTATIONS_PAGE} is out of date: run `{REFRESH_COMMAND}`")
    pages = render()
    assert pages[ANNOTATIONS_PAGE].startswith(HEADER)
    assert f"]({ANNOTATIONS_PAGE})" in pages["README.md"]
    assert "](docs/reference/annotations.md)" in README.read_text(encoding="utf-8")


def _annotation_rows() -> dict[str, list[str]]:
    """The summary table of the page: key → [value, default, read by]."""
    rows = {}
    for line in render_annotations().splitlines():
        m = re.match(r"^\| \[`([^`]+)`\]\(#[^)]+\) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2).split(" | ")
    return rows


def test_the_annotations_page_lists_every_key_the_parser_reads() -> None:
    rows = _annotation_rows()
    assert list(rows) == [a.key for a in ann.ANNOTATIONS]
    assert set(rows) == set(ann.POLICY_KEYS) | set(ann.PAUSE_KEYS)
    for key in ("elasticscaler.io/metrics.aggregationType", "elasticscaler.io/metrics.missingDataPolicy",
                "elasticscaler.io/metrics.outlierThreshold", "elasticscaler.io/metrics.gcFactor"):
        assert key in rows  # issue 28 item 7 names these
    text = render_annotations()
    for a in ann.ANNOTATIONS:
        assert f"### `{a.key}`" in text


@pytest.mark.parametrize(
    ("key", "value", "default", "read_by"),
    [
        (ann.WINDOW_SECONDS, "an integer >= 1", "`60`", "ElasticScaler"),
        (ann.GC_FACTOR, "a number >= 1", "`2`", "ElasticScaler"),
        (ann.METRICS_AGGREGATION_TYPE, "one of `Average`, `Max`, `Min`, `P50`, `P90`, `P95`, `P99`, `Latest`",
         "`Average`", "ElasticScaler"),
        (ann.MISSING_DATA_POLICY, "one of `Ignore`, `TreatAsZero`, `Fail`", "`Ignore`", "ElasticScaler"),
        (ann.OUTLIER_THRESHOLD, "a number > 0", "`3`", "ElasticScaler"),
        (ann.SCALE_DOWN_STABILIZATION_WINDOW, "an integer in [0, 3600]", "`300` (`0` for a StateTrigger)",
         "ElasticScaler"),
        (ann.SCALE_UP_MAX_PODS_PER_STEP, "an integer >= 1", "unlimited", "ElasticScaler"),
        (ann.PAUSED, "`true` or `false`", "`false`", "ElasticScaler, LLMScaler"),
        (ann.PAUSED_REPLICAS, "an integer >= 0", "not pinned", "ElasticScaler, LLMScaler"),
    ],
    ids=lambda v: v.split("/")[-1] if isinstance(v, str) and "/" in v else None,
)
def test_annotation_rows_say_what_the_parser_does(key: str, value: str, default: str, read_by: str) -> None:
    assert _annotation_rows()[key] == [value, default, read_by]


@pytest.mark.parametrize("spec", ann.ANNOTATIONS, ids=lambda a: a.key.split("/")[-1])
def test_the_documented_value_type_is_the_parsers(spec: ann.AnnotationSpec) -> None:
    """The parser reads the same table: a bad value's rule is the documented value type."""
    _, problems = ann.parse_annotations({spec.key: "not-a-value"}, policies=True)
    assert [p.key for p in problems] == [spec.key]
    if spec.value.text.startswith(("an integer", "one of", "`true`")):
        assert spec.value.text.replace("`", "").replace('"', "") in problems[0].rule.replace('"', "")
    getattr(ann.DEFAULTS, spec.field)  # the field exists


def test_the_annotations_page_names_the_real_event_and_the_webhook_rule() -> None:
    assert EVENT_REASON == EVENT_INVALID_ANNOTATION
    text = render_annotations()
    assert "Warning: metadata.annotations[elasticscaler.io/metrics.missingDataPolicy]: must be one of" in text
    assert "using the default Ignore" in text
    assert set(NON_READERS) | set(ann.PAUSE_READERS) == set(KINDS)


def test_a_page_without_the_header_is_refused() -> None:
    with pytest.raises(DocError, match=r"annotations\.md"):
        render_reference(conditiondocs.condition_docs(), "# no header\n")


# ------------------------------------------------------------------ the tables say what the models say


@functools.cache  # two tests per kind read it; callers only read it
def _crd(kind: str) -> dict[str, object]:
    info = KINDS[kind]
    doc = yaml.safe_load((ROOT / "manifests" / "crds" / f"{info.crd_name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _cel_count(node: object) -> int:
    if isinstance(node, dict):
        return len(node.get("x-kubernetes-validations", ())) + sum(_cel_count(v) for v in node.values())
    if isinstance(node, list):
        return sum(_cel_count(v) for v in node)
    return 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_cel_rule_of_the_crd_is_documented(kind: str) -> None:
    assert len(rule_rows(KINDS[kind])) == _cel_count(_crd(kind))


@pytest.mark.parametrize(
    ("kind", "path", "type_", "default", "constraint"),
    [
        ("ElasticScaler", "spec.maxReplicas", "integer", "`10`", ">= 1"),
        ("ElasticScaler", "spec.trigger.type", "string", "", "one of `MetricsTrigger`, `StateTrigger`"),
        ("ElasticScaler", "spec.trigger.metricsTrigger.algorithmConfig", "map[string]string", "",
         "keys <= 32"),
        ("ElasticScaler", "spec.trigger.metricsTrigger.metrics", "[]object", "", "items 1..16"),
        ("ElasticScaler", "spec.trigger.metricsTrigger.metrics[].external.target.value", "int-or-string", "",
         "pattern"),
        ("Tidal", "spec.rules[].replicas", "integer", "", "**required**; >= 0"),
        ("ResourceScalingGroup", "status.conditions", "[]object", "`[]`", "one item per `type`"),
        ("LLMScaler", "spec.scaleDown", "object", "`{}`", ""),
        ("JobSLORequirement", "spec.queue", "object", "", "**required**"),
        ("LLMSLORequirement", "status.decision.time", "string (date-time)", "", "**required**"),
    ],
    ids=lambda v: v if isinstance(v, str) and "." in v else None,
)
def test_field_rows(kind: str, path: str, type_: str, default: str, constraint: str) -> None:
    rows = {r.path: r for r in field_rows(KINDS[kind], path.split(".")[0])}
    row = rows[path]
    assert (row.type, row.default) == (type_, default)
    assert constraint in row.constraints
    assert row.description


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_field_of_the_crd_has_a_row(kind: str) -> None:
    version = _crd(kind)["spec"]["versions"][0]  # type: ignore[index]
    schema = version["schema"]["openAPIV3Schema"]
    want = set(_schema_paths(schema["properties"]["spec"], "spec")) | set(
        _schema_paths(schema["properties"]["status"], "status"))
    have = {r.path for s in ("spec", "status") for r in field_rows(KINDS[kind], s)}
    assert have == want


def _schema_paths(node: dict[str, object], path: str) -> Iterator[str]:
    yield path
    props = node.get("properties")
    if isinstance(props, dict):
        for name, child in props.items():
            yield from _schema_paths(child, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict) and isinstance(items.get("properties"), dict):
        for name, child in items["properties"].items():
            yield from _schema_paths(child, f"{path}[].{name}")


# ------------------------------------------------------------------ reasons: the catalog == the code

# module-level constants that are condition types, event reasons or other words, not condition reasons
_NOT_REASONS = {"READY", "SCALE_DOWN_RANKING", "SCALING_ACTIVE", "ABLE_TO_SCALE", "SCALING_LIMITED",
                "VALIDATED", "METRICS_PIPELINE", "DECISION_AVAILABLE", "SCALING_DEFERRED", "NORMAL",
                "WARNING", "OK", "WAITING", "FAILING", "ADVISORY_HPA_MESSAGE", "PROMETHEUS_TYPE",
                "HPA_KIND", "HPA_ALGORITHM", "_PER_REPLICA", "SCHEDULE_FLOOR"}
# call → the position of its reason argument, for every way a reconciler writes a condition
_REASON_ARG = {"set_condition": 3, "_set": 4, "CondSpec": 2, "hold": 0, "Ready": 1, "Validation": 0,
               "TargetError": 0, "TargetProblem": 0}
_CAMEL = re.compile(r"^[A-Z][A-Za-z]+$")


def _constant_reasons(module: str) -> set[str]:
    """CamelCase string constants at module level that are not types or events."""
    tree = ast.parse(Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8"))
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            for target in node.targets:
                if (isinstance(target, ast.Name) and target.id not in _NOT_REASONS
                        and not target.id.startswith(("EVENT_", "_")) and isinstance(value, str)
                        and _CAMEL.match(value)):
                    out.add(value)
    return out


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _written_reasons(package: str) -> set[str]:
    """Reasons passed to a condition-writing call anywhere in ``package``: a literal, or a name
    resolved through the module (other arguments — ``plan.failure[0]`` — come from constants)."""
    out = set()
    pkg_dir = Path(importlib.import_module(package).__file__ or "").parent
    for path in sorted(pkg_dir.glob("*.py")):
        module = importlib.import_module(f"{package}.{path.stem}") if path.stem != "__init__" else None
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            pos = _REASON_ARG.get(_call_name(call))
            if pos is None or len(call.args) <= pos:
                continue
            arg = call.args[pos]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.add(arg.value)
            elif isinstance(arg, ast.Name) and isinstance(getattr(module, arg.id, None), str):
                out.add(getattr(module, arg.id))
    return {r for r in out if _CAMEL.match(r)}


def _documented(kinds: Iterable[str]) -> set[str]:
    docs = conditiondocs.condition_docs()
    return {r.reason for k in kinds for r in docs[k].reasons}


def _scaler_code_reasons() -> set[str]:
    names = [n for n in scaler_conditions.__all__
             if n.isupper() and n not in _NOT_REASONS and not n.startswith("EVENT_")]
    values = {getattr(scaler_conditions, n) for n in names}
    consts = {v for v in values if isinstance(v, str) and _CAMEL.match(v)}
    # the kit holds the steps both kinds share (the Reporter, the target read and write)
    return consts | _written_reasons("escaler.reconcilers.elasticscaler") | _written_reasons(
        "escaler.reconcilers.llmscaler") | _written_reasons("escaler.reconcilers.kit")


_RSG = "escaler.reconcilers.rsg"
# engine → (its kinds, the modules whose constants are reasons, the package whose calls write them)
ENGINES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "tidal": (("Tidal",), ("escaler.reconcilers.tidal.report",), "escaler.reconcilers.tidal"),
    "rsg": (("ResourceScalingGroup",),
            tuple(f"{_RSG}.{m}" for m in ("members", "replication", "inplace", "reconciler", "context")),
            _RSG),
    "slo": (("LLMSLORequirement", "JobSLORequirement"), ("escaler.reconcilers.slo.report",),
            "escaler.reconcilers.slo"),
}


def _code_reasons(engine: str) -> tuple[tuple[str, ...], set[str]]:
    if engine == "scalers":
        return ("ElasticScaler", "LLMScaler"), _scaler_code_reasons()
    kinds, modules, package = ENGINES[engine]
    return kinds, set().union(*(_constant_reasons(m) for m in modules)) | _written_reasons(package)


@pytest.mark.parametrize("engine", ["scalers", *ENGINES])
def test_the_catalog_covers_exactly_the_reasons_the_code_writes(engine: str) -> None:
    kinds, in_code = _code_reasons(engine)
    in_docs = _documented(kinds)
    assert in_code - in_docs == set(), (
        f"reasons written by the {engine} reconciler(s) but not documented: add them to "
        f"escaler/cli/conditiondocs.py, then run `{REFRESH_COMMAND}`")
    assert in_docs - in_code == set(), f"documented {engine} reasons the code never writes"


def test_the_scaler_engine_scan_finds_the_literals() -> None:
    """The scan is not vacuous: the companion-HPA literal and the guards' reasons are found."""
    found = _scaler_code_reasons()
    assert {"WaitingForHPA", "RolloutInProgress", "ScaleUpLimit", "Valid"} <= found
    assert set(conditiondocs.RSG_RANKING_REASONS) <= _written_reasons("escaler.reconcilers.rsg")
    assert set(conditiondocs.HPA_LITERAL_REASONS) <= found


def test_each_kind_lists_one_row_per_type_status_reason() -> None:
    for kind, docs in conditiondocs.condition_docs().items():
        keys = [(r.type, r.status, r.reason) for r in docs.reasons]
        assert len(keys) == len(set(keys)), kind
        assert {r.type for r in docs.reasons} <= {t for t, _ in docs.types}, kind
        assert all(r.when for r in docs.reasons), kind


def test_llmscaler_page_leaves_out_what_only_an_elasticscaler_writes() -> None:
    docs = conditiondocs.condition_docs()
    llm = {(r.type, r.reason) for r in docs["LLMScaler"].reasons}
    es = {(r.type, r.reason) for r in docs["ElasticScaler"].reasons}
    assert llm == es - conditiondocs.ES_ONLY
    # docs/llmscaler.md: an LLMScaler never caps scale-up
    assert ("ScalingLimited", "ScaleUpLimit") not in llm


def test_the_health_rule_names_every_waiting_reason() -> None:
    health = conditiondocs.condition_docs()["ElasticScaler"].health
    for reason in scaler_conditions.WAITING_REASONS:
        assert f"`{reason}`" in health


# ------------------------------------------------------------------ the concepts' kinds and troubleshooting

README = ROOT / "README.md"
CONCEPTS = ROOT / "docs" / "concepts.md"
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"


def _section(title: str, page: Path = CONCEPTS) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n") if f"\n## {title}\n" in text else text.index(f"# {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_the_concepts_page_has_one_valid_example_per_kind() -> None:
    from escaler.api.registry import parse
    from escaler.api.rules import validate

    blocks = re.findall(r"```yaml\n(.*?)```", _section("The kinds"), re.S)
    assert len(blocks) == 1, "The kinds: one ```yaml block with one example per kind"
    docs = [d for d in yaml.safe_load_all(blocks[0]) if d]
    assert sorted(d["kind"] for d in docs) == sorted(KINDS)
    for doc in docs:
        model = parse(doc)
        assert validate(model, admission=True) == [], doc["kind"]


def test_the_troubleshooting_page_names_only_real_reasons() -> None:
    section = _section("Troubleshooting by condition reason", TROUBLESHOOTING)
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    documented = _documented(KINDS)
    named = {r for line in rows for r in re.findall(r"`([A-Z][A-Za-z]+)`", line.split(" | ")[0])}
    assert named and named <= documented, f"not reasons of any kind: {sorted(named - documented)}"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", section):
        assert (TROUBLESHOOTING.parent / target).exists(), f"docs/troubleshooting.md: broken link {target}"
