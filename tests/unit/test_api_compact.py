"""``share_bookkeeping``: shared fields-sets and no empty extras, with every read unchanged."""

from __future__ import annotations

import copy
import gc
import pickle
import tracemalloc
from collections.abc import Callable

import pytest
from es_fakes import external_metric, metrics_trigger, scaler

from escaler.api.compact import READ_ONLY_MESSAGE, SharedFieldSet, _shared_keys_dict, share_bookkeeping
from escaler.api.elasticscaler import ElasticScaler


def _parse(extra_spec: dict[str, object] | None = None) -> ElasticScaler:
    obj = scaler("es", metrics_trigger(external_metric("queue", "10")), namespace="default")
    obj["metadata"]["annotations"] = {"a": "b"}  # type: ignore[index]
    obj["metadata"]["ownerReferences"] = [{"kind": "X", "name": "y"}]  # type: ignore[index]
    if extra_spec:
        obj["spec"].update(extra_spec)  # type: ignore[union-attr]
    return ElasticScaler.parse(obj)


DUMPS: tuple[dict[str, object], ...] = (
    {}, {"exclude_unset": True}, {"exclude_defaults": True},
    {"mode": "json", "by_alias": True, "exclude_none": True},
    {"mode": "json", "by_alias": True, "exclude_unset": True},
)


def test_every_dump_equality_and_repr_are_unchanged() -> None:
    fresh, shared = _parse(), share_bookkeeping(_parse())
    for kwargs in DUMPS:
        assert shared.model_dump(**kwargs) == fresh.model_dump(**kwargs), kwargs  # type: ignore[arg-type]
    assert shared.model_dump_json(exclude_unset=True) == fresh.model_dump_json(exclude_unset=True)
    assert shared == fresh and fresh == shared
    assert repr(shared) == repr(fresh)
    assert shared.model_fields_set == fresh.model_fields_set
    assert shared.metadata.model_extra == fresh.metadata.model_extra  # ownerReferences kept


def test_equal_fields_sets_are_one_object_and_empty_extras_are_dropped() -> None:
    a, b = share_bookkeeping(_parse()), share_bookkeeping(_parse())
    assert type(a.spec.__pydantic_fields_set__) is SharedFieldSet
    assert a.spec.__pydantic_fields_set__ is b.spec.__pydantic_fields_set__
    assert a.spec.target_ref.__pydantic_fields_set__ is b.spec.target_ref.__pydantic_fields_set__
    assert a.spec.__pydantic_extra__ is None
    assert a.metadata.__pydantic_extra__ == {"ownerReferences": [{"kind": "X", "name": "y"}]}


def test_a_fields_set_naming_an_unknown_field_is_left_to_its_model() -> None:
    model = share_bookkeeping(_parse({"someFutureField": 1}))
    assert type(model.spec.__pydantic_fields_set__) is set
    assert "someFutureField" in model.spec.__pydantic_fields_set__
    assert model.spec.model_extra == {"someFutureField": 1}


def test_the_shared_model_refuses_assignment_and_a_copy_is_mutable() -> None:
    model = share_bookkeeping(_parse())
    with pytest.raises(TypeError, match="shared"):
        model.spec.max_replicas = 5  # loud (pydantic stores the value before recording its name)
    model = share_bookkeeping(_parse())
    with pytest.raises(TypeError, match=READ_ONLY_MESSAGE[:20]):
        model.spec.__pydantic_fields_set__.add("x")
    for clone in (copy.deepcopy(model), model.model_copy(deep=True), pickle.loads(pickle.dumps(model))):
        clone.spec.max_replicas = 5
        assert clone.spec.max_replicas == 5 and model.spec.max_replicas == 10
    # a shallow model_copy shares the nested models: only its own fields-set is a fresh set
    shallow = model.model_copy(update={"kind": "ElasticScaler"})
    assert type(shallow.__pydantic_fields_set__) is set and "kind" in shallow.__pydantic_fields_set__


def test_it_is_idempotent() -> None:
    model = share_bookkeeping(_parse())
    fields_set = model.spec.__pydantic_fields_set__
    assert share_bookkeeping(model) is model and model.spec.__pydantic_fields_set__ is fields_set


def _traced_bytes_each(make: Callable[[], object], n: int = 2000) -> float:
    """Bytes tracemalloc sees allocated per call of ``make``, the results kept."""
    make()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(n)]
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()


def test_each_models_dict_shares_its_keys_with_its_class() -> None:
    # the instance dict pydantic made (a whole hash table each) is replaced by one holding only the
    # values, its keys kept once per model class (issue 30: memory per scaler)
    model, fresh = share_bookkeeping(_parse()), _parse()
    meta = model.metadata
    assert type(meta.__dict__) is dict and meta.__dict__ == fresh.metadata.__dict__
    assert list(meta.__dict__) == list(fresh.metadata.__dict__)  # same order: dumps unchanged
    fields, cls = dict(fresh.metadata.__dict__), type(fresh.metadata)
    plain = _traced_bytes_each(lambda: dict(fields))
    shared = _traced_bytes_each(lambda: _shared_keys_dict(cls, fields))
    assert shared < 0.8 * plain, (shared, plain)
