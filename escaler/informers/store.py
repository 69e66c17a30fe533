"""The informer cache: a thread-safe, indexed store of frozen objects (client-go's ``Indexer``).

Contract:

* Objects are keyed by ``meta_namespace_key`` ("namespace/name", or "name" when cluster-scoped)
  unless another key function is given. ``DeletedFinalStateUnknown`` tombstones key as their key.
* Everything stored is ``freeze(obj)``: what ``get``/``list``/``by_index`` return is shared and
  read-only (mutation raises ``TypeError``; ``thaw()`` gives a mutable copy). Returned lists are
  snapshots owned by the caller.
* Every method is atomic with respect to the others (one re-entrant lock); an index function is
  evaluated before the store changes, so one that raises leaves the store as it was.
* Index functions map an object to the list of values it is indexed under. They may be added at
  any time (``add_indexers``): existing objects are indexed at once. ``NAMESPACE_INDEX`` with
  ``namespace_index_func`` is the one every ``SharedInformer`` installs.
* ``by_index``/``index_keys``/``index`` return matches in no particular order.
"""

from __future__ import annotations

import builtins
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from escaler.informers.frozen import FrozenDict, freeze

__all__ = [
    "NAMESPACE_INDEX",
    "DeletedFinalStateUnknown",
    "IndexFunc",
    "Indexer",
    "KeyFunc",
    "meta_namespace_key",
    "namespace_index_func",
    "split_key",
]

NAMESPACE_INDEX = "namespace"


@dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """An object deleted while the watch was down: its last known state may be stale.

    Handed to ``on_delete`` when a relist finds that a cached object vanished; ``obj`` is the
    last state the cache held.
    """

    # the store key of the vanished object
    key: str
    # the last state the cache held (frozen)
    obj: FrozenDict


KeyFunc = Callable[[Any], str]
IndexFunc = Callable[[FrozenDict], list[str]]
_intern = sys.intern


def meta_namespace_key(obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> str:
    """``"namespace/name"``, or ``"name"`` for a cluster-scoped object; a tombstone's own key."""
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError("object has no metadata: metadata.name is required to key it")
    name = meta.get("name")
    if not name or not isinstance(name, str):
        raise ValueError("object has no metadata.name: it cannot be keyed")
    namespace = meta.get("namespace")
    # interned: the store, its indices, the watch index and every handler computing it hold one
    # string per object, not one per event (issue 30)
    if namespace:
        return _intern(f"{namespace}/{name}")
    return _intern(name) if type(name) is str else name  # sys.intern refuses a str subclass


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)`` from a store key; namespace is ``""`` for a cluster-scoped key."""
    parts = key.split("/")
    if len(parts) == 1 and parts[0]:
        return "", parts[0]
    if len(parts) == 2 and parts[0] and parts[1]:
        return parts[0], parts[1]
    raise ValueError(f"unexpected store key format {key!r}: want 'name' or 'namespace/name'")


def namespace_index_func(obj: FrozenDict) -> list[str]:
    """Index by ``metadata.namespace`` (``""`` for cluster-scoped objects), like client-go."""
    meta = obj.get("metadata") or {}
    return [meta.get("namespace") or ""]


class Indexer:
    """Thread-safe indexed store of frozen objects; see the module docstring."""

    def __init__(self, key_func: KeyFunc = meta_namespace_key,
                 indexers: Mapping[str, IndexFunc] | None = None) -> None:
        # computes the store key of an object (and of a tombstone); never changes
        self._key_func = key_func
        # guards every field below; re-entrant so index functions may read the store
        self._lock = threading.RLock()
        # key -> frozen object; exactly the objects currently cached
        self._items: dict[str, FrozenDict] = {}
        # index name -> index function; names are unique and never removed
        self._index_funcs: dict[str, IndexFunc] = {}
        # index name -> value -> keys of the objects indexed under it: the one key itself while
        # a value has one object (most per-object indexes: a target's scaler), a set from the
        # second (a set costs 216 bytes; issue 30, memory per scaler); no empty entries, and
        # exactly consistent with _items and _index_funcs after every public method
        self._indices: dict[str, dict[str, _Keys]] = {}
        if indexers:
            self.add_indexers(indexers)

    # ---- writes -------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any]) -> FrozenDict:
        """Insert or replace ``obj``; returns the frozen object now stored."""
        frozen: FrozenDict = freeze(obj)
        key = self._key_func(frozen)
        with self._lock:
            old = self._items.get(key)
            new_values = self._index_values(frozen)
            self._items[key] = frozen
            self._reindex(key, old, new_values)
        return frozen

    def update(self, obj: Mapping[str, Any]) -> FrozenDict:
        """Same as ``add`` (the store is a map)."""
        return self.add(obj)

    def delete(self, obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> FrozenDict | None:
        """Remove the object with ``obj``'s key; returns what was stored, or None."""
        key = self._key_func(obj)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._reindex(key, old, None)
            return old

    def replace(self, objs: Iterable[Mapping[str, Any]],
                resource_version: str = "") -> dict[str, FrozenDict]:
        """Make the store hold exactly ``objs``; returns the previous contents (key → object).

        ``resource_version`` is the list's resourceVersion; the store itself does not use it
        (client-go's ``Store.Replace`` signature, kept so any store can be a reflector sink).
        """
        items: dict[str, FrozenDict] = {}
        for obj in objs:
            frozen: FrozenDict = freeze(obj)
            items[self._key_func(frozen)] = frozen
        with self._lock:
            indices = self._build_indices(items, self._index_funcs)
            old, self._items, self._indices = self._items, items, indices
            return old

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add index functions; existing objects are indexed at once. Names must be new."""
        with self._lock:
            clash = sorted(set(indexers) & set(self._index_funcs))
            if clash:
                raise ValueError(f"indexer(s) {clash} already exist: index names must be unique")
            built = self._build_indices(self._items, indexers)
            self._index_funcs.update(indexers)
            self._indices.update(built)

    # ---- reads --------------------------------------------------------------------------

    def get(self, obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> FrozenDict | None:
        return self.get_by_key(self._key_func(obj))

    def get_by_key(self, key: str) -> FrozenDict | None:
        with self._lock:
            return self._items.get(key)

    def key_of(self, obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> str:
        """The store key of ``obj`` under this indexer's key function."""
        return self._key_func(obj)

    def list(self) -> builtins.list[FrozenDict]:
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def index(self, name: str, obj: Mapping[str, Any]) -> builtins.list[FrozenDict]:
        """Objects sharing at least one value of index ``name`` with ``obj``."""
        with self._lock:
            fn, index = self._index(name)
            values = fn(freeze(obj))
            keys: set[str] = set()
            for value in values:
                keys.update(_members(index.get(value)))
            return [self._items[k] for k in keys]

    def by_index(self, name: str, value: str) -> builtins.list[FrozenDict]:
        """Objects indexed under ``value`` by index ``name``."""
        with self._lock:
            _, index = self._index(name)
            return [self._items[k] for k in _members(index.get(value))]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        """Keys of the objects indexed under ``value`` by index ``name``."""
        with self._lock:
            _, index = self._index(name)
            return list(_members(index.get(value)))

    def indexers(self) -> dict[str, IndexFunc]:
        with self._lock:
            return dict(self._index_funcs)

    # ---- internals ----------------------------------------------------------------------

    def _index(self, name: str) -> tuple[IndexFunc, dict[str, _Keys]]:
        fn = self._index_funcs.get(name)
        if fn is None:
            raise KeyError(f"index {name!r} does not exist (known: {sorted(self._index_funcs)})")
        return fn, self._indices[name]

    def _index_values(self, obj: FrozenDict) -> dict[str, builtins.list[str]]:
        return {name: fn(obj) for name, fn in self._index_funcs.items()}

    def _reindex(self, key: str, old: FrozenDict | None,
                 new_values: dict[str, builtins.list[str]] | None) -> None:
        for name, fn in self._index_funcs.items():
            old_vals = fn(old) if old is not None else []
            new_vals = new_values[name] if new_values is not None else []
            if old_vals == new_vals:
                continue
            index = self._indices[name]
            for value in old_vals:
                keys = index.get(value)
                if keys is not None:
                    left = _without(keys, key)
                    if left is None:
                        del index[value]
                    elif left is not keys:
                        index[value] = left
            for value in new_vals:
                index[value] = _with(index.get(value), key)

    @staticmethod
    def _build_indices(items: Mapping[str, FrozenDict],
                       funcs: Mapping[str, IndexFunc]) -> dict[str, dict[str, _Keys]]:
        indices: dict[str, dict[str, _Keys]] = {}
        for name, fn in funcs.items():
            index: dict[str, _Keys] = {}
            for key, obj in items.items():
                for value in fn(obj):
                    index[value] = _with(index.get(value), key)
            indices[name] = index
        return indices


# the keys indexed under one value: the key itself while there is one, a set from the second
_Keys = str | set[str]


def _members(keys: _Keys | None) -> tuple[str, ...] | set[str]:
    if keys is None:
        return ()
    return (keys,) if isinstance(keys, str) else keys


def _with(keys: _Keys | None, key: str) -> _Keys:
    """``keys`` with ``key`` added (a set only from the second distinct key)."""
    if keys is None or keys == key:
        return key
    if isinstance(keys, str):
        return {keys, key}
    keys.add(key)
    return keys


def _without(keys: _Keys, key: str) -> _Keys | None:
    """``keys`` without ``key``: None when empty, the last key itself when one is left."""
    if isinstance(keys, str):
        return None if keys == key else keys
    keys.discard(key)
    if len(keys) > 1:
        return keys
    return next(iter(keys)) if keys else None
