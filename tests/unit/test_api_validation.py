"""escaler.api.validate (the Python twin of the CRDs' CEL rules) and single-field refusals.

The tables live in ``api_cases`` so that the same objects can be replayed against the committed
CRDs' CEL (``test_api_cel_server``) and a real API server (``api_cases.server_disagreements``),
which must refuse them with the same path and message. ``validate(..., admission=True)`` is what the
webhook and the API server check; plain ``validate`` (a reconciler) leaves out the
``admission_only`` rules.
"""

from __future__ import annotations

from typing import Any

import pytest
from api_cases import DELETE, REFUSED_BY_RULE, REFUSED_BY_SCHEMA, Refusal, load_samples, mutate
from pydantic import BaseModel, ValidationError

from escaler.api import KINDS, FieldError, parse, validate
from escaler.api.rules import Rule, cel_matches, render_field_path

SAMPLES = load_samples()


@pytest.mark.parametrize("key", sorted(SAMPLES), ids=sorted(SAMPLES))
def test_samples_are_valid(key: str) -> None:
    assert validate(parse(SAMPLES[key]), admission=True) == []


@pytest.mark.parametrize("case", REFUSED_BY_RULE, ids=[c.id for c in REFUSED_BY_RULE])
def test_rule_refusals(case: Refusal) -> None:
    errors = validate(parse(case.obj()), admission=True)
    assert sorted((e.path, e.message) for e in errors) == sorted(case.errors)


ES_M = "ElasticScaler/llama-decode"
MT = "spec.trigger.metricsTrigger"


@pytest.mark.parametrize(
    "changes",
    [
        {f"{MT}.scalingAlgorithm": "HPA", f"{MT}.algorithmConfig": DELETE},
        {f"{MT}.scalingAlgorithm": "HPA", f"{MT}.metrics[3]": DELETE},
    ],
    ids=["hpa-with-externalServer", "hpa-with-algorithmConfig"],
)
def test_admission_only_rules_are_left_to_the_reconciler(changes: dict[str, Any]) -> None:
    """At reconcile time, HPA + ExternalServer is Validated=False/UnsupportedMetric (reported by the
    HPA path, docs/guide/elasticscaler.md#the-triggers) and algorithmConfig in HPA mode is ignored: plain
    validate() skips both."""
    scaler = parse(mutate(SAMPLES[ES_M], changes))
    assert validate(scaler) == []
    assert len(validate(scaler, admission=True)) == 1


@pytest.mark.parametrize(
    ("field_path", "printed"),
    [
        (".minReplicas", ".minReplicas"),
        (".algorithmConfig['tolerance']", ".algorithmConfig[tolerance]"),
        (".a['x.y'].b", ".a[x.y].b"),
    ],
    ids=["child", "map-key", "dotted-key"],
)
def test_field_paths_print_as_the_api_server_prints_them(field_path: str, printed: str) -> None:
    assert render_field_path(field_path) == printed


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^a$", "a", True),
        ("^a$", "a\n", False),  # RE2's $ is the end of the text; Python's also matches before a final \n
        ("b", "abc", True),  # a search, not a full match
        ("^b", "abc", False),
    ],
    ids=["anchored", "trailing-newline", "search", "anchored-start"],
)
def test_cel_matches_reads_patterns_as_re2_does(pattern: str, text: str, matches: bool) -> None:
    assert cel_matches(pattern, text) is matches


@pytest.mark.parametrize(
    ("sample", "changes", "path"),
    [pytest.param(s, c, p, id=i) for i, s, c, p in REFUSED_BY_SCHEMA],
)
def test_schema_refusals(sample: str, changes: dict[str, Any], path: str) -> None:
    """Parsing refuses what the CRD schema refuses, naming the same field (by its JSON path)."""
    with pytest.raises(ValidationError) as info:
        parse(mutate(SAMPLES[sample], changes))
    # union branches ("int", "str", "function-after[...]") are not field names
    locs = {
        ".".join(
            str(p) for p in e["loc"] if str(p) not in ("int", "str") and not str(p).startswith("function-")
        )
        for e in info.value.errors()
    }
    want = path.replace("[", ".").replace("]", "")
    assert any(loc == want or loc.startswith(want + ".") for loc in locs), locs


def _all_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for f in model.model_fields.values():
            for arg in _type_args(f.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    visit(arg)

    for info in KINDS.values():
        visit(info.model)
    return seen


def _type_args(tp: Any) -> list[Any]:
    args = getattr(tp, "__args__", None)
    if not args:
        return [tp]
    return [a for arg in args for a in _type_args(arg)]


RULES: list[tuple[str, Rule]] = [(m.__name__, r) for m in _all_models() for r in getattr(m, "RULES", ())]


@pytest.mark.parametrize(("model", "rule"), RULES, ids=[f"{m}:{r.field_path or '.'}" for m, r in RULES])
def test_every_rule_has_a_message_naming_a_field(model: str, rule: Rule) -> None:
    assert rule.rule.strip() and rule.message.strip()
    assert rule.field_path is None or rule.field_path.startswith(".")
    # the message names the field the error is reported on (a map key as the API server prints it)
    leaf = render_field_path(rule.field_path or "").rsplit(".", 1)[-1]
    assert leaf in rule.message


def test_every_rule_is_exercised_by_the_refusal_table() -> None:
    """Each rule's Python check has at least one refusal case that makes it fail."""
    messages = {m for case in REFUSED_BY_RULE for _, m in case.errors}
    missing = [f"{model}: {r.message}" for model, r in RULES if r.message not in messages]
    assert not missing


def test_field_error_text() -> None:
    assert str(FieldError("spec.minReplicas", "too big")) == "spec.minReplicas: too big"
    assert str(FieldError("", "bad")) == "bad"


def test_rules_of_absent_objects_are_not_evaluated() -> None:
    # LLMBounds rules only run when spec.bounds is present, like CEL on an absent field
    obj = mutate(SAMPLES["LLMSLORequirement/chat-llama"], {"spec.bounds": None})
    assert validate(parse(obj)) == []
