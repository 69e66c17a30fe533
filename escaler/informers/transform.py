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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Transform", "chain", "identity", "strip_managed_fields"]

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
