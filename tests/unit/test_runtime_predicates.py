"""Predicates: the *ChangedPredicate family, predicate_funcs and the combinators."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.informers.frozen import freeze
from escaler.runtime.predicates import (
    AnnotationChangedPredicate,
    GenerationChangedPredicate,
    LabelChangedPredicate,
    Predicate,
    ResourceVersionChangedPredicate,
    and_,
    not_,
    or_,
    predicate_funcs,
)


def obj(generation: int | None = 1, rv: str = "1", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "a", "namespace": "default", "resourceVersion": rv}
    if generation is not None:
        meta["generation"] = generation
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta}


UPDATE_CASES = [
    # (id, predicate, old, new, expected)
    ("generation-bumped", GenerationChangedPredicate(), obj(1, "1"), obj(2, "2"), True),
    ("generation-same-status-write", GenerationChangedPredicate(), obj(1, "1"), obj(1, "2"), False),
    ("generation-absent-both", GenerationChangedPredicate(), obj(None), obj(None, "2"), False),
    ("rv-changed", ResourceVersionChangedPredicate(), obj(rv="1"), obj(rv="2"), True),
    ("rv-same-resync", ResourceVersionChangedPredicate(), obj(rv="1"), obj(rv="1"), False),
    ("labels-added", LabelChangedPredicate(), obj(labels=None), obj(labels={"a": "1"}), True),
    ("labels-changed", LabelChangedPredicate(), obj(labels={"a": "1"}), obj(labels={"a": "2"}), True),
    ("labels-same", LabelChangedPredicate(), obj(labels={"a": "1"}), obj(labels={"a": "1"}, rv="2"), False),
    ("labels-absent-vs-empty", LabelChangedPredicate(), obj(labels=None), obj(labels={}), False),
    ("annotations-changed", AnnotationChangedPredicate(), obj(annotations={"x": "1"}),
     obj(annotations={"x": "2"}), True),
    ("annotations-same", AnnotationChangedPredicate(), obj(annotations={"x": "1"}),
     obj(annotations={"x": "1"}), False),
    ("annotations-removed", AnnotationChangedPredicate(), obj(annotations={"x": "1"}), obj(), True),
]


@pytest.mark.parametrize(("pred", "old", "new", "expected"), [c[1:] for c in UPDATE_CASES],
                         ids=[c[0] for c in UPDATE_CASES])
def test_changed_predicates_filter_updates(pred: Predicate, old: dict[str, Any], new: dict[str, Any],
                                           expected: bool) -> None:
    assert pred.update(old, new) is expected
    # frozen cache objects behave the same
    assert pred.update(freeze(old), freeze(new)) is expected


@pytest.mark.parametrize("pred", [GenerationChangedPredicate(), ResourceVersionChangedPredicate(),
                                  LabelChangedPredicate(), AnnotationChangedPredicate()],
                         ids=["generation", "resource-version", "labels", "annotations"])
def test_changed_predicates_pass_create_delete_generic(pred: Predicate) -> None:
    o = obj()
    assert pred.create(o) and pred.delete(o) and pred.generic(o)


YES = predicate_funcs()
NO = predicate_funcs(create=lambda o: False, update=lambda a, b: False, delete=lambda o: False,
                     generic=lambda o: False)

COMBINATOR_CASES = [
    ("and-empty-passes", and_(), True),
    ("and-all-yes", and_(YES, YES), True),
    ("and-one-no", and_(YES, NO), False),
    ("or-empty-rejects", or_(), False),
    ("or-one-yes", or_(NO, YES), True),
    ("or-all-no", or_(NO, NO), False),
    ("not-yes", not_(YES), False),
    ("not-no", not_(NO), True),
    ("nested", and_(or_(NO, YES), not_(NO)), True),
]


@pytest.mark.parametrize(("pred", "expected"), [c[1:] for c in COMBINATOR_CASES],
                         ids=[c[0] for c in COMBINATOR_CASES])
def test_combinators_apply_to_every_event_kind(pred: Predicate, expected: bool) -> None:
    o = obj()
    assert pred.create(o) is expected
    assert pred.update(o, o) is expected
    assert pred.delete(o) is expected
    assert pred.generic(o) is expected


def test_and_short_circuits() -> None:
    calls: list[str] = []

    def boom(o: Any) -> bool:
        calls.append("boom")
        raise AssertionError("must not be evaluated")

    assert and_(NO, predicate_funcs(create=boom)).create(obj()) is False
    assert or_(YES, predicate_funcs(create=boom)).create(obj()) is True
    assert calls == []


def test_predicate_funcs_only_overrides_given_kinds() -> None:
    p = predicate_funcs(update=lambda old, new: new["metadata"]["resourceVersion"] == "2")
    assert p.create(obj()) and p.delete(obj()) and p.generic(obj())
    assert p.update(obj(rv="1"), obj(rv="2")) is True
    assert p.update(obj(rv="1"), obj(rv="3")) is False


def test_generation_or_labels_changed_like_controller_runtime_docs() -> None:
    pred = or_(GenerationChangedPredicate(), LabelChangedPredicate())
    assert pred.update(obj(1, labels={"a": "1"}), obj(1, "2", labels={"a": "2"})) is True
    assert pred.update(obj(1, labels={"a": "1"}), obj(1, "2", labels={"a": "1"})) is False
