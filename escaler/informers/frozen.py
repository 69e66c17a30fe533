"""Read-only views of cached objects: ``freeze`` and ``thaw``.

Contract:

* The informer cache hands the *same* object to every lister and every handler, so a caller that
  mutated it would corrupt the cache for everybody (client-go's rule "objects from a lister must
  not be mutated", which Go cannot enforce either). Here it is enforced: the store holds
  ``freeze(obj)``, in which every JSON object is a ``FrozenDict`` and every JSON array a
  ``FrozenList`` (a ``tuple`` that also compares equal to a ``list`` with equal items, so
  ``cached == thaw(cached)`` and ``cached["spec"] == desired_spec`` mean what they say).
* Every mutating method of ``FrozenDict`` (``__setitem__``, ``__delitem__``, ``update``, ``pop``,
  ``popitem``, ``clear``, ``setdefault``, ``__ior__``) raises ``TypeError`` with
  ``READ_ONLY_MESSAGE``. Reading is plain ``dict`` reading (``FrozenDict`` *is* a ``dict``), so
  ``json.dumps``, ``obj["metadata"]["name"]``, ``.get``, iteration and ``==`` with plain dicts
  all work, and frozen objects can be passed wherever a ``dict[str, Any]`` is read.
* ``thaw(obj)`` returns a deep, mutable copy made of plain ``dict``s and ``list``s: the way to
  build a patch or an update. ``copy.deepcopy(frozen)`` does the same; ``copy.copy(frozen)`` and
  ``frozen.copy()`` give a shallow plain ``dict`` whose nested values are still frozen.
* ``freeze`` is one pass over the object (about as costly as one ``copy.deepcopy``), and is
  the identity on a ``FrozenDict``: the store freezes each object exactly once, and handing an
  already-frozen object back to it costs nothing.
* **Shared strings.** ``freeze`` interns every key and every string value of at most
  ``INTERN_MAX_LENGTH`` characters (``sys.intern``): a fleet of cached objects holds one copy of
  ``"metadata"``, ``"True"``, a condition reason or a timestamp instead of one per object and
  per watch event (a decoded ElasticScaler with its status, managedFields stripped: 10.4 → 4.5 KiB;
  the decode + freeze time stays within the run-to-run noise: ``python bench/run.py
  bench_cache_object``). Longer strings (messages, queries) are kept as they are.
* ``loads_frozen(text)`` decodes JSON straight into frozen values (a ``json.loads`` object hook),
  interning keys and short string values as ``freeze`` does: about 40% cheaper than ``json.loads``
  followed by ``freeze`` for a large list, and what a ``ListerWatcher`` should use so the cache's
  ``freeze`` becomes the identity. Every ``PackedMapping`` read decodes through it, so what a
  reader keeps of a packed spec (the parsed model keeps the decoded strings themselves) shares
  those strings with the rest of the process (until 2026-12-08 it did not intern: a parsed
  ElasticScaler held its own ``apiVersion``, ``kind``, names and endpoint, ~300 bytes a scaler, issue 30).

* **Packed mappings.** ``PackedMapping(packer, value)`` is a read-only ``Mapping`` kept as the
  deflated JSON text of ``value`` (``escaler.packed.JsonPacker``): for a part of a cached object
  that is large, differs per object and is read rarely (an ElasticScaler's spec and status, issue
  30: ~1.6 and ~1.5 KB as frozen objects, ~100 and ~250 bytes packed). Every read decodes it into a
  ``FrozenDict`` (``unpack()``; tens of microseconds) — ``m["k"]``, ``.get``, ``in``, iteration,
  ``len``, ``items()`` — and the last value decoded in the process is kept (one, whichever mapping it came
  from), so several reads of one mapping in a row decode it once. It compares equal to any
  mapping with equal items (two packed the same: without decoding), ``thaw`` gives the plain
  ``dict``, and ``freeze`` leaves it as it is (a frozen object may hold one). It is *not* a
  ``dict``: ``json.dumps`` of an object holding one raises ``TypeError`` (``thaw`` it first), and
  a reader that tests ``isinstance(x, dict)`` rather than ``Mapping`` does not see it.

Limitations: ``FrozenDict`` is not hashable (it is still a ``dict``), and Python cannot stop
``dict.__setitem__(frozen, k, v)`` called on purpose; this guards against accidents, not malice.
A ``FrozenDict`` built directly (``FrozenDict({...})``) deep-freezes its argument too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, NoReturn, TypeVar, overload

from escaler.packed import JsonPacker

__all__ = ["INTERN_MAX_LENGTH", "READ_ONLY_MESSAGE", "FrozenDict", "FrozenList", "PackedMapping", "freeze",
           "loads_frozen", "thaw"]

READ_ONLY_MESSAGE = "informer cache objects are read-only; use thaw() for a mutable copy"

# Leaf types of decoded JSON, left as they are (all immutable).
_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})
# the same leaves for typing: freeze/thaw return them unchanged
_Scalar = TypeVar("_Scalar", str, int, float, bool, None)


def _read_only(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError(READ_ONLY_MESSAGE)


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses mutation; its nested values are frozen too (see module doc)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Direct construction must not smuggle mutable children into the cache: deep-freeze.
        # freeze() itself bypasses __init__ (dict.__new__ + dict.__setitem__) for speed.
        for key, value in dict(*args, **kwargs).items():
            dict.__setitem__(self, key, _freeze_value(value))

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        _read_only()

    def __delitem__(self, key: str) -> NoReturn:
        _read_only()

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _read_only()

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _read_only()

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        _read_only()

    def popitem(self) -> NoReturn:
        _read_only()

    def clear(self) -> NoReturn:
        _read_only()

    def setdefault(self, *args: Any, **kwargs: Any) -> NoReturn:
        _read_only()

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        # pickle through the constructor: the default dict-subclass protocol calls __setitem__.
        return (FrozenDict, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(tuple[Any, ...]):
    """A frozen JSON array: a ``tuple`` that compares equal to a ``list`` with equal items."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"FrozenList({tuple.__repr__(self)})"


class PackedMapping(Mapping[str, Any]):
    """A read-only mapping kept as deflated JSON text; see the module docstring."""

    __slots__ = ("_packed", "_packer")

    def __init__(self, packer: JsonPacker, value: Mapping[str, Any]) -> None:
        self._packer = packer
        self._packed = packer.pack(value)

    def unpack(self) -> FrozenDict:
        """The mapping's value, decoded (the process's last decoded value when it is this one's)."""
        global _last_unpacked
        last = _last_unpacked
        if last is not None and last[0] is self._packed:
            return last[1]
        value: FrozenDict = self._packer.unpack(self._packed, loads_frozen)
        _last_unpacked = (self._packed, value)  # one assignment: atomic for concurrent readers
        return value

    def packed_size(self) -> int:
        """Bytes of the packed text (for measurements)."""
        return len(self._packed)

    def __getitem__(self, key: str) -> Any:
        return self.unpack()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.unpack())

    def __len__(self) -> int:
        return len(self.unpack())

    def __contains__(self, key: object) -> bool:
        return key in self.unpack()

    def get(self, key: str, default: Any = None) -> Any:
        return self.unpack().get(key, default)

    def keys(self) -> KeysView[str]:
        return self.unpack().keys()

    def items(self) -> ItemsView[str, Any]:
        return self.unpack().items()

    def values(self) -> ValuesView[Any]:
        return self.unpack().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedMapping) and other._packer is self._packer \
                and other._packed == self._packed:
            return True
        if isinstance(other, Mapping):
            return self.unpack() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __copy__(self) -> dict[str, Any]:
        return dict(self.unpack())

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self.unpack())

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedMapping, (self._packer, thaw(self.unpack())))

    def __repr__(self) -> str:
        return f"PackedMapping({dict.__repr__(self.unpack())})"


# the last value a PackedMapping decoded (its packed text, the value): see PackedMapping.unpack
_last_unpacked: tuple[bytes, FrozenDict] | None = None

_dict_new = dict.__new__
# string values up to this length are interned (see the module docstring)
INTERN_MAX_LENGTH = 64
# keys are shared across cached objects (one "metadata" string, not one per object and event)
_intern = sys.intern
_dict_set = dict.__setitem__


def _freeze_dict(obj: Mapping[str, Any]) -> FrozenDict:
    out: FrozenDict = _dict_new(FrozenDict)
    for key, value in obj.items():
        kind = type(value)
        if kind is str:
            _dict_set(out, _intern(key), _intern(value) if len(value) <= INTERN_MAX_LENGTH else value)
        else:
            _dict_set(out, _intern(key), value if kind in _SCALARS else _freeze_value(value))
    return out


def _freeze_value(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is PackedMapping:
        return value
    if kind is dict:
        return _freeze_dict(value)
    if kind is FrozenList:
        return value
    if kind is list or kind is tuple:
        return FrozenList([v if type(v) in _SCALARS else _freeze_value(v) for v in value])
    if isinstance(value, FrozenDict | FrozenList | PackedMapping):
        return value
    if isinstance(value, Mapping):
        return _freeze_dict(value)
    if isinstance(value, list | tuple):
        return FrozenList([_freeze_value(v) for v in value])
    return value


@overload
def freeze(obj: Mapping[str, Any]) -> FrozenDict: ...


@overload
def freeze(obj: list[Any] | tuple[Any, ...]) -> FrozenList: ...


@overload
def freeze(obj: _Scalar) -> _Scalar: ...


def freeze(obj: Any) -> Any:
    """Deep read-only copy of a JSON value: dicts → ``FrozenDict``, lists → ``FrozenList`` (one pass).

    Identity on a ``FrozenDict``/``FrozenList`` (frozen all the way down) and on scalars.
    """
    return _freeze_value(obj)


def _frozen_object(obj: dict[str, Any]) -> FrozenDict:
    # json calls this bottom-up: nested objects are already FrozenDicts, only lists remain; keys and
    # short strings interned as freeze does (strings in lists are left as they come, as freeze does)
    out: FrozenDict = _dict_new(FrozenDict)
    for key, value in obj.items():
        kind = type(value)
        if kind is str:
            _dict_set(out, _intern(key), _intern(value) if len(value) <= INTERN_MAX_LENGTH else value)
        else:
            _dict_set(out, _intern(key), _freeze_value(value) if kind is list else value)
    return out


def loads_frozen(data: str | bytes | bytearray) -> Any:
    """``json.loads`` whose result is already frozen (objects → ``FrozenDict``, arrays → ``FrozenList``)."""
    return _freeze_value(json.loads(data, object_hook=_frozen_object))


@overload
def thaw(obj: Mapping[str, Any]) -> dict[str, Any]: ...


@overload
def thaw(obj: list[Any] | tuple[Any, ...]) -> list[Any]: ...


@overload
def thaw(obj: _Scalar) -> _Scalar: ...


def thaw(obj: Any) -> Any:
    """Deep mutable copy of a (frozen or not) JSON value: mappings → ``dict``, sequences → ``list``."""
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if isinstance(obj, Mapping):
        return {k: v if type(v) in _SCALARS else thaw(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [v if type(v) in _SCALARS else thaw(v) for v in obj]
    return obj
