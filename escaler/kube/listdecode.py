"""Decode a list response item by item: ``decode_list(text, each)``.

A list page of large objects (clones of a big template: 100 of ~200 KiB each) decoded whole by
``json.loads`` lives decoded all at once before an informer's transform shrinks each object. This
module walks the top-level JSON object of a list response itself and decodes the ``items`` array
one element at a time with ``json.JSONDecoder.raw_decode``, calling ``each(item)`` and keeping only
its result before the next element is decoded. The page's JSON text still lives once (the caller
holds it); at most one untransformed item lives beside it.

Contract of ``decode_list(text, each)``:

* ``text`` is the whole response body (a ``str``). It must be one JSON object, optionally surrounded
  by JSON whitespace; anything else raises ``ValueError`` (``json.JSONDecodeError`` or a plain
  ``ValueError`` naming the offset).
* ``each`` is called, in order, for every element of the top-level ``items`` array that is a JSON
  object; other elements are skipped (as ``ResourceListerWatcher.list`` skips them). Its results
  are returned in that order. An exception from ``each`` propagates.
* Returns ``(results, rest)``: ``rest`` holds every other top-level member, decoded normally
  (``metadata``, ``kind``, ...). A repeated key keeps its last value, as ``json.loads`` does
  (a repeated ``items`` array replaces the results of the earlier one).
* Pure apart from calling ``each``; no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["decode_list"]

T = TypeVar("T")

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def _expect(text: str, i: int, chars: str) -> str:
    c = text[i:i + 1]
    if not c or c not in chars:
        raise ValueError(f"list response: expected one of {chars!r} at offset {i}, found {c!r}")
    return c


def _items(text: str, i: int, each: Callable[[dict[str, Any]], T]) -> tuple[list[T], int]:
    """Decode the array starting at ``text[i] == '['``; return the results and the offset after it."""
    out: list[T] = []
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return out, i + 1
    while True:
        item, i = _DECODER.raw_decode(text, i)
        if isinstance(item, dict):
            out.append(each(item))
        del item  # the untransformed item is garbage before the next one is decoded
        i = _skip(text, i)
        c = _expect(text, i, ",]")
        i = _skip(text, i + 1)
        if c == "]":
            return out, i


def decode_list(text: str, each: Callable[[dict[str, Any]], T]) -> tuple[list[T], dict[str, Any]]:
    """``each`` of every object in ``items``, and the other top-level members (module docstring)."""
    results: list[T] = []
    rest: dict[str, Any] = {}
    i = _skip(text, 0)
    _expect(text, i, "{")
    i = _skip(text, i + 1)
    if text[i:i + 1] != "}":
        while True:
            _expect(text, i, '"')
            key, i = _DECODER.raw_decode(text, i)  # a JSON string: the member's name
            i = _skip(text, i)
            _expect(text, i, ":")
            i = _skip(text, i + 1)
            if key == "items" and text[i:i + 1] == "[":
                results, i = _items(text, i, each)
                rest.pop("items", None)
            else:
                rest[key], i = _DECODER.raw_decode(text, i)
                if key == "items":
                    results = []
            i = _skip(text, i)
            c = _expect(text, i, ",}")
            i = _skip(text, i + 1)
            if c == "}":
                break
    else:
        i = _skip(text, i + 1)
    if i != len(text):
        raise ValueError(f"list response: extra data at offset {i}")
    return results, rest
