"""Transforms: what an informer keeps of each object, decided before the object is cached.

client-go's ``SharedIndexInformer.SetTransform`` and controller-runtime's
``cache.TransformStripManagedFields``: a function applied to every object the reflector lists or
watches, *before* it is frozen into the cache and handed to handlers. Its result is what every
lister and handler of that informer sees.

Contract of a ``Transform``:

* It takes a decoded object (a ``Mapping``; plain ``dict``s from the reflector, possibly a frozen
  one from a test) and returns the mapping to cache. It never mutates its argument: it returns
  shallow copies of what it changes and shares the rest.
* It is pure and cheap (it runs on the reflector thread for every event of the resource), and
  idempotent: ``t(t(obj)) == t(obj)`` (a listed object passes through it twice: once as its
  page arrives in the reflector, once in the store).
* It keeps ``metadata.name``, ``namespace``, ``uid`` and ``resourceVersion`` (the store key and the
  relist comparison read them).

``strip_managed_fields`` is the default of every ``SharedInformer``: ``metadata.managedFields``
(server-side apply's field ownership, often larger than the spec it describes) is read by no
controller here — the CLI's ``escaler explain`` GETs the object itself — and would otherwise be
held in memory for every cached object (see docs/performance.md, memory per scaler).
``identity`` keeps objects as they come; ``chain(a, b)`` applies ``a`` then ``b``.

**What each kind's cache keeps** (``transform_for(group, resource)``, which ``InformerFactory`` gives
every informer it creates; one place for all of them):

* every kind: the object without ``metadata.managedFields`` (``strip_managed_fields``);
* ElasticScalers (``elasticscaler.io``/``elasticscalers``): also ``spec.trigger``, ``spec.fallback``,
  ``spec.floorFrom`` and ``spec.scaleDown`` **shared across the fleet** (``SubtreeSharer``): the
  parts a fleet made from one template has in common are cached once, not once per scaler (issue
  30, memory per scaler). Nothing is removed: every field every reader sees is what the API server
  sent (the status writers compare against the cached status; the reconciler parses the spec,
  annotations included, from it); only ``is`` between two scalers' subtrees changes.

``SubtreeSharer(paths)`` replaces the mapping at each path by the one frozen instance kept for an
equal value (the key is its canonical JSON, keys sorted: ``1`` and ``1.0``, ``true`` and ``1`` stay
apart), in a bounded LRU (``max_entries`` values; an evicted value only costs its object its own
copy). It costs one ``json.dumps`` of each subtree present per event of the kind (tens of
microseconds for a trigger), and is thread-safe. The shared values are frozen (``freeze``):
readers already may not mutate cached objects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import LRUCache

from escaler.informers.frozen import FrozenDict, freeze

__all__ = ["DEFAULT_SHARED_ENTRIES", "ELASTICSCALER_SHARED_PATHS", "SubtreeSharer", "Transform", "chain",
           "identity", "strip_managed_fields", "transform_for"]

Transform = Callable[[Mapping[str, Any]], Mapping[str, Any]]

_MANAGED_FIELDS = "managedFields"


def identity(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object as it came."""
    return obj


def strip_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields`` (a shallow copy when there was one)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or _MANAGED_FIELDS not in meta:
        return obj
    stripped = {k: v for k, v in meta.items() if k != _MANAGED_FIELDS}
    return {**obj, "metadata": stripped}


def chain(first: Transform, then: Transform) -> Transform:
    """``then(first(obj))``: both transforms, in order (idempotent when both are)."""

    def both(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return then(first(obj))

    return both


# distinct subtree values one SubtreeSharer remembers (a few hundred bytes of key text and one
# frozen value each)
DEFAULT_SHARED_ENTRIES = 1024


class SubtreeSharer:
    """A transform sharing equal subtrees across objects; see the module docstring."""

    def __init__(self, paths: tuple[tuple[str, ...], ...], max_entries: int = DEFAULT_SHARED_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"SubtreeSharer.max_entries: must be >= 1, got {max_entries}")
        if not paths or any(not path for path in paths):
            raise ValueError(f"SubtreeSharer.paths: every path needs at least one key, got {paths!r}")
        # the subtrees to share, each a path of keys from the object's root; fixed
        self._paths = paths
        # guards _values (LRUCache is not thread-safe, and get() reorders it)
        self._mu = threading.Lock()
        # (path, canonical JSON) → the one frozen value shared by every object holding it
        self._values: LRUCache[tuple[tuple[str, ...], str], FrozenDict] = LRUCache(maxsize=max_entries)

    def _shared(self, path: tuple[str, ...], sub: Mapping[str, Any]) -> FrozenDict | None:
        try:
            text = json.dumps(sub, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None  # not JSON (a test's object): left as it is
        key = (path, text)
        with self._mu:
            shared = self._values.get(key)
            if shared is None:
                shared = self._values[key] = freeze(sub)
            return shared

    def __call__(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        out = obj
        for path in self._paths:
            out = self._share(out, path)
        return out

    def _share(self, obj: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
        parents = [obj]
        for key in path[:-1]:
            child = parents[-1].get(key)
            if not isinstance(child, Mapping):
                return obj
            parents.append(child)
        sub = parents[-1].get(path[-1])
        if not isinstance(sub, Mapping):
            return obj
        shared = self._shared(path, sub)
        if shared is None or shared is sub:
            return obj
        # shallow copies along the path, sharing everything else (never mutates the argument)
        value: Mapping[str, Any] = shared
        for parent, key in zip(reversed(parents), reversed(path), strict=True):
            value = {**parent, key: value}
        return value

    def __len__(self) -> int:
        with self._mu:
            return len(self._values)


# the parts of an ElasticScaler's spec a fleet made from one template has in common
ELASTICSCALER_SHARED_PATHS: tuple[tuple[str, ...], ...] = (
    ("spec", "trigger"), ("spec", "fallback"), ("spec", "floorFrom"), ("spec", "scaleDown"))

_TRANSFORMS: dict[tuple[str, str], Transform] = {
    ("elasticscaler.io", "elasticscalers"): chain(strip_managed_fields,
                                                  SubtreeSharer(ELASTICSCALER_SHARED_PATHS)),
}


def transform_for(group: str, resource: str) -> Transform:
    """What an informer of ``group``/``resource`` caches of each object (see the module docstring)."""
    return _TRANSFORMS.get((group, resource), strip_managed_fields)
