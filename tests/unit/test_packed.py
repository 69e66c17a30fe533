"""``escaler.packed.JsonPacker``: any JSON value round-trips exactly, documents like the preset
dictionary pack to a fraction of their text, and bad input is refused with the rule."""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escaler.packed import MAX_ZDICT_BYTES, JsonPacker

TYPICAL = {"kind": "Thing", "metadata": {"name": "a", "namespace": "team"},
           "status": {"ready": True, "count": 3}}
PACKER = JsonPacker(json.dumps(TYPICAL, separators=(",", ":")).encode())

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_every_json_value_round_trips_exactly(value: Any) -> None:
    out = PACKER.unpack(PACKER.pack(value))
    assert out == value and type(out) is type(value)


def test_each_unpack_is_a_fresh_value() -> None:
    packed = PACKER.pack(TYPICAL)
    first = PACKER.unpack(packed)
    first["metadata"]["name"] = "changed"
    assert PACKER.unpack(packed) == TYPICAL


def test_non_finite_numbers_round_trip_as_pythons_json_writes_them() -> None:
    out = PACKER.unpack(PACKER.pack([math.nan, math.inf, -math.inf]))
    assert math.isnan(out[0]) and out[1:] == [math.inf, -math.inf]


def test_a_document_like_the_dictionary_packs_to_a_fraction_of_zlib_alone() -> None:
    doc = {**TYPICAL, "metadata": {"name": "b-123", "namespace": "team"}}
    text = json.dumps(doc, separators=(",", ":")).encode()
    assert len(PACKER.pack(doc)) < len(zlib.compress(text, 1)) // 2


def test_what_json_cannot_encode_is_refused_as_json_dumps_refuses_it() -> None:
    with pytest.raises(TypeError):
        PACKER.pack({"a": {1, 2}})


def test_bytes_not_packed_by_it_are_refused() -> None:
    other = JsonPacker(b'{"something":"else"}')
    with pytest.raises((zlib.error, ValueError)):
        PACKER.unpack(other.pack(TYPICAL))
    with pytest.raises((zlib.error, ValueError)):
        PACKER.unpack(PACKER.pack(TYPICAL)[:-3])
    with pytest.raises(zlib.error):
        PACKER.unpack(b"not deflate")


@pytest.mark.parametrize("size", [0, MAX_ZDICT_BYTES + 1])
def test_a_dictionary_out_of_range_is_refused_with_the_rule(size: int) -> None:
    with pytest.raises(ValueError, match=r"JsonPacker.zdict: must be 1 to 32768 bytes"):
        JsonPacker(b"x" * size)
