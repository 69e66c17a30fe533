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

``PicklePacker(zdict)`` does the same for a Python object JSON cannot hold as it is (a parsed
pydantic model, issue 30: a parsed ElasticScaler kept per scaler is ~2.2 KB of RSS as a tree of
models, its pickle ~1.6 KB, and ~300 bytes packed against the pickles of typical ones):

* ``zdict`` is the pickle of a typical object (the same bounds as ``JsonPacker``'s);
  ``persistent_id`` and ``persistent_load``, when given, are the pickler's and the unpickler's
  (``pickle``'s persistent references: objects pickled by an id and turned back by it).
* ``pack(value)`` → ``pickle.dumps(value, protocol=5)`` deflated at level 1; what ``pickle``
  refuses raises as ``pickle.dumps`` does (``pickle.PicklingError``, ``TypeError``,
  ``AttributeError``).
* ``unpack(packed)`` → a fresh object equal to the one packed (``pickle.loads``: the bytes are
  only ever the process's own, made by ``pack``; never unpack bytes from outside the process).

This module imports nothing of escaler.
"""

from __future__ import annotations

import io
import json
import pickle
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_ZDICT_BYTES", "JsonPacker", "PicklePacker"]

# zlib's window: a preset dictionary longer than this only costs memory
MAX_ZDICT_BYTES = 32 * 1024


class JsonPacker:
    """See the module docstring."""

    __slots__ = ("_zdict",)

    def __init__(self, zdict: bytes) -> None:
        self._zdict = _zdict_of("JsonPacker", zdict)

    def pack(self, value: Any) -> bytes:
        text = json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
        deflate = zlib.compressobj(1, zdict=self._zdict)
        return deflate.compress(text) + deflate.flush()

    def unpack(self, packed: bytes, loads: Callable[[bytes], Any] = json.loads) -> Any:
        return loads(_inflate("JsonPacker", self._zdict, packed))


def _zdict_of(owner: str, zdict: bytes) -> bytes:
    if not 0 < len(zdict) <= MAX_ZDICT_BYTES:
        raise ValueError(f"{owner}.zdict: must be 1 to {MAX_ZDICT_BYTES} bytes, got {len(zdict)}")
    return bytes(zdict)


def _inflate(owner: str, zdict: bytes, packed: bytes) -> bytes:
    inflate = zlib.decompressobj(zdict=zdict)
    data = inflate.decompress(packed) + inflate.flush()
    if not inflate.eof:
        raise ValueError(f"{owner}.unpack: truncated input (the deflate stream does not end)")
    return data


class PicklePacker:
    """See the module docstring."""

    __slots__ = ("_id", "_load", "_zdict")

    def __init__(self, zdict: bytes, persistent_id: Callable[[Any], Any] | None = None,
                 persistent_load: Callable[[Any], Any] | None = None) -> None:
        self._zdict = _zdict_of("PicklePacker", zdict)
        self._id = persistent_id
        self._load = persistent_load

    def pack(self, value: Any) -> bytes:
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5)
        if self._id is not None:
            pickler.persistent_id = self._id  # type: ignore[method-assign]
        pickler.dump(value)
        deflate = zlib.compressobj(1, zdict=self._zdict)
        return deflate.compress(out.getbuffer()) + deflate.flush()

    def unpack(self, packed: bytes) -> Any:
        unpickler = pickle.Unpickler(io.BytesIO(_inflate("PicklePacker", self._zdict, packed)))
        if self._load is not None:
            unpickler.persistent_load = self._load  # type: ignore[method-assign]
        return unpickler.load()
