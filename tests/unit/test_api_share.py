"""``SubModelTable``: equal parsed sub-models shared by input, checked by value, bounded."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, model_validator

from escaler.api.share import SubModelTable


class Leaf(BaseModel):
    v: int = 0
    tag: str = ""


class Parent(BaseModel):
    name: str
    leaf: Leaf | None = None


class Scaled(BaseModel):
    """A parent whose validator makes the leaf depend on a sibling (outside the leaf's input)."""

    factor: int = 1
    leaf: Leaf

    @model_validator(mode="after")
    def _scale(self) -> Scaled:
        self.leaf.v *= self.factor
        return self


def test_equal_inputs_share_one_instance_and_others_keep_their_own() -> None:
    table = SubModelTable()
    a = Parent.model_validate({"name": "a", "leaf": {"v": 1}})
    b = Parent.model_validate({"name": "b", "leaf": {"v": 1}})
    c = Parent.model_validate({"name": "c", "leaf": {"v": 2}})
    for m, raw in ((a, {"leaf": {"v": 1}}), (b, {"leaf": {"v": 1}}), (c, {"leaf": {"v": 2}})):
        table.share(m, raw, ("leaf",))
    assert a.leaf is b.leaf and a.leaf is not c.leaf
    assert (table.hits, table.misses, len(table)) == (1, 2, 2)
    assert b.model_dump() == {"name": "b", "leaf": {"v": 1, "tag": ""}}


def test_a_value_that_depends_on_more_than_its_input_is_never_shared() -> None:
    table = SubModelTable()
    one = Scaled.model_validate({"factor": 1, "leaf": {"v": 3}})
    two = Scaled.model_validate({"factor": 2, "leaf": {"v": 3}})
    table.share(one, {"leaf": {"v": 3}}, ("leaf",))
    table.share(two, {"leaf": {"v": 3}}, ("leaf",))
    assert one.leaf.v == 3 and two.leaf.v == 6, "the same input, different values: each keeps its own"
    assert table.hits == 0


def test_absent_fields_and_non_mapping_inputs_are_left_alone() -> None:
    table = SubModelTable()
    m = Parent.model_validate({"name": "a"})
    table.share(m, {}, ("leaf", "name", "unknown"))
    assert m.leaf is None and len(table) == 0


def test_the_table_is_bounded() -> None:
    table = SubModelTable(max_entries=2)
    for i in range(5):
        table.share(Parent.model_validate({"name": "x", "leaf": {"v": i}}), {"leaf": {"v": i}}, ("leaf",))
    assert len(table) == 2
    with pytest.raises(ValueError, match="max_entries: must be >= 1"):
        SubModelTable(max_entries=0)
