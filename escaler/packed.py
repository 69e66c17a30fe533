"""``JsonPacker``: JSON values kept deflated against a preset dictionary, for records a manager holds
per object and reads back rarely (issue 30, memory per scaler).

A fleet of small JSON documents of one shape (a scaler's status, an Event's body) repeats its keys
and most of its values from one document to the next; zlib's preset dictionary (``zdict``) lets each
document point into a typical one instead of spelling them out, so a 1.5 KB status packs to ~200
bytes where zlib alone gives ~550. The dictionary is the packer's for good: what it packed unpacks
only with it, so a packed value never leaves the process.

Contract:

* ``JsonPacker(zdict)``: ``zdict`` is the text of a typical document (bytes, at most 32 KiB: zlib's
  window; its most repeated parts last, which deflate reaches most cheaply). ``ValueError`` for an
  empty or longer one.
* ``pack(value)`` → the compact JSON text of ``value`` (``separators=(",", ":")``, NaN and the
  infinities as Python's ``json`` writes them) deflated at level 1 (~10 microseconds for a status).
  Whatever JSON cannot encode raises ``TypeError`` or ``ValueError``, as ``json.dumps`` does.
* ``unpack(packed, loads=json.loads)`` → a fresh value equal to the one packed, decoded from its
  text by ``loads`` (the caller may change what ``json.loads`` returns; another decoder, such as
  ``escaler.informers.frozen.loads_frozen``, decides its own types); every value ``pack`` accepted
  round-trips exactly. Bytes not made by this packer raise ``zlib.error`` or
  ``ValueError``.
* Stateless and thread-safe (each call has its own compressor).

This module imports nothing of escaler.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_ZDICT_BYTES", "JsonPacker"]

# zlib's window: a preset dictionary longer than this only costs memory
MAX_ZDICT_BYTES = 32 * 1024


class JsonPacker:
    """See the module docstring."""

    __slots__ = ("_zdict",)

    def __init__(self, zdict: bytes) -> None:
        if not 0 < len(zdict) <= MAX_ZDICT_BYTES:
            raise ValueError(f"JsonPacker.zdict: must be 1 to {MAX_ZDICT_BYTES} bytes, got {len(zdict)}")
        self._zdict = bytes(zdict)

    def pack(self, value: Any) -> bytes:
        text = json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
        deflate = zlib.compressobj(1, zdict=self._zdict)
        return deflate.compress(text) + deflate.flush()

    def unpack(self, packed: bytes, loads: Callable[[bytes], Any] = json.loads) -> Any:
        inflate = zlib.decompressobj(zdict=self._zdict)
        text = inflate.decompress(packed) + inflate.flush()
        if not inflate.eof:
            raise ValueError("JsonPacker.unpack: truncated input (the deflate stream does not end)")
        return loads(text)
